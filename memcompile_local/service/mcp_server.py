"""The MCP face of the memory service, on the official ``mcp`` SDK (``FastMCP``).

The same operations as the REST routes, as tools an agent can call: ``add_turns``, ``search``,
``answer``, ``stats``, ``list_users``, ``list_turns``, ``delete_turn`` and ``forget``; every
argument is described and bounded (``k``, page sizes), ``turns`` is typed, and each tool says
whether it only reads or destroys (MCP tool annotations). Over streamable HTTP (mounted
on the REST app at ``/mcp``, stateless, JSON responses, so any server process can answer any call)
the tenant comes from the request's API key, checked on every call exactly as for REST. Over stdio
(``memcompile-local mcp``) the process belongs to whoever started it and every call is the
``local`` tenant.

A failed call returns an MCP tool error whose text is the service's typed JSON error, after
the SDK's ``Error executing tool <name>: `` prefix: a bad argument is a 400 naming the argument
(``turns[0].speaker``) and what was expected, an argument the tool does not take is one too,
and a call past the tenant's rate limit (``serve --rate-limit``) is a 429 ``rate_limited`` tool
error saying when to retry. The protocol's own requests (initialize, tools/list, notifications)
are not counted against the rate, so a client is never cut off in its handshake, and a refused
call leaves its session open.

``add_turns`` is not marked idempotent: a turn sent without ``time`` (and without ``id``) is
dated by the server's clock and stored again when the call is repeated. A client that retries
sends ``time`` or ``id`` with every turn; then a repeated call stores nothing new.
"""


import json
from typing import Annotated, Any, Callable

import anyio
from mcp.server.fastmcp import Context, FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .auth import LOCAL_TENANT, USER_ID_RE, KeyRing, key_from_headers
from .core import MemoryService
from .errors import ServiceError, from_exception


class TurnArg(BaseModel):
    """One turn of ``add_turns`` (the REST ``Turn`` schema)."""

    model_config = ConfigDict(extra="forbid")

    speaker: str = Field(description="who said it (one line)")
    text: str = Field(description="what was said")
    time: str | None = Field(None, description="when it was said, e.g. '2024-05-08 13:56'; default: the "
                                               "server's clock (UTC)")
    session_id: str | None = Field(None, description="the conversation it belongs to; default 'default'")
    id: str | None = Field(None, description="a turn id of your own; default: the next S<session>:<n>")
    image_caption: str | None = Field(None, description="a caption of an image shared with the turn")
    agent_id: str | None = Field(None, description="the agent that took part in the turn; search can scope to it")
    metadata: dict[str, Any] | None = Field(None, description="a small JSON object stored with the turn; search "
                                                              "and list_turns can filter on its top-level keys")

INSTRUCTIONS = (
    "Long-term memory of conversations. Write every conversation turn with add_turns as it "
    "happens; before answering a user, call search with the user's question to get the evidence "
    "(ordered turns with speaker and time, and a rendered context). user_id names whose memory."
)


def _tool_error(tool: str, err: ServiceError) -> ToolError:
    """The tool error of ``err``: the SDK's prefix, then the service's JSON error."""
    return ToolError(f"Error executing tool {tool}: " + json.dumps(err.body(), ensure_ascii=False))


def _argument_path(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _schema_at(schema: dict, loc: tuple) -> dict:
    """The JSON schema of the argument at ``loc`` in a tool's input schema ({} when unknown)."""
    defs = schema.get("$defs", {})
    node: Any = schema
    for part in loc:
        node = _resolve(node, defs)
        if isinstance(part, int):
            node = node.get("items", {})
        else:
            node = node.get("properties", {}).get(part, {})
    return _resolve(node, defs)


def _resolve(node: Any, defs: dict) -> dict:
    if not isinstance(node, dict):
        return {}
    if "$ref" in node:
        return defs.get(node["$ref"].rsplit("/", 1)[-1], {})
    for key in ("anyOf", "allOf"):
        for option in node.get(key, ()):  # ``X | None``: the schema of X
            option = _resolve(option, defs)
            if option.get("type") != "null":
                return {**option, **{k: v for k, v in node.items() if k not in ("anyOf", "allOf")}}
    return node


def _expected(error: dict, schema: dict) -> str:
    """What the argument at fault had to be, in words (from the error and the argument's schema)."""
    kind, ctx = error.get("type", ""), error.get("ctx") or {}
    described = schema.get("description")
    if kind == "missing":
        return "a value: this argument is required" + (f" ({described})" if described else "")
    if kind == "extra_forbidden":
        return "no such field" + (f"; the fields are {', '.join(sorted(schema))}" if schema else "")
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than") or kind.startswith("int"):
        low, high = schema.get("minimum"), schema.get("maximum")
        bounds = (f" from {low} to {high}" if low is not None and high is not None
                  else f" of at least {low}" if low is not None else f" of at most {high}" if high is not None else "")
        return f"an integer{bounds}"
    if kind in ("too_short", "too_long"):
        low, high = schema.get("minItems", schema.get("minLength")), schema.get("maxItems", schema.get("maxLength"))
        noun = "items" if "minItems" in schema or "maxItems" in schema else "characters"
        return f"{low if low is not None else 0} to {high if high is not None else 'any number of'} {noun}"
    if kind == "string_pattern_mismatch":
        return described or f"a string matching {ctx.get('pattern')}"
    if kind.startswith("string"):
        return "a string" + (f" ({described})" if described else "")
    if kind.startswith(("dict", "model")):
        return "a JSON object" + (f" ({described})" if described else "")
    if kind.startswith("list"):
        return "a list" + (f" ({described})" if described else "")
    return described or str(error.get("msg", "a valid value"))


def argument_error(tool: str, exc: ValidationError, schema: dict) -> ServiceError:
    """The 400 of a tool call's first bad argument: its path, what was expected, what came."""
    error = exc.errors(include_url=False)[0]
    loc = tuple(error.get("loc", ()))
    where = _argument_path(loc) or "arguments"
    expected = _expected(error, _schema_at(schema, loc) if error.get("type") != "extra_forbidden"
                         else _schema_at(schema, loc[:-1]).get("properties", {}))
    got = "" if error.get("type") == "missing" else f"; got {json.dumps(error.get('input'), default=repr)[:80]}"
    more = len(exc.errors()) - 1
    also = f" ({more} more argument error{'s' if more > 1 else ''})" if more else ""
    return ServiceError(400, "bad_request", f"{tool}: argument {where} must be {expected}{got}{also}", field=where)


class ServiceMCP(FastMCP):
    """FastMCP whose tool calls answer a bad or unknown argument with the service's typed 400
    (the SDK would return pydantic's own text, or ignore an unknown argument)."""

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        tool = self._tool_manager.get_tool(name)
        if tool is not None and isinstance(arguments, dict):
            known = tool.parameters.get("properties", {})
            unknown = sorted(set(arguments) - set(known))
            if unknown:
                raise _tool_error(name, ServiceError(
                    400, "bad_request", f"{name}: unexpected argument {unknown[0]!r}; the arguments are "
                    f"{', '.join(known)}", field=unknown[0]))
        try:
            return await super().call_tool(name, arguments)
        except ToolError as exc:
            cause = exc.__cause__
            # Only the validation of the call's arguments (their model), not an error from inside the tool.
            if (tool is not None and isinstance(cause, ValidationError)
                    and cause.title == tool.fn_metadata.arg_model.__name__):
                raise _tool_error(name, argument_error(name, cause, tool.parameters)) from None
            raise


def build_mcp(service: MemoryService, *, keyring: KeyRing | None, host: str = "127.0.0.1",
              stdio: bool = False, paths: tuple[str, ...] = (),
              rate_check: Callable[[str], None] | None = None) -> FastMCP:
    """A FastMCP server whose tools call ``service`` (``keyring`` None: no keys, local tenant).

    ``rate_check(tenant)`` (the app's per-tenant rate limit) is called once per tool call and
    raises a 429 ``ServiceError`` past the limit; None: no limit."""
    loopback = host in ("127.0.0.1", "localhost", "::1")
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=loopback,
        allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"] if loopback else [],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"] if loopback else [],
    )
    mcp = ServiceMCP("memcompile-local", instructions=INSTRUCTIONS, host=host, stateless_http=True,
                  json_response=True, streamable_http_path="/mcp", transport_security=security,
                  log_level="WARNING")

    def tenant_of(ctx: Context) -> str:
        if stdio or keyring is None:
            return LOCAL_TENANT
        request = ctx.request_context.request
        headers = request.headers if request is not None else {}
        return keyring.authenticate(key_from_headers(headers)).tenant

    async def call(ctx: Context, fn: Callable[..., dict], *args: Any, **kw: Any) -> dict:
        try:
            tenant = tenant_of(ctx)
            if rate_check is not None:
                rate_check(tenant)
            return await anyio.to_thread.run_sync(lambda: fn(tenant, *args, **kw))
        except Exception as exc:
            err = from_exception(exc).redacted(paths=paths or (str(service.store.path),))
            raise ToolError(json.dumps(err.body(), ensure_ascii=False)) from exc

    k_max = service.limits.max_k
    page_max = service.limits.max_page
    UserId = Annotated[str, Field(description="whose memory: 1-64 characters of [A-Za-z0-9._@-]",
                                  pattern=f"^{USER_ID_RE.pattern}$")]
    Query = Annotated[str, Field(description="the question or search text", min_length=1,
                                 max_length=service.limits.max_text_chars)]
    K = Annotated[int | None, Field(description=f"how many turns of evidence (1-{k_max}; default: the server's)",
                                    ge=1, le=k_max)]
    QuestionDate = Annotated[str | None, Field(description="when the question is asked, e.g. '2024-06-01'; "
                                               "relative times in it ('last month') are resolved from this date")]
    Speaker = Annotated[str | None, Field(description="only turns of this speaker")]
    SessionId = Annotated[str | None, Field(description="only turns of this session")]
    AgentId = Annotated[str | None, Field(description="only turns of this agent (a scope within the user)")]
    Metadata = Annotated[dict[str, Any] | None, Field(description="only turns whose metadata has each of these "
                                                                   "top-level keys with exactly this value")]
    TimeFrom = Annotated[str | None, Field(description="only turns said at or after this time, e.g. '2024-05-01'")]
    TimeTo = Annotated[str | None, Field(description="only turns said at or before this time (a bare date: until "
                                                     "its end)")]
    Explain = Annotated[bool, Field(description="also return, for each turn, why it was chosen: the selector, its "
                                                "raw score and each channel's value and contribution")]
    Offset = Annotated[int, Field(description="items to skip", ge=0)]
    Limit = Annotated[int, Field(description=f"items per page (1-{page_max})", ge=1, le=page_max)]
    read_only = ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True, openWorldHint=False)

    # Not idempotent: a turn without time or id is stored again by a repeated call (module doc).
    @mcp.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=False,
                                          openWorldHint=False))
    async def add_turns(user_id: UserId,
                        turns: Annotated[list[TurnArg], Field(description="the turns, in the order they were said",
                                                              min_length=1,
                                                              max_length=service.limits.max_turns_per_request)],
                        ctx: Context) -> dict[str, Any]:
        """Append conversation turns to a user's memory (all or nothing).

        A turn sent again with the same time (or id) is stored once; a turn without a time is
        dated by the server's clock (UTC) and always stored, so a call repeated after an error
        stores it twice unless every turn has a time or an id. Returns the id of every turn and
        how many were added.
        """
        body = {"turns": [t.model_dump(exclude_none=True) for t in turns]}
        return await call(ctx, service.add_turns, user_id, body)

    def filtered(fn: Callable[..., dict], **given: Any) -> Callable[..., dict]:
        # The filters are checked in the worker thread, so a bad one is the service's typed error.
        def run(tenant: str, *args: Any, **kw: Any) -> dict:
            f = service.filters(**given, names=("time_from", "time_to"))
            return fn(tenant, *args, **kw, filters=f)
        return run

    @mcp.tool(annotations=read_only)
    async def search(user_id: UserId, query: Query, ctx: Context, k: K = None,
                     question_date: QuestionDate = None, speaker: Speaker = None, session_id: SessionId = None,
                     agent_id: AgentId = None, metadata: Metadata = None, time_from: TimeFrom = None,
                     time_to: TimeTo = None, explain: Explain = False) -> dict[str, Any]:
        """The evidence in a user's memory for a question: ranked turns, each with a score in [0, 1]
        (never rising down the list), and a rendered context.

        The filters restrict the turns searched (k come back when k match)."""
        fn = filtered(service.search, speaker=speaker, session_id=session_id, agent_id=agent_id,
                      metadata=metadata, time_from=time_from, time_to=time_to)
        return await call(ctx, fn, user_id, query, k=k, question_date=question_date, explain=explain)

    @mcp.tool(annotations=ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=False,
                                          openWorldHint=True))
    async def answer(user_id: UserId, query: Query, ctx: Context, k: K = None,
                     question_date: QuestionDate = None, speaker: Speaker = None, session_id: SessionId = None,
                     agent_id: AgentId = None, metadata: Metadata = None, time_from: TimeFrom = None,
                     time_to: TimeTo = None) -> dict[str, Any]:
        """Answer a question from a user's memory with the server's model (with the evidence; the
        filters as in search)."""
        fn = filtered(service.answer, speaker=speaker, session_id=session_id, agent_id=agent_id,
                      metadata=metadata, time_from=time_from, time_to=time_to)
        return await call(ctx, fn, user_id, query, k=k, question_date=question_date)

    @mcp.tool(annotations=read_only)
    async def stats(user_id: UserId, ctx: Context) -> dict[str, Any]:
        """Counts and background-build state of a user's memory."""
        return await call(ctx, service.stats, user_id)

    @mcp.tool(annotations=read_only)
    async def list_users(ctx: Context, offset: Offset = 0, limit: Limit = 100) -> dict[str, Any]:
        """The user ids that have a memory, in order; pass the returned 'next_offset' as 'offset' for more."""
        return await call(ctx, service.list_users, offset=offset, limit=limit)

    @mcp.tool(annotations=read_only)
    async def list_turns(user_id: UserId, ctx: Context, offset: Offset = 0, limit: Limit = 100,
                         speaker: Speaker = None, session_id: SessionId = None, agent_id: AgentId = None,
                         metadata: Metadata = None, time_from: TimeFrom = None,
                         time_to: TimeTo = None) -> dict[str, Any]:
        """A user's stored turns in dialogue order (only those the filters let through); pass the
        returned 'next_offset' as 'offset' for more."""
        fn = filtered(service.list_turns, speaker=speaker, session_id=session_id, agent_id=agent_id,
                      metadata=metadata, time_from=time_from, time_to=time_to)
        return await call(ctx, fn, user_id, offset=offset, limit=limit)

    @mcp.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=False,
                                          openWorldHint=False))
    async def delete_turn(user_id: UserId,
                          turn_id: Annotated[str, Field(description="the id add_turns or list_turns gave the turn")],
                          ctx: Context) -> dict[str, Any]:
        """Erase one turn of a user's memory (cannot be undone). To change a turn, delete it and add it again."""
        return await call(ctx, service.delete_turn, user_id, turn_id)

    @mcp.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=False,
                                          openWorldHint=False))
    async def forget(user_id: UserId, ctx: Context) -> dict[str, Any]:
        """Erase a user's memory completely (cannot be undone)."""
        return await call(ctx, service.forget, user_id)

    return mcp
