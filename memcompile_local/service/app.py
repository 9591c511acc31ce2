"""The HTTP app: REST routes under ``/v1``, MCP at ``/mcp``, ``/healthz``, ``/metrics``, ``/docs``.

``create_app(service, keyring)`` returns a FastAPI app; ``memcompile-local serve`` runs it on
uvicorn. Routes read and validate the JSON body themselves, so every bad input, malformed JSON
included, is a typed JSON error (``errors.ServiceError``) naming the field, never a bare 422.
The route functions are thin: the work is in ``core.MemoryService``, run in a worker thread.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import time
from typing import Any
from urllib.parse import unquote

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response
from starlette.datastructures import Headers
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from .. import __version__
from .auth import LOCAL_TENANT, KeyRing, Principal, key_from_headers
from .core import MemoryService
from ..store.postgres.connection import DatabaseUnreachable  # imports no driver
from .errors import ServiceError, from_exception
from .inspector import add_run_routes, document_run_routes, mount_ui
from .limits import ServeOptions
from .mcp_server import build_mcp
from .metrics import CONTENT_TYPE, Metrics
from .openapi import body_doc, import_body_doc, install_openapi
from .ratelimit import FailedKeyThrottle, TenantRateLimit
from .validate import TURN_ID_CHARS
from .worker import BuildWorker

log = logging.getLogger(__name__)
access_log = logging.getLogger("memcompile_local.service.access")
"""One line per request: method, path, status, duration, tenant (never a key, a query string or a body)."""

_ACCESS_KEY = "memcompile.access"  # the ASGI scope entry where a route leaves the request's tenant
_IMPORT_PATH = re.compile(r"^/v1/memories/[^/]+/imports/?$")  # uploads bounded by max_import_mb instead
# On a refused body: the server closes the connection after its answer instead of reading (and
# dropping) the rest of the body to keep the connection for another request.
_CLOSE = {"Connection": "close"}

def error_response(err: ServiceError, *, paths: tuple[str, ...] = ()) -> JSONResponse:
    """The JSON of ``err``, with the server's file paths and internal namespaces taken out."""
    err = err.redacted(paths=paths)
    return JSONResponse(err.body(), status_code=err.status, headers=err.headers)


def client_address(scope) -> str:
    client = scope.get("client")
    return client[0] if client else "unknown"


async def read_capped(chunks, cap: int) -> bytes:
    """The bytes of ``chunks`` (a request's body stream), refused with 413 as soon as they pass
    ``cap``: a chunked body, which has no Content-Length to check first, is never held whole."""
    parts, size = [], 0
    async for chunk in chunks:
        size += len(chunk)
        if size > cap:
            raise ServiceError(413, "body_too_large", f"request body has more than {cap} bytes; at most {cap}",
                               headers=_CLOSE)
        parts.append(chunk)
    return b"".join(parts)


def _replay(body: bytes, receive):
    """An ASGI ``receive`` that gives ``body`` as the whole request, then defers to ``receive``
    (which then reports the client's disconnect)."""
    given = False

    async def replayed():
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


def _slashed_id(scope) -> ServiceError | None:
    """The typed error of a ``/v1/memories/...`` path whose user, turn or job id holds an encoded
    '/' (``bad%2Fid``): the router matched no route, as the id split the path in two, but the
    client named one id, and it is malformed."""
    raw = scope.get("raw_path") or b""
    parts = raw.decode("latin-1").split("?", 1)[0].split("/")
    if parts[:3] != ["", "v1", "memories"]:
        return None
    for i, part in enumerate(parts[3:], start=3):
        value = unquote(part)
        if "/" not in value:
            continue
        if i == 3:
            field = "user_id"
            expected = "1-64 characters from [A-Za-z0-9._@-], not starting with '.'"
        else:
            field = {"turns": "turn_id", "imports": "job_id"}.get(parts[4] if len(parts) > 4 else "", "id")
            expected = f"characters from [{TURN_ID_CHARS}]"
        return ServiceError(400, "invalid_id", f"{field} {value!r} is malformed at character {value.index('/')} "
                            f"('/'): expected {expected}", field=field)
    return None


def create_app(service: MemoryService, keyring: KeyRing | None = None, *, host: str = "127.0.0.1",
               run_worker: bool = True, options: ServeOptions | None = None, runs_dir: str | None = None) -> FastAPI:
    """The FastAPI app over ``service``; ``keyring`` None serves the ``local`` tenant without keys;
    ``runs_dir``: evaluation run folders the inspector's Runs page may open (``inspector.py``)."""
    options = options or ServeOptions()
    metrics = Metrics(service.queue.depth, service.store.token_totals, views=service.memory.views)
    worker = BuildWorker(service, metrics=metrics)
    throttle = FailedKeyThrottle(per_minute=options.failed_keys_per_minute, burst=options.failed_keys_burst)
    rate = (TenantRateLimit(options.rate_limit, burst=options.rate_burst)
            if options.rate_limit is not None else None)
    paths = (str(service.store.path),)

    def authenticate(headers, scope) -> Principal:
        """The Principal of a request's key, throttling addresses whose keys keep failing."""
        if keyring is None:
            return Principal(LOCAL_TENANT, LOCAL_TENANT)
        address = client_address(scope)
        try:
            return keyring.authenticate(key_from_headers(headers))
        except ServiceError as err:
            if err.status in (401, 403):
                # A good key passes even from a throttled address (a client behind the same NAT
                # as a misbehaving one); past its budget an address gets 429 for bad keys.
                throttle.check(address)
                throttle.failed(address)
            raise

    def admit(headers, scope, *, counted: bool = True) -> Principal:
        """Authenticate, apply the tenant's rate limit (when ``counted``), and note the tenant
        for the access log."""
        p = authenticate(headers, scope)
        note = scope.get(_ACCESS_KEY)
        if note is not None:
            note["tenant"] = p.tenant
        if rate is not None and counted:
            rate.check(p.tenant)
        return p

    # MCP requests are not counted here: a tool call takes its token inside the MCP server and
    # is refused as a tool error the client's session survives (an HTTP 429 ends the session),
    # and the protocol's own messages (initialize, notifications, tools/list) take none.
    mcp = build_mcp(service, keyring=keyring, host=host, paths=paths,
                    rate_check=rate.check if rate is not None else None)
    mcp_app = mcp.streamable_http_app()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        if run_worker:
            worker.start()
        try:
            async with mcp.session_manager.run():
                yield
        finally:
            # SIGTERM (uvicorn's graceful shutdown) ends here after the last request: stop the
            # worker (its lease goes back), then close the store (the WAL is checkpointed).
            worker.stop()
            await run_in_threadpool(service.close)
            log.info("store %s closed", service.store.path)

    app = FastAPI(title="memcompile-local memory service", version=__version__, lifespan=lifespan,
                  description="Long-term conversational memory per user: append turns, search compiled evidence.")
    app.state.service = service
    app.state.worker = worker
    app.state.metrics = metrics

    def principal(request: Request) -> Principal:
        return admit(request.headers, request.scope)

    async def json_body(request: Request) -> Any:
        # Read through the cap: a chunked body (no Content-Length for the Guard to check) is
        # refused as soon as it passes it, not after the whole of it was held in memory.
        raw = await capped_body(request, service.limits.max_body_bytes)
        try:
            return json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise ServiceError(400, "bad_json", f"request body is not UTF-8 ({exc.reason} at byte {exc.start})",
                               field="$") from None
        except json.JSONDecodeError as exc:
            raise ServiceError(400, "bad_json",
                               f"request body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
                               field="$") from None
        except RecursionError:
            raise ServiceError(400, "bad_json", "request body nests arrays or objects too deeply to read",
                               field="$") from None

    async def capped_body(request: Request, cap: int) -> bytes:
        """The raw body, refused with 413 as soon as it passes ``cap`` bytes (chunked uploads too):
        the reader of every route that takes a body (``json_body`` and the imports)."""
        return await read_capped(request.stream(), cap)

    async def run(fn, *args, **kw):
        # Package errors become typed ServiceErrors here, inside the app's exception middleware
        # (an exception that escaped to the server-error middleware would drop the connection).
        try:
            # A JSONResponse of the plain dict the service returns: FastAPI would otherwise walk
            # it with jsonable_encoder first (milliseconds for a search's evidence).
            return JSONResponse(await run_in_threadpool(lambda: fn(*args, **kw)))
        except ServiceError:
            raise
        except Exception as exc:
            err = from_exception(exc)
            if isinstance(exc, DatabaseUnreachable):
                # One line, not a traceback per request while the database is away (the store
                # logs the outage's reason when it begins).
                log.warning("%s failed: %s", getattr(fn, "__name__", fn), exc)
            elif err.status >= 500:
                log.exception("%s failed", getattr(fn, "__name__", fn))
            raise err from exc

    class Guard:
        """Body-size and MCP-key checks before a request reaches its route, and its metrics.

        A plain ASGI middleware: ``@app.middleware("http")`` runs every request through an extra
        task and stream, which cost more than the search itself on a loaded view.
        """

        def __init__(self, inner):
            self.inner = inner

        async def __call__(self, scope, receive, send):
            if scope["type"] != "http":
                return await self.inner(scope, receive, send)
            t0 = time.perf_counter()
            status = [500]
            note: dict[str, Any] = {}
            scope[_ACCESS_KEY] = note

            async def send_status(message):
                if message["type"] == "http.response.start":
                    status[0] = message["status"]
                await send(message)

            headers = Headers(scope=scope)
            path = scope.get("path", "")
            length = headers.get("content-length")
            rejected: ServiceError | None = None
            cap = service.limits.max_import_bytes if _IMPORT_PATH.match(path) else service.limits.max_body_bytes
            if length is not None and length.isdigit() and int(length) > cap:
                rejected = ServiceError(413, "body_too_large", f"request body has {length} bytes; at most {cap}",
                                        headers=_CLOSE)
            elif path.startswith("/mcp"):
                try:
                    admit(headers, scope, counted=False)
                    if length is None and scope["method"] == "POST":
                        # The MCP SDK reads a body whole: a chunked one is read here through the
                        # cap (the same reader as the routes') and handed on.
                        receive = _replay(await read_capped(Request(scope, receive).stream(), cap), receive)
                except ServiceError as err:
                    rejected = err
                except ClientDisconnect:
                    return
            try:
                if rejected is not None:
                    await error_response(rejected, paths=paths)(scope, receive, send_status)
                else:
                    await self.inner(scope, receive, send_status)
            finally:
                seconds = time.perf_counter() - t0
                route = scope.get("route")
                name = getattr(route, "path", None) or ("/mcp" if path.startswith("/mcp") else "other")
                metrics.observe(scope["method"], name, status[0], seconds)
                if options.access_log:
                    access_log.info("%s %s %d %.1fms tenant=%s client=%s", scope["method"], path, status[0],
                                    seconds * 1000, note.get("tenant", "-"), client_address(scope))

    app.add_middleware(Guard)
    if options.cors_origins:
        # Outside the Guard, so a browser's preflight (no key) is answered here.
        app.add_middleware(CORSMiddleware, allow_origins=list(options.cors_origins),
                           allow_methods=["GET", "POST", "DELETE"],
                           allow_headers=["Authorization", "X-API-Key", "Content-Type", "Mcp-Session-Id",
                                          "Mcp-Protocol-Version"],
                           expose_headers=["Retry-After", "WWW-Authenticate", "Mcp-Session-Id"])

    @app.exception_handler(ServiceError)
    async def _service_error(request: Request, exc: ServiceError):
        return error_response(exc, paths=paths)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):
        if exc.status_code == 404:
            slashed = _slashed_id(request.scope)
            if slashed is not None:
                return error_response(slashed, paths=paths)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return error_response(ServiceError(exc.status_code, code, str(exc.detail)), paths=paths)

    # ------------------------------------------------------------------ routes
    # The OpenAPI document (statuses, response schemas, security) is ``openapi.py``'s, keyed
    # by operation id.
    @app.post("/v1/memories/{user_id}/turns", openapi_extra=body_doc("Append"), tags=["memories"],
              operation_id="append_turns", summary="Append turns (idempotent, all-or-nothing)")
    async def append(user_id: str, request: Request):
        p = principal(request)
        body = await json_body(request)
        return await run(service.add_turns, p.tenant, user_id, body)

    async def query_body(request: Request, fields: set[str]) -> dict:
        """The JSON object of a search or answer request: only ``fields``, ``query`` required."""
        body = await json_body(request)
        if not isinstance(body, dict):
            raise ServiceError(400, "bad_request", "the body must be a JSON object", field="$")
        unknown = sorted(set(body) - fields)
        if unknown:
            raise ServiceError(400, "bad_request", f"unexpected fields {unknown}", field=unknown[0])
        if "query" not in body:
            raise ServiceError(400, "bad_request", "query is required", field="query")
        return body

    filter_fields = {"speaker", "session_id", "agent_id", "metadata", "from", "to"}
    query_fields = {"query", "k", "preset", "question_date", "explain"} | filter_fields

    def body_filters(body: dict):
        return service.filters(speaker=body.get("speaker"), session_id=body.get("session_id"),
                               agent_id=body.get("agent_id"), metadata=body.get("metadata"),
                               time_from=body.get("from"), time_to=body.get("to"))

    @app.post("/v1/memories/{user_id}/search", openapi_extra=body_doc("Query"), tags=["memories"],
              operation_id="search", summary="Compiled evidence for a query")
    async def search(user_id: str, request: Request):
        p = principal(request)
        body = await query_body(request, query_fields)
        return await run(service.search, p.tenant, user_id, body["query"], k=body.get("k"),
                         preset=body.get("preset"), question_date=body.get("question_date"),
                         filters=body_filters(body), explain=body.get("explain", False))

    @app.post("/v1/memories/{user_id}/answer", openapi_extra=body_doc("Query"), tags=["memories"],
              operation_id="answer", summary="Compile the evidence and answer with the configured model")
    async def answer(user_id: str, request: Request):
        p = principal(request)
        body = await query_body(request, query_fields)
        return await run(service.answer, p.tenant, user_id, body["query"], k=body.get("k"),
                         preset=body.get("preset"), question_date=body.get("question_date"),
                         filters=body_filters(body), explain=body.get("explain", False))

    def _int_param(request: Request, name: str, default: int) -> int:
        value = request.query_params.get(name)
        if value is None:
            return default
        try:
            return int(value)
        except ValueError:
            raise ServiceError(400, "bad_request", f"{name} must be an integer", field=name) from None

    def _no_other_params(request: Request, allowed: set[str]) -> None:
        unknown = sorted(set(request.query_params) - allowed)
        if unknown:
            raise ServiceError(400, "bad_request", f"unexpected query parameters {unknown}; expected some of "
                               f"{sorted(allowed)}", field=unknown[0])

    @app.post("/v1/memories/{user_id}/imports", tags=["memories"], operation_id="start_import",
              openapi_extra=import_body_doc(), status_code=202,
              summary="Import a large history in the background (a conversation file or a list of turns)")
    async def start_import(user_id: str, request: Request):
        p = principal(request)
        _no_other_params(request, {"format", "conversation"})
        raw = await capped_body(request, service.limits.max_import_bytes)
        conversation = request.query_params.get("conversation")
        conv = None if conversation is None else _int_param(request, "conversation", 0)
        fmt = request.query_params.get("format", "auto")
        out = await run(service.start_import, p.tenant, user_id, raw, fmt=fmt, conversation=conv)
        out.status_code = 202
        out.headers["Location"] = f"/v1/memories/{user_id}/imports/{json.loads(out.body)['id']}"
        return out

    @app.get("/v1/memories/{user_id}/imports/{job_id}", tags=["memories"], operation_id="import_status",
             summary="Progress and outcome of an import")
    async def import_status(user_id: str, job_id: str, request: Request):
        p = principal(request)
        return await run(service.import_status, p.tenant, user_id, job_id)

    @app.get("/v1/memories", tags=["memories"], operation_id="list_users",
             summary="The tenant's user ids (paginated)")
    async def users(request: Request):
        p = principal(request)
        _no_other_params(request, {"offset", "limit"})
        return await run(service.list_users, p.tenant, offset=_int_param(request, "offset", 0),
                         limit=_int_param(request, "limit", 100))

    @app.get("/v1/memories/{user_id}", tags=["memories"], operation_id="stats",
             summary="Counts and build state of one memory")
    async def stats(user_id: str, request: Request):
        p = principal(request)
        return await run(service.stats, p.tenant, user_id)

    @app.get("/v1/memories/{user_id}/turns", tags=["memories"], operation_id="list_turns",
             summary="Stored turns (paginated)")
    async def turns(user_id: str, request: Request):
        p = principal(request)
        _no_other_params(request, {"offset", "limit"} | filter_fields)
        q = request.query_params
        metadata = q.get("metadata")
        if metadata is not None:
            try:
                metadata = json.loads(metadata)
            except (ValueError, RecursionError):
                raise ServiceError(400, "invalid_metadata", "metadata must be a JSON object (URL-encoded JSON text)",
                                   field="metadata") from None
        filters = service.filters(speaker=q.get("speaker"), session_id=q.get("session_id"),
                                  agent_id=q.get("agent_id"), metadata=metadata, time_from=q.get("from"),
                                  time_to=q.get("to"))
        return await run(service.list_turns, p.tenant, user_id, offset=_int_param(request, "offset", 0),
                         limit=_int_param(request, "limit", 100), filters=filters)

    @app.delete("/v1/memories/{user_id}/turns/{turn_id}", tags=["memories"], operation_id="delete_turn",
                summary="Erase one turn (an update is a delete, then an append)")
    async def delete_turn(user_id: str, turn_id: str, request: Request):
        p = principal(request)
        return await run(service.delete_turn, p.tenant, user_id, turn_id)

    @app.delete("/v1/memories/{user_id}", tags=["memories"], operation_id="forget",
                summary="Forget a memory (erased from the file)")
    async def forget(user_id: str, request: Request):
        p = principal(request)
        return await run(service.forget, p.tenant, user_id)

    @app.get("/healthz", tags=["service"])
    async def healthz():
        return await run(service.health)

    @app.get("/metrics", tags=["service"], operation_id="metrics")
    async def metrics_route(request: Request):
        if options.metrics_auth:
            authenticate(request.headers, request.scope)
        return Response(await run_in_threadpool(metrics.render), media_type=CONTENT_TYPE)

    # The memory inspector: its static web app, and the run folders' routes when asked for.
    mount_ui(app)
    if runs_dir is not None:
        add_run_routes(app, runs_dir, principal=principal, run=run, max_page=service.limits.max_page)

    # The MCP endpoint is a route of the same app (its lifespan runs in ours above).
    app.router.routes.extend(mcp_app.routes)
    install_openapi(app, keyed=keyring is not None, metrics_auth=options.metrics_auth, limits=service.limits)
    if runs_dir is not None:
        document_run_routes(app, keyed=keyring is not None)
    return app
