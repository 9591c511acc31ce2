"""Pydantic models of the JSON objects the Address-Plane prompts ask a model for.

Their JSON schemas are handed to backends (constrained decoding) through the spec that
``llm.interface.spec_for`` builds; the client validates every response once, through the
model the spec carries, and the extractor takes the instance (:func:`parse_model`). The
schemas are written out without ``$ref`` indirection (``inline_schema``) because some grammar
compilers handle only a self-contained schema, and every property is required with no extra
properties, which is what strict structured-output modes expect.

Fields whose exact value a small model often gets slightly wrong but that the pipeline can
repair (keyword count, confidence range) are left unconstrained here and cleaned up by the
extractor, so a usable answer is not thrown away for a cosmetic violation. Closed
vocabularies (event type, polarity) are enums: the pipeline depends on their values.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from memcompile_local.errors import OutputValidationError
from memcompile_local.llm.interface import LLMResponse, inline_schema, spec_for

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


def parse_model(model: type[BaseModel], response: LLMResponse, stage: str) -> Any:
    """The ``model`` instance that validation built for a response of ``stage``.

    The client validated the response once, through the spec's model (``spec_for``); this
    only hands that instance back. A response that was not validated as ``model`` (a backend
    called without the client, or a spec built for another model) is an
    ``OutputValidationError`` carrying the raw text, finish reason and token counts.
    """
    if isinstance(response.validated, model):
        return response.validated
    raise OutputValidationError(
        f"stage {stage!r}: the response was not validated as {model.__name__}; "
        "send the request through the client with spec_for(" + model.__name__ + ")",
        text=response.text, finish_reason=response.finish_reason, parsed=response.parsed,
        prompt_tokens=response.prompt_tokens, completion_tokens=response.completion_tokens,
    )
