"""The memory inspector's server side: the static web app at ``/ui`` and, with ``serve --runs
DIR``, the read-only ``/v1/runs`` routes its Runs page reads.

The web app (``service/ui/``: plain HTML, CSS and JavaScript modules, no build step) calls the
public REST API with the key the person signed in with; nothing here gives it data that a
client could not fetch. The static files carry no data, so they are served without a key; every
``/v1/runs`` route takes a key as every other route does. Run folders are server-wide (an
operator's evaluation results, not a tenant's memories), so any valid key may read them; only
folders found under ``DIR`` are listed, and a run is opened by a name from that list only, so no
path a client sends reaches the file system.
"""

from __future__ import annotations

import mimetypes
from pathlib import Path
from typing import Any, Callable

from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse
from starlette.staticfiles import StaticFiles

from ..bench.run_view import find_runs, load_run, question_page, run_summary
from ..errors import DataFormatError
from .errors import ServiceError

UI_DIR = Path(__file__).resolve().parent / "ui"
"""The web app's files (shipped as package data)."""

# Module scripts must be served as JavaScript; some platforms map .js to something else.
mimetypes.add_type("text/javascript", ".js")
mimetypes.add_type("image/svg+xml", ".svg")

# The app loads nothing from elsewhere and runs no inline script: a turn's text that slipped
# into the page as markup still could not run (the app renders text as text in the first place).
UI_HEADERS = [
    (b"content-security-policy",
     b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
     b"font-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-cache"),
]


class _UiFiles:
    """``StaticFiles`` over :data:`UI_DIR` with the headers above on every answer."""

    def __init__(self, directory: Path):
        self.files = StaticFiles(directory=str(directory), html=True)

    async def __call__(self, scope, receive, send):
        async def with_headers(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *UI_HEADERS]}
            await send(message)

        await self.files(scope, receive, with_headers)


def mount_ui(app: FastAPI) -> None:
    """Serve the inspector at ``/ui/`` (``/ui`` redirects there, so relative links resolve)."""

    @app.get("/ui", include_in_schema=False)
    async def ui_root():
        return RedirectResponse("/ui/", status_code=307)

    app.mount("/ui", _UiFiles(UI_DIR), name="ui")


# ------------------------------------------------------------------ runs
_RUN_PARAMS = {"offset", "limit", "category", "failing"}


def add_run_routes(app: FastAPI, runs_dir: str | Path, *, principal: Callable[[Request], Any],
                   run: Callable, max_page: int = 500) -> None:
    """``GET /v1/runs``, ``/v1/runs/{name}`` and ``/v1/runs/{name}/questions`` over ``runs_dir``."""
    root = Path(runs_dir)
    if not root.is_dir():
        raise DataFormatError(str(runs_dir), "--runs", "a directory of run folders", "not a directory")

    def open_run(name: str):
        folders = find_runs(root)  # walked per request: a run written since start is listed
        folder = folders.get(name)
        if folder is None:
            raise ServiceError(404, "not_found", f"no run folder named {name!r} under the served directory",
                               field="name")
        try:
            return load_run(folder, label=name)
        except DataFormatError as exc:
            raise ServiceError(422, "bad_run_folder", str(exc), field="name") from None

    def listing() -> dict:
        runs = []
        for name, folder in find_runs(root).items():
            try:
                s = run_summary(load_run(folder, label=name))
            except DataFormatError as exc:
                runs.append({"name": name, "error": str(exc)})
                continue
            runs.append({"name": name, "benchmark": s["benchmark"], "questions": s["questions"],
                         "preset": s["config"].get("preset"), "recall": s["overall"]["recall"],
                         "accuracy": s["overall"]["accuracy"], "stage": s["stage"]})
        return {"runs": runs}

    def int_param(request: Request, name: str, default: int, low: int, high: int | None = None) -> int:
        value = request.query_params.get(name)
        if value is None:
            return default
        try:
            n = int(value)
        except ValueError:
            n = None
        if n is None or n < low or (high is not None and n > high):
            bound = f"from {low} to {high}" if high is not None else f"at least {low}"
            raise ServiceError(400, "bad_request", f"{name} must be an integer {bound}", field=name)
        return n

    def only(request: Request, allowed: set[str]) -> None:
        unknown = sorted(set(request.query_params) - allowed)
        if unknown:
            raise ServiceError(400, "bad_request", f"unexpected query parameters {unknown}; expected some of "
                               f"{sorted(allowed)}", field=unknown[0])

    @app.get("/v1/runs", tags=["runs"], operation_id="list_runs", summary="The evaluation run folders served")
    async def runs_list(request: Request):
        principal(request)
        only(request, set())
        return await run(listing)

    @app.get("/v1/runs/{name:path}/questions", tags=["runs"], operation_id="run_questions",
             summary="One run's questions: gold turns against the selected ones (paginated)")
    async def runs_questions(name: str, request: Request):
        principal(request)
        only(request, _RUN_PARAMS)
        offset = int_param(request, "offset", 0, 0)
        limit = int_param(request, "limit", 50, 1, max_page)
        failing_text = request.query_params.get("failing", "false")
        if failing_text not in ("true", "false"):
            raise ServiceError(400, "bad_request", "failing must be true or false", field="failing")
        category = request.query_params.get("category")
        return await run(lambda: question_page(open_run(name), offset=offset, limit=limit, category=category,
                                               failing=failing_text == "true"))

    @app.get("/v1/runs/{name:path}", tags=["runs"], operation_id="run_summary",
             summary="One run's per-category recall and accuracy")
    async def runs_detail(name: str, request: Request):
        principal(request)
        only(request, set())
        return await run(lambda: run_summary(open_run(name)))


# ------------------------------------------------------------------ OpenAPI
_NUM = {"type": ["number", "null"]}
_INT = {"type": "integer"}
_STR = {"type": "string"}


def _run_schemas() -> dict:
    group = {"type": "object", "required": ["key", "name", "count", "recall", "recall_n", "fully_covered",
                                            "accuracy", "judged", "correct", "judge_errors"],
             "properties": {"key": _STR, "name": _STR, "count": _INT,
                            "recall": {**_NUM, "description": "mean gold recall of the stage (fraction)"},
                            "recall_n": {**_INT, "description": "questions with gold evidence"},
                            "fully_covered": _INT,
                            "accuracy": {**_NUM, "description": "judge accuracy (fraction); null when not judged"},
                            "judged": _INT, "correct": _INT, "judge_errors": _INT}}
    ident = {"type": "object", "required": ["id"], "properties": {"id": _STR}}
    return {
        "RunList": {"type": "object", "required": ["runs"], "properties": {"runs": {"type": "array", "items": {
            "type": "object", "required": ["name"],
            "properties": {"name": {**_STR, "description": "the folder's path under the served directory"},
                           "benchmark": _STR, "questions": _INT, "preset": {"type": ["string", "null"]},
                           "recall": _NUM, "accuracy": _NUM, "stage": {"type": ["string", "null"]},
                           "error": {**_STR, "description": "why the folder could not be read"}}}}}},
        "RunGroup": group,
        "RunSummary": {
            "type": "object",
            "required": ["name", "benchmark", "stage", "questions", "categories", "overall", "outcomes", "config"],
            "properties": {"name": _STR, "run_id": {"type": ["string", "null"]}, "benchmark": _STR,
                           "stage": {"type": ["string", "null"], "description": "the recall stage shown (final)"},
                           "questions": _INT, "torn_lines": _INT, "wall_s": _NUM,
                           "context_tokens_per_question": _NUM, "failed_questions": _INT,
                           "config": {"type": "object"},
                           "categories": {"type": "array", "items": {"$ref": "#/components/schemas/RunGroup"}},
                           "overall": {"$ref": "#/components/schemas/RunGroup"},
                           "outcomes": {"type": "object", "additionalProperties": _INT},
                           "has_report_md": {"type": "boolean"}}},
        "RunQuestionPage": {
            "type": "object", "required": ["name", "total", "offset", "questions", "next_offset"],
            "properties": {"name": _STR, "total": _INT, "offset": _INT, "next_offset": {"type": ["integer", "null"]},
                           "questions": {"type": "array", "items": {
                               "type": "object",
                               "required": ["question_id", "category", "question", "recall", "gold_ids",
                                            "selected_ids", "outcome"],
                               "properties": {
                                   "question_id": _STR, "category": _STR, "category_name": _STR, "question": _STR,
                                   "gold": {"type": ["string", "null"]}, "prediction": {},
                                   "judge_label": {"type": ["string", "null"]}, "judge_error": {},
                                   "abstention": {"type": "boolean"}, "recall": _NUM,
                                   "gold_ids": {"type": "array", "items": {**ident, "properties": {
                                       "id": _STR, "selected": {"type": "boolean"}}}},
                                   "unreachable_ids": {"type": "array", "items": _STR},
                                   "selected_ids": {"type": "array", "items": {**ident, "properties": {
                                       "id": _STR, "gold": {"type": "boolean"}}}},
                                   "outcome": {"enum": ["hit", "partial", "miss", "no_gold"]}}}}}},
    }


_RUN_OPS = {
    "/v1/runs": ("RunList", ()),
    "/v1/runs/{name}": ("RunSummary", (404, 422)),
    "/v1/runs/{name}/questions": ("RunQuestionPage", (404, 422)),
}
_RUN_ERRORS = {400: "Bad query parameter", 401: "Missing or unknown API key", 403: "The API key was revoked",
               404: "No run folder of that name under the served directory",
               422: "The run folder's files are malformed (the message names the file and place)",
               429: "Too many requests", 500: "An internal error", 503: "The keys file is unavailable"}


def document_run_routes(app: FastAPI, *, keyed: bool) -> None:
    """Add the runs routes' schemas, statuses and security to the app's OpenAPI document."""
    inner = app.openapi
    done: list[dict] = []

    def openapi() -> dict:
        doc = inner()
        if done and done[0] is doc:
            return doc
        doc["components"].setdefault("schemas", {}).update(_run_schemas())
        paths = doc.get("paths", {})
        for path in list(paths):
            # FastAPI spells the catch-all parameter {name:path} in the path; clients want {name}.
            clean = path.replace("{name:path}", "{name}")
            if clean != path:
                paths[clean] = paths.pop(path)
        for path, (schema, extra) in _RUN_OPS.items():
            op = paths.get(path, {}).get("get")
            if op is None:
                continue
            statuses = sorted({400, 429, 500, *extra} | ({401, 403, 503} if keyed else set()))
            op["responses"] = {"200": {"description": "OK", "content": {"application/json": {
                "schema": {"$ref": f"#/components/schemas/{schema}"}}}},
                **{str(s): {"description": _RUN_ERRORS[s],
                            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
                   for s in statuses}}
            if keyed:
                op["security"] = [{"bearer": []}, {"apiKey": []}]
            for p in op.get("parameters", []):
                if p.get("name") == "name":
                    p["description"] = "a run's name as GET /v1/runs lists it (its path under the served directory)"
                    p["schema"] = {"type": "string"}
            if path.endswith("/questions"):
                op["parameters"] = [*op.get("parameters", []),
                                    {"name": "offset", "in": "query", "required": False,
                                     "schema": {"type": "integer", "minimum": 0, "default": 0}},
                                    {"name": "limit", "in": "query", "required": False,
                                     "schema": {"type": "integer", "minimum": 1, "default": 50}},
                                    {"name": "category", "in": "query", "required": False, "schema": _STR,
                                     "description": "only questions of this category (a key of the summary's groups)"},
                                    {"name": "failing", "in": "query", "required": False,
                                     "schema": {"type": "boolean", "default": False},
                                     "description": "only questions that missed gold evidence or were judged wrong"}]
        done[:] = [doc]
        return doc

    app.openapi = openapi  # type: ignore[method-assign]
