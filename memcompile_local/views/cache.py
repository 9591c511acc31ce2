"""The view cache: the current ``MemoryView`` of each namespace, checked against the store.

A view is keyed by (namespace, the store's generation of it, the configuration part of its
``BuildSpec``). Any write to the namespace or a forget, in this or another process, moves the
generation, so a view of changed or forgotten data is never served. Only the newest view of a
namespace is kept. The cache also holds the ``ViewLoader`` whose remembered loads make the
next load after an append cheap, and one lock per namespace so that concurrent first loads
load once.

The cache is bounded: by the number of namespaces held and by an estimate of their bytes. When
a new view would go over either bound, the least recently used namespaces leave first (their
view and their remembered load); the next search of one of them loads it from the store again.
A server answering many users therefore holds a working set, not every user it has ever seen.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Iterable

import numpy as np

from ..build.spec import BuildSpec
from ..protocols import Embedder
from ..store.base import Store
from ..types import Descriptor, SourcePacket
from .load import AppendPlan, ViewLoader
from .record import MemoryView
from .threads import limit_blas_threads


DEFAULT_MAX_VIEW_BYTES = 1 << 30
"""The default bound on the estimated bytes of the views one cache holds (1 GiB)."""


def estimate_view_bytes(view: MemoryView, *, grown_from: tuple[MemoryView, int] | None = None) -> int:
    """An estimate of the memory ``view`` holds: its arrays exactly, its texts and records roughly.

    Arrays (packet and context vectors, the fused index's per-packet arrays) are counted by their
    ``nbytes``, once each when shared; every packet and descriptor adds its text length and a
    fixed allowance for the Python objects around it (record, dict entries, lexical postings).
    It is a bound for the cache, not an accounting: it grows with what a view really holds.

    ``grown_from``: (the view ``view`` was appended to in place, that view's estimate); then
    only the appended packets' records are counted (the old ones are the base's), with the same
    result as counting all of them.
    """
    if grown_from is None:
        records = _record_bytes(view.packets, view.descriptors_by_packet.values())
    else:
        base, base_bytes = grown_from
        new = view.packets[len(base.packets):]
        records = base_bytes - _array_bytes(base) + _record_bytes(
            new, (view.descriptors_by_packet.get(p.packet_id, ()) for p in new))
    return _array_bytes(view) + records


def _array_bytes(view: MemoryView) -> int:
    arrays: dict[int, np.ndarray] = {}

    def add(a) -> None:
        if isinstance(a, np.ndarray):
            arrays.setdefault(id(a), a)

    add(view.packet_matrix)
    fusion = view.fusion
    if fusion is not None:
        add(fusion.packet_matrix)
        add(fusion.context_matrix)
        add(fusion.dated)
        for rows in fusion.period_rows.values():
            add(rows)
    return sum(a.nbytes for a in arrays.values())


def _record_bytes(packets: Iterable[SourcePacket], descriptor_groups: Iterable[Iterable[Descriptor]]) -> int:
    total = 0
    for packet in packets:
        total += _PACKET_OVERHEAD + _TEXT_COPIES * (len(packet.content) + len(packet.image_caption or ""))
    for descriptors in descriptor_groups:
        for d in descriptors:
            total += _DESCRIPTOR_OVERHEAD + 2 * len(d.text)
    return total


# Allowances for what is not an array, set from scripts/bench_view_cache.py (resident memory
# per held user against the estimate): a packet's record, its ids in the view's dicts, its
# lexical postings and remembered documents; its text is held about this many times over (the
# packet, its dense and context documents, stemmed tokens); a descriptor's record and postings.
_PACKET_OVERHEAD = 3500
_TEXT_COPIES = 6
_DESCRIPTOR_OVERHEAD = 1200


class ViewCache:
    """Views of one owner's namespaces (a ``Memory``, or the service's base memory). Thread-safe.

    ``max_namespaces`` and ``max_bytes`` bound what is held (None: no bound of that kind);
    ``evictions`` counts the namespaces that left to keep within them.
    """

    def __init__(self, *, max_namespaces: int | None = None, max_bytes: int | None = DEFAULT_MAX_VIEW_BYTES) -> None:
        for name, value in (("max_namespaces", max_namespaces), ("max_bytes", max_bytes)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"ViewCache {name} must be a positive integer or None, got {value!r}")
        self.max_namespaces = max_namespaces
        self.max_bytes = max_bytes
        # namespace -> (key, view, estimated bytes), least recently used first
        self._entries: OrderedDict[str, tuple[tuple, MemoryView, int]] = OrderedDict()
        self._bytes = 0
        self.evictions = 0
        self._lock = threading.RLock()
        # One lock per namespace serialises view loads: concurrent first compiles load it once
        # and get the same object, while other namespaces are not held up.
        self._namespace_locks: dict[str, threading.Lock] = {}
        self.loader = ViewLoader()

    @property
    def held_bytes(self) -> int:
        """The estimated bytes of the views held now."""
        with self._lock:
            return self._bytes

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def _hold(self, key: tuple, view: MemoryView, *, base: MemoryView | None = None) -> None:
        """Hold ``view`` as its namespace's only view, most recently used; evict over the bounds.
        ``base``: the view ``view`` was appended to in place (its estimate, when it is the one
        held, is grown rather than made again over the whole history).

        Caller holds ``self._lock``.
        """
        namespace = key[0]
        old = self._entries.pop(namespace, None)
        if old is not None:
            self._bytes -= old[2]
        grown_from = (base, old[2]) if old is not None and base is not None and old[1] is base else None
        size = estimate_view_bytes(view, grown_from=grown_from)
        self._entries[namespace] = (key, view, size)
        self._bytes += size
        while len(self._entries) > 1 and (
                (self.max_namespaces is not None and len(self._entries) > self.max_namespaces)
                or (self.max_bytes is not None and self._bytes > self.max_bytes)):
            gone, (_k, _v, gone_size) = self._entries.popitem(last=False)
            self._bytes -= gone_size
            self.evictions += 1
            # Its remembered load holds the same view and vectors: it goes too.
            self.loader.drop(gone, keep_shared=True)

    def namespace_lock(self, namespace: str) -> threading.Lock:
        with self._lock:
            return self._namespace_locks.setdefault(namespace, threading.Lock())

    def get(self, key: tuple) -> MemoryView | None:
        """The view held under exactly ``key`` (namespace, generation, *spec.view_key); a hit
        makes the namespace the most recently used."""
        with self._lock:
            entry = self._entries.get(key[0])
            if entry is None or entry[0] != key:
                return None
            self._entries.move_to_end(key[0])
            return entry[1]

    def put(self, key: tuple, view: MemoryView) -> None:
        """Hold ``view`` under ``key`` as its namespace's only view."""
        with self._lock:
            # Only the newest view of a namespace can be current: the older one is replaced so a
            # long-running server that appends all day does not keep every view it built.
            self._hold(key, view)

    def held(self, namespace: str, spec: BuildSpec, *, generation: int | None = None) -> tuple[MemoryView, int] | None:
        """(the view of ``namespace`` held under ``spec``, its generation), or None.

        With ``generation`` only a view of exactly that generation counts; without it, the
        newest one held. Loads nothing.
        """
        config_key = spec.view_key
        with self._lock:
            entry = self._entries.get(namespace)
            if entry is not None:
                key, view, _size = entry
                if key[2:] == config_key and generation in (None, key[1]):
                    return view, key[1]
        return None

    def keys(self) -> list[tuple]:
        with self._lock:
            return [key for key, _view, _size in self._entries.values()]

    def load(self, spec: BuildSpec, store: Store, embedder: Embedder | None, namespace: str) -> tuple[MemoryView, int]:
        """Read built ``namespace`` into a view (``ViewLoader.load``), with the generation read
        before its data; the caller decides whether to ``put`` it."""
        limit_blas_threads()  # searches on this view follow (views/threads.py)
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
            entry = self._entries.get(plan.namespace)
            if entry is not None and entry[0][1] > generation:
                return entry[1]
            self._hold(key, view, base=plan.base)
        return view

    def drop(self, namespace: str) -> None:
        """Forget every view and remembered load of ``namespace`` (a forget, a deleted turn)."""
        with self._lock:
            entry = self._entries.pop(namespace, None)
            if entry is not None:
                self._bytes -= entry[2]
        self.loader.drop(namespace)
