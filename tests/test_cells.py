"""Bounded Cell placement (Appendix B.2) and the controlled layouts (Appendix B.4)."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from memcompile_local.address.cells import (
    cell_from_descriptors,
    new_cell_score,
    place_descriptors,
    placement_score,
)
from memcompile_local.address.layouts import build_layout, primary_person
from memcompile_local.config import PlacementConfig
from memcompile_local.errors import ConfigError, DataFormatError
from memcompile_local.types import Descriptor

CFG = PlacementConfig()


def desc(did, packet, session, keywords=(), people=(), n=10, negated=False, event_time="", speaker="Sam",
         text="claim"):
    return Descriptor(
        descriptor_id=did, namespace="ns", packet_id=packet, claim_index=0, text=text, speaker=speaker,
        session_index=session, session_time="t", people=tuple(people), keywords=tuple(keywords),
        event_time=event_time, n_tokens=n, negated=negated,
    )


def ent(*counts):
    """Shannon entropy in nats of a list of counts, written out from the definition."""
    total = sum(counts)
    return -sum(c / total * math.log(c / total) for c in counts)


def test_placement_score_with_negation_conflict_matches_hand_computation():
    m1 = desc("m1", "D2:1", 2, ["Pottery Class", "clay"], ["Melanie"], n=10)
    m2 = desc("m2", "D3:4", 3, ["pottery class"], ["Melanie", "Caroline"], n=8)
    x = desc("x", "D4:2", 4, ["pottery class", "kiln"], ["melanie"], n=12, negated=True)
    s = placement_score(x, [m1, m2])

    h = ent(2, 1) + ent(2, 1) + 0.2 * math.log(1 + 1) + 0.0
    h_after = ent(3, 1, 1) + ent(3, 1) + 0.2 * math.log(1 + 2) + 0.0
    coherence = 0.45 * (1 / 3) + 0.35 * (1 / 2) + 0.20 * 1.0  # session 4 in [2, 3 + 1]
    locality = math.log(1 + 1 + 1)
    pressure = 12 / (360 - 18) + 0.4 * (h_after - h) + 0.25 * max(0, 3 / 12 - coherence) + 0.25 * max(0, h - 1.8)
    total = locality + 1.4 * coherence - 0.45 - 0.45 * pressure

    assert s.entropy == pytest.approx(h, abs=1e-12)
    assert s.entropy_after == pytest.approx(h_after, abs=1e-12)
    assert s.coherence == pytest.approx(0.525, abs=1e-12)
    assert s.locality == pytest.approx(locality, abs=1e-12)
    assert s.inconsistency == 0.45
    assert s.pressure == pytest.approx(pressure, abs=1e-12)
    assert s.total == pytest.approx(total, abs=1e-12)
    assert s.total == pytest.approx(1.3101017, abs=1e-6)


def test_placement_score_fill_term_out_of_span_and_repeated_dialogue():
    cfg = replace(CFG, item_cap=3)
    m1 = desc("m1", "D1:1", 1, ["a b"], n=4)
    m2 = desc("m2", "D1:1", 1, ["c"], n=6)  # same dialogue turn: repeated-id fraction 1/2
    x = desc("x", "D5:1", 5, ["c"], n=5)  # session 5 outside [1, 2]
    s = placement_score(x, [m1, m2], cfg)

    h = ent(1, 1) + 0 + 0.2 * math.log(1) + (2 - 1) / 2
    h_after = ent(1, 2) + 0 + 0.2 * math.log(1 + 4) + (3 - 2) / 3
    coherence = 0.45 * 0.5 + 0.35 * 0 + 0.20 * 0.25
    pressure = 5 / 350 + 0.4 * (h_after - h) + 0.25 * (3 / 3 - coherence) + 0
    assert s.inconsistency == 0.0  # no shared person, so no conflict
    assert s.coherence == pytest.approx(0.275, abs=1e-12)
    assert s.pressure == pytest.approx(pressure, abs=1e-12)
    assert s.total == pytest.approx(math.log(2) + 1.4 * coherence - 0.45 * pressure, abs=1e-12)


def test_placement_score_entropy_excess_term():
    m = desc("m", "D1:1", 1, ["k1", "k2", "k3", "k4", "k5"], ["p1", "p2"], n=20)
    x = desc("x", "D1:1", 1, ["k1"], ["p1"], n=10)
    s = placement_score(x, [m])
    h = math.log(5) + math.log(2)
    h_after = ent(2, 1, 1, 1, 1) + ent(2, 1) + 0 + 0.5
    coherence = 0.45 * 0.2 + 0.35 * 0.5 + 0.2
    pressure = 10 / 340 + 0.4 * (h_after - h) + 0 + 0.25 * (h - 1.8)
    assert s.entropy == pytest.approx(h, abs=1e-12)
    assert s.pressure == pytest.approx(pressure, abs=1e-12)
    assert s.total == pytest.approx(math.log(3) + 1.4 * coherence - 0.45 * pressure, abs=1e-12)


def test_new_cell_score():
    assert new_cell_score(desc("x", "D1:1", 1, n=12)) == pytest.approx(1.4 * 0.55 - 0.45 * (0.65 + 12 / 360))
    assert new_cell_score(desc("x", "D1:1", 1, n=12)) == pytest.approx(0.4625)
    # n_tokens = 0 falls back to counting the claim text: "a b c ." is 4 tokens
    d = desc("y", "D1:1", 1, n=0, text="a b c .")
    assert new_cell_score(d) == pytest.approx(0.77 - 0.45 * (0.65 + 4 / 360))


def test_related_descriptor_joins_and_unrelated_opens_new_cell():
    ds = [
        desc("a", "D1:1", 1, ["pottery"], ["Mel"]),
        desc("b", "D1:2", 1, ["pottery", "kiln"], ["Mel"]),
        desc("c", "D1:3", 1, ["adoption"], ["Caroline"]),
    ]
    cells = place_descriptors(ds)
    assert [c.descriptor_ids for c in cells] == [("a", "b"), ("c",)]
    assert [c.cell_id for c in cells] == [0, 1]
    assert cells[0].keywords == frozenset({"pottery", "kiln"}) and cells[0].people == frozenset({"mel"})
    assert cells[0].tokens == 20 and cells[0].session_min == cells[0].session_max == 1


def test_tie_goes_to_smallest_cell_id():
    ds = [
        desc("a", "D1:1", 1, ["alpha"], ["P"]),
        desc("b", "D1:2", 1, ["beta"], ["Q"]),
        desc("c", "D1:3", 1, ["alpha", "beta"]),  # symmetric to both Cells
    ]
    first = placement_score(ds[2], [ds[0]]).total
    second = placement_score(ds[2], [ds[1]]).total
    assert first == second and first > new_cell_score(ds[2])
    for exhaustive in (False, True):
        cells = place_descriptors(ds, exhaustive=exhaustive)
        assert [c.descriptor_ids for c in cells] == [("a", "c"), ("b",)]


def test_capacity_limits_force_new_cells():
    token_cfg = replace(CFG, token_cap=25)
    ds = [desc("a", "D1:1", 1, ["k"], n=10), desc("b", "D1:2", 1, ["k"], n=10), desc("c", "D1:3", 1, ["k"], n=10)]
    cells = place_descriptors(ds, token_cfg)
    assert [c.descriptor_ids for c in cells] == [("a", "b"), ("c",)]  # 20 + 10 > 25

    ds = [desc(f"d{i}", f"D1:{i}", 1, ["k"], n=1) for i in range(27)]
    cells = place_descriptors(ds)
    assert [len(c.descriptor_ids) for c in cells] == [12, 12, 3]  # |c| < M_C = 12


def test_title_and_has_time():
    ds = [
        desc("a", "D1:1", 1, ["pottery", "kiln"], ["Mel"], event_time="2023-05-07"),
        desc("b", "D1:2", 1, ["pottery"], ["Mel", "Caroline"]),
    ]
    cell = cell_from_descriptors(0, ds)
    assert cell.title == "mel, caroline, pottery, kiln"
    assert cell.has_time
    assert not cell_from_descriptors(0, ds[1:]).has_time


def synthetic(n: int, seed: int = 7) -> list[Descriptor]:
    rng = random.Random(seed)
    keywords = [f"topic {i}" for i in range(18)]
    people = ["Ann", "Bo", "Cy", "Di"]
    out, session = [], 1
    for i in range(n):
        if rng.random() < 0.06:
            session += 1
        packet = f"D{session}:{i // 2}"
        out.append(desc(
            f"ns:{packet}:{i % 2}", packet, session,
            rng.sample(keywords, rng.randint(0, 4)), rng.sample(people, rng.randint(0, 2)),
            n=rng.randint(3, 60), negated=rng.random() < 0.2,
            event_time="2023" if rng.random() < 0.3 else "",
        ))
    return out


def test_inverted_index_shortcut_equals_exhaustive_scan_and_is_deterministic():
    ds = synthetic(400)
    fast = place_descriptors(ds)
    assert fast == place_descriptors(ds, exhaustive=True)
    assert fast == place_descriptors(ds)
    assert sorted(d for c in fast for d in c.descriptor_ids) == sorted(d.descriptor_id for d in ds)
    assert all(len(c.descriptor_ids) <= CFG.item_cap for c in fast)
    # a Cell may exceed the token cap only when it holds a single oversized descriptor
    assert all(c.tokens <= CFG.token_cap or len(c.descriptor_ids) == 1 for c in fast)


def test_incremental_placement_equals_one_batch():
    ds = synthetic(300, seed=3)
    lookup = {d.descriptor_id: d for d in ds}
    whole = place_descriptors(ds)
    for cut in (1, 97, 150, 299):
        first = place_descriptors(ds[:cut])
        assert place_descriptors(ds[cut:], existing_cells=first, descriptor_lookup=lookup) == whole
        assert place_descriptors(ds[cut:], existing_cells=first, descriptor_lookup=lookup.__getitem__) == whole


def test_bad_input_raises_typed_errors():
    ds = synthetic(10)
    with pytest.raises(DataFormatError):
        place_descriptors([ds[0], ds[0]])
    cells = place_descriptors(ds[:5])
    with pytest.raises(DataFormatError):
        place_descriptors(ds[5:], existing_cells=cells)  # no lookup
    with pytest.raises(DataFormatError):
        place_descriptors(ds[5:], existing_cells=cells, descriptor_lookup={})
    stale = [replace(cells[0], tokens=cells[0].tokens + 1)] + cells[1:]
    with pytest.raises(DataFormatError):
        place_descriptors(ds[5:], existing_cells=stale, descriptor_lookup={d.descriptor_id: d for d in ds})


# -- layouts ------------------------------------------------------------------------------

def test_flat_and_bounded_layouts():
    ds = synthetic(50)
    assert build_layout("flat", ds) == []
    assert build_layout("bounded", ds) == place_descriptors(ds)
    with pytest.raises(ConfigError):
        build_layout("random", ds)


def test_sequential_session_and_entity_blocks():
    cfg = replace(CFG, block_size=2)
    ds = [
        desc("a", "D1:1", 1, people=["Ann"]),
        desc("b", "D1:2", 1, speaker="Bo"),
        desc("c", "D2:1", 2, people=["Bo", "Ann"]),
        desc("d", "D1:3", 1, people=["ann"]),  # session 1 again after session 2 in input order
        desc("e", "D3:1", 3, people=["Cy"]),
    ]
    ids = lambda cells: [c.descriptor_ids for c in cells]  # noqa: E731
    assert ids(build_layout("sequential", ds, cfg)) == [("a", "b"), ("d", "c"), ("e",)]
    assert ids(build_layout("session", ds, cfg)) == [("a", "b"), ("d",), ("c",), ("e",)]
    assert [primary_person(d) for d in ds] == ["ann", "bo", "bo", "ann", "cy"]
    assert ids(build_layout("entity", ds, cfg)) == [("a", "d"), ("b", "c"), ("e",)]
    cells = build_layout("session", ds, cfg)
    assert [c.cell_id for c in cells] == [0, 1, 2, 3]
    assert cells[0].people == frozenset({"ann"}) and cells[0].tokens == 20
