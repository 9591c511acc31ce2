#!/usr/bin/env python
"""documents/s and vector agreement of the CPU embedding recipes, side by side in one process.

The documents are the ones a model-free build embeds (packet documents z(p) with their rule
descriptors, and neighbour-context documents) for the LoCoMo dev file, sampled evenly. Every
recipe embeds the same documents; the figure kept per recipe is the best of ``--rounds``
interleaved rounds (the machine is shared, so the best round is the least disturbed one).

Candidates (``CANDIDATES``: derivation steps of ``adapters/onnx_export.py`` and how they run):
torch on CPU (sentence-transformers, the reference), the plain ONNX export in fp32 (length
buckets, one text per call, or the old sorted batches of 64), the export after ONNX Runtime's
transformer optimizer (fused attention, LayerNorm, GELU, embeddings), dynamic int8 variants
(per-tensor or per-channel weights, FFN output projections kept in fp32, on the plain or the
fused-without-attention graph), per-token int8 (one activation scale per token: batched, and a
vector still depends on its text alone), and ONNX Runtime's spinning thread pool against the
shipped sleeping one. Each candidate's vectors are compared with the same graph run one text
per call: a recipe whose vectors move with the batch (per-tensor int8 batched) cannot back a
content-addressed store, so such a recipe would run one text per call.

Prints a markdown table (JSON with --out): docs/s, ratio to torch, mean/min cosine to torch,
agreement with one text per call; and the tokenizer's share of the time. On a loaded machine
``--threads 1 --clock cpu`` (CPU seconds of one thread) is steadier than the wall clock;
recall@10 per recipe comes from ``memcompile-local eval locomo --retrieval-only`` (docs/guides/backends.md).

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/bench_embed_backends.py --docs 400 --rounds 3 --out /tmp/embed.json
    HF_HUB_OFFLINE=1 .venv/bin/python scripts/bench_embed_backends.py --threads 1 --clock cpu
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from memcompile_local.adapters import embed_onnx  # noqa: E402
from memcompile_local.adapters.embed_onnx import OnnxSentenceEncoder, cpu_threads  # noqa: E402
from memcompile_local.adapters.embed_st import SentenceTransformerEmbedder  # noqa: E402
from memcompile_local.adapters.models import minilm_path, weights_fingerprint  # noqa: E402
from memcompile_local.adapters.onnx_export import RECIPES, batch_independent, derived_model  # noqa: E402
from memcompile_local.build.stages import context_document_keys, packet_document_keys  # noqa: E402
from memcompile_local.config import PipelineConfig  # noqa: E402
from memcompile_local.data.locomo import load_locomo  # noqa: E402
from memcompile_local.pipeline.presets import apply_preset  # noqa: E402
from memcompile_local.memory import Memory  # noqa: E402
from memcompile_local.store import MemoryStore  # noqa: E402

LOCOMO = "/work/shared/data/locomo/locomo_dev4.json"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def build_documents(path: str) -> list[str]:
    """Packet and context documents of every conversation of ``path`` (model-free, no embedding)."""
    docs: list[str] = []
    cfg = apply_preset("model-free", PipelineConfig())
    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore(Path(tmp) / "docs.sqlite")
        mem = Memory(store, cfg, embedder=None)
        for conv in load_locomo(path):
            mem.add(conv.namespace, conv)
            mem.build(conv.namespace)
            docs += packet_document_keys(store, conv.namespace, mem.extractor().descriptor_set)[1]
            docs += context_document_keys(store, conv.namespace)[1]
        store.close()
    return docs


def sample(docs: list[str], n: int) -> list[str]:
    """``n`` documents spread evenly over ``docs`` (keeps the length mix of the whole set)."""
    if n >= len(docs):
        return list(docs)
    step = len(docs) / n
    return [docs[int(i * step)] for i in range(n)]


CANDIDATES: dict[str, tuple[tuple[str, ...], str]] = {  # name -> (derivation steps, run mode)
    "onnx-fp32 plain": ((), "batched"),
    "onnx-fp32 fused": (("fused1",), "batched"),
    "onnx-fp32 fused, one text per call": (("fused1",), "per-text"),
    "onnx-fp32 fused, sorted batches of 64": (("fused1",), "sorted-64"),
    "int8 per-tensor (old recipe)": (("int8pt1",), "per-text"),
    "int8 per-channel": (("int8pc1",), "per-text"),
    "int8 per-channel, spinning threads": (("int8pc1",), "per-text spin"),
    "onnx-fp32 plain, spinning threads": ((), "batched spin"),
    "int8 per-channel, FFN output fp32, spinning threads": (("int8pcffn1",), "per-text spin"),
    "int8 per-channel, FFN output fp32": (("int8pcffn1",), "per-text"),
    "int8 per-channel, FFN output fp32 in layers 1-3": (("int8pcffn3first1",), "per-text"),
    "int8 per-channel, fused w/o attention": (("fusednoattn1", "int8pc1"), "per-text"),
    "int8 per-channel, fused w/o attention, batched": (("fusednoattn1", "int8pc1"), "batched"),
    "int8 per-token activations, batched": (("int8tok1",), "batched"),
}


def shipped_names() -> dict[str, str]:
    """precision -> the candidate name that is ``onnx_export.RECIPES[precision]``, run as shipped."""
    out = {}
    for precision, steps in RECIPES.items():
        mode = "batched" if batch_independent(precision) else "per-text"
        out[precision] = next(n for n, (s, m) in CANDIDATES.items() if s == steps and m == mode)
    return out


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=LOCOMO)
    ap.add_argument("--docs", type=int, default=600, help="documents embedded by each recipe")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--work", default="/tmp/mcl_embed_bench", help="folder for the document list")
    ap.add_argument("--only", action="append", default=[], help="a candidate name (repeat; default: all)")
    ap.add_argument("--solo-check", type=int, default=100, help="documents compared with one text per call")
    ap.add_argument("--threads", type=int, default=None,
                    help="threads for torch and ONNX Runtime (default: every usable core)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: process CPU seconds, for a loaded machine (meaningful with --threads 1)")
    ap.add_argument("--out")
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)

    cache = work / f"docs-{Path(args.data).stem}.json"
    if cache.is_file():
        all_docs = json.loads(cache.read_text())
    else:
        t0 = time.perf_counter()
        all_docs = build_documents(args.data)
        cache.write_text(json.dumps(all_docs))
        log(f"{len(all_docs)} documents built in {time.perf_counter() - t0:.1f}s")
    docs = sample(all_docs, args.docs)
    model_dir = minilm_path()
    sha = weights_fingerprint(model_dir)["weights_sha256"]
    only = set(args.only)
    if only - set(CANDIDATES):
        ap.error(f"unknown candidates {sorted(only - set(CANDIDATES))}; expected names of {list(CANDIDATES)}")
    chosen = {n: c for n, c in CANDIDATES.items() if not only or n in only}
    encoders: dict[tuple[tuple[str, ...], bool], OnnxSentenceEncoder] = {}
    for steps, mode in chosen.values():
        spin = mode.endswith(" spin")
        if (steps, spin) not in encoders:
            t0 = time.perf_counter()
            path = derived_model(model_dir, sha, steps)
            log(f"{path.name}: ready in {time.perf_counter() - t0:.1f}s")
            encoders[steps, spin] = OnnxSentenceEncoder(model_dir, path, threads=args.threads, spin=spin)
            encoders[steps, spin].encode(docs[:16])

    if args.threads:
        import torch  # heavy; only to pin its thread count

        torch.set_num_threads(args.threads)
    torch_emb = SentenceTransformerEmbedder(backend="torch", device="cpu", batch_size=args.batch_size)
    torch_emb.embed(docs[:16])

    def onnx_run(steps: tuple[str, ...], mode: str) -> Callable[[], np.ndarray]:
        spin = mode.endswith(" spin")
        enc = encoders[steps, spin]
        mode = mode.removesuffix(" spin")
        if mode == "per-text":
            return lambda: enc.encode(docs, batch_size=1)
        if mode == "sorted-64":  # the batching before length buckets: any lengths in one batch
            def run() -> np.ndarray:
                old = embed_onnx.PAD_SLACK
                embed_onnx.PAD_SLACK = 1e9
                try:
                    return enc.encode(docs, batch_size=args.batch_size)
                finally:
                    embed_onnx.PAD_SLACK = old
            return run
        return lambda: enc.encode(docs, batch_size=args.batch_size)

    runs: dict[str, Callable[[], np.ndarray]] = {"torch-cpu (sentence-transformers)": lambda: torch_emb.embed(docs)}
    for name, (steps, mode) in chosen.items():
        runs[name] = onnx_run(steps, mode)

    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    best: dict[str, float] = {}
    vectors: dict[str, np.ndarray] = {}
    for r in range(args.rounds):
        for name, fn in runs.items():
            t0 = clock()
            v = fn()
            wall = clock() - t0
            best[name] = min(best.get(name, wall), wall)
            vectors[name] = np.asarray(v, dtype=np.float32)
            log(f"round {r + 1} {name}: {len(docs) / wall:.1f} docs/s")

    tok = next(iter(encoders.values()))._tok
    t0 = time.perf_counter()
    tok.encode_batch(docs)
    tok_s = time.perf_counter() - t0
    lens = [len(e.ids) for e in tok.encode_batch(docs)]

    ref = vectors["torch-cpu (sentence-transformers)"]
    torch_s = best["torch-cpu (sentence-transformers)"]
    rows = []
    for name in runs:
        c = cosines(vectors[name], ref)
        row = {"recipe": name, "docs_per_s": len(docs) / best[name], "ratio": torch_s / best[name],
               "cos_mean": float(c.mean()), "cos_min": float(c.min())}
        if name in chosen:
            # The same graph one text per call: a vector that moves with its batch cannot be
            # content-addressed unless the recipe runs one text per call.
            steps, mode = chosen[name]
            enc = encoders[steps, mode.endswith(" spin")]
            solo = np.asarray(enc.encode(docs[:args.solo_check], batch_size=1))
            mine = vectors[name][:args.solo_check]
            row["solo_min_cos"] = float(cosines(mine, solo).min())
            row["solo_max_abs"] = float(np.abs(mine - solo).max())
        rows.append(row)
    default_name = shipped_names()["int8"]
    default_s = best.get(default_name)
    share = f"{100 * tok_s / default_s:.1f}% of the {default_name} run" if default_s else "default not run"
    print(f"{len(docs)} documents (of {len(all_docs)}), tokens mean {np.mean(lens):.0f} max {max(lens)}, "
          f"{args.threads or cpu_threads()} threads, {args.clock} clock, best of {args.rounds} rounds; tokenizer {tok_s * 1000:.0f} ms "
          f"({share}); shipped: {shipped_names()}")
    print("| recipe | docs/s | x torch | cos mean vs torch | cos min vs torch | "
          f"vs one text per call (first {args.solo_check}): min cos | max abs |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        extra = (f"{row['solo_min_cos']:.7f} | {row['solo_max_abs']:.1e}" if "solo_min_cos" in row else " | ")
        print(f"| {row['recipe']} | {row['docs_per_s']:.1f} | {row['ratio']:.2f} | {row['cos_mean']:.6f} | "
              f"{row['cos_min']:.6f} | {extra} |")
    if args.out:
        Path(args.out).write_text(json.dumps({"docs": len(docs), "tokenizer_s": tok_s, "rows": rows,
                                              "threads": args.threads or cpu_threads(), "clock": args.clock,
                                              "shipped": shipped_names()}, indent=1))


if __name__ == "__main__":
    main()
