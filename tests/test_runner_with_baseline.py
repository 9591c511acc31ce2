"""One command scores the pipeline and a plain baseline side by side: turn and session recall per
LongMemEval question type, the baseline's selections equal to a baseline run's."""

from __future__ import annotations

import pytest

from memcompile_local.adapters.scripted import HashEmbedder
from memcompile_local.bench.metrics import recall_by_type
from memcompile_local.bench.report import recall_by_type_lines, recall_by_type_markdown
from memcompile_local.bench.runner import EvalRunner, EvalSpec, read_jsonl
from memcompile_local.config import PipelineConfig
from memcompile_local.errors import ConfigError
from memcompile_local.pipeline.presets import apply_preset

from _lme_synth import longmemeval_file


def run(tmp_path, name: str, data, lines=None, **kw) -> dict:
    spec = EvalSpec(benchmark="longmemeval", data=str(data), store=str(tmp_path / f"{name}.sqlite"),
                    out=str(tmp_path / name), progress=False, answer=False, **kw)
    echo = lines.append if lines is not None else (lambda s: None)
    return EvalRunner(spec, apply_preset("model-free", PipelineConfig()), embedder=HashEmbedder(dim=64),
                      echo=echo).run()


def test_recall_by_type_by_hand():
    rows = [
        {"question_type": "a", "selected_ids": ["s1:1", "s2:4"], "gold_evidence": ["s1:1", "s1:2"],
         "answer_session_ids": ["s1", "s3"], "recall_stages": {"final": ["s1:1", "s2:4"], "base": ["s3:1"]}},
        {"question_type": "a", "selected_ids": ["s9:1"], "gold_evidence": [], "answer_session_ids": ["s9"],
         "recall_stages": {"final": ["s9:1"], "base": ["s8:1"]}},
        {"question_type": "b", "selected_ids": ["s1:2"], "gold_evidence": ["s1:2"], "answer_session_ids": ["s1"],
         "recall_stages": {"final": ["s1:2"]}},
        {"question_type": "b", "selected_ids": [], "gold_evidence": ["x:1"], "answer_session_ids": ["x"],
         "is_abstention": True, "recall_stages": {"final": []}},
    ]
    got = recall_by_type(rows)
    assert got["types"] == ["a", "b"] and got["stages"] == ["selected", "final", "base"]
    final = got["table"]["final"]
    assert final["a"] == {"n_turn": 1, "turn": 0.5, "n_session": 2, "session": 0.75, "mean_selected": 1.5}
    assert final["b"]["turn"] == 1.0 and final["b"]["n_turn"] == 1  # the abstention row is left out
    assert final["overall"]["turn"] == pytest.approx(0.75) and final["overall"]["session"] == pytest.approx(5 / 6)
    assert got["table"]["base"]["a"]["session"] == 0.25 and "b" not in got["table"]["base"]
    at1 = recall_by_type(rows, k=1)["table"]["final"]["a"]
    assert at1["turn"] == 0.5 and at1["session"] == 0.75
    md = recall_by_type_markdown(got)
    assert "| a | 50.00 (1) | 75.00 (2) |" in md and "| b |" in md and "n/a" in md


def test_one_run_scores_the_pipeline_and_the_dense_baseline(tmp_path):
    data = longmemeval_file(tmp_path / "lme.json", 6)
    lines: list[str] = []
    both = run(tmp_path, "both", data, lines, with_baseline="dense")
    block = both["metrics"]["recall_by_type"]
    assert {"final", "baseline_dense"} <= set(block["stages"]) and block["k"] == 10
    assert block["table"]["baseline_dense"]["overall"]["n_turn"] == 6
    alone = run(tmp_path, "alone", data, baseline="dense")
    dense = {r["question_id"]: r["selected_ids"] for r in read_jsonl(tmp_path / "alone" / "predictions.jsonl")}
    rows = read_jsonl(tmp_path / "both" / "predictions.jsonl")
    assert {r["question_id"]: r["recall_stages"]["baseline_dense"] for r in rows} == dense
    plain = run(tmp_path, "plain", data)  # the pipeline's own selections are not changed by it
    assert {r["question_id"]: r["selected_ids"] for r in read_jsonl(tmp_path / "plain" / "predictions.jsonl")} == \
        {r["question_id"]: r["selected_ids"] for r in rows}
    assert plain["run_id"] != both["run_id"]
    printed = "\n".join(lines).splitlines()
    assert any("baseline_dense" in line for line in printed) and any(line.startswith("overall") for line in printed)
    report = (tmp_path / "both" / "report.md").read_text()
    assert "### Evidence recall per question type" in report and "baseline_dense turn" in report
    assert recall_by_type_lines(block)[0].startswith("recall@10 turn/session")


def test_a_baseline_run_cannot_also_score_a_baseline(tmp_path):
    with pytest.raises(ConfigError):
        run(tmp_path, "x", longmemeval_file(tmp_path / "lme.json", 1), baseline="bm25", with_baseline="dense")
