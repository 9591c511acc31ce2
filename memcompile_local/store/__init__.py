"""Durable, namespaced storage of memories (SQLite, standard library only plus numpy)."""

from .namespace import MAX_NAMESPACE_LEN, validate_namespace
from .sqlite_store import APPLICATION_ID, SCHEMA_VERSION, IngestResult, MemoryStore

__all__ = [
    "APPLICATION_ID",
    "MAX_NAMESPACE_LEN",
    "SCHEMA_VERSION",
    "IngestResult",
    "MemoryStore",
    "validate_namespace",
]
