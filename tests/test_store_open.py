"""Opening a store has no side effects where nothing should happen (issue 15.7): a foreign file is
refused untouched, a read never creates a file, and a read-only store serves every read."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from memcompile_local.cli import main
from memcompile_local.data import example_conversation_path
from memcompile_local.errors import StoreError
from memcompile_local.store import MemoryStore
from memcompile_local.types import Conversation, Session, Turn

REPO = Path(__file__).resolve().parents[1]
MF = ["--preset", "model-free", "--embedder", "hash"]


def side_files(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if p.name != path.name and p.name.startswith(path.name))


def make_foreign(path: Path) -> None:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE contacts (name TEXT, phone TEXT)")
    con.execute("INSERT INTO contacts VALUES ('Ada', '555-0100')")
    con.commit()
    con.close()


@pytest.mark.parametrize("kind", ["foreign-sqlite", "text", "newer-store"])
def test_a_file_that_is_not_our_store_is_refused_untouched(tmp_path, kind):
    path = tmp_path / "other.db"
    if kind == "foreign-sqlite":
        make_foreign(path)
    elif kind == "text":
        path.write_text("name,phone\nAda,555-0100\n", encoding="utf-8")
    else:
        with MemoryStore(path) as s:
            s.ingest(Conversation(namespace="u", sessions=(Session(1, "s1", "t", (Turn("D1:1", "A", "hi"),)),)))
        con = sqlite3.connect(path, isolation_level=None)
        con.execute("PRAGMA journal_mode = DELETE")
        con.execute("PRAGMA user_version = 99")
        con.close()
    before = path.read_bytes()
    for kw in ({}, {"read_only": True}, {"create": False}):
        with pytest.raises(StoreError, match=str(path)):
            MemoryStore(path, **kw)
    assert path.read_bytes() == before  # byte-identical: not switched to WAL, nothing written
    assert side_files(path) == []
    if kind != "text":
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        con.close()


def test_a_mistyped_path_creates_nothing(tmp_path, capsys):
    typo = tmp_path / "memroy.sqlite"
    for kw in ({"read_only": True}, {"create": False}):
        with pytest.raises(StoreError, match=rf"{typo}: no store file"):
            MemoryStore(typo, **kw)
    for argv in (["stats"], ["check"], ["ask", "u", "what?", "--no-answer", *MF], ["forget", "u"],
                 ["build", "u", *MF]):
        assert main([*argv, "--store", str(typo)]) == 2, argv
    capsys.readouterr()
    assert list(tmp_path.iterdir()) == []


def test_writes_through_a_read_only_store_are_refused(store_factory):
    """On both backends; on SQLite the file's bytes are unchanged too."""
    with store_factory() as s:
        s.ingest(Conversation(namespace="u", sessions=(Session(1, "s1", "t", (Turn("D1:1", "A", "hi"),)),)))
    path = Path(store_factory.location)
    before = path.read_bytes() if store_factory.backend == "sqlite" else None
    with store_factory(read_only=True) as ro:
        assert [p.content for p in ro.packets("u")] == ["hi"] and ro.stats()["namespaces"]["u"]["packets"] == 1
        with pytest.raises(StoreError, match="cannot write to this store"):
            ro.set_meta("u", "k", "v")
        with pytest.raises(StoreError, match="cannot write"):
            ro.forget("u")
        for write in (lambda: ro.cache_put("k", namespace=None, stage="s", identity_json="{}", response={}),
                      lambda: ro.enqueue("u", 1), lambda: ro.scrub()):
            with pytest.raises(StoreError, match="cannot"):
                write()
        assert ro.packet_count("u") == 1
    if before is not None:
        assert path.read_bytes() == before


# A child that reads the store on a read-only file system (or, for a user other than root, from a
# folder and file without write permission): stats, check and ask on the built namespace.
_READER = """
import json, sys
sys.path.insert(0, sys.argv[2])
from memcompile_local.cli import main
store = sys.argv[1]
rcs = [main(["stats", "--store", store]), main(["check", "--store", store]),
       main(["ask", "example-1", "What is the name of Nadia's cat?", "--no-answer", "--quiet", "--store", store,
             "--preset", "model-free", "--embedder", "hash"])]
print("RCS", json.dumps(rcs))
"""


def _read_only_command(folder: Path, argv: list[str]) -> list[str] | None:
    if os.geteuid() != 0:
        return argv  # permissions apply: chmod is enough
    if shutil.which("unshare") is None:
        return None
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount --bind {folder} {folder} && "
                            f"mount -o remount,bind,ro {folder}"], capture_output=True)
    if probe.returncode != 0:
        return None
    script = f"mount --bind {folder} {folder} && mount -o remount,bind,ro {folder} && exec \"$@\""
    return ["unshare", "-m", "sh", "-c", script, "sh", *argv]


def test_a_read_only_store_serves_stats_check_and_ask(tmp_path):
    folder = Path(tempfile.mkdtemp(prefix="ro-store-"))
    try:
        store = folder / "built.sqlite"
        assert main(["ingest", str(example_conversation_path()), "--build", "--store", str(store),
                     "--quiet", *MF]) == 0
        assert side_files(store) == []  # closed cleanly: no -wal or -shm left to help a reader
        store.chmod(0o444)
        folder.chmod(0o555)
        before = store.read_bytes()
        cmd = _read_only_command(folder, [sys.executable, "-c", _READER, str(store), str(REPO)])
        if cmd is None:
            pytest.skip("running as root without a way to mount a folder read-only (unshare)")
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        rcs = next(line for line in out.stdout.splitlines() if line.startswith("RCS "))
        assert rcs == "RCS [0, 0, 0]", out.stdout[-2000:] + out.stderr[-2000:]
        assert "Pepper" in out.stdout  # the compiled context came from the store
        assert store.read_bytes() == before and side_files(store) == []
    finally:
        folder.chmod(0o755)
        shutil.rmtree(folder, ignore_errors=True)
