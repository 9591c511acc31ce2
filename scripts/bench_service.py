"""Throughput and latency of the memory service over loopback HTTP (issue 11's figures).

Seeds a LoCoMo-sized memory (``--users`` users x ``--turns`` turns, split over two tenants that
use the same user ids) straight into a store file, starts ``memcompile-local serve`` on it in a
subprocess on 127.0.0.1, and runs N concurrent clients (``--clients 1,8,32``). Each client
alternates: append one turn, search for it at once (that pair is the "append -> searchable"
time), and search a random question. Printed per N: requests/s, p50/p95/p99 of search and
append, append->searchable p50/p95, errors, cross-tenant results, and searches that missed the
turn appended just before. Then the same searches in-process (``Memory.compile`` on the same
store) for the HTTP/in-process ratio. ``--workers N`` runs N server processes on the store; the
header line gives the load average, since the figures move with whatever else the machine runs.

    .venv/bin/python scripts/bench_service.py                  # hash embedder, 10 x 600 turns
    .venv/bin/python scripts/bench_service.py --embedder sentence-transformers
    .venv/bin/python scripts/bench_service.py --embedder sentence-transformers --query-batch-ms 0,2
    .venv/bin/python scripts/bench_service.py --store postgresql://me@localhost/bench --replicas 2

``--query-batch-ms 0,2`` runs the clients against one server per value (0: query embeddings
unbatched; 2: concurrent searches share an embedding call within 2 ms) and prints each row
with its value, then the p50 at N clients over the p50 at one client, per value.

``--replicas N`` starts N separate ``serve`` processes on their own ports over the store, each
user's requests going to one of them (a balancer routing by user); ``--store`` takes a file or a
``postgresql://`` URL (an empty database, or one this script seeded before).

The texts are generated here (templates over names, places and topics), not taken from a
benchmark. Figures depend on the machine: say how many cores it had.
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from memcompile_local.config import PipelineConfig  # noqa: E402
from memcompile_local.pipeline.presets import apply_preset  # noqa: E402
from memcompile_local.memory import Memory  # noqa: E402
from memcompile_local.service.auth import hash_key, namespace_for  # noqa: E402
from memcompile_local.store import describe_location, is_database_url  # noqa: E402

TENANTS = {"acme": "mcl_bench-key-acme-000000000", "globex": "mcl_bench-key-globex-11111111"}
NAMES = ["Mara", "Jon", "Priya", "Tomas", "Lena", "Kofi", "Ines", "Yuki", "Omar", "Sofia"]
PLACES = ["Lisbon", "the lake", "Kyoto", "the old market", "Nairobi", "the library", "Oslo", "the hills"]
THINGS = ["a red kayak", "sourdough starter", "a vintage camera", "tomato seedlings", "a chess set",
          "running shoes", "a ukulele", "watercolor paints", "a telescope", "a puppy"]
VERBS = ["bought", "found", "borrowed", "sold", "painted", "fixed", "lost", "gave away"]
FEEL = ["loved it", "was nervous", "felt proud", "laughed a lot", "want to go back", "regret nothing"]
QUESTIONS = ["What did {a} buy?", "Where did {a} go last month?", "What does {a} feel about {p}?",
             "When did {a} fix {t}?", "Who went to {p}?", "What did {a} lose?"]


def synth_sessions(rng: random.Random, user: str, n_turns: int, per_session: int = 30) -> list[dict]:
    a, b = rng.sample(NAMES, 2)
    sessions, made = [], 0
    day = 0
    while made < n_turns:
        day += rng.randint(1, 6)
        turns = []
        for i in range(min(per_session, n_turns - made)):
            sp = a if i % 2 == 0 else b
            text = (f"I {rng.choice(VERBS)} {rng.choice(THINGS)} near {rng.choice(PLACES)} and "
                    f"{rng.choice(FEEL)} [{user}#{made}]")
            turns.append({"speaker": sp, "text": text, "id": f"b{made}"})
            made += 1
        sessions.append({"time": f"2023-{1 + day // 28:02d}-{1 + day % 28:02d} 10:00", "id": f"s{len(sessions)}",
                         "turns": turns})
    return sessions


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q)) if xs else float("nan")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_clients(urls: list[str], users: list[tuple[str, str]], n_clients: int, per_client: int, seed: int) -> dict:
    lat = {"search": [], "append": [], "searchable": [], "fresh": []}
    stats = {"errors": 0, "cross": 0, "missed": 0, "requests": 0}
    error_samples: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(n_clients)

    def client(ci: int) -> None:
        rng = random.Random(seed * 1000 + ci)
        tenant, user = users[ci % len(users)]
        url = urls[(ci % len(users)) % len(urls)]  # one user, one replica
        tag = f"[{tenant}/{user}"
        local = {"search": [], "append": [], "searchable": [], "fresh": []}
        errors = cross = missed = requests = 0
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TENANTS[tenant]}"}, timeout=60) as c:

            def post(what: str, route: str, body: dict) -> tuple[httpx.Response | None, float]:
                """One counted request: (the response, or None after a non-200; when it ended)."""
                nonlocal requests, errors
                r = c.post(f"/v1/memories/{user}/{route}", json=body)
                ended = time.perf_counter()
                requests += 1
                if r.status_code != 200:
                    errors += 1
                    error_samples.append(f"{what} {r.status_code} {r.text[:200]}")
                    return None, ended
                return r, ended

            barrier.wait()
            for i in range(per_client):
                word = f"zq{ci}x{i}x{seed}"
                t0 = time.perf_counter()
                r, t1 = post("append", "turns", {"speaker": "Mara", "time": "2023-12-01 09:00",
                                                 "text": f"I keep the {word} in the shed {tag}#live]"})
                if r is None:
                    continue
                r, t2 = post("search", "search", {"query": f"where is the {word}?"})
                if r is None:
                    continue
                local["append"].append(t1 - t0)
                local["searchable"].append(t2 - t0)
                local["fresh"].append(t2 - t1)
                texts = [p["text"] for p in r.json()["packets"]]
                cross += sum(tag not in t for t in texts)
                missed += not any(word in t for t in texts)
                q = rng.choice(QUESTIONS).format(a=rng.choice(NAMES), p=rng.choice(PLACES), t=rng.choice(THINGS))
                t3 = time.perf_counter()
                r, t4 = post("search", "search", {"query": q})
                if r is None:
                    continue
                local["search"].append(t4 - t3)
                cross += sum(tag not in p["text"] for p in r.json()["packets"])
        with lock:
            for k in lat:
                lat[k].extend(local[k])
            stats["errors"] += errors
            stats["cross"] += cross
            stats["missed"] += missed
            stats["requests"] += requests

    threads = [threading.Thread(target=client, args=(i,)) for i in range(n_clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {"lat": lat, "wall": wall, "error_samples": error_samples[:5], **stats}


def run_server(args, tmp: Path, store: Path | str, users: list[tuple[str, str]], window: float, rows: list,
               *, paced: bool) -> list[float]:
    """Start a server with query batching window ``window`` ms, run every client count (rows
    get ``(window, clients, result)``), stop it; returns the paced run's latencies when ``paced``."""
    do_paced = paced
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    procs, urls, logs = [], [], []
    for r in range(args.replicas):
        port = free_port()
        logs.append(open(tmp / f"server-{window:g}-{r}.log", "wb"))
        procs.append(subprocess.Popen([sys.executable, "-m", "memcompile_local", "serve", "--store", str(store),
                                       "--port", str(port), "--keys", str(tmp / "keys.yaml"), "--config",
                                       str(tmp / "run.yaml"), "--workers", str(args.workers),
                                       "--query-batch-ms", str(window)],
                                      stdout=logs[-1], stderr=subprocess.STDOUT, env=env, cwd=str(REPO)))
        urls.append(f"http://127.0.0.1:{port}")
    url = urls[0]
    paced: list[float] = []
    try:
        for r, (proc, u) in enumerate(zip(procs, urls)):
            deadline = time.monotonic() + 300
            while True:
                if proc.poll() is not None or time.monotonic() > deadline:
                    logs[r].flush()
                    tail = (tmp / f"server-{window:g}-{r}.log").read_text(encoding="utf-8", errors="replace")[-2000:]
                    raise SystemExit(f"server {r} did not come up:\n{tail}")
                try:
                    if httpx.get(u + "/healthz", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.2)
        # warm every user's view once, on the replica its requests go to (the first search of a
        # memory loads and indexes it)
        for i, (tenant, user) in enumerate(users):
            httpx.post(f"{urls[i % len(urls)]}/v1/memories/{user}/search", json={"query": "warm up"},
                       headers={"Authorization": f"Bearer {TENANTS[tenant]}"}, timeout=120).raise_for_status()
        # An agent's rhythm: append a turn, answer the user for a while, search before the next
        # answer. The server loads the new view during the pause.
        tenant, user = users[0]
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TENANTS[tenant]}"}, timeout=60) as c:
            for i in range(args.paced if do_paced else 0):
                word = f"pz{i}x{args.seed}"
                c.post(f"/v1/memories/{user}/turns", json={"speaker": "Mara", "text": f"I left the {word} at home "
                                                                                       f"[{tenant}/{user}#paced]"}
                       ).raise_for_status()
                time.sleep(args.pause)
                t = time.perf_counter()
                r = c.post(f"/v1/memories/{user}/search", json={"query": f"where is the {word}?"})
                paced.append(time.perf_counter() - t)
                assert any(word in p["text"] for p in r.json()["packets"]), "the paced turn was not found"
        for n in [int(x) for x in args.clients.split(",")]:
            per_client = max(2, args.requests // (3 * n))
            res = run_clients(urls, users, n, per_client, args.seed + n)
            rows.append((window, n, res))
            print(f"  window {window:g} ms, {n} clients done: {res['requests']} requests in {res['wall']:.1f}s",
                  flush=True)
    finally:
        for proc in procs:
            proc.terminate()
        for proc, log in zip(procs, logs):
            proc.wait(30)
            log.close()
    return paced



def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--users", type=int, default=10, help="users in all, split over two tenants")
    ap.add_argument("--turns", type=int, default=600, help="seeded turns per user")
    ap.add_argument("--clients", default="1,8,32")
    ap.add_argument("--requests", type=int, default=240, help="approximate requests per run (all clients)")
    ap.add_argument("--embedder", default="hash", help="hash (default) or sentence-transformers")
    ap.add_argument("--embed-threads", type=int, help="ONNX threads per embedding call in the server "
                    "(model.embed_threads; default every core)")
    ap.add_argument("--store", help="store file (default: a temporary one)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--pause", type=float, default=1.0, help="seconds between an append and its search (paced run)")
    ap.add_argument("--paced", type=int, default=20, help="appends of the paced run")
    ap.add_argument("--workers", type=int, default=1, help="server processes (serve --workers N)")
    ap.add_argument("--query-batch-ms", default="2",
                    help="serve --query-batch-ms values to compare, one server each (e.g. 0,2: batching off, on)")
    ap.add_argument("--replicas", type=int, default=1, help="serve processes on their own ports over the store")
    args = ap.parse_args()
    windows = [float(x) for x in args.query_batch_ms.split(",")]

    tmp = Path(tempfile.mkdtemp(prefix="bench_service_"))
    store = (args.store if args.store and is_database_url(args.store) else Path(args.store) if args.store
             else tmp / "mem.sqlite")
    model = {"embedder": args.embedder}
    if args.embed_threads is not None:
        model["embed_threads"] = args.embed_threads
    cfg = apply_preset("model-free", PipelineConfig()).replace(model=model)
    (tmp / "run.yaml").write_text(yaml.safe_dump(cfg.to_dict()), encoding="utf-8")
    (tmp / "keys.yaml").write_text(yaml.safe_dump({"tenants": {t: {"keys": [{"sha256": hash_key(k)}]}
                                                               for t, k in TENANTS.items()}}), encoding="utf-8")
    rng = random.Random(args.seed)
    tenants = list(TENANTS)
    users = [(tenants[i % 2], f"user{i // 2}") for i in range(args.users)]  # same ids under both tenants
    t0 = time.perf_counter()
    mem = Memory(store, cfg)
    for tenant, user in users:
        ns = namespace_for(tenant, user)
        if not mem.store.packet_count(ns):
            sessions = synth_sessions(rng, f"{tenant}/{user}", args.turns)
            mem.add(ns, sessions)
        mem.build(ns)
    print(f"seeded {len(users)} users x {args.turns} turns ({args.embedder} embedder) in "
          f"{time.perf_counter() - t0:.1f}s: {describe_location(store)}", flush=True)

    rows = []
    paced: list[float] = []
    for window in windows:
        paced_here = run_server(args, tmp, store, users, window, rows, paced=not paced)
        paced = paced or paced_here

    # The same searches in-process, on the same store (after the HTTP runs added their turns).
    inproc = []
    qrng = random.Random(args.seed)
    for i in range(200):
        tenant, user = users[i % len(users)]
        q = qrng.choice(QUESTIONS).format(a=qrng.choice(NAMES), p=qrng.choice(PLACES), t=qrng.choice(THINGS))
        ns = namespace_for(tenant, user)
        if i < len(users):
            mem.compile(ns, q)  # load the view first, as the HTTP run warmed the server's
        t = time.perf_counter()
        mem.compile(ns, q)
        inproc.append(time.perf_counter() - t)
    mem.close()

    ms = lambda x: f"{1000 * x:7.1f}"  # noqa: E731
    print(f"\nmemory service over loopback, model-free preset, {args.embedder} embedder, "
          f"{len(users)} users x {args.turns}+ turns, store {describe_location(store).split('?')[0]}, "
          f"{args.replicas} replica(s) x {args.workers} server process(es), "
          f"{os.cpu_count()} CPUs visible, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("search: a question on a memory whose view is loaded; fresh: the search right after an append "
          "(on the view the append extended in place, or one loaded when it could not); searchable: append + "
          "fresh search, i.e. one new turn to its first hit (ms)")
    print("batch ms | clients | req/s  | search p50    p95    p99 | append p50    p95    p99 | fresh p50   p95 | "
          "searchable p50  p95 | errors cross missed")
    for window, n, r in rows:
        s, a, f, w = r["lat"]["search"], r["lat"]["append"], r["lat"]["fresh"], r["lat"]["searchable"]
        print(f"{window:8g} | {n:7d} | {r['requests'] / r['wall']:6.1f} | {ms(pct(s, 50))} {ms(pct(s, 95))} {ms(pct(s, 99))} | "
              f"{ms(pct(a, 50))} {ms(pct(a, 95))} {ms(pct(a, 99))} | {ms(pct(f, 50))} {ms(pct(f, 95))} | "
              f"{ms(pct(w, 50))} {ms(pct(w, 95))} | {r['errors']:6d} {r['cross']:5d} {r['missed']:6d}")
        for e in r["error_samples"]:
            print(f"        error: {e}")
    print(f"search of a just-appended turn after a {args.pause:.1f}s pause (1 client, {args.paced} times): "
          f"p50 {ms(pct(paced, 50))} ms, p95 {ms(pct(paced, 95))} ms")
    p50 = pct(inproc, 50)
    print(f"in-process Memory.compile on a loaded view: p50 {ms(p50)} ms, p95 {ms(pct(inproc, 95))} ms "
          f"(mean {1000 * statistics.fmean(inproc):.1f} ms)")
    for window, n, r in rows:
        print(f"  batch {window:g} ms: HTTP search p50 / in-process p50 at {n} clients: "
              f"{pct(r['lat']['search'], 50) / p50:.2f}x")
    for window in windows:
        one = [pct(r["lat"]["search"], 50) for w, n, r in rows if w == window and n == 1]
        for w, n, r in rows:
            if w == window and n > 1 and one:
                print(f"  batch {window:g} ms: search p50 at {n} clients / at 1 client: "
                      f"{pct(r['lat']['search'], 50) / one[0]:.2f}x")
    bad = sum(r["errors"] + r["cross"] for _w, _n, r in rows)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
