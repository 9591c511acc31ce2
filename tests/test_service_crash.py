"""Durable online ingest under an LLM extractor (scripted backend in the server subprocess).

A burst of appends is cut by SIGKILL while the background build queue is busy; after a restart
every acknowledged turn is stored exactly once, each request is all-or-nothing, and the queue
drains to zero. A full queue answers 429 without writing; a model backend that is down answers
503 on ``answer`` while appends keep being queued, and the queue resumes when it is back.
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from _service_util import running, start, write_config

pytestmark = pytest.mark.slow


def llm_config(path, *, delay_s: float, down_file=None):
    options = {"delay_s": delay_s}
    if down_file is not None:
        options["down_file"] = str(down_file)
    return write_config(path, {
        "extraction": {"extractor": "llm", "intent_source": "rule", "use_intent": True},
        "evidence": {"anchor_selector": "fused", "frontier": "none"},
        "model": {"backend": "_service_backend:SlowExtractionBackend", "embedder": "hash", "options": options},
    })


def wait_for(fn, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def built_and_dequeued(c: httpx.Client, user: str) -> bool:
    """Whether a memory's build has finished: every turn extracted and its queue entry removed.

    ``pending_turns`` reaches 0 as soon as the extractions are saved, while the build still
    embeds and the worker completes the queue entry (and marks the backend up) only after
    that; a check made at ``pending_turns == 0`` alone raced with that tail under load.
    """
    state = c.get(f"/v1/memories/{user}").json()
    return state["pending_turns"] == 0 and not state["build"]["queued"]


def test_sigkill_during_appends_loses_no_acknowledged_turn(tmp_path, store_factory):
    """On both backends: the server is killed while its worker holds a build lease; the next one
    takes the lease over, finishes every build and loses no acknowledged turn."""
    store = store_factory.location
    down = tmp_path / "backend-down"
    down.touch()  # holds the first build back, so the raw-turn search below is deterministic
    slow = llm_config(tmp_path / "slow.yaml", delay_s=0.25, down_file=down)
    users = ["u0", "u1", "u2"]
    acked: list[tuple[str, list[str]]] = []
    sent: list[tuple[str, list[str]]] = []
    lock = threading.Lock()
    srv = start(store, config=slow)
    try:
        c = httpx.Client(base_url=srv.url, timeout=30)
        # A turn not yet extracted is searchable at once from its raw text.
        r = c.post("/v1/memories/u0/turns", json={"speaker": "Ada", "text": "My bike is a green Bianchi", "id": "seed"})
        assert r.status_code == 200 and r.json()["pending_turns"] >= 1 and not r.json()["built"], r.text
        hit = c.post("/v1/memories/u0/search", json={"query": "what bike does Ada have?"}).json()
        assert hit["packets"][0]["id"] == "seed" and hit["pending_turns"] >= 1, hit
        state = c.get("/v1/memories/u0").json()
        assert state["build"]["state"] in ("pending", "failing"), state
        acked.append(("u0", ["seed"]))
        down.unlink()

        stop = threading.Event()

        def burst(user: str) -> None:
            with httpx.Client(base_url=srv.url, timeout=30) as cl:
                for i in range(200):
                    if stop.is_set():
                        return
                    ids = [f"{user}-{i}-a", f"{user}-{i}-b"]
                    body = {"turns": [{"speaker": "Ada", "text": f"note {i} {k} for {user}", "id": x}
                                      for k, x in enumerate(ids)]}
                    with lock:
                        sent.append((user, ids))
                    try:
                        r = cl.post(f"/v1/memories/{user}/turns", json=body)
                    except httpx.HTTPError:
                        return  # the server was killed mid-request: unacknowledged
                    if r.status_code == 200:
                        with lock:
                            acked.append((user, ids))

        threads = [threading.Thread(target=burst, args=(u,)) for u in users]
        for t in threads:
            t.start()
        wait_for(lambda: len(acked) >= 25, 60, "25 acknowledged appends")
        queued = c.get("/healthz").json()["queue"]["turns"]
        srv.kill()  # SIGKILL: no shutdown code runs
        stop.set()
        for t in threads:
            t.join(30)
        c.close()
    finally:
        srv.kill()
    assert queued > 0, f"the kill must hit a busy build queue ({len(acked)} appends acknowledged)"

    fast = llm_config(tmp_path / "fast.yaml", delay_s=0.0)
    with running(store, config=fast) as again:
        c = httpx.Client(base_url=again.url, timeout=30)
        stored = {u: [t["id"] for t in c.get(f"/v1/memories/{u}/turns", params={"limit": 500}).json()["turns"]]
                  for u in users}
        for u, ids in stored.items():
            assert len(ids) == len(set(ids)), f"{u}: a turn is stored twice"
        for u, ids in acked:
            assert set(ids) <= set(stored[u]), f"acknowledged turns {ids} of {u} were lost"
        sent_by_id = {x: ids for _u, ids in sent for x in ids}
        for u, ids in stored.items():
            for x in ids:
                if x != "seed":
                    assert set(sent_by_id[x]) <= set(ids), f"request {sent_by_id[x]} was half written"
        # The queue resumes after the restart and drains.
        wait_for(lambda: all(built_and_dequeued(c, u) for u in users), 120,
                 "the build queue to drain after the restart")
        assert c.get("/healthz").json()["queue"] == {"namespaces": 0, "turns": 0}
        c.close()
    with store_factory() as s:
        for u in users:
            ns = f"t:local:{u}"
            n = s.packet_count(ns)
            extracted = s.stats(ns)["namespaces"][ns]["extracted_packets"]
            assert list(extracted.values()) == [n], extracted


def test_full_queue_is_429_and_a_down_backend_is_503(tmp_path):
    down = tmp_path / "backend-down"
    down.touch()
    cfg = llm_config(tmp_path / "run.yaml", delay_s=0.0, down_file=down)
    with running(tmp_path / "mem.sqlite", "--max-queue-turns", "4", config=cfg) as srv:
        c = httpx.Client(base_url=srv.url, timeout=60)
        r = c.post("/v1/memories/q/turns", json={"turns": [{"speaker": "A", "text": f"queued turn {i}"} for i in range(3)]})
        assert r.status_code == 200 and r.json()["pending_turns"] == 3
        r = c.post("/v1/memories/q/turns", json={"turns": [{"speaker": "A", "text": f"extra {i}"} for i in range(2)]})
        assert r.status_code == 429 and r.json()["error"]["code"] == "queue_full" and "Retry-After" in r.headers
        assert c.get("/v1/memories/q").json()["turns"] == 3
        # Appends were accepted while the backend is down; answering needs it now: 503.
        r = c.post("/v1/memories/q/answer", json={"query": "what was queued?"})
        assert r.status_code == 503 and r.json()["error"]["code"] == "backend_unavailable", r.text
        # Search still works from the raw turns.
        assert c.post("/v1/memories/q/search", json={"query": "queued turn"}).json()["pending_turns"] == 3
        failing = wait_for(lambda: c.get("/v1/memories/q").json()["build"]["last_error"], 30, "a failed build")
        assert "down" in failing
        assert c.get("/healthz").json()["backend"] == "down"
        down.unlink()
        wait_for(lambda: built_and_dequeued(c, "q"), 60, "the retried build")
        assert c.get("/healthz").json()["backend"] == "ok"
        r = c.post("/v1/memories/q/answer", json={"query": "what was queued?"})
        assert r.status_code == 200 and r.json()["answer"] == "a scripted answer"
        assert c.post("/v1/memories/q/turns", json={"speaker": "A", "text": "room again"}).status_code == 200
        assert "memcompile_build_queue_turns" in c.get("/metrics").text
        c.close()
