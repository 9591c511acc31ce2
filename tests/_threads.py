"""Running a piece of test code on several threads at once.

:func:`run_threads` is what the concurrency tests share: start ``n`` threads, each calling
``work(i)``, wait for all of them, and hand back what they raised so that the test's own
thread can assert on it (an exception on another thread would otherwise only be printed).
"""

from __future__ import annotations

import threading
from typing import Callable


def run_threads(work: Callable[[int], object], n: int, *, timeout_s: float = 60.0) -> list[BaseException]:
    """Call ``work(0)`` .. ``work(n - 1)`` on ``n`` threads started together; returns the
    exceptions they raised (empty when none did). A thread still running after ``timeout_s``
    fails the test: a hang is a failure, not a wait."""
    errors: list[BaseException] = []
    lock = threading.Lock()

    def call(i: int) -> None:
        try:
            work(i)
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s)
    alive = [t.name for t in threads if t.is_alive()]
    assert not alive, f"threads still running after {timeout_s}s: {alive}"
    return errors
