#!/usr/bin/env python
"""Budgeted pre-query retention (EMBER): Retain-Recall and Read-Recall@10 per writer and budget.

For each conversation the full memory is built with the ``model-free`` preset (rule
descriptors, MiniLM; zero model calls), only so that the writers read each turn's rule
claims as they would during ingestion and so that the unbudgeted path has a reference.
Each writer then reads the turns in dialogue order and keeps capsules within the budget
(a share of the conversation's tokens, or a number of tokens); the kept capsules are
stored as a namespace of their own and read by the same model-free query path
(``Memory.compile``), which never sees the rest of the history. Prints, per writer and budget,
Retain-Recall and Read-Recall@10 (percent of gold evidence turns), the targets of issue 23 at
25% and 50%, and writes the budget-curve plot.

Questions: LoCoMo categories 1-4 with gold evidence; LongMemEval's ``has_answer`` turns;
REALTALK and BEAM questions with gold ids that name a turn of their chat (BEAM's abstention
questions have none and are left out).

``--cv-span 8,12,16,24`` also runs the model-free writer once per piece length and picks it
by leave-one-conversation-out cross-validation (the length with the best mean Read-Recall@10
over the budgets on the other conversations); it prints the in-sample pick beside the
cross-validated figures (each conversation read with the length the others chose).

    python scripts/bench_retention.py --data ../shared/data/locomo/locomo_dev4.json \\
        --plot docs/retention_budget_curve.png
    python scripts/bench_retention.py --benchmark realtalk --data ../shared/data/realtalk
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

from memcompile_local.bench.corpora import load_corpus, split_reachable  # noqa: E402
from memcompile_local.bench.coverage import gold_recall  # noqa: E402
from memcompile_local.bench.retention import (  # noqa: E402
    budget_curve_plot, leave_one_out, read_recall, retain_recall, retention_markdown, retention_table)
from memcompile_local.config import PipelineConfig  # noqa: E402
from memcompile_local.data import load_locomo, load_longmemeval  # noqa: E402
from memcompile_local.language.tokens import count_tokens  # noqa: E402
from memcompile_local.llm.client import LLMClient, NoModelBackend  # noqa: E402
from memcompile_local.memory import Memory  # noqa: E402
from memcompile_local.pipeline.presets import apply_presets  # noqa: E402
from memcompile_local.retention import capsules_conversation, make_writer  # noqa: E402
from memcompile_local.retention.writers import ModelFreeWriter, source_tokens  # noqa: E402
from memcompile_local.store import MemoryStore  # noqa: E402

CATS = (1, 2, 3, 4)
DEFAULT_DATA = {"locomo": "../shared/data/locomo/locomo_dev4.json",
                "longmemeval": "../shared/data/longmemeval/longmemeval_s_single.json",
                "realtalk": "../shared/data/realtalk", "beam": "../shared/data/beam/100K"}


def budget_tokens(label: str, source_tokens: int) -> int:
    value = float(label)
    return int(value * source_tokens) if value < 1 else int(value)


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "n/a (baseline 0)"


def load(benchmark: str, data: str, max_turn_chars: int | None):
    if benchmark == "locomo":
        return load_locomo(data)
    if benchmark == "longmemeval":
        return load_longmemeval(data)
    return load_corpus(benchmark, data, max_turn_chars=max_turn_chars)


def questions(benchmark: str, conv, known: set[str]) -> list[tuple[object, list[str]]]:
    """(question, the gold ids recall is scored on) for the questions with gold evidence."""
    out = []
    for q in conv.questions:
        if benchmark == "locomo" and q.category not in CATS:
            continue
        if q.is_abstention:
            continue
        gold, _ = split_reachable(q.evidence, known)
        if gold:
            out.append((q, gold))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--benchmark", choices=tuple(DEFAULT_DATA), default="locomo")
    ap.add_argument("--data", default=None, help="default: the benchmark's file under ../shared/data")
    ap.add_argument("--limit", type=int, default=None, help="first N conversations only (after --offset)")
    ap.add_argument("--offset", type=int, default=0, help="skip the first N conversations")
    ap.add_argument("--max-turn-chars", type=int, default=400_000)
    ap.add_argument("--budgets", default="0.1,0.25,0.5",
                    help="comma-separated; below 1: a share of each conversation's tokens, else tokens")
    ap.add_argument("--writers", default="model-free,recent,random,summary")
    ap.add_argument("--span-tokens", type=int, default=None,
                    help="model-free writer: the longest piece a turn is cut into (default: the writer's)")
    ap.add_argument("--cut", choices=("pieces", "span"), default=None,
                    help="model-free writer: several pieces of a long turn, or its one best span")
    ap.add_argument("--cv-span", default=None, metavar="N,N,...",
                    help="also pick the model-free piece length by leave-one-conversation-out CV over these")
    ap.add_argument("--store", default=None)
    ap.add_argument("--plot", default=None, metavar="PNG")
    ap.add_argument("--json", default=None, metavar="PATH")
    args = ap.parse_args()
    data = args.data or DEFAULT_DATA[args.benchmark]

    cfg = apply_presets("model-free", PipelineConfig())
    store_path = Path(args.store) if args.store else (Path(tempfile.gettempdir()) / "memcompile_retention"
                                                      / f"{args.benchmark}_{Path(data).stem}.sqlite")
    store_path.parent.mkdir(parents=True, exist_ok=True)
    store = MemoryStore(store_path)
    mem = Memory(store, cfg, client=LLMClient(NoModelBackend(), store))
    convs = load(args.benchmark, data, args.max_turn_chars)[args.offset:]
    convs = convs[: args.limit] if args.limit is not None else convs
    t0 = time.perf_counter()
    for conv in convs:
        mem.add(conv.namespace, conv)
        mem.build(conv.namespace)
    build_s = time.perf_counter() - t0
    print(f"built {len(convs)} full memories in {build_s:.1f} s (zero model calls)")
    budgets = [b.strip() for b in args.budgets.split(",") if b.strip()]
    writers = [w.strip() for w in args.writers.split(",") if w.strip()]

    def model_free(span: int | None) -> ModelFreeWriter:
        w = ModelFreeWriter()
        if span is not None:
            w.max_tokens = span
        if args.cut is not None:
            w.cut = args.cut
        return w

    variants: list[tuple[str, str, object]] = []  # (row name, namespace tag, writer)
    for w in writers:
        variants.append((w, w, model_free(args.span_tokens) if w == "model-free" else make_writer(w)))
    grid = [int(x) for x in args.cv_span.split(",")] if args.cv_span else []
    for n in grid:
        variants.append((f"model-free@{n}", f"model-free{n}", model_free(n)))

    rows: list[dict] = []
    full_read: list[float | None] = []
    full_ctx: list[int] = []
    spent: dict[tuple[str, str], list[tuple[int, int]]] = {}
    timing: dict[str, float] = {}
    t_q = time.perf_counter()
    n_q = 0
    for conv in convs:
        view = mem.view(conv.namespace)
        qs = questions(args.benchmark, conv, {p.packet_id for p in view.packets})
        text_of = {p.packet_id: p.content for p in view.packets}
        for q, gold in qs:
            ids = mem.compile(conv.namespace, q.question).packet_ids
            full_read.append(gold_recall(ids, gold))
            full_ctx.append(sum(count_tokens(text_of[i]) for i in ids))
            n_q += 1
        source = source_tokens(view.packets)
        for name, tag, writer in variants:
            t1 = time.perf_counter()
            for b in budgets:
                t2 = time.perf_counter()
                res = writer.retain(view.packets, view.descriptors_by_packet, budget_tokens(b, source),
                                    namespace=conv.namespace)
                write_ms = (time.perf_counter() - t2) * 1000
                spent.setdefault((name, b), []).append((res.tokens, source))
                ns = f"{conv.namespace}.keep.{tag}.{b}"
                sources_of = {c.capsule_id: c.sources for c in res.capsules}
                size_of = {c.capsule_id: c.tokens for c in res.capsules}
                kept = res.retained_sources()
                if store.packet_count(ns):
                    mem.forget(ns)  # an earlier run's capsules (maybe of another writer version)
                if res.capsules:
                    mem.add(ns, capsules_conversation(ns, res.capsules, conv.speakers))
                    mem.build(ns)
                for q, gold in qs:
                    read, ctx = None, 0
                    if res.capsules:
                        ids = mem.compile(ns, q.question).packet_ids
                        read, ctx = read_recall(ids, sources_of, gold), sum(size_of[i] for i in ids)
                    rows.append({"writer": name, "budget": b, "retain": retain_recall(kept, gold), "read": read,
                                 "conversation": conv.namespace, "category": str(q.category), "ctx": ctx})
                print(f"  {conv.namespace} {name:14s} {b:>6s}: {len(res.capsules):4d} capsules, {res.tokens:7d} of "
                      f"{source} tokens, write {write_ms:.0f} ms", flush=True)
            timing[name] = timing.get(name, 0.0) + time.perf_counter() - t1
    full_q_s = time.perf_counter() - t_q - sum(timing.values())
    table = retention_table([r for r in rows if "@" not in r["writer"]])
    for r in table:
        t = spent[(r["writer"], r["budget"])]
        r["retained_tokens"] = sum(a for a, _ in t)
        r["source_tokens"] = sum(s for _, s in t)
        ctx = [x["ctx"] for x in rows if x["writer"] == r["writer"] and x["budget"] == r["budget"]]
        r["context_tokens"] = round(sum(ctx) / max(len(ctx), 1), 1)  # the reader's 10 capsules, per question
    ref = [v for v in full_read if v is not None]
    unbudgeted = round(100 * sum(ref) / len(ref), 2) if ref else None
    full_ctx_mean = round(sum(full_ctx) / max(len(full_ctx), 1), 1)
    print(f"\n{len(convs)} conversations, {n_q} questions; unbudgeted model-free Read-Recall@10 {unbudgeted} "
          f"({full_ctx_mean} context tokens per question)")
    print(f"times: build {build_s:.0f} s, unbudgeted questions {full_q_s:.0f} s, "
          + ", ".join(f"{k} {v:.0f} s" for k, v in timing.items()) + " (write + build + read, all budgets)\n")
    cv = None
    if grid:
        cv = leave_one_out(rows, [f"model-free@{n}" for n in grid], budgets)
        table += [{**r, "writer": "model-free (CV)", "context_tokens": None} for r in cv["table"]]
        print(f"piece length: in-sample pick {cv['in_sample']}; leave-one-conversation-out picks {cv['picks']}")
    print(retention_markdown(table))
    print("context tokens per question (the 10 capsules read): " + "; ".join(
        f"{r['writer']} {r['budget']}: {r['context_tokens']}" for r in table if r.get("context_tokens") is not None))
    cell = {(r["writer"], r["budget"]): r for r in table}
    targets = []
    for mf_name in ("model-free", "model-free (CV)"):
        for b in budgets:
            mf, rec, rnd = (cell.get((w, b)) for w in (mf_name, "recent", "random"))
            if not mf:
                continue
            line = f"{mf_name} at {b}: Retain-Recall {mf['retain_recall']}"
            if rec and rnd:
                line += f" = {ratio(mf['retain_recall'], rec['retain_recall'])} recent, " \
                        f"{ratio(mf['retain_recall'], rnd['retain_recall'])} random"
            if mf["read_recall"] is not None and unbudgeted is not None:
                line += f"; Read-Recall@10 {mf['read_recall']} vs unbudgeted {unbudgeted} " \
                        f"({mf['read_recall'] - unbudgeted:+.1f})"
            targets.append(line)
            print(line)
    if args.plot:
        x = {}
        for b in budgets:
            v = float(b)
            x[b] = 100 * v if v < 1 else v
        label = ("retained source-evidence budget (share of the conversation's tokens, %)"
                 if all(float(b) < 1 for b in budgets) else "retained source-evidence budget (tokens)")
        print("plot:", budget_curve_plot([r for r in table if r["writer"] != "model-free (CV)"], args.plot, x=x,
                                         x_label=label, reference=unbudgeted,
                                         title=f"Budgeted pre-query retention on {Path(data).name}"))
    if args.json:
        Path(args.json).write_text(json.dumps({"table": table, "unbudgeted_read_recall": unbudgeted,
                                               "cv": cv and {k: cv[k] for k in ("picks", "in_sample")},
                                               "questions": n_q, "build_s": build_s, "unbudgeted_context_tokens": full_ctx_mean, "timing_s": timing,
                                               "targets": targets, "rows": rows}, indent=2))
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
