"""`memcompile-local export RUN_DIR`: one dataset row per question with selections, tokens and labels."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memcompile_local.adapters.scripted import HashEmbedder, ScriptedBackend
from memcompile_local.bench.export import export_run, prediction_rows
from memcompile_local.bench.runner import EvalRunner, EvalSpec, read_jsonl
from memcompile_local.cli import main
from memcompile_local.config import PipelineConfig
from memcompile_local.errors import ConfigError
from memcompile_local.pipeline.presets import apply_preset

from _data_paths import LOCOMO_MINI


def reply(req):
    if req.stage == "judge":
        return json.dumps({"label": "CORRECT" if 'Gold answer: "Biscuit"' in req.messages[-1].content else "WRONG"})
    return "Biscuit"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("export")
    cfg = apply_preset("model-free", PipelineConfig()).replace(judge={"allow_self_judge": True})
    spec = EvalSpec(benchmark="locomo", data=str(LOCOMO_MINI), store=str(tmp / "s.sqlite"), out=str(tmp / "run"),
                    limit=3, progress=False)
    EvalRunner(spec, cfg, backend=ScriptedBackend(reply), embedder=HashEmbedder(dim=64), echo=lambda s: None).run()
    return tmp / "run"


def test_rows_carry_selections_tokens_and_labels(run_dir):
    preds = read_jsonl(run_dir / "predictions.jsonl")
    rows = prediction_rows(run_dir)
    assert [r["question_id"] for r in rows] == [p["question_id"] for p in preds] and len(rows) == 6
    run_id = json.loads((run_dir / "config.json").read_text())["run_id"]
    for row, pred in zip(rows, preds):
        assert row["run_id"] == run_id and row["benchmark"] == "locomo"
        assert row["selected_ids"] == pred["selected_ids"] and len(row["selected_ids"]) == 10
        assert row["recall_stages"]["final"] == pred["recall_stages"]["final"]
        assert row["tokens"]["answer"] == pred["tokens"]["answer"] > 0
        assert row["judge_label"] == pred["judge_label"]
        assert row["correct"] is (pred["judge_label"] == "CORRECT")
    dog = next(r for r in rows if r["question"] == "What is the name of Tomas's dog?")
    assert dog["gold"] == "Biscuit" and dog["correct"] is True and dog["category"] == "4"
    assert {r["correct"] for r in rows} == {True, False}


def test_parquet_round_trip(run_dir, tmp_path):
    datasets = pytest.importorskip("datasets")
    path = export_run(run_dir, "parquet", tmp_path / "preds.parquet")
    ds = datasets.Dataset.from_parquet(str(path))
    rows = prediction_rows(run_dir)
    assert ds.num_rows == len(rows)
    assert ds.column_names == list(rows[0])
    back = ds.to_list()
    assert [r["selected_ids"] for r in back] == [r["selected_ids"] for r in rows]
    assert [r["tokens"] for r in back] == [r["tokens"] for r in rows]
    assert [r["judge_label"] for r in back] == [r["judge_label"] for r in rows]


def test_cli_export_and_errors(run_dir, tmp_path, capsys):
    out = tmp_path / "p.jsonl"
    assert main(["export", str(run_dir), "--format", "jsonl", "--out", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    assert read_jsonl(out) == [json.loads(json.dumps(r, sort_keys=True)) for r in prediction_rows(run_dir)]
    with pytest.raises(ConfigError, match="is not a run folder"):
        export_run(tmp_path / "nothing", "parquet")
    with pytest.raises(ConfigError, match="expected one of parquet, jsonl"):
        export_run(run_dir, "csv")


@pytest.fixture(scope="module")
def retrieval_only_dir(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("export-ro")
    cfg = apply_preset("model-free", PipelineConfig())
    spec = EvalSpec(benchmark="locomo", data=str(LOCOMO_MINI), store=str(tmp / "s.sqlite"), out=str(tmp / "run"),
                    limit=2, progress=False, answer=False)
    EvalRunner(spec, cfg, embedder=HashEmbedder(dim=64), echo=lambda s: None).run()
    return tmp / "run"


def test_a_retrieval_only_run_exports_to_parquet_and_leaves_no_partial_file(retrieval_only_dir):
    datasets = pytest.importorskip("datasets")
    # A run that calls no model has an empty token map in every row: parquet has no empty struct.
    assert all(not p["tokens"] for p in read_jsonl(retrieval_only_dir / "predictions.jsonl"))
    path = export_run(retrieval_only_dir, "parquet")
    assert path == retrieval_only_dir / "export.parquet"
    back = datasets.Dataset.from_parquet(str(path)).to_list()
    assert len(back) == len(prediction_rows(retrieval_only_dir)) and back[0]["tokens"] is None
    assert not list(retrieval_only_dir.glob("*.tmp"))


def test_a_failed_parquet_write_removes_its_temporary_file(retrieval_only_dir, tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")

    def broken(self, path, **kw):
        Path(path).write_bytes(b"")
        raise OSError("disk full")

    monkeypatch.setattr(datasets.Dataset, "to_parquet", broken)
    with pytest.raises(OSError, match="disk full"):
        export_run(retrieval_only_dir, "parquet", tmp_path / "x.parquet")
    assert list(tmp_path.iterdir()) == []


def test_jsonl_export_keeps_the_runs_own_predictions_and_every_field(run_dir, tmp_path):
    own = run_dir / "predictions.jsonl"
    before = own.read_bytes()
    path = export_run(run_dir, "jsonl")
    assert path == run_dir / "export.jsonl" and own.read_bytes() == before
    preds, rows = read_jsonl(own), read_jsonl(path)
    for pred, row in zip(preds, rows):
        for field in ("candidate_packets", "timings_ms", "wall_ms"):
            assert field in pred and row[field] is not None, field
        assert row["candidate_packets"] == pred["candidate_packets"]
        assert {k: v for k, v in row["timings_ms"].items() if v is not None} == pred["timings_ms"]
    with pytest.raises(ConfigError, match="a file of the run itself"):
        export_run(run_dir, "jsonl", own)
    assert own.read_bytes() == before
