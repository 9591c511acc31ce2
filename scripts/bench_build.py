#!/usr/bin/env python
"""Build speed of the model-free path, per embedding backend, measured side by side in one run.

Prints a markdown table (and writes JSON with --out) of:

1. documents/s of each backend on the same documents (packet documents z(p) and neighbour
   context documents of a LoCoMo conversation): torch on CPU (the path before ONNX), ONNX
   Runtime fp32 and ONNX Runtime int8 (per-token activation scales: batched, and a vector
   depends on its text alone), as each runs in the package; best of ``--rounds`` interleaved rounds;
2. the end-to-end check of issue 13: a cold model-free build of one conversation plus one
   question with the default embedder, with torch, and with the opt-in fast build (int8, context
   vectors composed: ``FAST``), against plain sentence-transformers on torch embedding that
   conversation's raw turns once (model load counted on both sides);
3. a cold build of the whole LoCoMo file and recall@10 of the model-free preset per backend
   and for the fast build (``Memory.search`` top 10 against the gold evidence; every question
   with evidence, and categories 1-4 alone, the questions LoCoMo's scores count);
4. a LongMemEval-S-like file made from one LongMemEval question: 20 questions whose haystacks
   share most sessions (each drops two of the pool's sessions and adds one of its own), built
   cold into one store, against a build of its unique sessions alone;
5. latency of one appended turn until it is searchable (``add`` then ``search``), p50/p95;
6. with ``--option-recall``: recall@10 of the model-free preset on the LoCoMo file for each
   dense document option (``fusion.dense_document`` x ``fusion.dense_context``), default
   embedder, per conversation and overall (all questions with evidence, and categories 1-4).

``--dense-document`` / ``--dense-context`` set the dense option of the builds of 2, 4 and 5
(default: the shipped preset's); 2 is then also measured with the shipped preset.

The ONNX export (once per machine, cached in ~/.cache/memcompile-local/onnx) is timed apart.
Figures depend on the machine's load; compare ratios within one run.

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/bench_build.py --out /tmp/bench_build.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from memcompile_local.adapters.embed_st import SentenceTransformerEmbedder  # noqa: E402
from memcompile_local.adapters.models import minilm_path  # noqa: E402
from memcompile_local.bench.coverage import gold_recall, nearest_rank_percentile  # noqa: E402
from memcompile_local.build.stages import context_document_keys, packet_document_keys  # noqa: E402
from memcompile_local.config import PipelineConfig  # noqa: E402
from memcompile_local.data.locomo import load_locomo  # noqa: E402
from memcompile_local.data.longmemeval import load_longmemeval  # noqa: E402
from memcompile_local.pipeline.presets import apply_preset  # noqa: E402
from memcompile_local.memory import Memory  # noqa: E402
from memcompile_local.store import MemoryStore  # noqa: E402
from memcompile_local.types import Conversation, Session  # noqa: E402

LOCOMO = str(Path(__file__).resolve().parents[2] / "shared/data/locomo/locomo_dev4.json")  # ../shared beside the clone
LONGMEMEVAL = str(Path(__file__).resolve().parents[2] / "shared/data/longmemeval/longmemeval_s_single.json")
BACKENDS = {  # name -> SentenceTransformerEmbedder settings
    "torch-cpu": {"backend": "torch", "device": "cpu"},
    "onnx-fp32": {"backend": "onnx", "precision": "fp32"},
    "onnx-int8": {"backend": "onnx", "precision": "int8"},
}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


DENSE_OPTIONS: dict[str, str] = {}  # fusion.dense_document / dense_context of the builds (set in main)


def model_free(**dense: str) -> PipelineConfig:
    """The model-free preset with the dense options of ``dense`` (else ``DENSE_OPTIONS``)."""
    cfg = apply_preset("model-free", PipelineConfig())
    fusion = dense or DENSE_OPTIONS
    return cfg.replace(fusion=fusion) if fusion else cfg


FAST = "onnx-int8, composed context"
"""The opt-in fast build: int8 embeddings and context vectors composed from the packet vectors."""


def fast_build() -> PipelineConfig:
    return model_free(dense_document="packet", dense_context="composed")


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def conversation_documents(conv: Conversation) -> list[str]:
    """The packet and context documents the model-free build embeds for ``conv`` (no embedding)."""
    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore(Path(tmp) / "docs.sqlite")
        mem = Memory(store, model_free(), embedder=None)
        mem.add(conv.namespace, conv)
        mem.build(conv.namespace)
        _, docs = packet_document_keys(store, conv.namespace, mem.extractor().descriptor_set)
        _, ctx = context_document_keys(store, conv.namespace)
        store.close()
    return docs + ctx


def throughput(docs: list[str], rounds: int = 3) -> dict[str, float]:
    """documents/s per backend on the same documents (warm models): the best of ``rounds``
    interleaved rounds, so each backend gets the machine's quietest moment of the run."""
    embedders = {name: SentenceTransformerEmbedder(**kw) for name, kw in BACKENDS.items()}
    for emb in embedders.values():
        emb.embed(docs[:16])
    best: dict[str, float] = {}
    for _ in range(rounds):
        for name, emb in embedders.items():
            wall, _ = timed(lambda: emb.embed(docs))
            best[name] = max(best.get(name, 0.0), len(docs) / wall)
    for name, v in best.items():
        log(f"throughput {name}: {v:.1f} docs/s (best of {rounds})")
    return best


def cold_build(conv: Conversation, embedder: Any, question: str | None,
               config: PipelineConfig | None = None) -> float:
    """Seconds from an empty store to ``conv`` built, its view loaded and one question searched."""
    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore(Path(tmp) / "cold.sqlite")
        mem = Memory(store, config or model_free(), embedder=embedder)
        t0 = time.perf_counter()
        mem.add(conv.namespace, conv)
        mem.view(conv.namespace)
        if question:
            mem.search(conv.namespace, question, k=10)
        wall = time.perf_counter() - t0
        store.close()
    return wall


def raw_turns_once(conv: Conversation) -> tuple[float, float]:
    """(model load s, encode s) of plain sentence-transformers on torch CPU over the raw turns."""
    from sentence_transformers import SentenceTransformer  # heavy; only this reference needs it

    texts = [t.text for s in conv.sessions for t in s.turns]
    load, model = timed(lambda: SentenceTransformer(str(minilm_path()), device="cpu"))
    enc, _ = timed(lambda: model.encode(texts, batch_size=64, normalize_embeddings=True, show_progress_bar=False))
    return load, enc


def recall_and_build(convs: list[Conversation], kw: dict[str, Any],
                     config: PipelineConfig | None = None) -> tuple[float, float, float, int]:
    """(recall@10 % over every question with evidence, over categories 1-4, cold build s of all
    conversations, questions scored) for one backend (and ``config``, default ``model_free()``)."""
    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore(Path(tmp) / "recall.sqlite")
        t0 = time.perf_counter()
        mem = Memory(store, config or model_free(), embedder=SentenceTransformerEmbedder(**kw))
        for conv in convs:
            mem.add(conv.namespace, conv)
            mem.view(conv.namespace)
        build = time.perf_counter() - t0
        scores, main4 = [], []
        for conv in convs:
            for q in conv.questions:
                if not q.evidence:
                    continue
                hits = mem.search(conv.namespace, q.question, k=10)
                r = gold_recall([h.packet.packet_id for h in hits], q.evidence)
                if r is not None:
                    scores.append(r)
                    if q.category in (1, 2, 3, 4):
                        main4.append(r)
        store.close()
    return 100.0 * float(np.mean(scores)), 100.0 * float(np.mean(main4)), build, len(scores)


def option_recall(convs: list[Conversation], options: list[tuple[str, str]]) -> dict[str, Any]:
    """recall@10 per dense option (default embedder), per conversation and overall.

    One store for every option: vectors are content-addressed, so a text two options share is
    embedded once; each option's namespaces are its own (no view or extraction state shared).
    """
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore(Path(tmp) / "options.sqlite")
        embedder = SentenceTransformerEmbedder()
        for document, context in options:
            name = f"{document}+{context}"
            mem = Memory(store, model_free(dense_document=document, dense_context=context), embedder=embedder)
            per: dict[str, float] = {}
            every: list[float] = []
            main4: list[float] = []
            t0 = time.perf_counter()
            for conv in convs:
                ns = f"{document}-{context}-{conv.namespace}"
                mem.add(ns, dataclasses.replace(conv, namespace=ns))
                scores = []
                for q in conv.questions:
                    if not q.evidence:
                        continue
                    hits = mem.search(ns, q.question, k=10)
                    r = gold_recall([h.packet.packet_id for h in hits], q.evidence)
                    if r is not None:
                        scores.append(r)
                        every.append(r)
                        if q.category in (1, 2, 3, 4):
                            main4.append(r)
                per[conv.namespace] = 100.0 * float(np.mean(scores))
            out[name] = {"all": 100.0 * float(np.mean(every)), "cat1-4": 100.0 * float(np.mean(main4)),
                         "questions": len(every), "questions_cat1-4": len(main4), "per_conversation": per,
                         "wall_s": time.perf_counter() - t0}
            log(f"option {name}: recall@10 {out[name]['all']:.2f} (cat 1-4 {out[name]['cat1-4']:.2f}); "
                + ", ".join(f"{k} {v:.1f}" for k, v in per.items()))
        store.close()
    return out


def synthetic_longmemeval(path: str, n_questions: int = 20) -> tuple[list[Conversation], Conversation]:
    """(questions, unique sessions alone): haystacks sharing all but three sessions each."""
    base = load_longmemeval(path)[0]
    pool = list(base.sessions)
    questions = []
    own_sessions = []
    for q in range(n_questions):
        drop = {q % len(pool), (7 * q + 3) % len(pool)}
        src = pool[(11 * q + 5) % len(pool)]
        own = Session(index=0, session_id=f"own-{q}", time=src.time, turns=tuple(
            dataclasses.replace(t, packet_id=f"own-{q}:{i + 1}", text=f"(note {q}) {t.text}")
            for i, t in enumerate(src.turns)))
        own_sessions.append(own)
        sessions = [s for j, s in enumerate(pool) if j not in drop] + [own]
        sessions = [dataclasses.replace(s, index=i + 1) for i, s in enumerate(sessions)]
        questions.append(Conversation(namespace=f"q{q:02d}", sessions=tuple(sessions), speakers=base.speakers))
    unique = [dataclasses.replace(s, index=i + 1) for i, s in enumerate(pool + own_sessions)]
    return questions, Conversation(namespace="unique", sessions=tuple(unique), speakers=base.speakers)


def build_many(convs: list[Conversation], embedder: Any) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore(Path(tmp) / "lme.sqlite")
        mem = Memory(store, model_free(), embedder=embedder)
        t0 = time.perf_counter()
        for conv in convs:
            mem.add(conv.namespace, conv)
            mem.view(conv.namespace)
        wall = time.perf_counter() - t0
        store.close()
    return wall


def add_latency(conv: Conversation, embedder: Any, n: int) -> tuple[float, float]:
    """p50/p95 ms of add(one turn) + search until the new turn is found."""
    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore(Path(tmp) / "add.sqlite")
        mem = Memory(store, model_free(), embedder=embedder)
        mem.add(conv.namespace, conv)
        mem.view(conv.namespace)
        last = conv.sessions[-1]
        times = []
        for i in range(n):
            text = f"Reminder {i}: the plumber named Quillon{i} comes on Friday at {8 + i % 9} am."
            t0 = time.perf_counter()
            mem.add(conv.namespace, [{"time": last.time, "turns": [{"speaker": last.turns[-1].speaker,
                                                                    "text": text}]}])
            hits = mem.search(conv.namespace, f"When does Quillon{i} the plumber come?", k=10)
            times.append(1000 * (time.perf_counter() - t0))
            if not any(h.packet.content == text for h in hits):
                raise SystemExit(f"appended turn {i} was not found by search")
        store.close()
    return nearest_rank_percentile(times, 50), nearest_rank_percentile(times, 95)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--locomo", default=LOCOMO)
    ap.add_argument("--longmemeval", default=LONGMEMEVAL)
    ap.add_argument("--conversation", default="conv-41", help="the conversation of the end-to-end check")
    ap.add_argument("--docs", type=int, default=400, help="documents in the throughput comparison")
    ap.add_argument("--adds", type=int, default=20, help="appended turns timed")
    ap.add_argument("--skip-recall", action="store_true", help="skip the per-backend recall builds (slow)")
    ap.add_argument("--out", help="write the figures as JSON here")
    ap.add_argument("--dense-document", choices=("packet", "turn"),
                    help="fusion.dense_document of the builds (default: the shipped preset's)")
    ap.add_argument("--dense-context", choices=("embedded", "composed"),
                    help="fusion.dense_context of the builds (default: the shipped preset's)")
    ap.add_argument("--option-recall", action="store_true",
                    help="recall@10 on the LoCoMo file for each dense option (default embedder)")
    ap.add_argument("--only-options", action="store_true", help="measure --option-recall alone")
    ap.add_argument("--skip-throughput", action="store_true", help="skip the documents/s comparison of backends")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the documents/s comparison")
    args = ap.parse_args()
    if args.dense_document:
        DENSE_OPTIONS["dense_document"] = args.dense_document
    if args.dense_context:
        DENSE_OPTIONS["dense_context"] = args.dense_context
    shipped = apply_preset("model-free", PipelineConfig()).fusion
    res: dict[str, Any] = {"cpu_threads": len(os.sched_getaffinity(0)),
                           "dense": {"document": model_free().fusion.dense_document,
                                     "context": model_free().fusion.dense_context},
                           "shipped_dense": {"document": shipped.dense_document, "context": shipped.dense_context}}

    convs = load_locomo(args.locomo)
    target = next(c for c in convs if c.namespace == args.conversation)
    log(f"{args.locomo}: {len(convs)} conversations; {target.namespace}: "
        f"{sum(len(s.turns) for s in target.sessions)} turns")
    if args.option_recall or args.only_options:
        options = [(d, c) for d in ("packet", "turn") for c in ("embedded", "composed")]
        res["option_recall"] = option_recall(convs, options)
        if args.only_options:
            print(option_report(res))
            if args.out:
                Path(args.out).write_text(json.dumps(res, indent=1))
            return 0

    for name, kw in BACKENDS.items():  # model loads and the one-time ONNX export, apart
        wall, _ = timed(lambda: SentenceTransformerEmbedder(**kw).embed(["warm up"]))
        res.setdefault("first_load_s", {})[name] = wall
        log(f"first load {name}: {wall:.1f} s")

    if not args.skip_throughput:
        docs = conversation_documents(target)
        step = max(1, len(docs) // args.docs)
        sample = docs[::step][:args.docs]
        res["throughput_docs"] = len(sample)
        res["docs_per_s"] = throughput(sample, args.rounds)

    load, enc = raw_turns_once(target)
    res["raw_turns_torch"] = {"load_s": load, "encode_s": enc}
    question = next(q.question for q in target.questions if q.evidence)
    res["cold_build_conv_s"] = {}
    runs = [("default", {}, None), ("torch-cpu", BACKENDS["torch-cpu"], None),
            (FAST, BACKENDS["onnx-int8"], fast_build())]
    if res["dense"] != res["shipped_dense"]:
        runs.append(("default, shipped dense option", {}, apply_preset("model-free", PipelineConfig())))
    for name, kw, config in runs:
        res["cold_build_conv_s"][name] = cold_build(target, SentenceTransformerEmbedder(**kw), question, config)
        log(f"cold build {target.namespace} + 1 question ({name}): {res['cold_build_conv_s'][name]:.1f} s "
            f"(raw turns on torch: {load:.1f} s load + {enc:.1f} s encode)")
    res["default_backend"] = SentenceTransformerEmbedder().resolved()

    if not args.skip_recall:
        res["recall@10"], res["recall@10_cat1-4"], res["cold_build_locomo_s"], res["questions"] = {}, {}, {}, 0
        for name, kw, config in [(n, kw, None) for n, kw in BACKENDS.items()] + [
                (FAST, BACKENDS["onnx-int8"], fast_build())]:
            rec, rec4, build, n = recall_and_build(convs, kw, config)
            res["recall@10"][name], res["recall@10_cat1-4"][name] = rec, rec4
            res["cold_build_locomo_s"][name], res["questions"] = build, n
            log(f"{name}: recall@10 {rec:.2f} over {n} questions ({rec4:.2f} on categories 1-4); "
                f"cold build of the file {build:.1f} s")

    questions, unique = synthetic_longmemeval(args.longmemeval)
    res["lme_turns"] = {"questions": sum(len(s.turns) for c in questions for s in c.sessions),
                        "unique": sum(len(s.turns) for s in unique.sessions)}
    res["lme_unique_s"] = build_many([unique], SentenceTransformerEmbedder())
    res["lme_questions_s"] = build_many(questions, SentenceTransformerEmbedder())
    log(f"synthetic LongMemEval: 20 questions {res['lme_questions_s']:.1f} s, unique sessions alone "
        f"{res['lme_unique_s']:.1f} s")

    res["add_ms"] = dict(zip(("p50", "p95"), add_latency(target, SentenceTransformerEmbedder(), args.adds)))
    log(f"one appended turn searchable: p50 {res['add_ms']['p50']:.0f} ms, p95 {res['add_ms']['p95']:.0f} ms")

    print(report(res, target.namespace))
    if "option_recall" in res:
        print(option_report(res))
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1))
    return 0


def option_report(r: dict[str, Any]) -> str:
    rows = r["option_recall"]
    convs = list(next(iter(rows.values()))["per_conversation"])
    lines = ["", "recall@10 of the model-free preset per dense option (default embedder)", "",
             "| fusion.dense_document + dense_context | all | categories 1-4 | " + " | ".join(convs) + " |",
             "|---|---:|---:|" + "---:|" * len(convs)]
    for name, v in rows.items():
        lines.append(f"| {name} | {v['all']:.2f} | {v['cat1-4']:.2f} | "
                     + " | ".join(f"{v['per_conversation'][c]:.1f}" for c in convs) + " |")
    return "\n".join(lines)


def report(r: dict[str, Any], conv: str) -> str:
    dps = r.get("docs_per_s", {})
    torch_dps = dps.get("torch-cpu", 1.0)
    lines = [f"Build speed ({r['cpu_threads']} CPU threads; default backend {'/'.join(r['default_backend'])})", "",
             f"| backend | docs/s | vs torch | recall@10 ({r.get('questions', '?')} q) | recall@10, categories 1-4 "
             "| cold build of the LoCoMo file |",
             "|---|---:|---:|---:|---:|---:|"]
    names = list(dps) + [n for n in r.get("recall@10", {}) if n not in dps]
    for name in names:
        v = dps.get(name)
        rec = r.get("recall@10", {}).get(name)
        rec4 = r.get("recall@10_cat1-4", {}).get(name)
        build = r.get("cold_build_locomo_s", {}).get(name)
        lines.append(f"| {name} | {'' if v is None else f'{v:.1f}'} | {'' if v is None else f'{v / torch_dps:.2f}x'} | "
                     f"{'' if rec is None else f'{rec:.2f}'} | {'' if rec4 is None else f'{rec4:.2f}'} | "
                     f"{'' if build is None else f'{build:.1f} s'} |")
    raw = r["raw_turns_torch"]
    cold = r["cold_build_conv_s"]
    reference = raw["load_s"] + raw["encode_s"]
    dense = f"dense {r['dense']['document']}+{r['dense']['context']}"
    shipped = cold.get("default, shipped dense option")
    lines += ["", f"- {conv} cold model-free build + 1 question ({dense}): {cold['default']:.1f} s default "
                  f"embedder ({cold['default'] / reference:.2f}x the reference), {cold['torch-cpu']:.1f} s torch"
                  + ("" if shipped is None else f"; shipped dense option {r['shipped_dense']['document']}+"
                     f"{r['shipped_dense']['context']}: {shipped:.1f} s ({shipped / reference:.2f}x)")
                  + f"; {FAST}: {cold[FAST]:.1f} s ({cold[FAST] / reference:.2f}x)"
                  + f"; reference, plain sentence-transformers on torch embedding its raw turns once: "
                  f"{reference:.1f} s ({raw['load_s']:.1f} s load + {raw['encode_s']:.1f} s encode)",
              f"- synthetic LongMemEval-S-like file (20 questions, {r['lme_turns']['questions']} turns; "
              f"{r['lme_turns']['unique']} unique): {r['lme_questions_s']:.1f} s vs. unique sessions alone "
              f"{r['lme_unique_s']:.1f} s ({r['lme_questions_s'] / r['lme_unique_s']:.2f}x)",
              f"- one appended turn searchable: p50 {r['add_ms']['p50']:.0f} ms, p95 {r['add_ms']['p95']:.0f} ms",
              f"- first load (model load; the ONNX export when not cached yet): "
              + ", ".join(f"{k} {v:.1f} s" for k, v in r["first_load_s"].items())]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
