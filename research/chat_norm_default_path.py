#!/usr/bin/env python
"""Recall@10 of the package's default fused selection (``ranker: auto``: the learned ranker on
user-assistant and bursty histories, the weighted sum on alternating dialogue) with chat-log
normalization of the BM25 terms off and on (the ``fusion.chat_norm`` option, measured and
dropped: research/dropped.py rebuilds it), over the three development corpora's cached builds
(issue 25 item 7). Also how many questions' selections differ and the query time of each.

    python research/chat_norm_default_path.py --cache /tmp/slang_cache

"off" is the package's own path (checked against ``Memory.compile``); "on" is the same path
over the view's fused index with its lexical documents and questions chat-normalized. The
builds are the ones ``ablate_model_free.py --cv --corpora ...`` made (chat normalization
changes no build, so both read the same stores); a missing one is built into ``--cache``.
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
from dropped import chat_norm_index  # noqa: E402
from memcompile_local.bench.coverage import gold_recall  # noqa: E402
from memcompile_local.config import PipelineConfig  # noqa: E402
from memcompile_local.fused.retriever import FusedRetriever  # noqa: E402
from memcompile_local.pipeline.compile import query_intent  # noqa: E402
from memcompile_local.pipeline.presets import apply_preset  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", default="~/.cache/memcompile-local/ablate")
    ap.add_argument("--corpora", default="locomo,realtalk,beam")
    args = ap.parse_args()
    off = apply_preset("model-free", PipelineConfig())
    corpora = [cv_corpora.load_corpus(n, cv_corpora.DEFAULT_DATA[n]) for n in args.corpora.split(",")]
    memories, _ = cv_corpora.open_memories(corpora, off, Path(args.cache).expanduser(), progress=False)
    print(f"ranker {off.fusion.ranker}; recall@10 of Memory.compile (k0 = {off.evidence.k0})")
    print("| corpus | questions | chat norm off | chat norm on | selections differ | p50 ms off | p50 ms on |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for corpus in corpora:
        r = {"off": [], "on": []}
        ms = {"off": [], "on": []}
        differ = same_as_compile = 0
        for conv in corpus.convs:
            mem = memories[(corpus.name, conv.namespace)]
            view = mem.view(conv.namespace)
            normed = chat_norm_index(view.fusion, view.packets, view.descriptors_by_packet, off.fusion)
            retrievers = {"off": FusedRetriever(view.fusion, off.fusion, view.packets),
                          "on": FusedRetriever(normed, off.fusion, view.packets)}
            for q in cv_corpora.scored_questions(corpus, conv):
                got = {}
                for name, retriever in retrievers.items():
                    t0 = time.perf_counter()
                    intent = query_intent(q.question, off, None, view)
                    qvec = retriever.query_vector(mem.embedder, q.question, intent.lexical_query())
                    got[name] = list(retriever.retrieve(q.question, qvec, off.evidence.k0).packet_ids)
                    ms[name].append((time.perf_counter() - t0) * 1000)
                    r[name].append(gold_recall(got[name], q.evidence))
                differ += got["off"] != got["on"]
                same_as_compile += got["off"] == list(mem.compile(conv.namespace, q.question).packet_ids)
        print(f"| {cv_corpora.TITLES[corpus.name]} | {len(r['off'])} | {100 * statistics.fmean(r['off']):.1f} | "
              f"{100 * statistics.fmean(r['on']):.1f} | {differ} | {statistics.median(ms['off']):.1f} | "
              f"{statistics.median(ms['on']):.1f} |", flush=True)
        print(f"  (off == Memory.compile on {same_as_compile}/{len(r['off'])})")
    for m in memories.values():
        m.store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
