#!/usr/bin/env python
"""MERA's rounds on the model-free path: cumulative evidence recall per round, per category.

Builds each LoCoMo conversation with the ``model-free`` preset (rule descriptors, MiniLM;
zero model calls) into a store kept between runs, then compiles every question of
categories 1-4 with gold evidence under ``model-free+mera`` (the rule planner and
verifier) for each setting of a small grid over the rounds' constants
(``mera.final_slots``, ``mera.verify_threshold``). Prints

* the round-by-round table of the package default (cumulative recall after round 0, 1, 2
  and the final set within the budget K0 = 10, per category), in-sample;
* recall@10 of the final set for every grid setting (``verify_threshold`` x ``final_slots``,
  0 slots being the path without rounds), in-sample;
* leave-one-conversation-out: the setting fit on three conversations (best mean final
  recall@10) scored on the fourth, against the model-free path without rounds.

    python scripts/bench_mera.py --data ../shared/data/locomo/locomo_dev4.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from memcompile_local.bench.coverage import gold_recall  # noqa: E402
from memcompile_local.bench.metrics import LOCOMO_CATEGORY_NAMES  # noqa: E402
from memcompile_local.bench.rounds import mera_row, round_recall, round_recall_markdown  # noqa: E402
from memcompile_local.config import PipelineConfig  # noqa: E402
from memcompile_local.data import load_locomo, load_longmemeval  # noqa: E402
from memcompile_local.evidence.mera import merge_final  # noqa: E402
from memcompile_local.llm.client import LLMClient, NoModelBackend  # noqa: E402
from memcompile_local.memory import Memory  # noqa: E402
from memcompile_local.pipeline.compile import compile_context  # noqa: E402
from memcompile_local.pipeline.presets import apply_presets  # noqa: E402
from memcompile_local.store import MemoryStore  # noqa: E402

CATS = (1, 2, 3, 4)


def questions_of(convs, benchmark: str):
    for conv in convs:
        for q in conv.questions:
            if q.evidence and (benchmark != "locomo" or q.category in CATS):
                yield conv, q


def run_setting(mem: Memory, items, cfg: PipelineConfig) -> list[dict]:
    rows = []
    for conv, q in items:
        # The rounds' settings do not change the view: one view per namespace serves every setting.
        ctx = compile_context(q.question, mem.view(conv.namespace), cfg, embedder=mem.embedder)
        trace = ctx.trace["anchors"].get("mera")
        row = {"namespace": conv.namespace, "category": q.category, "gold_evidence": list(q.evidence),
               "final": list(ctx.packet_ids)}
        if trace is not None:
            row["mera_rounds"] = mera_row(trace, ctx.packet_ids)
        rows.append(row)
    return rows


def mean_recall(rows, namespaces=None) -> float:
    vals = [gold_recall(r["final"], r["gold_evidence"]) for r in rows
            if namespaces is None or r["namespace"] in namespaces]
    vals = [v for v in vals if v is not None]
    return 100 * sum(vals) / len(vals) if vals else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="../shared/data/locomo/locomo_dev4.json")
    ap.add_argument("--benchmark", choices=("locomo", "longmemeval"), default="locomo")
    ap.add_argument("--store", default=None)
    ap.add_argument("--json", default=None, metavar="PATH", help="also write every table as JSON")
    ap.add_argument("--no-grid", action="store_true", help="only the package default")
    args = ap.parse_args()

    base = apply_presets("model-free", PipelineConfig())
    store_path = Path(args.store) if args.store else Path(tempfile.gettempdir()) / "memcompile_mera" / f"{Path(args.data).stem}.sqlite"
    store_path.parent.mkdir(parents=True, exist_ok=True)
    store = MemoryStore(store_path)
    mem = Memory(store, base, client=LLMClient(NoModelBackend(), store))
    convs = load_locomo(args.data) if args.benchmark == "locomo" else load_longmemeval(args.data)
    t0 = time.perf_counter()
    for conv in convs:
        mem.add(conv.namespace, conv)
        mem.build(conv.namespace)
    print(f"built {len(convs)} conversations in {time.perf_counter() - t0:.1f} s (zero model calls)")
    items = list(questions_of(convs, args.benchmark))
    names = LOCOMO_CATEGORY_NAMES if args.benchmark == "locomo" else {}
    out: dict = {}

    t0 = time.perf_counter()
    plain = run_setting(mem, items, base)
    plain_ms = (time.perf_counter() - t0) * 1000 / max(1, len(items))
    mera_cfg = apply_presets("model-free+mera", PipelineConfig())
    t0 = time.perf_counter()
    default_rows = run_setting(mem, items, mera_cfg)
    mera_ms = (time.perf_counter() - t0) * 1000 / max(1, len(items))
    table = round_recall(default_rows, names)
    out["default"] = table
    print(f"\n{len(items)} questions; model-free path recall@10 {mean_recall(plain):.1f} "
          f"({plain_ms:.1f} ms/question); with MERA's rounds (package default) {mean_recall(default_rows):.1f} "
          f"({mera_ms:.1f} ms/question; 2 shared cores)\n")
    print(round_recall_markdown(table))
    if args.no_grid or len(convs) < 2:
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=2))
        return 0

    # final_slots only changes how the verified hits are merged, so each (threshold, hits)
    # setting runs the rounds once and every final_slots value is derived from its traces.
    results = []
    for threshold in (0.3, 0.5, 0.7):
        g0 = {"verify_threshold": threshold, "hits_per_query": 5}
        rows = default_rows if threshold == mera_cfg.mera.verify_threshold else run_setting(
            mem, items, mera_cfg.replace(mera=g0))
        for slots in (0, 1, 2, 3):
            derived = []
            for r in rows:
                first = r["mera_rounds"]["cumulative"][0]
                found = r["mera_rounds"]["cumulative"][-1][len(first):]
                final = merge_final(first, found, base.evidence.k0, slots)
                derived.append({**r, "final": final, "mera_rounds": {**r["mera_rounds"], "final": final}})
            g = {**g0, "final_slots": slots}
            results.append((g, derived))
            print(f"  {g}: recall@10 {mean_recall(derived):.2f}", flush=True)
    namespaces = [c.namespace for c in convs]
    print("\nleave-one-conversation-out (fit: best mean final recall@10 on the other conversations)")
    print("| held out | fitted setting | MERA recall@10 | model-free recall@10 | gain |")
    print("|---|---|---:|---:|---:|")
    cv_rows = []
    for held in namespaces:
        train = [n for n in namespaces if n != held]
        g, rows = max(results, key=lambda gr: (mean_recall(gr[1], train), -gr[0]["final_slots"]))
        a, b = mean_recall(rows, [held]), mean_recall(plain, [held])
        cv_rows.extend(r for r in rows if r["namespace"] == held)
        print(f"| {held} | {g} | {a:.1f} | {b:.1f} | {a - b:+.1f} |")
    cv_table = round_recall(cv_rows, names)
    print(f"\nCV recall@10 with rounds {mean_recall(cv_rows):.1f} vs {mean_recall(plain):.1f} without\n")
    print(round_recall_markdown(cv_table).replace("## MERA rounds", "## MERA rounds (cross-validated settings)"))
    out["cv"] = cv_table
    out["grid"] = [{"setting": g, "recall@10": mean_recall(rows)} for g, rows in results]
    out["plain_recall@10"] = mean_recall(plain)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
