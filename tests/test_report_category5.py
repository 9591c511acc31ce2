"""report.md counts the LoCoMo category 5 (adversarial) questions a run left out (regression:
``eval`` drops them before any row exists, so the count was always 0)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memcompile_local.adapters.scripted import HashEmbedder
from memcompile_local.bench.aggregate import locomo_metrics
from memcompile_local.bench.runner import EvalRunner, EvalSpec, category5_left_out, load_benchmark
from memcompile_local.config import PipelineConfig
from memcompile_local.pipeline.presets import apply_preset

from _data_paths import FIXTURES

DATA = FIXTURES / "locomo_category5.json"  # 2 conversations: 5 scored questions, 3 of category 5


def run(tmp_path: Path, name: str, **kw) -> tuple[dict, str]:
    spec = EvalSpec(benchmark="locomo", data=str(DATA), store=str(tmp_path / f"{name}.sqlite"),
                    out=str(tmp_path / name), progress=False, answer=False, **kw)
    cfg = apply_preset("model-free", PipelineConfig())
    result = EvalRunner(spec, cfg, embedder=HashEmbedder(dim=64), echo=lambda s: None).run()
    return result, (Path(spec.out) / "report.md").read_text(encoding="utf-8")


def test_the_report_counts_the_category5_questions_left_out(tmp_path):
    raw = json.loads(DATA.read_text(encoding="utf-8"))
    in_file = sum(q["category"] == 5 for conv in raw for q in conv["qa"])
    assert in_file == 3
    result, report = run(tmp_path, "all")
    assert result["questions"] == 5  # categories 1-4 only are asked
    assert result["metrics"]["excluded_category5"] == 3
    assert result["metrics"]["count"] == 5
    assert "Category 5 (adversarial) questions left out: 3." in report
    saved = json.loads((tmp_path / "all" / "metrics.json").read_text())
    assert saved["metrics"]["excluded_category5"] == 3


def test_the_count_covers_the_conversations_run_whatever_the_limit(tmp_path):
    one, report = run(tmp_path, "one", conversations=("adv-2",))
    assert one["questions"] == 2 and one["metrics"]["excluded_category5"] == 1
    assert "questions left out: 1." in report
    # --limit caps the scored questions per conversation; category 5 is left out all the same.
    limited, _ = run(tmp_path, "limited", limit=1)
    assert limited["questions"] == 2 and limited["metrics"]["excluded_category5"] == 3


def test_category5_left_out_counts_only_locomo():
    convs = load_benchmark(EvalSpec(benchmark="locomo", data=str(DATA), store=":memory:"))
    assert category5_left_out("locomo", convs) == 3
    assert category5_left_out("longmemeval", convs) == 0


def test_locomo_metrics_adds_the_questions_left_out_to_category5_rows():
    rows = [{"question_id": "a", "category": 4, "gold": "x", "prediction": "x"},
            {"question_id": "b", "category": 5, "gold": "", "prediction": "y"}]
    assert locomo_metrics(rows)["excluded_category5"] == 1
    m = locomo_metrics(rows, left_out_category5=2)
    assert m["excluded_category5"] == 3 and m["count"] == 1
    with pytest.raises(ValueError, match="left_out_category5"):
        locomo_metrics(rows, left_out_category5=-1)
