"""``MemoryClient``: the memory service over HTTP with the method names of ``Memory``.

A thin layer on ``httpx`` (part of the ``serve`` extra)::

    from memcompile_local.service.client import MemoryClient

    with MemoryClient("http://127.0.0.1:8765", api_key="mcl_...") as mem:
        mem.add("alice", [{"speaker": "Alice", "text": "I moved to Lisbon.", "time": "2024-05-01 10:00"}])
        hits = mem.search("alice", "Where does Alice live?")

Where ``Memory`` takes a namespace, the client takes a user id (the server maps it into the
tenant of the API key). A non-2xx answer raises :class:`ServiceRequestError` with the server's
status, error code, message and field.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping
from urllib.parse import quote

from ..errors import MemCompileError, MissingExtraError


def _given(**fields: Any) -> dict[str, Any]:
    """The optional request fields that were given (None means "leave it to the server")."""
    return {name: value for name, value in fields.items() if value is not None}


class ServiceRequestError(MemCompileError):
    """The server answered with an error (``status``, ``code``, ``field`` from its JSON error)."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None):
        super().__init__(f"HTTP {status} {code}: {message}" + (f" (field {field})" if field else ""))
        self.status = status
        self.code = code
        self.message = message
        self.field = field


class MemoryClient:
    """Client of one memory server. ``api_key`` None for a server started without ``--keys``."""

    def __init__(self, base_url: str, api_key: str | None = None, *, timeout: float = 60.0, transport: Any = None):
        try:
            import httpx
        except ImportError as exc:
            raise MissingExtraError("httpx", "serve", "the memory service client") from exc
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        kw = {"transport": transport} if transport is not None else {}
        self._http = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout, **kw)

    def _call(self, method: str, path: str, **kw) -> Any:
        r = self._http.request(method, path, **kw)
        if r.status_code >= 400:
            try:
                err = r.json()["error"]
            except Exception:
                raise ServiceRequestError(r.status_code, "http_error", r.text[:200]) from None
            raise ServiceRequestError(err.get("status", r.status_code), err.get("code", "error"),
                                      err.get("message", ""), err.get("field"))
        return r.json()

    @staticmethod
    def _user(user_id: str) -> str:
        return quote(user_id, safe="")

    def add(self, user_id: str, turns: Iterable[Mapping[str, Any]] | Mapping[str, Any], *,
            sessions: bool = False) -> dict:
        """Append turns: a list of turn dicts (``speaker``, ``text``, ``time``), one turn dict, or
        with ``sessions=True`` a list of plain-format sessions (``time``, ``turns``)."""
        if isinstance(turns, Mapping):
            body: Any = dict(turns)
        elif sessions:
            body = {"sessions": list(turns)}
        else:
            body = {"turns": list(turns)}
        return self._call("POST", f"/v1/memories/{self._user(user_id)}/turns", json=body)

    def compile(self, user_id: str, query: str, *, k: int | None = None, preset: str | None = None) -> dict:
        """The compiled evidence (packets, rendered context, timings) for ``query``."""
        body = {"query": query, **_given(k=k, preset=preset)}
        return self._call("POST", f"/v1/memories/{self._user(user_id)}/search", json=body)

    search = compile

    def answer(self, user_id: str, query: str, *, k: int | None = None, question_date: str | None = None) -> dict:
        body = {"query": query, **_given(k=k, question_date=question_date)}
        return self._call("POST", f"/v1/memories/{self._user(user_id)}/answer", json=body)

    def stats(self, user_id: str) -> dict:
        return self._call("GET", f"/v1/memories/{self._user(user_id)}")

    def users(self, *, limit: int = 100, after: str | None = None) -> dict:
        return self._call("GET", "/v1/memories", params={"limit": limit, **_given(after=after)})

    def turns(self, user_id: str, *, offset: int = 0, limit: int = 100) -> dict:
        return self._call("GET", f"/v1/memories/{self._user(user_id)}/turns", params={"offset": offset, "limit": limit})

    def forget(self, user_id: str) -> dict:
        return self._call("DELETE", f"/v1/memories/{self._user(user_id)}")

    def health(self) -> dict:
        return self._call("GET", "/healthz")

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "MemoryClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
