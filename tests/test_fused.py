"""The model-free fused selector on small hand-built memories."""

from __future__ import annotations

import numpy as np

from pathlib import Path

import pytest

from memcompile_local.pipeline import compile as pipeline
from memcompile_local.adapters.scripted import HashEmbedder
from memcompile_local.config import FusionConfig, PipelineConfig
from memcompile_local.data.plain import load_plain
from memcompile_local.pipeline.presets import apply_preset
from memcompile_local.fused.channels import fused_scores, score_order
from memcompile_local.fused.documents import (
    bursts,
    canonical_names,
    context_documents,
    lexical_documents,
    named_participants,
    periods,
    question_periods,
    tolerant_name,
)
from memcompile_local.fused.index import FusionIndex
from memcompile_local.fused.retriever import FusedRetriever, dense_query_texts, is_list_question, query_vector, select_rows
from memcompile_local.memory import Memory
from memcompile_local.store import MemoryStore
from memcompile_local.types import Descriptor, PacketCandidate, SourcePacket

MESSY = Path(__file__).parent / "fixtures" / "messy_chat.json"


def select_fused(index, question, query_vec, cfg, k, **kw) -> list[str]:
    """The packets the fused selector keeps, best first."""
    return list(FusedRetriever(index, cfg).retrieve(question, query_vec, k, **kw).packet_ids)


def fused_ranking(index, question, query_vec, cfg, n) -> list[str]:
    """The first ``n`` packets by fused score alone."""
    return FusedRetriever(index, cfg).ranking(question, query_vec, n)


def packet(i: int, session: int, speaker: str, text: str) -> SourcePacket:
    return SourcePacket(namespace="ns", packet_id=f"D{session}:{i}", ordinal=i, session_index=session,
                        session_id=f"s{session}", session_time="8 May, 2023", speaker=speaker, content=text,
                        image_caption=None, sha256="x")


PACKETS = [
    packet(0, 1, "Ann", "Guess what happened at the weekend?"),
    packet(1, 1, "Bo", "Tell me!"),
    packet(2, 1, "Ann", "We adopted a puppy called Pepper."),
    packet(3, 2, "Bo", "I went camping near the lake."),
    packet(4, 2, "Ann", "Camping sounds lovely."),
]


def test_lexical_documents_take_in_session_neighbours_only():
    docs = lexical_documents(PACKETS, {})
    assert docs[2] == "Tell me! We adopted a puppy called Pepper."  # no next turn: session 2 starts
    assert docs[3] == "I went camping near the lake. Camping sounds lovely."  # no previous: session boundary


def test_stemming_and_neighbour_context_reach_the_reply():
    cfg = FusionConfig(packet_weight=0, speaker_weight=0, temporal_weight=0)
    index = FusionIndex.build(PACKETS, {}, cfg)
    s = fused_scores(index, "What did they camp near?", None, cfg)
    # "camp" matches "camping" through the stemmer; the best score is normalized to 1.
    assert s.channels["lexical"].max() == 1.0
    assert set(select_fused(index, "What did they camp near?", None, cfg, 2)) == {"D2:3", "D2:4"}
    # The neighbour turn D1:1 ("Tell me!") is found for the puppy question through its reply.
    got = fused_scores(index, "Which puppy was adopted?", None, cfg).channels["lexical"]
    assert got[1] > 0 and got[3] == 0


def test_speaker_cue_needs_exactly_one_named_participant():
    assert named_participants("What did Ann's dog eat?", ["Ann", "Bo"]) == ["Ann"]
    assert named_participants("What do Ann and Bo share?", ["Ann", "Bo"]) == ["Ann", "Bo"]
    assert named_participants("What did Annabel say?", ["Ann", "Bo"]) == []
    assert named_participants("What did Mel bake?", ["Melanie", "Caroline"]) == ["Melanie"]  # nickname
    assert named_participants("What did Me bake?", ["Melanie", "Caroline"]) == []  # too short to be one
    cfg = FusionConfig(lexical_weight=0, packet_weight=0, speaker_weight=0.3, temporal_weight=0)
    index = FusionIndex.build(PACKETS, {}, cfg)
    assert fused_scores(index, "Where did Bo go?", None, cfg).total.tolist() == [0, 0.3, 0, 0.3, 0]
    assert fused_scores(index, "Did Ann and Bo meet?", None, cfg).total.tolist() == [0, 0, 0, 0, 0]


def test_temporal_cue_lifts_dated_packets_for_time_questions_only():
    dated = Descriptor(descriptor_id="ns:D2:3:0", namespace="ns", packet_id="D2:3", claim_index=0,
                       text="Bo went camping near the lake.", speaker="Bo", session_index=2,
                       session_time="8 May, 2023", event_time="2023-05-06")
    cfg = FusionConfig(lexical_weight=0, packet_weight=0, speaker_weight=0, temporal_weight=0.2, answer_type_weight=0)
    index = FusionIndex.build(PACKETS, {"D2:3": (dated,)}, cfg)
    assert fused_scores(index, "When did someone go camping?", None, cfg).total.tolist() == [0, 0, 0, 0.2, 0]
    assert fused_scores(index, "Where did someone go camping?", None, cfg).total.tolist() == [0, 0, 0, 0, 0]


def test_dense_channel_and_ties_by_dialogue_order():
    cfg = FusionConfig(lexical_weight=0, speaker_weight=0, temporal_weight=0, packet_weight=1.0)
    m = np.zeros((5, 3), dtype=np.float32)
    m[[1, 3], 0] = 1.0  # two packets equally aligned with the query
    m[4, 1] = 1.0
    index = FusionIndex.build(PACKETS, {}, cfg, packet_matrix=m)
    q = np.asarray([1.0, 0.0, 0.0], dtype=np.float32)
    assert select_fused(index, "anything", q, cfg, 3) == ["D1:1", "D2:3", "D1:0"]


def test_context_documents_hold_the_session_neighbourhood_with_speakers():
    docs = context_documents(PACKETS)
    assert docs[1] == "Ann: Guess what happened at the weekend?\nBo: Tell me!\nAnn: We adopted a puppy called Pepper."
    assert docs[2] == "Bo: Tell me!\nAnn: We adopted a puppy called Pepper."  # session 2 is not a neighbour
    assert docs[3] == "Bo: I went camping near the lake.\nAnn: Camping sounds lovely."


def test_dense_channel_takes_the_better_of_turn_and_context_cosine():
    m = np.zeros((5, 2), dtype=np.float32)
    m[:, 1] = 1.0  # no turn document is near the query on its own
    ctx = np.zeros((5, 2), dtype=np.float32)
    ctx[:, 1] = 1.0
    ctx[2] = [0.6, 0.8]  # the reply's neighbourhood is
    q = np.asarray([1.0, 0.0], dtype=np.float32)
    on = FusionConfig(lexical_weight=0, speaker_weight=0, temporal_weight=0)
    got = fused_scores(FusionIndex.build(PACKETS, {}, on, packet_matrix=m, context_matrix=ctx), "x", q, on)
    assert np.allclose(got.channels["packet"], [0, 0, 0.6, 0, 0])
    # Without context vectors the channel is the z(p) cosine alone.
    got = fused_scores(FusionIndex.build(PACKETS, {}, on, packet_matrix=m), "x", q, on)
    assert np.allclose(got.channels["packet"], 0)


def test_matrices_must_have_one_row_per_packet():
    with pytest.raises(ValueError, match="context_matrix has 4 rows for 5 packets"):
        FusionIndex.build(PACKETS, {}, FusionConfig(), packet_matrix=np.zeros((5, 2)), context_matrix=np.zeros((4, 2)))


# ----------------------------------------------------------------------------- new components


def messy_packets() -> list[SourcePacket]:
    """The messy-chat fixture (short lower-case bursts, a nickname, a typo) as stored packets."""
    conv = load_plain(MESSY)
    out = []
    for s in conv.sessions:
        for t in s.turns:
            out.append(SourcePacket(namespace=conv.namespace, packet_id=t.packet_id, ordinal=len(out),
                                    session_index=s.index, session_id=s.session_id, session_time=s.time,
                                    speaker=t.speaker, content=t.text, image_caption=None, sha256="x"))
    return out


def claim(packet_id: str, text: str, *, event_time: str = "", keywords=(), people=()) -> Descriptor:
    return Descriptor(descriptor_id=f"ns:{packet_id}:0", namespace="ns", packet_id=packet_id, claim_index=0,
                      text=text, speaker="Ann", session_index=1, session_time="8 May, 2023",
                      event_time=event_time, keywords=tuple(keywords), people=tuple(people))


def lexical_only(**changes) -> FusionConfig:
    return FusionConfig(packet_weight=0, speaker_weight=0, temporal_weight=0, **changes)


def test_bursts_are_runs_of_one_speaker_within_a_session():
    packets = messy_packets()
    groups = bursts(packets)
    ids = [[packets[i].packet_id for i in g] for g in groups]
    assert ids[:3] == [["S1:1", "S1:2", "S1:3"], ["S1:4", "S1:5", "S1:6"], ["S1:7"]]
    # Priyanka ends session 1 and Tomasz starts session 2: a session boundary splits anyway.
    assert ["S3:1", "S3:2", "S3:3", "S3:4"] in ids and ["S3:5", "S3:6"] in ids
    assert sum(len(g) for g in groups) == len(packets)


def test_burst_documents_join_a_thought_split_over_messages():
    packets = messy_packets()
    row = {p.packet_id: i for i, p in enumerate(packets)}
    question = "What did the brother replace on the bike?"
    plain = FusionIndex.build(packets, {}, lexical_only())
    grouped = FusionIndex.build(packets, {}, lexical_only(bursts=True))
    answer = row["S3:4"]  # "new chain and brakes": "bike" is two messages earlier in the burst
    assert fused_scores(plain, question, None, lexical_only()).channels["lexical"][answer] < 1.0
    assert fused_scores(grouped, question, None, lexical_only()).channels["lexical"][answer] == 1.0
    # With one-message bursts (alternating speakers) the burst documents are today's documents.
    assert lexical_documents(PACKETS, {}, group_bursts=True)[1:4] == lexical_documents(PACKETS, {})[1:4]
    # The neighbours of a burst are the bursts before and after it in the session.
    docs = lexical_documents(packets, {}, group_bursts=True)
    assert docs[row["S1:7"]] == "no way priya thats amazing u taking the little one? nah my mum has her for the week"


def test_tolerant_names_accept_case_nicknames_and_one_typo_but_not_ordinary_words():
    people = ["Priyanka", "Tomasz"]
    assert tolerant_name("priya", people) == "Priyanka"  # lower-case nickname of 4+ letters
    assert tolerant_name("tomsz's", people) == "Tomasz"  # one letter dropped, possessive
    assert tolerant_name("Tomasz", people) == "Tomasz"
    assert tolerant_name("Tom", people) == "Tomasz"  # capitalized 3-letter nickname, as before
    assert tolerant_name("tom", people) is None  # a short lower-case word is not taken for a name
    assert tolerant_name("priyankaa", people) == "Priyanka"
    assert tolerant_name("prints", people) is None
    assert tolerant_name("car", ["Caroline"]) is None
    assert named_participants("what did priya eat every day?", people) == []
    assert named_participants("what did priya eat every day?", people, tolerant=True) == ["Priyanka"]
    assert canonical_names("tell tomsz's brother", people) == "tell Tomasz's brother"


def test_tolerant_names_reach_messages_that_misspell_the_name():
    packets = messy_packets()
    row = {p.packet_id: i for i, p in enumerate(packets)}
    question = "Who owes Tomasz's friend a ride?"
    plain = FusionIndex.build(packets, {}, lexical_only())
    tolerant = FusionIndex.build(packets, {}, lexical_only(tolerant_names=True))
    before = plain.lexical.scores(plain.query_terms(question))
    after = tolerant.lexical.scores(tolerant.query_terms(question))
    assert after[row["S3:6"]] > before[row["S3:6"]]  # "tomsz's" now indexes as Tomasz
    # The speaker cue names the participant behind a lower-case nickname.
    cfg = FusionConfig(lexical_weight=0, packet_weight=0, speaker_weight=0.3, temporal_weight=0,
                       tolerant_names=True)
    speaker = fused_scores(FusionIndex.build(packets, {}, cfg), "where did priya surf?", None, cfg).channels["speaker"]
    assert speaker[row["S2:5"]] == 1.0 and speaker[row["S2:6"]] == 0.0


def test_periods_read_iso_dates_years_and_month_names():
    assert periods("the week before 2023-05-08") == [(2023, 5, 8)]
    assert periods("2023-05") == [(2023, 5, None)]
    assert periods("2022") == [(2022, None, None)]
    assert periods("in june") == [(None, 6, None)]
    assert periods("") == []
    assert question_periods("When did Melanie go camping in June?") == [(None, 6, None)]
    assert question_periods("What did she paint in 2022?") == [(2022, None, None)]
    assert question_periods("What did Nate do on 25 May, 2022?") == [(2022, 5, 25)]
    assert question_periods("When did she go camping?") == []


def test_time_match_lifts_packets_dated_in_the_named_period():
    packets = messy_packets()
    row = {p.packet_id: i for i, p in enumerate(packets)}
    trip = claim("S1:3", "Priyanka flies to Lisbon from 12 to 19 April.", event_time="2024-04-12")
    cfg = FusionConfig(lexical_weight=0, packet_weight=0, speaker_weight=0, temporal_weight=0, time_match_weight=0.4)
    index = FusionIndex.build(packets, {"S1:3": (trip,)}, cfg)
    got = fused_scores(index, "What did Priyanka do in April 2024?", None, cfg).total
    april = {p.packet_id for p in packets if p.session_index == 2} | {"S1:3"}  # session date, or the event
    assert {packets[i].packet_id for i in np.flatnonzero(got)} == april
    assert got[row["S2:4"]] == pytest.approx(0.4)
    month_only = fused_scores(index, "what happened in april?", None, cfg).total
    assert np.array_equal(month_only > 0, got > 0)
    assert not fused_scores(index, "What happened in 2023?", None, cfg).total.any()
    assert not fused_scores(index, "When did Priyanka go surfing?", None, cfg).total.any()  # names no period
    # A named day picks that day's session; a day nothing is dated falls back to its month.
    day = fused_scores(index, "What did Tomasz say on 25 April, 2024?", None, cfg).total
    assert {packets[i].packet_id for i in np.flatnonzero(day)} == {p.packet_id for p in packets if p.session_index == 2}
    other_day = fused_scores(index, "What did Tomasz say on 3 April, 2024?", None, cfg).total
    assert np.array_equal(other_day > 0, got > 0)
    assert not fused_scores(index, "What did Tomasz say on 3 March, 2023?", None, cfg).total.any()


LIST_PACKETS = [packet(i, 1 + i // 3, "Ann" if i % 2 else "Bo", f"turn {i}") for i in range(6)]


def test_complementary_selection_skips_near_duplicates_for_list_questions():
    m = np.zeros((6, 3), dtype=np.float32)
    m[0] = m[1] = [1, 0, 0]  # the two best packets say the same thing
    m[2] = [0, 1, 0]
    m[3:] = [0, 0, 1]
    scores = np.asarray([1.0, 0.95, 0.6, 0.5, 0.4, 0.3])
    q = np.asarray([0.7, 0.7, 0.1], dtype=np.float32)
    q /= np.linalg.norm(q)
    # (MMR and complementary selection on every question were dropped from the package; their
    # checks are in test_ablate_dropped.py.)
    cfg = FusionConfig(complement_keep=1, complement_pool=6)
    index = FusionIndex.build(LIST_PACKETS, {}, cfg, packet_matrix=m)
    got = select_rows(index, "What hobbies does Ann have?", scores, q, cfg, 2)
    assert got == [0, 2]  # the duplicate (row 1) gives way to what adds something
    assert select_rows(index, "Where does Ann live?", scores, q, cfg, 2) == [0, 1]  # not a list question
    # The shipped default: MemPursuit over the fused top-P, for list questions only.
    shipped = FusionConfig(complement_keep=1, complement_pool=6)
    index = FusionIndex.build(LIST_PACKETS, {}, shipped, packet_matrix=m)
    assert select_rows(index, "What hobbies does Ann have?", scores, q, shipped, 2) == [0, 2]
    assert select_rows(index, "Where does Ann live?", scores, q, shipped, 2) == [0, 1]
    assert is_list_question("Which cities have they both visited?")
    assert not is_list_question("When did Ann move?")


def test_pursuit_from_the_kept_packets_explains_what_they_leave_of_the_query():
    # The query asks about two things (axes 0 and 1). The top packet covers the first; the
    # second packet restates the whole query in one vector; the third covers only the second.
    m = np.zeros((6, 3), dtype=np.float32)
    m[0] = [1, 0, 0]
    m[1] = [0.7071, 0.7071, 0]
    m[2] = [0, 1, 0]
    m[3:] = [0, 0, 1]
    scores = np.asarray([1.0, 0.9, 0.8, 0.3, 0.2, 0.1])
    q = np.asarray([0.7071, 0.7071, 0], dtype=np.float32)
    question = "What hobbies does Ann have?"
    kept = FusionConfig(complement_keep=1, complement_pool=6)  # the package's pursuit starts from the kept packets
    index = FusionIndex.build(LIST_PACKETS, {}, kept, packet_matrix=m)
    # From the kept packet, the residual is axis 1 (the dropped start from an empty selection
    # is checked in test_ablate_dropped.py).
    assert select_rows(index, question, scores, q, kept, 2) == [0, 2]
    assert select_rows(index, "Where does Ann live?", scores, q, kept, 2) == [0, 1]  # not a list question
    # Slots pursuit leaves (budget above what it picks) follow in score order, no repeats.
    got = select_rows(index, question, scores, q, kept, 6)
    assert sorted(got) == list(range(6)) and got[:2] == [0, 2]


def test_fused_ranking_is_the_score_order_without_the_selection_stages():
    cfg = FusionConfig(packet_weight=0, speaker_weight=0, temporal_weight=0, complement_keep=1)
    index = FusionIndex.build(PACKETS, {}, cfg)
    ranking = fused_ranking(index, "camping lake", None, cfg, 5)
    assert ranking[:2] == ["D2:3", "D2:4"] and len(ranking) == 5 and len(set(ranking)) == 5


def test_fused_pool_preset_hands_the_scheduler_the_fused_top_n(monkeypatch):
    cfg = apply_preset("A0-fused-pool", PipelineConfig()).replace(fusion={"schedule_pool_size": 3})
    assert cfg.evidence.anchor_selector == "llm" and cfg.evidence.frontier == "llm"  # the rest of A0
    index = FusionIndex.build(PACKETS, {}, cfg.fusion)
    view = pipeline.MemoryView(namespace="ns", packets=tuple(PACKETS), packets_by_id={p.packet_id: p for p in PACKETS},
                               descriptors_by_packet={}, index=None, packet_matrix=None,
                               row_of={p.packet_id: i for i, p in enumerate(PACKETS)}, fusion=index)
    seen = []

    def scheduler(question, packet_ids, k, stage, view, cfg, client):
        seen.append(list(packet_ids))
        return list(packet_ids)[:k], {}

    monkeypatch.setattr(pipeline, "_llm_ordering", scheduler)
    paper_pool = [PacketCandidate(packet_id="D1:0", score=1.0, first_position=0, representative="x", n_hits=1,
                                  channels=("bm25",), support=1.0)]
    question = "Where did Bo go camping near the lake?"
    args = dict(question=question, pool=paper_pool, address=None, dense=(), view=view, client=None, query_vec=None)
    pipeline.select_anchors("llm", cfg=cfg, **args)
    assert seen[-1] == fused_ranking(index, question, None, cfg.fusion, 3) and seen[-1][0] == "D2:3"
    pipeline.select_anchors("llm", cfg=PipelineConfig(), **args)
    assert seen[-1] == ["D1:0"]  # A0 itself keeps the normalized pool


def test_dense_query_embeds_the_question_beside_the_intent_text():
    intent = "What did Ann adopt? Ann adopt"
    assert dense_query_texts("What did Ann adopt?", intent) == [intent, "What did Ann adopt?"]
    assert dense_query_texts("Ann", "Ann") == ["Ann"]  # the same text is embedded once
    rows = np.asarray([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], dtype=np.float32)
    assert np.allclose(query_vector(rows), [0.5, 0.5, 0.0])  # the mean, not renormalized
    assert np.array_equal(query_vector(rows[:1]), rows[0]) and np.array_equal(query_vector(rows[0]), rows[0])
    # A packet's cosine with the mean vector is the mean of its cosines with the two texts:
    # the packet only the plain question is close to now outranks one close to neither.
    m = np.asarray([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.6, 0.8, 0.0]], dtype=np.float32)
    cfg = FusionConfig(lexical_weight=0, speaker_weight=0, temporal_weight=0, time_match_weight=0)
    index = FusionIndex.build(PACKETS[:3], {}, cfg, packet_matrix=m)  # no context vectors
    cos = fused_scores(index, "x", query_vector(rows), cfg).channels["packet"]
    assert np.allclose(cos, [0.5, 0.0, 0.7])
    assert fused_scores(index, "x", rows[0], cfg).channels["packet"][0] == 0.0


class _RecordingEmbedder:
    """The hash embedder, keeping every batch of texts it is asked to embed."""

    def __init__(self) -> None:
        self.inner = HashEmbedder(dim=32)
        self.batches: list[list[str]] = []
        self.dim = self.inner.dim

    def identity(self) -> dict:
        return self.inner.identity()

    def embed(self, texts):
        self.batches.append(list(texts))
        return self.inner.embed(texts)


def test_model_free_path_embeds_intent_and_question_in_one_call_and_search_scores_with_that_vector(tmp_path):
    emb = _RecordingEmbedder()
    cfg = apply_preset("model-free", PipelineConfig())
    mem = Memory(MemoryStore(tmp_path / "m.sqlite"), cfg, embedder=emb)
    mem.add("n", [{"time": "2024-03-04 09:00", "turns": [
        {"speaker": "Ann", "text": "We adopted a puppy called Pepper."},
        {"speaker": "Bo", "text": "I went camping near the lake."}]}])
    mem.build("n")
    question = "What did Ann adopt?"
    emb.batches.clear()
    ctx = mem.compile("n", question)
    assert len(emb.batches) == 1 and len(emb.batches[0]) == 2 and emb.batches[0][1] == question
    view = mem.view("n")
    qvec = query_vector(emb.inner.embed(emb.batches[0]))
    assert list(ctx.packet_ids) == select_fused(view.fusion, question, qvec, cfg.fusion, cfg.evidence.k0)
    # search scores with the same (mean) vector: its scores are the fused totals under it, on
    # the sum's fixed scale (here a question that is not a list question: in score order).
    hits = mem.search("n", question, explain=True)
    scores = fused_scores(view.fusion, question, qvec, cfg.fusion)
    row = {pid: i for i, pid in enumerate(view.fusion.packet_ids)}
    assert [h.score for h in hits] == pytest.approx([scores.relevance[row[h.packet.packet_id]] for h in hits])
    assert [h.explain.raw for h in hits] == pytest.approx([scores.total[row[h.packet.packet_id]] for h in hits])


def test_one_search_scores_each_fused_channel_once_and_returns_those_scores(tmp_path, monkeypatch):
    from memcompile_local.fused import channels as channels_module

    calls: dict[str, int] = {}
    for name, fn in list(channels_module.CHANNELS.items()):
        def counted(index, query, fn=fn, name=name):
            calls[name] = calls.get(name, 0) + 1
            return fn(index, query)
        monkeypatch.setitem(channels_module.CHANNELS, name, counted)
    emb = _RecordingEmbedder()
    cfg = apply_preset("model-free", PipelineConfig())
    mem = Memory(MemoryStore(tmp_path / "m.sqlite"), cfg, embedder=emb)
    mem.add("n", [{"time": "2024-03-04 09:00", "turns": [
        {"speaker": "Ann", "text": "We adopted a puppy called Pepper in March 2024."},
        {"speaker": "Bo", "text": "I went camping near the lake."}]}])
    mem.build("n")
    mem.view("n")
    calls.clear()
    emb.batches.clear()
    question = "When did Ann adopt a puppy in March 2024?"
    hits = mem.search("n", question)
    weighted = [name for name, w in channels_module.channel_weights(cfg.fusion).items() if w]
    assert calls == {name: 1 for name in weighted}  # each channel once, none again for the scores
    assert len(emb.batches) == 1  # the question is embedded once
    view = mem.view("n")
    qvec = query_vector(emb.inner.embed(emb.batches[0]))
    scores = fused_scores(view.fusion, question, qvec, cfg.fusion)
    assert [h.score for h in hits] == [float(scores.relevance[view.fusion.row_of[h.packet.packet_id]])
                                       for h in hits]
    # Asking for the explanation scores nothing again either.
    calls.clear()
    explained = mem.search("n", question, explain=True)
    assert calls == {name: 1 for name in weighted} and [h.score for h in explained] == [h.score for h in hits]


def test_a_new_channel_is_one_function_and_one_weight(monkeypatch):
    # The table is what fused_scores sums: an entry with a weight field joins the total.
    from memcompile_local.fused import channels as channels_module

    index = FusionIndex.build(PACKETS, {}, FusionConfig())
    cfg = FusionConfig(packet_weight=0, speaker_weight=0, temporal_weight=0, time_match_weight=0, answer_type_weight=0)
    before = fused_scores(index, "camping lake", None, cfg).total
    monkeypatch.setitem(channels_module.CHANNELS, "first_turn", lambda ix, q: np.eye(len(ix.packet_ids))[0])
    monkeypatch.setattr(FusionConfig, "first_turn_weight", 2.0, raising=False)
    after = fused_scores(index, "camping lake", None, cfg)
    assert np.allclose(after.total - before, 2.0 * np.eye(len(PACKETS))[0])
    assert set(after.channels) == {"lexical", "first_turn"}


def test_a_question_date_resolves_relative_times_in_the_one_scoring_of_a_search(tmp_path, monkeypatch):
    # question_date travels compile_context -> select_anchors -> FusedRetriever.retrieve ->
    # the time-match channel, and the search still scores each channel once.
    from memcompile_local.fused import channels as channels_module
    from memcompile_local.language.timeparse import parse_session_time

    anchor = parse_session_time("2024-06-03")
    assert question_periods("What did Kim do last month?") == []
    assert question_periods("What did Kim do last month?", anchor) == [(2024, 5, None)]
    seen: list = []
    calls: dict[str, int] = {}
    for name, fn in list(channels_module.CHANNELS.items()):
        def counted(index, query, fn=fn, name=name):
            calls[name] = calls.get(name, 0) + 1
            seen.append(query.anchor)
            return fn(index, query)
        monkeypatch.setitem(channels_module.CHANNELS, name, counted)
    cfg = apply_preset("model-free", PipelineConfig())
    mem = Memory(MemoryStore(tmp_path / "m.sqlite"), cfg, embedder=_RecordingEmbedder())
    same = "We walked along the river together."
    mem.add("n", [{"time": "2024-02-10", "turns": [{"speaker": "Kim", "text": same}]},
                  {"time": "2024-05-12", "turns": [{"speaker": "Kim", "text": same}]}])
    mem.build("n")
    mem.view("n")
    calls.clear()
    seen.clear()
    question = "Where did Kim walk last month?"
    hits = mem.search("n", question, k=2, question_date="2024-06-03")
    weighted = [name for name, w in channels_module.channel_weights(cfg.fusion).items() if w]
    assert calls == {name: 1 for name in weighted} and set(seen) == {anchor}
    assert hits[0].packet.session_time == "2024-05-12" and hits[0].score > hits[1].score
    plain = mem.search("n", question, k=2)
    assert plain[0].packet.session_time == "2024-02-10"  # without a date: a tie, dialogue order
    ctx = mem.compile("n", question, question_date="2024-06-03")
    assert ctx.packet_ids[0] == hits[0].packet.packet_id
    assert ctx.scores[hits[0].packet.packet_id] == hits[0].score


def test_the_context_vector_counts_only_where_its_document_fits_the_window():
    # Every context vector equals the query vector: with a 12-word window a row whose context
    # document (previous, own and next turn with speakers) is longer keeps its own cosine.
    own = np.eye(5, 4, dtype=np.float32)
    ctx = np.tile(np.asarray([[0, 0, 0, 1]], dtype=np.float32), (5, 1))  # every context vector: the query
    q = np.asarray([0, 0, 0, 1], dtype=np.float32)
    words = [len(d.split()) for d in context_documents(PACKETS)]
    everywhere = FusionIndex.build(PACKETS, {}, FusionConfig(context_window_words=0), packet_matrix=own,
                                   context_matrix=ctx)
    gated = FusionIndex.build(PACKETS, {}, FusionConfig(context_window_words=12), packet_matrix=own,
                              context_matrix=ctx)
    full = fused_scores(everywhere, "", q, FusionConfig(context_window_words=0)).channels["packet"]
    cut = fused_scores(gated, "", q, FusionConfig(context_window_words=12)).channels["packet"]
    assert full.tolist() == [1.0] * 5
    assert cut.tolist() == [1.0 if w <= 12 else float(own[i] @ q) for i, w in enumerate(words)]
    assert any(w > 12 for w in words) and any(w <= 12 for w in words)


def test_context_fits_counts_the_words_of_the_joined_context_documents():
    from memcompile_local.fused.documents import context_documents, context_fits

    texts = [("Ada", "short hello", None), ("Ben", "a reply\nover  two lines\t with tabs", "a dog on a sofa"),
             ("Ada", "  spaced   out  ", None), ("Ben", "new session opener here", None),
             ("Ada", "x " * 40, None)]
    packets = [SourcePacket(namespace="ns", packet_id=f"D{1 + (i >= 3)}:{i}", ordinal=i, session_index=1 + (i >= 3),
                            session_id=f"s{1 + (i >= 3)}", session_time=None, speaker=sp, content=text,
                            image_caption=cap, sha256="x") for i, (sp, text, cap) in enumerate(texts)]
    docs = context_documents(packets)
    for window in (0, 1, 5, 9, 12, 20, 45, 50):
        assert context_fits(packets, window) == [not window or len(d.split()) <= window for d in docs], window
    assert context_fits(packets, 12) != context_fits(packets, 50)  # the windows above do cut
