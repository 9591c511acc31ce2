#!/usr/bin/env python
"""Address Plane figures on a LoCoMo file (issue: Address Plane).

For every question of categories 1-4 with gold evidence, with descriptors from the rule-based
extractor (zero model calls; pass --extractor llm with a backend for model descriptors) and
rule-based query intent:

* gold-evidence recall at 10/20/40 of the normalized packet pool (both channels), and of each
  channel alone: BM25 descriptors (normalized to packets), Cells (routing only, A4), dense
  packets (cosine top-K of z(p));
* the source-aliasing audit of Appendix A.4 on the candidate list before normalization;
* per-query latency (p50/p95) of each non-model stage on the first conversation.

    python research/address_report.py --data ../shared/data/locomo/locomo_dev.json
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from memcompile_local.address.dense import dense_proposals  # noqa: E402
from memcompile_local.address.query import address_query  # noqa: E402
from memcompile_local.bench.coverage import aliasing_audit, gold_recall, nearest_rank_percentile  # noqa: E402
from memcompile_local.config import PipelineConfig  # noqa: E402
from memcompile_local.data import load_locomo  # noqa: E402
from memcompile_local.llm.client import LLMClient, NoModelBackend  # noqa: E402
from memcompile_local.memory import Memory  # noqa: E402
from memcompile_local.pipeline.normalize import normalize_to_packets  # noqa: E402
from memcompile_local.pipeline.compile import query_intent  # noqa: E402
from memcompile_local.store import MemoryStore  # noqa: E402

DEPTHS = (10, 20, 40)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="../shared/data/locomo/locomo_dev.json")
    ap.add_argument("--store", default=None)
    args = ap.parse_args()

    cfg = PipelineConfig().replace(extraction={"extractor": "rule", "intent_source": "rule"})
    tmp = tempfile.TemporaryDirectory()
    store = MemoryStore(args.store or Path(tmp.name) / "address.sqlite")
    mem = Memory(store, cfg, client=LLMClient(NoModelBackend(), store))
    convs = load_locomo(args.data)
    rows = {name: {k: [] for k in DEPTHS} for name in ("pool", "bm25", "cells", "dense")}
    aliasing_lists = []
    timings: dict[str, list[float]] = {}
    sizes = {"cells_opened": [], "candidates": [], "pool": []}
    cells_cfg = dataclasses.replace(cfg.routing, channels="cells")
    for ci, conv in enumerate(convs):
        mem.add(conv.namespace, conv)
        b = mem.build(conv.namespace)
        print(f"{conv.namespace}: {b.packets} packets, {b.descriptors} descriptors, {b.cells} cells")
        view = mem.view(conv.namespace)
        for q in conv.questions:
            if q.category not in (1, 2, 3, 4) or not q.evidence:
                continue
            intent = query_intent(q.question, cfg, None, view)
            qvec = np.asarray(mem.embedder.embed([intent.lexical_query()]), dtype=np.float32)[0]
            res = address_query(view.index, intent, cfg.routing)
            pool = normalize_to_packets(res.candidates, view.index.packet_ordinal)
            bm25_pool = normalize_to_packets(res.bm25, view.index.packet_ordinal)
            cells_only = address_query(view.index, intent, cells_cfg)
            lists = {
                "pool": [p.packet_id for p in pool],
                "bm25": [p.packet_id for p in bm25_pool],
                "cells": [p.packet_id for p in normalize_to_packets(cells_only.candidates, view.index.packet_ordinal)],
                "dense": [pid for pid, _ in dense_proposals(view.index.dense, qvec, max(DEPTHS))],
            }
            for name, ids in lists.items():
                for k in DEPTHS:
                    rows[name][k].append(gold_recall(ids[:k], q.evidence))
            aliasing_lists.append([c.packet_id for c in res.candidates])
            sizes["cells_opened"].append(len(res.opened_cells))
            sizes["candidates"].append(len(res.candidates))
            sizes["pool"].append(len(pool))
            if ci == 0:
                for stage, ms in res.timings_ms.items():
                    timings.setdefault(stage, []).append(ms)

    n = len(rows["pool"][10])
    print(f"\ngold-evidence recall over {n} questions (rule descriptors, rule intent, MiniLM)")
    print(f"{'channel':34s} " + " ".join(f"{'@' + str(k):>7s}" for k in DEPTHS))
    names = {"pool": "normalized pool (BM25 + Cells)", "bm25": "BM25 descriptors only", "cells": "Cells only (A4)",
             "dense": "dense packets (z(p))"}
    for name, by_k in rows.items():
        print(f"{names[name]:34s} " + " ".join(f"{100 * statistics.fmean(by_k[k]):7.2f}" for k in DEPTHS))
    print("\nmean per query: " + ", ".join(f"{k} {statistics.fmean(v):.1f}" for k, v in sizes.items()))

    print("\nsource-aliasing audit before normalization (Appendix A.4)")
    audit = aliasing_audit(aliasing_lists, DEPTHS)
    print(f"{'depth':>6s} {'eligible':>8s} {'unique':>7s} {'DBR %':>6s} {'affected %':>10s} {'max-source mean/p95/max':>24s}")
    for k in DEPTHS:
        a = audit[k]
        print(f"{k:6d} {a['eligible']:8d} {a['unique_mean']:7.2f} {100 * a['dbr']:6.2f} {100 * a['affected']:10.2f} "
              f"{a['max_source_mean']:10.2f}/{a['max_source_p95']}/{a['max_source_max']}")

    print(f"\nper-query latency of each non-model stage on {convs[0].namespace} (ms, 2 shared cores)")
    for stage, v in timings.items():
        print(f"  {stage:14s} p50 {nearest_rank_percentile(v, 50):7.3f}  p95 {nearest_rank_percentile(v, 95):7.3f}")
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
