"""Every attempt of a run folder is recorded from its start, and every question from the moment
it begins (regression: an attempt killed with SIGKILL left no record at all, so a resumed run
counted one attempt, left the killed one's time out and could not say that a question was asked
twice)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memcompile_local.adapters.scripted import HashEmbedder, ScriptedBackend
from memcompile_local.bench.attempts import (ATTEMPTS_FILE, QUESTION_ATTEMPTS_FILE, AttemptLog, read_attempts,
                                             summarize_attempts)
from memcompile_local.bench.runfiles import read_jsonl
from memcompile_local.bench.runner import EvalRunner, EvalSpec
from memcompile_local.config import PipelineConfig
from memcompile_local.errors import TransportError
from memcompile_local.pipeline.presets import apply_preset

from _data_paths import LOCOMO_MINI

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
HANG_ON = "When did Tomas finish the half marathon"  # the second question of the fixture's first chat


def command(tmp_path: Path) -> list[str]:
    return [sys.executable, "-m", "memcompile_local", "eval", "locomo", "--data", str(LOCOMO_MINI),
            "--store", str(tmp_path / "s.sqlite"), "--out", str(tmp_path / "run"), "--preset", "model-free",
            "--backend", "_hanging_backend:HangingBackend", "--model", "h", "--no-judge", "--embedder", "hash",
            "--quiet", "--limit", "3"]


def env(**extra: str) -> dict:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(TESTS)] + ([e["PYTHONPATH"]] if e.get("PYTHONPATH") else []))
    e["HF_HUB_OFFLINE"] = "1"
    e.pop("HANG_ON_QUESTION", None)
    e.update(extra)
    return e


@pytest.mark.slow
def test_an_attempt_killed_mid_question_is_counted_by_the_rerun(tmp_path):
    mark = tmp_path / "hanging"
    proc = subprocess.Popen(command(tmp_path), env=env(HANG_ON_QUESTION=HANG_ON, HANG_MARK=str(mark)),
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while not mark.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if not mark.exists():
            pytest.fail(f"the run never reached the question (rc {proc.poll()}): {proc.stderr.read()[-2000:]}")
        time.sleep(0.3)  # past the last write before the call that hangs
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    out = tmp_path / "run"
    # What the killed process left: its attempt, still "running", and the question it began.
    [line] = read_attempts(out)
    assert (line["attempt"], line["state"], line["completed"]) == (1, "running", False)
    events = read_jsonl(out / QUESTION_ATTEMPTS_FILE)
    hung = [e["question_id"] for e in events if e["event"] == "started"][-1]
    assert [e["event"] for e in events if e["question_id"] == hung] == ["started"]
    assert hung not in {r["question_id"] for r in read_jsonl(out / "answers.jsonl")}

    rerun = subprocess.run(command(tmp_path), env=env(), cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    attempts = read_attempts(out)
    assert [(a["attempt"], a["state"]) for a in attempts] == [(1, "killed"), (2, "completed")]
    assert attempts[0]["total_s"] >= 0
    metrics = json.loads((out / "metrics.json").read_text())
    summary = metrics["attempt_summary"]
    assert metrics["attempts"] == 2 and (summary["killed"], summary["completed"], summary["stopped"]) == (1, 1, 0)
    assert summary["questions"]["several"] == {hung: 2}
    assert summary["questions"]["cut_off"] == 1 and summary["questions"]["completed"] == 6
    assert metrics["wall_s"] == pytest.approx(attempts[0]["total_s"] + metrics["phases_s"]["total_s"], abs=0.02)
    report = (out / "report.md").read_text()
    assert "over 2 attempt(s) (1 killed; a killed attempt counts up to its last record)" in report
    assert "1 question(s) took more than one (at most 2); 1 cut off" in report
    # The rerun asked the cut-off question once more and nothing else again.
    again = [e["question_id"] for e in read_jsonl(out / QUESTION_ATTEMPTS_FILE) if e["attempt"] == 2]
    assert hung in again and len(again) == 2 * 5  # the 5 questions left, each started and completed


def fake_clock(start: float = 1000.0):
    now = [start]

    def clock() -> float:
        return now[0]

    return now, clock


def test_a_killed_attempt_counts_up_to_its_last_record(tmp_path):
    now, clock = fake_clock()
    first = AttemptLog(tmp_path, heartbeat_s=5.0, clock=clock)
    assert first.start() == 1
    now[0] += 2.0
    first.question_started("q1")
    now[0] += 1.0
    first.question_ended("q1")  # written: the line is refreshed at most every 5 s, the event at once
    assert read_attempts(tmp_path)[0]["total_s"] == 0.0
    now[0] += 6.0
    first.question_started("q2")
    first.heartbeat()  # 9 s after the start
    now[0] += 4.0
    first.question_ended("q2", failed=True, error="server said 500")  # 13 s; the line not refreshed again
    first.question_started("q3")
    # ... and the process dies here. The next attempt marks it and times it to its last event.
    now[0] += 100.0
    second = AttemptLog(tmp_path, clock=clock)
    assert second.start() == 2
    [killed, running] = read_attempts(tmp_path)
    assert (killed["state"], killed["total_s"], killed["questions_started"]) == ("killed", 13.0, 2)
    assert running["state"] == "running"
    second.question_started("q3")
    second.question_ended("q3")
    now[0] += 1.0
    second.finish(True, {"total_s": 101.0, "questions_s": 0.5})
    summary = summarize_attempts(tmp_path)
    assert (summary["attempts"], summary["killed"], summary["completed"]) == (2, 1, 1)
    assert summary["wall_s"] == 114.0
    q = summary["questions"]
    assert (q["question_attempts"], q["completed"], q["failed"], q["cut_off"]) == (4, 2, 1, 1)
    assert q["several"] == {"q3": 2} and q["most"] == 2


def test_lines_of_the_older_format_are_whole_attempts(tmp_path):
    # attempts.jsonl as earlier versions wrote it: one line per ended attempt, no number or state.
    (tmp_path / ATTEMPTS_FILE).write_text(
        json.dumps({"started_unix": 1.0, "completed": False, "total_s": 3.5}) + "\n"
        + json.dumps({"started_unix": 9.0, "completed": True, "total_s": 2.0}) + "\n", encoding="utf-8")
    log = AttemptLog(tmp_path)
    assert log.start() == 3
    log.finish(False, {"total_s": 1.0})
    assert [(a["attempt"], a["state"]) for a in read_attempts(tmp_path)] == [(1, "stopped"), (2, "completed"),
                                                                             (3, "stopped")]
    summary = summarize_attempts(tmp_path)
    assert (summary["attempts"], summary["stopped"], summary["completed"], summary["wall_s"]) == (3, 2, 1, 6.5)
    assert not list(tmp_path.glob("*.tmp"))  # rewritten through a temporary file, renamed into place


def test_a_failed_question_and_an_interrupted_attempt_are_counted_in_process(tmp_path):
    """A model error fails one question (retried by the rerun); a Ctrl-C stops an attempt, which
    then ends "stopped" with the question it was in counted as cut off."""
    fail_on = "When did Tomas finish the half marathon"

    class Flaky:
        def __init__(self, fail: str | None = None, interrupt: str | None = None):
            self.inner = ScriptedBackend(lambda r: "blue")
            self.fail, self.interrupt = fail, interrupt

        def identity(self):
            return self.inner.identity()

        def generate(self, requests):
            text = " ".join(r.messages[-1].content for r in requests if r.stage == "answer")
            if self.fail and self.fail in text:
                raise TransportError("scripted server error", retryable=False)
            if self.interrupt and self.interrupt in text:
                raise KeyboardInterrupt
            return self.inner.generate(requests)

    cfg = apply_preset("model-free", PipelineConfig()).replace(judge={"allow_self_judge": True})
    spec = EvalSpec(benchmark="locomo", data=str(LOCOMO_MINI), store=str(tmp_path / "s.sqlite"),
                    out=str(tmp_path / "run"), limit=3, progress=False, judge=False)
    emb = HashEmbedder(dim=64)
    first = EvalRunner(spec, cfg, backend=Flaky(fail=fail_on), embedder=emb, echo=lambda s: None).run()
    assert len(first["failed_questions"]) == 1
    with pytest.raises(KeyboardInterrupt):  # the retry of the failed question is interrupted
        EvalRunner(spec, cfg, backend=Flaky(interrupt=fail_on), embedder=emb, echo=lambda s: None).run()
    last = EvalRunner(spec, cfg, backend=Flaky(), embedder=emb, echo=lambda s: None).run()
    out = Path(spec.out)
    assert [a["state"] for a in read_attempts(out)] == ["completed", "stopped", "completed"]
    summary = last["attempt_summary"]
    assert (last["attempts"], summary["stopped"], summary["killed"]) == (3, 1, 0)
    q = summary["questions"]
    assert q["failed"] == 1 and q["cut_off"] == 1 and q["most"] == 3 and q["with_several"] == 1
    failed = [e for e in read_jsonl(out / QUESTION_ATTEMPTS_FILE) if e["event"] == "failed"]
    assert len(failed) == 1 and "scripted server error" in failed[0]["error"]
    assert last["failed_questions"] == [] and last["questions"] == 6
    assert "over 3 attempt(s) (1 stopped)" in (out / "report.md").read_text()
