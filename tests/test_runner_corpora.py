"""``eval realtalk`` and ``eval beam`` end to end on fixtures of our own writing: the run folder,
report, recall table (reachable gold, dropped ids counted, abstention left out of recall),
token table and export, a judged run with a scripted backend, the CLI flags, and a
retrieval-only run on the real dev chats when ../shared/data is there."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from memcompile_local.adapters.scripted import HashEmbedder, ScriptedBackend
from memcompile_local.bench.export import prediction_rows
from memcompile_local.bench.runner import EvalRunner, EvalSpec, read_jsonl
from memcompile_local.cli import main
from memcompile_local.config import PipelineConfig
from memcompile_local.pipeline.presets import apply_preset

from _data_paths import BEAM_DEV, BEAM_MINI, LOCOMO_MINI, REALTALK_DEV, REALTALK_MINI, require_dev


def model_free() -> PipelineConfig:
    return apply_preset("model-free", PipelineConfig())


def run(tmp_path: Path, benchmark: str, data, **kw) -> dict:
    spec = EvalSpec(benchmark=benchmark, data=data, store=str(tmp_path / "s.sqlite"), out=str(tmp_path / "run"),
                    progress=False, answer=False, **kw)
    return EvalRunner(spec, model_free(), embedder=HashEmbedder(dim=64), echo=lambda s: None).run()


def test_realtalk_retrieval_only_run(tmp_path):
    result = run(tmp_path, "realtalk", str(REALTALK_MINI))
    assert result["tokens_by_stage"] == {}  # zero model calls
    m = result["metrics"]
    assert m["benchmark"] == "realtalk" and m["count"] == 6
    assert list(m["categories"].values()) == ["multi-hop", "temporal", "open-domain"]
    # D7:40 and D9:99 name no turn: left out, counted; the open-domain question has no gold left
    assert m["evidence"] == {"gold_ids": 9, "reachable_ids": 7, "dropped_ids": 2, "questions_with_dropped": 2,
                             "questions_without_gold": 1, "abstention": 0}
    rec = m["overall"]["recall"]["final"]
    assert rec["n"] == 5 and rec["recall"] == 1.0  # every turn of these small chats fits in K=10
    assert m["per_category"]["3"]["recall"]["final"]["n"] == 0
    folder = tmp_path / "run"
    rows = {r["question_id"]: r for r in read_jsonl(folder / "predictions.jsonl")}
    flat = rows["Chat_1_Ines_Tomas:q2"]
    assert flat["gold_evidence"] == ["D2:2"] and flat["gold_evidence_unreachable"] == ["D7:40"]
    report = (folder / "report.md").read_text()
    assert report.startswith("# REALTALK benchmark report")
    assert "2 name no turn (in 2 questions)" in report and "### Evidence recall (reachable gold)" in report
    assert "## Token cost" in report and "## Metric definitions" in report and "Recall open-domain" in report
    config = json.loads((folder / "config.json").read_text())
    assert config["benchmark"] == "realtalk" and len(config["data_sha256"]) == 64
    exported = prediction_rows(folder)
    assert len(exported) == 6 and {r["benchmark"] for r in exported} == {"realtalk"}
    # the same command again resumes the same run folder
    assert run(tmp_path, "realtalk", str(REALTALK_MINI))["run_id"] == result["run_id"]


def test_realtalk_files_and_conversation_selection(tmp_path):
    files = (str(REALTALK_MINI / "Chat_2_Ines_Malik.json"),)
    result = run(tmp_path, "realtalk", files)
    assert result["metrics"]["count"] == 2
    other = tmp_path / "o"
    other.mkdir()
    picked = run(other, "realtalk", str(REALTALK_MINI), conversations=("Chat_2_Ines_Malik",))
    assert picked["metrics"]["count"] == 2


def test_beam_retrieval_only_run_keeps_abstention_out_of_recall(tmp_path):
    result = run(tmp_path, "beam", str(BEAM_MINI))
    m = result["metrics"]
    assert m["benchmark"] == "beam" and m["count"] == 9
    assert m["per_category"]["abstention"]["count"] == 1
    assert m["per_category"]["abstention"]["recall"]["final"]["n"] == 0
    ev = m["evidence"]
    # an abstention question and one with an empty source list have no gold; chat 2 cites a turn 7 it lacks
    assert ev["abstention"] == 1 and ev["questions_without_gold"] == 2 and ev["dropped_ids"] == 1
    assert m["overall"]["recall"]["final"]["n"] == 7
    report = (tmp_path / "run" / "report.md").read_text()
    assert report.startswith("# BEAM benchmark report") and "knowledge update" in report


def test_beam_long_reply_refused_then_accepted(tmp_path):
    chat = tmp_path / "data" / "100K" / "1"
    shutil.copytree(BEAM_MINI / "1", chat)
    doc = json.loads((chat / "chat.json").read_text())
    doc[0]["turns"][2][1]["content"] = "water " * 20_000
    (chat / "chat.json").write_text(json.dumps(doc))
    store = tmp_path / "s.sqlite"
    argv = ["eval", "beam", "--data", str(chat), "--store", str(store), "--out", str(tmp_path / "r"),
            "--preset", "model-free", "--retrieval-only", "--embedder", "hash", "--quiet"]
    assert main(argv) == 2
    assert not (tmp_path / "r").exists()
    assert main(argv + ["--max-turn-chars", "120000"]) == 0
    assert (tmp_path / "r" / "report.md").exists()


def test_max_turn_chars_applies_to_every_corpus(tmp_path, capsys):
    base = ["--store", str(tmp_path / "s.sqlite"), "--preset", "model-free", "--retrieval-only", "--embedder",
            "hash", "--quiet", "--max-turn-chars", "20"]
    assert main(["eval", "locomo", "--data", str(LOCOMO_MINI), "--out", str(tmp_path / "a"), *base]) == 2
    assert "at most 20 characters" in capsys.readouterr().err
    assert main(["eval", "realtalk", "--data", str(REALTALK_MINI), "--out", str(tmp_path / "b"), *base]) == 2
    assert "at most 20 characters" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_cli_eval_realtalk_with_several_files_and_export(tmp_path, capsys):
    out = tmp_path / "r"
    argv = ["eval", "realtalk", "--data", str(REALTALK_MINI / "Chat_1_Ines_Tomas.json"),
            str(REALTALK_MINI / "Chat_2_Ines_Malik.json"), "--store", str(tmp_path / "s.sqlite"), "--out", str(out),
            "--preset", "model-free", "--retrieval-only", "--embedder", "hash", "--quiet"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "gold ids naming no turn: 2 of 9" in text and "multi-hop" in text
    assert main(["export", str(out), "--format", "jsonl"]) == 0
    assert len((out / "predictions.jsonl").read_text().splitlines()) == 6
    # one path only for the other benchmarks
    assert main(["eval", "locomo", "--data", "a.json", "b.json", "--store", str(tmp_path / "x.sqlite")]) == 2


def test_judged_realtalk_run_with_a_scripted_model(tmp_path):
    def reply(req):
        if req.stage == "judge":
            # correct when the gold answer names the bakery too (the response always does)
            return json.dumps({"label": "CORRECT" if req.messages[-1].content.lower().count("bakery") > 1 else "WRONG"})
        return "A bakery"

    spec = EvalSpec(benchmark="realtalk", data=str(REALTALK_MINI), store=str(tmp_path / "s.sqlite"),
                    out=str(tmp_path / "run"), progress=False)
    cfg = model_free().replace(judge={"allow_self_judge": True})
    result = EvalRunner(spec, cfg, backend=ScriptedBackend(reply), embedder=HashEmbedder(dim=64),
                        echo=lambda s: None).run()
    m = result["metrics"]
    assert m["overall"]["judge"]["n"] == 6 and m["overall"]["judge"]["correct"] == 1
    assert m["overall"]["mem0_f1"] is not None and result["token_table"]["rows"]
    assert result["tokens_by_stage"]["answer"]["calls"] == 6


# ----------------------------------------------------------------------------- the dev chats

@pytest.mark.slow
def test_dev_realtalk_and_beam_load_through_the_runner(tmp_path):
    realtalk = require_dev(REALTALK_DEV)
    beam = require_dev(BEAM_DEV / "1")
    r = run(tmp_path, "realtalk", str(realtalk), conversations=("Chat_3_Kevin_Paola",))
    assert r["metrics"]["count"] == 71 and r["metrics"]["evidence"]["dropped_ids"] == 2
    other = tmp_path / "b"
    other.mkdir()
    b = run(other, "beam", str(beam))
    assert b["metrics"]["count"] == 20 and b["metrics"]["evidence"]["abstention"] == 2
    assert b["metrics"]["overall"]["recall"]["final"]["n"] == 18
