"""Catching a held view up with another process's writes (views/catchup.py, issue 47).

A second process (tests/_catchup_writer.py, a real process on the same SQLite file or
PostgreSQL database) appends turns; this process, holding a view loaded before, must see them
on its next search without loading the namespace again, with the results (ids and scores) a
fresh load gives. What the store's change log cannot explain (a deleted turn, a forget, a log
with a gap) must be read again whole, and a deletion or forget must drop what was held. An old
store file without the log opens, gains it, and catches up from then on. Model-free path,
hash embedder: no model is loaded.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from memcompile_local.adapters.scripted import HashEmbedder
from memcompile_local.config import PipelineConfig
from memcompile_local.errors import ConfigError
from memcompile_local.llm.client import LLMClient, NoModelBackend
from memcompile_local.memory import Memory
from memcompile_local.pipeline.presets import apply_preset
from memcompile_local.store import MemoryStore, sqlite_store
from memcompile_local.store.base import ChangeStep, chain_steps
from memcompile_local.types import Conversation, Descriptor, Session, Turn

from _service_util import env

TESTS = Path(__file__).resolve().parent
NS = "hana"

# A user and an assistant (ranker "auto" takes the learned ranker on such a history, so its
# per-turn table is grown by the catch-up too).
ASSISTANT = [
    {"time": "2024-03-02 09:00", "id": "s1", "turns": [
        {"speaker": "user", "text": "I bought a 1978 wooden sailboat called Meridian and the hull needs work.", "id": "u1"},
        {"speaker": "assistant", "text": "Start by sanding the hull down to bare wood and check the planks for rot "
                                         "before any varnish goes on.", "id": "a1"},
        {"speaker": "user", "text": "Two planks near the keel are soft. My neighbour Tomas can steam new ones.", "id": "u2"},
    ]},
    {"time": "2024-03-09 18:30", "id": "s2", "turns": [
        {"speaker": "user", "text": "Different topic: my sourdough starter smells like acetone.", "id": "u3"},
        {"speaker": "assistant", "text": "That smell means it is hungry; feed it twice a day at room temperature.",
         "id": "a3"},
    ]},
]
ASSISTANT_APPENDS = [
    # to the end of a session: the turn before it gets a new neighbour
    [{"time": "2024-03-09 18:30", "id": "s2", "turns": [
        {"speaker": "user", "text": "Fed it at 8 and 20 o'clock; by Sunday it doubled.", "id": "u4"}]}],
    [{"time": "2024-03-09 18:30", "id": "s2", "turns": [
        {"speaker": "assistant", "text": "Then bake: 500 g flour, 350 g water, 100 g starter, 10 g salt.", "id": "a4"},
        {"speaker": "user", "text": "The loaf came out dense, maybe the kitchen was cold.", "id": "u5"}]}],
    [{"time": "2024-04-14 07:45", "id": "s3", "turns": [
        {"speaker": "user", "text": "Meridian is back in the water! Tomas steamed two oak planks for the keel.",
         "id": "u6"},
        {"speaker": "assistant", "text": "Congratulations. Watch the bilge for the first week while the planks swell.",
         "id": "a6"}]}],
]
# Two people chatting (the weighted sum), with a third person joining late.
CHAT = [
    {"time": "2023-11-20 12:00", "id": "c1", "turns": [
        {"speaker": "Noor", "text": "The choir moved rehearsals to Thursdays at the old library.", "id": "n1"},
        {"speaker": "Pavel", "text": "Thursdays clash with my pottery class, sadly.", "id": "p1"},
        {"speaker": "Noor", "text": "Could you swap the pottery class to Monday?", "id": "n2"},
    ]},
]
CHAT_APPENDS = [
    [{"time": "2023-11-20 12:00", "id": "c1", "turns": [
        {"speaker": "Pavel", "text": "I asked; Monday pottery is full until January.", "id": "p2"}]}],
    [{"time": "2023-12-03 17:10", "id": "c2", "turns": [
        {"speaker": "Noor", "text": "Concert is on December 21st, bring your cousin Ilse.", "id": "n3"},
        {"speaker": "Ilse", "text": "Hi both, Ilse here, I will come to the concert with a cake.", "id": "i1"}]}],
]
QUESTIONS = {
    "assistant": ["What is the sailboat called?", "Who steamed the planks?", "How much salt goes in the bread?",
                  "Why did the starter smell?", "What happened in April 2024?"],
    "chat": ["When are choir rehearsals?", "Why can't Pavel come on Thursdays?", "When is the concert?",
             "Who brings a cake?"],
}
HISTORIES = {"assistant": (ASSISTANT, ASSISTANT_APPENDS), "chat": (CHAT, CHAT_APPENDS)}
FUSION = {"assistant": {}, "chat": {"tolerant_names": True, "bursts": True}}


def memory(location: str, fusion: dict) -> Memory:
    """This process's Memory: the one the writer process makes (tests/_catchup_writer.py)."""
    from memcompile_local.store import open_store

    store = open_store(location)
    cfg = apply_preset("model-free", PipelineConfig())
    if fusion:
        cfg = cfg.replace(fusion=fusion)
    return Memory(store, cfg, embedder=HashEmbedder(dim=64), client=LLMClient(NoModelBackend(), store))


class Writer:
    """The other process (tests/_catchup_writer.py)."""

    def __init__(self, location: str, fusion: dict):
        self.proc = subprocess.Popen([sys.executable, str(TESTS / "_catchup_writer.py"), location, json.dumps(fusion)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env())
        assert json.loads(self.proc.stdout.readline()) == {"ready": True}

    def __call__(self, op: str, **args) -> dict:
        self.proc.stdin.write(json.dumps({"op": op, "ns": NS, **args}) + "\n")
        self.proc.stdin.flush()
        out = json.loads(self.proc.stdout.readline())
        assert out["ok"], out
        return out

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(30)


@pytest.fixture
def writer_factory():
    made: list[Writer] = []

    def make(location: str, fusion: dict) -> Writer:
        made.append(Writer(location, fusion))
        return made[-1]

    yield make
    for w in made:
        w.close()


def hits(mem: Memory, questions: list[str]) -> list[list[tuple[str, float]]]:
    return [[(h.packet.packet_id, h.score) for h in mem.search(NS, q)] for q in questions]


def same_hits(got: list, want: list) -> None:
    """The same turns in the same order, with scores equal up to float64 rounding (a grown
    BM25 index sums in another order than one built afresh)."""
    assert [[pid for pid, _ in q] for q in got] == [[pid for pid, _ in q] for q in want]
    for q, r in zip(got, want):
        assert np.allclose([s for _, s in q], [s for _, s in r], rtol=1e-9, atol=1e-12)


def same_view(live, fresh) -> None:
    """What a search reads of the two views: packets, claims, vectors, the fused index's rows."""
    assert live.packets == fresh.packets and dict(live.descriptors_by_packet) == dict(fresh.descriptors_by_packet)
    assert np.array_equal(live.packet_matrix, fresh.packet_matrix) and dict(live.row_of) == dict(fresh.row_of)
    a, b = live.fusion, fresh.fusion
    assert a.packet_ids == b.packet_ids and a.participants == b.participants and a.expansion_terms == b.expansion_terms
    assert np.array_equal(a.dated, b.dated) and a.burst_share == b.burst_share
    for m in ("context_matrix", "raw_matrix", "context_rows", "entity_rows"):
        x, y = getattr(a, m), getattr(b, m)
        assert (x is None) == (y is None) and (x is None or np.array_equal(x, y)), m
    assert a.lexical.n_docs == b.lexical.n_docs
    for q in ("sailboat planks keel Tomas", "starter flour salt", "choir pottery concert Ilse"):
        terms = b.query_terms(q)
        assert np.allclose(a.lexical.scores(terms), b.lexical.scores(terms), rtol=1e-12, atol=0)
    assert live.index.cells == fresh.index.cells  # the Cell index, built on first use


@pytest.mark.parametrize("history,mode", [("assistant", "in_place"), ("assistant", "plain"), ("chat", "built")])
def test_a_replica_catches_up_with_another_process_s_appends(store_factory, writer_factory, history, mode):
    """``in_place``: the writer holds a view and appends in place (turns, claims, Cells and
    vectors in one transaction); ``plain``: it only stores the turns (a CLI ingest), so this
    process builds them first; ``built``: it stores them and then builds them (no view)."""
    first, appends = HISTORIES[history]
    fusion = FUSION[history]
    reader = memory(store_factory.location, fusion)
    reader.add(NS, first)
    hits(reader, QUESTIONS[history])
    loader = reader.views.loader
    assert loader.loads == 1
    writer = writer_factory(store_factory.location, fusion)
    if mode == "in_place":
        writer("view")
    for n, batch in enumerate(appends, start=1):
        writer("add", batch=batch, in_place=mode == "in_place")
        if mode == "built":
            writer("build")
        got = hits(reader, QUESTIONS[history])
        # grown (caught up, or for unbuilt turns built in place), never loaded again
        built_here = reader._appender.built_in_place if reader._appender is not None else 0
        assert loader.loads == 1 and loader.catch_ups + built_here >= n
        assert (built_here == n) == (mode == "plain")
        fresh = memory(store_factory.location, fusion)
        same_hits(got, hits(fresh, QUESTIONS[history]))
        same_view(reader.view(NS), fresh.view(NS))
        fresh.store.close()
    assert {t["id"] for b in appends for s in b for t in s["turns"]} <= set(reader.view(NS).packets_by_id)


def test_interleaved_appends_a_deletion_and_a_forget_across_two_processes(store_factory, writer_factory):
    fusion = FUSION["assistant"]
    questions = QUESTIONS["assistant"]
    reader = memory(store_factory.location, fusion)
    reader.add(NS, ASSISTANT)
    hits(reader, questions)
    writer = writer_factory(store_factory.location, fusion)
    writer("view")
    loader = reader.views.loader
    for n, batch in enumerate(ASSISTANT_APPENDS):
        if n % 2 == 0:
            writer("add", batch=batch)
        else:
            # This process appends while the other's append is not in its view yet: it
            # catches up first, then appends in place (no load on either side).
            appended = reader._appender.in_place if reader._appender is not None else 0
            reader.add(NS, batch)
            assert reader._appender.in_place == appended + 1
        got = hits(reader, questions)
        fresh = memory(store_factory.location, fusion)
        want = hits(fresh, questions)
        same_hits(got, want)
        other = [writer("search", q=q) for q in questions]
        same_hits([[tuple(h) for h in o["hits"]] for o in other], want)
        assert other[-1]["loads"] == 1  # the writer too caught up with this process's appends
        fresh.store.close()
    assert loader.loads == 1 and loader.catch_ups >= 2
    # A deletion is not an append: the next search reads the namespace again, without the turn.
    writer("delete", turn="u3")
    got = hits(reader, questions)
    assert loader.loads == 2 and "u3" not in reader.view(NS).packets_by_id
    fresh = memory(store_factory.location, fusion)
    same_hits(got, hits(fresh, questions))
    fresh.store.close()
    # After the deletion the log explains appends again.
    writer("add", batch=[{"time": "2024-04-14 07:45", "id": "s3", "turns": [
        {"speaker": "user", "text": "The bilge stayed dry all week.", "id": "u7"}]}])
    hits(reader, questions)
    assert loader.loads == 2 and "u7" in reader.view(NS).packets_by_id
    # A forget elsewhere: nothing to search, and nothing of the namespace is kept here.
    writer("forget")
    with pytest.raises(ConfigError, match="no turns"):
        reader.search(NS, questions[0])
    assert not loader.remembered(NS) and reader.cached_view(NS) is None


def test_a_change_notice_catches_the_view_up_at_once(store_factory, writer_factory):
    """``follow_change`` (what a server does on PostgreSQL's NOTIFY): an append is caught up
    with before any search; a deletion drops the view and the remembered load."""
    from memcompile_local.views.catchup import follow_change

    reader = memory(store_factory.location, {})
    reader.add(NS, ASSISTANT)
    reader.view(NS)
    writer = writer_factory(store_factory.location, {})
    writer("view")
    writer("add", batch=ASSISTANT_APPENDS[0])
    store = reader.store
    assert follow_change(reader.views, reader.spec, store, reader.embedder, NS)
    held = reader.cached_view(NS, generation=store.generation(NS))
    assert held is not None and "u4" in held[0].packets_by_id
    writer("delete", turn="u1")
    assert not follow_change(reader.views, reader.spec, store, reader.embedder, NS)
    assert reader.cached_view(NS) is None and not reader.views.loader.remembered(NS)


# ------------------------------------------------------------------------------ the store's log

def conv(ns: str, start: int, n: int, session: int = 1) -> Conversation:
    turns = tuple(Turn(packet_id=f"t{start + i}", speaker="Ann", text=f"turn number {start + i}") for i in range(n))
    return Conversation(namespace=ns, sessions=(Session(index=session, session_id=f"s{session}", time="noon",
                                                        turns=turns),))


def claim(ns: str, pid: str, i: int = 0) -> Descriptor:
    return Descriptor(descriptor_id=f"{pid}#{i}", namespace=ns, packet_id=pid, claim_index=i, text=f"claim of {pid}",
                      speaker="Ann", session_index=1, session_time="noon", interaction_time="noon", n_tokens=3)


def test_every_write_is_logged_in_its_transaction_and_chained(store_factory):
    store = store_factory()
    store.ingest(conv("ns", 0, 3))
    g0 = store.generation("ns")
    store.ingest(conv("ns", 3, 2))
    store.save_extractions("ns", "set-a", [("t3", [claim("ns", "t3")]), ("t4", [])])
    store.save_extractions("ns", "set-b", [("t1", [claim("ns", "t1")])])
    store.save_embeddings("ns", "m", ["k"], np.ones((1, 4), np.float32))
    store.set_meta("ns", "note", "x")
    got = store.changes_since("ns", g0, after_ordinal=2, descriptor_set="set-a")
    assert got is not None and got.generation == store.generation("ns")
    kinds = [(s.kind, s.detail, s.first_ordinal, s.last_ordinal) for s in got.steps]
    assert kinds == [("append", "", 3, 4), ("extract", "set-a", 3, 4), ("extract", "set-b", 1, 1),
                     ("embed", "", None, None), ("meta", "", None, None)]
    assert [p.packet_id for p in got.packets] == ["t3", "t4"]
    assert [d.descriptor_id for d in got.descriptors] == ["t3#0"] and got.extracted == {"t3", "t4"}
    # Nothing since the current generation; a generation the log never had leads nowhere.
    now = store.changes_since("ns", got.generation, after_ordinal=4, descriptor_set="set-a")
    assert now is not None and now.steps == () and now.packets == ()
    assert store.changes_since("ns", g0 + 10_000, after_ordinal=4, descriptor_set="set-a") is None
    # Several writes in one transaction: one step on PostgreSQL, one per write on SQLite, all chained.
    before = store.generation("ns")
    with store.transaction():
        store.ingest(conv("ns", 5, 1))
        store.save_extractions("ns", "set-a", [("t5", [claim("ns", "t5")])])
    got = store.changes_since("ns", before, after_ordinal=4, descriptor_set="set-a")
    assert {s.kind for s in got.steps} == {"append", "extract"} and [p.packet_id for p in got.packets] == ["t5"]
    assert len({s.generation for s in got.steps}) == (1 if store_factory.backend == "postgres" else 2)
    # A deletion is logged; a forget deletes the log with the namespace.
    from memcompile_local.build.deletion import plan_turn_deletion

    before = store.generation("ns")
    store.delete_rows(plan_turn_deletion(store, "ns", "t5"))
    assert [s.kind for s in store.changes_since("ns", before, after_ordinal=4, descriptor_set="set-a").steps] == [
        "delete"]
    store.forget("ns")
    store.ingest(conv("ns", 0, 1))
    assert store.changes_since("ns", before, after_ordinal=-1, descriptor_set="set-a") is None
    other = store_factory()  # another connection (process) reads the same log
    assert other.changes_since("ns", store.generation("ns"), after_ordinal=0, descriptor_set="set-a").steps == ()
    # A Cell write names the Cells it changed (all of them: None), and the reader gets them as stored now.
    from memcompile_local.types import Cell

    cell = lambda i, title: Cell(i, (), 0, frozenset(), frozenset(), 1, 1, title)  # noqa: E731
    layout = [cell(0, "a"), cell(1, "b"), cell(2, "c")]
    whole = store.generation("ns")
    store.save_cells("ns", "L", layout)
    before = store.generation("ns")
    moved = [cell(0, "a"), cell(1, "b2"), cell(3, "d")]
    store.save_cells("ns", "L", moved, stored=layout)
    got = other.changes_since("ns", before, after_ordinal=0, descriptor_set="set-a", layout_id="L")
    assert got.steps[0].cell_ids == (1, 2, 3) and got.cell_ids == {1, 2, 3}
    assert got.cells == (cell(1, "b2"), cell(3, "d"))  # cell 2 is gone
    assert other.changes_since("ns", whole, after_ordinal=0, descriptor_set="set-a", layout_id="L").cell_ids is None
    assert other.changes_since("ns", before, after_ordinal=0, descriptor_set="set-a", layout_id="M").cell_ids == set()


def test_the_log_keeps_the_last_steps_and_an_older_view_is_read_whole(tmp_path, monkeypatch, writer_factory):
    monkeypatch.setattr(sqlite_store, "CHANGE_LOG_KEEP", 20)
    path = str(tmp_path / "m.sqlite")
    reader = memory(path, {})
    reader.add(NS, ASSISTANT)
    hits(reader, QUESTIONS["assistant"])
    store = reader.store
    for i in range(60):  # the older steps go
        store.set_meta("other", "k", str(i))
        store.set_meta(NS, "k", str(i))
    for ns in (NS, "other"):
        kept = store._conn.execute("SELECT COUNT(DISTINCT generation) FROM changes WHERE namespace = ?", (ns,))
        assert kept.fetchone()[0] == 20
    writer = writer_factory(path, {})
    writer("add", batch=ASSISTANT_APPENDS[0], in_place=False)
    writer("build")
    got = hits(reader, QUESTIONS["assistant"])
    assert reader.views.loader.loads == 2  # the view's generation is older than the log: read whole
    same_hits(got, hits(memory(path, {}), QUESTIONS["assistant"]))


def test_chain_steps_needs_every_step_from_the_view_s_generation():
    step = lambda g, p, kind="append": ChangeStep(g, p, kind)  # noqa: E731
    assert chain_steps(5, 5, []) == ()
    assert chain_steps(5, 9, [step(7, 5), step(9, 7)]) is not None
    assert chain_steps(5, 9, [step(7, 5), step(7, 5, "extract"), step(9, 7)]) is not None  # one step, two entries
    assert chain_steps(5, 9, [step(9, 7)]) is None  # the step 5 -> 7 is missing
    assert chain_steps(5, 9, [step(7, 5), step(9, 8)]) is None
    assert chain_steps(5, 11, [step(7, 5), step(9, 7)]) is None  # the log stops short of now
    assert chain_steps(5, 7, [step(7, 5), step(7, 6, "extract")]) is None  # entries of one step disagree
    assert chain_steps(5, 7, [step(7, None)]) is None  # the namespace was made again (after a forget)


# ------------------------------------------------------------------------------ old stores

def test_an_sqlite_store_without_the_log_is_upgraded_and_catches_up(tmp_path, writer_factory):
    path = tmp_path / "old.sqlite"
    mem = memory(str(path), {})
    mem.add(NS, ASSISTANT)
    mem.view(NS)
    mem.store.close()
    # What version 5 wrote: no change log.
    import sqlite3

    raw = sqlite3.connect(path)
    raw.executescript("DROP TABLE changes; PRAGMA user_version = 5;")
    raw.close()
    with pytest.raises(Exception, match="must be upgraded"):
        MemoryStore(path, read_only=True)
    reader = memory(str(path), {})  # opening it for writing upgrades it
    assert reader.store.stats()["schema_version"] == 6
    hits(reader, QUESTIONS["assistant"])
    writer = writer_factory(str(path), {})
    writer("view")
    writer("add", batch=ASSISTANT_APPENDS[0])
    got = hits(reader, QUESTIONS["assistant"])
    assert reader.views.loader.loads == 1 and reader.views.loader.catch_ups == 1
    same_hits(got, hits(memory(str(path), {}), QUESTIONS["assistant"]))


def test_a_postgres_store_without_the_log_is_upgraded_and_catches_up(pg_url, writer_factory):
    from test_store_postgres import raw

    mem = memory(pg_url, {})
    mem.add(NS, ASSISTANT)
    mem.store.close()
    raw(pg_url, "DROP TABLE changes", "DELETE FROM memcompile_schema WHERE version = 3")
    reader = memory(pg_url, {})
    assert raw(pg_url, "SELECT MAX(version) FROM memcompile_schema")[0] == [(3,)]
    hits(reader, QUESTIONS["assistant"])
    writer = writer_factory(pg_url, {})
    writer("view")
    writer("add", batch=ASSISTANT_APPENDS[0])
    got = hits(reader, QUESTIONS["assistant"])
    assert reader.views.loader.loads == 1 and reader.views.loader.catch_ups == 1
    same_hits(got, hits(memory(pg_url, {}), QUESTIONS["assistant"]))
    reader.store.close()


# ------------------------------------------------------------------------------ serve replicas

@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_serve_replica_catches_up_with_another_replica_s_appends(backend, tmp_path, request):
    """Two ``serve`` processes over one store: turns appended through one are searched through
    the other with the results a fresh load gives (a service made now in this process); the
    searching replica's log says it caught up and never loaded the user's view again."""
    import httpx

    from memcompile_local.service.core import MemoryService
    from _service_util import MODEL_FREE, start, write_config, write_keys

    location = (request.getfixturevalue("pg_server").fresh_database() if backend == "postgres"
                else str(tmp_path / "mem.sqlite"))
    key = "mcl_catchup-tenant-key-000000"
    keys = write_keys(tmp_path / "keys.yaml", {"acme": [(key, False)]})
    cfg = write_config(tmp_path / "run.yaml", MODEL_FREE)
    head = {"Authorization": f"Bearer {key}"}
    a = start(location, "--keys", str(keys), config=cfg, log=tmp_path / "a.log")
    b = start(location, "--keys", str(keys), "-vv", config=cfg, log=tmp_path / "b.log")
    try:
        with httpx.Client(base_url=a.url, headers=head, timeout=60) as ca, \
                httpx.Client(base_url=b.url, headers=head, timeout=60) as cb:
            first = [{"speaker": t["speaker"], "time": s["time"], "text": t["text"]} for s in ASSISTANT
                     for t in s["turns"]]
            assert ca.post("/v1/memories/hana/turns", json={"turns": first}).status_code == 200
            questions = QUESTIONS["assistant"]
            for q in questions:  # both replicas hold a view now
                assert ca.post("/v1/memories/hana/search", json={"query": q}).status_code == 200
                assert cb.post("/v1/memories/hana/search", json={"query": q}).status_code == 200
            for batch in ASSISTANT_APPENDS:
                turns = [{"speaker": t["speaker"], "time": s["time"], "text": t["text"]} for s in batch
                         for t in s["turns"]]
                assert ca.post("/v1/memories/hana/turns", json={"turns": turns}).status_code == 200
                got = [[(p["id"], p["score"]) for p in cb.post("/v1/memories/hana/search",
                                                                json={"query": q}).json()["packets"]]
                       for q in questions]
                fresh = MemoryService(location, PipelineConfig.from_dict(MODEL_FREE))
                try:
                    want = [[(p["id"], p["score"]) for p in fresh.search("acme", "hana", q)["packets"]]
                            for q in questions]
                finally:
                    fresh.close()
                same_hits(got, want)
                assert any(turns[-1]["text"] in p["text"] for p in cb.post(
                    "/v1/memories/hana/search", json={"query": turns[-1]["text"]}).json()["packets"])
    finally:
        a.stop()
        b.stop()
    log = b.log_text()
    assert log.count("caught up the view of") >= len(ASSISTANT_APPENDS)
    assert log.count("loaded the view of") == 1, log[-3000:]


def alternating_batches(n: int) -> list[list[dict]]:
    """``n`` one-turn appends to one session, each a different fact (my own fixture text)."""
    things = ["the jib sheet", "a bronze cleat", "the tiller", "two fenders", "the bilge pump", "a new compass",
              "the boom vang", "an anchor light"]
    return [[{"time": "2024-05-01 10:00", "id": "s5", "turns": [
        {"speaker": "user" if i % 2 else "assistant", "text": f"Step {i}: Tomas fitted {things[i % len(things)]}.",
         "id": f"alt{i}"}]}] for i in range(n)]


def test_appends_alternating_between_two_processes_place_cells_forward_without_reading_them(
        store_factory, writer_factory, monkeypatch):
    from memcompile_local.address.cells import PlacementState
    from memcompile_local.build.stages import layout_id
    from memcompile_local.views import append as append_module

    # Every placement that reads the stored Cells (the plain ways), by namespace.
    placed_whole: list[str] = []
    real = append_module.place_cells
    monkeypatch.setattr(append_module, "place_cells", lambda *a, **k: placed_whole.append(a[1]) or real(*a, **k))
    real_read = append_module.InPlaceAppend._place_read
    monkeypatch.setattr(append_module.InPlaceAppend, "_place_read",
                        lambda self, ns, ds: placed_whole.append(ns) or real_read(self, ns, ds))
    reader = memory(store_factory.location, {})
    reader.add(NS, ASSISTANT)
    reader.view(NS)
    writer = writer_factory(store_factory.location, {})
    writer("view")
    batches = alternating_batches(8)
    for i, batch in enumerate(batches):
        if i % 2:
            writer("add", batch=batch)
        else:
            reader.add(NS, batch)
    assert reader._appender.in_place == 4
    # Only the first append here placed the plain way (nothing known yet); after each of the
    # writer's appends the Cells were placed forward and checked against what it wrote.
    assert placed_whole == [NS]
    store = reader.store
    lid = layout_id(reader.spec.descriptor_set, reader.config.placement)
    scratch = PlacementState(reader.config.placement)
    scratch.place(store.descriptors(NS, reader.spec.descriptor_set))
    assert store.cells(NS, lid) == scratch.cells()
    same_hits(hits(reader, QUESTIONS["assistant"]), hits(memory(store_factory.location, {}), QUESTIONS["assistant"]))
    # Cells the log says were written otherwise than placing forward gives (another process's
    # own layout): the check finds it, and this append reads and places the plain way.
    writer("add", batch=alternating_batches(10)[9])
    other = store_factory()
    stored = other.cells(NS, lid)
    changed = [dataclasses.replace(stored[0], title=stored[0].title + " (renamed)"), *stored[1:]]
    other.save_cells(NS, lid, changed, stored=stored)
    reader.add(NS, [{"time": "2024-05-01 10:00", "id": "s5", "turns": [
        {"speaker": "user", "text": "Step 10: the varnish is dry.", "id": "alt10"}]}])
    assert placed_whole == [NS, NS] and reader._appender.in_place == 5
    # ... which places the new claims after the layout that is stored, not the one it expected.
    descriptors = store.descriptors(NS, reader.spec.descriptor_set)
    after_rename = PlacementState(reader.config.placement, changed, {d.descriptor_id: d for d in descriptors})
    after_rename.place([d for d in descriptors if d.packet_id == "alt10"])
    assert store.cells(NS, lid) == after_rename.cells()


def test_turns_another_process_stored_unbuilt_are_built_in_place(store_factory, writer_factory, monkeypatch):
    """A CLI ``ingest`` beside a process holding a view stores turns without building them; the
    holder's next search builds only those (claims, Cells, vectors, in one transaction) and
    grows its view: no whole build, no load, and what a fresh build and load give."""
    from memcompile_local import memory as memory_module

    reader = memory(store_factory.location, {})
    reader.add(NS, ASSISTANT)
    hits(reader, QUESTIONS["assistant"])
    monkeypatch.setattr(memory_module, "build_memory", lambda *a, **k: pytest.fail("a whole build ran"))
    writer = writer_factory(store_factory.location, {})
    for batch in ASSISTANT_APPENDS:
        writer("add", batch=batch, in_place=False)
        got = hits(reader, QUESTIONS["assistant"])
        monkeypatch.undo()
        fresh = memory(store_factory.location, {})
        same_hits(got, hits(fresh, QUESTIONS["assistant"]))
        same_view(reader.view(NS), fresh.view(NS))
        fresh.store.close()
        monkeypatch.setattr(memory_module, "build_memory", lambda *a, **k: pytest.fail("a whole build ran"))
    assert reader.views.loader.loads == 1 and reader._appender.built_in_place == len(ASSISTANT_APPENDS)
    # Its Cells are what a plain build places over every claim.
    from memcompile_local.address.cells import PlacementState
    from memcompile_local.build.stages import layout_id

    scratch = PlacementState(reader.config.placement)
    scratch.place(reader.store.descriptors(NS, reader.spec.descriptor_set))
    assert reader.store.cells(NS, layout_id(reader.spec.descriptor_set, reader.config.placement)) == scratch.cells()
