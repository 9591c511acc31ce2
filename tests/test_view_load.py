"""View loads that reuse the previous load (memcompile_local/view_load.py).

A view loaded after appends, reusing the earlier load's rows and tokens, must select and score
exactly as a view built from scratch on the same store; a forget in between must never let the
old data through; the AddressIndex is built only when a path reads it, and then traces as
an index built up front does. An append applied in place (``ViewLoader.plan_append``,
``service/append.py``) gives the view and Cells a load from scratch and a plain build give;
another connection's write, a failure or a forget in between leave it to a load. Model-free
path, hash embedder: no model is loaded.
"""

from __future__ import annotations

import dataclasses
import random
import threading

import numpy as np
import pytest

from _data_paths import PLAIN_TURN_MODEL
from memcompile_local.fused import index as fused
from memcompile_local.views import load as view_load
from memcompile_local.build.stages import layout_id
from memcompile_local.adapters.scripted import HashEmbedder
from memcompile_local.address.index import AddressIndex
from memcompile_local.address.lexical import LexicalIndex
from memcompile_local.build.stages import extract_descriptors, place_cells
from memcompile_local.config import PipelineConfig
from memcompile_local.errors import ImmutablePacketError
from memcompile_local.pipeline.presets import apply_preset
from memcompile_local.fused.channels import fused_scores
from memcompile_local.fused.index import FusionIndex
from memcompile_local.llm.client import LLMClient, NoModelBackend
from memcompile_local.memory import Memory
from memcompile_local.address.lexical_growth import GrowingLexicalIndex
from memcompile_local.pipeline.compile import compile_context
from memcompile_local.views.record import MemoryView
from memcompile_local.store import MemoryStore
from memcompile_local.types import Conversation, Session, Turn
from memcompile_local.views.load import LazyAddressIndex
from memcompile_local.views.cache import estimate_view_bytes
from memcompile_local.fused.features import TurnTable

FIRST = [
    {"time": "2024-05-02 10:00", "id": "s1", "turns": [
        {"speaker": "Ines", "text": "We finally booked the ferry to Tallinn for June.", "id": "a1"},
        {"speaker": "Kofi", "text": "Nice! Are you taking the bikes along?", "id": "a2"},
        {"speaker": "Ines", "text": "Only mine, the tandem has a flat tyre.", "id": "a3"},
    ]},
    {"time": "2024-05-09 19:15", "id": "s2", "turns": [
        {"speaker": "Kofi", "text": "My cousin Ama started a bakery in Kumasi last month.", "id": "b1"},
        {"speaker": "Ines", "text": "What does she bake? Sourdough?", "id": "b2"},
        {"speaker": "Kofi", "text": "Mostly sugar bread and meat pies.", "id": "b3"},
    ]},
]
# Appends: one to the end of a session (the turn before it gets a new neighbour, so its
# lexical and context documents change), a run of messages by one speaker, a new session.
APPENDS = [
    [{"time": "2024-05-09 19:15", "id": "s2", "turns": [
        {"speaker": "Ines", "text": "I would fly to Kumasi just for those meat pies.", "id": "b4"}]}],
    [{"time": "2024-05-09 19:15", "id": "s2", "turns": [
        {"speaker": "Kofi", "text": "ama ships them frozen too", "id": "b5"},
        {"speaker": "Kofi", "text": "she told me in 2023 she wanted a second shop", "id": "b6"}]}],
    [{"time": "2024-06-20 08:00", "id": "s3", "turns": [
        {"speaker": "Ines", "text": "Back from Tallinn. The ferry was three hours late.", "id": "c1"},
        {"speaker": "Kofi", "text": "Did the bike survive the trip?", "id": "c2"}]}],
]
QUESTIONS = ["When did Ines take the ferry to Tallinn?", "What does Ama bake in Kumasi?",
             "Who has a flat tyre?", "What did kofi say about frozen pies?", "What happened in June 2024?",
             "What did Ama want in 2023?"]


def build_queue(store: MemoryStore) -> MemoryStore:
    """The store as its own build queue (``BuildLeases``), with the queue's tables created."""
    store.open_build_queue()
    return store


RANKER_V3 = PLAIN_TURN_MODEL  # a model that reads the plain-turn cosine, so views hold plain-turn vectors


def config(**fusion) -> PipelineConfig:
    cfg = apply_preset("model-free", PipelineConfig())
    return cfg.replace(fusion=fusion) if fusion else cfg


def memory(store: MemoryStore, cfg: PipelineConfig) -> Memory:
    return Memory(store, cfg, embedder=HashEmbedder(dim=64), client=LLMClient(NoModelBackend(), store))


def selection(mem: Memory, ns: str) -> list[tuple]:
    """Every question's selected ids, rendered text and fused scores of all packets."""
    view = mem.view(ns)
    out = []
    for q in QUESTIONS:
        ctx = mem.compile(ns, q)
        qvec = np.asarray(mem.embedder.embed_query([ctx.question]) if hasattr(mem.embedder, "embed_query")
                          else mem.embedder.embed([ctx.question]), dtype=np.float32)[0]
        total = fused_scores(view.fusion, q, qvec, mem.config.fusion).total
        out.append((ctx.packet_ids, ctx.text, total.tolist()))
    return out


def same_fusion(a: FusionIndex, b: FusionIndex) -> None:
    assert a.packet_ids == b.packet_ids and a.speakers == b.speakers and a.participants == b.participants
    assert a.expansion_terms == b.expansion_terms and a.tolerant_names == b.tolerant_names
    assert np.array_equal(a.dated, b.dated)
    assert set(a.period_rows) == set(b.period_rows)
    for k in a.period_rows:
        assert np.array_equal(a.period_rows[k], b.period_rows[k])
    for m in ("packet_matrix", "context_matrix", "raw_matrix"):
        x, y = getattr(a, m), getattr(b, m)
        assert (x is None) == (y is None)
        if x is not None:
            assert x.dtype == y.dtype and np.array_equal(x, y)
    for q in QUESTIONS:
        terms = b.query_terms(q)
        assert np.array_equal(a.lexical.scores(terms), b.lexical.scores(terms))


@pytest.mark.parametrize("fusion", [{}, {"bursts": True, "tolerant_names": True},
                                    {"context_window_words": 0},
                                    {"ranker_model": str(RANKER_V3), "context_window_words": 14}])
def test_incremental_load_after_appends_equals_a_load_from_scratch(tmp_path, monkeypatch, fusion):
    store = MemoryStore(tmp_path / "m.sqlite")
    cfg = config(**fusion)
    live = memory(store, cfg)
    live.add("u", FIRST)
    selection(live, "u")
    stemmed: list[str] = []
    real_stem = fused.stem_terms
    # The fused index stems through fused.stem_terms; count what one view load stems.
    monkeypatch.setattr(fused, "stem_terms", lambda text: stemmed.append(text) or real_stem(text))
    for batch in APPENDS:
        before = live.view("u")
        live.add("u", batch, in_place=False)  # the reload path is what this test checks
        stemmed.clear()
        view = live.view("u")
        stemmed_by_load = len(stemmed)
        incremental = selection(live, "u")
        assert view is not before and len(view.packets) == len(before.packets) + len(batch[0]["turns"])
        # Only documents whose text changed were stemmed again: the new turns, their in-session
        # neighbours (and, with bursts, the rest of their burst), and new expansion words.
        assert stemmed_by_load <= 4 * len(batch[0]["turns"]) + 4 < len(view.packets) + 4
        scratch = memory(store, cfg)  # a new Memory remembers no earlier load
        assert not scratch.views.loader.remembered("u")
        assert selection(scratch, "u") == incremental
        same_fusion(view.fusion, FusionIndex.build(
            view.packets, view.descriptors_by_packet, cfg.fusion, packet_matrix=scratch.view("u").packet_matrix,
            context_matrix=scratch.view("u").fusion.context_matrix, raw_matrix=scratch.view("u").fusion.raw_matrix))
        same_fusion(view.fusion, scratch.view("u").fusion)
        assert np.array_equal(view.packet_matrix, scratch.view("u").packet_matrix)
    store.close()


def test_a_changed_neighbour_document_is_not_served_from_the_old_load(tmp_path):
    store = MemoryStore(tmp_path / "m.sqlite")
    live = memory(store, config())
    live.add("u", FIRST)
    old = live.view("u")
    live.add("u", APPENDS[0])  # b4 follows b3 in session s2: b3's documents now quote b4
    new = live.view("u")
    row = new.row_of["b3"]
    assert not np.array_equal(old.fusion.context_matrix[old.row_of["b3"]], new.fusion.context_matrix[row])
    scratch = memory(store, config()).view("u")
    assert np.array_equal(new.fusion.context_matrix, scratch.fusion.context_matrix)
    assert np.array_equal(old.fusion.context_matrix[old.row_of["a1"]], new.fusion.context_matrix[new.row_of["a1"]])
    store.close()


def test_a_forget_between_loads_is_never_served_from_the_old_view(tmp_path):
    path = tmp_path / "m.sqlite"
    store = MemoryStore(path)
    live = memory(store, config())
    live.add("u", FIRST)
    assert "Tallinn" in live.compile("u", "Where did the ferry go?").text
    # Another process forgets the user and writes a different memory under the same ids.
    other_store = MemoryStore(path)
    other = memory(other_store, config())
    other.forget("u")
    replaced = [{"time": "2024-05-02 10:00", "id": "s1", "turns": [
        {"speaker": "Omar", "text": "The ferry strike means I take the night bus to Porto.", "id": "a1"},
        {"speaker": "Yuki", "text": "The bus to Porto is slow but cheap.", "id": "a2"}]}]
    other.add("u", replaced)
    ctx = live.compile("u", "Where did the ferry go?")
    view = live.view("u")
    assert [p.packet_id for p in view.packets] == ["a1", "a2"]
    assert "Tallinn" not in ctx.text and "Porto" in ctx.text
    assert {p.speaker for p in view.packets} == {"Omar", "Yuki"}
    scratch = memory(store, config())
    assert selection(live, "u") == selection(scratch, "u")
    assert np.array_equal(view.packet_matrix, scratch.view("u").packet_matrix)
    # This process's own forget drops what it remembered of the namespace.
    live.forget("u")
    assert not live.views.loader.remembered("u")
    other_store.close()
    store.close()


def test_the_address_index_is_built_only_when_asked_and_traces_as_before(tmp_path, monkeypatch):
    store = MemoryStore(tmp_path / "m.sqlite")
    cfg = config()
    mem = memory(store, cfg)
    mem.add("u", FIRST)
    mem.add("u", APPENDS[0])
    builds: list[int] = []
    real_build = AddressIndex.build.__func__
    monkeypatch.setattr(view_load.AddressIndex, "build",
                        classmethod(lambda cls, *a, **k: builds.append(1) or real_build(cls, *a, **k)))
    q = QUESTIONS[1]
    plain = mem.compile("u", q)
    view = mem.view("u")
    assert isinstance(view.index, LazyAddressIndex) and not view.index.built and builds == []
    traced = mem.compile("u", q, address_trace=True)
    assert view.index.built and builds == [1] and mem.view("u") is view
    assert traced.packet_ids == plain.packet_ids and traced.address.ran and traced.pool
    # The same trace as a view whose AddressIndex was built up front from the same records.
    flat = cfg.placement.layout == "flat"
    eager = real_build(AddressIndex, view.packets, [d for p in view.packets for d in view.descriptors_by_packet.get(p.packet_id, ())],
                       [] if flat else store.cells("u", layout_id(mem.extractor().descriptor_set,
                                                                              cfg.placement)),
                       view.packet_matrix, layout=cfg.placement.layout, placement=cfg.placement,
                       routing=cfg.routing)
    ref = compile_context(q, dataclasses.replace(view, index=eager), cfg, embedder=mem.embedder, address_trace=True)
    assert traced.address.candidates == ref.address.candidates
    assert traced.pool == ref.pool and traced.dense == ref.dense and traced.text == ref.text
    mem.compile("u", QUESTIONS[0], address_trace=True)
    assert builds == [1]  # built once per view
    # The representative-claim view reads U_q, so it builds the index without a trace.
    rep = memory(store, apply_preset("view-representative", cfg))
    rep.compile("u", q)
    assert rep.view("u").index.built
    store.close()


def test_concurrent_first_reads_build_the_address_index_once():
    calls: list[int] = []
    gate = threading.Event()

    def make():
        gate.wait(5)
        calls.append(1)
        return object()

    lazy = LazyAddressIndex(make)  # type: ignore[arg-type]
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(lazy.get())) for _ in range(8)]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join()
    assert calls == [1] and len(got) == 8 and all(g is got[0] for g in got)
    with pytest.raises(AttributeError):
        lazy._missing  # noqa: B018  private names are never forwarded to the index


def test_a_load_that_only_links_shared_vectors_is_keyed_on_the_current_generation(tmp_path, monkeypatch):
    """A namespace with the same turns as another gets its vectors linked, not embedded: that
    is a write too, and the view must be keyed after it (else every search reloads it)."""
    store = MemoryStore(tmp_path / "m.sqlite")
    cfg = config()
    mem = memory(store, cfg)
    mem.add("a", FIRST)
    mem.view("a")
    mem.add("b", FIRST)
    # Built as the service builds an append: descriptors and Cells, embeddings left to the view.
    extractor = mem.extractor()
    extract_descriptors(store, "b", extractor)
    place_cells(store, "b", extractor.descriptor_set, cfg.placement)
    loads: list[str] = []
    real = mem.views.loader.load
    monkeypatch.setattr(mem.views.loader, "load", lambda *a: loads.append(a[-1]) or real(*a))
    first = mem.view("b")
    assert mem.view("b") is first and loads == ["b"]
    assert selection(mem, "b") == selection(memory(store, cfg), "b")
    store.close()


# ----------------------------------------------------------------------------- appends in place


def as_conversation(store: MemoryStore, ns: str, batch: list[dict]) -> Conversation:
    """A plain-format batch as the service hands it to the store (session ids keep their index)."""
    index = {p.session_id: p.session_index for p in store.packets(ns)}
    sessions = []
    for s in batch:
        i = index.setdefault(s["id"], max(index.values(), default=0) + 1)
        sessions.append(Session(index=i, session_id=s["id"], time=s["time"],
                                turns=tuple(Turn(packet_id=t["id"], speaker=t["speaker"], text=t["text"])
                                            for t in s["turns"])))
    return Conversation(namespace=ns, sessions=tuple(sessions))


def appender(mem: Memory) -> InPlaceAppend:
    queue = build_queue(mem.store)
    return mem.in_place_appender(lambda ns: not queue.held_by_other(ns, "test-owner"))


def same_view(live: MemoryView, scratch: MemoryView, cfg: PipelineConfig) -> None:
    """``live`` (extended in place) holds what a load from scratch holds, field by field; BM25
    scores are equal up to float64 rounding (a grown index sums in another order)."""
    assert live.packets == scratch.packets and dict(live.packets_by_id) == dict(scratch.packets_by_id)
    assert dict(live.descriptors_by_packet) == dict(scratch.descriptors_by_packet)
    assert dict(live.row_of) == dict(scratch.row_of)
    assert live.packet_matrix.dtype == scratch.packet_matrix.dtype
    assert np.array_equal(live.packet_matrix, scratch.packet_matrix)
    a, b = live.fusion, scratch.fusion
    assert a.packet_ids == b.packet_ids and a.speakers == b.speakers and a.participants == b.participants
    assert a.expansion_terms == b.expansion_terms and a.tolerant_names == b.tolerant_names
    assert np.array_equal(a.dated, b.dated) and a.dated.dtype == b.dated.dtype
    assert set(a.period_rows) == set(b.period_rows)
    for k in a.period_rows:
        assert np.array_equal(a.period_rows[k], b.period_rows[k]) and a.period_rows[k].dtype == np.int64
    # grown from the base's (the run count, the row map), not recounted
    assert a.burst_share == b.burst_share and a.row_of == b.row_of
    assert (a.context_matrix is None) == (b.context_matrix is None)
    if a.context_matrix is not None:
        assert np.array_equal(a.context_matrix, b.context_matrix)
    # the context gate, the answer-type channel's turns, the plain turn vectors
    for m in ("context_rows", "entity_rows", "raw_matrix"):
        x, y = getattr(a, m), getattr(b, m)
        assert (x is None) == (y is None) and (x is None or np.array_equal(x, y))
    # Plain turn vectors are there exactly when the ranker's model reads them.
    assert (a.raw_matrix is not None) == (cfg.fusion.ranker_model == str(RANKER_V3))
    if cfg.fusion.answer_type_weight:
        assert a.entity_rows is not None and a.entity_rows.any()  # these turns name places
    assert a.lexical.n_docs == b.lexical.n_docs
    for q in [*QUESTIONS, "ferry bike pies Kumasi Tallinn shop frozen", "sugar sugar bread"]:
        terms = b.query_terms(q)
        assert np.allclose(a.lexical.scores(terms), b.lexical.scores(terms), rtol=1e-12, atol=0)
    # The Cell index, built on first use, is made of the same records.
    assert live.index.cells == scratch.index.cells


def same_selection(x: list[tuple], y: list[tuple]) -> None:
    assert [(ids, text) for ids, text, _ in x] == [(ids, text) for ids, text, _ in y]
    for (_, _, s), (_, _, t) in zip(x, y):
        assert np.allclose(s, t, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("fusion", [{}, {"bursts": True, "tolerant_names": True},
                                    {"context_window_words": 0},
                                    {"dense_document": "turn", "dense_context": "composed"},
                                    {"dense_document": "turn", "dense_context": "embedded"},
                                    {"context_window_words": 14},
                                    {"answer_type_weight": 0.75},
                                    # plain-turn vectors; turns past 14 words take their z(p) row
                                    {"ranker_model": str(RANKER_V3), "context_window_words": 14},
                                    {"ranker": "learned"}])  # its turn table grown, not made again
def test_an_append_in_place_equals_a_load_from_scratch(tmp_path, monkeypatch, fusion):
    store = MemoryStore(tmp_path / "m.sqlite")
    cfg = config(**fusion)
    live = memory(store, cfg)
    live.add("u", FIRST)
    live.view("u")
    app = appender(live)
    # The same turns built the plain way (Memory.build, build.place_cells) in another store:
    # the Cells an append in place places must be the ones a build places.
    plain_store = MemoryStore(tmp_path / "plain.sqlite")
    plain = memory(plain_store, cfg)
    plain.add("u", FIRST)
    plain.build("u")
    lid = layout_id(live.extractor().descriptor_set, cfg.placement)
    loads: list[str] = []
    real = live.views.loader.load
    monkeypatch.setattr(live.views.loader, "load", lambda *a: loads.append(a[-1]) or real(*a))
    for n, batch in enumerate(APPENDS + [[{"time": "2024-06-20 08:00", "id": "s3", "turns": [
            {"speaker": "Lena", "text": "Hi both, Lena here: I joined the Tallinn trip in 2024-06.", "id": "c3"}]}]],
            start=1):
        before = live.view("u")
        result = app.add("u", as_conversation(store, "u", batch))
        assert result is not None and result.added == len(batch[0]["turns"]) and app.in_place == n
        plain.store.ingest(as_conversation(plain_store, "u", batch))
        plain.build("u")
        assert store.cells("u", lid) == plain_store.cells("u", lid) and store.cells("u", lid)
        held = live.cached_view("u", generation=store.generation("u"))
        assert held is not None and held[0] is not before  # current without a load
        view = live.view("u")
        assert view is held[0] and loads == []
        # the cache's estimate of the grown view, grown from the base's, is the whole count
        assert live.views.held_bytes == estimate_view_bytes(view) > 0
        scratch = memory(store, cfg)
        assert not scratch.views.loader.remembered("u")
        same_view(view, scratch.view("u"), cfg)
        if cfg.fusion.ranker == "learned" and n > 1:  # the questions after the last append made its table
            grown = view.fusion.__dict__.get("_ranker_turn_table")
            assert grown is not None and "_ranker_turn_table" in before.fusion.__dict__
            fresh = TurnTable.of(view.packets, cfg.fusion)
            for name in ("prev_row", "next_row", "log_words", "is_assistant", "has_caption", "session_position",
                         "turn_position"):
                assert np.array_equal(getattr(grown, name), getattr(fresh, name)), name
        same_selection(selection(live, "u"), selection(scratch, "u"))
    # An adopted view reads its Cells only when its AddressIndex is first used; by then the
    # store may have moved on, and the Cells are placed from the view's own descriptors.
    app.add("u", as_conversation(store, "u", [{"time": "2024-06-20 08:00", "id": "s3", "turns": [
        {"speaker": "Kofi", "text": "Lena, bring the tandem next time.", "id": "c4"}]}]))
    adopted = live.view("u")
    cells_then = store.cells("u", lid)
    assert not adopted.index.built
    # The next load from the store (after a plain add) reuses what the appends remembered.
    live.add("u", [{"time": "2024-07-01 09:00", "id": "s4", "turns": [
        {"speaker": "Kofi", "text": "Ama opened the second shop in Accra.", "id": "d1"}]}], in_place=False)
    same_selection(selection(live, "u"), selection(memory(store, cfg), "u"))
    assert loads == ["u"]
    assert store.cells("u", lid) != cells_then and list(adopted.index.cells) == list(cells_then)
    plain_store.close()
    store.close()


def test_an_append_in_place_counts_the_words_of_its_new_turns_only(tmp_path, monkeypatch):
    """The plain-turn rows and the context gate of the old turns are taken from the view before
    the append (only the last old turn can gain a neighbour), so an append's word counting does
    not grow with the history; the view still equals a load from scratch."""
    import memcompile_local.fused.index as fused_index

    store = MemoryStore(tmp_path / "m.sqlite")
    cfg = config(ranker_model=str(RANKER_V3), context_window_words=14)
    live = memory(store, cfg)
    live.add("u", FIRST)
    n_old = len(live.view("u").packets)
    counted: list[int] = []
    for name in ("plain_turn_fits", "context_fits"):
        real = getattr(fused_index, name)
        monkeypatch.setattr(fused_index, name, lambda packets, window, real=real: counted.append(len(packets))
                            or real(packets, window))
    app = appender(live)
    batch = APPENDS[0]
    assert app.add("u", as_conversation(store, "u", batch)) is not None and app.in_place == 1
    new = len(batch[0]["turns"])
    assert counted and max(counted) <= new + 2 < n_old
    monkeypatch.undo()
    same_view(live.view("u"), memory(store, cfg).view("u"), cfg)
    store.close()


def test_an_append_after_another_connection_wrote_is_loaded_from_the_store(tmp_path, monkeypatch):
    """A write by another connection (another server process) after the view was loaded, even
    between the append's plan and its transaction, or a build lease another process holds,
    must leave the append to the plain path: the next search loads the view from the store."""
    path = tmp_path / "m.sqlite"
    store = MemoryStore(path)
    cfg = config()
    live = memory(store, cfg)
    live.add("u", FIRST)
    live.view("u")
    other_store = MemoryStore(path)
    other = memory(other_store, cfg)
    other.add("u", APPENDS[0])  # before the append: the held view is no longer current
    app = appender(live)
    assert app.add("u", as_conversation(store, "u", APPENDS[1])) is None
    assert app.in_place == 0 and app.declined == 1
    assert store.packet_count("u") == 7  # nothing of the declined append was stored
    live.add("u", APPENDS[1])
    assert {"b4", "b5", "b6"} <= set(live.view("u").packets_by_id)
    # Between the plan (made from the held view) and the transaction.
    real_plan = live.views.loader.plan_append

    def plan_then_other_writes(*a, **k):
        plan = real_plan(*a, **k)
        other.add("u", [{"time": "2024-07-01 09:00", "id": "s4", "turns": [
            {"speaker": "Kofi", "text": "Ama opened the second shop in Accra.", "id": "d1"}]}])
        return plan

    monkeypatch.setattr(live.views.loader, "plan_append", plan_then_other_writes)
    assert app.add("u", as_conversation(store, "u", APPENDS[2])) is None and app.declined == 2
    monkeypatch.undo()
    assert store.get_packet("u", "c1") is None
    assert live.cached_view("u", generation=store.generation("u")) is None
    live.add("u", APPENDS[2])
    view = live.view("u")
    assert {"c1", "c2", "d1"} <= set(view.packets_by_id)
    same_view(view, memory(store, cfg).view("u"), cfg)
    # Another process is building the namespace (holds its lease): declined, nothing stored.
    assert build_queue(other_store).acquire("u", "other-process", lease_s=60)
    batch = [{"time": "2024-07-01 09:00", "id": "s4", "turns": [{"speaker": "Ines", "text": "Congrats!", "id": "d2"}]}]
    assert app.add("u", as_conversation(store, "u", batch)) is None and app.declined == 3
    assert store.get_packet("u", "d2") is None and live.cached_view("u", generation=store.generation("u"))
    build_queue(other_store).release("u", "other-process")
    assert app.add("u", as_conversation(store, "u", batch)) is not None and app.in_place == 1
    same_view(live.view("u"), memory(store, cfg).view("u"), cfg)
    other_store.close()
    store.close()


def test_a_failed_append_leaves_the_old_view_serving(tmp_path, monkeypatch):
    store = MemoryStore(tmp_path / "m.sqlite")
    cfg = config()
    live = memory(store, cfg)
    live.add("u", FIRST)
    old = live.view("u")
    app = appender(live)
    # A changed text under a stored id: nothing is written, the held view stays current.
    changed = [{"time": "2024-05-09 19:15", "id": "s2", "turns": [
        {"speaker": "Kofi", "text": "Mostly coconut bread.", "id": "b3"}]}]
    assert app.add("u", as_conversation(store, "u", changed)) is None
    with pytest.raises(ImmutablePacketError):
        store.ingest(as_conversation(store, "u", changed))
    assert live.cached_view("u", generation=store.generation("u"))[0] is old
    # Planning fails before anything is written: nothing stored, the old view still serves.
    monkeypatch.setattr(live.views.loader, "plan_append", lambda *a, **k: 1 / 0)
    assert app.add("u", as_conversation(store, "u", APPENDS[0])) is None
    assert store.packet_count("u") == 6 and live.cached_view("u", generation=store.generation("u"))[0] is old
    monkeypatch.undo()
    # A write fails inside the append's transaction (after the turns went in): all of it is
    # rolled back, so the turn is not stored and the old view is still current.
    monkeypatch.setattr(store, "save_embeddings", lambda *a, **k: (_ for _ in ()).throw(OSError("disk full")))
    assert app.add("u", as_conversation(store, "u", APPENDS[0])) is None and app.declined == 1
    monkeypatch.undo()
    assert store.packet_count("u") == 6 and store.get_packet("u", "b4") is None
    assert len(store.descriptors("u", live.extractor().descriptor_set)) == len(
        [d for ds in old.descriptors_by_packet.values() for d in ds])
    assert live.cached_view("u", generation=store.generation("u"))[0] is old
    assert live.compile("u", QUESTIONS[1]).packet_ids == memory(store, cfg).compile("u", QUESTIONS[1]).packet_ids
    # The same append then goes through in place.
    assert app.add("u", as_conversation(store, "u", APPENDS[0])).added == 1 and app.in_place == 1
    same_view(live.view("u"), memory(store, cfg).view("u"), cfg)
    store.close()


def test_an_append_in_place_adopts_nothing_after_the_namespace_was_dropped(tmp_path, monkeypatch):
    """A forget (or a deleted turn) between the append's commit and its adoption drops what
    the loader remembered: the planned view, which may quote erased text, is not kept."""
    store = MemoryStore(tmp_path / "m.sqlite")
    live = memory(store, config())
    live.add("u", FIRST)
    live.view("u")
    real = live.views.loader.adopt
    monkeypatch.setattr(live.views.loader, "adopt", lambda *a, **k: live.views.loader.drop("u") or real(*a, **k))
    app = appender(live)
    assert app.add("u", as_conversation(store, "u", APPENDS[0])).added == 1
    assert app.in_place == 0 and not live.views.loader.remembered("u")
    assert live.cached_view("u") is None or live.cached_view("u")[1] != store.generation("u")
    store.close()


def test_a_bm25_index_grown_from_nothing_scores_as_one_built_afresh():
    """From an empty corpus, then documents replaced by nothing and by new terms: the flat
    postings are removed and inserted where their terms are."""
    steps = [({}, [["kiln", "clay", "kiln"], [], ["glaze", "clay"], ["ferry"]]),
             ({0: []}, [["kiln", "ferry", "ferry"]]),
             ({1: ["glaze", "tram"], 3: []}, [])]
    grown, corpus = GrowingLexicalIndex.from_tokens([]), []
    for replaced, appended in steps:
        grown = grown.grown(replaced, appended)
        corpus = [replaced.get(i, t) for i, t in enumerate(corpus)] + appended
        fresh = LexicalIndex(corpus)
        for query in (["kiln"], ["clay", "glaze"], ["ferry", "tram", "absent"], ["tram"]):
            assert np.allclose(grown.scores(query), fresh.scores(query), rtol=1e-12, atol=0)
    assert grown.scores(["tram"])[1] > 0 and grown.scores(["ferry"])[3] == 0


def test_a_grown_bm25_index_scores_as_one_built_afresh():
    """GrowingLexicalIndex after 100 appends and replacements (terms that vanish, new terms,
    empty documents) against LexicalIndex over the final corpus: equal scores up to rounding,
    the same top-k."""
    rng = random.Random(1)
    words = [f"w{i}" for i in range(300)]
    docs = [[rng.choice(words[: rng.randint(5, 300)]) for _ in range(rng.randint(0, 40))] for _ in range(700)]
    grown = GrowingLexicalIndex.from_tokens(docs[:600])
    corpus = list(docs[:600])
    for step in range(100):
        replaced = {}
        if step % 3 == 0:
            replaced[rng.randrange(len(corpus))] = docs[rng.randrange(700)] + [f"new{step}"]
        if step % 7 == 0:
            replaced[rng.randrange(len(corpus))] = []
        grown = grown.grown(replaced, [docs[600 + step]])
        for i, tokens in replaced.items():
            corpus[i] = tokens
        corpus.append(docs[600 + step])
    fresh = LexicalIndex(corpus)
    assert grown.n_docs == fresh.n_docs == 700
    for _ in range(200):
        query = [rng.choice(words + ["new3", "new6", "absent"]) for _ in range(rng.randint(1, 8))]
        assert np.allclose(grown.scores(query), fresh.scores(query), rtol=1e-12, atol=0)
        assert [i for i, _ in grown.top_k(query, 20)] == [i for i, _ in fresh.top_k(query, 20)]
