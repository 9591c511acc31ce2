"""A pool of PostgreSQL connections shared by a process's threads, and its transaction helpers.

:class:`PgConnection` is the PostgreSQL counterpart of ``store.connection.StoreConnection``:
``_write()`` (one transaction, rolled back on any exception), ``_read()`` (one consistent
snapshot), ``_query()`` (one statement) and ``transaction()`` / ``savepoint()`` for callers that
group writes. A thread inside ``transaction()`` keeps one connection for the whole of it, and
every helper called on that thread joins it; a joined write runs under a savepoint of its
own only where the caller asks for one (``savepoint()``): a write that fails inside a longer
transaction fails the transaction, which the caller rolls back (or undoes to its savepoint).

A write transaction runs in psycopg's pipeline mode with BEGIN, SAVEPOINT and COMMIT sent as
plain statements: what nobody reads the result of is queued and sent with the next statement
whose result is read (or with COMMIT), so a transaction costs a round trip per read, one per
savepoint and one for its COMMIT, however many rows it writes. Each savepoint's end waits for
its statements, so an error the server raises undoes that savepoint's body and no other; an
error that surfaces at COMMIT fails the whole transaction. A transaction in which a statement
failed is never committed (COMMIT would quietly roll it back; it is refused instead).

Writers of one namespace are serialised by a transaction-level advisory lock on the namespace
(``_lock_namespace``): what a transaction read about a namespace it locked (its generation, its
packets, its build lease) stays so until it commits, which is what SQLite's single write lock
gave the callers, without making writers of different namespaces wait for each other.

Every driver failure leaves here as a :class:`StoreError` that names the database by its URL
without the password: a refused connection, a server that went away, a pool with no free
connection within its timeout.

A database that does not answer at all fails calls at once, as :class:`DatabaseUnreachable`.
A call waits for a pooled connection in slices of :data:`PROBE_SLICE_S`; when none came free
in one, or a pooled connection broke, one connection is opened outside the pool (a probe).
When that fails too, the database is marked unreachable: every call fails at once with that
reason instead of waiting out the pool's timeout (10 s by default) and blaming the pool, and
one call in :data:`RECHECK_S` probes again, so the first call after the database is back
goes through. The pool's timeout message is kept for the case it describes: the database
answers, and every pooled connection is busy.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

from ...errors import StoreError
from .schema import GENERATION_SEQUENCE
from .url import redact_url, require_driver

logger = logging.getLogger(__name__)

NAMESPACE_LOCK_CLASS = 0x4D43  # "MC": first key of the per-namespace advisory locks

DEFAULT_POOL_SIZE = 8
DEFAULT_POOL_TIMEOUT_S = 10.0
DEFAULT_CONNECT_TIMEOUT_S = 5

PROBE_SLICE_S = 0.25
"""How long a call waits for a pooled connection before it asks whether the database answers at all."""

RECHECK_S = 0.5
"""How long a probe's finding stands: while the database is marked unreachable, calls within
this time fail without trying, and one call after it probes again."""

PROBE_CONNECT_TIMEOUT_S = 2  # libpq's smallest effective connect_timeout


class DatabaseUnreachable(StoreError):
    """A call failed because the database did not answer at all (refused, unreachable, gone),
    not because it refused a statement. ``reason``: the driver's words; ``down_s``: seconds
    since the first failed probe of this outage."""

    def __init__(self, message: str, reason: str, down_s: float):
        super().__init__(message)
        self.reason = reason
        self.down_s = down_s


def namespace_lock_key(namespace: str) -> int:
    """The second (32-bit, signed) key of ``namespace``'s advisory lock."""
    return int.from_bytes(hashlib.sha256(namespace.encode("utf-8")).digest()[:4], "big", signed=True)


class PgConnection:
    """A connection pool to the database ``url`` (see the module doc).

    ``read_only`` makes every transaction read-only on the server and every write method raise
    :class:`StoreError` before it sends anything; ``pool_size`` bounds the connections this
    object holds; ``pool_timeout_s`` is how long a call waits for a free one before failing.
    """

    def __init__(self, url: str, *, read_only: bool = False, pool_size: int = DEFAULT_POOL_SIZE,
                 pool_timeout_s: float = DEFAULT_POOL_TIMEOUT_S,
                 connect_timeout_s: int = DEFAULT_CONNECT_TIMEOUT_S):
        self._psycopg, psycopg_pool = require_driver()
        self.url = url
        self.path = redact_url(url)
        self.read_only = bool(read_only)
        self.read_only_reason = "it was opened read-only" if self.read_only else ""
        self._local = threading.local()
        self._closed = True
        # The last probe outside the pool: (why the database did not answer, or None; when),
        # and when the current outage was first seen.
        self._probed: tuple[str | None, float] | None = None
        self._down_since: float | None = None
        self._probe_lock = threading.Lock()
        # A commit returns once its WAL is flushed (and, with synchronous standbys, theirs), even
        # on a server configured otherwise: an acknowledged turn survives the server's crash.
        options = "-c synchronous_commit=on"
        if self.read_only:
            options += " -c default_transaction_read_only=on"
        kwargs: dict[str, Any] = {"autocommit": True, "connect_timeout": int(connect_timeout_s), "options": options}
        self._pool = psycopg_pool.ConnectionPool(
            url, min_size=1, max_size=max(1, int(pool_size)), kwargs=kwargs, timeout=float(pool_timeout_s),
            open=False, check=self._check_idle, name="memcompile-store")
        self._pool_size = int(pool_size)
        self._pool_timeout_s = float(pool_timeout_s)
        try:
            self._pool.open(wait=True, timeout=max(float(connect_timeout_s), 1.0))
        except Exception as exc:
            self._pool.close()
            raise StoreError(f"{self.path}: cannot connect to the database ({_first_line(exc)})") from exc
        self._closed = False

    # ------------------------------------------------------------------ errors

    IDLE_CHECK_S = 1.0
    """A pooled connection unused for longer is pinged before it is handed out (a restarted
    server leaves dead ones behind); one used more recently is handed out as it is."""

    def _check_idle(self, conn: Any) -> None:
        if time.monotonic() - getattr(conn, "_memcompile_used", 0.0) > self.IDLE_CHECK_S:
            conn.execute("")

    def _error(self, exc: BaseException, what: str) -> StoreError:
        """The :class:`StoreError` for a driver failure during ``what``."""
        kind = type(exc).__name__
        psycopg = self._psycopg
        if kind == "PoolTimeout" or isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError, OSError)):
            # A connection-level failure: say so when the database does not answer at all.
            reason = self._reachable()
            if reason is not None:
                return self._unreachable(reason, what)
        if kind == "PoolTimeout":
            return StoreError(f"{self.path}: {what}: no database connection came free within "
                              f"{self._pool_timeout_s:g} s (pool of {self._pool_size})")
        return StoreError(f"{self.path}: {what} ({kind}: {_first_line(exc)})")

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"{self.path}: the store is closed")

    # ------------------------------------------------------------------ reachability

    def _probe(self) -> str | None:
        """Open one connection outside the pool and run a statement: None when the database
        answers, else the driver's reason. Records the finding (see the module doc)."""
        psycopg = self._psycopg
        try:
            with psycopg.connect(self.url, connect_timeout=PROBE_CONNECT_TIMEOUT_S, autocommit=True) as conn:
                conn.execute("SELECT 1")
            reason = None
        except (psycopg.Error, OSError) as exc:
            reason = _first_line(exc)
        now = time.monotonic()
        self._probed = (reason, now)
        if reason is None:
            if self._down_since is not None:
                logger.info("%s: the database answers again", self.path)
            self._down_since = None
        elif self._down_since is None:
            self._down_since = now
            logger.warning("%s: the database is unreachable (%s)", self.path, reason)
        return reason

    def _reachable(self, *, wait: bool = False) -> str | None:
        """None when the database answers, else why not: the last probe's finding while it is
        recent (or while another thread probes, unless ``wait``), else a new probe."""
        probed = self._probed
        if probed is not None and time.monotonic() - probed[1] < RECHECK_S:
            return probed[0]
        if not self._probe_lock.acquire(blocking=wait):
            return probed[0] if probed is not None else None
        try:
            probed = self._probed  # another thread may have probed while this one waited
            if probed is not None and time.monotonic() - probed[1] < RECHECK_S:
                return probed[0]
            return self._probe()
        finally:
            self._probe_lock.release()

    def _unreachable(self, reason: str, what: str) -> DatabaseUnreachable:
        since = self._down_since
        down_s = 0.0 if since is None else max(0.0, time.monotonic() - since)
        return DatabaseUnreachable(f"{self.path}: the database is unreachable ({reason}); {what}", reason, down_s)

    def _fail_fast(self, what: str) -> None:
        """Raise :class:`DatabaseUnreachable` at once while the database is known not to answer."""
        if self._probed is None or self._probed[0] is None:
            return
        reason = self._reachable()
        if reason is not None:
            raise self._unreachable(reason, what)

    def _get(self, what: str) -> Any:
        """A pooled connection, waited for up to the pool's timeout in slices; between slices
        a database that does not answer ends the wait (see the module doc)."""
        deadline = time.monotonic() + self._pool_timeout_s
        while True:
            left = deadline - time.monotonic()
            try:
                return self._pool.getconn(timeout=max(0.001, min(PROBE_SLICE_S, left)))
            except Exception as exc:
                kind = type(exc).__name__
                if kind in ("PoolClosed", "TooManyRequests"):
                    raise self._error(exc, what) from exc
                if kind != "PoolTimeout":
                    raise
                reason = self._reachable()
                if reason is not None:
                    raise self._unreachable(reason, what) from exc
                if left <= PROBE_SLICE_S:
                    raise self._error(exc, what) from exc

    def verify(self, *, wait_s: float = PROBE_SLICE_S) -> None:
        """Raise :class:`StoreError` unless the database answers a statement now: through the
        pool when a connection comes free within ``wait_s``, else by a probe outside it (a busy
        pool is not a failed database). Answers within about ``wait_s`` when the database is
        refused or gone, at once while it is marked unreachable."""
        self._check_open()
        self._fail_fast("checking the database failed")
        psycopg = self._psycopg
        try:
            conn = self._pool.getconn(timeout=wait_s)
        except Exception as exc:
            if type(exc).__name__ not in ("PoolTimeout", "PoolClosed", "TooManyRequests"):
                raise
            reason = self._reachable(wait=True)
            if reason is not None:
                raise self._unreachable(reason, "checking the database failed") from exc
            return
        try:
            with conn:
                conn.execute("SELECT 1")
                conn._memcompile_used = time.monotonic()
        except (psycopg.Error, OSError) as exc:
            raise self._error(exc, "checking the database failed") from exc
        finally:
            self._pool.putconn(conn)

    @contextmanager
    def _connection(self, what: str) -> Iterator[Any]:
        """A pooled connection for the body (autocommit: a statement outside a transaction commits)."""
        self._check_open()
        self._fail_fast(what)
        psycopg = self._psycopg
        conn = self._get(what)
        try:
            with conn:  # as the pool's own context manager: commit or roll back on the way out
                try:
                    yield conn
                finally:
                    conn._memcompile_used = time.monotonic()
        except (psycopg.Error, OSError) as exc:
            raise self._error(exc, what) from exc
        finally:
            self._pool.putconn(conn)

    # ------------------------------------------------------------------ transactions

    def _joined(self):
        tx = getattr(self._local, "tx", None)
        return None if tx is None else tx.conn

    def _tx(self) -> "_Tx | None":
        return getattr(self._local, "tx", None)

    @contextmanager
    def _write(self) -> Iterator[Any]:
        """One write transaction (or, inside ``transaction()``, a part of it)."""
        self._check_open()
        if self.read_only:
            raise StoreError(f"{self.path}: cannot write to this store: {self.read_only_reason}")
        held = self._joined()
        if held is not None:
            try:
                yield held
            except self._psycopg.Error as exc:
                raise self._error(exc, "write failed; the transaction is rolled back") from exc
            return
        with self._connection("write failed and was rolled back") as conn:
            # Pipeline mode: a statement whose result nobody reads (BEGIN, a lock, an INSERT, the
            # generation bump) travels with the next one that is read, or with COMMIT, instead of
            # costing a round trip (a wake-up of the server process) of its own. BEGIN and COMMIT
            # are plain statements here, so they pipeline too.
            tx = None
            try:
                with conn.pipeline() as pipeline:
                    tx = self._local.tx = _Tx(conn, pipeline)
                    conn.execute("BEGIN")
                    yield conn
                    self._local.tx = None
                    if conn.pgconn.transaction_status == self._psycopg.pq.TransactionStatus.INERROR:
                        # A statement failed and its error was handled: COMMIT would roll back quietly.
                        raise StoreError(f"{self.path}: a statement of the transaction failed; nothing was written")
                    done = conn.execute("COMMIT")
                # Leaving the pipeline sent COMMIT with whatever was still queued, and raised the
                # first error of those; COMMIT of a transaction that failed says ROLLBACK.
                if done.statusmessage != "COMMIT":
                    raise StoreError(f"{self.path}: the server rolled the transaction back ({done.statusmessage})")
            except BaseException:
                self._local.tx = None
                self._rollback(conn)
                raise
            finally:
                self._local.tx = None

    def _rollback(self, conn: Any) -> None:
        """End a failed transaction (out of pipeline mode by now); a connection that broke is
        discarded by the pool."""
        psycopg = self._psycopg
        try:
            if not conn.closed and conn.pgconn.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                conn.execute("ROLLBACK")
        except (psycopg.Error, OSError) as exc:
            logger.debug("%s: rollback after a failed write did not finish (%s)", self.path, _first_line(exc))

    def _sync(self) -> None:
        """Inside a transaction: send what is queued and collect its results now (a rowcount,
        or an error that must surface at this point)."""
        tx = self._tx()
        if tx is not None:
            tx.pipeline.sync()

    def _rowcount(self, cur: Any) -> int:
        """The rows ``cur``'s statement changed (in a pipeline its result comes with a sync)."""
        if cur.pgresult is None:
            self._sync()
        return int(cur.rowcount)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Several writes (and reads) of this thread as one transaction: every helper the body
        calls joins it, so all of it commits together, or nothing on any exception."""
        if self._joined() is not None:
            yield
            return
        with self._write():
            yield

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """Inside ``transaction()``: the body's writes are undone alone when it raises (the
        exception goes on); the rest of the transaction stands."""
        tx = self._tx()
        if tx is None:
            with self._write():
                yield
            return
        psycopg, conn = self._psycopg, tx.conn
        tx.savepoints += 1
        name = f"memcompile_sp{tx.savepoints}"
        saved = tx.save()
        conn.execute(f"SAVEPOINT {name}")
        try:
            yield
            conn.execute(f"RELEASE SAVEPOINT {name}")
            tx.pipeline.sync()  # the body's own errors surface here, so they undo only the body
        except BaseException as exc:
            tx.restore(saved)  # the locks, bumps and rows of the body went with it
            try:
                try:
                    tx.pipeline.sync()
                except psycopg.Error:
                    pass
                conn.execute(f"ROLLBACK TO SAVEPOINT {name}")
                conn.execute(f"RELEASE SAVEPOINT {name}")
                tx.pipeline.sync()
            except psycopg.Error as undo:
                # The savepoint is gone (an earlier statement failed): the whole transaction
                # fails, and its COMMIT is refused.
                raise self._error(undo, "write failed and the transaction cannot go on") from exc
            if isinstance(exc, psycopg.Error):
                raise self._error(exc, "write failed and was undone to its savepoint") from exc
            raise

    @contextmanager
    def _read(self, table: str | None = None) -> Iterator[Any]:
        """A consistent snapshot (REPEATABLE READ, read only) for multi-statement reads."""
        what = f"reading table {table} failed" if table else "reading the store failed"
        held = self._joined()
        if held is not None:
            self._check_open()
            try:
                yield held
            except self._psycopg.Error as exc:
                raise self._error(exc, what) from exc
            return
        with self._connection(what) as conn:
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                yield conn

    def _query(self, sql: str, params: Sequence[Any] = (), *, table: str | None = None) -> list[tuple]:
        """The rows of one statement (in the open transaction of this thread, if any)."""
        what = f"reading table {table} failed" if table else "reading the store failed"
        held = self._joined()
        if held is not None:
            self._check_open()
            try:
                return held.execute(sql, params).fetchall()
            except self._psycopg.Error as exc:
                raise self._error(exc, what) from exc
        with self._connection(what) as conn:
            return conn.execute(sql, params).fetchall()

    _LOCK_SQL = ("SELECT pg_advisory_xact_lock(%s, %s), "
                 "(SELECT generation FROM generations WHERE namespace = %s), "
                 f"(SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END FROM {GENERATION_SEQUENCE}), "
                 f"nextval('{GENERATION_SEQUENCE}')")

    def _lock_namespace(self, c: Any, namespace: str) -> None:
        """Hold ``namespace``'s advisory lock until the transaction on ``c`` ends (taken once per
        transaction of this thread).

        The same statement reads the namespace's generation as it stands once the lock is held
        (only a holder of the lock changes it), so ``generation()`` inside the transaction needs
        no statement of its own, and draws the value a write under this lock will make the next
        generation (see ``_reserved``); nobody waits for the row until it is asked for."""
        tx = self._tx()
        if tx is not None and namespace in tx.locked:
            return
        cur = c.execute(self._LOCK_SQL, (NAMESPACE_LOCK_CLASS, namespace_lock_key(namespace), namespace))
        if tx is not None:
            tx.locked.add(namespace)
            tx.generations[namespace] = cur
            tx.reserved[namespace] = cur

    def _reserved(self, namespace: str) -> int | None:
        """Inside a transaction that holds ``namespace``'s lock: the generation value drawn with
        the lock, when its row has already arrived (else None: drawing one now is as cheap as
        waiting for it). Drawn under the lock, it is larger than any generation the namespace
        had, and a reader of a namespace without rows waits for the lock (``generation``)."""
        tx = self._tx()
        cur = None if tx is None else tx.reserved.get(namespace)
        if cur is None or cur.pgresult is None:
            return None
        row = self._lock_row(tx, namespace, cur)
        return int(row[3])

    @staticmethod
    def _lock_row(tx: "_Tx", namespace: str, cur: Any) -> tuple:
        row = tx.rows.get(namespace)
        if row is None or row[0] is not cur:
            row = (cur, cur.fetchone())
            tx.rows[namespace] = row
        return row[1]

    def _tx_generation(self, namespace: str) -> int:
        """Inside a transaction: ``namespace``'s generation (its lock taken first)."""
        tx = self._tx()
        assert tx is not None
        self._lock_namespace(tx.conn, namespace)
        value = tx.generations.get(namespace)
        if isinstance(value, int):
            return value
        if value is None:  # forgotten in this transaction: read it again
            value = tx.conn.execute(self._LOCK_SQL, (NAMESPACE_LOCK_CLASS, namespace_lock_key(namespace),
                                                     namespace))
        row = self._lock_row(tx, namespace, value) if tx.reserved.get(namespace) is value else value.fetchone()
        # A lock row carries (lock, generation, counter, reserved); a bump's row (generation, notify).
        generation = int(row[1] if row[1] is not None else row[2]) if len(row) == 4 else int(row[0])
        tx.generations[namespace] = generation
        return generation

    def verify_file(self) -> None:
        """Raise :class:`StoreError` unless the database answers a query now (a health check:
        see :meth:`verify`, which answers at once while the database is unreachable)."""
        self.verify()

    # ------------------------------------------------------------------ lifetime

    def close(self) -> None:
        """Close every pooled connection. Idempotent; later calls raise :class:`StoreError`."""
        if not self._closed:
            self._closed = True
            self._pool.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r})"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class _Tx:
    """What one thread's open transaction knows: its connection and pipeline, the namespaces
    it has locked, their generations (a number, or the cursor whose row will give it), the
    namespaces it has already moved to a new generation, and the packets it inserted."""

    __slots__ = ("conn", "pipeline", "locked", "generations", "reserved", "rows", "bumped", "packets",
                 "savepoints")

    def __init__(self, conn: Any, pipeline: Any):
        self.conn, self.pipeline = conn, pipeline
        self.locked: set[str] = set()
        self.generations: dict[str, Any] = {}
        self.reserved: dict[str, Any] = {}  # namespace -> the cursor of its lock statement
        self.rows: dict[str, tuple] = {}  # namespace -> (lock cursor, its row) once read
        self.bumped: set[str] = set()
        self.packets: dict[tuple[str, str], tuple] = {}
        self.savepoints = 0

    def save(self) -> tuple:
        return (set(self.locked), dict(self.generations), dict(self.reserved), set(self.bumped),
                dict(self.packets))

    def restore(self, saved: tuple) -> None:
        locked, generations, reserved, bumped, packets = saved
        self.locked, self.generations, self.reserved = set(locked), dict(generations), dict(reserved)
        self.bumped, self.packets = set(bumped), dict(packets)

