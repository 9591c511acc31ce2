"""The inspector's run folders without a browser: ``bench/run_view.py`` against runs the runner
wrote, the ``report`` command's self-contained page, and ``serve --runs``'s read-only routes
(authenticated, confined to the served directory, documented in OpenAPI)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import httpx
import jsonschema
import pytest
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from memcompile_local.adapters.scripted import HashEmbedder, ScriptedBackend
from memcompile_local.bench.aggregate import longmemeval_metrics
from memcompile_local.bench.run_html import render_run_html, visible_text
from memcompile_local.bench.run_view import find_runs, load_run, question_page, run_summary
from memcompile_local.bench.runner import EvalRunner, EvalSpec
from memcompile_local.config import PipelineConfig
from memcompile_local.errors import DataFormatError
from memcompile_local.pipeline.presets import apply_preset

from _data_paths import LOCOMO_MINI, LONGMEMEVAL_MINI
from _service_util import REPO, env, running, write_keys

HOSTILE = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2"> \u202eexe.txt'


def make_run(out: Path, benchmark: str = "locomo", data: Path = LOCOMO_MINI, *, judged: bool = False) -> Path:
    """A run folder written by the real runner on a fixture (model-free; judged by a script when asked)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    store = out.parent / f".{out.name}.sqlite"  # hidden: beside the run, never listed
    if judged:
        def reply(req):
            if req.stage == "judge":
                if benchmark == "longmemeval":
                    return json.dumps({"answer": "yes"})
                # Temporal questions judged wrong, the rest correct: a run with both outcomes.
                return json.dumps({"label": "WRONG" if "When did" in req.messages[-1].content else "CORRECT"})
            return "a bowl"
        cfg = apply_preset("model-free", PipelineConfig()).replace(judge={"allow_self_judge": True})
        spec = EvalSpec(benchmark=benchmark, data=str(data), store=str(store),
                        out=str(out), limit=3, progress=False, answer=True)
        EvalRunner(spec, cfg, backend=ScriptedBackend(reply), embedder=HashEmbedder(dim=64), echo=lambda s: None).run()
    else:
        spec = EvalSpec(benchmark=benchmark, data=str(data), store=str(store),
                        out=str(out), limit=5, progress=False, answer=False)
        EvalRunner(spec, apply_preset("model-free", PipelineConfig()), embedder=HashEmbedder(dim=64),
                   echo=lambda s: None).run()
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    make_run(root / "locomo-mf")
    make_run(root / "grid" / "locomo-judged", judged=True)
    make_run(root / "lme", "longmemeval", LONGMEMEVAL_MINI, judged=True)
    return root


def test_the_summary_carries_the_runs_own_figures(runs):
    run = load_run(runs / "locomo-mf", label="locomo-mf")
    metrics = json.loads((runs / "locomo-mf" / "metrics.json").read_text())["metrics"]
    s = run_summary(run)
    assert s["benchmark"] == "locomo" and s["stage"] == "final" and s["questions"] == len(run.rows)
    assert s["overall"]["recall"] == metrics["overall"]["recall"]["final"]["recall"]
    assert s["overall"]["fully_covered"] == metrics["overall"]["recall"]["final"]["fully_covered"]
    # Every category of the paper's table, in its order, with the figures of metrics.json.
    assert [g["key"] for g in s["categories"]] == ["4", "1", "2", "3"]
    for g in s["categories"]:
        block = metrics["per_category"][g["key"]]
        assert g["name"] == block["name"] and g["count"] == block["count"]
        assert g["recall"] == block["recall"]["final"]["recall"]
    assert s["overall"]["accuracy"] is None and s["config"]["judge"] == "none (not judged)"
    assert s["config"]["data"] == "locomo_mini.json"  # the file's name, never the server's path
    assert str(LOCOMO_MINI.parent) not in json.dumps(s)
    assert sum(s["outcomes"].values()) == s["questions"]


def test_judged_runs_show_accuracy_and_longmemeval_recall_per_type(runs):
    judged = run_summary(load_run(runs / "grid" / "locomo-judged"))
    metrics = json.loads((runs / "grid" / "locomo-judged" / "metrics.json").read_text())["metrics"]
    assert judged["overall"]["accuracy"] == metrics["overall"]["judge"]["accuracy"]
    assert judged["overall"]["judged"] == metrics["overall"]["judge"]["n"] > 0
    lme = load_run(runs / "lme")
    s = run_summary(lme)
    assert [g["key"] for g in s["categories"]][:1] == ["single-session-user"]
    rows = [r for r in lme.rows if r["question_type"] == "single-session-user"]
    expected = longmemeval_metrics(rows)["recall"]["final"]["turn"]
    group = next(g for g in s["categories"] if g["key"] == "single-session-user")
    assert group["recall"] == expected["recall"] and group["recall_n"] == expected["n"]
    assert s["overall"]["accuracy"] == 1.0


def test_questions_mark_gold_hits_and_misses_and_filter(runs):
    run = load_run(runs / "grid" / "locomo-judged")
    page = question_page(run, limit=100)
    assert page["total"] == len(run.rows)
    for q, row in zip(page["questions"], run.rows):
        selected = set(row["recall_stages"]["final"])
        assert [g["id"] for g in q["gold_ids"]] == row["gold_evidence"]
        assert all(g["selected"] == (g["id"] in selected) for g in q["gold_ids"])
        assert [s["id"] for s in q["selected_ids"]] == row["recall_stages"]["final"]
        assert all(s["gold"] == (s["id"] in row["gold_evidence"]) for s in q["selected_ids"])
    failing = question_page(run, failing=True, limit=100)["questions"]
    assert failing and all(q["outcome"] in ("miss", "partial") or q["judge_label"] == "WRONG" for q in failing)
    assert len(failing) < page["total"]  # the scripted judge calls some answers correct
    one = question_page(run, category="2", limit=100)["questions"]
    assert one and all(q["category"] == "2" for q in one)
    paged = question_page(run, offset=1, limit=2)
    assert [q["question_id"] for q in paged["questions"]] == [q["question_id"] for q in page["questions"][1:3]]


def test_reading_a_run_writes_nothing_and_skips_a_torn_line(runs, tmp_path):
    folder = tmp_path / "torn"
    shutil.copytree(runs / "locomo-mf", folder)
    preds = folder / "predictions.jsonl"
    whole = preds.read_bytes()
    preds.write_bytes(whole + b'{"question_id": "cut-off", "quest')
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.iterdir()}
    run = load_run(folder)
    assert run.torn_lines == 1 and len(run.rows) == whole.count(b"\n")
    render_run_html(run)
    question_page(run)
    after = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.iterdir()}
    assert after == before


def test_a_malformed_run_folder_is_a_typed_error_naming_file_and_place(runs, tmp_path):
    folder = tmp_path / "bad"
    shutil.copytree(runs / "locomo-mf", folder)
    (folder / "predictions.jsonl").write_text('{"question_id": "a", "question": "q"}\n[1, 2]\n')
    with pytest.raises(DataFormatError) as err:
        load_run(folder, label="bad")
    assert err.value.path == "bad/predictions.jsonl" and err.value.where == "line 2"
    (folder / "predictions.jsonl").write_text('{"question_id": "a"}\n')
    with pytest.raises(DataFormatError, match=r"line 1\.question"):
        load_run(folder, label="bad")
    (folder / "metrics.json").write_text('{"metrics": {"benchmark": "other"}}')
    with pytest.raises(DataFormatError, match=r"metrics.json: at \$\.metrics\.benchmark"):
        load_run(folder, label="bad")
    (folder / "metrics.json").unlink()
    with pytest.raises(DataFormatError, match="bad/metrics.json.*missing"):
        load_run(folder, label="bad")


def test_find_runs_lists_run_folders_and_not_what_a_link_leads_outside(runs, tmp_path):
    root = tmp_path / "served"
    root.mkdir()
    shutil.copytree(runs / "locomo-mf", root / "a")
    (root / "nested" / "deeper").mkdir(parents=True)
    shutil.copytree(runs / "locomo-mf", root / "nested" / "deeper" / "b")
    (root / "not-a-run").mkdir()
    outside = tmp_path / "outside"
    shutil.copytree(runs / "locomo-mf", outside)
    os.symlink(outside, root / "link-out")
    os.symlink(root / "a", root / "link-in")  # inside: listed under its own name too
    found = find_runs(root)
    assert sorted(found) == ["a", "nested/deeper/b"]
    assert all(root.resolve() in p.parents for p in found.values())
    # The served directory itself may be a run folder: named by its folder name.
    assert list(find_runs(runs / "locomo-mf")) == ["locomo-mf"]


class _Refs(HTMLParser):
    def __init__(self):
        super().__init__()
        self.refs: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for name, value in attrs:
            if name in ("src", "href", "srcset", "action", "data", "poster") and value:
                self.refs.append(value)


def test_report_command_writes_a_self_contained_page(runs, tmp_path):
    folder = tmp_path / "hostile"
    shutil.copytree(runs / "grid" / "locomo-judged", folder)
    rows = [json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines()]
    rows[0]["question"] = HOSTILE
    (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "page.html"
    proc = subprocess.run([sys.executable, "-m", "memcompile_local", "report", str(folder), "--out", str(out)],
                          capture_output=True, text=True, env=env(), cwd=str(REPO), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {out}" in proc.stderr
    page = out.read_text(encoding="utf-8")
    parser = _Refs()
    parser.feed(page)
    # Nothing is loaded from anywhere: no script at all, and no reference but in-page anchors.
    assert "script" not in parser.tags and "link" not in parser.tags and "img" not in parser.tags
    assert all(r.startswith("#") for r in parser.refs), parser.refs
    assert "<svg" in page and "url(http" not in page and "@import" not in page
    # The figures of the run, and every question with its marks.
    s = run_summary(load_run(folder))
    assert f"{100 * s['overall']['recall']:.1f}%" in page
    for q in question_page(load_run(folder), limit=100)["questions"]:
        assert f'id="q-{q["question_id"]}"' in page
    assert "✓" in page and "✗" in page and "missed" in page
    # The hostile question is text: escaped, with its direction control shown as a mark.
    assert "<script>window.__pwned" not in page and "<img src=x" not in page
    assert visible_text(HOSTILE) in page and "[U+202E]" in page and "\u202e" not in page
    # The default place is the run folder.
    default = subprocess.run([sys.executable, "-m", "memcompile_local", "report", str(folder)],
                             capture_output=True, text=True, env=env(), cwd=str(REPO), timeout=120)
    assert default.returncode == 0 and (folder / "report.html").is_file()


def test_report_of_a_folder_that_is_no_run_fails_with_the_file_named(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "memcompile_local", "report", str(tmp_path)],
                          capture_output=True, text=True, env=env(), cwd=str(REPO), timeout=120)
    assert proc.returncode == 2 and "config.json" in proc.stderr and "missing" in proc.stderr


# ------------------------------------------------------------------ the served routes
KEY = "mcl_ui-runs-key-of-acme-0123456789"


@pytest.fixture(scope="module")
def served(runs, tmp_path_factory):
    d = tmp_path_factory.mktemp("runs-serve")
    keys = write_keys(d / "keys.yaml", {"acme": [(KEY, False)]})
    with running(d / "m.sqlite", "--embedder", "hash", "--preset", "model-free", "--keys", str(keys),
                 "--runs", str(runs)) as srv:
        yield srv


def test_serve_prints_the_inspector_address_and_serves_it(served):
    log = served.log_text()
    assert re.search(rf"memory inspector at http://127\.0\.0\.1:{served.port}/ui/; run folders of .* on its Runs page",
                     log), log
    page = httpx.get(served.url + "/ui/", timeout=10)
    assert page.status_code == 200 and 'src="js/app.js"' in page.text
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "default-src 'none'" in csp and "unsafe-inline" not in csp
    assert page.headers["x-content-type-options"] == "nosniff"
    js = httpx.get(served.url + "/ui/js/app.js", timeout=10)
    assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")
    bare = httpx.get(served.url + "/ui", timeout=10)
    assert bare.status_code == 307 and bare.headers["location"] == "/ui/"
    assert httpx.get(served.url + "/ui/js/nothing.js", timeout=10).status_code == 404


def test_run_routes_need_a_key_and_answer_the_summary(served, runs):
    assert httpx.get(served.url + "/v1/runs", timeout=10).status_code == 401
    assert httpx.get(served.url + "/v1/runs/locomo-mf", timeout=10).status_code == 401
    c = httpx.Client(base_url=served.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
    listed = c.get("/v1/runs").json()["runs"]
    assert [r["name"] for r in listed] == ["grid/locomo-judged", "lme", "locomo-mf"]
    summary = c.get("/v1/runs/grid/locomo-judged").json()
    assert summary == run_summary(load_run(runs / "grid" / "locomo-judged", label="grid/locomo-judged"))
    page = c.get("/v1/runs/grid/locomo-judged/questions", params={"offset": 1, "limit": 2, "failing": "false"}).json()
    assert page == question_page(load_run(runs / "grid" / "locomo-judged", label="grid/locomo-judged"), offset=1, limit=2)
    assert c.get("/v1/runs/locomo-mf/questions", params={"category": "2"}).json()["total"] >= 1
    bad = c.get("/v1/runs/locomo-mf/questions", params={"limit": 0})
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "limit"
    assert c.get("/v1/runs/locomo-mf/questions", params={"failing": "maybe"}).json()["error"]["field"] == "failing"
    assert c.get("/v1/runs/locomo-mf/questions", params={"sort": "x"}).json()["error"]["field"] == "sort"


def test_run_routes_open_only_listed_folders(served, runs):
    # http.client sends the path as written (httpx would resolve the dot segments first).
    import http.client

    for name in ("..", "../runs-serve0", "grid", "grid/..", "%2e%2e/%2e%2e/etc", "..%2f..%2fetc", "/etc",
                 "locomo-mf/../lme", "locomo-mf/%2e%2e/lme", str(runs / "locomo-mf")):
        conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=30)
        conn.request("GET", f"/v1/runs/{name}", headers={"Authorization": f"Bearer {KEY}"})
        r = conn.getresponse()
        body = r.read().decode()
        conn.close()
        assert r.status == 404, (name, r.status, body)
        assert '"benchmark"' not in body
        assert str(runs) not in body.replace(name, "")  # the served directory is never named


def test_run_routes_are_in_the_openapi_document_and_responses_validate(served):
    c = httpx.Client(base_url=served.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
    doc = c.get("/openapi.json").json()
    registry = Registry().with_resource("urn:doc", Resource.from_contents(doc, default_specification=DRAFT202012))
    for path, url in (("/v1/runs", "/v1/runs"), ("/v1/runs/{name}", "/v1/runs/lme"),
                      ("/v1/runs/{name}/questions", "/v1/runs/lme/questions")):
        op = doc["paths"][path]["get"]
        assert op["security"] == [{"bearer": []}, {"apiKey": []}]
        assert {"200", "400", "401", "403", "429", "500", "503"} <= set(op["responses"])
        assert ("404" in op["responses"]) == (path != "/v1/runs")
        schema = op["responses"]["200"]["content"]["application/json"]["schema"]
        validator = jsonschema.Draft202012Validator({"$ref": "urn:doc" + schema["$ref"]}, registry=registry)
        validator.validate(c.get(url).json())
        unauth = httpx.get(served.url + url, timeout=10)
        assert str(unauth.status_code) in op["responses"]
    names = [p["name"] for p in doc["paths"]["/v1/runs/{name}/questions"]["get"]["parameters"]]
    assert names == ["name", "offset", "limit", "category", "failing"]


def test_serve_refuses_a_runs_path_that_is_no_directory(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "memcompile_local", "serve", "--store", str(tmp_path / "m.sqlite"),
                           "--embedder", "hash", "--preset", "model-free", "--runs", str(tmp_path / "nope")],
                          capture_output=True, text=True, env=env(), cwd=str(REPO), timeout=120)
    assert proc.returncode == 2 and "--runs" in proc.stderr and "not a directory" in proc.stderr
