"""``explain`` over the service: the REST search and answer bodies (real HTTP on 127.0.0.1, a
``memcompile-local serve`` subprocess) and the MCP search tool (the official ``mcp`` client),
against what ``Memory.search(..., explain=True)`` returns for the same memory."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from _fake_openai import FakeOpenAIServer, Reply, chat_body
from _service_util import MODEL_FREE, running, write_config
from memcompile_local import Memory, PipelineConfig
from memcompile_local.store import MemoryStore

pytest.importorskip("fastapi")
pytest.importorskip("mcp")

TURNS = [
    {"speaker": "Ines", "text": "I adopted a grey cat called Miso from the shelter.", "time": "2024-03-02 10:00"},
    {"speaker": "Tomas", "text": "I went kayaking on the lake with my brother.", "time": "2024-03-02 10:01"},
    {"speaker": "Ines", "text": "Miso sleeps on the windowsill all afternoon.", "time": "2024-03-02 10:02"},
    {"speaker": "Tomas", "text": "My brother wants to try rock climbing next.", "time": "2024-03-02 10:03"},
    {"speaker": "Ines", "text": "I started pottery classes on Tuesdays.", "time": "2024-04-15 18:30"},
]
QUESTION = "What is the name of Ines's cat?"


def _check_packets(packets: list[dict]) -> None:
    scores = [p["score"] for p in packets]
    assert scores and all(0.0 <= s <= 1.0 for s in scores) and scores == sorted(scores, reverse=True)
    for p in packets:
        e = p["explain"]
        assert e["selector"] == "fused" and isinstance(e["raw"], float)
        assert sum(c["contribution"] for c in e["channels"]) == pytest.approx(e["raw"], abs=1e-9)
        assert {"bm25_context", "dense_turn", "speaker", "time_match"} <= {c["name"] for c in e["channels"]}


async def _mcp_search(url: str, explain: bool) -> dict:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with httpx.AsyncClient(timeout=30) as http:
        async with streamable_http_client(url + "/mcp", http_client=http) as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = {t.name: t for t in (await session.list_tools()).tools}
                assert "explain" in tools["search"].inputSchema["properties"]
                args = {"user_id": "ines", "query": QUESTION, "k": 3}
                found = await session.call_tool("search", {**args, "explain": explain} if explain else args)
                assert not found.isError, found.content
                return found.structuredContent


def test_explain_over_rest_mcp_and_python_agree(tmp_path):
    def reply(path, body, hit):
        return Reply(body=chat_body("Miso"))

    with FakeOpenAIServer(reply) as model:
        cfg = write_config(tmp_path / "run.yaml", {**MODEL_FREE, "model": {
            **MODEL_FREE["model"], "backend": "openai", "base_url": model.base_url, "model": "fake-model",
            "options": {"max_retries": 0, "api_key": "unused"}}})
        store = tmp_path / "m.sqlite"
        with running(store, config=cfg) as srv, httpx.Client(base_url=srv.url, timeout=30) as c:
            assert c.post("/v1/memories/ines/turns", json={"turns": TURNS}).status_code == 200
            plain = c.post("/v1/memories/ines/search", json={"query": QUESTION, "k": 3})
            assert plain.status_code == 200 and all("explain" not in p for p in plain.json()["packets"])
            found = c.post("/v1/memories/ines/search", json={"query": QUESTION, "k": 3, "explain": True})
            assert found.status_code == 200, found.text
            rest = found.json()["packets"]
            _check_packets(rest)
            assert [p["score"] for p in rest] == [p["score"] for p in plain.json()["packets"]]
            assert rest[0]["text"] == "I adopted a grey cat called Miso from the shelter."
            # The answer route returns its evidence with the same explanations.
            answered = c.post("/v1/memories/ines/answer", json={"query": QUESTION, "k": 3, "explain": True})
            assert answered.status_code == 200, answered.text
            assert answered.json()["answer"] == "Miso"
            assert [p["explain"] for p in answered.json()["packets"]] == [p["explain"] for p in rest]
            # A flag that is not a boolean is a typed 400 naming the field.
            bad = c.post("/v1/memories/ines/search", json={"query": QUESTION, "explain": "yes"})
            assert bad.status_code == 400 and bad.json()["error"]["field"] == "explain"
            # MCP: the same search through the official client.
            mcp_found = asyncio.run(asyncio.wait_for(_mcp_search(srv.url, True), 60))
            assert [p["explain"] for p in mcp_found["packets"]] == [p["explain"] for p in rest]
            assert all("explain" not in p for p in asyncio.run(asyncio.wait_for(_mcp_search(srv.url, False), 60))
                       ["packets"])
        # Python, on the same store and configuration: the same scores and explanations.
        py_cfg = PipelineConfig.from_dict({**MODEL_FREE, "model": {**MODEL_FREE["model"]}})
        with Memory(MemoryStore(store), py_cfg) as mem:
            namespace = next(ns for ns in mem.store.namespaces() if ns.endswith("ines"))
            hits = mem.search(namespace, QUESTION, k=3, explain=True)
            assert [h.score for h in hits] == pytest.approx([p["score"] for p in rest])
            assert [h.explain.to_dict() for h in hits] == [p["explain"] for p in rest]
