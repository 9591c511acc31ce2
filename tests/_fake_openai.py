"""A tiny scripted HTTP server on 127.0.0.1 that speaks just enough of the OpenAI API.

Tests hand it a function ``reply(path, body, hit) -> Reply`` that decides, per request,
what status, headers and body to send back and how long to wait first. It records every
request body and the largest number of requests it was serving at the same time.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # dict -> JSON; bytes/str -> sent as is
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


def chat_body(content: str, *, finish_reason: str = "stop", prompt_tokens: int = 11,
              completion_tokens: int = 7, usage: bool = True) -> dict[str, Any]:
    """A chat.completion JSON body with one choice."""
    body: dict[str, Any] = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "fake-model",
        "choices": [{"index": 0, "finish_reason": finish_reason,
                     "message": {"role": "assistant", "content": content}}],
    }
    if usage:
        body["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                         "total_tokens": prompt_tokens + completion_tokens}
    return body


class FakeOpenAIServer:
    """Start with ``with FakeOpenAIServer(reply) as srv:``; ``srv.base_url`` ends in /v1."""

    def __init__(self, reply: Callable[[str, Any, int], Reply]):
        self.reply = reply
        self.requests: list[tuple[str, Any]] = []
        self.max_in_flight = 0
        self._in_flight = 0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> "FakeOpenAIServer":
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server naming)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = raw
                with outer._lock:
                    outer.requests.append((self.path, body))
                    hit = len(outer.requests)
                    outer._in_flight += 1
                    outer.max_in_flight = max(outer.max_in_flight, outer._in_flight)
                try:
                    rep = outer.reply(self.path, body, hit)
                    if rep.delay:
                        time.sleep(rep.delay)
                    if isinstance(rep.body, (dict, list)):
                        data = json.dumps(rep.body).encode()
                        ctype = "application/json"
                    else:
                        data = rep.body.encode() if isinstance(rep.body, str) else (rep.body or b"")
                        ctype = "text/plain"
                    try:
                        self.send_response(rep.status)
                        headers = {"Content-Type": ctype, **rep.headers}
                        self.send_header("Content-Length", str(len(data)))
                        for k, v in headers.items():
                            self.send_header(k, v)
                        self.end_headers()
                        self.wfile.write(data)
                    except (BrokenPipeError, ConnectionResetError):
                        pass  # the client gave up (timeout tests)
                finally:
                    with outer._lock:
                        outer._in_flight -= 1

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()


def closed_port() -> int:
    """A loopback port with nothing listening (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
