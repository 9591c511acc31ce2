"""Appends applied to the loaded view in place (memcompile_local/service/append.py).

In process: many threads appending to and searching one user at once never lose or duplicate
a turn, every acknowledged turn is found by the search that follows it, and the view the
service ends with equals one loaded from scratch. Over real HTTP: a server of two processes
(``--workers 2``) on one store, whose in-place views go stale whenever the other process
writes, still answers every search with every turn acknowledged before it. Group commit:
concurrent write jobs share one transaction, and a failing one is rolled back alone.
"""

from __future__ import annotations

import random
import threading

import httpx
import numpy as np
import pytest

from _service_util import MODEL_FREE, running, write_config
from memcompile_local.adapters.scripted import HashEmbedder
from memcompile_local.config import PipelineConfig
from memcompile_local.pipeline.presets import apply_preset
from memcompile_local.memory import Memory
from memcompile_local.service.auth import LOCAL_TENANT
from memcompile_local.service.core import MemoryService
from memcompile_local.store.group_commit import GroupCommit
from memcompile_local.store import MemoryStore
from memcompile_local.types import Conversation, Session, Turn

SEED = {"time": "2024-03-01 10:00", "id": "s1", "turns": [
    {"speaker": "Mara", "text": f"I repotted the {plant} on the balcony", "id": f"p{i}"}
    for i, plant in enumerate(["fern", "basil", "lemon tree", "cactus", "orchid", "mint"])]}


def build_queue(store: MemoryStore) -> MemoryStore:
    """The store as its own build queue (``BuildLeases``), with the queue's tables created."""
    store.open_build_queue()
    return store


def test_concurrent_appends_and_searches_on_one_user_never_lose_or_duplicate_a_turn(tmp_path):
    cfg = apply_preset("model-free", PipelineConfig()).replace(model={"embedder": "hash"})
    svc = MemoryService(str(tmp_path / "m.sqlite"), cfg, embedder=HashEmbedder(dim=64))
    svc.add_turns(LOCAL_TENANT, "u", {"sessions": [SEED]})
    svc.search(LOCAL_TENANT, "u", "warm up")
    svc.wait_warm()
    errors: list[str] = []
    acked: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(6)

    def writer(w: int) -> None:
        barrier.wait()
        for i in range(12):
            word = f"zq{w}x{i}"
            # Some turns go to the open session, some to a new one, one is sent twice (a retry:
            # of a timed turn, since a turn without a time is always a new turn).
            body = {"speaker": "Jon" if i % 2 else "Mara", "text": f"the {word} is in the shed",
                    "session_id": f"w{w}" if i % 3 else "s1", "time": "" if i % 3 else "2024-03-01 10:00"}
            r = svc.add_turns(LOCAL_TENANT, "u", body)
            if i == 6:
                again = svc.add_turns(LOCAL_TENANT, "u", body)
                if again["added"] != 0 or again["ids"] != r["ids"]:
                    errors.append(f"retry of {word} added {again['added']}")
            with lock:
                acked.extend(r["ids"])
            got = svc.search(LOCAL_TENANT, "u", f"where is the {word}?")
            if not any(word in p["text"] for p in got["packets"]):
                errors.append(f"{word} not found right after its append")

    def reader() -> None:
        barrier.wait()
        rng = random.Random(3)
        for _ in range(30):
            got = svc.search(LOCAL_TENANT, "u", f"what about the {rng.choice(['fern', 'mint', 'shed'])}?")
            ids = [p["id"] for p in got["packets"]]
            if len(ids) != len(set(ids)):
                errors.append(f"a search returned a turn twice: {ids}")

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)] + [
        threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert svc.appender.in_place > 0  # the path under test ran
    ns = svc.namespace(LOCAL_TENANT, "u")
    stored = [p.packet_id for p in svc.store.packets(ns)]
    assert len(stored) == len(set(stored)) == 6 + 48
    assert set(acked) <= set(stored) and len(set(acked)) == 48
    # The view the service serves now is the view a fresh load makes.
    held = svc.memory.cached_view(ns, generation=svc.store.generation(ns))
    view = held[0] if held is not None else svc.memory.view(ns)
    scratch = Memory(svc.store, cfg, embedder=HashEmbedder(dim=64)).view(ns)
    assert [p.packet_id for p in view.packets] == stored == [p.packet_id for p in scratch.packets]
    assert np.array_equal(view.packet_matrix, scratch.packet_matrix)
    assert np.array_equal(view.fusion.context_matrix, scratch.fusion.context_matrix)
    svc.close()


@pytest.mark.slow
def test_two_server_processes_on_one_store_serve_every_acknowledged_turn(tmp_path):
    cfg = write_config(tmp_path / "run.yaml", MODEL_FREE)
    with running(tmp_path / "m.sqlite", "--workers", "2", config=cfg) as srv:
        url = f"{srv.url}/v1/memories/u"
        httpx.post(f"{url}/turns", json={"sessions": [SEED]}, timeout=60).raise_for_status()
        errors: list[str] = []
        acked: list[str] = []
        lock = threading.Lock()

        def client(c: int) -> None:
            # Each client keeps one connection (one server process); the two processes write
            # the same user in turn, so each one's in-place view goes stale under the other.
            with httpx.Client(timeout=60) as http:
                for i in range(10):
                    word = f"zz{c}y{i}"
                    r = http.post(f"{url}/turns", json={"speaker": "Mara", "text": f"the {word} is in the shed"})
                    assert r.status_code == 200, r.text
                    with lock:
                        acked.extend(r.json()["ids"])
                    got = http.post(f"{url}/search", json={"query": f"where is the {word}?"}).json()
                    if not any(word in p["text"] for p in got["packets"]):
                        errors.append(f"{word} not found right after its append")

        threads = [threading.Thread(target=client, args=(c,)) for c in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        turns = httpx.get(f"{url}/turns", params={"limit": 500}, timeout=60).json()
        ids = [t["id"] for t in turns["turns"]]
        assert len(ids) == len(set(ids)) == 6 + 40 and set(acked) <= set(ids)


def test_group_commit_runs_concurrent_jobs_in_one_transaction_and_rolls_back_a_failing_one_alone(tmp_path):
    store = MemoryStore(tmp_path / "m.sqlite")
    commits = GroupCommit(store)
    first_running = threading.Event()
    release_first = threading.Event()

    def job(ns: str, fail: bool = False, hold: bool = False):
        def write():
            store.ingest(Conversation(namespace=ns, sessions=(Session(index=1, session_id="s", time="", turns=(
                Turn(packet_id="t1", speaker="A", text=f"hello from {ns}"),)),)))
            if hold:
                first_running.set()
                release_first.wait(10)
            if fail:
                raise ValueError(f"{ns} fails after its write")
            return store.generation(ns)
        return write

    results: dict[str, object] = {}

    def call(ns: str, **kw) -> None:
        try:
            results[ns] = commits.run(job(ns, **kw))
        except ValueError as exc:
            results[ns] = exc

    head = threading.Thread(target=call, args=("a",), kwargs={"hold": True})
    head.start()
    assert first_running.wait(10)
    # While "a" holds the commit turn, three more queue up: they run together in the next batch.
    rest = [threading.Thread(target=call, args=(ns,), kwargs={"fail": ns == "c"}) for ns in ("b", "c", "d")]
    for t in rest:
        t.start()
    while len(commits._pending) < 3:
        threading.Event().wait(0.01)
    release_first.set()
    for t in [head, *rest]:
        t.join()
    assert commits.batches == 2 and commits.jobs == 4
    assert isinstance(results["c"], ValueError) and store.packet_count("c") == 0  # rolled back alone
    for ns in ("a", "b", "d"):
        assert store.packet_count(ns) == 1 and results[ns] == store.generation(ns)
    store.close()


def test_an_append_while_another_process_holds_the_build_lease_is_not_applied_in_place(tmp_path):
    # The service's appender declines while another process holds the user's build lease; the
    # plain path that follows must not append in place through Memory.add's own appender
    # (which has no lease check) either: the turn is stored and built the plain way.
    path = tmp_path / "m.sqlite"
    cfg = apply_preset("model-free", PipelineConfig()).replace(model={"embedder": "hash"})
    svc = MemoryService(str(path), cfg, embedder=HashEmbedder(dim=64))
    svc.add_turns(LOCAL_TENANT, "u", {"sessions": [SEED]})
    svc.search(LOCAL_TENANT, "u", "warm up")
    svc.wait_warm()
    ns = svc.namespace(LOCAL_TENANT, "u")
    other = MemoryStore(path)
    assert build_queue(other).acquire(ns, "other-process", lease_s=60)
    release = threading.Timer(0.3, lambda: build_queue(other).release(ns, "other-process"))
    release.start()
    before_service = svc.appender.in_place
    r = svc.add_turns(LOCAL_TENANT, "u", {"speaker": "Jon", "text": "the zqlease kite is in the attic"})
    release.join()
    assert r["added"] == 1
    assert svc.appender.in_place == before_service
    assert svc.memory._appender is None or svc.memory._appender.in_place == 0
    got = svc.search(LOCAL_TENANT, "u", "where is the zqlease kite?")
    assert any("zqlease" in p["text"] for p in got["packets"])
    other.close()
    svc.close()
