"""The durable build queue of the memory service, kept in the same SQLite file as the memories.

Three small tables, created with ``CREATE TABLE IF NOT EXISTS`` by
:meth:`BuildQueue.open_build_queue` (the core schema in ``sqlite_store.py`` does not know them):

* ``service_build_queue``: one row per namespace that has turns waiting for a background build.
  Enqueueing again for a namespace that is already waiting adds to its ``pending_turns`` and bumps
  its ``seq``; a finished build removes the row only when ``seq`` did not move while it ran, so a
  turn appended during a build is never dropped from the queue.
* ``service_build_leases``: who builds a namespace right now, and until when. Every build of a
  namespace (the background worker's and the in-request model-free one) holds the lease, so two
  processes on one file never extract or place the same namespace at once. A lease of a killed
  process simply expires.
* ``service_sessions``: the session index given to each (namespace, session id), so that turns
  appended one at a time by several processes land in one session with one index.

Every method is one write transaction on the store's connection (``BEGIN IMMEDIATE``), so several
server processes can share the queue. Nothing here is lost by a killed process: a row is committed
before the request that appended the turns is acknowledged, and :meth:`BuildQueue.reconcile`
re-enqueues any namespace whose turns are stored but not extracted (a crash between the ingest and
the enqueue transactions).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterable

from .namespace import validate_namespace

_TABLES_SQL = (
    """CREATE TABLE IF NOT EXISTS service_build_queue (
        namespace      TEXT PRIMARY KEY,
        pending_turns  INTEGER NOT NULL,
        seq            INTEGER NOT NULL,
        enqueued_at    REAL NOT NULL,
        attempts       INTEGER NOT NULL DEFAULT 0,
        not_before     REAL NOT NULL DEFAULT 0,
        last_error     TEXT
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS service_build_leases (
        namespace   TEXT PRIMARY KEY,
        owner       TEXT NOT NULL,
        expires_at  REAL NOT NULL
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS service_sessions (
        namespace      TEXT NOT NULL,
        session_id     TEXT NOT NULL,
        session_index  INTEGER NOT NULL,
        PRIMARY KEY (namespace, session_id)
    ) WITHOUT ROWID""",
)


@dataclass(frozen=True)
class Job:
    """A claimed queue entry: build ``namespace``; ``seq`` is the queue row's version when claimed."""

    namespace: str
    seq: int
    pending_turns: int
    attempts: int


class BuildQueue:
    """Durable queue of namespaces to build, leases, and session indexes: the SQLite store's
    ``BuildLeases`` (``store.base``).

    Like :class:`~.ledger.RequestLedger`, it holds the logic and runs on the store's own
    connection (``MemoryStore`` inherits it): every method is one ``_write`` transaction of that
    connection, so the queue shares the store's durability settings and lock.
    ``open_build_queue`` creates its tables once.
    """

    def open_build_queue(self) -> None:
        """Create the queue's tables if this file has none yet (idempotent)."""
        with self._write() as c:
            for stmt in _TABLES_SQL:
                c.execute(stmt)

    # ------------------------------------------------------------------ queue
    def enqueue(self, namespace: str, turns: int, *, limit: int | None = None) -> bool:
        """Add ``turns`` waiting turns to ``namespace``'s entry; False (nothing written) when full.

        ``limit`` bounds the total of waiting turns over all namespaces; a request that would pass
        it is refused so the caller can answer 429.
        """
        ns = validate_namespace(namespace)
        with self._write() as c:
            if limit is not None:
                total = c.execute("SELECT COALESCE(SUM(pending_turns), 0) FROM service_build_queue").fetchone()[0]
                if total + turns > limit:
                    return False
            c.execute(
                "INSERT INTO service_build_queue (namespace, pending_turns, seq, enqueued_at) VALUES (?, ?, 1, ?) "
                "ON CONFLICT (namespace) DO UPDATE SET pending_turns = pending_turns + excluded.pending_turns, "
                "seq = seq + 1",
                (ns, int(turns), time.time()),
            )
        return True

    def claim(self, owner: str, *, lease_s: float = 60.0) -> Job | None:
        """Take the oldest due entry whose namespace nobody builds, leasing it to ``owner``."""
        now = time.time()
        with self._write() as c:
            row = c.execute(
                "SELECT q.namespace, q.seq, q.pending_turns, q.attempts FROM service_build_queue q "
                "LEFT JOIN service_build_leases l ON l.namespace = q.namespace AND l.expires_at > ? "
                "WHERE l.namespace IS NULL AND q.not_before <= ? ORDER BY q.enqueued_at, q.namespace LIMIT 1",
                (now, now),
            ).fetchone()
            if row is None:
                return None
            c.execute(
                "INSERT OR REPLACE INTO service_build_leases (namespace, owner, expires_at) VALUES (?, ?, ?)",
                (row[0], owner, now + lease_s),
            )
        return Job(namespace=row[0], seq=int(row[1]), pending_turns=int(row[2]), attempts=int(row[3]))

    def complete(self, job: Job, owner: str) -> bool:
        """Drop the entry if nothing was enqueued since ``job`` was claimed; release the lease.

        Returns True when the entry is gone (False: new turns came in, it stays for another round).
        """
        with self._write() as c:
            gone = c.execute(
                "DELETE FROM service_build_queue WHERE namespace = ? AND seq = ?", (job.namespace, job.seq)
            ).rowcount
            if not gone:
                # Turns appended during the build: the ones it saw are done, the rest still wait.
                c.execute(
                    "UPDATE service_build_queue SET pending_turns = MAX(pending_turns - ?, 1), attempts = 0, "
                    "last_error = NULL WHERE namespace = ?",
                    (job.pending_turns, job.namespace),
                )
            c.execute("DELETE FROM service_build_leases WHERE namespace = ? AND owner = ?", (job.namespace, owner))
        return bool(gone)

    def fail(self, job: Job, owner: str, error: str, *, retry_in_s: float) -> None:
        """Keep the entry, note the error and retry no earlier than ``retry_in_s`` from now."""
        with self._write() as c:
            c.execute(
                "UPDATE service_build_queue SET attempts = attempts + 1, last_error = ?, not_before = ? "
                "WHERE namespace = ?",
                (error[:500], time.time() + retry_in_s, job.namespace),
            )
            c.execute("DELETE FROM service_build_leases WHERE namespace = ? AND owner = ?", (job.namespace, owner))

    def entry(self, namespace: str) -> dict | None:
        """The waiting entry of ``namespace`` (pending turns, attempts, last error), or None."""
        ns = validate_namespace(namespace)
        rows = self._query(
            "SELECT pending_turns, attempts, last_error, enqueued_at FROM service_build_queue WHERE namespace = ?",
            (ns,),
        )
        if not rows:
            return None
        r = rows[0]
        return {"pending_turns": int(r[0]), "attempts": int(r[1]), "last_error": r[2], "enqueued_at": float(r[3])}

    def depth(self) -> dict[str, int]:
        """``{"namespaces": waiting entries, "turns": waiting turns}`` over the whole store."""
        r = self._query("SELECT COUNT(*), COALESCE(SUM(pending_turns), 0) FROM service_build_queue")[0]
        return {"namespaces": int(r[0]), "turns": int(r[1])}

    def reconcile(self, namespaces_behind: Iterable[tuple[str, int]]) -> int:
        """Enqueue each ``(namespace, unextracted turns)`` that has no entry yet; returns how many.

        The caller computes which namespaces are behind (stored turns not extracted for its
        descriptor set); this closes the gap a crash between ingest and enqueue would leave.
        """
        added = 0
        with self._write() as c:
            for ns, turns in namespaces_behind:
                if turns <= 0:
                    continue
                added += c.execute(
                    "INSERT OR IGNORE INTO service_build_queue (namespace, pending_turns, seq, enqueued_at) "
                    "VALUES (?, ?, 1, ?)",
                    (validate_namespace(ns), int(turns), time.time()),
                ).rowcount
        return added

    # ------------------------------------------------------------------ leases
    def acquire(self, namespace: str, owner: str, *, lease_s: float = 60.0) -> bool:
        """Take the build lease of ``namespace`` for ``owner`` unless someone else holds a live one."""
        ns = validate_namespace(namespace)
        now = time.time()
        with self._write() as c:
            row = c.execute(
                "SELECT owner, expires_at FROM service_build_leases WHERE namespace = ?", (ns,)
            ).fetchone()
            if row is not None and row[0] != owner and row[1] > now:
                return False
            c.execute(
                "INSERT OR REPLACE INTO service_build_leases (namespace, owner, expires_at) VALUES (?, ?, ?)",
                (ns, owner, now + lease_s),
            )
        return True

    def held_by_other(self, namespace: str, owner: str) -> bool:
        """Whether someone other than ``owner`` holds a live build lease of ``namespace``.

        Inside ``MemoryStore.transaction()`` the answer holds until it commits (no other
        process can write meanwhile), which is what a one-transaction append needs instead
        of taking and dropping the lease in two more commits.
        """
        row = self._query("SELECT owner, expires_at FROM service_build_leases WHERE namespace = ?",
                                (validate_namespace(namespace),))
        return bool(row) and row[0][0] != owner and row[0][1] > time.time()

    def reap(self, alive: Callable[[str], bool]) -> int:
        """Drop the leases whose owner ``alive(owner)`` says is gone (a killed process); returns how many.

        Without this a restarted server would wait out the lease of the process it replaces.
        """
        owners = [r[0] for r in self._query("SELECT DISTINCT owner FROM service_build_leases")]
        dead = [o for o in owners if not alive(o)]
        if not dead:
            return 0
        with self._write() as c:
            return sum(c.execute("DELETE FROM service_build_leases WHERE owner = ?", (o,)).rowcount for o in dead)

    def release(self, namespace: str, owner: str) -> None:
        with self._write() as c:
            c.execute("DELETE FROM service_build_leases WHERE namespace = ? AND owner = ?",
                      (validate_namespace(namespace), owner))

    # ------------------------------------------------------------------ sessions
    def session_indexes(self, namespace: str, session_ids: Iterable[str]) -> dict[str, int]:
        """The session index of each id, giving new ids the next free indexes in the order given.

        A session id already stored (in packets or here) keeps its index; a new index is larger
        than every index the namespace has used, so sessions stay in the order they first came.
        """
        ns = validate_namespace(namespace)
        wanted = list(dict.fromkeys(session_ids))
        # The common case (turns of a session already indexed) needs no write transaction.
        known = dict(self._query(
            f"SELECT session_id, session_index FROM service_sessions WHERE namespace = ? "
            f"AND session_id IN ({', '.join('?' * len(wanted))})", (ns, *wanted))) if wanted else {}
        if len(known) == len(wanted):
            return {sid: int(known[sid]) for sid in wanted}
        out: dict[str, int] = {}
        with self._write() as c:
            top = c.execute(
                "SELECT COALESCE(MAX(session_index), 0) FROM service_sessions WHERE namespace = ?", (ns,)
            ).fetchone()[0]
            stored = c.execute(
                "SELECT COALESCE(MAX(session_index), 0) FROM packets WHERE namespace = ?", (ns,)
            ).fetchone()[0]
            top = max(int(top), int(stored))
            for sid in session_ids:
                if sid in out:
                    continue
                row = c.execute(
                    "SELECT session_index FROM service_sessions WHERE namespace = ? AND session_id = ?", (ns, sid)
                ).fetchone()
                if row is None:
                    row = c.execute(
                        "SELECT session_index FROM packets WHERE namespace = ? AND session_id = ? LIMIT 1", (ns, sid)
                    ).fetchone()
                if row is None:
                    top += 1
                    index = top
                else:
                    index = int(row[0])
                c.execute(
                    "INSERT OR IGNORE INTO service_sessions (namespace, session_id, session_index) VALUES (?, ?, ?)",
                    (ns, sid, index),
                )
                out[sid] = index
        return out

    # ------------------------------------------------------------------ forget
    def forget_build_state(self, namespace: str) -> int:
        """Remove the namespace's queue entry, lease and session indexes (after ``store.forget``)."""
        ns = validate_namespace(namespace)
        n = 0
        with self._write() as c:
            for table in ("service_build_queue", "service_build_leases", "service_sessions"):
                n += c.execute(f"DELETE FROM {table} WHERE namespace = ?", (ns,)).rowcount
        return n
