"""Batch imports over real HTTP (issue 24: a batch import job for large histories).

A keyed ``memcompile-local serve`` subprocess (model-free, hash embedder): an upload in each
format the CLI's ingest reads, and a JSON list of turns past the append limit, is answered 202
with a job whose status resource shows the progress and the outcome; each conversation is
all-or-nothing; a malformed upload is a 400 and queues nothing; uploads are bounded; a job is
only visible to its own tenant and user; the status outlasts a server restart.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import pytest

from _service_util import MODEL_FREE, TESTS, running, write_config, write_keys
from memcompile_local.service.client import AsyncMemoryClient, MemoryClient, ServiceRequestError

pytestmark = pytest.mark.slow

KEY_A = "mcl_import-key-of-acme-0123456789"
KEY_B = "mcl_import-key-of-globex-abcdefgh"
FIXTURES = TESTS / "fixtures"


def plain_history(n_sessions: int, per_session: int) -> dict:
    return {"sessions": [{"time": f"2023-{1 + s // 28:02d}-{1 + s % 28:02d} 10:00", "turns": [
        {"speaker": "Ana" if t % 2 else "Ben", "text": f"day {s} note {t}: the kayak trip number {s * 100 + t}",
         "metadata": {"day": s}} for t in range(per_session)]} for s in range(n_sessions)]}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("imports")
    keys = write_keys(d / "keys.yaml", {"acme": [(KEY_A, False)], "globex": [(KEY_B, False)]})
    cfg = write_config(d / "c.yaml", MODEL_FREE)
    args = ("--keys", str(keys), "--max-import-mb", "1", "--max-turns-per-request", "50",
            "--failed-keys-per-minute", "100000")
    with running(d / "mem.sqlite", *args, config=cfg) as srv:
        srv.store, srv.args, srv.cfg = d / "mem.sqlite", args, cfg
        yield srv


def client(server, key=KEY_A) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def upload(c: httpx.Client, user: str, content: bytes, **params) -> dict:
    r = c.post(f"/v1/memories/{user}/imports", content=content, params=params)
    assert r.status_code == 202, r.text
    job = r.json()
    assert r.headers["location"] == f"/v1/memories/{user}/imports/{job['id']}"
    assert job["state"] in ("queued", "running") and job["turns_written"] == 0
    return job


def wait(c: httpx.Client, user: str, job_id: str, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        r = c.get(f"/v1/memories/{user}/imports/{job_id}")
        assert r.status_code == 200, r.text
        job = r.json()
        seen.append(job["state"])
        if job["state"] in ("done", "failed"):
            job["seen"] = seen
            return job
        time.sleep(0.1)
    raise AssertionError(f"import {job_id} did not finish: {seen[-5:]}")


def test_a_plain_history_is_imported_in_the_background_and_searchable(server):
    doc = plain_history(40, 30)  # 1,200 turns, past any append's turn limit
    with client(server) as c:
        job = upload(c, "big", json.dumps(doc).encode())
        assert job["turns_total"] == 1200 and job["conversations_total"] == 1
        done = wait(c, "big", job["id"])
        assert done["state"] == "done" and done["error"] is None, done
        assert (done["turns_written"], done["turns_skipped"], done["conversations_done"]) == (1200, 0, 1)
        assert done["built"] and done["finished_at"]
        assert c.get("/v1/memories/big").json()["turns"] == 1200
        hits = c.post("/v1/memories/big/search", json={"query": "kayak trip number 3917", "k": 3}).json()["packets"]
        assert hits[0]["text"].endswith("number 3917") and hits[0]["metadata"] == {"day": 39}
        # The same file again adds nothing (the ids it left out are stable, as for ingest).
        again = wait(c, "big", upload(c, "big", json.dumps(doc).encode())["id"])
        assert (again["state"], again["turns_written"], again["turns_skipped"]) == ("done", 0, 1200)


def test_jsonl_and_a_list_of_turns_past_the_append_limit(server):
    lines = [json.dumps({"time": "2024-02-01", "turns": [{"speaker": "Eli", "text": f"jsonl line {i}"}]})
             for i in range(5)]
    turns = [{"speaker": "Eli", "text": f"listed turn {i}", "agent_id": "bot", "time": "2024-03-01 10:00"}
             for i in range(120)]
    with client(server) as c:
        assert c.post("/v1/memories/eli/turns", json={"turns": turns}).status_code == 413  # the append limit
        done = wait(c, "eli", upload(c, "eli", "\n".join(lines).encode())["id"])
        assert (done["state"], done["turns_written"]) == ("done", 5)
        done = wait(c, "eli", upload(c, "eli", json.dumps(turns).encode())["id"])
        assert (done["state"], done["turns_written"], done["format"]) == ("done", 120, "auto")
        page = c.get("/v1/memories/eli/turns", params={"agent_id": "bot", "limit": 500}).json()
        assert page["total"] == 120


def test_benchmark_files_import_and_each_conversation_is_all_or_nothing(server):
    locomo = (FIXTURES / "locomo_mini.json").read_bytes()  # two conversations, both with ids D1:1, ...
    with client(server) as c:
        job = wait(c, "loco", upload(c, "loco", locomo)["id"])
        # The first is written whole; the second names the same ids with other words: it fails
        # as a whole (409) and nothing of it is written.
        assert job["state"] == "failed" and job["conversations_done"] == 1 and job["turns_written"] == 36
        assert job["error"]["status"] == 409 and job["error"]["code"] == "conflict"
        assert c.get("/v1/memories/loco").json()["turns"] == 36
        one = wait(c, "loco2", upload(c, "loco2", locomo, conversation=1)["id"])
        assert (one["state"], one["turns_written"]) == ("done", 24)
        lme = wait(c, "lme", upload(c, "lme", (FIXTURES / "longmemeval_mini.json").read_bytes(),
                                    format="longmemeval", conversation=0)["id"])
        assert (lme["state"], lme["turns_written"]) == ("done", 10)


def test_a_turn_that_conflicts_fails_the_import_and_writes_nothing_of_it(server):
    with client(server) as c:
        assert c.post("/v1/memories/clash/turns", json={"speaker": "Ada", "text": "the original",
                                                         "id": "x1"}).status_code == 200
        doc = {"sessions": [{"time": "2024-01-01", "id": "default", "turns": [
            {"speaker": "Ada", "text": f"new turn {i}"} for i in range(10)] + [
            {"speaker": "Ada", "text": "other words", "id": "x1"}]}]}
        job = wait(c, "clash", upload(c, "clash", json.dumps(doc).encode())["id"])
        assert job["state"] == "failed" and job["turns_written"] == 0 and job["error"]["status"] == 409
        assert c.get("/v1/memories/clash").json()["turns"] == 1


@pytest.mark.parametrize("content, params, status, field", [
    (b'{"sessions": [{"time": "2024-01-01", "turns": [{"speaker": "A"}]}]}', {}, 400, "$.sessions[0].turns[0].text"),
    (b"[not json", {"format": "turns"}, 400, "$"),
    (b'[{"speaker": "A", "text": "x", "metadata": 3}]', {}, 400, "turns[0].metadata"),
    (b'{"sessions": []}', {"format": "csv"}, 400, "format"),
    ((FIXTURES / "locomo_mini.json").read_bytes(), {"conversation": 5}, 400, "conversation"),
    (b'[{"speaker": "A", "text": "x"}]', {"colour": "red"}, 400, "colour"),
])
def test_a_malformed_upload_is_a_400_and_queues_nothing(server, content, params, status, field):
    with client(server) as c:
        r = c.post("/v1/memories/bad/imports", content=content, params=params)
        assert r.status_code == status, r.text
        assert r.json()["error"]["field"] == field, r.json()
        assert "upload.json" not in r.text and "/tmp" not in r.text  # no server path in the message
        assert c.get("/v1/memories/bad").status_code == 404


def test_uploads_are_bounded_and_jobs_belong_to_their_tenant_and_user(server):
    big = json.dumps(plain_history(1, 1)).encode() + b" " * (1 << 20)
    with client(server) as a, client(server, KEY_B) as b:
        r = a.post("/v1/memories/huge/imports", content=big)
        assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"

        def chunks():
            for _ in range(20):
                yield b" " * 100_000
        r = a.post("/v1/memories/huge/imports", content=chunks())  # chunked: no content-length
        assert r.status_code == 413
        job = wait(a, "mine", upload(a, "mine", json.dumps(plain_history(2, 3)).encode())["id"])
        assert b.get(f"/v1/memories/mine/imports/{job['id']}").status_code == 404  # another tenant
        assert a.get(f"/v1/memories/other/imports/{job['id']}").status_code == 404  # another user
        assert a.get("/v1/memories/mine/imports/not-a-job-id").status_code == 404
        assert httpx.get(f"{server.url}/v1/memories/mine/imports/{job['id']}").status_code == 401


def test_both_python_clients_import_and_wait(server, tmp_path):
    path = tmp_path / "history.json"
    path.write_text(json.dumps(plain_history(3, 4)), encoding="utf-8")
    with MemoryClient(server.url, api_key=KEY_A) as mem:
        job = mem.import_history("pyimp", path)
        done = mem.wait_import("pyimp", job["id"], poll_s=0.1)
        assert (done["state"], done["turns_written"]) == ("done", 12)
        with pytest.raises(ServiceRequestError) as e:
            mem.import_history("pyimp", b"{}", format="nope")
        assert e.value.field == "format"

    async def go():
        async with AsyncMemoryClient(server.url, api_key=KEY_A) as mem:
            job = await mem.import_history("pyimp2", [{"speaker": "Zo", "text": f"async turn {i}"} for i in range(7)])
            return await mem.wait_import("pyimp2", job["id"], poll_s=0.1)
    done = asyncio.run(go())
    assert (done["state"], done["turns_written"]) == ("done", 7)


def test_a_job_status_outlasts_a_restart(server, tmp_path):
    store = tmp_path / "m.sqlite"
    with running(store, *server.args, config=server.cfg) as srv:
        with client(srv) as c:
            job = wait(c, "keep", upload(c, "keep", json.dumps(plain_history(2, 2)).encode())["id"])
    assert Path(f"{store}.imports").is_dir()
    with running(store, *server.args, config=server.cfg) as srv:
        with client(srv) as c:
            again = c.get(f"/v1/memories/keep/imports/{job['id']}").json()
            assert again["state"] == "done" and again["turns_written"] == 4
            assert c.get("/v1/memories/keep").json()["turns"] == 4


def test_a_job_left_running_by_a_dead_process_reads_failed_after_a_restart(server, tmp_path):
    store = tmp_path / "m.sqlite"
    folder = Path(f"{store}.imports")
    folder.mkdir()
    job_id = "ab" * 16
    # What a server killed mid-import leaves: a running job owned by a process that is gone.
    (folder / f"{job_id}.json").write_text(json.dumps({
        "id": job_id, "user_id": "gone", "tenant": "acme", "owner": "999999999-dead", "state": "running",
        "format": "auto", "turns_total": 10, "turns_written": 0, "turns_skipped": 0, "conversations_total": 2,
        "conversations_done": 1, "built": False, "error": None, "created_at": "2026-01-01T00:00:00Z",
        "started_at": "2026-01-01T00:00:01Z", "finished_at": None}), encoding="utf-8")
    with running(store, *server.args, config=server.cfg) as srv:
        with client(srv) as c:
            job = c.get(f"/v1/memories/gone/imports/{job_id}").json()
    assert job["state"] == "failed" and job["error"]["code"] == "interrupted" and job["conversations_done"] == 1
    assert "tenant" not in job and "owner" not in job
