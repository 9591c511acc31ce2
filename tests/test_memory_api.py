"""The Memory API an agent calls: growing memory across add calls, search, get_all,
delete_turn, and views that are built once and never outlive the data (issues 15.1, 16.1, 16.3).

Everything runs on the model-free path with the hash embedder: no model is loaded.
"""

from __future__ import annotations

import sqlite3
import threading

import pytest

from memcompile_local.adapters.scripted import HashEmbedder
from memcompile_local.config import PipelineConfig
from memcompile_local.errors import ConfigError
from memcompile_local.pipeline.presets import apply_preset
from memcompile_local.llm.client import LLMClient, NoModelBackend
from memcompile_local.memory import Memory
from memcompile_local.store import MemoryStore

from _threads import run_threads

MONDAY = {"time": "2024-03-04 09:00", "turns": [
    {"speaker": "Ana", "text": "My sister Lena adopted a grey cat called Pepper."},
    {"speaker": "Ben", "text": "Pepper is a lovely name for a cat."},
]}
TUESDAY = {"time": "2024-03-05 18:30", "turns": [
    {"speaker": "Ana", "text": "I start my pottery class in Leeds next week."},
    {"speaker": "Ben", "text": "Which day is the pottery class?"},
]}


def memory(path, **kw) -> Memory:
    store = MemoryStore(path)
    return Memory(store, apply_preset("model-free", PipelineConfig()), embedder=HashEmbedder(dim=64),
                  client=LLMClient(NoModelBackend(), store), **kw)


@pytest.fixture
def mem(tmp_path):
    m = memory(tmp_path / "m.sqlite")
    yield m
    m.store.close()


# ------------------------------------------------------------------ stable ids across add calls


def test_a_second_add_appends_a_new_session_instead_of_colliding(mem):
    assert mem.add("alice", [MONDAY]).added == 2
    res = mem.add("alice", [TUESDAY])  # raised ImmutablePacketError on 'S1:1' before
    assert res.added == 2
    ids = [p.packet_id for p in mem.store.packets("alice")]
    assert ids == ["S1:1", "S1:2", "S2:1", "S2:2"]
    assert [p.session_index for p in mem.store.packets("alice")] == [1, 1, 2, 2]


def test_resending_sessions_is_idempotent(mem):
    mem.add("alice", [MONDAY, TUESDAY])
    again = mem.add("alice", [MONDAY, TUESDAY])
    assert (again.added, again.skipped) == (0, 4)
    assert mem.add("alice", TUESDAY).added == 0  # one session dict on its own


def test_turns_appended_one_at_a_time_continue_their_session(mem):
    mem.add("alice", [MONDAY])
    third = {"time": MONDAY["time"], "turns": [{"speaker": "Ana", "text": "She found Pepper at the shelter."}]}
    assert mem.add("alice", [third]).added == 1
    # The whole session re-sent with one more turn adds only that turn.
    longer = {"time": MONDAY["time"], "turns": MONDAY["turns"] + third["turns"] +
              [{"speaker": "Ben", "text": "Shelter cats are the best."}]}
    assert mem.add("alice", [longer]).added == 1
    packets = mem.store.packets("alice")
    assert [p.packet_id for p in packets] == ["S1:1", "S1:2", "S1:3", "S1:4"]
    assert {p.session_index for p in packets} == {1}


def test_given_ids_are_kept_and_numbering_skips_them(mem):
    mem.add("alice", [{"time": "t0", "id": "kickoff", "turns": [
        {"speaker": "Ana", "text": "hello", "id": "S1:2"}]}])
    mem.add("alice", [{"time": "t1", "turns": [{"speaker": "Ana", "text": "a"}, {"speaker": "Ana", "text": "b"}]}])
    ids = {p.packet_id: p.session_id for p in mem.store.packets("alice")}
    assert ids == {"S1:2": "kickoff", "S2:1": "session_2", "S2:2": "session_2"}


# ------------------------------------------------------------------ search / get_all


def test_search_returns_the_compiled_selection_with_scores(mem):
    mem.add("alice", [MONDAY, TUESDAY])
    hits = mem.search("alice", "What is the name of the cat Lena adopted?", k=3)
    assert [h.rank for h in hits] == [1, 2, 3]
    assert hits[0].packet.content.startswith("My sister Lena adopted")
    scores = [h.score for h in hits]
    assert all(isinstance(s, float) for s in scores) and scores == sorted(scores, reverse=True)
    ctx = mem.compile("alice", "What is the name of the cat Lena adopted?")
    assert [h.packet.packet_id for h in mem.search("alice", "What is the name of the cat Lena adopted?")] \
        == list(ctx.packet_ids)


def test_get_all_pages_through_dialogue_order(mem):
    mem.add("alice", [MONDAY, TUESDAY])
    first = mem.get_all("alice", limit=3)
    assert [p.packet_id for p in first.packets] == ["S1:1", "S1:2", "S2:1"]
    assert first.total == 4 and first.next_offset == 3
    rest = mem.get_all("alice", offset=first.next_offset, limit=3)
    assert [p.packet_id for p in rest.packets] == ["S2:2"] and rest.next_offset is None
    with pytest.raises(ConfigError):
        mem.get_all("alice", limit=0)


# ------------------------------------------------------------------ delete_turn


def _bytes_of_store(path) -> bytes:
    data = path.read_bytes()
    wal = path.with_name(path.name + "-wal")
    return data + (wal.read_bytes() if wal.exists() else b"")


def test_delete_turn_leaves_no_trace_and_the_memory_still_answers(tmp_path):
    path = tmp_path / "m.sqlite"
    mem = memory(path)
    mem.add("alice", [MONDAY, TUESDAY])
    question = "What is the name of the cat Lena adopted?"
    assert "S1:1" in mem.compile("alice", question).packet_ids
    secret = "adopted a grey cat"
    assert secret.encode() in _bytes_of_store(path)

    counts = mem.delete_turn("alice", "S1:1")
    assert counts["packets"] == 1 and counts["descriptors"] >= 1 and counts["embeddings"] >= 1
    assert [p.packet_id for p in mem.store.packets("alice")] == ["S1:2", "S2:1", "S2:2"]
    # The cached view of before the delete is not served; the rebuilt memory answers without it.
    ctx = mem.compile("alice", question)
    assert "S1:1" not in ctx.packet_ids and secret not in ctx.text
    assert mem.is_built("alice")
    mem.store.close()
    assert secret.encode() not in _bytes_of_store(path)
    with sqlite3.connect(path) as db:  # nothing derived from it is left behind
        assert db.execute("SELECT COUNT(*) FROM descriptors WHERE packet_id = 'S1:1'").fetchone()[0] == 0
        assert db.execute("SELECT COUNT(*) FROM embeddings WHERE key LIKE 'S1:1|%'").fetchone()[0] == 0
        assert db.execute("SELECT COUNT(*) FROM descriptors WHERE text LIKE '%grey cat%'").fetchone()[0] == 0


def test_delete_turn_of_an_unknown_turn_is_a_clear_error(mem):
    mem.add("alice", [MONDAY])
    with pytest.raises(ConfigError, match="no turn 'S9:9'"):
        mem.delete_turn("alice", "S9:9")


# ------------------------------------------------------------------ views


def test_concurrent_first_compiles_build_the_view_once(mem):
    mem.add("alice", [MONDAY, TUESDAY])
    built: list[int] = []
    original = mem._load_view

    def counting(namespace):
        built.append(1)
        return original(namespace)

    mem._load_view = counting  # type: ignore[method-assign]
    barrier = threading.Barrier(16)
    views: list[object] = []

    def worker(_: int) -> None:
        barrier.wait()
        views.append(mem.view("alice"))

    assert not run_threads(worker, 16)
    assert len(built) == 1
    assert len({id(v) for v in views}) == 1


def test_a_view_is_not_used_after_another_process_forgets_and_rewrites(tmp_path):
    path = tmp_path / "m.sqlite"
    long_lived = memory(path)
    long_lived.add("carol", [MONDAY, TUESDAY])
    assert "Pepper" in long_lived.compile("carol", "What is the cat called?").text
    other = memory(path)  # a second connection stands in for the other process
    other.forget("carol")
    other.add("carol", [{"time": "2024-04-01", "turns": [
        {"speaker": "Ana", "text": "We moved to Porto."}, {"speaker": "Ben", "text": "Porto is sunny."}]}])
    other.store.close()
    ctx = long_lived.compile("carol", "What is the cat called?")
    assert "Pepper" not in ctx.text and "Porto" in ctx.text
    long_lived.store.close()


def test_no_build_fails_fast_on_a_namespace_that_is_not_built(mem):
    mem.add("alice", [MONDAY])
    assert not mem.is_built("alice")
    plan = mem.plan_build("alice")
    assert (plan.to_extract, plan.extractor, plan.calls_max) == (2, "rule", 0)
    assert "no model calls" in plan.describe()
    with pytest.raises(ConfigError, match="not built"):
        mem.compile("alice", "cat?", build=False)
    assert mem.store.extracted_packet_ids("alice", mem.extractor().descriptor_set) == set()
    mem.compile("alice", "cat?")
    assert mem.is_built("alice") and mem.plan_build("alice").up_to_date


def test_delete_turn_drops_cached_model_calls_that_quoted_it(tmp_path):
    from memcompile_local.adapters.scripted import ScriptedBackend

    path = tmp_path / "m.sqlite"
    store = MemoryStore(path)
    mem = Memory(store, apply_preset("model-free", PipelineConfig()), embedder=HashEmbedder(dim=64),
                 client=LLMClient(ScriptedBackend(lambda r: "Pepper"), store))
    mem.add("alice", [MONDAY, TUESDAY])
    assert mem.answer("alice", "What is the cat called?").text == "Pepper"
    with sqlite3.connect(path) as db:
        quoting = db.execute("SELECT COUNT(*) FROM request_cache WHERE identity_json LIKE '%grey cat%'").fetchone()[0]
    assert quoting == 1
    counts = mem.delete_turn("alice", "S1:1")
    assert counts["request_cache"] == 1 and counts.scrub_complete
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT COUNT(*) FROM request_cache WHERE identity_json LIKE '%grey cat%'"
                          ).fetchone()[0] == 0
    # The next turn was extracted with the deleted one as context: it is extracted again.
    assert "S1:2" not in store.extracted_packet_ids("alice", mem.extractor().descriptor_set)
    mem.compile("alice", "cat?")
    assert "S1:2" in store.extracted_packet_ids("alice", mem.extractor().descriptor_set)
    store.close()


def test_search_on_an_address_plane_path_scores_from_the_pool(tmp_path):
    store = MemoryStore(tmp_path / "m.sqlite")
    cfg = apply_preset("A2", PipelineConfig()).replace(extraction={"extractor": "rule", "intent_source": "rule"})
    mem = Memory(store, cfg, embedder=HashEmbedder(dim=64), client=LLMClient(NoModelBackend(), store))
    mem.add("alice", [MONDAY, TUESDAY])
    hits = mem.search("alice", "Where is the pottery class?", k=2)
    assert len(hits) == 2 and hits[0].rank == 1
    assert any("pottery" in h.packet.content for h in hits)
    assert all(h.score is None or isinstance(h.score, float) for h in hits)
    assert any(h.score is not None for h in hits)
    store.close()


def test_an_add_while_a_current_view_is_held_does_not_read_the_namespace(mem, monkeypatch):
    """Stable ids are given against the held view's packets (the stored ones at its generation):
    the same ids as against a store read, without the read; a stale view is never used."""
    mem.add("alice", [MONDAY])
    mem.view("alice")
    reads: list[str] = []
    real = mem.store.packets
    monkeypatch.setattr(mem.store, "packets", lambda ns: reads.append(ns) or real(ns))
    third = {"time": MONDAY["time"], "turns": [{"speaker": "Ana", "text": "She found Pepper at the shelter."}]}
    assert mem.add("alice", [third], in_place=False).added == 1 and reads == []
    # Stored only: the view is stale now (the add moved the generation), so the next add reads
    # the store.
    assert mem.add("alice", [MONDAY, TUESDAY], in_place=False).added == 2 and reads == ["alice"]
    assert [p.packet_id for p in real("alice")] == ["S1:1", "S1:2", "S1:3", "S2:1", "S2:2"]
    # By default an add extends the held view, which stays current: the next add reads nothing.
    mem.view("alice")
    reads.clear()
    fourth = {"time": TUESDAY["time"], "turns": [{"speaker": "Ana", "text": "Pepper chased a moth."}]}
    fifth = {"time": TUESDAY["time"], "turns": [{"speaker": "Ben", "text": "Did Pepper catch it?"}]}
    assert mem.add("alice", [fourth]).added == 1 and mem.add("alice", [fifth]).added == 1
    assert reads == []
    assert [p.packet_id for p in real("alice")][-2:] == ["S2:3", "S2:4"]


def test_an_add_in_place_is_searchable_without_a_reload_and_equals_a_fresh_memory(mem, monkeypatch):
    mem.add("alice", [MONDAY])
    mem.view("alice")
    loads: list[str] = []
    real = mem.views.loader.load
    monkeypatch.setattr(mem.views.loader, "load", lambda *a: loads.append(a[-1]) or real(*a))
    third = {"time": MONDAY["time"], "turns": [{"speaker": "Ana", "text": "Pepper sleeps on the piano all day."}]}
    assert mem.add("alice", [third]).added == 1  # in place is the default
    ctx = mem.compile("alice", "Where does Pepper sleep?")
    assert loads == [] and "piano" in ctx.text
    fresh = memory(mem.store.path)
    assert fresh.compile("alice", "Where does Pepper sleep?").packet_ids == ctx.packet_ids
    # Sent again: nothing added, and the plain path (a known id) is taken.
    assert mem.add("alice", [third], in_place=True).added == 0
    fresh.store.close()


def test_an_impossible_question_date_is_refused_not_ignored(mem):
    """``2025-13-01`` used to read as no date at all (relative times lost their anchor
    silently); it is an InvalidArgumentError naming the argument, as the service's 400 is."""
    from memcompile_local.errors import InvalidArgumentError

    mem.add("u", [{"time": "2024-05-01 10:00", "turns": [{"speaker": "A", "text": "I bought a kayak last week."}]}])
    assert mem.search("u", "What did A buy last month?", k=1, question_date="2024-06-01")
    for bad, why in (("2025-13-01", "month 13"), ("2024-31-12", "month 31"), ("whenever", "'whenever'")):
        with pytest.raises(InvalidArgumentError, match="question_date") as err:
            mem.search("u", "What did A buy?", question_date=bad)
        assert why in str(err.value)
        with pytest.raises(InvalidArgumentError):
            mem.compile("u", "What did A buy?", question_date=bad)
