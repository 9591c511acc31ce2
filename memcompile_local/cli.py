"""The ``memcompile-local`` command line (also ``python -m memcompile_local``).

The CLI parses arguments, calls the library and prints; it holds no pipeline logic.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from . import __version__
from .errors import ConfigError, MemCompileError
from .service.cli import SERVICE_COMMANDS, add_service_commands

DEFAULT_STORE = "memcompile.sqlite"


def _add_store(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--store",
        default=os.environ.get("MEMCOMPILE_STORE", DEFAULT_STORE),
        help="SQLite store file (default: $MEMCOMPILE_STORE or ./%(default)s)",
    )


def _add_model(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("pipeline and models")
    g.add_argument("--config", help="YAML file with a PipelineConfig (sections: extraction, placement, routing, evidence, model)")
    g.add_argument("--preset", help="named pipeline path (A0..A7, model-free, view-*, layout-*); see `memcompile-local presets`")
    g.add_argument("--backend", help="LLM backend: llamacpp (default), openai, vllm, transformers, scripted")
    g.add_argument("--model", help="model name or path for the LLM backend")
    g.add_argument("--base-url", help="base URL of an OpenAI-compatible server")
    g.add_argument("--concurrency", type=int, help="concurrent requests to an OpenAI-compatible server")
    g.add_argument("--embedder", help="embedder: sentence-transformers (default), openai, hash")
    g.add_argument("--embed-model", help="embedding model name or path")
    g.add_argument("--extractor", choices=["llm", "rule"], help="descriptor extractor (rule = no model calls)")
    g.add_argument("--combined-extraction", action="store_true", default=None,
                   help="extract facts and metadata in one call per turn")


def _add_quiet(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memcompile-local",
        description="Long-term conversational memory by query-conditioned compilation (MemCompile) on local models.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="log more (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("ingest", help="read a dataset or memory file into a store")
    p.add_argument("path", help="LoCoMo, LongMemEval or plain JSON/JSONL file")
    p.add_argument("--format", default="auto", choices=["auto", "locomo", "longmemeval", "plain"])
    p.add_argument("--namespace", help="namespace for a plain file (default: from the file)")
    p.add_argument("--limit", type=int, help="only the first N conversations/questions")
    p.add_argument("--build", action="store_true", help="also build descriptors, Cells and embeddings")
    _add_store(p); _add_model(p); _add_quiet(p)

    p = sub.add_parser("build", help="build descriptors, Cells and packet embeddings of namespaces")
    p.add_argument("namespaces", nargs="*", help="namespaces (default: all in the store)")
    _add_store(p); _add_model(p); _add_quiet(p)

    p = sub.add_parser("ask", help="compile evidence for a question and answer it")
    p.add_argument("namespace")
    p.add_argument("question")
    p.add_argument("--no-answer", action="store_true", help="only compile and print the context")
    p.add_argument("--json", action="store_true", help="print a JSON object instead of text")
    _add_store(p); _add_model(p); _add_quiet(p)

    p = sub.add_parser("eval", help="run a benchmark end to end and write a run folder")
    p.add_argument("benchmark", choices=["locomo", "longmemeval"])
    p.add_argument("--data", required=True, help="benchmark file (locomo10.json; LongMemEval S, M or oracle)")
    p.add_argument("--out", help="run folder (default: runs/<benchmark>-<preset>-<hash>)")
    p.add_argument("--limit", type=int, help="only the first N questions (per conversation for LoCoMo)")
    p.add_argument("--conversations", help="comma-separated LoCoMo sample ids")
    g = p.add_argument_group("judge (a model of its own; the config's judge: section sets the same)")
    g.add_argument("--judge-backend", help="backend of the judge (default: the answer backend)")
    g.add_argument("--judge-model", help="judge model name or path (default: the answer model)")
    g.add_argument("--judge-base-url", help="base URL of the judge's OpenAI-compatible server (never inherited "
                                            "from --base-url)")
    g.add_argument("--judge-api-key-env", help="environment variable holding the judge's API key "
                                               "(default OPENAI_API_KEY)")
    g.add_argument("--allow-self-judge", action="store_true",
                   help="let the answer model judge its own answers (refused otherwise; the report says so)")
    g.add_argument("--no-judge", action="store_true", help="skip the LLM judge")
    p.add_argument("--retrieval-only", action="store_true",
                   help="measure evidence recall only: no answer, no judge (zero model calls on the model-free path)")
    p.add_argument("--baseline", choices=["full-context", "bm25", "dense"],
                   help="run a baseline with the same answer prompt instead of the pipeline")
    _add_store(p); _add_model(p); _add_quiet(p)

    p = sub.add_parser("compare", help="run a grid of backbones x presets from a YAML spec")
    p.add_argument("spec")
    p.add_argument("--out", help="output folder")
    p.add_argument("--dry-run", action="store_true",
                   help="list the runs, their judges and the memory builds they share; run nothing")
    _add_quiet(p)

    p = sub.add_parser("export", help="write a run's predictions as a dataset file (one row per question)")
    p.add_argument("run_dir", help="an eval run folder (holding config.json and predictions.jsonl)")
    p.add_argument("--format", default="parquet", choices=["parquet", "jsonl"],
                   help="parquet (needs the hf extra: datasets) or jsonl (default: %(default)s)")
    p.add_argument("--out", help="output file (default: RUN_DIR/predictions.<format>)")

    p = sub.add_parser("forget", help="delete everything of a namespace from the store")
    p.add_argument("namespace")
    p.add_argument("--wait", type=float, default=5.0,
                   help="seconds to wait for other connections (default 5); exit code 3 when readers "
                        "kept the scrub of the file bytes from finishing (run `scrub` later)")
    _add_store(p)

    p = sub.add_parser("scrub", help="finish removing forgotten data from the file bytes (after forget exit 3)")
    p.add_argument("--wait", type=float, default=5.0, help="seconds to wait for other connections (default 5)")
    _add_store(p)

    p = sub.add_parser("check", help="check a store file for damage (integrity, foreign keys, packet hashes, "
                                     "decodable rows); exit 1 when anything is damaged")
    _add_store(p)

    p = sub.add_parser("stats", help="namespaces, packets, descriptors, cells and tokens in a store")
    p.add_argument("--namespace")
    p.add_argument("--json", action="store_true")
    _add_store(p)

    sub.add_parser("presets", help="list the named pipeline presets")
    add_service_commands(sub, add_store=_add_store, add_model=_add_model)

    p = sub.add_parser("demo", help="ingest the shipped example conversation and answer a question")
    p.add_argument("--store", default=None, help="store file (default: a temporary file)")
    p.add_argument("--question", default=None)
    _add_model(p); _add_quiet(p)
    return parser


def config_from_args(args: argparse.Namespace):
    """PipelineConfig from --config, then --preset, then individual flags (later wins)."""
    from .config import PipelineConfig

    cfg = PipelineConfig()
    if getattr(args, "config", None):
        import yaml

        with open(args.config, encoding="utf-8") as fh:
            data = yaml.safe_load(fh) or {}
        cfg = PipelineConfig.from_dict(data.get("pipeline", data))
    if getattr(args, "preset", None):
        from .evidence.presets import apply_preset

        cfg = apply_preset(args.preset, cfg)
    model: dict[str, Any] = {}
    for flag, field in [("backend", "backend"), ("model", "model"), ("base_url", "base_url"),
                        ("concurrency", "concurrency"), ("embedder", "embedder"), ("embed_model", "embed_model")]:
        value = getattr(args, flag, None)
        if value is not None:
            model[field] = value
    extraction: dict[str, Any] = {}
    if getattr(args, "extractor", None):
        extraction["extractor"] = args.extractor
    if getattr(args, "combined_extraction", None):
        extraction["combined_call"] = True
    changes = {}
    if model:
        changes["model"] = model
    if extraction:
        changes["extraction"] = extraction
    return cfg.replace(**changes) if changes else cfg


def _memory(args, cfg=None):
    from .memory import Memory

    return Memory(args.store, cfg if cfg is not None else config_from_args(args), progress=not getattr(args, "quiet", False))


def cmd_ingest(args) -> int:
    from .data import counts, load_any

    kw: dict[str, Any] = {}
    if args.namespace:
        if args.format not in ("auto", "plain"):
            raise ConfigError(f"--namespace applies to plain memory files only, not --format {args.format}")
        kw["namespace"] = args.namespace
    convs = load_any(args.path, args.format, **kw)  # validates the whole file before anything is written
    if args.limit:
        convs = convs[: args.limit]
    c = counts(convs)
    print(f"read {args.path}: " + ", ".join(f"{k}={v}" for k, v in c.items()))
    mem = _memory(args)
    try:
        for conv in convs:
            res = mem.add(conv.namespace, conv)
            print(f"{conv.namespace}: {res.added} turns added, {res.skipped} already present")
            if args.build:
                b = mem.build(conv.namespace)
                print(f"{conv.namespace}: {b.descriptors} descriptors, {b.cells} cells, "
                      f"{b.extracted_now} turns extracted now, {b.embedded_now} embedded now")
    finally:
        mem.close()
    return 0


def cmd_build(args) -> int:
    mem = _memory(args)
    try:
        names = args.namespaces or mem.store.namespaces()
        for ns in names:
            b = mem.build(ns)
            print(f"{ns}: {b.packets} packets, {b.descriptors} descriptors, {b.cells} cells "
                  f"({b.extracted_now} extracted now, {b.embedded_now} embedded now)")
    finally:
        mem.close()
    return 0


def cmd_ask(args) -> int:
    mem = _memory(args)
    try:
        if args.no_answer:
            ctx = mem.compile(args.namespace, args.question)
            answer = None
        else:
            result = mem.answer(args.namespace, args.question)
            ctx, answer = result.context, result.text
        if args.json:
            print(json.dumps({"question": args.question, "packet_ids": list(ctx.packet_ids),
                              "context": ctx.text, "answer": answer,
                              "timings_ms": ctx.timings_ms}, ensure_ascii=False, indent=2))
        else:
            print(f"# selected packets: {', '.join(ctx.packet_ids)}")
            print(ctx.text)
            if answer is not None:
                print(f"\n# answer: {answer}")
    finally:
        mem.close()
    return 0


def cmd_forget(args) -> int:
    from .store import MemoryStore

    with MemoryStore(args.store, create=False, forget_wait_s=args.wait) as store:
        deleted = store.forget(args.namespace)
    print(f"forgot {args.namespace}: " + ", ".join(f"{k}={v}" for k, v in deleted.items()))
    if not deleted.scrub_complete:
        print(f"scrub pending: the rows are deleted, but another connection kept old copies in "
              f"{args.store} busy; run `memcompile-local scrub --store {args.store}` later", file=sys.stderr)
        return 3
    return 0


def cmd_scrub(args) -> int:
    from .store import MemoryStore

    with MemoryStore(args.store, create=False, forget_wait_s=args.wait) as store:
        done = store.scrub()
    if not done:
        print(f"scrub pending: another connection still holds old snapshots of {args.store}; retry later",
              file=sys.stderr)
        return 3
    print(f"scrubbed {args.store}: no copies of forgotten data remain")
    return 0


def cmd_check(args) -> int:
    from .store.check import check_store

    report = check_store(args.store)
    for line in report.lines():
        print(line)
    return 0 if report.ok else 1


def cmd_stats(args) -> int:
    from .store import MemoryStore

    if not Path(args.store).exists():
        print(f"no store at {args.store}", file=sys.stderr)
        return 2
    with MemoryStore(args.store) as store:
        stats = store.stats(args.namespace)
    if args.json:
        print(json.dumps(stats, indent=2, sort_keys=True))
    else:
        _print_stats(stats)
    return 0


def _print_stats(stats: dict) -> None:
    for key, value in stats.items():
        if isinstance(value, dict):
            print(f"{key}:")
            for k2, v2 in value.items():
                print(f"  {k2}: {v2}")
        else:
            print(f"{key}: {value}")


def cmd_presets(args) -> int:
    from .evidence.presets import PRESETS, describe_preset

    for name in PRESETS:
        print(f"{name:24s} {describe_preset(name)}")
    return 0


def cmd_eval(args) -> int:
    from .bench.runner import run_eval_from_args

    return run_eval_from_args(args, config_from_args(args))


def cmd_compare(args) -> int:
    from .bench.compare import run_compare

    run_compare(args.spec, out=args.out, progress=not args.quiet, dry_run=args.dry_run)
    return 0


def cmd_export(args) -> int:
    from .bench.export import export_from_args

    return export_from_args(args)


def cmd_demo(args) -> int:
    from .demo import run_demo

    return run_demo(args, config_from_args(args))


COMMANDS = {
    "ingest": cmd_ingest, "build": cmd_build, "ask": cmd_ask, "eval": cmd_eval, "compare": cmd_compare, "export": cmd_export,
    "forget": cmd_forget, "scrub": cmd_scrub, "check": cmd_check, "stats": cmd_stats, "presets": cmd_presets, "demo": cmd_demo,
    **SERVICE_COMMANDS,
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    # bm25s sets its logger to DEBUG when it is imported; filter on our handlers instead.
    for handler in logging.getLogger().handlers:
        handler.addFilter(lambda record: record.levelno >= level)
    if not args.command:
        parser.print_help()
        return 2
    try:
        return COMMANDS[args.command](args)
    except MemCompileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; rerun the same command to continue where it stopped", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
