"""Build orchestration: resumable extraction, failure policy, incremental Cells."""

from __future__ import annotations

import dataclasses
import json

import pytest

from memcompile_local.adapters.scripted import HashEmbedder, ScriptedBackend
from memcompile_local.address.extract_llm import LLMExtractor
from memcompile_local.address.extract_rule import RuleExtractor
from memcompile_local.address import cells as cells_module
from memcompile_local.address.cells import cell_from_descriptors, place_descriptors
from memcompile_local.build.stages import PLACEMENTS, build_memory, layout_id, place_cells
from memcompile_local.config import PlacementConfig
from memcompile_local.errors import ExtractionError
from memcompile_local.protocols import DescriptorExtractor
from memcompile_local.llm.client import LLMClient
from memcompile_local.store import MemoryStore
from memcompile_local.types import Conversation

from test_pipeline_e2e import responder


def failing_on(packet_text: str):
    def reply(req):
        if req.stage == "fact" and packet_text in req.messages[-1].content.split("\n")[-1]:
            return "this is not json"
        return responder(req)
    return reply


def test_failed_packets_raise_after_saving_the_others_then_rule_fallback(tmp_path, conv):
    store = MemoryStore(tmp_path / "m.sqlite")
    store.ingest(conv)
    target = store.packets(conv.namespace)[3]
    client = LLMClient(ScriptedBackend(failing_on(target.content[:30])), store)
    ex = LLMExtractor(client)
    with pytest.raises(ExtractionError) as err:
        build_memory(store, conv.namespace, ex, PlacementConfig(), None)
    assert err.value.packet_ids == (target.packet_id,) and target.packet_id in str(err.value)
    done = store.extracted_packet_ids(conv.namespace, ex.descriptor_set)
    assert target.packet_id not in done and len(done) == len(store.packets(conv.namespace)) - 1

    res = build_memory(store, conv.namespace, ex, PlacementConfig(), None, on_failure="rule")
    assert res.extracted_now == 1
    fallback = json.loads(store.get_meta(conv.namespace, f"fallback:{ex.descriptor_set}"))
    assert fallback == [target.packet_id]
    rule_texts = [d.text for d in RuleExtractor().extract([(target, store.packets(conv.namespace)[2])])[0]]
    got = [d.text for d in store.descriptors(conv.namespace, ex.descriptor_set) if d.packet_id == target.packet_id]
    assert got == rule_texts
    store.close()


class _PartialLooking(RuntimeError):
    """A bug-shaped error that happens to carry a ``partial`` attribute."""

    def __init__(self, partial):
        super().__init__("extractor bug")
        self.partial = partial


class _BrokenExtractor:
    descriptor_set = "broken-v1"

    def extract(self, items):
        raise _PartialLooking([None] * len(items))


def test_only_the_typed_extraction_error_is_treated_as_a_partial_batch(tmp_path, conv):
    """Any other exception is a bug and propagates as itself, with nothing saved or swallowed."""
    store = MemoryStore(tmp_path / "m.sqlite")
    store.ingest(conv)
    with pytest.raises(_PartialLooking):
        build_memory(store, conv.namespace, _BrokenExtractor(), PlacementConfig(), None, on_failure="rule")
    assert store.extracted_packet_ids(conv.namespace, "broken-v1") == set()
    assert isinstance(RuleExtractor(), DescriptorExtractor) and isinstance(_BrokenExtractor(), DescriptorExtractor)
    store.close()


def test_incremental_build_equals_full_build(tmp_path, conv):
    half = len(conv.sessions) // 2
    first = Conversation(namespace=conv.namespace, sessions=conv.sessions[:half])
    ex = RuleExtractor()
    emb = HashEmbedder(dim=32)
    a = MemoryStore(tmp_path / "a.sqlite")
    a.ingest(first)
    build_memory(a, conv.namespace, ex, PlacementConfig(), emb)
    a.ingest(conv)  # the earlier turns are skipped, the later ones appended
    inc = build_memory(a, conv.namespace, ex, PlacementConfig(), emb)
    b = MemoryStore(tmp_path / "b.sqlite")
    b.ingest(conv)
    full = build_memory(b, conv.namespace, ex, PlacementConfig(), emb)
    lid = layout_id(ex.descriptor_set, PlacementConfig())
    assert inc.descriptors == full.descriptors and inc.cells == full.cells
    assert a.cells(conv.namespace, lid) == b.cells(conv.namespace, lid)
    assert inc.embedded_now < full.embedded_now  # only the new packets were embedded the second time
    a.close()
    b.close()


def _turn_prefixes(conv):
    """The conversation cut after each of its turns, in dialogue order."""
    for si, session in enumerate(conv.sessions):
        for ti in range(1, len(session.turns) + 1):
            cut = conv.sessions[:si] + (dataclasses.replace(session, turns=session.turns[:ti]),)
            yield Conversation(namespace=conv.namespace, sessions=cut)


def _counting_restores(monkeypatch) -> list[int]:
    """Record the id of every Cell restored from the store into a placement state."""
    restored: list[int] = []
    original = cells_module._Placer.restore

    def restore(self, cell, lookup):
        restored.append(cell.cell_id)
        return original(self, cell, lookup)

    monkeypatch.setattr(cells_module._Placer, "restore", restore)
    return restored


def test_turn_by_turn_appends_place_into_the_remembered_state_and_equal_a_full_placement(tmp_path, conv,
                                                                                         monkeypatch):
    PLACEMENTS.clear()
    restored = _counting_restores(monkeypatch)
    ex, cfg = RuleExtractor(), PlacementConfig()
    lid = layout_id(ex.descriptor_set, cfg)
    store = MemoryStore(tmp_path / "m.sqlite")
    prefixes = list(_turn_prefixes(conv))
    for n, prefix in enumerate(prefixes[:12]):
        store.ingest(prefix)
        build_memory(store, conv.namespace, ex, cfg, None)
        stored = store.cells(conv.namespace, lid)
        assert stored == place_descriptors(store.descriptors(conv.namespace, ex.descriptor_set), cfg), n
    assert len(stored) > 1
    assert restored == []  # every append placed into the state the previous build left
    PLACEMENTS.clear()  # a fresh process: the state is restored from the store, same result
    store.ingest(conv)
    build_memory(store, conv.namespace, ex, cfg, None)
    assert restored and store.cells(conv.namespace, lid) == place_descriptors(
        store.descriptors(conv.namespace, ex.descriptor_set), cfg)
    store.close()


def test_cells_written_by_another_writer_are_restored_not_the_remembered_state(tmp_path, conv, monkeypatch):
    PLACEMENTS.clear()
    restored = _counting_restores(monkeypatch)
    ex, cfg = RuleExtractor(), PlacementConfig()
    lid = layout_id(ex.descriptor_set, cfg)
    prefixes = list(_turn_prefixes(conv))
    store = MemoryStore(tmp_path / "m.sqlite")
    store.ingest(prefixes[5])
    build_memory(store, conv.namespace, ex, cfg, None)
    # Another writer lays out the first six turns' descriptors its own way (one per Cell).
    mine = store.descriptors(conv.namespace, ex.descriptor_set)
    other = [cell_from_descriptors(i, [d], cfg) for i, d in enumerate(mine)]
    store.save_cells(conv.namespace, lid, other)
    store.ingest(prefixes[8])
    build_memory(store, conv.namespace, ex, cfg, None)
    assert restored == list(range(len(other)))  # the store's Cells, not the remembered ones
    new = [d for d in store.descriptors(conv.namespace, ex.descriptor_set) if d not in mine]
    assert new and store.cells(conv.namespace, lid) == place_descriptors(new, cfg, other, {d.descriptor_id: d
                                                                                             for d in mine})
    store.close()


def test_unplaced_descriptors_before_placed_ones_rebuild_the_layout_from_scratch(tmp_path, conv, monkeypatch):
    PLACEMENTS.clear()
    restored = _counting_restores(monkeypatch)
    ex, cfg = RuleExtractor(), PlacementConfig()
    lid = layout_id(ex.descriptor_set, cfg)
    store = MemoryStore(tmp_path / "m.sqlite")
    store.ingest(list(_turn_prefixes(conv))[9])
    build_memory(store, conv.namespace, ex, cfg, None)
    everything = store.descriptors(conv.namespace, ex.descriptor_set)
    # Cells that hold only the later half of the descriptors: the earlier ones come out of order.
    store.save_cells(conv.namespace, lid, place_descriptors(everything[len(everything) // 2:], cfg))
    build_memory(store, conv.namespace, ex, cfg, None)
    assert restored == []  # the out-of-order layout was dropped, not restored
    assert store.cells(conv.namespace, lid) == place_descriptors(everything, cfg)
    store.close()


def test_placement_with_descriptors_read_before_another_writer_placed_more(tmp_path, conv):
    # Two processes building one namespace: this one read its descriptors, then another
    # extracted and placed later turns. The stored Cells then hold descriptors the list lacks;
    # placement must read them again (it raised on the unknown ids before) and end with the
    # Cells a full placement gives.
    PLACEMENTS.clear()
    ex, cfg = RuleExtractor(), PlacementConfig()
    lid = layout_id(ex.descriptor_set, cfg)
    prefixes = list(_turn_prefixes(conv))
    path = tmp_path / "m.sqlite"
    store, other = MemoryStore(path), MemoryStore(path)
    store.ingest(prefixes[5])
    build_memory(store, conv.namespace, ex, cfg, None)
    stale = store.descriptors(conv.namespace, ex.descriptor_set)
    other.ingest(prefixes[9])
    build_memory(other, conv.namespace, ex, cfg, None)
    assert len(other.descriptors(conv.namespace, ex.descriptor_set)) > len(stale)
    PLACEMENTS.clear()  # this process remembers nothing of the other's placement
    place_cells(store, conv.namespace, ex.descriptor_set, cfg, descriptors=stale)
    assert store.cells(conv.namespace, lid) == place_descriptors(store.descriptors(conv.namespace, ex.descriptor_set), cfg)
    store.close()
    other.close()
