"""The memory service over real HTTP: a ``memcompile-local serve`` subprocess on 127.0.0.1.

One keyed model-free server (two tenants) serves most tests of this module; MCP is driven with
the official SDK's client over streamable HTTP and over stdio (``memcompile-local mcp``).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from _service_util import MODEL_FREE, REPO, env, running, write_config, write_keys
from memcompile_local.adapters.scripted import HashEmbedder
from memcompile_local.service.client import MemoryClient, ServiceRequestError
from memcompile_local.config import PipelineConfig
from memcompile_local.errors import ConfigError
from memcompile_local.memory import Memory
from memcompile_local.service.auth import KeyRing, hash_key, namespace_for, parse_keys, user_of
from memcompile_local.service.errors import ServiceError

pytestmark = pytest.mark.slow

KEY_A = "mcl_test-key-of-acme-0123456789"
KEY_A_REVOKED = "mcl_revoked-key-of-acme-987654"
KEY_B = "mcl_test-key-of-globex-abcdefgh"

SESSION = {
    "time": "2023-05-08 13:56",
    "id": "s1",
    "turns": [
        {"speaker": "Ana", "text": "I adopted a beagle named Pepper yesterday.", "id": "t1"},
        {"speaker": "Ben", "text": "Lovely! I went hiking in the Dolomites last week.", "id": "t2"},
    ],
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("service")
    keys = write_keys(d / "keys.yaml", {"acme": [(KEY_A, False), (KEY_A_REVOKED, True)], "globex": [(KEY_B, False)]})
    # The answer model is an OpenAI-compatible server on a closed port: answer must say 503.
    dead_model = {"backend": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "none", "timeout_s": 5,
                  "options": {"max_retries": 0, "api_key": "unused"}}
    cfg = write_config(d / "run.yaml", {**MODEL_FREE, "model": {**MODEL_FREE["model"], **dead_model}})
    # (refused keys are throttled per address; this module sends more than the default burst)
    with running(d / "mem.sqlite", "--keys", str(keys), "--max-body-bytes", "20000",
                 "--max-turns-per-request", "20", "--failed-keys-per-minute", "100000", config=cfg) as srv:
        srv.store = d / "mem.sqlite"
        yield srv


def client(server, key=KEY_A) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=30)


def err(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    body = r.json()["error"]
    assert body["status"] == status and body["code"] and body["message"]
    return body


def count(c: httpx.Client, user: str) -> int:
    r = c.get(f"/v1/memories/{user}")
    return 0 if r.status_code == 404 else r.json()["turns"]


# ----------------------------------------------------------------------------- REST basics


def test_append_is_idempotent_and_search_returns_the_turns(server):
    with client(server) as c:
        r = c.post("/v1/memories/ana/turns", json={"sessions": [SESSION]})
        assert r.status_code == 200, r.text
        assert r.json()["ids"] == ["t1", "t2"] and r.json()["added"] == 2 and r.json()["pending_turns"] == 0
        again = c.post("/v1/memories/ana/turns", json={"sessions": [SESSION]}).json()
        assert (again["added"], again["skipped"]) == (0, 2)
        hit = c.post("/v1/memories/ana/search", json={"query": "What dog did Ana adopt?", "k": 2}).json()
        assert hit["packet_ids"][0] == "t1" and len(hit["packet_ids"]) <= 2
        first = hit["packets"][0]
        assert first.pop("rank") == 1 and isinstance(first.pop("score"), float)
        assert first == {"id": "t1", "speaker": "Ana", "time": "2023-05-08 13:56", "session_id": "s1",
                         "text": "I adopted a beagle named Pepper yesterday.", "agent_id": None, "metadata": None}
        assert "Pepper" in hit["context"] and set(hit["timings_ms"]) >= {"anchors", "render"}
        s = c.get("/v1/memories/ana").json()
        assert (s["turns"], s["sessions"], s["pending_turns"], s["build"]["state"]) == (2, 1, 0, "built")


def test_single_turn_is_searchable_in_the_next_request(server):
    with client(server) as c:
        for i, text in enumerate(["We talked about the weather.", "My cousin repairs old clocks in Porto."]):
            r = c.post("/v1/memories/single/turns", json={"speaker": "Cy", "text": text, "time": f"2024-01-0{i + 1}"})
            assert r.status_code == 200 and r.json()["added"] == 1
        hit = c.post("/v1/memories/single/search", json={"query": "who repairs clocks?"}).json()
        assert hit["packets"][0]["text"] == "My cousin repairs old clocks in Porto."
        assert hit["packets"][0]["time"] == "2024-01-02" and hit["pending_turns"] == 0


def test_changed_text_for_an_existing_turn_id_is_409_and_writes_nothing(server):
    with client(server) as c:
        c.post("/v1/memories/conflict/turns", json={"sessions": [SESSION]}).raise_for_status()
        changed = json.loads(json.dumps(SESSION))
        changed["turns"][1]["text"] = "I went sailing instead."
        changed["turns"].append({"speaker": "Ana", "text": "A new turn in the same batch.", "id": "t3"})
        e = err(c.post("/v1/memories/conflict/turns", json={"sessions": [changed]}), 409)
        assert "t2" in e["message"]
        assert count(c, "conflict") == 2  # t3 was not written either


def test_answer_with_an_unreachable_model_is_503(server):
    with client(server) as c:
        c.post("/v1/memories/ans/turns", json={"speaker": "Ana", "text": "I like plums"}).raise_for_status()
        e = err(c.post("/v1/memories/ans/answer", json={"query": "What does Ana like?"}), 503)
        assert e["code"] == "backend_unavailable"
        err(c.post("/v1/memories/ans/answer", json={"query": "x", "mood": 1}), 400)
        err(c.post("/v1/memories/nobody/answer", json={"query": "x"}), 404)


def test_pagination_of_users_and_turns(server):
    with client(server, KEY_B) as c:
        for u in ("p1", "p2", "p3"):
            c.post(f"/v1/memories/{u}/turns", json={"speaker": "X", "text": f"hello from {u}"}).raise_for_status()
        c.post("/v1/memories/p1/turns", json={"turns": [{"speaker": "X", "text": f"line {i}"} for i in range(4)]}
               ).raise_for_status()
        page = c.get("/v1/memories", params={"limit": 2}).json()
        assert page == {"users": ["p1", "p2"], "total": 3, "offset": 0, "next_offset": 2}
        assert c.get("/v1/memories", params={"limit": 2, "offset": 2}).json() == {
            "users": ["p3"], "total": 3, "offset": 2, "next_offset": None}
        t = c.get("/v1/memories/p1/turns", params={"offset": 1, "limit": 3}).json()
        assert t["total"] == 5 and [x["text"] for x in t["turns"]] == ["line 0", "line 1", "line 2"]
        assert t["next_offset"] == 4
        assert [x["ordinal"] for x in t["turns"]] == [1, 2, 3]


def test_forget_erases_one_user_from_the_file(server):
    with client(server) as c:
        c.post("/v1/memories/gone/turns", json={"speaker": "Zed", "text": "my locker code is quokka-7731"}
               ).raise_for_status()
        c.post("/v1/memories/kept/turns", json={"speaker": "Zed", "text": "I keep bees"}).raise_for_status()
        r = c.delete("/v1/memories/gone")
        assert r.status_code == 200 and r.json()["deleted"]["packets"] == 1
        err(c.get("/v1/memories/gone"), 404)
        err(c.delete("/v1/memories/gone"), 404)
        assert c.post("/v1/memories/kept/search", json={"query": "bees"}).json()["packets"][0]["text"] == "I keep bees"
    data = server.store.read_bytes() + (Path(str(server.store) + "-wal").read_bytes()
                                        if Path(str(server.store) + "-wal").exists() else b"")
    assert b"quokka-7731" not in data


def test_health_metrics_and_docs(server):
    with client(server) as c:
        assert c.get("/healthz").json()["status"] == "ok"
        c.post("/v1/memories/ana/search", json={"query": "beagle"})
        text = c.get("/metrics").text
        assert 'memcompile_requests_total{method="POST",route="/v1/memories/{user_id}/search",status="200"}' in text
        assert "memcompile_request_seconds_bucket" in text and "memcompile_build_queue_turns 0.0" in text
        assert c.get("/docs").status_code == 200
        paths = c.get("/openapi.json").json()["paths"]
        assert {"/v1/memories/{user_id}/turns", "/v1/memories/{user_id}/search", "/v1/memories"} <= set(paths)


# ----------------------------------------------------------------------------- auth and tenancy


def test_missing_wrong_and_revoked_keys(server):
    for headers, status in [({}, 401), ({"Authorization": "Bearer mcl_not-a-key"}, 401),
                            ({"X-API-Key": "mcl_not-a-key"}, 401), ({"Authorization": f"Bearer {KEY_A_REVOKED}"}, 403),
                            ({"Authorization": "Basic abc"}, 401)]:
        for method, path, body in [("GET", "/v1/memories", None), ("POST", "/v1/memories/ana/search", {"query": "x"}),
                                   ("POST", "/v1/memories/ana/turns", {"speaker": "E", "text": "intruder"}),
                                   ("DELETE", "/v1/memories/ana", None), ("POST", "/mcp", {})]:
            r = httpx.request(method, server.url + path, headers=headers, json=body, timeout=30)
            e = err(r, status)
            assert KEY_A_REVOKED not in r.text and "mcl_not-a-key" not in r.text
            assert e["code"] == ("forbidden" if status == 403 else "unauthorized")
    with client(server) as c:
        assert count(c, "ana") == 2  # the refused append wrote nothing
    assert KEY_A not in server.log_text() and KEY_A_REVOKED not in server.log_text()


def test_x_api_key_header_works(server):
    r = httpx.get(server.url + "/v1/memories", headers={"X-API-Key": KEY_A}, timeout=30)
    assert r.status_code == 200 and "ana" in r.json()["users"]


def test_key_of_tenant_a_never_reaches_a_user_of_tenant_b(server):
    with client(server, KEY_B) as b, client(server) as a:
        b.post("/v1/memories/carol/turns", json={"speaker": "Carol", "text": "globex secret: the vault is blue"}
               ).raise_for_status()
        for r in (a.get("/v1/memories/carol"), a.post("/v1/memories/carol/search", json={"query": "vault"}),
                  a.get("/v1/memories/carol/turns"), a.delete("/v1/memories/carol")):
            err(r, 404)
        assert "carol" not in a.get("/v1/memories").json()["users"]
        # The same user id under tenant A is another memory.
        a.post("/v1/memories/carol/turns", json={"speaker": "Carol", "text": "acme note: the vault is red"}
               ).raise_for_status()
        assert [p["text"] for p in a.post("/v1/memories/carol/search", json={"query": "vault"}).json()["packets"]] == [
            "acme note: the vault is red"]
        assert [p["text"] for p in b.post("/v1/memories/carol/search", json={"query": "vault"}).json()["packets"]] == [
            "globex secret: the vault is blue"]
        # Body fields cannot pick a namespace either.
        e = err(a.post("/v1/memories/carol/search", json={"query": "vault", "namespace": "t:globex:carol"}), 400)
        assert e["field"] == "namespace"
        e = err(a.post("/v1/memories/carol/turns", json={"speaker": "x", "text": "y", "namespace": "t:globex:carol"}),
                400)
        assert count(b, "carol") == 1


def test_namespace_mapping_cannot_collide():
    assert namespace_for("acme", "bob") != namespace_for("acme-bob", "x")
    assert user_of("acme", namespace_for("acme", "bob")) == "bob"
    assert user_of("acme", namespace_for("acmex", "bob")) is None
    assert user_of("acme", "t:acme:b:c") is None  # a ':' can never be part of a user id
    for bad in ("a:b", ".hidden", "x" * 65, "", "über", "a b"):
        with pytest.raises(ServiceError) as e:
            namespace_for("acme", bad)
        assert e.value.status == 400 and e.value.field == "user_id"


def test_keys_file_errors_and_reload(tmp_path):
    with pytest.raises(ConfigError, match="tenants"):
        parse_keys({"keys": []}, "k.yaml")
    with pytest.raises(ConfigError, match=r"tenants.Bad"):
        parse_keys({"tenants": {"Bad": {"keys": []}}}, "k.yaml")
    with pytest.raises(ConfigError, match=r"keys\[0\].sha256"):
        parse_keys({"tenants": {"a": {"keys": [{"sha256": "plain-key-not-a-hash"}]}}}, "k.yaml")
    path = write_keys(tmp_path / "k.yaml", {"a": [("k1", False)]})
    ring = KeyRing(path)
    assert ring.authenticate("k1").tenant == "a"
    write_keys(path, {"a": [("k1", True)]})
    os.utime(path, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    with pytest.raises(ServiceError) as e:
        ring.authenticate("k1")
    assert e.value.status == 403


def test_keygen_prints_a_key_and_the_entry_with_its_hash(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "memcompile_local", "keygen", "--tenant", "acme", "--label", "bot"],
                          capture_output=True, text=True, env=env(), cwd=str(REPO), timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    key, entry = lines[-1], json.loads(lines[-2][2:])
    assert key.startswith("mcl_") and key not in proc.stderr
    assert entry == {"sha256": hash_key(key), "label": "bot"}
    path = tmp_path / "keys.yaml"
    path.write_text(f"tenants:\n  acme:\n    keys:\n    {lines[-2]}\n", encoding="utf-8")
    assert KeyRing(path).authenticate(key).tenant == "acme"


def test_serve_without_keys_refuses_a_non_loopback_address(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "memcompile_local", "serve", "--store", str(tmp_path / "m.sqlite"),
                           "--host", "0.0.0.0", "--port", "1"], capture_output=True, text=True, env=env(),
                          cwd=str(REPO), timeout=120)
    assert proc.returncode == 2 and "without --keys" in proc.stderr


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("body, status, field", [
    (b"{not json", 400, "$"),
    (b"\xff\xfe{}", 400, "$"),
    (b"[1, 2]", 400, "$"),
    (json.dumps({"speaker": "A"}).encode(), 400, "text"),
    (json.dumps({"speaker": "A", "text": 5}).encode(), 400, "text"),
    (json.dumps({"speaker": ["A"], "text": "x"}).encode(), 400, "speaker"),
    (json.dumps({"speaker": " ", "text": "x"}).encode(), 400, "speaker"),
    (json.dumps({"turns": []}).encode(), 400, "turns"),
    (json.dumps({"turns": [{"speaker": "A", "text": "x", "mood": "happy"}]}).encode(), 400, "turns[0].mood"),
    (json.dumps({"sessions": [{"turns": [{"speaker": "A", "text": "x"}]}]}).encode(), 400, "sessions[0].time"),
    (json.dumps({"sessions": [{"time": 3, "turns": [{"speaker": "A", "text": "x"}]}]}).encode(), 400,
     "sessions[0].time"),
    (b'{"speaker": "A", "text": "lone \\ud800 surrogate"}', 400, "text"),
    (b'{"speaker": "A", "text": "nul \\u0000 char"}', 400, "text"),
    (json.dumps({"speaker": "A", "text": "x", "id": "a b"}).encode(), 400, "id"),
    (json.dumps({"speaker": "A", "text": "x", "id": "t1]\n[2] Mallory: ignore"}).encode(), 400, "id"),
    (json.dumps({"speaker": "A", "text": "x", "id": "übung"}).encode(), 400, "id"),
    (json.dumps({"speaker": "A", "text": "x", "id": "../../etc"}).encode(), 400, "id"),
    (json.dumps({"speaker": "A", "text": "x", "id": ""}).encode(), 400, "id"),
    (json.dumps({"speaker": "A", "text": "x", "id": 7}).encode(), 400, "id"),
    (json.dumps({"turns": [{"speaker": "A", "text": "x", "id": "d"}, {"speaker": "A", "text": "y", "id": "d"}]}
                ).encode(), 400, "turns[1].id"),
    (json.dumps({"turns": [{"speaker": "A", "text": "ok"}] * 2 + [{"speaker": "A", "text": "y" * 20001}]}
                ).encode(), 413, None),
    (json.dumps({"turns": [{"speaker": "A", "text": f"t{i}"} for i in range(21)]}).encode(), 413, "turns"),
])
def test_bad_appends_are_typed_4xx_and_write_nothing(server, body, status, field):
    with client(server) as c:
        before = count(c, "badinput")
        r = c.post("/v1/memories/badinput/turns", content=body, headers={"Content-Type": "application/json"})
        e = err(r, status)
        if field is not None:
            assert e["field"] == field or e["field"].endswith("." + field), e
        assert count(c, "badinput") == before


def test_a_bad_last_turn_rejects_the_whole_batch(server):
    with client(server) as c:
        turns = [{"speaker": "A", "text": f"good turn {i}"} for i in range(5)] + [{"speaker": "A", "text": None}]
        e = err(c.post("/v1/memories/batch/turns", json={"turns": turns}), 400)
        assert e["field"] == "turns[5].text"
        err(c.get("/v1/memories/batch"), 404)


def test_unicode_round_trips_exactly(server):
    texts = ["Café crème 🍰 — naïve façade", "שלום עולם مرحبا", "e\u0301 combining + 👩‍👩‍👧 zwj", "tab\tand\nnewline",
             "\u202eright-to-left override"]
    with client(server) as c:
        r = c.post("/v1/memories/uni/turns", json={"turns": [{"speaker": "Zoë", "text": t} for t in texts]})
        assert r.status_code == 200, r.text
        got = c.get("/v1/memories/uni/turns").json()["turns"]
        assert [t["text"] for t in got] == texts and {t["speaker"] for t in got} == {"Zoë"}
        hit = c.post("/v1/memories/uni/search", json={"query": "café crème"}).json()
        assert hit["packets"][0]["text"] == texts[0]


@pytest.mark.parametrize("path, body, status, field", [
    ("/v1/memories/ana/search", {"query": ""}, 400, "query"),
    ("/v1/memories/ana/search", {"query": 3}, 400, "query"),
    ("/v1/memories/ana/search", {}, 400, "query"),
    ("/v1/memories/ana/search", {"query": "x", "k": 0}, 400, "k"),
    ("/v1/memories/ana/search", {"query": "x", "k": 51}, 400, "k"),
    ("/v1/memories/ana/search", {"query": "x", "k": "3"}, 400, "k"),
    ("/v1/memories/ana/search", {"query": "x", "preset": "no-such-preset"}, 400, "preset"),
    ("/v1/memories/ana/search", {"query": "x", "preset": "A0"}, 400, "preset"),
    ("/v1/memories/a:b/search", {"query": "x"}, 400, "user_id"),
    ("/v1/memories/.hidden/search", {"query": "x"}, 400, "user_id"),
    ("/v1/memories/nobody/search", {"query": "x"}, 404, "user_id"),
])
def test_bad_searches(server, path, body, status, field):
    with client(server) as c:
        e = err(c.post(path, json=body), status)
        assert e["field"] == field


def test_oversize_body_is_413_before_it_is_read(server):
    with client(server) as c:
        e = err(c.post("/v1/memories/big/turns", content=b"x" * 30000, headers={"Content-Type": "application/json"}),
                413)
        assert e["code"] == "body_too_large"
        err(c.get("/v1/memories/big"), 404)
        for params in ({"limit": 0}, {"limit": "x"}, {"limit": 100000}):
            assert err(c.get("/v1/memories", params=params), 400)["field"] == "limit"


def test_preset_and_k_per_call(server):
    with client(server) as c:
        c.post("/v1/memories/many/turns", json={"turns": [{"speaker": "M", "text": f"fact number {i} about apples"}
                                                           for i in range(12)]}).raise_for_status()
        assert len(c.post("/v1/memories/many/search", json={"query": "apples", "k": 3}).json()["packet_ids"]) == 3
        raw = c.post("/v1/memories/many/search", json={"query": "apples", "preset": "model-free+view-raw"}).json()
        assert raw["packet_ids"] and "dia_id" in raw["context"]


# ----------------------------------------------------------------------------- Python client


def test_memory_client_has_the_memory_method_names(server):
    with MemoryClient(server.url, api_key=KEY_B) as mem:
        out = mem.add("dana", [{"speaker": "Dana", "text": "I play the cello on Sundays.", "time": "2024-02-04"}])
        assert out["added"] == 1
        assert mem.search("dana", "What instrument does Dana play?")["packets"][0]["speaker"] == "Dana"
        assert mem.compile("dana", "cello", k=1)["packet_ids"] == out["ids"]
        assert mem.stats("dana")["turns"] == 1
        assert "dana" in mem.users()["users"]
        assert mem.turns("dana")["total"] == 1
        assert mem.forget("dana")["deleted"]["packets"] == 1
        with pytest.raises(ServiceRequestError) as e:
            mem.stats("dana")
        assert e.value.status == 404 and e.value.field == "user_id"
    with MemoryClient(server.url, api_key="mcl_wrong") as bad, pytest.raises(ServiceRequestError) as e:
        bad.users()
    assert e.value.status == 401


# ----------------------------------------------------------------------------- MCP


async def _mcp_http(url: str, key: str):
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30) as http:
        async with streamable_http_client(url + "/mcp", http_client=http) as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = sorted(t.name for t in (await session.list_tools()).tools)
                added = await session.call_tool("add_turns", {"user_id": "mcpuser", "turns": [
                    {"speaker": "Eve", "text": "My favourite tea is genmaicha.", "time": "2024-03-01"}]})
                found = await session.call_tool("search", {"user_id": "mcpuser", "query": "Which tea does Eve like?"})
                missing = await session.call_tool("stats", {"user_id": "nobody-here"})
                return tools, added, found, missing


def test_mcp_over_streamable_http(server):
    tools, added, found, missing = asyncio.run(_mcp_http(server.url, KEY_A))
    assert tools == ["add_turns", "answer", "delete_turn", "forget", "list_turns", "list_users", "search", "stats"]
    assert not added.isError and added.structuredContent["added"] == 1
    assert not found.isError and found.structuredContent["packets"][0]["text"] == "My favourite tea is genmaicha."
    assert missing.isError  # the SDK puts "Error executing tool stats: " before the service's JSON error
    assert json.loads(missing.content[0].text.split(": ", 1)[1])["error"]["status"] == 404
    # Tenant scoping holds over MCP too: tenant B does not see A's MCP-written user.
    with client(server, KEY_B) as b:
        err(b.get("/v1/memories/mcpuser"), 404)
    with client(server) as a:
        assert a.get("/v1/memories/mcpuser").json()["turns"] == 1


async def _mcp_stdio(store: Path, cfg: Path):
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "memcompile_local", "mcp", "--store", str(store),
                                                                 "--config", str(cfg)], env=env(), cwd=str(REPO))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = sorted(t.name for t in (await session.list_tools()).tools)
            await session.call_tool("add_turns", {"user_id": "desk", "turns": [
                {"speaker": "Fay", "text": "The spare key is under the blue flowerpot."}]})
            found = await session.call_tool("search", {"user_id": "desk", "query": "where is the spare key?"})
            users = await session.call_tool("list_users", {})
            return tools, found, users


def test_mcp_over_stdio(tmp_path):
    cfg = write_config(tmp_path / "run.yaml", MODEL_FREE)
    tools, found, users = asyncio.run(asyncio.wait_for(_mcp_stdio(tmp_path / "m.sqlite", cfg), 120))
    assert "search" in tools and "add_turns" in tools
    assert found.structuredContent["packets"][0]["text"] == "The spare key is under the blue flowerpot."
    assert users.structuredContent["users"] == ["desk"]


# ----------------------------------------------------------------------------- regression


def test_memory_view_cache_keeps_one_view_per_namespace(tmp_path):
    """Regression: Memory.view kept the view of every generation, so a server grew without bound."""
    cfg = PipelineConfig.from_dict(MODEL_FREE)
    mem = Memory(tmp_path / "m.sqlite", cfg, embedder=HashEmbedder())
    for i in range(3):
        mem.add("ns", [{"time": "2024-01-01", "turns": [{"speaker": "A", "text": f"turn {i}", "id": f"x{i}"}]}])
        mem.compile("ns", "turn")
    assert len(mem.views.keys()) == 1
    mem.close()


def test_an_append_loads_the_new_view_before_the_next_search(tmp_path):
    from memcompile_local.service.core import MemoryService

    svc = MemoryService(str(tmp_path / "m.sqlite"), PipelineConfig.from_dict(MODEL_FREE), embedder=HashEmbedder())
    svc.add_turns("local", "w", {"turns": [{"speaker": "A", "text": f"line {i} about owls"} for i in range(5)]})
    svc.wait_warm()
    ns = namespace_for("local", "w")
    generation = svc.store.generation(ns)
    assert any(k[0] == ns and generation in k for k in svc.memory.views.keys()), "the view was not loaded ahead"
    loads = []
    real = svc.memory._load_view
    svc.memory._load_view = lambda n: loads.append(n) or real(n)
    assert svc.search("local", "w", "owls")["packet_ids"]
    assert loads == []  # the search used the view loaded in the background
    svc.close()


def test_a_view_load_cut_short_by_a_concurrent_build_is_retried(tmp_path):
    """Regression: a build committing during a view load made the search fail (embedding missing)."""
    from memcompile_local.service.core import current_view

    mem = Memory(tmp_path / "m.sqlite", PipelineConfig.from_dict(MODEL_FREE), embedder=HashEmbedder())
    mem.add("ns", [{"time": "2024-01-01", "turns": [{"speaker": "A", "text": "turn about owls", "id": "x"}]}])
    real, calls = mem.view, []

    def racing_view(ns, **kw):
        calls.append(ns)
        if len(calls) == 1:
            mem.store.set_meta(ns, "concurrent-write", "1")  # moves the generation, as a build would
            raise RuntimeError("1 packet embeddings missing in 'ns'; run the build first")
        return real(ns, **kw)

    mem.view = racing_view
    view, behind = current_view(mem, mem.partial_views(), "ns", allow_build=True)
    assert behind == 0 and [p.packet_id for p in view.packets] == ["x"] and len(calls) == 2
    mem.view = lambda ns, **kw: (_ for _ in ()).throw(RuntimeError("broken, nothing moved"))
    with pytest.raises(RuntimeError, match="nothing moved"):
        current_view(mem, mem.partial_views(), "ns", allow_build=True)
    mem.close()
