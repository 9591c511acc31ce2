"""``memcompile-local demo``: the shipped example conversation end to end on the embedded default.

What it does, in order:

1. ingests the example conversation (``data/example_conversation.json``, our own writing in
   the LoCoMo layout) into a store (a temporary file unless ``--store`` is given);
2. builds the memory. Without ``--preset`` or ``--config`` the evidence is model-free (the
   ``model-free`` preset: rule-based claims and intent, the fused selector), because the
   embedded SmolLM2-135M cannot extract claims or rank packets usefully;
3. for every question of the example (or only ``--question``), compiles the evidence, prints
   the evidence lines the answer model reads, asks the answer model and prints its answer next
   to the reference answer with the token F1 of :func:`memcompile_local.bench.metrics.locomo_f1`;
4. prints the score: how many answers reach :data:`RIGHT_F1` and the mean F1. When the model
   gets fewer than half right, one line says so, and for each miss the block of the compiled
   context that holds the reference evidence is shown, so the user sees that retrieval found
   the answer even where the small model could not put it into words.

Answer settings come from :func:`memcompile_local.evidence.answer.answer_settings`: for the
embedded model a short prompt (``prompts.SMALL_ANSWER``), 16 tokens, the first block only, and
a restated question dropped from the reply. They were picked by the score on the example's ten
questions (model-free claim-bundle evidence, SmolLM2-135M Q4_1, greedy; right = F1 >= 0.5):

=====================================================  ===========  =====  =======
variant                                                restatement  right  mean F1
=====================================================  ===========  =====  =======
full answer prompts, all 12 blocks, 128 tokens         kept         0/10   0.04
"a few words copied from the notes", 3 blocks          kept         0/10   0.09
same, two worked examples (our own), 3 blocks          kept         0/10   0.10
"reply with only the answer, a few words", 1 block     dropped      3/10   0.31
"answer in one to five words", 2 blocks                dropped      1/10   0.13
"answer in one to five words", raw view, 1 block       dropped      1/10   0.13
"answer in one to five words", 1 block (chosen)        kept         2/10   0.18
"answer in one to five words", 1 block (chosen)        dropped      4/10   0.31
=====================================================  ===========  =====  =======
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

from ..bench.metrics import locomo_f1
from ..config import PipelineConfig
from ..data import example_conversation_path, load_locomo
from ..evidence.answer import answer_settings
from ..pipeline.presets import apply_preset
from ..memory import Memory
from ..store import describe_location
from ..types import QAItem

__all__ = ["run_demo", "demo_config", "RIGHT_F1"]

# An answer counts as right when its token F1 against the reference reaches this value (the
# references are short phrases, so 0.5 means about half the reference words, in any order).
RIGHT_F1 = 0.5


def demo_config(args: Any, cfg: PipelineConfig) -> PipelineConfig:
    """The demo's pipeline: ``cfg`` with the model-free evidence path unless the user chose one."""
    if getattr(args, "preset", None) is None and getattr(args, "config", None) is None:
        cfg = apply_preset("model-free", cfg)
    if cfg.model.backend == "llamacpp" and cfg.model.max_tokens > 512:
        # SmolLM2-135M rambles until the cap when allowed 2,048 tokens (LLM stages of --preset A0).
        cfg = cfg.replace(model={"max_tokens": 512})
    if cfg.extraction.extractor == "llm":
        # SmolLM2-135M often fails the extraction schema: rule-extract (and report) those turns.
        cfg = cfg.replace(extraction={"on_failure": "rule"})
    return cfg


def _indent(text: str) -> str:
    return "\n".join(("    " + line) if line else "" for line in text.splitlines())


def _evidence_block(context_text: str, packet_ids: tuple[str, ...], wanted: tuple[str, ...]) -> str | None:
    """The first block of the compiled context whose packet is one of the reference evidence ids."""
    blocks = context_text.split("\n\n")  # fenced blocks never hold a blank line
    for pid, block in zip(packet_ids, blocks):
        if pid in wanted:
            return block
    return None


def _score_line(right: int, total: int, mean_f1: float, model: str) -> str:
    return (f"score: {right}/{total} answers right (token F1 >= {RIGHT_F1}), mean F1 {mean_f1:.2f} "
            f"[{model}]")


def run_demo(args: Any, cfg: PipelineConfig, *, backend: Any = None, embedder: Any = None) -> int:
    """Run the demo (see the module docstring); returns the exit code.

    ``args``: the CLI namespace (``store``, ``question``, ``quiet``, ``preset``, ``config``);
    ``backend``/``embedder`` replace the configured ones (tests pass stand-ins).
    """
    conv = load_locomo(example_conversation_path())[0]
    cfg = demo_config(args, cfg)
    if args.question:
        questions: list[QAItem | None] = [None]
    else:
        questions = list(conv.questions)
    settings = answer_settings(cfg.model)
    model_name = f"{cfg.model.backend}:{cfg.model.model}"
    print(f"evidence: {'model-free' if cfg.evidence.anchor_selector == 'fused' else 'LLM'} selection "
          f"({cfg.extraction.extractor} claims), {cfg.evidence.view} view; answers by {model_name} "
          f"({settings.describe()})")
    tmp = None
    store_path = args.store
    if store_path is None:
        tmp = tempfile.TemporaryDirectory(prefix="memcompile-demo-")
        store_path = str(Path(tmp.name) / "demo.sqlite")
    t0 = time.perf_counter()
    try:
        with Memory(store_path, cfg, backend=backend, embedder=embedder, progress=not args.quiet) as mem:
            res = mem.add(conv.namespace, conv)
            print(f"ingested {conv.namespace}: {res.added} turns ({res.skipped} already present) into {describe_location(store_path)}")
            b = mem.build(conv.namespace)
            fallback = mem.store.get_meta(conv.namespace, f"fallback:{b.descriptor_set}")
            n_fallback = len(json.loads(fallback)) if fallback else 0
            print(f"built: {b.descriptors} descriptors in {b.cells} cells over {b.packets} packets"
                  + (f" ({n_fallback} turns rule-extracted after model failures)" if n_fallback else ""))
            scores: list[float] = []
            misses: list[tuple[QAItem, str | None]] = []
            for n, qa in enumerate(questions, start=1):
                question = args.question if qa is None else qa.question
                ctx = mem.compile(conv.namespace, question)
                shown = settings.shown(ctx.text)
                ans = settings.answer(mem.client, question, ctx.text, namespace=conv.namespace)
                print(f"\n[{n}] question: {question}")
                print("  evidence given to the model:\n" + _indent(shown))
                print(f"  answer:    {ans.text}")
                if qa is None:
                    continue
                f1 = locomo_f1(ans.text, qa.answer, qa.category)
                scores.append(f1)
                print(f"  reference: {qa.answer}   (token F1 {f1:.2f})")
                if f1 < RIGHT_F1:
                    misses.append((qa, _evidence_block(ctx.text, ctx.packet_ids, qa.evidence)))
            if scores:
                right = sum(f >= RIGHT_F1 for f in scores)
                print("\n" + _score_line(right, len(scores), sum(scores) / len(scores), model_name))
                if right * 2 < len(scores):
                    print(f"{model_name} is too small to answer most of these questions; the compiled "
                          "evidence holds the answers, as the blocks below show:")
                    for qa, block in misses:
                        where = "the evidence turn was not selected" if block is None else _indent(block)
                        print(f"  - {qa.question} (reference: {qa.answer})\n{where}")
            if mem.needs_llm() or questions:
                totals = mem.client.totals()
                per_stage = {k: v.get("prompt", 0) + v.get("completion", 0) for k, v in totals.items()}
                detail = ", ".join(f"{k}={n}" for k, n in per_stage.items())
                print(f"model tokens: {sum(per_stage.values())} ({detail})")
            print(f"wall time: {time.perf_counter() - t0:.1f} s")
    finally:
        if tmp is not None:
            tmp.cleanup()
    return 0
