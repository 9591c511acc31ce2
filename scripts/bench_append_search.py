"""Latency of one appended turn becoming searchable on the model-free preset.

Stores N turns (sessions of 10, default 600), searches once so the view is loaded, then R
times (default 30) adds one new turn and searches for it; prints p50 and p95 of the add,
the search after it, and their sum. ``--in-place`` adds with ``Memory.add(..., in_place=True)``
(the turn built and the loaded view extended in the add; the search then loads nothing).
``--turn-words W`` pads every stored turn to about W words (a history of long assistant-style
replies); ``--set SECTION.FIELD=VALUE`` changes a config field (a bare FIELD is a fusion field),
e.g. ``--set ranker_model=/path/to/model.json`` (a model file of ``research/train_ranker_variants.py``). Usage:
``python scripts/bench_append_search.py [--turns N] [--repeats R] [--embedder hash] [--in-place]
[--turn-words W] [--set FIELD=VALUE]``.
Figures depend on the machine and how busy it is; compare runs made on the same machine.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from memcompile_local.config import PipelineConfig
from memcompile_local.pipeline.presets import apply_preset
from memcompile_local.memory import Memory
from memcompile_local.store import MemoryStore

PEOPLE = ("Ana", "Ben")
TOPICS = ("hiking", "the garden", "a new job", "the concert", "cooking", "a trip to Lisbon", "painting")


def _turn(i: int, words: int = 0) -> dict:
    text = f"I spent time on {TOPICS[i % len(TOPICS)]} with friend {i % 37} today."
    filler = [f"step{(i * 7 + j) % 97}" for j in range(max(0, words - len(text.split())))]
    return {"speaker": PEOPLE[i % 2], "text": " ".join([text, *filler])}


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=600)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--embedder", default="hash")
    ap.add_argument("--in-place", action="store_true", help="Memory.add(..., in_place=True)")
    ap.add_argument("--turn-words", type=int, default=0, help="pad every stored turn to about this many words")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE")
    args = ap.parse_args()
    cfg = apply_preset("model-free", PipelineConfig()).replace(model={"embedder": args.embedder})
    if args.set:
        from dev_corpora import config_changes  # scripts/ is on sys.path when this file runs

        cfg = cfg.replace(**config_changes(args.set))
    with tempfile.TemporaryDirectory() as folder:
        store = MemoryStore(Path(folder) / "s.sqlite")
        mem = Memory(store, cfg)
        sessions = [{"time": f"2024-01-{1 + (s % 28):02d} 10:{s % 60:02d}",
                     "turns": [_turn(s * 10 + j, args.turn_words) for j in range(10)]} for s in range(args.turns // 10)]
        mem.add("bench", sessions)
        mem.search("bench", "what did Ana do?")
        adds, searches = [], []
        for k in range(args.repeats):
            t0 = time.perf_counter()
            mem.add("bench", [{"time": f"2025-02-01 09:{k % 60:02d}",
                               "turns": [{"speaker": "Ana", "text": f"I adopted a parrot named Zed{k}."}]}],
                    in_place=args.in_place)
            t1 = time.perf_counter()
            hits = mem.search("bench", f"parrot Zed{k}")
            t2 = time.perf_counter()
            adds.append(t1 - t0)
            searches.append(t2 - t1)
            assert hits, "the appended turn should be found"
        store.close()
    total = [a + s for a, s in zip(adds, searches)]
    print(f"model-free preset, {args.embedder} embedder, {args.turns} stored turns"
          f"{f' of about {args.turn_words} words' if args.turn_words else ''}, {args.repeats} appends"
          f"{' in place' if args.in_place else ''}{''.join(f', {kv}' for kv in args.set)}")
    for name, vals in (("add", adds), ("search after add", searches), ("add + search", total)):
        print(f"{name:>18}: p50 {1000 * statistics.median(vals):6.1f} ms   p95 {1000 * _pct(vals, 0.95):6.1f} ms")


if __name__ == "__main__":
    main()
