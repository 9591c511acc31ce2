"""The storage seam: what the pipeline, the views, the service and the CLI need of a store.

``Store`` is the one type they name for storage. ``sqlite_store.MemoryStore`` implements it
on one SQLite file; another backend implements exactly these methods. Two smaller protocols
sit beside it: ``RequestCache`` (the model-request cache and the ledger the LLM client
writes) and ``BuildLeases`` (the durable build queue, its per-namespace leases and the
session indexes an append numbers its sessions with).

Every write moves the namespace's generation (``generation``), so a cached view of a
namespace is checked against the store rather than trusted. ``transaction()`` groups writes
into one commit; nested use joins the outer transaction.
"""

from __future__ import annotations

from typing import Any, Callable, ContextManager, Iterable, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from ..types import Cell, Conversation, Descriptor, SourcePacket


@runtime_checkable
class Store(Protocol):
    """Namespaced memories: SourcePackets, their descriptors, Cells, vectors and meta values."""

    path: str  # where the store is (a file path; a URL for a server backend), for messages

    def transaction(self) -> ContextManager[Any]: ...

    def generation(self, namespace: str) -> int: ...

    def namespaces(self) -> list[str]: ...

    def ingest(self, conversation: Conversation) -> Any: ...  # IngestResult

    def packets(self, namespace: str) -> list[SourcePacket]: ...

    def packet_count(self, namespace: str) -> int: ...

    def get_packet(self, namespace: str, packet_id: str) -> SourcePacket | None: ...

    def save_extractions(self, namespace: str, descriptor_set: str,
                         items: Sequence[tuple[str, Sequence[Descriptor]]]) -> None: ...

    def extracted_packet_ids(self, namespace: str, descriptor_set: str) -> set[str]: ...

    def descriptors(self, namespace: str, descriptor_set: str) -> list[Descriptor]: ...

    def save_cells(self, namespace: str, layout_id: str, cells: Sequence[Cell]) -> None: ...

    def cells(self, namespace: str, layout_id: str) -> list[Cell]: ...

    def save_embeddings(self, namespace: str, model_id: str, keys: Sequence[str], vectors: np.ndarray, *,
                        content: Sequence[str] | None = None, space: str | None = None) -> None: ...

    def embeddings(self, namespace: str, model_id: str, keys: Sequence[str]) -> dict[str, np.ndarray]: ...

    def vectors_by_content(self, space: str, content: Sequence[str]) -> dict[str, np.ndarray]: ...

    def get_meta(self, namespace: str, key: str) -> str | None: ...

    def set_meta(self, namespace: str, key: str, value: str) -> None: ...

    def forget(self, namespace: str, *, wait_s: float | None = None) -> Any: ...  # ForgetResult

    def stats(self, namespace: str | None = None) -> dict: ...

    def close(self) -> None: ...


@runtime_checkable
class RequestCache(Protocol):
    """Cached model responses keyed by the full request, and the ledger of every call."""

    def cache_get(self, key: str) -> Any: ...

    def cache_put(self, key: str, value: Any) -> None: ...

    def ledger_record(self, row: Mapping[str, Any]) -> None: ...


@runtime_checkable
class BuildLeases(Protocol):
    """Namespaces waiting for a background build, their build leases and session numbering."""

    def enqueue(self, namespace: str, turns: int) -> None: ...

    def acquire(self, namespace: str, owner: str, *, lease_s: float) -> bool: ...

    def release(self, namespace: str, owner: str) -> None: ...

    def held_by_other(self, namespace: str, owner: str) -> bool: ...

    def reap(self, alive: Callable[[str], bool]) -> Iterable[str]: ...

    def session_indexes(self, namespace: str, session_ids: Sequence[str]) -> dict[str, int]: ...

    def forget(self, namespace: str) -> None: ...
