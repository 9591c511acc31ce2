"""What the dense channel embeds per turn (fusion.dense_document / fusion.dense_context):
document kinds, context vectors composed from turn vectors, one embedded document per turn in
the raw-turn mode, and the paper's LLM paths left on z(p)."""

from __future__ import annotations

import numpy as np
import pytest

from memcompile_local.address.dense import (
    composed_context_matrix,
    dense_document,
    l2_normalize,
    packet_document,
    turn_document,
)
from memcompile_local.build.stages import DensePlan, dense_plan, packet_document_keys
from memcompile_local.config import PipelineConfig
from memcompile_local.errors import ConfigError, DataFormatError
from memcompile_local.pipeline.presets import apply_preset
from memcompile_local.memory import Memory
from memcompile_local.store import MemoryStore
from memcompile_local.types import Descriptor, SourcePacket

from test_embedding_cache import SESSION_A, SESSION_B, CountingEmbedder


def _config(document: str, context: str) -> PipelineConfig:
    cfg = apply_preset("model-free", PipelineConfig())
    return cfg.replace(fusion={"dense_document": document, "dense_context": context})


def _packet(**kw) -> SourcePacket:
    base = dict(namespace="n", packet_id="S1:1", ordinal=0, session_index=1, session_id="S1",
                session_time="2024-03-04", speaker="Ana", content="I adopted a cat.", image_caption=None,
                sha256="0" * 64)
    base.update(kw)
    return SourcePacket(**base)


def _claim(text: str, people=(), keywords=()) -> Descriptor:
    return Descriptor(descriptor_id="d", namespace="n", packet_id="S1:1", claim_index=0, text=text,
                      speaker="Ana", session_index=1, session_time="2024-03-04", people=tuple(people),
                      keywords=tuple(keywords))


def test_document_kinds_differ_only_in_what_they_leave_out():
    p = _packet(image_caption="a grey cat")
    claims = [_claim("Ana adopted a cat.", people=["Ana"], keywords=["cat"])]
    full = dense_document(p, claims, "packet")
    assert full == packet_document(p, claims)
    assert "Ana adopted a cat." in full and "People: Ana" in full and "Time: 2024-03-04" in full
    lean = dense_document(p, claims, "lean")
    assert "Ana adopted a cat." not in lean
    assert lean == full.replace("Ana adopted a cat.\n", "")
    turn = dense_document(p, claims, "turn")
    assert turn == turn_document(p) == "Ana: I adopted a cat.\nImage: a grey cat"
    assert full.startswith(turn + "\n")
    with pytest.raises(ConfigError):
        dense_document(p, claims, "summary")


def test_composed_context_vectors_are_the_normalized_sum_of_the_session_window():
    rng = np.random.default_rng(3)
    m = rng.normal(size=(6, 5)).astype(np.float32)
    sessions = [1, 1, 1, 2, 3, 3]
    got = composed_context_matrix(sessions, m)
    u = l2_normalize(m)
    windows = [(0, 1), (0, 1, 2), (1, 2), (3,), (4, 5), (4, 5)]  # neighbours inside the session only
    want = l2_normalize(np.stack([u[list(w)].sum(axis=0) for w in windows]))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got[3], u[3], rtol=1e-6)  # a lone turn's context is its own vector
    with pytest.raises(DataFormatError):
        composed_context_matrix([1, 1], m)


def test_the_plan_follows_the_fusion_section_only_on_the_fused_path():
    assert dense_plan(_config("turn", "composed"), True) == DensePlan("turn", "composed")
    assert dense_plan(_config("lean", "embedded"), True) == DensePlan("lean", "embedded")
    assert dense_plan(_config("turn", "composed"), False) == DensePlan("turn", "none")
    # The paper's path (LLM anchor selector) embeds z(p) whatever the fusion section says.
    paper = apply_preset("A0", PipelineConfig()).replace(fusion={"dense_document": "turn"})
    assert dense_plan(paper, False).document == "packet"
    # The shipped defaults are the paper's document and embedded context documents.
    assert dense_plan(apply_preset("model-free", PipelineConfig()), True) == DensePlan("packet", "embedded")


def test_raw_turn_mode_embeds_exactly_one_document_per_turn(tmp_path):
    store = MemoryStore(tmp_path / "m.sqlite")
    emb = CountingEmbedder()
    mem = Memory(store, _config("turn", "composed"), embedder=emb)
    mem.add("alice", [SESSION_A, SESSION_B])
    view = mem.view("alice")
    packets = store.packets("alice")
    assert sorted(emb.texts) == sorted(turn_document(p) for p in packets)
    assert len(emb.texts) == len(packets) == 5
    # The view's vectors: one per turn, and context vectors composed from them.
    want = l2_normalize(emb.inner.embed([turn_document(p) for p in packets]))
    np.testing.assert_allclose(view.packet_matrix, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(view.fusion.context_matrix,
                               composed_context_matrix([p.session_index for p in packets], want),
                               rtol=1e-6, atol=1e-6)
    # One appended turn embeds one document: its own (no neighbour document to redo).
    emb.texts.clear()
    mem.add("alice", [{"time": SESSION_B["time"], "turns": [{"speaker": "Ana", "text": "Thursday, after work."}]}])
    view = mem.view("alice")
    assert emb.texts == ["Ana: Thursday, after work."]
    assert view.fusion.context_matrix.shape[0] == 6
    store.close()


def test_each_document_option_gives_the_view_a_scratch_build_gives(tmp_path):
    """A view grown by an append equals a fresh Memory's view over the same store, per option."""
    for document, context in (("packet", "embedded"), ("lean", "composed"), ("turn", "embedded")):
        store = MemoryStore(tmp_path / f"{document}-{context}.sqlite")
        cfg = _config(document, context)
        mem = Memory(store, cfg, embedder=CountingEmbedder())
        mem.add("alice", [SESSION_A])
        mem.view("alice")
        mem.add("alice", [SESSION_B])
        grown = mem.view("alice")
        fresh = Memory(store, cfg, embedder=CountingEmbedder()).view("alice")
        np.testing.assert_array_equal(grown.packet_matrix, fresh.packet_matrix)
        np.testing.assert_array_equal(grown.fusion.context_matrix, fresh.fusion.context_matrix)
        _, docs = packet_document_keys(store, "alice", mem.extractor().descriptor_set, document=document)
        want = l2_normalize(CountingEmbedder().embed(docs))
        np.testing.assert_allclose(fresh.packet_matrix, want, rtol=1e-6, atol=1e-6)
        hits = mem.search("alice", "Which day is the pottery class?", k=2)
        assert {h.packet.content for h in hits} == {"Which day is the pottery class?",
                                                    "I start my pottery class in Leeds next week."}
        store.close()


def test_the_service_view_of_turns_not_built_yet_follows_the_dense_plan(tmp_path):
    store = MemoryStore(tmp_path / "m.sqlite")
    emb = CountingEmbedder()
    mem = Memory(store, _config("turn", "composed"), embedder=emb)
    mem.add("alice", [SESSION_A, SESSION_B])
    pending = mem.partial_views().view("alice")  # nothing extracted yet
    packets = store.packets("alice")
    assert sorted(emb.texts) == sorted(turn_document(p) for p in packets)
    np.testing.assert_allclose(pending.fusion.context_matrix,
                               composed_context_matrix([p.session_index for p in packets], pending.packet_matrix),
                               rtol=1e-6, atol=1e-6)
    built = mem.view("alice")  # the build embeds nothing more: the documents are the same
    assert len(emb.texts) == len(packets)
    np.testing.assert_array_equal(built.packet_matrix, pending.packet_matrix)
    store.close()
