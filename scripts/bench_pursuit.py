#!/usr/bin/env python
"""Latency of MemPursuit: the Gram-based implementation against the naive reference.

For every (d, K) setting, ``--instances`` random problems are drawn (seeded): P unit
candidate vectors and one unit query. Each problem is solved by ``mem_pursuit`` (timed
``--repeats`` times, every run counted) and by ``mem_pursuit_reference`` (timed once), at
a fixed budget K (no adaptive stop, as in a Top-K read), and the two selections are
compared. Prints median and p95 latency per implementation, the median speed ratio, and
the number of identical selections.

    python scripts/bench_pursuit.py                 # P=200, K in {10, 20}, d in {384, 1536}
    python scripts/bench_pursuit.py --instances 100 --dtype float64
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from memcompile_local.evidence.pursuit import mem_pursuit, mem_pursuit_reference


def _instance(rng: np.random.Generator, P: int, d: int, dtype) -> tuple[np.ndarray, np.ndarray]:
    X = rng.standard_normal((P, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    q = rng.standard_normal(d)
    q /= np.linalg.norm(q)
    return q.astype(dtype), X.astype(dtype)


def _pct(values: list[float], p: float) -> float:
    return float(np.percentile(np.asarray(values), p))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--P", type=int, default=200, help="candidates per query (default 200)")
    ap.add_argument("--K", type=int, nargs="+", default=[10, 20], help="budgets (default 10 20)")
    ap.add_argument("--d", type=int, nargs="+", default=[384, 1536], help="dimensions (default 384 1536)")
    ap.add_argument("--instances", type=int, default=40, help="random problems per setting (default 40)")
    ap.add_argument("--repeats", type=int, default=5, help="timed runs of the fast version per problem")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float32",
                    help="dtype of the input vectors (embedders return float32)")
    args = ap.parse_args()
    dtype = np.float32 if args.dtype == "float32" else np.float64

    rows = []
    for d in args.d:
        for K in args.K:
            rng = np.random.default_rng([args.seed, d, K])
            fast_ms: list[float] = []
            ref_ms: list[float] = []
            same = 0
            max_w_diff = 0.0
            for _ in range(args.instances):
                q, X = _instance(rng, args.P, d, dtype)
                mem_pursuit(q, X, k=K, tau=None)  # warm caches for this instance's arrays
                for _ in range(args.repeats):
                    t0 = time.perf_counter()
                    fast = mem_pursuit(q, X, k=K, tau=None)
                    fast_ms.append((time.perf_counter() - t0) * 1000)
                t0 = time.perf_counter()
                ref = mem_pursuit_reference(q, X, k=K, tau=None)
                ref_ms.append((time.perf_counter() - t0) * 1000)
                if fast.indices == ref.indices:
                    same += 1
                    max_w_diff = max(max_w_diff, float(np.max(np.abs(fast.weights - ref.weights))))
            rows.append((d, K, statistics.median(fast_ms), _pct(fast_ms, 95), statistics.median(ref_ms),
                         _pct(ref_ms, 95), same, max_w_diff))

    print(f"MemPursuit latency, P={args.P}, {args.instances} problems per row, {args.dtype} inputs, "
          f"fast timed {args.repeats}x per problem, reference 1x")
    head = (f"{'d':>5} {'K':>3} | {'fast med ms':>11} {'fast p95 ms':>11} | {'ref med ms':>10} "
            f"{'ref p95 ms':>10} | {'ratio':>6} | {'same sel':>8} | {'max |dw|':>8}")
    print(head)
    print("-" * len(head))
    for d, K, fm, fp, rm, rp, same, dw in rows:
        print(f"{d:>5} {K:>3} | {fm:>11.3f} {fp:>11.3f} | {rm:>10.2f} {rp:>10.2f} | {rm / fm:>5.1f}x | "
              f"{same:>3}/{args.instances:<4} | {dw:>8.1e}")
    mismatches = sum(args.instances - r[6] for r in rows)
    if mismatches:
        print(f"WARNING: {mismatches} problems selected differently by the two implementations")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
