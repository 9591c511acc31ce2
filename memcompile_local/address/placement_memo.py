"""The placement state each store's namespaces last reached, for the next incremental placement.

Restoring Algorithm 2's state from stored Cells means looking up and re-counting every
placed descriptor, which dominated the cost of making one appended turn searchable. The
state a build leaves behind is kept here instead, with the Cells it produced; the next build
of the same (store, namespace, layout) reuses it only when the store still holds exactly
those Cells, so a write by anyone else (another process, a deleted turn, a forget) makes it
restore from the store as before. Descriptors are never rewritten under an id they already
had while their Cells survive (a deleted turn drops the namespace's Cells), so equal Cells
mean an equal state.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Any, Sequence

from ..types import Cell
from .cells import PlacementState


class PlacementMemo:
    """At most ``max_entries`` (namespace, layout) states per store, least recently used out.

    ``take`` hands a state to one caller and forgets it, so two builds of one namespace at once
    never place into the same state; ``keep`` stores the state a caller finished with.
    Thread-safe.
    """

    def __init__(self, max_entries: int = 64) -> None:
        self._lock = threading.Lock()
        self._max = max_entries
        self._by_store: "weakref.WeakKeyDictionary[Any, OrderedDict]" = weakref.WeakKeyDictionary()

    def take(self, store: Any, namespace: str, layout_id: str, stored: Sequence[Cell]) -> PlacementState | None:
        """The remembered state when its Cells equal ``stored`` (the store's Cells now), else None."""
        with self._lock:
            entries = self._by_store.get(store)
            entry = entries.pop((namespace, layout_id), None) if entries is not None else None
        if entry is None:
            return None
        cells, state = entry
        return state if list(cells) == list(stored) else None

    def keep(self, store: Any, namespace: str, layout_id: str, cells: Sequence[Cell], state: PlacementState) -> None:
        """Remember ``state``, whose Cells (as saved to ``store``) are ``cells``."""
        with self._lock:
            entries = self._by_store.setdefault(store, OrderedDict())
            entries[(namespace, layout_id)] = (tuple(cells), state)
            entries.move_to_end((namespace, layout_id))
            while len(entries) > self._max:
                entries.popitem(last=False)

    def clear(self) -> None:
        """Forget every state (tests use it to force a restore from the store)."""
        with self._lock:
            self._by_store = weakref.WeakKeyDictionary()
