"""The query-time view the service searches while a background build is still behind.

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
from ..build import dense_plan, embed_contexts, embed_packets, layout_id, load_context_matrix, load_packet_matrix
from ..errors import ConfigError
from ..fused import FusionIndex
from ..memory import Memory
from ..pipeline import MemoryView


def pending_turns(mem: Memory, namespace: str) -> int:
    """Stored turns of ``namespace`` not yet extracted under ``mem``'s descriptor set."""
    dset = mem.extractor().descriptor_set
    return max(0, mem.store.packet_count(namespace) - len(mem.store.extracted_packet_ids(namespace, dset)))


class PendingViews:
    """Views over built + not-yet-extracted turns, one cached per namespace and generation."""

    def __init__(self, mem: Memory):
        self.mem = mem
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[int, MemoryView]] = {}

    def view(self, namespace: str) -> MemoryView:
        mem, store = self.mem, self.mem.store
        generation = store.generation(namespace)
        with self._lock:
            hit = self._cache.get(namespace)
            if hit is not None and hit[0] == generation:
                return hit[1]
        dset = mem.extractor().descriptor_set
        lid = layout_id(dset, mem.config.placement)
        packets = store.packets(namespace)
        if not packets:
            raise ConfigError(f"namespace {namespace!r} has no turns in {store.path}")
        embedder = mem.embedder
        dense = dense_plan(mem.config, mem.uses_context_embeddings())  # what the build embeds
        if embedder is not None:
            embed_packets(store, namespace, dset, embedder, document=dense.document)
            if dense.context == "embedded":
                embed_contexts(store, namespace, embedder, packets=packets)
        generation = store.generation(namespace)
        packets = store.packets(namespace)
        descriptors = store.descriptors(namespace, dset)
        flat = mem.config.placement.layout == "flat"
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
        if mem.uses_fusion():
            context = (load_context_matrix(store, namespace, embedder, packets,
                                           composed_from=matrix if dense.context == "composed" else None)
                       if dense.context != "none" else None)
            fusion = FusionIndex.build(packets, {k: tuple(v) for k, v in by_packet.items()}, mem.config.fusion,
                                       packet_matrix=matrix, context_matrix=context)
        index = AddressIndex.build(packets, descriptors, cells, matrix, layout=mem.config.placement.layout,
                                   placement=mem.config.placement, routing=mem.config.routing)
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


def current_view(mem: Memory, pending: PendingViews, namespace: str, *, allow_build: bool) -> tuple[MemoryView, int]:
    """(view, turns not yet extracted): ``mem.view`` when nothing waits or building is cheap,
    else the built-so-far view."""
    for attempt in range(3):
        generation = mem.store.generation(namespace)
        behind = pending_turns(mem, namespace)
        try:
            if behind == 0 or allow_build:
                return mem.view(namespace), 0
            return pending.view(namespace), behind
        except RuntimeError:
            # A view load reads several tables one after another; a build committing in between
            # (another thread or process) can leave it an embedding short. Load again then.
            if attempt == 2 or mem.store.generation(namespace) == generation:
                raise
    raise AssertionError("unreachable")
