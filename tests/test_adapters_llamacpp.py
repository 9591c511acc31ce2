"""LlamaCppBackend end to end with the shipped SmolLM2-135M GGUF (CPU)."""

from __future__ import annotations

import logging
import os
import sys

import pytest

pytest.importorskip("llama_cpp")

from pydantic import BaseModel, Field  # noqa: E402

from memcompile_local.adapters.llamacpp import LlamaCppBackend  # noqa: E402
from memcompile_local.adapters.models import SMOLLM2_SHA256  # noqa: E402
from memcompile_local.errors import MissingExtraError, OutputValidationError, TransportError  # noqa: E402
from memcompile_local.llm.interface import (  # noqa: E402
    JsonSchemaSpec,
    LLMRequest,
    Message,
    RankingSpec,
    TextSpec,
)
from memcompile_local.llm.validate import extract_json, validate_response  # noqa: E402

pytestmark = pytest.mark.slow
log = logging.getLogger(__name__)

LABELS = tuple(f"C{i:03d}" for i in range(1, 13))
TOPICS = ["cats", "the weather", "a trip to Paris", "cooking pasta"]


class Event(BaseModel):
    # Every field is bounded: outlines-core ignores integer minimum/maximum (its integer
    # regex has unbounded digits), and a 135M model asked for a poem will happily fill an
    # unbounded field until the token budget runs out.
    who: str = Field(max_length=30)
    what: str = Field(max_length=60)
    year: str = Field(pattern=r"^[0-9]{4}$")


# One thread: on a CPU shared with other jobs, llama.cpp's threads wait on each other at every
# layer, and a descheduled thread stalls the rest (measured here: 6 requests took 4 s with one
# thread every time, 3 to 21 s with two).
@pytest.fixture(scope="module", params=["outlines", "grammar"])
def backend(request):
    b = LlamaCppBackend("smollm2-135m", n_threads=1, n_ctx=2048, constraint=request.param)
    yield b
    b.close()


def ranking_request(topic: str) -> LLMRequest:
    lines = "\n".join(f"{label}: a note about {TOPICS[i % len(TOPICS)]} number {i}" for i, label in enumerate(LABELS))
    return LLMRequest(
        messages=(
            Message("system", "You rank candidate notes by relevance. Answer with JSON only."),
            Message("user", f"Which 5 notes are most relevant to {topic}?\n{lines}"),
        ),
        stage="frontier",
        output=RankingSpec(labels=LABELS, k=5),
        max_tokens=80,
    )


def test_identity_pins_the_weights(backend):
    ident = backend.identity()
    assert ident["backend"] == "llamacpp" and ident["model"] == "smollm2-135m"
    assert ident["weights_sha256"] == SMOLLM2_SHA256
    assert ident["constraint"] == backend.constraint


def test_json_schema_output_validates_even_when_the_prompt_asks_for_prose(backend):
    spec = JsonSchemaSpec.from_model(Event)
    reqs = [
        LLMRequest(messages=(Message("user", "Write a long poem about the sea."),), stage="extract",
                   output=spec, max_tokens=120),
        LLMRequest(messages=(Message("system", "Extract the event as JSON."),
                             Message("user", "In 1969 Neil Armstrong walked on the Moon.")),
                   stage="extract", output=spec, max_tokens=120),
    ]
    out = backend.generate(reqs)
    for r, o in zip(reqs, out):
        assert o.finish_reason == "stop", o
        assert o.prompt_tokens > 0 and 0 < o.completion_tokens <= r.max_tokens
        parsed = validate_response(r, o).parsed
        assert list(parsed) == ["who", "what", "year"]  # declared property order is kept
        assert len(parsed["year"]) == 4 and parsed["year"].isdigit()


def test_the_same_prose_prompt_unconstrained_is_not_json(backend):
    """Control for the test above: the constraint, not the model, produces the JSON."""
    r = LLMRequest(messages=(Message("user", "Write a long poem about the sea."),), stage="answer",
                   output=TextSpec(), max_tokens=60)
    [o] = backend.generate([r])
    with pytest.raises(ValueError):
        extract_json(o.text)


def test_closed_ranking_5_of_12(backend):
    reqs = [ranking_request(t) for t in TOPICS]
    out = backend.generate(reqs)
    duplicates = 0
    for r, o in zip(reqs, out):
        assert o.finish_reason == "stop", o
        items = extract_json(o.text)["ranked_candidate_ids"]
        # The constraint guarantees the count and that every label is one of the 12 ...
        assert len(items) == 5 and set(items) <= set(LABELS)
        # ... but not distinctness (uniqueItems is not enforced): then the validator refuses.
        if len(set(items)) < 5:
            duplicates += 1
            with pytest.raises(OutputValidationError) as err:
                validate_response(r, o)
            assert "duplicate" in str(err.value)
        else:
            assert validate_response(r, o).parsed == items
    log.warning("llama.cpp %s ranking: %d of %d outputs repeated a label", backend.constraint, duplicates, len(reqs))


def test_max_tokens_is_passed(backend):
    """llama-cpp-python's own default is 16 tokens; the request's budget must win."""
    r = LLMRequest(messages=(Message("user", "Tell me a long story about a dragon."),), stage="answer",
                   max_tokens=40)
    [o] = backend.generate([r])
    assert o.finish_reason == "length" and o.completion_tokens == 40


def test_deterministic_regardless_of_the_previous_request(backend):
    r = ranking_request("cooking pasta")
    first = backend.generate([r])[0]
    backend.generate([ranking_request("cats")])
    again = backend.generate([r])[0]
    assert first == again


def test_prompt_longer_than_the_context_is_not_retryable():
    b = LlamaCppBackend("smollm2-135m", n_threads=1, n_ctx=128)
    r = LLMRequest(messages=(Message("user", "word " * 400),), stage="answer", max_tokens=8)
    with pytest.raises(TransportError) as err:
        b.generate([r])
    assert err.value.retryable is False and "n_ctx=128" in str(err.value)
    b.close()


def test_default_thread_count_is_cpu_count():
    assert LlamaCppBackend("smollm2-135m").n_threads == (os.cpu_count() or 1)


def test_outlines_without_numba_refuses_instead_of_decoding_unconstrained(monkeypatch):
    """Measured: with numba missing, outlines' numpy kernel fails inside llama.cpp's sampler
    callback, the error is swallowed and the text comes out unconstrained."""
    b = LlamaCppBackend("smollm2-135m", n_threads=1, n_ctx=512, constraint="outlines")
    monkeypatch.setitem(sys.modules, "numba", None)
    r = LLMRequest(messages=(Message("user", "hi"),), stage="extract", output=JsonSchemaSpec.from_model(Event),
                   max_tokens=8)
    with pytest.raises(MissingExtraError) as err:
        b.generate([r])
    assert err.value.package == "numba" and err.value.extra == "cpu"
    # The grammar route does not need numba.
    g = LlamaCppBackend("smollm2-135m", n_threads=1, n_ctx=512, constraint="grammar")
    [o] = g.generate([LLMRequest(messages=(Message("user", "hi"),), stage="extract",
                                 output=JsonSchemaSpec.from_model(Event), max_tokens=100)])
    assert set(validate_response(r, o).parsed) == {"who", "what", "year"}
    b.close()
    g.close()
