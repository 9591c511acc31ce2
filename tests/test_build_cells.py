"""Build speed without changed results: the bounded placement scan equals the full scoring of
Algorithm 2, and a cold build hands its own descriptors to placement instead of reading them back."""

from __future__ import annotations

import dataclasses
import json
import random

from memcompile_local.adapters.scripted import HashEmbedder
from memcompile_local.address import cells as cells_module
from memcompile_local.address.cells import place_descriptors
from memcompile_local.address.extract_memo import MemoizedExtractor
from memcompile_local.address.extract_rule import RuleExtractor
from memcompile_local.build import stages as build_module
from memcompile_local.build.stages import PLACEMENTS, build_memory, layout_id
from memcompile_local.config import PlacementConfig
from memcompile_local.store import MemoryStore
from memcompile_local.store.codecs import event_from_json, event_to_json
from memcompile_local.types import Descriptor, EventFields


def _descriptors(n: int, seed: int) -> list[Descriptor]:
    """Descriptors with heavily overlapping keywords and people, negations and session jumps,
    so that many Cells compete for each one (and some new Cells win)."""
    rng = random.Random(seed)
    keywords = [f"topic {i}" for i in range(14)]
    people = ["Ana", "Ben", "Cleo", "Dev", "Eli"]
    out = []
    session = 1
    for i in range(n):
        if rng.random() < 0.08:
            session += rng.choice((1, 1, 3))
        text = " ".join(rng.choice(("we", "went", "to", "the", "lake", "and", "talked", "about", "it"))
                        for _ in range(rng.randint(3, 30)))
        out.append(Descriptor(
            descriptor_id=f"n:p{i // 2}:{i % 2}", namespace="n", packet_id=f"p{i // 2}", claim_index=i % 2,
            text=text, speaker=rng.choice(people), session_index=session, session_time="",
            people=tuple(rng.sample(people, rng.randint(0, 2))),
            keywords=tuple(rng.sample(keywords, rng.randint(0, 4))),
            event_time=rng.choice(("", "", "2024-05")), n_tokens=rng.randint(4, 60),
            negated=rng.random() < 0.15,
        ))
    return out


def test_bounded_scan_places_exactly_as_full_scoring(monkeypatch):
    entropy_calls = []
    original = cells_module._CellState.entropy_with

    def counted(self, x):
        entropy_calls.append(1)
        return original(self, x)

    monkeypatch.setattr(cells_module._CellState, "entropy_with", counted)
    for seed in range(4):
        ds = _descriptors(700, seed)
        reference = place_descriptors(ds, exhaustive=True)  # every open Cell, every term in full
        entropy_calls.clear()
        fast = place_descriptors(ds)
        fast_calls = len(entropy_calls)
        # The inverted index without the bound: same Cells, more entropies computed.
        monkeypatch.setattr(cells_module._Placer, "__init__", _unbounded_init(cells_module._Placer.__init__))
        entropy_calls.clear()
        full = place_descriptors(ds)
        full_calls = len(entropy_calls)
        monkeypatch.undo()
        monkeypatch.setattr(cells_module._CellState, "entropy_with", counted)
        assert fast == full == reference, seed
        assert len(reference) > 40  # many Cells competed
        assert fast_calls < 0.8 * full_calls, (fast_calls, full_calls)  # the bound skipped Cells


def _unbounded_init(init):
    def wrapped(self, cfg, exhaustive):
        init(self, cfg, exhaustive)
        self.bounded = False
    return wrapped


def test_a_cold_build_places_its_own_descriptors_without_reading_them_back(tmp_path, conv, monkeypatch):
    PLACEMENTS.clear()
    reads = []
    placed = []
    original_read = MemoryStore.descriptors
    original_place = build_module.place_cells

    def read(self, namespace, dset):
        reads.append(namespace)
        return original_read(self, namespace, dset)

    def place(store, namespace, dset, placement, *, descriptors=None):
        placed.append(list(descriptors))
        return original_place(store, namespace, dset, placement, descriptors=descriptors)

    monkeypatch.setattr(MemoryStore, "descriptors", read)
    monkeypatch.setattr(build_module, "place_cells", place)
    store = MemoryStore(tmp_path / "m.sqlite")
    store.ingest(conv)
    ex, cfg = RuleExtractor(), PlacementConfig()
    build_memory(store, conv.namespace, ex, cfg, HashEmbedder(dim=16))
    assert reads == []
    stored = original_read(store, conv.namespace, ex.descriptor_set)
    assert placed[0] == stored and len(stored) > 20
    assert store.cells(conv.namespace, layout_id(ex.descriptor_set, cfg)) == place_descriptors(stored, cfg)
    # A build with something extracted before reads the store (its own list would be partial).
    half = dict(conv.__dict__)
    store2 = MemoryStore(tmp_path / "n.sqlite")
    store2.ingest(type(conv)(**{**half, "sessions": conv.sessions[:1]}))
    build_memory(store2, conv.namespace, ex, cfg, None)
    store2.ingest(conv)
    reads.clear()
    build_memory(store2, conv.namespace, ex, cfg, None)
    assert reads == [conv.namespace]
    assert placed[-1] == original_read(store2, conv.namespace, ex.descriptor_set) == stored
    store.close()
    store2.close()


def test_event_json_is_the_canonical_json_of_every_event_field():
    ev = EventFields(subject_people=("Ana", "Bé"), predicate="adopt", focus_terms=("cat",), goal_context_terms=(),
                     event_type="plan", event_time="2024-05", polarity="positive", confidence=0.75)
    text = event_to_json(ev)
    assert text == json.dumps(dataclasses.asdict(ev), ensure_ascii=False, sort_keys=True, allow_nan=False)
    assert event_from_json(text) == ev


def test_rule_extraction_is_stored_in_big_batches_llm_extraction_in_small_ones(tmp_path, conv, monkeypatch):
    batches = []
    original = MemoryStore.save_extractions

    def save(self, namespace, dset, items):
        batches.append(len(items))
        return original(self, namespace, dset, items)

    monkeypatch.setattr(MemoryStore, "save_extractions", save)
    store = MemoryStore(tmp_path / "m.sqlite")
    store.ingest(conv)
    n = store.packet_count(conv.namespace)
    assert n > 16
    build_memory(store, conv.namespace, MemoizedExtractor(RuleExtractor()), PlacementConfig(), None)
    assert batches == [n] if n <= build_module.RULE_BATCH else batches[0] == build_module.RULE_BATCH
    assert build_module._batch_size(object()) == 16  # any other extractor (an LLM's) keeps small batches
    store.close()
