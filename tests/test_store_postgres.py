"""What the PostgreSQL store does beyond the suite both backends share (tests/test_store*.py):
its schema's version, concurrent openers and writers, the password kept out of messages, the
missing extra, the row check, leases that expire, SKIP LOCKED claims, and the NOTIFY that
tells other processes a namespace changed."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from memcompile_local.cli import main
from memcompile_local.errors import MissingExtraError, StoreError
from memcompile_local.store import check_store, open_store
from memcompile_local.types import Conversation, Session, Turn

from _threads import run_threads

REPO = Path(__file__).resolve().parents[1]


def turns(ns: str, texts: list[str], session: int = 1, prefix: str = "D") -> Conversation:
    ts = tuple(Turn(packet_id=f"{prefix}{session}:{i + 1}", speaker="Ann", text=t) for i, t in enumerate(texts))
    return Conversation(namespace=ns, sessions=(Session(index=session, session_id=f"s{session}", time="noon",
                                                        turns=ts),))


def raw(url: str, *statements: str) -> list:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        out = []
        for s in statements:
            cur = conn.execute(s)
            out.append(cur.fetchall() if cur.description else None)
        return out


def test_a_newer_schema_is_refused_and_the_message_has_no_password(pg_url):
    raw(pg_url, "INSERT INTO memcompile_schema (version, applied_at) VALUES (99, 0)")
    with_password = pg_url.replace("memcompile@", "memcompile:hunter2@")
    with pytest.raises(StoreError, match="newer than this code") as info:
        open_store(with_password)
    assert "hunter2" not in str(info.value) and "memcompile:***@" in str(info.value)


def test_an_unreachable_server_is_a_store_error_without_the_password(tmp_path):
    url = f"postgresql://someone:s3cret-pw@/nodb?host={tmp_path}&port=1"
    with pytest.raises(StoreError, match="cannot connect") as info:
        open_store(url)
    assert "s3cret-pw" not in str(info.value)


def test_a_missing_driver_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'memcompile-local\[postgres\]'"):
        open_store("postgresql://u@localhost/db")


def test_concurrent_openers_of_an_empty_database_create_the_schema_once(pg_server):
    url = pg_server.fresh_database(with_schema=False)
    stores = []
    lock = threading.Lock()

    def open_one(i: int) -> None:
        s = open_store(url)
        with lock:
            stores.append(s)

    assert run_threads(open_one, 6) == []
    assert raw(url, "SELECT version FROM memcompile_schema ORDER BY version")[0] == [(1,), (2,), (3,)]
    for s in stores:
        s.close()
    with pytest.raises(StoreError, match="holds no store"):
        open_store(pg_server.fresh_database(with_schema=False), create=False)


def test_a_database_with_foreign_tables_of_our_names_is_refused(pg_server):
    url = pg_server.fresh_database(with_schema=False)
    raw(url, "CREATE TABLE packets (x int)")
    with pytest.raises(StoreError, match="no memcompile_schema"):
        open_store(url)


def test_concurrent_appends_of_one_namespace_on_two_connections_lose_and_repeat_nothing(pg_url):
    a, b = open_store(pg_url), open_store(pg_url)
    try:
        def work(t: int) -> None:
            store = (a, b)[t % 2]
            for i in range(15):
                store.ingest(turns("u", [f"thread {t} turn {i}"], session=1, prefix=f"T{t}-{i}-"))

        assert run_threads(work, 4) == []
        ps = a.packets("u")
        assert len(ps) == 60 and sorted(p.ordinal for p in ps) == list(range(60))
        assert len({p.packet_id for p in ps}) == 60
    finally:
        a.close()
        b.close()


def test_forget_waits_a_bounded_time_for_a_writer_and_then_deletes_nothing(pg_url):
    from memcompile_local.store.postgres.connection import NAMESPACE_LOCK_CLASS, namespace_lock_key
    import psycopg

    with open_store(pg_url) as s:
        s.ingest(turns("victim", ["secret words"]))
        with psycopg.connect(pg_url) as holder:  # a transaction of another server writing the namespace
            holder.execute("SELECT pg_advisory_xact_lock(%s, %s)", (NAMESPACE_LOCK_CLASS, namespace_lock_key("victim")))
            start = time.monotonic()
            with pytest.raises(StoreError, match="nothing was deleted"):
                s.forget("victim", wait_s=0.3)
            assert time.monotonic() - start < 5
        assert s.packet_count("victim") == 1
        result = s.forget("victim")
        assert result["packets"] == 1 and result.scrub_complete and not s.scrub_pending()
        assert raw(pg_url, "SELECT COUNT(*) FROM packets WHERE content = 'secret words'")[0] == [(0,)]


def test_check_names_a_row_changed_behind_the_stores_back(pg_url, capsys):
    with open_store(pg_url) as s:
        s.ingest(turns("u", ["the original words", "more"]))
    assert check_store(pg_url).ok
    raw(pg_url, "UPDATE packets SET content = 'edited words' WHERE packet_id = 'D1:1'",
        "UPDATE meta SET value = 'x'", "INSERT INTO request_cache VALUES ('k', NULL, 's', 'not json', '{}', 0, 0, 0)")
    report = check_store(pg_url)
    assert not report.ok
    text = "\n".join(report.lines())
    assert "packets" in text and "'D1:1'" in text and "sha256" in text and "request_cache" in text
    assert main(["check", "--store", pg_url]) == 1
    with open_store(pg_url) as s:
        with pytest.raises(StoreError, match="sha256"):
            s.packets("u")


def test_leases_expire_and_claims_skip_locked_rows(pg_url):
    a, b = open_store(pg_url), open_store(pg_url)
    try:
        assert a.acquire("ns", "w1", lease_s=0.3)
        assert not b.acquire("ns", "w2") and b.held_by_other("ns", "w2")
        time.sleep(0.5)  # w1 died: its lease ran out
        assert not b.held_by_other("ns", "w2") and b.acquire("ns", "w2")
        b.release("ns", "w2")
        for ns in ("n1", "n2", "n3"):
            a.enqueue(ns, 1)
        got: list = []

        def claim(t: int) -> None:
            job = (a, b)[t % 2].claim(f"worker{t}")
            if job is not None:
                got.append((job, f"worker{t}"))

        assert run_threads(claim, 3) == []
        names = [job.namespace for job, _ in got]
        assert len(names) == len(set(names)) == 3  # each worker its own entry, none waited
        for job, owner in got:
            assert a.complete(job, owner)
        # A worker killed while holding a claim: its lease expires and another finishes the entry.
        a.enqueue("n4", 2)
        assert a.claim("mortal", lease_s=0.2).namespace == "n4"
        assert b.claim("heir") is None
        time.sleep(0.4)
        taken = b.claim("heir")
        assert taken is not None and taken.namespace == "n4"
        assert b.complete(taken, "heir") and b.entry("n4") is None
    finally:
        a.close()
        b.close()


_WRITER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, sys.argv[2])
    from memcompile_local.store import open_store
    from memcompile_local.types import Conversation, Session, Turn
    with open_store(sys.argv[1]) as s:
        if sys.argv[3] == "forget":
            s.forget("carol")
        else:
            s.ingest(Conversation("carol", (Session(1, "s1", "t", (Turn("D1:9", "Carol", "from another process"),)),)))
    """
)


def test_a_write_in_another_process_is_heard_at_once(pg_url):
    heard: list[tuple[str, int]] = []
    with open_store(pg_url) as s:
        s.ingest(turns("carol", ["hello"]))
        listener = s.listen(lambda ns, gen: heard.append((ns, gen)))
        try:
            assert listener.connected.wait(10)
            before = s.generation("carol")
            for action in ("add", "forget"):
                subprocess.run([sys.executable, "-c", _WRITER, pg_url, str(REPO), action], check=True, timeout=120)
                deadline = time.monotonic() + 10
                while not any(gen > before for _, gen in heard) and time.monotonic() < deadline:
                    time.sleep(0.02)
                assert heard and heard[-1][0] == "carol" and heard[-1][1] > before, heard
                before = heard[-1][1]
            assert s.generation("carol") >= before and s.packet_count("carol") == 0
        finally:
            listener.stop()


_SERVICE_SEARCHER = textwrap.dedent(
    """
    import json, sys, time
    sys.path.insert(0, sys.argv[2])
    from memcompile_local.adapters.scripted import HashEmbedder
    from memcompile_local.config import PipelineConfig
    from memcompile_local.pipeline.presets import apply_preset
    from memcompile_local.service.core import MemoryService

    cfg = apply_preset("model-free", PipelineConfig()).replace(model={"embedder": "hash"})
    svc = MemoryService(sys.argv[1], cfg, embedder=HashEmbedder(dim=32))
    ns = svc.namespace("local", "carol")
    svc.memory.view(ns)
    print("HELD", svc.memory.views.held(ns, svc.memory.spec) is not None, flush=True)
    sys.stdin.readline()  # the other process forgets carol now
    deadline = time.time() + 10
    while svc.memory.views.held(ns, svc.memory.spec) is not None and time.time() < deadline:
        time.sleep(0.02)
    print("DROPPED", svc.memory.views.held(ns, svc.memory.spec) is None, flush=True)
    svc.close()
    """
)


def test_a_server_drops_its_view_when_another_process_forgets_the_user(pg_url):
    from memcompile_local.service.auth import namespace_for

    ns = namespace_for("local", "carol")
    with open_store(pg_url) as s:
        s.ingest(turns(ns, ["I have a parrot called Kiwi.", "Kiwi talks a lot."]))
    proc = subprocess.Popen([sys.executable, "-c", _SERVICE_SEARCHER, pg_url, str(REPO)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "HELD True"
        time.sleep(0.5)  # the listener connects in the background
        with open_store(pg_url) as s:
            s.forget(ns)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "DROPPED True"
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)


def test_the_cli_runs_on_a_database_url_and_from_memcompile_store(pg_url, monkeypatch, capsys):
    from memcompile_local.data import example_conversation_path

    mf = ["--preset", "model-free", "--embedder", "hash", "--quiet"]
    assert main(["ingest", str(example_conversation_path()), "--build", "--store", pg_url, *mf]) == 0
    monkeypatch.setenv("MEMCOMPILE_STORE", pg_url)
    capsys.readouterr()
    assert main(["stats", "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["namespaces"]["example-1"]["packets"] == 40
    assert main(["ask", "example-1", "What is the name of Nadia's cat?", "--no-answer", *mf]) == 0
    assert "Pepper" in capsys.readouterr().out
    assert main(["check"]) == 0
    assert main(["forget", "example-1"]) == 0
    assert main(["scrub"]) == 0
    capsys.readouterr()
    assert main(["stats", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["namespaces"] == {}


def test_the_driver_is_imported_only_for_a_database_url():
    code = ("import json, sys; import memcompile_local, memcompile_local.store as s; "
            "s.open_store(':memory:').close(); s.describe_location('postgresql://u:p@h/db'); "
            "print(json.dumps([m for m in ('psycopg', 'psycopg_pool') if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=str(REPO))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_commits_wait_for_the_wal_even_on_a_server_set_otherwise(pg_url):
    raw(pg_url, "ALTER SYSTEM SET synchronous_commit = off", "SELECT pg_reload_conf()")
    try:
        with open_store(pg_url + "&pool_size=2") as s:
            assert s._query("SHOW synchronous_commit") == [("on",)]
    finally:
        raw(pg_url, "ALTER SYSTEM RESET synchronous_commit", "SELECT pg_reload_conf()")


def test_a_version_1_store_gains_the_import_job_table_in_place(pg_url):
    store = open_store(pg_url)
    store.ingest(turns("ns", ["kept through the upgrade"]))
    store.close()
    # What version 1 of the schema was: everything but the import job table (and the change log).
    raw(pg_url, "DROP TABLE service_import_jobs", "DROP FUNCTION memcompile_check(boolean, text)",
        "DROP TABLE changes", "DELETE FROM memcompile_schema WHERE version >= 2")
    with pytest.raises(StoreError, match="schema version 3 .found 1.; open it once with a writing command"):
        open_store(pg_url, read_only=True)
    assert raw(pg_url, "SELECT MAX(version) FROM memcompile_schema")[0] == [(1,)]  # the read changed nothing
    store = open_store(pg_url)
    try:
        assert [p.content for p in store.packets("ns")] == ["kept through the upgrade"]
        store.put_import_job("ns", "ab" * 16, "1-x@h", "running", '{"state": "running"}')
        assert store.import_job("ns", "ab" * 16)[0] == '{"state": "running"}'
    finally:
        store.close()
    assert raw(pg_url, "SELECT version FROM memcompile_schema ORDER BY version")[0] == [(1,), (2,), (3,)]
    assert check_store(pg_url).ok


def test_import_job_rows_go_with_the_namespace_s_service_state(pg_url):
    store = open_store(pg_url)
    try:
        store.put_import_job("a", "ab" * 16, "1-x@h", "running", "{}")
        store.put_import_job("b", "cd" * 16, "1-x@h", "done", "{}")
        assert [ns for ns, _, _ in store.unfinished_import_jobs()] == ["a"]
        assert store.touch_import_jobs("1-x@h") == 1  # only unfinished jobs beat
        assert store.end_import_job("a", "ab" * 16, "1-x@h", "failed", '{"state": "failed"}')
        assert not store.end_import_job("a", "ab" * 16, "1-x@h", "failed", "{}")  # ended already
        assert store.forget_build_state("a") >= 1
        assert store.import_job("a", "ab" * 16) is None and store.import_job("b", "cd" * 16) is not None
    finally:
        store.close()
