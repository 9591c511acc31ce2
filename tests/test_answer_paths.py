"""One answer path: ``Memory.answer``, the service's ``/answer`` (a real server on loopback),
the ``ask`` command and the benchmark runner send the answer model the identical request for
the same question, memory and model settings (the small-model answer settings included:
first-block cut, temporal prompt rule, completion cap, reply cleaning)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import httpx

from _data_paths import LOCOMO_MINI
from _service_util import MODEL_FREE, running, write_config
from memcompile_local.bench.runner import EvalRunner, EvalSpec, read_jsonl
from memcompile_local.cli import main
from memcompile_local.config import PipelineConfig
from memcompile_local.data import load_locomo
from memcompile_local.memory import Memory
from memcompile_local.service.auth import namespace_for

CONFIG = {**MODEL_FREE, "model": {"embedder": "hash", "backend": "_service_backend:SlowExtractionBackend",
                                  "answer_prompt": "small"}}


def answer_requests(store: Path, question: str) -> list[dict]:
    """The request part of every cached answer call in ``store`` that asks ``question``."""
    with sqlite3.connect(store) as c:
        rows = c.execute("SELECT identity_json FROM request_cache WHERE stage = 'answer'").fetchall()
    out = [json.loads(r[0]) for r in rows]
    return [r["request"] for r in out if any(question in m[1] for m in r["request"]["messages"])]


def test_answer_service_memory_ask_and_runner_send_the_same_prompt(tmp_path):
    cfg = PipelineConfig.from_dict(CONFIG)
    conv = load_locomo(LOCOMO_MINI)[0]
    # The runner answers the first question of the first conversation.
    spec = EvalSpec(benchmark="locomo", data=str(LOCOMO_MINI), store=str(tmp_path / "runner.sqlite"),
                    out=str(tmp_path / "run"), limit=1, conversations=(conv.namespace,), judge=False,
                    progress=False)
    EvalRunner(spec, cfg, echo=lambda s: None).run()
    rows = read_jsonl(Path(spec.out) / "answers.jsonl")
    question = rows[0]["question"]
    assert rows[0]["prediction"] == "a scripted answer"
    runner = answer_requests(tmp_path / "runner.sqlite", question)
    assert len(runner) == 1

    # Memory.answer
    with Memory(tmp_path / "memory.sqlite", cfg) as mem:
        mem.add(conv.namespace, conv)
        got = mem.answer(conv.namespace, question)
        assert got.text == "a scripted answer" and got.model == "_service_backend:SlowExtractionBackend smollm2-135m"
    # ask
    with Memory(tmp_path / "ask.sqlite", cfg) as mem:
        mem.add(conv.namespace, conv)
    conf = write_config(tmp_path / "cfg.yaml", CONFIG)
    assert main(["ask", conv.namespace, question, "--store", str(tmp_path / "ask.sqlite"), "--config", str(conf),
                 "--quiet"]) == 0
    # /answer of a server over the same turns (stored under the user's namespace)
    ns = namespace_for("local", "u")
    with Memory(tmp_path / "service.sqlite", cfg) as mem:
        mem.add(ns, conv)
    with running(tmp_path / "service.sqlite", config=conf) as srv:
        r = httpx.post(f"{srv.url}/v1/memories/u/answer", json={"query": question}, timeout=60)
        assert r.status_code == 200, r.text
        assert r.json()["answer"] == "a scripted answer"
        assert r.json()["answer_model"] == "_service_backend:SlowExtractionBackend smollm2-135m"
        assert "answer model _service_backend:SlowExtractionBackend smollm2-135m" in srv.log_text()

    for name in ("memory", "ask", "service"):
        assert answer_requests(tmp_path / f"{name}.sqlite", question) == runner, name
    # The small-model settings are what all four applied (the short prompt, its cap).
    assert runner[0]["max_tokens"] <= 256 and runner[0]["prompt_version"]
