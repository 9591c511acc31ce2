"""Concurrent write jobs of one process run in one store transaction: one commit, one fsync.

The store commits with ``synchronous=FULL``: every commit waits for an fsync, and SQLite commits one transaction at a time. Appends of different users that
arrive together would each wait for every earlier one's commit. ``GroupCommit.run`` queues a
job; the first caller to get the commit turn runs every queued job inside one
``Store.transaction()``, each under its own ``Store.savepoint()``, and commits once.

A job that raises is rolled back to its savepoint alone (the others still commit) and its
caller gets the exception; when the commit itself fails, every job of the batch fails and
nothing of it is stored. Jobs of one batch must not write the same namespace (the service
holds each user's view lock around its append, and ``InPlaceAppend`` checks the namespace's
generation inside the job, so a second job of a namespace is declined).
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from .base import Store


class _Job:
    __slots__ = ("fn", "result", "error", "done")

    def __init__(self, fn: Callable[[], Any]):
        self.fn = fn
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = False


class GroupCommit:
    """Batches the write jobs of concurrent threads into shared transactions of ``store``."""

    def __init__(self, store: Store):
        self.store = store
        self._queue_lock = threading.Lock()
        self._turn = threading.Lock()  # held by the thread running a batch
        self._pending: list[_Job] = []
        self.batches = 0  # transactions committed (figures and tests)
        self.jobs = 0  # jobs that ran in them

    def run(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` (store writes) inside a transaction shared with concurrent jobs; return
        its result once the transaction has committed, or raise what ``fn`` or the commit raised."""
        job = _Job(fn)
        with self._queue_lock:
            self._pending.append(job)
        with self._turn:
            if not job.done:  # not run by the batch before ours: run every job queued now
                with self._queue_lock:
                    batch, self._pending = self._pending, []
                self._run(batch)
        if job.error is not None:
            raise job.error
        return job.result

    def _run(self, batch: list[_Job]) -> None:
        store = self.store
        try:
            with store.transaction():
                for job in batch:
                    try:
                        with store.savepoint():
                            job.result = job.fn()
                    except Exception as exc:  # this job's writes only are undone
                        job.error = exc
            self.batches += 1
            self.jobs += len(batch)
        except BaseException as exc:  # the transaction rolled back: nothing of the batch is stored
            for job in batch:
                if job.error is None:
                    job.result, job.error = None, exc
            if not isinstance(exc, Exception):
                raise
        finally:
            for job in batch:
                job.done = True
