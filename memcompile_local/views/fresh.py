"""The view of a namespace made from what its build just wrote, without reading it back.

A benchmark run builds a namespace and then searches it at once. Loading the view from the
store right after the build reads back every packet, descriptor, Cell and vector the build has
just held in memory. ``view_after_build`` hands the ordinary view loader (``ViewLoader.load``)
a store whose namespace reads are served from the build's ``BuildOutputs`` instead, so the view
is made by the same code as any load and equals one, field by field
(``tests/test_runner_stream.py``).

The build's outputs are used only while the namespace's store generation is the one read right
after the build: any later write (here or in another process) makes every read go to the store.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..build.spec import BuildSpec
from ..build.stages import BuildOutputs
from ..protocols import Embedder
from ..store.base import Store
from ..types import Cell, Descriptor, SourcePacket
from .cache import ViewCache
from .record import MemoryView


class BuiltStore:
    """``store`` with the reads of one namespace answered from a finished build's outputs.

    Only ``packets``, ``descriptors`` (of the build's descriptor set), ``cells`` (of its layout)
    and ``embeddings`` (keys the build held; any other key is read from the store) are served
    from memory, and only while ``store.generation(namespace)`` is ``generation``. Everything
    else, writes included, goes to ``store``.
    """

    def __init__(self, store: Store, outputs: BuildOutputs, generation: int) -> None:
        self._store = store
        self._out = outputs
        self._generation = generation
        self.served = 0  # reads answered from the build's outputs (for tests and the bench)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._store, name)

    def _current(self, namespace: str) -> bool:
        return namespace == self._out.namespace and self._store.generation(namespace) == self._generation

    def packets(self, namespace: str) -> list[SourcePacket]:
        if self._out.packets is not None and self._current(namespace):
            self.served += 1
            return list(self._out.packets)
        return self._store.packets(namespace)

    def descriptors(self, namespace: str, descriptor_set: str) -> list[Descriptor]:
        if (self._out.descriptors is not None and descriptor_set == self._out.descriptor_set
                and self._current(namespace)):
            self.served += 1
            return list(self._out.descriptors)
        return self._store.descriptors(namespace, descriptor_set)

    def cells(self, namespace: str, layout_id: str) -> list[Cell]:
        if self._out.cells is not None and layout_id == self._out.layout_id and self._current(namespace):
            self.served += 1
            return list(self._out.cells)
        return self._store.cells(namespace, layout_id)

    def embeddings(self, namespace: str, model_id: str, keys: Sequence[str]) -> dict[str, np.ndarray]:
        held = self._out.vectors.get(model_id)
        if not held or not self._current(namespace):
            return self._store.embeddings(namespace, model_id, keys)
        out = {k: held[k] for k in keys if k in held}
        rest = [k for k in keys if k not in out]
        if rest:
            out.update(self._store.embeddings(namespace, model_id, rest))
        self.served += 1
        return out


def view_after_build(views: ViewCache, spec: BuildSpec, store: Store, embedder: Embedder | None,
                     outputs: BuildOutputs) -> tuple[MemoryView, int]:
    """Make ``outputs.namespace``'s view from a finished build's outputs and hold it in ``views``
    under the generation read now (so the next search of the namespace finds it); returns
    (the view, that generation). The caller has just run the build and nothing else writes the
    namespace meanwhile (else the reads simply go to the store)."""
    namespace = outputs.namespace
    generation = store.generation(namespace)
    view, loaded_at = views.load(spec, BuiltStore(store, outputs, generation), embedder, namespace)
    views.put((namespace, loaded_at, *spec.view_key), view)
    return view, loaded_at
