#!/usr/bin/env python
"""The service's figures on PostgreSQL with 1, 2 and 4 replicas against SQLite with one process,
in one run (issue 22's closing figures).

Starts a throwaway PostgreSQL server from the installed binaries (tests/_postgres.py, with
fsync on, so that its commits are as durable as SQLite's ``synchronous=FULL``), then runs
``scripts/bench_service.py`` once per setup with the same seed (so the same users and turns),
each on a fresh store, and prints every setup's table one after another plus a summary line per
setup. Extra arguments go to bench_service.py (e.g. ``--clients 8 --requests 300``).

    .venv/bin/python scripts/bench_replicas.py --clients 8,32
    .venv/bin/python scripts/bench_replicas.py --replicas 1,2 --clients 8

The figures depend on the machine and on whatever else it runs: the header of each table gives
the core count and the load average.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replicas", default="1,2,4", help="replica counts to run on PostgreSQL")
    ap.add_argument("--no-sqlite", action="store_true", help="skip the SQLite one-process baseline")
    args, rest = ap.parse_known_args()
    from _postgres import PostgresServer, find_bindir

    bindir = find_bindir()
    if bindir is None:
        print("no PostgreSQL server binaries (initdb, pg_ctl) found; install the Debian package postgresql",
              file=sys.stderr)
        return 2
    server = PostgresServer(bindir, durable=True).start()
    server.make_template()
    setups = ([] if args.no_sqlite else [("sqlite, 1 process", [])])
    setups += [(f"postgresql, {n} replica(s)", ["--store", None, "--replicas", str(n)])
               for n in (int(x) for x in args.replicas.split(","))]
    summary = []
    bad = 0
    try:
        for name, extra in setups:
            if None in extra:
                extra = [server.fresh_database(with_schema=False) if x is None else x for x in extra]
            print(f"\n=== {name}", flush=True)
            out = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_service.py"), *extra, *rest],
                                 capture_output=True, text=True, cwd=str(REPO))
            print(out.stdout.rstrip())
            if out.returncode != 0:
                bad += 1
                print(out.stderr[-3000:], file=sys.stderr)
            for line in out.stdout.splitlines():
                if re.match(r"^\s*[\d.]+ \|\s+\d+ \|", line):
                    summary.append(f"{name:28s} {line.strip()}")
    finally:
        server.remove()
    print("\nsetup                        batch ms | clients | req/s  | search p50    p95    p99 | append p50    p95    p99 | "
          "fresh p50   p95 | searchable p50  p95 | errors cross missed")
    for line in summary:
        print(line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
