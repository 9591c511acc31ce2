"""The service's OpenAPI document: request and response schemas, every status, the security scheme.

The routes read their JSON bodies themselves (so that every bad input is a typed 400 naming the
field, never FastAPI's 422), which leaves FastAPI nothing to describe them from; this module
writes the document instead, good enough to generate a client from:

* a schema for every request body and every response (``components.schemas``);
* every status a route answers with, each error with the ``Error`` schema (``401`` with its
  ``WWW-Authenticate`` header, ``429`` and ``503`` with ``Retry-After``);
* the two ways to send a key (``Authorization: Bearer`` and ``X-API-Key``) as security schemes;
* the query parameters of the list routes and the patterns of the path parameters.

``tests/test_service_openapi.py`` checks the document against the running server: every
documented field is accepted, every status seen is documented, every response validates.
"""

from __future__ import annotations

import copy
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from .auth import USER_ID_RE
from .limits import Limits
from ..data.metadata import MAX_METADATA_DEPTH
from .validate import TURN_ID_CHARS

_REF = "#/components/schemas/"


def ref(name: str) -> dict:
    return {"$ref": _REF + name}


_STR = {"type": "string"}
_INT = {"type": "integer"}
_NULLABLE_INT = {"type": ["integer", "null"]}
_TIME = {"type": "string", "description": "a date or date-time, e.g. '2024-05-08' or '2024-05-08 13:56'",
         "examples": ["2024-05-08 13:56"]}
_TURN_ID = {"type": "string", "pattern": f"^[{TURN_ID_CHARS}]{{1,128}}$"}

_LIMITS = Limits()

SCORE_DOC = ("relevance in [0, 1], never rising down the list (a threshold keeps a prefix of it). Model-free "
             "default: the weighted channel sum divided by the largest sum its channels can reach (alternating "
             "dialogue), or the learned ranker's calibrated probability that the turn is gold evidence "
             "(user-assistant and bursty histories); an LLM ordering gives 1/rank; the address pool r_i over its "
             "largest value; dense and MemPursuit selectors the cosine (below 0 read as 0)")


def schemas(limits: Limits = _LIMITS) -> dict[str, Any]:
    """The ``components.schemas`` of the document (``limits`` gives the bounds)."""
    text = {"type": "string", "minLength": 1, "maxLength": limits.max_text_chars,
            "description": "at least one non-space character; no control character except TAB, LF, CR"}
    label = {"type": "string", "minLength": 1, "maxLength": 200, "description": "one line, no control character"}
    metadata = {"type": "object", "description": f"a small JSON object of your own, stored with the turn (at most "
                f"{limits.max_metadata_bytes} bytes as JSON, {MAX_METADATA_DEPTH} levels deep)",
                "examples": [{"topic": "travel", "source": "chat"}]}
    agent = {**_TURN_ID, "description": "the agent that took part in the turn (a scope within the user)"}
    session_turn = {
        "type": "object", "additionalProperties": False, "required": ["speaker", "text"],
        "properties": {"speaker": label, "text": text, "image_caption": text,
                       "id": {**_TURN_ID, "description": "turn id; default: the next S<session>:<n>"},
                       "agent_id": agent, "metadata": metadata},
    }
    turn = copy.deepcopy(session_turn)
    turn["properties"].update({
        "time": {**_TIME, "description": "when it was said; default: the server's clock (UTC), and the turn "
                                         "is then always stored as a new turn"},
        "session_id": {**_TURN_ID, "description": "the session the turn belongs to; default 'default'"},
    })
    stored_fields = {"speaker": _STR, "time": _STR, "session_id": _STR, "text": _STR, "image_caption": _STR,
                     "agent_id": {"type": ["string", "null"]}, "metadata": {"type": ["object", "null"]}}
    packet = {
        "type": "object",
        "required": ["id", "rank", "score", "speaker", "time", "session_id", "text", "agent_id", "metadata"],
        "properties": {"id": _STR, "rank": {"type": "integer", "minimum": 1},
                       "score": {"type": "number", "minimum": 0, "maximum": 1, "description": SCORE_DOC},
                       **stored_fields,
                       "explain": {**ref("Explanation"), "description": "why the turn was chosen (only when the "
                                   "request sets explain: true)"}},
    }
    explanation = {
        "type": "object", "required": ["selector", "raw", "channels"],
        "properties": {
            "selector": {**_STR, "description": "the selector that ranked the turn: fused (the weighted channel "
                         "sum), learned (the learned ranker), llm, normalized, mmr, dense or pursuit"},
            "raw": {"type": ["number", "null"], "description": "the selector's own score before the mapping to "
                    "[0, 1] (the weighted sum, the ranker's output, r_i, a cosine), or null when it has none"},
            "channels": {"type": "array", "description": "what the selector read, e.g. bm25_turn, bm25_context, "
                         "dense_turn, dense_context, time_match, speaker, role, ranker; the list depends on the "
                         "selector",
                         "items": {"type": "object", "required": ["name", "value", "contribution"],
                                   "properties": {"name": _STR,
                                                  "value": {"type": "number",
                                                            "description": "the channel's value for the turn"},
                                                  "contribution": {"type": ["number", "null"],
                                                                   "description": "what it added to raw (a "
                                                                   "weighted sum's contributions add up to raw), "
                                                                   "null when the selector is not a weighted "
                                                                   "sum"}}}},
        },
    }
    filters = {
        "speaker": {**label, "description": "only turns of this speaker"},
        "session_id": {**label, "description": "only turns of this session"},
        "agent_id": {**label, "description": "only turns of this agent"},
        "metadata": {"type": "object", "description": "only turns whose metadata has every one of these top-level "
                     "keys with exactly this value"},
        "from": {**_TIME, "description": "only turns said at or after this time"},
        "to": {**_TIME, "description": "only turns said at or before this time (a bare date: until its end)"},
    }
    search = {
        "type": "object",
        "required": ["user_id", "query", "packets", "packet_ids", "context", "timings_ms", "pending_turns"],
        "properties": {"user_id": _STR, "query": _STR, "packets": {"type": "array", "items": ref("Packet")},
                       "packet_ids": {"type": "array", "items": _STR}, "context": _STR,
                       "timings_ms": {"type": "object", "additionalProperties": {"type": "number"}},
                       "pending_turns": _INT},
    }
    answer = copy.deepcopy(search)
    answer["required"].append("answer")
    answer["properties"]["answer"] = _STR
    deleted = {"type": "object", "additionalProperties": {"type": "integer"},
               "description": "rows deleted per table"}
    return {
        "Error": {
            "type": "object", "required": ["error"],
            "properties": {"error": {
                "type": "object", "required": ["status", "code", "message"],
                "properties": {"status": _INT, "code": {**_STR, "description": "machine-readable, e.g. empty_text"},
                               "message": _STR,
                               "field": {**_STR, "description": "JSON path of the value at fault, e.g. turns[0].time"}},
            }},
        },
        "Turn": turn,
        "SessionTurn": session_turn,
        "Session": {
            "type": "object", "additionalProperties": False, "required": ["time", "turns"],
            "properties": {"time": _TIME, "id": {**_TURN_ID, "description": "session id; default: the stored "
                                                 "session with the same time, else a new one"},
                           "turns": {"type": "array", "minItems": 1, "maxItems": limits.max_turns_per_request,
                                     "items": ref("SessionTurn")}},
        },
        "Append": {"oneOf": [
            {"type": "object", "additionalProperties": False, "required": ["sessions"],
             "properties": {"sessions": {"type": "array", "minItems": 1, "items": ref("Session")}}},
            {"type": "object", "additionalProperties": False, "required": ["turns"],
             "properties": {"turns": {"type": "array", "minItems": 1, "maxItems": limits.max_turns_per_request,
                                      "items": ref("Turn")}}},
            ref("Turn"),
        ]},
        "AppendResult": {
            "type": "object", "required": ["user_id", "ids", "added", "skipped", "built", "pending_turns"],
            "properties": {"user_id": _STR,
                           "ids": {"type": "array", "items": _STR, "description": "the id of every turn sent, in order"},
                           "added": _INT, "skipped": _INT, "built": {"type": "boolean"}, "pending_turns": _INT},
        },
        "Query": {
            "type": "object", "additionalProperties": False, "required": ["query"],
            "properties": {"query": text, "k": {"type": "integer", "minimum": 1, "maximum": limits.max_k},
                           "preset": {**_STR, "description": "a model-free preset such as 'view-raw'"},
                           "question_date": {**_TIME, "description": "when the question is asked: relative times "
                                             "in it ('last month') are resolved from this date"},
                           "explain": {"type": "boolean", "default": False,
                                       "description": "also return, for each packet, why it was chosen (explain)"},
                           **filters},
        },
        "Packet": packet,
        "Explanation": explanation,
        "SearchResult": search,
        "AnswerResult": answer,
        "Stats": {
            "type": "object",
            "required": ["user_id", "turns", "sessions", "extracted_turns", "pending_turns", "descriptors", "build",
                         "tokens"],
            "properties": {"user_id": _STR, "turns": _INT, "sessions": _INT, "extracted_turns": _INT,
                           "pending_turns": _INT, "descriptors": _INT,
                           "build": {"type": "object", "required": ["state", "queued", "attempts", "last_error"],
                                     "properties": {"state": {"enum": ["built", "pending", "failing"]},
                                                    "queued": {"type": "boolean"}, "attempts": _INT,
                                                    "last_error": {"type": ["string", "null"]}}},
                           "tokens": {"type": "object"}},
        },
        "UserPage": {
            "type": "object", "required": ["users", "total", "offset", "next_offset"],
            "properties": {"users": {"type": "array", "items": _STR}, "total": _INT, "offset": _INT,
                           "next_offset": _NULLABLE_INT},
        },
        "StoredTurn": {
            "type": "object",
            "required": ["id", "speaker", "time", "session_id", "text", "agent_id", "metadata", "ordinal"],
            "properties": {"id": _STR, **stored_fields, "ordinal": _INT},
        },
        "TurnPage": {
            "type": "object", "required": ["user_id", "turns", "total", "offset", "next_offset"],
            "properties": {"user_id": _STR, "turns": {"type": "array", "items": ref("StoredTurn")}, "total": _INT,
                           "offset": _INT, "next_offset": _NULLABLE_INT},
        },
        "Forgotten": {"type": "object", "required": ["user_id", "deleted"],
                      "properties": {"user_id": _STR, "deleted": deleted}},
        "TurnDeleted": {"type": "object", "required": ["user_id", "turn_id", "deleted"],
                        "properties": {"user_id": _STR, "turn_id": _STR, "deleted": deleted}},
        "Health": {"type": "object", "required": ["status"], "properties": {"status": _STR}},
        "ImportJob": {
            "type": "object",
            "required": ["id", "user_id", "state", "format", "turns_total", "turns_written", "turns_skipped",
                         "conversations_total", "conversations_done", "built", "error", "created_at",
                         "started_at", "finished_at"],
            "properties": {
                "id": {**_STR, "description": "the job id (GET .../imports/{job_id})"}, "user_id": _STR,
                "state": {"enum": ["queued", "running", "done", "failed"]},
                "format": _STR, "turns_total": _INT,
                "turns_written": {**_INT, "description": "turns stored so far (each conversation is written whole)"},
                "turns_skipped": {**_INT, "description": "turns already stored"},
                "conversations_total": _INT, "conversations_done": _INT,
                "built": {"type": "boolean", "description": "the memory was built in the job (else queued)"},
                "error": {"type": ["object", "null"], "required": ["status", "code", "message"],
                          "description": "why the job failed (the shape of Error.error), null otherwise",
                          "properties": {"status": _INT, "code": _STR, "message": _STR, "field": _STR}},
                "created_at": _STR, "started_at": {"type": ["string", "null"]},
                "finished_at": {"type": ["string", "null"]},
            },
        },
    }


def import_body_doc() -> dict:
    """``openapi_extra`` of the import route: the uploaded file as the raw body."""
    return {"requestBody": {"required": True, "description": "a conversation file as the CLI's ingest reads it "
                            "(plain JSON or JSONL, LoCoMo, LongMemEval) or a JSON list of turns",
                            "content": {"application/json": {"schema": {}},
                                        "application/octet-stream": {"schema": {"type": "string",
                                                                                "format": "binary"}}}}}


def body_doc(schema: str) -> dict:
    """``openapi_extra`` of a route whose JSON body has the component schema ``schema``."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref(schema)}}}}


_ERRORS = {
    400: "Bad input: the error names the field (a JSON path) and what was wrong",
    401: "Missing or unknown API key",
    403: "The API key was revoked",
    404: "No such memory (or turn)",
    409: "A turn id that is stored with other content",
    413: "The body, or the number of turns, is past the server's limit",
    429: "Too many requests (the tenant's rate, refused keys from this address, or a full build queue)",
    500: "An internal error (logged on the server; the message names no detail)",
    503: "The store, the keys file or the model backend is unavailable",
}
_RETRY_AFTER = {"Retry-After": {"description": "seconds to wait before retrying", "schema": {"type": "integer"}}}

# (method, path) -> (success schema, extra error statuses beyond those every keyed route has)
_OPERATIONS: dict[tuple[str, str], tuple[str, tuple[int, ...]]] = {
    ("post", "/v1/memories/{user_id}/imports"): ("ImportJob", (413,)),
    ("get", "/v1/memories/{user_id}/imports/{job_id}"): ("ImportJob", (404,)),
    ("post", "/v1/memories/{user_id}/turns"): ("AppendResult", (409, 413)),
    ("post", "/v1/memories/{user_id}/search"): ("SearchResult", (404, 413)),
    ("post", "/v1/memories/{user_id}/answer"): ("AnswerResult", (404, 413)),
    ("get", "/v1/memories"): ("UserPage", ()),
    ("get", "/v1/memories/{user_id}"): ("Stats", (404,)),
    ("get", "/v1/memories/{user_id}/turns"): ("TurnPage", (404,)),
    ("delete", "/v1/memories/{user_id}/turns/{turn_id}"): ("TurnDeleted", (404,)),
    ("delete", "/v1/memories/{user_id}"): ("Forgotten", (404,)),
}
_KEYED = (400, 401, 403, 429, 500, 503)
_LOCAL = (400, 429, 500, 503)

_PATH_PARAMS = {
    "user_id": {"type": "string", "pattern": f"^{USER_ID_RE.pattern}$",
                "description": "whose memory (within the key's tenant)"},
    "turn_id": {**_TURN_ID, "description": "a turn id as returned by append or list_turns"},
    "job_id": {"type": "string", "pattern": "^[0-9a-f]{32}$", "description": "an import job id"},
}
_ACCEPTED = {("post", "/v1/memories/{user_id}/imports")}  # answered 202, not 200


def _page_params(limits: Limits) -> list[dict]:
    return [
        {"name": "offset", "in": "query", "required": False, "description": "items to skip",
         "schema": {"type": "integer", "minimum": 0, "default": 0}},
        {"name": "limit", "in": "query", "required": False, "description": "items per page",
         "schema": {"type": "integer", "minimum": 1, "maximum": limits.max_page, "default": 100}},
    ]


def _filter_params() -> list[dict]:
    """The list-turns filters, the same as a search's (``metadata`` as JSON text)."""
    time_ = {"type": "string", "examples": ["2024-05-08"]}
    return [
        {"name": "speaker", "in": "query", "required": False, "description": "only turns of this speaker",
         "schema": _STR},
        {"name": "session_id", "in": "query", "required": False, "description": "only turns of this session",
         "schema": _STR},
        {"name": "agent_id", "in": "query", "required": False, "description": "only turns of this agent",
         "schema": _STR},
        {"name": "metadata", "in": "query", "required": False, "schema": _STR,
         "description": "a JSON object (URL-encoded): only turns whose metadata has each of its top-level keys "
                        "with exactly that value"},
        {"name": "from", "in": "query", "required": False, "description": "only turns said at or after this time",
         "schema": time_},
        {"name": "to", "in": "query", "required": False,
         "description": "only turns said at or before this time (a bare date: until its end)", "schema": time_},
    ]


def _import_params() -> list[dict]:
    return [
        {"name": "format", "in": "query", "required": False,
         "description": "how to read the upload (auto: by its shape)",
         "schema": {"enum": ["auto", "plain", "locomo", "longmemeval", "turns"], "default": "auto"}},
        {"name": "conversation", "in": "query", "required": False,
         "description": "import only this conversation of a file that has several (0-based)",
         "schema": {"type": "integer", "minimum": 0}},
    ]


def _error(status: int) -> dict:
    out: dict[str, Any] = {"description": _ERRORS[status],
                           "content": {"application/json": {"schema": ref("Error")}}}
    if status == 401:
        out["headers"] = {"WWW-Authenticate": {"description": "Bearer challenge", "schema": {"type": "string"}}}
    if status in (429, 503):
        out["headers"] = _RETRY_AFTER
    return out


def build_document(app: FastAPI, *, keyed: bool, metrics_auth: bool, limits: Limits = _LIMITS) -> dict:
    """The OpenAPI document of ``app`` (see the module doc)."""
    doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    components = doc.setdefault("components", {})
    components["schemas"] = schemas(limits)
    if keyed:
        components["securitySchemes"] = {
            "bearer": {"type": "http", "scheme": "bearer", "description": "Authorization: Bearer <API key>"},
            "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
        }
    security = [{"bearer": []}, {"apiKey": []}]
    for path, item in doc.get("paths", {}).items():
        for method, op in item.items():
            for p in op.get("parameters", []):
                if p.get("in") == "path" and p["name"] in _PATH_PARAMS:
                    p["schema"] = dict(_PATH_PARAMS[p["name"]])
                    p["description"] = _PATH_PARAMS[p["name"]]["description"]
            known = _OPERATIONS.get((method, path))
            if known is not None:
                success, extra = known
                statuses = sorted(set((_KEYED if keyed else _LOCAL) + extra))
                ok = "202" if (method, path) in _ACCEPTED else "200"
                op["responses"] = {ok: {"description": "Accepted: the job is queued" if ok == "202" else "OK",
                                        "content": {"application/json": {"schema": ref(success)}}},
                                   **{str(s): _error(s) for s in statuses}}
                if keyed:
                    op["security"] = security
                if path in ("/v1/memories", "/v1/memories/{user_id}/turns") and method == "get":
                    op["parameters"] = [*op.get("parameters", []), *_page_params(limits)]
                if path == "/v1/memories/{user_id}/turns" and method == "get":
                    op["parameters"] = [*op["parameters"], *_filter_params()]
                if (method, path) in _ACCEPTED:
                    op["parameters"] = [*op.get("parameters", []), *_import_params()]
            elif path == "/healthz":
                op["responses"] = {"200": {"description": "OK", "content": {"application/json": {
                    "schema": ref("Health")}}}, "500": _error(500), "503": _error(503)}
            elif path == "/metrics":
                statuses = (401, 403, 429, 503) if (keyed and metrics_auth) else ()
                op["responses"] = {"200": {"description": "Prometheus exposition text",
                                           "content": {"text/plain": {"schema": {"type": "string"}}}},
                                   **{str(s): _error(s) for s in statuses}}
                if keyed and metrics_auth:
                    op["security"] = security
    for name in ("HTTPValidationError", "ValidationError"):
        components["schemas"].pop(name, None)
    return doc


def install_openapi(app: FastAPI, *, keyed: bool, metrics_auth: bool, limits: Limits = _LIMITS) -> None:
    """Serve :func:`build_document` at ``/openapi.json`` (and so at ``/docs``)."""

    def openapi() -> dict:
        if app.openapi_schema is None:
            app.openapi_schema = build_document(app, keyed=keyed, metrics_auth=metrics_auth, limits=limits)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
