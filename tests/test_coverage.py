"""Gold recall, coverage, LongMemEval session/turn recall and the aliasing audit on hand examples."""

from __future__ import annotations

import pytest

from memcompile_local.bench import coverage as E
from memcompile_local.errors import DataFormatError


def test_gold_recall_distinct_ids():
    # gold distinct {D1:2, D1:3}; selected covers D1:2 only -> 1/2 (duplicates count once)
    assert E.gold_recall(["D1:1", "D1:2", "D1:2"], ["D1:2", "D1:3", "D1:3"]) == 0.5
    assert E.gold_recall(["D1:3", "D1:2"], ["D1:2", "D1:3"]) == 1.0
    assert E.gold_recall([], ["D1:2"]) == 0.0
    assert E.gold_recall(["D1:2"], []) is None
    assert E.gold_recall(["D1:2"], ["", "  "]) is None  # blanks are not gold ids
    assert E.gold_recall([" D1:2"], ["D1:2 "]) == 1.0


def test_fully_covered():
    assert E.fully_covered(["a", "b", "c"], ["b", "a"])
    assert not E.fully_covered(["a"], ["b", "a"])
    assert not E.fully_covered(["a"], [])


def test_recall_summary_overall_and_per_category():
    rows = [
        {"question_id": "q1", "category": 1, "gold_evidence": ["a", "b"], "selected_ids": ["a"]},  # 1/2
        {"question_id": "q2", "category": 1, "gold_evidence": ["c"], "selected_ids": ["c", "d"]},  # 1, full
        {"question_id": "q3", "category": 2, "gold_evidence": [], "selected_ids": ["a"]},  # skipped
        {"question_id": "q4", "category": 4, "gold_evidence": ["e"], "selected_ids": []},  # 0
    ]
    s = E.recall_summary(rows)
    assert s["n"] == 3
    assert s["recall"] == pytest.approx((0.5 + 1 + 0) / 3)
    assert s["fully_covered"] == 1 and s["full_coverage_rate"] == pytest.approx(1 / 3)
    assert set(s["per_category"]) == {"1", "4"}
    assert s["per_category"]["1"]["recall"] == pytest.approx(0.75)
    assert s["per_category"]["1"]["fully_covered"] == 1
    assert s["per_category"]["4"]["recall"] == 0.0


def test_recall_summary_by_stage():
    rows = [
        {"question_id": "q1", "category": 4, "gold_evidence": ["a", "b"],
         "recall_stages": {"pool_top10": ["a"], "final": ["a", "b"]}},
        {"question_id": "q2", "category": 4, "gold_evidence": ["c"],
         "recall_stages": {"pool_top10": [], "final": ["c"]}},
    ]
    assert E.recall_summary(rows, stage="pool_top10")["recall"] == pytest.approx(0.25)
    final = E.recall_summary(rows, stage="final")
    assert final["recall"] == 1.0 and final["fully_covered"] == 2
    with pytest.raises(DataFormatError):
        E.recall_summary(rows, stage="a0")
    assert E.recall_summary([])["recall"] is None


def test_session_and_turn_recall():
    turns = ["s1:0", "s2:3", "x:y:4"]
    # answer sessions s1 and x:y have a selected turn, s9 has none -> 2/3
    assert E.session_recall(turns, ["s1", "x:y", "s9"]) == pytest.approx(2 / 3)
    assert E.session_recall(turns, []) is None
    assert E.session_of("answer_4be1b6b4_2:7") == "answer_4be1b6b4_2"
    with pytest.raises(DataFormatError):
        E.session_recall(["nocolon"], ["s1"])
    # has_answer turns s1:0 and s1:1; only s1:0 selected -> 1/2
    assert E.turn_recall(turns, ["s1:0", "s1:1"]) == 0.5


def test_nearest_rank_percentile():
    values = list(range(1, 21))  # 1..20
    assert E.nearest_rank_percentile(values, 95) == 19  # ceil(0.95 * 20) = 19th smallest
    assert E.nearest_rank_percentile(values, 100) == 20
    assert E.nearest_rank_percentile([5], 95) == 5
    with pytest.raises(ValueError):
        E.nearest_rank_percentile([], 95)


def test_aliasing_audit_hand_example():
    ranked = [
        ["a", "b", "a", "c", "a"],
        ["a", "b", "c", "d", "e"],
        ["x", "x"],  # too short for either depth
    ]
    out = E.aliasing_audit(ranked, depths=(3, 5))
    approx = pytest.approx
    # q1[:3] = a b a: 2 unique, 1 duplicate slot, top packet in 2 slots; q2[:3]: 3 unique, none
    assert out[3] == {"depth": 3, "eligible": 2, "unique_mean": approx(2.5), "dbr": approx(1 / 6),
                      "affected": approx(0.5), "max_source_mean": approx(1.5), "max_source_p95": 2,
                      "max_source_max": 2}
    # q1: a b a c a -> 3 unique, 2 duplicate slots, a fills 3 slots; q2: 5 unique
    assert out[5] == {"depth": 5, "eligible": 2, "unique_mean": approx(4.0), "dbr": approx(2 / 10),
                      "affected": approx(0.5), "max_source_mean": approx(2.0), "max_source_p95": 3,
                      "max_source_max": 3}


def test_aliasing_audit_mapping_and_no_eligible():
    out = E.aliasing_audit({"q1": ["p1", "p1"], "q2": ["p2", "p3"]}, depths=(2, 10))
    assert out[2]["eligible"] == 2 and out[2]["dbr"] == pytest.approx(0.25)
    assert out[2]["affected"] == 0.5
    assert out[10]["eligible"] == 0
    assert out[10]["dbr"] is None and out[10]["max_source_p95"] is None
    with pytest.raises(ValueError):
        E.aliasing_audit([["a"]], depths=(0,))
