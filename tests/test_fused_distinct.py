"""Identical filler turns from different sessions fill one slot of a selection at most (issue 47)."""

from __future__ import annotations

import numpy as np

from memcompile_local.config import FusionConfig
from memcompile_local.fused.index import FusionIndex
from memcompile_local.fused.retriever import FusedRetriever, distinct_text_order, select_rows, turn_text_key
from memcompile_local.types import SourcePacket


def turn(i: int, session: int, speaker: str, text: str) -> SourcePacket:
    return SourcePacket(namespace="ns", packet_id=f"S{session}:{i}", ordinal=i, session_index=session,
                        session_id=f"s{session}", session_time="3 March, 2024", speaker=speaker, content=text,
                        image_caption=None, sha256=f"h{i}")


# A user thanks the assistant in three sessions; the copies differ only in case and spacing.
TURNS = [
    turn(0, 1, "user", "Thank you so much!"),
    turn(1, 1, "assistant", "The ferry to the island leaves at 7:40 from pier 3."),
    turn(2, 2, "user", "thank you  so much!"),
    turn(3, 2, "assistant", "Bring a warm jacket, the crossing is windy."),
    turn(4, 3, "user", "Thank you so much! "),
    turn(5, 3, "assistant", "The return ferry is at 18:10."),
    turn(6, 3, "user", "Which pier was it again?"),
]
# Scores that put the three copies first (a question that shares their words, say).
SCORES = np.asarray([0.9, 0.5, 0.88, 0.45, 0.86, 0.4, 0.3])


def test_text_key_ignores_case_and_spacing_only():
    assert turn_text_key(TURNS[0]) == turn_text_key(TURNS[2]) == turn_text_key(TURNS[4])
    assert turn_text_key(TURNS[0]) != turn_text_key(turn(9, 4, "user", "Thank you so much"))  # punctuation counts
    captioned = SourcePacket(**{**TURNS[0].__dict__, "image_caption": "a ferry"})
    assert turn_text_key(captioned) != turn_text_key(TURNS[0])  # the caption is part of the text


def test_copies_give_their_slots_to_the_next_turns():
    on = FusionConfig(distinct_turns=True, complement_pool=4)
    off = FusionConfig(distinct_turns=False, complement_pool=4)
    index = FusionIndex.build(TURNS, {}, on)
    question = "Where does the ferry leave from?"
    assert select_rows(index, question, SCORES, None, off, 3, packets=TURNS) == [0, 2, 4]
    assert select_rows(index, question, SCORES, None, on, 3, packets=TURNS) == [0, 1, 3]
    # Without the packets (a caller that has none) nothing changes.
    assert select_rows(index, question, SCORES, None, on, 3) == [0, 2, 4]
    # The copies come back after the distinct turns when the budget reaches them.
    assert select_rows(index, question, SCORES, None, on, 7, packets=TURNS) == [0, 1, 3, 5, 6, 2, 4]


def test_the_retriever_applies_it_with_its_packets():
    on = FusionConfig(distinct_turns=True, packet_weight=0, speaker_weight=0, temporal_weight=0,
                      time_match_weight=0, role_weight=0, answer_type_weight=0)
    index = FusionIndex.build(TURNS, {}, on)
    question = "thank you so much ferry"
    kept = FusedRetriever(index, on, TURNS).retrieve(question, None, 3).packet_ids
    copies = [pid for pid in kept if pid in ("S1:0", "S2:2", "S3:4")]
    assert len(copies) == 1, kept
    off = FusionConfig(**{**on.__dict__, "distinct_turns": False})
    both = FusedRetriever(index, off, TURNS).retrieve(question, None, 3).packet_ids
    assert sum(pid in ("S1:0", "S2:2", "S3:4") for pid in both) >= 2  # the case the option is for


def test_the_scan_stops_at_the_head_it_needs():
    order = np.arange(len(TURNS))
    assert distinct_text_order(order, TURNS, 2).tolist() == [0, 1, 2, 3, 4, 5, 6]  # no copy before two distinct
    assert distinct_text_order(order, TURNS, 3).tolist() == [0, 1, 3, 2, 4, 5, 6]
    got = distinct_text_order(np.asarray([0, 2, 4, 6]), TURNS, 10)
    assert got.tolist() == [0, 6, 2, 4]  # every row kept, copies last


def test_list_questions_compose_from_distinct_turns():
    # A list question's complementary selection draws its pool from the distinct order.
    m = np.eye(len(TURNS), 4, dtype=np.float32)
    m[2] = m[4] = m[0]
    on = FusionConfig(distinct_turns=True, complement_keep=1, complement_pool=4)
    index = FusionIndex.build(TURNS, {}, on, packet_matrix=m)
    q = np.asarray([0.6, 0.6, 0.3, 0.3], dtype=np.float32)
    got = select_rows(index, "What things has the user asked about?", SCORES, q, on, 3, packets=TURNS)
    assert len(got) == 3 and not {2, 4} & set(got)


def test_by_default_a_search_keeps_one_copy_of_a_filler_line(tmp_path):
    """The defect an integrator reported (issue 47): the same thank-you line from four sessions
    filled most of the top five. By default one copy keeps a slot; switched off, several do."""
    from memcompile_local.adapters.scripted import HashEmbedder
    from memcompile_local.config import PipelineConfig
    from memcompile_local.llm.client import LLMClient, NoModelBackend
    from memcompile_local.memory import Memory
    from memcompile_local.pipeline.presets import apply_preset
    from memcompile_local.store import MemoryStore

    answers = ["Your dentist appointment moved to Thursday at nine.", "The bakery on Elm Street opens at six.",
               "Pack the blue tent, the forecast says rain.", "Your library books are due on the 14th."]
    data = [{"time": f"{d} May 2024", "turns": [
        {"speaker": "user", "text": "Thanks a lot, that really helps!"},
        {"speaker": "assistant", "text": a}]} for d, a in zip((3, 10, 17, 24), answers)]
    cfg = apply_preset("model-free", PipelineConfig())
    assert cfg.fusion.distinct_turns
    texts = {}
    for name, c in (("on", cfg), ("off", cfg.replace(fusion={"distinct_turns": False}))):
        store = MemoryStore(tmp_path / f"{name}.sqlite")
        mem = Memory(store, c, embedder=HashEmbedder(dim=64), client=LLMClient(NoModelBackend(), store))
        mem.add("u", data)
        texts[name] = [h.packet.content for h in mem.search("u", "thanks a lot, that really helps", k=5)]
        store.close()
    assert texts["on"].count("Thanks a lot, that really helps!") == 1
    assert texts["off"].count("Thanks a lot, that really helps!") >= 2
