"""The model-free fused selector on small hand-built memories."""

from __future__ import annotations

import numpy as np

from memcompile_local.config import FusionConfig
import pytest

from memcompile_local.fused import (
    FusionIndex,
    context_documents,
    fused_scores,
    lexical_documents,
    named_participants,
    select_fused,
)
from memcompile_local.types import Descriptor, SourcePacket


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
    docs = lexical_documents(PACKETS, {}, neighbor_context=True)
    assert docs[2] == "Tell me! We adopted a puppy called Pepper."  # no next turn: session 2 starts
    assert docs[3] == "I went camping near the lake. Camping sounds lovely."  # no previous: session boundary
    assert lexical_documents(PACKETS, {}, neighbor_context=False)[1] == "Tell me!"


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
    cfg = FusionConfig(lexical_weight=0, packet_weight=0, speaker_weight=0, temporal_weight=0.2)
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
    off = FusionConfig(lexical_weight=0, speaker_weight=0, temporal_weight=0, dense_neighbor_context=False)
    got = fused_scores(FusionIndex.build(PACKETS, {}, off, packet_matrix=m, context_matrix=ctx), "x", q, off)
    assert np.allclose(got.channels["packet"], 0)


def test_matrices_must_have_one_row_per_packet():
    with pytest.raises(ValueError, match="context_matrix has 4 rows for 5 packets"):
        FusionIndex.build(PACKETS, {}, FusionConfig(), packet_matrix=np.zeros((5, 2)), context_matrix=np.zeros((4, 2)))
