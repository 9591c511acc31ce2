"""Faults of a PostgreSQL-backed service: a server restarted under load, a pool with no free
connection. Requests fail with a typed 503 while the database is away and succeed again by
themselves once it is back, and nothing acknowledged is lost."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from memcompile_local.errors import StoreError
from memcompile_local.service.errors import from_exception
from memcompile_local.store import check_store, open_store

from _service_util import MODEL_FREE, start, write_config, write_keys

KEY = "mcl_pg-fault-key-000000000000"


def test_a_pool_with_no_free_connection_fails_fast_with_a_503_error(pg_url):
    store = open_store(pg_url + "&pool_size=1&pool_timeout=0.3")
    try:
        entered, release = threading.Event(), threading.Event()

        def hold() -> None:
            with store.transaction():
                store.packet_count("u")
                entered.set()
                release.wait(10)

        holder = threading.Thread(target=hold)
        holder.start()
        assert entered.wait(10)
        start_t = time.monotonic()
        with pytest.raises(StoreError, match="no database connection came free") as info:
            store.packet_count("v")
        assert time.monotonic() - start_t < 3
        err = from_exception(info.value)
        assert (err.status, err.code) == (503, "store_unavailable")
        release.set()
        holder.join(10)
        assert store.packet_count("v") == 0  # the connection is free again
    finally:
        store.close()


@pytest.mark.slow
def test_a_database_restarted_under_load_gives_503_then_recovers_and_loses_nothing(tmp_path):
    from _postgres import PostgresServer, find_bindir

    bindir = find_bindir()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries")
    pg = PostgresServer(bindir).start()
    try:
        pg.make_template()
        url = pg.fresh_database() + "&pool_timeout=2"
        keys = write_keys(tmp_path / "keys.yaml", {"acme": [(KEY, False)]})
        srv = start(url, "--keys", str(keys), config=write_config(tmp_path / "run.yaml", MODEL_FREE),
                    log=tmp_path / "serve.log")
        c = httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
        acked: list[list[str]] = []
        statuses: list[tuple[float, int, str]] = []
        stop = threading.Event()

        def writer() -> None:
            n = 0
            while not stop.is_set():
                batch = [f"Restart note {n} part {i} (ref {n}.{i})" for i in range(2)]
                n += 1
                t0 = time.monotonic()
                r = c.post("/v1/memories/pat/turns", json={"turns": [{"speaker": "Pat", "text": t} for t in batch]})
                code = r.json().get("error", {}).get("code", "") if r.status_code != 200 else ""
                statuses.append((time.monotonic() - t0, r.status_code, code))
                if r.status_code == 200:
                    acked.append(batch)
                else:
                    time.sleep(0.05)

        thread = threading.Thread(target=writer)
        thread.start()
        try:
            while len(acked) < 10:
                time.sleep(0.05)
            pg.stop("immediate")  # the database goes away mid-load
            down_at = len(statuses)
            time.sleep(3)
            during = statuses[down_at:]
            assert c.get("/healthz").status_code == 503
            pg.start()
            back_at = len(acked)
            deadline = time.monotonic() + 60
            while len(acked) < back_at + 10 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert len(acked) >= back_at + 10, f"no recovery: {statuses[-5:]}\n{srv.log_text()[-3000:]}"
            assert c.get("/healthz").status_code == 200
        finally:
            stop.set()
            thread.join(60)
        failures = [s for s in during if s[1] != 200]
        assert failures, "requests kept succeeding while the database was down"
        assert {(s[1], s[2]) for s in failures} == {(503, "store_unavailable")}, failures
        assert max(s[0] for s in statuses) < 20  # every request answered; none hung
        assert {s[1] for s in statuses} <= {200, 503}
        stored: list[str] = []
        offset = 0
        while offset is not None:
            r = c.get("/v1/memories/pat/turns", params={"limit": 500, "offset": offset})
            assert r.status_code == 200, r.text
            stored += [t["text"] for t in r.json()["turns"]]
            offset = r.json().get("next_offset")
        have = set(stored)
        assert all(t in have for batch in acked for t in batch)  # nothing acknowledged was lost
        for n in range(len(statuses)):  # and no batch is half stored
            parts = {f"Restart note {n} part {i} (ref {n}.{i})" in have for i in range(2)}
            assert len(parts) == 1, n
        assert len(stored) == len(have)
        c.close()
        srv.stop()
        assert check_store(url).ok
    finally:
        pg.remove()


@pytest.mark.slow
def test_a_server_whose_pool_is_taken_answers_503_fast_instead_of_hanging_and_then_recovers(pg_url, tmp_path):
    import psycopg

    keys = write_keys(tmp_path / "keys.yaml", {"acme": [(KEY, False)]})
    srv = start(pg_url + "&pool_size=1&pool_timeout=0.5", "--keys", str(keys),
                config=write_config(tmp_path / "run.yaml", MODEL_FREE), log=tmp_path / "serve.log")
    h = {"Authorization": f"Bearer {KEY}"}
    c = httpx.Client(base_url=srv.url, headers=h, timeout=30)
    try:
        assert c.post("/v1/memories/ann/turns", json={"speaker": "Ann", "text": "I swim on Mondays."}).status_code == 200
        # Another client of the database locks the packets table: the server's append takes its
        # one pooled connection and waits on the lock; every other request then finds no free one.
        locker = psycopg.connect(pg_url.split("&pool")[0])
        locker.execute("BEGIN")
        locker.execute("LOCK TABLE packets IN ACCESS EXCLUSIVE MODE")
        blocked: list[httpx.Response] = []
        t = threading.Thread(target=lambda: blocked.append(
            httpx.post(srv.url + "/v1/memories/bob/turns", headers=h, timeout=60,
                       json={"speaker": "Bob", "text": "I run on Fridays."})))
        t.start()
        time.sleep(1.0)  # the append is now inside the database, on the pool's only connection
        t0 = time.monotonic()
        r = c.post("/v1/memories/ann/search", json={"query": "when do I swim?"})
        assert time.monotonic() - t0 < 10, "a request waited instead of failing fast"
        assert r.status_code == 503 and r.headers.get("Retry-After"), r.text
        assert r.json()["error"]["code"] == "store_unavailable"
        locker.rollback()
        locker.close()
        t.join(30)
        # The append that met the lock either went through once it was lifted or found no free
        # connection itself (another of the server's threads was waiting on the lock): a typed 503.
        assert blocked and blocked[0].status_code in (200, 503), blocked and blocked[0].text
        # Recovered by itself: the same search now answers; the append is stored exactly when it
        # was acknowledged (and a retry of a refused one goes through).
        assert c.post("/v1/memories/ann/search", json={"query": "when do I swim?"}).status_code == 200
        r = c.get("/v1/memories/bob/turns")
        texts = [t["text"] for t in r.json()["turns"]] if r.status_code == 200 else []
        assert texts == (["I run on Fridays."] if blocked[0].status_code == 200 else [])
        if blocked[0].status_code == 503:
            assert c.post("/v1/memories/bob/turns", json={"speaker": "Bob", "text": "I run on Fridays."}
                          ).status_code == 200
    finally:
        c.close()
        srv.stop()
