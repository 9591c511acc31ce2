"""A running server and other processes on one store file: no acknowledged turn is ever lost.

Closing any descriptor of an SQLite file releases every POSIX lock the closing process holds
on it. A server that once opened its own store file outside SQLite (a header check beside a
live connection) lost its locks; the next CLI command to close its connection then believed it
was the last user of the file, checkpointed and deleted the WAL, and every turn the server
acknowledged afterwards went into a deleted file. These tests run the real processes: a
``serve`` subprocess taking appends while CLI subprocesses (and a Python ``Memory`` process)
ingest, build, ask, check, forget and scrub the same file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from _service_util import REPO, env, running, write_config, MODEL_FREE
from memcompile_local.store import MemoryStore

pytestmark = pytest.mark.slow

MF_ARGS = ["--preset", "model-free", "--embedder", "hash", "--quiet"]


def cli(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "memcompile_local", *argv], capture_output=True, text=True,
                          env=env(), cwd=str(REPO), timeout=timeout)
    return proc


def deleted_wal(pid: int) -> list[str]:
    """Descriptors of process ``pid`` that point at a deleted file (the symptom of the bug)."""
    fd_dir = Path(f"/proc/{pid}/fd")
    out = []
    for fd in fd_dir.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.endswith("(deleted)") and ".sqlite" in target:
            out.append(target)
    return out


def write_conversation(path: Path, namespace: str, n: int) -> Path:
    sessions = [{"time": f"2024-03-{day + 1:02d} 10:00", "turns": [
        {"speaker": "Mira", "text": f"On day {day} I repaired bicycle number {day} in the workshop."},
        {"speaker": "Otto", "text": f"Was bicycle {day} the red one with the basket?"}]} for day in range(n)]
    path.write_text(json.dumps({"namespace": namespace, "sessions": sessions}), encoding="utf-8")
    return path


class Appender:
    """Appends distinct turns to one user from a thread; records the ids the server acknowledged."""

    def __init__(self, url: str, user: str):
        self.url, self.user = url, user
        self.acked: list[str] = []
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        with httpx.Client(base_url=self.url, timeout=60) as c:
            while not self._stop.is_set():
                tid = f"a{i}"
                r = c.post(f"/v1/memories/{self.user}/turns",
                           json={"speaker": "Agent", "text": f"note number {i} about the garden", "id": tid,
                                 "time": "2024-05-01 09:00"})
                (self.acked if r.status_code == 200 else self.failed).append(f"{tid}:{r.status_code}")
                i += 1

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(60)


def stored_ids(store: Path, user: str) -> set[str]:
    with MemoryStore(store, read_only=True) as s:
        (ns,) = [n for n in s.namespaces() if n.endswith(user)]
        return {p.packet_id for p in s.packets(ns)}


def test_cli_commands_beside_a_server_lose_no_acknowledged_turn(tmp_path):
    store = tmp_path / "mem.sqlite"
    config = write_config(tmp_path / "mf.yaml", MODEL_FREE)
    conv = write_conversation(tmp_path / "cli.json", "cli-user", 3)
    rounds = int(os.environ.get("MEMCOMPILE_SHARED_STORE_ROUNDS", "2"))
    with running(store, config=config) as srv:
        with Appender(srv.url, "agent") as app:
            for r in range(rounds):
                steps = [
                    ("ingest", "ingest", str(conv), "--store", str(store), "--build", *MF_ARGS),
                    ("ask", "ask", "cli-user", "Which bicycle had a basket?", "--store", str(store), "--no-answer",
                     *MF_ARGS),
                    ("check", "check", "--store", str(store)),
                    ("stats", "stats", "--store", str(store)),
                    ("forget", "forget", "cli-user", "--store", str(store)),
                    ("scrub", "scrub", "--store", str(store)),
                ]
                for name, *argv in steps:
                    proc = cli(*argv)
                    # forget may exit 3 (scrub pending) while the server reads; that is not a failure.
                    assert proc.returncode in ((0, 3) if name == "forget" else (0,)), \
                        f"round {r} {name}: {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
                    assert not deleted_wal(srv.proc.pid), f"round {r} after {name}: {deleted_wal(srv.proc.pid)}"
                    health = httpx.get(srv.url + "/healthz", timeout=10)
                    assert health.status_code == 200, f"round {r} after {name}: {health.text}"
        assert not app.failed, app.failed[:5]
        assert len(app.acked) > 0
        acked = {a.split(":")[0] for a in app.acked}
    # After the server stopped: every acknowledged turn is in the file, and the file is sound.
    assert acked <= stored_ids(store, "agent"), sorted(acked - stored_ids(store, "agent"))[:10]
    proc = cli("check", "--store", str(store))
    assert proc.returncode == 0, proc.stdout + proc.stderr


_MEMORY_CHILD = """
import sys
from memcompile_local import Memory, PipelineConfig
from memcompile_local.pipeline.presets import apply_preset
cfg = apply_preset("model-free", PipelineConfig()).replace(model={"embedder": "hash"})
with Memory(sys.argv[1], cfg) as mem:
    mem.add("py-user", [{"time": "2024-04-02 08:00", "turns": [
        {"speaker": "Lena", "text": "I planted tomatoes on the balcony."}]}])
    mem.search("py-user", "What did Lena plant?", k=1)
    mem.forget("py-user")
"""


def test_python_memory_process_beside_a_server_loses_no_acknowledged_turn(tmp_path):
    store = tmp_path / "mem.sqlite"
    config = write_config(tmp_path / "mf.yaml", MODEL_FREE)
    with running(store, config=config) as srv:
        with Appender(srv.url, "agent") as app:
            for _ in range(3):
                proc = subprocess.run([sys.executable, "-c", _MEMORY_CHILD, str(store)], capture_output=True,
                                      text=True, env=env(), cwd=str(REPO), timeout=120)
                assert proc.returncode == 0, proc.stderr
                assert not deleted_wal(srv.proc.pid)
        acked = {a.split(":")[0] for a in app.acked}
        assert acked and not app.failed
    assert acked <= stored_ids(store, "agent")


def test_healthz_reports_a_store_it_cannot_commit_to(tmp_path):
    store = tmp_path / "mem.sqlite"
    config = write_config(tmp_path / "mf.yaml", MODEL_FREE)
    with running(store, config=config) as srv:
        c = httpx.Client(base_url=srv.url, timeout=30)
        assert c.post("/v1/memories/u/turns", json={"speaker": "A", "text": "hello there",
                                                    "time": "2024-01-01 10:00"}).status_code == 200
        assert c.get("/healthz").status_code == 200
        # What the lost locks let another process do: the WAL is deleted under the server.
        os.unlink(str(store) + "-wal")
        r = c.get("/healthz")
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "store_unavailable"
        assert "WAL" in r.json()["error"]["message"]
