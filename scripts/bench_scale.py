#!/usr/bin/env python
"""Cost of the model-free path against history length, from the development data.

Two long histories are made from ``../shared/data``:

* **BEAM**: the ten 100K chats concatenated, batch after batch, into one history of 2,432
  user and assistant turns (long replies: median above 2,000 characters);
* **LoCoMo**: dev4's four conversations repeated (turn and session ids prefixed per copy)
  to 10,000 short turns.

Each point (a corpus and a length: the first N turns of its history, whole sessions) runs in a
child process of its own, so that its peak RSS (``resource.getrusage``, ``ru_maxrss``) is
that point's alone: a cold model-free build into a fresh store (zero model calls; the
shipped MiniLM through ONNX, the package default), then ``--queries`` questions of the corpus
through ``Memory.compile`` (question embedding included; one warm-up question first), and
their p50/p95. A second child per point embeds the same raw turns once with plain
sentence-transformers (torch CPU, batch 64, model load included), the reference the build
is compared with. Prints a markdown table; ``--out`` also writes JSON.

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/bench_scale.py --out /tmp/bench_scale.json
    .venv/bin/python scripts/bench_scale.py --points beam:600,2432 locomo:2500,10000 --queries 40

Figures depend on the machine's load (give the load average beside them); compare the
build with its reference measured in the same run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from memcompile_local.bench.coverage import nearest_rank_percentile  # noqa: E402
from memcompile_local.types import Conversation, Session  # noqa: E402

DATA = {"beam": "../shared/data/beam/100K", "locomo": "../shared/data/locomo/locomo_dev4.json"}
DEFAULT_POINTS = ("beam:600,1200,2432", "locomo:2500,5000,10000")
LOCOMO_SCORED = (1, 2, 3, 4)


def history(corpus: str, data: str, target: int) -> tuple[Conversation, list[str]]:
    """The first ``target`` turns (whole sessions, at least one) of the corpus's long history,
    and the questions to time on it (those of the conversations it includes, in order)."""
    replace = dataclasses.replace
    if corpus == "beam":
        from memcompile_local.data import load_beam

        convs, copies = load_beam(data, max_turn_chars=None), 1
    elif corpus == "locomo":
        from memcompile_local.data import load_locomo

        convs = load_locomo(data)
        per_copy = sum(len(s.turns) for c in convs for s in c.sessions)
        copies = -(-target // per_copy)
    else:
        raise ValueError(f"unknown corpus {corpus!r}; expected beam or locomo")
    sessions: list[Session] = []
    questions: list[str] = []
    n = 0
    for copy in range(copies):
        for ci, conv in enumerate(convs):
            if n >= target:
                break
            questions += [q.question for q in conv.questions
                          if corpus != "locomo" or q.category in LOCOMO_SCORED
                          if corpus != "beam" or not q.is_abstention]
            for s in conv.sessions:
                if n >= target:
                    break
                tag = f"r{copy}c{ci}"
                turns = tuple(replace(t, packet_id=f"{tag}-{t.packet_id}") for t in s.turns)
                sessions.append(replace(s, index=len(sessions) + 1, session_id=f"{tag}-{s.session_id}", turns=turns))
                n += len(turns)
    conv = Conversation(namespace=f"scale-{corpus}-{n}", sessions=tuple(sessions), speakers=convs[0].speakers)
    return conv, list(dict.fromkeys(questions))


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def child_build(corpus: str, data: str, target: int, queries: int, changes: list[str]) -> dict:
    """One point: cold model-free build, then the timed questions (run in a child process);
    ``changes``: ``--set`` pairs on top of the ``model-free`` preset."""
    from memcompile_local.config import PipelineConfig
    from memcompile_local.pipeline.presets import apply_preset
    from memcompile_local.llm.client import LLMClient, NoModelBackend
    from memcompile_local.memory import Memory
    from memcompile_local.store import MemoryStore

    conv, questions = history(corpus, data, target)
    turns = sum(len(s.turns) for s in conv.sessions)
    chars = sum(len(t.text) for s in conv.sessions for t in s.turns)
    rss_loaded = _rss_mb()
    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore(Path(tmp) / "scale.sqlite")
        cfg = apply_preset("model-free", PipelineConfig())
        if changes:
            from dev_corpora import config_changes  # scripts/ is on sys.path when this file runs

            cfg = cfg.replace(**config_changes(changes))
        mem = Memory(store, cfg, client=LLMClient(NoModelBackend(), store))
        t0 = time.perf_counter()
        mem.add(conv.namespace, conv)
        mem.build(conv.namespace)
        view = mem.view(conv.namespace)  # the indexes a question reads, loaded once
        build_s = time.perf_counter() - t0
        rss_build = _rss_mb()
        descriptors = sum(len(v) for v in view.descriptors_by_packet.values())
        qs = questions[: queries + 1]
        mem.compile(conv.namespace, qs[0])  # warm-up
        times = []
        for q in qs[1:]:
            t1 = time.perf_counter()
            mem.compile(conv.namespace, q)
            times.append((time.perf_counter() - t1) * 1000)
        store.close()
    return {"corpus": corpus, "turns": turns, "chars": chars, "build_s": build_s, "descriptors": descriptors,
            "rss_before_build_mb": rss_loaded, "peak_rss_mb": max(rss_build, _rss_mb()),
            "query_ms": {"n": len(times), "p50": nearest_rank_percentile(times, 50),
                         "p95": nearest_rank_percentile(times, 95)}}


def child_reference(corpus: str, data: str, target: int) -> dict:
    """Plain sentence-transformers (torch CPU) embedding the raw turns once, model load included."""
    from sentence_transformers import SentenceTransformer

    from memcompile_local.adapters.models import minilm_path

    conv, _ = history(corpus, data, target)
    texts = [t.text + (f" [image: {t.image_caption}]" if t.image_caption else "") for s in conv.sessions
             for t in s.turns]
    t0 = time.perf_counter()
    model = SentenceTransformer(str(minilm_path()), device="cpu")
    load_s = time.perf_counter() - t0
    model.encode(texts, batch_size=64, normalize_embeddings=True, show_progress_bar=False)
    total_s = time.perf_counter() - t0
    return {"turns": len(texts), "reference_s": total_s, "reference_load_s": load_s,
            "reference_peak_rss_mb": _rss_mb()}


def run_child(kind: str, corpus: str, data: str, target: int, queries: int, changes: list[str]) -> dict:
    cmd = [sys.executable, __file__, "--child", kind, corpus, data, str(target), str(queries),
           *(x for kv in changes for x in ("--set", kv))]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"point {kind} {corpus} {target} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def parse_points(specs) -> list[tuple[str, int]]:
    out = []
    for spec in specs:
        corpus, _, lengths = spec.partition(":")
        out += [(corpus, int(n)) for n in lengths.split(",") if n]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", nargs="+", default=list(DEFAULT_POINTS),
                    help="CORPUS:N,N,... (corpora: beam, locomo; N: history length in turns)")
    ap.add_argument("--beam", default=DATA["beam"], help="BEAM size folder")
    ap.add_argument("--locomo", default=DATA["locomo"], help="LoCoMo file to repeat")
    ap.add_argument("--queries", type=int, default=40, help="timed questions per point")
    ap.add_argument("--no-reference", action="store_true", help="skip the sentence-transformers reference")
    ap.add_argument("--out", default=None, help="also write the figures as JSON")
    ap.add_argument("--table", nargs="+", default=None, metavar="FILE",
                    help="only print the table of points measured before: JSON files written by --out, or "
                         "the JSON lines this script prints on stderr, one point per line")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=N",
                    help="a config field of every build, e.g. extraction.max_rule_claims=12 or "
                         "ranker_model=/path/to/model.json")
    ap.add_argument("--child", nargs=5, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.table:
        print_table(read_points(args.table))
        return 0
    if args.child:
        kind, corpus, data, target, queries = args.child
        result = (child_build(corpus, data, int(target), int(queries), args.set) if kind == "build"
                  else child_reference(corpus, data, int(target)))
        print(json.dumps(result))
        return 0

    data = {"beam": args.beam, "locomo": args.locomo}
    rows = []
    for corpus, target in parse_points(args.points):
        load = os.getloadavg()[0]
        row = run_child("build", corpus, data[corpus], target, args.queries, args.set)
        if not args.no_reference:
            row.update(run_child("reference", corpus, data[corpus], target, 0, []))
        row["config_changes"] = args.set
        row["load_avg_1m"] = load
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    print_table(rows)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1), encoding="utf-8")
        print(f"\nwrote {args.out}")
    return 0


def read_points(files) -> list[dict]:
    """Points from --out files (a JSON list) or stderr logs (one JSON object per line)."""
    rows = []
    for f in files:
        text = Path(f).read_text(encoding="utf-8").strip()
        if text.startswith("["):
            rows += json.loads(text)
            continue
        rows += [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    return rows


def _mb(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}"


def print_table(rows: list[dict]) -> None:
    cores = len(os.sched_getaffinity(0))
    print(f"\nmodel-free path against history length ({cores} cores; load average at each point's start "
          "in the last column; every point a cold build in a child process of its own)\n")
    print("| history | turns | characters | rule claims per turn | build s | reference s (ST raw turns once) | build / reference | "
          "peak RSS MB | reference peak RSS MB | query p50 ms | query p95 ms | questions | load |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in sorted(rows, key=lambda r: (r["corpus"], r["turns"], r.get("config_changes", []))):
        ref = r.get("reference_s")
        ratio = f"{r['build_s'] / ref:.1f}x" if ref else "n/a"
        label = r["corpus"] + "".join(f", {kv}" for kv in r.get("config_changes", []))
        print(f"| {label} | {r['turns']:,} | {r['chars']:,} | {r['descriptors'] / r['turns']:.1f} | "
              f"{r['build_s']:.1f} | "
              f"{'n/a' if ref is None else f'{ref:.1f}'} | {ratio} | {r['peak_rss_mb']:.0f} | "
              f"{_mb(r.get('reference_peak_rss_mb'))} | {r['query_ms']['p50']:.1f} | {r['query_ms']['p95']:.1f} | "
              f"{r['query_ms']['n']} | {r['load_avg_1m']:.1f} |")


if __name__ == "__main__":
    sys.exit(main())
