"""A backend for ``eval`` run as a real process that stops in the middle of one question.

``eval --backend _hanging_backend:HangingBackend`` (with ``tests/`` on PYTHONPATH) answers every
question "blue", except that when the answer prompt holds the text in ``$HANG_ON_QUESTION`` it
writes ``$HANG_MARK`` (so the test knows the question has started) and then waits forever: the
test kills the process there with SIGKILL, so the question is started and never finished. A
rerun without ``$HANG_ON_QUESTION`` answers it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from memcompile_local.adapters.scripted import ScriptedBackend


class HangingBackend:
    def __init__(self, model: str = "hanging", **_ignored):
        self.model = model
        self.inner = ScriptedBackend(lambda request: "blue")

    def identity(self) -> dict:
        # Fixed, so that the killed attempt and the rerun are the same run and share the cache.
        return {"backend": "hanging", "model": self.model}

    def generate(self, requests):
        needle = os.environ.get("HANG_ON_QUESTION")
        if needle and any(r.stage == "answer" and needle in r.messages[-1].content for r in requests):
            mark = os.environ.get("HANG_MARK")
            if mark:
                Path(mark).write_text("hanging", encoding="utf-8")
            while True:  # until the test's SIGKILL
                time.sleep(1.0)
        return self.inner.generate(requests)
