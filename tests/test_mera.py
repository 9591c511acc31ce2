"""MERA's missing-evidence rounds (evidence/mera.py, pipeline/mera.py) with rule and scripted parts."""

from __future__ import annotations

import json

import pytest

from memcompile_local.adapters.scripted import ANY_STAGE, HashEmbedder, ScriptedBackend
from memcompile_local.bench.rounds import mera_row, round_recall, round_recall_markdown
from memcompile_local.config import PipelineConfig, config_needs_llm
from memcompile_local.errors import ConfigError
from memcompile_local.evidence.mera import (
    LLMPlanner, LLMVerifier, Plan, PlannedQuery, RulePlanner, RuleVerifier, merge_final, run_mera)
from memcompile_local.llm.client import LLMClient
from memcompile_local.memory import Memory
from memcompile_local.pipeline.compile import compile_context
from memcompile_local.pipeline.presets import apply_presets
from memcompile_local.store import MemoryStore
from memcompile_local.types import Descriptor, SourcePacket


def packet(i: int, speaker: str, text: str) -> SourcePacket:
    return SourcePacket(namespace="ns", packet_id=f"D1:{i}", ordinal=i, session_index=1, session_id="s1",
                        session_time="8 May, 2023", speaker=speaker, content=text, image_caption=None, sha256="x")


def claim(p: SourcePacket, text: str, people=(), keywords=(), event_time="") -> Descriptor:
    return Descriptor(descriptor_id=f"ns:{p.packet_id}:0", namespace="ns", packet_id=p.packet_id, claim_index=0,
                      text=text, speaker=p.speaker, session_index=1, session_time=p.session_time,
                      people=tuple(people), keywords=tuple(keywords), event_time=event_time)


P = [
    packet(0, "Ann", "My sister Ines moved to Bergen last year."),
    packet(1, "Bo", "That is far away!"),
    packet(2, "Ann", "Ines works at Halden Energy now."),
    packet(3, "Bo", "I baked bread today."),
    packet(4, "Ann", "The weather is grey."),
]
BY_ID = {p.packet_id: p for p in P}
DESCS = {
    "D1:0": [claim(P[0], "Ann's sister Ines moved to Bergen.", people=["Ines"], keywords=["sister", "bergen"])],
    "D1:2": [claim(P[2], "Ines works at Halden Energy.", people=["Ines"], keywords=["halden energy"])],
    "D1:3": [claim(P[3], "Bo baked bread.", keywords=["bread"])],
}
QUESTION = "Where does Ann's sister work?"


def index_search(query: str):
    """A tiny lexical search over P: score = shared lower-cased words."""
    words = set(query.lower().replace("?", "").replace("'s", "").split())
    scored = [(p.packet_id, float(len(words & set(p.content.lower().replace(".", "").split())))) for p in P]
    return sorted([s for s in scored if s[1] > 0], key=lambda s: (-s[1], s[0]))


class Calls:
    def __init__(self, fn):
        self.fn, self.queries = fn, []

    def __call__(self, q):
        self.queries.append(q)
        return self.fn(q)


def test_rule_planner_asks_for_what_the_evidence_names_and_the_question_lacks():
    planner = RulePlanner(DESCS, queries=2)
    plan = planner.plan(QUESTION, [P[0]], [])
    assert plan.source == "rule" and not plan.enough
    assert [q.missing for q in plan.queries] == ["Ines", "bergen"]  # "sister" is in the question
    assert plan.queries[0].query.startswith("Ines ")
    assert planner.plan(QUESTION, [P[0]], ["Ines", "bergen"]).enough  # nothing left to ask
    assert planner.plan(QUESTION, [], []).enough


def test_rule_verifier_needs_a_shared_cue_and_a_score_share():
    v = RuleVerifier(DESCS, threshold=0.5)
    assert v.accepts(QUESTION, [P[0]], P[2], 1.0, 1.0)  # shares "Ines" with the evidence
    assert not v.accepts(QUESTION, [P[0]], P[3], 1.0, 1.0)  # bread: nothing shared
    assert not v.accepts(QUESTION, [P[0]], P[2], 0.4, 1.0)  # below half the query's best score


def test_rounds_reach_a_packet_the_first_selection_missed():
    search = Calls(index_search)
    res = run_mera(QUESTION, ["D1:0", "D1:1"], search, BY_ID, RulePlanner(DESCS), RuleVerifier(DESCS, threshold=0.3),
                   k=2, max_rounds=2, final_slots=1)
    assert "D1:2" not in res.cumulative[0] and "D1:2" in res.cumulative[1]
    assert res.packet_ids == ("D1:0", "D1:2")  # same budget: the tail of the first selection gives way
    assert "D1:3" not in res.cumulative[-1]  # searched or not, bread is never verified
    assert len(res.cumulative) == 3  # round 0, 1, 2 (a round not run repeats the last set)


def test_merge_final_keeps_the_budget():
    assert merge_final(["a", "b", "c"], ["x", "y", "b"], 3, 2) == ["a", "x", "y"]
    assert merge_final(["a"], ["x", "y"], 3, 1) == ["a", "x"]
    assert merge_final(["a", "b"], [], 2, 2) == ["a", "b"]


def _plan(enough=False, queries=()):
    return json.dumps({"enough": enough, "queries": [{"query": q, "missing": m} for q, m in queries]})


def _client(script):
    backend = ScriptedBackend(script)
    return backend, LLMClient(backend)


def test_llm_planner_queries_reach_missed_packets_and_verifier_batches():
    backend, client = _client({
        ("mera_plan", "Question: Where"): [_plan(queries=[("Halden Energy Ines", "where Ines works")]),
                                           _plan(enough=True)],
        ("mera_verify", "Halden"): json.dumps({"relevant": True, "span": "Halden Energy"}),
        ("mera_verify", ANY_STAGE): json.dumps({"relevant": False, "span": ""}),
        (ANY_STAGE, ""): json.dumps({"relevant": False, "span": ""}),
    })
    rule_v = RuleVerifier(DESCS)
    res = run_mera(QUESTION, ["D1:0", "D1:1"], index_search, BY_ID, LLMPlanner(client, RulePlanner(DESCS)),
                   LLMVerifier(client, rule_v), k=2, max_rounds=3, final_slots=1)
    assert res.rounds[0].plan.source == "llm" and res.rounds[0].verified == ("D1:2",)
    assert res.stopped == "enough" and len(res.rounds) == 2
    assert res.packet_ids == ("D1:0", "D1:2")
    assert res.tokens > 0 and res.rounds[0].tokens > 0
    # Round 0 verified both first packets and round 1 the hits in one batch each.
    assert backend.generate_calls <= 5


def test_enough_stops_before_any_search():
    _, client = _client({("mera_plan", ""): _plan(enough=True, queries=[("ignored", "x")]),
                         ("mera_verify", ""): json.dumps({"relevant": True, "span": ""})})
    search = Calls(index_search)
    res = run_mera(QUESTION, ["D1:0"], search, BY_ID, LLMPlanner(client, RulePlanner(DESCS)),
                   LLMVerifier(client, RuleVerifier(DESCS)), k=1, max_rounds=2)
    assert res.stopped == "enough" and search.queries == [] and res.packet_ids == ("D1:0",)
    assert res.rounds[0].plan.queries == ()


def test_malformed_plan_falls_back_typed_and_the_run_completes():
    _, client = _client({("mera_plan", ""): "this is not json {",
                         ("mera_verify", ""): json.dumps({"relevant": True, "span": "nowhere in the text"})})
    res = run_mera(QUESTION, ["D1:0"], index_search, BY_ID, LLMPlanner(client, RulePlanner(DESCS)),
                   LLMVerifier(client, RuleVerifier(DESCS)), k=2, max_rounds=1, final_slots=1)
    plan = res.rounds[0].plan
    assert plan.source == "fallback" and plan.error == "OutputValidationError"
    assert [q.missing for q in plan.queries][:1] == ["Ines"]  # the rule plan
    assert len(res.packet_ids) == 2


def test_repaired_plan_drops_empty_duplicate_and_surplus_queries():
    _, client = _client({("mera_plan", ""): _plan(queries=[("", "x"), ("Ines job", "job"), ("ines  job", "job2"),
                                                           ("Bergen", "city"), ("bread", "b")])})
    plan = LLMPlanner(client, RulePlanner(DESCS), queries=2).plan(QUESTION, [P[0]], [])
    assert plan.repaired and [q.query for q in plan.queries] == ["Ines job", "Bergen"]


class EndlessPlanner:
    def __init__(self):
        self.n = 0

    def plan(self, question, evidence, asked, *, namespace=None):
        self.n += 1
        return Plan((PlannedQuery(f"query {self.n} Ines", f"piece {self.n}"),), False, "rule")


def test_round_limit_holds():
    def search(q):  # a new packet every time, so only the limit stops the rounds
        return [(f"D1:{len(calls) % 5}", 1.0)] if calls.append(q) is None else []

    calls: list[str] = []
    planner = EndlessPlanner()
    res = run_mera(QUESTION, ["D1:0"], search, BY_ID, planner, RuleVerifier(DESCS, threshold=0.0), k=3, max_rounds=2)
    assert planner.n == 2 and len(res.rounds) == 2 and len(res.cumulative) == 3
    res0 = run_mera(QUESTION, ["D1:0"], search, BY_ID, EndlessPlanner(), RuleVerifier(DESCS), k=3, max_rounds=0)
    assert res0.rounds == () and res0.packet_ids == ("D1:0",)


def test_token_budget_stops_the_rounds():
    _, client = _client({("mera_plan", ""): _plan(queries=[("Ines Halden", "job")]),
                         ("mera_verify", ""): json.dumps({"relevant": True, "span": ""})})
    res = run_mera(QUESTION, ["D1:0", "D1:1"], index_search, BY_ID, LLMPlanner(client, RulePlanner(DESCS)),
                   LLMVerifier(client, RuleVerifier(DESCS)), k=2, max_rounds=5, max_tokens=1)
    assert res.stopped == "token_budget" and res.rounds == ()  # round 0's verification spent the budget


def test_presets_pick_rule_or_llm_parts():
    mf = apply_presets("model-free+mera", PipelineConfig())
    assert mf.mera.enabled and mf.mera.planner == "rule" and not config_needs_llm(mf)
    full = apply_presets("mera", PipelineConfig())
    assert full.mera.planner == "llm" and full.mera.verifier == "llm" and config_needs_llm(full)
    assert full.evidence.anchor_selector == "llm"


def _chat():
    return [{"time": "2023-05-08 10:00", "turns": [
        {"speaker": "Ann", "text": "My sister Ines moved to Bergen last year."},
        {"speaker": "Bo", "text": "That is far away!"},
        {"speaker": "Ann", "text": "Ines works at Halden Energy now."},
        {"speaker": "Bo", "text": "I baked bread today."},
        {"speaker": "Ann", "text": "The weather is grey and cold."},
        {"speaker": "Bo", "text": "Pottery class was fun."}]}]


def test_model_free_mera_through_memory_compile(tmp_path):
    cfg = apply_presets("model-free+mera", PipelineConfig()).replace(evidence={"k0": 2})
    with Memory(MemoryStore(tmp_path / "m.sqlite"), cfg, embedder=HashEmbedder(dim=64)) as mem:
        mem.add("u", _chat())
        ctx = mem.compile("u", "Where does Ann's sister live?")
        trace = ctx.trace["anchors"]["mera"]
        assert len(ctx.packet_ids) == 2 and "mera" in ctx.timings_ms
        assert len(trace["cumulative"]) == 3 and trace["rounds"][0]["plan_source"] == "rule"
        row = {"category": 1, "gold_evidence": ["S1:1"], "mera_rounds": mera_row(trace, ctx.packet_ids)}
        table = round_recall([row], {1: "single-hop"})
        assert table["questions"] == 1 and len(table["overall"]) == 3
        assert "after round 2" in round_recall_markdown(table)


def test_llm_mera_needs_a_client(tmp_path):
    cfg = apply_presets("model-free+mera", PipelineConfig()).replace(mera={"planner": "llm"})
    with Memory(MemoryStore(tmp_path / "m.sqlite"), cfg, embedder=HashEmbedder(dim=64)) as mem:
        mem.add("u", _chat())
        with pytest.raises(ConfigError, match="MERA"):
            compile_context("Where does Ann's sister live?", mem.view("u"), cfg, client=None, embedder=mem.embedder)
