"""One cheap call to a server backend before a run, so a server that is down stops the run
at once with its address instead of failing every question one by one.
"""

from __future__ import annotations

from typing import Any

from ..errors import ModelError, TransportError
from ..llm.interface import LLMRequest, Message

__all__ = ["ServerDownError", "server_url", "check_server"]

HEALTH_STAGE = "health"


class ServerDownError(TransportError):
    """A server backend did not answer the pre-run check (the message names its base URL)."""

    def __init__(self, message: str):
        super().__init__(message, retryable=True)


def server_url(backend: Any) -> str | None:
    """The base URL of a backend that talks to a server (from its identity), else None."""
    try:
        identity = backend.identity()
    except Exception:  # noqa: BLE001 - a backend without a usable identity is not a server
        return None
    url = identity.get("base_url") if isinstance(identity, dict) else None
    return str(url) if url else None


def check_server(backend: Any, *, role: str) -> str | None:
    """Send one one-token request to a server backend; return its URL (None: not a server).

    The request goes to the backend directly, never through the cache, so it really reaches
    the server. Raises :class:`ServerDownError` naming ``role`` ("answer model", "judge")
    and the URL when the call fails.
    """
    url = server_url(backend)
    if url is None:
        return None
    probe = LLMRequest(messages=(Message("user", "Reply with the word OK."),), stage=HEALTH_STAGE, max_tokens=1)
    try:
        responses = list(backend.generate([probe]))
    except ModelError as exc:
        raise ServerDownError(f"the {role} server at {url} did not answer a one-token test call ({exc}); "
                              "start it, or fix --base-url / --judge-base-url, then rerun") from exc
    if len(responses) != 1:
        raise ServerDownError(f"the {role} server at {url} answered a one-token test call with "
                              f"{len(responses)} responses")
    return url
