"""The judge takes only what is meant for it: never the answer model's server, key or backend
options (regression: an OpenAI judge was built with the answer server's ``server_kind: vllm``
and ``extra_body``, and options naming a model or URL sent the "judge" to the answer model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memcompile_local.adapters.scripted import HashEmbedder
from memcompile_local.bench.judge_model import is_self_judge, resolve_judge
from memcompile_local.bench.runner import EvalRunner, EvalSpec
from memcompile_local.config import JudgeConfig, ModelConfig, PipelineConfig
from memcompile_local.errors import ConfigError
from memcompile_local.llm.registry import backend_kwargs, load_backend
from memcompile_local.pipeline.presets import apply_preset

from _data_paths import LOCOMO_MINI
from _fake_openai import FakeOpenAIServer, Reply, chat_body

VLLM_URL = "http://127.0.0.1:8000/v1"
OPENAI_URL = "https://api.openai.com/v1"


def vllm_answer(**options) -> ModelConfig:
    return ModelConfig(backend="openai", model="Qwen/Qwen2.5-7B-Instruct", base_url=VLLM_URL,
                       options={"server_kind": "vllm", "extra_body": {"top_k": 1}, **options})


def test_an_openai_judge_takes_none_of_the_answer_servers_options():
    judge = resolve_judge(vllm_answer(), JudgeConfig(backend="openai", model="gpt-4o-mini", base_url=OPENAI_URL))
    assert judge.options == {}
    kw = backend_kwargs(judge)
    assert "server_kind" not in kw and "extra_body" not in kw
    assert (kw["model"], kw["base_url"]) == ("gpt-4o-mini", OPENAI_URL)
    # Built for real (no network): OpenAI's structured-output form, no vLLM body fields.
    backend = load_backend(judge.backend, **kw, api_key="sk-test")
    assert backend.server_kind == "openai" and backend.extra_body == {}
    assert backend.base_url == OPENAI_URL


def test_a_judge_naming_no_server_goes_where_its_environment_says(monkeypatch):
    """No --judge-base-url: the OpenAI backend's own default ($OPENAI_BASE_URL, else OpenAI's
    API), never the answer server's URL, whether the answer is on a server or loaded in-process."""
    monkeypatch.setenv("OPENAI_BASE_URL", "http://judge-host:9000/v1")
    monkeypatch.setenv("JUDGE_KEY", "sk-judge")
    for answer in (vllm_answer(),
                   ModelConfig(backend="vllm", model="Qwen/Qwen2.5-7B-Instruct",
                               options={"gpu_memory_utilization": 0.45, "max_model_len": 32768})):
        judge = resolve_judge(answer, JudgeConfig(backend="openai", model="gpt-4o-mini", api_key_env="JUDGE_KEY"))
        assert judge.base_url is None and judge.options == {}
        backend = load_backend(judge.backend, **backend_kwargs(judge))
        assert backend.base_url == "http://judge-host:9000/v1" and backend.server_kind == "openai"
        assert backend._api_key == "sk-judge"


def test_options_that_name_a_model_server_or_key_never_reach_the_judge():
    answer = ModelConfig(backend="openai", model="answer-m",
                         options={"model": "answer-m", "base_url": VLLM_URL, "api_key": "sk-answer",
                                  "api_key_env": "ANSWER_KEY", "server_kind": "vllm"})
    judge = resolve_judge(answer, JudgeConfig(model="gpt-4o-mini", base_url=OPENAI_URL))
    kw = backend_kwargs(judge)
    assert (kw["model"], kw["base_url"], kw["api_key_env"]) == ("gpt-4o-mini", OPENAI_URL, "OPENAI_API_KEY")
    assert "api_key" not in kw and kw.get("server_kind") is None
    # The same backend with no server named on either side is the same place: the server's own
    # options carry over, the endpoint keys still do not.
    near = resolve_judge(answer, JudgeConfig(model="judge-m"))
    assert near.options == {"server_kind": "vllm"}
    # A judge that would be built as the answer model (its model and server come from options)
    # is the answer model judging itself.
    with pytest.raises(ConfigError, match="judge would be the answer model itself"):
        resolve_judge(answer, JudgeConfig(model="answer-m", base_url=VLLM_URL + "/"))
    assert is_self_judge(answer, ModelConfig(backend="openai", model="answer-m", base_url=VLLM_URL))


def test_a_judge_on_the_answer_server_keeps_that_servers_options():
    judge = resolve_judge(vllm_answer(max_retries=0), JudgeConfig(model="judge-m", base_url=VLLM_URL + "/"))
    assert judge.options == {"server_kind": "vllm", "extra_body": {"top_k": 1}, "max_retries": 0}
    assert not is_self_judge(vllm_answer(), judge)
    # Another backend altogether takes nothing.
    assert resolve_judge(vllm_answer(), JudgeConfig(backend="llamacpp", model="qwen2.5-1.5b")).options == {}


def test_eval_sends_the_answer_models_extras_to_its_server_only(tmp_path):
    """Two servers on 127.0.0.1: the answer model's ``extra_body`` reaches every answer request
    and no judge request."""
    pytest.importorskip("openai")

    def answer_reply(path, body, hit):
        return Reply(body=chat_body("Biscuit"))

    def judge_reply(path, body, hit):
        return Reply(body=chat_body(json.dumps({"label": "CORRECT"}) if body.get("max_tokens") != 1 else "OK"))

    with FakeOpenAIServer(answer_reply) as answer_srv, FakeOpenAIServer(judge_reply) as judge_srv:
        cfg = apply_preset("model-free", PipelineConfig()).replace(
            model={"backend": "openai", "model": "answer-m", "base_url": answer_srv.base_url,
                   "options": {"max_retries": 0, "extra_body": {"answer_server_only": 7}}},
            judge={"backend": "openai", "model": "judge-m", "base_url": judge_srv.base_url})
        spec = EvalSpec(benchmark="locomo", data=str(LOCOMO_MINI), store=str(tmp_path / "s.sqlite"),
                        out=str(tmp_path / "run"), limit=2, progress=False)
        result = EvalRunner(spec, cfg, embedder=HashEmbedder(dim=64), echo=lambda s: None).run()
        answer_bodies = [b for _, b in answer_srv.requests]
        judge_bodies = [b for _, b in judge_srv.requests]
    assert answer_bodies and all(b.get("answer_server_only") == 7 for b in answer_bodies)
    assert len(judge_bodies) == 1 + 4  # the health call, then one per question
    assert all("answer_server_only" not in b and b["model"] == "judge-m" for b in judge_bodies)
    assert result["metrics"]["overall"]["judge"]["accuracy"] == 1.0
    info = json.loads((Path(spec.out) / "config.json").read_text())["judge"]
    assert (info["model"], info["base_url"]) == ("judge-m", judge_srv.base_url)
