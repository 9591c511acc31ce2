"""Several ``serve`` replicas over one store (issue 22): every replica sees what any other one
acknowledged, tenants stay apart across replicas, and one user's concurrent appends through
different replicas are neither lost nor doubled.

The replicas are real processes on their own ports, each with its own view cache; the store
is whatever ``replica_store`` names: a SQLite file, then a PostgreSQL database (the same tests).
"""

from __future__ import annotations

import random
import re
import threading
from contextlib import ExitStack

import httpx
import pytest

from _service_util import MODEL_FREE, start, write_config, write_keys

pytestmark = pytest.mark.slow

KEYS = {"acme": "mcl_replica-acme-key-0000000", "globex": "mcl_replica-globex-key-111111"}
USERS = ["alex", "sam", "kim", "lee"]
TOPICS = ["hiking in the hills", "baking sourdough bread", "a trip to the coast", "learning the violin",
          "fixing an old bicycle", "planting tomatoes", "a new puppy", "a job interview"]
TAG = re.compile(r"\(ref (\w+)/(\w+)/(\d+)\)")
N_REPLICAS = 3
N_REQUESTS = 1000


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def replica_store(request, tmp_path_factory) -> str:
    if request.param == "postgres":
        return request.getfixturevalue("pg_server").fresh_database()
    return str(tmp_path_factory.mktemp("replicas") / "mem.sqlite")


@pytest.fixture(scope="module")
def replicas(replica_store, tmp_path_factory):
    d = tmp_path_factory.mktemp("replica-run")
    keys = write_keys(d / "keys.yaml", {t: [(k, False)] for t, k in KEYS.items()})
    cfg = write_config(d / "run.yaml", MODEL_FREE)
    with ExitStack() as stack:
        servers = []
        for i in range(N_REPLICAS):
            srv = start(replica_store, "--keys", str(keys), config=cfg, log=d / f"replica{i}.log")
            stack.callback(srv.stop)
            servers.append(srv)
        yield servers


def clients_for(servers, tenant: str) -> list[httpx.Client]:
    return [httpx.Client(base_url=s.url, headers={"Authorization": f"Bearer {KEYS[tenant]}"}, timeout=60)
            for s in servers]


def all_turns(c: httpx.Client, user: str) -> list[str]:
    out: list[str] = []
    offset = 0
    while offset is not None:
        r = c.get(f"/v1/memories/{user}/turns", params={"limit": 500, "offset": offset})
        assert r.status_code == 200, r.text
        out += [t["text"] for t in r.json()["turns"]]
        offset = r.json().get("next_offset")
    return out


def owner_of(text: str) -> tuple[str, str]:
    m = TAG.search(text)
    assert m, f"every stored text carries its reference tag: {text!r}"
    return m.group(1), m.group(2)


def test_tenants_stay_apart_across_replicas_and_a_forget_changes_no_one_else(replicas):
    rng = random.Random(4321)
    clients = {t: clients_for(replicas, t) for t in KEYS}
    written: dict[tuple[str, str], list[str]] = {}
    counter = 0

    def search(tenant: str, user: str, query: str, replica: int) -> list[str]:
        r = clients[tenant][replica].post(f"/v1/memories/{user}/search", json={"query": query, "k": 5})
        if (tenant, user) not in written:
            assert r.status_code == 404, r.text
            return []
        assert r.status_code == 200, r.text
        texts = [p["text"] for p in r.json()["packets"]]
        assert texts, f"replica {replica} found nothing for {tenant}/{user}"
        for t in texts:
            assert owner_of(t) == (tenant, user), f"replica {replica}: {tenant}/{user} got {t!r}"
        return texts

    try:
        for _ in range(N_REQUESTS):
            tenant, user = rng.choice(list(KEYS)), rng.choice(USERS)
            replica = rng.randrange(N_REPLICAS)
            c = clients[tenant][replica]
            op = rng.choices(["append", "search", "turns", "forget"], [45, 42, 10, 3])[0]
            if op == "append":
                turns = []
                for _ in range(rng.randint(1, 3)):
                    counter += 1
                    turns.append({"speaker": user.title(), "time": f"2024-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}",
                                  "text": f"I told you about {rng.choice(TOPICS)} (ref {tenant}/{user}/{counter})"})
                r = c.post(f"/v1/memories/{user}/turns", json={"turns": turns})
                assert r.status_code == 200, r.text
                written.setdefault((tenant, user), []).extend(t["text"] for t in turns)
            elif op == "search":
                search(tenant, user, f"what about {rng.choice(TOPICS)}?", replica)
            elif op == "turns":
                r = c.get(f"/v1/memories/{user}/turns", params={"limit": 500})
                if (tenant, user) in written:
                    assert [t["text"] for t in r.json()["turns"]] == written[(tenant, user)]
                else:
                    assert r.status_code == 404
            elif op == "forget" and (tenant, user) in written:
                probe = "what about a new puppy?"
                others = [key for key in written if key != (tenant, user)]
                before = {(key, i): search(*key, probe, i) for key in others for i in range(N_REPLICAS)}
                assert c.delete(f"/v1/memories/{user}").status_code == 200
                del written[(tenant, user)]
                for i in range(N_REPLICAS):  # gone on every replica at once, not only the one that forgot
                    assert clients[tenant][i].post(f"/v1/memories/{user}/search",
                                                   json={"query": probe}).status_code == 404
                after = {(key, i): search(*key, probe, i) for key in others for i in range(N_REPLICAS)}
                assert after == before, "forgetting one user changed another user's results on some replica"
        for key in written:
            for i in range(N_REPLICAS):
                search(*key, "tell me about the trip", i)
    finally:
        for cs in clients.values():
            for c in cs:
                c.close()
    assert len(written) >= 4


def test_every_acknowledged_append_is_found_by_a_search_on_every_replica(replicas):
    clients = clients_for(replicas, "acme")
    try:
        for n in range(12):
            origin = n % N_REPLICAS
            text = f"My locker code is number {n} of the gym list (ref acme/echo/{n})"
            r = clients[origin].post("/v1/memories/echo/turns", json={"speaker": "Echo", "text": text})
            assert r.status_code == 200, r.text
            for i in range(N_REPLICAS):
                got = [p["text"] for p in clients[i].post(
                    "/v1/memories/echo/search", json={"query": f"locker code number {n}", "k": 20}).json()["packets"]]
                assert text in got, f"replica {i} did not find what replica {origin} acknowledged"
    finally:
        for c in clients:
            c.close()


def test_concurrent_appends_of_one_user_on_different_replicas_neither_lose_nor_double(replicas):
    clients = clients_for(replicas, "globex")
    per_thread, threads = 20, 9
    acked: list[str] = []
    lock = threading.Lock()
    errors: list[str] = []

    def writer(w: int) -> None:
        c = clients[w % N_REPLICAS]
        for j in range(per_thread):
            text = f"Note {j} from writer {w} (ref globex/crowd/{w * 100 + j})"
            r = c.post("/v1/memories/crowd/turns", json={"speaker": "Crowd", "text": text})
            if r.status_code == 200:
                with lock:
                    acked.append(text)
            else:
                errors.append(f"{r.status_code} {r.text[:200]}")

    try:
        pool = [threading.Thread(target=writer, args=(w,)) for w in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        assert not errors, errors[:3]
        for c in clients:
            stored = all_turns(c, "crowd")
            assert sorted(stored) == sorted(acked) and len(stored) == per_thread * threads
    finally:
        for c in clients:
            c.close()


def test_a_replica_killed_during_appends_loses_no_acknowledged_turn_and_halves_no_batch(replicas, replica_store,
                                                                                       tmp_path):
    keys = write_keys(tmp_path / "keys.yaml", {t: [(k, False)] for t, k in KEYS.items()})
    victim = start(replica_store, "--keys", str(keys), config=write_config(tmp_path / "run.yaml", MODEL_FREE),
                   log=tmp_path / "victim.log")
    survivor = clients_for(replicas[:1], "acme")[0]
    doomed = httpx.Client(base_url=victim.url, headers={"Authorization": f"Bearer {KEYS['acme']}"}, timeout=30)
    acked: list[list[str]] = []
    sent: list[list[str]] = []
    stop = threading.Event()

    def writer(c: httpx.Client, w: int) -> None:
        n = 0
        while not stop.is_set():
            batch = [f"Batch {w}.{n} line {i} of the move plan (ref acme/mover/{w * 10000 + n * 10 + i})"
                     for i in range(3)]
            n += 1
            sent.append(batch)
            try:
                r = c.post("/v1/memories/mover/turns", json={"turns": [{"speaker": "Mo", "text": t} for t in batch]})
            except httpx.HTTPError:
                if c is doomed:
                    return  # the victim is gone
                raise
            if r.status_code == 200:
                acked.append(batch)

    pool = [threading.Thread(target=writer, args=(doomed, 0)), threading.Thread(target=writer, args=(survivor, 1))]
    try:
        for t in pool:
            t.start()
        deadline = threading.Event()
        while len(acked) < 20 and not deadline.wait(0.05):
            pass
        victim.kill()  # SIGKILL: no shutdown hook runs
        deadline.wait(1.0)
        stop.set()
        for t in pool:
            t.join(30)
        stored = all_turns(survivor, "mover")
        have = set(stored)
        assert len(have) == len(stored), "a turn was stored twice"
        missing = [line for batch in acked for line in batch if line not in have]
        assert not missing, f"{len(missing)} acknowledged turns lost, e.g. {missing[0]!r}"
        for batch in sent:  # each append is one transaction: all of its turns or none
            assert sum(line in have for line in batch) in (0, len(batch)), f"half-written batch {batch[0]!r}"
        assert any(b[0].startswith("Batch 0.") for b in acked), "the victim acknowledged nothing before it died"
    finally:
        stop.set()
        victim.kill()
        survivor.close()
        doomed.close()
