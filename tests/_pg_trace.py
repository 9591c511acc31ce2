"""Counting what a PostgreSQL store sends: statements and round trips, from libpq's own trace.

``RoundTrips(store)`` and then ``with rt.measure() as count:`` turns libpq's protocol trace on
for every pooled connection of ``store`` (those idle when the block starts and those the pool
opens during it) and, when the block ends, counts

* ``round_trips``: how often a connection went from sending to receiving (the client waited
  for the server), which is what costs a context switch to the backend process;
* ``statements``: the statements executed (``Execute`` of the extended protocol plus simple
  ``Query`` messages, BEGIN and COMMIT included);
* ``syncs``: the ``Sync`` messages (one per statement outside a pipeline).

Counting on the wire rather than wrapping psycopg's methods misses nothing the driver sends
by itself (BEGIN, COMMIT, savepoints, the pool's checks). libpq buffers its trace in a stdio
stream that only ``PQuntrace`` flushes, so each block traces into fresh files and untraces
every connection at its end: measure single-threaded work, with no other thread using the pool.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Count:
    round_trips: int = 0
    statements: int = 0
    syncs: int = 0
    texts: list[str] = field(default_factory=list)  # the SQL of each Parse or simple Query, in order

    def __str__(self) -> str:
        return f"{self.round_trips} round trips, {self.statements} statements"


class RoundTrips:
    def __init__(self, store):
        from psycopg import pq

        self._pq = pq
        self._pool = store._pool
        self._dir = Path(tempfile.mkdtemp(prefix="memcompile-pgtrace-"))
        self._lock = threading.Lock()
        self._n = 0
        self._active: list[tuple] | None = None

    def _configure(self, conn) -> None:
        if self._previous is not None:
            self._previous(conn)
        self._trace(conn)

    def _trace(self, conn) -> None:
        with self._lock:
            if self._active is None:
                return
            self._n += 1
            path = self._dir / f"conn{self._n}.trace"
            path.touch()
            f = open(path, "r+b", buffering=0)
            self._active.append((conn, f))
        if self._list_sql:
            conn.prepare_threshold = None
        conn.pgconn.trace(f.fileno())
        conn.pgconn.set_trace_flags(self._pq.Trace.SUPPRESS_TIMESTAMPS | self._pq.Trace.REGRESS_MODE)

    @contextmanager
    def measure(self, *, list_sql: bool = False):
        """Counts of what the body sent (a ``Count``, filled when the block ends). ``list_sql``:
        fill ``Count.texts`` with every statement's SQL (psycopg's prepared statements send no
        SQL after their first uses, so this turns preparing off on the traced connections)."""
        out = Count()
        self._list_sql = list_sql
        self._active = []
        self._previous = self._pool._configure
        self._pool._configure = self._configure
        for conn in list(self._pool._pool):  # the idle connections of the pool
            self._trace(conn)
        try:
            yield out
        finally:
            self._pool._configure = self._previous
            with self._lock:
                active, self._active = self._active, None
            for conn, f in active:
                if not conn.closed:
                    conn.pgconn.untrace()  # flushes libpq's buffered trace
                f.seek(0)
                _count(f.read().decode("utf-8", errors="replace"), out)
                f.close()

    def close(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)


def _count(text: str, out: Count) -> None:
    last = None
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or parts[0] not in ("F", "B"):
            continue
        direction, kind = parts[0], parts[2]
        if direction == "B" and last == "F":
            out.round_trips += 1
        last = direction
        if direction != "F":
            continue
        rest = "\t".join(parts[3:])
        if kind in ("Execute", "Query"):
            out.statements += 1
        if kind == "Query":
            out.texts.append(rest.strip()[:150])
        elif kind == "Parse":
            out.texts.append(rest.strip()[:150])
        elif kind == "Sync":
            out.syncs += 1
