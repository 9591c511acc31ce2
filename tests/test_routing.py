"""Diminishing-benefit Cell routing (Eqs. 22-23, Algorithm 3)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from memcompile_local.address.routing import (
    STOP_CAP,
    STOP_CUMULATIVE,
    STOP_EMPTY,
    STOP_EXHAUSTED,
    STOP_GAIN,
    STOP_RELATIVE,
    CellFeatures,
    PoolEntry,
    cell_utility,
    open_cells,
    pool_size,
    route_cells,
    score_pool,
    seed_expansion,
)
from memcompile_local.config import RoutingConfig
from memcompile_local.types import Cell, Descriptor

CFG = RoutingConfig()


def cell(cid, keywords=(), people=(), title="", size=3, tokens=30, has_time=False):
    return Cell(
        cell_id=cid, descriptor_ids=tuple(f"c{cid}d{i}" for i in range(size)), tokens=tokens,
        people=frozenset(people), keywords=frozenset(keywords), session_min=1, session_max=1,
        title=title, has_time=has_time,
    )


def entry(cid, u, markers=(), tokens=0):
    return PoolEntry(cid, u, frozenset(markers), tokens)


def test_cell_utility_matches_hand_computation():
    f = CellFeatures.of(cell(0, {"pottery class", "kiln"}, {"melanie"}, "melanie, pottery class, kiln",
                             size=3, has_time=True))
    q = frozenset({"pottery", "kiln", "bought"})
    u = cell_utility(f, q, frozenset({"melanie"}), True, CFG, item_cap=12)
    # J(Q, {pottery, class, kiln}) = 2/4; J(P, P_c) = 1; J(Q, title terms) = 2/5; temporal 0.25
    expected = 2.0 * 0.5 + 2.2 * 1.0 + 0.7 * 0.4 + 0.25 + 0.03 * math.log(4) / math.log(13)
    assert u == pytest.approx(expected, abs=1e-12)
    assert u == pytest.approx(3.7462142, abs=1e-6)
    # not temporal: the 0.25 disappears; a Cell without time metadata never gets it
    assert cell_utility(f, q, frozenset({"melanie"}), False, CFG, 12) == pytest.approx(expected - 0.25)
    g = CellFeatures.of(cell(0, {"pottery class", "kiln"}, {"melanie"}, "melanie, pottery class, kiln"))
    assert cell_utility(g, q, frozenset({"melanie"}), True, CFG, 12) == pytest.approx(expected - 0.25)


def test_gain_redundancy_and_cumulative_stop_hand_computed():
    pool = [entry(1, 1.0, {"x", "y"}, 100), entry(2, 0.9, {"y", "z"}, 40), entry(3, 0.85, {"w"}, 0)]
    opened, steps, reason = open_cells(pool, CFG)
    assert steps[0].gain == pytest.approx(1.0 - 0.02 - 0.0005 * 100)
    assert steps[1].redundancy == pytest.approx(1 / 3)
    assert steps[1].adjusted == pytest.approx(0.9 * (1 - 0.45 / 3))
    assert steps[1].gain == pytest.approx(0.765 - 0.02 * 2 - 0.0005 * 40)
    # target = 0.9 * (1.0 + 0.9 + 0.85) = 2.475: 1.0 + 0.765 < target, 1.765 + 0.85 >= target
    assert steps[2].adjusted == pytest.approx(0.85)
    assert opened == [1, 2, 3] and reason == STOP_CUMULATIVE

    pool = [entry(1, 1.0, {"x", "y"}, 100), entry(2, 0.9, {"y", "z"}, 40)]
    opened, steps, reason = open_cells(pool, CFG)  # target 1.71 <= 1.0 + 0.765
    assert opened == [1, 2] and reason == STOP_CUMULATIVE
    assert steps[-1].reason == STOP_CUMULATIVE and steps[-1].decision == "open"


def test_pool_exhausted_when_redundancy_keeps_cumulative_low():
    pool = [entry(1, 1.0, "abcd"), entry(2, 1.0, "abce"), entry(3, 1.0, "abcf")]
    opened, steps, reason = open_cells(pool, CFG)
    assert [s.redundancy for s in steps] == pytest.approx([0.0, 3 / 5, 3 / 6])
    # 1 + 0.73 + 0.775 = 2.505 < 0.9 * 3
    assert opened == [1, 2, 3] and reason == STOP_EXHAUSTED and steps[-1].reason == STOP_EXHAUSTED


def test_stop_on_negative_gain():
    pool = [entry(1, 1.0, {"a"}), entry(2, 0.9, {"b"}, tokens=2000), entry(3, 0.85, {"c"})]
    opened, steps, reason = open_cells(pool, CFG)
    assert steps[1].gain == pytest.approx(0.9 - 0.04 - 1.0)
    assert opened == [1] and reason == STOP_GAIN
    assert [s.decision for s in steps] == ["open", "stop"]


def test_stop_below_relative_floor():
    opened, steps, reason = open_cells([entry(1, 1.0, {"a"}), entry(2, 0.6, {"b"}), entry(3, 0.59, {"c"})], CFG)
    assert steps[1].gain > 0 and opened == [1] and reason == STOP_RELATIVE
    # redundancy alone can push a strong Cell under the floor: 0.9 * (1 - 0.45) < 0.68
    opened, steps, reason = open_cells([entry(1, 1.0, {"a", "b"}), entry(2, 0.9, {"a", "b"})], CFG)
    assert steps[1].redundancy == 1.0 and steps[1].adjusted == pytest.approx(0.495)
    assert opened == [1] and reason == STOP_RELATIVE


def test_six_cell_cap():
    pool = [entry(i, 1.0, {f"m{i}"}) for i in range(8)]
    opened, steps, reason = open_cells(pool, CFG)
    assert opened == [0, 1, 2, 3, 4, 5] and reason == STOP_CAP
    assert len(steps) == 6 and steps[-1].reason == STOP_CAP


def test_first_cell_opens_even_with_negative_gain():
    opened, steps, reason = open_cells([entry(1, 0.1, {"a"}, tokens=1000), entry(2, 0.1, {"b"}, tokens=1000)], CFG)
    assert steps[0].gain < 0 and opened == [1] and reason == STOP_GAIN
    assert open_cells([], CFG) == ([], [], STOP_EMPTY)


def test_admission_threshold_and_pool_size():
    lone = CellFeatures.of(cell(0, size=1))  # only the density term: 0.03 log 2 / log 13
    timed = CellFeatures.of(cell(1, size=1, has_time=True))
    density = 0.03 * math.log(2) / math.log(13)
    pool = score_pool([lone, timed], frozenset(), frozenset(), True, CFG, 12)
    assert [(e.cell_id, e.u) for e in pool] == [(1, pytest.approx(0.25 + density))]
    u = pool[0].u
    assert score_pool([timed], frozenset(), frozenset(), True, replace(CFG, admission=u), 12)
    assert not score_pool([timed], frozenset(), frozenset(), True, replace(CFG, admission=u + 1e-12), 12)

    many = [CellFeatures.of(cell(i, {"topic"})) for i in range(40)]
    pool = score_pool(many, frozenset({"topic"}), frozenset(), False, CFG, 12)
    assert pool_size(CFG) == 36 and [e.cell_id for e in pool] == list(range(36))
    assert pool_size(replace(CFG, cell_budget=1)) == 12


def test_pool_is_ordered_by_utility_then_id():
    feats = [
        CellFeatures.of(cell(0, {"kiln"})),
        CellFeatures.of(cell(1, {"pottery", "kiln"})),
        CellFeatures.of(cell(2, {"kiln"})),
    ]
    pool = score_pool(feats, frozenset({"pottery", "kiln"}), frozenset(), False, CFG, 12)
    assert [e.cell_id for e in pool] == [1, 0, 2]


def seed(keywords, people=()):
    return Descriptor("s", "ns", "D1:1", 0, "text", "Sam", 1, "t", tuple(people), tuple(keywords))


def test_seeds_expand_query_terms_but_not_people():
    q = seed_expansion([seed(["adoption agency"], ["Caroline"])], frozenset({"research"}))
    assert q == frozenset({"research", "adoption", "agency"})
    feats = [CellFeatures.of(cell(0, {"adoption agency"}, {"caroline"}, size=1)),
             CellFeatures.of(cell(1, {"pottery"}, size=1))]
    plain = route_cells(feats, frozenset({"research"}), frozenset(), False, CFG, item_cap=12)
    assert plain.opened == ()
    seeded = route_cells(feats, frozenset({"research"}), frozenset(), False, CFG, item_cap=12,
                         seeds=[seed(["adoption agency"], ["Caroline"])])
    assert seeded.opened == (0,) and seeded.query_people == frozenset()
    assert seeded.pool[0].u == pytest.approx(2.0 * 2 / 3 + 0.03 * math.log(2) / math.log(13))
    off = route_cells(feats, frozenset({"research"}), frozenset(), False, replace(CFG, seeds=0), item_cap=12,
                      seeds=[seed(["adoption agency"])])
    assert off.opened == ()


def test_route_cells_is_deterministic_and_traced():
    feats = [CellFeatures.of(cell(i, {f"k{i % 3}", "shared"}, {"ann"} if i % 2 else {"bo"}, size=1 + i % 5,
                                  tokens=10 * i)) for i in range(20)]
    args = (feats, frozenset({"k1", "shared"}), frozenset({"ann"}), False, CFG)
    a = route_cells(*args, item_cap=12)
    b = route_cells(*args, item_cap=12)
    assert a == b and a.opened
    assert [s.cell_id for s in a.steps if s.decision == "open"] == list(a.opened)
    assert a.steps[-1].reason == a.stop_reason
    assert set(a.steps[0].as_dict()) == {"cell_id", "u", "redundancy", "adjusted", "gain", "decision", "reason"}
