"""How long the memory inspector takes to show a long timeline and a search with its explanation.

Starts ``memcompile-local serve`` on a fresh store (loopback, no keys), imports one user's history
of ``--turns`` turns (10,000 by default; generated here from templates, not benchmark text) through
the import route, and drives headless Debian chromium (Selenium, the system's chromedriver) over
the inspector. Per measurement, ``--repeat`` runs and their median:

* timeline, first page / last page / a page in the middle: from the hash change to the page
  marked ready (the app's own ``performance.measure``) and to the first frame painted after it;
* the REST call that page makes (``GET .../turns``, same page size), timed by ``fetch`` from the
  same page: the baseline, so the ratio is what the inspector adds on top of the API;
* Ask: from pressing Search to the results shown (the request asks for ``explain: true``; the
  printout says whether this server returned per-channel contributions), against ``fetch`` of
  the same ``POST .../search`` body.

    .venv/bin/python scripts/bench_ui.py                      # hash embedder, 10,000 turns
    .venv/bin/python scripts/bench_ui.py --embedder sentence-transformers --repeat 15

Figures depend on the machine and what else runs on it: the header prints the core count and
the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent

NAMES = ["Mara", "Jon", "Priya", "Tomas", "Lena", "Kofi", "Ines", "Yuki"]
PLACES = ["Lisbon", "the lake", "Kyoto", "the market", "Nairobi", "the library", "Oslo", "the hills"]
THINGS = ["a red kayak", "a sourdough starter", "a film camera", "tomato seedlings", "a chess set", "a blue bike"]
TEMPLATES = ["I went to {place} with {name} and we talked about {thing}.",
             "{name} lent me {thing} last weekend; I still have to give it back.",
             "Remind me that {name} is moving to {place} next month.",
             "We finally fixed {thing} after an afternoon at {place}.",
             "Did {name} ever tell you what happened at {place}?"]
NEEDLE = "My sister's cat is called Pepper and she is afraid of the vacuum cleaner."
QUESTION = "What is the name of my sister's cat?"


def history(n: int, seed: int = 10) -> dict:
    """A plain-format history of ``n`` turns in sessions of 20, one needle turn in the middle."""
    rng = random.Random(seed)
    sessions = []
    for s in range(0, n, 20):
        turns = []
        for i in range(s, min(n, s + 20)):
            text = NEEDLE if i == n // 2 else rng.choice(TEMPLATES).format(
                name=rng.choice(NAMES), place=rng.choice(PLACES), thing=rng.choice(THINGS))
            turns.append({"speaker": "user" if i % 2 == 0 else "assistant", "text": text})
        day = s // 20
        sessions.append({"time": f"20{20 + day // 365:02d}-{day % 365 // 28 % 12 + 1:02d}-{day % 28 + 1:02d} 10:00",
                         "turns": turns})
    return {"sessions": sessions}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(store: Path, embedder: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    log = open(store.with_suffix(".log"), "wb")
    proc = subprocess.Popen([sys.executable, "-m", "memcompile_local", "serve", "--store", str(store), "--port", str(port),
                             "--embedder", embedder, "--preset", "model-free", "--no-access-log"],
                            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(REPO))
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"serve exited: {store.with_suffix('.log').read_text()}")
        try:
            if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("serve did not start")


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"
    os.environ["SE_AVOID_STATS"] = "true"
    profile = tempfile.mkdtemp(prefix="bench-ui-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = os.environ.get("MEMCOMPILE_CHROMIUM", "/usr/bin/chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                f"--user-data-dir={profile}", "--window-size=1280,800"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(options=opts, service=Service(
        executable_path=os.environ.get("MEMCOMPILE_CHROMEDRIVER", "/usr/bin/chromedriver")))
    driver.set_script_timeout(120)
    return driver, profile


# Navigate to a hash and report (ready ms by the app's measure, painted ms by the page's clock).
NAVIGATE = """
const [hash, done] = [arguments[0], arguments[arguments.length - 1]];
const main = document.getElementById('main');
main.dataset.state = 'navigating';
performance.clearMeasures();
const t0 = performance.now();
const finish = () => requestAnimationFrame(() => requestAnimationFrame(() => {
  const m = performance.getEntriesByType('measure').filter(e => e.name.startsWith('page:')).pop();
  done({ready: m ? m.duration : null, painted: performance.now() - t0, state: main.dataset.state,
        shown: document.querySelectorAll('article.turn').length});
}));
const obs = new MutationObserver(() => {
  if (main.dataset.state === 'ready' || main.dataset.state === 'error') { obs.disconnect(); finish(); }
});
obs.observe(main, {attributes: true, attributeFilter: ['data-state']});
if (location.hash === hash) window.dispatchEvent(new HashChangeEvent('hashchange')); else location.hash = hash;
"""

# Press Search and report (rendered ms by the app's measure, painted ms) and the hits shown.
ASK = """
const done = arguments[arguments.length - 1];
const main = document.getElementById('main');
main.dataset.state = 'navigating';
performance.clearMeasures();
const t0 = performance.now();
const obs = new MutationObserver(() => {
  if (main.dataset.state === 'ready' || main.dataset.state === 'error') {
    obs.disconnect();
    requestAnimationFrame(() => requestAnimationFrame(() => {
      const m = performance.getEntriesByName('ask:search').pop();
      done({ready: m ? m.duration : null, painted: performance.now() - t0, state: main.dataset.state,
            hits: document.querySelectorAll('ol.hits > li').length,
            channels: document.querySelectorAll('table.channels').length,
            first: document.querySelector('ol.hits > li')?.dataset.turn});
    }));
  }
});
obs.observe(main, {attributes: true, attributeFilter: ['data-state']});
document.querySelector('form.ask-form button[value=search]').click();
"""

FETCH = """
const [url, init, done] = [arguments[0], arguments[1], arguments[arguments.length - 1]];
const t0 = performance.now();
fetch(url, init).then(r => r.text()).then(t => done({ms: performance.now() - t0, bytes: t.length}));
"""


def median(values):
    return statistics.median(values) if values else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--embedder", default="hash", help="hash (default) or sentence-transformers")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="bench-ui-"))
    proc, url = start_server(tmp / "m.sqlite", args.embedder)
    driver = profile = None
    try:
        t0 = time.perf_counter()
        started = httpx.post(f"{url}/v1/memories/long/imports", params={"format": "plain"},
                             content=json.dumps(history(args.turns)).encode(), timeout=120)
        started.raise_for_status()
        job = started.json()
        while job["state"] in ("queued", "running"):
            time.sleep(0.5)
            job = httpx.get(f"{url}/v1/memories/long/imports/{job['id']}", timeout=60).json()
        if job["state"] != "done":
            raise SystemExit(f"import failed: {job}")
        seeded_s = time.perf_counter() - t0
        total = httpx.get(f"{url}/v1/memories/long", timeout=60).json()["turns"]
        # Warm the server's view of the user (the first search loads it), as a running server would have.
        httpx.post(f"{url}/v1/memories/long/search", json={"query": QUESTION}, timeout=300).raise_for_status()

        driver, profile = browser()
        driver.get(f"{url}/ui/#/users")
        time.sleep(1.0)
        print(f"# inspector figures: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; "
              f"embedder {args.embedder}; {total:,} turns imported in {seeded_s:.1f} s; medians of {args.repeat}")
        last = (total - 1) // 100 * 100
        cases = [("timeline, first page", "#/timeline/long", 0), ("timeline, last page", f"#/timeline/long?offset={last}", last),
                 ("timeline, page 50", "#/timeline/long?offset=4900", 4900)]
        print(f"{'what':34s} {'ready ms':>9s} {'painted ms':>11s} {'REST fetch ms':>14s} {'painted/REST':>13s}")
        for label, hash_, offset in cases:
            ready, painted, rest = [], [], []
            driver.execute_async_script(NAVIGATE, "#/users")
            for _ in range(args.repeat):
                driver.execute_async_script(NAVIGATE, "#/users")
                r = driver.execute_async_script(NAVIGATE, hash_)
                assert r["state"] == "ready" and r["shown"] == min(100, total - offset), r
                ready.append(r["ready"])
                painted.append(r["painted"])
                f = driver.execute_async_script(FETCH, f"{url}/v1/memories/long/turns?offset={offset}&limit=100",
                                                {"cache": "no-store"})
                rest.append(f["ms"])
            print(f"{label:34s} {median(ready):9.1f} {median(painted):11.1f} {median(rest):14.1f} "
                  f"{median(painted) / median(rest):13.1f}")

        driver.execute_async_script(NAVIGATE, "#/ask/long")
        driver.find_element("css selector", "#q").send_keys(QUESTION)
        ready, painted, rest = [], [], []
        info = None
        for _ in range(args.repeat):
            info = driver.execute_async_script(ASK)
            assert info["state"] == "ready", info
            ready.append(info["ready"])
            painted.append(info["painted"])
            explains = info["channels"] > 0
            body = {"query": QUESTION, **({"explain": True} if explains else {})}
            f = driver.execute_async_script(FETCH, f"{url}/v1/memories/long/search",
                                            {"method": "POST", "body": json.dumps(body),
                                             "headers": {"Content-Type": "application/json"}, "cache": "no-store"})
            rest.append(f["ms"])
        label = "ask: search + explanation" if info["channels"] else "ask: search (server has no explain)"
        print(f"{label:34s} {median(ready):9.1f} {median(painted):11.1f} {median(rest):14.1f} "
              f"{median(painted) / median(rest):13.1f}")
        needle = httpx.post(f"{url}/v1/memories/long/search", json={"query": QUESTION}, timeout=60).json()
        print(f"# ask showed {info['hits']} hits, {info['channels']} channel tables; first hit {info['first']} "
              f"(REST's first {needle['packets'][0]['id']}, text {needle['packets'][0]['text'][:40]!r})")
    finally:
        if driver is not None:
            driver.quit()
        if profile:
            shutil.rmtree(profile, ignore_errors=True)
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
