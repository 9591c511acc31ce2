"""The background build worker: drains the durable build queue of one store in a daemon thread.

Each server process runs one. A worker claims a namespace (a lease in the store, so two
processes never build the same memory at once), runs ``Memory.build`` on it, and removes the
entry only when no turn was appended meanwhile. A failed build stays queued with exponential
backoff; a model backend that cannot be reached marks the service's backend as down until a
build succeeds again. On start it re-enqueues every tenant memory whose stored turns are not all
extracted, so a process killed between an ingest and its enqueue loses nothing.
"""

from __future__ import annotations

import logging
import threading
import time

from ..errors import TransportError
from .auth import NAMESPACE_PREFIX
from .core import MemoryService, owner_alive
from ..views.pending import pending_turns

log = logging.getLogger(__name__)


class BuildWorker:
    """Drain ``service.queue`` until :meth:`stop`; ``poll_s`` is the idle wait between looks."""

    def __init__(self, service: MemoryService, *, poll_s: float = 0.2, lease_s: float = 30.0,
                 max_backoff_s: float = 60.0, metrics=None):
        self.service = service
        self.poll_s = poll_s
        self.lease_s = lease_s
        self.max_backoff_s = max_backoff_s
        self.metrics = metrics
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.builds = 0

    def reconcile(self) -> int:
        """Enqueue the tenant memories that have unextracted turns but no queue entry."""
        svc = self.service
        behind = []
        for ns in svc.store.namespaces():
            if ns.startswith(NAMESPACE_PREFIX):
                n = pending_turns(svc.store, svc.memory.extractor().descriptor_set, ns)
                if n:
                    behind.append((ns, n))
        added = svc.queue.reconcile(behind)
        if added:
            log.info("build queue: re-enqueued %d memories with unextracted turns", added)
        return added

    def reap(self) -> int:
        """Release the build leases of server processes on this machine that are no longer running."""
        return self.service.queue.reap(owner_alive)

    def start(self) -> None:
        self.reap()
        self.reconcile()
        self._thread = threading.Thread(target=self._run, name="memcompile-build-worker", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        last_reap = time.monotonic()
        while not self._stop.is_set():
            try:
                if time.monotonic() - last_reap > self.lease_s / 3:
                    self.reap()
                    last_reap = time.monotonic()
                worked = self.run_once()
            except Exception:  # keep draining: one bad entry must not stop the worker
                log.exception("build worker: unexpected error")
                worked = False
            if not worked:
                self._stop.wait(self.poll_s)

    def run_once(self) -> bool:
        """Claim and build one entry; False when nothing was due."""
        svc = self.service
        job = svc.queue.claim(svc.owner, lease_s=self.lease_s)
        if job is None:
            return False
        renew = threading.Event()
        keeper = threading.Thread(target=self._keep_lease, args=(job.namespace, renew), daemon=True)
        keeper.start()
        error: BaseException | None = None
        try:
            svc.memory.build(job.namespace)
        except Exception as exc:
            error = exc
        finally:
            # Stop renewing before the entry is completed or failed, which releases the lease.
            renew.set()
            keeper.join()
        if error is None:
            svc.backend_down_since = None
            svc.queue.complete(job, svc.owner)
            svc.schedule_warm(job.namespace)  # the next search uses the freshly built memory
            self.builds += 1
            if self.metrics is not None:
                self.metrics.builds.labels("ok").inc()
        elif isinstance(error, TransportError):
            svc.backend_down_since = svc.backend_down_since or time.time()
            self._failed(job, f"backend unavailable: {error}")
        else:
            log.warning("build of %s failed: %s", job.namespace, error)
            self._failed(job, f"{type(error).__name__}: {error}")
        return True

    def _failed(self, job, error: str) -> None:
        backoff = min(self.max_backoff_s, 0.5 * 2 ** min(job.attempts, 10))
        self.service.queue.fail(job, self.service.owner, error, retry_in_s=backoff)
        if self.metrics is not None:
            self.metrics.builds.labels("error").inc()

    def _keep_lease(self, namespace: str, done: threading.Event) -> None:
        # A long LLM build outlives one lease; renew it while the build runs.
        while not done.wait(self.lease_s / 3):
            try:
                self.service.queue.acquire(namespace, self.service.owner, lease_s=self.lease_s)
            except Exception:
                log.exception("build worker: could not renew the lease of %s", namespace)
