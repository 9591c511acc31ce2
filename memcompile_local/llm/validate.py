"""Validation of model output against a request's output spec.

Every response goes through :func:`validate_response`, whichever backend produced it and
whether or not the backend decoded under a grammar: constrained decoding narrows what a model
can emit but a truncated generation, a server that ignores ``response_format`` or a grammar
engine that drops ``uniqueItems`` can still hand back text that does not satisfy the spec.

The JSON-schema check is a small validator for the subset of JSON Schema that pydantic v2
emits for ordinary models (``type``, ``properties``, ``required``, ``additionalProperties``,
``enum``, ``const``, ``items``, ``prefixItems``, ``minItems``/``maxItems``, ``uniqueItems``,
string and number bounds, ``anyOf``/``oneOf``/``allOf`` and local ``$ref`` into ``$defs``).
``jsonschema`` is not a core dependency, and this subset is all the pipeline's schemas use.
Keywords outside the subset (``title``, ``description``, ``default``, ``format`` ...) are
ignored, as JSON Schema itself treats annotations.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any

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
# JSON-schema subset validator
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


def _type_matches(value: Any, type_name: str) -> bool:
    if type_name == "object":
        return isinstance(value, dict)
    if type_name == "array":
        return isinstance(value, list)
    if type_name == "string":
        return isinstance(value, str)
    if type_name == "boolean":
        return isinstance(value, bool)
    if type_name == "null":
        return value is None
    if isinstance(value, bool):  # bool is an int subclass in Python, not a JSON number
        return False
    if type_name == "integer":
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if type_name == "number":
        return isinstance(value, (int, float)) and not (isinstance(value, float) and math.isnan(value))
    return False


def _json_equal(a: Any, b: Any) -> bool:
    """Equality in the JSON sense (True != 1, 1 == 1.0)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _check(value: Any, schema: Any, root: dict[str, Any], path: str, errors: list[str]) -> None:
    """Append to ``errors`` one line per violation of ``schema`` by ``value`` at ``path``."""
    if schema is True or schema == {}:
        return
    if schema is False:
        errors.append(f"{path}: no value is allowed here")
        return
    if not isinstance(schema, dict):
        raise ValueError(f"schema at {path} is not an object: {schema!r}")
    schema = _resolve(schema, root)

    if "anyOf" in schema or "oneOf" in schema:
        key = "anyOf" if "anyOf" in schema else "oneOf"
        branches = schema[key]
        matching = 0
        branch_errors: list[list[str]] = []
        for branch in branches:
            sub: list[str] = []
            _check(value, branch, root, path, sub)
            if not sub:
                matching += 1
            branch_errors.append(sub)
        if (key == "anyOf" and matching == 0) or (key == "oneOf" and matching != 1):
            if key == "oneOf" and matching > 1:
                errors.append(f"{path}: matches {matching} oneOf branches, expected exactly one")
            else:
                best = min(branch_errors, key=len) if branch_errors else []
                detail = "; ".join(best[:2])
                errors.append(f"{path}: matches none of the {key} alternatives ({detail})")
    for branch in schema.get("allOf", ()):
        _check(value, branch, root, path, errors)

    if "const" in schema and not _json_equal(value, schema["const"]):
        errors.append(f"{path}: expected the constant {schema['const']!r}, got {value!r}")
    if "enum" in schema and not any(_json_equal(value, e) for e in schema["enum"]):
        errors.append(f"{path}: {value!r} is not one of {list(schema['enum'])!r}")

    declared = schema.get("type")
    if declared is not None:
        types = [declared] if isinstance(declared, str) else list(declared)
        if not any(_type_matches(value, t) for t in types):
            errors.append(f"{path}: expected type {'/'.join(types)}, got {type(value).__name__}")
            return  # the remaining keywords assume the right type

    if isinstance(value, dict):
        props: dict[str, Any] = schema.get("properties", {})
        for name in schema.get("required", ()):
            if name not in value:
                errors.append(f"{path}: missing required property {name!r}")
        additional = schema.get("additionalProperties", True)
        for name, item in value.items():
            child = f"{path}.{name}"
            if name in props:
                _check(item, props[name], root, child, errors)
            elif additional is False:
                errors.append(f"{path}: unexpected property {name!r}")
            elif isinstance(additional, dict):
                _check(item, additional, root, child, errors)
        if "minProperties" in schema and len(value) < schema["minProperties"]:
            errors.append(f"{path}: fewer than {schema['minProperties']} properties")
        if "maxProperties" in schema and len(value) > schema["maxProperties"]:
            errors.append(f"{path}: more than {schema['maxProperties']} properties")
    elif isinstance(value, list):
        prefix = schema.get("prefixItems")
        rest_from = 0
        if prefix is not None:
            for i, (item, sub) in enumerate(zip(value, prefix)):
                _check(item, sub, root, f"{path}[{i}]", errors)
            rest_from = len(prefix)
        items = schema.get("items")
        if items is False and len(value) > rest_from:
            errors.append(f"{path}: at most {rest_from} items allowed, got {len(value)}")
        elif isinstance(items, dict):
            for i in range(rest_from, len(value)):
                _check(value[i], items, root, f"{path}[{i}]", errors)
        if "minItems" in schema and len(value) < schema["minItems"]:
            errors.append(f"{path}: expected at least {schema['minItems']} items, got {len(value)}")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append(f"{path}: expected at most {schema['maxItems']} items, got {len(value)}")
        if schema.get("uniqueItems"):
            for i in range(len(value)):
                if any(_json_equal(value[i], value[j]) for j in range(i)):
                    errors.append(f"{path}[{i}]: duplicate item {value[i]!r}")
    elif isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            errors.append(f"{path}: shorter than {schema['minLength']} characters")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(f"{path}: longer than {schema['maxLength']} characters")
        if "pattern" in schema and re.search(schema["pattern"], value) is None:
            errors.append(f"{path}: does not match the pattern {schema['pattern']!r}")
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{path}: {value} is below the minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{path}: {value} is above the maximum {schema['maximum']}")
        if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
            errors.append(f"{path}: {value} is not above {schema['exclusiveMinimum']}")
        if "exclusiveMaximum" in schema and value >= schema["exclusiveMaximum"]:
            errors.append(f"{path}: {value} is not below {schema['exclusiveMaximum']}")
        if "multipleOf" in schema:
            q = value / schema["multipleOf"]
            if not math.isclose(q, round(q), rel_tol=0, abs_tol=1e-9):
                errors.append(f"{path}: {value} is not a multiple of {schema['multipleOf']}")


def schema_errors(value: Any, schema: dict[str, Any]) -> list[str]:
    """All violations of ``schema`` by ``value`` as readable lines (empty list: valid).

    ``$ref`` pointers resolve against ``schema`` itself. Raises ``ValueError`` for a schema
    this validator cannot interpret (non-local ``$ref``).
    """
    errors: list[str] = []
    _check(value, schema, schema, "$", errors)
    return errors


# --------------------------------------------------------------------------------------
# Provider wrappings ("schema aliases")
# --------------------------------------------------------------------------------------


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


def _validate_json(request: LLMRequest, spec: JsonSchemaSpec, response: LLMResponse) -> Any:
    value = _parse_or_fail(request, response)
    errors = schema_errors(value, spec.schema)
    if not errors:
        return value
    aliased = apply_schema_alias(value, spec.schema)
    if aliased is not value and not schema_errors(aliased, spec.schema):
        return aliased
    shown = "; ".join(errors[:_MAX_REPORTED_ERRORS])
    more = f" (+{len(errors) - _MAX_REPORTED_ERRORS} more)" if len(errors) > _MAX_REPORTED_ERRORS else ""
    raise _fail(
        f"stage {request.stage!r}: output does not match the schema {spec.name!r}: {shown}{more}",
        response,
        parsed=value,
    )


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
    if items is None:
        raise _fail(
            f"stage {request.stage!r}: expected a list under {spec.field_name!r}, "
            f"got {type(value).__name__}",
            response,
        )
    returned = [x for x in items if isinstance(x, str)]
    problems: list[str] = []
    if len(returned) != len(items):
        problems.append(f"{len(items) - len(returned)} non-string item(s)")
    allowed = set(spec.labels)
    unknown = [x for x in returned if x not in allowed]
    if unknown:
        problems.append(f"unknown label(s) {unknown[:_MAX_REPORTED_ERRORS]!r}")
    seen: set[str] = set()
    duplicates: list[str] = []
    for x in returned:
        if x in seen and x not in duplicates:
            duplicates.append(x)
        seen.add(x)
    if duplicates:
        problems.append(f"duplicate label(s) {duplicates[:_MAX_REPORTED_ERRORS]!r}")
    if len(items) != spec.k:
        problems.append(f"expected exactly {spec.k} labels, got {len(items)}")
    if problems:
        # parsed carries the strings in the order given so the caller can keep the valid,
        # first-seen labels and ask again only for the missing ones.
        raise _fail(f"stage {request.stage!r}: invalid ranking: " + "; ".join(problems), response,
                    parsed=returned)
    return returned


def validate_response(request: LLMRequest, response: LLMResponse) -> LLMResponse:
    """Check ``response`` against ``request.output`` and return a copy with ``parsed`` set.

    - ``TextSpec``: ``parsed`` is the stripped text; empty text is an error.
    - ``JsonSchemaSpec``: ``parsed`` is the JSON value (dict for object schemas), after
      :func:`extract_json` and, if needed, :func:`apply_schema_alias`.
    - ``RankingSpec``: ``parsed`` is the list of exactly ``k`` distinct known labels.

    Raises ``OutputValidationError`` carrying the text, finish reason, token counts and
    whatever could be parsed (for rankings, the list of returned strings in order).
    """
    spec = request.output
    if isinstance(spec, TextSpec):
        stripped = (response.text or "").strip()
        if not stripped:
            reason = " (truncated: finish_reason=length)" if response.finish_reason == "length" else ""
            raise _fail(f"stage {request.stage!r}: empty response{reason}", response)
        parsed: Any = stripped
    elif isinstance(spec, JsonSchemaSpec):
        parsed = _validate_json(request, spec, response)
    elif isinstance(spec, RankingSpec):
        parsed = _validate_ranking(request, spec, response)
    else:
        raise TypeError(f"unknown output spec {type(spec).__name__}")
    return dataclasses.replace(response, parsed=parsed)
