"""Batch-import status across ``serve`` replicas on PostgreSQL (issue 22): a job uploaded through
one replica is polled through another, it reads failed (``interrupted``) once the replica that
took it is killed, and a job whose owner runs on another machine is judged by its heartbeat.

Real server processes on 127.0.0.1 over one throwaway database; the job status is a row of the
store (``service_import_jobs``), so the replica that answers needs nothing from the one that
took the upload.
"""

from __future__ import annotations

import json
import time

import httpx
import pytest

from _service_util import MODEL_FREE, start, write_config, write_keys
from memcompile_local.service.auth import namespace_for

pytestmark = pytest.mark.slow

KEY = "mcl_import-replica-key-0123456789"
OTHER_KEY = "mcl_import-replica-other-abcdefgh"


def history(n_turns: int, tag: str) -> bytes:
    return json.dumps([{"speaker": "Ana" if i % 2 else "Ben", "time": f"2023-05-{1 + i % 28:02d} 10:00",
                        "text": f"{tag} note {i}: the kayak trip number {i}"} for i in range(n_turns)]).encode()


@pytest.fixture
def setup(pg_server, tmp_path):
    url = pg_server.fresh_database()
    keys = write_keys(tmp_path / "keys.yaml", {"acme": [(KEY, False)], "globex": [(OTHER_KEY, False)]})
    cfg = write_config(tmp_path / "c.yaml", MODEL_FREE)
    args = ("--keys", str(keys), "--max-import-mb", "8", "--failed-keys-per-minute", "100000")
    servers = []

    def replica(name: str):
        srv = start(url, *args, config=cfg, log=tmp_path / f"{name}.log")
        servers.append(srv)
        return srv

    yield url, replica
    for srv in servers:
        srv.stop()
    pg_server.drop_database(url)


def client(srv, key: str = KEY) -> httpx.Client:
    return httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def poll(c: httpx.Client, user: str, job_id: str, timeout: float = 180) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = c.get(f"/v1/memories/{user}/imports/{job_id}")
        assert r.status_code == 200, r.text
        if r.json()["state"] in ("done", "failed"):
            return r.json()
        time.sleep(0.2)
    raise AssertionError(f"import {job_id} did not finish within {timeout} s")


def test_a_job_taken_by_one_replica_is_followed_through_another(setup):
    _url, replica = setup
    a, b = replica("a"), replica("b")
    with client(a) as ca, client(b) as cb, client(b, OTHER_KEY) as other:
        r = ca.post("/v1/memories/alex/imports", content=history(120, "first"))
        assert r.status_code == 202, r.text
        job = r.json()
        seen = cb.get(f"/v1/memories/alex/imports/{job['id']}")
        assert seen.status_code == 200 and seen.json()["id"] == job["id"]
        assert seen.json()["turns_total"] == 120
        done = poll(cb, "alex", job["id"])
        assert (done["state"], done["turns_written"], done["error"]) == ("done", 120, None)
        assert "owner" not in done and "tenant" not in done
        assert ca.get(f"/v1/memories/alex/imports/{job['id']}").json() == done  # both replicas say the same
        assert cb.get("/v1/memories/alex").json()["turns"] == 120
        hits = cb.post("/v1/memories/alex/search", json={"query": "kayak trip number 77"}).json()["packets"]
        assert any("number 77" in p["text"] for p in hits)
        # only its tenant and user see it, on any replica
        assert other.get(f"/v1/memories/alex/imports/{job['id']}").status_code == 404
        assert cb.get(f"/v1/memories/sam/imports/{job['id']}").status_code == 404


def test_a_job_of_a_killed_replica_reads_interrupted_on_the_others(setup):
    _url, replica = setup
    a, b = replica("a"), replica("b")
    with client(a) as ca, client(b) as cb:
        big = ca.post("/v1/memories/alex/imports", content=history(6000, "big"))
        assert big.status_code == 202, big.text
        # The second job waits behind the first one in A's import thread.
        small = ca.post("/v1/memories/alex/imports", content=history(5, "small"))
        assert small.status_code == 202, small.text
        job_id = small.json()["id"]
        before = cb.get(f"/v1/memories/alex/imports/{job_id}").json()
        assert before["state"] == "queued", before  # still waiting when its replica dies
        a.kill()
        after = cb.get(f"/v1/memories/alex/imports/{job_id}").json()
        assert after["state"] == "failed" and after["error"]["code"] == "interrupted", after
        assert after["conversations_done"] == 0 and after["finished_at"]
        first = cb.get(f"/v1/memories/alex/imports/{big.json()['id']}").json()
        assert first["state"] in ("failed", "done"), first  # no longer running once its owner is gone
        if first["state"] == "failed":
            assert first["error"]["code"] == "interrupted"
        # What the killed replica wrote is whole: the upload is one part, one transaction.
        r = cb.get("/v1/memories/alex")
        assert (r.json()["turns"] if r.status_code == 200 else 0) in (0, 6000)
        # a replica started later says the same
        c = replica("c")
        with client(c) as cc:
            assert cc.get(f"/v1/memories/alex/imports/{job_id}").json()["state"] == "failed"


def test_a_job_of_another_machine_is_judged_by_its_heartbeat(setup):
    import psycopg

    url, replica = setup
    b = replica("b")
    body = {"id": "cd" * 16, "user_id": "kim", "tenant": "acme", "owner": "4242-abcd1234@some-other-host",
            "state": "running", "format": "turns", "turns_total": 10, "turns_written": 4, "turns_skipped": 0,
            "conversations_total": 1, "conversations_done": 0, "built": False, "error": None,
            "created_at": "2026-01-01T00:00:00Z", "started_at": "2026-01-01T00:00:01Z", "finished_at": None}
    ns = namespace_for("acme", "kim")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO service_import_jobs (namespace, job_id, owner, state, body, heartbeat_at) "
                     "VALUES (%s, %s, %s, 'running', %s, extract(epoch from clock_timestamp()))",
                     (ns, body["id"], body["owner"], json.dumps(body)))
    with client(b) as cb:
        fresh = cb.get(f"/v1/memories/kim/imports/{body['id']}").json()
        assert fresh["state"] == "running" and fresh["turns_written"] == 4  # its owner beats: alive
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("UPDATE service_import_jobs SET heartbeat_at = heartbeat_at - 3600 WHERE job_id = %s",
                         (body["id"],))
        stale = cb.get(f"/v1/memories/kim/imports/{body['id']}").json()
        assert stale["state"] == "failed" and stale["error"]["code"] == "interrupted"
        assert stale["turns_written"] == 4
    with psycopg.connect(url, autocommit=True) as conn:
        state, stored = conn.execute("SELECT state, body FROM service_import_jobs WHERE job_id = %s",
                                     (body["id"],)).fetchone()
    assert state == "failed" and json.loads(stored)["error"]["code"] == "interrupted"  # stored so


def test_the_heartbeat_thread_renews_its_own_unfinished_jobs_and_nothing_else(pg_url, monkeypatch):
    # In process, with the beat every 50 ms: a job of this process's owner is renewed only
    # while the importer counts it as its own and unfinished; another owner's row is never touched.
    import psycopg

    from memcompile_local.config import PipelineConfig
    from memcompile_local.service import imports
    from memcompile_local.service.core import MemoryService

    monkeypatch.setattr(imports, "HEARTBEAT_S", 0.05)
    svc = MemoryService(pg_url, PipelineConfig.from_dict(MODEL_FREE))
    try:
        ns = namespace_for("acme", "kim")
        rows = [("ab" * 16, svc.owner), ("ef" * 16, "4242-abcd1234@some-other-host")]
        with psycopg.connect(pg_url, autocommit=True) as conn:
            for job_id, owner in rows:
                conn.execute("INSERT INTO service_import_jobs (namespace, job_id, owner, state, body, heartbeat_at) "
                             "VALUES (%s, %s, %s, 'running', '{}', extract(epoch from clock_timestamp()) - 100)",
                             (ns, job_id, owner))

        def ages() -> dict[str, float]:
            with psycopg.connect(pg_url, autocommit=True) as conn:
                return dict(conn.execute("SELECT job_id, extract(epoch from clock_timestamp()) - heartbeat_at "
                                         "FROM service_import_jobs").fetchall())

        time.sleep(0.4)  # several beats with no job of its own: nothing renewed
        assert all(age >= 100 for age in ages().values())
        with svc.importer._mine_lock:
            svc.importer._mine.add(rows[0][0])
        deadline = time.monotonic() + 10
        while ages()[rows[0][0]] >= 100 and time.monotonic() < deadline:
            time.sleep(0.05)
        now = ages()
        assert now[rows[0][0]] < 5, now  # renewed by the thread
        assert now[rows[1][0]] >= 100, now  # another owner's job keeps its stale heartbeat
    finally:
        svc.close()
