#!/usr/bin/env python
"""Wall time, peak memory, build work and recall per question type of ``eval longmemeval``.

Runs one ``eval longmemeval --preset model-free --retrieval-only --with-baseline dense`` in a
child process (a fresh store and run folder unless given), so the pipeline and the plain MiniLM
baseline over raw turns are measured in the same run, and prints:

* wall time of the child, its peak resident set (``ru_maxrss`` of the child), CPU seconds, and
  the load averages before and after (on a shared machine they say how much of the cores the
  run had);
* the build counts of ``metrics.json``: turns stored, turns extracted and of those run through
  the extractor (the rest were repeats bound from the memo), documents with a vector and texts
  embedded;
* turn and session recall@10 per question type of the pipeline's final selection and of the
  baseline.

    python scripts/bench_longmemeval.py --data ../shared/data/longmemeval/longmemeval_s_dev100.json.gz
    python scripts/bench_longmemeval.py --data ... --limit 10 -- --embed-precision int8

Arguments after ``--`` go to ``eval`` as they are (another preset, a config file, ...).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _pct(x) -> str:
    return "   n/a" if x is None else f"{100 * x:6.2f}"


def recall_table(block: dict, stages: list[str]) -> list[str]:
    table = block["table"]
    k = block.get("k")
    head = f"{'question type':27s} {'n':>3s}  " + "  ".join(f"{s + (f'@{k}' if k else ''):>22s}" for s in stages)
    sub = f"{'':27s} {'':>3s}  " + "  ".join(f"{'turn':>10s} {'session':>11s}" for _ in stages)
    lines = [head, sub]
    for g in list(block["types"]) + ["overall"]:
        n = max((table.get(s, {}).get(g) or {}).get("n_session", 0) for s in stages)
        cells = []
        for s in stages:
            c = table.get(s, {}).get(g)
            cells.append(f"{_pct(c and c['turn']):>10s} {_pct(c and c['session']):>11s}")
        lines.append(f"{g[:27]:27s} {n:3d}  " + "  ".join(cells))
    return lines


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="a LongMemEval file (.json or .json.gz)")
    ap.add_argument("--limit", type=int, default=None, help="only the first N questions")
    ap.add_argument("--store", default=None, help="store file (default: a fresh one in a temporary folder)")
    ap.add_argument("--out", default=None, help="run folder (default: a fresh one in a temporary folder)")
    ap.add_argument("--baseline", default="dense", choices=["dense", "bm25", "none"],
                    help="the baseline scored in the same run (default dense: MiniLM over raw turns)")
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="bench-lme-"))
    store = args.store or str(tmp / "store.sqlite")
    out = Path(args.out or tmp / "run")
    cmd = [args.python, "-m", "memcompile_local", "eval", "longmemeval", "--data", args.data, "--preset",
           "model-free", "--retrieval-only", "--store", store, "--out", str(out)]
    if args.limit is not None:
        cmd += ["--limit", str(args.limit)]
    if args.baseline != "none":
        cmd += ["--with-baseline", args.baseline]
    cmd += extra
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("HF_HUB_OFFLINE", "1")

    load_before = os.getloadavg()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=str(REPO))
    wall = time.perf_counter() - t0
    load_after = os.getloadavg()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        print(f"eval exited with {proc.returncode}", file=sys.stderr)
        return proc.returncode
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    build = metrics.get("build") or {}
    block = metrics["metrics"]["recall_by_type"]
    stages = [s for s in ("final", f"baseline_{args.baseline}") if s in block["stages"]]

    print()
    print(f"data: {args.data}  questions: {metrics['questions']}  run: {out}")
    print(f"wall time: {wall:.1f} s ({wall / 60:.1f} min); CPU: user {usage.ru_utime:.0f} s + system "
          f"{usage.ru_stime:.0f} s; peak RSS: {usage.ru_maxrss / 1024:.0f} MB")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in load_before)}; after: "
          f"{' '.join(f'{x:.2f}' for x in load_after)}; cores: {os.cpu_count()}")
    print(f"phases (s): {json.dumps(metrics.get('phases_s'))}")
    if build:
        print(f"turns stored: {build['turns']}; extracted: {build['extracted']} (by the extractor: "
              f"{build['extracted_fresh']}, repeats bound from the memo: "
              f"{build['extracted'] - build['extracted_fresh']}); documents with a vector: {build['documents']}; "
              f"texts embedded: {build['embedded']}")
    quirks = (metrics.get("data_quirks") or {}).get("counts")
    if quirks:
        print(f"data quirks: {quirks}")
    print()
    print("\n".join(recall_table(block, stages)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
