"""``eval`` killed with SIGKILL in the middle of a LongMemEval run resumes where it stopped: the
rerun builds and answers only what is left and ends with the selections of an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memcompile_local.bench.runner import read_jsonl

from _lme_synth import longmemeval_file

ROOT = Path(__file__).resolve().parents[1]


def command(data: Path, store: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "memcompile_local", "eval", "longmemeval", "--data", str(data), "--store",
            str(store), "--out", str(out), "--preset", "model-free", "--retrieval-only", "--embedder", "hash",
            "--quiet"]


def env() -> dict:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    e["HF_HUB_OFFLINE"] = "1"
    return e


def answered(out: Path) -> int:
    path = out / "answers.jsonl"
    return path.read_bytes().count(b"\n") if path.exists() else 0


def selections(out: Path) -> dict:
    return {r["question_id"]: (r["selected_ids"], r["recall_stages"]) for r in read_jsonl(out / "predictions.jsonl")}


@pytest.mark.slow
def test_a_run_killed_with_sigkill_resumes_to_the_uninterrupted_result(tmp_path):
    n = 60
    data = longmemeval_file(tmp_path / "lme.json", n, per_question=8)
    whole = tmp_path / "whole"
    subprocess.run(command(data, tmp_path / "whole.sqlite", whole), env=env(), check=True, cwd=tmp_path,
                   timeout=600, stdout=subprocess.DEVNULL)
    assert answered(whole) == n

    out, store = tmp_path / "killed", tmp_path / "killed.sqlite"
    proc = subprocess.Popen(command(data, store, out), env=env(), cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while answered(out) < 5 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        if proc.poll() is not None:
            pytest.fail(f"the run ended (rc {proc.returncode}) before it could be killed")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    done = answered(out)
    assert 5 <= done < n
    assert not (out / "predictions.jsonl").exists()

    rerun = subprocess.run(command(data, store, out), env=env(), cwd=tmp_path, timeout=600, capture_output=True,
                           text=True, check=True)
    assert answered(out) == n
    assert selections(out) == selections(whole)
    metrics = json.loads((out / "metrics.json").read_text())
    # the rerun built only the questions left (the one being built when killed included)
    assert metrics["build"]["namespaces"] <= n - done
    assert metrics["questions"] == n
    attempts = read_jsonl(out / "attempts.jsonl")
    # The killed attempt left its line, marked killed by the rerun (bench/attempts.py).
    assert [(a["state"], a["completed"]) for a in attempts] == [("killed", False), ("completed", True)]
    assert metrics["attempts"] == 2 and metrics["attempt_summary"]["killed"] == 1
    assert f"built {metrics['build']['namespaces']} memories" in rerun.stdout
