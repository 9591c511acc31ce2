#!/usr/bin/env python
"""GPU check: sentence-transformers on CUDA and, when vLLM is installed, the vLLM backend.

(a) Embeds 2,000 synthetic texts with all-MiniLM-L6-v2 on CUDA; prints texts/s and checks
    the vectors are unit length and match a CPU reference on a sample.
(b) If ``vllm`` imports and ``$MCL_VLLM_MODEL`` names a local model folder, runs
    VLLMBackend over a batch of JSON-schema and ranking requests; prints requests/s,
    completion tokens/s and the validation rate, and checks that every constrained output
    parses with the right shape (count and membership for rankings).

Exit status 0 when every check that ran passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

TOPICS = ["travel", "cooking", "music", "sports", "work", "family", "health", "books", "movies", "pets"]
LABELS = tuple(f"C{i:03d}" for i in range(1, 13))


def synthetic_texts(n: int) -> list[str]:
    return [f"Note {i}: talked about {TOPICS[i % 10]} and {TOPICS[(i * 7) % 10]} on day {i % 31 + 1}."
            for i in range(n)]


def check_embeddings(n: int) -> bool:
    import numpy as np
    import torch

    from memcompile_local.adapters.embed_st import SentenceTransformerEmbedder

    if not torch.cuda.is_available():
        print("FAIL embeddings: torch sees no CUDA device")
        return False
    texts = synthetic_texts(n)
    emb = SentenceTransformerEmbedder("all-MiniLM-L6-v2", device="auto", batch_size=256)
    emb.embed(texts[:256])  # warm-up
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    vecs = emb.embed(texts)
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    norms = np.linalg.norm(vecs, axis=1)
    cpu = SentenceTransformerEmbedder("all-MiniLM-L6-v2", device="cpu").embed(texts[:32])
    max_diff = float(np.abs(cpu - vecs[:32]).max())
    ok = emb.device.startswith("cuda") and vecs.shape == (n, 384) and bool(np.allclose(norms, 1, atol=1e-3)) \
        and max_diff < 2e-2
    print(f"embeddings: device={emb.device} n={n} {n / wall:.0f} texts/s "
          f"max|gpu-cpu|={max_diff:.2e} {'OK' if ok else 'FAIL'}")
    return ok


def vllm_requests(n: int):
    from memcompile_local.llm.interface import JsonSchemaSpec, LLMRequest, Message, RankingSpec

    schema = {"type": "object",
              "properties": {"who": {"type": "string", "maxLength": 40},
                             "topic": {"type": "string", "enum": TOPICS},
                             "day": {"type": "integer"}},
              "required": ["who", "topic", "day"], "additionalProperties": False}
    out = []
    for i in range(n):
        if i % 2 == 0:
            out.append(LLMRequest(
                messages=(Message("system", "Extract the fields as JSON."),
                          Message("user", f"On day {i % 28 + 1}, Dana talked about {TOPICS[i % 10]}.")),
                stage="extract", output=JsonSchemaSpec(schema=schema, name="note"), max_tokens=96, seed=i))
        else:
            notes = "\n".join(f"{lab}: about {TOPICS[(i + j) % 10]}" for j, lab in enumerate(LABELS))
            out.append(LLMRequest(
                messages=(Message("system", "Rank the notes by relevance. JSON only."),
                          Message("user", f"Which 5 notes are about {TOPICS[i % 10]}?\n{notes}")),
                stage="frontier", output=RankingSpec(labels=LABELS, k=5), max_tokens=96, seed=i))
    return out


def check_vllm(model: str, n: int) -> bool:
    from memcompile_local.adapters.vllm_offline import VLLMBackend
    from memcompile_local.errors import OutputValidationError
    from memcompile_local.llm.interface import RankingSpec
    from memcompile_local.llm.validate import validate_response

    backend = VLLMBackend(model, max_model_len=4096, gpu_memory_utilization=0.6)
    reqs = vllm_requests(n)
    backend.generate(reqs[:2])  # warm-up (engine start happened in _load)
    t0 = time.perf_counter()
    out = backend.generate(reqs)
    wall = time.perf_counter() - t0
    valid = shaped = 0
    for r, o in zip(reqs, out):
        try:
            value = json.loads(o.text)
            if isinstance(r.output, RankingSpec):
                items = value[r.output.field_name]
                shaped += int(len(items) == r.output.k and set(items) <= set(r.output.labels))
            else:
                shaped += int(set(value) == {"who", "topic", "day"})
        except (ValueError, KeyError, TypeError):
            pass
        try:
            validate_response(r, o)
            valid += 1
        except OutputValidationError:
            pass
    tokens = sum(o.completion_tokens for o in out)
    again = backend.generate(reqs[:8])
    same = sum(a.text == b.text for a, b in zip(again, out[:8]))
    ok = shaped == n and valid >= n // 2
    print(f"vllm: model={model} n={n} {n / wall:.1f} requests/s {tokens / wall:.0f} tokens/s "
          f"shape-ok {shaped}/{n} validated {valid}/{n} rerun-identical {same}/8 {'OK' if ok else 'FAIL'}")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--texts", type=int, default=2000)
    ap.add_argument("--requests", type=int, default=128)
    args = ap.parse_args()
    ok = True
    try:
        ok &= check_embeddings(args.texts)
    except Exception as exc:  # a check script reports every failure and carries on
        print(f"FAIL embeddings: {type(exc).__name__}: {exc}")
        ok = False
    model = os.environ.get("MCL_VLLM_MODEL")
    try:
        import vllm  # noqa: F401
    except ImportError:
        print("vllm: not installed, skipped")
    else:
        if not model:
            print("vllm: $MCL_VLLM_MODEL not set, skipped")
        else:
            try:
                ok &= check_vllm(model, args.requests)
            except Exception as exc:
                print(f"FAIL vllm: {type(exc).__name__}: {exc}")
                ok = False
    print("GPU CHECK", "PASSED" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
