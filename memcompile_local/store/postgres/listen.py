"""Hearing other servers' writes at once: a thread that LISTENs for the store's generation
NOTIFYs and hands each ``(namespace, generation)`` to a callback.

The generation check on every compile stays what makes a cached view safe; this only lets a
server drop a view of a namespace another server changed or forgot without waiting for the
next request to find out. A lost connection is re-opened with a growing pause; notifications
sent while it was down are missed, which costs nothing but that early drop.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

from .url import redact_url, require_driver

logger = logging.getLogger(__name__)


class GenerationListener:
    """LISTEN on ``channel`` of the database at ``url`` in a daemon thread (``start``/``stop``)."""

    def __init__(self, url: str, on_change: Callable[[str, int], None], *, channel: str,
                 skip_writer: str | None = None):
        self._psycopg, _ = require_driver()
        self.url, self.channel, self.on_change = url, channel, on_change
        self.skip_writer = skip_writer  # a writer token whose announcements are not handed on
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memcompile-store-listener", daemon=True)
        self.connected = threading.Event()  # set while LISTEN is active (tests wait on it)
        self.received = 0

    def start(self) -> "GenerationListener":
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 2.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        pause = 0.2
        while not self._stop.is_set():
            try:
                with self._psycopg.connect(self.url, autocommit=True, connect_timeout=5) as conn:
                    conn.execute(f"LISTEN {self.channel}")
                    self.connected.set()
                    pause = 0.2
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=0.5):
                            self._deliver(note.payload)
            except Exception as exc:  # the server went away: listen again when it is back
                self.connected.clear()
                if self._stop.is_set():
                    return
                logger.info("%s: store listener lost its connection (%s); retrying in %.1f s",
                            redact_url(self.url), type(exc).__name__, pause)
                self._stop.wait(pause)
                pause = min(pause * 2, 5.0)
        self.connected.clear()

    def _deliver(self, payload: str) -> None:
        """Hand on one ``"<generation> <namespace> <writer>"`` payload."""
        parts = payload.split(" ")
        try:
            value = int(parts[0])
        except ValueError:
            return
        namespace = parts[1] if len(parts) > 1 else ""
        self.received += 1
        if self.skip_writer is not None and len(parts) > 2 and parts[2] == self.skip_writer:
            return
        try:
            self.on_change(namespace, value)
        except Exception:  # a callback's failure must not end the listening
            logger.exception("store change callback failed for %s", namespace)
