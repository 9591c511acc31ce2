"""Durable, namespaced storage of memories.

``base`` holds the protocols everything above names (``Store``, ``RequestCache``,
``BuildLeases``); ``open_store`` opens one from a path or URL; ``sqlite_store`` (with
``queue`` and ``group_commit``) is the SQLite implementation (standard library plus numpy);
``postgres/`` is the PostgreSQL one (the ``postgres`` extra, imported only when a
``postgresql://`` URL is opened).
"""

from .base import BuildLeases, RequestCache, Store
from .check import CheckReport
from .factory import check_store, describe_location, is_database_url, open_store
from .ledger import InMemoryLedger
from .namespace import MAX_NAMESPACE_LEN, validate_namespace
from .schema import APPLICATION_ID, SCHEMA_VERSION
from .sqlite_store import ForgetResult, IngestResult, MemoryStore

__all__ = [
    "APPLICATION_ID",
    "MAX_NAMESPACE_LEN",
    "SCHEMA_VERSION",
    "BuildLeases",
    "CheckReport",
    "ForgetResult",
    "InMemoryLedger",
    "IngestResult",
    "MemoryStore",
    "RequestCache",
    "Store",
    "check_store",
    "describe_location",
    "is_database_url",
    "open_store",
    "validate_namespace",
]
