"""The service as an agent integrator meets it (issue 24): a real ``serve`` subprocess on 127.0.0.1.

Errors that show no server internals, throttled bad keys, a keys file that breaks while the
server runs, the access log, validation of what a client sends, turns without a time, one kind
of turn id by every door, deleting one turn, the clients, CORS, rate limits, ``/metrics`` auth,
deeply nested bodies and a clean SIGTERM.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import signal
import sqlite3
import time
from pathlib import Path

import httpx
import pytest

from _service_util import MODEL_FREE, REPO, running, start, write_config, write_keys
from memcompile_local.adapters.scripted import HashEmbedder
from memcompile_local.service.client import AsyncMemoryClient, MemoryClient, ServiceRequestError, ServiceUnavailableError
from memcompile_local.config import PipelineConfig
from memcompile_local.data.jsonio import DEFAULT_MAX_TURN_CHARS
from memcompile_local.memory import Memory
from memcompile_local.service.errors import ServiceError, redact_message
from memcompile_local.service.limits import Limits
from memcompile_local.service.ratelimit import FailedKeyThrottle, TenantRateLimit, TokenBuckets

pytestmark = pytest.mark.slow

KEY_A = "mcl_integrator-key-acme-0123456789"
KEY_B = "mcl_integrator-key-globex-abcdefg"
BAD = "mcl_not-a-key-at-all"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("integrator")
    keys = write_keys(d / "keys.yaml", {"acme": [(KEY_A, False)], "globex": [(KEY_B, False)]})
    cfg = write_config(d / "run.yaml", MODEL_FREE)
    with running(d / "mem.sqlite", "--keys", str(keys), "--cors-origin", "https://app.example",
                 config=cfg) as srv:
        srv.store = d / "mem.sqlite"
        srv.keys = keys
        yield srv


def http(server, key=KEY_A, **kw) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=30, **kw)


def error_of(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    return r.json()["error"]


# ----------------------------------------------------------------------------- item 13


def test_a_deeply_nested_body_is_a_typed_400(server):
    with http(server) as c:
        for body in ("[" * 100_000, "{" * 100_000, '{"speaker": ' + "[" * 50_000):
            e = error_of(c.post("/v1/memories/deep/turns", content=body,
                                headers={"Content-Type": "application/json"}), 400)
            assert e["code"] == "bad_json" and e["field"] == "$"
    assert "RecursionError" not in server.log_text() and "Traceback" not in server.log_text()


def test_sigterm_closes_the_store_checkpointing_the_wal(tmp_path):
    cfg = write_config(tmp_path / "run.yaml", MODEL_FREE)
    store = tmp_path / "m.sqlite"
    srv = start(store, config=cfg)
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            for i in range(5):
                c.post("/v1/memories/u/turns", json={"speaker": "A", "text": f"note {i}", "time": "2024-01-01"}
                       ).raise_for_status()
            assert c.post("/v1/memories/u/search", json={"query": "note"}).status_code == 200
        assert Path(str(store) + "-wal").exists()  # the server is writing through its WAL
        srv.proc.send_signal(signal.SIGTERM)
        # uvicorn shuts down (the app's lifespan runs), then re-raises the signal it caught.
        assert srv.proc.wait(30) in (0, -signal.SIGTERM)
    finally:
        srv.kill()
    # The last connection closed: SQLite checkpointed the WAL into the file and removed it.
    assert not Path(str(store) + "-wal").exists(), srv.log_text()
    with sqlite3.connect(store) as db:
        assert db.execute("SELECT COUNT(*) FROM packets").fetchone()[0] == 5
        assert db.execute("SELECT COUNT(*) FROM service_build_leases").fetchone()[0] == 0
    assert "Traceback" not in srv.log_text()


# ----------------------------------------------------------------------------- item 6


def test_errors_show_neither_the_store_path_nor_the_internal_namespace(server):
    with http(server) as c:
        c.post("/v1/memories/dave/turns", json={"speaker": "Dave", "text": "first words", "id": "t1",
                                                "time": "2024-01-01"}).raise_for_status()
        r = c.post("/v1/memories/dave/turns", json={"speaker": "Dave", "text": "other words", "id": "t1",
                                                    "time": "2024-01-01"})
        e = error_of(r, 409)
        assert "t1" in e["message"]
        assert "t:acme" not in r.text and str(server.store) not in r.text and ".sqlite" not in r.text
        assert "dave" in e["message"]  # the tenant still sees its own user id


def test_redaction_of_paths_and_namespaces():
    msg = "namespace 't:acme:dave' has no turn 'x' in /srv/data/mem.sqlite (see /srv/data/mem.sqlite-wal)"
    out = redact_message(msg, paths=["/srv/data/mem.sqlite"])
    assert out == "namespace 'dave' has no turn 'x' in the store (see the store)"
    err = ServiceError(503, "store_unavailable", "cannot read /var/lib/x/other.db: t:globex:amy")
    assert err.redacted().message == "cannot read the store: amy"


def test_401_carries_a_bearer_challenge_and_refused_keys_are_throttled_per_address(tmp_path):
    keys = write_keys(tmp_path / "keys.yaml", {"acme": [(KEY_A, False)]})
    with running(tmp_path / "m.sqlite", "--keys", str(keys), config=write_config(tmp_path / "c.yaml", MODEL_FREE)
                 ) as srv:
        for i in range(20):  # the default burst of refused keys
            r = httpx.get(srv.url + "/v1/memories", headers={"Authorization": f"Bearer {BAD}{i}"}, timeout=30)
            assert r.status_code == 401, r.text
            assert r.headers["www-authenticate"].startswith('Bearer realm="memcompile-local"')
        r = httpx.get(srv.url + "/v1/memories", headers={"Authorization": f"Bearer {BAD}"}, timeout=30)
        e = error_of(r, 429)
        assert e["code"] == "too_many_failed_keys" and int(r.headers["retry-after"]) >= 1
        assert error_of(httpx.post(srv.url + "/mcp", json={}, timeout=30), 429)["code"] == "too_many_failed_keys"
        # A good key from the same address still works.
        assert httpx.get(srv.url + "/v1/memories", headers={"X-API-Key": KEY_A}, timeout=30).status_code == 200


def test_throttle_tables_stay_bounded():
    now = [0.0]
    throttle = FailedKeyThrottle(per_minute=6, burst=2, max_addresses=100, clock=lambda: now[0])
    for i in range(5000):
        throttle.failed(f"10.0.{i // 256}.{i % 256}")
    assert len(throttle.buckets) == 100
    throttle.failed("1.2.3.4")
    throttle.failed("1.2.3.4")
    with pytest.raises(ServiceError) as e:
        throttle.check("1.2.3.4")
    assert e.value.status == 429 and e.value.headers["Retry-After"] == "10"
    now[0] += 10.0  # 6 a minute: one token back after 10 s
    throttle.check("1.2.3.4")
    buckets = TokenBuckets(1.0, 3, max_keys=2, clock=lambda: now[0])
    assert [buckets.take("t") for _ in range(4)] == [0.0, 0.0, 0.0, 1.0]


# ----------------------------------------------------------------------------- item 7


def test_a_broken_or_deleted_keys_file_refuses_every_key_until_it_is_fixed(tmp_path):
    keys = write_keys(tmp_path / "keys.yaml", {"acme": [(KEY_A, False)]})
    good = keys.read_text()
    with running(tmp_path / "m.sqlite", "--keys", str(keys), config=write_config(tmp_path / "c.yaml", MODEL_FREE)
                 ) as srv, http(srv) as c:
        assert c.get("/v1/memories").status_code == 200
        keys.write_text("tenants: {acme: [this is not", encoding="utf-8")
        r = c.get("/v1/memories")
        assert error_of(r, 503)["code"] == "keys_unavailable" and r.headers["retry-after"]
        keys.unlink()
        assert error_of(c.get("/v1/memories"), 503)["code"] == "keys_unavailable"
        assert error_of(httpx.post(srv.url + "/mcp", json={}, headers={"X-API-Key": KEY_A}, timeout=30),
                        503)["code"] == "keys_unavailable"
        (tmp_path / "new.yaml").write_text(good, encoding="utf-8")
        os.replace(tmp_path / "new.yaml", keys)
        assert c.get("/v1/memories").status_code == 200
        log = srv.log_text()
    assert "every API key is refused" in log and "readable again" in log
    assert KEY_A not in log


def test_one_access_log_line_per_request_without_key_or_body(server):
    secret_text = "my locker code is walrus-4411"
    with http(server, KEY_B) as c:
        c.post("/v1/memories/logged/turns", json={"speaker": "L", "text": secret_text}).raise_for_status()
        c.get("/v1/memories/logged/turns", params={"limit": 7})
        c.get("/v1/memories/nobody")
    httpx.get(server.url + "/v1/memories", headers={"Authorization": f"Bearer {BAD}"}, timeout=30)
    # The server writes a request's line after it has sent the response: wait for the last one.
    deadline = time.monotonic() + 10
    while "GET /v1/memories 401 " not in server.log_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    lines = [ln for ln in server.log_text().splitlines() if " access " in ln]
    assert any("POST /v1/memories/logged/turns 200 " in ln and "tenant=globex" in ln for ln in lines)
    assert any("GET /v1/memories/logged/turns 200 " in ln and "ms tenant=globex" in ln for ln in lines)
    assert any("GET /v1/memories/nobody 404 " in ln and "tenant=globex" in ln for ln in lines)
    assert any("GET /v1/memories 401 " in ln and "tenant=-" in ln for ln in lines)
    log = server.log_text()
    assert secret_text not in log and KEY_B not in log and BAD not in log and "limit=7" not in log


# ----------------------------------------------------------------------------- item 8


@pytest.mark.parametrize("body, code, field", [
    ({"speaker": "A", "text": ""}, "empty_text", "text"),
    ({"speaker": "A", "text": " \n\t "}, "empty_text", "text"),
    ({"speaker": "A\x1b[31m", "text": "hi"}, "control_character", "speaker"),
    ({"speaker": "A\tB", "text": "hi"}, "control_character", "speaker"),
    ({"speaker": "A", "text": "bell \x07 here"}, "control_character", "text"),
    ({"speaker": "A", "text": "hi", "time": "2024-01-01\n10:00"}, "control_character", "time"),
    ({"speaker": "A", "text": "hi", "time": "2024-13-45"}, "invalid_time", "time"),
    ({"speaker": "A", "text": "hi", "time": "someday"}, "invalid_time", "time"),
    ({"turns": [{"speaker": "A", "text": "ok"}, {"speaker": "B", "text": "   "}]}, "empty_text", "turns[1].text"),
    ({"sessions": [{"time": "2024-02-30", "turns": [{"speaker": "A", "text": "x"}]}]}, "invalid_time",
     "sessions[0].time"),
    ({"speaker": "A", "text": "hi", "id": "has space"}, "invalid_id", "id"),
])
def test_bad_turns_are_refused_with_a_typed_located_error(server, body, code, field):
    with http(server) as c:
        e = error_of(c.post("/v1/memories/strict/turns", json=body), 400)
        assert (e["code"], e["field"]) == (code, field), e
        assert error_of(c.get("/v1/memories/strict"), 404)  # nothing was written
    if code == "control_character":
        assert "at character" in e["message"] and "U+" in e["message"]
    if code == "invalid_time":
        assert repr(body.get("time") or body["sessions"][0]["time"]) in e["message"]


def test_question_date_is_checked_too(server):
    with http(server) as c:
        c.post("/v1/memories/qd/turns", json={"speaker": "A", "text": "hello", "time": "2024-01-01"}).raise_for_status()
        e = error_of(c.post("/v1/memories/qd/search", json={"query": "hello", "question_date": "2024-13-45"}), 400)
        assert (e["code"], e["field"]) == ("invalid_time", "question_date")


def test_the_text_cap_is_the_readme_figure_and_a_serve_flag(tmp_path):
    assert Limits().max_text_chars == DEFAULT_MAX_TURN_CHARS == 100_000
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "--max-text-chars" in readme and "100,000" in readme
    with running(tmp_path / "m.sqlite", "--max-text-chars", "40", config=write_config(tmp_path / "c.yaml", MODEL_FREE)
                 ) as srv, httpx.Client(base_url=srv.url, timeout=30) as c:
        assert c.post("/v1/memories/u/turns", json={"speaker": "A", "text": "x" * 40}).status_code == 200
        e = error_of(c.post("/v1/memories/u/turns", json={"speaker": "A", "text": "x" * 41}), 400)
        assert (e["code"], e["field"]) == ("text_too_long", "text") and "at most 40" in e["message"]
        assert error_of(c.post("/v1/memories/u/search", json={"query": "q" * 41}), 400)["field"] == "query"


# ----------------------------------------------------------------------------- item 9


def test_a_turn_without_time_gets_the_server_clock_and_is_never_skipped(server):
    with http(server) as c:
        before = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None, microsecond=0)
        first = c.post("/v1/memories/clock/turns", json={"speaker": "Ann", "text": "ok"}).json()
        again = c.post("/v1/memories/clock/turns", json={"speaker": "Ann", "text": "ok"}).json()
        both = c.post("/v1/memories/clock/turns", json={"turns": [{"speaker": "Ann", "text": "ok"},
                                                                  {"speaker": "Ann", "text": "ok", "time": ""}]}).json()
        after = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
        assert (first["added"], again["added"], both["added"]) == (1, 1, 2)
        assert again["skipped"] == 0 and len(set(first["ids"] + again["ids"] + both["ids"])) == 4
        turns = c.get("/v1/memories/clock/turns").json()["turns"]
        assert len(turns) == 4
        for t in turns:
            when = dt.datetime.strptime(t["time"], "%Y-%m-%d %H:%M:%S")
            assert before <= when <= after
        # A turn with a time is still idempotent: a retry adds nothing.
        timed = {"speaker": "Ann", "text": "ok", "time": "2024-05-01 10:00"}
        one = c.post("/v1/memories/clock/turns", json=timed).json()
        two = c.post("/v1/memories/clock/turns", json=timed).json()
        assert (one["added"], two["added"], two["skipped"]) == (1, 0, 1) and one["ids"] == two["ids"]
        # The same words at another time are another turn.
        later = c.post("/v1/memories/clock/turns", json={**timed, "time": "2024-05-02 10:00"}).json()
        assert later["added"] == 1 and later["ids"] != one["ids"]


# ----------------------------------------------------------------------------- item 10


SESSIONS = [{"time": "2024-03-01 09:00", "turns": [{"speaker": "Ivy", "text": "I started learning the cello."},
                                                   {"speaker": "Max", "text": "How is it going?"}]},
            {"time": "2024-03-08 09:00", "turns": [{"speaker": "Ivy", "text": "My cello teacher is strict."}]}]


async def _mcp_add(url: str, key: str, user: str, turns: list[dict]):
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30) as h:
        async with streamable_http_client(url + "/mcp", http_client=h) as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                added = await session.call_tool("add_turns", {"user_id": user, "turns": turns})
                tools = (await session.list_tools()).tools
                deleted = await session.call_tool("delete_turn", {"user_id": user, "turn_id": "S1:1"})
                bad_k = await session.call_tool("search", {"user_id": user, "query": "cello", "k": 10_000})
                return added, tools, deleted, bad_k


def test_ids_are_the_same_by_every_door(server, tmp_path):
    mem = Memory(tmp_path / "py.sqlite", PipelineConfig.from_dict(MODEL_FREE), embedder=HashEmbedder())
    py = mem.add("ivy", SESSIONS)
    assert py.ids == ("S1:1", "S1:2", "S2:1") and (py.added, py.skipped) == (3, 0)
    assert mem.add("ivy", SESSIONS).ids == py.ids  # again: the same ids, skipped
    mem.close()
    with http(server) as c:
        rest = c.post("/v1/memories/ivy/turns", json={"sessions": SESSIONS}).json()
        assert tuple(rest["ids"]) == py.ids
        assert c.post("/v1/memories/ivy/turns", json={"sessions": SESSIONS}).json()["skipped"] == 3
        stored = c.get("/v1/memories/ivy/turns").json()["turns"]
        assert [t["id"] for t in stored] == list(py.ids)
    turns = [{"speaker": "Ivy", "text": "I started learning the cello.", "time": "2024-03-01 09:00"},
             {"speaker": "Max", "text": "How is it going?", "time": "2024-03-01 09:00"}]
    added, tools, deleted, bad_k = asyncio.run(_mcp_add(server.url, KEY_A, "ivy-mcp", turns))
    rest_single = None
    with http(server) as c:
        rest_single = c.post("/v1/memories/ivy-rest/turns", json={"turns": turns}).json()
    assert added.structuredContent["ids"] == rest_single["ids"] == ["S1:1", "S1:2"]
    # MCP tools: described and bounded arguments, typed turns, read-only/destructive hints.
    by = {t.name: t for t in tools}
    for t in tools:
        assert t.annotations is not None and t.annotations.readOnlyHint is not None, t.name
        for name, prop in t.inputSchema["properties"].items():
            assert prop.get("description"), (t.name, name)
    assert by["search"].annotations.readOnlyHint and not by["search"].annotations.destructiveHint
    assert by["forget"].annotations.destructiveHint and by["delete_turn"].annotations.destructiveHint
    k = next(s for s in by["search"].inputSchema["properties"]["k"]["anyOf"] if s.get("type") == "integer")
    assert (k["minimum"], k["maximum"]) == (1, Limits().max_k)
    turn_schema = by["add_turns"].inputSchema["$defs"]["TurnArg"]
    assert set(turn_schema["required"]) == {"speaker", "text"} and turn_schema["additionalProperties"] is False
    assert bad_k.isError
    assert not deleted.isError and deleted.structuredContent["turn_id"] == "S1:1"


def test_search_returns_rank_and_score_and_lists_page_alike(server):
    with http(server, KEY_B) as c:
        c.post("/v1/memories/ranked/turns", json={"sessions": SESSIONS}).raise_for_status()
        hit = c.post("/v1/memories/ranked/search", json={"query": "Who teaches the cello?", "k": 3}).json()
        assert [p["rank"] for p in hit["packets"]] == list(range(1, len(hit["packets"]) + 1))
        scores = [p["score"] for p in hit["packets"]]
        assert all(isinstance(s, float) for s in scores)
        users = c.get("/v1/memories", params={"offset": 0, "limit": 1}).json()
        turns = c.get("/v1/memories/ranked/turns", params={"offset": 0, "limit": 1}).json()
        for page in (users, turns):
            assert {"total", "offset", "next_offset"} <= set(page) and page["offset"] == 0
        assert turns["next_offset"] == 1
        e = error_of(c.get("/v1/memories", params={"after": "x"}), 400)
        assert e["field"] == "after"


def test_search_with_a_question_date_anchors_relative_times(server):
    same = "We walked along the river together."
    body = {"sessions": [{"time": "2024-02-10", "turns": [{"speaker": "Kim", "text": same}]},
                         {"time": "2024-05-12", "turns": [{"speaker": "Kim", "text": same}]}]}
    with http(server) as c:
        c.post("/v1/memories/anchor/turns", json=body).raise_for_status()
        q = {"query": "Where did Kim walk last month?", "k": 2}
        plain = c.post("/v1/memories/anchor/search", json=q).json()
        dated = c.post("/v1/memories/anchor/search", json={**q, "question_date": "2024-06-03"}).json()
    assert plain["packets"][0]["time"] == "2024-02-10"  # a tie: dialogue order
    assert dated["packets"][0]["time"] == "2024-05-12"  # "last month" of 2024-06-03 is May
    assert dated["packets"][0]["score"] > dated["packets"][1]["score"]
    # The Python door anchors the same way.
    mem = Memory(":memory:", PipelineConfig.from_dict(MODEL_FREE), embedder=HashEmbedder())
    mem.add("anchor", body["sessions"])
    hits = mem.search("anchor", q["query"], k=2, question_date="2024-06-03")
    assert hits[0].packet.session_time == "2024-05-12"


def test_delete_one_turn_over_rest_and_update_is_delete_then_add(server):
    with http(server) as c:
        ids = c.post("/v1/memories/edit/turns", json={"sessions": SESSIONS}).json()["ids"]
        r = c.delete(f"/v1/memories/edit/turns/{ids[0]}")
        assert r.status_code == 200 and r.json()["deleted"]["packets"] == 1
        assert error_of(c.delete(f"/v1/memories/edit/turns/{ids[0]}"), 404)["field"] == "turn_id"
        assert error_of(c.delete("/v1/memories/nobody/turns/S1:1"), 404)
        # update = delete + add with the same id
        c.delete(f"/v1/memories/edit/turns/{ids[2]}").raise_for_status()
        c.post("/v1/memories/edit/turns", json={"speaker": "Ivy", "text": "My cello teacher is kind.",
                                                "id": ids[2], "time": "2024-03-08 09:00"}).raise_for_status()
        texts = [t["text"] for t in c.get("/v1/memories/edit/turns").json()["turns"]]
        assert "I started learning the cello." not in texts and "My cello teacher is kind." in texts
        found = c.post("/v1/memories/edit/search", json={"query": "cello teacher"}).json()
        assert ids[0] not in found["packet_ids"]
    with http(server, KEY_B) as b:  # another tenant cannot delete acme's turns
        assert error_of(b.delete(f"/v1/memories/edit/turns/{ids[1]}"), 404)


def test_memory_client_quotes_user_ids_and_raises_typed_errors(server):
    with MemoryClient(server.url, KEY_A) as mem:
        out = mem.add("o.brien@x", {"speaker": "O", "text": "tea with milk", "time": "2024-01-01"})
        assert out["ids"] and mem.stats("o.brien@x")["turns"] == 1
        for bad in ("..", "../o.brien@x", "a b", "x/../../healthz"):
            with pytest.raises(ServiceRequestError) as e:
                mem.stats(bad)
            # Refused by the client before any request (issue 47), as the server refuses it.
            assert (e.value.status, e.value.code, e.value.field) == (400, "invalid_id", "user_id")
        with pytest.raises(ServiceRequestError) as e:
            mem.add("o.brien@x", {"speaker": "O", "text": ""})
        assert (e.value.status, e.value.code, e.value.field) == (400, "empty_text", "text")
        assert mem.delete_turn("o.brien@x", out["ids"][0])["turn_id"] == out["ids"][0]
    with MemoryClient("http://127.0.0.1:9", KEY_A, timeout=2) as dead:
        with pytest.raises(ServiceUnavailableError) as e:
            dead.users()
        assert e.value.retryable


def test_async_client_mirrors_the_sync_one(server):
    async def go():
        async with AsyncMemoryClient(server.url, KEY_A) as mem:
            added = await mem.add("async-user", SESSIONS, sessions=True)
            found = await mem.search("async-user", "Who teaches the cello?", k=2)
            page = await mem.turns("async-user", limit=2)
            gone = await mem.delete_turn("async-user", added["ids"][0])
            with pytest.raises(ServiceRequestError) as e:
                await mem.stats("nobody-async")
            users = await mem.users()
            return added, found, page, gone, e.value, users

    added, found, page, gone, missing, users = asyncio.run(go())
    assert added["ids"] == ["S1:1", "S1:2", "S2:1"] and found["packets"][0]["rank"] == 1
    assert page["next_offset"] == 2 and gone["deleted"]["packets"] == 1
    assert missing.status == 404 and "async-user" in users["users"]


# ----------------------------------------------------------------------------- Mem0/Zep expectations


def test_cors_answers_configured_origins_only(server, tmp_path):
    pre = {"Origin": "https://app.example", "Access-Control-Request-Method": "POST",
           "Access-Control-Request-Headers": "authorization,content-type"}
    r = httpx.options(server.url + "/v1/memories/u/search", headers=pre, timeout=30)
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://app.example"
    assert "authorization" in r.headers["access-control-allow-headers"].lower()
    with http(server) as c:
        r = c.get("/v1/memories", headers={"Origin": "https://app.example"})
        assert r.headers["access-control-allow-origin"] == "https://app.example"
        r = c.get("/v1/memories", headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in r.headers
    with running(tmp_path / "m.sqlite", config=write_config(tmp_path / "c.yaml", MODEL_FREE)) as plain:
        r = httpx.get(plain.url + "/v1/memories", headers={"Origin": "https://app.example"}, timeout=30)
        assert r.status_code == 200 and "access-control-allow-origin" not in r.headers


def test_per_tenant_rate_limit_and_metrics_auth(tmp_path):
    keys = write_keys(tmp_path / "keys.yaml", {"acme": [(KEY_A, False)], "globex": [(KEY_B, False)]})
    with running(tmp_path / "m.sqlite", "--keys", str(keys), "--rate-limit", "0.5", "--rate-burst", "3",
                 "--metrics-auth", config=write_config(tmp_path / "c.yaml", MODEL_FREE)) as srv:
        with http(srv) as a, http(srv, KEY_B) as b:
            assert [a.get("/v1/memories").status_code for _ in range(3)] == [200, 200, 200]
            r = a.get("/v1/memories")
            assert error_of(r, 429)["code"] == "rate_limited" and int(r.headers["retry-after"]) >= 1
            assert b.get("/v1/memories").status_code == 200  # another tenant has its own budget
            assert error_of(httpx.get(srv.url + "/metrics", timeout=30), 401)
            r = httpx.get(srv.url + "/metrics", headers={"X-API-Key": KEY_B}, timeout=30)
            assert r.status_code == 200 and "memcompile_requests" in r.text
    limit = TenantRateLimit(100.0)
    assert limit.buckets.burst == 200  # default burst: twice the rate
