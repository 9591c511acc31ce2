"""The durable build queue (store/queue.py, store/postgres/queue.py): coalescing, leases across
connections, reaping, sessions, on both backends (``store_factory``)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys

from memcompile_local.cli import main as cli_main
from memcompile_local.service.core import owner_alive
from memcompile_local.store import MemoryStore
from memcompile_local.store import check_store
from memcompile_local.types import Conversation, Session, Turn


def build_queue(store: MemoryStore) -> MemoryStore:
    """The store as its own build queue (``BuildLeases``), with the queue's tables created."""
    store.open_build_queue()
    return store


def two_queues(store_factory):
    """Two connections to one store, each its own build queue."""
    return build_queue(store_factory()), build_queue(store_factory())


def test_enqueue_coalesces_and_a_turn_appended_during_a_build_stays_queued(store_factory):
    q, _ = two_queues(store_factory)
    assert q.enqueue("ns", 2) and q.enqueue("ns", 3)
    assert q.depth() == {"namespaces": 1, "turns": 5}
    job = q.claim("w1")
    assert (job.namespace, job.pending_turns) == ("ns", 5)
    assert q.claim("w2") is None  # leased
    q.enqueue("ns", 1)  # appended while the build runs
    assert not q.complete(job, "w1")
    assert q.entry("ns")["pending_turns"] == 1
    job = q.claim("w2")
    assert q.complete(job, "w2") and q.entry("ns") is None and q.depth()["turns"] == 0


def test_limit_refuses_without_writing(store_factory):
    q, _ = two_queues(store_factory)
    assert q.enqueue("a", 3, limit=4)
    assert not q.enqueue("b", 2, limit=4)
    assert q.depth() == {"namespaces": 1, "turns": 3}


def test_leases_exclude_other_connections_and_failed_entries_back_off(store_factory):
    q1, q2 = two_queues(store_factory)
    assert q1.acquire("ns", "p1")
    assert not q2.acquire("ns", "p2")
    q1.release("ns", "p1")
    assert q2.acquire("ns", "p2")
    q2.release("ns", "p2")
    q1.enqueue("ns", 1)
    job = q2.claim("p2")
    q2.fail(job, "p2", "backend down", retry_in_s=60)
    assert q1.claim("p1") is None  # not due yet
    assert q1.entry("ns")["attempts"] == 1 and q1.entry("ns")["last_error"] == "backend down"


def test_reap_drops_only_leases_of_dead_processes(store_factory):
    q, _ = two_queues(store_factory)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert q.acquire("a", f"{dead.pid}-deadbeef", lease_s=600)
    assert q.acquire("b", f"{os.getpid()}-live", lease_s=600)
    assert not owner_alive(f"{dead.pid}-deadbeef") and owner_alive(f"{os.getpid()}-x")
    assert q.reap(owner_alive) == 1
    assert q.acquire("a", "someone-else")  # free again
    assert not q.acquire("b", "someone-else")


def test_reconcile_enqueues_only_missing_entries(store_factory):
    q, _ = two_queues(store_factory)
    q.enqueue("a", 1)
    assert q.reconcile([("a", 5), ("b", 2), ("c", 0)]) == 1
    assert q.entry("a")["pending_turns"] == 1 and q.entry("b")["pending_turns"] == 2 and q.entry("c") is None


def test_session_indexes_are_shared_across_connections_and_follow_stored_packets(store_factory):
    q1, q2 = two_queues(store_factory)
    q1.ingest(Conversation("ns", (Session(4, "old", "t", (Turn("x", "A", "hi"),)),)))
    assert q1.session_indexes("ns", ["s1", "s2", "s1"]) == {"s1": 5, "s2": 6}
    assert q2.session_indexes("ns", ["s3", "s2", "old"]) == {"s3": 7, "s2": 6, "old": 4}
    assert q1.forget_build_state("ns") == 4
    assert q1.session_indexes("ns", ["s9"]) == {"s9": 5}  # packets of "old" are still stored


def test_store_check_accepts_the_service_tables(store_factory):
    """A store the service wrote to (queue entry, lease, session index) passes `check`: the
    three service_* tables are the service's own, not damage or a foreign file."""
    store = store_factory()
    q = build_queue(store)
    assert q.enqueue("ns", 2) and q.acquire("other", "w1")
    q.session_indexes("ns", ["s1", "s2"])
    store.close()
    report = check_store(store_factory.location)
    assert report.ok and report.problems == []
    assert cli_main(["check", "--store", store_factory.location]) == 0
    if store_factory.backend != "sqlite":
        return
    with sqlite3.connect(store_factory.location) as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE name LIKE 'service_%'")}
    assert names == {"service_build_queue", "service_build_leases", "service_sessions"}


def test_each_store_is_its_own_build_queue(store_factory):
    from memcompile_local.store.base import BuildLeases, RequestCache, Store

    store = store_factory()
    assert isinstance(store, Store) and isinstance(store, RequestCache) and isinstance(store, BuildLeases)
    store.close()
