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
the core count and the load average. After each setup a line gives the CPU seconds its parts
used while its servers ran (sampled from /proc: the ``serve`` processes, the PostgreSQL server's
processes, and the benchmark's own clients), which says what a shared machine spends its cores
on.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _procs() -> dict[int, tuple[int, float, str]]:
    """pid -> (parent pid, CPU seconds used, command line) of every process visible now."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode("utf-8", "replace")
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after the command name, which may hold spaces
        out[int(name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK, cmd)
    return out


class CpuSampler(threading.Thread):
    """CPU seconds used by the setup's parts while its ``serve`` processes run: ``replicas``
    (the serve processes), ``postgres`` (every process of the server started here) and
    ``clients`` (the benchmark process: its HTTP clients, and the seeding before the servers)."""

    def __init__(self, bench_pid: int, postmaster_pid: int | None):
        super().__init__(daemon=True)
        self.bench_pid, self.postmaster_pid = bench_pid, postmaster_pid
        self.stop = threading.Event()
        self.used: dict[str, float] = {"replicas": 0.0, "postgres": 0.0, "clients": 0.0}
        self.wall = 0.0

    def _group(self, pid: int, procs: dict) -> str | None:
        seen = 0
        while pid in procs and seen < 50:
            ppid, _cpu, cmd = procs[pid]
            if pid == self.postmaster_pid:
                return "postgres"
            if " serve " in cmd and "memcompile_local" in cmd:
                return "replicas"
            if pid == self.bench_pid:
                return "clients"
            pid, seen = ppid, seen + 1
        return None

    def run(self) -> None:
        start: dict[int, float] = {}
        last: dict[int, tuple[str, float]] = {}
        began = ended = None
        while not self.stop.wait(0.2):
            procs = _procs()
            groups = {pid: self._group(pid, procs) for pid in procs}
            serving = any(g == "replicas" for g in groups.values())
            if began is None:
                if not serving:
                    continue
                began = time.monotonic()
                start = {pid: procs[pid][1] for pid, g in groups.items() if g}
            now = time.monotonic()
            if serving:
                ended = now
            elif ended is not None and now - ended > 1.0:
                continue  # the servers are gone: what the benchmark does after them is not counted
            for pid, g in groups.items():
                if g:
                    # A process keeps the group it was first seen in: an exiting one's command
                    # line reads empty, which would hand its CPU to its parent's group.
                    last[pid] = (last[pid][0] if pid in last else g, procs[pid][1])
        if began is not None:
            self.wall = (ended or time.monotonic()) - began
        for pid, (g, cpu) in last.items():
            self.used[g] += cpu - start.get(pid, 0.0)


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
    cpu_lines: list[str] = []
    bad = 0
    postmaster = int((server.data / "postmaster.pid").read_text().split()[0])
    try:
        for name, extra in setups:
            if None in extra:
                extra = [server.fresh_database(with_schema=False) if x is None else x for x in extra]
            print(f"\n=== {name}", flush=True)
            proc = subprocess.Popen([sys.executable, str(REPO / "scripts" / "bench_service.py"), *extra, *rest],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(REPO))
            sampler = CpuSampler(proc.pid, postmaster)
            sampler.start()
            stdout, stderr = proc.communicate()
            sampler.stop.set()
            sampler.join(5)
            out = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
            print(out.stdout.rstrip())
            cpu = ", ".join(f"{k} {v:.1f}" for k, v in sampler.used.items())
            print(f"CPU seconds while its servers ran ({sampler.wall:.0f} s, {os.cpu_count()} cores): {cpu}",
                  flush=True)
            cpu_lines.append(f"{name:28s} {cpu} (of {sampler.wall * (os.cpu_count() or 1):.0f} core-seconds)")
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
    print("\nCPU seconds while each setup's servers ran: replicas, the PostgreSQL server, the clients")
    for line in cpu_lines:
        print(line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
