#!/usr/bin/env python
"""Recall@10 of ``Memory.compile`` under the package's default fused settings (``ranker: auto``:
the learned ranker on user-assistant and bursty histories, the weighted sum on alternating dialogue) with
``fusion.chat_norm`` off and on, over the three development corpora's cached builds (issue 25
item 7). Also how many questions' selections differ and the query time of each.

    python scripts/chat_norm_default_path.py --cache /tmp/slang_cache

The builds are the ones ``ablate_model_free.py --cv --corpora ...`` made (chat_norm changes no
build, so the option reads the same stores); a missing one is built into ``--cache``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import cv_corpora  # noqa: E402
from memcompile_local.bench.coverage import gold_recall  # noqa: E402
from memcompile_local.config import PipelineConfig  # noqa: E402
from memcompile_local.llm.client import LLMClient, NoModelBackend  # noqa: E402
from memcompile_local.memory import Memory  # noqa: E402
from memcompile_local.pipeline.presets import apply_preset  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", default="~/.cache/memcompile-local/ablate")
    ap.add_argument("--corpora", default="locomo,realtalk,beam")
    args = ap.parse_args()
    off = apply_preset("model-free", PipelineConfig())
    on = off.replace(fusion={"chat_norm": True})
    corpora = [cv_corpora.load_corpus(n, cv_corpora.DEFAULT_DATA[n]) for n in args.corpora.split(",")]
    memories, _ = cv_corpora.open_memories(corpora, off, Path(args.cache).expanduser(), progress=False)
    print(f"ranker {off.fusion.ranker}; recall@10 of Memory.compile (k0 = {off.evidence.k0})")
    print("| corpus | questions | chat_norm off | chat_norm on | selections differ | p50 ms off | p50 ms on |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for corpus in corpora:
        r = {"off": [], "on": []}
        ms = {"off": [], "on": []}
        differ = 0
        for conv in corpus.convs:
            base = memories[(corpus.name, conv.namespace)]
            mems = {"off": base, "on": Memory(base.store, on, client=LLMClient(NoModelBackend(), base.store),
                                              embedder=base.embedder)}
            for m in mems.values():
                m.view(conv.namespace)  # load (and warm) the view before timing
            for q in cv_corpora.scored_questions(corpus, conv):
                got = {}
                for name, m in mems.items():
                    t0 = time.perf_counter()
                    got[name] = list(m.compile(conv.namespace, q.question).packet_ids)
                    ms[name].append((time.perf_counter() - t0) * 1000)
                    r[name].append(gold_recall(got[name], q.evidence))
                differ += got["off"] != got["on"]
        print(f"| {cv_corpora.TITLES[corpus.name]} | {len(r['off'])} | {100 * statistics.fmean(r['off']):.1f} | "
              f"{100 * statistics.fmean(r['on']):.1f} | {differ} | {statistics.median(ms['off']):.1f} | "
              f"{statistics.median(ms['on']):.1f} |", flush=True)
    for m in memories.values():
        m.store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
