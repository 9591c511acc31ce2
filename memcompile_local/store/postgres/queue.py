"""The service's build queue, build leases and session numbers on PostgreSQL (``BuildLeases``).

The same rules as ``store.queue.BuildQueue`` on SQLite, for servers on several machines:

* ``claim`` takes the oldest due entry with ``SELECT ... FOR UPDATE SKIP LOCKED``, so two
  workers claiming at once get different namespaces instead of queueing behind each other;
* a lease is a row with an expiry time read from the database's clock (servers' clocks may
  differ); a worker that dies stops renewing it and it simply expires;
* every lease change of a namespace holds that namespace's advisory lock, as the namespace's
  writes do, so "is anyone else building this namespace" asked inside a transaction stays
  answered until it commits.
"""

from __future__ import annotations

import time
from typing import Callable, Iterable

from ..namespace import validate_namespace
from ..queue import Job

_NOW = "extract(epoch from clock_timestamp())"


class PgBuildQueue:
    """Queue, lease and session methods, mixed into the PostgreSQL store."""

    def open_build_queue(self) -> None:
        """The queue's tables are part of the schema here; only check that the store is open."""
        self._check_open()  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ queue
    def enqueue(self, namespace: str, turns: int, *, limit: int | None = None) -> bool:
        """Add ``turns`` waiting turns to ``namespace``'s entry; False (nothing written) when the
        total of waiting turns would pass ``limit``."""
        ns = validate_namespace(namespace)
        with self._write() as c:  # type: ignore[attr-defined]
            if limit is not None:
                total = c.execute("SELECT COALESCE(SUM(pending_turns), 0)::bigint FROM service_build_queue").fetchone()[0]
                if total + turns > limit:
                    return False
            c.execute(
                "INSERT INTO service_build_queue (namespace, pending_turns, seq, enqueued_at) VALUES (%s, %s, 1, %s) "
                "ON CONFLICT (namespace) DO UPDATE SET pending_turns = service_build_queue.pending_turns "
                "+ EXCLUDED.pending_turns, seq = service_build_queue.seq + 1", (ns, int(turns), time.time()))
        return True

    def claim(self, owner: str, *, lease_s: float = 60.0) -> Job | None:
        """Take the oldest due entry whose namespace nobody builds, leasing it to ``owner``."""
        with self._write() as c:  # type: ignore[attr-defined]
            row = c.execute(
                "SELECT q.namespace, q.seq, q.pending_turns, q.attempts FROM service_build_queue q "
                f"WHERE q.not_before <= {_NOW} AND NOT EXISTS (SELECT 1 FROM service_build_leases l "
                f"WHERE l.namespace = q.namespace AND l.expires_at > {_NOW}) "
                "ORDER BY q.enqueued_at, q.namespace LIMIT 1 FOR UPDATE OF q SKIP LOCKED").fetchone()
            if row is None:
                return None
            self._lock_namespace(c, row[0])  # type: ignore[attr-defined]
            # Looked at again under the namespace's lock: an in-request build may have leased it.
            taken = c.execute(f"SELECT 1 FROM service_build_leases WHERE namespace = %s AND owner <> %s "
                              f"AND expires_at > {_NOW}", (row[0], owner)).fetchone()
            if taken is not None:
                return None
            self._put_lease(c, row[0], owner, lease_s)
        return Job(namespace=row[0], seq=int(row[1]), pending_turns=int(row[2]), attempts=int(row[3]))

    @staticmethod
    def _put_lease(c, ns: str, owner: str, lease_s: float) -> None:
        c.execute(
            f"INSERT INTO service_build_leases (namespace, owner, expires_at) VALUES (%s, %s, {_NOW} + %s) "
            "ON CONFLICT (namespace) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at",
            (ns, owner, float(lease_s)))

    def complete(self, job: Job, owner: str) -> bool:
        """Drop the entry if nothing was enqueued since ``job`` was claimed; release the lease.
        True when the entry is gone (False: new turns came in, it stays for another round)."""
        with self._write() as c:  # type: ignore[attr-defined]
            gone = self._rowcount(c.execute("DELETE FROM service_build_queue WHERE namespace = %s AND seq = %s",
                             (job.namespace, job.seq)))
            if not gone:
                c.execute(
                    "UPDATE service_build_queue SET pending_turns = GREATEST(pending_turns - %s, 1), attempts = 0, "
                    "last_error = NULL WHERE namespace = %s", (job.pending_turns, job.namespace))
            c.execute("DELETE FROM service_build_leases WHERE namespace = %s AND owner = %s", (job.namespace, owner))
        return bool(gone)

    def fail(self, job: Job, owner: str, error: str, *, retry_in_s: float) -> None:
        """Keep the entry, note the error and retry no earlier than ``retry_in_s`` from now."""
        with self._write() as c:  # type: ignore[attr-defined]
            c.execute(
                "UPDATE service_build_queue SET attempts = attempts + 1, last_error = %s, not_before = "
                f"{_NOW} + %s WHERE namespace = %s", (error[:500], float(retry_in_s), job.namespace))
            c.execute("DELETE FROM service_build_leases WHERE namespace = %s AND owner = %s", (job.namespace, owner))

    def entry(self, namespace: str) -> dict | None:
        """The waiting entry of ``namespace`` (pending turns, attempts, last error), or None."""
        rows = self._query(  # type: ignore[attr-defined]
            "SELECT pending_turns, attempts, last_error, enqueued_at FROM service_build_queue WHERE namespace = %s",
            (validate_namespace(namespace),))
        if not rows:
            return None
        r = rows[0]
        return {"pending_turns": int(r[0]), "attempts": int(r[1]), "last_error": r[2], "enqueued_at": float(r[3])}

    def depth(self) -> dict[str, int]:
        """``{"namespaces": waiting entries, "turns": waiting turns}`` over the whole store."""
        r = self._query("SELECT COUNT(*), COALESCE(SUM(pending_turns), 0)::bigint FROM service_build_queue")[0]  # type: ignore[attr-defined]
        return {"namespaces": int(r[0]), "turns": int(r[1])}

    def reconcile(self, namespaces_behind: Iterable[tuple[str, int]]) -> int:
        """Enqueue each ``(namespace, unextracted turns)`` that has no entry yet; returns how many."""
        added = 0
        with self._write() as c:  # type: ignore[attr-defined]
            for ns, turns in namespaces_behind:
                if turns <= 0:
                    continue
                added += self._rowcount(c.execute(
                    "INSERT INTO service_build_queue (namespace, pending_turns, seq, enqueued_at) "
                    "VALUES (%s, %s, 1, %s) ON CONFLICT (namespace) DO NOTHING",
                    (validate_namespace(ns), int(turns), time.time())))
        return added

    # ------------------------------------------------------------------ leases
    def acquire(self, namespace: str, owner: str, *, lease_s: float = 60.0) -> bool:
        """Take the build lease of ``namespace`` for ``owner`` unless someone else holds a live one."""
        ns = validate_namespace(namespace)
        with self._write() as c:  # type: ignore[attr-defined]
            self._lock_namespace(c, ns)  # type: ignore[attr-defined]
            row = c.execute(f"SELECT owner, expires_at > {_NOW} FROM service_build_leases WHERE namespace = %s",
                            (ns,)).fetchone()
            if row is not None and row[0] != owner and row[1]:
                return False
            self._put_lease(c, ns, owner, lease_s)
        return True

    def held_by_other(self, namespace: str, owner: str) -> bool:
        """Whether someone other than ``owner`` holds a live build lease of ``namespace``.

        Inside ``transaction()`` the namespace's lock is taken first, so the answer holds until
        the transaction commits (no lease of it can be taken meanwhile)."""
        ns = validate_namespace(namespace)
        held = self._joined()  # type: ignore[attr-defined]
        if held is not None:
            self._lock_namespace(held, ns)  # type: ignore[attr-defined]
        rows = self._query(f"SELECT 1 FROM service_build_leases WHERE namespace = %s AND owner <> %s "  # type: ignore[attr-defined]
                           f"AND expires_at > {_NOW}", (ns, owner))
        return bool(rows)

    def reap(self, alive: Callable[[str], bool]) -> int:
        """Drop the leases whose owner ``alive(owner)`` says is gone; returns how many."""
        owners = [r[0] for r in self._query("SELECT DISTINCT owner FROM service_build_leases")]  # type: ignore[attr-defined]
        dead = [o for o in owners if not alive(o)]
        if not dead:
            return 0
        with self._write() as c:  # type: ignore[attr-defined]
            return self._rowcount(c.execute("DELETE FROM service_build_leases WHERE owner = ANY(%s)", (dead,)))

    def release(self, namespace: str, owner: str) -> None:
        with self._write() as c:  # type: ignore[attr-defined]
            c.execute("DELETE FROM service_build_leases WHERE namespace = %s AND owner = %s",
                      (validate_namespace(namespace), owner))

    # ------------------------------------------------------------------ sessions
    def session_indexes(self, namespace: str, session_ids: Iterable[str]) -> dict[str, int]:
        """The session index of each id, giving new ids the next free indexes in the order given
        (an id already stored, here or in packets, keeps its index)."""
        ns = validate_namespace(namespace)
        wanted = list(dict.fromkeys(session_ids))
        if not wanted:
            return {}
        known = dict(self._query(  # type: ignore[attr-defined]
            "SELECT session_id, session_index FROM service_sessions WHERE namespace = %s AND session_id = ANY(%s)",
            (ns, wanted)))
        if len(known) == len(wanted):
            return {sid: int(known[sid]) for sid in wanted}
        out: dict[str, int] = {}
        with self._write() as c:  # type: ignore[attr-defined]
            self._lock_namespace(c, ns)  # type: ignore[attr-defined]
            top = max(
                int(c.execute("SELECT COALESCE(MAX(session_index), 0) FROM service_sessions WHERE namespace = %s",
                              (ns,)).fetchone()[0]),
                int(c.execute("SELECT COALESCE(MAX(session_index), 0) FROM packets WHERE namespace = %s",
                              (ns,)).fetchone()[0]))
            for sid in wanted:
                row = c.execute("SELECT session_index FROM service_sessions WHERE namespace = %s AND session_id = %s",
                                (ns, sid)).fetchone()
                if row is None:
                    row = c.execute("SELECT session_index FROM packets WHERE namespace = %s AND session_id = %s "
                                    "LIMIT 1", (ns, sid)).fetchone()
                if row is None:
                    top += 1
                    index = top
                else:
                    index = int(row[0])
                c.execute("INSERT INTO service_sessions (namespace, session_id, session_index) VALUES (%s, %s, %s) "
                          "ON CONFLICT DO NOTHING", (ns, sid, index))
                out[sid] = index
        return out

    # ------------------------------------------------------------------ forget
    def forget_build_state(self, namespace: str) -> int:
        """Remove the namespace's queue entry, lease, session indexes and import job status
        (after ``forget``)."""
        ns = validate_namespace(namespace)
        n = 0
        with self._write() as c:  # type: ignore[attr-defined]
            for table in ("service_build_queue", "service_build_leases", "service_sessions", "service_import_jobs"):
                n += self._rowcount(c.execute(f"DELETE FROM {table} WHERE namespace = %s", (ns,)))
        return n
