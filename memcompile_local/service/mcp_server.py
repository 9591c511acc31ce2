"""The MCP face of the memory service, on the official ``mcp`` SDK (``FastMCP``).

The same operations as the REST routes, as tools an agent can call: ``add_turns``, ``search``,
``answer``, ``stats``, ``list_users``, ``list_turns`` and ``forget``. Over streamable HTTP (mounted
on the REST app at ``/mcp``, stateless, JSON responses, so any server process can answer any call)
the tenant comes from the request's API key, checked on every call exactly as for REST. Over stdio
(``memcompile-local mcp``) the process belongs to whoever started it and every call is the
``local`` tenant.

A failed call returns an MCP tool error whose text is the service's typed JSON error.
"""

from __future__ import annotations

import json
from typing import Any, Callable

import anyio
from mcp.server.fastmcp import Context, FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings

from .auth import LOCAL_TENANT, KeyRing, key_from_headers
from .core import MemoryService
from .errors import from_exception

INSTRUCTIONS = (
    "Long-term memory of conversations. Write every conversation turn with add_turns as it "
    "happens; before answering a user, call search with the user's question to get the evidence "
    "(ordered turns with speaker and time, and a rendered context). user_id names whose memory."
)


def build_mcp(service: MemoryService, *, keyring: KeyRing | None, host: str = "127.0.0.1",
              stdio: bool = False) -> FastMCP:
    """A FastMCP server whose tools call ``service`` (``keyring`` None: no keys, local tenant)."""
    loopback = host in ("127.0.0.1", "localhost", "::1")
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=loopback,
        allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"] if loopback else [],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"] if loopback else [],
    )
    mcp = FastMCP("memcompile-local", instructions=INSTRUCTIONS, host=host, stateless_http=True,
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
            return await anyio.to_thread.run_sync(lambda: fn(tenant, *args, **kw))
        except Exception as exc:
            raise ToolError(json.dumps(from_exception(exc).body(), ensure_ascii=False)) from exc

    @mcp.tool()
    async def add_turns(user_id: str, turns: list[dict[str, Any]], ctx: Context) -> dict[str, Any]:
        """Append conversation turns to a user's memory.

        Each turn is {"speaker": str, "text": str, "time": str (when it was said), optional
        "id" and "session_id"}. Idempotent: a turn sent twice is stored once. Returns the turn
        ids and how many were added.
        """
        return await call(ctx, service.add_turns, user_id, {"turns": turns})

    @mcp.tool()
    async def search(user_id: str, query: str, ctx: Context, k: int | None = None) -> dict[str, Any]:
        """The evidence in a user's memory for a question: ordered turns and a rendered context."""
        return await call(ctx, service.search, user_id, query, k=k)

    @mcp.tool()
    async def answer(user_id: str, query: str, ctx: Context, k: int | None = None) -> dict[str, Any]:
        """Answer a question from a user's memory with the server's model (with the evidence)."""
        return await call(ctx, service.answer, user_id, query, k=k)

    @mcp.tool()
    async def stats(user_id: str, ctx: Context) -> dict[str, Any]:
        """Counts and background-build state of a user's memory."""
        return await call(ctx, service.stats, user_id)

    @mcp.tool()
    async def list_users(ctx: Context, limit: int = 100, after: str | None = None) -> dict[str, Any]:
        """The user ids that have a memory, in order; pass the returned 'next' as 'after' for more."""
        return await call(ctx, service.list_users, limit=limit, after=after)

    @mcp.tool()
    async def list_turns(user_id: str, ctx: Context, offset: int = 0, limit: int = 100) -> dict[str, Any]:
        """A user's stored turns in dialogue order."""
        return await call(ctx, service.list_turns, user_id, offset=offset, limit=limit)

    @mcp.tool()
    async def forget(user_id: str, ctx: Context) -> dict[str, Any]:
        """Erase a user's memory completely (cannot be undone)."""
        return await call(ctx, service.forget, user_id)

    return mcp
