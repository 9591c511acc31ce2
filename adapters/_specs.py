"""Turning an output spec into each backend's constrained-decoding argument.

Every function here is pure (no heavy imports), so request building can be tested with
no model package installed. The schema a decoder receives is always the one the core
validates against afterwards: ``JsonSchemaSpec.schema`` or ``RankingSpec.json_schema()``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from memcompile_local.errors import ConfigError
from memcompile_local.llm.interface import JsonSchemaSpec, Message, OutputSpec, RankingSpec, TextSpec

# Whitespace allowed between JSON tokens in regex-based constrained decoding. One optional
# space: small models left free to emit whitespace tend to loop on newlines until the token
# budget runs out.
COMPACT_WHITESPACE = r"[ ]?"

_NAME_OK = re.compile(r"[^a-zA-Z0-9_-]")

SERVER_KINDS = ("openai", "vllm", "vllm-legacy", "llamacpp", "sglang", "ollama")


def embed_inputs(texts: Any) -> list[str]:
    """The texts of an ``Embedder.embed`` call as a list, each checked to be a string."""
    items = list(texts)
    for i, t in enumerate(items):
        if not isinstance(t, str):
            raise ConfigError(f"embed(texts): item {i} is {type(t).__name__}, expected str")
    return items


def json_schema_of(spec: OutputSpec) -> dict[str, Any] | None:
    """The JSON schema a spec constrains to, or None for free text."""
    if isinstance(spec, TextSpec):
        return None
    if isinstance(spec, RankingSpec):
        return spec.json_schema()
    if isinstance(spec, JsonSchemaSpec):
        return spec.schema
    raise ConfigError(f"unknown output spec type {type(spec).__name__}; expected TextSpec, JsonSchemaSpec or RankingSpec")


def schema_key(schema: dict[str, Any]) -> str:
    """Compact JSON text of a schema: what regex compilers receive and the cache key of the
    compiled constraint.

    Keys are NOT sorted: regex-based decoders emit properties in the order the schema
    declares them, and that order is part of the prompt design (a model writes the fields
    it sees first first). Two schemas differing only in property order compile separately.
    """
    return json.dumps(schema, ensure_ascii=False, separators=(",", ":"))


def spec_name(spec: OutputSpec) -> str:
    """A name for the schema that satisfies OpenAI's ``^[a-zA-Z0-9_-]{1,64}$`` rule."""
    raw = "ranking" if isinstance(spec, RankingSpec) else getattr(spec, "name", "output")
    name = _NAME_OK.sub("_", raw or "output")[:64]
    return name or "output"


def chat_messages(messages: tuple[Message, ...] | list[Message]) -> list[dict[str, str]]:
    """Messages in the OpenAI/vLLM/llama.cpp chat format ``[{"role", "content"}, ...]``."""
    out = []
    for i, m in enumerate(messages):
        if m.role not in ("system", "user", "assistant"):
            raise ConfigError(f"message {i}: role {m.role!r} is not one of system/user/assistant")
        out.append({"role": m.role, "content": m.content})
    if not out:
        raise ConfigError("a request needs at least one message")
    return out


def is_strict_compatible(schema: Any) -> bool:
    """Whether OpenAI's ``strict`` mode accepts ``schema``.

    Strict mode wants every object to list all its properties as required and to forbid
    additional properties. Pydantic schemas with optional fields do not, and sending them
    with strict=True is rejected by the server, so strictness is only switched on when the
    schema already has that shape.
    """
    if isinstance(schema, dict):
        if schema.get("type") == "object" or "properties" in schema:
            props = schema.get("properties", {})
            if schema.get("additionalProperties", True) is not False:
                return False
            if set(schema.get("required", [])) != set(props):
                return False
        return all(is_strict_compatible(v) for v in schema.values())
    if isinstance(schema, list):
        return all(is_strict_compatible(v) for v in schema)
    return True


def openai_response_format(spec: OutputSpec, strict: bool | None = None) -> dict[str, Any] | None:
    """``response_format`` for the OpenAI chat API (``json_schema`` type), or None for text.

    ``strict=None`` means: strict exactly when the schema allows it.
    """
    schema = json_schema_of(spec)
    if schema is None:
        return None
    use_strict = is_strict_compatible(schema) if strict is None else bool(strict)
    return {
        "type": "json_schema",
        "json_schema": {"name": spec_name(spec), "schema": schema, "strict": use_strict},
    }


def llamacpp_response_format(spec: OutputSpec) -> dict[str, Any] | None:
    """``response_format`` understood by llama-cpp-python (server and create_chat_completion).

    llama-cpp-python accepts only the ``json_object`` type, with the schema alongside; it
    compiles the schema to a GBNF grammar.
    """
    schema = json_schema_of(spec)
    if schema is None:
        return None
    return {"type": "json_object", "schema": schema}


def vllm_server_extra_body(spec: OutputSpec, legacy: bool = False) -> dict[str, Any] | None:
    """vLLM's own structured-output request field for ``vllm serve``.

    vLLM 0.12 and later read ``{"structured_outputs": {"json": schema}}``; earlier versions
    read ``{"guided_json": schema}`` (``legacy=True``).
    """
    schema = json_schema_of(spec)
    if schema is None:
        return None
    if legacy:
        return {"guided_json": schema}
    return {"structured_outputs": {"json": schema}}


def openai_chat_kwargs(
    request_messages: tuple[Message, ...],
    spec: OutputSpec,
    *,
    model: str,
    max_tokens: int,
    temperature: float,
    seed: int,
    server_kind: str = "openai",
    strict: bool | None = None,
    extra_body: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Keyword arguments for ``client.chat.completions.create`` for one request.

    The constraint goes where the server kind reads it: ``response_format`` json_schema for
    OpenAI, SGLang and Ollama; json_object+schema for llama.cpp's server; vLLM's own body
    field for vLLM (sent instead of response_format, so the server sees a single constraint).
    """
    if server_kind not in SERVER_KINDS:
        raise ConfigError(f"server_kind {server_kind!r} is not one of {', '.join(SERVER_KINDS)}")
    kwargs: dict[str, Any] = {
        "model": model,
        "messages": chat_messages(request_messages),
        "max_tokens": int(max_tokens),
        "temperature": float(temperature),
        "seed": int(seed),
    }
    body: dict[str, Any] = dict(extra_body or {})
    if server_kind in ("vllm", "vllm-legacy"):
        extra = vllm_server_extra_body(spec, legacy=server_kind == "vllm-legacy")
        if extra:
            body.update(extra)
    elif server_kind == "llamacpp":
        fmt = llamacpp_response_format(spec)
        if fmt is not None:
            kwargs["response_format"] = fmt
        # llama-cpp-python's server applies a repeat penalty of 1.1 unless told otherwise,
        # even under greedy decoding; OpenAI semantics (and the in-process backend) have none.
        # Measured on SmolLM2: with the penalty, rankings repeat one label five times.
        body = {"repeat_penalty": 1.0, **body}
    else:
        fmt = openai_response_format(spec, strict)
        if fmt is not None:
            kwargs["response_format"] = fmt
    if body:
        kwargs["extra_body"] = body
    return kwargs
