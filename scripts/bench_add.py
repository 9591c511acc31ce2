"""Latency of ``Memory.add`` with automatic ids as a namespace grows.

Stores N turns (sessions of 10), then adds one new turn at a time and prints the mean time
of one add; the stable-id lookup reads the namespace's stored packets, so the figure grows
with N. Usage: ``python scripts/bench_add.py [N ...]`` (default 1000 5000 20000).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from memcompile_local.memory import Memory
from memcompile_local.store import MemoryStore


def one(n: int, repeats: int = 10) -> tuple[float, float]:
    """(seconds of the bulk add of ``n`` turns, mean seconds of one single-turn add after it)."""
    with tempfile.TemporaryDirectory() as folder:
        store = MemoryStore(Path(folder) / "s.sqlite")
        mem = Memory(store)
        sessions = [{"time": f"2024-01-01 {i:06d}",
                     "turns": [{"speaker": "Ana", "text": f"turn {i} {j}"} for j in range(10)]}
                    for i in range(n // 10)]
        t0 = time.perf_counter()
        mem.add("bench", sessions)
        bulk = time.perf_counter() - t0
        t0 = time.perf_counter()
        for k in range(repeats):
            mem.add("bench", [{"time": "2025-01-01", "turns": [{"speaker": "Ana", "text": f"new {k}"}]}])
        single = (time.perf_counter() - t0) / repeats
        store.close()
    return bulk, single


def main(argv: list[str]) -> None:
    sizes = [int(a) for a in argv] or [1000, 5000, 20000]
    print(f"{'stored turns':>12}  {'bulk add s':>10}  {'one-turn add ms':>15}")
    for n in sizes:
        bulk, single = one(n)
        print(f"{n:>12}  {bulk:>10.2f}  {single * 1000:>15.0f}")


if __name__ == "__main__":
    main(sys.argv[1:])
