#!/usr/bin/env python
"""Cost of the model-free path against history length: build, memory, search, and a history
that another process appended to.

Histories are made from the development data in ``../shared/data``:

* **beam**: the ten BEAM 100K chats concatenated, batch after batch (2,432 user and assistant
  turns, long replies: median above 2,000 characters). Past 2,432 turns the ten chats are
  repeated, each copy's turns tagged ``[copy N]`` at their start and their ids prefixed, so
  that no text of one copy equals one of another: nothing is shared through the
  content-addressed vectors, claims or stemmed documents, and every turn costs what a new one
  costs;
* **locomo**: dev4's four conversations repeated to N short turns (ids prefixed per copy, texts
  repeated as they are, so repeats share their vectors and claims).

Each point (a corpus and a length: the first N turns of its history, whole sessions) runs three
child processes, so that each one's peak RSS (``ru_maxrss``) is its own:

1. **build**: a cold model-free build into a fresh store (zero model calls; the shipped MiniLM
   through ONNX, the package default), ``Memory.add`` + ``build`` + ``view``: build seconds and
   peak RSS;
2. **serve**: a new process opens that store as a server or agent would. ``load s`` is its first
   ``Memory.view`` (the whole namespace read); ``first search`` is the first question after it
   (question embedding included, everything that question builds on first use); then
   ``--queries`` questions of the corpus, p50/p95. ``append`` is this process adding one turn
   (in place, its view current), p50 over ``--appends``. Then a second process (a writer holding
   its own view, as a second server replica would) appends one turn at a time, ``--rounds``
   times, and after each this process asks a question: ``after another's append`` is that
   search (catching up with the store included), median and max; ``append after another's`` is
   this process's own append right after one of the writer's (it catches up first). Last, the
   writer stores a turn without building it (a CLI ``ingest``), and ``after an unbuilt append``
   is the search that builds it here and catches up;
3. **reference**: plain sentence-transformers (torch CPU, batch 64, model load included)
   embedding the same raw turns once, the baseline the build is compared with.

With ``--postgres`` the serve child runs a second time on PostgreSQL: a throwaway server from
the installed binaries (``tests/_postgres.py``, fsync on), the built namespace copied into it
(``store.copy``), reader and writer on that database; its figures carry a ``pg_`` prefix and
print as a second table.

Prints a markdown table; ``--out`` also writes JSON.

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/bench_scale.py --points beam:2432 --out /tmp/scale.json
    .venv/bin/python scripts/bench_scale.py --points beam:2432,20000 --queries 40 --rounds 5

Figures depend on the machine's load: each row gives the 1-minute load average at the start of
its point; compare a build with the reference measured in the same row.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from memcompile_local.bench.coverage import nearest_rank_percentile  # noqa: E402
from memcompile_local.types import Conversation, Session  # noqa: E402

DATA = {"beam": "../shared/data/beam/100K", "locomo": "../shared/data/locomo/locomo_dev4.json"}
DEFAULT_POINTS = ("beam:2432,10000,20000",)
LOCOMO_SCORED = (1, 2, 3, 4)
STORE_FILE = "scale.sqlite"


def history(corpus: str, data: str, target: int) -> tuple[Conversation, list[str]]:
    """The first ``target`` turns (whole sessions, at least one) of the corpus's long history,
    and the questions to time on it (those of the conversations it includes, in order)."""
    replace = dataclasses.replace
    if corpus == "beam":
        from memcompile_local.data import load_beam

        convs = load_beam(data, max_turn_chars=None)
    elif corpus == "locomo":
        from memcompile_local.data import load_locomo

        convs = load_locomo(data)
    else:
        raise ValueError(f"unknown corpus {corpus!r}; expected beam or locomo")
    per_copy = sum(len(s.turns) for c in convs for s in c.sessions)
    copies = -(-target // per_copy)
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
                # A BEAM copy is made distinct (see the module doc); LoCoMo's repeats are not.
                mark = f"[copy {copy}] " if corpus == "beam" and copy else ""
                turns = tuple(replace(t, packet_id=f"{tag}-{t.packet_id}", text=mark + t.text) for t in s.turns)
                sessions.append(replace(s, index=len(sessions) + 1, session_id=f"{tag}-{s.session_id}", turns=turns))
                n += len(turns)
    conv = Conversation(namespace=f"scale-{corpus}-{n}", sessions=tuple(sessions), speakers=convs[0].speakers)
    return conv, list(dict.fromkeys(questions))


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _memory(store_path: str, changes: list[str]):
    from memcompile_local.config import PipelineConfig
    from memcompile_local.llm.client import LLMClient, NoModelBackend
    from memcompile_local.memory import Memory
    from memcompile_local.pipeline.presets import apply_preset
    from memcompile_local.store import open_store

    store = open_store(store_path)  # a file, or a postgresql:// URL
    cfg = apply_preset("model-free", PipelineConfig())
    if changes:
        from dev_corpora import config_changes  # scripts/ is on sys.path when this file runs

        cfg = cfg.replace(**config_changes(changes))
    return Memory(store, cfg, client=LLMClient(NoModelBackend(), store))


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000


def _percentiles(times: list[float]) -> dict:
    if not times:
        return {"n": 0, "p50": None, "p95": None, "max": None}
    return {"n": len(times), "p50": nearest_rank_percentile(times, 50), "p95": nearest_rank_percentile(times, 95),
            "max": max(times)}


def child_build(corpus: str, data: str, target: int, store_path: str, changes: list[str]) -> dict:
    """A cold model-free build into a fresh store at ``store_path`` (kept for the serve child)."""
    conv, _ = history(corpus, data, target)
    turns = sum(len(s.turns) for s in conv.sessions)
    chars = sum(len(t.text) for s in conv.sessions for t in s.turns)
    rss_loaded = _rss_mb()
    mem = _memory(store_path, changes)
    t0 = time.perf_counter()
    mem.add(conv.namespace, conv)
    mem.build(conv.namespace)
    view = mem.view(conv.namespace)  # the indexes a question reads, loaded once
    build_s = time.perf_counter() - t0
    descriptors = sum(len(v) for v in view.descriptors_by_packet.values())
    mem.store.close()
    return {"corpus": corpus, "namespace": conv.namespace, "turns": turns, "chars": chars, "build_s": build_s,
            "descriptors": descriptors, "rss_before_build_mb": rss_loaded, "peak_rss_mb": _rss_mb()}


class _Writer:
    """The other process of the serve child (``--child writer``)."""

    def __init__(self, store_path: str, namespace: str, changes: list[str], hold_view: bool):
        cmd = [sys.executable, __file__, "--child", "writer", namespace, store_path, "1" if hold_view else "0", "0",
               *(x for kv in changes for x in ("--set", kv))]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.ready = json.loads(self.proc.stdout.readline())

    def add(self, text: str, turn_id: str, in_place: bool) -> dict:
        self.proc.stdin.write(json.dumps({"text": text, "id": turn_id, "in_place": in_place}) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(600)


def _turn(text: str, turn_id: str) -> dict:
    return {"time": "2030-01-01 09:00", "id": "appended", "turns": [{"speaker": "user", "text": text, "id": turn_id}]}


def child_writer(namespace: str, store_path: str, hold_view: bool, changes: list[str]) -> int:
    """Append one turn per line of stdin (in place when it holds a view), answering each."""
    mem = _memory(store_path, changes)
    if hold_view:
        mem.view(namespace)
    print(json.dumps({"ready": True, "rss_mb": _rss_mb()}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        t0 = time.perf_counter()
        mem.add(namespace, _turn(cmd["text"], cmd["id"]), in_place=cmd["in_place"])
        in_place = mem._appender.in_place if mem._appender is not None else 0
        print(json.dumps({"add_ms": _ms(t0), "in_place": in_place}), flush=True)
    mem.store.close()
    return 0


TOPICS = ("the telescope", "the sourdough starter", "the bike lock", "my cousin's wedding", "the tax forms",
          "the garden hose", "the piano lesson", "the passport photo", "the broken kettle", "the train tickets")


def child_serve(corpus: str, data: str, target: int, store_path: str, queries: int, appends: int, rounds: int,
                changes: list[str]) -> dict:
    """A new process over the built store: load, searches, its own appends, and another
    process's appends (see the module doc)."""
    conv, questions = history(corpus, data, target)
    ns = conv.namespace
    del conv
    mem = _memory(store_path, changes)
    t0 = time.perf_counter()
    mem.view(ns)
    load_s = time.perf_counter() - t0
    qs = (questions * (1 + (queries + 1) // max(1, len(questions))))[: queries + 1]
    t0 = time.perf_counter()
    mem.compile(ns, qs[0])
    first_ms = _ms(t0)
    times = []
    for q in qs[1:]:
        t0 = time.perf_counter()
        mem.compile(ns, q)
        times.append(_ms(t0))
    own = []
    for i in range(appends):
        t0 = time.perf_counter()
        mem.add(ns, _turn(f"Note {i}: I left {TOPICS[i % len(TOPICS)]} at the office on day {i}.", f"own{i}"))
        own.append(_ms(t0))
    in_place_own = mem._appender.in_place if mem._appender is not None else 0
    writer = _Writer(store_path, ns, changes, hold_view=True)
    after, writer_add, append_after = [], [], []
    loads = mem.views.loader.loads
    for i in range(rounds):
        topic = TOPICS[i % len(TOPICS)]
        got = writer.add(f"Round {i}: I moved {topic} to the balcony this morning.", f"other{i}", True)
        writer_add.append(got["add_ms"])
        t0 = time.perf_counter()
        mem.compile(ns, f"Where did I move {topic}?")
        after.append(_ms(t0))
        # Our own append right after another of the writer's: it catches up first.
        writer.add(f"Round {i}: {topic} needs a new label.", f"other{i}b", True)
        t0 = time.perf_counter()
        mem.add(ns, _turn(f"Round {i}: I printed the label for {topic}.", f"own-after{i}"))
        append_after.append(_ms(t0))
    writer_in_place = got["in_place"] if rounds else 0
    caught_up, reloaded = mem.views.loader.catch_ups, mem.views.loader.loads - loads
    writer.close()
    # A turn stored and not built by the other process (a CLI ingest): built here, then caught up.
    unbuilt = []
    plain = _Writer(store_path, ns, changes, hold_view=False)
    for i in range(max(1, rounds // 2)):
        plain.add(f"Plain {i}: the spare key is under the blue pot.", f"plain{i}", False)
        t0 = time.perf_counter()
        mem.compile(ns, "Where is the spare key?")
        unbuilt.append(_ms(t0))
    plain.close()
    mem.store.close()
    return {"load_s": load_s, "first_search_ms": first_ms, "query_ms": _percentiles(times),
            "append_ms": _percentiles(own), "appends_in_place": in_place_own,
            "after_other_append_ms": _percentiles(after), "append_after_other_ms": _percentiles(append_after),
            "writer_append_ms": _percentiles(writer_add), "writer_in_place": writer_in_place,
            "after_unbuilt_append_ms": _percentiles(unbuilt), "catch_ups": caught_up, "reloads": reloaded,
            "serve_peak_rss_mb": _rss_mb()}


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


def run_child(*args: str, changes: list[str]) -> dict:
    cmd = [sys.executable, __file__, "--child", *args, *(x for kv in changes for x in ("--set", kv))]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"child {args[:3]} failed:\n{proc.stderr[-3000:]}")
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
    ap.add_argument("--appends", type=int, default=10, help="timed appends of the serving process per point")
    ap.add_argument("--rounds", type=int, default=6, help="appends by another process per point")
    ap.add_argument("--no-reference", action="store_true", help="skip the sentence-transformers reference")
    ap.add_argument("--postgres", action="store_true",
                    help="also run the serve child on a throwaway PostgreSQL server (tests/_postgres.py)")
    ap.add_argument("--keep", default=None, metavar="DIR",
                    help="keep each point's store in DIR (default: a temporary folder, deleted)")
    ap.add_argument("--out", default=None, help="also write the figures as JSON")
    ap.add_argument("--table", nargs="+", default=None, metavar="FILE",
                    help="only print the table of points measured before: JSON files written by --out, or "
                         "the JSON lines this script prints on stderr, one point per line")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=N",
                    help="a config field of every build, e.g. extraction.max_rule_claims=12")
    ap.add_argument("--child", nargs="+", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.table:
        print_table(read_points(args.table))
        return 0
    if args.child:
        kind, *rest = args.child
        if kind == "writer":
            return child_writer(rest[0], rest[1], rest[2] == "1", args.set)
        if kind == "build":
            result = child_build(rest[0], rest[1], int(rest[2]), rest[3], args.set)
        elif kind == "serve":
            result = child_serve(rest[0], rest[1], int(rest[2]), rest[3], int(rest[4]), int(rest[5]), int(rest[6]),
                                 args.set)
        else:
            result = child_reference(rest[0], rest[1], int(rest[2]))
        print(json.dumps(result))
        return 0

    data = {"beam": args.beam, "locomo": args.locomo}
    rows = []
    pg = _start_postgres() if args.postgres else None
    for corpus, target in parse_points(args.points):
        load = os.getloadavg()[0]
        folder = Path(args.keep) / f"{corpus}-{target}" if args.keep else Path(tempfile.mkdtemp(prefix="scale-"))
        folder.mkdir(parents=True, exist_ok=True)
        store = str(folder / STORE_FILE)
        for suffix in ("", "-wal", "-shm"):
            Path(store + suffix).unlink(missing_ok=True)
        try:
            row = run_child("build", corpus, data[corpus], str(target), store, changes=args.set)
            row.update(run_child("serve", corpus, data[corpus], str(target), store, str(args.queries),
                                 str(args.appends), str(args.rounds), changes=args.set))
            if pg is not None:
                url = _copied_to_postgres(pg, store, row["namespace"])
                got = run_child("serve", corpus, data[corpus], str(target), url, str(args.queries),
                                str(args.appends), str(args.rounds), changes=args.set)
                row.update({f"pg_{k}": v for k, v in got.items()})
                pg.drop_database(url)
        finally:
            if not args.keep:
                shutil.rmtree(folder, ignore_errors=True)
        if not args.no_reference:
            row.update(run_child("reference", corpus, data[corpus], str(target), changes=[]))
        row["config_changes"] = args.set
        row["load_avg_1m"] = load
        row["load_avg_1m_end"] = os.getloadavg()[0]
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    if pg is not None:
        pg.remove()
    print_table(rows)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1), encoding="utf-8")
        print(f"\nwrote {args.out}")
    return 0


def _start_postgres():
    """A throwaway PostgreSQL server (fsync on, as durable as SQLite's synchronous=FULL)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from _postgres import PostgresServer, find_bindir

    bindir = find_bindir()
    if bindir is None:
        raise SystemExit("--postgres: no PostgreSQL server binaries (initdb, pg_ctl) found")
    server = PostgresServer(bindir, durable=True).start()
    server.make_template()
    return server


def _copied_to_postgres(server, store_path: str, namespace: str) -> str:
    """A fresh database of ``server`` holding ``namespace`` copied from the store file."""
    from memcompile_local.store import MemoryStore, open_store
    from memcompile_local.store.copy import copy_namespace

    url = server.fresh_database()
    with MemoryStore(store_path, read_only=True) as src, open_store(url) as dst:
        copy_namespace(src, dst, namespace)
    return url


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


def _num(value: float | None, fmt: str = ".0f") -> str:
    return "n/a" if value is None else format(value, fmt)


def print_table(rows: list[dict]) -> None:
    cores = len(os.sched_getaffinity(0))
    print(f"\nmodel-free path against history length ({cores} cores; 1-minute load average at each point's start "
          "and end in the last column; build, serve and reference each in a child process of its own)\n")
    print("| history | turns | claims per turn | build s | reference s | build / reference | build peak RSS MB | "
          "load s | first search after a load ms | search p50 / p95 ms | first search after another's append "
          "ms (median / max) | after an unbuilt append ms | append p50 ms | append after another's p50 ms | "
          "serve peak RSS MB | load |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in sorted(rows, key=lambda r: (r["corpus"], r["turns"], r.get("config_changes", []))):
        ref = r.get("reference_s")
        ratio = f"{r['build_s'] / ref:.1f}x" if ref else "n/a"
        label = r["corpus"] + "".join(f", {kv}" for kv in r.get("config_changes", []))
        q, after = r["query_ms"], r["after_other_append_ms"]
        print(f"| {label} | {r['turns']:,} | {r['descriptors'] / r['turns']:.1f} | {r['build_s']:.1f} | "
              f"{_num(ref, '.1f')} | {ratio} | {r['peak_rss_mb']:.0f} | {r['load_s']:.1f} | "
              f"{r['first_search_ms']:.0f} | {_num(q['p50'], '.1f')} / {_num(q['p95'], '.1f')} | "
              f"{_num(after['p50'])} / {_num(after['max'])} | {_num(r['after_unbuilt_append_ms']['p50'])} | "
              f"{_num(r['append_ms']['p50'], '.1f')} | {_num(r['append_after_other_ms']['p50'], '.1f')} | "
              f"{r['serve_peak_rss_mb']:.0f} | {r['load_avg_1m']:.1f}-{r.get('load_avg_1m_end', r['load_avg_1m']):.1f} |")
    pg_rows = [r for r in rows if "pg_load_s" in r]
    if pg_rows:
        print("\nthe serve child on PostgreSQL (the same namespace copied into a throwaway server, fsync on)\n")
        print("| history | turns | load s | first search after a load ms | search p50 / p95 ms | first search after "
              "another's append ms (median / max) | after an unbuilt append ms | append p50 ms | append after "
              "another's p50 ms | serve peak RSS MB |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in sorted(pg_rows, key=lambda r: (r["corpus"], r["turns"])):
            q, after = r["pg_query_ms"], r["pg_after_other_append_ms"]
            print(f"| {r['corpus']} | {r['turns']:,} | {r['pg_load_s']:.1f} | {r['pg_first_search_ms']:.0f} | "
                  f"{_num(q['p50'], '.1f')} / {_num(q['p95'], '.1f')} | {_num(after['p50'])} / {_num(after['max'])} | "
                  f"{_num(r['pg_after_unbuilt_append_ms']['p50'])} | {_num(r['pg_append_ms']['p50'], '.1f')} | "
                  f"{_num(r['pg_append_after_other_ms']['p50'], '.1f')} | {r['pg_serve_peak_rss_mb']:.0f} |")


if __name__ == "__main__":
    sys.exit(main())
