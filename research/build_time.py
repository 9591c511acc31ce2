#!/usr/bin/env python
"""Cold model-free build time of the same histories under several build settings (batch 3).

Each variant is a set of config fields over ``--preset model-free``; every round builds the same
conversations into a fresh store once per variant, the variants interleaved so that a change of
load hits them alike. Prints the median seconds per variant, turns per second and the ratio to
the first variant, with the load average before and after. A build is what ``Memory.add`` +
``build`` + ``view`` do (extraction, placement, every document the configuration embeds); the
embedding model is loaded before the clock starts.

    python research/build_time.py --corpus longmemeval --convs 5 \\
        --variant default: \\
        --variant window128:model.embed_max_tokens=128 \\
        --variant fast:model.embed_max_tokens=128,model.embed_precision=int8,fusion.dense_context=composed
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))  # dev_corpora

import dev_corpora  # noqa: E402
from memcompile_local.config import PipelineConfig  # noqa: E402
from memcompile_local.llm.client import LLMClient, NoModelBackend  # noqa: E402
from memcompile_local.memory import Memory  # noqa: E402
from memcompile_local.pipeline.presets import apply_preset  # noqa: E402
from memcompile_local.store import MemoryStore  # noqa: E402


def variant(text: str) -> tuple[str, dict]:
    """``LABEL:section.field=value,...`` as a label and ``PipelineConfig.replace`` sections."""
    label, sep, fields = text.partition(":")
    if not sep or not label:
        raise SystemExit(f"--variant {text!r}: expected LABEL:section.field=value,... (fields may be empty)")
    pairs = [p for p in fields.split(",") if p]
    return label, dev_corpora.config_changes(pairs)


def build_once(convs, changes: dict, folder: Path, counter: itertools.count) -> float:
    cfg = apply_preset("model-free", PipelineConfig())
    if changes:
        cfg = cfg.replace(**changes)
    store = MemoryStore(folder / f"build-{next(counter)}.sqlite")
    mem = Memory(store, cfg, client=LLMClient(NoModelBackend(), store))
    mem.embedder.embed(["load the model before the clock starts"])
    t0 = time.perf_counter()
    for conv in convs:
        mem.add(conv.namespace, conv)
        mem.build(conv.namespace)
        mem.view(conv.namespace)
    seconds = time.perf_counter() - t0
    store.close()
    return seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default="longmemeval", choices=sorted(dev_corpora.DEFAULT_DATA))
    ap.add_argument("--convs", type=int, default=3, help="the first N conversations (LongMemEval: haystacks)")
    ap.add_argument("--variant", action="append", required=True, type=variant,
                    help="LABEL:section.field=value,... (repeat; the first is the base)")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    corpus = dev_corpora.load_corpus(args.corpus, dev_corpora.DEFAULT_DATA[args.corpus])
    convs = corpus.convs[:args.convs]
    turns = sum(len(s.turns) for c in convs for s in c.sessions)
    labels = [label for label, _ in args.variant]
    times: dict[str, list[float]] = {label: [] for label in labels}
    print(f"{args.corpus}, first {len(convs)} conversations: {turns} turns; load before {os.getloadavg()[0]:.2f}",
          flush=True)
    counter = itertools.count()
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for label, changes in args.variant:
                times[label].append(build_once(convs, changes, Path(tmp), counter))
                print(f"round {r + 1}: {label} {times[label][-1]:.1f} s (load {os.getloadavg()[0]:.2f})", flush=True)
    base = statistics.median(times[labels[0]])
    print(f"load after {os.getloadavg()[0]:.2f}\n\n| variant | build s (median of {args.rounds}) | turns/s | against {labels[0]} |")
    print("|---|---:|---:|---:|")
    for label in labels:
        med = statistics.median(times[label])
        print(f"| {label} | {med:.1f} | {turns / med:.1f} | {med / base:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
