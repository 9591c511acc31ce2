"""Pydantic models of the JSON objects the Address-Plane prompts ask a model for.

Their JSON schemas are handed to backends (constrained decoding) through
``JsonSchemaSpec``; the client validates every response against the same schema, and the
extractor then reads the validated dict through these models. The schemas are written out
without ``$ref`` indirection (:func:`inline_schema`) because some grammar compilers handle
only a self-contained schema, and every property is required with no extra properties,
which is what strict structured-output modes expect.

Fields whose exact value a small model often gets slightly wrong but that the pipeline can
repair (keyword count, confidence range) are left unconstrained here and cleaned up by the
extractor, so a usable answer is not thrown away for a cosmetic violation. Closed
vocabularies (event type, polarity) are enums: the pipeline depends on their values.
"""

from __future__ import annotations

import copy
from typing import Annotated, Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from memcompile_local.errors import OutputValidationError
from memcompile_local.llm.interface import JsonSchemaSpec, LLMResponse

__all__ = [
    "FactList",
    "EventModel",
    "ClaimMetadata",
    "CombinedClaim",
    "CombinedExtraction",
    "IntentModel",
    "inline_schema",
    "spec_for",
    "parse_model",
    "EventType",
    "Polarity",
]

EventType = Literal["occurrence", "plan", "state", "preference", "relationship"]
Polarity = Literal["positive", "negative", "neutral", "unknown"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# Upper bounds on list lengths. They are loose on purpose (the extractor trims to the real
# limits, e.g. five keywords) but finite, so that a grammar-constrained small model that
# starts repeating list items is forced to close the list instead of running into
# max_tokens with unparseable output.
MAX_FACTS = 16
MAX_PEOPLE = 10
MAX_KEYWORDS_LISTED = 8
MAX_TERMS = 6

_Facts = Annotated[list[str], Field(max_length=MAX_FACTS)]
_People = Annotated[list[str], Field(max_length=MAX_PEOPLE)]
_Keywords = Annotated[list[str], Field(max_length=MAX_KEYWORDS_LISTED)]
_Terms = Annotated[list[str], Field(max_length=MAX_TERMS)]


class FactList(_Strict):
    """Output of the fact prompt: the standalone claims of one turn."""

    facts: _Facts


class EventModel(_Strict):
    """Event-role fields of one claim (mirrors ``types.EventFields``)."""

    subject_people: _People
    predicate: str
    focus_terms: _Terms
    goal_context_terms: _Terms
    event_type: EventType
    event_time: str
    polarity: Polarity
    confidence: float


class ClaimMetadata(_Strict):
    """Output of the metadata prompt for one claim."""

    people: _People
    keywords: _Keywords
    time: list[str] = Field(min_length=2, max_length=2)  # [event_time, interaction_time]
    needs_profile_extraction: bool
    event: EventModel


class CombinedClaim(_Strict):
    """One claim with its metadata (combined single-call mode)."""

    fact: str
    people: _People
    keywords: _Keywords
    time: list[str] = Field(min_length=2, max_length=2)
    needs_profile_extraction: bool
    event: EventModel


class CombinedExtraction(_Strict):
    """Output of the combined prompt: every claim of one turn with its metadata."""

    claims: Annotated[list[CombinedClaim], Field(max_length=MAX_FACTS)]


class IntentModel(_Strict):
    """Output of the query-intent prompt."""

    need_attribute: bool
    people: _People
    keywords: _Keywords
    time: Optional[str]


def inline_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema with every local ``$ref`` replaced by its definition.

    ``title`` and ``description`` annotations are dropped too: they only cost grammar tokens,
    and docstring edits must not change the request identity (and so the cache key).
    """
    schema = model.model_json_schema()
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


_SPECS: dict[type, JsonSchemaSpec] = {}


def spec_for(model: type[BaseModel]) -> JsonSchemaSpec:
    """A cached ``JsonSchemaSpec`` for ``model`` (named after the model)."""
    spec = _SPECS.get(model)
    if spec is None:
        spec = JsonSchemaSpec(schema=inline_schema(model), name=model.__name__)
        _SPECS[model] = spec
    return spec


def parse_model(model: type[BaseModel], response: LLMResponse, stage: str) -> Any:
    """Read a validated response of ``stage`` through ``model``.

    A response whose parsed JSON does not fit the model becomes ``OutputValidationError``
    carrying the raw text, finish reason and token counts, so the caller can log or retry.
    """
    try:
        return model.model_validate(response.parsed)
    except ValidationError as exc:
        raise OutputValidationError(
            f"stage {stage!r}: response does not fit {model.__name__}: {exc.errors()[:2]}",
            text=response.text, finish_reason=response.finish_reason, parsed=response.parsed,
            prompt_tokens=response.prompt_tokens, completion_tokens=response.completion_tokens,
        ) from None
