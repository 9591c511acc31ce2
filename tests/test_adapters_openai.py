"""OpenAICompatBackend against a scripted fake server (faults) and a real llama.cpp server."""

from __future__ import annotations

import json
import threading
import time

import pytest

pytest.importorskip("openai")

from _fake_openai import FakeOpenAIServer, Reply, chat_body, closed_port  # noqa: E402
from _llama_server import llama_server  # noqa: E402,F401  (fixture)
from pydantic import BaseModel, Field  # noqa: E402

from memcompile_local.adapters.openai_compat import OpenAICompatBackend, parse_retry_after  # noqa: E402
from memcompile_local.errors import ConfigError, OutputValidationError, TransportError  # noqa: E402
from memcompile_local.llm.interface import (  # noqa: E402
    JsonSchemaSpec,
    LLMRequest,
    Message,
    RankingSpec,
    TextSpec,
)
from memcompile_local.llm.validate import validate_response  # noqa: E402

LABELS = tuple(f"C{i:03d}" for i in range(1, 13))


class Person(BaseModel):
    name: str
    age: int


class ShortPerson(BaseModel):
    """Bounded string: a constrained small model cannot spend its whole budget inside it."""

    name: str = Field(max_length=24)
    age: int


def req(text: str = "hi", output=TextSpec(), **kw) -> LLMRequest:
    return LLMRequest(messages=(Message("user", text),), stage="answer", output=output, **kw)


def backend(srv: FakeOpenAIServer, **kw) -> OpenAICompatBackend:
    kw.setdefault("max_retries", 0)
    kw.setdefault("timeout", 10.0)
    return OpenAICompatBackend("fake-model", base_url=srv.base_url, **kw)


# -- request shape --------------------------------------------------------------------


def test_request_body_carries_schema_seed_temperature_and_max_tokens():
    with FakeOpenAIServer(lambda p, b, n: Reply(body=chat_body('{"name": "Ann", "age": 3}'))) as srv:
        r = req("who?", JsonSchemaSpec.from_model(Person), max_tokens=77, temperature=0.0, seed=5)
        [resp] = backend(srv).generate([r])
    path, body = srv.requests[0]
    assert path == "/v1/chat/completions"
    assert body["model"] == "fake-model"
    assert body["messages"] == [{"role": "user", "content": "who?"}]
    assert body["max_tokens"] == 77 and body["seed"] == 5 and body["temperature"] == 0.0
    fmt = body["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["name"] == "Person"
    assert fmt["json_schema"]["schema"] == Person.model_json_schema()
    assert resp.text == '{"name": "Ann", "age": 3}'
    assert (resp.prompt_tokens, resp.completion_tokens, resp.finish_reason) == (11, 7, "stop")
    assert validate_response(r, resp).parsed == {"name": "Ann", "age": 3}


def test_vllm_server_kind_sends_structured_outputs_not_response_format():
    spec = RankingSpec(labels=LABELS, k=5)
    with FakeOpenAIServer(lambda p, b, n: Reply(body=chat_body("{}"))) as srv:
        backend(srv, server_kind="vllm").generate([req(output=spec)])
        backend(srv, server_kind="vllm-legacy").generate([req(output=spec)])
        backend(srv, server_kind="llamacpp").generate([req(output=spec)])
    new, legacy, llama = (b for _, b in srv.requests)
    assert new["structured_outputs"] == {"json": spec.json_schema()} and "response_format" not in new
    assert legacy["guided_json"] == spec.json_schema() and "response_format" not in legacy
    assert llama["response_format"] == {"type": "json_object", "schema": spec.json_schema()}
    assert llama["repeat_penalty"] == 1.0


def test_text_request_has_no_constraint():
    with FakeOpenAIServer(lambda p, b, n: Reply(body=chat_body("plain"))) as srv:
        [resp] = backend(srv).generate([req()])
    body = srv.requests[0][1]
    assert "response_format" not in body and "structured_outputs" not in body
    assert resp.text == "plain"


def test_concurrency_keeps_several_requests_in_flight_and_order_is_kept():
    def reply(path, body, hit):
        marker = body["messages"][0]["content"]
        # Earlier requests answer later, so completion order is the reverse of input order.
        delay = 0.05 * (6 - int(marker.split()[-1]))
        return Reply(body=chat_body(f"echo {marker}"), delay=delay)

    with FakeOpenAIServer(reply) as srv:
        out = backend(srv, concurrency=3).generate([req(f"item {i}") for i in range(6)])
    assert [o.text for o in out] == [f"echo item {i}" for i in range(6)]
    assert srv.max_in_flight == 3


def test_concurrency_one_is_sequential():
    with FakeOpenAIServer(lambda p, b, n: Reply(body=chat_body("x"), delay=0.02)) as srv:
        backend(srv, concurrency=1).generate([req(str(i)) for i in range(4)])
    assert srv.max_in_flight == 1 and len(srv.requests) == 4


# -- faults ---------------------------------------------------------------------------


def test_invalid_json_content_is_returned_and_fails_validation():
    spec = JsonSchemaSpec.from_model(Person)
    with FakeOpenAIServer(lambda p, b, n: Reply(body=chat_body("Sure! name is Ann"))) as srv:
        r = req(output=spec)
        [resp] = backend(srv).generate([r])
    assert resp.text == "Sure! name is Ann" and resp.finish_reason == "stop"
    with pytest.raises(OutputValidationError):
        validate_response(r, resp)


def test_truncated_output_reports_length():
    spec = JsonSchemaSpec.from_model(Person)
    with FakeOpenAIServer(lambda p, b, n: Reply(body=chat_body('{"name": "An', finish_reason="length",
                                                               completion_tokens=4))) as srv:
        r = req(output=spec, max_tokens=4)
        [resp] = backend(srv).generate([r])
    assert resp.finish_reason == "length" and resp.completion_tokens == 4
    with pytest.raises(OutputValidationError) as err:
        validate_response(r, resp)
    assert err.value.finish_reason == "length"


def test_429_with_retry_after_is_retryable_and_carries_the_delay():
    with FakeOpenAIServer(lambda p, b, n: Reply(429, {"error": {"message": "slow down"}},
                                                {"Retry-After": "7"})) as srv:
        with pytest.raises(TransportError) as err:
            backend(srv).generate([req()])
    assert err.value.retryable is True and err.value.status == 429 and err.value.retry_after == 7.0
    assert len(srv.requests) == 1  # max_retries=0: the client did not retry


def test_500_is_retryable():
    with FakeOpenAIServer(lambda p, b, n: Reply(500, {"error": {"message": "boom"}})) as srv:
        with pytest.raises(TransportError) as err:
            backend(srv).generate([req()])
    assert err.value.retryable is True and err.value.status == 500


def test_client_retries_5xx_itself_then_succeeds():
    def reply(path, body, hit):
        return Reply(503, {"error": {"message": "warming up"}}, {"Retry-After": "0"}) if hit == 1 \
            else Reply(body=chat_body("ok"))

    with FakeOpenAIServer(reply) as srv:
        [resp] = backend(srv, max_retries=1).generate([req()])
    assert resp.text == "ok" and len(srv.requests) == 2


def test_400_is_not_retryable():
    with FakeOpenAIServer(lambda p, b, n: Reply(400, {"error": {"message": "bad schema"}})) as srv:
        with pytest.raises(TransportError) as err:
            backend(srv).generate([req()])
    assert err.value.retryable is False and err.value.status == 400 and err.value.retry_after is None


def test_timeout_is_retryable():
    with FakeOpenAIServer(lambda p, b, n: Reply(body=chat_body("late"), delay=1.5)) as srv:
        with pytest.raises(TransportError) as err:
            backend(srv, timeout=0.3).generate([req()])
    assert err.value.retryable is True and err.value.status is None
    assert "timed out" in str(err.value)


def test_connection_refused_is_retryable():
    b = OpenAICompatBackend("m", base_url=f"http://127.0.0.1:{closed_port()}/v1", max_retries=0, timeout=5)
    with pytest.raises(TransportError) as err:
        b.generate([req()])
    assert err.value.retryable is True and "connection" in str(err.value).lower()


def test_body_that_is_not_json_is_a_transport_error():
    with FakeOpenAIServer(lambda p, b, n: Reply(200, "<html>proxy error</html>")) as srv:
        with pytest.raises(TransportError) as err:
            backend(srv).generate([req()])
    assert err.value.retryable is False and "non-JSON body" in str(err.value)


def test_body_declared_json_but_broken_is_a_retryable_transport_error():
    with FakeOpenAIServer(lambda p, b, n: Reply(200, '{"choices": [tru', {"Content-Type": "application/json"})) as srv:
        with pytest.raises(TransportError) as err:
            backend(srv).generate([req()])
    assert err.value.retryable is True and "not valid JSON" in str(err.value)


def test_body_without_choices_is_a_transport_error():
    with FakeOpenAIServer(lambda p, b, n: Reply(body={"id": "x", "object": "chat.completion",
                                                      "created": 1, "model": "m", "choices": []})) as srv:
        with pytest.raises(TransportError) as err:
            backend(srv).generate([req()])
    assert err.value.retryable is False and "no choices" in str(err.value)


def test_missing_usage_gives_zero_counts():
    with FakeOpenAIServer(lambda p, b, n: Reply(body=chat_body("x", usage=False))) as srv:
        [resp] = backend(srv).generate([req()])
    assert (resp.prompt_tokens, resp.completion_tokens) == (0, 0)


def test_one_failure_in_a_concurrent_batch_raises_after_the_rest_finish():
    def reply(path, body, hit):
        if body["messages"][0]["content"] == "bad":
            return Reply(400, {"error": {"message": "no"}})
        return Reply(body=chat_body("fine"), delay=0.1)

    with FakeOpenAIServer(reply) as srv:
        with pytest.raises(TransportError) as err:
            backend(srv, concurrency=4).generate([req("a"), req("bad"), req("c"), req("d")])
        time.sleep(0.05)
        served = len(srv.requests)
    assert err.value.status == 400 and served == 4
    assert threading.active_count() < 50  # no runaway threads left behind


# -- configuration and helpers --------------------------------------------------------


def test_config_errors():
    with pytest.raises(ConfigError):
        OpenAICompatBackend("m", base_url="http://127.0.0.1:1/v1", server_kind="tgi-ish")
    with pytest.raises(ConfigError):
        OpenAICompatBackend("m", base_url="http://127.0.0.1:1/v1", concurrency=0)
    with pytest.raises(ConfigError):
        OpenAICompatBackend("m", base_url="http://127.0.0.1:1/v1").generate([req(max_tokens=0)])


def test_model_base_url_and_key_from_environment(monkeypatch):
    monkeypatch.setenv("OPENAI_MODEL", "env-model")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1/")
    monkeypatch.setenv("MY_KEY", "secret-123")
    b = OpenAICompatBackend(api_key_env="MY_KEY")
    assert b.identity() == {"backend": "openai", "model": "env-model", "base_url": "http://127.0.0.1:9/v1",
                            "server_kind": "openai"}
    assert b._api_key == "secret-123"
    assert "secret" not in json.dumps(b.identity())
    monkeypatch.delenv("OPENAI_BASE_URL")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigError):
        OpenAICompatBackend("m")  # OpenAI's own API without a key


def test_parse_retry_after_forms():
    assert parse_retry_after({"retry-after": "2.5"}) == 2.5
    assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None
    future = time.time() + 120
    from email.utils import formatdate

    got = parse_retry_after({"retry-after": formatdate(future, usegmt=True)})
    assert got is not None and 100 < got <= 121


# -- real OpenAI-compatible server: llama.cpp's, on loopback ---------------------------


@pytest.mark.slow
def test_llama_cpp_server_concurrent_batch_with_json_schema(llama_server):
    """llama-cpp-python's server on 127.0.0.1, driven with concurrency 2."""
    spec = JsonSchemaSpec.from_model(ShortPerson)
    b = OpenAICompatBackend(llama_server.model_alias, base_url=llama_server.base_url, server_kind="llamacpp",
                            concurrency=2, max_retries=0, timeout=300)
    reqs = [
        req("Write one sentence about a cat.", max_tokens=24),
        req("Describe a person called Ann who is 31 years old.", spec, max_tokens=48),
        req("Write a poem about the sea.", spec, max_tokens=48),
        req("Name a colour.", max_tokens=8),
    ]
    out = b.generate(reqs)
    assert len(out) == 4
    for r, o in zip(reqs, out):
        assert o.prompt_tokens > 0 and 0 < o.completion_tokens <= r.max_tokens
        assert o.finish_reason in ("stop", "length")
    for i in (1, 2):
        parsed = validate_response(reqs[i], out[i]).parsed
        assert set(parsed) == {"name", "age"} and isinstance(parsed["age"], int) and len(parsed["name"]) <= 24
    assert out[3].completion_tokens <= 8


@pytest.mark.slow
def test_llama_cpp_server_rejects_openai_json_schema_format(llama_server):
    """llama-cpp-python's server only knows response_format json_object. Sent the OpenAI-style
    json_schema format it fails the request (measured: HTTP 500 carrying a pydantic
    validation message) instead of decoding unconstrained; the failure must surface as a
    TransportError, never as text. server_kind="llamacpp" is the working setting."""
    b = OpenAICompatBackend(llama_server.model_alias, base_url=llama_server.base_url, server_kind="openai",
                            max_retries=0, timeout=120)
    with pytest.raises(TransportError) as err:
        b.generate([req("hi", JsonSchemaSpec.from_model(Person), max_tokens=8)])
    assert err.value.status == 500 and err.value.retryable is True
    assert "validation" in str(err.value).lower()


@pytest.mark.slow
def test_llama_cpp_server_matches_in_process_grammar_decoding(llama_server):
    """Same model, same grammar constraint, greedy: the server path and the in-process
    path must produce the same text (this caught the server's default repeat penalty)."""
    from memcompile_local.adapters.llamacpp import LlamaCppBackend

    notes = "\n".join(f"{label}: a note about topic {i % 4}" for i, label in enumerate(LABELS))
    reqs = [
        LLMRequest(messages=(Message("system", "Rank the notes. JSON only."),
                             Message("user", f"Which 5 notes are about topic 2?\n{notes}")),
                   stage="frontier", output=RankingSpec(labels=LABELS, k=5), max_tokens=80),
        req("Describe a person called Bo who is 7.", JsonSchemaSpec.from_model(ShortPerson), max_tokens=48),
    ]
    server = OpenAICompatBackend(llama_server.model_alias, base_url=llama_server.base_url, server_kind="llamacpp",
                                 concurrency=1, max_retries=0, timeout=300).generate(reqs)
    local = LlamaCppBackend("smollm2-135m", n_threads=1, n_ctx=2048, constraint="grammar")
    try:
        inproc = local.generate(reqs)
    finally:
        local.close()
    assert [o.text for o in server] == [o.text for o in inproc]
    assert [o.completion_tokens for o in server] == [o.completion_tokens for o in inproc]
