"""One SQLite connection shared by a process's threads, and its transaction helpers.

:class:`StoreConnection` opens the file (read-write, or read-only with ``mode=ro``), serialises
every use of the connection with a re-entrant lock, and gives subclasses three helpers:
``_write()`` (one ``BEGIN IMMEDIATE`` transaction, rolled back on any exception), ``_read()`` (one
consistent snapshot) and ``_query()``. Every SQLite or text-decoding failure leaves them as a
:class:`StoreError` that names the file and the table, so a damaged or locked file never reaches
a caller as a bare ``sqlite3`` exception.

Opening never changes a file it has not validated: this module only connects (and refuses paths
that are missing when they may not be created, or that are not SQLite files); the schema checks
and the switch to WAL belong to the store that subclasses it.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence
from urllib.parse import quote

from ..errors import StoreError

logger = logging.getLogger(__name__)

# Failures while reading a damaged file: DatabaseError (malformed image), OperationalError (text
# that is not UTF-8), and UnicodeDecodeError (SQLite's own error message quotes damaged bytes of the
# schema, and Python cannot decode the message).
READ_ERRORS = (sqlite3.Error, UnicodeDecodeError)


def _is_lock_error(exc: BaseException) -> bool:
    text = str(exc)
    return "locked" in text or "busy" in text


def connect_read_only(path: str | os.PathLike, *, timeout_s: float = 30.0) -> sqlite3.Connection:
    """A ``mode=ro`` connection to the existing file ``path`` that has read its schema.

    Raises ``sqlite3.Error`` when the file cannot be read as an SQLite database.
    """
    resolved = Path(path).resolve()
    uri = "file:" + quote(str(resolved))
    kw: dict[str, Any] = dict(timeout=timeout_s, isolation_level=None, check_same_thread=False, uri=True)
    conn = sqlite3.connect(uri + "?mode=ro", **kw)
    try:
        conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
        return conn
    except (sqlite3.Error, UnicodeDecodeError) as exc:
        conn.close()
        if not isinstance(exc, sqlite3.OperationalError) or os.access(resolved.parent, os.W_OK) \
                or "unable to open" not in str(exc):
            raise
    # A WAL file on a read-only folder whose -shm file is gone cannot be opened with mode=ro
    # alone. Nobody can write it there either, so reading it as immutable is safe.
    logger.info("%s: read-only folder; opening the store as immutable", path)
    return sqlite3.connect(uri + "?mode=ro&immutable=1", **kw)


def probe_sqlite_file(path: str | os.PathLike, *, timeout_s: float = 30.0) -> str:
    """Why the existing file ``path`` is not an SQLite database, or ``""`` when it is one (or empty).

    The file is read through SQLite itself (a ``mode=ro`` connection), never with ``open()``:
    POSIX advisory locks belong to the process, and closing *any* descriptor of a database file
    releases every lock the process holds on it. A plain open/close beside a live connection of
    the same process would let other processes delete or overwrite that connection's WAL while
    it still writes to it. SQLite keeps one set of descriptors per file in a process and defers
    closing them while a lock is held, so a connection opened and closed here is safe.
    """
    try:
        conn = connect_read_only(path, timeout_s=timeout_s)
    except sqlite3.DatabaseError as exc:
        if isinstance(exc, sqlite3.OperationalError) or "not a database" not in str(exc):
            return ""  # locked, unreadable or damaged: the store's own checks name the problem
        return "is not an SQLite file (SQLite: file is not a database)"
    except (sqlite3.Error, UnicodeDecodeError):
        return ""
    conn.close()
    return ""


class StoreConnection:
    """A lock-guarded SQLite connection to ``path`` (``":memory:"``: a private in-memory database).

    ``read_only`` opens the file with ``mode=ro`` (nothing can be written, and no write lock is
    ever taken); an existing file that this process may not write (or whose folder it may not
    write, which WAL needs) is opened that way too, so reads work on a read-only mount and writes
    fail with an error saying why. ``create=False`` (implied by ``read_only``) refuses a path
    where no file exists instead of creating one. ``busy_timeout_ms`` is how long a statement waits for a lock held
    by another connection. Raises :class:`StoreError` naming the path when the folder or the
    file is missing, or the file is not an SQLite database.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        busy_timeout_ms: int = 30_000,
        read_only: bool = False,
        create: bool = True,
    ):
        self._memory = str(path) == ":memory:"
        self.path: str = str(path) if self._memory else str(Path(path))
        self.read_only = bool(read_only)
        self.busy_timeout_ms = busy_timeout_ms
        self._lock = threading.RLock()
        self._joined = 0  # > 0 inside transaction(): _write and _read join the open transaction
        self._closed = True
        self.read_only_reason = "it was opened read-only" if self.read_only else ""
        if not self._memory:
            self._check_path(create=create and not self.read_only)
            if not self.read_only and os.path.exists(self.path) and not self._writable():
                # A store on a read-only mount (or without write permission) can still serve
                # every read; opening it for writing would fail with a misleading message.
                self.read_only = True
                self.read_only_reason = "the file or its folder is not writable"
                logger.info("%s: %s; opened read-only", self.path, self.read_only_reason)
        try:
            if self.read_only:
                self._conn = self._connect_read_only()
            else:
                self._conn = sqlite3.connect(
                    self.path,
                    timeout=busy_timeout_ms / 1000.0,
                    isolation_level=None,  # we issue BEGIN/COMMIT ourselves
                    check_same_thread=False,  # shared across threads, guarded by self._lock
                )
        except READ_ERRORS as exc:
            raise StoreError(f"{self.path}: cannot open the store file ({exc})") from exc
        self._closed = False
        self._identity = self._file_identity()
        try:
            self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            self._conn.execute("PRAGMA foreign_keys = ON")
        except READ_ERRORS as exc:
            self.close()
            raise StoreError(f"{self.path}: not a usable SQLite store file ({exc})") from exc

    # ------------------------------------------------------------------ opening

    def _check_path(self, *, create: bool) -> None:
        p = Path(self.path)
        if not p.parent.is_dir():
            raise StoreError(f"{self.path}: the folder {str(p.parent)!r} does not exist")
        if not p.exists():
            if not create:
                raise StoreError(
                    f"{self.path}: no store file at this path (check the --store path; "
                    "a read never creates a store)"
                )
            return
        if not p.is_file():
            raise StoreError(f"{self.path}: is not a regular file; expected a memcompile-local store")
        verdict = probe_sqlite_file(p, timeout_s=self.busy_timeout_ms / 1000.0)
        if verdict:
            raise StoreError(f"{self.path}: {verdict}; expected a memcompile-local store")

    def _writable(self) -> bool:
        # WAL mode needs to create the -wal and -shm files beside the store, so the folder counts.
        return os.access(self.path, os.W_OK) and os.access(Path(self.path).resolve().parent, os.W_OK)

    def _connect_read_only(self) -> sqlite3.Connection:
        return connect_read_only(self.path, timeout_s=self.busy_timeout_ms / 1000.0)

    def _retry_locked(self, fn, attempts: int = 50):
        """Run ``fn``, retrying while another process holds a lock the busy handler does not cover.

        Switching a fresh file to WAL needs an exclusive lock, and two processes creating the same
        file at once can see SQLITE_BUSY there without the busy handler being consulted.
        """
        for i in range(attempts):
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                if not _is_lock_error(exc):
                    raise
                if i == attempts - 1:
                    raise StoreError(f"{self.path}: store stayed locked ({exc})") from exc
                time.sleep(0.02 * (i + 1))
        raise AssertionError("unreachable")

    # ------------------------------------------------------------------ transactions

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"{self.path}: the store is closed")

    @contextmanager
    def _busy_timeout(self, ms: int) -> Iterator[None]:
        """Use a different busy timeout for the statements of the ``with`` body."""
        with self._lock:
            self._check_open()
            self._conn.execute(f"PRAGMA busy_timeout = {max(0, int(ms))}")
            try:
                yield
            finally:
                if not self._closed:
                    self._conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Several writes (and reads) as one write transaction: every ``_write``/``_read`` of
        the body joins it, so all of them commit together, or none on any exception.

        The connection's lock is held throughout, so no other thread of the process uses the
        store meanwhile, and SQLite's write lock (BEGIN IMMEDIATE) keeps every other process
        from committing: what the body reads stays what it read until it commits.
        """
        with self._write():
            self._joined += 1
            try:
                yield
            finally:
                self._joined -= 1

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: BEGIN IMMEDIATE, COMMIT on success, ROLLBACK on any exception."""
        with self._lock:
            self._check_open()
            if self._joined:  # inside transaction() on this thread (the lock says so): join it
                yield self._conn
                return
            if self.read_only:
                raise StoreError(f"{self.path}: cannot write to this store: {self.read_only_reason}")
            c = self._conn
            try:
                c.execute("BEGIN IMMEDIATE")
            except READ_ERRORS as exc:
                raise StoreError(f"{self.path}: could not get the write lock ({exc})") from exc
            try:
                yield c
            except BaseException as exc:
                # A KeyboardInterrupt mid-batch must not leave a half-written transaction open.
                try:
                    c.execute("ROLLBACK")
                except sqlite3.Error:  # pragma: no cover - rollback after a fatal error
                    logger.exception("%s: rollback failed", self.path)
                if isinstance(exc, READ_ERRORS):
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
    def _read(self, table: str | None = None) -> Iterator[sqlite3.Connection]:
        """A consistent snapshot for multi-statement reads (deferred transaction)."""
        with self._lock:
            self._check_open()
            c = self._conn
            if self._joined:  # the open transaction() is a consistent snapshot already
                try:
                    yield c
                except READ_ERRORS as exc:
                    raise self._read_error(exc, table) from exc
                return
            try:
                c.execute("BEGIN")
            except READ_ERRORS as exc:
                raise self._read_error(exc, table) from exc
            try:
                yield c
            except READ_ERRORS as exc:
                raise self._read_error(exc, table) from exc
            finally:
                try:
                    c.execute("COMMIT")
                except sqlite3.Error:  # the snapshot held nothing to commit; just end it
                    pass

    def _query(self, sql: str, params: Sequence[Any] = (), *, table: str | None = None) -> list[tuple]:
        with self._lock:
            self._check_open()
            try:
                return self._conn.execute(sql, params).fetchall()
            except READ_ERRORS as exc:
                raise self._read_error(exc, table) from exc

    def _read_error(self, exc: BaseException, table: str | None) -> StoreError:
        where = f"table {table}" if table else "the store"
        if isinstance(exc, sqlite3.OperationalError) and _is_lock_error(exc):
            return StoreError(f"{self.path}: reading {where} failed: the file stayed locked ({exc})")
        return StoreError(
            f"{self.path}: reading {where} failed; the file is damaged or not a store ({exc}); "
            "run `memcompile-local check --store PATH` for a report of the damaged rows"
        )

    def _file_identity(self) -> tuple[int, int] | None:
        if self._memory:
            return None
        try:
            st = os.stat(self.path)  # stat opens no descriptor, so it cannot drop a lock
        except OSError:
            return None
        return (st.st_dev, st.st_ino)

    def verify_file(self) -> None:
        """Raise :class:`StoreError` unless this connection can still read, and write through, its file.

        Checks, without opening the file outside SQLite: the path still names the file that was
        opened (not deleted or replaced), a real read succeeds, and, on a writable WAL store, the
        ``-wal`` file is still there. SQLite deletes the WAL only when the last connection of any
        process closes; a WAL gone while this connection is open means another process deleted
        it after this process lost its locks, and commits since then may not survive a restart.
        """
        if self._memory:
            return
        with self._lock:
            self._check_open()
            if self._identity is not None and self._file_identity() != self._identity:
                raise StoreError(f"{self.path}: the store file was deleted or replaced after it was opened")
            try:
                mode = str(self._conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
                self._conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
            except READ_ERRORS as exc:
                raise self._read_error(exc, None) from exc
            if mode == "wal" and not self.read_only and not os.path.exists(self.path + "-wal"):
                raise StoreError(
                    f"{self.path}: the WAL file beside the store was deleted while this process had it "
                    "open; commits made since then may be lost (restart the process)"
                )

    # ------------------------------------------------------------------ lifetime

    def close(self) -> None:
        """Close the connection. Idempotent; later calls raise :class:`StoreError`."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r})"
