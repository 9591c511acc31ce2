"""``memcompile-local demo``: the shipped example conversation end to end on the embedded default.

Ingests the example (our own writing, LoCoMo layout), builds the memory with the configured
extractor and models, compiles evidence for one of its questions and answers it.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any


def run_demo(args: Any, cfg) -> int:
    from .data import example_conversation_path, load_locomo
    from .memory import Memory

    conv = load_locomo(example_conversation_path())[0]
    question = args.question or conv.questions[0].question
    gold = None if args.question else conv.questions[0].answer
    # SmolLM2-135M rambles when allowed 2,048 tokens, and often fails the extraction schema:
    # the demo caps completions and rule-extracts (and reports) the turns the model fails on.
    if cfg.model.backend == "llamacpp" and cfg.model.max_tokens > 512:
        cfg = cfg.replace(model={"max_tokens": 512})
    if cfg.extraction.extractor == "llm":
        cfg = cfg.replace(extraction={"on_failure": "rule"})
    if getattr(args, "extractor", None) is None and cfg.model.backend == "llamacpp" and cfg.model.model == "smollm2-135m":
        # SmolLM2-135M cannot produce usable claims (measured: it returns turn ids as facts and
        # loops on metadata until max_tokens); the demo builds with the rule-based extractor and
        # runs every query-time stage on the model. --extractor llm overrides this.
        cfg = cfg.replace(extraction={"extractor": "rule"})
        print("descriptors: rule-based extractor (SmolLM2-135M is too small for claim extraction; "
              "--extractor llm uses the model)")
    tmp = None
    store_path = args.store
    if store_path is None:
        tmp = tempfile.TemporaryDirectory(prefix="memcompile-demo-")
        store_path = str(Path(tmp.name) / "demo.sqlite")
    t0 = time.perf_counter()
    try:
        with Memory(store_path, cfg, progress=not args.quiet) as mem:
            res = mem.add(conv.namespace, conv)
            print(f"ingested {conv.namespace}: {res.added} turns ({res.skipped} already present) into {store_path}")
            b = mem.build(conv.namespace)
            fallback = mem.store.get_meta(conv.namespace, f"fallback:{b.descriptor_set}")
            n_fallback = len(json.loads(fallback)) if fallback else 0
            print(f"built: {b.descriptors} descriptors in {b.cells} cells over {b.packets} packets"
                  + (f" ({n_fallback} turns rule-extracted after model failures)" if n_fallback else ""))
            ans = mem.answer(conv.namespace, question)
            ctx = ans.context
            print(f"\nquestion: {question}")
            print(f"selected packets: {', '.join(ctx.packet_ids)}")
            print("context:\n" + "\n".join("  " + line for line in ctx.text.splitlines()))
            print(f"answer: {ans.text}")
            if gold is not None:
                print(f"reference answer: {gold}")
            totals = mem.client.totals() if mem.needs_llm() else {}
            per_stage = {k: v.get("prompt", 0) + v.get("completion", 0) for k, v in totals.items()}
            detail = ", ".join(f"{k}={n}" for k, n in per_stage.items())
            print(f"model tokens: {sum(per_stage.values())} ({detail})")
            print(f"wall time: {time.perf_counter() - t0:.1f} s")
    finally:
        if tmp is not None:
            tmp.cleanup()
    return 0
