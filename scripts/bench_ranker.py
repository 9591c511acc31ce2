#!/usr/bin/env python
"""Speed of the learned ranker's tree evaluation (``fused.ranker.Trees``), both ways in one run.

For each model file given (default: the shipped one), scores the same random feature rows
(``--rows``, the pool the package reorders per question: 50) with the bitmask evaluation the
package uses and with the level-by-level walk it falls back to for trees of over 64 leaves,
checks that they agree, and prints the median of ``--runs`` calls of each and their ratio.

    python scripts/bench_ranker.py
    python scripts/bench_ranker.py /tmp/bagged.json     # a model file of research/train_ranker_variants.py

Figures depend on the machine's load; read the ratio, measured in the same process.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from memcompile_local.fused.ranker import DEFAULT_MODEL, load_model  # noqa: E402


def median_ms(fn, runs: int) -> float:
    fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=[str(DEFAULT_MODEL)])
    ap.add_argument("--rows", type=int, default=50)
    ap.add_argument("--runs", type=int, default=300)
    args = ap.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.2f}; {args.rows} rows; median of {args.runs} calls\n")
    print("| model | trees | leaves at most | bitmask ms | walk ms | walk / bitmask |")
    print("|---|---:|---:|---:|---:|---:|")
    for path in args.models:
        model = load_model(path)
        trees = model.scorer
        X = np.random.default_rng(0).random((args.rows, len(model.features)))
        if trees.right_mask is None:
            print(f"| {Path(path).name} | {len(trees.root)} | {trees.leaf_value.shape[1]} | (over 64 leaves: walk only) "
                  f"| {median_ms(lambda: trees.predict(X), args.runs):.3f} | |")
            continue
        walk = dataclasses.replace(trees, right_mask=None, leaf_at=None)
        if not np.allclose(trees.predict(X), walk.predict(X), rtol=0, atol=1e-12):
            raise SystemExit(f"{path}: the two evaluations disagree")
        fast = median_ms(lambda: trees.predict(X), args.runs)
        slow = median_ms(lambda: walk.predict(X), args.runs)
        print(f"| {Path(path).name} | {len(trees.root)} | {trees.leaf_value.shape[1]} | {fast:.3f} | {slow:.3f} "
              f"| {slow / fast:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
