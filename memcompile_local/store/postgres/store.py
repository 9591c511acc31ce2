"""The memory store on a PostgreSQL database: ``Store``, ``RequestCache`` and ``BuildLeases``
for several server processes (on several machines) sharing one database.

The same rows, checks and guarantees as the SQLite store (``store.sqlite_store``), in SQL that
PostgreSQL runs: every call is one transaction (all of it or none); a stored packet is
immutable (``ImmutablePacketError``); every write moves the namespace's generation in the
writing transaction, and announces it with ``NOTIFY`` on :data:`CHANNEL` so servers that
cache views can drop theirs at once; the row codecs (``store.codecs``) check every value on
the way in and out.

Forget deletes every row of the namespace in one transaction, then runs ``VACUUM`` on the
tables it deleted from, so the dead rows' space is reclaimed; what a database server cannot
promise about old copies (its WAL, archives, backups, replicas) is the operator's part, see
docs/guides/stores.md.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ...errors import ImmutablePacketError, StalePlanError, StoreError
from ...types import Cell, Conversation, Descriptor, SourcePacket, content_sha256
from ..base import ChangesSince, ChangeStep, ForgetResult, IngestResult, cell_ids_of, chain_steps, written_cells
from ..codecs import (
    CELL_COLS,
    DESCRIPTOR_COLS,
    PACKET_COLS,
    cell_from_row,
    cell_writes,
    STORED_TURN_COLS,
    capsule_rows,
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
from ..namespace import validate_namespace
from .connection import DEFAULT_POOL_SIZE, DEFAULT_POOL_TIMEOUT_S, PgConnection
from .jobs import PgImportJobs
from .ledger import PgLedger
from .queue import PgBuildQueue
from .schema import CHANGE_LOG_KEEP, CHECK_FUNCTION, GENERATION_SEQUENCE, OUR_TABLES, SCHEMA_VERSION, ensure_schema

logger = logging.getLogger(__name__)

CHANNEL = "memcompile_generation"
"""The NOTIFY channel; each payload is ``"<generation> <namespace> <writer>"``, ``writer`` being
the token of the store object whose transaction committed it."""

DEFAULT_FORGET_WAIT_S = 5.0

_PACKET_INSERT = f"INSERT INTO packets ({PACKET_COLS}) VALUES ({', '.join(['%s'] * len(PACKET_COLS.split(',')))})"

# Keeps a namespace's change log to its last CHANGE_LOG_KEEP entries: a part of the statement
# that bumps the generation (so it costs no round trip), one seek down the table's index.
_TRIM = ("DELETE FROM changes WHERE namespace = %(ns)s AND generation < (SELECT x.generation FROM changes x "
         "WHERE x.namespace = %(ns)s ORDER BY x.generation DESC LIMIT 1 OFFSET %(keep)s)")

_DESCRIPTOR_INSERT = (
    "INSERT INTO descriptors (namespace, descriptor_set, descriptor_id, packet_id, claim_index, text, "
    "speaker, session_index, session_time, people_json, keywords_json, event_time, interaction_time, "
    "n_tokens, needs_profile, negated, event_json) VALUES (" + ", ".join(["%s"] * 17) + ")")

# The gap a forget leaves: deleted from, in this order (children first, so each count is what
# that table lost), then vacuumed.
_FORGET_STEPS = (
    ("run_calls", "DELETE FROM run_calls WHERE key IN (SELECT key FROM request_cache WHERE namespace = %s)"),
    ("request_cache", "DELETE FROM request_cache WHERE namespace = %s"),
    ("descriptors", "DELETE FROM descriptors WHERE namespace = %s"),
    ("extraction_markers", "DELETE FROM extraction_markers WHERE namespace = %s"),
    ("capsules", "DELETE FROM capsules WHERE namespace = %s"),
    ("packets", "DELETE FROM packets WHERE namespace = %s"),
    ("cells", "DELETE FROM cells WHERE namespace = %s"),
    ("embeddings", None),  # with the vectors they pointed at, below
    ("meta", "DELETE FROM meta WHERE namespace = %s"),
    ("waste", "DELETE FROM waste WHERE namespace = %s"),
    ("namespaces", "DELETE FROM namespaces WHERE namespace = %s"),
    ("generations", "DELETE FROM generations WHERE namespace = %s"),
)


class PostgresStore(PgConnection, PgLedger, PgBuildQueue, PgImportJobs):
    """Namespaced memories in the PostgreSQL database at ``url`` (see the module doc).

    ``create``: set the schema up in a database that has none (else an empty database is an
    error); ``read_only``: every write raises :class:`StoreError`; ``forget_wait_s`` bounds the
    vacuum after a forget; ``pool_size``/``pool_timeout_s``: the connection pool of this object.
    """

    def __init__(self, url: str, *, create: bool = True, read_only: bool = False,
                 forget_wait_s: float = DEFAULT_FORGET_WAIT_S, pool_size: int = DEFAULT_POOL_SIZE,
                 pool_timeout_s: float = DEFAULT_POOL_TIMEOUT_S):
        self.forget_wait_s = DEFAULT_FORGET_WAIT_S
        self.forget_wait_s = self._wait_budget(forget_wait_s)
        self._writer = uuid.uuid4().hex[:12]  # names this object's commits in its NOTIFYs
        super().__init__(url, read_only=read_only, pool_size=pool_size, pool_timeout_s=pool_timeout_s)
        try:
            with self._connection("opening the store failed") as conn:
                if self.read_only:
                    with conn.transaction():
                        from .schema import read_version
                        version = read_version(conn, self.path)
                    if version < SCHEMA_VERSION:
                        raise StoreError(f"{self.path}: the database holds no store of schema version "
                                         f"{SCHEMA_VERSION} (found {version}); open it once with a writing command")
                else:
                    ensure_schema(conn, self.path, create=create)
        except BaseException:
            self.close()
            raise

    # ---------------------------------------------------------------- generations

    @staticmethod
    def _register(c: Any, namespace: str) -> None:
        c.execute("INSERT INTO namespaces (namespace, created_at) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                  (namespace, time.time()))

    def _bump(self, c: Any, namespace: str, kind: str, detail: str = "", first_ordinal: int | None = None,
              last_ordinal: int | None = None, *, packet_ids: Sequence[str] | None = None,
              cell_ids: Sequence[int] | None = None) -> None:
        """A new generation for ``namespace`` inside the caller's transaction (which holds the
        namespace's lock), announced on :data:`CHANNEL` when it commits, and the write entered
        in the namespace's change log (``store.base.ChangeStep``: ``kind``, ``detail``, the
        ordinals it touched, or those of ``packet_ids``, and for a ``cells`` write the Cells it
        changed, None for the whole layout).

        Once per transaction: nothing outside it sees the writes before COMMIT, so every write
        of the namespace in it shares one new generation (and one NOTIFY); each write adds its
        entry to that step. The statements are queued; ``generation()`` reads its row when asked."""
        tx = self._tx()
        if packet_ids is not None:  # the ordinals are the server's to look up, in the same statement
            span = ("SELECT MIN(ordinal), MAX(ordinal) FROM packets WHERE namespace = %(ns)s "
                    "AND packet_id = ANY(%(ids)s)")
        else:
            span = "SELECT %(first)s::bigint, %(last)s::bigint"
        args = {"ns": namespace, "kind": kind, "detail": detail, "first": first_ordinal, "last": last_ordinal,
                "ids": list(packet_ids or ()), "cells": None if cell_ids is None else json.dumps(sorted(cell_ids))}
        if tx is not None and namespace in tx.bumped:
            # Another write of a step already taken: its entry joins the step's (same generation,
            # same previous), merging with an entry of the same kind and detail.
            # (Two writes of one layout in a step: their Cells are not merged, the entry says the
            # whole layout, which a reader treats as read it all.)
            c.execute(
                "INSERT INTO changes (namespace, generation, previous, kind, detail, first_ordinal, last_ordinal, "
                "cell_ids) SELECT %(ns)s, g.generation, (SELECT x.previous FROM changes x WHERE x.namespace = %(ns)s "
                "AND x.generation = g.generation LIMIT 1), %(kind)s, %(detail)s, s.lo, s.hi, %(cells)s "
                f"FROM generations g, ({span}) AS s(lo, hi) WHERE g.namespace = %(ns)s "
                "ON CONFLICT (namespace, generation, kind, detail) DO UPDATE SET "
                "first_ordinal = LEAST(changes.first_ordinal, EXCLUDED.first_ordinal), "
                "last_ordinal = GREATEST(changes.last_ordinal, EXCLUDED.last_ordinal), cell_ids = NULL", args)
            return
        # The step's first entry is made in the statement that draws the generation: ``old``
        # reads the generation it replaces (every part of one statement sees the same snapshot).
        log = ("log AS (INSERT INTO changes (namespace, generation, previous, kind, detail, first_ordinal, "
               "last_ordinal, cell_ids) SELECT %(ns)s, {value}, (SELECT generation FROM old), %(kind)s, %(detail)s, "
               f"s.lo, s.hi, %(cells)s FROM ({span}) AS s(lo, hi){{source}}), ")
        reserved = self._reserved(namespace)
        if reserved is not None:
            # The value drawn with the lock is here already: the new generation is known without
            # waiting for this statement.
            c.execute(
                "WITH old AS (SELECT generation FROM generations WHERE namespace = %(ns)s), "
                "reg AS (INSERT INTO namespaces (namespace, created_at) VALUES (%(ns)s, %(now)s) ON CONFLICT DO NOTHING), "
                "up AS (INSERT INTO generations (namespace, generation) VALUES (%(ns)s, %(v)s) "
                "ON CONFLICT (namespace) DO UPDATE SET generation = EXCLUDED.generation), "
                + log.format(value="%(v)s::bigint", source="") +
                "trim AS (" + _TRIM + ") "
                "SELECT pg_notify(%(channel)s, %(payload)s)",
                {**args, "now": time.time(), "v": reserved, "channel": CHANNEL, "keep": CHANGE_LOG_KEEP,
                 "payload": f"{reserved} {namespace} {self._writer}"})
            tx.bumped.add(namespace)
            tx.generations[namespace] = reserved
            return
        # One statement: the namespace registered (if new), its generation drawn and announced.
        cur = c.execute(
            "WITH old AS (SELECT generation FROM generations WHERE namespace = %(ns)s), "
            "reg AS (INSERT INTO namespaces (namespace, created_at) VALUES (%(ns)s, %(now)s) ON CONFLICT DO NOTHING), "
            f"g AS (SELECT nextval('{GENERATION_SEQUENCE}') AS v), "
            "up AS (INSERT INTO generations (namespace, generation) SELECT %(ns)s, v FROM g "
            "ON CONFLICT (namespace) DO UPDATE SET generation = EXCLUDED.generation RETURNING generation), "
            + log.format(value="g.v", source=", g") +
            "trim AS (" + _TRIM + ") "
            "SELECT generation, pg_notify(%(channel)s, generation::text || ' ' || %(payload)s) FROM up",
            {**args, "now": time.time(), "channel": CHANNEL, "keep": CHANGE_LOG_KEEP,
             "payload": f"{namespace} {self._writer}"})
        if tx is not None:
            tx.bumped.add(namespace)
            tx.generations[namespace] = cur

    def _counter(self, c: Any) -> int:
        """The last generation handed out store-wide (0 before the first)."""
        row = c.execute(f"SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END "
                        f"FROM {GENERATION_SEQUENCE}").fetchone()
        return int(row[0])

    def _hold_namespace(self, ns: str) -> None:
        """Inside ``transaction()``: take ``ns``'s lock before reading it, so that what is read
        stays so until the transaction commits (no other process writes the namespace meanwhile),
        as SQLite's write lock guarantees there."""
        held = self._joined()
        if held is not None:
            self._lock_namespace(held, ns)

    def generation(self, namespace: str) -> int:
        """A number that changes whenever anything a view of ``namespace`` reads is written, in
        every process sharing the database; it never decreases and never repeats an old value,
        a forgotten namespace included (see ``MemoryStore.generation``)."""
        ns = validate_namespace(namespace)
        if self._joined() is not None:  # stays what it is until this transaction commits
            return self._tx_generation(ns)
        rows = self._query("SELECT generation FROM generations WHERE namespace = %s", (ns,), table="generations")
        if rows:
            return int(rows[0][0])
        # No data: report the store-wide counter, after any writer of this namespace that has
        # drawn a value from it has committed (else the value it commits could be the one read).
        with self._connection("reading table generations failed") as conn:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock_shared(%s, %s)", _lock_args(ns))
                row = conn.execute("SELECT generation FROM generations WHERE namespace = %s", (ns,)).fetchone()
                return int(row[0]) if row is not None else self._counter(conn)

    def changes_since(self, namespace: str, generation: int, *, after_ordinal: int, descriptor_set: str,
                      layout_id: str | None = None) -> ChangesSince | None:
        """What ``namespace`` holds beyond a view of ``generation`` whose last packet has
        ordinal ``after_ordinal`` (``store.base.ChangesSince``), read in one snapshot; None when
        the change log does not lead from ``generation`` to the current one (see
        ``MemoryStore.changes_since``). With ``layout_id``, also the Cells of that layout written
        since. Costs the new rows, not the namespace."""
        ns = validate_namespace(namespace)
        since = require_int(generation, "generation", minimum=0)
        after = require_int(after_ordinal, "after_ordinal", minimum=-1)
        dset = require_str(descriptor_set, "descriptor_set")
        lid = None if layout_id is None else require_str(layout_id, "layout_id")
        self._hold_namespace(ns)
        with self._read("changes") as c:
            row = c.execute("SELECT generation FROM generations WHERE namespace = %s", (ns,)).fetchone()
            if row is None:
                return None
            current = int(row[0])
            rows = [ChangeStep(int(g), None if p is None else int(p), k, d, None if a is None else int(a),
                               None if b is None else int(b), cell_ids_of(w))
                    for g, p, k, d, a, b, w in c.execute(
                        "SELECT generation, previous, kind, detail, first_ordinal, last_ordinal, cell_ids FROM changes "
                        "WHERE namespace = %s AND generation > %s ORDER BY generation, kind COLLATE \"C\", "
                        "detail COLLATE \"C\"", (ns, since))]
            steps = chain_steps(since, current, rows)
            if steps is None:
                return None
            if current == since:
                return ChangesSince(current, (), (), (), frozenset(), written_cells((), lid))
            packets = [packet_from_row(r) for r in c.execute(
                f"SELECT {PACKET_COLS} FROM packets WHERE namespace = %s AND ordinal > %s ORDER BY ordinal",
                (ns, after))]
            descriptors: list[Descriptor] = []
            extracted: set[str] = set()
            if packets:
                ids = [p.packet_id for p in packets]
                descriptors = [descriptor_from_row(r, dset) for r in c.execute(
                    f"SELECT {DESCRIPTOR_COLS} FROM descriptors d JOIN packets p "
                    "ON p.namespace = d.namespace AND p.packet_id = d.packet_id "
                    "WHERE d.namespace = %s AND d.descriptor_set = %s AND d.packet_id = ANY(%s) "
                    "ORDER BY p.ordinal, d.claim_index, d.descriptor_id COLLATE \"C\"", (ns, dset, ids))]
                extracted = {r[0] for r in c.execute(
                    "SELECT packet_id FROM extraction_markers WHERE namespace = %s AND descriptor_set = %s "
                    "AND packet_id = ANY(%s)", (ns, dset, ids))}
            written = written_cells(steps, lid)
            cells = [cell_from_row(r, ns, lid) for r in c.execute(
                f"SELECT {CELL_COLS} FROM cells WHERE namespace = %s AND layout_id = %s AND cell_id = ANY(%s) "
                "ORDER BY cell_id", (ns, lid, sorted(written)))] if written else []
        return ChangesSince(current, steps, tuple(packets), tuple(descriptors), frozenset(extracted), written,
                            tuple(cells))

    # ---------------------------------------------------------------- namespaces / packets

    def namespaces(self) -> list[str]:
        """All namespaces that have had anything written, sorted."""
        return [r[0] for r in self._query("SELECT namespace FROM namespaces ORDER BY namespace COLLATE \"C\"",
                                          table="namespaces")]

    def ingest(self, conversation: Conversation) -> IngestResult:
        """Store every turn of ``conversation`` as a SourcePacket, in one transaction (see
        ``MemoryStore.ingest``: identical turns are skipped, a changed one raises
        :class:`ImmutablePacketError` and nothing of the batch is written)."""
        if not isinstance(conversation, Conversation):
            raise StoreError(f"ingest expects a Conversation, got {type(conversation).__name__}")
        ns = validate_namespace(conversation.namespace)
        with self._write() as c:
            added, skipped = self._ingest_in(c, ns, conversation)
        return IngestResult(namespace=ns, added=added, skipped=skipped)

    def ingest_many(self, conversations: Sequence[Conversation]) -> list[IngestResult]:
        """Several conversations in one transaction: all of them, or (on any error) none."""
        convs = list(conversations)
        for i, conv in enumerate(convs):
            if not isinstance(conv, Conversation):
                raise StoreError(f"ingest_many expects Conversations; item {i} is a {type(conv).__name__}")
        names = [validate_namespace(conv.namespace) for conv in convs]
        results = []
        with self._write() as c:
            for ns in sorted(set(names)):  # one order for every writer: no deadlock between two files
                self._lock_namespace(c, ns)
            for ns, conv in zip(names, convs):
                added, skipped = self._ingest_in(c, ns, conv)
                results.append(IngestResult(namespace=ns, added=added, skipped=skipped))
        return results

    def _ingest_in(self, c: Any, ns: str, conversation: Conversation) -> tuple[int, int]:
        added = skipped = 0
        self._lock_namespace(c, ns)
        turns = list(conversation.iter_turns())
        ids = [t.packet_id for _, t in turns if isinstance(t.packet_id, str)]
        # One statement: the last ordinal, and the stored turns among these ids (none: one row
        # of NULLs after the ordinal).
        found = c.execute(
            "SELECT (SELECT MAX(ordinal) FROM packets WHERE namespace = %s), p.packet_id, "
            + ", ".join(f"p.{col.strip()}" for col in STORED_TURN_COLS.split(","))
            + " FROM (SELECT 1) AS one LEFT JOIN packets p ON p.namespace = %s AND p.packet_id = ANY(%s)",
            (ns, ns, ids)).fetchall()
        top = found[0][0]
        stored = {r[1]: r[2:] for r in found if r[1] is not None}
        next_ordinal = 0 if top is None else int(top) + 1
        rows = []
        for session, turn in turns:
            pid = require_str(turn.packet_id, "Turn.packet_id")
            where = f"namespace {ns!r}, packet {pid!r}"
            new = turn_values(session, turn, where)
            sha = content_sha256(turn.text, turn.image_caption)
            old = stored.get(pid)
            if old is not None:
                diffs = stored_turn_diffs(old, sha, new)
                if diffs:
                    raise ImmutablePacketError(
                        f"{self.path}: {where} is already stored with different data ({'; '.join(diffs)}); "
                        "stored packets are immutable, so the whole batch was rejected")
                skipped += 1
                continue
            stored[pid] = (sha, new[0], new[1], new[2], new[3], new[6], new[7], new[8])
            rows.append((ns, pid, next_ordinal, new[0], new[1], new[2], new[3], new[4], new[5], sha, new[6],
                         new[7], new[8]))
            next_ordinal += 1
            added += 1
        if rows:
            c.cursor().executemany(_PACKET_INSERT, rows)
            tx = self._tx()
            if tx is not None:  # what this transaction wrote is what a read of it would return
                tx.packets.update(((ns, r[1]), r) for r in rows)
            self._bump(c, ns, "append", "", rows[0][2], rows[-1][2])  # registers the namespace too
        else:
            self._register(c, ns)
        return added, skipped

    def packets(self, namespace: str) -> list[SourcePacket]:
        """All packets of ``namespace`` in dialogue (ordinal) order, each checked against its sha256."""
        ns = validate_namespace(namespace)
        self._hold_namespace(ns)
        rows = self._query(f"SELECT {PACKET_COLS} FROM packets WHERE namespace = %s ORDER BY ordinal", (ns,),
                           table="packets")
        return [packet_from_row(r) for r in rows]

    def packet_count(self, namespace: str) -> int:
        """Number of packets of ``namespace``."""
        ns = validate_namespace(namespace)
        self._hold_namespace(ns)
        return int(self._query("SELECT COUNT(*) FROM packets WHERE namespace = %s", (ns,), table="packets")[0][0])

    def get_packet(self, namespace: str, packet_id: str) -> SourcePacket | None:
        """One packet by id (content hash checked), or ``None``."""
        ns = validate_namespace(namespace)
        self._hold_namespace(ns)
        pid = require_str(packet_id, "packet_id")
        tx = self._tx()
        if tx is not None and (ns, pid) in tx.packets:  # inserted by this transaction: no need to read it back
            return packet_from_row(tx.packets[(ns, pid)])
        rows = self._query(f"SELECT {PACKET_COLS} FROM packets WHERE namespace = %s AND packet_id = %s",
                           (ns, pid), table="packets")
        return packet_from_row(rows[0]) if rows else None

    # ---------------------------------------------------------------- descriptors

    def save_extraction(self, namespace: str, descriptor_set: str, packet_id: str,
                        descriptors: Sequence[Descriptor]) -> None:
        """One packet's descriptors for ``descriptor_set``, and its extraction mark (one transaction)."""
        self.save_extractions(namespace, descriptor_set, [(packet_id, descriptors)])

    def save_extractions(self, namespace: str, descriptor_set: str,
                         items: Sequence[tuple[str, Sequence[Descriptor]]]) -> None:
        """:meth:`save_extraction` for several packets in one transaction; a packet's earlier
        descriptors of the set are replaced."""
        ns = validate_namespace(namespace)
        dset = require_str(descriptor_set, "descriptor_set")
        prepared = []
        for packet_id, descriptors in items:
            pid = require_str(packet_id, "packet_id")
            prepared.append((pid, [descriptor_row(ns, dset, pid, d) for d in descriptors]))
        if not prepared:
            return
        pids = [pid for pid, _ in prepared]
        rows = [r for _, rs in prepared for r in rs]
        seen: set[str] = set()
        for r in rows:
            if r[2] in seen:
                raise StoreError(f"{self.path}: descriptors of {ns!r} in set {dset!r} repeat descriptor id {r[2]!r}; "
                                 "descriptor ids must be unique within a set")
            seen.add(r[2])
        with self._write() as c:
            self._lock_namespace(c, ns)
            tx = self._tx()
            unknown = [pid for pid in pids if tx is None or (ns, pid) not in tx.packets]
            present = {r[0] for r in c.execute(
                "SELECT packet_id FROM packets WHERE namespace = %s AND packet_id = ANY(%s)", (ns, unknown))
            } if unknown else set()
            for pid in unknown:
                if pid not in present:
                    raise StoreError(f"{self.path}: namespace {ns!r} has no packet {pid!r} to attach descriptors to")
            c.execute("DELETE FROM descriptors WHERE namespace = %s AND descriptor_set = %s AND packet_id = ANY(%s)",
                      (ns, dset, pids))
            # A descriptor id another packet of the set already has fails the INSERT, and with it
            # the transaction (the error names the constraint when it surfaces).
            c.cursor().executemany(_DESCRIPTOR_INSERT, rows)
            now = time.time()
            c.cursor().executemany(
                "INSERT INTO extraction_markers (namespace, descriptor_set, packet_id, n_descriptors, created_at) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (namespace, descriptor_set, packet_id) DO UPDATE SET "
                "n_descriptors = EXCLUDED.n_descriptors, created_at = EXCLUDED.created_at",
                [(ns, dset, pid, len(rs), now) for pid, rs in prepared])
            self._bump(c, ns, "extract", dset, packet_ids=pids)

    def extracted_packet_ids(self, namespace: str, descriptor_set: str) -> set[str]:
        """Packet ids of ``namespace`` already extracted for ``descriptor_set``."""
        ns = validate_namespace(namespace)
        self._hold_namespace(ns)
        dset = require_str(descriptor_set, "descriptor_set")
        return {r[0] for r in self._query(
            "SELECT packet_id FROM extraction_markers WHERE namespace = %s AND descriptor_set = %s", (ns, dset),
            table="extraction_markers")}

    def descriptors(self, namespace: str, descriptor_set: str) -> list[Descriptor]:
        """All descriptors of ``namespace`` in ``descriptor_set``, by packet ordinal then claim index."""
        ns = validate_namespace(namespace)
        self._hold_namespace(ns)
        dset = require_str(descriptor_set, "descriptor_set")
        rows = self._query(
            f"SELECT {DESCRIPTOR_COLS} FROM descriptors d JOIN packets p "
            "ON p.namespace = d.namespace AND p.packet_id = d.packet_id "
            "WHERE d.namespace = %s AND d.descriptor_set = %s "
            "ORDER BY p.ordinal, d.claim_index, d.descriptor_id COLLATE \"C\"", (ns, dset), table="descriptors")
        return [descriptor_from_row(r, dset) for r in rows]

    def packet_claims(self, namespace: str, packet_id: str) -> list[str]:
        """The text of every descriptor of one packet, under any descriptor set."""
        ns = validate_namespace(namespace)
        self._hold_namespace(ns)
        pid = require_str(packet_id, "packet_id")
        return [r[0] for r in self._query(
            "SELECT text FROM descriptors WHERE namespace = %s AND packet_id = %s ORDER BY descriptor_id COLLATE \"C\"",
            (ns, pid), table="descriptors")]

    # ---------------------------------------------------------------- cells

    def save_cells(self, namespace: str, layout_id: str, cells: Sequence[Cell], *,
                   stored: Sequence[Cell] | None = None) -> None:
        """Replace the cells of ``layout_id`` in ``namespace`` with ``cells`` (one transaction);
        ``stored``: the cells known to be stored now, so only the rows that differ are written
        (see the SQLite store's ``save_cells``)."""
        ns = validate_namespace(namespace)
        lid = require_str(layout_id, "layout_id")
        gone, rows = cell_writes(self.path, ns, lid, cells, stored)
        with self._write() as c:
            self._lock_namespace(c, ns)
            if gone is None:
                c.execute("DELETE FROM cells WHERE namespace = %s AND layout_id = %s", (ns, lid))
            elif gone:
                c.execute("DELETE FROM cells WHERE namespace = %s AND layout_id = %s AND cell_id = ANY(%s)",
                          (ns, lid, gone))
            if rows:
                c.cursor().executemany(
                    "INSERT INTO cells (namespace, layout_id, cell_id, descriptor_ids_json, tokens, people_json, "
                    "keywords_json, session_min, session_max, title, has_time) VALUES (" + ", ".join(["%s"] * 11) + ")",
                    rows)
            self._bump(c, ns, "cells", lid, cell_ids=None if gone is None else {*gone, *(r[2] for r in rows)})

    def cells(self, namespace: str, layout_id: str) -> list[Cell]:
        """The cells of ``layout_id`` in ``namespace``, ordered by cell_id."""
        ns = validate_namespace(namespace)
        self._hold_namespace(ns)
        lid = require_str(layout_id, "layout_id")
        rows = self._query(f"SELECT {CELL_COLS} FROM cells WHERE namespace = %s AND layout_id = %s ORDER BY cell_id",
                           (ns, lid), table="cells")
        return [cell_from_row(r, ns, lid) for r in rows]

    # ---------------------------------------------------------------- embeddings

    def save_embeddings(self, namespace: str, model_id: str, keys: Sequence[str], vectors: np.ndarray, *,
                        content: Sequence[str] | None = None, space: str | None = None) -> None:
        """One float32 vector per key, content-addressed and shared across namespaces (see
        ``MemoryStore.save_embeddings``)."""
        ns = validate_namespace(namespace)
        mid = require_str(model_id, "model_id")
        sp = mid if space is None else require_str(space, "vector space")
        keys, blobs, addresses, dim = vector_rows(ns, mid, keys, vectors, content)
        # In address order: two writers sharing vectors wait for each other in one order.
        fresh = sorted(dict(zip(addresses, blobs)).items())
        with self._write() as c:
            self._lock_namespace(c, ns)
            if not keys:
                self._register(c, ns)
                return
            # Two statements that nobody waits for: the server checks what needs checking and
            # refuses the transaction itself (memcompile_check), so they travel with the next
            # statement that is read, or with COMMIT. First the vectors, with the dimension check
            # against what the space holds already.
            # Every vector of a space was stored through this check, so one row tells the space's
            # dim (as on SQLite): probing for any row of another dim reads every vector of the
            # space, which made this the costliest statement of an append.
            c.execute(
                "WITH first AS MATERIALIZED (SELECT dim FROM vectors WHERE space = %(sp)s LIMIT 1), "
                f"ok AS (SELECT {CHECK_FUNCTION}(NOT EXISTS (SELECT 1 FROM first WHERE dim <> %(dim)s), "
                "format('%%s: embeddings of vector space %%s (model %%s) have dim %%s; got %%s', "
                "%(where)s::text, quote_literal(%(sp)s), quote_literal(%(mid)s), "
                "(SELECT dim FROM first), %(dim)s)) AS ok) "
                "INSERT INTO vectors (space, content, dim, vector) "
                "SELECT %(sp)s, t.c, %(dim)s, t.v FROM ok, unnest(%(cs)s::text[], %(vs)s::bytea[]) AS t(c, v) "
                "WHERE ok.ok ORDER BY t.c ON CONFLICT (space, content) DO NOTHING",
                {"sp": sp, "dim": dim, "mid": mid, "where": self.path, "cs": [a for a, _ in fresh],
                 "vs": [b for _, b in fresh]})
            # Then the keys, pointed at those vectors (this statement sees the rows the one above
            # inserted, and those other writers committed); a key whose vector is not there fails
            # the check. The vectors the keys pointed at before go when nothing else points at them.
            c.execute(
                "WITH new AS (SELECT t.k, v.id FROM unnest(%(keys)s::text[], %(cs)s::text[]) AS t(k, c) "
                "JOIN vectors v ON v.space = %(sp)s AND v.content = t.c), "
                "old AS (SELECT vector_id FROM embeddings WHERE namespace = %(ns)s AND model_id = %(mid)s "
                "AND key = ANY(%(keys)s)), "
                "up AS (INSERT INTO embeddings (namespace, model_id, key, vector_id) "
                "SELECT %(ns)s, %(mid)s, k, id FROM new ON CONFLICT (namespace, model_id, key) "
                "DO UPDATE SET vector_id = EXCLUDED.vector_id RETURNING 1), "
                "gone AS (DELETE FROM vectors d WHERE d.id IN (SELECT vector_id FROM old) "
                "AND d.id NOT IN (SELECT id FROM new) AND NOT EXISTS (SELECT 1 FROM embeddings e "
                "WHERE e.vector_id = d.id AND NOT (e.namespace = %(ns)s AND e.model_id = %(mid)s "
                "AND e.key = ANY(%(keys)s)))) "
                f"SELECT {CHECK_FUNCTION}((SELECT COUNT(*) FROM up) = %(n)s, "
                "%(where)s::text || ': a vector of the embeddings saved for ' || quote_literal(%(ns)s) "
                "|| ' vanished while they were written')",
                {"keys": list(keys), "cs": list(addresses), "sp": sp, "ns": ns, "mid": mid, "n": len(keys),
                 "where": self.path})
            self._bump(c, ns, "embed")

    def _drop_unreferenced(self, c: Any, vector_ids: Sequence[int], *, count: bool = True) -> int:
        """Delete the vectors of ``vector_ids`` that no embeddings row points at; returns how
        many (``count=False``: 0, and nobody waits for the statement's result)."""
        if not vector_ids:
            return 0
        cur = c.execute("DELETE FROM vectors v WHERE v.id = ANY(%s) AND NOT EXISTS "
                        "(SELECT 1 FROM embeddings e WHERE e.vector_id = v.id)", (list(vector_ids),))
        return self._rowcount(cur) if count else 0

    def embeddings(self, namespace: str, model_id: str, keys: Sequence[str]) -> dict[str, np.ndarray]:
        """Stored vectors (1-D float32 arrays) for those of ``keys`` that have one."""
        ns = validate_namespace(namespace)
        self._hold_namespace(ns)
        mid = require_str(model_id, "model_id")
        wanted = list(dict.fromkeys(require_str(k, "embedding key") for k in keys))
        rows = self._query(
            "SELECT e.key, v.dim, v.vector FROM embeddings e JOIN vectors v ON v.id = e.vector_id "
            "WHERE e.namespace = %s AND e.model_id = %s AND e.key = ANY(%s)", (ns, mid, wanted), table="embeddings")
        return {key: vector_from_blob(bytes(blob), dim, f"{ns!r}/{mid!r}/{key!r}") for key, dim, blob in rows}

    def vectors_by_content(self, space: str, content: Sequence[str]) -> dict[str, np.ndarray]:
        """Stored vectors of vector space ``space`` by content address, whichever namespace saved them."""
        sp = require_str(space, "vector space")
        wanted = list(dict.fromkeys(require_str(a, "content address") for a in content))
        rows = self._query("SELECT content, dim, vector FROM vectors WHERE space = %s AND content = ANY(%s)",
                           (sp, wanted), table="vectors")
        return {a: vector_from_blob(bytes(blob), dim, f"{sp!r}/{a!r}") for a, dim, blob in rows}

    # ---------------------------------------------------------------- meta and capsules

    def get_meta(self, namespace: str, key: str) -> str | None:
        """A small per-namespace string value, or ``None``."""
        ns = validate_namespace(namespace)
        self._hold_namespace(ns)
        rows = self._query("SELECT value FROM meta WHERE namespace = %s AND key = %s",
                           (ns, require_str(key, "meta key")), table="meta")
        return rows[0][0] if rows else None

    def set_meta(self, namespace: str, key: str, value: str) -> None:
        """Set (insert or overwrite) a per-namespace string value."""
        ns = validate_namespace(namespace)
        k = require_str(key, "meta key")
        v = require_str(value, "meta value", allow_empty=True)
        with self._write() as c:
            self._lock_namespace(c, ns)
            c.execute("INSERT INTO meta (namespace, key, value) VALUES (%s, %s, %s) "
                      "ON CONFLICT (namespace, key) DO UPDATE SET value = EXCLUDED.value", (ns, k, v))
            self._bump(c, ns, "meta")

    def put_capsules(self, namespace: str, writer: str, budget: int, capsules: Sequence[Mapping[str, Any]]) -> None:
        """Replace the retained evidence capsules of ``namespace`` (one transaction)."""
        ns = validate_namespace(namespace)
        rows = capsule_rows(ns, writer, budget, capsules)
        with self._write() as c:
            self._lock_namespace(c, ns)
            c.execute("DELETE FROM capsules WHERE namespace = %s", (ns,))
            c.cursor().executemany("INSERT INTO capsules (namespace, capsule_id, writer, budget, body) "
                                   "VALUES (%s, %s, %s, %s, %s)", rows)
            self._bump(c, ns, "capsules")

    def inventory(self, namespace: str) -> dict[str, Any]:
        """The names of ``namespace``'s derived rows (``base.StoreInventory``), sorted, in one snapshot."""
        ns = validate_namespace(namespace)
        self._hold_namespace(ns)
        with self._read("inventory") as c:
            sets = [r[0] for r in c.execute("SELECT DISTINCT descriptor_set COLLATE \"C\" FROM extraction_markers "
                                            "WHERE namespace = %s ORDER BY 1", (ns,))]
            layouts = [r[0] for r in c.execute("SELECT DISTINCT layout_id COLLATE \"C\" FROM cells "
                                               "WHERE namespace = %s ORDER BY 1", (ns,))]
            embeddings = [tuple(r) for r in c.execute(
                "SELECT e.model_id, v.space, e.key, v.content FROM embeddings e JOIN vectors v ON v.id = e.vector_id "
                "WHERE e.namespace = %s ORDER BY e.model_id COLLATE \"C\", e.key COLLATE \"C\"", (ns,))]
            meta = [r[0] for r in c.execute("SELECT key FROM meta WHERE namespace = %s ORDER BY key COLLATE \"C\"",
                                            (ns,))]
        return {"descriptor_sets": sets, "layouts": layouts, "embeddings": embeddings, "meta": meta}

    def capsules(self, namespace: str) -> list[dict[str, Any]]:
        """The retained capsules of ``namespace`` plus ``writer`` and ``budget``, by capsule id."""
        ns = validate_namespace(namespace)
        self._hold_namespace(ns)
        out = []
        for cid, writer, budget, body in self._query(
                "SELECT capsule_id, writer, budget, body FROM capsules WHERE namespace = %s "
                "ORDER BY capsule_id COLLATE \"C\"", (ns,), table="capsules"):
            try:
                row = json.loads(body)
            except ValueError as exc:
                raise StoreError(f"{self.path}: capsule {cid!r} of {ns!r} is not JSON ({exc})") from exc
            out.append({**row, "writer": writer, "budget": int(budget)})
        return out

    # ---------------------------------------------------------------- deleting

    def forget(self, namespace: str, *, wait_s: float | None = None) -> ForgetResult:
        """Delete every row of ``namespace`` in one transaction, then vacuum the tables it
        touched. Returns rows deleted per table (as ``MemoryStore.forget``); ``scrub_complete``
        says whether the vacuum ran within ``wait_s`` (default ``forget_wait_s``).

        Waits at most ``wait_s`` for the namespace's lock (another transaction writing it);
        past that :class:`StoreError` is raised and nothing was deleted.
        """
        ns = validate_namespace(namespace)
        budget = self._wait_budget(wait_s)
        deadline = time.monotonic() + budget
        counts: dict[str, int] = {}
        try:
            with self._write() as c:
                c.execute(f"SET LOCAL lock_timeout = {max(1, int(budget * 1000))}")
                self._lock_namespace(c, ns)
                cursors = {table: c.execute(sql or "DELETE FROM embeddings WHERE namespace = %s RETURNING vector_id",
                                            (ns,)) for table, sql in _FORGET_STEPS}
                # Its change log goes too (not counted: ordinals and names of sets, no text).
                c.execute("DELETE FROM changes WHERE namespace = %s", (ns,))
                gone = [r[0] for r in cursors["embeddings"].fetchall()]  # the one wait for all of them
                counts = {table: len(gone) if table == "embeddings" else self._rowcount(cur)
                          for table, cur in cursors.items()}
                # Content-addressed vectors go with their last reference (others still share them).
                counts["vectors"] = self._drop_unreferenced(c, sorted(set(gone)))
                # The counter moves past every generation the namespace had; the NOTIFY tells
                # every server to drop its view of it.
                c.execute(f"SELECT pg_notify(%s, nextval('{GENERATION_SEQUENCE}')::text || ' ' || %s)",
                          (CHANNEL, f"{ns} {self._writer}"))
                tx = self._tx()
                if tx is not None:  # a write after this one in the transaction draws a new generation
                    tx.bumped.discard(ns)
                    tx.generations.pop(ns, None)
                    tx.reserved.pop(ns, None)  # drawn before the forget's value: too small now
                    tx.packets = {k: v for k, v in tx.packets.items() if k[0] != ns}
                self._mark_scrub_pending(c)
        except StoreError as exc:
            if type(exc.__cause__).__name__ == "LockNotAvailable":
                raise StoreError(f"{self.path}: forget {ns!r}: nothing was deleted; another transaction kept the "
                                 f"namespace locked for {budget:g} s") from exc
            raise
        complete = self._vacuum([t for t, n in counts.items() if n], deadline)
        logger.info("forgot namespace %s: %s (vacuum %s)", ns, counts, "done" if complete else "pending")
        return ForgetResult(counts, namespace=ns, scrub_complete=complete)

    def delete_rows(self, plan: Any, *, wait_s: float | None = None) -> ForgetResult:
        """Delete what ``plan`` (a ``build.deletion.DeletionPlan``) names, in one transaction and
        only while the namespace is still at ``plan.generation`` (else ``StalePlanError``), then
        vacuum as ``forget`` does (see ``MemoryStore.delete_rows`` for what goes)."""
        ns = validate_namespace(plan.namespace)
        pid = require_str(plan.packet_id, "packet_id")
        deadline = time.monotonic() + self._wait_budget(wait_s)
        counts: dict[str, int] = {}
        with self._write() as c:
            self._lock_namespace(c, ns)
            if c.execute("SELECT 1 FROM packets WHERE namespace = %s AND packet_id = %s", (ns, pid)).fetchone() is None:
                raise StoreError(f"{self.path}: namespace {ns!r} has no packet {pid!r}")
            if self._tx_generation(ns) != plan.generation:
                raise StalePlanError(f"{self.path}: namespace {ns!r} changed since the deletion of {pid!r} was planned")
            needles = sorted({json.dumps(line, ensure_ascii=False)[1:-1] for line in plan.quoted_lines})
            keys = sorted({r[0] for r in c.execute(
                "SELECT key FROM request_cache WHERE namespace = %s AND EXISTS (SELECT 1 FROM unnest(%s::text[]) n "
                "WHERE strpos(identity_json, n) > 0 OR strpos(response_json, n) > 0)", (ns, needles))}) if needles else []
            counts["run_calls"] = self._rowcount(c.execute("DELETE FROM run_calls WHERE key = ANY(%s)", (keys,)))
            counts["request_cache"] = self._rowcount(c.execute("DELETE FROM request_cache WHERE key = ANY(%s)", (keys,)))
            redo = list(plan.reextract)
            counts["descriptors"] = self._rowcount(c.execute(
                "DELETE FROM descriptors WHERE namespace = %s AND packet_id = ANY(%s)", (ns, redo)))
            counts["extraction_markers"] = self._rowcount(c.execute(
                "DELETE FROM extraction_markers WHERE namespace = %s AND packet_id = ANY(%s)", (ns, redo)))
            counts["cells"] = (self._rowcount(c.execute("DELETE FROM cells WHERE namespace = %s", (ns,)))
                               if plan.drop_cells else 0)
            gone: list[int] = []
            for prefix in plan.embedding_key_prefixes:
                gone += [r[0] for r in c.execute(
                    "DELETE FROM embeddings WHERE namespace = %s AND starts_with(key, %s) RETURNING vector_id",
                    (ns, prefix))]
            counts["embeddings"] = len(gone)
            counts["vectors"] = self._drop_unreferenced(c, sorted(set(gone)))
            counts["meta"] = 0
            for key, value in c.execute("SELECT key, value FROM meta WHERE namespace = %s AND starts_with(key, %s)",
                                        (ns, plan.meta_list_prefix)).fetchall():
                ids = json.loads(value)
                if pid in ids:
                    c.execute("UPDATE meta SET value = %s WHERE namespace = %s AND key = %s",
                              (json.dumps([i for i in ids if i != pid]), ns, key))
                    counts["meta"] += 1
            counts["capsules"] = self._rowcount(c.execute(
                "DELETE FROM capsules WHERE namespace = %s AND EXISTS (SELECT 1 FROM "
                "jsonb_array_elements_text(body::jsonb -> 'sources') s WHERE s = %s)", (ns, pid)))
            tx = self._tx()
            if tx is not None:
                tx.packets.pop((ns, pid), None)
            counts["packets"] = self._rowcount(c.execute("DELETE FROM packets WHERE namespace = %s AND packet_id = %s",
                                          (ns, pid)))
            self._bump(c, ns, "delete")
            self._mark_scrub_pending(c)
        complete = self._vacuum([t for t, n in counts.items() if n], deadline)
        return ForgetResult(counts, namespace=ns, scrub_complete=complete)

    @staticmethod
    def _mark_scrub_pending(c: Any) -> None:
        c.execute("INSERT INTO counters (name, value) VALUES ('scrub_pending', 1) "
                  "ON CONFLICT (name) DO UPDATE SET value = 1")

    def _vacuum(self, tables: Sequence[str], deadline: float, *, full: bool = False) -> bool:
        """VACUUM ``tables`` (each waits for its lock until ``deadline``); True when all ran and
        the pending mark is cleared."""
        wanted = [t for t in tables if t in OUR_TABLES]
        try:
            with self._connection("vacuum failed") as conn:  # autocommit: VACUUM runs outside a transaction
                for table in wanted:
                    left_ms = int((deadline - time.monotonic()) * 1000)
                    if left_ms <= 0:
                        return False
                    conn.execute(f"SET lock_timeout = {left_ms}")
                    try:
                        conn.execute(f"VACUUM {'(FULL) ' if full else ''}{table}")
                    finally:
                        conn.execute("RESET lock_timeout")
                conn.execute("DELETE FROM counters WHERE name = 'scrub_pending'")
        except StoreError as exc:
            logger.warning("%s: the vacuum after a delete did not finish (%s); `memcompile-local scrub` retries it",
                           self.path, exc)
            return False
        return True

    def scrub(self, *, wait_s: float | None = None) -> bool:
        """Rewrite every table of the store (``VACUUM FULL``) so that no dead row's bytes stay in
        its files; waits at most ``wait_s`` for each table's lock. True when all were rewritten.
        While a table is rewritten, every other server's use of it waits: run it off-peak."""
        if self.read_only:
            raise StoreError(f"{self.path}: cannot scrub this store: {self.read_only_reason}")
        return self._vacuum(list(OUR_TABLES), time.monotonic() + self._wait_budget(wait_s), full=True)

    def scrub_pending(self) -> bool:
        """Whether a delete's vacuum has not finished yet."""
        rows = self._query("SELECT value FROM counters WHERE name = 'scrub_pending'", table="counters")
        return bool(rows and rows[0][0])

    def _wait_budget(self, wait_s: float | None) -> float:
        budget = self.forget_wait_s if wait_s is None else wait_s
        if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not budget >= 0:
            raise StoreError(f"wait_s must be a number of seconds >= 0, got {budget!r}")
        return float(budget)

    # ---------------------------------------------------------------- reports

    def stats(self, namespace: str | None = None) -> dict:
        """Counts for the CLI ``stats`` command, in ``MemoryStore.stats``'s shape; ``file_bytes``
        is the size of the store's tables and indexes in the database."""
        ns_filter = optional_namespace(namespace)
        with self._read() as c:
            names = ([r[0] for r in c.execute("SELECT namespace FROM namespaces ORDER BY namespace COLLATE \"C\"")]
                     if ns_filter is None else [ns_filter])
            per_ns: dict[str, dict] = {}
            for ns in names:
                p = c.execute("SELECT COUNT(*), COUNT(DISTINCT session_index) FROM packets WHERE namespace = %s",
                              (ns,)).fetchone()
                cr = c.execute("SELECT COUNT(*), COALESCE(SUM(prompt_tokens), 0)::bigint, "
                               "COALESCE(SUM(completion_tokens), 0)::bigint FROM request_cache WHERE namespace = %s",
                               (ns,)).fetchone()
                per_ns[ns] = {
                    "packets": int(p[0]),
                    "sessions": int(p[1]),
                    "descriptors": _grouped(c, "descriptors", "descriptor_set", ns),
                    "extracted_packets": _grouped(c, "extraction_markers", "descriptor_set", ns),
                    "cells": _grouped(c, "cells", "layout_id", ns),
                    "embeddings": _grouped(c, "embeddings", "model_id", ns),
                    "meta": int(c.execute("SELECT COUNT(*) FROM meta WHERE namespace = %s", (ns,)).fetchone()[0]),
                    "capsules": int(c.execute("SELECT COUNT(*) FROM capsules WHERE namespace = %s",
                                              (ns,)).fetchone()[0]),
                    "cache_entries": int(cr[0]),
                    "tokens": {"prompt": int(cr[1]), "completion": int(cr[2])},
                }
            where, params = ("", ()) if ns_filter is None else (" WHERE namespace = %s", (ns_filter,))
            cr = c.execute("SELECT COUNT(*), COALESCE(SUM(prompt_tokens), 0)::bigint, "
                           "COALESCE(SUM(completion_tokens), 0)::bigint, COUNT(*) FILTER (WHERE namespace IS NULL) "
                           "FROM request_cache" + where, params).fetchone()
            wr = c.execute("SELECT COUNT(*), COALESCE(SUM(prompt_tokens), 0)::bigint, "
                           "COALESCE(SUM(completion_tokens), 0)::bigint FROM waste" + where, params).fetchone()
            pending = c.execute("SELECT value FROM counters WHERE name = 'scrub_pending'").fetchone()
            size = c.execute("SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c "
                             "WHERE c.relkind = 'r' AND c.relname = ANY(%s) "
                             "AND c.relnamespace = current_schema()::regnamespace", (list(OUR_TABLES),)).fetchone()
        return {
            "path": self.path,
            "schema_version": SCHEMA_VERSION,
            "file_bytes": int(size[0]),
            "namespaces": per_ns,
            "cache": {"entries": int(cr[0]), "unscoped_entries": int(cr[3]),
                      "tokens": {"prompt": int(cr[1]), "completion": int(cr[2])}},
            "waste": {"calls": int(wr[0]), "prompt": int(wr[1]), "completion": int(wr[2])},
            "scrub_pending": bool(pending and pending[0]),
        }

    def check(self):
        """The database's own integrity report (``postgres.check.check_database``)."""
        from .check import check_database
        return check_database(self)

    def listen(self, on_change: Callable[[str, int], None], *, own: bool = False):
        """Call ``on_change(namespace, generation)`` from a background thread for every
        generation another store object (another process, usually) commits, and with ``own``
        for this object's commits too; returns the listener (``stop()`` ends it).

        A server's own writes are left out by default: it has already updated (or dropped) its
        views when they commit, and the announcement can arrive before it has."""
        from .listen import GenerationListener
        return GenerationListener(self.url, on_change, channel=CHANNEL,
                                  skip_writer=None if own else self._writer).start()


def _lock_args(ns: str) -> tuple[int, int]:
    from .connection import NAMESPACE_LOCK_CLASS, namespace_lock_key
    return NAMESPACE_LOCK_CLASS, namespace_lock_key(ns)


def _grouped(c: Any, table: str, column: str, ns: str) -> dict[str, int]:
    # table/column come from the fixed call sites above, never from user input.
    return {r[0]: int(r[1]) for r in c.execute(
        f"SELECT {column}, COUNT(*) FROM {table} WHERE namespace = %s GROUP BY {column} "
        f"ORDER BY {column} COLLATE \"C\"", (ns,))}
