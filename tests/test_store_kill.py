"""Crash test: a process SIGKILLed mid-ingest leaves a consistent store.

A worker subprocess (tests/_ingest_worker.py) ingests small batches in a loop and acknowledges each
committed batch on stdout. We kill it at random moments, check the file, and restart it from the
batch after the last acknowledged one, many times over.
"""

from __future__ import annotations

import importlib.util
import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from memcompile_local.store import MemoryStore
from memcompile_local.types import content_sha256

WORKER = Path(__file__).with_name("_ingest_worker.py")
REPO = Path(__file__).resolve().parents[1]
NS = "kill-test"
SIZE = 5  # turns per batch
KILLS = 14

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX SIGKILL"),
]


def _load_worker():
    spec = importlib.util.spec_from_file_location("_ingest_worker", WORKER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _acks(out_file: Path) -> list[tuple[int, list[str]]]:
    """Acknowledged batches from a worker's output; a torn last line (no newline) is ignored."""
    text = out_file.read_text()
    lines = text.split("\n")[:-1]  # whatever follows the last newline is incomplete
    acks = []
    for line in lines:
        if line.startswith("ACK "):
            _, b, ids, _added, _skipped = line.split(" ")
            acks.append((int(b), ids.split(",")))
    return acks


def _wait_for_line(out_file: Path, word: str, proc: subprocess.Popen, limit_s: float = 20.0) -> bool:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if word + "\n" in out_file.read_text():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.002)
    return False


def _check_store(db: Path, acked: dict[int, list[str]], worker) -> int:
    """Assert the invariants; return the number of batches present in the store."""
    with MemoryStore(db) as store:  # must open after any kill
        assert store._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        packets = store.packets(NS)
    ids = [p.packet_id for p in packets]
    assert len(ids) == len(set(ids)), "duplicate packet ids"
    assert [p.ordinal for p in packets] == list(range(len(packets))), "ordinals not contiguous"
    by_batch: dict[int, list] = defaultdict(list)
    for p in packets:
        by_batch[int(p.packet_id[1:].split(":")[0])].append(p)
    # No partial batch: every batch present is complete, in order, with the right content.
    for b, ps in by_batch.items():
        assert [p.packet_id for p in ps] == worker.packet_ids(b, SIZE), f"batch {b} is partial"
        for i, p in enumerate(ps, start=1):
            assert p.sha256 == content_sha256(worker.turn_text(NS, b, i))
            assert p.ordinal == b * SIZE + i - 1
    # Batches are ingested in order, so those present form a prefix 0..n-1.
    assert sorted(by_batch) == list(range(len(by_batch)))
    # Every acknowledged batch is present with exactly the acknowledged ids.
    for b, acked_ids in acked.items():
        assert b in by_batch, f"acknowledged batch {b} lost"
        assert [p.packet_id for p in by_batch[b]] == acked_ids
    # At most one batch can be committed but not yet acknowledged when the kill lands.
    assert len(by_batch) <= len(acked) + 1
    return len(by_batch)


def test_sigkill_mid_ingest_keeps_store_consistent(tmp_path):
    worker = _load_worker()
    rng = random.Random(20240531)
    db = tmp_path / "kill.sqlite"
    acked: dict[int, list[str]] = {}
    next_batch = 0
    unacked_commits = 0
    kills_after_ready = 0
    t0 = time.monotonic()
    for k in range(KILLS):
        out_file = tmp_path / f"worker-{k}.out"
        with open(out_file, "w") as out:
            proc = subprocess.Popen(
                [sys.executable, str(WORKER), str(db), NS, str(next_batch), str(next_batch + 100_000), str(SIZE)],
                stdout=out,
                stderr=subprocess.DEVNULL,
                cwd=str(REPO),
            )
        try:
            if k % 4 == 3:
                # Now and then kill early, while the worker may still be starting or opening the file.
                time.sleep(rng.uniform(0.003, 0.4))
            else:
                assert _wait_for_line(out_file, "READY", proc), "worker did not start"
                kills_after_ready += 1
                time.sleep(rng.uniform(0.003, 0.2))
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL, f"worker exited by itself ({proc.returncode})"
        acks = _acks(out_file)
        # Acknowledgements are consecutive batches starting where this worker began.
        assert [b for b, _ in acks] == list(range(next_batch, next_batch + len(acks)))
        for b, ids in acks:
            assert ids == worker.packet_ids(b, SIZE)
            acked[b] = ids
        if acks:
            next_batch = acks[-1][0] + 1
        present = _check_store(db, acked, worker)
        unacked_commits += present - len(acked)
    elapsed = time.monotonic() - t0
    assert len(acked) > 0, "no batch was ever acknowledged; the kills came too early to test anything"
    # A final uninterrupted run resumes cleanly from the acknowledgements.
    out = subprocess.run(
        [sys.executable, str(WORKER), str(db), NS, str(next_batch), str(next_batch + 3), str(SIZE)],
        capture_output=True, text=True, cwd=str(REPO), timeout=60,
    )
    assert out.returncode == 0, out.stderr
    for line in out.stdout.splitlines():
        if line.startswith("ACK "):
            _, b, ids, _a, _s = line.split(" ")
            acked[int(b)] = ids.split(",")
    assert _check_store(db, acked, worker) == next_batch + 3
    print(
        f"\nkill test: {KILLS} kills ({kills_after_ready} after READY), {len(acked)} batches acknowledged, "
        f"{unacked_commits} kill(s) landed between commit and acknowledgement, {elapsed:.1f}s"
    )
