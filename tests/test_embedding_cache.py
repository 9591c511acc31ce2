"""Content-addressed embeddings: one vector per (embedder identity, text), shared by namespaces
and document kinds; backends kept apart; incremental adds re-embed only changed documents; LLM
extraction requests carry nothing namespace-specific."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from memcompile_local.adapters.scripted import HashEmbedder, ScriptedBackend
from memcompile_local.address.extract_llm import LLMExtractor
from memcompile_local.address import extract_memo
from memcompile_local.address.extract_memo import MemoizedExtractor
from memcompile_local.address.extract_rule import RuleExtractor
from memcompile_local.build.stages import (
    context_document_keys,
    embedding_model_id,
    load_packet_matrix,
    packet_document_keys,
    text_address,
)
from memcompile_local.config import PipelineConfig
from memcompile_local.pipeline.presets import apply_preset
from memcompile_local.llm.client import LLMClient
from memcompile_local.memory import Memory
from memcompile_local.store import SCHEMA_VERSION, MemoryStore, check_store
from memcompile_local.types import SourcePacket, content_sha256

SESSION_A = {"time": "2024-03-04 09:00", "turns": [
    {"speaker": "Ana", "text": "My sister Lena adopted a grey cat called Pepper."},
    {"speaker": "Ben", "text": "Pepper is a lovely name for a cat."},
    {"speaker": "Ana", "text": "She sends me photos of Pepper every morning."},
]}
SESSION_B = {"time": "2024-03-05 18:30", "turns": [
    {"speaker": "Ana", "text": "I start my pottery class in Leeds next week."},
    {"speaker": "Ben", "text": "Which day is the pottery class?"},
]}


class CountingEmbedder:
    """The hash embedder, counting the texts it is asked to embed; ``tag`` changes its identity."""

    def __init__(self, tag: str = "", dim: int = 64) -> None:
        self.inner = HashEmbedder(dim=dim)
        self.tag = tag
        self.texts: list[str] = []
        self.calls = 0

    @property
    def dim(self) -> int:
        return self.inner.dim

    def identity(self) -> dict:
        ident = self.inner.identity()
        if self.tag:
            ident["backend"] = self.tag
        return ident

    def embed(self, texts):
        self.calls += 1
        self.texts.extend(texts)
        return self.inner.embed(texts)


def model_free(store: MemoryStore, embedder) -> Memory:
    return Memory(store, apply_preset("model-free", PipelineConfig()), embedder=embedder)


def vector_rows(store: MemoryStore) -> int:
    return sqlite3.connect(store.path).execute("SELECT COUNT(*) FROM vectors").fetchone()[0]


def test_a_second_namespace_with_the_same_sessions_embeds_nothing(tmp_path):
    store = MemoryStore(tmp_path / "m.sqlite")
    emb = CountingEmbedder()
    mem = model_free(store, emb)
    assert mem.uses_context_embeddings()
    mem.add("alice", [SESSION_A, SESSION_B])
    mem.view("alice")
    first = list(emb.texts)
    # Every distinct text once: packet documents and context documents, duplicates merged.
    keys, docs = packet_document_keys(store, "alice", mem.extractor().descriptor_set)
    _, ctx = context_document_keys(store, "alice")
    assert sorted(first) == sorted(set(docs) | set(ctx))
    rows = vector_rows(store)
    assert rows == len(set(docs) | set(ctx))

    mem.add("bob", [SESSION_A, SESSION_B])
    view = mem.view("bob")
    assert emb.texts == first  # nothing new embedded
    assert vector_rows(store) == rows  # and nothing stored twice
    np.testing.assert_array_equal(
        load_packet_matrix(store, "bob", mem.extractor().descriptor_set, emb),
        load_packet_matrix(store, "alice", mem.extractor().descriptor_set, emb))
    assert view is not None

    # Rebuilding either namespace embeds nothing either.
    mem.build("alice")
    assert emb.texts == first

    # Forgetting one namespace keeps the shared vectors; forgetting the other removes them.
    assert store.forget("alice")["vectors"] == 0
    assert vector_rows(store) == rows
    assert store.forget("bob")["vectors"] == rows
    assert vector_rows(store) == 0
    store.close()


def test_a_haystack_repeating_sessions_embeds_only_its_new_session(tmp_path):
    store = MemoryStore(tmp_path / "m.sqlite")
    emb = CountingEmbedder()
    mem = model_free(store, emb)
    mem.add("q1", [SESSION_A])
    mem.view("q1")
    before = len(emb.texts)
    mem.add("q2", [SESSION_A, SESSION_B])
    mem.view("q2")
    new = emb.texts[before:]
    # Session A's packet documents are shared; what is new mentions session B's turns, or is the
    # context document of A's last turn, which now has a neighbour... only within its session, so
    # nothing of A changed.
    assert new and all("pottery" in t or "Leeds" in t or "class" in t for t in new)
    store.close()


def test_backends_with_different_identities_never_share_vectors(tmp_path):
    store = MemoryStore(tmp_path / "m.sqlite")
    torch_like, onnx_like = CountingEmbedder("torch"), CountingEmbedder("onnx-int8")
    assert embedding_model_id(torch_like) != embedding_model_id(onnx_like)
    m1 = model_free(store, torch_like)
    m1.add("alice", [SESSION_A])
    m1.view("alice")
    m2 = model_free(store, onnx_like)
    m2.view("alice")
    # Switching the backend re-embeds every document under its own identity.
    assert sorted(onnx_like.texts) == sorted(torch_like.texts)
    spaces = {r[0] for r in sqlite3.connect(store.path).execute("SELECT DISTINCT space FROM vectors")}
    assert spaces == {embedding_model_id(torch_like), embedding_model_id(onnx_like)}
    store.close()


def test_appending_a_turn_re_embeds_only_the_changed_neighbour_documents(tmp_path):
    store = MemoryStore(tmp_path / "m.sqlite")
    emb = CountingEmbedder()
    mem = model_free(store, emb)
    mem.add("alice", [SESSION_A, SESSION_B])
    mem.view("alice")
    dset = mem.extractor().descriptor_set
    _, ctx_before = context_document_keys(store, "alice")
    emb.texts.clear()
    mem.add("alice", [{"time": SESSION_B["time"], "turns": [
        {"speaker": "Ana", "text": "Thursday evening, after work."}]}])
    mem.view("alice")
    keys, docs = packet_document_keys(store, "alice", dset)
    _, ctx_after = context_document_keys(store, "alice")
    changed_ctx = [d for d in ctx_after if d not in ctx_before]
    new_docs = [docs[-1]]  # the appended turn's packet document
    # The new turn's packet and context documents, and the context document of the turn it
    # follows (which now quotes it); nothing else.
    assert sorted(emb.texts) == sorted(set(new_docs) | set(changed_ctx))
    assert len(changed_ctx) == 2 and len(emb.texts) == 3
    store.close()


def test_content_addressed_vectors_are_found_across_namespaces_by_text(tmp_path):
    store = MemoryStore(tmp_path / "m.sqlite")
    a = text_address("hello there")
    assert a == text_address("hello there") and a != text_address("hello there.")
    store.save_embeddings("n1", "m", ["k1"], np.ones((1, 4), np.float32), content=[a], space="sp")
    got = store.vectors_by_content("sp", [a, text_address("other")])
    assert list(got) == [a] and got[a].tolist() == [1.0] * 4
    assert store.vectors_by_content("other-space", [a]) == {}
    # A second namespace linking the same address shares the row.
    store.save_embeddings("n2", "m|context", ["x"], got[a][None, :], content=[a], space="sp")
    assert vector_rows(store) == 1
    assert store.embeddings("n2", "m|context", ["x"])["x"].tolist() == [1.0] * 4
    store.close()


def test_a_version_2_store_is_upgraded_and_its_embeddings_rebuilt(tmp_path):
    path = tmp_path / "old.sqlite"
    store = MemoryStore(path)
    emb = CountingEmbedder()
    mem = model_free(store, emb)
    mem.add("alice", [SESSION_A])
    mem.view("alice")
    n = len(emb.texts)
    store.close()
    # Make the file what version 2 wrote: per-namespace vectors in ``embeddings``, no ``vectors``.
    con = sqlite3.connect(path)
    con.executescript(
        "DROP TABLE embeddings; DROP TABLE vectors;"
        "CREATE TABLE embeddings (namespace TEXT NOT NULL, model_id TEXT NOT NULL, key TEXT NOT NULL,"
        " dim INTEGER NOT NULL, vector BLOB NOT NULL, PRIMARY KEY (namespace, model_id, key));"
        "INSERT INTO embeddings VALUES ('alice', 'old', 'S1:1|abc', 1, x'0000803f');"
        "PRAGMA user_version = 2;")
    con.close()
    with pytest.raises(Exception, match="must be upgraded"):
        MemoryStore(path, read_only=True)
    store = MemoryStore(path)
    assert store.stats()["schema_version"] == SCHEMA_VERSION == 5
    emb2 = CountingEmbedder()
    mem = model_free(store, emb2)
    mem.view("alice")
    assert len(emb2.texts) == n  # the dropped vectors were embedded again
    store.close()
    report = check_store(path)
    assert report.ok, report.lines()


def _turn(pid: str, ns: str, ordinal: int, text: str, session_id: str) -> SourcePacket:
    return SourcePacket(namespace=ns, packet_id=pid, ordinal=ordinal, session_index=1,
                        session_id=session_id, session_time="2024-03-04 09:00", speaker="Ana",
                        content=text, image_caption=None, sha256=content_sha256(text))


def test_extraction_requests_carry_no_namespace_or_ids(tmp_path):
    """The same turn after the same previous turn at the same session time is one cached request,
    whatever the namespace, packet ids and session ids."""
    store = MemoryStore(tmp_path / "m.sqlite")
    backend = ScriptedBackend({("*", ""): '{"claims": []}'})
    client = LLMClient(backend, store)
    ext = LLMExtractor(client, combined=True)
    prev1 = _turn("S1:1", "tenant-one", 0, "We moved to Porto in May.", "sess-a")
    cur1 = _turn("S1:2", "tenant-one", 1, "The flat has a view of the river.", "sess-a")
    prev2 = _turn("D7:4", "other-tenant", 10, "We moved to Porto in May.", "haystack-91")
    cur2 = _turn("D7:5", "other-tenant", 11, "The flat has a view of the river.", "haystack-91")
    r1, r2 = ext.combined_request(cur1, prev1), ext.combined_request(cur2, prev2)
    assert r1.identity() == r2.identity()
    text = " ".join(m.content for m in r1.messages)
    for specific in ("tenant-one", "S1:1", "S1:2", "sess-a"):
        assert specific not in text
    assert ext.fact_request(cur1, prev1).identity() == ext.fact_request(cur2, prev2).identity()
    claim = "The flat has a river view."
    assert ext.metadata_request(claim, cur1, prev1).identity() == ext.metadata_request(claim, cur2, prev2).identity()
    ext.extract([(cur1, prev1)])
    calls = backend.generate_calls
    ext.extract([(cur2, prev2)])
    assert backend.generate_calls == calls  # served from the cache
    store.close()


class CountingRule(RuleExtractor):
    """Counts the turns it extracts (the memo asks for templates, not ``extract``)."""

    def __init__(self):
        super().__init__()
        self.seen = 0

    def extract_with_template(self, packet, addressee):
        self.seen += 1
        return super().extract_with_template(packet, addressee)


def test_repeated_turns_are_rule_extracted_once_with_their_own_ids(tmp_path):
    store = MemoryStore(tmp_path / "m.sqlite")
    mem = model_free(store, None)
    mem.add("q1", [SESSION_A, SESSION_B])
    mem.add("q2", [SESSION_B, SESSION_A])  # same sessions, other order: ids and session indexes differ
    packets = {ns: store.packets(ns) for ns in ("q1", "q2")}
    inner = CountingRule()
    memo = MemoizedExtractor(inner)
    items = {ns: [(p, ps[i - 1] if i else None) for i, p in enumerate(ps)] for ns, ps in packets.items()}
    got1 = memo.extract(items["q1"])
    first = inner.seen
    got2 = memo.extract(items["q2"])
    # A turn's descriptors depend on the preceding turn only through its speaker (the addressee):
    # of q2's turns only session A's first, now after Ben instead of nobody, is extracted again.
    assert first == 5 and inner.seen - first == 1
    plain = RuleExtractor()
    assert got1 == plain.extract(items["q1"]) and got2 == plain.extract(items["q2"])
    assert {d.namespace for ds in got2 for d in ds} == {"q2"}
    assert all(d.descriptor_id.startswith("q2:") for ds in got2 for d in ds)
    store.close()


def test_forget_and_delete_turn_drop_the_erased_text_from_the_extraction_memo(tmp_path):
    # The memo keys on turn text; after a forget no key of this process may still hold it.
    def memo_texts() -> set[str]:
        with extract_memo._lock:
            return {key[1][1] for key in extract_memo._memo if key[1] is not None}

    store = MemoryStore(tmp_path / "m.sqlite")
    mem = model_free(store, CountingEmbedder())
    mem.add("ana", [SESSION_A])
    mem.view("ana")
    assert SESSION_A["turns"][0]["text"] in memo_texts()
    mem.forget("ana")
    assert not memo_texts() & {t["text"] for t in SESSION_A["turns"]}
    mem.add("ben", [SESSION_B])
    mem.view("ben")
    assert SESSION_B["turns"][1]["text"] in memo_texts()
    mem.delete_turn("ben", "S1:2")
    assert SESSION_B["turns"][1]["text"] not in memo_texts()
    # The memo is only a speed cache: a rebuild after the purge extracts the same descriptors.
    again = model_free(store, CountingEmbedder())
    assert [d.text for d in again.view("ben").descriptors_by_packet["S1:1"]] == \
        [d.text for d in mem.view("ben").descriptors_by_packet["S1:1"]]
    store.close()


def test_the_extraction_memo_keeps_its_bound_least_recently_used_first(monkeypatch):
    # A long-lived server sees an endless stream of distinct turns; the memo holds at most its bound.
    monkeypatch.setattr(extract_memo, "MAX_ENTRIES", 5)
    monkeypatch.setattr(extract_memo, "_memo", type(extract_memo._memo)())
    memo = MemoizedExtractor(RuleExtractor())

    def packet(i: int) -> SourcePacket:
        text = f"Parcel {i} went to the blue desk."
        return SourcePacket(namespace="n", packet_id=f"p{i}", ordinal=i, session_index=1, session_id="s1",
                            session_time="2024-05-01 09:00", speaker="Sam", content=text, image_caption=None,
                            sha256=content_sha256(text))

    def held() -> set[str]:
        return {key[1][1] for key in extract_memo._memo}

    for i in range(4):
        memo.extract([(packet(i), None)])
    memo.extract([(packet(0), None)])  # a hit makes turn 0 the most recently used
    for i in range(4, 7):
        memo.extract([(packet(i), None)])
    assert len(extract_memo._memo) == 5
    assert held() == {f"Parcel {i} went to the blue desk." for i in (0, 3, 4, 5, 6)}
    # an evicted turn is extracted again, with the same descriptors as the first time
    assert memo.extract([(packet(1), None)]) == RuleExtractor().extract([(packet(1), None)])
