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
* ``PRAGMA user_version`` holds the schema version; a file written by a newer version is refused.

Threading model
---------------
One connection per :class:`MemoryStore`, opened with ``check_same_thread=False`` and guarded by a
re-entrant lock (``threading.RLock``). Every public method takes the lock for its whole duration,
so calls from worker threads (e.g. an HTTP backend filling the request cache) are serialised within
the process. Concurrency between processes is SQLite's file locking plus ``busy_timeout``.

Privacy
-------
``secure_delete=ON`` overwrites deleted content in place; :meth:`MemoryStore.forget` additionally
checkpoints and truncates the WAL and rebuilds the file with VACUUM so that the forgotten text does
not remain in free pages or old WAL frames.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from ..errors import ImmutablePacketError, StoreError
from ..types import Cell, Conversation, Descriptor, EventFields, SourcePacket, content_sha256
from .namespace import validate_namespace

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 2
"""Value of ``PRAGMA user_version`` written by this code; a larger value is refused.

Version 2 added the ``generations`` and ``counters`` tables; a version-1 file is upgraded in place
when it is opened for writing."""

APPLICATION_ID = 0x4D434C31  # "MCL1": marks the file as a memcompile-local store
"""Value of ``PRAGMA application_id`` in every store file."""

_IN_CHUNK = 500  # keys per "IN (...)" query; far below SQLite's bound-parameter limit

# The schema. Composite keys start with the namespace so that every namespaced lookup and the
# per-namespace deletes of forget() are index range scans.
SCHEMA_SQL = """
CREATE TABLE namespaces (
    namespace   TEXT PRIMARY KEY,
    created_at  REAL NOT NULL
) WITHOUT ROWID;

CREATE TABLE packets (
    namespace      TEXT NOT NULL,
    packet_id      TEXT NOT NULL,
    ordinal        INTEGER NOT NULL,
    session_index  INTEGER NOT NULL,
    session_id     TEXT NOT NULL,
    session_time   TEXT NOT NULL,
    speaker        TEXT NOT NULL,
    content        TEXT NOT NULL,
    image_caption  TEXT,
    image_query    TEXT,
    sha256         TEXT NOT NULL,
    PRIMARY KEY (namespace, packet_id),
    UNIQUE (namespace, ordinal)
);

CREATE TABLE extraction_markers (
    namespace       TEXT NOT NULL,
    descriptor_set  TEXT NOT NULL,
    packet_id       TEXT NOT NULL,
    n_descriptors   INTEGER NOT NULL,
    created_at      REAL NOT NULL,
    PRIMARY KEY (namespace, descriptor_set, packet_id),
    FOREIGN KEY (namespace, packet_id) REFERENCES packets (namespace, packet_id) ON DELETE CASCADE
) WITHOUT ROWID;

CREATE TABLE descriptors (
    namespace         TEXT NOT NULL,
    descriptor_set    TEXT NOT NULL,
    descriptor_id     TEXT NOT NULL,
    packet_id         TEXT NOT NULL,
    claim_index       INTEGER NOT NULL,
    text              TEXT NOT NULL,
    speaker           TEXT NOT NULL,
    session_index     INTEGER NOT NULL,
    session_time      TEXT NOT NULL,
    people_json       TEXT NOT NULL,
    keywords_json     TEXT NOT NULL,
    event_time        TEXT NOT NULL,
    interaction_time  TEXT NOT NULL,
    n_tokens          INTEGER NOT NULL,
    needs_profile     INTEGER NOT NULL,
    negated           INTEGER NOT NULL,
    event_json        TEXT NOT NULL,
    PRIMARY KEY (namespace, descriptor_set, descriptor_id),
    FOREIGN KEY (namespace, packet_id) REFERENCES packets (namespace, packet_id) ON DELETE CASCADE
);
CREATE INDEX descriptors_by_packet ON descriptors (namespace, descriptor_set, packet_id, claim_index);

CREATE TABLE cells (
    namespace            TEXT NOT NULL,
    layout_id            TEXT NOT NULL,
    cell_id              INTEGER NOT NULL,
    descriptor_ids_json  TEXT NOT NULL,
    tokens               INTEGER NOT NULL,
    people_json          TEXT NOT NULL,
    keywords_json        TEXT NOT NULL,
    session_min          INTEGER NOT NULL,
    session_max          INTEGER NOT NULL,
    title                TEXT NOT NULL,
    has_time             INTEGER NOT NULL,
    PRIMARY KEY (namespace, layout_id, cell_id)
);

CREATE TABLE embeddings (
    namespace  TEXT NOT NULL,
    model_id   TEXT NOT NULL,
    key        TEXT NOT NULL,
    dim        INTEGER NOT NULL,
    vector     BLOB NOT NULL,
    PRIMARY KEY (namespace, model_id, key)
);

CREATE TABLE request_cache (
    key                TEXT PRIMARY KEY,
    namespace          TEXT,
    stage              TEXT NOT NULL,
    identity_json      TEXT NOT NULL,
    response_json      TEXT NOT NULL,
    prompt_tokens      INTEGER NOT NULL,
    completion_tokens  INTEGER NOT NULL,
    created_at         REAL NOT NULL
);
CREATE INDEX request_cache_by_namespace ON request_cache (namespace, stage);

CREATE TABLE run_calls (
    run_id  TEXT NOT NULL,
    key     TEXT NOT NULL REFERENCES request_cache (key) ON DELETE CASCADE,
    PRIMARY KEY (run_id, key)
) WITHOUT ROWID;
CREATE INDEX run_calls_by_key ON run_calls (key);

CREATE TABLE waste (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id             TEXT,
    namespace          TEXT,
    stage              TEXT NOT NULL,
    prompt_tokens      INTEGER NOT NULL,
    completion_tokens  INTEGER NOT NULL,
    reason             TEXT NOT NULL,
    created_at         REAL NOT NULL
);
CREATE INDEX waste_by_run ON waste (run_id, stage);
CREATE INDEX waste_by_namespace ON waste (namespace);

CREATE TABLE meta (
    namespace  TEXT NOT NULL,
    key        TEXT NOT NULL,
    value      TEXT NOT NULL,
    PRIMARY KEY (namespace, key)
) WITHOUT ROWID;
""" + """
CREATE TABLE generations (
    namespace   TEXT PRIMARY KEY,
    generation  INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE counters (
    name   TEXT PRIMARY KEY,
    value  INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO counters (name, value) VALUES ('generation', 0);
"""

# Statements that turn a version-1 file into a version-2 one (the tables of the part above that
# version 1 lacked, and one generation per existing namespace).
_UPGRADE_1_TO_2 = (
    "CREATE TABLE generations (namespace TEXT PRIMARY KEY, generation INTEGER NOT NULL) WITHOUT ROWID",
    "CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID",
    "INSERT INTO generations (namespace, generation) "
    "SELECT namespace, ROW_NUMBER() OVER (ORDER BY namespace) FROM namespaces",
    "INSERT INTO counters (name, value) SELECT 'generation', COUNT(*) FROM namespaces",
)

_OUR_TABLES = frozenset(
    {
        "namespaces",
        "packets",
        "extraction_markers",
        "descriptors",
        "cells",
        "embeddings",
        "request_cache",
        "run_calls",
        "waste",
        "meta",
        "generations",
        "counters",
    }
)


@dataclass(frozen=True)
class IngestResult:
    """Outcome of one :meth:`MemoryStore.ingest` call.

    ``added`` packets were written; ``skipped`` turns were already stored with identical content.
    """

    namespace: str
    added: int
    skipped: int


# --------------------------------------------------------------------------------------------
# small validators and (de)serialisers
# --------------------------------------------------------------------------------------------


def _require_str(value: object, what: str, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise StoreError(f"{what} must be a str, got {type(value).__name__}")
    if not allow_empty and value == "":
        raise StoreError(f"{what} must not be empty")
    return value


def _require_int(value: object, what: str, *, minimum: int | None = None) -> int:
    # bool is an int subclass; a True token count is a bug, not a count.
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise StoreError(f"{what} must be an int, got {type(value).__name__}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise StoreError(f"{what} must be >= {minimum}, got {value}")
    return value


def _optional_namespace(ns: str | None) -> str | None:
    return None if ns is None else validate_namespace(ns)


def _str_tuple_json(values: Iterable[str], what: str) -> str:
    items = list(values)
    for v in items:
        _require_str(v, what, allow_empty=True)
    return json.dumps(items, ensure_ascii=False)


def _sorted_set_json(values: Iterable[str], what: str) -> str:
    # frozensets have no stable iteration order across processes; store them sorted.
    return _str_tuple_json(sorted(values), what)


def _event_to_json(ev: EventFields) -> str:
    if not isinstance(ev, EventFields):
        raise StoreError(f"Descriptor.event must be EventFields, got {type(ev).__name__}")
    return json.dumps(asdict(ev), ensure_ascii=False, sort_keys=True, allow_nan=False)


def _event_from_json(text: str) -> EventFields:
    raw = json.loads(text)
    kwargs: dict[str, Any] = {}
    for f in fields(EventFields):
        if f.name in raw:
            v = raw[f.name]
            # JSON has no tuples; every list-valued field of EventFields is a tuple.
            kwargs[f.name] = tuple(v) if isinstance(v, list) else v
    return EventFields(**kwargs)


def _descriptor_row(namespace: str, descriptor_set: str, packet_id: str, d: Descriptor) -> tuple:
    if not isinstance(d, Descriptor):
        raise StoreError(f"expected Descriptor, got {type(d).__name__}")
    if d.namespace != namespace:
        raise StoreError(
            f"descriptor {d.descriptor_id!r} has namespace {d.namespace!r}; expected {namespace!r}"
        )
    if d.packet_id != packet_id:
        raise StoreError(
            f"descriptor {d.descriptor_id!r} belongs to packet {d.packet_id!r}; expected {packet_id!r}"
        )
    return (
        namespace,
        descriptor_set,
        _require_str(d.descriptor_id, "Descriptor.descriptor_id"),
        packet_id,
        _require_int(d.claim_index, "Descriptor.claim_index", minimum=0),
        _require_str(d.text, "Descriptor.text", allow_empty=True),
        _require_str(d.speaker, "Descriptor.speaker", allow_empty=True),
        _require_int(d.session_index, "Descriptor.session_index"),
        _require_str(d.session_time, "Descriptor.session_time", allow_empty=True),
        _str_tuple_json(d.people, "Descriptor.people item"),
        _str_tuple_json(d.keywords, "Descriptor.keywords item"),
        _require_str(d.event_time, "Descriptor.event_time", allow_empty=True),
        _require_str(d.interaction_time, "Descriptor.interaction_time", allow_empty=True),
        _require_int(d.n_tokens, "Descriptor.n_tokens", minimum=0),
        int(bool(d.needs_profile)),
        int(bool(d.negated)),
        _event_to_json(d.event),
    )


_DESCRIPTOR_COLS = (
    "d.descriptor_id, d.namespace, d.packet_id, d.claim_index, d.text, d.speaker, d.session_index, "
    "d.session_time, d.people_json, d.keywords_json, d.event_time, d.interaction_time, d.n_tokens, "
    "d.needs_profile, d.event_json, d.negated"
)


def _descriptor_from_row(r: tuple) -> Descriptor:
    return Descriptor(
        descriptor_id=r[0],
        namespace=r[1],
        packet_id=r[2],
        claim_index=r[3],
        text=r[4],
        speaker=r[5],
        session_index=r[6],
        session_time=r[7],
        people=tuple(json.loads(r[8])),
        keywords=tuple(json.loads(r[9])),
        event_time=r[10],
        interaction_time=r[11],
        n_tokens=r[12],
        needs_profile=bool(r[13]),
        event=_event_from_json(r[14]),
        negated=bool(r[15]),
    )


_PACKET_COLS = (
    "namespace, packet_id, ordinal, session_index, session_id, session_time, speaker, content, "
    "image_caption, sha256, image_query"
)


def _packet_from_row(r: tuple) -> SourcePacket:
    return SourcePacket(
        namespace=r[0],
        packet_id=r[1],
        ordinal=r[2],
        session_index=r[3],
        session_id=r[4],
        session_time=r[5],
        speaker=r[6],
        content=r[7],
        image_caption=r[8],
        sha256=r[9],
        image_query=r[10],
    )


def _chunks(items: Sequence[str], size: int = _IN_CHUNK) -> Iterator[Sequence[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


# --------------------------------------------------------------------------------------------
# the store
# --------------------------------------------------------------------------------------------


class MemoryStore:
    """A namespaced, durable store of packets, descriptors, cells, embeddings and the LLM cache.

    ``path`` is the SQLite file (created with its schema when absent; ``":memory:"`` gives a
    private in-memory store for tests). ``busy_timeout_ms`` is how long a write waits for another
    process holding the write lock before failing with :class:`StoreError`.

    Every method that takes a ``namespace`` validates it (see
    :func:`~memcompile_local.store.namespace.validate_namespace`); ``None`` or ``""`` raises
    :class:`~memcompile_local.errors.NamespaceError`.
    """

    def __init__(self, path: str | os.PathLike, *, busy_timeout_ms: int = 30_000):
        busy_timeout_ms = _require_int(busy_timeout_ms, "busy_timeout_ms", minimum=0)
        self._memory = str(path) == ":memory:"
        self.path: str = str(path) if self._memory else str(Path(path))
        self._lock = threading.RLock()
        self._closed = False
        if not self._memory:
            parent = Path(self.path).parent
            if not parent.is_dir():
                raise StoreError(f"{self.path}: the folder {str(parent)!r} does not exist")
        try:
            self._conn = sqlite3.connect(
                self.path,
                timeout=busy_timeout_ms / 1000.0,
                isolation_level=None,  # we issue BEGIN/COMMIT ourselves
                check_same_thread=False,  # shared across threads, guarded by self._lock
            )
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot open the store file ({exc})") from exc
        try:
            self._configure(busy_timeout_ms)
            self._init_schema()
        except BaseException as exc:
            self._conn.close()
            self._closed = True
            if isinstance(exc, sqlite3.Error):
                raise StoreError(f"{self.path}: not a usable store file ({exc})") from exc
            raise

    # ---------------------------------------------------------------- connection management

    def _configure(self, busy_timeout_ms: int) -> None:
        c = self._conn
        try:
            c.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
            c.execute("PRAGMA foreign_keys = ON")
            c.execute("PRAGMA secure_delete = ON")
            if not self._memory:
                mode = self._retry_locked(lambda: c.execute("PRAGMA journal_mode = WAL").fetchone()[0])
                if str(mode).lower() != "wal":
                    # Still atomic and durable with a rollback journal; only concurrency suffers.
                    logger.warning("%s: WAL journal not available (journal_mode=%s)", self.path, mode)
            c.execute("PRAGMA synchronous = FULL")
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: not a usable SQLite store file ({exc})") from exc

    def _retry_locked(self, fn, attempts: int = 50):
        """Run ``fn``, retrying while another process holds a lock the busy handler does not cover.

        Switching a fresh file to WAL needs an exclusive lock, and two processes creating the same
        file at once can see SQLITE_BUSY there without the busy handler being consulted.
        """
        for i in range(attempts):
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                if i == attempts - 1:
                    raise StoreError(f"{self.path}: store stayed locked ({exc})") from exc
                time.sleep(0.02 * (i + 1))
        raise AssertionError("unreachable")

    def _init_schema(self) -> None:
        with self._write() as c:
            version = c.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path}: store schema version {version} is newer than this code supports "
                    f"({SCHEMA_VERSION}); upgrade memcompile-local to open it"
                )
            if version == 0:
                existing = [r[0] for r in c.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
                )]
                if existing:
                    raise StoreError(
                        f"{self.path}: is an SQLite file with other tables ({', '.join(sorted(existing)[:5])}); "
                        "expected an empty file or a memcompile-local store"
                    )
                # executescript would COMMIT our transaction first; run the statements one by one.
                for stmt in SCHEMA_SQL.split(";"):
                    if stmt.strip():
                        c.execute(stmt)
                c.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                c.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            else:
                app = c.execute("PRAGMA application_id").fetchone()[0]
                if app != APPLICATION_ID:
                    raise StoreError(
                        f"{self.path}: application_id {app:#x} is not a memcompile-local store "
                        f"(expected {APPLICATION_ID:#x})"
                    )
                if version == 1:
                    for stmt in _UPGRADE_1_TO_2:
                        c.execute(stmt)
                    c.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
                missing = _OUR_TABLES - tables
                if missing:
                    raise StoreError(f"{self.path}: store is missing tables {sorted(missing)}")

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"{self.path}: the store is closed")

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: BEGIN IMMEDIATE, COMMIT on success, ROLLBACK on any exception."""
        with self._lock:
            self._check_open()
            c = self._conn
            try:
                c.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise StoreError(f"{self.path}: could not get the write lock ({exc})") from exc
            try:
                yield c
            except BaseException as exc:
                # A KeyboardInterrupt mid-batch must not leave a half-written transaction open.
                try:
                    c.execute("ROLLBACK")
                except sqlite3.Error:  # pragma: no cover - rollback after a fatal error
                    logger.exception("%s: rollback failed", self.path)
                if isinstance(exc, sqlite3.Error):
                    raise StoreError(f"{self.path}: write failed and was rolled back ({exc})") from exc
                raise
            else:
                try:
                    c.execute("COMMIT")
                except sqlite3.Error as exc:
                    try:
                        c.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass
                    raise StoreError(f"{self.path}: commit failed ({exc})") from exc

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """A consistent snapshot for multi-statement reads (deferred transaction)."""
        with self._lock:
            self._check_open()
            c = self._conn
            c.execute("BEGIN")
            try:
                yield c
            finally:
                c.execute("COMMIT")

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        with self._lock:
            self._check_open()
            return self._conn.execute(sql, params).fetchall()

    @staticmethod
    def _register(c: sqlite3.Connection, namespace: str) -> None:
        c.execute(
            "INSERT OR IGNORE INTO namespaces (namespace, created_at) VALUES (?, ?)",
            (namespace, time.time()),
        )

    @staticmethod
    def _bump(c: sqlite3.Connection, namespace: str) -> int:
        """Give ``namespace`` a new generation inside the caller's write transaction; return it.

        The value comes from one store-wide counter, so it is larger than every generation any
        namespace has had, including the generations of a namespace that was forgotten and made
        again under the same name.
        """
        c.execute("UPDATE counters SET value = value + 1 WHERE name = 'generation'")
        value = c.execute("SELECT value FROM counters WHERE name = 'generation'").fetchone()[0]
        c.execute(
            "INSERT INTO generations (namespace, generation) VALUES (?, ?) "
            "ON CONFLICT (namespace) DO UPDATE SET generation = excluded.generation",
            (namespace, value),
        )
        return int(value)

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
        with self._read() as c:
            row = c.execute("SELECT generation FROM generations WHERE namespace = ?", (ns,)).fetchone()
            if row is not None:
                return int(row[0])
            return int(c.execute("SELECT value FROM counters WHERE name = 'generation'").fetchone()[0])

    def close(self) -> None:
        """Close the connection. Idempotent; later calls raise :class:`StoreError`."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()

    def __enter__(self) -> "MemoryStore":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"MemoryStore({self.path!r})"

    # ---------------------------------------------------------------- namespaces / packets

    def namespaces(self) -> list[str]:
        """All namespaces that have had anything written, sorted."""
        return [r[0] for r in self._query("SELECT namespace FROM namespaces ORDER BY namespace")]

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
        added = skipped = 0
        with self._write() as c:
            self._register(c, ns)
            row = c.execute("SELECT MAX(ordinal) FROM packets WHERE namespace = ?", (ns,)).fetchone()
            next_ordinal = 0 if row[0] is None else row[0] + 1
            for session, turn in conversation.iter_turns():
                pid = _require_str(turn.packet_id, "Turn.packet_id")
                where = f"namespace {ns!r}, packet {pid!r}"
                new = (
                    _require_int(session.index, f"Session.index ({where})"),
                    _require_str(session.session_id, f"Session.session_id ({where})", allow_empty=True),
                    _require_str(session.time, f"Session.time ({where})", allow_empty=True),
                    _require_str(turn.speaker, f"Turn.speaker ({where})", allow_empty=True),
                    _require_str(turn.text, f"Turn.text ({where})", allow_empty=True),
                    turn.image_caption,
                    turn.image_query,
                )
                for value, name in ((turn.image_caption, "image_caption"), (turn.image_query, "image_query")):
                    if value is not None and not isinstance(value, str):
                        raise StoreError(f"Turn.{name} ({where}) must be a str or None")
                sha = content_sha256(turn.text, turn.image_caption)
                old = c.execute(
                    "SELECT sha256, session_index, session_id, session_time, speaker, image_query "
                    "FROM packets WHERE namespace = ? AND packet_id = ?",
                    (ns, pid),
                ).fetchone()
                if old is not None:
                    diffs = []
                    if old[0] != sha:
                        diffs.append(f"content sha256 {old[0][:12]}.. -> {sha[:12]}..")
                    for name, was, now in zip(
                        ("session_index", "session_id", "session_time", "speaker", "image_query"),
                        old[1:],
                        (new[0], new[1], new[2], new[3], new[6]),
                    ):
                        if was != now:
                            diffs.append(f"{name} {was!r} -> {now!r}")
                    if diffs:
                        raise ImmutablePacketError(
                            f"{self.path}: {where} is already stored with different data "
                            f"({'; '.join(diffs)}); stored packets are immutable, so the whole batch "
                            "was rejected"
                        )
                    skipped += 1
                    continue
                c.execute(
                    f"INSERT INTO packets ({_PACKET_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (ns, pid, next_ordinal, new[0], new[1], new[2], new[3], new[4], new[5], sha, new[6]),
                )
                next_ordinal += 1
                added += 1
            if added:
                self._bump(c, ns)
        logger.debug("ingest %s: added %d, skipped %d", ns, added, skipped)
        return IngestResult(namespace=ns, added=added, skipped=skipped)

    def packets(self, namespace: str) -> list[SourcePacket]:
        """All packets of ``namespace`` in dialogue (ordinal) order."""
        ns = validate_namespace(namespace)
        rows = self._query(
            f"SELECT {_PACKET_COLS} FROM packets WHERE namespace = ? ORDER BY ordinal", (ns,)
        )
        return [_packet_from_row(r) for r in rows]

    def packet_count(self, namespace: str) -> int:
        """Number of packets of ``namespace`` (a cheap check that a memory has not grown)."""
        ns = validate_namespace(namespace)
        return int(self._query("SELECT COUNT(*) FROM packets WHERE namespace = ?", (ns,))[0][0])

    def get_packet(self, namespace: str, packet_id: str) -> SourcePacket | None:
        """One packet by id, or ``None`` when ``namespace`` has no such packet."""
        ns = validate_namespace(namespace)
        rows = self._query(
            f"SELECT {_PACKET_COLS} FROM packets WHERE namespace = ? AND packet_id = ?",
            (ns, _require_str(packet_id, "packet_id")),
        )
        return _packet_from_row(rows[0]) if rows else None

    # ---------------------------------------------------------------- descriptors

    def save_extraction(
        self, namespace: str, descriptor_set: str, packet_id: str, descriptors: Sequence[Descriptor]
    ) -> None:
        """Store one packet's descriptors for ``descriptor_set`` and mark the packet as extracted.

        One transaction. A second call for the same packet and set replaces its descriptors (so a
        re-run of an extractor stays consistent). An empty list still marks the packet done. The
        packet must exist; every descriptor must carry this namespace and packet id.
        """
        ns = validate_namespace(namespace)
        dset = _require_str(descriptor_set, "descriptor_set")
        pid = _require_str(packet_id, "packet_id")
        rows = [_descriptor_row(ns, dset, pid, d) for d in descriptors]
        with self._write() as c:
            if c.execute(
                "SELECT 1 FROM packets WHERE namespace = ? AND packet_id = ?", (ns, pid)
            ).fetchone() is None:
                raise StoreError(f"{self.path}: namespace {ns!r} has no packet {pid!r} to attach descriptors to")
            c.execute(
                "DELETE FROM descriptors WHERE namespace = ? AND descriptor_set = ? AND packet_id = ?",
                (ns, dset, pid),
            )
            try:
                c.executemany(
                    "INSERT INTO descriptors (namespace, descriptor_set, descriptor_id, packet_id, "
                    "claim_index, text, speaker, session_index, session_time, people_json, keywords_json, "
                    "event_time, interaction_time, n_tokens, needs_profile, negated, event_json) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    rows,
                )
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
            self._bump(c, ns)

    def extracted_packet_ids(self, namespace: str, descriptor_set: str) -> set[str]:
        """Packet ids of ``namespace`` already extracted for ``descriptor_set``."""
        ns = validate_namespace(namespace)
        dset = _require_str(descriptor_set, "descriptor_set")
        rows = self._query(
            "SELECT packet_id FROM extraction_markers WHERE namespace = ? AND descriptor_set = ?",
            (ns, dset),
        )
        return {r[0] for r in rows}

    def descriptors(self, namespace: str, descriptor_set: str) -> list[Descriptor]:
        """All descriptors of ``namespace`` in ``descriptor_set``, by packet ordinal then claim index."""
        ns = validate_namespace(namespace)
        dset = _require_str(descriptor_set, "descriptor_set")
        rows = self._query(
            f"SELECT {_DESCRIPTOR_COLS} FROM descriptors d JOIN packets p "
            "ON p.namespace = d.namespace AND p.packet_id = d.packet_id "
            "WHERE d.namespace = ? AND d.descriptor_set = ? "
            "ORDER BY p.ordinal, d.claim_index, d.descriptor_id",
            (ns, dset),
        )
        return [_descriptor_from_row(r) for r in rows]

    # ---------------------------------------------------------------- cells

    def save_cells(self, namespace: str, layout_id: str, cells: Sequence[Cell]) -> None:
        """Replace the cells of ``layout_id`` in ``namespace`` with ``cells`` (one transaction)."""
        ns = validate_namespace(namespace)
        lid = _require_str(layout_id, "layout_id")
        rows = []
        for cell in cells:
            if not isinstance(cell, Cell):
                raise StoreError(f"expected Cell, got {type(cell).__name__}")
            rows.append(
                (
                    ns,
                    lid,
                    _require_int(cell.cell_id, "Cell.cell_id"),
                    _str_tuple_json(cell.descriptor_ids, "Cell.descriptor_ids item"),
                    _require_int(cell.tokens, "Cell.tokens", minimum=0),
                    _sorted_set_json(cell.people, "Cell.people item"),
                    _sorted_set_json(cell.keywords, "Cell.keywords item"),
                    _require_int(cell.session_min, "Cell.session_min"),
                    _require_int(cell.session_max, "Cell.session_max"),
                    _require_str(cell.title, "Cell.title", allow_empty=True),
                    int(bool(cell.has_time)),
                )
            )
        with self._write() as c:
            self._register(c, ns)
            c.execute("DELETE FROM cells WHERE namespace = ? AND layout_id = ?", (ns, lid))
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
            self._bump(c, ns)

    def cells(self, namespace: str, layout_id: str) -> list[Cell]:
        """The cells of ``layout_id`` in ``namespace``, ordered by cell_id."""
        ns = validate_namespace(namespace)
        lid = _require_str(layout_id, "layout_id")
        rows = self._query(
            "SELECT cell_id, descriptor_ids_json, tokens, people_json, keywords_json, session_min, "
            "session_max, title, has_time FROM cells WHERE namespace = ? AND layout_id = ? ORDER BY cell_id",
            (ns, lid),
        )
        return [
            Cell(
                cell_id=r[0],
                descriptor_ids=tuple(json.loads(r[1])),
                tokens=r[2],
                people=frozenset(json.loads(r[3])),
                keywords=frozenset(json.loads(r[4])),
                session_min=r[5],
                session_max=r[6],
                title=r[7],
                has_time=bool(r[8]),
            )
            for r in rows
        ]

    # ---------------------------------------------------------------- embeddings

    def save_embeddings(
        self, namespace: str, model_id: str, keys: Sequence[str], vectors: np.ndarray
    ) -> None:
        """Store one float32 vector per key (row ``i`` of ``vectors`` belongs to ``keys[i]``).

        ``vectors`` must be a finite 2-D array with ``len(keys)`` rows; it is cast to float32
        (float32 input round-trips bit-exactly). Existing vectors of the same keys are replaced.
        All vectors of one (namespace, model_id) must share one dimension.
        """
        ns = validate_namespace(namespace)
        mid = _require_str(model_id, "model_id")
        keys = [_require_str(k, "embedding key") for k in keys]
        arr = np.asarray(vectors)
        if arr.ndim != 2 or arr.shape[0] != len(keys) or arr.shape[1] < 1:
            raise StoreError(
                f"vectors must have shape ({len(keys)}, dim>=1) to match the keys; got {arr.shape}"
            )
        if not np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.complexfloating):
            raise StoreError(f"vectors must be real numbers, got dtype {arr.dtype}")
        arr = np.ascontiguousarray(arr, dtype="<f4")
        if not np.isfinite(arr).all():
            raise StoreError(f"vectors for {ns!r}/{mid!r} contain NaN or infinite values")
        if len(set(keys)) != len(keys):
            raise StoreError(f"embedding keys for {ns!r}/{mid!r} contain duplicates")
        dim = int(arr.shape[1])
        with self._write() as c:
            row = c.execute(
                "SELECT dim FROM embeddings WHERE namespace = ? AND model_id = ? AND dim != ? LIMIT 1",
                (ns, mid, dim),
            ).fetchone()
            if row is not None:
                raise StoreError(
                    f"{self.path}: embeddings of {ns!r} for model {mid!r} have dim {row[0]}; got {dim}"
                )
            self._register(c, ns)
            c.executemany(
                "INSERT OR REPLACE INTO embeddings (namespace, model_id, key, dim, vector) VALUES (?, ?, ?, ?, ?)",
                ((ns, mid, k, dim, arr[i].tobytes()) for i, k in enumerate(keys)),
            )
            if keys:
                self._bump(c, ns)

    def embeddings(self, namespace: str, model_id: str, keys: Sequence[str]) -> dict[str, np.ndarray]:
        """Stored vectors (1-D float32 arrays) for those of ``keys`` that have one."""
        ns = validate_namespace(namespace)
        mid = _require_str(model_id, "model_id")
        wanted = list(dict.fromkeys(_require_str(k, "embedding key") for k in keys))
        out: dict[str, np.ndarray] = {}
        with self._read() as c:
            for chunk in _chunks(wanted):
                marks = ",".join("?" * len(chunk))
                for key, dim, blob in c.execute(
                    f"SELECT key, dim, vector FROM embeddings WHERE namespace = ? AND model_id = ? "
                    f"AND key IN ({marks})",
                    (ns, mid, *chunk),
                ):
                    if len(blob) != 4 * dim:
                        raise StoreError(
                            f"{self.path}: embedding {ns!r}/{mid!r}/{key!r} has {len(blob)} bytes; "
                            f"expected {4 * dim} for dim {dim}"
                        )
                    out[key] = np.frombuffer(blob, dtype="<f4").astype(np.float32)  # writable copy
        return out

    # ---------------------------------------------------------------- request cache and ledger

    def cache_get(self, key: str) -> dict | None:
        """The cached response of request ``key`` or ``None``.

        The dict holds ``text``, ``parsed``, ``prompt_tokens``, ``completion_tokens``,
        ``finish_reason`` and ``stage`` (plus any other keys the response was stored with).
        """
        k = _require_str(key, "cache key")
        rows = self._query(
            "SELECT stage, response_json, prompt_tokens, completion_tokens FROM request_cache WHERE key = ?",
            (k,),
        )
        if not rows:
            return None
        stage, response_json, pt, ct = rows[0]
        out = json.loads(response_json)
        out.setdefault("text", "")
        out.setdefault("parsed", None)
        out.setdefault("finish_reason", None)
        out["prompt_tokens"] = pt
        out["completion_tokens"] = ct
        out["stage"] = stage
        return out

    def cache_put(
        self, key: str, *, namespace: str | None, stage: str, identity_json: str, response: dict
    ) -> bool:
        """Cache ``response`` under ``key``; ``True`` when newly inserted.

        First write wins: an existing key is left unchanged and ``False`` is returned. ``namespace``
        may be ``None`` for requests not tied to one memory (e.g. judging); when given it is
        validated and :meth:`forget` removes the entry. ``identity_json`` must be JSON (the
        canonical request identity, kept for audits); ``response`` must be a JSON-serialisable dict
        whose ``prompt_tokens``/``completion_tokens`` (default 0) feed :meth:`token_totals`.
        """
        k = _require_str(key, "cache key")
        ns = _optional_namespace(namespace)
        st = _require_str(stage, "stage")
        _require_str(identity_json, "identity_json")
        try:
            json.loads(identity_json)
        except ValueError as exc:
            raise StoreError(f"identity_json of cache key {k!r} is not JSON ({exc})") from exc
        if not isinstance(response, dict):
            raise StoreError(f"response must be a dict, got {type(response).__name__}")
        pt = _require_int(response.get("prompt_tokens", 0), "response['prompt_tokens']", minimum=0)
        ct = _require_int(response.get("completion_tokens", 0), "response['completion_tokens']", minimum=0)
        try:
            # NaN is allowed: Python's json parser accepts it in model output, and a valid response
            # must not become uncacheable because of it.
            body = json.dumps(response, ensure_ascii=False, sort_keys=True)
        except (TypeError, ValueError) as exc:
            raise StoreError(f"response of cache key {k!r} is not JSON-serialisable ({exc})") from exc
        with self._write() as c:
            cur = c.execute(
                "INSERT OR IGNORE INTO request_cache (key, namespace, stage, identity_json, response_json, "
                "prompt_tokens, completion_tokens, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (k, ns, st, identity_json, body, pt, ct, time.time()),
            )
            inserted = cur.rowcount == 1
            if inserted and ns is not None:
                self._register(c, ns)
        return inserted

    def record_waste(
        self,
        *,
        stage: str,
        namespace: str | None,
        prompt_tokens: int,
        completion_tokens: int,
        reason: str,
        run_id: str | None = None,
    ) -> None:
        """Log tokens spent on a call whose output was discarded (invalid output, retry, ...)."""
        st = _require_str(stage, "stage")
        ns = _optional_namespace(namespace)
        pt = _require_int(prompt_tokens, "prompt_tokens", minimum=0)
        ct = _require_int(completion_tokens, "completion_tokens", minimum=0)
        why = _require_str(reason, "reason", allow_empty=True)
        rid = None if run_id is None else _require_str(run_id, "run_id")
        with self._write() as c:
            c.execute(
                "INSERT INTO waste (run_id, namespace, stage, prompt_tokens, completion_tokens, reason, "
                "created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (rid, ns, st, pt, ct, why, time.time()),
            )

    def mark_used(self, run_id: str, keys: Iterable[str]) -> None:
        """Record that run ``run_id`` used the cache entries ``keys`` (idempotent).

        Every key must already be in the cache; an unknown key raises :class:`StoreError` and
        nothing of the call is recorded.
        """
        rid = _require_str(run_id, "run_id")
        ks = list(dict.fromkeys(_require_str(k, "cache key") for k in keys))
        if not ks:
            return
        with self._write() as c:
            try:
                c.executemany(
                    "INSERT OR IGNORE INTO run_calls (run_id, key) VALUES (?, ?)", ((rid, k) for k in ks)
                )
            except sqlite3.IntegrityError as exc:
                raise StoreError(
                    f"{self.path}: run {rid!r} marks a key that is not in the request cache ({exc})"
                ) from exc

    def token_totals(
        self, *, run_id: str | None = None, namespace: str | None = None
    ) -> dict[str, dict]:
        """Per stage ``{"prompt", "completion", "calls"}`` over unique cache entries.

        With ``run_id``: only entries that run marked used. With ``namespace``: only entries cached
        under that namespace. With both: both restrictions. With neither: the whole cache.
        """
        ns = _optional_namespace(namespace)
        sql = "SELECT c.stage, SUM(c.prompt_tokens), SUM(c.completion_tokens), COUNT(*) FROM request_cache c"
        params: list[Any] = []
        if run_id is not None:
            sql += " JOIN run_calls r ON r.key = c.key AND r.run_id = ?"
            params.append(_require_str(run_id, "run_id"))
        if ns is not None:
            sql += " WHERE c.namespace = ?"
            params.append(ns)
        sql += " GROUP BY c.stage ORDER BY c.stage"
        return {
            r[0]: {"prompt": int(r[1]), "completion": int(r[2]), "calls": int(r[3])}
            for r in self._query(sql, params)
        }

    def waste_totals(self, *, run_id: str | None = None) -> dict[str, dict]:
        """Per stage ``{"prompt", "completion", "calls"}`` of wasted calls (of ``run_id`` when given)."""
        sql = "SELECT stage, SUM(prompt_tokens), SUM(completion_tokens), COUNT(*) FROM waste"
        params: list[Any] = []
        if run_id is not None:
            sql += " WHERE run_id = ?"
            params.append(_require_str(run_id, "run_id"))
        sql += " GROUP BY stage ORDER BY stage"
        return {
            r[0]: {"prompt": int(r[1]), "completion": int(r[2]), "calls": int(r[3])}
            for r in self._query(sql, params)
        }

    # ---------------------------------------------------------------- meta

    def get_meta(self, namespace: str, key: str) -> str | None:
        """A small per-namespace string value (build fingerprints, ...), or ``None``."""
        ns = validate_namespace(namespace)
        rows = self._query(
            "SELECT value FROM meta WHERE namespace = ? AND key = ?", (ns, _require_str(key, "meta key"))
        )
        return rows[0][0] if rows else None

    def set_meta(self, namespace: str, key: str, value: str) -> None:
        """Set (insert or overwrite) a per-namespace string value."""
        ns = validate_namespace(namespace)
        k = _require_str(key, "meta key")
        v = _require_str(value, "meta value", allow_empty=True)
        with self._write() as c:
            self._register(c, ns)
            c.execute("INSERT OR REPLACE INTO meta (namespace, key, value) VALUES (?, ?, ?)", (ns, k, v))
            self._bump(c, ns)

    # ---------------------------------------------------------------- housekeeping

    def forget(self, namespace: str) -> dict[str, int]:
        """Delete everything stored for ``namespace`` and scrub it from the file.

        Removes packets, descriptors, extraction markers, cells, embeddings, meta, waste rows,
        request-cache entries cached under the namespace and the run_calls that point at them, in
        one transaction; other namespaces are untouched. Then checkpoints and truncates the WAL and
        VACUUMs so the deleted text is gone from the file bytes. Returns rows deleted per table.
        """
        ns = validate_namespace(namespace)
        counts: dict[str, int] = {}
        with self._write() as c:
            # Children before parents, so that each count is what that table lost (no cascades).
            steps = (
                ("run_calls", "DELETE FROM run_calls WHERE key IN "
                              "(SELECT key FROM request_cache WHERE namespace = ?)"),
                ("request_cache", "DELETE FROM request_cache WHERE namespace = ?"),
                ("descriptors", "DELETE FROM descriptors WHERE namespace = ?"),
                ("extraction_markers", "DELETE FROM extraction_markers WHERE namespace = ?"),
                ("packets", "DELETE FROM packets WHERE namespace = ?"),
                ("cells", "DELETE FROM cells WHERE namespace = ?"),
                ("embeddings", "DELETE FROM embeddings WHERE namespace = ?"),
                ("meta", "DELETE FROM meta WHERE namespace = ?"),
                ("waste", "DELETE FROM waste WHERE namespace = ?"),
                ("namespaces", "DELETE FROM namespaces WHERE namespace = ?"),
                ("generations", "DELETE FROM generations WHERE namespace = ?"),
            )
            for table, sql in steps:
                counts[table] = c.execute(sql, (ns,)).rowcount
            # The name leaves the file with its data; the counter still moves past every
            # generation the namespace had, so generation() never repeats an old value.
            c.execute("UPDATE counters SET value = value + 1 WHERE name = 'generation'")
        self._scrub()
        logger.info("forgot namespace %s: %s", ns, counts)
        return counts

    def _scrub(self) -> None:
        """Move everything into the main file, rebuild it without free pages, and empty the WAL."""
        with self._lock:
            self._check_open()
            c = self._conn
            if self._memory:
                c.execute("VACUUM")
                return
            self._checkpoint_truncate()
            c.execute("VACUUM")  # in WAL mode the rebuilt pages go to the WAL ...
            if not self._checkpoint_truncate():  # ... so copy them back and truncate it again
                logger.warning(
                    "%s: another connection kept the WAL busy; deleted data may remain in %s-wal "
                    "until the next checkpoint",
                    self.path,
                    self.path,
                )

    def _checkpoint_truncate(self, attempts: int = 20) -> bool:
        for i in range(attempts):
            busy, _log, _done = self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if busy == 0:
                return True
            time.sleep(0.05 * (i + 1))
        return False

    def stats(self, namespace: str | None = None) -> dict:
        """Counts for the CLI ``stats`` command.

        Returns ``{"path", "schema_version", "file_bytes", "namespaces": {ns: {...}}, "cache": {...},
        "waste": {...}}``. Each namespace entry has ``packets``, ``sessions``, ``descriptors`` and
        ``extracted_packets`` (both per descriptor set), ``cells`` (per layout), ``embeddings`` (per
        model), ``meta``, ``cache_entries`` and ``tokens`` (``{"prompt", "completion"}`` of its cache
        entries). With ``namespace`` only that namespace is listed and ``cache``/``waste`` are
        restricted to it.
        """
        ns_filter = _optional_namespace(namespace)
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
