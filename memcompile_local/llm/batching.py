"""Micro-batching for in-process backends (vLLM, transformers).

Benchmark questions run in threads; each thread's stage calls are small batches. An
in-process engine is fastest when it sees many requests at once, so this wrapper gathers the
``generate`` calls that arrive from several threads within a short window and hands them to
the backend as one batch, then gives each caller its own responses back.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field
from typing import Any, Sequence

from .interface import LLMRequest, LLMResponse


@dataclass
class _Job:
    requests: list[LLMRequest]
    done: threading.Event = field(default_factory=threading.Event)
    result: list[LLMResponse] | None = None
    error: BaseException | None = None


class MicroBatcher:
    """Wraps a backend; concurrent ``generate`` calls are merged into one backend call.

    ``max_batch`` bounds the merged batch; ``max_wait_s`` is how long the first waiting call
    may be held for others to join. The backend itself is only ever called from one worker
    thread, which also suits engines that are not thread safe.
    """

    def __init__(self, backend: Any, *, max_batch: int = 256, max_wait_s: float = 0.02):
        self.backend = backend
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self._queue: "queue.Queue[_Job]" = queue.Queue()
        self._worker = threading.Thread(target=self._loop, name="micro-batcher", daemon=True)
        self._worker.start()
        self.batches = 0  # how many merged calls reached the backend (for tests and figures)

    def identity(self) -> dict[str, Any]:
        return self.backend.identity()

    def generate(self, requests: Sequence[LLMRequest]) -> list[LLMResponse]:
        job = _Job(list(requests))
        if not job.requests:
            return []
        self._queue.put(job)
        job.done.wait()
        if job.error is not None:
            raise job.error
        assert job.result is not None
        return job.result

    def _loop(self) -> None:
        while True:
            first = self._queue.get()
            jobs = [first]
            size = len(first.requests)
            try:
                while size < self.max_batch:
                    nxt = self._queue.get(timeout=self.max_wait_s)
                    jobs.append(nxt)
                    size += len(nxt.requests)
            except queue.Empty:
                pass
            merged = [r for j in jobs for r in j.requests]
            try:
                out = list(self.backend.generate(merged))
                if len(out) != len(merged):
                    raise RuntimeError(f"backend returned {len(out)} responses for {len(merged)} requests")
                pos = 0
                for j in jobs:
                    j.result = out[pos : pos + len(j.requests)]
                    pos += len(j.requests)
            except BaseException as exc:  # every waiting caller gets the failure
                for j in jobs:
                    j.error = exc
            finally:
                self.batches += 1
                for j in jobs:
                    j.done.set()
