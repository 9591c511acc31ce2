"""The fused-selector variants measured and dropped from the package, as
``research/ablate_model_free.py`` re-implements them (so their --cv rows can be reproduced):
MMR and complementary selection on every question, MemPursuit from an empty selection, the
evidence-conditioned second round, and the dense cosine divided by its best value."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from memcompile_local.config import FusionConfig
from memcompile_local.fused.channels import fused_scores, score_order
from memcompile_local.fused.index import FusionIndex
from memcompile_local.fused.retriever import select_rows as package_select_rows

from test_fused import LIST_PACKETS, PACKETS, claim, packet

SCRIPT = Path(__file__).resolve().parents[1] / "research" / "ablate_model_free.py"

pytestmark = pytest.mark.research


@pytest.fixture(scope="module")
def ablate():
    spec = importlib.util.spec_from_file_location("ablate_model_free", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["ablate_model_free"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("ablate_model_free", None)


def _duplicates():
    m = np.zeros((6, 3), dtype=np.float32)
    m[0] = m[1] = [1, 0, 0]  # the two best packets say the same thing
    m[2] = [0, 1, 0]
    m[3:] = [0, 0, 1]
    scores = np.asarray([1.0, 0.95, 0.6, 0.5, 0.4, 0.3])
    q = np.asarray([0.7, 0.7, 0.1], dtype=np.float32)
    return m, scores, q / np.linalg.norm(q)


def test_mmr_and_complementary_selection_on_every_question(ablate):
    m, scores, q = _duplicates()
    for mode in ("mmr", "pursuit"):
        cfg = ablate.AblationFusion(complement=mode, complement_keep=1, complement_pool=6, mmr_lambda=0.5)
        index = FusionIndex.build(LIST_PACKETS, {}, cfg, packet_matrix=m)
        got = ablate.select_rows(index, "What hobbies does Ann have?", scores, q, cfg, 2)
        assert got == [0, 2], mode  # the duplicate (row 1) gives way to what adds something
        assert ablate.select_rows(index, "Where does Ann live?", scores, q, cfg, 2) == [0, 1]  # not a list question
        everywhere = ablate.AblationFusion(complement=mode, complement_keep=1, complement_pool=6, mmr_lambda=0.5,
                                           complement_scope="all")
        assert ablate.select_rows(index, "Where does Ann live?", scores, q, everywhere, 2) == [0, 2]


def test_pursuit_from_an_empty_selection(ablate):
    m = np.zeros((6, 3), dtype=np.float32)
    m[0] = [1, 0, 0]
    m[1] = [0.7071, 0.7071, 0]
    m[2] = [0, 1, 0]
    m[3:] = [0, 0, 1]
    scores = np.asarray([1.0, 0.9, 0.8, 0.3, 0.2, 0.1])
    q = np.asarray([0.7071, 0.7071, 0], dtype=np.float32)
    question = "What hobbies does Ann have?"
    kept = ablate.AblationFusion(complement_keep=1, complement_pool=6)
    assert kept.pursuit_start == "kept"
    empty = ablate.AblationFusion(complement_keep=1, complement_pool=6, pursuit_start="empty")
    index = FusionIndex.build(LIST_PACKETS, {}, kept, packet_matrix=m)
    # From an empty selection pursuit takes the packet that restates the query first, which
    # adds little to the kept one; from the kept packet, the residual is axis 1.
    assert ablate.select_rows(index, question, scores, q, empty, 2) == [0, 1]
    assert ablate.select_rows(index, question, scores, q, kept, 2) == [0, 2]


def test_at_their_defaults_the_knobs_select_what_the_package_selects(ablate):
    m, scores, q = _duplicates()
    shipped = FusionConfig(complement_keep=1, complement_pool=6)
    index = FusionIndex.build(LIST_PACKETS, {}, shipped, packet_matrix=m)
    for question in ("What hobbies does Ann have?", "Where does Ann live?"):
        for k in (1, 2, 4, 6):
            want = package_select_rows(index, question, scores, q, shipped, k)
            assert ablate.select_rows(index, question, scores, q, shipped, k) == want
            assert ablate.select_rows(index, question, scores, q, ablate.AblationFusion.of(shipped), k) == want


def test_second_round_fills_the_last_slots_from_what_the_first_found(ablate):
    packets = [*PACKETS, packet(5, 3, "Ann", "Pepper chewed my slippers again."),
               packet(6, 3, "Bo", "Oh no, the slippers!")]
    # A session per turn: no lexical document takes in a neighbour's words.
    packets = [dataclasses.replace(p, session_index=10 + i) for i, p in enumerate(packets)]
    adopted = claim("D1:2", "Ann adopted a puppy called Pepper.", keywords=("puppy", "Pepper"))
    base = dict(packet_weight=0, speaker_weight=0, temporal_weight=0)
    off = ablate.AblationFusion(**base)
    on = ablate.AblationFusion(**base, second_round_slots=1, second_round_read=1, second_round_weight=0.5)
    question = "What did Ann adopt?"

    def select(index, cfg):
        total = fused_scores(index, question, None, cfg).total
        return [index.packet_ids[i] for i in ablate.select_rows(index, question, total, None, cfg, 2)]

    index = FusionIndex.build(packets, {"D1:2": (adopted,)}, on)
    assert select(index, off) == ["D1:2", "D1:0"]  # round one: "adopt" only
    # "Pepper" is in the top packet's claim and not in the question: it re-queries and wins slot 2.
    assert select(index, on) == ["D1:2", "D3:5"]
    # Nothing new to ask for: the first round stands.
    bare = FusionIndex.build(packets, {}, on)
    assert select(bare, on) == select(bare, off)


def test_packet_scale_max_divides_the_cosines_by_the_query_best(ablate):
    combine = ablate.combine
    channels = {"lexical": np.asarray([1.0, 0.0, 0.5]), "packet": np.asarray([0.1, 0.4, 0.2])}
    plain = ablate.AblationFusion(packet_weight=1.5, packet_scale="cosine")
    scaled = ablate.AblationFusion(packet_weight=1.5, packet_scale="max")
    assert np.allclose(combine(channels, plain), [1.15, 0.6, 0.8])
    assert np.allclose(combine(channels, scaled), [1.375, 1.5, 1.25])  # the best cosine counts as 1
    assert score_order(combine(channels, plain))[0] == 0 and score_order(combine(channels, scaled))[0] == 1
    negative = {"packet": np.asarray([-0.2, -0.1])}
    assert np.allclose(combine(negative, scaled), 1.5 * negative["packet"])  # no best above 0: left as is


def test_the_dropped_knobs_are_not_package_config():
    fields = set(FusionConfig.__dataclass_fields__)
    assert not fields & {"packet_scale", "complement_scope", "pursuit_start", "mmr_lambda", "second_round_slots",
                         "second_round_read", "second_round_weight",
                         # removed from the package by issue 49 (research/dropped.py keeps them)
                         "complement", "dense_query", "neighbor_context", "dense_neighbor_context", "chat_norm",
                         "request_frame", "passage_words", "passage_overlap_words", "passage_pool"}
