"""The GPU recipe (scripts/replicate_gpu.py) run for real, with a scripted server in vLLM's place.

No GPU and no vLLM here: a stand-in server (tests/_replicate_fake_vllm.py) answers every
stage with schema-valid, deterministic output, in process (counting requests) or as a
program started by the recipe in place of ``vllm serve``. The vLLM command line itself is
checked as text. The benchmark files are written by this module (our own sentences, in the
LoCoMo and LongMemEval layouts), big enough for 32 requests in flight.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from _replicate_fake_vllm import FakeVllm

from memcompile_local.bench.aggregate import locomo_metrics, longmemeval_metrics, token_table

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "replicate_gpu.py"
FAKE = Path(__file__).resolve().parent / "_replicate_fake_vllm.py"

_spec = importlib.util.spec_from_file_location("replicate_gpu", SCRIPT)
recipe = importlib.util.module_from_spec(_spec)
sys.modules["replicate_gpu"] = recipe  # dataclasses look their module up there
_spec.loader.exec_module(recipe)

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="kills and process groups as on Linux")

# ----------------------------------------------------------------------------- fixtures of our own

PEOPLE = [("Marta", "Jonas"), ("Ilse", "Teodor")]
TOPICS = ["a pottery class", "the half marathon", "a trip to Porto", "the new bakery job", "a rescue cat",
          "the community garden", "a jazz concert", "the broken bicycle", "a chess club", "the kitchen repaint"]


def write_locomo(path: Path, *, sessions: int = 3, turns: int = 10, questions: int = 22) -> Path:
    """A LoCoMo-layout file: two conversations, every category (5 included), dated sessions."""
    data = []
    for c, (a, b) in enumerate(PEOPLE):
        conv = {"speaker_a": a, "speaker_b": b}
        for s in range(1, sessions + 1):
            conv[f"session_{s}_date_time"] = f"{2 + s}:15 pm on {3 * s + c} May, 2023"
            conv[f"session_{s}"] = [
                {"speaker": (a, b)[t % 2], "dia_id": f"D{s}:{t + 1}",
                 "text": f"{(a, b)[t % 2]} talks about {TOPICS[(3 * s + t + c) % len(TOPICS)]} "
                         f"and says it went {('well', 'badly', 'fine')[(t + s) % 3]} on day {10 * s + t}."}
                for t in range(turns)]
        qa = []
        for q in range(questions):
            s, t = 1 + q % sessions, q % turns
            item = {"question": f"How did {TOPICS[(3 * s + t + c) % len(TOPICS)]} go for {(a, b)[t % 2]} "
                                f"on day {10 * s + t}?",
                    "answer": ("well", "badly", "fine")[(t + s) % 3], "evidence": [f"D{s}:{t + 1}"],
                    "category": 1 + q % 5}
            if item["category"] == 5:
                item["adversarial_answer"] = item.pop("answer")
            qa.append(item)
        data.append({"sample_id": f"rep-{c + 1}", "conversation": conv, "qa": qa})
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    return path


LME_TYPES = ["single-session-user", "multi-session", "temporal-reasoning", "knowledge-update",
             "single-session-assistant", "single-session-preference"]


def write_longmemeval(path: Path, *, per_type: int = 2) -> Path:
    """A LongMemEval-layout file: every question type, one _abs question, and a filler session
    shared by every haystack (as the published S file shares sessions between questions)."""
    shared = [{"role": "user", "content": "Can you suggest a quick lentil soup for a cold evening?"},
              {"role": "assistant", "content": "Simmer red lentils with onion, cumin and stock for twenty minutes."}]
    items = []
    for i, qtype in enumerate(LME_TYPES * per_type):
        topic = TOPICS[i % len(TOPICS)]
        qid = f"rep-q{i}" + ("_abs" if i == 3 else "")
        own = [{"role": "user", "content": f"I finally signed up for {topic} last week.", "has_answer": True},
               {"role": "assistant", "content": f"Good luck with {topic}; tell me how it goes."},
               {"role": "user", "content": f"It costs {20 + i} euros a month, which seems fair."},
               {"role": "assistant", "content": "That is a reasonable price for something you enjoy."}]
        other = [{"role": "user", "content": f"My neighbour number {i} keeps parking in front of my gate."},
                 {"role": "assistant", "content": "A friendly note usually works before anything formal."}]
        items.append({
            "question_id": qid, "question_type": qtype,
            "question": f"What did I sign up for last week (question {i})?", "answer": topic,
            "question_date": f"2023/06/{10 + i:02d} (Sat) 09:00",
            "haystack_session_ids": ["shared_soup", f"own_{i}", f"other_{i}"],
            "haystack_dates": ["2023/05/01 (Mon) 18:00", f"2023/05/{10 + i:02d} (Wed) 11:00",
                               f"2023/05/{12 + i:02d} (Fri) 20:00"],
            "haystack_sessions": [shared, own, other],
            "answer_session_ids": [f"own_{i}"],
        })
    path.write_text(json.dumps(items, indent=1), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("replicate_data")
    return write_locomo(d / "locomo_rep.json"), write_longmemeval(d / "longmemeval_rep.json")


def recipe_cmd(out: Path, locomo: Path | None, lme: Path | None, *extra: str) -> list[str]:
    cmd = [sys.executable, str(SCRIPT), "--out", str(out), "--model", "fake-answer",
           "--judge-model", "fake-judge", "--embedder", "hash", "--concurrency", "32"]
    if locomo:
        cmd += ["--locomo", str(locomo)]
    if lme:
        cmd += ["--longmemeval", str(lme)]
    return cmd + list(extra)


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(REPO), str(Path(__file__).resolve().parent)])
    e["HF_HUB_OFFLINE"] = "1"
    e["PYTHONUNBUFFERED"] = "1"
    return e


def table_lines(text: str) -> list[str]:
    """The rows of every Markdown table in the printed output (what must not change on resume)."""
    return [line for line in text.splitlines() if line.startswith("|")]


def children(pid: int) -> list[int]:
    try:
        raw = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in raw.split()]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


# ----------------------------------------------------------------------------- the command lines

def test_vllm_command_is_a_one_gpu_server_line():
    spec = recipe.ServerSpec("answer", "Qwen/Qwen2.5-7B-Instruct", "qwen7b", "http://127.0.0.1:8100/v1", True,
                             port=8100, gpu_memory_utilization=0.55, max_model_len=16384, max_num_seqs=96,
                             extra_args=["--quantization", "fp8"])
    cmd = recipe.vllm_command(["/opt/vllm/bin/vllm"], spec)
    assert cmd[:3] == ["/opt/vllm/bin/vllm", "serve", "Qwen/Qwen2.5-7B-Instruct"]
    flags = dict(zip(cmd[3::2], cmd[4::2]))
    assert flags == {"--host": "127.0.0.1", "--port": "8100", "--served-model-name": "qwen7b",
                     "--gpu-memory-utilization": "0.55", "--max-model-len": "16384", "--max-num-seqs": "96",
                     "--generation-config": "vllm", "--seed": "0", "--quantization": "fp8"}


def run_main(capsys, *argv: str) -> tuple[int, str, str]:
    rc = recipe.main(list(argv))
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_dry_run_starts_two_servers_that_share_the_gpu(capsys, tmp_path):
    rc, out, _ = run_main(capsys, "--locomo", "l.json", "--longmemeval", "s.json.gz", "--out", str(tmp_path),
                          "--dry-run", "--concurrency", "64")
    assert rc == 0
    servers = [line for line in out.splitlines() if line.startswith("# ") and "server:" in line]
    assert len(servers) == 2
    answer, judge = (shlex.split(line.split(": ", 1)[1]) for line in servers)
    assert answer[:3] == ["vllm", "serve", recipe.DEFAULT_MODEL] and "--port" in answer
    assert judge[:3] == ["vllm", "serve", recipe.DEFAULT_JUDGE]
    share = float(answer[answer.index("--gpu-memory-utilization") + 1]) + float(
        judge[judge.index("--gpu-memory-utilization") + 1])
    assert share <= 0.95
    evals = [shlex.split(line) for line in out.splitlines() if " eval " in line]
    assert [c[4] for c in evals] == ["locomo", "longmemeval"]
    for c in evals:
        opts = dict(zip(c[5::2], c[6::2]))
        assert opts["--preset"] == "A0" and opts["--backend"] == "openai" and opts["--concurrency"] == "64"
        assert opts["--base-url"] == f"http://127.0.0.1:{answer[answer.index('--port') + 1]}/v1"
        assert opts["--judge-base-url"] == f"http://127.0.0.1:{judge[judge.index('--port') + 1]}/v1"
        assert opts["--judge-model"] == recipe.DEFAULT_JUDGE and opts["--embed-device"] == "cuda"
        assert opts["--out"] == str(tmp_path.resolve() / c[4])
    assert evals[1][evals[1].index("--data") + 1].endswith("s.json.gz")


def test_dry_run_with_an_openai_judge_starts_one_server(capsys, tmp_path):
    rc, out, _ = run_main(capsys, "--locomo", "l.json", "--out", str(tmp_path), "--dry-run",
                          "--openai-judge", "gpt-4o-mini")
    assert rc == 0
    assert "# judge server: use https://api.openai.com/v1 (gpt-4o-mini)" in out
    (cmd,) = [shlex.split(line) for line in out.splitlines() if " eval " in line]
    opts = dict(zip(cmd[5::2], cmd[6::2]))
    assert opts["--judge-model"] == "gpt-4o-mini" and opts["--judge-api-key-env"] == "OPENAI_API_KEY"


@pytest.mark.parametrize("argv, message", [
    (["--gpu-memory-utilization", "0.6", "--judge-gpu-memory-utilization", "0.4"], "0.95 or less"),
    (["--port", "9000", "--judge-port", "9000"], "are the same"),
    (["--openai-judge", "gpt-4o-mini", "--judge-base-url", "http://127.0.0.1:9/v1"], "two judges"),
    (["--concurrency", "0"], "at least 1"),
    ([], "give --locomo"),
])
def test_bad_settings_are_refused_before_anything_runs(capsys, tmp_path, argv, message):
    data = [] if message == "give --locomo" else ["--locomo", "l.json"]
    rc, out, err = run_main(capsys, *data, "--out", str(tmp_path / "o"), "--dry-run", *argv)
    assert rc == 2 and message in err and out == ""
    assert not (tmp_path / "o").exists()


# ----------------------------------------------------------------------------- the tables

def test_locomo_table_puts_each_category_in_the_papers_columns():
    rows = []
    # single-hop (4): 2 of 2 correct; multi-hop (1): 0 of 1; temporal (2): 1 of 2; open-domain (3): 1 of 1
    for i, (cat, label, pred) in enumerate([(4, "CORRECT", "a beagle"), (4, "CORRECT", "blue"),
                                            (1, "WRONG", "nothing"), (2, "CORRECT", "May 2023"),
                                            (2, "WRONG", "June"), (3, "CORRECT", "maybe")]):
        rows.append({"question_id": f"q{i}", "category": cat, "gold": ["a beagle", "blue", "Paris", "May 2023",
                                                                       "July", "likely"][i],
                     "prediction": pred, "judge_label": label, "selected_ids": [], "gold_evidence": []})
    metrics = locomo_metrics(rows)
    text = recipe.locomo_table(metrics, 123456, "this run")
    head, _, mine, paper = text.splitlines()[:4]
    cols = [c.strip() for c in head.strip("|").split("|")]
    values = dict(zip(cols, (c.strip() for c in mine.strip("|").split("|"))))
    assert values["Single-Hop J"] == "100.00" and values["Single-Hop F1"] == "100.00"
    assert values["Multi-Hop J"] == "0.00" and values["Multi-Hop F1"] == "0.00"
    assert values["Temporal J"] == "50.00" and values["Temporal F1"] == "50.00"
    assert values["Open-Domain J"] == "100.00"
    assert values["Overall J"] == f"{100 * 4 / 6:.2f}" and values["Tokens (K)"] == "123.46"
    ref = dict(zip(cols, (c.strip() for c in paper.strip("|").split("|"))))
    assert (ref["Overall F1"], ref["Overall BLEU-1"], ref["Overall J"]) == ("55.94", "48.65", "80.52")
    assert ref["Temporal J"] == "73.52" and ref["Tokens (K)"] == "26,720.82"
    assert "is not scored, as in the paper: 0 left out)" in text
    # The count of category 5 questions the run left out is printed as the metrics have it.
    left = recipe.locomo_table(locomo_metrics(rows, left_out_category5=7), 123456, "this run")
    assert "is not scored, as in the paper: 7 left out)" in left


def test_longmemeval_table_lists_the_six_types_in_table_7_order():
    rows = [{"question_id": f"q{i}" + ("_abs" if i == 5 else ""), "question_type": t, "gold": "x",
             "prediction": "x", "judge_label": "CORRECT" if i % 2 == 0 else "WRONG"}
            for i, t in enumerate(LME_TYPES)]
    text = recipe.longmemeval_table(longmemeval_metrics(rows), "this run")
    body = [line for line in text.splitlines() if line.startswith("| ") and "Category" not in line]
    assert [line.split("|")[1].split()[0] for line in body[:6]] == ["SSU", "MS", "TR", "KU", "SSA", "SSP"]
    assert [line.split("|")[3].strip() for line in body[:6]] == ["100.00", "0.00", "100.00", "0.00", "100.00",
                                                                 "0.00"]
    assert body[0].split("|")[4].strip() == "91.43"
    assert "| abstention (_abs, also in their types) | 1 | 0.00 |" in text


def test_token_table_has_the_papers_per_question_figures_for_locomo():
    table = token_table({"fact": {"prompt": 900, "completion": 100}, "metadata": 3000, "intent": 40,
                         "schedule": 500, "frontier": 300, "answer": 260, "judge": 77}, 10)
    text = recipe.token_table(table, paper=True)
    assert "| Fact extraction | 1,000 | 100 | 19.6% | 1,025 |" in text
    assert "| **Non-judge end-to-end** | 5,100 | 510 | 100.0% | 17,351 |" in text
    assert "| Judge (excluded) | 77 | 8 | excluded |  |" in text
    assert "paper" not in recipe.token_table(table, paper=False).splitlines()[0]


# ----------------------------------------------------------------------------- end to end

DELAY_S = 0.2  # per request: a real server takes this long or longer, so requests pile up

@pytest.mark.slow
def test_recipe_runs_both_benchmarks_resumes_after_kill_9_with_the_same_tables(data, tmp_path):
    locomo, lme = data
    # The uninterrupted run: what a resumed run must reproduce.
    with FakeVllm(["fake-answer", "fake-judge"], delay_s=DELAY_S) as srv:
        ref_out = tmp_path / "ref"
        cmd = recipe_cmd(ref_out, locomo, lme, "--base-url", srv.base_url, "--judge-base-url", srv.base_url)
        done = subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        ref_keys, ref_in_flight = srv.counted(), srv.max_in_flight
        print(f"reference run: {len(ref_keys)} model requests, at most {ref_in_flight} in flight; "
              f"per stage {srv.in_flight_by_stage}")
    assert len(ref_keys) == len(set(ref_keys)), "an uninterrupted run sends every distinct request once"
    assert ref_in_flight >= 20, f"at most {ref_in_flight} requests in flight at --concurrency 32"
    ref_tables = (ref_out / "tables.md").read_text(encoding="utf-8")
    assert table_lines(ref_tables) and table_lines(ref_tables) == table_lines(done.stdout)
    assert "## LoCoMo (paper's Table 1 layout)" in ref_tables and "## LongMemEval-S (paper's Table 7 layout)" in ref_tables
    assert "| TR (temporal-reasoning) | 2 |" in ref_tables
    assert "Questions scored: 36 (single-hop 8, multi-hop 10, temporal 10, open-domain 8;" in ref_tables

    # The same run stopped twice, then run to the end, each attempt the same command: a Ctrl-C
    # in LoCoMo's questions (SIGINT: the eval finishes its requests in flight and records the
    # attempt), then a kill -9 of the recipe in LongMemEval's build (no cleanup at all).
    with FakeVllm(["fake-answer", "fake-judge"], delay_s=DELAY_S) as srv:
        out = tmp_path / "resumed"
        cmd = recipe_cmd(out, locomo, lme, "--base-url", srv.base_url, "--judge-base-url", srv.base_url)
        kills = []  # (requests received when stopped, keys finished by then)
        for fraction, sig in ((0.4, signal.SIGINT), (0.85, signal.SIGKILL)):
            srv.holding.clear()
            srv.release.clear()
            srv.hold_after(int(len(ref_keys) * fraction))
            proc = subprocess.Popen(cmd, cwd=REPO, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    text=True, start_new_session=True)
            try:
                assert srv.holding.wait(300), "the recipe never got far enough to be held"
                time.sleep(2.0)  # every answer received before the hold is cached by now
                evals = children(proc.pid)
                assert evals, "the recipe runs eval as a child process"
                proc.send_signal(sig)
                if sig == signal.SIGINT:
                    time.sleep(1.0)
                    srv.release.set()  # the requests in flight get their answers, as they would
                _, err = proc.communicate(timeout=120)
            finally:
                if proc.poll() is None:
                    proc.kill()
            deadline = time.monotonic() + 30
            while any(alive(p) for p in evals) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not any(alive(p) for p in evals), f"the eval child outlived the recipe's {sig.name}"
            if sig == signal.SIGINT:
                assert proc.returncode == 130 and "rerun the same command" in err, err[-2000:]
                attempts = [json.loads(x) for x in (out / "locomo" / "attempts.jsonl").read_text().splitlines()]
                assert [a["completed"] for a in attempts] == [False]
            else:
                assert proc.returncode == -signal.SIGKILL
            srv.release.set()
            time.sleep(0.5)  # held handlers (SIGKILL) write into closed sockets and end
            kills.append((len(srv.counted()), set(srv.finished)))
            # Where the stops land: in LoCoMo's questions, then in LongMemEval's build.
            assert (out / "locomo" / "metrics.json").exists() == (fraction > 0.5)
            assert not (out / "longmemeval" / "metrics.json").exists()
        srv.hold_after(10**9)
        again = subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True, timeout=600)
        assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
        requests = srv.counted()

    for received, finished in kills:
        repeated = finished & set(requests[received:])
        assert not repeated, f"{len(repeated)} model calls answered before a kill were sent again"
    assert set(requests) == set(ref_keys)
    assert len(requests) - len(ref_keys) <= 2 * 32  # at most the calls in flight at each kill, again
    resumed_tables = (out / "tables.md").read_text(encoding="utf-8")
    assert table_lines(resumed_tables) == table_lines(ref_tables)
    assert table_lines(again.stdout) == table_lines(ref_tables)
    for bench in ("locomo", "longmemeval"):
        ref_m = json.loads((ref_out / bench / "metrics.json").read_text())
        new_m = json.loads((out / bench / "metrics.json").read_text())
        assert new_m["tokens_by_stage"] == ref_m["tokens_by_stage"]
        assert new_m["token_table"]["non_judge_total"] == ref_m["token_table"]["non_judge_total"] > 0
    print(f"killed after {[k[0] for k in kills]} of {len(ref_keys)} requests; "
          f"{len(requests) - len(ref_keys)} sent again (in flight at a kill)")


def test_a_rerun_with_other_settings_is_refused_naming_the_change(data, tmp_path):
    locomo, _ = data
    with FakeVllm(["fake-answer", "fake-judge"]) as srv:
        base = recipe_cmd(tmp_path / "o", locomo, None, "--base-url", srv.base_url, "--judge-base-url",
                          srv.base_url, "--limit", "1")
        first = subprocess.run(base, cwd=REPO, env=env(), capture_output=True, text=True, timeout=300)
        assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
        n = len(srv.counted())
        changed = [*base[:base.index("--concurrency") + 1], "48", *base[base.index("--concurrency") + 2:]]
        second = subprocess.run(changed, cwd=REPO, env=env(), capture_output=True, text=True, timeout=300)
        assert second.returncode == 2
        assert "other settings" in second.stderr and "--concurrency 32" in second.stderr
        assert "--concurrency 48" in second.stderr
        assert len(srv.counted()) == n  # refused before any model call
        # The same command again resumes a finished run: nothing new is asked of the server.
        third = subprocess.run(base, cwd=REPO, env=env(), capture_output=True, text=True, timeout=300)
        assert third.returncode == 0, third.stderr[-3000:]
        assert len(srv.counted()) == n
        assert table_lines(third.stdout) == table_lines(first.stdout)


def test_nothing_listening_is_reported_with_the_address(data, tmp_path):
    locomo, _ = data
    url = "http://127.0.0.1:9/v1"
    done = subprocess.run(recipe_cmd(tmp_path / "o", locomo, None, "--no-start-server", "--base-url", url,
                                     "--judge-base-url", url), cwd=REPO, env=env(), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2
    assert f"nothing answers at {url}/models for the answer model fake-answer" in done.stderr


# ----------------------------------------------------------------------------- starting the servers

def fake_vllm_bin() -> str:
    return shlex.join([sys.executable, str(FAKE)])


def _server_pids(out: Path) -> dict[str, int]:
    return {p.stem.removeprefix("vllm-"): int(p.read_text()) for p in (out / "logs").glob("vllm-*.pid")}


@pytest.mark.slow
def test_recipe_starts_both_servers_waits_for_them_and_stops_them(data, tmp_path, monkeypatch):
    from _fake_openai import closed_port

    locomo, _ = data
    argv_log = tmp_path / "argv.jsonl"
    e = env() | {"FAKE_VLLM_STARTUP_S": "3", "FAKE_VLLM_ARGV": str(argv_log)}
    port, judge_port = closed_port(), closed_port()
    out = tmp_path / "o"
    cmd = recipe_cmd(out, locomo, None, "--vllm-bin", fake_vllm_bin(), "--port", str(port), "--judge-port",
                     str(judge_port), "--embed-device", "cpu", "--limit", "2", "--keep-servers")
    first = subprocess.run(cmd, cwd=REPO, env=e, capture_output=True, text=True, timeout=600)
    pids = _server_pids(out)
    try:
        assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
        assert "SKIP" in first.stdout or "docs/s" in first.stdout  # scripts/gpu_check.py ran first
        assert re.search(r"answer server: ready after \d+ s", first.stdout)
        assert "| this run: fake-answer |" in first.stdout
        started = [json.loads(line) for line in argv_log.read_text().splitlines()]
        assert [a[1] for a in started] == ["fake-answer", "fake-judge"]  # answer first, then judge
        assert started[0][started[0].index("--port") + 1] == str(port)
        assert started[1][started[1].index("--port") + 1] == str(judge_port)
        assert "--generation-config" in started[0] and "--generation-config" in started[1]
        assert set(pids) == {"answer", "judge"} and all(alive(p) for p in pids.values())
        assert (out / "logs" / "vllm-answer.log").read_text().count("serving fake-answer") == 1

        # A rerun finds both servers up, takes them over (their pid files match) and stops them.
        again = subprocess.run(cmd[:-1], cwd=REPO, env=e, capture_output=True, text=True, timeout=600)
        assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
        assert again.stdout.count("taking over pid") == 2
        assert len(argv_log.read_text().splitlines()) == 2  # nothing started again
        deadline = time.monotonic() + 40
        while any(alive(p) for p in pids.values()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(alive(p) for p in pids.values())
        assert _server_pids(out) == {}
        assert table_lines(again.stdout) == table_lines(first.stdout)
    finally:
        for pid in pids.values():
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def test_a_server_that_dies_while_loading_is_reported_with_its_log(data, tmp_path):
    locomo, _ = data
    dying = shlex.join([sys.executable, "-c", "import sys; print('CUDA out of memory (pretend)'); sys.exit(3)"])
    done = subprocess.run(recipe_cmd(tmp_path / "o", locomo, None, "--vllm-bin", dying, "--embed-device", "cpu",
                                     "--skip-gpu-check", "--port", "9", "--judge-port", "10"),
                          cwd=REPO, env=env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "the answer server exited with code 3 before it was ready" in done.stderr
    assert "CUDA out of memory (pretend)" in done.stderr


def test_shell_wrapper_runs_the_script_from_the_checkout(tmp_path):
    e = env() | {"PYTHON": sys.executable, "PYTHONPATH": ""}
    done = subprocess.run(["bash", str(REPO / "scripts" / "replicate_gpu.sh"), "--locomo", "l.json", "--dry-run",
                           "--out", str(tmp_path / "o")], cwd=tmp_path, env=e, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"eval locomo --data {tmp_path / 'l.json'}" in done.stdout
