#!/usr/bin/env python
"""Re-run the store and input fault probes and print a table of tries / held / broke.

Every probe runs the real code (the CLI or the store API; real subprocesses where another process
is the point) on the model-free preset with the ``hash`` embedder, so no model is needed:

* kill points: ``ingest --build`` killed with SIGKILL at a random moment, then run again; the
  store must end bit-identical (every row, timestamps aside) to an uninterrupted build and pass
  ``check``;
* concurrent writers: rounds of processes ingesting into one file at the same moment, and eight
  processes opening a store path that does not exist yet (the schema is created once, in one
  transaction, and no opener sees it half made);
* server beside the CLI: a ``serve`` process takes appends while CLI processes ingest, build, ask,
  check, forget and scrub the same file and a Python ``Memory`` process adds and forgets; every
  acknowledged turn must be in the file afterwards, no descriptor of the server may point at a
  deleted WAL, and ``/healthz`` must stay ok;
* forget under a reader: another process holds an old read snapshot; forget must return within
  its bound, not block a concurrent writer, report the scrub as pending, and a later scrub must
  remove the forgotten bytes;
* stale view: a long-lived process keeps a compiled view; another process forgets and re-adds
  the namespace; the next compile must not return forgotten text;
* byte flips: random bytes flipped in copies of a built store, and one letter of a stored turn;
  every failure must be a typed error, the CLI must not print a traceback, ``check`` must flag it;
* malformed files, hostile namespace names, a half-edited batch: refused, named, nothing written;
* unicode: turns round-trip byte-exact through a file, the CLI and the store;
* disk full: a child with a small file-size limit (RLIMIT_FSIZE); typed error, then a clean resume;
* read-only store: stats, check and ask on a read-only file system (or without write permission);
* foreign files: refused byte-identical; re-ingest: changes nothing.

The ``pg-*`` rows run on a PostgreSQL store, on a throwaway server started from the installed
binaries (tests/_postgres.py; the rows are skipped, with a note, when there are none):

* pg-kill: ``ingest --build`` into a database killed with SIGKILL at a random moment, then run
  again; every row must equal an uninterrupted build's (``store.copy.differences``) and pass
  ``check``;
* pg-writers: rounds of processes ingesting into one empty database at the same moment (the
  schema is created once, under its advisory lock); every batch is there, in order;
* pg-restart: the server is stopped (``-m immediate``) and started again while a process keeps
  ingesting; every ingest that returned is there afterwards, none is half there, ``check`` passes;
* pg-stale: a long-lived ``Memory`` process keeps a view; another process forgets and re-adds
  the namespace; the next compile must not return forgotten text.

    python scripts/fault_matrix.py            # the full set (a few minutes on 2 shared cores)
    python scripts/fault_matrix.py --quick    # fewer tries of each probe
    python scripts/fault_matrix.py --only new-file,beside-server
    python scripts/fault_matrix.py --only pg-kill,pg-writers,pg-restart,pg-stale

Exit code 0 when nothing broke, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from memcompile_local.cli import main as cli_main  # noqa: E402
from memcompile_local.data import example_conversation_path, load_any  # noqa: E402
from memcompile_local.errors import NamespaceError, StoreError  # noqa: E402
from memcompile_local.store import MemoryStore  # noqa: E402
from memcompile_local.store.check import check_store  # noqa: E402
from memcompile_local.types import Conversation, Session, Turn  # noqa: E402

MF = ["--preset", "model-free", "--embedder", "hash"]
EXAMPLE_NS = "example-1"
CHILD_ENV = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1")


@dataclass
class Probe:
    name: str
    tries: int = 0
    held: int = 0
    notes: list[str] = field(default_factory=list)
    info: str = ""

    def record(self, ok: bool, note: str = "") -> None:
        self.tries += 1
        self.held += bool(ok)
        if not ok and note:
            self.notes.append(note)

    @property
    def broke(self) -> int:
        return self.tries - self.held


# ------------------------------------------------------------------------------ helpers


def cli(*argv: str) -> tuple[int, str, str]:
    """Run the CLI in this process; (exit code, stdout, stderr). An escaping exception is a break."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = cli_main(list(argv))
        except BaseException as exc:  # noqa: BLE001 - anything escaping main() is what we look for
            rc = -1
            err.write(f"ESCAPED {type(exc).__name__}: {exc}")
    return rc, out.getvalue(), err.getvalue()


def cli_process(*argv: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memcompile_local", *argv], capture_output=True, text=True,
                          env=CHILD_ENV, cwd=REPO, timeout=timeout)


_IGNORED_COLUMNS = {"created_at"}
_DIGEST_TABLES = ("namespaces", "packets", "extraction_markers", "descriptors", "cells", "embeddings", "meta",
                  "request_cache", "run_calls")


def digest(path: Path) -> str:
    """A hash of every row of the memory tables, timestamps aside (generations move on every write)."""
    h = hashlib.sha256()
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        for table in _DIGEST_TABLES:
            cols = [r[1] for r in con.execute(f"PRAGMA table_info({table})") if r[1] not in _IGNORED_COLUMNS]
            rows = con.execute(f"SELECT {', '.join(cols)} FROM {table}").fetchall()
            h.update(table.encode())
            for row in sorted(rows, key=repr):
                h.update(repr(row).encode())
    finally:
        con.close()
    return h.hexdigest()


def file_bytes(path: Path) -> bytes:
    return b"".join(Path(str(path) + s).read_bytes() for s in ("", "-wal") if Path(str(path) + s).exists())


def synthetic_plain(namespace: str, n_sessions: int, turns_per_session: int, seed: int) -> dict:
    """A plain-format memory file of our own invented small talk (deterministic for ``seed``)."""
    rng = random.Random(seed)
    people = ["Ines", "Tomas"]
    topics = ["a pottery class", "the allotment", "a trip to Porto", "a broken bike", "the choir concert",
              "a new puppy", "the night shift", "a chess club", "rock climbing", "a sourdough starter"]
    sessions = []
    for s in range(n_sessions):
        turns = []
        for t in range(turns_per_session):
            topic = rng.choice(topics)
            turns.append({"speaker": people[t % 2],
                          "text": f"On day {s + 1} I keep thinking about {topic}; "
                                  f"{rng.choice(['it went well', 'it was tiring', 'I want to go again'])} "
                                  f"and {rng.randrange(2, 40)} people came."})
        sessions.append({"time": f"{9 + s % 8}:00 am on {1 + s % 28} May, 2024", "turns": turns})
    return {"namespace": namespace, "speakers": people, "sessions": sessions}


def write_json(path: Path, obj) -> Path:
    path.write_text(json.dumps(obj, ensure_ascii=False), encoding="utf-8")
    return path


# ------------------------------------------------------------------------------ probes


def probe_kill_points(work: Path, tries: int, rng: random.Random) -> Probe:
    p = Probe("kill -9 during ingest --build, then resume")
    data = write_json(work / "kill.json", synthetic_plain("killed", 12, 20, seed=1))
    ref = work / "kill-ref.sqlite"
    t0 = time.monotonic()
    r = cli_process("ingest", str(data), "--build", "--store", str(ref), "--quiet", *MF)
    duration = time.monotonic() - t0
    if r.returncode != 0:
        p.record(False, f"reference build failed: {r.stderr[-300:]}")
        return p
    want = digest(ref)
    phases = {"before the turns were stored": 0, "during extraction": 0, "after extraction": 0}
    for i in range(tries):
        store = work / f"kill-{i}.sqlite"
        proc = subprocess.Popen([sys.executable, "-m", "memcompile_local", "ingest", str(data), "--build",
                                 "--store", str(store), "--quiet", *MF], env=CHILD_ENV, cwd=REPO,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.1, 1.0) * duration)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        n = done = 0
        if store.exists():
            with contextlib.suppress(sqlite3.Error):  # what the killed run had committed
                con = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
                n = con.execute("SELECT COUNT(*) FROM packets").fetchone()[0]
                done = con.execute("SELECT COUNT(*) FROM extraction_markers").fetchone()[0]
                con.close()
        phase = ("before the turns were stored" if n == 0 else
                 "during extraction" if done < n else "after extraction")
        phases[phase] += 1
        again = cli_process("ingest", str(data), "--build", "--store", str(store), "--quiet", *MF)
        ok = again.returncode == 0 and digest(store) == want and check_store(store).ok
        p.record(ok, f"try {i}: rc={again.returncode} {again.stderr[-200:]}")
    p.info = "kills landed " + ", ".join(f"{v} {k}" for k, v in phases.items())
    return p


_WRITER = textwrap.dedent(
    """
    import os, sys, time
    from memcompile_local.store import open_store
    from memcompile_local.types import Conversation, Session, Turn
    db, ns, go = sys.argv[1], sys.argv[2], sys.argv[3]  # db: a store file or a database URL
    while not os.path.exists(go):
        time.sleep(0.001)
    with open_store(db) as s:
        for b in range(5):
            turns = tuple(Turn(f"D{b + 1}:{i + 1}", "Ann", f"{ns} batch {b} turn {i}") for i in range(6))
            s.ingest(Conversation(namespace=ns, sessions=(Session(b + 1, f"s{b + 1}", "noon", turns),)))
    """
)


def probe_concurrent_writers(work: Path, rounds: int, width: int) -> Probe:
    return _writer_rounds(Probe("concurrent writer processes on one file"), work, rounds, width, _WRITER, "conc", "w", 30)


def _writer_rounds(p: Probe, work: Path, rounds: int, width: int, script: str, file_tag: str, ns_tag: str,
                   turns_each: int) -> Probe:
    """Rounds of ``width`` processes running ``script`` on one new file at once; each must write
    its namespace's ``turns_each`` turns."""
    for r in range(rounds):
        db, go = work / f"{file_tag}-{r}.sqlite", work / f"{file_tag}-go-{r}"
        procs = [subprocess.Popen([sys.executable, "-c", script, str(db), f"{ns_tag}{r}-{k}", str(go)], env=CHILD_ENV,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for k in range(width)]
        time.sleep(0.5)
        go.touch()
        outcomes = [proc.communicate(timeout=300) + (proc.returncode,) for proc in procs]
        with MemoryStore(db, read_only=True) as s:
            counts = {ns: s.packet_count(ns) for ns in s.namespaces()}
        for k, (_out, err, rc) in enumerate(outcomes):
            p.record(rc == 0 and counts.get(f"{ns_tag}{r}-{k}") == turns_each,
                     f"round {r} writer {k}: rc={rc} {err[-200:]}")
    return p


_NEW_FILE_WRITER = textwrap.dedent(
    """
    import os, sys, time
    from memcompile_local.store import MemoryStore
    from memcompile_local.types import Conversation, Session, Turn
    db, ns, go = sys.argv[1], sys.argv[2], sys.argv[3]
    while not os.path.exists(go):
        time.sleep(0.001)
    with MemoryStore(db) as s:  # the file does not exist yet: every writer may be the one creating it
        turns = tuple(Turn(f"D1:{i + 1}", "Ann", f"{ns} turn {i}") for i in range(5))
        s.ingest(Conversation(namespace=ns, sessions=(Session(1, "s1", "noon", turns),)))
    """
)


def probe_writers_on_new_file(work: Path, rounds: int, width: int) -> Probe:
    """``width`` processes open a store path that does not exist yet at the same moment."""
    return _writer_rounds(Probe("writer processes creating one new file"), work, rounds, width,
                          _NEW_FILE_WRITER, "fresh", "n", 5)


_MEMORY_BESIDE_SERVER = textwrap.dedent(
    """
    import sys
    from memcompile_local import Memory, PipelineConfig
    from memcompile_local.pipeline.presets import apply_preset
    cfg = apply_preset("model-free", PipelineConfig()).replace(model={"embedder": "hash"})
    with Memory(sys.argv[1], cfg) as mem:
        mem.add("py-user", [{"time": "2024-04-02 08:00", "turns": [
            {"speaker": "Lena", "text": "I planted tomatoes on the balcony."}]}])
        mem.search("py-user", "What did Lena plant?", k=1)
        mem.forget("py-user")
    """
)


def _deleted_store_files(pid: int) -> list[str]:
    out = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.endswith("(deleted)") and ".sqlite" in target:
                out.append(target)
    return out


def probe_server_beside_cli(work: Path, rounds: int) -> Probe:
    """A ``serve`` process takes appends while CLI and Python processes write, build, check and scrub."""
    import httpx  # the serve extra; only this probe needs it
    import socket
    import threading

    p = Probe("server beside CLI writers on one file")
    db = work / "served.sqlite"
    conf = work / "served.yaml"
    conf.write_text(json.dumps({"extraction": {"extractor": "rule", "intent_source": "rule", "use_intent": True},
                                "evidence": {"anchor_selector": "fused", "frontier": "none"},
                                "model": {"embedder": "hash"}}), encoding="utf-8")
    conv = write_json(work / "beside.json", {"namespace": "cli-user", "sessions": [
        {"time": f"2024-03-{d + 1:02d} 10:00", "turns": [
            {"speaker": "Mira", "text": f"On day {d} I repaired bicycle number {d}."},
            {"speaker": "Otto", "text": f"Was bicycle {d} the red one?"}]} for d in range(3)]})
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    log = open(work / "served.log", "wb")
    server = subprocess.Popen([sys.executable, "-m", "memcompile_local", "serve", "--store", str(db), "--port",
                               str(port), "--config", str(conf)], stdout=log, stderr=subprocess.STDOUT,
                              env=CHILD_ENV, cwd=REPO)
    acked: list[str] = []
    failed: list[str] = []
    stop = threading.Event()

    def append_loop() -> None:
        with httpx.Client(base_url=url, timeout=60) as c:
            i = 0
            while not stop.is_set():
                try:
                    r = c.post("/v1/memories/agent/turns", json={"speaker": "Agent", "id": f"a{i}",
                                                                "text": f"note {i} about the garden",
                                                                "time": "2024-05-01 09:00"})
                    (acked if r.status_code == 200 else failed).append(f"a{i}:{r.status_code}")
                except httpx.HTTPError as exc:
                    failed.append(f"a{i}:{type(exc).__name__}")
                i += 1
                stop.wait(0.02)  # a steady agent rather than a flood: the other processes get the cores too

    try:
        deadline = time.monotonic() + 90
        while True:
            if server.poll() is not None or time.monotonic() > deadline:
                p.record(False, "the server did not start")
                return p
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    break
            time.sleep(0.2)
        appender = threading.Thread(target=append_loop, daemon=True)
        appender.start()
        steps = [
            ("ingest", ["ingest", str(conv), "--store", str(db), "--build", "--quiet", *MF]),
            ("ask", ["ask", "cli-user", "Which bicycle was red?", "--store", str(db), "--no-answer", "--quiet", *MF]),
            ("check", ["check", "--store", str(db)]),
            ("forget", ["forget", "cli-user", "--store", str(db)]),
            ("scrub", ["scrub", "--store", str(db)]),
        ]
        for r in range(rounds):
            for name, argv in steps:
                proc = cli_process(*argv)
                ok_rc = (0, 3) if name == "forget" else (0,)
                deleted = _deleted_store_files(server.pid) if server.poll() is None else ["server exited"]
                try:
                    health = httpx.get(url + "/healthz", timeout=30).status_code
                except httpx.HTTPError as exc:
                    health = f"{type(exc).__name__} (server rc={server.poll()})"
                p.record(proc.returncode in ok_rc and not deleted and health == 200,
                         f"round {r} {name}: rc={proc.returncode} deleted={deleted} healthz={health} "
                         f"{proc.stderr[-200:]}")
            child = subprocess.run([sys.executable, "-c", _MEMORY_BESIDE_SERVER, str(db)], capture_output=True,
                                   text=True, env=CHILD_ENV, cwd=REPO, timeout=300)
            deleted = _deleted_store_files(server.pid) if server.poll() is None else ["server exited"]
            p.record(child.returncode == 0 and not deleted,
                     f"round {r} python Memory: rc={child.returncode} deleted={deleted} {child.stderr[-200:]}")
        stop.set()
        appender.join(60)
    finally:
        stop.set()
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()
        log.close()
    # After the server stopped: every turn it acknowledged is in the file.
    with MemoryStore(db, read_only=True) as s:
        (ns,) = [n for n in s.namespaces() if n.endswith("agent")]
        stored = {pk.packet_id for pk in s.packets(ns)}
    lost = sorted({a.split(":")[0] for a in acked} - stored)
    p.record(not lost and not failed and bool(acked),
             f"{len(lost)} of {len(acked)} acknowledged turns lost {lost[:5]}; failed appends {failed[:5]}")
    p.info = f"{len(acked)} appends acknowledged during {rounds} rounds, {len(lost)} lost"
    return p


_READER = textwrap.dedent(
    """
    import sqlite3, sys
    con = sqlite3.connect(sys.argv[1], isolation_level=None)
    con.execute("BEGIN")
    con.execute("SELECT COUNT(*) FROM packets").fetchone()
    print("READING", flush=True)
    sys.stdin.read()
    con.execute("COMMIT")
    """
)


def _conv(ns: str, texts: list[str], session: int = 1) -> Conversation:
    turns = tuple(Turn(f"D{session}:{i + 1}", "Ann", t) for i, t in enumerate(texts))
    return Conversation(namespace=ns, sessions=(Session(session, f"s{session}", "noon", turns),))


def probe_forget_under_reader(work: Path, tries: int) -> Probe:
    p = Probe("forget while another process reads")
    for i in range(tries):
        db = work / f"forget-{i}.sqlite"
        secret = f"QUOLL-SECRET-{i}-8812"
        with MemoryStore(db) as s:
            s.ingest(_conv("victim", [f"my word is {secret}", "ok"]))
            s.ingest(_conv("keeper", ["other words"]))
        reader = subprocess.Popen([sys.executable, "-c", _READER, str(db)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        try:
            reader.stdout.readline()
            t0 = time.monotonic()
            r = cli_process("forget", "victim", "--store", str(db), "--wait", "1.0")
            took = time.monotonic() - t0
            t1 = time.monotonic()
            w = cli_process("ingest", str(write_json(work / f"add-{i}.json", {
                "namespace": "keeper", "sessions": [{"time": "noon", "turns": [{"speaker": "Bo", "text": "hi"}]}]})),
                "--store", str(db), "--quiet")
            write_s = time.monotonic() - t1
            with MemoryStore(db, read_only=True) as s:
                gone = s.packet_count("victim") == 0 and s.stats()["scrub_pending"]
        finally:
            reader.stdin.close()
            reader.wait(timeout=60)
        s2 = cli_process("scrub", "--store", str(db))
        ok = (r.returncode == 3 and took < 15 and w.returncode == 0 and write_s < 15 and gone
              and s2.returncode == 0 and secret.encode() not in file_bytes(db))
        p.record(ok, f"try {i}: forget rc={r.returncode} in {took:.1f}s, ingest rc={w.returncode} in "
                     f"{write_s:.1f}s, pending={gone}, scrub rc={s2.returncode}")
    return p


_LONG_LIVED = textwrap.dedent(
    """
    import json, sys
    from memcompile_local.config import PipelineConfig
    from memcompile_local.pipeline.presets import apply_preset
    from memcompile_local.memory import Memory
    cfg = apply_preset("model-free", PipelineConfig()).replace(model={"embedder": "hash"})
    with Memory(sys.argv[1], cfg) as mem:
        print("READY", flush=True)
        for line in sys.stdin:
            print(json.dumps({"text": mem.compile("carol", line.strip()).text}), flush=True)
    """
)

_FORGET_AND_ADD = textwrap.dedent(
    """
    import sys
    from memcompile_local.memory import Memory
    from memcompile_local.types import Conversation, Session, Turn
    with Memory(sys.argv[1]) as mem:
        mem.forget("carol")
        turns = (Turn("D1:1", "Carol", "I started a watercolour class."), Turn("D1:2", "Dan", "Enjoy it."))
        mem.add("carol", Conversation(namespace="carol", sessions=(Session(1, "s1", "9 am", turns),)))
    """
)


def probe_stale_view(work: Path, tries: int) -> Probe:
    p = Probe("compile after another process forgot")
    for i in range(tries):
        _stale_view_try(p, str(work / f"stale-{i}.sqlite"), i)
    return p


def _stale_view_try(p: Probe, db: str, i: int) -> None:
    """One try of the stale-view probe on the store at ``db`` (a file or a database URL)."""
    from memcompile_local.store import open_store

    with open_store(db) as s:
        s.ingest(Conversation(namespace="carol", sessions=(Session(1, "s1", "noon", (
            Turn("D1:1", "Carol", "My iguana is called Zorblat."), Turn("D1:2", "Dan", "Zorblat, nice."))),)))
    proc = subprocess.Popen([sys.executable, "-c", _LONG_LIVED, db], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=CHILD_ENV)
    try:
        proc.stdout.readline()
        proc.stdin.write("What is the iguana called?\n")
        proc.stdin.flush()
        first = json.loads(proc.stdout.readline())["text"]
        subprocess.run([sys.executable, "-c", _FORGET_AND_ADD, db], env=CHILD_ENV, check=True, timeout=300)
        proc.stdin.write("What is the iguana called?\n")
        proc.stdin.flush()
        second = json.loads(proc.stdout.readline())["text"]
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    p.record("Zorblat" in first and "Zorblat" not in second, f"try {i}: forgotten text served again")


def _read_everything(path: Path) -> None:
    with MemoryStore(path, read_only=True) as s:
        for ns in s.namespaces():
            st = s.stats(ns)["namespaces"][ns]
            packets = s.packets(ns)
            for dset in st["descriptors"]:
                s.descriptors(ns, dset)
            for lid in st["cells"]:
                s.cells(ns, lid)
            for mid in st["embeddings"]:
                s.embeddings(ns, mid, [pk.packet_id for pk in packets])
        s.token_totals()


def probe_byte_flips(work: Path, built: Path, copies: int, rng: random.Random) -> Probe:
    p = Probe("random bytes flipped in a built store")
    for k in range(copies):
        copy = work / f"flip-{k}.sqlite"
        data = bytearray(built.read_bytes())
        for _ in range(50):
            i = rng.randrange(100, len(data))
            data[i] ^= rng.randrange(1, 256)
        copy.write_bytes(bytes(data))
        read_failed, other = False, ""
        try:
            _read_everything(copy)
        except StoreError:
            read_failed = True
        except Exception as exc:  # noqa: BLE001 - an untyped error is the break we look for
            other = f"{type(exc).__name__}: {exc}"
        try:
            report = check_store(copy)
        except Exception as exc:  # noqa: BLE001 - check must report damage, never crash on it
            p.record(False, f"copy {k}: check crashed: {type(exc).__name__}: {exc}")
            continue
        rcs = [cli("stats", "--store", str(copy)), cli("check", "--store", str(copy)),
               cli("ask", EXAMPLE_NS, "What is the cat called?", "--no-answer", "--quiet", "--store", str(copy), *MF)]
        clean_cli = all(rc in (0, 1, 2) and "Traceback" not in err and "ESCAPED" not in err for rc, _o, err in rcs)
        ok = not other and clean_cli and (not read_failed or not report.ok)
        p.record(ok, f"copy {k}: {other or ''} cli={[rc for rc, _o, _e in rcs]} check_ok={report.ok}")
    return p


def probe_changed_letter(work: Path, built: Path) -> Probe:
    p = Probe("one letter of a stored turn changed")
    copy = work / "letter.sqlite"
    shutil.copy(built, copy)
    with MemoryStore(copy, read_only=True) as s:
        target = s.packets(EXAMPLE_NS)[5]
    data = bytearray(copy.read_bytes())
    at = data.find(target.content.encode())
    j = next(i for i, ch in enumerate(target.content) if ch.isalpha())
    data[at + j] = ord("x") if data[at + j] != ord("x") else ord("y")
    copy.write_bytes(bytes(data))
    try:
        with MemoryStore(copy, read_only=True) as s:
            s.packets(EXAMPLE_NS)
        detected = False
    except StoreError as exc:
        detected = target.packet_id in str(exc) and "sha256" in str(exc)
    report = check_store(copy)
    p.record(detected, "packets() returned the changed turn")
    p.record([(q.table, q.row) for q in report.problems] == [("packets", f"'{EXAMPLE_NS}'/'{target.packet_id}'")],
             f"check said {[str(q) for q in report.problems]}")
    rc, out, _err = cli("check", "--store", str(copy))
    p.record(rc == 1 and target.packet_id in out, f"check exit {rc}")
    return p


def _malformed_files() -> list[tuple[str, bytes]]:
    good = synthetic_plain("mal", 2, 3, seed=2)

    def variant(edit: Callable[[dict], None]) -> bytes:
        obj = json.loads(json.dumps(good))
        edit(obj)
        return json.dumps(obj).encode()

    def setter(path: list, value):
        def edit(obj):
            cur = obj
            for key in path[:-1]:
                cur = cur[key]
            cur[path[-1]] = value
        return edit

    def deleter(path: list):
        def edit(obj):
            cur = obj
            for key in path[:-1]:
                cur = cur[key]
            del cur[path[-1]]
        return edit

    text = json.dumps(good).encode()
    return [
        ("empty file", b""),
        ("whitespace only", b"  \n "),
        ("not JSON", b"hello, memory"),
        ("truncated JSON", text[: len(text) // 2]),
        ("JSON null", b"null"),
        ("JSON number", b"42"),
        ("JSON string", b'"sessions"'),
        ("invalid UTF-8 byte", text[:40] + b"\xff" + text[40:]),
        ("BOM then garbage", b"\xef\xbb\xbf{oops"),
        ("sessions not a list", variant(setter(["sessions"], {"a": 1}))),
        ("sessions missing", variant(deleter(["sessions"]))),
        ("session not an object", variant(setter(["sessions", 0], "morning"))),
        ("time missing", variant(deleter(["sessions", 0, "time"]))),
        ("time a number", variant(setter(["sessions", 0, "time"], 930))),
        ("turns not a list", variant(setter(["sessions", 0, "turns"], "hi"))),
        ("turn not an object", variant(setter(["sessions", 0, "turns", 0], ["Ines", "hi"]))),
        ("text missing", variant(deleter(["sessions", 0, "turns", 0, "text"]))),
        ("text a number", variant(setter(["sessions", 0, "turns", 0, "text"], 7))),
        ("text null", variant(setter(["sessions", 0, "turns", 0, "text"], None))),
        ("speaker missing", variant(deleter(["sessions", 0, "turns", 1, "speaker"]))),
        ("speaker empty", variant(setter(["sessions", 0, "turns", 1, "speaker"], ""))),
        ("speaker a list", variant(setter(["sessions", 0, "turns", 1, "speaker"], ["Ines"]))),
        ("speaker not in speakers", variant(setter(["sessions", 0, "turns", 1, "speaker"], "Mallory"))),
        ("duplicate turn ids", variant(lambda o: [t.__setitem__("id", "same") for t in o["sessions"][0]["turns"]])),
        ("caption a number", variant(setter(["sessions", 0, "turns", 0, "image_caption"], 3.5))),
        ("namespace with a slash", variant(setter(["namespace"], "../../etc"))),
        ("namespace a number", variant(setter(["namespace"], 12))),
        ("lone surrogate in text", text.replace(b'"text": "On day 1', b'"text": "\\ud800 On day 1', 1)),
        ("speakers not a list", variant(setter(["speakers"], "Ines"))),
        ("session id a number", variant(setter(["sessions", 0, "id"], 5))),
        ("JSONL with a bad line", (json.dumps(good) + "\n{\"sessions\": [}\n").encode()),
        ("deeply nested garbage", b"[" * 5000 + b"]" * 5000),
    ]


def probe_malformed_files(work: Path, built_copy: Path) -> Probe:
    p = Probe("malformed input files")
    before = digest(built_copy)
    for k, (what, content) in enumerate(_malformed_files()):
        suffix = ".jsonl" if "JSONL" in what else ".json"
        path = work / f"malformed-{k}{suffix}"
        path.write_bytes(content)
        rc, _out, err = cli("ingest", str(path), "--format", "plain", "--store", str(built_copy), "--quiet")
        ok = rc == 2 and str(path) in err and "Traceback" not in err and "ESCAPED" not in err
        p.record(ok and digest(built_copy) == before, f"{what}: rc={rc} {err[-160:]!r}")
    return p


HOSTILE_NAMES = ["../escape", "a/b", "", " ", "x" * 200, "naïve", "a\nb", ".hidden", "'; DROP TABLE packets; --",
                 "nul\x00byte", "two words", "C:\\windows", "$(rm -rf ~)"]


def probe_hostile_names(work: Path, built_copy: Path) -> Probe:
    p = Probe("hostile namespace names")
    data = write_json(work / "hostile.json", synthetic_plain("placeholder", 1, 2, seed=3))
    def listing() -> list[str]:  # the store's own -wal/-shm files may come and go
        return sorted(n for n in os.listdir(work) if not n.startswith(built_copy.name))

    before_files = listing()
    before = digest(built_copy)
    for name in HOSTILE_NAMES:
        rc, _out, err = cli("ingest", str(data), "--namespace", name, "--store", str(built_copy), "--quiet")
        try:
            with MemoryStore(built_copy, read_only=True) as s:
                s.packets(name)
            api_refused = False
        except NamespaceError:
            api_refused = True
        ok = rc == 2 and "ESCAPED" not in err and api_refused and digest(built_copy) == before
        p.record(ok, f"{name!r}: rc={rc}")
    after = listing()
    p.record(after == before_files, f"files appeared in the work folder: {sorted(set(after) - set(before_files))}")
    return p


UNICODE_TEXTS = ["emoji 👩‍🔬🧪 and flags 🇵🇹", "שלום עולם (right to left)", "e\u0301 (decomposed)", "é (composed)",
                 "zero\u200bwidth\u200djoiner", "中文字符和日本語のテキスト", "math 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ∮ E⋅da = Q",
                 "tab\tand\r\nwindows line end", "a" + "\u0301" * 30, "\ufeffbyte order mark inside",
                 "noncharacter \uffff and \ufdd0", "Ω≈ç√∫˜µ≤≥÷", "nul \x00 inside"]


def probe_unicode(work: Path) -> Probe:
    p = Probe("unicode turns round-trip byte-exact")
    db = work / "unicode.sqlite"
    sessions = [{"time": "noon", "turns": [{"speaker": "Ines", "text": t} for t in UNICODE_TEXTS]}]
    path = write_json(work / "unicode.json", {"namespace": "uni", "sessions": sessions})
    rc, _out, err = cli("ingest", str(path), "--store", str(db), "--quiet")
    if rc != 0:
        p.record(False, f"ingest failed: {err[-200:]}")
        return p
    with MemoryStore(db, read_only=True) as s:
        got = [pk.content for pk in s.packets("uni")]
    for i, text in enumerate(UNICODE_TEXTS):
        p.record(i < len(got) and got[i].encode("utf-8") == text.encode("utf-8"), f"{text!r} came back changed")
    bad = work / "surrogate.json"
    bad.write_text('{"namespace": "uni2", "sessions": [{"time": "t", "turns": [{"speaker": "A", "text": "\\udc80"}]}]}',
                   encoding="utf-8")
    rc, _out, err = cli("ingest", str(bad), "--store", str(db), "--quiet")
    p.record(rc == 2 and "ESCAPED" not in err, f"lone surrogate: rc={rc}")
    return p


_FSIZE_CHILD = textwrap.dedent(
    """
    import resource, signal, sys
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG
    limit = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    from memcompile_local.cli import main
    sys.exit(main(sys.argv[2:]))
    """
)


def probe_disk_full(work: Path, tries: int) -> Probe:
    p = Probe("disk full (RLIMIT_FSIZE in a child), then resume")
    data = write_json(work / "big.json", synthetic_plain("big", 10, 20, seed=4))
    ref = work / "full-ref.sqlite"
    r = cli_process("ingest", str(data), "--build", "--store", str(ref), "--quiet", *MF)
    if r.returncode != 0:
        p.record(False, f"reference build failed: {r.stderr[-300:]}")
        return p
    want = digest(ref)
    size = ref.stat().st_size
    for i in range(tries):
        db = work / f"full-{i}.sqlite"
        limit = int(size * (0.15 + 0.3 * i))
        child = subprocess.run([sys.executable, "-c", _FSIZE_CHILD, str(limit), "ingest", str(data), "--build",
                                "--store", str(db), "--quiet", *MF], capture_output=True, text=True,
                               env=CHILD_ENV, timeout=600)
        typed = child.returncode == 2 and "Traceback" not in child.stderr and "error:" in child.stderr
        again = cli_process("ingest", str(data), "--build", "--store", str(db), "--quiet", *MF)
        ok = typed and again.returncode == 0 and digest(db) == want and check_store(db).ok
        p.record(ok, f"limit {limit}: rc={child.returncode} {child.stderr[-200:]!r}; resume rc={again.returncode}")
    return p


_RO_READER = textwrap.dedent(
    """
    import json, sys
    from memcompile_local.cli import main
    store = sys.argv[1]
    rcs = [main(["stats", "--store", store]), main(["check", "--store", store]),
           main(["ask", "example-1", "What is the cat called?", "--no-answer", "--quiet", "--store", store,
                 "--preset", "model-free", "--embedder", "hash"])]
    print("RCS", json.dumps(rcs))
    """
)


def probe_read_only(built: Path) -> Probe:
    p = Probe("read-only store (stats, check, ask)")
    folder = Path(tempfile.mkdtemp(prefix="fault-ro-"))
    try:
        store = folder / "ro.sqlite"
        shutil.copy(built, store)
        store.chmod(0o444)
        folder.chmod(0o555)
        argv = [sys.executable, "-c", _RO_READER, str(store)]
        if os.geteuid() == 0:  # root ignores permissions: mount the folder read-only instead
            script = f"mount --bind {folder} {folder} && mount -o remount,bind,ro {folder} && exec \"$@\""
            argv = ["unshare", "-m", "sh", "-c", script, "sh", *argv]
        before = store.read_bytes()
        out = subprocess.run(argv, capture_output=True, text=True, env=CHILD_ENV, timeout=300)
        line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RCS ")), "RCS [-1, -1, -1]")
        for name, rc in zip(("stats", "check", "ask"), json.loads(line[4:])):
            p.record(rc == 0, f"{name} exit {rc}: {out.stderr[-200:]!r}")
        p.record(store.read_bytes() == before, "the file changed")
    finally:
        folder.chmod(0o755)
        shutil.rmtree(folder, ignore_errors=True)
    return p


def probe_foreign_and_batches(work: Path) -> Probe:
    p = Probe("foreign files untouched; half-edited batch writes nothing")
    foreign = work / "contacts.db"
    con = sqlite3.connect(foreign)
    con.execute("CREATE TABLE contacts (name TEXT)")
    con.commit()
    con.close()
    text = work / "notes.txt"
    text.write_text("not a database\n", encoding="utf-8")
    for path in (foreign, text):
        before = path.read_bytes()
        rc, _o, err = cli("stats", "--store", str(path))
        rc2, _o, err2 = cli("ingest", str(example_conversation_path()), "--store", str(path), "--quiet")
        p.record(rc == 2 and rc2 == 2 and path.read_bytes() == before and not Path(str(path) + "-wal").exists(),
                 f"{path.name}: rc={rc},{rc2}")
    typo = work / "no-such-dir-file.sqlite"
    rc, _o, _e = cli("ask", EXAMPLE_NS, "q", "--no-answer", "--store", str(typo), *MF)
    p.record(rc == 2 and not typo.exists(), "ask created a store at a mistyped path")
    db = work / "batch.sqlite"
    cli("ingest", str(example_conversation_path()), "--store", str(db), "--quiet")
    original = json.loads(example_conversation_path().read_text(encoding="utf-8"))
    new, edited = json.loads(json.dumps(original[0])), json.loads(json.dumps(original[0]))
    new["sample_id"] = "example-new"
    edited["conversation"]["session_1"][0]["text"] += " (changed)"
    batch = write_json(work / "batch.json", [new, edited])
    rc, _o, err = cli("ingest", str(batch), "--store", str(db), "--quiet")
    with MemoryStore(db, read_only=True) as s:
        names = s.namespaces()
    p.record(rc == 2 and "whole batch was rejected" in err and names == [EXAMPLE_NS], f"namespaces after: {names}")
    return p


def probe_reingest(work: Path, built_copy: Path, times: int) -> Probe:
    p = Probe("re-ingest of the same file changes nothing")
    before = digest(built_copy)
    convs = load_any(str(example_conversation_path()))
    with MemoryStore(built_copy) as s:
        for _ in range(times):
            results = s.ingest_many(convs)
            p.record(all(r.added == 0 for r in results) and digest(built_copy) == before, "a re-ingest added rows")
    return p


# ------------------------------------------------------------------------------ main


# ------------------------------------------------------------------------------ PostgreSQL


class _PgServer:
    """The throwaway PostgreSQL server of the pg-* rows, started on first use (None: no binaries)."""

    def __init__(self) -> None:
        self.server = None
        self.reason = ""

    def get(self):
        if self.server is None and not self.reason:
            sys.path.insert(0, str(REPO / "tests"))
            try:
                import psycopg  # noqa: F401
                from _postgres import PostgresServer, find_bindir
            except ImportError as exc:
                self.reason = f"the postgres extra is not installed ({exc})"
                return None
            bindir = find_bindir()
            if bindir is None:
                self.reason = "no PostgreSQL server binaries (initdb, pg_ctl) found"
                return None
            self.server = PostgresServer(bindir).start()
            self.server.make_template()
        return self.server

    def close(self) -> None:
        if self.server is not None:
            self.server.remove()


def _pg_probe(name: str, pg: _PgServer) -> tuple[Probe, object]:
    p = Probe(name)
    server = pg.get()
    if server is None:
        p.info = f"skipped: {pg.reason}"
    return p, server


def probe_pg_kill_points(work: Path, pg: _PgServer, tries: int, rng: random.Random) -> Probe:
    from memcompile_local.store import open_store
    from memcompile_local.store import check_store as check_any
    from memcompile_local.store.copy import differences

    p, server = _pg_probe("pg: kill -9 during ingest --build, then resume", pg)
    if server is None:
        return p
    data = write_json(work / "pg-kill.json", synthetic_plain("killed", 12, 20, seed=1))
    ref = server.fresh_database()
    t0 = time.monotonic()
    r = cli_process("ingest", str(data), "--build", "--store", ref, "--quiet", *MF)
    duration = time.monotonic() - t0
    if r.returncode != 0:
        p.record(False, f"reference build failed: {r.stderr[-300:]}")
        return p
    for i in range(tries):
        url = server.fresh_database(with_schema=i % 2 == 0)  # half of them start from an empty database
        proc = subprocess.Popen([sys.executable, "-m", "memcompile_local", "ingest", str(data), "--build",
                                 "--store", url, "--quiet", *MF], env=CHILD_ENV, cwd=REPO,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.1, 1.0) * duration)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        again = cli_process("ingest", str(data), "--build", "--store", url, "--quiet", *MF)
        ok = again.returncode == 0
        if ok:
            with open_store(ref, read_only=True) as a, open_store(url, read_only=True) as b:
                diff = differences(a, b, "killed")
            ok = diff == [] and check_any(url).ok
        p.record(ok, f"try {i}: rc={again.returncode} {again.stderr[-200:]}")
        server.drop_database(url)
    return p




def probe_pg_writers(work: Path, pg: _PgServer, rounds: int, width: int) -> Probe:
    from memcompile_local.store import open_store

    p, server = _pg_probe(f"pg: {width} writer processes on one new database", pg)
    if server is None:
        return p
    for r in range(rounds):
        url = server.fresh_database(with_schema=False)
        go = work / f"pg-go-{r}"
        procs = [subprocess.Popen([sys.executable, "-c", _WRITER, url, f"w{k}", str(go)], env=CHILD_ENV,
                                  cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                 for k in range(width)]
        time.sleep(0.3)
        go.touch()
        errs = [pr.communicate(timeout=300)[1] for pr in procs]
        ok = all(pr.returncode == 0 for pr in procs)
        if ok:
            with open_store(url, read_only=True) as s:
                ok = all([pk.content for pk in s.packets(f"w{k}")] ==
                         [f"w{k} batch {b} turn {i}" for b in range(5) for i in range(6)] for k in range(width))
        p.record(ok, f"round {r}: " + " | ".join(e[-200:] for e in errs if e))
        server.drop_database(url)
    return p


_PG_RESTART_WRITER = textwrap.dedent(
    """
    import sys, time
    from memcompile_local.errors import StoreError
    from memcompile_local.store import open_store
    from memcompile_local.types import Conversation, Session, Turn
    db, n = sys.argv[1], int(sys.argv[2])
    s = open_store(db)
    b = 0
    deadline = time.monotonic() + 240  # 300 batches took over 120 s at load 10 on 2 cores
    while b < n and time.monotonic() < deadline:
        turns = tuple(Turn(f"R{b}:{i}", "Ann", f"restart batch {b} turn {i}") for i in range(3))
        try:
            s.ingest(Conversation(namespace="restart", sessions=(Session(1, "s1", "noon", turns),)))
        except StoreError as exc:
            print("FAILED", b, type(exc).__name__, flush=True)
            time.sleep(0.05)
            continue
        print("ACK", b, "", flush=True)
        b += 1
    s.close()
    """
)


def probe_pg_restart(work: Path, pg: _PgServer, tries: int) -> Probe:
    from memcompile_local.store import check_store as check_any
    from memcompile_local.store import open_store

    p, server = _pg_probe("pg: server restarted under a writer", pg)
    if server is None:
        return p
    failed, n = 0, 300
    for t in range(tries):
        url = server.fresh_database() + "&pool_timeout=2"
        proc = subprocess.Popen([sys.executable, "-c", _PG_RESTART_WRITER, url, str(n)], env=CHILD_ENV, cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        seen = []
        for line in proc.stdout:  # restart once the writer is well under way
            seen.append(line)
            if line.startswith(f"ACK {40 + 30 * t} "):
                break
        server.stop("immediate")
        time.sleep(1.0)
        server.start()
        out, err = proc.communicate(timeout=300)
        lines = seen + out.splitlines()
        acked = {int(line.split()[1]) for line in lines if line.startswith("ACK")}
        failed += sum(line.startswith("FAILED") for line in lines)
        ok = proc.returncode == 0 and len(acked) == n
        if ok:
            with open_store(url, read_only=True) as s:
                ids = [pk.packet_id for pk in s.packets("restart")]
            whole = {b for b in range(n) if all(f"R{b}:{i}" in ids for i in range(3))}
            ok = whole == acked and len(ids) == 3 * n and check_any(url).ok
        p.record(ok, f"try {t}: rc={proc.returncode} acked={len(acked)} {err[-300:]}")
        server.drop_database(url.split("&pool_timeout")[0])
    p.info = f"{failed} ingests failed with a StoreError while the server was down, then went through"
    return p


def probe_pg_stale_view(work: Path, pg: _PgServer, tries: int) -> Probe:
    p, server = _pg_probe("pg: view after another process forgot", pg)
    if server is None:
        return p
    for t in range(tries):
        url = server.fresh_database()
        _stale_view_try(p, url, t)
        server.drop_database(url)
    return p


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer tries of each probe")
    ap.add_argument("--seed", type=int, default=15)
    ap.add_argument("--keep", help="keep the work files in this folder")
    ap.add_argument("--only", help="comma-separated probe keys to run (e.g. new-file,beside-server)")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    q = args.quick
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="fault-matrix-"))
    work.mkdir(parents=True, exist_ok=True)
    built = work / "built.sqlite"
    rc, _o, err = cli("ingest", str(example_conversation_path()), "--build", "--store", str(built), "--quiet", *MF)
    if rc != 0:
        print(f"could not build the example store: {err}", file=sys.stderr)
        return 1
    with MemoryStore(built) as s:  # one self-contained file to copy
        s._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    pg = _PgServer()

    def copy_of_built(name: str) -> Path:
        path = work / name
        shutil.copy(built, path)
        return path

    runs: list[tuple[str, Callable[[], Probe]]] = [
        ("kill", lambda: probe_kill_points(work, 4 if q else 15, rng)),
        ("writers", lambda: probe_concurrent_writers(work, 2 if q else 7, 8)),
        ("new-file", lambda: probe_writers_on_new_file(work, 4 if q else 20, 8)),
        ("beside-server", lambda: probe_server_beside_cli(work, 5 if q else 50)),
        ("forget", lambda: probe_forget_under_reader(work, 1 if q else 3)),
        ("stale", lambda: probe_stale_view(work, 1 if q else 2)),
        ("flips", lambda: probe_byte_flips(work, built, 4 if q else 10, rng)),
        ("letter", lambda: probe_changed_letter(work, built)),
        ("malformed", lambda: probe_malformed_files(work, copy_of_built("malformed.sqlite"))),
        ("hostile", lambda: probe_hostile_names(work, copy_of_built("hostile.sqlite"))),
        ("unicode", lambda: probe_unicode(work)),
        ("disk-full", lambda: probe_disk_full(work, 2 if q else 3)),
        ("read-only", lambda: probe_read_only(built)),
        ("foreign", lambda: probe_foreign_and_batches(work)),
        ("reingest", lambda: probe_reingest(work, copy_of_built("reingest.sqlite"), 5 if q else 20)),
        ("pg-kill", lambda: probe_pg_kill_points(work, pg, 4 if q else 12, rng)),
        ("pg-writers", lambda: probe_pg_writers(work, pg, 2 if q else 6, 8)),
        ("pg-restart", lambda: probe_pg_restart(work, pg, 1 if q else 3)),
        ("pg-stale", lambda: probe_pg_stale_view(work, pg, 1 if q else 2)),
    ]
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {key for key, _ in runs}
        if unknown:
            ap.error(f"unknown probe keys {sorted(unknown)}; expected some of {[key for key, _ in runs]}")
        runs = [(key, run) for key, run in runs if key in wanted]
    probes: list[Probe] = []
    for key, run in runs:
        t0 = time.monotonic()
        try:
            probe = run()
        except Exception as exc:  # noqa: BLE001 - a probe that crashes counts as one broken try
            probe = Probe(key)
            probe.record(False, f"probe crashed: {type(exc).__name__}: {exc}")
        probes.append(probe)
        print(f"  {probe.name}: {probe.held}/{probe.tries} held ({time.monotonic() - t0:.0f} s)", file=sys.stderr)
    width = max(len(p.name) for p in probes)
    print(f"| {'probe':{width}} | tries | held | broke |")
    print(f"|{'-' * (width + 2)}|------:|-----:|------:|")
    for probe in probes:
        print(f"| {probe.name:{width}} | {probe.tries:5d} | {probe.held:4d} | {probe.broke:5d} |")
    total = sum(p.tries for p in probes), sum(p.held for p in probes), sum(p.broke for p in probes)
    print(f"| {'total':{width}} | {total[0]:5d} | {total[1]:4d} | {total[2]:5d} |")
    for probe in probes:
        if probe.info:
            print(f"note: {probe.name}: {probe.info}")
    for probe in probes:
        for note in probe.notes[:5]:
            print(f"broke: {probe.name}: {note}")
    pg.close()
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if total[2] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
