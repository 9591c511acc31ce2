"""Copying memories between stores (issue 22): every row the protocol can read arrives equal,
the copied memory answers with the same selections without a rebuild, and a copy that cannot
finish writes nothing of its namespace."""

from __future__ import annotations

import subprocess
import sys

import pytest

from memcompile_local.adapters.scripted import HashEmbedder
from memcompile_local.cli import main
from memcompile_local.config import PipelineConfig
from memcompile_local.data import example_conversation_path, load_any
from memcompile_local.errors import StoreError
from memcompile_local.llm.client import LLMClient, NoModelBackend
from memcompile_local.memory import Memory
from memcompile_local.pipeline.presets import apply_preset
from memcompile_local.store import MemoryStore
from memcompile_local.store.copy import copy_namespace, copy_store, differences
from memcompile_local.types import Conversation, Session, Turn

from _dict_store import DictStore

QUESTIONS = ["Where did they go hiking?", "What did she say about her new job?", "When is the trip planned?",
             "What pet do they have?"]


def memory(store) -> Memory:
    return Memory(store, apply_preset("model-free", PipelineConfig()), embedder=HashEmbedder(dim=64),
                  client=LLMClient(NoModelBackend(), store))


def built(store, ns: str = "demo") -> Memory:
    mem = memory(store)
    conv = load_any(str(example_conversation_path()))
    conv = conv[0] if isinstance(conv, list) else conv
    store.ingest(Conversation(namespace=ns, sessions=conv.sessions))
    # A scoped turn and capsules, so the copy carries the newer columns and tables too.
    store.ingest(Conversation(namespace=ns, sessions=(Session(index=99, session_id="extra", time="2026-01-02", turns=(
        Turn(packet_id="X:1", speaker="Agent", text="Noted the user's seat preference.", agent_id="planner",
             metadata_json='{"source": "chat", "n": 2}'),)),)))
    mem.build(ns)
    store.put_capsules(ns, "test-writer", 3, [{"capsule_id": "c1", "sources": ["X:1"], "text": "seat"}])
    return mem


def selections(mem: Memory, ns: str = "demo") -> list[list[str]]:
    return [[h.packet.packet_id for h in mem.search(ns, q, build=False)] for q in QUESTIONS]


def test_cli_copy_between_two_files_is_equal_row_by_row_and_answers_without_a_rebuild(tmp_path, capsys):
    src_path, dst_path = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    with MemoryStore(src_path) as src:
        before = selections(built(src))
        inventory = src.inventory("demo")
    assert inventory["descriptor_sets"] and inventory["layouts"] and inventory["embeddings"]
    assert main(["copy", "--from", str(src_path), "--to", str(dst_path)]) == 0
    out = capsys.readouterr().out
    assert "copied 1 namespaces" in out and "1 capsules" in out
    with MemoryStore(src_path) as src, MemoryStore(dst_path) as dst:
        assert differences(src, dst, "demo") == []
        generation = dst.generation("demo")
        assert selections(memory(dst)) == before
        assert dst.generation("demo") == generation  # nothing was built or written on the copy
        scoped = dst.get_packet("demo", "X:1")
        assert scoped.agent_id == "planner" and scoped.metadata_json == '{"n":2,"source":"chat"}'


def test_a_copy_through_another_backend_and_back_is_the_same_memory(tmp_path):
    with MemoryStore(tmp_path / "a.sqlite") as src, MemoryStore(tmp_path / "c.sqlite") as back:
        before = selections(built(src))
        middle = DictStore()
        copy_store(src, middle)
        assert differences(src, middle, "demo") == []
        copy_store(middle, back)
        assert differences(src, back, "demo") == []
        assert selections(memory(back)) == before


def test_ordinals_follow_the_source_when_an_append_went_back_to_an_earlier_session(tmp_path):
    s1 = Session(index=1, session_id="s1", time="2026-01-01", turns=(Turn("S1:1", "A", "one"),))
    s2 = Session(index=2, session_id="s2", time="2026-01-02", turns=(Turn("S2:1", "B", "two"),))
    late = Session(index=1, session_id="s1", time="2026-01-01", turns=(Turn("S1:2", "A", "three"),))
    with MemoryStore(tmp_path / "a.sqlite") as src, MemoryStore(tmp_path / "b.sqlite") as dst:
        for s in (s1, s2, late):
            src.ingest(Conversation(namespace="u", sessions=(s,)))
        copy_namespace(src, dst, "u")
        assert [p.packet_id for p in dst.packets("u")] == ["S1:1", "S2:1", "S1:2"]
        assert differences(src, dst, "u") == []


def test_an_existing_namespace_is_refused_and_left_as_it_was(tmp_path):
    with MemoryStore(tmp_path / "a.sqlite") as src, MemoryStore(tmp_path / "b.sqlite") as dst:
        built(src)
        dst.ingest(Conversation(namespace="demo", sessions=(
            Session(index=1, session_id="s", time="", turns=(Turn("Z:1", "Q", "mine"),)),)))
        with pytest.raises(StoreError, match="already exists"):
            copy_namespace(src, dst, "demo")
        assert [p.packet_id for p in dst.packets("demo")] == ["Z:1"]


def test_a_copy_that_fails_midway_writes_nothing_of_its_namespace(tmp_path, monkeypatch):
    with MemoryStore(tmp_path / "a.sqlite") as src, MemoryStore(tmp_path / "b.sqlite") as dst:
        built(src)

        def broken(*a, **k):
            raise StoreError("disk went away")

        monkeypatch.setattr(dst, "save_embeddings", broken)
        with pytest.raises(StoreError, match="disk went away"):
            copy_namespace(src, dst, "demo")
        assert dst.packet_count("demo") == 0 and dst.inventory("demo") == {
            "descriptor_sets": [], "layouts": [], "embeddings": [], "meta": []}
        assert dst.capsules("demo") == []


def test_the_copy_command_refuses_a_source_that_does_not_exist_and_creates_nothing(tmp_path):
    r = subprocess.run([sys.executable, "-m", "memcompile_local", "copy", "--from", str(tmp_path / "none.sqlite"),
                        "--to", str(tmp_path / "b.sqlite")], capture_output=True, text=True)
    assert r.returncode == 2 and "none.sqlite" in r.stderr
    assert not (tmp_path / "b.sqlite").exists()


def test_cli_copy_to_postgres_and_back_is_the_same_memory(tmp_path, pg_url, capsys):
    from memcompile_local.store import open_store

    src_path, back_path = tmp_path / "a.sqlite", tmp_path / "back.sqlite"
    with MemoryStore(src_path) as src:
        before = selections(built(src))
    assert main(["copy", "--from", str(src_path), "--to", pg_url]) == 0
    assert main(["copy", "--from", pg_url, "--to", str(back_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("ok (") == 4  # check passed on both sides of both copies
    with MemoryStore(src_path) as src, open_store(pg_url) as pg, MemoryStore(back_path) as back:
        assert differences(src, pg, "demo") == [] and differences(src, back, "demo") == []
        generation = pg.generation("demo")
        assert selections(memory(pg)) == before == selections(memory(back))
        assert pg.generation("demo") == generation
        assert pg.get_packet("demo", "X:1").metadata_json == '{"n":2,"source":"chat"}'
