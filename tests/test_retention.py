"""Budgeted pre-query retention (retention/): writers, capsules, metrics, the read path."""

from __future__ import annotations

import json

import pytest

from memcompile_local.adapters.scripted import HashEmbedder, ScriptedBackend
from memcompile_local.bench.retention import read_recall, retain_recall, retention_markdown, retention_table
from memcompile_local.config import PipelineConfig
from memcompile_local.errors import ConfigError
from memcompile_local.language.tokens import count_tokens
from memcompile_local.llm.client import LLMClient
from memcompile_local.memory import Memory
from memcompile_local.pipeline.presets import apply_presets
from memcompile_local.retention import Capsule, capsules_conversation, make_writer
from memcompile_local.retention.writers import (
    LLMWriter, ModelFreeWriter, RandomWriter, RecentWriter, SummaryWriter, informativeness, turn_capsule)
from memcompile_local.store import MemoryStore
from memcompile_local.types import Descriptor, SourcePacket


def packet(i: int, session: int, speaker: str, text: str) -> SourcePacket:
    return SourcePacket(namespace="ns", packet_id=f"D{session}:{i}", ordinal=i, session_index=session,
                        session_id=f"session_{session}", session_time=f"{session} May, 2023", speaker=speaker,
                        content=text, image_caption=None, sha256="x")


def claim(p: SourcePacket, text: str, people=(), keywords=(), event_time="") -> Descriptor:
    return Descriptor(descriptor_id=f"ns:{p.packet_id}:0", namespace="ns", packet_id=p.packet_id, claim_index=0,
                      text=text, speaker=p.speaker, session_index=p.session_index, session_time=p.session_time,
                      people=tuple(people), keywords=tuple(keywords), event_time=event_time)


P = [
    packet(0, 1, "Ann", "Hi Bo!"),
    packet(1, 1, "Bo", "Hey, how are you?"),
    packet(2, 1, "Ann", "My sister Ines moved to Bergen on 3 May 2023."),
    packet(3, 1, "Bo", "Cool."),
    packet(4, 2, "Ann", "Thanks!"),
    packet(5, 2, "Bo", "I adopted two cats, Milo and Luna."),
    packet(6, 2, "Ann", "Haha nice."),
    packet(7, 2, "Bo", "Ok bye."),
]
DESCS = {
    "D1:2": [claim(P[2], "Ann's sister Ines moved to Bergen.", people=["Ines"], keywords=["sister", "bergen"],
                   event_time="2023-05-03")],
    "D2:5": [claim(P[5], "Bo adopted two cats, Milo and Luna.", people=["Milo", "Luna"], keywords=["cats"])],
}
TOTAL = sum(count_tokens(p.content) for p in P)


def test_informativeness_prefers_names_dates_and_first_person_facts():
    assert informativeness("My sister Ines moved on 3 May.", ["Ines"], ["2023-05-03"], ["sister"]) > \
        informativeness("Haha nice.", [], [], []) 
    assert informativeness("Do you like cats?", [], [], ["cats"]) < informativeness("I like cats.", [], [], ["cats"])


@pytest.mark.parametrize("writer", [ModelFreeWriter(), RecentWriter(), RandomWriter(seed=3), SummaryWriter()])
@pytest.mark.parametrize("budget", [0, 5, 20, 1000])
def test_every_writer_stays_within_the_budget(writer, budget):
    res = writer.retain(P, DESCS, budget)
    assert res.tokens <= budget and res.budget == budget and res.source_tokens == TOTAL
    assert all(c.sources for c in res.capsules)
    for c in res.capsules:  # verbatim: every sentence of a capsule is in a source turn
        if c.span != "summary":
            assert c.text in next(p.content for p in P if p.packet_id == c.sources[0])


def test_model_free_writer_keeps_the_facts_recency_keeps_the_end():
    budget = count_tokens(P[2].content) + count_tokens(P[5].content)
    mf = ModelFreeWriter().retain(P, DESCS, budget)
    assert mf.retained_sources() == {"D1:2", "D2:5"}
    recent = RecentWriter().retain(P, DESCS, budget)
    assert "D2:7" in recent.retained_sources() and "D1:2" not in recent.retained_sources()
    assert ModelFreeWriter().retain(P, DESCS, 10 ** 6).retained_sources() == {p.packet_id for p in P}


def test_random_writer_is_seeded():
    a = RandomWriter(seed=1).retain(P, DESCS, 12).retained_sources()
    assert a == RandomWriter(seed=1).retain(P, DESCS, 12).retained_sources()
    assert any(RandomWriter(seed=s).retain(P, DESCS, 12).retained_sources() != a for s in range(2, 8))


def test_summary_writer_writes_one_capsule_per_session():
    res = SummaryWriter().retain(P, DESCS, 40)
    assert [c.capsule_id for c in res.capsules] == ["session_1:summary", "session_2:summary"]
    assert "Ines" in res.capsules[0].text and res.capsules[0].sources[0] == "D1:2"


def test_long_turns_are_cut_to_their_best_sentence_span():
    long = packet(0, 1, "Ann", "Hmm. " * 30 + "My brother Tom lives in Oslo since 2019.")
    c = turn_capsule(long, [], max_tokens=16)
    assert c.span == "sentences" and c.text == "My brother Tom lives in Oslo since 2019." and c.tokens <= 16


def test_a_later_update_supersedes_the_earlier_capsule():
    a = packet(0, 1, "Ann", "I work at Halden Energy in Bergen.")
    b = packet(1, 2, "Ann", "Now I work at Halden Energy in Oslo.")
    descs = {"D1:0": [claim(a, "Ann works at Halden Energy.", keywords=["halden energy", "bergen"])],
             "D2:1": [claim(b, "Ann works at Halden Energy.", keywords=["halden energy", "oslo"])]}
    res = ModelFreeWriter(supersede_overlap=0.3).retain([a, b], descs, 1000)
    old = next(c for c in res.capsules if c.capsule_id == "D1:0")
    assert old.superseded_by == "D2:1"
    assert next(c for c in res.capsules if c.capsule_id == "D2:1").superseded_by is None


def test_capsule_round_trip_and_conversation():
    c = turn_capsule(P[2], DESCS["D1:2"])
    assert Capsule.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    conv = capsules_conversation("ns.keep", [c, turn_capsule(P[5], DESCS["D2:5"])], ["Ann", "Bo"])
    assert [t.packet_id for s in conv.sessions for t in s.turns] == ["D1:2", "D2:5"]
    assert [s.index for s in conv.sessions] == [1, 2]


def test_metrics_and_table():
    assert retain_recall({"D1:2"}, ["D1:2", "D2:5"]) == 0.5
    assert read_recall(["session_1:summary"], {"session_1:summary": ("D1:2", "D1:1")}, ["D1:2"]) == 1.0
    rows = [{"writer": "w", "budget": "0.25", "retain": 1.0, "read": 0.5},
            {"writer": "w", "budget": "0.25", "retain": 0.0, "read": 0.0},
            {"writer": "w", "budget": "0.25", "retain": None, "read": None}]
    t = retention_table(rows)
    assert t == [{"writer": "w", "budget": "0.25", "questions": 2, "retain_recall": 50.0, "read_recall": 25.0}]
    assert "50.0 / 25.0" in retention_markdown(t)


def _llm_reply(*items):
    return json.dumps({"keep": [{"turn": t, "importance": i, "span": s} for t, i, s in items]})


def test_llm_writer_uses_the_models_choice_and_verbatim_spans():
    backend = ScriptedBackend({
        ("retain", "1 May"): _llm_reply(("T003", 5, "moved to Bergen"), ("T009", 5, "")),
        ("retain", "2 May"): _llm_reply(("T002", 4, "not in the message")),
    })
    w = LLMWriter(LLMClient(backend))
    res = w.retain(P, DESCS, count_tokens("moved to Bergen") + count_tokens(P[5].content))
    texts = {c.capsule_id: c.text for c in res.capsules}
    assert texts == {"D1:2": "moved to Bergen", "D2:5": P[5].content}  # a non-verbatim span keeps the turn
    assert res.calls == 2 and backend.generate_calls == 1  # both sessions in one batch
    assert w.failed_sessions == []


def test_llm_writer_falls_back_per_session_on_a_bad_answer():
    backend = ScriptedBackend({("retain", "1 May"): "not json", ("retain", "2 May"): _llm_reply(("T002", 5, ""))})
    w = LLMWriter(LLMClient(backend))
    res = w.retain(P, DESCS, 1000)
    assert w.failed_sessions == ["session_1"] and len(res.capsules) == len(P)


def test_make_writer_names():
    assert make_writer("recent").name == "recent"
    with pytest.raises(ConfigError):
        make_writer("llm")
    with pytest.raises(ConfigError):
        make_writer("nope")


def test_capsules_are_read_by_the_normal_query_path(tmp_path):
    cfg = apply_presets("model-free", PipelineConfig()).replace(evidence={"k0": 1})
    res = ModelFreeWriter().retain(P, DESCS, count_tokens(P[2].content) + count_tokens(P[5].content))
    with Memory(MemoryStore(tmp_path / "m.sqlite"), cfg, embedder=HashEmbedder(dim=64)) as mem:
        mem.add("ns.keep", capsules_conversation("ns.keep", res.capsules, ["Ann", "Bo"]))
        got = mem.compile("ns.keep", "What cats did Bo adopt?").packet_ids
        assert got == ("D2:5",)
        assert [p.packet_id for p in mem.view("ns.keep").packets] == ["D1:2", "D2:5"]


def test_capsule_table_round_trip_forget_delete_and_check(tmp_path):
    from memcompile_local.store.check import check_store

    path = tmp_path / "m.sqlite"
    store = MemoryStore(path)
    with Memory(store, apply_presets("model-free", PipelineConfig()), embedder=HashEmbedder(dim=64)) as mem:
        mem.add("u", [{"time": "2023-05-08 10:00", "turns": [
            {"speaker": "Ann", "text": "My sister Ines moved to Bergen."},
            {"speaker": "Bo", "text": "I adopted two cats, Milo and Luna."}]}])
        mem.add("v", [{"time": "2023-05-08 10:00", "turns": [{"speaker": "Cy", "text": "I play chess."}]}])
        view = mem.view("u")
        res = ModelFreeWriter().retain(view.packets, view.descriptors_by_packet, 1000)
        gen = store.generation("u")
        store.put_capsules("u", res.writer, res.budget, [c.to_dict() for c in res.capsules])
        assert store.generation("u") > gen  # a write like any other: views of "u" reload
        back = store.capsules("u")
        assert [Capsule.from_dict(r) for r in back] == list(res.capsules)
        assert back[0]["writer"] == "model-free" and back[0]["budget"] == 1000
        assert store.stats("u")["namespaces"]["u"]["capsules"] == 2
        store.put_capsules("v", "recent", 5, [turn_capsule(mem.view("v").packets[0], []).to_dict()])
        assert check_store(path).ok and check_store(path).rows_checked["capsules"] == 3
        mem.delete_turn("u", "S1:1")  # the capsule cut from the deleted turn goes with it
        assert [r["capsule_id"] for r in store.capsules("u")] == ["S1:2"]
        counts = mem.forget("u")
        assert counts["capsules"] == 1 and store.capsules("u") == [] and len(store.capsules("v")) == 1
        with pytest.raises(Exception, match="names no source"):
            store.put_capsules("v", "recent", 5, [{"capsule_id": "x", "sources": []}])


# ----------------------------------------------------------------------------- pieces and span keys

LONG = packet(9, 3, "Ann", "It was a long week at work and the weather was grey. "
                           "My cousin Pilar moved to Valencia on 4 June 2023. Anyway, talk soon!")
LONG_DESCS = [claim(LONG, "Ann said: It was a long week at work and the weather was grey.",
                    keywords=["long week", "work", "weather"]),
              claim(LONG, "Ann's cousin Pilar moved to Valencia on 4 June 2023.", people=["Pilar"],
                    keywords=["cousin", "valencia"], event_time="2023-06-04")]


def test_each_sentence_gets_the_descriptors_cut_from_it():
    from memcompile_local.address.extract_rule import split_sentences
    from memcompile_local.retention.writers import sentence_descriptors

    sents = split_sentences(LONG.content)
    per = sentence_descriptors(sents, LONG_DESCS)
    assert [[d.text for d in ds] for ds in per] == [[LONG_DESCS[0].text], [LONG_DESCS[1].text], []]


def test_a_span_is_scored_by_its_own_keys_not_its_turns():
    # Scored with the whole turn's keys every span looks as informative, and the shortest wins.
    c = turn_capsule(LONG, LONG_DESCS, max_tokens=14)
    assert c.text == "My cousin Pilar moved to Valencia on 4 June 2023."
    assert "Pilar" in c.names and c.dates == ("2023-06-04",) and "work" not in c.keywords


def test_a_long_turn_is_cut_into_pieces_with_their_own_keys():
    from memcompile_local.retention.writers import turn_pieces

    pieces = turn_pieces(LONG, LONG_DESCS, max_tokens=14)
    assert [c.capsule_id for c in pieces] == ["D3:9#1", "D3:9#2", "D3:9#3"]
    assert " ".join(c.text for c in pieces) == LONG.content
    assert all(c.sources == ("D3:9",) and c.piece == i for i, c in enumerate(pieces, start=1))
    assert pieces[1].dates == ("2023-06-04",) and pieces[0].dates == () and pieces[2].keywords == ()
    assert turn_pieces(P[2], DESCS["D1:2"], max_tokens=64)[0].capsule_id == "D1:2"  # fits: the whole turn


def test_the_model_free_writer_keeps_the_fact_piece_and_reads_a_turn_as_one_capsule():
    fact = "My cousin Pilar moved to Valencia on 4 June 2023."
    w = ModelFreeWriter(max_tokens=14)
    res = w.retain([LONG], {LONG.packet_id: LONG_DESCS}, count_tokens(fact))
    assert [(c.capsule_id, c.text, c.piece) for c in res.capsules] == [("D3:9", fact, 0)]
    assert res.tokens <= res.budget
    # Pieces kept on both sides of a dropped one are joined with a gap mark, which is paid for.
    ends = "It was a long week at work and the weather was grey. … Anyway, talk soon!"
    from memcompile_local.retention.writers import merge_pieces, turn_pieces

    a, _, c = turn_pieces(LONG, LONG_DESCS, max_tokens=14)
    assert merge_pieces([a, c])[0].text == ends and merge_pieces([a, c])[0].capsule_id == "D3:9"
    for budget in range(0, count_tokens(LONG.content) + 2):
        got = w.retain([LONG], {LONG.packet_id: LONG_DESCS}, budget)
        assert got.tokens <= budget and len(got.capsules) <= 1
    whole = w.retain([LONG], {LONG.packet_id: LONG_DESCS}, count_tokens(LONG.content))
    assert [c.text for c in whole.capsules] == [LONG.content]
    assert ModelFreeWriter(max_tokens=14, merge=False).retain([LONG], {LONG.packet_id: LONG_DESCS}, 1000) \
        .capsules[0].capsule_id == "D3:9#1"


def test_a_superseded_piece_names_the_joined_capsule_of_the_later_turn():
    from memcompile_local.retention.writers import merge_pieces

    old = replace_capsule(turn_capsule(P[2], DESCS["D1:2"]), superseded_by="D3:9#2")
    assert merge_pieces([old])[0].superseded_by == "D3:9"


def replace_capsule(c, **kw):
    from dataclasses import replace

    return replace(c, **kw)


def test_model_free_writer_settings_are_checked():
    with pytest.raises(ConfigError):
        ModelFreeWriter(cut="words")
    with pytest.raises(ConfigError):
        ModelFreeWriter(max_tokens=0)
    span = ModelFreeWriter(max_tokens=14, cut="span").retain([LONG], {LONG.packet_id: LONG_DESCS}, 1000)
    assert [c.span for c in span.capsules] == ["sentences"] and "Pilar" in span.capsules[0].text


def test_summary_sentences_are_scored_by_their_own_keys():
    share = count_tokens("Ann: My cousin Pilar moved to Valencia on 4 June 2023.")
    res = SummaryWriter().retain([LONG], {LONG.packet_id: LONG_DESCS}, share)
    assert [c.text for c in res.capsules] == ["Ann: My cousin Pilar moved to Valencia on 4 June 2023."]
    assert res.capsules[0].dates == ("2023-06-04",)


def test_leave_one_out_picks_each_setting_from_the_other_conversations():
    from memcompile_local.bench.retention import leave_one_out

    # Setting "a" reads better on c1 and c2, "b" only on c3.
    reads = {("a", "c1"): 1.0, ("b", "c1"): 0.0, ("a", "c2"): 1.0, ("b", "c2"): 0.5,
             ("a", "c3"): 0.0, ("b", "c3"): 1.0}
    rows = [{"writer": s, "budget": "0.5", "conversation": c, "retain": 1.0, "read": v}
            for (s, c), v in reads.items()]
    out = leave_one_out(rows, ["a", "b"], ["0.5"])
    # Held out c1: a 0.5 vs b 0.75 -> b; c2: a 0.5 vs b 0.5 -> a (the tie goes to the earlier);
    # c3: a 1.0 vs b 0.25 -> a. In sample: a 2/3 vs b 1.5/3 -> a.
    assert out["picks"] == {"c1": "b", "c2": "a", "c3": "a"} and out["in_sample"] == "a"
    assert out["table"] == [{"writer": "cv", "budget": "0.5", "questions": 3, "retain_recall": 100.0,
                             "read_recall": round(100 * (0.0 + 1.0 + 0.0) / 3, 2)}]


def test_the_gap_mark_between_kept_pieces_counts_against_the_budget():
    two = packet(3, 3, "Ann", "My cousin Pilar moved to Valencia on 4 June 2023. Ok. "
                              "I start at Iberdrola in Madrid on 1 July 2023.")
    descs = {two.packet_id: [claim(two, "Ann's cousin Pilar moved to Valencia.", people=["Pilar"],
                                   keywords=["cousin", "valencia"], event_time="2023-06-04"),
                             claim(two, "Ann starts at Iberdrola in Madrid.", keywords=["iberdrola", "madrid"],
                                   event_time="2023-07-01")]}
    facts = count_tokens("My cousin Pilar moved to Valencia on 4 June 2023.") + \
        count_tokens("I start at Iberdrola in Madrid on 1 July 2023.")
    w = ModelFreeWriter(max_tokens=11)
    both = w.retain([two], descs, facts + 1)
    assert [c.text for c in both.capsules] == [
        "My cousin Pilar moved to Valencia on 4 June 2023. … I start at Iberdrola in Madrid on 1 July 2023."]
    assert both.tokens == facts + 1
    one = w.retain([two], descs, facts)  # the two facts fit, their gap mark does not: one goes
    assert one.tokens <= facts and len(one.capsules) == 1 and "…" not in one.capsules[0].text


def test_an_llm_span_carries_its_own_sentences_keys():
    backend = ScriptedBackend({("retain", "3 May"): _llm_reply(("T001", 5, "Pilar moved to Valencia on 4 June 2023"))})
    res = LLMWriter(LLMClient(backend)).retain([LONG], {LONG.packet_id: LONG_DESCS}, 1000)
    c = res.capsules[0]
    assert c.text == "Pilar moved to Valencia on 4 June 2023" and c.dates == ("2023-06-04",)
    assert "work" not in c.keywords and c.claims == (LONG_DESCS[1].text,)
