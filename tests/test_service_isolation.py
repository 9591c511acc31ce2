"""Tenant isolation under load: 1,000+ random interleaved requests of two tenants on one server.

Both tenants use the same user ids and near-identical texts (each turn carries a reference tag
naming its tenant, user and number, so a leaked turn is recognisable). Every response is checked
against a model of what each (tenant, user) wrote; a forget of one user must leave every other
user's search results unchanged. A second server process on the same store file must see the
same memories (and none that were forgotten through the first).
"""

from __future__ import annotations

import random
import re

import httpx
import pytest

from _service_util import MODEL_FREE, running, start, write_config, write_keys

pytestmark = pytest.mark.slow

KEYS = {"acme": "mcl_isolation-acme-key-000000", "globex": "mcl_isolation-globex-key-11111"}
USERS = ["alex", "sam", "kim", "lee", "robin"]
TOPICS = ["hiking in the hills", "baking sourdough bread", "a trip to the coast", "learning the violin",
          "fixing an old bicycle", "planting tomatoes", "a new puppy", "a job interview"]
TAG = re.compile(r"\(ref (\w+)/(\w+)/(\d+)\)")
N_REQUESTS = 1000


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("isolation")
    keys = write_keys(d / "keys.yaml", {t: [(k, False)] for t, k in KEYS.items()})
    cfg = write_config(d / "run.yaml", MODEL_FREE)
    with running(d / "mem.sqlite", "--keys", str(keys), config=cfg) as srv:
        yield srv, d, keys, cfg


def owner_of(text: str) -> tuple[str, str]:
    m = TAG.search(text)
    assert m, f"every stored text carries its reference tag: {text!r}"
    return m.group(1), m.group(2)


def test_two_tenants_never_see_each_other(setup):
    srv, *_ = setup
    rng = random.Random(1234)
    clients = {t: httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {k}"}, timeout=60)
               for t, k in KEYS.items()}
    written: dict[tuple[str, str], list[str]] = {}
    counter = 0
    checked = 0

    def search(tenant: str, user: str, query: str) -> list[str]:
        r = clients[tenant].post(f"/v1/memories/{user}/search", json={"query": query, "k": 5})
        if (tenant, user) not in written:
            assert r.status_code == 404, r.text
            return []
        assert r.status_code == 200, r.text
        texts = [p["text"] for p in r.json()["packets"]]
        for t in texts:
            assert owner_of(t) == (tenant, user), f"{tenant}/{user} got {t!r}"
        assert r.json()["context"].count("(ref ") == len(texts)
        assert all(f"(ref {tenant}/{user}/" in line for line in r.json()["context"].splitlines() if "(ref " in line)
        return texts

    try:
        for step in range(N_REQUESTS):
            tenant = rng.choice(list(KEYS))
            user = rng.choice(USERS)
            c = clients[tenant]
            op = rng.choices(["append", "search", "stats", "list", "turns", "forget"], [40, 40, 6, 5, 7, 2])[0]
            if op == "append":
                turns = []
                for _ in range(rng.randint(1, 3)):
                    counter += 1
                    topic = rng.choice(TOPICS)
                    turns.append({"speaker": user.title(), "time": f"2024-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}",
                                  "text": f"I told you about {topic} (ref {tenant}/{user}/{counter})"})
                r = c.post(f"/v1/memories/{user}/turns", json={"turns": turns})
                assert r.status_code == 200, r.text
                written.setdefault((tenant, user), []).extend(t["text"] for t in turns)
            elif op == "search":
                search(tenant, user, f"what about {rng.choice(TOPICS)}?")
            elif op == "stats":
                r = c.get(f"/v1/memories/{user}")
                if (tenant, user) in written:
                    assert r.json()["turns"] == len(written[(tenant, user)])
                else:
                    assert r.status_code == 404
            elif op == "list":
                users = c.get("/v1/memories", params={"limit": 500}).json()["users"]
                assert users == sorted(u for (t, u) in written if t == tenant)
            elif op == "turns":
                r = c.get(f"/v1/memories/{user}/turns", params={"limit": 500})
                if (tenant, user) in written:
                    assert [t["text"] for t in r.json()["turns"]] == written[(tenant, user)]
                else:
                    assert r.status_code == 404
            elif op == "forget" and (tenant, user) in written:
                probe = "what about a new puppy?"
                before = {key: search(*key, probe) for key in written if key != (tenant, user)}
                assert c.delete(f"/v1/memories/{user}").status_code == 200
                del written[(tenant, user)]
                after = {key: search(*key, probe) for key in written}
                assert after == before, "forgetting one user changed another user's results"
                checked += len(after)
            checked += 1
        # A final sweep: every user of both tenants, one search each.
        for key in written:
            search(*key, "tell me about the trip")
    finally:
        for c in clients.values():
            c.close()
    assert checked >= N_REQUESTS and len(written) >= 6


def test_a_second_server_process_on_the_same_store_is_never_stale(setup):
    srv, d, keys, cfg = setup
    h = {"Authorization": f"Bearer {KEYS['acme']}"}
    other = start(d / "mem.sqlite", "--keys", str(keys), config=cfg)
    try:
        one = httpx.Client(base_url=srv.url, headers=h, timeout=60)
        two = httpx.Client(base_url=other.url, headers=h, timeout=60)
        one.post("/v1/memories/shared/turns", json={"speaker": "Ivy", "text": "I collect stamps (ref acme/shared/1)"}
                 ).raise_for_status()
        assert two.post("/v1/memories/shared/search", json={"query": "stamps"}).json()["packets"][0]["text"].startswith(
            "I collect stamps")
        two.post("/v1/memories/shared/turns", json={"speaker": "Ivy", "text": "and old coins (ref acme/shared/2)"}
                 ).raise_for_status()
        got = [p["text"] for p in one.post("/v1/memories/shared/search", json={"query": "coins"}).json()["packets"]]
        assert "and old coins (ref acme/shared/2)" in got
        # Forget through process two; process one must not answer from its cached view.
        assert two.delete("/v1/memories/shared").status_code == 200
        assert one.post("/v1/memories/shared/search", json={"query": "stamps"}).status_code == 404
        # Same name, same turn count, other content: still no stale view.
        two.post("/v1/memories/shared/turns", json={"turns": [
            {"speaker": "Ivy", "text": "I collect shells (ref acme/shared/3)"},
            {"speaker": "Ivy", "text": "and sea glass (ref acme/shared/4)"}]}).raise_for_status()
        got = [p["text"] for p in one.post("/v1/memories/shared/search", json={"query": "stamps"}).json()["packets"]]
        assert sorted(got) == ["I collect shells (ref acme/shared/3)", "and sea glass (ref acme/shared/4)"]
        one.close()
        two.close()
    finally:
        other.stop()
