"""End to end through the Memory API on the shipped example conversation.

A scripted backend answers every LLM stage deterministically, so these tests check the
wiring: build -> store -> address -> normalization -> scheduler -> frontier -> view -> answer,
the cache (a second build makes zero calls), the ledger and forget.
"""

from __future__ import annotations

import json

import pytest

from memcompile_local.adapters.scripted import HashEmbedder, ScriptedBackend
from memcompile_local.config import PipelineConfig
from memcompile_local.pipeline.presets import apply_preset
from memcompile_local.llm.client import LLMClient, NoModelBackend
from memcompile_local.memory import Memory
from memcompile_local.store import MemoryStore

EVENT = {"subject_people": [], "predicate": "say", "focus_terms": ["thing"], "goal_context_terms": [],
         "event_type": "occurrence", "event_time": "", "polarity": "neutral", "confidence": 0.5}


def responder(req):
    user = req.messages[-1].content
    if req.stage == "fact":
        lines = [line.strip() for line in user.splitlines() if line.strip()]
        return json.dumps({"facts": [lines[-1][:160], "A second claim about " + lines[-1][:40]]})
    if req.stage == "metadata":
        return json.dumps({"people": [], "keywords": ["topic"], "time": ["", ""],
                           "needs_profile_extraction": False, "event": EVENT})
    if req.stage == "intent":
        return json.dumps({"need_attribute": False, "people": [], "keywords": ["trip"], "time": None})
    if req.stage in ("schedule", "frontier"):
        labels = list(req.output.labels)
        # Reverse pool order: proves labels are mapped back by label, not by position.
        return json.dumps({"ranked_candidate_ids": labels[::-1][: req.output.k]})
    if req.stage == "answer":
        return "scripted answer"
    return None


def test_full_pipeline_with_scripted_model(tmp_path, conv):
    store = MemoryStore(tmp_path / "m.sqlite")
    backend = ScriptedBackend(responder)
    client = LLMClient(backend, store, run_id="run-1")
    mem = Memory(store, PipelineConfig(), client=client, embedder=HashEmbedder(dim=64))
    mem.add(conv.namespace, conv)
    built = mem.build(conv.namespace)
    assert built.packets == sum(len(s.turns) for s in conv.sessions)
    assert built.descriptors == 2 * built.packets and built.cells > 0
    calls_after_build = len(backend.requests)

    # Rebuilding an unchanged memory makes zero model calls.
    again = mem.build(conv.namespace)
    assert again.extracted_now == 0 and again.embedded_now == 0
    assert len(backend.requests) == calls_after_build

    question = conv.questions[0].question
    ans = mem.answer(conv.namespace, question)
    ctx = ans.context
    assert ans.text == "scripted answer"
    pool_ids = [pc.packet_id for pc in ctx.pool]
    # A0: K0 packets from the closed pool, mapped back in the scheduler's (reversed) order.
    assert len(ctx.anchors) == min(10, len(pool_ids))
    assert list(ctx.anchors) == pool_ids[::-1][: len(ctx.anchors)]
    # The frontier appends at most K_Delta packets and keeps A0 in front.
    assert ctx.packet_ids[: len(ctx.anchors)] == ctx.anchors
    assert len(ctx.frontier_added) <= 2
    assert not set(ctx.frontier_added) & set(ctx.anchors)
    # Claim-bundle view renders every selected packet's claims.
    for pid in ctx.packet_ids:
        assert pid in ctx.text
    stages = {r.stage for r in backend.requests}
    assert {"fact", "metadata", "intent", "schedule", "frontier", "answer"} <= stages
    totals = client.totals()
    assert totals["fact"]["calls"] == built.packets
    # Asking again is answered from the cache: no new backend call.
    n = len(backend.requests)
    mem.answer(conv.namespace, question)
    assert len(backend.requests) == n

    deleted = mem.forget(conv.namespace)
    assert deleted["packets"] == built.packets
    assert store.packets(conv.namespace) == []
    store.close()


def test_model_free_path_makes_no_model_call(tmp_path, conv):
    store = MemoryStore(tmp_path / "m.sqlite")
    cfg = apply_preset("model-free", PipelineConfig())
    client = LLMClient(NoModelBackend(), store, run_id="mf")
    mem = Memory(store, cfg, client=client, embedder=HashEmbedder(dim=64))
    assert not mem.needs_llm()
    mem.add(conv.namespace, conv)
    ctx = mem.compile(conv.namespace, conv.questions[0].question)
    assert len(ctx.packet_ids) == len(set(ctx.packet_ids)) == 10
    assert client.totals() == {}
    store.close()


def test_model_free_build_embeds_context_documents_incrementally(tmp_path, conv):
    from dataclasses import replace

    from memcompile_local.build.stages import context_document_keys, context_model_id

    store = MemoryStore(tmp_path / "m.sqlite")
    emb = HashEmbedder(dim=64)
    mem = Memory(store, apply_preset("model-free", PipelineConfig()), client=LLMClient(NoModelBackend(), store),
                 embedder=emb)
    first = replace(conv, sessions=conv.sessions[:-1])
    mem.add(conv.namespace, first)
    n = sum(len(s.turns) for s in first.sessions)
    assert mem.build(conv.namespace).embedded_now == 2 * n  # z(p) and context document per turn
    keys, _ = context_document_keys(store, conv.namespace)
    assert len(store.embeddings(conv.namespace, context_model_id(emb), keys)) == n
    assert mem.view(conv.namespace).fusion.context_matrix.shape == (n, 64)
    # A new session adds its own turns' documents only: nothing before it changes.
    mem.add(conv.namespace, conv)
    added = len(conv.sessions[-1].turns)
    assert mem.build(conv.namespace).embedded_now == 2 * added
    assert mem.build(conv.namespace).embedded_now == 0
    # Composed context vectors embed nothing more and load no context documents.
    composed = Memory(store, apply_preset("model-free", PipelineConfig()).replace(fusion={"dense_context": "composed"}),
                      client=LLMClient(NoModelBackend(), store), embedder=emb)
    assert composed.build(conv.namespace).embedded_now == 0
    store.close()


FULL_STEPS = ["intent", "embed_query", "address", "normalization", "dense", "anchors", "frontier", "render"]
NO_FRONTIER = [s for s in FULL_STEPS if s != "frontier"]

# preset -> (the model stages compile calls, the steps the trace must list, in order)
PRESET_PATHS = {
    "A1": ({"intent", "schedule"}, NO_FRONTIER),
    "A2": ({"intent"}, NO_FRONTIER),
    "A3": ({"intent", "frontier"}, FULL_STEPS),
    "A4": ({"intent", "schedule", "frontier"}, FULL_STEPS),
    "A5": ({"intent", "schedule", "frontier"}, FULL_STEPS),
    "A6": ({"schedule", "frontier"}, FULL_STEPS),
    "A7": ({"intent"}, NO_FRONTIER),
    "view-raw": ({"intent", "schedule", "frontier"}, FULL_STEPS),
    "view-representative": ({"intent", "schedule", "frontier"}, FULL_STEPS),
    "layout-sequential": ({"intent", "schedule", "frontier"}, FULL_STEPS),
    "layout-session": ({"intent", "schedule", "frontier"}, FULL_STEPS),
    "layout-entity": ({"intent", "schedule", "frontier"}, FULL_STEPS),
    "layout-flat": ({"intent", "schedule", "frontier"}, FULL_STEPS),
    # The fused selector is its own retriever: no Address Plane, no D_q, no model call.
    "model-free": (set(), ["intent", "embed_query", "anchors", "render"]),
}


@pytest.mark.parametrize("preset", list(PRESET_PATHS))
def test_every_preset_runs_its_own_steps(tmp_path, conv, preset):
    store = MemoryStore(tmp_path / "m.sqlite")
    backend = ScriptedBackend(responder)
    client = LLMClient(backend, store)
    cfg = apply_preset(preset, PipelineConfig())
    mem = Memory(store, cfg, client=client, embedder=HashEmbedder(dim=64))
    mem.add(conv.namespace, conv)
    mem.build(conv.namespace)
    built = len(backend.requests)
    ctx = mem.compile(conv.namespace, conv.questions[1].question)
    model_stages, steps = PRESET_PATHS[preset]
    assert {r.stage for r in backend.requests[built:]} == model_stages
    assert ctx.trace["stages"] == steps == list(ctx.timings_ms)
    assert 1 <= len(ctx.packet_ids) <= 12
    assert len(set(ctx.packet_ids)) == len(ctx.packet_ids)
    assert ctx.view == cfg.evidence.view
    if "address" in steps:
        assert ctx.address.ran and ctx.address.candidates and ctx.pool and ctx.dense
        assert {pc.packet_id for pc in ctx.pool} == {c.packet_id for c in ctx.address.candidates}
    else:
        assert not ctx.address.ran and ctx.address.candidates == () and ctx.pool == () and ctx.dense == ()
    if cfg.evidence.frontier == "none":
        assert ctx.frontier_added == ()
    # Each ablation's one change is visible in what it produced.
    if preset == "A7":
        assert list(ctx.anchors) == [pid for pid, _ in ctx.dense[:10]]
    if preset == "A4":
        assert all(ch.startswith("cell:") for c in ctx.address.candidates for ch in c.channels)
    if preset in ("A5", "layout-flat"):
        assert ctx.address.opened_cells == ()
    if preset == "A2":
        assert set(ctx.anchors) <= {pc.packet_id for pc in ctx.pool}
    store.close()


def test_fused_path_runs_the_address_plane_only_when_asked(tmp_path, conv):
    store = MemoryStore(tmp_path / "m.sqlite")
    mem = Memory(store, apply_preset("model-free", PipelineConfig()), client=LLMClient(NoModelBackend(), store),
                 embedder=HashEmbedder(dim=64))
    mem.add(conv.namespace, conv)
    question = conv.questions[1].question
    plain = mem.compile(conv.namespace, question)
    traced = mem.compile(conv.namespace, question, address_trace=True)
    assert "address" not in plain.trace["stages"] and not plain.address.ran
    assert traced.trace["stages"] == FULL_STEPS[:-2] + ["render"]  # all but the frontier (none)
    assert traced.address.ran and traced.pool and len(traced.dense) == 40
    # The trace changes nothing that is selected or shown.
    assert (traced.packet_ids, traced.text) == (plain.packet_ids, plain.text)
    # The representative-claim view reads U_q, so it runs the Address Plane without being asked.
    rep_cfg = apply_preset("view-representative", apply_preset("model-free", PipelineConfig()))
    rep = Memory(store, rep_cfg, client=LLMClient(NoModelBackend(), store), embedder=HashEmbedder(dim=64))
    ctx = rep.compile(conv.namespace, question)
    assert "normalization" in ctx.trace["stages"] and "dense" not in ctx.trace["stages"]
    store.close()


def test_small_context_limits_cap_the_scheduler_pool_and_contents(tmp_path, conv):
    store = MemoryStore(tmp_path / "m.sqlite")
    backend = ScriptedBackend(responder)
    client = LLMClient(backend, store)
    cfg = apply_preset("A1", PipelineConfig()).replace(
        extraction={"extractor": "rule"}, evidence={"max_schedule_pool": 12, "max_candidate_chars": 20})
    mem = Memory(store, cfg, client=client, embedder=HashEmbedder(dim=64))
    mem.add(conv.namespace, conv)
    ctx = mem.compile(conv.namespace, conv.questions[6].question)
    sched = [r for r in backend.requests if r.stage == "schedule"][0]
    assert len(sched.output.labels) == 12  # the first 12 of the normalized pool
    assert set(ctx.anchors) <= {pc.packet_id for pc in ctx.pool[:12]}
    body = sched.messages[-1].content
    assert "…" in body and all(len(line) < 200 for line in body.splitlines() if line.startswith("[C"))
    store.close()
