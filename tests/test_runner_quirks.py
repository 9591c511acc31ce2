"""``eval`` over benchmark files with their published quirks: the run goes on past an odd question,
and the counts reach the plan line, metrics.json and report.md; ``--strict`` refuses the file
before anything is written."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from memcompile_local.adapters.scripted import HashEmbedder
from memcompile_local.bench.runner import EvalRunner, EvalSpec, read_jsonl
from memcompile_local.cli import main
from memcompile_local.config import PipelineConfig
from memcompile_local.errors import DataFormatError
from memcompile_local.pipeline.presets import apply_preset

from _data_paths import BEAM_QUIRKS, LONGMEMEVAL_QUIRKS


def gz_fixture(tmp_path: Path) -> Path:
    path = tmp_path / "lme_quirks.json.gz"
    path.write_bytes(gzip.compress(LONGMEMEVAL_QUIRKS.read_bytes()))
    return path


def run(tmp_path: Path, benchmark: str, data: str, lines: list[str] | None = None, **kw) -> dict:
    spec = EvalSpec(benchmark=benchmark, data=data, store=str(tmp_path / "s.sqlite"), out=str(tmp_path / "run"),
                    progress=False, answer=False, **kw)
    echo = lines.append if lines is not None else (lambda s: None)
    return EvalRunner(spec, apply_preset("model-free", PipelineConfig()), embedder=HashEmbedder(dim=64),
                      echo=echo).run()


def test_longmemeval_gz_with_quirks_runs_and_reports_them(tmp_path):
    lines: list[str] = []
    result = run(tmp_path, "longmemeval", str(gz_fixture(tmp_path)), lines)
    assert result["questions"] == 2  # the conflicting and the malformed question are left out
    rows = {r["question_id"]: r for r in read_jsonl(tmp_path / "run" / "predictions.jsonl")}
    assert set(rows) == {"quirk-dup", "plain-ok"}
    assert rows["quirk-dup"]["gold_evidence"] == ["answer_kayak:1"]
    quirks = result["data_quirks"]
    assert quirks["counts"] == {"skipped_question": 2, "duplicate_session": 1}
    assert quirks["questions_left_out"] == 2 and quirks["strict"] is False
    on_disk = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert on_disk["data_quirks"]["counts"] == quirks["counts"]
    report = (tmp_path / "run" / "report.md").read_text()
    assert "## Data quirks" in report
    assert "| skipped_question | 2 |" in report and "| duplicate_session | 1 |" in report
    assert "Questions left out of the run: 2." in report and "$[1].haystack_sessions[2]" in report
    plan_line = next(line for line in lines if line.startswith("data quirks:"))
    assert "2 malformed question(s) skipped" in plan_line and "2 question(s) left out" in plan_line


def test_a_clean_file_reports_no_quirks(tmp_path):
    data = tmp_path / "ok.json"
    data.write_text(json.dumps(json.loads(LONGMEMEVAL_QUIRKS.read_text())[3:]))
    lines: list[str] = []
    result = run(tmp_path, "longmemeval", str(data), lines)
    assert result["data_quirks"]["counts"] == {}
    assert not any(line.startswith("data quirks:") for line in lines)
    assert "None: every question was read whole." in (tmp_path / "run" / "report.md").read_text()


def test_strict_refuses_the_file_before_anything_is_written(tmp_path):
    with pytest.raises(DataFormatError) as err:
        run(tmp_path, "longmemeval", str(gz_fixture(tmp_path)), strict=True)
    assert err.value.where == "$[1].haystack_sessions[2]"
    assert not (tmp_path / "run").exists() and not (tmp_path / "s.sqlite").exists()


def test_beam_questions_without_usable_evidence_are_answered_and_left_out_of_recall(tmp_path):
    result = run(tmp_path, "beam", str(BEAM_QUIRKS))
    m = result["metrics"]
    assert m["count"] == 7  # 8 questions, the malformed one left out
    assert m["per_category"]["summarization"]["count"] == 3
    # of the three summarization questions, the one with only a count has no gold
    assert m["per_category"]["summarization"]["recall"]["final"]["n"] == 2
    assert m["evidence"]["questions_without_gold"] == 3  # that one, the one with neither field, the abstention
    assert m["overall"]["recall"]["final"]["n"] == 4
    assert result["data_quirks"]["counts"] == {"skipped_question": 1, "no_evidence": 2,
                                               "evidence_from_conversation_sessions": 1}


def test_cli_strict_flag(tmp_path, capsys):
    base = ["eval", "beam", "--data", str(BEAM_QUIRKS), "--store", str(tmp_path / "s.sqlite"), "--preset",
            "model-free", "--retrieval-only", "--embedder", "hash", "--quiet"]
    assert main(base + ["--out", str(tmp_path / "a"), "--strict"]) == 2
    assert "multi_session_reasoning[0].answer" in capsys.readouterr().err
    assert not (tmp_path / "a").exists()
    assert main(base + ["--out", str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert "data quirks: 1 malformed question(s) skipped" in out
    assert (tmp_path / "b" / "report.md").exists()
