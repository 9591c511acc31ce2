"""A turn's agent and metadata (schema version 5): stored, canonical, immutable, and upgraded into."""

from __future__ import annotations

import sqlite3

import pytest

from memcompile_local.errors import ImmutablePacketError, StoreError
from memcompile_local.store import SCHEMA_VERSION, MemoryStore
from memcompile_local.types import Conversation, Session, Turn


def one_turn(ns: str, **extra) -> Conversation:
    turn = Turn(packet_id="S1:1", speaker="Ada", text="I moved the herb pots to the balcony.", **extra)
    return Conversation(namespace=ns, sessions=(Session(index=1, session_id="s1", time="2026-05-01", turns=(turn,)),))


def test_agent_and_metadata_round_trip_in_canonical_form(store_factory):
    with store_factory() as store:
        store.ingest(one_turn("u", agent_id="planner", metadata_json='{ "b": 2, "a": [1, "x"] }'))
        (p,) = store.packets("u")
    assert p.agent_id == "planner"
    assert p.metadata_json == '{"a":[1,"x"],"b":2}'  # sorted keys, no spaces
    with store_factory() as store:
        # the same metadata written differently is the same turn: a retry is skipped, not refused
        assert store.ingest(one_turn("u", agent_id="planner", metadata_json='{"a":[1,"x"], "b":2}')).skipped == 1


def test_a_turn_without_scope_reads_back_none(store_factory):
    with store_factory() as store:
        store.ingest(one_turn("u"))
        (p,) = store.packets("u")
    assert p.agent_id is None and p.metadata_json is None


@pytest.mark.parametrize("changed", [{"agent_id": "other"}, {"metadata_json": '{"a": 1}'}])
def test_a_stored_turn_keeps_its_agent_and_metadata(store_factory, changed):
    with store_factory() as store:
        store.ingest(one_turn("u", agent_id="planner", metadata_json='{"a": 0}'))
        with pytest.raises(ImmutablePacketError, match="agent_id|metadata_json"):
            store.ingest(one_turn("u", **{"agent_id": "planner", "metadata_json": '{"a": 0}', **changed}))


@pytest.mark.parametrize("bad", ["[1, 2]", "{not json", "7"])
def test_metadata_that_is_not_a_json_object_is_refused_with_its_place(store_factory, bad):
    with store_factory() as store:
        with pytest.raises(StoreError, match=r"Turn.metadata_json \(namespace 'u', packet 'S1:1'\)"):
            store.ingest(one_turn("u", metadata_json=bad))
        assert store.packet_count("u") == 0


def test_a_version_4_store_is_upgraded_in_place_and_keeps_its_turns(tmp_path):
    path = tmp_path / "m.sqlite"
    with MemoryStore(path) as store:
        store.ingest(one_turn("u"))
    con = sqlite3.connect(path)
    # Make it a version-4 file again: the packets table without the two new columns.
    con.executescript(
        "ALTER TABLE packets DROP COLUMN agent_id; ALTER TABLE packets DROP COLUMN metadata_json;"
        "PRAGMA user_version = 4;")
    con.close()
    with MemoryStore(path) as store:
        assert store.stats()["schema_version"] == SCHEMA_VERSION == 6
        (p,) = store.packets("u")
        assert p.content.startswith("I moved") and p.agent_id is None
        store.ingest(Conversation(namespace="u", sessions=(Session(index=1, session_id="s1", time="2026-05-01", turns=(
            Turn(packet_id="S1:2", speaker="Ada", text="The basil likes it there.", agent_id="a1",
                 metadata_json='{"mood": "glad"}'),)),)))
        assert [q.agent_id for q in store.packets("u")] == [None, "a1"]
