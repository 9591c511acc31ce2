"""The view cache: the current ``MemoryView`` of each namespace, checked against the store.

A view is keyed by (namespace, the store's generation of it, the configuration part of its
``BuildSpec``). Any write to the namespace or a forget, in this or another process, moves the
generation, so a view of changed or forgotten data is never served. Only the newest view of a
namespace is kept. The cache also holds the ``ViewLoader`` whose remembered loads make the
next load after an append cheap, and one lock per namespace so that concurrent first loads
load once.
"""

from __future__ import annotations

import threading

from ..build.spec import BuildSpec
from ..protocols import Embedder
from ..store.base import Store
from .load import AppendPlan, ViewLoader
from .record import MemoryView


class ViewCache:
    """Views of one owner's namespaces (a ``Memory``, or the service's base memory). Thread-safe."""

    def __init__(self) -> None:
        self._views: dict[tuple, MemoryView] = {}
        self._lock = threading.RLock()
        # One lock per namespace serialises view loads: concurrent first compiles load it once
        # and get the same object, while other namespaces are not held up.
        self._namespace_locks: dict[str, threading.Lock] = {}
        self.loader = ViewLoader()

    def namespace_lock(self, namespace: str) -> threading.Lock:
        with self._lock:
            return self._namespace_locks.setdefault(namespace, threading.Lock())

    def get(self, key: tuple) -> MemoryView | None:
        """The view held under exactly ``key`` (namespace, generation, *spec.view_key)."""
        with self._lock:
            return self._views.get(key)

    def put(self, key: tuple, view: MemoryView) -> None:
        """Hold ``view`` under ``key`` as its namespace's only view."""
        with self._lock:
            # Only the newest view of a namespace can be current: drop the older ones so a
            # long-running server that appends all day does not keep every view it built.
            self._views = {k: v for k, v in self._views.items() if k[0] != key[0]}
            self._views[key] = view

    def held(self, namespace: str, spec: BuildSpec, *, generation: int | None = None) -> tuple[MemoryView, int] | None:
        """(the view of ``namespace`` held under ``spec``, its generation), or None.

        With ``generation`` only a view of exactly that generation counts; without it, the
        newest one held. Loads nothing.
        """
        config_key = spec.view_key
        with self._lock:
            for key, view in self._views.items():
                if key[0] == namespace and key[2:] == config_key and generation in (None, key[1]):
                    return view, key[1]
        return None

    def keys(self) -> list[tuple]:
        with self._lock:
            return list(self._views)

    def load(self, spec: BuildSpec, store: Store, embedder: Embedder | None, namespace: str) -> tuple[MemoryView, int]:
        """Read built ``namespace`` into a view (``ViewLoader.load``), with the generation read
        before its data; the caller decides whether to ``put`` it."""
        return self.loader.load(spec, store, embedder, namespace)

    def adopt(self, spec: BuildSpec, store: Store, plan: AppendPlan, generation: int) -> MemoryView | None:
        """Make a planned append's view the held view of its namespace at ``generation`` (None,
        and nothing held, when the namespace was forgotten or reloaded since the plan).

        The caller has written everything the plan describes and read ``generation`` after its
        last write, knowing that nobody else wrote the namespace since ``plan.base`` was
        current. A newer view already held is kept (and returned) instead.
        """
        view = self.loader.adopt(spec, store, plan, generation)
        if view is None:  # forgotten or reloaded meanwhile: the next search loads from the store
            return None
        key = (plan.namespace, generation, *spec.view_key)
        with self._lock:
            held = [k for k in self._views if k[0] == plan.namespace]
            if any(k[1] > generation for k in held):
                return self._views[max(held, key=lambda k: k[1])]
            self._views = {k: v for k, v in self._views.items() if k[0] != plan.namespace}
            self._views[key] = view
        return view

    def drop(self, namespace: str) -> None:
        """Forget every view and remembered load of ``namespace`` (a forget, a deleted turn)."""
        with self._lock:
            self._views = {k: v for k, v in self._views.items() if k[0] != namespace}
        self.loader.drop(namespace)
