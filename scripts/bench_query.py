#!/usr/bin/env python
"""Query latency of the model-free path on a 700-turn history, question embedding included.

Two histories of ``--turns`` turns (default 700), each joined from whole sessions of the
development data and built once into ``--store`` (a rerun only loads them):

* dialogue: LoCoMo dev4's sessions (strictly alternating: ``ranker: auto`` takes the weighted sum);
* user-assistant: LongMemEval dev100's first haystacks' sessions (``ranker: auto`` takes the
  learned ranker).

For each, the questions of the corpus (the first ``--questions``) are asked ``--runs`` times
through ``Memory.compile`` (rule intent, question embedding, channels, ranker, selection; what
a search does) and, in the same run, through the plain dense baseline (the question embedded
alone, cosine with every raw turn, the ten best): a baseline measured beside it on the same
load. Prints the load average before and after and the medians (p50) and p95 in milliseconds.

    python scripts/bench_query.py --store /tmp/bench_query.sqlite
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memcompile_local.bench.baselines import raw_turn_matrix  # noqa: E402
from memcompile_local.config import PipelineConfig  # noqa: E402
from memcompile_local.data import load_locomo, load_longmemeval  # noqa: E402
from memcompile_local.llm.client import LLMClient, NoModelBackend  # noqa: E402
from memcompile_local.memory import Memory  # noqa: E402
from memcompile_local.pipeline.presets import apply_preset  # noqa: E402
from memcompile_local.store import MemoryStore  # noqa: E402
from memcompile_local.types import Conversation  # noqa: E402


def joined(convs, target: int, name: str) -> tuple[Conversation, list[str]]:
    """Sessions of ``convs`` (a session shared by several once), renumbered, until ``target`` turns (the
    last one cut to fit); and the questions of every conversation of ``convs`` (latency does not
    depend on where a question's answer lies)."""
    replace = dataclasses.replace
    sessions, seen, questions, n = [], set(), [], 0
    for ci, conv in enumerate(convs):
        questions += [q.question for q in conv.questions if not q.is_abstention]
        for s in conv.sessions:
            if n >= target:
                break
            key = (s.session_id, s.turns[0].text if s.turns else "")  # LongMemEval shares sessions
            if key in seen:
                continue
            seen.add(key)
            take = s.turns[: target - n]
            turns = tuple(replace(t, packet_id=f"C{ci}-{t.packet_id}") for t in take)
            sessions.append(replace(s, index=len(sessions) + 1, session_id=f"c{ci}-{s.session_id}", turns=turns))
            n += len(turns)
    return Conversation(namespace=name, sessions=tuple(sessions), questions=()), questions


def timed(fn, items, runs: int) -> list[float]:
    fn(items[0])  # warm: model load, index load
    out = []
    for _ in range(runs):
        for x in items:
            t0 = time.perf_counter()
            fn(x)
            out.append((time.perf_counter() - t0) * 1000)
    return out


def p(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * len(xs))) - 1)] if q < 1 else xs[-1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", default="~/.cache/memcompile-local/bench_query.sqlite")
    ap.add_argument("--locomo", default="../shared/data/locomo/locomo_dev4.json")
    ap.add_argument("--longmemeval", default="../shared/data/longmemeval/longmemeval_s_dev100.json.gz")
    ap.add_argument("--turns", type=int, default=700)
    ap.add_argument("--questions", type=int, default=60)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    cfg = apply_preset("model-free", PipelineConfig())
    path = Path(args.store).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    store = MemoryStore(path)
    mem = Memory(store, cfg, client=LLMClient(NoModelBackend(), store))
    histories = [joined(load_locomo(args.locomo), args.turns, f"dialogue-{args.turns}-turns"),
                 joined(load_longmemeval(args.longmemeval, limit=args.questions), args.turns,
                        f"user-assistant-{args.turns}")]
    for conv, _ in histories:
        mem.add(conv.namespace, conv)
        if not mem.is_built(conv.namespace):
            t0 = time.perf_counter()
            mem.build(conv.namespace)
            print(f"built {conv.namespace} in {time.perf_counter() - t0:.0f} s")
    load0 = os.getloadavg()
    print(f"\nload average before: {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} ({os.cpu_count()} cores); "
          f"{args.runs} passes over each history's questions; milliseconds per query\n")
    print("| history | turns | path | questions | p50 ms | p95 ms | plain dense p50 ms (same run) |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for conv, questions in histories:
        ns = conv.namespace
        qs = questions[: args.questions]
        view = mem.view(ns)
        packets = store.packets(ns)
        matrix = raw_turn_matrix(store, mem.embedder, ns, packets)

        def plain_dense(question: str) -> list[int]:
            q = np.asarray(mem.embedder.embed([question]), dtype=np.float32)[0]
            cos = matrix @ q
            return list(np.lexsort((np.arange(len(cos)), -cos))[:10])

        path_ms = timed(lambda question: mem.compile(ns, question), qs, args.runs)
        base_ms = timed(plain_dense, qs, args.runs)
        from memcompile_local.fused.retriever import uses_learned_ranker
        which = "learned ranker" if uses_learned_ranker(view.fusion, cfg.fusion) else "weighted sum"
        print(f"| {ns} | {len(packets)} | {which} | {len(qs)} | {statistics.median(path_ms):.1f} | "
              f"{p(path_ms, 0.95):.1f} | {statistics.median(base_ms):.1f} |")
    load1 = os.getloadavg()
    print(f"\nload average after: {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
