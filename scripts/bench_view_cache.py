#!/usr/bin/env python
"""Resident memory of one process while many users are appended and searched, with the view cache bounded or not.

Each user gets ``--turns`` short turns in one ``Memory.add`` and one search, as an agent
service does for a new user; every ``--every`` users the script prints the process's resident
set (VmRSS), the views held, their estimated bytes and the evictions so far. With a bound the
RSS should level off once the cache is full; without one it grows with every user. The
process-wide memo of rule extractions (by turn content, for haystacks that repeat sessions) is
bounded separately, by distinct turns (``--memo-entries``).

    python scripts/bench_view_cache.py --users 5000                 # the default bound (1 GiB)
    python scripts/bench_view_cache.py --users 5000 --max-views 500
    python scripts/bench_view_cache.py --users 2000 --unbounded     # the reference: no bound
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from memcompile_local import Memory, PipelineConfig  # noqa: E402
from memcompile_local.address import extract_memo  # noqa: E402
from memcompile_local.pipeline.presets import apply_preset  # noqa: E402
from memcompile_local.views.cache import DEFAULT_MAX_VIEW_BYTES  # noqa: E402


def rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--users", type=int, default=5000)
    ap.add_argument("--turns", type=int, default=20, help="turns per user")
    ap.add_argument("--every", type=int, default=500, help="print a row every N users")
    ap.add_argument("--max-views", type=int, default=None, help="bound on the namespaces held")
    ap.add_argument("--max-view-mb", type=float, default=DEFAULT_MAX_VIEW_BYTES / 2**20,
                    help="bound on the estimated bytes held, in MiB (default %(default)s)")
    ap.add_argument("--unbounded", action="store_true", help="no bound at all (the reference)")
    ap.add_argument("--embedder", default="hash", help="hash (no model) or default (MiniLM)")
    ap.add_argument("--memo-entries", type=int, default=None,
                    help="bound of the process-wide rule-extraction memo (distinct turns; default "
                         f"{extract_memo.MAX_ENTRIES}); it is cleared when full, so with a small bound its "
                         "share of the RSS levels off within the run")
    args = ap.parse_args(argv)
    if args.memo_entries is not None:
        extract_memo.MAX_ENTRIES = args.memo_entries
    cfg = apply_preset("model-free", PipelineConfig())
    if args.embedder != "default":
        cfg = cfg.replace(model={"embedder": args.embedder})
    max_bytes = None if args.unbounded else int(args.max_view_mb * 2**20)
    max_views = None if args.unbounded else args.max_views
    work = Path(tempfile.mkdtemp(prefix="bench-view-cache-"))
    print(f"# {args.users} users x {args.turns} turns, embedder {args.embedder}, max_views={max_views}, "
          f"max_view_bytes={max_bytes}, extraction memo {extract_memo.MAX_ENTRIES} turns; "
          "2 shared cores are slow, read the trend")
    print("| users | RSS MB | views held | estimated MB held | evictions | s per 100 users |")
    print("|---:|---:|---:|---:|---:|---:|")
    t0 = time.perf_counter()
    with Memory(work / "m.sqlite", cfg, max_views=max_views, max_view_bytes=max_bytes) as mem:
        for u in range(1, args.users + 1):
            user = f"user-{u}"
            mem.add(user, [{"time": "2024-05-01 09:00", "turns": [
                {"speaker": "Sam", "text": f"Reminder {i} for {user}: the parcel {u * 31 + i} goes to desk {i}."}
                for i in range(args.turns)]}])
            mem.search(user, f"Where does parcel {u * 31 + 3} go?", k=5)
            if u % args.every == 0:
                gc.collect()
                dt = time.perf_counter() - t0
                print(f"| {u} | {rss_mb():.0f} | {len(mem.views)} | {mem.views.held_bytes / 2**20:.1f} | "
                      f"{mem.views.evictions} | {100 * dt / args.every:.2f} |", flush=True)
                t0 = time.perf_counter()
    return 0


if __name__ == "__main__":
    sys.exit(main())
