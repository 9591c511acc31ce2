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
from _data_paths import PLAIN_TURN_MODEL


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
    # Embedded context documents are embedded only up to the words the fused index reads.
    assert dense_plan(_config("packet", "embedded"), True) == DensePlan("packet", "embedded",
                                                                        context_window_words=300)
    assert dense_plan(_config("turn", "composed"), False) == DensePlan("turn", "none")
    # The paper's path (LLM anchor selector) embeds z(p) whatever the fusion section says.
    paper = apply_preset("A0", PipelineConfig()).replace(fusion={"dense_document": "turn"})
    assert dense_plan(paper, False).document == "packet"
    # The shipped defaults are the paper's document and embedded context documents; the shipped
    # ranker (ranker-v4) reads no plain-turn cosine, so no plain turn is embedded.
    shipped = apply_preset("model-free", PipelineConfig())
    assert dense_plan(shipped, True) == DensePlan("packet", "embedded", context_window_words=300)
    # A model that reads it: its plain turns are embedded up to the context window, under a
    # learned ranker only.
    v3 = shipped.replace(fusion={"ranker_model": str(PLAIN_TURN_MODEL)})
    assert dense_plan(v3, True) == DensePlan("packet", "embedded", context_window_words=300, raw_turns=True,
                                             raw_window_words=300)
    assert dense_plan(v3.replace(fusion={"ranker": "learned"}), True).raw_turns
    assert not dense_plan(v3.replace(fusion={"ranker": "weighted"}), True).raw_turns
    a0 = apply_preset("A0", PipelineConfig())
    assert not dense_plan(a0.replace(fusion={"ranker_model": v3.fusion.ranker_model}), False).raw_turns


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
    for document, context in (("packet", "embedded"), ("packet", "composed"), ("turn", "embedded")):
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


# A user and an assistant whose replies run long (written for this test): with a context
# window of 40 words most context documents are too long for the fused index to read.
_LONG_REPLY = ("Here is a plan for the allotment. Start with the raised beds along the south fence, "
               "where the soil drains well after rain, and keep the compost bins near the shed. "
               "Broad beans go in first, then courgettes once the frost has passed, and the "
               "rhubarb crowns can stay where they are for another season.")
_LONG_CHAT = [
    {"time": "2024-02-01 09:00", "id": "g1", "turns": [
        {"speaker": "Tove", "text": "How should I lay out my allotment this spring?", "id": "g1a"},
        {"speaker": "assistant", "text": _LONG_REPLY, "id": "g1b"},
        {"speaker": "Tove", "text": "Thanks. Where do the compost bins go?", "id": "g1c"},
    ]},
    {"time": "2024-02-08 18:30", "id": "g2", "turns": [
        {"speaker": "Tove", "text": "My neighbour Ruben gave me strawberry runners.", "id": "g2a"},
        {"speaker": "assistant", "text": _LONG_REPLY.replace("allotment", "strawberry patch"), "id": "g2b"},
    ]},
    {"time": "2024-02-15 07:45", "id": "g3", "turns": [
        {"speaker": "Tove", "text": "The broad beans are up!", "id": "g3a"},
    ]},
]
def _long_chat_memory(tmp_path, **fusion):
    """(config, store, counting embedder, Memory, view, packets) of ``_LONG_CHAT`` under the
    model-free preset with the ``fusion`` fields given."""
    cfg = apply_preset("model-free", PipelineConfig()).replace(fusion=fusion)
    store = MemoryStore(tmp_path / "m.sqlite")
    emb = CountingEmbedder()
    mem = Memory(store, cfg, embedder=emb)
    mem.add("tove", _LONG_CHAT)
    return cfg, store, emb, mem, mem.view("tove"), store.packets("tove")


_LONG_QUESTIONS = ["Where did Tove put the compost bins?", "Who gave Tove strawberry runners?",
                   "What goes in after the frost?", "When did the broad beans come up?"]


def test_context_documents_the_fused_index_never_reads_are_not_embedded_and_change_nothing(tmp_path):
    from memcompile_local.build.stages import context_document_keys, context_model_id, unread_key
    from memcompile_local.fused.channels import fused_scores
    from memcompile_local.fused.documents import context_documents
    from memcompile_local.fused.index import FusionIndex

    cfg, store, emb, mem, view, packets = _long_chat_memory(tmp_path, context_window_words=40)
    every = context_documents(packets)
    read = [len(d.split()) <= 40 for d in every]
    assert 0 < sum(read) < len(read)  # the fixture has both kinds
    # Only the context documents the index reads were embedded and stored.
    assert not [d for d, r in zip(every, read) if not r and d in emb.texts]
    assert all(d in emb.texts for d, r in zip(every, read) if r)
    keys, _ = context_document_keys(store, "tove", packets, window=40)
    stored = store.embeddings("tove", context_model_id(emb), keys)
    assert set(stored) == {k for k, r in zip(keys, read) if r}
    assert [k for k, r in zip(keys, read) if not r] == [unread_key(p.packet_id) for p, r in zip(packets, read) if not r]
    # The old path: every context document embedded. Same gate, so the same scores and picks.
    full = np.asarray(CountingEmbedder().embed(every), dtype=np.float32)
    mask = np.asarray(read)
    assert np.array_equal(view.fusion.context_matrix[mask], full[mask])
    assert not view.fusion.context_matrix[~mask].any()
    old = FusionIndex.build(packets, view.descriptors_by_packet, cfg.fusion, packet_matrix=view.packet_matrix,
                            context_matrix=full)
    assert np.array_equal(old.context_rows, view.fusion.context_rows)
    for q in _LONG_QUESTIONS:
        qvec = l2_normalize(emb.inner.embed([q]))[0]
        np.testing.assert_array_equal(fused_scores(view.fusion, q, qvec, cfg.fusion).total,
                                      fused_scores(old, q, qvec, cfg.fusion).total)
    # An append that makes the last turn's context document too long (it now quotes a long
    # reply) gives the view a fresh load gives, with no vector stored for the unread document.
    mem.add("tove", [{"time": "2024-02-15 07:45", "id": "g3", "turns": [
        {"speaker": "assistant", "text": _LONG_REPLY.replace("allotment", "bean rows"), "id": "g3b"}]}])
    grown = mem.view("tove")
    fresh = Memory(store, cfg, embedder=CountingEmbedder()).view("tove")
    np.testing.assert_array_equal(grown.fusion.context_matrix, fresh.fusion.context_matrix)
    np.testing.assert_array_equal(grown.fusion.context_rows, fresh.fusion.context_rows)
    assert not grown.fusion.context_rows[-2] and not grown.fusion.context_matrix[-2].any()
    for q in _LONG_QUESTIONS:
        assert mem.compile("tove", q).packet_ids == Memory(store, cfg, embedder=CountingEmbedder()).compile(
            "tove", q).packet_ids
    store.close()


def test_a_long_turns_plain_vector_is_its_zp_vector_and_is_not_embedded_twice(tmp_path):
    """The learned ranker's plain-turn vectors (raw_cos): a turn of at most context_window_words
    words has its plain text embedded; a longer one reads the same first window of its text as
    its z(p) does, so it takes z(p)'s row and nothing more is embedded or stored for it, in a
    build, an append in place and a fresh load alike."""
    from memcompile_local.build.stages import raw_document_keys, raw_model_id, unread_key
    from memcompile_local.fused.documents import plain_turn_text

    cfg, store, emb, mem, view, packets = _long_chat_memory(
        tmp_path, context_window_words=40, ranker_model=str(PLAIN_TURN_MODEL))
    short = np.asarray([len(plain_turn_text(p).split()) <= 40 for p in packets])
    assert 0 < short.sum() < len(short)  # the long replies are longer
    assert [plain_turn_text(p) in emb.texts for p in packets] == short.tolist()
    keys, _ = raw_document_keys(packets, 40)
    assert set(store.embeddings("tove", raw_model_id(emb), keys)) == {k for k, s in zip(keys, short) if s}
    assert [k for k, s in zip(keys, short) if not s] == [unread_key(p.packet_id) for p, s in zip(packets, short)
                                                         if not s]
    raw = view.fusion.raw_matrix
    want = np.asarray(CountingEmbedder().embed([plain_turn_text(p) for p in packets]), dtype=np.float32)
    assert np.array_equal(raw[short], want[short])
    assert np.array_equal(raw[~short], view.packet_matrix[~short])
    mem.add("tove", [{"time": "2024-02-15 07:45", "id": "g3", "turns": [
        {"speaker": "assistant", "text": _LONG_REPLY.replace("allotment", "bean rows"), "id": "g3b"},
        {"speaker": "Tove", "text": "Lovely, thank you.", "id": "g3c"}]}])
    grown = mem.view("tove")
    fresh = Memory(store, cfg, embedder=CountingEmbedder()).view("tove")
    np.testing.assert_array_equal(grown.fusion.raw_matrix, fresh.fusion.raw_matrix)
    np.testing.assert_array_equal(grown.fusion.raw_matrix[-2], grown.packet_matrix[-2])  # the long reply
    assert not np.array_equal(grown.fusion.raw_matrix[-1], grown.packet_matrix[-1])  # the short thanks
    store.close()


def test_a_turn_with_no_text_has_a_zero_plain_vector_built_or_appended(tmp_path):
    from memcompile_local.build.stages import raw_document_keys, unread_key

    cfg = apply_preset("model-free", PipelineConfig()).replace(fusion={
        "ranker": "learned", "ranker_model": str(PLAIN_TURN_MODEL)})
    store = MemoryStore(tmp_path / "m.sqlite")
    emb = CountingEmbedder()
    mem = Memory(store, cfg, embedder=emb)
    mem.add("a", [{"time": "2024-05-01 09:30", "turns": [{"speaker": "Ines", "text": "I like green tea."},
                                                         {"speaker": "Bo", "text": ""}]}])
    assert mem.compile("a", "What does Ines like?").packet_ids[0] == "S1:1"
    assert "" not in emb.texts
    keys, _ = raw_document_keys(store.packets("a"))
    assert keys[1] == unread_key("S1:2")
    mem.add("a", [{"time": "2024-05-02 10:00", "turns": [{"speaker": "Ines", "text": ""}]}])  # in place
    grown = mem.view("a")
    assert not grown.fusion.raw_matrix[[1, 2]].any() and grown.fusion.raw_matrix[0].any()
    fresh = Memory(store, cfg, embedder=CountingEmbedder()).view("a")
    np.testing.assert_array_equal(grown.fusion.raw_matrix, fresh.fusion.raw_matrix)
    store.close()
