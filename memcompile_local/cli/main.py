"""The ``memcompile-local`` command line (also ``python -m memcompile_local``).

The CLI parses arguments, calls the library and prints; it holds no pipeline logic.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Any, Sequence

from .. import __version__
from ..bench.compare import run_compare
from ..bench.export import export_from_args
from ..bench.runner import run_eval_from_args
from ..data import counts, load_any
from ..data.hf import is_hf_source, resolve_hf_source
from ..data.jsonio import DEFAULT_MAX_TURN_CHARS
from ..data.plain import GivenIds, load_plain_given_ids
from .demo import run_demo
from ..errors import ConfigError, DataFormatError, MemCompileError
from ..pipeline.presets import COMPOSITION_HELP, PRESETS, describe_preset
from ..memory import Memory
from ..store import check_store, describe_location, is_database_url, open_store
from .args import (
    add_model,
    add_quiet,
    add_store,
    config_from_args,
    positive_int,
    will_call_model,
)
from .report import add_report_command, cmd_report
from .service import SERVICE_COMMANDS, add_service_commands

FORMAT_HELP = ("input layout: auto (default: detect from the first record), locomo (locomo10.json), "
               "longmemeval (S, M or oracle file), plain (our own {'sessions': [...]} JSON or JSONL; "
               "see docs/data-formats.md)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memcompile-local",
        description="Long-term conversational memory by query-conditioned compilation (MemCompile) on local models.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="log more (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("ingest", help="read a dataset or memory file into a store")
    p.add_argument("path", help="LoCoMo, LongMemEval or plain JSON/JSONL file, or an hf: source as for eval "
                                "(hf:ORG/NAME[:FILE] or hf:/saved/dataset; needs --format locomo or longmemeval "
                                "unless the file says which)")
    p.add_argument("--format", default="auto", choices=["auto", "locomo", "longmemeval", "plain"], help=FORMAT_HELP)
    p.add_argument("--namespace", help="namespace for a plain file (default: from the file)")
    p.add_argument("--limit", type=int,
                   help="only the first N conversations (LoCoMo, plain) or questions (LongMemEval: one "
                        "namespace per question)")
    p.add_argument("--max-turn-chars", type=positive_int, default=None, metavar="N",
                   help="refuse a file holding a string longer than N characters (default: "
                        f"{DEFAULT_MAX_TURN_CHARS:,})")
    p.add_argument("--build", action="store_true", help="also build descriptors, Cells and embeddings")
    add_store(p); add_model(p); add_quiet(p)

    p = sub.add_parser("build", help="build descriptors, Cells and packet embeddings of namespaces")
    p.add_argument("namespaces", nargs="*", help="namespaces (default: all in the store)")
    add_store(p); add_model(p); add_quiet(p)

    p = sub.add_parser("ask", help="compile evidence for a question and answer it",
                       description="Compile the evidence for QUESTION from the memory of NAMESPACE and answer "
                                   "it. A namespace that is not built yet for this configuration is built "
                                   "first (said on stderr, with a progress bar) unless --no-build.")
    p.add_argument("namespace", help="namespace to ask (see `memcompile-local stats --store ...`)")
    p.add_argument("question", help="the question, quoted as one argument")
    p.add_argument("--no-answer", action="store_true", help="only compile and print the context")
    p.add_argument("--no-build", action="store_true",
                   help="fail at once when the namespace is not built, instead of building it first")
    p.add_argument("--json", action="store_true", help="print a JSON object instead of text")
    add_store(p); add_model(p); add_quiet(p)

    p = sub.add_parser("eval", help="run a benchmark end to end and write a run folder")
    p.add_argument("benchmark", choices=["locomo", "longmemeval", "realtalk", "beam"])
    p.add_argument("--data", required=True, nargs="+", metavar="PATH",
                   help="benchmark data: a file (locomo10.json; LongMemEval S, M or oracle), REALTALK chat "
                        "files or their folder, or a BEAM chat folder or size folder (100K/)")
    p.add_argument("--out", help="run folder (default: runs/<benchmark>-<preset>-<hash>)")
    p.add_argument("--limit", type=int,
                   help="only the first N questions of each conversation (LoCoMo) or the first N questions "
                        "(LongMemEval); every turn of each conversation used is still ingested and built")
    p.add_argument("--conversations", help="comma-separated LoCoMo sample ids (REALTALK, BEAM: namespaces, "
                                           "e.g. Chat_1_Emi_Elise or beam-100K-3)")
    p.add_argument("--max-turn-chars", type=positive_int, default=None, metavar="N",
                   help="accept strings up to N characters (default: "
                        f"{DEFAULT_MAX_TURN_CHARS:,}; a longer turn is refused naming the limit)")
    p.add_argument("--max-views", type=positive_int, default=None, metavar="N",
                   help="hold at most N memories' search structures at once (default 4, or one more than the "
                        "answer concurrency); the run builds and answers one conversation after another")
    p.add_argument("--strict", action="store_true",
                   help="refuse the whole data file when one question (or BEAM chat) cannot be read whole; "
                        "by default it is left out (or kept without evidence) and counted in the report")
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
    p.add_argument("--with-baseline", choices=["bm25", "dense"],
                   help="also select with this baseline for every question and report its recall beside the "
                        "pipeline's, per question type (one run, one command)")
    p.add_argument("--retain-budget", type=float, metavar="N",
                   help="budgeted pre-query retention: questions read only the capsules a writer kept within N "
                        "tokens per conversation (below 1: that share of its tokens)")
    p.add_argument("--writer", choices=["model-free", "llm", "recent", "random", "summary"],
                   help="retention writer for --retain-budget (default model-free)")
    add_store(p); add_model(p); add_quiet(p)

    p = sub.add_parser("compare", help="run a grid of backbones x presets from a YAML spec")
    p.add_argument("spec", help="YAML file with benchmark, data, backbones (name/backend/model...) and presets "
                                "(see examples/compare-grid.yaml)")
    p.add_argument("--out", help="output folder")
    p.add_argument("--limit", type=int, help="questions per conversation for every run (overrides the spec's limit)")
    p.add_argument("--dry-run", action="store_true",
                   help="list the runs, their judges and the memory builds they share; run nothing")
    add_quiet(p)

    p = sub.add_parser("export", help="write a run's predictions as a dataset file (one row per question)")
    p.add_argument("run_dir", help="an eval run folder (holding config.json and predictions.jsonl)")
    p.add_argument("--format", default="parquet", choices=["parquet", "jsonl"],
                   help="parquet (needs the hf extra: datasets) or jsonl (default: %(default)s)")
    p.add_argument("--out", help="output file (default: RUN_DIR/export.<format>; the run's own files are refused)")
    add_report_command(sub)

    p = sub.add_parser("forget", help="delete everything of a namespace from the store")
    p.add_argument("namespace")
    p.add_argument("--wait", type=float, default=5.0,
                   help="seconds to wait for other connections (default 5); exit code 3 when readers "
                        "kept the scrub of the file bytes from finishing (run `scrub` later)")
    add_store(p)

    p = sub.add_parser("scrub", help="finish removing forgotten data from the file bytes (after forget exit 3)")
    p.add_argument("--wait", type=float, default=5.0, help="seconds to wait for other connections (default 5)")
    add_store(p)

    p = sub.add_parser("check", help="check a store file for damage (integrity, foreign keys, packet hashes, "
                                     "decodable rows); exit 1 when anything is damaged")
    add_store(p)

    p = sub.add_parser("stats", help="namespaces, packets, descriptors, cells and tokens in a store")
    p.add_argument("--namespace", help="only this namespace (default: every namespace in the store)")
    p.add_argument("--json", action="store_true", help="print the full statistics as JSON instead of tables")
    add_store(p)

    p = sub.add_parser("copy", help="copy memories between stores (any two locations: SQLite files or "
                                    "database URLs), verified row by row and checked on both sides")
    p.add_argument("--from", dest="source", required=True, help="the store to read (it is only read)")
    p.add_argument("--to", dest="target", required=True,
                   help="the store to write (created if absent; a namespace it already has is refused)")
    p.add_argument("--namespace", action="append", default=None,
                   help="copy only this namespace (repeatable; default: every namespace of --from)")

    sub.add_parser("presets", help="list the named pipeline presets and how they compose",
                   description=COMPOSITION_HELP)
    add_service_commands(sub, add_store=add_store, add_model=add_model)

    p = sub.add_parser("demo", help="ingest the shipped example conversation, answer every example question "
                                    "and print the score")
    p.add_argument("--store", default=None, help="store file (default: a temporary file)")
    p.add_argument("--question", default=None, help="answer this question instead of the example questions")
    add_model(p); add_quiet(p)
    for name, command in sub.choices.items():
        # -v after the subcommand too; SUPPRESS keeps a -v given before it.
        if "verbose" not in {a.dest for a in command._actions}:
            command.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                                 help="log more (-vv for debug)")
    return parser


# What examples/smollm2-cpu.yaml and the demo use for SmolLM2-135M on a CPU. It rambles up to
# any completion limit, cannot extract usable claims and has an 8,192-token window.
def _memory(args, cfg=None, *, create: bool = True):
    if cfg is None:
        cfg = config_from_args(args, announce=will_call_model(args))
    store = open_store(args.store, create=create)
    return Memory(store, cfg, progress=not getattr(args, "quiet", False))


def _close(mem) -> None:
    mem.close()
    mem.store.close()  # _memory opened it, so it is ours to close


def _announce_build(mem, namespace: str) -> bool:
    """Say on stderr what a build of ``namespace`` will do; False when it is up to date."""
    if mem.is_built(namespace):
        return False
    print(f"build {mem.plan_build(namespace).describe()}", file=sys.stderr)
    return True


def cmd_ingest(args) -> int:
    kw: dict[str, Any] = {}
    if args.namespace is not None:  # an empty --namespace is refused by the loader, not ignored
        if args.format not in ("auto", "plain"):
            raise ConfigError(f"--namespace applies to plain memory files only, not --format {args.format}")
        kw["namespace"] = args.namespace
    if args.max_turn_chars is not None:
        kw["max_turn_chars"] = args.max_turn_chars
    if is_hf_source(args.path):
        # Resolved to a local JSON file first, as eval does (downloaded or exported into the cache).
        benchmark = args.format if args.format in ("locomo", "longmemeval") else None
        args.path = str(resolve_hf_source(args.path, benchmark=benchmark))
    convs = load_any(args.path, args.format, **kw)  # validates the whole file before anything is written
    if args.limit:
        convs = convs[: args.limit]
    c = counts(convs)
    print(f"read {args.path}: " + ", ".join(f"{k}={v}" for k, v in c.items()))
    given = _plain_given_ids(args, convs, kw)
    mem = _memory(args)
    try:
        if given is not None:
            # A plain memory file: ids it left out are stable across files and re-ingests.
            results = [mem.add(convs[0].namespace, convs[0], given_ids=given)]
        else:
            # One transaction for the whole file: a rejected conversation leaves nothing of the file.
            results = mem.store.ingest_many(convs)
        for conv, res in zip(convs, results):
            print(f"{conv.namespace}: {res.added} turns added, {res.skipped} already present")
            if args.build:
                _announce_build(mem, conv.namespace)
                b = mem.build(conv.namespace)
                print(f"{conv.namespace}: {b.descriptors} descriptors, {b.cells} cells, "
                      f"{b.extracted_now} turns extracted now, {b.embedded_now} embedded now")
    finally:
        _close(mem)
    return 0


def _plain_given_ids(args, convs, kw) -> GivenIds | None:
    """For a plain memory file, which ids the file wrote: the others get ids that stay stable
    across files and re-ingests (``Memory.add``). None for benchmark files, whose ids are theirs."""
    if args.format not in ("auto", "plain") or len(convs) != 1 or convs[0].questions:
        return None
    try:
        conv, given = load_plain_given_ids(args.path, **kw)
    except DataFormatError:
        return None  # not a plain file (a one-conversation benchmark file)
    return given if conv == convs[0] else None


def cmd_build(args) -> int:
    mem = _memory(args, create=False)
    try:
        known = mem.store.namespaces()
        names = args.namespaces or known
        missing = [ns for ns in names if ns not in known]
        if missing:
            raise ConfigError(f"{describe_location(args.store)} has no namespace {', '.join(map(repr, missing))}; "
                              f"it has: {', '.join(known) or 'none'}")
        for ns in names:
            _announce_build(mem, ns)
            b = mem.build(ns)
            print(f"{ns}: {b.packets} packets, {b.descriptors} descriptors, {b.cells} cells "
                  f"({b.extracted_now} extracted now, {b.embedded_now} embedded now)")
    finally:
        _close(mem)
    return 0


def cmd_ask(args) -> int:
    mem = _memory(args, create=False)
    try:
        if args.namespace not in mem.store.namespaces():
            raise ConfigError(f"{describe_location(args.store)} has no namespace {args.namespace!r}; "
                              f"it has: {', '.join(mem.store.namespaces()) or 'none'}")
        if not mem.is_built(args.namespace):
            if args.no_build:
                plan = mem.plan_build(args.namespace)
                raise ConfigError(
                    f"namespace {args.namespace!r} is not built for this configuration "
                    f"({plan.to_extract} of {plan.turns} turns not extracted yet); run "
                    f"`memcompile-local build {args.namespace} --store {describe_location(args.store)}` with the same "
                    "--preset/--config first, or drop --no-build")
            _announce_build(mem, args.namespace)
            mem.build(args.namespace)
        if args.no_answer:
            ctx = mem.compile(args.namespace, args.question, build=False)
            answer = None
        else:
            result = mem.answer(args.namespace, args.question, build=False)
            ctx, answer = result.context, result.text
        if args.json:
            print(json.dumps({"question": args.question, "packet_ids": list(ctx.packet_ids),
                              "context": ctx.text, "answer": answer,
                              "answer_model": None if answer is None else result.model,
                              "timings_ms": ctx.timings_ms}, ensure_ascii=False, indent=2))
        else:
            print(f"# selected packets: {', '.join(ctx.packet_ids)}")
            print(ctx.text)
            if answer is not None:
                print(f"\n# answer: {answer}")
    finally:
        _close(mem)
    return 0


def cmd_forget(args) -> int:
    with open_store(args.store, create=False, forget_wait_s=args.wait) as store:
        if args.namespace not in store.namespaces():
            raise ConfigError(f"{describe_location(args.store)} has no namespace {args.namespace!r}, so nothing was forgotten; "
                              f"it has: {', '.join(store.namespaces()) or 'none'}")
        deleted = store.forget(args.namespace)
    print(f"forgot {args.namespace}: " + ", ".join(f"{k}={v}" for k, v in deleted.items()))
    if not deleted.scrub_complete:
        print(f"scrub pending: the rows are deleted, but another connection kept old copies in "
              f"{describe_location(args.store)} busy; run `memcompile-local scrub --store {describe_location(args.store)}` later", file=sys.stderr)
        return 3
    return 0


def cmd_scrub(args) -> int:
    with open_store(args.store, create=False, forget_wait_s=args.wait) as store:
        done = store.scrub()
    if not done:
        print(f"scrub pending: another connection still holds old snapshots of {describe_location(args.store)}; retry later",
              file=sys.stderr)
        return 3
    if is_database_url(args.store):
        print(f"scrubbed {describe_location(args.store)}: every table of the store was rewritten (VACUUM FULL); "
              "the server's WAL, archives, backups and replicas are outside its reach (see the README)")
    else:
        print(f"scrubbed {describe_location(args.store)}: no copies of forgotten data remain")
    return 0


def cmd_check(args) -> int:
    report = check_store(args.store)
    for line in report.lines():
        print(line)
    return 0 if report.ok else 1


def cmd_copy(args) -> int:
    from tqdm.auto import tqdm

    from ..store.copy import copy_store

    with open_store(args.source, create=False, read_only=True) as src:
        names = args.namespace or src.namespaces()
        with open_store(args.target) as dst, tqdm(total=len(names), desc="copy", unit="namespace",
                                                 disable=len(names) < 2) as bar:
            def done(r) -> None:
                bar.update(1)
                tqdm.write(f"{r.namespace}: {r.packets} turns, {r.descriptors} descriptors in "
                           f"{r.descriptor_sets} sets, {r.cells} cells, {r.embeddings} vectors, {r.meta} meta, "
                           f"{r.capsules} capsules")

            reports = copy_store(src, dst, names, on_done=done)
    ok = True
    for where in (args.source, args.target):
        report = check_store(where)
        ok = ok and report.ok
        for line in report.lines():
            print(line)
    print(f"copied {len(reports)} namespaces, {sum(r.packets for r in reports)} turns; every row compared "
          f"equal{'' if ok else '; check found damage (above)'}")
    return 0 if ok else 1


def cmd_stats(args) -> int:
    with open_store(args.store, read_only=True) as store:
        if args.namespace is not None and args.namespace not in store.namespaces():
            raise ConfigError(f"{describe_location(args.store)} has no namespace {args.namespace!r}; "
                              f"it has: {', '.join(store.namespaces()) or 'none'}")
        stats = store.stats(args.namespace)
    if args.json:
        print(json.dumps(stats, indent=2, sort_keys=True))
    else:
        print(format_stats(stats))
    return 0


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """Left-aligned text columns, numbers right-aligned, two spaces apart."""
    cells = [[str(h) for h in headers]] + [[str(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    numeric = [all(isinstance(r[i], (int, float)) for r in rows) for i in range(len(headers))]
    out = []
    for r in cells:
        out.append("  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(r, widths, numeric)).rstrip())
    return out


def format_stats(stats: dict) -> str:
    """The ``stats`` report as text tables: the store, one row per namespace, then the
    per-descriptor-set, per-layout and per-embedding-model counts of each namespace."""
    lines = [f"store {stats['path']}: schema v{stats['schema_version']}, {stats['file_bytes']:,} bytes"]
    cache, waste = stats.get("cache", {}), stats.get("waste", {})
    if cache:
        tok = cache.get("tokens", {})
        lines.append(f"model cache: {cache.get('entries', 0)} responses, {tok.get('prompt', 0):,} prompt + "
                     f"{tok.get('completion', 0):,} completion tokens; wasted calls: {waste.get('calls', 0)}")
    for key in sorted(k for k in stats if k not in ("path", "schema_version", "file_bytes", "namespaces",
                                                      "cache", "waste")):
        lines.append(f"{key}: {stats[key]}")
    namespaces = stats.get("namespaces", {})
    if not namespaces:
        lines.append("no namespaces")
        return "\n".join(lines)
    rows = []
    for ns, n in namespaces.items():
        rows.append([ns, n.get("packets", 0), n.get("sessions", 0), sum(n.get("descriptors", {}).values()),
                     sum(n.get("cells", {}).values()), sum(n.get("embeddings", {}).values()),
                     n.get("cache_entries", 0), n.get("tokens", {}).get("prompt", 0) + n.get("tokens", {}).get("completion", 0)])
    lines.append("")
    lines += _table(["namespace", "turns", "sessions", "descriptors", "cells", "embeddings", "cached calls",
                     "tokens"], rows)
    detail = []
    for ns, n in namespaces.items():
        for what, per in (("descriptor set", n.get("descriptors", {})), ("layout", n.get("cells", {})),
                          ("embedding model", n.get("embeddings", {}))):
            for name, count in per.items():
                extra = n.get("extracted_packets", {}).get(name) if what == "descriptor set" else None
                detail.append([ns, what, name, count, "" if extra is None else f"{extra} turns extracted"])
    if detail:
        lines.append("")
        lines += _table(["namespace", "kind", "name", "rows", ""], detail)
    return "\n".join(lines)


def cmd_presets(args) -> int:
    for name in PRESETS:
        print(f"{name:24s} {describe_preset(name)}")
    print()
    print(COMPOSITION_HELP)
    return 0


def cmd_eval(args) -> int:
    return run_eval_from_args(args, config_from_args(args, announce=will_call_model(args)))


def cmd_compare(args) -> int:
    run_compare(args.spec, out=args.out, progress=not args.quiet, dry_run=args.dry_run, limit=args.limit)
    return 0


def cmd_export(args) -> int:
    return export_from_args(args)


def cmd_demo(args) -> int:
    return run_demo(args, config_from_args(args))


COMMANDS = {
    "ingest": cmd_ingest, "build": cmd_build, "ask": cmd_ask, "eval": cmd_eval, "compare": cmd_compare, "export": cmd_export,
    "forget": cmd_forget, "scrub": cmd_scrub, "check": cmd_check, "copy": cmd_copy, "stats": cmd_stats, "presets": cmd_presets, "demo": cmd_demo,
    "report": cmd_report, **SERVICE_COMMANDS,
}


def _quiet_libraries() -> None:
    """Switch off the progress bars of the libraries we load lazily (tqdm reads TQDM_* when it
    is imported, the HF libraries their own variables), before any of them is imported."""
    for name in ("TQDM_DISABLE", "HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS"):
        os.environ.setdefault(name, "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "quiet", False):
        _quiet_libraries()
    if isinstance(getattr(args, "preset", None), list):
        # Repeated --preset flags compose like one "a+b" name (the run folder names it so too).
        args.preset = "+".join(args.preset)
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
