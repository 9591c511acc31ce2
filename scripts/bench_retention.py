#!/usr/bin/env python
"""Budgeted pre-query retention (EMBER): Retain-Recall and Read-Recall@10 per writer and budget.

For each conversation the full memory is built with the ``model-free`` preset (rule
descriptors, MiniLM; zero model calls), only so that the writers read each turn's rule
claims as they would during ingestion and so that the unbudgeted path has a reference.
Each writer then reads the turns in dialogue order and keeps capsules within the budget
(a share of the conversation's tokens, or a number of tokens); the kept capsules are
stored as a namespace of their own and read by the same model-free query path
(``Memory.compile``), which never sees the rest of the history. Prints, per writer and budget,
Retain-Recall and Read-Recall@10 (percent of gold evidence turns, questions of LoCoMo
categories 1-4 with gold evidence, or LongMemEval's ``has_answer`` turns), the targets of
issue 23 at 25% and 50%, and writes the budget-curve plot. Nothing is fitted.

    python scripts/bench_retention.py --data ../shared/data/locomo/locomo_dev4.json \
        --plot docs/retention_budget_curve.png
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
from memcompile_local.bench.retention import (  # noqa: E402
    budget_curve_plot, read_recall, retain_recall, retention_markdown, retention_table)
from memcompile_local.config import PipelineConfig  # noqa: E402
from memcompile_local.data import load_locomo, load_longmemeval  # noqa: E402
from memcompile_local.llm.client import LLMClient, NoModelBackend  # noqa: E402
from memcompile_local.memory import Memory  # noqa: E402
from memcompile_local.pipeline.presets import apply_presets  # noqa: E402
from memcompile_local.retention import capsules_conversation, make_writer  # noqa: E402
from memcompile_local.retention.writers import ModelFreeWriter, source_tokens  # noqa: E402
from memcompile_local.store import MemoryStore  # noqa: E402

CATS = (1, 2, 3, 4)


def budget_tokens(label: str, source_tokens: int) -> int:
    value = float(label)
    return int(value * source_tokens) if value < 1 else int(value)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="../shared/data/locomo/locomo_dev4.json")
    ap.add_argument("--benchmark", choices=("locomo", "longmemeval"), default="locomo")
    ap.add_argument("--budgets", default="0.1,0.25,0.5",
                    help="comma-separated; below 1: a share of each conversation's tokens, else tokens")
    ap.add_argument("--writers", default="model-free,recent,random,summary")
    ap.add_argument("--span-tokens", type=int, default=None,
                    help="model-free writer: cut longer turns to their best sentence span of this many tokens")
    ap.add_argument("--store", default=None)
    ap.add_argument("--plot", default=None, metavar="PNG")
    ap.add_argument("--json", default=None, metavar="PATH")
    args = ap.parse_args()

    cfg = apply_presets("model-free", PipelineConfig())
    store_path = Path(args.store) if args.store else (Path(tempfile.gettempdir()) / "memcompile_retention"
                                                      / f"{Path(args.data).stem}.sqlite")
    store_path.parent.mkdir(parents=True, exist_ok=True)
    store = MemoryStore(store_path)
    mem = Memory(store, cfg, client=LLMClient(NoModelBackend(), store))
    convs = load_locomo(args.data) if args.benchmark == "locomo" else load_longmemeval(args.data)
    t0 = time.perf_counter()
    for conv in convs:
        mem.add(conv.namespace, conv)
        mem.build(conv.namespace)
    print(f"built {len(convs)} full memories in {time.perf_counter() - t0:.1f} s (zero model calls)")
    budgets = [b.strip() for b in args.budgets.split(",") if b.strip()]
    writers = [w.strip() for w in args.writers.split(",") if w.strip()]
    rows: list[dict] = []
    full_read: list[float | None] = []
    spent: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for conv in convs:
        view = mem.view(conv.namespace)
        qs = [q for q in conv.questions if q.evidence and (args.benchmark != "locomo" or q.category in CATS)]
        for q in qs:
            full_read.append(gold_recall(mem.compile(conv.namespace, q.question).packet_ids, q.evidence))
        source = source_tokens(view.packets)
        for w in writers:
            writer = make_writer(w)
            if w == "model-free" and args.span_tokens:
                writer = ModelFreeWriter(max_tokens=args.span_tokens)
            for b in budgets:
                t1 = time.perf_counter()
                res = writer.retain(view.packets, view.descriptors_by_packet, budget_tokens(b, source),
                                    namespace=conv.namespace)
                write_ms = (time.perf_counter() - t1) * 1000
                spent.setdefault((w, b), []).append((res.tokens, source))
                ns = f"{conv.namespace}.keep.{w}.{b}"
                sources_of = {c.capsule_id: c.sources for c in res.capsules}
                kept = res.retained_sources()
                if res.capsules:
                    mem.add(ns, capsules_conversation(ns, res.capsules, conv.speakers))
                    mem.build(ns)
                for q in qs:
                    read = None
                    if res.capsules:
                        read = read_recall(mem.compile(ns, q.question).packet_ids, sources_of, q.evidence)
                    elif q.evidence:
                        read = 0.0
                    rows.append({"writer": w, "budget": b, "retain": retain_recall(kept, q.evidence), "read": read,
                                 "category": q.category})
                print(f"  {conv.namespace} {w:10s} {b:>6s}: {len(res.capsules):4d} capsules, {res.tokens:6d} of "
                      f"{source} tokens, write {write_ms:.0f} ms", flush=True)
    table = retention_table(rows)
    for r in table:
        t = spent[(r["writer"], r["budget"])]
        r["retained_tokens"] = sum(a for a, _ in t)
        r["source_tokens"] = sum(s for _, s in t)
    ref = [v for v in full_read if v is not None]
    unbudgeted = round(100 * sum(ref) / len(ref), 2) if ref else None
    print(f"\n{table[0]['questions'] if table else 0} questions; unbudgeted model-free Read-Recall@10 {unbudgeted}\n")
    print(retention_markdown(table))
    cell = {(r["writer"], r["budget"]): r for r in table}
    for b in budgets:
        mf, rec, rnd = (cell.get((w, b)) for w in ("model-free", "recent", "random"))
        if mf and rec and rnd:
            print(f"at {b}: Retain-Recall model-free {mf['retain_recall']} = "
                  f"{mf['retain_recall'] / max(rec['retain_recall'], 1e-9):.2f}x recent, "
                  f"{mf['retain_recall'] / max(rnd['retain_recall'], 1e-9):.2f}x random; Read-Recall@10 "
                  f"{mf['read_recall']} vs unbudgeted {unbudgeted} ({mf['read_recall'] - unbudgeted:+.1f})")
    if args.plot:
        x = {}
        for b in budgets:
            v = float(b)
            x[b] = 100 * v if v < 1 else v
        label = ("retained source-evidence budget (share of the conversation's tokens, %)"
                 if all(float(b) < 1 for b in budgets) else "retained source-evidence budget (tokens)")
        print("plot:", budget_curve_plot(table, args.plot, x=x, x_label=label, reference=unbudgeted,
                                         title=f"Budgeted pre-query retention on {Path(args.data).name}"))
    if args.json:
        Path(args.json).write_text(json.dumps({"table": table, "unbudgeted_read_recall": unbudgeted}, indent=2))
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
