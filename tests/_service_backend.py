"""A scripted extraction backend for the service tests, loadable by a server subprocess.

The config names it as ``model.backend: "_service_backend:SlowExtractionBackend"`` (with
``tests/`` on ``PYTHONPATH``). It answers the fact prompt with no claims after ``delay_s`` per
request, so a test can hold a background build in progress (the turn is still marked extracted,
which is what the queue tests count); while the file ``down_file`` exists every request fails
as an unreachable server would.
"""

from __future__ import annotations

import json
import os
import time

from memcompile_local.adapters.scripted import ScriptedBackend
from memcompile_local.errors import TransportError


class SlowExtractionBackend(ScriptedBackend):
    def __init__(self, model: str = "slow-extraction", delay_s: float = 0.0, down_file: str | None = None):
        self.delay_s = float(delay_s)
        self.down_file = down_file
        super().__init__(self._reply, model=model)

    def _reply(self, request):
        if self.down_file and os.path.exists(self.down_file):
            raise TransportError("scripted backend is down", retryable=True)
        time.sleep(self.delay_s)
        if request.stage == "fact":
            return json.dumps({"facts": []})
        if request.stage == "answer":
            return "a scripted answer"
        return None
