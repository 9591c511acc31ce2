"""A stand-in for ``vllm serve`` in the GPU recipe's tests: an OpenAI-compatible server on
127.0.0.1 that answers every stage of the pipeline with schema-valid, deterministic output.

Each reply depends only on the request body, so two runs of the same work get the same
answers (and the same token counts), which is what lets a test compare a resumed run with an
uninterrupted one. The server counts every request by a hash of its body, remembers which
ones it finished, the most it served at once, and can hold every request after the first N
finished ones (so a test can kill the client while it waits, with nothing half cached).

In process: ``with FakeVllm(["fake-answer"]) as srv: srv.base_url``. As a program it takes
``vllm serve``'s command line (``python _replicate_fake_vllm.py serve MODEL --port P
--served-model-name NAME ...``; flags it does not know are ignored), so the recipe's own
server start, readiness wait and stop can be exercised with real processes. Environment
variables for that mode: ``FAKE_VLLM_STARTUP_S`` (seconds before the port opens, as a model
load takes), ``FAKE_VLLM_ARGV`` (a file to write the argv to), ``FAKE_VLLM_LOG`` (a JSONL file
getting one line per finished request) and ``FAKE_VLLM_DELAY_S`` (seconds per request).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HEALTH_PROMPT = "Reply with the word OK."


def body_key(body: Any) -> str:
    """A stable name for one request body."""
    return hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:24]


def _seed(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


def _words(text: str) -> list[str]:
    return re.findall(r"[A-Za-z][A-Za-z'-]+", text)


def _last_user(body: dict) -> str:
    for message in reversed(body.get("messages") or []):
        if message.get("role") == "user":
            return str(message.get("content") or "")
    return ""


def _schema_of(body: dict) -> tuple[str | None, dict | None]:
    """(name, schema) of the structured-output constraint, wherever the client put it."""
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        js = fmt.get("json_schema") or {}
        return js.get("name"), js.get("schema")
    if fmt.get("type") == "json_object" and fmt.get("schema"):
        return None, fmt["schema"]
    so = body.get("structured_outputs") or {}
    if so.get("json"):
        return None, so["json"]
    if body.get("guided_json"):
        return None, body["guided_json"]
    return None, None


def _instance(schema: dict, words: list[str], seed: int, path: str = "") -> Any:
    """A value that satisfies ``schema`` (the subset pydantic models emit), varied by ``seed``."""
    if "enum" in schema:
        options = list(schema["enum"])
        return options[seed % len(options)]
    if "anyOf" in schema:
        return _instance(schema["anyOf"][0], words, seed, path)
    kind = schema.get("type")
    if kind == "object":
        out = {}
        for i, (name, sub) in enumerate((schema.get("properties") or {}).items()):
            out[name] = _instance(sub, words, seed + 7 * i, f"{path}.{name}")
        return out
    if kind == "array":
        lo = int(schema.get("minItems", 0))
        hi = int(schema.get("maxItems", max(lo, 2)))
        n = max(lo, min(hi, 1 + seed % 2))
        item = schema.get("items") or {"type": "string"}
        if "enum" in item:  # a ranking: k distinct labels in a seeded order
            labels = list(item["enum"])
            start = seed % len(labels)
            return (labels[start:] + labels[:start])[:n]
        return [_instance(item, words, seed + 13 * i, f"{path}[]") for i in range(n)]
    if kind == "string":
        if not words:
            return "note"
        start = seed % len(words)
        return " ".join(words[start:start + 3])
    if kind == "boolean":
        return bool(seed % 2)
    if kind in ("number", "integer"):
        return 0.5 if kind == "number" else 1
    return None


def reply_text(body: dict) -> str:
    """The message content the fake model answers ``body`` with."""
    user = _last_user(body)
    if user.strip() == HEALTH_PROMPT:
        return "OK"
    seed = _seed(json.dumps(body, sort_keys=True))
    words = _words(user)
    name, schema = _schema_of(body)
    if schema is None:  # free text: the answer stage
        if not words:
            return "Unknown"
        start = seed % len(words)
        return " ".join(words[start:start + 1 + seed % 4])
    props = schema.get("properties") or {}
    if set(props) == {"facts"}:  # fact extraction: one or two sentences cut from the turn
        text = " ".join(words[-24:])
        facts = [text] if text else []
        if seed % 3 == 0 and len(words) > 30:
            facts.append(" ".join(words[-40:-26]))
        return json.dumps({"facts": facts})
    return json.dumps(_instance(schema, words, seed))


def usage_for(body: dict, content: str) -> dict[str, int]:
    """Token counts the fake reports: a function of the request and reply text only."""
    prompt = sum(len(str(m.get("content") or "")) for m in body.get("messages") or []) // 4 + 1
    completion = len(content) // 4 + 1
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


class FakeVllm:
    """The server; ``served`` are the model names it accepts (vLLM's --served-model-name)."""

    def __init__(self, served: list[str], *, port: int = 0, delay_s: float = 0.0, log_path: str | None = None):
        self.served = list(served)
        self.port = port
        self.delay_s = delay_s
        self.log_path = log_path
        self.requests: list[str] = []  # body keys, in arrival order (health probes included)
        self.health_probes = 0
        self.finished: list[str] = []  # body keys whose response was written in full
        self.max_in_flight = 0
        self.in_flight_by_stage: dict[str, int] = {}
        self._in_flight = 0
        self._lock = threading.Lock()
        self._hold_after: int | None = None
        self.release = threading.Event()
        self.holding = threading.Event()  # set once a request is being held
        self._server: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def hold_after(self, n: int) -> None:
        """Hold every request that arrives after ``n`` requests (health probes excluded) finished."""
        self._hold_after = n

    def counted(self) -> list[str]:
        """Keys of the model requests received, health probes left out."""
        with self._lock:
            return list(self.requests)

    def _handle(self, body: Any) -> tuple[int, dict]:
        if not isinstance(body, dict) or "messages" not in body:
            return 400, {"error": {"message": "expected a chat completion body", "type": "BadRequestError"}}
        if body.get("model") not in self.served:
            return 404, {"error": {"message": f"The model `{body.get('model')}` does not exist.",
                                   "type": "NotFoundError"}}
        content = reply_text(body)
        return 200, {"id": "chatcmpl-fake", "object": "chat.completion", "created": 1700000000,
                     "model": body["model"],
                     "choices": [{"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": content}}],
                     "usage": usage_for(body, content)}

    def __enter__(self) -> "FakeVllm":
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, doc: Any) -> None:
                data = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                if self.path.rstrip("/") == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": m, "object": "model", "owned_by": "fake"}
                                                                for m in outer.served]})
                elif self.path == "/health":
                    self._send(200, {})
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:  # noqa: N802
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                key = body_key(body)
                probe = isinstance(body, dict) and _last_user(body).strip() == HEALTH_PROMPT
                stage = _stage_label(body) if isinstance(body, dict) else "bad"
                with outer._lock:
                    if probe:
                        outer.health_probes += 1
                    else:
                        outer.requests.append(key)
                    outer._in_flight += 1
                    outer.max_in_flight = max(outer.max_in_flight, outer._in_flight)
                    outer.in_flight_by_stage[stage] = max(outer.in_flight_by_stage.get(stage, 0),
                                                          outer._in_flight)
                    hold = (not probe and outer._hold_after is not None
                            and len(outer.finished) >= outer._hold_after)
                try:
                    if hold:
                        outer.holding.set()
                        outer.release.wait()
                    if outer.delay_s:
                        time.sleep(outer.delay_s)
                    status, doc = outer._handle(body)
                    try:
                        self._send(status, doc)
                    except (BrokenPipeError, ConnectionResetError):
                        return
                    if not probe and status == 200:
                        with outer._lock:
                            outer.finished.append(key)
                        if outer.log_path:
                            with open(outer.log_path, "a", encoding="utf-8") as fh:
                                fh.write(json.dumps({"key": key, "stage": stage}) + "\n")
                finally:
                    with outer._lock:
                        outer._in_flight -= 1

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release.set()
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()


def _stage_label(body: dict) -> str:
    """A coarse stage name read off a request (for the per-stage in-flight figures)."""
    name, schema = _schema_of(body)
    if schema is None:
        return "text"
    props = set((schema.get("properties") or {}))
    if props == {"facts"}:
        return "fact"
    if "ranked_candidate_ids" in props:
        return "ranking"
    if props in ({"label"}, {"answer"}):
        return "judge"
    if "need_attribute" in props:
        return "intent"
    return name or "json"


def _serve_main(argv: list[str]) -> int:
    """``serve MODEL [--port P] [--host H] [--served-model-name N ...] [anything else]``."""
    if os.environ.get("FAKE_VLLM_ARGV"):
        with open(os.environ["FAKE_VLLM_ARGV"], "a", encoding="utf-8") as fh:
            fh.write(json.dumps(argv) + "\n")
    if not argv or argv[0] != "serve" or len(argv) < 2:
        print("usage: serve MODEL [--port P] [--served-model-name NAME]", file=sys.stderr)
        return 2
    model, rest = argv[1], argv[2:]
    port, served = 8000, None
    for i, arg in enumerate(rest):
        if arg == "--port":
            port = int(rest[i + 1])
        elif arg == "--served-model-name":
            served = rest[i + 1]
    time.sleep(float(os.environ.get("FAKE_VLLM_STARTUP_S", "0")))
    print(f"fake vllm: loading {model}", flush=True)
    with FakeVllm([served or model], port=port, delay_s=float(os.environ.get("FAKE_VLLM_DELAY_S", "0")),
                  log_path=os.environ.get("FAKE_VLLM_LOG")):
        print(f"fake vllm: serving {served or model} on port {port}", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            return 0


if __name__ == "__main__":
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    sys.exit(_serve_main(sys.argv[1:]))
