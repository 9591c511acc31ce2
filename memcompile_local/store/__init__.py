"""Durable, namespaced storage of memories (SQLite, standard library only plus numpy)."""

from .check import CheckReport, check_store
from .ledger import InMemoryLedger
from .namespace import MAX_NAMESPACE_LEN, validate_namespace
from .schema import APPLICATION_ID, SCHEMA_VERSION
from .sqlite_store import ForgetResult, IngestResult, MemoryStore

__all__ = [
    "APPLICATION_ID",
    "MAX_NAMESPACE_LEN",
    "SCHEMA_VERSION",
    "CheckReport",
    "ForgetResult",
    "InMemoryLedger",
    "IngestResult",
    "MemoryStore",
    "check_store",
    "validate_namespace",
]
