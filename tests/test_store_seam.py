"""The storage seam is real: the core of the memory (add, build, search, compile, an append in
place, delete_turn, forget, view reuse) runs on a second, dict-based implementation of the
``Store`` protocol (tests/_dict_store.py) and gives exactly what it gives on SQLite."""

from __future__ import annotations

import pytest

from _data_paths import LOCOMO_MINI
from _dict_store import DictStore
from memcompile_local.adapters.scripted import HashEmbedder
from memcompile_local.config import PipelineConfig
from memcompile_local.data import load_locomo
from memcompile_local.errors import ConfigError
from memcompile_local.memory import Memory
from memcompile_local.pipeline.presets import apply_preset
from memcompile_local.store import Store, open_store

QUESTIONS = ("What did Caroline research?", "When did Melanie paint a sunrise?", "What books has Melanie read?")


def run_core(store) -> dict:
    """Everything the core suite observes, as plain data."""
    cfg = apply_preset("model-free", PipelineConfig()).replace(model={"embedder": "hash"})
    mem = Memory(store, cfg, embedder=HashEmbedder(dim=64))
    conv = load_locomo(LOCOMO_MINI)[0]
    out: dict = {}
    mem.add(conv.namespace, conv)
    out["build"] = mem.build(conv.namespace).packets
    ns = conv.namespace

    def observe(tag: str) -> None:
        for q in QUESTIONS:
            hits = mem.search(ns, q)
            out[f"{tag}:{q}"] = ([h.packet.packet_id for h in hits], [h.score for h in hits],
                                 mem.compile(ns, q).text)

    observe("built")
    view = mem.view(ns)
    assert mem.view(ns) is view  # reused while the store is unchanged
    # An append in place: the held view is extended, not reloaded.
    added = mem.add(ns, [{"time": "8:00 pm on 9 June, 2023", "turns": [
        {"speaker": "Caroline", "text": "I finished reading a book about owls and painted one.", "id": "X:1"}]}])
    out["added"] = added.added
    assert mem.cached_view(ns, generation=store.generation(ns)) is not None
    observe("appended")
    out["delete"] = {k: v for k, v in mem.delete_turn(ns, "X:1").items() if v}
    assert store.get_packet(ns, "X:1") is None
    observe("deleted")
    mem.forget(ns)
    assert ns not in store.namespaces()
    with pytest.raises(ConfigError):
        mem.compile(ns, QUESTIONS[0])
    return out


def test_the_dict_store_is_a_store():
    assert isinstance(DictStore(), Store)
    assert isinstance(open_store(":memory:"), Store)


def test_the_core_suite_gives_the_same_on_sqlite_and_on_a_second_store(tmp_path):
    sqlite = open_store(tmp_path / "m.sqlite")
    want = run_core(sqlite)
    sqlite.close()
    got = run_core(DictStore())
    assert want["build"] == got["build"] == 36 and want["added"] == got["added"] == 1
    for key in want:
        if key != "delete":
            assert got[key] == want[key], key
    # The same rows go on both; the dict store has no request cache or scrub to report.
    assert {k: want["delete"][k] for k in got["delete"]} == got["delete"]


def test_the_write_side_plans_a_deletion_and_the_store_refuses_a_stale_plan(tmp_path):
    from memcompile_local.build.deletion import plan_turn_deletion
    from memcompile_local.errors import StalePlanError

    store = open_store(tmp_path / "m.sqlite")
    mem = Memory(store, apply_preset("model-free", PipelineConfig()), embedder=HashEmbedder(dim=16))
    mem.add("u", [{"time": "2024-01-01", "id": "s1", "turns": [
        {"speaker": "A", "text": "first", "id": "a"}, {"speaker": "B", "text": "second line\nand more", "id": "b"},
        {"speaker": "A", "text": "third", "id": "c"}]},
        {"time": "2024-01-02", "id": "s2", "turns": [{"speaker": "B", "text": "next day", "id": "d"}]}])
    mem.build("u")
    plan = plan_turn_deletion(store, "u", "c")
    # The next turn in dialogue order is extracted again; the in-session neighbour's context
    # document quoted it (the next session's turn did not).
    assert plan.reextract == ("c", "d") and plan.embedding_key_prefixes == ("c|", "b|")
    assert plan_turn_deletion(store, "u", "b").quoted_lines[:2] == ("second line", "and more")
    store.set_meta("u", "other-writer", "1")  # the namespace moves on
    with pytest.raises(StalePlanError):
        store.delete_rows(plan)
    assert store.get_packet("u", "c") is not None  # nothing deleted
    assert mem.delete_turn("u", "c")["packets"] == 1  # Memory plans again
    store.close()


def test_the_core_suite_gives_the_same_on_sqlite_and_on_postgres(tmp_path, pg_url):
    sqlite = open_store(tmp_path / "m.sqlite")
    want = run_core(sqlite)
    sqlite.close()
    pg = open_store(pg_url)
    got = run_core(pg)
    pg.close()
    assert got == want  # the same rows deleted, to the request-cache counts


def test_memory_opens_a_database_url_and_the_postgres_store_is_every_protocol(pg_url):
    from memcompile_local.store.base import BuildLeases, RequestCache

    with Memory(pg_url, apply_preset("model-free", PipelineConfig()), embedder=HashEmbedder(dim=16)) as mem:
        assert isinstance(mem.store, Store) and isinstance(mem.store, RequestCache)
        assert isinstance(mem.store, BuildLeases)
        mem.add("u", [{"time": "2024-01-01", "turns": [{"speaker": "A", "text": "I keep bees on the roof."}]}])
        assert [h.packet.content for h in mem.search("u", "bees")] == ["I keep bees on the roof."]
