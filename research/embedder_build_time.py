#!/usr/bin/env python
"""Cold model-free build time of one history under each embedder (the embedder study, batch 2).

Builds the same conversation into a fresh store once per embedder, interleaved over rounds so
that a change of load hits both alike, and prints the median build seconds and the ratio to the
first embedder. A build here is what ``Memory.add`` + ``build`` + ``view`` do (extraction,
placement, embedding of every document the configuration embeds).

    python research/embedder_build_time.py --beam-chat 1 \\
        --model all-MiniLM-L6-v2 --model ~/.cache/memcompile-local/models/all-mpnet-base-v2
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))  # dev_corpora

import dev_corpora  # noqa: E402
from build_time import build_once  # noqa: E402  (research/, this script's folder)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--beam-chat", type=int, default=1, help="which BEAM 100K development chat")
    ap.add_argument("--model", action="append", required=True, help="an embed_model (repeat; the first is the base)")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    corpus = dev_corpora.load_corpus("beam", dev_corpora.DEFAULT_DATA["beam"])
    conv = corpus.convs[args.beam_chat - 1]
    turns = sum(len(s.turns) for s in conv.sessions)
    times: dict[str, list[float]] = {m: [] for m in args.model}
    print(f"{conv.namespace}: {turns} turns; load before {os.getloadavg()[0]:.2f}")
    counter = itertools.count()
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for m in args.model:
                changes = {"model": {"embed_model": os.path.expanduser(m)}}
                times[m].append(build_once([conv], changes, Path(tmp), counter))
                print(f"round {r + 1}: {Path(m).name} {times[m][-1]:.1f} s", flush=True)
    base = statistics.median(times[args.model[0]])
    print(f"load after {os.getloadavg()[0]:.2f}\n\n| embedder | build s (median of {args.rounds}) | against {Path(args.model[0]).name} |")
    print("|---|---:|---:|")
    for m in args.model:
        med = statistics.median(times[m])
        print(f"| {Path(m).name} | {med:.1f} | {med / base:.1f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
