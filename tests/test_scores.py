"""Search scores a client can use: every selector's scores lie in [0, 1] and never rise down the
list, each with the meaning evidence/relevance.py documents, and ``explain`` gives the numbers
the selector ranked by (for the weighted sum, contributions that add up to its raw score)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from memcompile_local import Memory, PipelineConfig
from memcompile_local.adapters.scripted import HashEmbedder, ScriptedBackend
from memcompile_local.evidence.relevance import address_score_scale, monotone_scores
from memcompile_local.fused.channels import fused_scores
from memcompile_local.fused.ranker import load_model
from memcompile_local.fused.retriever import FusedRetriever
from memcompile_local.llm.client import LLMClient
from memcompile_local.pipeline.compile import query_intent
from memcompile_local.pipeline.presets import apply_preset
from memcompile_local.store import MemoryStore

RANKER_CHAT = json.loads((Path(__file__).parent / "fixtures" / "ranker_chat.json").read_text(encoding="utf-8"))

# Two people, alternating (the weighted sum's shape under ranker "auto"), written for these tests.
PEOPLE = [
    {"time": "2024-03-02 10:00", "turns": [
        {"speaker": "Ines", "text": "I adopted a grey cat called Miso from the shelter."},
        {"speaker": "Tomas", "text": "Lovely! I went kayaking on the lake with my brother."},
        {"speaker": "Ines", "text": "Miso sleeps on the windowsill all afternoon."},
        {"speaker": "Tomas", "text": "My brother wants to try rock climbing next."}]},
    {"time": "2024-04-15 18:30", "turns": [
        {"speaker": "Ines", "text": "I started pottery classes on Tuesdays, and I made a bowl."},
        {"speaker": "Tomas", "text": "I read two books about the history of Lisbon."},
        {"speaker": "Ines", "text": "My sister visited in April and we baked bread."},
        {"speaker": "Tomas", "text": "I planted tomatoes and basil on the balcony."}]},
]
QUESTIONS = ["What is the name of Ines's cat?", "What hobbies does Ines have?", "What did Tomas do with his brother?",
             "What happened in April 2024?", "What books did Tomas read?"]


def responder(req):
    """The scripted model: the intent of a question, and an ordering of a pool (reversed, so
    the order is the model's and not the pool's)."""
    if req.stage == "intent":
        return json.dumps({"need_attribute": False, "people": [], "keywords": [], "time": None})
    if req.stage in ("schedule", "frontier"):
        return json.dumps({"ranked_candidate_ids": list(req.output.labels)[::-1][: req.output.k]})
    return None


def _memory(store, **changes) -> Memory:
    cfg = apply_preset("model-free", PipelineConfig())
    cfg = cfg.replace(**changes) if changes else cfg
    return Memory(store, cfg, embedder=HashEmbedder(dim=64), client=LLMClient(ScriptedBackend(responder), store))


def _check_monotone(hits) -> list[float]:
    scores = [h.score for h in hits]
    assert all(isinstance(s, float) and 0.0 <= s <= 1.0 for s in scores), scores
    assert all(a >= b for a, b in zip(scores, scores[1:])), scores
    return scores


SELECTORS = {  # anchor selector, frontier: the selector's name in explain
    ("fused", "none"): "fused",
    ("normalized", "none"): "normalized",
    ("mmr", "none"): "mmr",
    ("dense", "none"): "dense",
    ("pursuit", "none"): "pursuit",
    ("llm", "none"): "llm",
    ("llm", "llm"): "llm",
    ("fused", "pursuit"): "fused",
}


@pytest.mark.parametrize("selector, frontier", list(SELECTORS))
def test_every_selector_scores_in_unit_range_never_rising_down_the_list(tmp_path, selector, frontier):
    store = MemoryStore(tmp_path / "m.sqlite")
    mem = _memory(store, evidence={"anchor_selector": selector, "frontier": frontier, "k0": 5},
                  fusion={"ranker": "weighted"})
    mem.add("p", PEOPLE)
    routing = mem.config.routing
    for question in QUESTIONS:
        hits = mem.search("p", question, explain=True)
        scores = _check_monotone(hits)
        assert hits and all(h.explain is not None for h in hits)
        ctx = mem.compile("p", question)
        anchors = set(ctx.anchors)
        for h in hits:
            if h.packet.packet_id in anchors:
                assert h.explain.selector == SELECTORS[(selector, frontier)]
        own = []  # each hit's score on its selector's own scale, before the cap down the list
        for h in hits:
            e = h.explain
            if e.selector in ("normalized", "mmr"):
                own.append(e.raw / address_score_scale(routing) if e.raw is not None else None)
            elif e.selector in ("dense", "pursuit"):
                own.append(e.raw)
                assert [c.name for c in e.channels] == ["dense_turn"] and e.channels[0].value == e.raw
            elif e.selector == "llm":
                assert e.raw is None
                own.append(1.0 / h.rank)
            elif e.selector == "fused":
                own.append(None)  # checked below against the selector's own arrays
            else:  # a frontier-added packet its selector did not score
                own.append(None)
        want = monotone_scores(own)
        for h, w, o in zip(hits, want, own):
            if o is not None:
                assert h.score == pytest.approx(w), (question, h.rank, h.explain)
    store.close()


def test_the_weighted_sum_score_is_its_total_on_a_fixed_scale_and_its_contributions_add_up(tmp_path):
    store = MemoryStore(tmp_path / "m.sqlite")
    mem = _memory(store, fusion={"ranker": "weighted"})
    mem.add("p", PEOPLE)
    view = mem.view("p")
    retriever = FusedRetriever(view.fusion, mem.config.fusion, view.packets)
    for question in QUESTIONS:
        hits = mem.search("p", question, explain=True)
        _check_monotone(hits)
        intent = query_intent(question, mem.config, None, view)
        scored = fused_scores(view.fusion, question, retriever.query_vector(mem.embedder, question,
                                                                            intent.lexical_query()), mem.config.fusion)
        # The scale: each channel at most 1 times its weight, summed over the channels computed
        # (no role channel on a history without an assistant).
        assert set(scored.channels) == {"lexical", "packet", "speaker", "temporal", "time_match", "answer_type"}
        f = mem.config.fusion
        assert scored.scale == pytest.approx(f.lexical_weight + f.packet_weight + f.speaker_weight + f.temporal_weight
                                             + f.time_match_weight + f.answer_type_weight)
        capped = monotone_scores([float(scored.relevance[view.fusion.row_of[h.packet.packet_id]]) for h in hits])
        assert [h.score for h in hits] == pytest.approx(capped)
        for h in hits:
            e = h.explain
            row = view.fusion.row_of[h.packet.packet_id]
            assert e.selector == "fused" and e.raw == pytest.approx(float(scored.total[row]), abs=1e-12)
            assert sum(c.contribution for c in e.channels) == pytest.approx(e.raw, abs=1e-12)
            names = [c.name for c in e.channels]
            assert names == ["bm25_context", "dense_turn", "dense_context", "speaker", "temporal", "time_match",
                             "answer_type"]
            by = {c.name: c for c in e.channels}
            assert by["bm25_context"].value == pytest.approx(float(scored.channels["lexical"][row]))
            # The dense channel took the larger cosine: it carries the contribution, the other none.
            dense = float(scored.channels["packet"][row])
            assert max(by["dense_turn"].value, by["dense_context"].value) == pytest.approx(dense)
            assert by["dense_turn"].contribution + by["dense_context"].contribution == pytest.approx(f.packet_weight
                                                                                                    * dense)
            assert 0.0 in (by["dense_turn"].contribution, by["dense_context"].contribution)
    # A question about a named participant: the speaker channel adds its weight to their turns.
    hits = mem.search("p", "What is the name of Ines's cat?", explain=True)
    by = {c.name: c for c in hits[0].explain.channels}
    assert hits[0].packet.speaker == "Ines" and by["speaker"].value == 1.0
    assert by["speaker"].contribution == pytest.approx(mem.config.fusion.speaker_weight)
    store.close()


def test_the_pursuit_complement_keeps_scores_monotone_by_capping(tmp_path):
    """A list question's slots after the kept ones are MemPursuit's picks, not score order: a
    pick whose own score is above the hit before it is capped at that hit's score."""
    store = MemoryStore(tmp_path / "m.sqlite")
    mem = _memory(store, fusion={"ranker": "weighted", "complement_keep": 1, "complement_pool": 8},
                  evidence={"k0": 6})
    mem.add("p", PEOPLE)
    question = "What hobbies does Ines have?"  # a list question
    hits = mem.search("p", question, explain=True)
    scores = _check_monotone(hits)
    own = [h.explain.raw for h in hits]
    assert own != sorted(own, reverse=True)  # pursuit did reorder: the raw sums are not in order ...
    assert scores == sorted(scores, reverse=True)  # ... while the scores a client reads are
    store.close()


def test_the_learned_rankers_score_is_its_calibrated_probability(tmp_path):
    store = MemoryStore(tmp_path / "m.sqlite")
    mem = _memory(store, fusion={"ranker": "learned"})
    mem.add(RANKER_CHAT["namespace"], RANKER_CHAT["sessions"])
    model = load_model()
    assert model.calibration is not None
    for q in RANKER_CHAT["questions"]:
        hits = mem.search(RANKER_CHAT["namespace"], q["question"], explain=True)
        scores = _check_monotone(hits)
        for h in hits:
            e = h.explain
            assert e.selector == "learned" and e.raw is not None
            by = {c.name: c for c in e.channels}
            assert by["ranker"].value == e.raw and all(c.contribution is None for c in e.channels)
            assert {"bm25_turn", "bm25_context", "dense_turn", "dense_context", "speaker", "time_match",
                    "weighted"} <= set(by)
        probs = [float(model.probability(np.asarray([h.explain.raw]))[0]) for h in hits]
        assert scores == pytest.approx(monotone_scores(probs))
        # The ranker's order is by its raw score (no complement for these questions).
        if not any(w in q["question"].lower() for w in ("which vegetables", "how many")):
            assert [h.explain.raw for h in hits] == sorted((h.explain.raw for h in hits), reverse=True)
    store.close()


def test_monotone_scores_cap_clip_and_fill():
    assert monotone_scores([0.9, 0.95, 0.5, None, 1.7, -0.2]) == [0.9, 0.9, 0.5, 0.5, 0.5, 0.0]
    assert monotone_scores([None, 0.4]) == [0.0, 0.0]
    assert monotone_scores([]) == []


def test_without_explain_no_explanation_is_made(tmp_path):
    store = MemoryStore(tmp_path / "m.sqlite")
    mem = _memory(store)
    mem.add("p", PEOPLE)
    hits = mem.search("p", QUESTIONS[0])
    assert hits and all(h.explain is None for h in hits)
    assert mem.compile("p", QUESTIONS[0]).explanations == {}
    assert [h.score for h in hits] == [h.score for h in mem.search("p", QUESTIONS[0], explain=True)]
    store.close()
