"""The durable memory store: one SQLite file holding many namespaced memories.

Durability model
----------------
* WAL journal, ``synchronous=FULL``: a transaction that returned from COMMIT survives a killed
  process (and a power cut on a filesystem that honours fsync).
* Every write runs inside ``BEGIN IMMEDIATE`` ... ``COMMIT`` on a connection opened with
  ``isolation_level=None``, so Python never opens or commits transactions behind our back. One
  call is one transaction: an ingest batch, an extraction result or a cell layout is either wholly
  present or wholly absent.
* ``busy_timeout`` lets several processes share a file: a writer waits for the lock instead of
  failing at once.
* ``PRAGMA user_version`` holds the schema version (:mod:`.schema`); a file written by a newer
  version is refused, and a file is checked before anything about it (the journal mode
  included) is changed.

Threading model
---------------
One connection per :class:`MemoryStore` (:mod:`.connection`), shared by the process's threads
under a re-entrant lock; concurrency between processes is SQLite's file locking plus
``busy_timeout``.

Privacy
-------
``secure_delete=ON`` overwrites deleted content in place; :meth:`MemoryStore.forget` deletes in one
short transaction and then scrubs: it rebuilds the file with VACUUM and checkpoints and truncates
the WAL so that the forgotten text does not remain in free pages or old WAL frames. The scrub waits
a bounded time for readers and never while holding the write lock; one that could not finish is
recorded (``stats()["scrub_pending"]``) and finished by a later :meth:`MemoryStore.scrub`.

The row codecs live in :mod:`.codecs`, the request cache and usage ledger in :mod:`.ledger`.
"""

from __future__ import annotations

import json
import itertools
import logging
import os
import sqlite3
import time
from contextlib import contextmanager
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from ..errors import ImmutablePacketError, StalePlanError, StoreError
from ..types import Cell, Conversation, Descriptor, SourcePacket, content_sha256
from .codecs import (
    CELL_COLS,
    DESCRIPTOR_COLS,
    DESCRIPTOR_INSERT,
    PACKET_COLS,
    cell_from_row,
    cell_writes,
    STORED_TURN_COLS,
    capsule_rows,
    chunks,
    descriptor_from_row,
    descriptor_row,
    optional_namespace,
    packet_from_row,
    require_int,
    require_str,
    stored_turn_diffs,
    turn_values,
    vector_rows,
    vector_from_blob,
)
from .base import ChangesSince, ChangeStep, ForgetResult, IngestResult, cell_ids_of, chain_steps, written_cells
from .check import damaged_rows
from .connection import StoreConnection
from .ledger import RequestLedger
from .queue import BuildQueue
from .namespace import validate_namespace
from .schema import (APPLICATION_ID, CHANGE_LOG_KEEP, SCHEMA_SQL, SCHEMA_VERSION, create_schema, inspect_schema,
                     upgrade_schema)

logger = logging.getLogger(__name__)

__all__ = ["APPLICATION_ID", "DEFAULT_FORGET_WAIT_S", "SCHEMA_SQL", "SCHEMA_VERSION", "ForgetResult",
           "IngestResult", "MemoryStore"]


_SCRUB_STEP_MS = 50  # busy timeout of one scrub attempt; attempts repeat until the deadline

DEFAULT_FORGET_WAIT_S = 5.0
"""Default bound, in seconds, on how long :meth:`MemoryStore.forget` waits for other connections."""


def _in_snapshot(c: sqlite3.Connection, fn):
    """Run ``fn`` inside one deferred read transaction on ``c`` (autocommit connection)."""
    c.execute("BEGIN")
    try:
        return fn()
    finally:
        try:
            c.execute("COMMIT")
        except sqlite3.Error:  # the snapshot wrote nothing; ending it cannot lose anything
            pass


class MemoryStore(StoreConnection, RequestLedger, BuildQueue):
    """A namespaced, durable store of packets, descriptors, cells, embeddings and the LLM cache.

    ``path`` is the SQLite file (created with its schema when absent, unless ``create=False``;
    ``":memory:"`` gives a private in-memory store for tests). ``read_only=True`` opens an
    existing store with ``mode=ro``: every read works, every write raises :class:`StoreError`,
    and nothing in or beside the file is changed. ``busy_timeout_ms`` is how long a write waits
    for another process holding the write lock before failing with :class:`StoreError`;
    ``forget_wait_s`` bounds the total wait of :meth:`forget` (see there).

    Every method that takes a ``namespace`` validates it (see
    :func:`~memcompile_local.store.namespace.validate_namespace`); ``None`` or ``""`` raises
    :class:`~memcompile_local.errors.NamespaceError`.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        busy_timeout_ms: int = 30_000,
        read_only: bool = False,
        create: bool = True,
        forget_wait_s: float = DEFAULT_FORGET_WAIT_S,
    ):
        busy_timeout_ms = require_int(busy_timeout_ms, "busy_timeout_ms", minimum=0)
        self.forget_wait_s = DEFAULT_FORGET_WAIT_S
        self.forget_wait_s = self._wait_budget(forget_wait_s)
        super().__init__(path, busy_timeout_ms=busy_timeout_ms, read_only=read_only, create=create)
        try:
            self._prepare()
        except BaseException as exc:
            self.close()
            if isinstance(exc, (sqlite3.Error, UnicodeDecodeError)):
                raise StoreError(f"{self.path}: not a usable store file ({exc})") from exc
            raise

    # ---------------------------------------------------------------- opening

    def _prepare(self) -> None:
        """Check the file is (or may become) a store, then configure, create or upgrade it."""
        c = self._conn
        try:
            # Judge the file before changing anything about it (journal mode included). One read
            # transaction: another process creating the schema commits all of it or none of it
            # between our statements, never half (version 0 with our application id).
            version = self._retry_locked(lambda: _in_snapshot(c, lambda: inspect_schema(c, self.path)))
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
            raise StoreError(f"{self.path}: not a usable SQLite store file ({exc})") from exc
        if self.read_only:
            if version == 0:
                raise StoreError(f"{self.path}: is an empty SQLite file, not a store yet (ingest into it first)")
            if version < SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path}: store schema version {version} must be upgraded to {SCHEMA_VERSION} "
                    "before it can be read; open it once with a writing command (e.g. ingest)"
                )
            return
        try:
            c.execute("PRAGMA secure_delete = ON")
            if not self._memory:
                mode = self._retry_locked(lambda: c.execute("PRAGMA journal_mode = WAL").fetchone()[0])
                if str(mode).lower() != "wal":
                    # Still atomic and durable with a rollback journal; only concurrency suffers.
                    logger.warning("%s: WAL journal not available (journal_mode=%s)", self.path, mode)
            c.execute("PRAGMA synchronous = FULL")
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
            raise StoreError(f"{self.path}: not a usable SQLite store file ({exc})") from exc
        if version < SCHEMA_VERSION:
            with self._write() as w:
                # Again under the write lock: another process may have created it meanwhile.
                version = inspect_schema(w, self.path)
                if version == 0:
                    create_schema(w)
                elif version < SCHEMA_VERSION:
                    upgrade_schema(w, version)

    def _read_error(self, exc: BaseException, table: str | None) -> StoreError:
        """The connection's read error, with the rows of ``table`` that do not decode named."""
        err = super()._read_error(exc, table)
        if table is None or "locked" in str(exc) or "busy" in str(exc):
            return err
        try:
            bad = list(itertools.islice(damaged_rows(self._conn, table, limit=3), 3))
        except (KeyError, sqlite3.Error, UnicodeDecodeError):  # not one of our tables, or unreadable
            return err
        if not bad:
            return err
        return StoreError(f"{err}; damaged: " + "; ".join(str(p) for p in bad))

    # ---------------------------------------------------------------- generations

    @staticmethod
    def _register(c: sqlite3.Connection, namespace: str) -> None:
        c.execute(
            "INSERT OR IGNORE INTO namespaces (namespace, created_at) VALUES (?, ?)",
            (namespace, time.time()),
        )

    @staticmethod
    def _bump(c: sqlite3.Connection, namespace: str, kind: str, detail: str = "",
              first_ordinal: int | None = None, last_ordinal: int | None = None,
              cell_ids: Sequence[int] | None = None) -> int:
        """Give ``namespace`` a new generation inside the caller's write transaction; return it.

        The value comes from one store-wide counter, so it is larger than every generation any
        namespace has had, including the generations of a namespace that was forgotten and made
        again under the same name. The step is entered in the namespace's change log
        (``store.base.ChangeStep``: ``kind``, ``detail`` and the ordinals it touched), chained to
        the generation it replaces, in the same transaction; ``cell_ids``: the Cells a ``cells``
        write changed (None: the whole layout).
        """
        before = c.execute("SELECT generation FROM generations WHERE namespace = ?", (namespace,)).fetchone()
        c.execute("UPDATE counters SET value = value + 1 WHERE name = 'generation'")
        value = int(c.execute("SELECT value FROM counters WHERE name = 'generation'").fetchone()[0])
        c.execute(
            "INSERT INTO generations (namespace, generation) VALUES (?, ?) "
            "ON CONFLICT (namespace) DO UPDATE SET generation = excluded.generation",
            (namespace, value),
        )
        c.execute(
            "INSERT INTO changes (namespace, generation, previous, kind, detail, first_ordinal, last_ordinal, "
            "cell_ids) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (namespace, value, None if before is None else before[0], kind, detail, first_ordinal, last_ordinal,
             None if cell_ids is None else json.dumps(sorted(cell_ids))),
        )
        # Only the namespace's last CHANGE_LOG_KEEP steps are kept: one seek down the index.
        c.execute(
            "DELETE FROM changes WHERE namespace = ? AND generation < (SELECT generation FROM changes "
            "WHERE namespace = ? ORDER BY generation DESC LIMIT 1 OFFSET ?)",
            (namespace, namespace, CHANGE_LOG_KEEP - 1),
        )
        return value

    @staticmethod
    def _extracted_ordinals(c: sqlite3.Connection, ns: str, packet_ids: Sequence[str]) -> tuple[int | None, int | None]:
        """(lowest, highest) ordinal of ``packet_ids`` in ``ns`` (inside the caller's transaction)."""
        lo = hi = None
        for part in chunks(list(packet_ids)):
            marks = ",".join("?" * len(part))
            a, b = c.execute(f"SELECT MIN(ordinal), MAX(ordinal) FROM packets WHERE namespace = ? "
                             f"AND packet_id IN ({marks})", (ns, *part)).fetchone()
            if a is not None:
                lo = a if lo is None else min(lo, a)
                hi = b if hi is None else max(hi, b)
        return lo, hi

    def generation(self, namespace: str) -> int:
        """A number that changes whenever anything a view of ``namespace`` reads is written.

        Every write to the namespace (packets added by ingest, extraction results, cells,
        embeddings, meta) and :meth:`forget` move it to a value it has never had before, in this
        and in every other process sharing the file: a cache keyed on it cannot serve data that
        was changed or forgotten since. Over time the value never decreases. A namespace with no
        data (never written, or forgotten) reports the store-wide counter, which is larger than
        any generation it had before.
        """
        ns = validate_namespace(namespace)
        with self._read("generations") as c:
            row = c.execute("SELECT generation FROM generations WHERE namespace = ?", (ns,)).fetchone()
            if row is None:
                row = c.execute("SELECT value FROM counters WHERE name = 'generation'").fetchone()
        if row is None or not isinstance(row[0], int):
            raise StoreError(f"{self.path}: table generations/counters, namespace {ns!r}: damaged generation")
        return int(row[0])

    def changes_since(self, namespace: str, generation: int, *, after_ordinal: int, descriptor_set: str,
                      layout_id: str | None = None) -> ChangesSince | None:
        """What ``namespace`` holds beyond a view of ``generation`` whose last packet has
        ordinal ``after_ordinal`` (``store.base.ChangesSince``), read in one snapshot; None when
        the change log does not lead from ``generation`` to the current one (entries pruned, a
        forget, a file written before the log existed). With ``layout_id``, also the Cells of
        that layout written since. Costs the new rows, not the namespace."""
        ns = validate_namespace(namespace)
        since = require_int(generation, "generation", minimum=0)
        after = require_int(after_ordinal, "after_ordinal", minimum=-1)
        dset = require_str(descriptor_set, "descriptor_set")
        lid = None if layout_id is None else require_str(layout_id, "layout_id")
        with self._read("changes") as c:
            row = c.execute("SELECT generation FROM generations WHERE namespace = ?", (ns,)).fetchone()
            if row is None:  # nothing stored (forgotten): no log leads anywhere
                return None
            current = int(row[0])
            rows = [ChangeStep(*r[:6], cell_ids=cell_ids_of(r[6])) for r in c.execute(
                "SELECT generation, previous, kind, detail, first_ordinal, last_ordinal, cell_ids FROM changes "
                "WHERE namespace = ? AND generation > ? ORDER BY generation, kind, detail", (ns, since))]
            steps = chain_steps(since, current, rows)
            if steps is None:
                return None
            if current == since:
                return ChangesSince(current, (), (), (), frozenset(), written_cells((), lid))
            packets = [packet_from_row(r) for r in c.execute(
                f"SELECT {PACKET_COLS} FROM packets WHERE namespace = ? AND ordinal > ? ORDER BY ordinal", (ns, after))]
            descriptors: list[Descriptor] = []
            extracted: set[str] = set()
            if packets:
                # From the new packets into the per-packet indexes (CROSS JOIN fixes that order,
                # so the set's other descriptors are never scanned).
                descriptors = [descriptor_from_row(r, dset) for r in c.execute(
                    f"SELECT {DESCRIPTOR_COLS} FROM packets p CROSS JOIN descriptors d "
                    "ON d.namespace = p.namespace AND d.descriptor_set = ? AND d.packet_id = p.packet_id "
                    "WHERE p.namespace = ? AND p.ordinal > ? "
                    "ORDER BY p.ordinal, d.claim_index, d.descriptor_id", (dset, ns, after))]
                extracted = {r[0] for r in c.execute(
                    "SELECT m.packet_id FROM packets p CROSS JOIN extraction_markers m "
                    "ON m.namespace = p.namespace AND m.descriptor_set = ? AND m.packet_id = p.packet_id "
                    "WHERE p.namespace = ? AND p.ordinal > ?", (dset, ns, after))}
            written, cells = written_cells(steps, lid), []
            for part in chunks(sorted(written or ())):
                marks = ",".join("?" * len(part))
                cells += [cell_from_row(r, ns, lid) for r in c.execute(
                    f"SELECT {CELL_COLS} FROM cells WHERE namespace = ? AND layout_id = ? AND cell_id IN ({marks}) "
                    "ORDER BY cell_id", (ns, lid, *part))]
        return ChangesSince(current, steps, tuple(packets), tuple(descriptors), frozenset(extracted), written,
                            tuple(cells))

    # ---------------------------------------------------------------- namespaces / packets

    def namespaces(self) -> list[str]:
        """All namespaces that have had anything written, sorted."""
        return [r[0] for r in self._query("SELECT namespace FROM namespaces ORDER BY namespace",
                                          table="namespaces")]

    def ingest(self, conversation: Conversation) -> IngestResult:
        """Store every turn of ``conversation`` as a SourcePacket of ``conversation.namespace``.

        The whole conversation is one transaction. Turns are appended in dialogue order with
        ordinals continuing after the packets already stored. A turn whose packet id is already
        stored with identical content and metadata is skipped; one with a different content hash
        (or speaker/session fields) raises :class:`ImmutablePacketError` and nothing of the batch is
        written.
        """
        if not isinstance(conversation, Conversation):
            raise StoreError(f"ingest expects a Conversation, got {type(conversation).__name__}")
        ns = validate_namespace(conversation.namespace)
        with self._write() as c:
            added, skipped = self._ingest_in(c, ns, conversation)
        logger.debug("ingest %s: added %d, skipped %d", ns, added, skipped)
        return IngestResult(namespace=ns, added=added, skipped=skipped)

    def ingest_many(self, conversations: Sequence[Conversation]) -> list[IngestResult]:
        """Store several conversations in one transaction: all of them, or (on any error) none.

        Each conversation is ingested as by :meth:`ingest`, in order (a namespace may appear more
        than once). A turn that conflicts with a stored packet raises
        :class:`ImmutablePacketError` and nothing of any conversation in the call is written, so
        a file with a new conversation and an edited old one leaves the store as it was.
        """
        convs = list(conversations)
        for i, conv in enumerate(convs):
            if not isinstance(conv, Conversation):
                raise StoreError(f"ingest_many expects Conversations; item {i} is a {type(conv).__name__}")
        names = [validate_namespace(conv.namespace) for conv in convs]
        results = []
        with self._write() as c:
            for ns, conv in zip(names, convs):
                added, skipped = self._ingest_in(c, ns, conv)
                results.append(IngestResult(namespace=ns, added=added, skipped=skipped))
        logger.debug("ingest_many: %s", [(r.namespace, r.added, r.skipped) for r in results])
        return results

    def _ingest_in(self, c: sqlite3.Connection, ns: str, conversation: Conversation) -> tuple[int, int]:
        """Write the turns of ``conversation`` inside the open transaction ``c``; (added, skipped)."""
        added = skipped = 0
        self._register(c, ns)
        row = c.execute("SELECT MAX(ordinal) FROM packets WHERE namespace = ?", (ns,)).fetchone()
        next_ordinal = first_ordinal = 0 if row[0] is None else row[0] + 1
        for session, turn in conversation.iter_turns():
            pid = require_str(turn.packet_id, "Turn.packet_id")
            where = f"namespace {ns!r}, packet {pid!r}"
            new = turn_values(session, turn, where)
            sha = content_sha256(turn.text, turn.image_caption)
            old = c.execute(f"SELECT {STORED_TURN_COLS} FROM packets WHERE namespace = ? AND packet_id = ?",
                            (ns, pid)).fetchone()
            if old is not None:
                diffs = stored_turn_diffs(old, sha, new)
                if diffs:
                    raise ImmutablePacketError(
                        f"{self.path}: {where} is already stored with different data "
                        f"({'; '.join(diffs)}); stored packets are immutable, so the whole batch "
                        "was rejected"
                    )
                skipped += 1
                continue
            c.execute(
                f"INSERT INTO packets ({PACKET_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (ns, pid, next_ordinal, new[0], new[1], new[2], new[3], new[4], new[5], sha, new[6],
                 new[7], new[8]),
            )
            next_ordinal += 1
            added += 1
        if added:
            self._bump(c, ns, "append", "", first_ordinal, next_ordinal - 1)
        return added, skipped

    def packets(self, namespace: str) -> list[SourcePacket]:
        """All packets of ``namespace`` in dialogue (ordinal) order.

        Each packet's content is checked against its stored sha256; a mismatch (the file was
        damaged or edited) raises :class:`StoreError` naming the packet.
        """
        ns = validate_namespace(namespace)
        rows = self._query(
            f"SELECT {PACKET_COLS} FROM packets WHERE namespace = ? ORDER BY ordinal", (ns,), table="packets"
        )
        return [packet_from_row(r) for r in rows]

    def packet_count(self, namespace: str) -> int:
        """Number of packets of ``namespace`` (a cheap check that a memory has not grown)."""
        ns = validate_namespace(namespace)
        return int(self._query("SELECT COUNT(*) FROM packets WHERE namespace = ?", (ns,), table="packets")[0][0])

    def get_packet(self, namespace: str, packet_id: str) -> SourcePacket | None:
        """One packet by id (content hash checked), or ``None`` when ``namespace`` has no such packet."""
        ns = validate_namespace(namespace)
        rows = self._query(
            f"SELECT {PACKET_COLS} FROM packets WHERE namespace = ? AND packet_id = ?",
            (ns, require_str(packet_id, "packet_id")),
            table="packets",
        )
        return packet_from_row(rows[0]) if rows else None

    # ---------------------------------------------------------------- descriptors

    def save_extraction(
        self, namespace: str, descriptor_set: str, packet_id: str, descriptors: Sequence[Descriptor]
    ) -> None:
        """Store one packet's descriptors for ``descriptor_set`` and mark the packet as extracted.

        One transaction. A second call for the same packet and set replaces its descriptors (so a
        re-run of an extractor stays consistent). An empty list still marks the packet done. The
        packet must exist; every descriptor must carry this namespace and packet id.
        """
        self.save_extractions(namespace, descriptor_set, [(packet_id, descriptors)])

    def save_extractions(
        self, namespace: str, descriptor_set: str, items: Sequence[tuple[str, Sequence[Descriptor]]]
    ) -> None:
        """:meth:`save_extraction` for several packets in one transaction (one commit for a batch:
        a build of cheap rule-based descriptors is otherwise bound by one fsync per turn)."""
        ns = validate_namespace(namespace)
        dset = require_str(descriptor_set, "descriptor_set")
        prepared = []
        for packet_id, descriptors in items:
            pid = require_str(packet_id, "packet_id")
            prepared.append((pid, [descriptor_row(ns, dset, pid, d) for d in descriptors]))
        if not prepared:
            return
        with self._write() as c:
            for pid, rows in prepared:
                self._save_extraction_rows(c, ns, dset, pid, rows)
            self._bump(c, ns, "extract", dset, *self._extracted_ordinals(c, ns, [pid for pid, _ in prepared]))

    def _save_extraction_rows(self, c: sqlite3.Connection, ns: str, dset: str, pid: str, rows: list) -> None:
        """One packet's descriptors and marker, inside the caller's write transaction."""
        if c.execute(
            "SELECT 1 FROM packets WHERE namespace = ? AND packet_id = ?", (ns, pid)
        ).fetchone() is None:
            raise StoreError(f"{self.path}: namespace {ns!r} has no packet {pid!r} to attach descriptors to")
        c.execute(
            "DELETE FROM descriptors WHERE namespace = ? AND descriptor_set = ? AND packet_id = ?",
            (ns, dset, pid),
        )
        try:
            c.executemany(DESCRIPTOR_INSERT, rows)
        except sqlite3.IntegrityError as exc:
            raise StoreError(
                f"{self.path}: descriptors of {ns!r}/{pid!r} in set {dset!r} violate a constraint "
                f"({exc}); descriptor ids must be unique within a set"
            ) from exc
        c.execute(
            "INSERT OR REPLACE INTO extraction_markers "
            "(namespace, descriptor_set, packet_id, n_descriptors, created_at) VALUES (?, ?, ?, ?, ?)",
            (ns, dset, pid, len(rows), time.time()),
        )

    def extracted_packet_ids(self, namespace: str, descriptor_set: str) -> set[str]:
        """Packet ids of ``namespace`` already extracted for ``descriptor_set``."""
        ns = validate_namespace(namespace)
        dset = require_str(descriptor_set, "descriptor_set")
        rows = self._query(
            "SELECT packet_id FROM extraction_markers WHERE namespace = ? AND descriptor_set = ?",
            (ns, dset),
            table="extraction_markers",
        )
        return {r[0] for r in rows}

    def descriptors(self, namespace: str, descriptor_set: str) -> list[Descriptor]:
        """All descriptors of ``namespace`` in ``descriptor_set``, by packet ordinal then claim index."""
        ns = validate_namespace(namespace)
        dset = require_str(descriptor_set, "descriptor_set")
        rows = self._query(
            f"SELECT {DESCRIPTOR_COLS} FROM descriptors d JOIN packets p "
            "ON p.namespace = d.namespace AND p.packet_id = d.packet_id "
            "WHERE d.namespace = ? AND d.descriptor_set = ? "
            "ORDER BY p.ordinal, d.claim_index, d.descriptor_id",
            (ns, dset),
            table="descriptors",
        )
        return [descriptor_from_row(r, dset) for r in rows]

    # ---------------------------------------------------------------- cells

    def save_cells(self, namespace: str, layout_id: str, cells: Sequence[Cell], *,
                   stored: Sequence[Cell] | None = None) -> None:
        """Replace the cells of ``layout_id`` in ``namespace`` with ``cells`` (one transaction).

        ``stored``: the cells the caller knows are stored now (read or written inside the
        transaction this call joins); only the rows that differ from them are written."""
        ns = validate_namespace(namespace)
        lid = require_str(layout_id, "layout_id")
        gone, rows = cell_writes(self.path, ns, lid, cells, stored)
        with self._write() as c:
            self._register(c, ns)
            if gone is None:
                c.execute("DELETE FROM cells WHERE namespace = ? AND layout_id = ?", (ns, lid))
            elif gone:
                c.executemany("DELETE FROM cells WHERE namespace = ? AND layout_id = ? AND cell_id = ?",
                              [(ns, lid, cid) for cid in gone])
            try:
                c.executemany(
                    "INSERT INTO cells (namespace, layout_id, cell_id, descriptor_ids_json, tokens, "
                    "people_json, keywords_json, session_min, session_max, title, has_time) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    rows,
                )
            except sqlite3.IntegrityError as exc:
                raise StoreError(
                    f"{self.path}: layout {lid!r} of {ns!r} has a repeated cell_id ({exc})"
                ) from exc
            self._bump(c, ns, "cells", lid, cell_ids=None if gone is None else {*gone, *(r[2] for r in rows)})

    def cells(self, namespace: str, layout_id: str) -> list[Cell]:
        """The cells of ``layout_id`` in ``namespace``, ordered by cell_id."""
        ns = validate_namespace(namespace)
        lid = require_str(layout_id, "layout_id")
        rows = self._query(
            f"SELECT {CELL_COLS} FROM cells WHERE namespace = ? AND layout_id = ? ORDER BY cell_id",
            (ns, lid),
            table="cells",
        )
        return [cell_from_row(r, ns, lid) for r in rows]

    # ---------------------------------------------------------------- embeddings

    def save_embeddings(
        self, namespace: str, model_id: str, keys: Sequence[str], vectors: np.ndarray, *,
        content: Sequence[str] | None = None, space: str | None = None,
    ) -> None:
        """Store one float32 vector per key (row ``i`` of ``vectors`` belongs to ``keys[i]``).

        ``vectors`` must be a finite 2-D array with ``len(keys)`` rows; it is cast to float32
        (float32 input round-trips bit-exactly). Existing vectors of the same keys are replaced.
        Vectors are content-addressed: each is stored once per (``space``, content address) and
        shared by every namespace and key that names the same address. ``content`` gives the
        addresses (e.g. the sha256 of each embedded text, so that :meth:`vectors_by_content` finds
        them again); without it a vector's address is the sha256 of its bytes. A vector already
        stored under an address is kept (the caller vouches that the address determines it).
        ``space`` (default ``model_id``) names the vector space, one embedder identity; all vectors
        of one space share one dimension.
        """
        ns = validate_namespace(namespace)
        mid = require_str(model_id, "model_id")
        sp = mid if space is None else require_str(space, "vector space")
        keys, blobs, addresses, dim = vector_rows(ns, mid, keys, vectors, content)
        with self._write() as c:
            # Every vector of a space was stored through this check, so one row tells its dim
            # (looking for a row of another dim read every vector of the space).
            row = c.execute("SELECT dim FROM vectors WHERE space = ? LIMIT 1", (sp,)).fetchone()
            if row is not None and row[0] != dim:
                raise StoreError(
                    f"{self.path}: embeddings of vector space {sp!r} (model {mid!r}) have dim {row[0]}; got {dim}"
                )
            self._register(c, ns)
            replaced: set[int] = set()
            for part in chunks(keys):
                marks = ",".join("?" * len(part))
                replaced.update(r[0] for r in c.execute(
                    f"SELECT vector_id FROM embeddings WHERE namespace = ? AND model_id = ? AND key IN ({marks})",
                    (ns, mid, *part)))
            c.executemany(
                "INSERT INTO vectors (space, content, dim, vector) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (space, content) DO NOTHING",
                ((sp, a, dim, b) for a, b in zip(addresses, blobs)),
            )
            ids: dict[str, int] = {}
            for part in chunks(sorted(set(addresses))):
                marks = ",".join("?" * len(part))
                ids.update(c.execute(f"SELECT content, id FROM vectors WHERE space = ? AND content IN ({marks})",
                                     (sp, *part)).fetchall())
            c.executemany(
                "INSERT OR REPLACE INTO embeddings (namespace, model_id, key, vector_id) VALUES (?, ?, ?, ?)",
                ((ns, mid, k, ids[a]) for k, a in zip(keys, addresses)),
            )
            # A replaced vector that nothing points at any more goes (no stale copies in the file).
            self._drop_unreferenced(c, sorted(replaced - set(ids.values())))
            if keys:
                self._bump(c, ns, "embed")

    @staticmethod
    def _drop_unreferenced(c: sqlite3.Connection, vector_ids: Sequence[int] | None = None) -> int:
        """Delete the vectors (of ``vector_ids``, or all) that no embeddings row points at."""
        sql = "DELETE FROM vectors WHERE NOT EXISTS (SELECT 1 FROM embeddings e WHERE e.vector_id = vectors.id)"
        if vector_ids is None:
            return c.execute(sql).rowcount
        dropped = 0
        for part in chunks(list(vector_ids)):
            marks = ",".join("?" * len(part))
            dropped += c.execute(f"{sql} AND id IN ({marks})", part).rowcount
        return dropped

    def embeddings(self, namespace: str, model_id: str, keys: Sequence[str]) -> dict[str, np.ndarray]:
        """Stored vectors (1-D float32 arrays) for those of ``keys`` that have one."""
        ns = validate_namespace(namespace)
        mid = require_str(model_id, "model_id")
        wanted = list(dict.fromkeys(require_str(k, "embedding key") for k in keys))
        out: dict[str, np.ndarray] = {}
        with self._read("embeddings") as c:
            for chunk in chunks(wanted):
                marks = ",".join("?" * len(chunk))
                for key, dim, blob in c.execute(
                    f"SELECT e.key, v.dim, v.vector FROM embeddings e JOIN vectors v ON v.id = e.vector_id "
                    f"WHERE e.namespace = ? AND e.model_id = ? AND e.key IN ({marks})",
                    (ns, mid, *chunk),
                ):
                    out[key] = vector_from_blob(blob, dim, f"{ns!r}/{mid!r}/{key!r}")
        return out

    def vectors_by_content(self, space: str, content: Sequence[str]) -> dict[str, np.ndarray]:
        """Stored vectors of vector space ``space`` by content address, whichever namespace saved them.

        What a build looks up before it embeds: a text another namespace (or another document
        kind) already embedded under the same embedder identity is not embedded again.
        """
        sp = require_str(space, "vector space")
        wanted = list(dict.fromkeys(require_str(a, "content address") for a in content))
        out: dict[str, np.ndarray] = {}
        with self._read("vectors") as c:
            for chunk in chunks(wanted):
                marks = ",".join("?" * len(chunk))
                for address, dim, blob in c.execute(
                    f"SELECT content, dim, vector FROM vectors WHERE space = ? AND content IN ({marks})",
                    (sp, *chunk),
                ):
                    out[address] = vector_from_blob(blob, dim, f"{sp!r}/{address!r}")
        return out

    # ---------------------------------------------------------------- meta

    def get_meta(self, namespace: str, key: str) -> str | None:
        """A small per-namespace string value (build fingerprints, ...), or ``None``."""
        ns = validate_namespace(namespace)
        rows = self._query(
            "SELECT value FROM meta WHERE namespace = ? AND key = ?", (ns, require_str(key, "meta key")),
            table="meta",
        )
        return rows[0][0] if rows else None

    def set_meta(self, namespace: str, key: str, value: str) -> None:
        """Set (insert or overwrite) a per-namespace string value."""
        ns = validate_namespace(namespace)
        k = require_str(key, "meta key")
        v = require_str(value, "meta value", allow_empty=True)
        with self._write() as c:
            self._register(c, ns)
            c.execute("INSERT OR REPLACE INTO meta (namespace, key, value) VALUES (?, ?, ?)", (ns, k, v))
            self._bump(c, ns, "meta")

    # ---------------------------------------------------------------- capsules

    def put_capsules(self, namespace: str, writer: str, budget: int, capsules: Sequence[Mapping[str, Any]]) -> None:
        """Replace the retained evidence capsules of ``namespace`` (retention/: ``Capsule.to_dict``
        rows, each with a ``capsule_id`` and its ``sources``) with ``capsules``, in one transaction."""
        ns = validate_namespace(namespace)
        rows = capsule_rows(ns, writer, budget, capsules)
        with self._write() as c:
            self._register(c, ns)
            c.execute("DELETE FROM capsules WHERE namespace = ?", (ns,))
            c.executemany("INSERT INTO capsules (namespace, capsule_id, writer, budget, body) VALUES (?, ?, ?, ?, ?)",
                          rows)
            self._bump(c, ns, "capsules")

    def inventory(self, namespace: str) -> dict[str, Any]:
        """The names of ``namespace``'s derived rows (``base.StoreInventory``), sorted, in one read."""
        ns = validate_namespace(namespace)
        with self._read("inventory") as c:
            sets = [r[0] for r in c.execute(
                "SELECT DISTINCT descriptor_set FROM extraction_markers WHERE namespace = ? ORDER BY 1", (ns,))]
            layouts = [r[0] for r in c.execute(
                "SELECT DISTINCT layout_id FROM cells WHERE namespace = ? ORDER BY 1", (ns,))]
            embeddings = [tuple(r) for r in c.execute(
                "SELECT e.model_id, v.space, e.key, v.content FROM embeddings e JOIN vectors v ON v.id = e.vector_id "
                "WHERE e.namespace = ? ORDER BY e.model_id, e.key", (ns,))]
            meta = [r[0] for r in c.execute("SELECT key FROM meta WHERE namespace = ? ORDER BY key", (ns,))]
        return {"descriptor_sets": sets, "layouts": layouts, "embeddings": embeddings, "meta": meta}

    def capsules(self, namespace: str) -> list[dict[str, Any]]:
        """The retained capsules of ``namespace`` (``Capsule.to_dict`` rows plus ``writer`` and
        ``budget``), by capsule id; [] when none were written."""
        ns = validate_namespace(namespace)
        out = []
        for cid, writer, budget, body in self._query(
                "SELECT capsule_id, writer, budget, body FROM capsules WHERE namespace = ? ORDER BY capsule_id",
                (ns,), table="capsules"):
            try:
                row = json.loads(body)
            except ValueError as exc:
                raise StoreError(f"{self.path}: capsule {cid!r} of {ns!r} is not JSON ({exc})") from exc
            out.append({**row, "writer": writer, "budget": budget})
        return out

    # ---------------------------------------------------------------- housekeeping

    def forget(self, namespace: str, *, wait_s: float | None = None) -> ForgetResult:
        """Delete everything stored for ``namespace``, then scrub it from the file bytes.

        Removes packets, descriptors, extraction markers, cells, embeddings, meta, capsules, waste rows,
        request-cache entries cached under the namespace and the run_calls that point at them, and
        the namespace's generation, in one short write transaction; other namespaces are untouched.
        The rows are gone when this returns. Then the scrub (:meth:`scrub`) rebuilds the file and
        empties the WAL so that no copy of the deleted text remains.

        The whole call waits at most ``wait_s`` seconds (default: the store's ``forget_wait_s``)
        for other connections: for the write lock (when it cannot be had, :class:`StoreError` is
        raised and nothing was deleted), and for readers holding old snapshots, which it never
        waits for while holding the write lock. When readers keep the scrub from finishing in
        time, the result says so (``scrub_complete`` False), ``stats()["scrub_pending"]`` is true,
        and a later :meth:`scrub` or ``forget`` finishes it. Returns rows deleted per table.
        """
        ns = validate_namespace(namespace)
        budget = self._wait_budget(wait_s)
        deadline = time.monotonic() + budget
        counts: dict[str, int] = {}
        # A bounded wait for the write lock; the transaction itself is a handful of range deletes.
        with self._busy_timeout(int(budget * 1000)):
            try:
                with self._write() as c:
                    # Children before parents, so that each count is what that table lost (no cascades).
                    steps = (
                        ("run_calls", "DELETE FROM run_calls WHERE key IN "
                                      "(SELECT key FROM request_cache WHERE namespace = ?)"),
                        ("request_cache", "DELETE FROM request_cache WHERE namespace = ?"),
                        ("descriptors", "DELETE FROM descriptors WHERE namespace = ?"),
                        ("extraction_markers", "DELETE FROM extraction_markers WHERE namespace = ?"),
                        ("capsules", "DELETE FROM capsules WHERE namespace = ?"),
                        ("packets", "DELETE FROM packets WHERE namespace = ?"),
                        ("cells", "DELETE FROM cells WHERE namespace = ?"),
                        ("embeddings", "DELETE FROM embeddings WHERE namespace = ?"),
                        ("meta", "DELETE FROM meta WHERE namespace = ?"),
                        ("waste", "DELETE FROM waste WHERE namespace = ?"),
                        ("namespaces", "DELETE FROM namespaces WHERE namespace = ?"),
                        ("generations", "DELETE FROM generations WHERE namespace = ?"),
                    )
                    # Its change log goes too (not counted: it holds ordinals and names of sets, no text).
                    c.execute("DELETE FROM changes WHERE namespace = ?", (ns,))
                    for table, sql in steps:
                        counts[table] = c.execute(sql, (ns,)).rowcount
                    # Content-addressed vectors go with their last reference (others still share them).
                    counts["vectors"] = self._drop_unreferenced(c)
                    # The name leaves the file with its data; the counter still moves past every
                    # generation the namespace had, so generation() never repeats an old value.
                    c.execute("UPDATE counters SET value = value + 1 WHERE name = 'generation'")
                    # Recorded in the same transaction: until the scrub is done, copies remain.
                    c.execute("INSERT OR REPLACE INTO counters (name, value) VALUES ('scrub_pending', 1)")
            except StoreError as exc:
                cause = exc.__cause__
                if not (isinstance(cause, sqlite3.OperationalError) and ("locked" in str(cause) or "busy" in str(cause))):
                    raise
                raise StoreError(
                    f"{self.path}: forget {ns!r}: nothing was deleted; the write lock was not free "
                    f"within {budget:g} s ({cause})"
                ) from exc
        complete = self._scrub(deadline)
        logger.info("forgot namespace %s: %s (scrub %s)", ns, counts, "complete" if complete else "pending")
        return ForgetResult(counts, namespace=ns, scrub_complete=complete)

    def scrub(self, *, wait_s: float | None = None) -> bool:
        """Finish removing deleted data from the file bytes; ``True`` when nothing is pending.

        Rebuilds the file (VACUUM) and checkpoints and truncates the WAL, waiting at most
        ``wait_s`` seconds (default ``forget_wait_s``) for other connections' read snapshots. Safe
        to call at any time; with no pending scrub it still compacts the file.
        """
        return self._scrub(time.monotonic() + self._wait_budget(wait_s))

    def scrub_pending(self) -> bool:
        """Whether a forget's deleted data may still have copies in the file or its WAL."""
        rows = self._query("SELECT value FROM counters WHERE name = 'scrub_pending'", table="counters")
        return bool(rows and rows[0][0])

    def _wait_budget(self, wait_s: float | None) -> float:
        budget = self.forget_wait_s if wait_s is None else wait_s
        if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not budget >= 0:
            raise StoreError(f"wait_s must be a number of seconds >= 0, got {budget!r}")
        return float(budget)

    def _scrub(self, deadline: float) -> bool:
        """VACUUM, then checkpoint(TRUNCATE) until the WAL is empty or ``deadline`` passes.

        Each attempt runs with a short busy timeout (the checkpoint with none), so the write lock
        is never held while waiting for a reader; between attempts the lock is free for others.
        """
        if self.read_only:
            raise StoreError(f"{self.path}: cannot scrub this store: {self.read_only_reason}")
        if self._memory:
            with self._lock:
                self._check_open()
                self._conn.execute("VACUUM")
                self._conn.execute("DELETE FROM counters WHERE name = 'scrub_pending'")
            return True
        vacuumed = self._attempt_until(deadline, self._vacuum_once)
        emptied = vacuumed and self._attempt_until(deadline, self._checkpoint_once)
        if not emptied:
            logger.warning(
                "%s: the scrub is incomplete (other connections kept old snapshots open, or the file "
                "could not be rebuilt), so copies of deleted data may remain until `memcompile-local "
                "scrub` (or another forget) finishes it",
                self.path,
            )
            return False
        # Clear the mark; the frame that write adds to the WAL holds only the counters page.
        if not self._attempt_until(deadline, self._clear_pending_once):
            return False
        self._attempt_until(time.monotonic() + 0.2, self._checkpoint_once)
        return True

    def _attempt_until(self, deadline: float, attempt) -> bool:
        """Call ``attempt`` until it returns True (done), None (give up) or ``deadline`` passes."""
        pause = 0.01
        while True:
            with self._lock:
                self._check_open()
                done = attempt()
            if done:
                return True
            if done is None or time.monotonic() + pause > deadline:
                return False
            time.sleep(pause)  # the connection's locks are free while we wait
            pause = min(pause * 2, 0.2)

    def _vacuum_once(self) -> bool | None:
        with self._busy_timeout(_SCRUB_STEP_MS):
            try:
                self._conn.execute("VACUUM")  # in WAL mode the rebuilt pages go to the WAL
                return True
            except sqlite3.OperationalError as exc:
                # Locked: try again. Anything else (a full disk needs room for the copy) leaves
                # the scrub pending, reported as such, rather than failing a forget that deleted.
                if "locked" in str(exc) or "busy" in str(exc):
                    return False
                logger.warning("%s: VACUUM failed (%s); the scrub stays pending", self.path, exc)
                return None

    def _checkpoint_once(self) -> bool | None:
        # No busy handler: a checkpoint that must wait for a reader returns at once (busy=1)
        # instead of holding the write lock while it waits.
        with self._busy_timeout(0):
            try:
                busy, _log, _done = self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            except sqlite3.OperationalError as exc:
                if "locked" in str(exc) or "busy" in str(exc):
                    return False
                logger.warning("%s: WAL checkpoint failed (%s); the scrub stays pending", self.path, exc)
                return None
        return busy == 0

    def _clear_pending_once(self) -> bool:
        with self._busy_timeout(_SCRUB_STEP_MS):
            try:
                with self._write() as c:
                    c.execute("DELETE FROM counters WHERE name = 'scrub_pending'")
                return True
            except StoreError:
                return False

    def stats(self, namespace: str | None = None) -> dict:
        """Counts for the CLI ``stats`` command.

        Returns ``{"path", "schema_version", "file_bytes", "namespaces": {ns: {...}}, "cache": {...},
        "waste": {...}, "scrub_pending"}``. Each namespace entry has ``packets``, ``sessions``, ``descriptors`` and
        ``extracted_packets`` (both per descriptor set), ``cells`` (per layout), ``embeddings`` (per
        model), ``meta``, ``cache_entries`` and ``tokens`` (``{"prompt", "completion"}`` of its cache
        entries). With ``namespace`` only that namespace is listed and ``cache``/``waste`` are
        restricted to it.
        """
        ns_filter = optional_namespace(namespace)
        with self._read() as c:
            if ns_filter is None:
                names = [r[0] for r in c.execute("SELECT namespace FROM namespaces ORDER BY namespace")]
            else:
                names = [ns_filter]
            per_ns: dict[str, dict] = {}
            for ns in names:
                p = c.execute(
                    "SELECT COUNT(*), COUNT(DISTINCT session_index) FROM packets WHERE namespace = ?", (ns,)
                ).fetchone()
                cache_row = c.execute(
                    "SELECT COUNT(*), COALESCE(SUM(prompt_tokens), 0), COALESCE(SUM(completion_tokens), 0) "
                    "FROM request_cache WHERE namespace = ?",
                    (ns,),
                ).fetchone()
                per_ns[ns] = {
                    "packets": p[0],
                    "sessions": p[1],
                    "descriptors": self._grouped(c, "descriptors", "descriptor_set", ns),
                    "extracted_packets": self._grouped(c, "extraction_markers", "descriptor_set", ns),
                    "cells": self._grouped(c, "cells", "layout_id", ns),
                    "embeddings": self._grouped(c, "embeddings", "model_id", ns),
                    "meta": c.execute("SELECT COUNT(*) FROM meta WHERE namespace = ?", (ns,)).fetchone()[0],
                    "capsules": c.execute("SELECT COUNT(*) FROM capsules WHERE namespace = ?", (ns,)).fetchone()[0],
                    "cache_entries": cache_row[0],
                    "tokens": {"prompt": cache_row[1], "completion": cache_row[2]},
                }
            if ns_filter is None:
                cache_where, cache_params = "", ()
            else:
                cache_where, cache_params = " WHERE namespace = ?", (ns_filter,)
            cr = c.execute(
                "SELECT COUNT(*), COALESCE(SUM(prompt_tokens), 0), COALESCE(SUM(completion_tokens), 0), "
                "COALESCE(SUM(namespace IS NULL), 0) FROM request_cache" + cache_where,
                cache_params,
            ).fetchone()
            wr = c.execute(
                "SELECT COUNT(*), COALESCE(SUM(prompt_tokens), 0), COALESCE(SUM(completion_tokens), 0) "
                "FROM waste" + cache_where,
                cache_params,
            ).fetchone()
            pending = c.execute("SELECT value FROM counters WHERE name = 'scrub_pending'").fetchone()
        file_bytes = 0
        if not self._memory:
            for suffix in ("", "-wal"):
                try:
                    file_bytes += os.path.getsize(self.path + suffix)
                except OSError:
                    pass
        return {
            "path": self.path,
            "schema_version": SCHEMA_VERSION,
            "file_bytes": file_bytes,
            "namespaces": per_ns,
            "cache": {
                "entries": cr[0],
                "unscoped_entries": cr[3],
                "tokens": {"prompt": cr[1], "completion": cr[2]},
            },
            "waste": {"calls": wr[0], "prompt": wr[1], "completion": wr[2]},
            "scrub_pending": bool(pending and pending[0]),
        }

    @staticmethod
    def _grouped(c: sqlite3.Connection, table: str, column: str, ns: str) -> dict[str, int]:
        # table/column come from the fixed call sites above, never from user input.
        return {
            r[0]: r[1]
            for r in c.execute(
                f"SELECT {column}, COUNT(*) FROM {table} WHERE namespace = ? GROUP BY {column} ORDER BY {column}",
                (ns,),
            )
        }

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """Inside ``transaction()``: the body's writes are undone alone when it raises (the
        exception goes on); the rest of the transaction stands."""
        with self._write() as c:  # joins the open transaction
            c.execute("SAVEPOINT store_savepoint")
            try:
                yield
            except BaseException:
                c.execute("ROLLBACK TO store_savepoint")
                c.execute("RELEASE store_savepoint")
                raise
            c.execute("RELEASE store_savepoint")

    def packet_claims(self, namespace: str, packet_id: str) -> list[str]:
        """The text of every descriptor of one packet, under any descriptor set."""
        ns = validate_namespace(namespace)
        pid = require_str(packet_id, "packet_id")
        with self._read("descriptors") as c:
            return [r[0] for r in c.execute(
                "SELECT text FROM descriptors WHERE namespace = ? AND packet_id = ? ORDER BY descriptor_id", (ns, pid))]

    def delete_rows(self, plan: Any, *, wait_s: float | None = None) -> ForgetResult:
        """Delete what ``plan`` (a ``build.deletion.DeletionPlan``) names, then scrub the file as
        ``forget`` does.

        In one transaction, and only while the namespace is still at ``plan.generation``
        (else ``StalePlanError``, nothing deleted): the packet; the descriptors and extraction
        markers of ``plan.reextract`` (every descriptor set); the namespace's Cells when
        ``plan.drop_cells``; the embeddings whose key starts with one of
        ``plan.embedding_key_prefixes``, and vectors nothing points at any more; every
        request-cache entry of the namespace whose request or response quotes one of
        ``plan.quoted_lines``, with the run_calls that point at those; ``plan.packet_id`` in the
        JSON-list meta values under keys starting with ``plan.meta_list_prefix``. The generation
        moves. ``wait_s`` bounds the scrub's wait for readers. Returns rows deleted per table
        with the scrub's outcome; ``StoreError`` when there is no such packet.
        """
        ns = validate_namespace(plan.namespace)
        pid = require_str(plan.packet_id, "packet_id")
        counts: dict[str, int] = {}
        with self._write() as c:
            if c.execute("SELECT 1 FROM packets WHERE namespace = ? AND packet_id = ?", (ns, pid)).fetchone() is None:
                raise StoreError(f"{self.path}: namespace {ns!r} has no packet {pid!r}")
            row = (c.execute("SELECT generation FROM generations WHERE namespace = ?", (ns,)).fetchone()
                   or c.execute("SELECT value FROM counters WHERE name = 'generation'").fetchone())
            if row is None or row[0] != plan.generation:
                raise StalePlanError(f"{self.path}: namespace {ns!r} changed since the deletion of {pid!r} was planned")
            # Cache rows store their request and response as JSON, so look for each line as JSON
            # escapes it. Short lines match more rows than needed; a cache entry is only a cost.
            needles = {json.dumps(line, ensure_ascii=False)[1:-1] for line in plan.quoted_lines}
            keys: set[str] = set()
            for needle in needles:
                keys.update(r[0] for r in c.execute(
                    "SELECT key FROM request_cache WHERE namespace = ? AND "
                    "(instr(identity_json, ?) > 0 OR instr(response_json, ?) > 0)", (ns, needle, needle)))
            counts["run_calls"] = counts["request_cache"] = 0
            for part in chunks(sorted(keys)):
                marks = ",".join("?" * len(part))
                counts["run_calls"] += c.execute(f"DELETE FROM run_calls WHERE key IN ({marks})", part).rowcount
                counts["request_cache"] += c.execute(
                    f"DELETE FROM request_cache WHERE key IN ({marks})", part).rowcount
            redo = list(plan.reextract)
            marks = ",".join("?" * len(redo))
            counts["descriptors"] = c.execute(
                f"DELETE FROM descriptors WHERE namespace = ? AND packet_id IN ({marks})", (ns, *redo)).rowcount
            counts["extraction_markers"] = c.execute(
                f"DELETE FROM extraction_markers WHERE namespace = ? AND packet_id IN ({marks})",
                (ns, *redo)).rowcount
            counts["cells"] = (c.execute("DELETE FROM cells WHERE namespace = ?", (ns,)).rowcount
                               if plan.drop_cells else 0)
            counts["embeddings"] = 0
            for prefix in plan.embedding_key_prefixes:
                counts["embeddings"] += c.execute(
                    "DELETE FROM embeddings WHERE namespace = ? AND substr(key, 1, ?) = ?",
                    (ns, len(prefix), prefix)).rowcount
            counts["vectors"] = self._drop_unreferenced(c)
            counts["meta"] = 0
            prefix = plan.meta_list_prefix
            for key, value in c.execute("SELECT key, value FROM meta WHERE namespace = ? AND substr(key, 1, ?) = ?",
                                        (ns, len(prefix), prefix)).fetchall():
                ids = json.loads(value)
                if pid in ids:
                    c.execute("UPDATE meta SET value = ? WHERE namespace = ? AND key = ?",
                              (json.dumps([i for i in ids if i != pid]), ns, key))
                    counts["meta"] += 1
            # A capsule cut from the deleted turn (retention/) goes with it.
            counts["capsules"] = c.execute(
                "DELETE FROM capsules WHERE namespace = ? AND EXISTS "
                "(SELECT 1 FROM json_each(capsules.body, '$.sources') WHERE value = ?)", (ns, pid)).rowcount
            ordinal = c.execute("SELECT ordinal FROM packets WHERE namespace = ? AND packet_id = ?",
                                (ns, pid)).fetchone()[0]
            counts["packets"] = c.execute("DELETE FROM packets WHERE namespace = ? AND packet_id = ?",
                                          (ns, pid)).rowcount
            self._bump(c, ns, "delete", "", ordinal, ordinal)
            # As in forget: until the scrub is done, copies of the deleted text remain.
            c.execute("INSERT OR REPLACE INTO counters (name, value) VALUES ('scrub_pending', 1)")
        complete = self.scrub(wait_s=wait_s)
        logger.info("deleted packet %s of namespace %s: %s (scrub %s)", pid, ns, counts,
                    "complete" if complete else "pending")
        return ForgetResult(counts, namespace=ns, scrub_complete=complete)
