"""Turn metadata, agent scoping and search/list filters over real HTTP (issue 24, Mem0/Zep items).

A ``memcompile-local serve`` subprocess on 127.0.0.1 (model-free, hash embedder): turns carry
``agent_id`` and a small ``metadata`` object, returned on listed turns and search hits; search
and list-turns filter by metadata, speaker, session, agent and a time range, and a filter
restricts the candidates before the top-k cut. MCP through the official client; both Python
clients; the Python ``Memory`` API in process.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from _service_util import MODEL_FREE, running, write_config
from memcompile_local.adapters.scripted import HashEmbedder
from memcompile_local.config import PipelineConfig
from memcompile_local.memory import Memory
from memcompile_local.pipeline.presets import apply_preset
from memcompile_local.service.client import AsyncMemoryClient, MemoryClient, ServiceRequestError
from memcompile_local.views.filters import TurnFilter

pytestmark = pytest.mark.slow

# Agent "chef" said a lot about soup; agent "coach" said little, and less pointedly.
CHEF = [{"speaker": "Mia", "text": f"The soup recipe number {i} needs more soup stock and soup spices",
         "agent_id": "chef", "metadata": {"topic": "food", "n": i}, "time": f"2024-03-{1 + i:02d} 09:00",
         "session_id": "kitchen"} for i in range(12)]
COACH = [{"speaker": "Mia", "text": f"After the run {i} I ate a bowl of soup", "agent_id": "coach",
          "metadata": {"topic": "sport", "n": i}, "time": f"2024-04-{1 + i:02d} 18:30", "session_id": "track"}
         for i in range(6)]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("filters")
    cfg = write_config(d / "c.yaml", MODEL_FREE)
    with running(d / "mem.sqlite", config=cfg) as srv:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            r = c.post("/v1/memories/mia/turns", json={"turns": CHEF + COACH})
            assert r.status_code == 200, r.text
        yield srv


def http(server) -> httpx.Client:
    return httpx.Client(base_url=server.url, timeout=30)


def search(c: httpx.Client, user: str, **body) -> list[dict]:
    r = c.post(f"/v1/memories/{user}/search", json={"query": "which soup?", **body})
    assert r.status_code == 200, r.text
    return r.json()["packets"]


def test_metadata_and_agent_come_back_on_listed_turns_and_search_hits(server):
    with http(server) as c:
        turns = c.get("/v1/memories/mia/turns").json()["turns"]
        assert turns[0]["agent_id"] == "chef" and turns[0]["metadata"] == {"n": 0, "topic": "food"}
        hits = search(c, "mia", k=3)
        assert all(h["agent_id"] in ("chef", "coach") and h["metadata"]["topic"] in ("food", "sport")
                   for h in hits)
        r = c.post("/v1/memories/plain/turns", json={"speaker": "Ed", "text": "no metadata here"})
        assert r.status_code == 200
        t = c.get("/v1/memories/plain/turns").json()["turns"][0]
        assert t["agent_id"] is None and t["metadata"] is None


def test_a_filter_restricts_the_candidates_before_the_top_k_cut(server):
    with http(server) as c:
        unfiltered = search(c, "mia", k=5)
        # The chef's soup turns outrank the coach's: a filter applied after the cut would find
        # at most a few coach turns among the top 5.
        assert sum(h["agent_id"] == "coach" for h in unfiltered) < 5
        coach = search(c, "mia", k=5, agent_id="coach")
        assert len(coach) == 5 and {h["agent_id"] for h in coach} == {"coach"}
        sport = search(c, "mia", k=5, metadata={"topic": "sport"})
        assert len(sport) == 5 and {h["metadata"]["topic"] for h in sport} == {"sport"}
        assert [h["rank"] for h in sport] == [1, 2, 3, 4, 5]


def test_metadata_filter_is_an_exact_match_on_every_key_given(server):
    with http(server) as c:
        hits = search(c, "mia", k=10, metadata={"topic": "food", "n": 3})
        assert [h["metadata"] for h in hits] == [{"n": 3, "topic": "food"}]
        assert search(c, "mia", metadata={"topic": "food", "n": "3"}) == []  # "3" is not 3
        assert search(c, "mia", metadata={"colour": "red"}) == []


def test_speaker_session_and_time_range_filters(server):
    with http(server) as c:
        assert search(c, "mia", speaker="Nobody") == []
        track = search(c, "mia", k=20, session_id="track")
        assert len(track) == 6 and {h["session_id"] for h in track} == {"track"}
        # Both ends inclusive; a bare date as "to" covers its whole day (the turns are at 09:00).
        march = search(c, "mia", k=20, **{"from": "2024-03-03", "to": "2024-03-05"})
        assert sorted(h["time"] for h in march) == ["2024-03-03 09:00", "2024-03-04 09:00", "2024-03-05 09:00"]
        after = search(c, "mia", k=20, **{"from": "2024-04-05 18:30"})
        assert sorted(h["time"] for h in after) == ["2024-04-05 18:30", "2024-04-06 18:30"]


def test_list_turns_by_time_range_and_filters(server):
    with http(server) as c:
        r = c.get("/v1/memories/mia/turns", params={"from": "2024-04-01", "to": "2024-04-03", "limit": 2})
        page = r.json()
        assert r.status_code == 200 and page["total"] == 3 and page["next_offset"] == 2
        assert [t["time"] for t in page["turns"]] == ["2024-04-01 18:30", "2024-04-02 18:30"]
        r = c.get("/v1/memories/mia/turns", params={"agent_id": "chef", "metadata": json.dumps({"n": 11})})
        assert [t["metadata"] for t in r.json()["turns"]] == [{"n": 11, "topic": "food"}]
        r = c.get("/v1/memories/mia/turns", params={"speaker": "Mia", "session_id": "kitchen"})
        assert r.json()["total"] == 12


def test_two_agents_of_one_user_are_scoped_apart_and_unscoped_search_sees_both(server):
    with http(server) as c:
        for agent, word in (("planner", "zebrafish"), ("critic", "zebrafish")):
            r = c.post("/v1/memories/duo/turns", json={"turns": [
                {"speaker": "Ola", "text": f"the {word} tank is owned by the {agent}", "agent_id": agent},
                {"speaker": "Ola", "text": f"the {agent} keeps notes about the {word}", "agent_id": agent}]})
            assert r.status_code == 200, r.text
        both = search(c, "duo", query="zebrafish tank", k=10)
        assert {h["agent_id"] for h in both} == {"planner", "critic"}
        for agent in ("planner", "critic"):
            mine = search(c, "duo", query="zebrafish tank", k=10, agent_id=agent)
            assert len(mine) == 2 and {h["agent_id"] for h in mine} == {agent}
        # The same words said for two agents are two turns, not a skipped repeat.
        r = c.post("/v1/memories/duo/turns", json={"turns": [
            {"speaker": "Ola", "text": "ok", "agent_id": "planner", "time": "2024-01-01 10:00"},
            {"speaker": "Ola", "text": "ok", "agent_id": "critic", "time": "2024-01-01 10:00"}]})
        assert r.json()["added"] == 2


def test_a_turn_appended_in_place_is_found_by_a_filtered_search_at_once(server):
    with http(server) as c:
        search(c, "mia", k=3)  # the view is loaded; the next append extends it in place
        r = c.post("/v1/memories/mia/turns", json={"speaker": "Mia", "text": "a brand new soup idea: miso",
                                                     "agent_id": "chef", "metadata": {"topic": "new"}})
        assert r.status_code == 200 and r.json()["added"] == 1
        hits = search(c, "mia", query="miso soup", metadata={"topic": "new"})
        assert [h["text"] for h in hits] == ["a brand new soup idea: miso"]


@pytest.mark.parametrize("turn, field, code", [
    ({"metadata": "topic=food"}, "metadata", "invalid_metadata"),
    ({"metadata": [1, 2]}, "metadata", "invalid_metadata"),
    ({"metadata": {"a": {"b": {"c": {"d": {"e": 1}}}}}}, "metadata", "invalid_metadata"),
    ({"metadata": {"blob": "x" * 5000}}, "metadata", "invalid_metadata"),
    ({"agent_id": "two words"}, "agent_id", "invalid_id"),
    ({"agent_id": 7}, "agent_id", "invalid_id"),
])
def test_bad_metadata_or_agent_is_a_typed_400_naming_the_field_and_writes_nothing(server, turn, field, code):
    with http(server) as c:
        before = c.get("/v1/memories/mia").json()["turns"]
        r = c.post("/v1/memories/mia/turns", json={"turns": [
            {"speaker": "Mia", "text": "fine"}, {"speaker": "Mia", "text": "bad", **turn}]})
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["code"] == code and err["field"] == f"turns[1].{field}"
        assert c.get("/v1/memories/mia").json()["turns"] == before


@pytest.mark.parametrize("body, field, code", [
    ({"from": "2024-13-45"}, "from", "invalid_time"),
    ({"from": "2024-05-02", "to": "2024-05-01"}, "to", "invalid_time"),
    ({"metadata": "food"}, "metadata", "invalid_metadata"),
    ({"agent_id": "a\nb"}, "agent_id", "control_character"),
    ({"speaker": "A\tB"}, "speaker", "control_character"),
])
def test_bad_filters_are_typed_400s(server, body, field, code):
    with http(server) as c:
        r = c.post("/v1/memories/mia/search", json={"query": "soup", **body})
        assert r.status_code == 400 and r.json()["error"]["field"] == field
        assert r.json()["error"]["code"] == code
        r = c.get("/v1/memories/mia/turns", params={k: json.dumps(v) if isinstance(v, dict) else v
                                                    for k, v in body.items()})
        assert r.status_code == 400 and r.json()["error"]["field"] == field


def test_both_python_clients_send_the_fields_and_the_filters(server):
    with MemoryClient(server.url) as mem:
        mem.add("cli", [{"speaker": "Ivo", "text": "my bike is a green gravel bike", "agent_id": "garage",
                         "metadata": {"kind": "fact"}},
                        {"speaker": "Ivo", "text": "my other bike is a red road bike", "agent_id": "shop"}])
        hits = mem.search("cli", "which bike?", agent_id="garage")["packets"]
        assert [h["metadata"] for h in hits] == [{"kind": "fact"}]
        assert mem.turns("cli", metadata={"kind": "fact"})["total"] == 1
        with pytest.raises(TypeError):
            mem.search("cli", "which bike?", agent="garage")
        with pytest.raises(ServiceRequestError) as e:
            mem.search("cli", "bike", time_from="not a date")
        assert e.value.field == "from"

    async def go():
        async with AsyncMemoryClient(server.url) as mem:
            hits = (await mem.search("cli", "which bike?", agent_id="shop", k=5))["packets"]
            page = await mem.turns("cli", agent_id="shop", time_from="2000-01-01")
            return hits, page
    hits, page = asyncio.run(go())
    assert [h["agent_id"] for h in hits] == ["shop"] and page["total"] == 1


async def _mcp(url: str):
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    async with streamablehttp_client(url + "/mcp") as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            added = await session.call_tool("add_turns", {"user_id": "mcpf", "turns": [
                {"speaker": "Uma", "text": "the parcel goes to the north gate", "agent_id": "courier",
                 "metadata": {"priority": "high"}, "time": "2024-06-01 08:00"},
                {"speaker": "Uma", "text": "the parcel goes to the south gate", "agent_id": "clerk",
                 "time": "2024-06-02 08:00"}]})
            scoped = await session.call_tool("search", {"user_id": "mcpf", "query": "where does the parcel go?",
                                                        "agent_id": "clerk"})
            meta = await session.call_tool("search", {"user_id": "mcpf", "query": "parcel",
                                                      "metadata": {"priority": "high"}})
            listed = await session.call_tool("list_turns", {"user_id": "mcpf", "time_from": "2024-06-02"})
            bad = await session.call_tool("search", {"user_id": "mcpf", "query": "parcel", "time_to": "soon"})
            return added, scoped, meta, listed, bad


def test_mcp_tools_take_metadata_agent_and_filters(server):
    added, scoped, meta, listed, bad = asyncio.run(_mcp(server.url))
    assert not added.isError and added.structuredContent["added"] == 2
    assert [p["agent_id"] for p in scoped.structuredContent["packets"]] == ["clerk"]
    assert [p["metadata"] for p in meta.structuredContent["packets"]] == [{"priority": "high"}]
    assert [t["text"] for t in listed.structuredContent["turns"]] == ["the parcel goes to the south gate"]
    assert bad.isError and '"field": "time_to"' in bad.content[0].text


def test_memory_api_stores_metadata_and_filters_search_and_get_all(tmp_path):
    cfg = apply_preset("model-free", PipelineConfig()).replace(model={"embedder": "hash"})
    with Memory(tmp_path / "m.sqlite", cfg, embedder=HashEmbedder(dim=64)) as mem:
        mem.add("me", [{"time": "2024-02-01", "turns": [
            {"speaker": "Kai", "text": "I planted tulips", "agent_id": "garden", "metadata": {"bed": 1}},
            {"speaker": "Kai", "text": "I planted roses", "agent_id": "garden", "metadata": {"bed": 2}},
            {"speaker": "Kai", "text": "I planted nothing today", "agent_id": "diary"}]}])
        hits = mem.search("me", "what did I plant?", k=3, filters=TurnFilter.make(metadata={"bed": 2}))
        assert [h.packet.content for h in hits] == ["I planted roses"]
        assert hits[0].packet.agent_id == "garden" and json.loads(hits[0].packet.metadata_json) == {"bed": 2}
        page = mem.get_all("me", filters=TurnFilter.make(agent_id="diary"))
        assert page.total == 1 and page.packets[0].content == "I planted nothing today"
        assert mem.search("me", "plant", filters=TurnFilter.make(time_to="2024-01-31")) == []
