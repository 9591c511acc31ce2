"""The storage seam: what the pipeline, the views, the service and the CLI need of a store.

``Store`` is the one type they name for storage. ``sqlite_store.MemoryStore`` implements it
on one SQLite file; another backend implements exactly these methods. Two smaller protocols
sit beside it: ``RequestCache`` (the model-request cache and the ledger the LLM client
writes) and ``BuildLeases`` (the durable build queue, its per-namespace leases and the
session indexes an append numbers its sessions with).

Every write moves the namespace's generation (``generation``), so a cached view of a
namespace is checked against the store rather than trusted. ``transaction()`` groups writes
into one commit; nested use joins the outer transaction.

Every write also records what it did in the namespace's change log, in the same transaction
(``ChangeStep``): a process holding a view of an older generation asks ``changes_since`` and,
when the log says only appends happened since (and what is derived from them), reads only the
new turns instead of the whole namespace (``views/catchup.py``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Iterable, Mapping, Protocol, Sequence, TypedDict, runtime_checkable

import numpy as np

from ..types import Cell, Conversation, Descriptor, SourcePacket


class ForgetResult(dict):
    """Rows deleted per table by ``Store.forget`` (and ``Store.delete_rows``) (a plain ``dict`` of counts), plus
    the scrub's outcome.

    ``scrub_complete`` is ``True`` when no copy of the deleted data remains in the file or its WAL;
    ``False`` means the rows are gone but their bytes are not yet (``scrub_pending``): another
    connection held an old read snapshot for the whole wait, and a later ``scrub``/``forget``
    finishes the job.
    """

    def __init__(self, counts: dict[str, int], *, namespace: str, scrub_complete: bool):
        super().__init__(counts)
        self.namespace = namespace
        self.scrub_complete = bool(scrub_complete)

    @property
    def scrub_pending(self) -> bool:
        return not self.scrub_complete


@dataclass(frozen=True)
class IngestResult:
    """Outcome of one ``Store.ingest`` call.

    ``added`` packets were written; ``skipped`` turns were already stored with identical content.
    """

    namespace: str
    added: int
    skipped: int


CHANGE_KINDS = ("append", "extract", "cells", "embed", "meta", "capsules", "delete")
"""What a change-log entry (``ChangeStep.kind``) may say a write did to a namespace:

- ``append``: packets added, ordinals ``first_ordinal`` .. ``last_ordinal``;
- ``extract``: descriptors written for packets of descriptor set ``detail``, the lowest of
  their ordinals in ``first_ordinal``, the highest in ``last_ordinal``;
- ``cells``: Cells written (layout ``detail``; ``cell_ids`` the ids of the Cells written or
  deleted, None when the whole layout was replaced); ``embed``: vectors linked to keys;
  ``meta``: a meta value set; ``capsules``: the retained capsules replaced;
- ``delete``: a turn deleted with what was derived from it (``Store.delete_rows``).

A forget leaves no entry: it deletes the namespace's log with the rest, so the log of the
namespace made again under the name starts from nothing (``ChangeStep.previous`` None)."""


@dataclass(frozen=True)
class ChangeStep:
    """One entry of a namespace's change log: what one generation step wrote.

    ``previous`` is the namespace's generation before the step (None: it had none). A step
    may hold several entries (on PostgreSQL a transaction is one step, whatever it wrote); they
    share ``generation`` and ``previous``."""

    generation: int
    previous: int | None
    kind: str  # one of CHANGE_KINDS
    detail: str = ""
    first_ordinal: int | None = None
    last_ordinal: int | None = None
    cell_ids: tuple[int, ...] | None = None


@dataclass(frozen=True)
class ChangesSince:
    """What a namespace's store holds past a view's generation and last ordinal, read in one
    snapshot (``Store.changes_since``): the change log from that generation to ``generation``,
    the packets after the ordinal, their descriptors of one set, and which of them that set
    has extracted (a packet with no claims has its marker and no descriptor).

    With a layout asked for: ``cell_ids``, the ids of its Cells written or deleted since (None
    when some write replaced the whole layout), and ``cells``, those of them stored now."""

    generation: int
    steps: tuple[ChangeStep, ...]
    packets: tuple[SourcePacket, ...]
    descriptors: tuple[Descriptor, ...]
    extracted: frozenset[str]
    cell_ids: frozenset[int] | None = None
    cells: tuple[Cell, ...] = ()


def chain_steps(since: int, current: int, rows: Sequence[ChangeStep]) -> tuple[ChangeStep, ...] | None:
    """``rows`` (the log entries after generation ``since``, by generation) when they lead
    from ``since`` to ``current`` without a gap, each step's ``previous`` being the step before
    it; None when they do not (entries pruned, a forget, a write of a version that kept no log)."""
    expected, step_previous = since, None
    for row in rows:
        if row.generation == expected and expected != since:
            if row.previous != step_previous:  # another entry of the step just checked must agree
                return None
            continue
        if row.generation <= expected or row.previous != expected:
            return None
        expected, step_previous = row.generation, row.previous
    return tuple(rows) if expected == current else None


def written_cells(steps: Sequence[ChangeStep], layout_id: str | None) -> frozenset[int] | None:
    """The ids of ``layout_id``'s Cells that ``steps`` wrote or deleted; None when one of them
    replaced the whole layout, or no layout is asked for."""
    if layout_id is None:
        return None
    ids: set[int] = set()
    for step in steps:
        if step.kind == "cells" and step.detail == layout_id:
            if step.cell_ids is None:
                return None
            ids.update(step.cell_ids)
    return frozenset(ids)


def cell_ids_of(text: str | None) -> tuple[int, ...] | None:
    """A change-log entry's ``cell_ids`` column (a JSON list of ints, or NULL) as a tuple."""
    if text is None:
        return None
    return tuple(int(i) for i in json.loads(text))


class StoreInventory(TypedDict):
    """The names under which a namespace's derived rows are stored: what a reader needs in order to
    ask for all of them through the typed methods (a copy between stores, a comparison)."""

    descriptor_sets: list[str]  # with an extraction marker for at least one packet
    layouts: list[str]  # cell layout ids
    embeddings: list[tuple[str, str, str, str]]  # (model_id, space, key, content address), sorted
    meta: list[str]  # meta keys


@runtime_checkable
class Store(Protocol):
    """Namespaced memories: SourcePackets, their descriptors, Cells, vectors and meta values."""

    path: str  # where the store is (a file path; a URL for a server backend), for messages

    def transaction(self) -> ContextManager[Any]: ...

    def savepoint(self) -> ContextManager[Any]: ...  # inside transaction(): undo the body alone if it raises

    def generation(self, namespace: str) -> int: ...

    def namespaces(self) -> list[str]: ...

    def ingest(self, conversation: Conversation) -> IngestResult: ...

    def packets(self, namespace: str) -> list[SourcePacket]: ...

    def packet_count(self, namespace: str) -> int: ...

    def get_packet(self, namespace: str, packet_id: str) -> SourcePacket | None: ...

    def save_extractions(self, namespace: str, descriptor_set: str,
                         items: Sequence[tuple[str, Sequence[Descriptor]]]) -> None: ...

    def extracted_packet_ids(self, namespace: str, descriptor_set: str) -> set[str]: ...

    def descriptors(self, namespace: str, descriptor_set: str) -> list[Descriptor]: ...

    def save_cells(self, namespace: str, layout_id: str, cells: Sequence[Cell], *,
                   stored: Sequence[Cell] | None = None) -> None: ...  # stored: known now, write the difference

    def cells(self, namespace: str, layout_id: str) -> list[Cell]: ...

    def save_embeddings(self, namespace: str, model_id: str, keys: Sequence[str], vectors: np.ndarray, *,
                        content: Sequence[str] | None = None, space: str | None = None) -> None: ...

    def embeddings(self, namespace: str, model_id: str, keys: Sequence[str]) -> dict[str, np.ndarray]: ...

    def vectors_by_content(self, space: str, content: Sequence[str]) -> dict[str, np.ndarray]: ...

    def get_meta(self, namespace: str, key: str) -> str | None: ...

    def set_meta(self, namespace: str, key: str, value: str) -> None: ...

    def packet_claims(self, namespace: str, packet_id: str) -> list[str]: ...  # every descriptor set

    def put_capsules(self, namespace: str, writer: str, budget: int,
                     capsules: Sequence[Mapping[str, Any]]) -> None: ...  # replaces the namespace's

    def capsules(self, namespace: str) -> list[dict[str, Any]]: ...  # with their writer and budget

    def inventory(self, namespace: str) -> dict[str, Any]: ...  # what is stored: see StoreInventory

    def delete_rows(self, plan: Any, *, wait_s: float | None = None) -> ForgetResult: ...  # a build.deletion.DeletionPlan

    def forget(self, namespace: str, *, wait_s: float | None = None) -> ForgetResult: ...

    # What changed since a view was read (see ChangesSince); None when the change log does not
    # lead from ``generation`` to now (or the store keeps none): the caller reads it all again.
    def changes_since(self, namespace: str, generation: int, *, after_ordinal: int, descriptor_set: str,
                      layout_id: str | None = None) -> ChangesSince | None: ...

    def stats(self, namespace: str | None = None) -> dict: ...

    def close(self) -> None: ...


@runtime_checkable
class RequestCache(Protocol):
    """Cached model responses keyed by a hash of the full request, and the ledger of calls:
    which run used which entry, tokens per stage, and the calls wasted on failures."""

    def cache_get(self, key: str) -> dict | None: ...

    def cache_put(self, key: str, *, namespace: str | None, stage: str, identity_json: str,
                  response: dict) -> bool: ...

    def record_waste(self, *, stage: str, namespace: str | None, prompt_tokens: int, completion_tokens: int,
                     reason: str, run_id: str | None = None) -> None: ...

    def mark_used(self, run_id: str, keys: Iterable[str]) -> None: ...

    def token_totals(self, *, run_id: str | None = None, namespace: str | None = None) -> dict[str, dict]: ...

    def waste_totals(self, *, run_id: str | None = None) -> dict[str, dict]: ...


@runtime_checkable
class BuildLeases(Protocol):
    """The durable build queue of namespaces waiting for a background build, their
    per-namespace build leases, and the session numbering an append gives its sessions."""

    def open_build_queue(self) -> None: ...  # make the queue's storage ready (idempotent)

    def enqueue(self, namespace: str, turns: int, *, limit: int | None = None) -> bool: ...

    def claim(self, owner: str, *, lease_s: float = 60.0) -> Any: ...  # Job | None

    def complete(self, job: Any, owner: str) -> bool: ...

    def fail(self, job: Any, owner: str, error: str, *, retry_in_s: float) -> None: ...

    def entry(self, namespace: str) -> dict | None: ...

    def depth(self) -> dict[str, int]: ...

    def acquire(self, namespace: str, owner: str, *, lease_s: float = 60.0) -> bool: ...

    def held_by_other(self, namespace: str, owner: str) -> bool: ...

    def reap(self, alive: Callable[[str], bool]) -> int: ...

    def release(self, namespace: str, owner: str) -> None: ...

    def session_indexes(self, namespace: str, session_ids: Iterable[str]) -> dict[str, int]: ...

    def forget_build_state(self, namespace: str) -> int: ...
