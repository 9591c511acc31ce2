"""Validation of model output against a request's output spec.

Every response goes through :func:`validate_response`, whichever backend produced it and
whether or not the backend decoded under a grammar: constrained decoding narrows what a model
can emit but a truncated generation, a server that ignores ``response_format`` or a grammar
engine that drops ``uniqueItems`` can still hand back text that does not satisfy the spec.

There is one check per spec kind:

* ``JsonSchemaSpec`` with a pydantic model (every spec the pipeline builds, see
  ``llm.interface.spec_for``): the parsed JSON is validated by the model, with strict JSON
  semantics, and the instance is handed back in ``LLMResponse.validated`` so no caller
  validates again. A spec without a model (a hand-written schema) is checked with the
  ``jsonschema`` library (:func:`schema_errors`).
* ``RankingSpec``: :func:`ranking_problems`, the rule set the packet scheduler also words its
  schema-correction message with.

When a provider wraps a requested list in a generic object, or returns the bare list, the
corresponding schema alias is accepted (:func:`apply_schema_alias`).
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Sequence

import jsonschema
from pydantic import ValidationError

from memcompile_local.errors import OutputValidationError
from memcompile_local.llm.interface import (
    JsonSchemaSpec,
    LLMRequest,
    LLMResponse,
    RankingSpec,
    TextSpec,
)

__all__ = [
    "validate_response",
    "extract_json",
    "schema_errors",
    "apply_schema_alias",
    "ranking_problems",
]

_FENCE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\r?\n?(.*?)```", re.DOTALL)
_MAX_REPORTED_ERRORS = 5


# --------------------------------------------------------------------------------------
# JSON extraction
# --------------------------------------------------------------------------------------

_NOT_FOUND = object()


def _reject_constant(name: str) -> Any:
    # Python's json module accepts NaN and Infinity, which are not JSON and cannot be stored.
    raise ValueError(f"{name} is not a JSON value")


def _loads(text: str) -> Any:
    return json.loads(text, parse_constant=_reject_constant)


def _balanced_span(text: str, start: int) -> int | None:
    """End index (exclusive) of the bracketed value opening at ``text[start]``, or None.

    String literals are skipped so that brackets inside them do not count.
    """
    stack: list[str] = []
    pairs = {"{": "}", "[": "]"}
    in_string = False
    escaped = False
    for i in range(start, len(text)):
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch in pairs:
            stack.append(pairs[ch])
        elif ch in "}]":
            if not stack or stack[-1] != ch:
                return None
            stack.pop()
            if not stack:
                return i + 1
    return None


def _first_embedded_value(text: str) -> Any:
    """The first balanced ``{...}`` or ``[...]`` substring that parses as JSON."""
    for start, ch in enumerate(text):
        if ch not in "{[":
            continue
        end = _balanced_span(text, start)
        if end is None:
            continue
        try:
            return _loads(text[start:end])
        except ValueError:
            continue
    return _NOT_FOUND


def extract_json(text: str) -> Any:
    """Parse the JSON value a model returned, tolerating the wrappers small models add.

    Tried in order: the whole text; the body of a Markdown code fence (```json ... ```); the
    first balanced ``{...}`` or ``[...]`` substring that parses. Small instruction models
    often put the object in a fence or after a sentence such as "Here is the JSON:" even
    when told not to; the object itself is still usable.

    Raises ``ValueError`` when no JSON value can be found.
    """
    stripped = (text or "").strip()
    if not stripped:
        raise ValueError("empty text")
    try:
        return _loads(stripped)
    except ValueError:
        pass
    for match in _FENCE.finditer(stripped):
        body = match.group(1).strip()
        try:
            return _loads(body)
        except ValueError:
            found = _first_embedded_value(body)
            if found is not _NOT_FOUND:
                return found
    found = _first_embedded_value(stripped)
    if found is _NOT_FOUND:
        raise ValueError("no JSON object or array found in the text")
    return found


# --------------------------------------------------------------------------------------
# Schema checks
# --------------------------------------------------------------------------------------


def _json_path(loc: Sequence[Any]) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc)


def model_errors(value: Any, model: type) -> tuple[Any, list[str]]:
    """(instance, []) when ``value`` is valid for the pydantic ``model``, else (None, errors).

    Strict JSON semantics (``model_validate_json(..., strict=True)``): no "3" for 3 and no
    1 for True, as a JSON-Schema validator of the model's schema would judge it. Each error
    line starts with the JSON path of the offending value.
    """
    try:
        return model.model_validate_json(json.dumps(value), strict=True), []  # type: ignore[attr-defined]
    except ValidationError as exc:
        return None, [f"{_json_path(e['loc'])}: {e['msg']}" for e in exc.errors()]


def schema_errors(value: Any, schema: dict[str, Any]) -> list[str]:
    """All violations of the hand-written JSON ``schema`` by ``value`` (empty list: valid).

    Checked by the ``jsonschema`` library (the draft the schema names, else 2020-12); each
    line starts with the JSON path of the offending value.
    """
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    errors = sorted(cls(schema).iter_errors(value), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    return [f"{e.json_path}: {e.message}" for e in errors]


# --------------------------------------------------------------------------------------
# Provider wrappings ("schema aliases")
# --------------------------------------------------------------------------------------


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """Follow local ``$ref`` pointers (``#/$defs/X``, ``#/definitions/X``, ``#``)."""
    seen: set[str] = set()
    while isinstance(schema, dict) and "$ref" in schema:
        ref = schema["$ref"]
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise ValueError(f"only local $ref pointers are supported, got {ref!r}")
        if ref in seen:
            raise ValueError(f"circular $ref {ref!r}")
        seen.add(ref)
        target: Any = root
        for part in ref[1:].split("/"):
            if not part:
                continue
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or part not in target:
                raise ValueError(f"unresolvable $ref {ref!r}")
            target = target[part]
        # Sibling keywords next to $ref apply as well (JSON Schema 2019+ semantics).
        extra = {k: v for k, v in schema.items() if k != "$ref"}
        schema = {**target, **extra} if extra else target
    return schema


def _accepts_array(schema: Any, root: dict[str, Any]) -> bool:
    if not isinstance(schema, dict):
        return False
    schema = _resolve(schema, root)
    declared = schema.get("type")
    if declared == "array" or (isinstance(declared, list) and "array" in declared):
        return True
    branches = [*schema.get("anyOf", ()), *schema.get("oneOf", ())]
    return any(_accepts_array(b, root) for b in branches)


def _single_list_field(value: dict[str, Any]) -> str | None:
    """The key of a dict that has exactly one key, holding a list."""
    if len(value) == 1:
        (key, inner), = value.items()
        if isinstance(inner, list):
            return key
    return None


def apply_schema_alias(value: Any, schema: dict[str, Any]) -> Any:
    """Re-shape a list the model wrapped differently from what the schema asks for.

    Providers and small models disagree about the envelope of a requested list: the schema
    may ask for ``{"facts": [...]}`` and get a bare ``[...]`` or ``{"items": [...]}``, or ask
    for a bare array and get ``{"result": [...]}``. When the schema has exactly one
    array-valued property (and requires nothing else), a bare list or a one-key object
    holding a list is moved under that property; when the schema is an array, a one-key
    object holding a list is unwrapped. Anything else is returned unchanged.
    """
    root = schema
    top = _resolve(schema, root)
    if top.get("type") == "array":
        if isinstance(value, dict):
            key = _single_list_field(value)
            if key is not None:
                return value[key]
        return value
    if top.get("type") != "object":
        return value
    props: dict[str, Any] = top.get("properties", {})
    array_fields = [name for name, sub in props.items() if _accepts_array(sub, root)]
    if len(array_fields) != 1:
        return value
    target = array_fields[0]
    if not set(top.get("required", ())) <= {target}:
        return value
    if isinstance(value, list):
        return {target: value}
    if isinstance(value, dict) and target not in value:
        key = _single_list_field(value)
        if key is not None:
            return {target: value[key]}
    return value


# --------------------------------------------------------------------------------------
# Per-spec validation
# --------------------------------------------------------------------------------------


def _fail(message: str, response: LLMResponse, parsed: Any = None) -> OutputValidationError:
    return OutputValidationError(
        message,
        text=response.text,
        finish_reason=response.finish_reason,
        parsed=parsed,
        prompt_tokens=response.prompt_tokens,
        completion_tokens=response.completion_tokens,
    )


def _parse_or_fail(request: LLMRequest, response: LLMResponse) -> Any:
    try:
        return extract_json(response.text)
    except ValueError as exc:
        if response.finish_reason == "length":
            raise _fail(
                f"truncated output (finish_reason=length, max_tokens={request.max_tokens}) "
                f"for stage {request.stage!r} is not valid JSON",
                response,
            ) from None
        raise _fail(f"stage {request.stage!r}: output is not JSON ({exc})", response) from None


def _check_json(value: Any, spec: JsonSchemaSpec) -> tuple[Any, list[str]]:
    if spec.model is not None:
        return model_errors(value, spec.model)
    return None, schema_errors(value, spec.schema)


def _validate_json(request: LLMRequest, spec: JsonSchemaSpec, response: LLMResponse) -> tuple[Any, Any]:
    """(parsed JSON value, model instance or None) of a response to a JSON spec."""
    value = _parse_or_fail(request, response)
    instance, errors = _check_json(value, spec)
    if not errors:
        return value, instance
    aliased = apply_schema_alias(value, spec.schema)
    if aliased is not value:
        instance, alias_errors = _check_json(aliased, spec)
        if not alias_errors:
            return aliased, instance
    shown = "; ".join(errors[:_MAX_REPORTED_ERRORS])
    more = f" (+{len(errors) - _MAX_REPORTED_ERRORS} more)" if len(errors) > _MAX_REPORTED_ERRORS else ""
    raise _fail(
        f"stage {request.stage!r}: output does not match the schema {spec.name!r}: {shown}{more}",
        response,
        parsed=value,
    )


def ranking_problems(returned: Sequence[Any] | None, labels: Sequence[str], k: int,
                     field_name: str = "ranked_candidate_ids") -> list[str]:
    """Why ``returned`` is not a ranking of exactly ``k`` distinct labels of ``labels`` ([] if it is).

    The one rule set for ``RankingSpec``: :func:`validate_response` reports these problems,
    and the packet scheduler words its schema-correction message to the model with them.
    ``returned`` None means the reply held no list at all.
    """
    if returned is None:
        return [f'the reply was not a JSON object with a "{field_name}" list of labels']
    items = list(returned)
    allowed = set(labels)
    problems: list[str] = []
    non_strings = [x for x in items if not isinstance(x, str)]
    if non_strings:
        problems.append(f"{len(non_strings)} item(s) were not label strings")
    strings = [x for x in items if isinstance(x, str)]
    unknown = [x for x in strings if x not in allowed]
    if unknown:
        problems.append("unknown labels " + ", ".join(dict.fromkeys(unknown)))
    seen: set[str] = set()
    dups: list[str] = []
    for x in strings:
        if x in seen and x not in dups:
            dups.append(x)
        seen.add(x)
    if dups:
        problems.append("duplicates " + ", ".join(dups))
    if len(items) != k:
        problems.append(f"count {len(items)} instead of {k}")
    return problems


def _ranking_list(value: Any, spec: RankingSpec) -> list[Any] | None:
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        if spec.field_name in value and isinstance(value[spec.field_name], list):
            return value[spec.field_name]
        key = _single_list_field(value)  # provider alias such as {"ranking": [...]}
        if key is not None:
            return value[key]
    return None


def _validate_ranking(request: LLMRequest, spec: RankingSpec, response: LLMResponse) -> list[str]:
    value = _parse_or_fail(request, response)
    items = _ranking_list(value, spec)
    problems = ranking_problems(items, spec.labels, spec.k, spec.field_name)
    if not problems:
        return list(items)  # type: ignore[arg-type]
    # parsed carries the strings in the order given so the caller can keep the valid,
    # first-seen labels and ask again only for the missing ones.
    returned = None if items is None else [x for x in items if isinstance(x, str)]
    raise _fail(f"stage {request.stage!r}: invalid ranking: " + "; ".join(problems), response, parsed=returned)


def validate_response(request: LLMRequest, response: LLMResponse) -> LLMResponse:
    """Check ``response`` against ``request.output`` and return a copy with ``parsed`` set.

    - ``TextSpec``: ``parsed`` is the stripped text; empty text is an error.
    - ``JsonSchemaSpec``: ``parsed`` is the JSON value (dict for object schemas), after
      :func:`extract_json` and, if needed, :func:`apply_schema_alias`; ``validated`` is the
      spec model's instance when the spec carries a model.
    - ``RankingSpec``: ``parsed`` is the list of exactly ``k`` distinct known labels.

    Raises ``OutputValidationError`` carrying the text, finish reason, token counts and
    whatever could be parsed (for rankings, the list of returned strings in order).
    """
    spec = request.output
    validated: Any = None
    if isinstance(spec, TextSpec):
        stripped = (response.text or "").strip()
        if not stripped:
            reason = " (truncated: finish_reason=length)" if response.finish_reason == "length" else ""
            raise _fail(f"stage {request.stage!r}: empty response{reason}", response)
        parsed: Any = stripped
    elif isinstance(spec, JsonSchemaSpec):
        parsed, validated = _validate_json(request, spec, response)
    elif isinstance(spec, RankingSpec):
        parsed = _validate_ranking(request, spec, response)
    else:
        raise TypeError(f"unknown output spec {type(spec).__name__}")
    return dataclasses.replace(response, parsed=parsed, validated=validated)
