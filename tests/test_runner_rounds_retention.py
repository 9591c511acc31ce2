"""``eval`` with MERA's rounds (per-round recall, tokens) and with a retention budget."""

from __future__ import annotations

import json

from _data_paths import LOCOMO_MINI

from memcompile_local.adapters.scripted import HashEmbedder, ScriptedBackend
from memcompile_local.bench.runner import EvalRunner, EvalSpec
from memcompile_local.config import PipelineConfig
from memcompile_local.pipeline.presets import apply_presets
from memcompile_local.store import MemoryStore


def spec(tmp_path, name, **kw):
    return EvalSpec(benchmark="locomo", data=str(LOCOMO_MINI), store=str(tmp_path / "m.sqlite"),
                    out=str(tmp_path / name), limit=5, progress=False, answer=False, **kw)


def test_model_free_mera_run_reports_recall_after_each_round(tmp_path):
    result = EvalRunner(spec(tmp_path, "mera"), apply_presets("model-free+mera", PipelineConfig()),
                        embedder=HashEmbedder(dim=64), echo=lambda s: None).run()
    table = result["mera_rounds"]
    assert result["tokens_by_stage"] == {} and table["questions"] > 0 and len(table["overall"]) == 3
    assert table["overall"] == sorted(table["overall"])  # cumulative: never falls
    assert table["tokens_per_round"] == [0.0, 0.0, 0.0]
    assert "MERA rounds: cumulative evidence recall" in (tmp_path / "mera" / "report.md").read_text()
    rows = [json.loads(line) for line in (tmp_path / "mera" / "predictions.jsonl").read_text().splitlines()]
    assert all(len(r["mera_rounds"]["cumulative"]) == 3 for r in rows)


def test_llm_planner_tokens_reach_the_token_table(tmp_path):
    def reply(req):
        if req.stage == "mera_plan":
            return json.dumps({"enough": False, "queries": [{"query": "favourite colour", "missing": "colour"}]})
        if req.stage == "mera_verify":
            return json.dumps({"relevant": True, "span": ""})
        raise AssertionError(req.stage)

    cfg = apply_presets("model-free+mera", PipelineConfig()).replace(mera={"planner": "llm", "verifier": "llm"})
    result = EvalRunner(spec(tmp_path, "llm"), cfg, backend=ScriptedBackend(reply), embedder=HashEmbedder(dim=64),
                        echo=lambda s: None).run()
    assert result["tokens_by_stage"]["mera_plan"]["calls"] > 0 and result["tokens_by_stage"]["mera_verify"]["calls"] > 0
    assert all(t > 0 for t in result["mera_rounds"]["tokens_per_round"][:2])


def test_retention_budget_run_reads_only_the_capsules(tmp_path):
    cfg = apply_presets("model-free", PipelineConfig())
    full = EvalRunner(spec(tmp_path, "full"), cfg, embedder=HashEmbedder(dim=64), echo=lambda s: None).run()
    kept = EvalRunner(spec(tmp_path, "kept", retain_budget=0.3, writer="recent"), cfg,
                      embedder=HashEmbedder(dim=64), echo=lambda s: None).run()
    assert kept["run_id"] != full["run_id"]
    r = kept["retention"]
    assert r["writer"] == "recent" and 0 < r["retained_tokens"] <= 0.3 * r["source_tokens"]
    assert r["read_recall"] <= r["retain_recall"] <= 100
    assert "Budgeted retention" in (tmp_path / "kept" / "report.md").read_text()
    store = MemoryStore(tmp_path / "m.sqlite")
    try:
        rows = [json.loads(line) for line in (tmp_path / "kept" / "predictions.jsonl").read_text().splitlines()]
        for row in rows:
            caps = {c["capsule_id"]: c for c in store.capsules(row["namespace"])}
            assert set(row["retention"]["capsules"]) <= set(caps)  # the reader saw capsules only
            assert set(row["selected_ids"]) <= {s for c in caps.values() for s in c["sources"]}
    finally:
        store.close()


def test_a_second_retention_run_rewrites_the_kept_namespace(tmp_path):
    from memcompile_local.bench.retain_eval import retained_namespace
    from memcompile_local.types import Conversation, Session, Turn

    cfg = apply_presets("model-free", PipelineConfig())
    first = EvalRunner(spec(tmp_path, "a", retain_budget=0.3, writer="recent"), cfg,
                       embedder=HashEmbedder(dim=64), echo=lambda s: None).run()
    store = MemoryStore(tmp_path / "m.sqlite")
    try:
        ns = next(iter(first["retention"]["budget_tokens"]))
        keep = retained_namespace(ns, "recent", 0.3)
        # A stale kept namespace (as an older writer version would leave): same ids, other text.
        stale = [p for p in store.packets(keep)][:1]
        store.forget(keep)
        store.ingest(Conversation(namespace=keep, sessions=(Session(index=1, session_id="s", time="1 May, 2023",
                     turns=(Turn(packet_id=stale[0].packet_id, speaker="X", text="stale text"),)),)))
    finally:
        store.close()
    again = EvalRunner(spec(tmp_path, "b", retain_budget=0.3, writer="recent"), cfg,
                       embedder=HashEmbedder(dim=64), echo=lambda s: None).run()
    assert again["retention"]["read_recall"] == first["retention"]["read_recall"]
    store = MemoryStore(tmp_path / "m.sqlite")
    try:
        assert "stale text" not in {p.content for p in store.packets(keep)}
    finally:
        store.close()
