"""Typed service errors: an HTTP status, a machine-readable code, a message and the field at fault.

Every error a route returns is JSON of the shape
``{"error": {"status": 409, "code": "conflict", "message": "...", "field": "turns[0].text"}}``.
:func:`from_exception` maps the package's own typed errors onto statuses, so the REST routes and
the MCP tools report a bad input the same way.
"""

from __future__ import annotations

import os
import re
from typing import Iterable

from ..errors import (
    ConfigError,
    DataFormatError,
    ImmutablePacketError,
    MemCompileError,
    NamespaceError,
    StoreError,
    TransportError,
)
from ..store.postgres.connection import DatabaseUnreachable  # imports no driver


class ServiceError(MemCompileError):
    """An error with the HTTP status it is answered with."""

    def __init__(self, status: int, code: str, message: str, *, field: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.headers = headers or {}

    def body(self) -> dict:
        err = {"status": self.status, "code": self.code, "message": self.message}
        if self.field is not None:
            err["field"] = self.field
        return {"error": err}

    def redacted(self, *, paths: Iterable[str] = (), tenant: str | None = None) -> "ServiceError":
        """This error with the server's file paths and internal namespaces taken out of its message.

        A tenant sees its own user ids, never ``t:<tenant>:<user>`` (how the server keys the
        store) nor where the store lives on the server's disk.
        """
        message = redact_message(self.message, paths=paths, tenant=tenant)
        if message == self.message:
            return self
        out = ServiceError(self.status, self.code, message, field=self.field, headers=self.headers)
        out.__cause__ = self.__cause__
        return out


# Any internal namespace (``t:<tenant>:<user id>``): see auth.namespace_for.
_NAMESPACE_RE = re.compile(r"\bt:[a-z0-9][a-z0-9_-]{0,31}:(?=[A-Za-z0-9_@-])")
# An absolute path of a store file the exact-path pass did not catch (a resolved or -wal path).
_STORE_FILE_RE = re.compile(r"(?:[A-Za-z]:)?[/\\][^\s'\"]*\.(?:sqlite|db)(?:-wal|-shm|-journal)?\b")


def redact_message(message: str, *, paths: Iterable[str] = (), tenant: str | None = None) -> str:
    """``message`` without the given server paths (longest first), store-file paths or namespaces."""
    spelled: set[str] = set()
    for p in paths:
        if p and p != ":memory:":
            spelled.update({str(p), os.path.abspath(p), os.path.realpath(p)})
    for p in sorted(spelled, key=len, reverse=True):
        message = re.sub(re.escape(p) + r"(?:-wal|-shm|-journal)?", "the store", message)
    message = _STORE_FILE_RE.sub("the store", message)
    return _NAMESPACE_RE.sub("", message)


def from_exception(exc: BaseException) -> ServiceError:
    """The ServiceError a package exception is answered with (500 for anything unexpected)."""
    if isinstance(exc, ServiceError):
        return exc
    if isinstance(exc, ImmutablePacketError):
        return ServiceError(409, "conflict", str(exc), field="turns")
    if isinstance(exc, (NamespaceError, DataFormatError)):
        field = getattr(exc, "where", None)
        return ServiceError(400, "bad_request", str(exc), field=field)
    if isinstance(exc, TransportError):
        return ServiceError(503, "backend_unavailable", f"the model backend is unavailable: {exc}",
                            headers={"Retry-After": str(int(exc.retry_after or 5))})
    if isinstance(exc, ConfigError):
        return ServiceError(400, "bad_request", str(exc))
    if isinstance(exc, StoreError):
        if isinstance(exc, DatabaseUnreachable):
            # The dependency that is down, and for how long; the driver's reason (hosts,
            # sockets) goes to the server's log only.
            return ServiceError(503, "store_unavailable", f"the database is unreachable (for {exc.down_s:.0f} s); "
                                "retry later", headers={"Retry-After": "1"})
        return ServiceError(503, "store_unavailable", f"the store could not serve the request: {exc}",
                            headers={"Retry-After": "1"})
    return ServiceError(500, "internal", f"internal error ({type(exc).__name__})")
