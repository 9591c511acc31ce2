"""``MemoryClient`` and ``AsyncMemoryClient``: the memory service over HTTP with ``Memory``'s method names.

A thin layer on ``httpx`` (part of the ``serve`` extra)::

    from memcompile_local.service.client import MemoryClient

    with MemoryClient("http://127.0.0.1:8765", api_key="mcl_...") as mem:
        mem.add("alice", [{"speaker": "Alice", "text": "I moved to Lisbon.", "time": "2024-05-01 10:00"}])
        hits = mem.search("alice", "Where does Alice live?")

    async with AsyncMemoryClient("http://127.0.0.1:8765", api_key="mcl_...") as mem:
        hits = await mem.search("alice", "Where does Alice live?")

A turn dict may carry ``agent_id`` and a small ``metadata`` object; ``search``, ``answer`` and
``turns`` take the filters ``speaker``, ``session_id``, ``agent_id``, ``metadata``,
``time_from`` and ``time_to`` as keywords (``hits = mem.search("alice", "trips?", agent_id="planner")``).

Where ``Memory`` takes a namespace, the clients take a user id (the server maps it into the
tenant of the API key); it is percent-encoded in every URL, dots included, so no user id can
name another route. Errors are typed, never raw ``httpx`` exceptions:

* :class:`ServiceRequestError`: the server answered with an error (``status``, ``code``,
  ``message``, ``field``, and ``retry_after`` in seconds when it sent one);
* :class:`ServiceUnavailableError`: no answer (connection refused, timeout, a broken
  connection); ``retryable`` is True.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any, Iterable, Mapping
from urllib.parse import quote

from ..errors import MemCompileError, MissingExtraError

__all__ = ["AsyncMemoryClient", "MemoryClient", "ServiceRequestError", "ServiceUnavailableError"]


def _given(**fields: Any) -> dict[str, Any]:
    """The optional request fields that were given (None means "leave it to the server")."""
    return {name: value for name, value in fields.items() if value is not None}


class ServiceRequestError(MemCompileError):
    """The server answered with an error (``status``, ``code``, ``field`` from its JSON error).

    ``retryable`` is True for 429 and 503 (``retry_after``: the seconds the server asked for).
    """

    def __init__(self, status: int, code: str, message: str, field: str | None = None,
                 retry_after: float | None = None):
        super().__init__(f"HTTP {status} {code}: {message}" + (f" (field {field})" if field else ""))
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.retry_after = retry_after
        self.retryable = status in (429, 503)


class ServiceUnavailableError(MemCompileError):
    """No answer from the server (refused, timed out, cut off); ``retryable`` is always True."""

    retryable = True

    def __init__(self, message: str, url: str):
        super().__init__(f"{message} ({url})")
        self.url = url


# The ids the server accepts (``auth.USER_ID_RE``, ``validate.TURN_ID_CHARS``), spelled out
# here so that the client needs no more than httpx. A malformed id is refused before any
# request: ``bad/id`` would otherwise reach no route at all (a bare 404), since the server
# splits the path at its '/' whatever the encoding.
_USER_ID = re.compile(r"[A-Za-z0-9_@-][A-Za-z0-9._@-]{0,63}")
_TURN_ID = re.compile(r"[A-Za-z0-9._:@#+-]{1,128}")


def _invalid(field: str, value: Any, expected: str, allowed: re.Pattern, *, no_leading_dot: bool = False
             ) -> ServiceRequestError:
    """The typed error of a malformed id, naming it and its first character at fault."""
    if not isinstance(value, str) or not value:
        return ServiceRequestError(400, "invalid_id", f"{field} must be a non-empty string, got {value!r}", field)
    at = next((i for i, c in enumerate(value) if allowed.fullmatch(c) is None or (i == 0 and c == "." and no_leading_dot)),
              None)
    where = f"at character {at} ({value[at]!r})" if at is not None else f"({len(value)} characters)"
    return ServiceRequestError(400, "invalid_id", f"{field} {value!r} is malformed {where}: expected {expected}", field)


def _user(user_id: str) -> str:
    if not isinstance(user_id, str) or _USER_ID.fullmatch(user_id) is None:
        raise _invalid("user_id", user_id, "1-64 characters from [A-Za-z0-9._@-], not starting with '.'",
                       re.compile(r"[A-Za-z0-9._@-]"), no_leading_dot=True)
    return quote(user_id, safe="").replace(".", "%2E")


def _turn(turn_id: str, field: str = "turn_id") -> str:
    if not isinstance(turn_id, str) or _TURN_ID.fullmatch(turn_id) is None:
        raise _invalid(field, turn_id, "1-128 characters from [A-Za-z0-9._:@#+-]", re.compile(r"[A-Za-z0-9._:@#+-]"))
    return quote(turn_id, safe="").replace(".", "%2E")


def _append_body(turns: Iterable[Mapping[str, Any]] | Mapping[str, Any], sessions: bool) -> Any:
    if isinstance(turns, Mapping):
        return dict(turns)
    if sessions:
        return {"sessions": list(turns)}
    return {"turns": list(turns)}


def _filters(speaker, session_id, agent_id, metadata, time_from, time_to) -> dict[str, Any]:
    """The filter fields of a search or listing as the REST API spells them."""
    return _given(speaker=speaker, session_id=session_id, agent_id=agent_id, metadata=metadata,
                  **{"from": time_from, "to": time_to})


def _raise_for(r: Any) -> None:
    if r.status_code < 400:
        return
    retry = r.headers.get("retry-after")
    retry_after = float(retry) if retry and retry.replace(".", "", 1).isdigit() else None
    try:
        err = r.json()["error"]
        status, code, message, field = (int(err.get("status", r.status_code)), str(err.get("code", "error")),
                                        str(err.get("message", "")), err.get("field"))
    except Exception:
        status, code, message, field = r.status_code, "http_error", r.text[:200], None
    raise ServiceRequestError(status, code, message, field, retry_after)


def _httpx():
    try:
        import httpx
    except ImportError as exc:
        raise MissingExtraError("httpx", "serve", "the memory service client") from exc
    return httpx


FILTERS = ("speaker", "session_id", "agent_id", "metadata", "time_from", "time_to")


def _filter_args(given: Mapping[str, Any]) -> dict[str, Any]:
    """``given`` keyword filters checked by name (a misspelt one is a TypeError, not ignored)."""
    unknown = sorted(set(given) - set(FILTERS))
    if unknown:
        raise TypeError(f"unknown filter {unknown[0]!r}; the filters are {', '.join(FILTERS)}")
    return {name: given.get(name) for name in FILTERS}


class _Routes:
    """The requests of every method: (HTTP method, path, keyword arguments of ``httpx``)."""

    @staticmethod
    def add(user_id, turns, sessions):
        return "POST", f"/v1/memories/{_user(user_id)}/turns", {"json": _append_body(turns, sessions)}

    @staticmethod
    def search(user_id, query, k, preset, question_date, filters, explain=False):
        body = {"query": query, **_given(k=k, preset=preset, question_date=question_date), **_filters(**filters)}
        if explain:
            body["explain"] = True
        return "POST", f"/v1/memories/{_user(user_id)}/search", {"json": body}

    @staticmethod
    def answer(user_id, query, k, preset, question_date, filters, explain=False):
        body = {"query": query, **_given(k=k, preset=preset, question_date=question_date), **_filters(**filters)}
        if explain:
            body["explain"] = True
        return "POST", f"/v1/memories/{_user(user_id)}/answer", {"json": body}

    @staticmethod
    def start_import(user_id, data, format, conversation):
        params = _given(format=format, conversation=conversation)
        if isinstance(data, (bytes, bytearray)):
            content = bytes(data)
        elif isinstance(data, (str, os.PathLike)):
            content = Path(data).read_bytes()
        else:  # turns (or sessions) as Python objects
            content = json.dumps(data, ensure_ascii=False).encode("utf-8")
        return "POST", f"/v1/memories/{_user(user_id)}/imports", {
            "content": content, "params": params, "headers": {"Content-Type": "application/octet-stream"}}

    @staticmethod
    def import_status(user_id, job_id):
        return "GET", f"/v1/memories/{_user(user_id)}/imports/{_turn(job_id, 'job_id')}", {}

    @staticmethod
    def stats(user_id):
        return "GET", f"/v1/memories/{_user(user_id)}", {}

    @staticmethod
    def users(offset, limit):
        return "GET", "/v1/memories", {"params": {"offset": offset, "limit": limit}}

    @staticmethod
    def turns(user_id, offset, limit, filters):
        params = {"offset": offset, "limit": limit, **_filters(**filters)}
        if "metadata" in params:
            params["metadata"] = json.dumps(params["metadata"], ensure_ascii=False)
        return "GET", f"/v1/memories/{_user(user_id)}/turns", {"params": params}

    @staticmethod
    def delete_turn(user_id, turn_id):
        return "DELETE", f"/v1/memories/{_user(user_id)}/turns/{_turn(turn_id)}", {}

    @staticmethod
    def forget(user_id):
        return "DELETE", f"/v1/memories/{_user(user_id)}", {}


def _client_kwargs(base_url: str, api_key: str | None, timeout: float, transport: Any) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    kw: dict[str, Any] = {"base_url": base_url.rstrip("/"), "headers": headers, "timeout": timeout}
    if transport is not None:
        kw["transport"] = transport
    return kw


class MemoryClient:
    """Client of one memory server. ``api_key`` None for a server started without ``--keys``."""

    def __init__(self, base_url: str, api_key: str | None = None, *, timeout: float = 60.0, transport: Any = None):
        httpx = _httpx()
        self._errors = httpx.TransportError
        self._http = httpx.Client(**_client_kwargs(base_url, api_key, timeout, transport))

    def _call(self, method: str, path: str, **kw) -> Any:
        try:
            r = self._http.request(method, path, **kw)
        except self._errors as exc:
            raise ServiceUnavailableError(f"no answer from the memory server: {type(exc).__name__}: {exc}",
                                          f"{self._http.base_url}{path}") from exc
        _raise_for(r)
        return r.json()

    def add(self, user_id: str, turns: Iterable[Mapping[str, Any]] | Mapping[str, Any], *,
            sessions: bool = False) -> dict:
        """Append turns: a list of turn dicts (``speaker``, ``text``, ``time``), one turn dict, or
        with ``sessions=True`` a list of plain-format sessions (``time``, ``turns``). Returns the
        ids of the turns (in the order sent) and the added/skipped counts."""
        method, path, kw = _Routes.add(user_id, turns, sessions)
        return self._call(method, path, **kw)

    def compile(self, user_id: str, query: str, *, k: int | None = None, preset: str | None = None,
                question_date: str | None = None, explain: bool = False, **filters: Any) -> dict:
        """The compiled evidence (ranked, scored packets, rendered context, timings) for ``query``.

        ``filters``: any of ``speaker``, ``session_id``, ``agent_id``, ``metadata`` (a dict of
        top-level keys and the exact values wanted), ``time_from`` and ``time_to``; the evidence
        then comes from the matching turns only. ``explain=True``: each hit also carries the
        selector's per-channel explanation of its score."""
        method, path, kw = _Routes.search(user_id, query, k, preset, question_date, _filter_args(filters), explain)
        return self._call(method, path, **kw)

    search = compile

    def answer(self, user_id: str, query: str, *, k: int | None = None, preset: str | None = None,
               question_date: str | None = None, explain: bool = False, **filters: Any) -> dict:
        method, path, kw = _Routes.answer(user_id, query, k, preset, question_date, _filter_args(filters), explain)
        return self._call(method, path, **kw)

    def import_history(self, user_id: str, data: Any, *, format: str | None = None,
                       conversation: int | None = None) -> dict:
        """Start a background import: ``data`` is a file path, the file's bytes, or turns as a
        list of turn dicts (or an append body). Returns the job's status (``id``, ``state``);
        follow it with ``import_status`` or ``wait_import``."""
        method, path, kw = _Routes.start_import(user_id, data, format, conversation)
        return self._call(method, path, **kw)

    def import_status(self, user_id: str, job_id: str) -> dict:
        method, path, kw = _Routes.import_status(user_id, job_id)
        return self._call(method, path, **kw)

    def wait_import(self, user_id: str, job_id: str, *, timeout: float = 600.0, poll_s: float = 0.5) -> dict:
        """Poll an import until it is ``done`` or ``failed`` (its last status), or TimeoutError."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.import_status(user_id, job_id)
            if job["state"] in ("done", "failed"):
                return job
            if time.monotonic() > deadline:
                raise TimeoutError(f"import {job_id} still {job['state']} after {timeout}s")
            time.sleep(poll_s)

    def stats(self, user_id: str) -> dict:
        method, path, kw = _Routes.stats(user_id)
        return self._call(method, path, **kw)

    def users(self, *, offset: int = 0, limit: int = 100) -> dict:
        method, path, kw = _Routes.users(offset, limit)
        return self._call(method, path, **kw)

    def turns(self, user_id: str, *, offset: int = 0, limit: int = 100, **filters: Any) -> dict:
        """A page of stored turns; ``filters`` as in ``search``."""
        method, path, kw = _Routes.turns(user_id, offset, limit, _filter_args(filters))
        return self._call(method, path, **kw)

    def delete_turn(self, user_id: str, turn_id: str) -> dict:
        """Erase one turn (an update is ``delete_turn`` then ``add``)."""
        method, path, kw = _Routes.delete_turn(user_id, turn_id)
        return self._call(method, path, **kw)

    def forget(self, user_id: str) -> dict:
        method, path, kw = _Routes.forget(user_id)
        return self._call(method, path, **kw)

    def health(self) -> dict:
        return self._call("GET", "/healthz")

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "MemoryClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class AsyncMemoryClient:
    """:class:`MemoryClient` on ``httpx.AsyncClient``: the same methods, each a coroutine."""

    def __init__(self, base_url: str, api_key: str | None = None, *, timeout: float = 60.0, transport: Any = None):
        httpx = _httpx()
        self._errors = httpx.TransportError
        self._http = httpx.AsyncClient(**_client_kwargs(base_url, api_key, timeout, transport))

    async def _call(self, method: str, path: str, **kw) -> Any:
        try:
            r = await self._http.request(method, path, **kw)
        except self._errors as exc:
            raise ServiceUnavailableError(f"no answer from the memory server: {type(exc).__name__}: {exc}",
                                          f"{self._http.base_url}{path}") from exc
        _raise_for(r)
        return r.json()

    async def add(self, user_id: str, turns: Iterable[Mapping[str, Any]] | Mapping[str, Any], *,
                  sessions: bool = False) -> dict:
        method, path, kw = _Routes.add(user_id, turns, sessions)
        return await self._call(method, path, **kw)

    async def compile(self, user_id: str, query: str, *, k: int | None = None, preset: str | None = None,
                      question_date: str | None = None, explain: bool = False, **filters: Any) -> dict:
        method, path, kw = _Routes.search(user_id, query, k, preset, question_date, _filter_args(filters), explain)
        return await self._call(method, path, **kw)

    search = compile

    async def answer(self, user_id: str, query: str, *, k: int | None = None, preset: str | None = None,
                     question_date: str | None = None, explain: bool = False, **filters: Any) -> dict:
        method, path, kw = _Routes.answer(user_id, query, k, preset, question_date, _filter_args(filters), explain)
        return await self._call(method, path, **kw)

    async def import_history(self, user_id: str, data: Any, *, format: str | None = None,
                             conversation: int | None = None) -> dict:
        method, path, kw = _Routes.start_import(user_id, data, format, conversation)
        return await self._call(method, path, **kw)

    async def import_status(self, user_id: str, job_id: str) -> dict:
        method, path, kw = _Routes.import_status(user_id, job_id)
        return await self._call(method, path, **kw)

    async def wait_import(self, user_id: str, job_id: str, *, timeout: float = 600.0, poll_s: float = 0.5) -> dict:
        import asyncio

        deadline = time.monotonic() + timeout
        while True:
            job = await self.import_status(user_id, job_id)
            if job["state"] in ("done", "failed"):
                return job
            if time.monotonic() > deadline:
                raise TimeoutError(f"import {job_id} still {job['state']} after {timeout}s")
            await asyncio.sleep(poll_s)

    async def stats(self, user_id: str) -> dict:
        method, path, kw = _Routes.stats(user_id)
        return await self._call(method, path, **kw)

    async def users(self, *, offset: int = 0, limit: int = 100) -> dict:
        method, path, kw = _Routes.users(offset, limit)
        return await self._call(method, path, **kw)

    async def turns(self, user_id: str, *, offset: int = 0, limit: int = 100, **filters: Any) -> dict:
        method, path, kw = _Routes.turns(user_id, offset, limit, _filter_args(filters))
        return await self._call(method, path, **kw)

    async def delete_turn(self, user_id: str, turn_id: str) -> dict:
        method, path, kw = _Routes.delete_turn(user_id, turn_id)
        return await self._call(method, path, **kw)

    async def forget(self, user_id: str) -> dict:
        method, path, kw = _Routes.forget(user_id)
        return await self._call(method, path, **kw)

    async def health(self) -> dict:
        return await self._call("GET", "/healthz")

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncMemoryClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()
