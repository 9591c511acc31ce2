"""Tests of the memory store (memcompile_local.store) on both backends.

The ``store`` fixture is ``any_store`` (tests/conftest.py): every test that takes it runs on
SQLite and on PostgreSQL. Tests about the SQLite file itself (its header, its pragmas, its
bytes after a forget, its ``:memory:`` mode) build a ``MemoryStore`` and say so in their name
or docstring.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from memcompile_local.cli import main
from memcompile_local.data import example_conversation_path
from memcompile_local.errors import ImmutablePacketError, NamespaceError, StoreError
from memcompile_local.store import SCHEMA_VERSION, MemoryStore, open_store, validate_namespace
from memcompile_local.store.namespace import MAX_NAMESPACE_LEN
from memcompile_local.store.postgres.schema import SCHEMA_VERSION as PG_SCHEMA_VERSION
from memcompile_local.types import (
    Cell,
    Conversation,
    Descriptor,
    EventFields,
    Session,
    Turn,
    content_sha256,
)

from _threads import run_threads

WORKER = Path(__file__).with_name("_ingest_worker.py")
REPO = Path(__file__).resolve().parents[1]


def conv(ns: str, sessions: list[tuple[int, str, list[Turn]]]) -> Conversation:
    return Conversation(
        namespace=ns,
        sessions=tuple(
            Session(index=i, session_id=f"session_{i}", time=t, turns=tuple(turns)) for i, t, turns in sessions
        ),
    )


def simple_conv(ns: str, texts: list[str], session: int = 1) -> Conversation:
    turns = [Turn(packet_id=f"D{session}:{j + 1}", speaker="Ann" if j % 2 == 0 else "Bo", text=t)
             for j, t in enumerate(texts)]
    return conv(ns, [(session, f"1:00 pm on {session} May, 2023", turns)])


@pytest.fixture
def store(any_store):
    return any_store


@pytest.fixture
def sqlite_store(tmp_path):
    s = MemoryStore(tmp_path / "mem.sqlite")
    yield s
    s.close()


def make_descriptor(ns: str, pid: str, idx: int, **kw) -> Descriptor:
    base = dict(
        descriptor_id=f"{ns}:{pid}:{idx}",
        namespace=ns,
        packet_id=pid,
        claim_index=idx,
        text=f"claim {idx} about {pid}",
        speaker="Ann",
        session_index=1,
        session_time="1:00 pm on 1 May, 2023",
        people=("Ann", "Bo"),
        keywords=("pottery", "class", "weekend"),
        event_time="2023-05-06",
        interaction_time="2023-05-01",
        n_tokens=7,
        needs_profile=True,
        event=EventFields(
            subject_people=("Ann",),
            predicate="signed up",
            focus_terms=("pottery",),
            goal_context_terms=("relax",),
            event_type="plan",
            event_time="2023-05-06",
            polarity="positive",
            confidence=0.8125,
        ),
        negated=False,
    )
    base.update(kw)
    return Descriptor(**base)


# ------------------------------------------------------------------------------ namespaces


@pytest.mark.parametrize("good", ["conv-26", "a", "user@example.com", "e47becba_abs", "x:y.z", "A" * MAX_NAMESPACE_LEN])
def test_validate_namespace_accepts(good):
    assert validate_namespace(good) == good


@pytest.mark.parametrize(
    "bad", [None, "", "bad/ns", "a b", ".hidden", "..", "A" * (MAX_NAMESPACE_LEN + 1), "naïve", "x\n", 5, b"ns"]
)
def test_validate_namespace_rejects(bad):
    with pytest.raises(NamespaceError):
        validate_namespace(bad)


@pytest.mark.parametrize("bad", [None, "", "bad/ns", "A" * (MAX_NAMESPACE_LEN + 1)])
def test_every_namespaced_call_validates(store, bad):
    calls = [
        lambda: store.packets(bad),
        lambda: store.get_packet(bad, "D1:1"),
        lambda: store.ingest(simple_conv(bad, ["hi"])),
        lambda: store.descriptors(bad, "set"),
        lambda: store.extracted_packet_ids(bad, "set"),
        lambda: store.save_extraction(bad, "set", "D1:1", []),
        lambda: store.save_cells(bad, "L", []),
        lambda: store.cells(bad, "L"),
        lambda: store.save_embeddings(bad, "m", ["k"], np.zeros((1, 2), np.float32)),
        lambda: store.embeddings(bad, "m", ["k"]),
        lambda: store.get_meta(bad, "k"),
        lambda: store.set_meta(bad, "k", "v"),
        lambda: store.forget(bad),
    ]
    for call in calls:
        with pytest.raises(NamespaceError):
            call()
    # Optional-namespace calls accept None but still reject malformed ids.
    if bad is not None:
        with pytest.raises(NamespaceError):
            store.cache_put("k", namespace=bad, stage="fact", identity_json="{}", response={})
        with pytest.raises(NamespaceError):
            store.token_totals(namespace=bad)
        with pytest.raises(NamespaceError):
            store.stats(bad)
    assert store.namespaces() == []


def test_reads_are_scoped_by_namespace(store):
    store.ingest(simple_conv("A", ["alpha one", "alpha two"]))
    store.ingest(simple_conv("B", ["beta one"]))
    assert [p.content for p in store.packets("A")] == ["alpha one", "alpha two"]
    assert [p.content for p in store.packets("B")] == ["beta one"]
    assert store.get_packet("B", "D1:2") is None  # A has D1:2, B does not
    assert store.get_packet("A", "D1:2").content == "alpha two"
    store.save_extraction("A", "s1", "D1:1", [make_descriptor("A", "D1:1", 0)])
    assert store.descriptors("B", "s1") == []
    assert store.extracted_packet_ids("B", "s1") == set()
    store.set_meta("A", "fp", "x")
    assert store.get_meta("B", "fp") is None
    store.save_embeddings("A", "m", ["k"], np.ones((1, 3), np.float32))
    assert store.embeddings("B", "m", ["k"]) == {}
    store.save_cells("A", "L", [Cell(1, ("A:D1:1:0",), 7, frozenset(), frozenset(), 1, 1)])
    assert store.cells("B", "L") == []
    assert store.namespaces() == ["A", "B"]
    assert store.packets("C") == []


# ------------------------------------------------------------------------------ packets


def test_ingest_roundtrip_and_ordinals(store):
    turns1 = [
        Turn("D1:1", "Ann", "I took up pottery."),
        Turn("D1:2", "Bo", "Look at this", image_caption="a photo of a bowl", image_query="bowl"),
    ]
    turns2 = [Turn("D2:1", "Ann", "The bowl cracked.")]
    c = conv("u1", [(1, "t1", turns1), (2, "t2", turns2)])
    r = store.ingest(c)
    assert (r.namespace, r.added, r.skipped) == ("u1", 3, 0)
    ps = store.packets("u1")
    assert [p.packet_id for p in ps] == ["D1:1", "D1:2", "D2:1"]
    assert [p.ordinal for p in ps] == [0, 1, 2]
    p = ps[1]
    assert (p.namespace, p.session_index, p.session_id, p.session_time, p.speaker) == ("u1", 1, "session_1", "t1", "Bo")
    assert p.image_caption == "a photo of a bowl" and p.image_query == "bowl"
    assert p.sha256 == content_sha256("Look at this", "a photo of a bowl")
    assert ps[0].image_caption is None and ps[0].image_query is None
    # A later batch continues the ordinals.
    r2 = store.ingest(conv("u1", [(3, "t3", [Turn("D3:1", "Bo", "Sorry to hear.")])]))
    assert (r2.added, r2.skipped) == (1, 0)
    assert store.get_packet("u1", "D3:1").ordinal == 3


def test_ingest_same_turn_twice_adds_nothing(store):
    c = simple_conv("u1", ["one", "two", "three"])
    assert store.ingest(c).added == 3
    r = store.ingest(c)
    assert (r.added, r.skipped) == (0, 3)
    assert len(store.packets("u1")) == 3
    # A batch mixing old and new turns adds only the new ones, after the old ordinals.
    c2 = simple_conv("u1", ["one", "two", "three", "four"])
    r = store.ingest(c2)
    assert (r.added, r.skipped) == (1, 3)
    assert [p.ordinal for p in store.packets("u1")] == [0, 1, 2, 3]


def test_changed_text_is_rejected_and_batch_not_written(store):
    store.ingest(simple_conv("u1", ["original text"]))  # D1:1
    bad = conv(
        "u1",
        [
            (2, "t2", [Turn("D2:1", "Ann", "a valid new turn before the bad one")]),
            (1, "1:00 pm on 1 May, 2023", [Turn("D1:1", "Ann", "EDITED text")]),
        ],
    )
    with pytest.raises(ImmutablePacketError) as ei:
        store.ingest(bad)
    assert "D1:1" in str(ei.value)
    assert store.get_packet("u1", "D2:1") is None
    assert [p.content for p in store.packets("u1")] == ["original text"]
    # A changed caption is a changed turn too, and so is a changed speaker.
    with pytest.raises(ImmutablePacketError):
        store.ingest(conv("u1", [(1, "1:00 pm on 1 May, 2023", [Turn("D1:1", "Ann", "original text", image_caption="x")])]))
    with pytest.raises(ImmutablePacketError):
        store.ingest(conv("u1", [(1, "1:00 pm on 1 May, 2023", [Turn("D1:1", "Zed", "original text")])]))
    # Within one batch, the same id twice with different text is rejected as a whole.
    dup = conv("u2", [(1, "t", [Turn("D1:1", "A", "x"), Turn("D1:1", "A", "y")])])
    with pytest.raises(ImmutablePacketError):
        store.ingest(dup)
    assert store.packets("u2") == []
    # The store is still writable afterwards (the failed transaction was rolled back).
    assert store.ingest(conv("u1", [(2, "t2", [Turn("D2:1", "Ann", "ok")])])).added == 1


def test_bad_turn_type_is_typed_error(store):
    c = conv("u1", [(1, "t", [Turn("D1:1", "A", "fine"), Turn("D1:2", "A", 123)])])  # type: ignore[arg-type]
    with pytest.raises(StoreError):
        store.ingest(c)
    assert store.packets("u1") == []
    with pytest.raises(StoreError):
        store.ingest("not a conversation")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ descriptors


def test_descriptor_roundtrip_exact(store):
    store.ingest(conv("u1", [(1, "t1", [Turn("D1:1", "Ann", "a"), Turn("D1:2", "Bo", "b")]), (2, "t2", [Turn("D2:1", "Ann", "c")])]))
    d21 = [make_descriptor("u1", "D2:1", 0, text="late claim", people=(), keywords=(), event=EventFields())]
    d11 = [make_descriptor("u1", "D1:1", 1, negated=True), make_descriptor("u1", "D1:1", 0, text="ünïcode ✓ claim")]
    store.save_extraction("u1", "ex-v1", "D2:1", d21)
    store.save_extraction("u1", "ex-v1", "D1:1", d11)
    store.save_extraction("u1", "ex-v1", "D1:2", [])  # nothing to extract, still marked done
    got = store.descriptors("u1", "ex-v1")
    # Ordered by packet ordinal, then claim index.
    assert got == [d11[1], d11[0], d21[0]]
    assert isinstance(got[0].people, tuple) and isinstance(got[0].event.focus_terms, tuple)
    assert got[1].event.confidence == 0.8125 and got[1].negated is True and got[0].needs_profile is True
    assert store.extracted_packet_ids("u1", "ex-v1") == {"D1:1", "D1:2", "D2:1"}
    assert store.extracted_packet_ids("u1", "ex-v2") == set()
    assert store.descriptors("u1", "ex-v2") == []
    # Saving again for a packet replaces its descriptors for that set.
    store.save_extraction("u1", "ex-v1", "D1:1", [make_descriptor("u1", "D1:1", 0, text="replaced")])
    assert [d.text for d in store.descriptors("u1", "ex-v1")] == ["replaced", "late claim"]


def test_descriptor_errors_write_nothing(store):
    store.ingest(simple_conv("u1", ["a", "b"]))
    with pytest.raises(StoreError):  # unknown packet
        store.save_extraction("u1", "s", "D9:9", [make_descriptor("u1", "D9:9", 0)])
    with pytest.raises(StoreError):  # descriptor of another packet
        store.save_extraction("u1", "s", "D1:1", [make_descriptor("u1", "D1:2", 0)])
    with pytest.raises(StoreError):  # descriptor of another namespace
        store.save_extraction("u1", "s", "D1:1", [make_descriptor("u2", "D1:1", 0)])
    with pytest.raises(StoreError):  # duplicate descriptor ids
        store.save_extraction("u1", "s", "D1:1", [make_descriptor("u1", "D1:1", 0), make_descriptor("u1", "D1:1", 0)])
    assert store.descriptors("u1", "s") == []
    assert store.extracted_packet_ids("u1", "s") == set()


def test_sqlite_foreign_keys_are_enforced(sqlite_store):
    store = sqlite_store
    store.ingest(simple_conv("u1", ["a"]))
    assert store._conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    with pytest.raises(sqlite3.IntegrityError):
        store._conn.execute(
            "INSERT INTO extraction_markers VALUES ('u1', 's', 'D7:7', 0, 0.0)"
        )


# ------------------------------------------------------------------------------ cells and embeddings


def test_cells_roundtrip_and_replace(store):
    cells = [
        Cell(2, ("u1:D1:1:0", "u1:D1:2:0"), 40, frozenset({"Ann", "Bo"}), frozenset({"pottery"}), 1, 3, "Ann pottery", True),
        Cell(0, (), 0, frozenset(), frozenset(), 0, 0),
        Cell(1, ("u1:D2:1:0",), 12, frozenset({"Bo"}), frozenset({"bowl", "cracked", "kiln"}), 2, 2, "", False),
    ]
    store.save_cells("u1", "layout-a", cells)
    store.save_cells("u1", "layout-b", cells[:1])
    assert store.cells("u1", "layout-a") == sorted(cells, key=lambda c: c.cell_id)
    assert store.cells("u1", "layout-b") == cells[:1]
    store.save_cells("u1", "layout-a", cells[2:])
    assert store.cells("u1", "layout-a") == cells[2:]
    with pytest.raises(StoreError):  # repeated cell id: rejected, the old layout stays
        store.save_cells("u1", "layout-a", [cells[0], cells[0]])
    assert store.cells("u1", "layout-a") == cells[2:]


def test_cells_written_as_a_difference_from_the_stored_ones(store):
    def cell(cid, ids, title=""):
        return Cell(cid, tuple(ids), 10 * len(ids), frozenset({"Ann"}), frozenset({title or "kiln"}), 1, 2, title)

    old = [cell(0, ["u1:D1:1:0"]), cell(1, ["u1:D1:2:0"]), cell(2, ["u1:D1:3:0"], "glaze")]
    store.save_cells("u1", "L", old)
    store.save_cells("u1", "other", old[:1])
    # cell 1 gains a descriptor, cell 2 goes, cell 3 is new, cell 0 is unchanged
    new = [old[0], cell(1, ["u1:D1:2:0", "u1:D1:4:0"]), cell(3, ["u1:D1:5:0"], "wheel")]
    store.save_cells("u1", "L", new, stored=old)
    assert store.cells("u1", "L") == new
    assert store.cells("u1", "other") == old[:1]  # another layout is not touched
    before = store.generation("u1")
    store.save_cells("u1", "L", new, stored=new)  # nothing differs: still a write, a new generation
    assert store.cells("u1", "L") == new and store.generation("u1") > before
    with pytest.raises(StoreError):  # a repeated id is refused on this path too, and nothing changes
        store.save_cells("u1", "L", [new[0], new[0]], stored=new)
    assert store.cells("u1", "L") == new


def test_embeddings_bit_exact(store):
    rng = np.random.default_rng(0)
    vecs = rng.standard_normal((5, 384)).astype(np.float32)
    vecs[0, 0] = np.float32(1e-45)  # a subnormal survives too
    keys = [f"u1:D1:{i}:0" for i in range(5)]
    store.save_embeddings("u1", "minilm", keys, vecs)
    got = store.embeddings("u1", "minilm", keys + ["absent"])
    assert set(got) == set(keys)
    for i, k in enumerate(keys):
        assert got[k].dtype == np.float32 and got[k].shape == (384,)
        assert got[k].tobytes() == vecs[i].tobytes()
    got[keys[0]][0] = 5.0  # returned arrays are writable copies
    assert store.embeddings("u1", "minilm", keys[:1])[keys[0]].tobytes() == vecs[0].tobytes()
    assert store.embeddings("u1", "other-model", keys) == {}
    # Replacing a vector; float64 input is cast to float32.
    store.save_embeddings("u1", "minilm", keys[:1], np.full((1, 384), 0.1, dtype=np.float64))
    assert store.embeddings("u1", "minilm", keys[:1])[keys[0]].tobytes() == np.full(384, 0.1, np.float32).tobytes()
    # More keys than one IN(...) chunk.
    many = [f"k{i}" for i in range(1203)]
    mv = rng.standard_normal((1203, 4)).astype(np.float32)
    store.save_embeddings("u1", "small", many, mv)
    got = store.embeddings("u1", "small", many)
    assert len(got) == 1203 and all(got[k].tobytes() == mv[i].tobytes() for i, k in enumerate(many))


def test_embedding_errors(store):
    with pytest.raises(StoreError):
        store.save_embeddings("u1", "m", ["a", "b"], np.zeros((1, 3), np.float32))
    with pytest.raises(StoreError):
        store.save_embeddings("u1", "m", ["a"], np.zeros(3, np.float32))
    with pytest.raises(StoreError):
        store.save_embeddings("u1", "m", ["a"], np.array([[np.nan, 1.0]], np.float32))
    with pytest.raises(StoreError):
        store.save_embeddings("u1", "m", ["a", "a"], np.zeros((2, 3), np.float32))
    store.save_embeddings("u1", "m", ["a"], np.zeros((1, 3), np.float32))
    with pytest.raises(StoreError):  # dimension must stay the same per model
        store.save_embeddings("u1", "m", ["b"], np.zeros((1, 4), np.float32))


# ------------------------------------------------------------------------------ cache and ledger


def resp(text: str, pt: int, ct: int, parsed=None) -> dict:
    return {"text": text, "parsed": parsed, "prompt_tokens": pt, "completion_tokens": ct, "finish_reason": "stop"}


def test_cache_put_get_first_write_wins(store):
    assert store.cache_get("k1") is None
    assert store.cache_put("k1", namespace="u1", stage="fact", identity_json='{"a": 1}',
                           response=resp("first", 100, 10, parsed={"facts": ["x"]})) is True
    assert store.cache_put("k1", namespace="u1", stage="fact", identity_json='{"a": 1}',
                           response=resp("second", 5, 5)) is False
    got = store.cache_get("k1")
    assert got == {"text": "first", "parsed": {"facts": ["x"]}, "prompt_tokens": 100, "completion_tokens": 10,
                   "finish_reason": "stop", "stage": "fact"}
    with pytest.raises(StoreError):
        store.cache_put("k2", namespace=None, stage="judge", identity_json="not json", response=resp("x", 1, 1))
    with pytest.raises(StoreError):
        store.cache_put("k2", namespace=None, stage="judge", identity_json="{}", response=resp("x", -1, 1))
    with pytest.raises(StoreError):
        store.cache_put("k2", namespace=None, stage="judge", identity_json="{}", response={"parsed": {1, 2}})
    assert store.cache_get("k2") is None


def test_token_totals_waste_and_mark_used(store):
    store.cache_put("a", namespace="u1", stage="fact", identity_json="{}", response=resp("", 100, 10))
    store.cache_put("b", namespace="u1", stage="fact", identity_json="{}", response=resp("", 200, 20))
    store.cache_put("c", namespace="u2", stage="answer", identity_json="{}", response=resp("", 50, 5))
    store.cache_put("d", namespace=None, stage="judge", identity_json="{}", response=resp("", 7, 1))
    store.mark_used("run1", ["a", "c"])
    store.mark_used("run1", ["a", "c", "a"])  # idempotent
    store.mark_used("run2", ["a", "b", "d"])
    store.mark_used("run2", [])
    with pytest.raises(StoreError):
        store.mark_used("run1", ["a", "missing-key"])
    assert store.token_totals(run_id="run1") == {
        "answer": {"prompt": 50, "completion": 5, "calls": 1},
        "fact": {"prompt": 100, "completion": 10, "calls": 1},
    }
    assert store.token_totals(run_id="run2") == {
        "fact": {"prompt": 300, "completion": 30, "calls": 2},
        "judge": {"prompt": 7, "completion": 1, "calls": 1},
    }
    assert store.token_totals(namespace="u1") == {"fact": {"prompt": 300, "completion": 30, "calls": 2}}
    assert store.token_totals(run_id="run2", namespace="u1") == {"fact": {"prompt": 300, "completion": 30, "calls": 2}}
    assert store.token_totals(run_id="run1", namespace="u1") == {"fact": {"prompt": 100, "completion": 10, "calls": 1}}
    assert store.token_totals()["fact"] == {"prompt": 300, "completion": 30, "calls": 2}
    assert store.token_totals(run_id="nobody") == {}
    # Waste is separate from the cache totals.
    store.record_waste(stage="fact", namespace="u1", prompt_tokens=30, completion_tokens=3, reason="invalid json", run_id="run1")
    store.record_waste(stage="fact", namespace=None, prompt_tokens=10, completion_tokens=1, reason="retry", run_id="run1")
    store.record_waste(stage="answer", namespace="u2", prompt_tokens=5, completion_tokens=2, reason="x", run_id="run2")
    assert store.waste_totals(run_id="run1") == {"fact": {"prompt": 40, "completion": 4, "calls": 2}}
    assert store.waste_totals() == {
        "answer": {"prompt": 5, "completion": 2, "calls": 1},
        "fact": {"prompt": 40, "completion": 4, "calls": 2},
    }
    assert store.token_totals(run_id="run1")["fact"] == {"prompt": 100, "completion": 10, "calls": 1}
    with pytest.raises(NamespaceError):
        store.record_waste(stage="fact", namespace="bad/ns", prompt_tokens=1, completion_tokens=1, reason="")


def test_cache_from_many_threads(store):
    def work(t: int) -> None:
        for i in range(40):
            key = f"k{i % 25}"  # threads race on the same keys: exactly one insert wins each
            store.cache_put(key, namespace="u1", stage="fact", identity_json="{}", response=resp(f"t{t}", 1, 1))
            store.mark_used(f"run{t}", [key])
            assert store.cache_get(key) is not None

    assert run_threads(work, 6) == []
    assert store.token_totals(namespace="u1") == {"fact": {"prompt": 25, "completion": 25, "calls": 25}}
    for t in range(6):
        assert store.token_totals(run_id=f"run{t}")["fact"]["calls"] == 25


# ------------------------------------------------------------------------------ meta, stats, schema


def test_meta(store):
    assert store.get_meta("u1", "fingerprint") is None
    store.set_meta("u1", "fingerprint", "abc")
    store.set_meta("u1", "fingerprint", "def")
    store.set_meta("u2", "fingerprint", "zzz")
    assert store.get_meta("u1", "fingerprint") == "def"
    assert store.get_meta("u2", "fingerprint") == "zzz"


def test_stats(store):
    store.ingest(conv("u1", [(1, "t", [Turn("D1:1", "A", "a"), Turn("D1:2", "B", "b")]), (2, "t", [Turn("D2:1", "A", "c")])]))
    store.save_extraction("u1", "s", "D1:1", [make_descriptor("u1", "D1:1", 0), make_descriptor("u1", "D1:1", 1)])
    store.save_extraction("u1", "s", "D1:2", [])
    store.save_cells("u1", "L", [Cell(0, (), 0, frozenset(), frozenset(), 1, 1)])
    store.save_embeddings("u1", "m", ["x", "y"], np.zeros((2, 2), np.float32))
    store.cache_put("k", namespace="u1", stage="fact", identity_json="{}", response=resp("", 11, 3))
    store.cache_put("j", namespace=None, stage="judge", identity_json="{}", response=resp("", 2, 1))
    store.ingest(simple_conv("u2", ["z"]))
    st = store.stats()
    version = SCHEMA_VERSION if isinstance(store, MemoryStore) else PG_SCHEMA_VERSION
    assert SCHEMA_VERSION == 6
    assert st["schema_version"] == version and st["file_bytes"] > 0
    assert set(st["namespaces"]) == {"u1", "u2"}
    u1 = st["namespaces"]["u1"]
    assert u1["packets"] == 3 and u1["sessions"] == 2
    assert u1["descriptors"] == {"s": 2} and u1["extracted_packets"] == {"s": 2}
    assert u1["cells"] == {"L": 1} and u1["embeddings"] == {"m": 2}
    assert u1["cache_entries"] == 1 and u1["tokens"] == {"prompt": 11, "completion": 3}
    assert st["cache"] == {"entries": 2, "unscoped_entries": 1, "tokens": {"prompt": 13, "completion": 4}}
    only = store.stats("u2")
    assert list(only["namespaces"]) == ["u2"] and only["namespaces"]["u2"]["packets"] == 1
    assert only["cache"]["entries"] == 0


def test_sqlite_schema_version_and_foreign_files(tmp_path):
    p = tmp_path / "s.sqlite"
    with MemoryStore(p) as s:
        s.ingest(simple_conv("u1", ["persisted"]))
    raw = sqlite3.connect(p)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    raw.close()
    with MemoryStore(p) as s:  # reopen: data is there
        assert [x.content for x in s.packets("u1")] == ["persisted"]
        assert s._conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    raw = sqlite3.connect(p)
    raw.execute("PRAGMA user_version = 99")
    raw.commit()
    raw.close()
    with pytest.raises(StoreError, match="newer"):
        MemoryStore(p)
    other = tmp_path / "other.sqlite"
    raw = sqlite3.connect(other)
    raw.execute("CREATE TABLE t (x)")
    raw.commit()
    raw.close()
    with pytest.raises(StoreError):
        MemoryStore(other)
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not a database file at all" * 100)
    with pytest.raises(StoreError):
        MemoryStore(junk)
    with pytest.raises(StoreError):
        MemoryStore(tmp_path / "no-such-dir" / "x.sqlite")


def test_closed_store_raises(store_factory):
    s = store_factory()
    s.close()
    s.close()
    with pytest.raises(StoreError):
        s.packets("u1")


def test_sqlite_in_memory_store():
    with MemoryStore(":memory:") as s:
        s.ingest(simple_conv("u1", ["a"]))
        assert len(s.packets("u1")) == 1
        assert s.forget("u1")["packets"] == 1


# ------------------------------------------------------------------------------ forget


def test_forget_removes_namespace_from_file_bytes(store_factory):
    """On both backends: the counts and what is left; on SQLite also the file's bytes."""
    gone = "ZEBRA-QUOKKA-secret-7781"
    kept = "MARMOT-OCELOT-keep-4410"
    s = store_factory()
    for ns, word in (("victim", gone), ("keeper", kept)):
        s.ingest(conv(ns, [(1, "t", [Turn("D1:1", "Ann", f"my code word is {word}", image_caption=f"{word} photo"),
                                     Turn("D1:2", "Bo", "noted")])]))
        s.save_extraction(ns, "s", "D1:1", [make_descriptor(ns, "D1:1", 0, text=f"Ann's word is {word}", keywords=(word,))])
        s.save_cells(ns, "L", [Cell(0, (f"{ns}:D1:1:0",), 9, frozenset({"Ann"}), frozenset({word}), 1, 1, title=word)])
        s.save_embeddings(ns, "m", [f"{ns}:{word}"], np.ones((1, 8), np.float32))
        s.set_meta(ns, "note", word)
        s.put_capsules(ns, "model-free", 100, [{"capsule_id": "D1:1", "sources": ["D1:1"], "text": f"code {word}"}])
        s.cache_put(f"key-{ns}", namespace=ns, stage="fact", identity_json=f'{{"prompt": "{word}"}}',
                    response=resp(f"fact: {word}", 10, 2))
        s.mark_used("run1", [f"key-{ns}"])
        s.record_waste(stage="fact", namespace=ns, prompt_tokens=3, completion_tokens=1, reason=f"bad {word}", run_id="run1")
    s.cache_put("shared", namespace=None, stage="judge", identity_json="{}", response=resp("judge", 4, 1))
    s.mark_used("run1", ["shared"])

    counts = s.forget("victim")
    assert counts == {
        "run_calls": 1, "request_cache": 1, "descriptors": 1, "extraction_markers": 1, "packets": 2,
        "cells": 1, "embeddings": 1, "meta": 1, "waste": 1, "namespaces": 1, "generations": 1,
        # Both namespaces saved the same vector: one content-addressed row, still the keeper's.
        "vectors": 0,
        "capsules": 1,
    }
    # Everything of the victim is gone, the keeper and unscoped entries are intact.
    assert s.namespaces() == ["keeper"]
    assert s.packets("victim") == [] and s.descriptors("victim", "s") == [] and s.cells("victim", "L") == []
    assert s.get_meta("victim", "note") is None and s.cache_get("key-victim") is None
    assert s.embeddings("victim", "m", [f"victim:{gone}"]) == {}
    assert len(s.packets("keeper")) == 2 and len(s.descriptors("keeper", "s")) == 1
    assert s.get_meta("keeper", "note") == kept and s.cache_get("key-keeper")["text"] == f"fact: {kept}"
    assert s.cache_get("shared") is not None
    assert s.token_totals(run_id="run1") == {
        "fact": {"prompt": 10, "completion": 2, "calls": 1},
        "judge": {"prompt": 4, "completion": 1, "calls": 1},
    }
    assert s.waste_totals() == {"fact": {"prompt": 3, "completion": 1, "calls": 1}}
    assert counts.scrub_complete
    if store_factory.backend != "sqlite":
        s.set_meta("keeper", "after", "x")
        s.close()
        s2 = store_factory()
        assert s2.get_meta("keeper", "note") == kept and len(s2.packets("keeper")) == 2
        assert s2.check().ok
        return
    path = Path(store_factory.location)
    # The bytes on disk: main file and WAL, while the store is still open.
    data = path.read_bytes()
    wal = Path(str(path) + "-wal")
    wal_bytes = wal.read_bytes() if wal.exists() else b""
    assert gone.encode() not in data and gone.encode() not in wal_bytes
    assert kept.encode() in data + wal_bytes
    # The keeper survives a write after forget, and a reopen.
    s.set_meta("keeper", "after", "x")
    s.close()
    with MemoryStore(path) as s2:
        assert s2.get_meta("keeper", "note") == kept and len(s2.packets("keeper")) == 2
        assert s2._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    for f in [path, wal]:
        if f.exists():
            assert gone.encode() not in f.read_bytes()


# ------------------------------------------------------------------------------ processes


@pytest.mark.slow
def test_two_processes_ingest_same_file(tmp_path, request, store_factory):
    """Two processes write different namespaces into one (fresh) store at once; both succeed."""
    if store_factory.backend == "sqlite":
        db = tmp_path / "shared.sqlite"
    else:  # an empty database: both processes race to create the schema
        server = request.getfixturevalue("pg_server")
        db = server.fresh_database(with_schema=False)
    go = tmp_path / "go"
    n_batches, size = 60, 4
    env = dict(os.environ, MEMSTORE_WORKER_GO=str(go))
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(db), ns, "0", str(n_batches), str(size)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=str(REPO),
            env=env,
        )
        for ns in ("proc-a", "proc-b")
    ]
    # Both open the fresh file concurrently; once both are READY, release them together.
    for p in procs:
        assert p.stdout.readline() == "READY\n"
    go.touch()
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert out.strip().splitlines()[-1] == "DONE"
        assert sum(1 for line in out.splitlines() if line.startswith("ACK ")) == n_batches
    with open_store(db) as s:
        for ns in ("proc-a", "proc-b"):
            ps = s.packets(ns)
            assert len(ps) == n_batches * size
            assert [p.ordinal for p in ps] == list(range(n_batches * size))
        if store_factory.backend != "sqlite":
            assert s.check().ok
            return
        assert s._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        # How often consecutive commits came from different processes (informational: shows overlap).
        order = [r[0] for r in s._conn.execute("SELECT namespace FROM packets ORDER BY rowid")]
    switches = sum(1 for a, b in zip(order, order[1:]) if a != b)
    print(f"\ntwo-process ingest: {switches} switches between writers over {len(order)} packets")


def test_packet_count_follows_ingest(store_factory):
    from memcompile_local.data import example_conversation_path, load_locomo

    conv = load_locomo(example_conversation_path())[0]
    with store_factory() as store:
        assert store.packet_count(conv.namespace) == 0
        store.ingest(conv)
        assert store.packet_count(conv.namespace) == len(store.packets(conv.namespace)) == 40


# ------------------------------------------------------------------------------ batches


def test_ingest_many_is_one_transaction(store):
    store.ingest(simple_conv("old", ["first words", "second words"]))
    gen = store.generation("old")
    edited = simple_conv("old", ["first words, edited", "second words"])
    with pytest.raises(ImmutablePacketError, match="whole batch was rejected"):
        store.ingest_many([simple_conv("new", ["a new user's turn"]), edited])
    assert store.namespaces() == ["old"] and store.packets("new") == []
    assert store.generation("old") == gen
    results = store.ingest_many([simple_conv("new", ["a new user's turn"]), simple_conv("old", ["first words"]),
                                 simple_conv("new", ["a new user's turn", "and more"])])
    assert [(r.namespace, r.added, r.skipped) for r in results] == [("new", 1, 0), ("old", 0, 1), ("new", 1, 1)]
    assert [p.content for p in store.packets("new")] == ["a new user's turn", "and more"]
    with pytest.raises(StoreError, match="item 1"):
        store.ingest_many([simple_conv("x", ["y"]), "not a conversation"])
    assert "x" not in store.namespaces()


def test_cli_file_with_a_new_and_an_edited_conversation_writes_nothing(tmp_path, capsys, store_factory):
    db = store_factory.location
    assert main(["ingest", str(example_conversation_path()), "--store", db, "--quiet"]) == 0
    original = json.loads(example_conversation_path().read_text(encoding="utf-8"))
    new = json.loads(json.dumps(original[0]))
    new["sample_id"] = "example-2"
    edited = json.loads(json.dumps(original[0]))
    edited["conversation"]["session_1"][0]["text"] += " (edited later)"
    batch = tmp_path / "batch.json"
    batch.write_text(json.dumps([new, edited]), encoding="utf-8")
    capsys.readouterr()
    assert main(["ingest", str(batch), "--store", db, "--quiet"]) == 2
    assert "whole batch was rejected" in capsys.readouterr().err
    with store_factory() as s:
        assert s.namespaces() == ["example-1"]  # the new conversation's turns were not committed
        assert s.packet_count("example-2") == 0
