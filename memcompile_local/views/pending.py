"""The partial view the service searches while a background build is still behind.

``Memory.view`` builds whatever is missing before it returns, which under an LLM extractor means
model calls inside a search request. The service instead searches what is built so far plus the
raw turns the background worker has not extracted yet: every packet is in the view (so BM25 and
the dense channel see the new text at once), descriptors and Cells are the ones already stored,
and a pending turn's packet document (its text alone, no claims yet) is embedded in the request.
The embeddings are keyed by document hash, so the worker's later build embeds the full document
next to them instead of overwriting anything.

The view is cached per (namespace, store generation), so it is rebuilt exactly when anything of
the namespace changed in any process.
"""

from __future__ import annotations

import threading

from ..address.index import AddressIndex
from ..build.spec import BuildSpec
from ..build.stages import (embed_contexts, embed_packets, embed_raw_turns, load_context_matrix, load_packet_matrix,
                            load_raw_matrix)
from ..errors import ConfigError
from ..fused.index import FusionIndex
from ..protocols import Embedder
from ..store.base import Store
from .record import MemoryView


def pending_turns(store: Store, descriptor_set: str, namespace: str) -> int:
    """Stored turns of ``namespace`` not yet extracted under ``descriptor_set``."""
    return max(0, store.packet_count(namespace) - len(store.extracted_packet_ids(namespace, descriptor_set)))


class PartialViews:
    """Views over built + not-yet-extracted turns, one held per namespace and generation.

    One instance serves one configuration (``spec``) over one store.
    """

    def __init__(self, store: Store, spec: BuildSpec, embedder: Embedder | None):
        self.store = store
        self.spec = spec
        self.embedder = embedder
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[int, MemoryView]] = {}

    def view(self, namespace: str) -> MemoryView:
        store, spec, cfg = self.store, self.spec, self.spec.config
        generation = store.generation(namespace)
        with self._lock:
            hit = self._cache.get(namespace)
            if hit is not None and hit[0] == generation:
                return hit[1]
        dset, lid = spec.descriptor_set, spec.layout_id
        packets = store.packets(namespace)
        if not packets:
            raise ConfigError(f"namespace {namespace!r} has no turns in {store.path}")
        embedder = self.embedder
        dense = spec.dense  # what the build embeds
        if embedder is not None:
            embed_packets(store, namespace, dset, embedder, document=dense.document)
            if dense.context == "embedded":
                embed_contexts(store, namespace, embedder, packets=packets, window=dense.context_window_words)
            if dense.raw_turns:
                embed_raw_turns(store, namespace, embedder, window=dense.raw_window_words, packets=packets)
        generation = store.generation(namespace)
        packets = store.packets(namespace)
        descriptors = store.descriptors(namespace, dset)
        flat = cfg.placement.layout == "flat"
        cells = [] if flat else store.cells(namespace, lid)
        placed = {d for c in cells for d in c.descriptor_ids}
        # Descriptors the worker saved but has not placed yet stay out of the Cell index until
        # it places them (they still reach the reader through their packet).
        if not flat:
            descriptors = [d for d in descriptors if d.descriptor_id in placed]
        matrix = (load_packet_matrix(store, namespace, dset, embedder, document=dense.document)
                  if embedder is not None else None)
        by_packet: dict[str, list] = {}
        for d in descriptors:
            by_packet.setdefault(d.packet_id, []).append(d)
        fusion = None
        if spec.fusion:
            context = (load_context_matrix(store, namespace, embedder, packets,
                                           composed_from=matrix if dense.context == "composed" else None,
                                           window=dense.context_window_words)
                       if dense.context != "none" else None)
            raw = (load_raw_matrix(store, namespace, embedder, packets, window=dense.raw_window_words)
                   if embedder is not None and dense.raw_turns else None)
            fusion = FusionIndex.build(packets, {k: tuple(v) for k, v in by_packet.items()}, cfg.fusion,
                                       packet_matrix=matrix, context_matrix=context, raw_matrix=raw)
        index = AddressIndex.build(packets, descriptors, cells, matrix, layout=cfg.placement.layout,
                                   placement=cfg.placement, routing=cfg.routing)
        view = MemoryView(
            namespace=namespace,
            packets=tuple(packets),
            packets_by_id={p.packet_id: p for p in packets},
            descriptors_by_packet={k: tuple(v) for k, v in by_packet.items()},
            index=index,
            packet_matrix=matrix,
            row_of={p.packet_id: i for i, p in enumerate(packets)},
            fusion=fusion,
        )
        with self._lock:
            self._cache[namespace] = (generation, view)
        return view

    def forget(self, namespace: str) -> None:
        with self._lock:
            self._cache.pop(namespace, None)
