"""BLAS threads for the query path's matrix products.

A search multiplies the view's matrices (a few thousand rows of 384 floats) by one query
vector. OpenBLAS splits such a product over all its threads, so each one waits until a
second core is free; on two cores shared with other work that wait was most of a question's
dense scoring (measured on the 2,432-turn BEAM history at load 4-6: compile p50 29-62 ms with
two BLAS threads, 18-21 ms with one). The scores are the same up to the last bit of a float32
cosine (OpenBLAS computes a row by another code path at the edge of a thread's share), as
they already differ between machines with different core counts.

``limit_blas_threads`` applies the limit once per process, when the first view is loaded, and
only where nobody chose otherwise: ``MEMCOMPILE_BLAS_THREADS`` sets the count (0 leaves BLAS
alone), and a process started with ``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS`` or
``MKL_NUM_THREADS`` keeps its setting. It needs threadpoolctl (installed with the dense
extras); without it nothing is changed.
"""

from __future__ import annotations

import os
import threading

from ..errors import ConfigError


ENV = "MEMCOMPILE_BLAS_THREADS"
USER_ENVS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
DEFAULT_THREADS = 1

_lock = threading.Lock()
_applied: list[int | None] = []  # the outcome of the one attempt, once made


def wanted_threads(env: "os._Environ[str] | dict[str, str]" = os.environ) -> int | None:
    """The BLAS thread count to apply under ``env``, or None to leave BLAS as it is."""
    raw = env.get(ENV, "").strip()
    if raw:
        try:
            n = int(raw)
        except ValueError:
            raise ConfigError(f"environment variable {ENV}={raw!r}: expected a whole number of BLAS threads "
                              "(0 leaves BLAS as it is)") from None
        if n < 0:
            raise ConfigError(f"environment variable {ENV}={raw!r}: expected 0 or more BLAS threads")
        return n if n > 0 else None
    if any(env.get(name, "").strip() for name in USER_ENVS):
        return None
    return DEFAULT_THREADS


def limit_blas_threads() -> int | None:
    """Apply ``wanted_threads()`` to the process's BLAS libraries, once; returns the count
    applied (None: left alone). Later calls return the first call's outcome."""
    with _lock:
        if _applied:
            return _applied[0]
        n = wanted_threads()
        if n is not None:
            try:
                from threadpoolctl import threadpool_limits
            except ImportError:
                n = None
            else:
                threadpool_limits(limits=n, user_api="blas")  # stays in force: not used as a context
        _applied.append(n)
        return n
