"""A server holds a bounded working set of users: the least recently searched leave, and come back.

Real ``serve`` subprocess on 127.0.0.1 with ``--max-views 2``: three users appended and searched
leave two held and one eviction in ``/metrics``; the evicted user is searched again with the
same results.
"""

from __future__ import annotations

import re

import httpx
import pytest

from _service_util import MODEL_FREE, running, write_config

pytestmark = pytest.mark.slow


def metric(text: str, name: str) -> float:
    m = re.search(rf"^{name} ([0-9.e+]+)$", text, re.M)
    assert m, f"{name} not in /metrics:\n{text}"
    return float(m.group(1))


def test_the_view_cache_is_bounded_and_its_evictions_are_in_metrics(tmp_path):
    config = write_config(tmp_path / "mf.yaml", MODEL_FREE)
    with running(tmp_path / "mem.sqlite", "--max-views", "2", config=config) as srv:
        c = httpx.Client(base_url=srv.url, timeout=60)

        def search(user: str) -> list[str]:
            r = c.post(f"/v1/memories/{user}/search", json={"query": "Where is the spare key?", "k": 2})
            assert r.status_code == 200, r.text
            return [p["id"] for p in r.json()["packets"]]

        first = {}
        for user in ("ana", "ben", "cy"):
            r = c.post(f"/v1/memories/{user}/turns", json={"speaker": "Ana", "time": "2024-04-01 10:00",
                                                          "text": f"{user} hid the spare key under the blue pot."})
            assert r.status_code == 200, r.text
            first[user] = search(user)
        text = c.get("/metrics").text
        assert metric(text, "memcompile_views_held") == 2
        assert metric(text, "memcompile_view_evictions_total") >= 1
        assert metric(text, "memcompile_view_bytes") > 0
        assert search("ana") == first["ana"]  # evicted, loaded again from the store
        assert metric(c.get("/metrics").text, "memcompile_views_held") == 2


def test_bad_view_cache_bounds_are_refused_at_start(tmp_path):
    import subprocess
    import sys

    from _service_util import REPO, env
    proc = subprocess.run([sys.executable, "-m", "memcompile_local", "serve", "--store", str(tmp_path / "m.sqlite"),
                           "--max-views", "0"], capture_output=True, text=True, env=env(), cwd=str(REPO), timeout=120)
    assert proc.returncode != 0 and "max_views" in proc.stderr
