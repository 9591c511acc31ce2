"""A pool of PostgreSQL connections shared by a process's threads, and its transaction helpers.

:class:`PgConnection` is the PostgreSQL counterpart of ``store.connection.StoreConnection``:
``_write()`` (one transaction, rolled back on any exception), ``_read()`` (one consistent
snapshot), ``_query()`` (one statement) and ``transaction()`` / ``savepoint()`` for callers that
group writes. A thread inside ``transaction()`` keeps one connection for the whole of it, and
every helper called on that thread joins it; a joined write runs under a savepoint of its
own only where the caller asks for one (``savepoint()``): a write that fails inside a longer
transaction fails the transaction, which the caller rolls back (or undoes to its savepoint).

Writers of one namespace are serialised by a transaction-level advisory lock on the namespace
(``_lock_namespace``): what a transaction read about a namespace it locked (its generation, its
packets, its build lease) stays so until it commits, which is what SQLite's single write lock
gave the callers, without making writers of different namespaces wait for each other.

Every driver failure leaves here as a :class:`StoreError` that names the database by its URL
without the password: a refused connection, a server that went away, a pool with no free
connection within its timeout.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

from ...errors import StoreError
from .url import redact_url, require_driver

logger = logging.getLogger(__name__)

NAMESPACE_LOCK_CLASS = 0x4D43  # "MC": first key of the per-namespace advisory locks

DEFAULT_POOL_SIZE = 8
DEFAULT_POOL_TIMEOUT_S = 10.0
DEFAULT_CONNECT_TIMEOUT_S = 5


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
        if type(exc).__name__ == "PoolTimeout":
            return StoreError(f"{self.path}: {what}: no database connection came free within "
                              f"{self._pool_timeout_s:g} s (pool of {self._pool_size})")
        kind = type(exc).__name__
        return StoreError(f"{self.path}: {what} ({kind}: {_first_line(exc)})")

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"{self.path}: the store is closed")

    @contextmanager
    def _connection(self, what: str) -> Iterator[Any]:
        """A pooled connection for the body (autocommit: a statement outside a transaction commits)."""
        self._check_open()
        psycopg = self._psycopg
        try:
            with self._pool.connection() as conn:
                try:
                    yield conn
                finally:
                    conn._memcompile_used = time.monotonic()
        except (psycopg.Error, OSError) as exc:
            raise self._error(exc, what) from exc
        except Exception as exc:
            if type(exc).__name__ in ("PoolTimeout", "PoolClosed", "TooManyRequests"):
                raise self._error(exc, what) from exc
            raise

    # ------------------------------------------------------------------ transactions

    def _joined(self):
        return getattr(self._local, "conn", None)

    @contextmanager
    def _write(self) -> Iterator[Any]:
        """One write transaction (or, inside ``transaction()``, a savepoint of it)."""
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
            with conn.transaction():
                self._local.locked = set()
                try:
                    yield conn
                finally:
                    self._local.locked = None

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Several writes (and reads) of this thread as one transaction: every helper the body
        calls joins it, so all of it commits together, or nothing on any exception."""
        if self._joined() is not None:
            yield
            return
        with self._write() as conn:
            self._local.conn = conn
            try:
                yield
            finally:
                self._local.conn = None

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """Inside ``transaction()``: the body's writes are undone alone when it raises (the
        exception goes on); the rest of the transaction stands."""
        held = self._joined()
        if held is None:
            with self._write():
                yield
            return
        locked = set(self._local.locked or ())
        try:
            with held.transaction():
                yield
        except BaseException:
            self._local.locked = locked  # the locks taken under the savepoint went with it
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

    def _lock_namespace(self, c: Any, namespace: str) -> None:
        """Hold ``namespace``'s advisory lock until the transaction on ``c`` ends (taken once per
        transaction of this thread)."""
        locked = getattr(self._local, "locked", None)
        if locked is not None and namespace in locked:
            return
        c.execute("SELECT pg_advisory_xact_lock(%s, %s)", (NAMESPACE_LOCK_CLASS, namespace_lock_key(namespace)))
        if locked is not None:
            locked.add(namespace)

    def verify_file(self) -> None:
        """Raise :class:`StoreError` unless the database answers a query now (a health check)."""
        self._query("SELECT 1")

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
