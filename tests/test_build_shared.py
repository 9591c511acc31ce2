"""Work shared between namespaces that hold the same sessions (LongMemEval haystacks): the fused
index's per-text results of one namespace's load serve the first load of another, exactly."""

from __future__ import annotations

from memcompile_local.fused import index as fused_module
from memcompile_local.address import dense as dense_module
from memcompile_local.config import PipelineConfig
from memcompile_local.pipeline.presets import apply_preset
from memcompile_local.memory import Memory
from memcompile_local.store import MemoryStore

from test_embedding_cache import SESSION_A, SESSION_B, CountingEmbedder

SESSION_C = {"time": "2024-03-09 12:00", "turns": [
    {"speaker": "Ben", "text": "The ferry to the island leaves at noon on Saturdays."},
    {"speaker": "Ana", "text": "Then we take the noon ferry and picnic on the beach."},
]}


def _counting_stems(monkeypatch) -> list[str]:
    texts: list[str] = []
    original = fused_module.stem_terms

    def stem(text):
        texts.append(text)
        return original(text)

    monkeypatch.setattr(fused_module, "stem_terms", stem)
    return texts


def _mem(store: MemoryStore) -> Memory:
    return Memory(store, apply_preset("model-free", PipelineConfig()), embedder=CountingEmbedder())


def test_a_second_namespace_with_the_same_sessions_stems_nothing_and_searches_as_a_scratch_load(
        tmp_path, monkeypatch):
    stems = _counting_stems(monkeypatch)
    store = MemoryStore(tmp_path / "m.sqlite")
    mem = _mem(store)
    mem.add("q1", [SESSION_A, SESSION_B])
    mem.view("q1")
    assert stems  # the first namespace stemmed its documents
    mem.add("q2", [SESSION_A, SESSION_B])
    stems.clear()
    mem.view("q2")
    assert stems == []  # every lexical document, period and expansion term came from q1's load
    # A haystack with one session of its own stems only what is new to it.
    mem.add("q3", [SESSION_A, SESSION_C])
    stems.clear()
    mem.view("q3")
    assert stems and all("ferry" in t or "noon" in t or "beach" in t or "island" in t or "Saturdays" in t
                         or "picnic" in t for t in stems), stems
    # Identical results to loads that shared nothing.
    fresh = _mem(store)
    for ns in ("q2", "q3"):
        for question in ("Which day is the pottery class?", "When does the ferry leave?", "What is the cat called?"):
            got = [(h.packet.packet_id, round(h.score, 9)) for h in mem.search(ns, question, k=4)]
            want = [(h.packet.packet_id, round(h.score, 9)) for h in fresh.search(ns, question, k=4)]
            assert got == want, (ns, question)
    store.close()


def test_documents_are_computed_once_per_content(tmp_path, monkeypatch):
    calls = []
    original = dense_module.packet_document

    def counted(packet, claims=()):
        calls.append(packet.content)
        return original(packet, claims)

    monkeypatch.setattr(dense_module, "packet_document", counted)
    dense_module.forget_documents()
    store = MemoryStore(tmp_path / "m.sqlite")
    mem = _mem(store)
    mem.add("q1", [SESSION_A, SESSION_B])
    mem.view("q1")  # the build and the view load both need every z(p)
    assert sorted(calls) == sorted(t["text"] for s in (SESSION_A, SESSION_B) for t in s["turns"])
    mem.add("q2", [SESSION_A, SESSION_B])
    mem.view("q2")
    assert len(calls) == 5  # the second namespace's documents were all known
    store.close()


def test_forget_drops_the_shared_results_with_the_erased_text(tmp_path, monkeypatch):
    stems = _counting_stems(monkeypatch)
    store = MemoryStore(tmp_path / "m.sqlite")
    mem = _mem(store)
    mem.add("q1", [SESSION_A])
    mem.view("q1")
    assert dense_module._document.cache_info().currsize > 0
    mem.forget("q1")
    assert dense_module._document.cache_info().currsize == 0  # the memoized documents held q1's text
    mem.add("q2", [SESSION_A])
    stems.clear()
    mem.view("q2")
    assert stems  # nothing of the forgotten namespace's texts was kept to reuse
    store.close()
