"""Output validation: text, JSON specs (through their pydantic model, or jsonschema for a
hand-written schema) and closed-label rankings."""

from __future__ import annotations

import json
from typing import Literal, Optional

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from memcompile_local.errors import OutputValidationError
from memcompile_local.address.schemas import IntentModel, parse_model
from memcompile_local.llm.interface import (
    JsonSchemaSpec,
    LLMRequest,
    LLMResponse,
    Message,
    RankingSpec,
    TextSpec,
    spec_for,
)
from memcompile_local.llm.validate import (
    apply_schema_alias,
    extract_json,
    ranking_problems,
    schema_errors,
    validate_response,
)


def _req(output, stage="extract", max_tokens=64) -> LLMRequest:
    return LLMRequest(messages=(Message("user", "q"),), stage=stage, output=output, max_tokens=max_tokens)


def _resp(text, finish="stop", p=7, c=3) -> LLMResponse:
    return LLMResponse(text=text, prompt_tokens=p, completion_tokens=c, finish_reason=finish)


# ------------------------------------------------------------------------------------- text


def test_text_is_stripped_and_original_kept():
    out = validate_response(_req(TextSpec()), _resp("  Paris \n"))
    assert out.parsed == "Paris"
    assert out.text == "  Paris \n"
    assert (out.prompt_tokens, out.completion_tokens) == (7, 3)


@pytest.mark.parametrize("text", ["", "   \n\t"])
def test_empty_text_is_an_error_with_tokens(text):
    with pytest.raises(OutputValidationError) as info:
        validate_response(_req(TextSpec(), stage="answer"), _resp(text, p=11, c=0))
    err = info.value
    assert "empty" in str(err) and "answer" in str(err)
    assert (err.prompt_tokens, err.completion_tokens, err.finish_reason) == (11, 0, "stop")


def test_truncated_text_that_is_non_empty_is_kept():
    out = validate_response(_req(TextSpec()), _resp("a partial answ", finish="length"))
    assert out.parsed == "a partial answ" and out.finish_reason == "length"


# ------------------------------------------------------------------------------ extraction


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"a": 1}', {"a": 1}),
        ('```json\n{"a": [1, 2]}\n```', {"a": [1, 2]}),
        ('```\n{"a": 2}\n```', {"a": 2}),
        ('Here is the JSON you asked for:\n{"a": "x}"} Hope it helps!', {"a": "x}"}),
        ('Sure. ```json\n{"a": {"b": "[not a list"}}\n``` done', {"a": {"b": "[not a list"}}),
        ('The [answer] is: {"a": 3}', {"a": 3}),  # "[answer]" is balanced but not JSON: skipped
        ('["C001", "C002"]', ["C001", "C002"]),
        ('{"a": "quote \\" and brace }"}', {"a": 'quote " and brace }'}),
    ],
)
def test_extract_json_tolerates_wrappers(text, expected):
    assert extract_json(text) == expected


@pytest.mark.parametrize(
    "text", ["", "no json here", '{"a": 1', "{'a': 1}", "```json\n{oops}\n```", '{"a": NaN}', "[Infinity]"]
)
def test_extract_json_rejects_non_json(text):
    with pytest.raises(ValueError):
        extract_json(text)


# ------------------------------------------------------------------- schema vs pydantic


class Person(BaseModel):
    name: str = Field(min_length=1)
    age: Optional[int] = None


class Event(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str
    kind: Literal["trip", "meal", "work"]
    people: list[Person] = Field(min_length=1, max_length=3)
    score: float = Field(ge=0.0, le=1.0)
    flags: dict[str, bool] = {}
    pair: tuple[int, str] = (0, "")
    tag: Literal["event"] = "event"
    note: Optional[str] = None
    done: bool = False


_GOOD = {"title": "t", "kind": "trip", "people": [{"name": "Ann"}], "score": 0.5}

EVENT_CASES = [
    _GOOD,
    {**_GOOD, "kind": "party"},
    {**_GOOD, "people": []},
    {**_GOOD, "people": [{"name": "a"}, {"name": "b"}, {"name": "c"}, {"name": "d"}]},
    {**_GOOD, "people": [{"name": ""}]},
    {**_GOOD, "people": [{"name": "Ann", "age": None}]},
    {**_GOOD, "people": [{"name": "Ann", "age": 31}]},
    {**_GOOD, "people": [{"name": "Ann", "age": "31"}]},
    {**_GOOD, "people": [{"age": 3}]},
    {**_GOOD, "score": 1.5},
    {**_GOOD, "score": -0.1},
    {**_GOOD, "score": 1},
    {**_GOOD, "score": True},
    {**_GOOD, "score": "0.5"},
    {**_GOOD, "flags": {"x": True}},
    {**_GOOD, "flags": {"x": 1}},
    {**_GOOD, "pair": [3, "b"]},
    {**_GOOD, "pair": ["b", 3]},
    {**_GOOD, "tag": "other"},
    {**_GOOD, "note": None},
    {**_GOOD, "note": 4},
    {**_GOOD, "done": 0},
    {**_GOOD, "extra_field": 1},
    {k: v for k, v in _GOOD.items() if k != "title"},
    {**_GOOD, "title": None},
    [_GOOD],
    "just a string",
]


def _accepted(spec: JsonSchemaSpec, value) -> bool:
    try:
        validate_response(_req(spec), _resp(json.dumps(value)))
        return True
    except OutputValidationError:
        return False


@pytest.mark.parametrize("value", EVENT_CASES, ids=range(len(EVENT_CASES)))
def test_model_spec_and_schema_spec_both_judge_like_strict_pydantic(value):
    """Reference check: a spec with its model (pydantic) and the same schema without one
    (jsonschema) accept exactly what strict JSON-mode pydantic accepts: no "31" for 31, no
    True for 1.0, no extra field."""
    try:
        Event.model_validate_json(json.dumps(value), strict=True)
        pydantic_ok = True
    except ValidationError:
        pydantic_ok = False
    assert _accepted(JsonSchemaSpec.from_model(Event), value) == pydantic_ok
    assert _accepted(JsonSchemaSpec(schema=Event.model_json_schema(), name="Event"), value) == pydantic_ok
    assert (not schema_errors(value, Event.model_json_schema())) == pydantic_ok


def test_schema_errors_name_paths():
    errors = schema_errors({**_GOOD, "people": [{"name": "Ann", "age": "x"}]}, Event.model_json_schema())
    assert errors and errors[0].startswith("$.people[0].age")
    with pytest.raises(OutputValidationError) as info:
        validate_response(_req(spec_for(Event)), _resp(json.dumps({**_GOOD, "people": [{"name": "Ann", "age": "x"}]})))
    assert "$.people[0].age" in str(info.value)


def test_schema_keywords_outside_pydantic_models():
    schema = {
        "type": "object",
        "properties": {
            "xs": {"type": "array", "items": {"type": "integer", "multipleOf": 2}, "uniqueItems": True},
            "code": {"type": "string", "pattern": "^C[0-9]{3}$"},
            "n": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
            "one": {"oneOf": [{"type": "integer"}, {"type": "number", "minimum": 5}]},
        },
    }
    assert schema_errors({"xs": [2, 4], "code": "C001", "n": 0.5, "one": 1}, schema) == []
    assert schema_errors({"xs": [2, 2]}, schema)  # not unique
    assert schema_errors({"xs": [3]}, schema)  # not a multiple
    assert schema_errors({"code": "C01"}, schema)
    assert schema_errors({"n": 0}, schema) and schema_errors({"n": 1}, schema)
    assert schema_errors({"one": 6}, schema)  # both oneOf branches match
    assert schema_errors({"one": 4.5}, schema)  # neither matches
    assert schema_errors({"one": 2.5}, schema)  # neither matches


def test_integer_accepts_integral_float_but_not_bool():
    assert schema_errors(3.0, {"type": "integer"}) == []
    assert schema_errors(3.5, {"type": "integer"})
    assert schema_errors(True, {"type": "integer"})
    assert schema_errors(False, {"type": "number"})


# --------------------------------------------------------------------- json spec via validate


class Facts(BaseModel):
    facts: list[str]


def test_json_spec_parsed_dict():
    spec = JsonSchemaSpec.from_model(Facts)
    out = validate_response(_req(spec), _resp('```json\n{"facts": ["a", "b"]}\n```'))
    assert out.parsed == {"facts": ["a", "b"]}


def test_validation_hands_back_the_model_instance_once():
    """The spec's model builds the instance during validation; parse_model only returns it."""
    out = validate_response(_req(spec_for(Facts)), _resp('{"facts": ["a"]}'))
    assert isinstance(out.validated, Facts) and out.validated.facts == ["a"]
    assert parse_model(Facts, out, "fact") is out.validated
    # A spec without a model validates the JSON but builds no instance.
    plain = validate_response(_req(JsonSchemaSpec(schema=spec_for(Facts).schema)), _resp('{"facts": ["a"]}'))
    assert plain.validated is None
    with pytest.raises(OutputValidationError, match="not validated as Facts"):
        parse_model(Facts, plain, "fact")
    with pytest.raises(OutputValidationError, match="not validated as IntentModel"):
        parse_model(IntentModel, out, "intent")  # an instance of another model is no answer


def test_spec_for_keeps_annotations_and_the_model_out_of_the_cache_identity():
    class Documented(BaseModel):
        """A docstring that must not reach the request identity."""

        facts: list[str] = Field(description="the claims")

    spec = spec_for(Documented, name="facts")
    text = json.dumps(spec.identity())
    assert "docstring" not in text and "the claims" not in text and '"title"' not in text
    assert "model" not in spec.identity()
    assert spec_for(Documented, name="facts") is spec  # built once
    # Same schema and name, another model: the same identity (and so the same cache key).
    twin = JsonSchemaSpec(schema=spec.schema, name="facts", model=Facts)
    assert twin.identity() == spec.identity() and twin == spec


def test_bare_array_is_wrapped_into_single_list_field():
    spec = JsonSchemaSpec.from_model(Facts)
    out = validate_response(_req(spec), _resp('["a", "b"]'))
    assert out.parsed == {"facts": ["a", "b"]}


def test_generic_wrapper_key_is_aliased():
    spec = JsonSchemaSpec.from_model(Facts)
    out = validate_response(_req(spec), _resp('{"items": ["a"]}'))
    assert out.parsed == {"facts": ["a"]}


def test_array_schema_unwraps_generic_object():
    spec = JsonSchemaSpec(schema={"type": "array", "items": {"type": "string"}}, name="facts")
    out = validate_response(_req(spec), _resp('{"facts": ["a", "b"]}'))
    assert out.parsed == ["a", "b"]


def test_alias_not_applied_when_ambiguous():
    class Two(BaseModel):
        a: list[str]
        b: list[str]

    schema = Two.model_json_schema()
    assert apply_schema_alias(["x"], schema) == ["x"]
    with pytest.raises(OutputValidationError):
        validate_response(_req(JsonSchemaSpec.from_model(Two)), _resp('["x"]'))


def test_alias_not_applied_when_other_field_required():
    class WithTitle(BaseModel):
        title: str
        facts: list[str]

    assert apply_schema_alias(["x"], WithTitle.model_json_schema()) == ["x"]


def test_schema_violation_keeps_partial_parse():
    spec = JsonSchemaSpec.from_model(Facts)
    with pytest.raises(OutputValidationError) as info:
        validate_response(_req(spec), _resp('{"facts": ["a", 3]}', p=5, c=9))
    err = info.value
    assert err.parsed == {"facts": ["a", 3]}
    assert "$.facts[1]" in str(err)
    assert (err.prompt_tokens, err.completion_tokens) == (5, 9)


def test_invalid_json_error():
    spec = JsonSchemaSpec.from_model(Facts)
    with pytest.raises(OutputValidationError) as info:
        validate_response(_req(spec), _resp("I cannot do that."))
    assert "not JSON" in str(info.value) and info.value.parsed is None
    assert info.value.text == "I cannot do that."


def test_truncated_json_error():
    spec = JsonSchemaSpec.from_model(Facts)
    with pytest.raises(OutputValidationError) as info:
        validate_response(_req(spec, max_tokens=8), _resp('{"facts": ["a very long', finish="length"))
    err = info.value
    assert "truncated" in str(err) and "max_tokens=8" in str(err)
    assert err.finish_reason == "length"


# ------------------------------------------------------------------------------- ranking

LABELS = ("C001", "C002", "C003", "C004")


def _rank(text, k=2, finish="stop"):
    return validate_response(_req(RankingSpec(labels=LABELS, k=k), stage="schedule"), _resp(text, finish))


def test_ranking_object_and_bare_list_and_alias():
    assert _rank('{"ranked_candidate_ids": ["C003", "C001"]}').parsed == ["C003", "C001"]
    assert _rank('["C002", "C004"]').parsed == ["C002", "C004"]
    assert _rank('{"ranking": ["C004", "C002"]}').parsed == ["C004", "C002"]
    assert _rank('Ranking:\n```json\n{"ranked_candidate_ids": ["C001", "C002"]}\n```').parsed == ["C001", "C002"]


@pytest.mark.parametrize(
    "text, k, fragment, parsed",
    [
        ('{"ranked_candidate_ids": ["C001", "C009"]}', 2, "unknown labels C009", ["C001", "C009"]),
        ('{"ranked_candidate_ids": ["C001", "D1"]}', 2, "unknown", ["C001", "D1"]),
        ('{"ranked_candidate_ids": ["C002", "C002"]}', 2, "duplicates C002", ["C002", "C002"]),
        ('{"ranked_candidate_ids": ["C002"]}', 2, "count 1 instead of 2", ["C002"]),
        ('{"ranked_candidate_ids": ["C001", "C002", "C003"]}', 2, "count 3 instead of 2",
         ["C001", "C002", "C003"]),
        ('{"ranked_candidate_ids": ["C001", 2]}', 2, "1 item(s) were not label strings", ["C001"]),
        ('{"ranked_candidate_ids": []}', 1, "count 0 instead of 1", []),
    ],
)
def test_ranking_faults_keep_returned_labels(text, k, fragment, parsed):
    with pytest.raises(OutputValidationError) as info:
        _rank(text, k=k)
    assert fragment in str(info.value)
    assert info.value.parsed == parsed


def test_ranking_several_faults_reported_together():
    with pytest.raises(OutputValidationError) as info:
        _rank('["C001", "C001", "X", "C002"]', k=3)
    msg = str(info.value)
    assert msg.endswith("invalid ranking: " + "; ".join(ranking_problems(["C001", "C001", "X", "C002"], LABELS, 3)))
    assert "unknown labels X" in msg and "duplicates C001" in msg and "count 4 instead of 3" in msg
    assert info.value.parsed == ["C001", "C001", "X", "C002"]


def test_ranking_truncated_and_non_json():
    with pytest.raises(OutputValidationError) as info:
        _rank('{"ranked_candidate_ids": ["C001", "C0', finish="length")
    assert "truncated" in str(info.value)
    with pytest.raises(OutputValidationError) as info:
        _rank('{"ranked_candidate_ids": "C001"}')
    assert 'not a JSON object with a "ranked_candidate_ids" list' in str(info.value)
    assert info.value.parsed is None


def test_alias_check_handles_schemas_with_only_some_union_keywords():
    """Regression (found on a real SmolLM2 run): a schema whose properties have an ``anyOf``
    but no ``oneOf`` crashed the alias check with a TypeError instead of reporting the error."""
    spec = spec_for(IntentModel)
    req = LLMRequest(messages=(Message("user", "q"),), stage="intent", output=spec)
    with pytest.raises(OutputValidationError):
        validate_response(req, LLMResponse(text='{"need_attribute": false, "people": [], "keywords": "x"}'))
