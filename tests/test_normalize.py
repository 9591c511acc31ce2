"""Normalization boundary (Eqs. 8-10, Appendix A.2), MMR anchors (B.3), aliasing audit (A.4)."""

from __future__ import annotations

import math

import pytest

from memcompile_local.config import RoutingConfig
from memcompile_local.bench.coverage import aliasing_audit
from memcompile_local.pipeline.normalize import mmr_anchors, normalize_to_packets
from memcompile_local.types import Candidate, Descriptor, PacketCandidate


def cand(did, pid, score, pos, channels=("bm25",)):
    return Candidate(did, pid, score, pos, tuple(channels))


def test_packet_score_representative_and_order():
    cands = [
        cand("d4", "D1:5", 1.0, 3, ["cell:2"]),  # given out of position order on purpose
        cand("d1", "D2:1", 3.0, 0),
        cand("d2", "D1:5", 3.0, 1, ["bm25", "cell:1"]),
        cand("d3", "D2:1", 3.0, 2, ["cell:1"]),  # ties with d1: the earlier d1 represents D2:1
        cand("d5", "D7:1", 1.0, 4),
        cand("d6", "D7:1", 2.0, 6, ["cell:3"]),  # best hit of D7:1 comes later than its first hit
        cand("d7", "D3:1", -0.5, 7),
    ]
    pool = normalize_to_packets(cands)
    assert [p.packet_id for p in pool] == ["D2:1", "D1:5", "D7:1", "D3:1"]
    d2, d1, d7, d3 = pool
    assert (d2.score, d2.representative, d2.first_position, d2.n_hits) == (3.0, "d1", 0, 2)
    assert d2.channels == ("bm25", "cell:1")
    assert (d1.representative, d1.first_position, d1.channels) == ("d2", 1, ("bm25", "cell:1", "cell:2"))
    assert d1.support == pytest.approx(4.0)
    assert (d7.score, d7.representative, d7.first_position) == (2.0, "d6", 4)
    assert d3.support == 0.0 and d3.score == -0.5


def test_packet_id_tie_break_uses_ordinal_when_given():
    cands = [cand("a", "D10:1", 2.0, 5), cand("b", "D9:1", 2.0, 5), cand("c", "D1:1", 1.0, 0)]
    assert [p.packet_id for p in normalize_to_packets(cands)] == ["D10:1", "D9:1", "D1:1"]
    ordinals = {"D9:1": 5, "D10:1": 9}
    assert [p.packet_id for p in normalize_to_packets(cands, ordinals)] == ["D9:1", "D10:1", "D1:1"]
    # a packet missing from the ordinal map goes after mapped ones
    assert [p.packet_id for p in normalize_to_packets(cands, {"D10:1": 9})] == ["D10:1", "D9:1", "D1:1"]
    assert normalize_to_packets([]) == []


def test_normalization_never_adds_a_packet():
    cands = [cand(f"d{i}", f"P{i % 4}", float(i % 3), i) for i in range(12)]
    pool = normalize_to_packets(cands)
    assert {p.packet_id for p in pool} == {c.packet_id for c in cands}
    for p in pool:
        assert p.score == max(c.score for c in cands if c.packet_id == p.packet_id)


def desc(did, text):
    return Descriptor(did, "ns", "p", 0, text, "s", 1, "t")


def test_mmr_anchors_hand_computed():
    descs = {
        "r1": desc("r1", "melanie painted sunrise lake"),
        "r2": desc("r2", "melanie painted sunrise lake morning"),
        "r3": desc("r3", "caroline adoption agency"),
    }
    pool = [
        PacketCandidate("P1", 3.0, 0, "r1"),
        PacketCandidate("P2", 2.9, 2, "r2"),
        PacketCandidate("P3", 2.5, 3, "r3"),
    ]
    cands = [cand("r1", "P1", 3.0, 0), cand("x", "P1", 1.0, 1), cand("r2", "P2", 2.9, 2), cand("r3", "P3", 2.5, 3)]
    cells = {"r1": 0, "r2": 0, "r3": 1}
    cfg = RoutingConfig()
    # relevance: P1 3 + .1 ln 5; P2 2.9 + .1 ln 3.9; P3 2.5 + .1 ln 3.5
    # step 2: P2 = 3.0361 - 0.58 * 0.8 - 0.08 = 2.4921 < P3 = 2.6253
    assert list(mmr_anchors(pool, cands, descs, cells, cfg)) == ["P1", "P3", "P2"]
    assert list(mmr_anchors(pool, cands, descs, cells, cfg, k=2)) == ["P1", "P3"]
    # without the overlap and same-Cell penalties the order is by relevance
    plain = RoutingConfig(mmr_overlap=0.0, mmr_same_cell=0.0)
    assert list(mmr_anchors(pool, cands, descs, cells, plain)) == ["P1", "P2", "P3"]
    # same-Cell penalty alone: P2 = 3.0361 - 0.08 is still above P3
    cell_only = RoutingConfig(mmr_overlap=0.0)
    assert list(mmr_anchors(pool, cands, descs, cells, cell_only)) == ["P1", "P2", "P3"]
    # support matters: drop P1's second hit and give P3 a big support
    cands2 = [cand("r1", "P1", 3.0, 0), cand("r3", "P3", 2.5, 3)] + [cand(f"y{i}", "P3", 2.5, 4 + i) for i in range(400)]
    rel_p3 = 2.5 + 0.1 * math.log(1 + 2.5 * 401)
    assert rel_p3 > 3.0 + 0.1 * math.log(4)
    assert mmr_anchors(pool, cands2, descs, cells, cfg)[0] == "P3"


def test_aliasing_audit_hand_example():
    ranked = [["a", "a", "b", "c"], ["a", "b", "c", "d"], ["a", "a", "a"]]
    audit = aliasing_audit(ranked, depths=(3, 4, 5))
    r3, r4, r5 = audit[3], audit[4], audit[5]
    assert r3["eligible"] == 3
    assert r3["unique_mean"] == pytest.approx(2.0)
    assert r3["dbr"] == pytest.approx(3 / 9)
    assert r3["affected"] == pytest.approx(2 / 3)
    assert (r3["max_source_mean"], r3["max_source_p95"], r3["max_source_max"]) == (pytest.approx(2.0), 3, 3)
    assert (r4["eligible"], r4["unique_mean"], r4["dbr"], r4["affected"]) == (2, 3.5, pytest.approx(1 / 8), 0.5)
    assert (r4["max_source_mean"], r4["max_source_p95"], r4["max_source_max"]) == (1.5, 2, 2)
    assert r5["eligible"] == 0 and r5["dbr"] is None


def test_aliasing_dbr_is_one_minus_unique_share():
    ranked = [[f"p{(i * j) % 7}" for i in range(40)] for j in range(1, 30)]
    for depth, row in aliasing_audit(ranked).items():
        assert row["dbr"] == pytest.approx(1 - row["unique_mean"] / depth)
        assert row["max_source_p95"] <= row["max_source_max"]
