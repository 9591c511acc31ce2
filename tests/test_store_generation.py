"""Per-namespace generations: every write and every forget moves them, in every process.

The cross-process test reproduces issue 15.1: a long-lived ``Memory`` keeps a view of ``carol``;
another process forgets ``carol`` and adds as many new turns as she had before; the long-lived
process must not answer from the forgotten turns (its cache used to be keyed on the packet count).
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from memcompile_local.store import MemoryStore
from memcompile_local.types import Cell, Conversation, Session, Turn

REPO = Path(__file__).resolve().parents[1]


def two_turns(ns: str, texts: tuple[str, str], session: int = 1) -> Conversation:
    turns = tuple(Turn(packet_id=f"D{session}:{i + 1}", speaker=("Carol", "Dan")[i % 2], text=t)
                  for i, t in enumerate(texts))
    return Conversation(namespace=ns, sessions=(
        Session(index=session, session_id=f"session_{session}", time="2:00 pm on 3 June, 2024",
                turns=turns),))


def test_every_write_moves_the_generation_and_reads_do_not(store_factory):
    with store_factory() as s:
        seen = [s.generation("carol")]
        s.ingest(two_turns("carol", ("hello there", "hi back")))
        seen.append(s.generation("carol"))
        s.ingest(two_turns("carol", ("hello there", "hi back")))  # nothing new: no change
        assert s.generation("carol") == seen[-1]
        s.packets("carol"), s.stats(), s.descriptors("carol", "set")  # reads: no change
        assert s.generation("carol") == seen[-1]
        s.save_extraction("carol", "set", "D1:1", [])
        seen.append(s.generation("carol"))
        s.save_cells("carol", "lay", [Cell(cell_id=0, descriptor_ids=(), tokens=0, people=frozenset(),
                                           keywords=frozenset(), session_min=1, session_max=1,
                                           title="t", has_time=False)])
        seen.append(s.generation("carol"))
        s.save_embeddings("carol", "m", ["D1:1"], np.ones((1, 3), dtype=np.float32))
        seen.append(s.generation("carol"))
        s.set_meta("carol", "k", "v")
        seen.append(s.generation("carol"))
        other = s.generation("dan")
        s.ingest(two_turns("dan", ("x", "y")))
        assert s.generation("carol") == seen[-1]  # another namespace's write leaves carol alone
        assert s.generation("dan") != other
        s.forget("carol")
        seen.append(s.generation("carol"))
        s.ingest(two_turns("carol", ("hello there", "hi back")))  # the very same turns again
        seen.append(s.generation("carol"))
    assert seen == sorted(seen) and len(set(seen)) == len(seen), seen


def test_sqlite_generation_survives_reopen_and_upgrades_a_version_1_file(tmp_path):
    path = tmp_path / "old.sqlite"
    with MemoryStore(path) as s:
        s.ingest(two_turns("carol", ("a", "b")))
        s.ingest(two_turns("dan", ("c", "d")))
    # Turn the file back into what version 1 wrote: no generation tables, user_version 1.
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("DROP TABLE generations")
    con.execute("DROP TABLE counters")
    con.execute("PRAGMA user_version = 1")
    con.close()
    with MemoryStore(path) as s:
        g_carol, g_dan = s.generation("carol"), s.generation("dan")
        assert g_carol != g_dan and min(g_carol, g_dan) >= 1
        s.forget("carol")
        assert s.generation("carol") > max(g_carol, g_dan)
        after = s.generation("dan")
    with MemoryStore(path) as s:
        assert s.generation("dan") == after
        assert s.packets("dan")[0].content == "c"


_LONG_LIVED = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, sys.argv[2])
    from memcompile_local.config import PipelineConfig
    from memcompile_local.pipeline.presets import apply_preset
    from memcompile_local.memory import Memory

    cfg = apply_preset("model-free", PipelineConfig()).replace(model={"embedder": "hash"})
    with Memory(sys.argv[1], cfg) as mem:
        print("READY", flush=True)
        for line in sys.stdin:
            ctx = mem.compile("carol", line.strip())
            print(json.dumps({"text": ctx.text}), flush=True)
    """
)

_FORGET_AND_ADD = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, sys.argv[2])
    from memcompile_local.memory import Memory
    from memcompile_local.types import Conversation, Session, Turn

    with Memory(sys.argv[1]) as mem:
        mem.forget("carol")
        turns = (Turn(packet_id="D1:1", speaker="Carol", text="I started a watercolour class today."),
                 Turn(packet_id="D1:2", speaker="Dan", text="Watercolour sounds relaxing, enjoy it."))
        mem.add("carol", Conversation(namespace="carol", sessions=(
            Session(index=1, session_id="session_1", time="9:00 am on 4 June, 2024", turns=turns),)))
    """
)


def test_forget_in_another_process_is_seen_by_a_long_lived_memory(store_factory):
    db = store_factory.location
    secret = "My locker code is 4417 and my iguana is called Zorblat."
    with store_factory() as s:
        s.ingest(two_turns("carol", (secret, "Zorblat is a great name for an iguana.")))
    proc = subprocess.Popen([sys.executable, "-c", _LONG_LIVED, str(db), str(REPO)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "READY"
        proc.stdin.write("What is the iguana called?\n")
        proc.stdin.flush()
        first = json.loads(proc.stdout.readline())["text"]
        assert "Zorblat" in first  # the view was built and cached
        subprocess.run([sys.executable, "-c", _FORGET_AND_ADD, str(db), str(REPO)], check=True,
                       timeout=120)
        with store_factory() as s:
            assert s.packet_count("carol") == 2  # same count as before: the old cache key matched
        proc.stdin.write("What is the iguana called?\n")
        proc.stdin.flush()
        second = json.loads(proc.stdout.readline())["text"]
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    assert "Zorblat" not in second and "4417" not in second, second
    assert "watercolour" in second.lower()


def test_absent_namespace_reports_a_value_past_every_earlier_one(store_factory):
    ns = "never-written"
    with store_factory() as s:
        before = s.generation(ns)
        s.ingest(two_turns("carol", ("a", "b")))
        assert s.generation(ns) > before
        assert s.generation(ns) >= s.generation("carol")
