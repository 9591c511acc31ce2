"""An append under the rule (model-free) extractor, applied to the loaded view in place.

Every write moves the namespace's store generation, and a search that finds a new generation
loads a new view: about a hundred milliseconds for a LoCoMo-sized memory, on the one Python
thread that also serves every other search. When this process holds a current view of the
namespace, an append knows everything the next view holds: the old view plus the new turns.
``InPlaceAppend.add`` then

1. builds the new packets as the store will number them, extracts their descriptors and
   plans the extended view (``Memory.plan_append``: new dense rows, the changed neighbour
   context row, new stemmed tokens, BM25 counts grown, new dates and terms) before it
   writes anything, embedding the new documents outside any lock;
2. under the namespace's build lease, writes the turns, their descriptors, their Cells
   (``build.place_cells`` with the namespace's descriptors handed in, so nothing is re-read)
   and the vectors, reading back only the new packets by key;
3. adopts the planned view under the generation read after its last write, but only when
   no other connection committed to the file meanwhile (SQLite's ``PRAGMA data_version``
   changes exactly then) and the namespace was still at the base view's generation when the
   writes began. Otherwise (another server process or a CLI wrote) the writes stand and the
   next search loads the view from the store, so no process serves a stale view.

A step that fails before the turns are stored leaves the old view serving and the caller takes
the plain path (``MemoryService.build_now``), which reports the error as before.
"""

from __future__ import annotations

import logging
from typing import Callable

from ..build import extract_descriptors, layout_id, place_cells
from ..memory import Memory
from ..store import IngestResult, MemoryStore
from ..types import Conversation, SourcePacket, content_sha256

log = logging.getLogger(__name__)


def data_version(store: MemoryStore) -> int:
    """SQLite's ``PRAGMA data_version`` of the store's connection: it changes when another
    connection (another process) commits to the file, never for this connection's commits."""
    return int(store._query("PRAGMA data_version")[0][0])


class InPlaceAppend:
    """Appends of one process's ``Memory`` (rule extractor) that extend its cached views.

    ``acquire``/``release``: the namespace's build lease (``MemoryService``), taken around the
    writes so no build of the namespace in this or another process interleaves with them.
    The caller serializes appends and view loads of one namespace (the service's view lock).
    """

    def __init__(self, memory: Memory, acquire: Callable[[str], bool], release: Callable[[str], None]):
        self.memory = memory
        self.store = memory.store
        self._acquire = acquire
        self._release = release
        self.in_place = 0  # appends whose view was adopted (for tests and the metrics)
        self.reloads = 0  # appends written here whose view must be loaded from the store

    def add(self, namespace: str, conversation: Conversation) -> IngestResult | None:
        """Store ``conversation``'s turns and make them searchable; None when this path does not
        apply (no current view held, a turn id the view already has, the lease was busy), so
        the caller stores them the plain way. Raises what ``MemoryStore.ingest`` raises."""
        mem, store = self.memory, self.store
        held = mem.cached_view(namespace)
        if held is None:
            return None
        base, base_generation = held
        turns = list(conversation.iter_turns())
        ids = [t.packet_id for _, t in turns]
        if not turns or len(set(ids)) != len(ids) or any(pid in base.packets_by_id for pid in ids):
            return None  # a retry or a changed text: the store decides (skip, or 409)
        last = base.packets[-1]
        packets = [
            SourcePacket(namespace=namespace, packet_id=t.packet_id, ordinal=last.ordinal + 1 + i,
                         session_index=s.index, session_id=s.session_id, session_time=s.time, speaker=t.speaker,
                         content=t.text, image_caption=t.image_caption,
                         sha256=content_sha256(t.text, t.image_caption), image_query=t.image_query)
            for i, (s, t) in enumerate(turns)
        ]
        extractor = mem.extractor()
        try:
            # Each turn is extracted with the turn before it, as extract_descriptors pairs them.
            results = extractor.extract([(p, packets[i - 1] if i else last) for i, p in enumerate(packets)])
            found = {p.packet_id: sorted(ds, key=lambda d: (d.claim_index, d.descriptor_id))
                     for p, ds in zip(packets, results)}
            plan = mem.plan_append(namespace, base, packets, found)
        except Exception as exc:  # nothing is written yet: the plain path builds and reports it
            log.debug("append in place of %s not planned: %s", namespace, exc)
            return None
        if plan is None or not self._acquire(namespace):
            return None
        cfg = mem.config
        dset = extractor.descriptor_set
        try:
            before = data_version(store)
            if store.generation(namespace) != base_generation:
                return None  # written since the view was loaded: the plain path reloads
            result = store.ingest(conversation)
            try:
                stored = [store.get_packet(namespace, p.packet_id) for p in packets]
                if result.added != len(packets) or stored != packets:
                    self._build_plain(namespace)
                    return result
                store.save_extractions(namespace, dset, [(p.packet_id, found[p.packet_id]) for p in packets])
                descriptors = [d for p in plan.packets for d in plan.descriptors_by_packet.get(p.packet_id, ())]
                place_cells(store, namespace, dset, cfg.placement, descriptors=descriptors)
                for model_id, keys, vectors, content, space in plan.saves:
                    store.save_embeddings(namespace, model_id, keys, vectors, content=content, space=space)
                cells = store.cells(namespace, layout_id(dset, cfg.placement)) if cfg.placement.layout != "flat" else []
                generation = store.generation(namespace)
                alone = data_version(store) == before
            except Exception:
                # The turns are stored (the caller acknowledges them); build the rest the plain
                # way, whose errors reach the caller as a build failure would.
                log.warning("append in place of %s failed after the turns were stored; building", namespace,
                            exc_info=True)
                self._build_plain(namespace)
                return result
        finally:
            self._release(namespace)
        if alone:
            mem.adopt_append(plan, cells, generation)
            self.in_place += 1
        else:
            self.reloads += 1
        return result

    def _build_plain(self, namespace: str) -> None:
        """Extract and place what is missing, as ``MemoryService.build_now`` does (lease held)."""
        self.reloads += 1
        mem = self.memory
        extractor = mem.extractor()
        extract_descriptors(self.store, namespace, extractor, on_failure=mem.config.extraction.on_failure)
        place_cells(self.store, namespace, extractor.descriptor_set, mem.config.placement)
