"""The one model interface every LLM stage goes through.

A backend receives a batch of typed ``LLMRequest`` objects and returns one ``LLMResponse``
per request, in order. Output specs say what shape the text must have; backends turn a spec
into their own constrained-decoding argument, and the core validates every result anyway
(``llm.validate``). A JSON spec built by :func:`spec_for` carries its pydantic model, and
validation builds the model instance once (``LLMResponse.validated``).
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, Sequence, runtime_checkable

from memcompile_local.errors import ConfigError

Stage = Literal["fact", "metadata", "extract", "intent", "schedule", "frontier", "answer", "judge"]
STAGES: tuple[str, ...] = ("fact", "metadata", "extract", "intent", "schedule", "frontier", "answer", "judge")


@dataclass(frozen=True)
class Message:
    role: Literal["system", "user", "assistant"]
    content: str


@dataclass(frozen=True)
class TextSpec:
    """Free text (answers)."""

    kind: Literal["text"] = "text"

    def identity(self) -> dict[str, Any]:
        return {"kind": "text"}


@dataclass(frozen=True)
class JsonSchemaSpec:
    """A JSON value that must validate against ``schema``.

    ``model`` is the pydantic model the schema came from, when there is one: validation then
    goes through the model (strict JSON semantics) and hands back its instance. It is not
    part of the request identity, so the cache key depends on the schema text only. A spec
    without a model (a hand-written schema) is checked with the ``jsonschema`` library.
    Pipeline stages build their specs with :func:`spec_for`.
    """

    schema: dict[str, Any]
    name: str = "output"
    kind: Literal["json"] = "json"
    model: type | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_model(cls, model: type, name: str | None = None) -> "JsonSchemaSpec":
        """A spec with the model's full schema (titles and descriptions kept) and the model."""
        return cls(schema=model.model_json_schema(), name=name or model.__name__, model=model)

    def identity(self) -> dict[str, Any]:
        return {"kind": "json", "name": self.name, "schema": self.schema}


def inline_schema(model: type) -> dict[str, Any]:
    """A pydantic model's JSON schema with every local ``$ref`` replaced by its definition.

    ``title`` and ``description`` annotations are dropped too: they only cost grammar tokens,
    and a docstring edit must not change the request identity (and so the cache key). Some
    grammar compilers handle only a self-contained schema, hence the inlining.
    """
    schema = model.model_json_schema()  # type: ignore[attr-defined]
    defs = schema.pop("$defs", {})

    def expand(node: Any) -> Any:
        """Expand one schema node (a dict that is a schema, never a ``properties`` map)."""
        if isinstance(node, list):
            return [expand(x) for x in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[-1]
            target = copy.deepcopy(defs[name])
            target.update({k: v for k, v in node.items() if k != "$ref"})
            return expand(target)
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in ("title", "description"):
                continue
            if key == "properties" and isinstance(value, dict):
                out[key] = {name: expand(sub) for name, sub in value.items()}
            else:
                out[key] = expand(value)
        return out

    return expand(schema)


_SPECS: dict[tuple[type, str], JsonSchemaSpec] = {}
_SPECS_LOCK = threading.Lock()


def spec_for(model: type, name: str | None = None) -> JsonSchemaSpec:
    """The shared builder of JSON output specs: ``model``'s inlined schema, carrying ``model``.

    ``name`` defaults to the model's class name. One spec per (model, name) is built and
    reused; specs are frozen, so threads may share them.
    """
    key = (model, name or model.__name__)
    with _SPECS_LOCK:
        spec = _SPECS.get(key)
        if spec is None:
            spec = JsonSchemaSpec(schema=inline_schema(model), name=key[1], model=model)
            _SPECS[key] = spec
    return spec


@dataclass(frozen=True)
class RankingSpec:
    """An ordered ranking of exactly ``k`` distinct labels drawn from ``labels``.

    The JSON shape on the wire is ``{"ranked_candidate_ids": [label, ...]}``.
    """

    labels: tuple[str, ...]
    k: int
    field_name: str = "ranked_candidate_ids"
    kind: Literal["ranking"] = "ranking"

    def identity(self) -> dict[str, Any]:
        return {"kind": "ranking", "labels": list(self.labels), "k": self.k, "field": self.field_name}

    def json_schema(self) -> dict[str, Any]:
        """The schema handed to constrained decoders (uniqueItems is advisory: outlines ignores it)."""
        return {
            "type": "object",
            "properties": {
                self.field_name: {
                    "type": "array",
                    "items": {"type": "string", "enum": list(self.labels)},
                    "minItems": self.k,
                    "maxItems": self.k,
                    "uniqueItems": True,
                }
            },
            "required": [self.field_name],
            "additionalProperties": False,
        }


OutputSpec = TextSpec | JsonSchemaSpec | RankingSpec


@dataclass(frozen=True)
class LLMRequest:
    messages: tuple[Message, ...]
    stage: str
    output: OutputSpec = field(default_factory=TextSpec)
    max_tokens: int = 2048
    temperature: float = 0.0
    seed: int = 0
    prompt_version: str = ""
    namespace: str | None = None  # the memory whose text the prompt contains (for forget)

    def checked_max_tokens(self) -> int:
        """The completion cap as an int, for a backend to send; ``ConfigError`` when it is not
        positive (a server would refuse it, or a library fall back to its own small default)."""
        if self.max_tokens <= 0:
            raise ConfigError(f"request stage={self.stage}: max_tokens must be positive, got {self.max_tokens}")
        return int(self.max_tokens)

    def identity(self) -> dict[str, Any]:
        """Everything about the request that shapes the response (backend identity is added by the cache)."""
        return {
            "messages": [[m.role, m.content] for m in self.messages],
            "stage": self.stage,
            "output": self.output.identity(),
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "seed": self.seed,
            "prompt_version": self.prompt_version,
        }


@dataclass(frozen=True)
class LLMResponse:
    text: str
    parsed: Any = None  # dict for JsonSchemaSpec, list[str] for RankingSpec, str for TextSpec
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = "stop"
    cached: bool = False
    # The instance of the JSON spec's pydantic model, built by validation (not cached: it is
    # rebuilt from ``parsed`` whenever a cached response is validated again).
    validated: Any = field(default=None, compare=False, repr=False)


@runtime_checkable
class LLMBackend(Protocol):
    """A model that answers batches of requests.

    ``identity()`` returns what distinguishes this model from another for caching: backend
    kind, model name, base URL or weights hash. ``generate`` returns raw responses (``parsed``
    may be None); validation happens in the core. Transport failures raise
    ``TransportError``; a response that cannot even be produced raises it too.
    """

    def identity(self) -> dict[str, Any]: ...

    def generate(self, requests: Sequence[LLMRequest]) -> list[LLMResponse]: ...


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into l2-normalized float32 vectors."""

    def identity(self) -> dict[str, Any]: ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> "Any":  # numpy.ndarray of shape (n, dim), float32
        ...


def stable_hash(obj: Any) -> str:
    """sha256 of sorted-key compact JSON: the cache key of a request identity."""
    data = json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(data.encode("utf-8")).hexdigest()
