"""The store never costs its own process its SQLite locks, and a new file is created atomically.

POSIX advisory locks belong to a process, and closing any descriptor of a file releases all of
them. If the package read the store file with ``open()`` while a connection of the same process
was live, another process closing its connection would think it was the last user, checkpoint
and delete the WAL that the live connection still commits into. Opening a second connection,
running ``check`` and opening read-only beside a live connection must all leave those locks in
place (tested with a real second process). Separately, a process that opens a store file while
another process creates its schema must see all of the schema or none of it.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import memcompile_local.store.sqlite_store as sqlite_store
from memcompile_local.store import MemoryStore
from memcompile_local.store.check import check_store
from memcompile_local.store.schema import create_schema
from memcompile_local.types import Conversation, Session, Turn

REPO = Path(__file__).resolve().parents[1]

_CHILD = """
import sys
from memcompile_local.store import MemoryStore
from memcompile_local.types import Conversation, Session, Turn
with MemoryStore(sys.argv[1]) as s:
    s.ingest(Conversation(namespace="child", sessions=(Session(1, "s1", "noon", (Turn("D1:1", "Kim", "hello"),)),)))
"""


def conv(ns: str, text: str) -> Conversation:
    return Conversation(namespace=ns, sessions=(Session(1, "s1", "noon", (Turn("D1:1", "Ann", text),)),))


def run_child(db: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(db)], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("beside", ["read-only store", "second store", "check"])
def test_work_beside_a_live_connection_keeps_its_locks(tmp_path, beside):
    db = tmp_path / "s.sqlite"
    wal = Path(str(db) + "-wal")
    with MemoryStore(db) as live:
        live.ingest(conv("first", "one"))
        if beside == "read-only store":
            MemoryStore(db, read_only=True).close()
        elif beside == "second store":
            MemoryStore(db).close()
        else:
            assert check_store(db).ok
        # Another process opens, writes and closes. With this process's locks intact it cannot
        # take the exclusive lock that would let it delete the WAL on close.
        run_child(db)
        assert wal.exists(), "the WAL of a live connection was deleted by another process"
        live.verify_file()
        live.ingest(conv("second", "two"))  # committed after the child closed
    with MemoryStore(db, read_only=True) as s:
        assert set(s.namespaces()) == {"first", "child", "second"}


def test_verify_file_fails_when_the_wal_is_deleted_under_a_connection(tmp_path):
    db = tmp_path / "s.sqlite"
    with MemoryStore(db) as live:
        live.ingest(conv("a", "x"))
        live.verify_file()
        os.unlink(str(db) + "-wal")
        with pytest.raises(Exception, match="WAL file beside the store was deleted"):
            live.verify_file()


def test_verify_file_fails_when_the_file_is_replaced(tmp_path):
    db = tmp_path / "s.sqlite"
    with MemoryStore(db) as live:
        live.ingest(conv("a", "x"))
        os.replace(tmp_path / "s.sqlite", tmp_path / "moved.sqlite")
        with pytest.raises(Exception, match="deleted or replaced"):
            live.verify_file()


def test_a_foreign_file_is_refused_through_sqlite(tmp_path):
    db = tmp_path / "notes.sqlite"
    db.write_bytes(b"these are plain notes, not a database" * 20)
    before = db.read_bytes()
    with pytest.raises(Exception, match="not an SQLite file"):
        MemoryStore(db)
    assert db.read_bytes() == before
    report = check_store(db)
    assert not report.ok and "not an SQLite file" in str(report.problems[0])


class _CreatesSchemaMidway:
    """A connection proxy: right after the first statement, another connection creates the schema.

    Stands in for a second process that wins the race to create a new store file. The creator
    waits on SQLite's locks like a real process would, for at most ``wait_s``.
    """

    def __init__(self, conn: sqlite3.Connection, path: str, wait_s: float = 0.5):
        self._conn, self._path, self._wait_s = conn, path, wait_s
        self._fired = False

    def execute(self, sql, *args):
        cur = self._conn.execute(sql, *args)
        if not self._fired and sql.strip().upper().startswith("PRAGMA USER_VERSION"):
            self._fired = True
            rows = cur.fetchall()  # read before the other side commits
            done = threading.Event()

            def create() -> None:
                other = sqlite3.connect(self._path, timeout=10, isolation_level=None)
                other.execute("BEGIN IMMEDIATE")
                create_schema(other)
                other.execute("COMMIT")
                other.close()
                done.set()

            threading.Thread(target=create, daemon=True).start()
            done.wait(self._wait_s)
            return _Rows(rows)
        return cur


class _Rows:
    def __init__(self, rows):
        self._rows = rows

    def fetchone(self):
        return self._rows[0] if self._rows else None


def test_schema_created_by_another_opener_midway_is_seen_whole(tmp_path, monkeypatch):
    db = tmp_path / "fresh.sqlite"
    real = sqlite_store.inspect_schema
    calls = []

    def racing_inspect(c, path):
        calls.append(path)
        if len(calls) == 1:
            return real(_CreatesSchemaMidway(c, str(db)), path)
        return real(c, path)

    monkeypatch.setattr(sqlite_store, "inspect_schema", racing_inspect)
    with MemoryStore(db) as s:  # must neither fail with "missing tables" nor create twice
        s.ingest(conv("a", "x"))
    with MemoryStore(db, read_only=True) as s:
        assert s.namespaces() == ["a"]
