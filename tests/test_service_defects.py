"""The defects an integrator hit in the landed service (issue 47), each over real HTTP against a
``memcompile-local serve`` subprocess on 127.0.0.1 (the official ``mcp`` client for MCP):

* a chunked body past the size cap is refused as soon as it passes it, not after it was read;
* a rate-limited MCP tool call is a retryable tool error, the session survives, and the
  protocol's handshake is not counted;
* bad MCP arguments are typed errors naming the argument; ``add_turns``'s idempotent hint is true;
* an import takes a one-line JSONL session as ``ingest`` does;
* impossible dates are refused (service, plain loader, ``Memory.add``), never read day-first;
* bidirectional controls never reach a one-line label;
* a PostgreSQL store that goes away makes ``/healthz`` (and every request) answer at once;
* the Python client refuses a malformed id with a typed error; ``export --help`` names the file
  ``export`` writes.
"""

from __future__ import annotations

import asyncio
import json
import re
import select
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from _service_util import MODEL_FREE, REPO, env, running, start, write_config, write_keys
from memcompile_local.service.client import MemoryClient, ServiceRequestError

pytestmark = pytest.mark.slow

KEY = "mcl_defects-key-of-acme-0123456789"
CAP = 20_000  # the module server's --max-body-bytes


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("defects")
    keys = write_keys(d / "keys.yaml", {"acme": [(KEY, False)]})
    with running(d / "mem.sqlite", "--keys", str(keys), "--max-body-bytes", str(CAP),
                 "--failed-keys-per-minute", "100000", config=write_config(d / "run.yaml", MODEL_FREE)) as srv:
        srv.store = d / "mem.sqlite"
        yield srv


def http(server) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)


def error_of(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    return r.json()["error"]


# ----------------------------------------------------------------------------- 1: chunked bodies


def peak_rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM line")


def send_chunked(port: int, path: str, planned: int, chunk: bytes) -> tuple[int, bytes]:
    """POST ``planned`` bytes as chunks (no Content-Length) until the server answers; returns
    (bytes sent before the answer came, the answer)."""
    s = socket.create_connection(("127.0.0.1", port))
    try:
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n"
                  "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".encode())
        sent, answer = 0, b""
        while sent < planned:
            if select.select([s], [], [], 0)[0]:
                answer = s.recv(65536)
                if answer:
                    break
            try:
                s.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
            except OSError:  # closed by the server after its answer
                break
            sent += len(chunk)
        s.settimeout(30)
        try:
            while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
                more = s.recv(65536)
                if not more:
                    break
                answer += more
        except OSError:
            pass
        return sent, answer
    finally:
        s.close()


@pytest.mark.parametrize("path", ["/v1/memories/chunky/turns", "/v1/memories/chunky/search", "/mcp"])
def test_a_chunked_body_past_the_cap_is_refused_before_it_is_read(server, path):
    planned = 64 << 20  # 3,355 times the cap
    before = peak_rss_bytes(server.proc.pid)
    sent, answer = send_chunked(server.port, path, planned, b" " * 65536)
    # The old reader held the whole body before it looked at its size: no answer came while the
    # client was still sending, and the server's memory grew by the body (twice).
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    body = json.loads(answer.split(b"\r\n\r\n", 1)[1])
    assert body["error"]["code"] == "body_too_large" and str(CAP) in body["error"]["message"]
    assert sent < planned // 2, f"the answer came after {sent} of {planned} bytes"
    assert peak_rss_bytes(server.proc.pid) - before < 24 << 20


def test_a_chunked_body_within_the_cap_is_read_whole(server):
    payload = json.dumps({"speaker": "Cy", "text": "chunked words " * 100, "time": "2024-05-08"}).encode()
    with http(server) as c:
        r = c.post("/v1/memories/chunked-ok/turns", content=iter([payload[:700], payload[700:]]),
                   headers={"Content-Type": "application/json"})
        assert r.status_code == 200, r.text
        assert r.json()["added"] == 1
        # An MCP message sent in chunks reaches the MCP server whole.
        hello = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}).encode()
        r = c.post("/mcp", content=iter([hello[:40], hello[40:]]),
                   headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
        assert r.status_code == 200, r.text
        assert r.json()["result"]["serverInfo"]["name"] == "memcompile-local"


# ----------------------------------------------------------------------------- 2: MCP and the rate limit


def mcp_text(result) -> dict:
    """The service's JSON error of a failed tool call (after the SDK's 'Error executing tool X: ')."""
    assert result.isError
    text = result.content[0].text
    assert text.startswith("Error executing tool "), text
    return json.loads(text.split(": ", 1)[1])["error"]


async def _mcp(url: str, body):
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as client:
        async with streamable_http_client(url + "/mcp", http_client=client) as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await body(session)


def test_a_rate_limited_mcp_call_is_a_retryable_tool_error_and_the_session_survives(tmp_path):
    keys = write_keys(tmp_path / "keys.yaml", {"acme": [(KEY, False)]})

    async def calls(session):
        await session.list_tools()
        await session.send_ping()
        first = [await session.call_tool("list_users", {}) for _ in range(4)]
        more = []
        for _ in range(12):
            more.append(await session.call_tool("list_users", {}))
            if more[-1].isError:
                break
        refused = mcp_text(more[-1]) if more[-1].isError else None
        wait = int(re.search(r"retry after (\d+) s", refused["message"]).group(1)) if refused else 0
        await asyncio.sleep(wait)
        again = await session.call_tool("list_users", {})
        return first, refused, wait, again

    with running(tmp_path / "m.sqlite", "--keys", str(keys), "--rate-limit", "2", "--rate-burst", "4",
                 config=write_config(tmp_path / "c.yaml", MODEL_FREE)) as srv:
        first, refused, wait, again = asyncio.run(asyncio.wait_for(_mcp(srv.url, calls), 120))
        # The handshake (initialize, notifications/initialized), tools/list and ping took no
        # token: the whole burst is left for the calls.
        assert [r.isError for r in first] == [False] * 4
        assert refused is not None, "twelve more calls at once were never limited"
        assert (refused["status"], refused["code"]) == (429, "rate_limited") and 1 <= wait <= 2
        # The same session goes on once the client waited as it was told.
        assert not again.isError and again.structuredContent["users"] == []
        # REST is limited as before (an HTTP 429 with Retry-After).
        with httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=30) as c:
            codes = [c.get("/v1/memories").status_code for _ in range(8)]
            assert 429 in codes


# ----------------------------------------------------------------------------- MCP arguments and hints


@pytest.mark.parametrize("tool, args, field, words", [
    ("search", {"user_id": "u", "query": "q", "k": 0}, "k", "an integer from 1 to 50; got 0"),
    ("search", {"user_id": "u", "query": "q", "k": "many"}, "k", "an integer from 1 to 50"),
    ("search", {"user_id": "bad/id", "query": "q"}, "user_id", "1-64 characters of [A-Za-z0-9._@-]"),
    ("search", {"user_id": "u"}, "query", "required"),
    ("search", {"user_id": "u", "query": "q", "kk": 3}, "kk", "unexpected argument 'kk'"),
    ("add_turns", {"user_id": "u", "turns": []}, "turns", "1 to 500 items"),
    ("add_turns", {"user_id": "u", "turns": [{"text": "hi"}]}, "turns[0].speaker", "required (who said it"),
    ("add_turns", {"user_id": "u", "turns": [{"speaker": "A", "text": "hi", "when": "now"}]}, "turns[0].when",
     "no such field"),
    ("list_turns", {"user_id": "u", "limit": 10_000}, "limit", "an integer from 1 to 500"),
    ("search", {"user_id": "u", "query": "q", "metadata": "topic=x"}, "metadata", "a JSON object"),
])
def test_bad_mcp_arguments_are_typed_errors_naming_the_argument(server, tool, args, field, words):
    async def call(session):
        return await session.call_tool(tool, args)

    err = mcp_text(asyncio.run(asyncio.wait_for(_mcp(server.url, call), 60)))
    assert (err["status"], err["code"], err["field"]) == (400, "bad_request", field), err
    assert words in err["message"], err["message"]
    assert "pydantic" not in err["message"] and "validation error" not in err["message"].lower()


def test_the_add_turns_idempotent_hint_is_true(server):
    turn = {"speaker": "Di", "text": "I keep my passport in the top drawer."}

    async def calls(session):
        hint = next(t for t in (await session.list_tools()).tools if t.name == "add_turns").annotations
        undated = [await session.call_tool("add_turns", {"user_id": "hint", "turns": [turn]}) for _ in range(2)]
        dated = [await session.call_tool("add_turns", {"user_id": "hint", "turns": [{**turn, "time": "2024-05-08"}]})
                 for _ in range(2)]
        return hint, undated, dated

    hint, undated, dated = asyncio.run(asyncio.wait_for(_mcp(server.url, calls), 60))
    added = [r.structuredContent["added"] for r in undated]
    # A turn without a time is a new message each time it is sent: the tool may not claim that
    # repeating a call has no further effect.
    assert added == [1, 1] and hint.idempotentHint is not True
    # With a time, a repeated call stores nothing new (what the tool's description promises).
    assert [r.structuredContent["added"] for r in dated] == [1, 0]


# ----------------------------------------------------------------------------- 3: imports of one-line JSONL


def wait_job(c: httpx.Client, user: str, job_id: str) -> dict:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        job = c.get(f"/v1/memories/{user}/imports/{job_id}").json()
        if job["state"] in ("done", "failed"):
            return job
        time.sleep(0.1)
    raise AssertionError(f"import {job_id} did not finish")


SESSION_LINE = {"time": "2024-05-08 13:56", "turns": [{"speaker": "Ana", "text": "We booked the ferry to Hvar."},
                                                      {"speaker": "Ben", "text": "I packed the snorkels."}]}


@pytest.mark.parametrize("fmt", [None, "plain"])
def test_an_import_reads_a_one_line_jsonl_session_as_ingest_does(server, tmp_path, fmt):
    line = (json.dumps(SESSION_LINE) + "\n").encode()
    # What ingest makes of the same file.
    (tmp_path / "one.jsonl").write_bytes(line)
    out = subprocess.run([sys.executable, "-m", "memcompile_local", "ingest", str(tmp_path / "one.jsonl"),
                          "--store", str(tmp_path / "s.sqlite")], env=env(), cwd=str(REPO), capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    user = f"line-{fmt or 'auto'}"
    with http(server) as c:
        r = c.post(f"/v1/memories/{user}/imports", content=line, params={"format": fmt} if fmt else {})
        assert r.status_code == 202, r.text
        job = wait_job(c, user, r.json()["id"])
        assert job["state"] == "done" and job["turns_written"] == 2, job
        turns = c.get(f"/v1/memories/{user}/turns").json()["turns"]
        assert [(t["speaker"], t["time"]) for t in turns] == [("Ana", "2024-05-08 13:56"), ("Ben", "2024-05-08 13:56")]


@pytest.mark.parametrize("session, field, words", [
    ({"time": "2024-05-08", "turns": [{"speaker": "Ana"}]}, "line 1, $.turns[0].text", "text"),
    ({"time": "2025-13-01", "turns": [{"speaker": "Ana", "text": "x"}]}, "line 1, $.time", "month 13"),
    ({"id": "s1", "turns": [{"speaker": "Ana", "text": "x"}]}, "line 1, $.time", "key 'time'"),
])
def test_a_bad_one_line_session_names_its_own_field(server, session, field, words):
    with http(server) as c:
        e = error_of(c.post("/v1/memories/line-bad/imports", content=json.dumps(session).encode()), 400)
        assert e["field"] == field and words in e["message"], e
        assert "next to 'turns'" not in e["message"]
        error_of(c.get("/v1/memories/line-bad"), 404)


def test_an_append_body_still_imports_as_turns(server):
    with http(server) as c:
        body = {"turns": [{"speaker": "Eli", "text": "first", "time": "2024-01-02"}]}
        r = c.post("/v1/memories/turns-body/imports", content=json.dumps(body).encode())
        assert r.status_code == 202 and wait_job(c, "turns-body", r.json()["id"])["turns_written"] == 1
        e = error_of(c.post("/v1/memories/turns-body/imports", content=json.dumps({**body, "x": 1}).encode()), 400)
        assert e["field"] == "x"


# ----------------------------------------------------------------------------- 4: impossible dates


@pytest.mark.parametrize("bad", ["2025-13-01", "2024-31-12", "2024-31-12 10:00", "2024/31/12", "2024-02-30",
                                 "2024-31-12T10:00:00Z", "13/01/2025"])
def test_an_impossible_date_is_a_400_naming_the_field(server, bad):
    with http(server) as c:
        c.post("/v1/memories/dates/turns", json={"speaker": "A", "text": "hello there", "time": "2024-01-01"}
               ).raise_for_status()
        cases = [
            ("POST", "/v1/memories/dates/turns", {"speaker": "A", "text": "hi", "time": bad}, "time"),
            ("POST", "/v1/memories/dates/turns", {"sessions": [{"time": bad, "turns": [{"speaker": "A", "text": "hi"}]}]},
             "sessions[0].time"),
            ("POST", "/v1/memories/dates/search", {"query": "hello", "question_date": bad}, "question_date"),
            ("POST", "/v1/memories/dates/search", {"query": "hello", "from": bad}, "from"),
            ("POST", "/v1/memories/dates/answer", {"query": "hello", "to": bad}, "to"),
            ("GET", "/v1/memories/dates/turns", {"from": bad}, "from"),
        ]
        for method, path, body, field in cases:
            r = c.post(path, json=body) if method == "POST" else c.get(path, params=body)
            e = error_of(r, 400)
            assert (e["code"], e["field"]) == ("invalid_time", field), (path, e)
            assert repr(bad) in e["message"] and "not a real date" in e["message"], e["message"]
        assert c.get("/v1/memories/dates").json()["turns"] == 1  # nothing was written


@pytest.mark.parametrize("good, day", [("2024-05-08", "2024-05-08"), ("2024-05-08 13:56", "2024-05-08"),
                                       ("1:56 pm on 8 May, 2023", "2023-05-08"), ("2024-05-08T13:56:00Z", "2024-05-08"),
                                       ("2024-05-08T13:56:00+02:00", "2024-05-08"), ("05/08/2024", "2024-05-08"),
                                       ("2023/05/20 (Sat) 02:21", "2023-05-20")])
def test_every_documented_date_format_is_still_read(server, good, day):
    from memcompile_local.language.timeparse import parse_session_time

    assert parse_session_time(good).date().isoformat() == day
    with http(server) as c:
        r = c.post("/v1/memories/good-dates/turns", json={"speaker": "A", "text": f"said on {good}", "time": good})
        assert r.status_code == 200, r.text
        found = c.post("/v1/memories/good-dates/search", json={"query": "said", "from": good, "to": good,
                                                               "question_date": good})
        assert found.status_code == 200, found.text


def test_impossible_dates_are_refused_by_ingest_and_memory_add_too(tmp_path):
    from memcompile_local.config import PipelineConfig
    from memcompile_local.errors import DataFormatError
    from memcompile_local.language.timeparse import normalize_time, parse_session_time
    from memcompile_local.memory import Memory
    from memcompile_local.pipeline.presets import apply_preset

    assert parse_session_time("2025-13-01") is None and parse_session_time("2024-31-12") is None
    assert parse_session_time("2024-13") is None  # year-month, month 13
    assert normalize_time("2024-31-12", None) == "2024-31-12"  # kept as written, not read as 31 December
    doc = {"namespace": "me", "sessions": [{"time": "2024-31-12", "turns": [{"speaker": "A", "text": "hi"}]}]}
    path = tmp_path / "me.json"
    path.write_text(json.dumps(doc))
    out = subprocess.run([sys.executable, "-m", "memcompile_local", "ingest", str(path), "--store",
                          str(tmp_path / "s.sqlite")], env=env(), cwd=str(REPO), capture_output=True, text=True,
                         timeout=120)
    assert out.returncode != 0 and "$.sessions[0].time" in out.stderr and "month 31" in out.stderr, out.stderr
    mem = Memory(str(tmp_path / "m.sqlite"), apply_preset("model-free", PipelineConfig()))
    try:
        with pytest.raises(DataFormatError, match=r"\$\.sessions\[0\]\.time.*month 13"):
            mem.add("me", [{"time": "2025-13-01", "turns": [{"speaker": "A", "text": "hi"}]}])
        assert mem.store.packet_count("me") == 0
        assert mem.add("me", [{"time": "2024-12-31", "turns": [{"speaker": "A", "text": "hi"}]}]).added == 1
    finally:
        mem.close()


# ----------------------------------------------------------------------------- 5: bidirectional controls


@pytest.mark.parametrize("body, code, field, char", [
    ({"speaker": "Mallory\u202e", "text": "hi"}, "control_character", "speaker", "U+202E"),
    ({"speaker": "\u2067Eve", "text": "hi"}, "control_character", "speaker", "U+2067"),
    ({"speaker": "A", "text": "hi", "time": "2024-05-08\u200f"}, "control_character", "time", "U+200F"),
    ({"sessions": [{"time": "2024-05-08", "turns": [{"speaker": "Bo\u061c", "text": "x"}]}]}, "control_character",
     "sessions[0].turns[0].speaker", "U+061C"),
    ({"speaker": "A", "text": "hi", "session_id": "s\u202a1"}, "invalid_id", "session_id", "U+202A"),
    ({"speaker": "A", "text": "hi", "agent_id": "bot\u200e"}, "invalid_id", "agent_id", "U+200E"),
    ({"speaker": "A", "text": "hi", "id": "t\u20661"}, "invalid_id", "id", "U+2066"),
])
def test_bidirectional_controls_in_labels_are_refused_with_the_place(server, body, code, field, char):
    with http(server) as c:
        e = error_of(c.post("/v1/memories/bidi/turns", json=body), 400)
        assert (e["code"], e["field"]) == (code, field), e
        assert char in e["message"] and "at character" in e["message"], e["message"]
        error_of(c.get("/v1/memories/bidi"), 404)


def test_bidirectional_controls_in_text_are_kept_as_content_and_never_reach_a_label(server):
    text = "Call me on \u202a+1 555 0100\u202c or write \u05e9\u05dc\u05d5\u05dd\u200f!"
    with http(server) as c:
        c.post("/v1/memories/bidi-text/turns", json={"speaker": "Noa", "text": text, "time": "2024-05-08"}
               ).raise_for_status()
        e = error_of(c.post("/v1/memories/bidi-text/search", json={"query": "call", "speaker": "Noa\u202e"}), 400)
        assert (e["code"], e["field"]) == ("control_character", "speaker")
        found = c.post("/v1/memories/bidi-text/search", json={"query": "Call me on the phone"}).json()
    assert found["packets"][0]["text"] == text  # stored and returned unchanged
    for line in found["context"].splitlines():
        if any(ch in line for ch in "\u202a\u202c\u200f"):
            assert line.startswith("> "), line  # on a quoted line of its own, never in a header


def test_loaders_refuse_and_headers_escape_a_bidi_label(tmp_path):
    from memcompile_local.data.plain import parse_plain
    from memcompile_local.errors import DataFormatError
    from memcompile_local.fence import header_value

    with pytest.raises(DataFormatError, match=r"speaker.*U\+202E at character 7"):
        parse_plain({"namespace": "x", "sessions": [{"time": "2024-05-08", "turns": [
            {"speaker": "Mallory\u202e", "text": "hi"}]}]}, "f.json")
    shown = header_value("Mallory\u202e")  # a label written before this check, or by hand
    assert shown == '"Mallory\\u202e"' and "\u202e" not in shown


# ----------------------------------------------------------------------------- PostgreSQL down


def test_healthz_and_requests_answer_at_once_while_postgres_is_down(tmp_path):
    from _postgres import PostgresServer, find_bindir

    pytest.importorskip("psycopg")
    bindir = find_bindir()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries")
    pg = PostgresServer(bindir).start()
    srv = None
    try:
        pg.make_template()
        keys = write_keys(tmp_path / "keys.yaml", {"acme": [(KEY, False)]})
        srv = start(pg.fresh_database(), "--keys", str(keys), config=write_config(tmp_path / "c.yaml", MODEL_FREE),
                    log=tmp_path / "serve.log")
        with http(srv) as c:
            c.post("/v1/memories/pg/turns", json={"speaker": "Pat", "text": "the spare key is in the shed",
                                                  "time": "2024-05-08"}).raise_for_status()
            assert c.get("/healthz").status_code == 200
            pg.stop("immediate")
            seconds, answers = [], []
            for path in ("/healthz", "/healthz", "/v1/memories/pg", "/healthz", "/v1/memories"):
                t0 = time.monotonic()
                answers.append(c.get(path))
                seconds.append(time.monotonic() - t0)
            search_t0 = time.monotonic()
            found = c.post("/v1/memories/pg/search", json={"query": "where is the spare key?"})
            search_s = time.monotonic() - search_t0
            # The first health check waits for one pool slice and a refused probe; the others
            # know the database is down (the pool's timeout is 10 s).
            assert seconds[0] < 1.0 and max(seconds[1:]) < 0.5, seconds
            for r in answers:
                e = error_of(r, 503)
                assert e["code"] == "store_unavailable" and "database is unreachable" in e["message"], e
                assert "pool" not in e["message"] and "connection came free" not in e["message"]
            # A search may still be served from the view this server holds; if not, it fails fast.
            assert search_s < 1.0 and found.status_code in (200, 503), (search_s, found.text)
            pg.start()
            deadline = time.monotonic() + 30
            while c.get("/healthz").status_code != 200:
                assert time.monotonic() < deadline, "no recovery after the database came back"
                time.sleep(0.2)
            r = c.post("/v1/memories/pg/turns", json={"speaker": "Pat", "text": "and the bike lock code is 1234",
                                                      "time": "2024-05-09"})
            assert r.status_code == 200, r.text
            assert c.get("/v1/memories/pg").json()["turns"] == 2
        assert "the database is unreachable" in srv.log_text()  # the reason is in the server's log
    finally:
        if srv is not None:
            srv.stop()
        pg.remove()


# ----------------------------------------------------------------------------- the Python client, export


def test_the_client_refuses_a_malformed_id_with_a_typed_error(server):
    with MemoryClient(server.url, api_key=KEY) as mem:
        for call, field, value in ((lambda: mem.stats("bad/id"), "user_id", "bad/id"),
                                   (lambda: mem.add("bad/id", {"speaker": "A", "text": "x"}), "user_id", "bad/id"),
                                   (lambda: mem.search(".hidden", "q"), "user_id", ".hidden"),
                                   (lambda: mem.delete_turn("u", "S1/2"), "turn_id", "S1/2")):
            with pytest.raises(ServiceRequestError) as e:
                call()
            assert (e.value.status, e.value.code, e.value.field) == (400, "invalid_id", field)
            assert repr(value) in e.value.message and "at character" in e.value.message
    # A client that does encode the slash gets the server's own typed error, not a bare 404.
    with http(server) as c:
        for path, field in (("/v1/memories/bad%2Fid", "user_id"), ("/v1/memories/bad%2Fid/search", "user_id"),
                            ("/v1/memories/u/turns/S1%2F2", "turn_id")):
            r = c.delete(path) if "turns/" in path else (c.post(path, json={"query": "q"}) if path.endswith("search")
                                                           else c.get(path))
            e = error_of(r, 400)
            assert (e["code"], e["field"]) == ("invalid_id", field) and "'/'" in e["message"], e
        assert error_of(c.get("/v1/memories/a%20b"), 400)["code"] == "invalid_id"


def test_the_client_accepts_exactly_the_ids_the_server_does():
    from memcompile_local.service import client
    from memcompile_local.service.auth import USER_ID_RE
    from memcompile_local.service.validate import TURN_ID_CHARS

    assert client._USER_ID.pattern == USER_ID_RE.pattern
    assert client._TURN_ID.pattern == f"[{TURN_ID_CHARS}]{{1,128}}"


def test_export_help_names_the_file_export_writes(tmp_path):
    from memcompile_local.bench.export import export_run

    out = subprocess.run([sys.executable, "-m", "memcompile_local", "export", "--help"], env=env(), cwd=str(REPO),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0
    help_text = " ".join(out.stdout.split())
    named = re.search(r"default: RUN_DIR/(\S+?)\.<format>", help_text)
    assert named, help_text
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"run_id": "r1", "benchmark": "locomo"}))
    (run / "predictions.jsonl").write_text(json.dumps({"question_id": "q1", "question": "?", "prediction": "x"}) + "\n")
    written = export_run(run, "jsonl")
    assert written == run / f"{named.group(1)}.jsonl"
