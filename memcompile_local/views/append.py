"""An append under the rule (model-free) extractor, applied to the loaded view in place.

Every write moves the namespace's store generation, and a search that finds a new generation
loads a new view: work proportional to the memory, on the one Python thread that also serves
every other search. When this process holds a current view of the
namespace, an append knows everything the next view holds: the old view plus the new turns.
``InPlaceAppend.add`` then

1. builds the new packets as the store will number them, extracts their descriptors and
   plans the extended view (``ViewLoader.plan_append``: new dense rows, the changed neighbour
   context row, new stemmed tokens, BM25 counts grown, new dates and terms) before it
   writes anything, embedding the new documents outside any lock;
2. in one store transaction (``Store.transaction``: one commit, and no other process
   can commit while it runs; appends of other namespaces arriving meanwhile share it, see
   ``store/group_commit.py``) checks that the namespace is still at the held view's
   generation and that no other process holds its build lease, then writes the turns, their
   descriptors, their Cells (placed incrementally from ``build.stages.PLACEMENTS``; the Cells the
   last append stored are known, so nothing is re-read) and the vectors, reading back only
   the new packets by key;
3. adopts the planned view under the generation read inside that transaction (its Cells are
   read only if a trace or an LLM path builds its AddressIndex, ``ViewLoader.adopt``).

A held view that another process's writes made stale is first caught up with them
(``views/catchup.py``) when the store's change log explains them. When the check fails
(another server process or a CLI wrote since the view was loaded or caught up, or is
building) or anything in the transaction raises, nothing of it is stored, the held view keeps
serving, and the caller stores the turns the plain way (``Memory.add``, then the service's
``build_now`` or the next view load), which reports a lasting error as before.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

from ..build.spec import BuildSpec
from ..address.cells import PlacementState
from ..build.stages import PLACEMENTS, place_cells
from ..errors import DataFormatError
from ..protocols import DescriptorExtractor, Embedder
from ..store.base import IngestResult, Store
from ..store.group_commit import GroupCommit
from ..types import Cell, Conversation, Descriptor, SourcePacket, canonical_metadata_json, content_sha256
from .cache import ViewCache
from .catchup import catch_up

log = logging.getLogger(__name__)


class InPlaceAppend:
    """Appends under one ``BuildSpec`` (rule extractor) that extend the views held in one
    ``ViewCache``: descriptors by ``extractor``, vectors by ``embedder``.

    ``lease_free(namespace)``: whether no other process holds the namespace's build lease (the
    service passes its build queue's check; None: no check, as ``Memory.build`` takes none).
    Asked inside the append's transaction, where the answer cannot change before it commits.
    Appends of one namespace may run at once: all but one find the generation moved and are
    declined.
    """

    def __init__(self, store: Store, views: ViewCache, spec: BuildSpec, extractor: DescriptorExtractor,
                 embedder: Embedder | None, lease_free: Callable[[str], bool] | None = None):
        self.store = store
        self.views = views
        self.spec = spec
        self.extractor = extractor
        self.embedder = embedder
        self.lease_free = lease_free
        self.commits = GroupCommit(self.store)
        # The Cells each namespace's last append in place stored, with the generation it left
        # and the ordinal of the last turn they hold.
        self._cells: dict[str, tuple[int, list[Cell], int]] = {}
        self._cells_lock = threading.Lock()
        self.in_place = 0  # appends whose view was adopted (tests and figures read these)
        self.built_in_place = 0  # stored turns another process left unbuilt, built in place (build_stored)
        self.declined = 0  # appends left to the plain path after a plan was made

    def add(self, namespace: str, conversation: Conversation) -> IngestResult | None:
        """Store ``conversation``'s turns and make them searchable in the held view; None when
        this path does not apply or failed (no current view held, a turn id the view already has, another
        writer since the view was loaded, a write error), with nothing stored: the caller then
        stores the turns the plain way."""
        store, spec, extractor = self.store, self.spec, self.extractor
        held = self.views.held(namespace, spec)
        if held is None:
            return None
        base, base_generation = held
        if store.generation(namespace) != base_generation:
            # Another process wrote since: grow the held view by what it appended first (the
            # store's change log says what that was), then append to the current view.
            caught = catch_up(self.views, spec, store, self.embedder, namespace, build=self.build_stored)
            if caught is None:
                return None
            base, base_generation = caught
        turns = list(conversation.iter_turns())
        ids = [t.packet_id for _, t in turns]
        if not turns or len(set(ids)) != len(ids) or any(pid in base.packets_by_id for pid in ids):
            return None  # a retry or a changed text: the store decides (skip, or 409)
        try:
            metadata = [canonical_metadata_json(t.metadata_json) for _, t in turns]
        except ValueError:
            return None  # the store names the bad turn in its typed error
        last = base.packets[-1]
        packets = [
            SourcePacket(namespace=namespace, packet_id=t.packet_id, ordinal=last.ordinal + 1 + i,
                         session_index=s.index, session_id=s.session_id, session_time=s.time, speaker=t.speaker,
                         content=t.text, image_caption=t.image_caption,
                         sha256=content_sha256(t.text, t.image_caption), image_query=t.image_query,
                         agent_id=t.agent_id, metadata_json=metadata[i])
            for i, (s, t) in enumerate(turns)
        ]
        try:
            # Each turn is extracted with the turn before it, as extract_descriptors pairs them.
            results = extractor.extract([(p, packets[i - 1] if i else last) for i, p in enumerate(packets)])
            found = {p.packet_id: sorted(ds, key=lambda d: (d.claim_index, d.descriptor_id))
                     for p, ds in zip(packets, results)}
            plan = self.views.loader.plan_append(spec, store, self.embedder, namespace, base, packets, found)
        except Exception as exc:  # nothing is written yet: the plain path builds and reports it
            log.debug("append in place of %s not planned: %s", namespace, exc)
            return None
        if plan is None:
            return None
        return self._commit(namespace, base_generation, plan, packets, found, conversation)

    def build_stored(self, namespace: str) -> bool:
        """Build in place the turns another process stored after the held view without
        building them (a CLI ``ingest``, a ``Memory.add`` without a view): extract them, place
        their claims and embed them as an append in place would, in one transaction, and adopt
        the grown view. False when this does not apply (no view held, turns already built or
        partly built, anything else in the store's change log since the view) or failed; the
        caller then builds the plain way."""
        store, spec, extractor = self.store, self.spec, self.extractor
        held = self.views.held(namespace, spec)
        if held is None or not held[0].packets:
            return False
        base, base_generation = held
        last = base.packets[-1]
        got = store.changes_since(namespace, base_generation, after_ordinal=last.ordinal,
                                  descriptor_set=spec.descriptor_set)
        if got is None or not got.packets or got.extracted:
            return False
        appended: set[int] = set()
        for step in got.steps:
            if step.kind == "append" and step.first_ordinal is not None and step.last_ordinal is not None:
                appended.update(range(step.first_ordinal, step.last_ordinal + 1))
            elif step.kind not in ("meta", "embed", "capsules"):
                return False
        packets = list(got.packets)
        if {p.ordinal for p in packets} != appended or min(appended) <= last.ordinal:
            return False
        try:
            results = extractor.extract([(p, packets[i - 1] if i else last) for i, p in enumerate(packets)])
            found = {p.packet_id: sorted(ds, key=lambda d: (d.claim_index, d.descriptor_id))
                     for p, ds in zip(packets, results)}
            plan = self.views.loader.plan_append(spec, store, self.embedder, namespace, base, packets, found)
        except Exception as exc:  # nothing is written yet: the plain build reports it
            log.debug("build in place of %s not planned: %s", namespace, exc)
            return False
        return plan is not None and self._commit(namespace, got.generation, plan, packets, found, None) is not None

    def _commit(self, namespace: str, base_generation: int, plan, packets: list[SourcePacket],
                found: dict[str, list[Descriptor]], conversation: Conversation | None) -> IngestResult | None:
        """Write what ``plan`` extends the view with, in one transaction that first checks the
        namespace is still at ``base_generation`` with no other build holding it: the turns of
        ``conversation`` (None: they are stored already), their claims ``found``, their Cells and
        vectors; then adopt the planned view. None when declined or rolled back."""
        store, spec = self.store, self.spec
        dset = spec.descriptor_set

        def write() -> tuple[IngestResult, int, list[Cell] | None]:
            lease_taken = self.lease_free is not None and not self.lease_free(namespace)
            if store.generation(namespace) != base_generation or lease_taken:
                raise _Declined("written or being built elsewhere since the view was loaded")
            known = self._known_cells(namespace, base_generation)  # before this append writes
            if conversation is not None:
                result = store.ingest(conversation)
                stored = [store.get_packet(namespace, p.packet_id) for p in packets]
                if result.added != len(packets) or stored != packets:
                    raise _Declined("the store numbered the turns otherwise")
            else:
                result = IngestResult(namespace, 0, 0)
            store.save_extractions(namespace, dset, [(p.packet_id, found[p.packet_id]) for p in packets])
            cells = self._place(namespace, known, plan, [d for p in packets for d in found[p.packet_id]])
            for model_id, keys, vectors, content, space in plan.saves:
                store.save_embeddings(namespace, model_id, keys, vectors, content=content, space=space)
            return result, store.generation(namespace), cells

        try:
            # In one transaction (shared with the appends of other users arriving meanwhile).
            result, generation, cells = self.commits.run(write)
        except _Declined as why:
            log.debug("append in place of %s declined: %s", namespace, why)
            self.declined += 1
            return None
        except Exception:  # rolled back: nothing of it is stored, the held view is still current
            log.warning("append in place of %s failed and was rolled back; storing it the plain way", namespace,
                        exc_info=True)
            self.declined += 1
            return None
        with self._cells_lock:
            if cells is not None:
                self._cells[namespace] = (generation, cells, packets[-1].ordinal)
            else:
                self._cells.pop(namespace, None)
        if self.views.adopt(spec, store, plan, generation) is not None:
            if conversation is not None:
                self.in_place += 1
            else:
                self.built_in_place += 1
        return result

    def _known_cells(self, namespace: str, base_generation: int) -> list[Cell] | None:
        """The bounded layout's Cells stored at ``base_generation`` when this process knows
        them without reading them all (inside the append's transaction, before its writes).

        Known when this process's last append in place stored them at that generation; when
        other processes appended since (the held view was caught up with them), the Cells are
        placed forward from those with the descriptors the store's change log says came since,
        and checked against the Cells the log says they wrote (``_advance``)."""
        if self.spec.config.placement.layout != "bounded":
            return None
        with self._cells_lock:
            known = self._cells.get(namespace)
        if known is None:
            return None
        generation, cells, last = known
        if generation == base_generation:
            return cells
        return self._advance(namespace, generation, cells, last, base_generation)

    def _advance(self, namespace: str, generation: int, cells: list[Cell], last: int,
                 base_generation: int) -> list[Cell] | None:
        """The Cells at ``base_generation``, from ``cells`` (stored at ``generation``, holding the
        turns up to ordinal ``last``): the descriptors appended since are placed into the
        remembered placement state, and the result is compared with what the change log says
        was written since: every Cell it changes must be among the Cells written, and each
        written Cell must equal the stored one. None when anything does not hold (the
        plain placement then reads the stored Cells)."""
        store, spec = self.store, self.spec
        lid, dset = spec.layout_id, spec.descriptor_set
        got = store.changes_since(namespace, generation, after_ordinal=last, descriptor_set=dset, layout_id=lid)
        if got is None or got.generation != base_generation or got.cell_ids is None:
            return None
        for step in got.steps:
            if step.kind == "delete" or (step.kind == "extract" and step.detail == dset
                                         and (step.first_ordinal is None or step.first_ordinal <= last)):
                return None
        state = PLACEMENTS.take(store, namespace, lid, cells)
        if state is None or not _placed(state, list(got.descriptors)):
            return None
        expected = state.cells()
        old = {c.cell_id: c for c in cells}
        new = {c.cell_id: c for c in expected}
        # A Cell nothing was placed in is the same object in both (PlacementState keeps its
        # frozen Cells): ``is`` spares comparing tens of thousands of them field by field.
        changed = {cid for cid in old.keys() | new.keys()
                   if old.get(cid) is not new.get(cid) and old.get(cid) != new.get(cid)}
        stored = {c.cell_id: c for c in got.cells}
        if not changed <= got.cell_ids or any(stored.get(cid) != new.get(cid) for cid in got.cell_ids):
            log.debug("the Cells of %s placed forward differ from the stored ones; reading them", namespace)
            return None
        PLACEMENTS.keep(store, namespace, lid, expected, state)
        return expected

    def _place(self, namespace: str, known: list[Cell] | None, plan, new: list[Descriptor]) -> list[Cell] | None:
        """Place the appended descriptors (inside the append's transaction); returns the Cells
        now stored when known without reading them, else None.

        The bounded layout places incrementally from ``build.stages.PLACEMENTS``' state. That state is
        checked against the stored Cells before use: ``known``, the Cells stored at the base
        view's generation (``_known_cells``; the transaction found the namespace still at it),
        so the check needs no read of them. Otherwise ``build.stages.place_cells`` reads and places.
        """
        store, spec = self.store, self.spec
        cfg, dset = spec.config, spec.descriptor_set
        if cfg.placement.layout == "bounded" and known is not None:
            lid = spec.layout_id
            state = PLACEMENTS.take(store, namespace, lid, known)
            if state is not None and _placed(state, new):
                cells = state.cells()
                if cells != known:  # an unchanged layout is not written again
                    # ``known`` is what is stored (the transaction found its generation), so
                    # only the Cells this append moved are written.
                    store.save_cells(namespace, lid, cells, stored=known)
                PLACEMENTS.keep(store, namespace, lid, cells, state)
                return cells
        descriptors = [d for p in plan.packets for d in plan.descriptors_by_packet.get(p.packet_id, ())]
        if cfg.placement.layout == "bounded":
            cells = self._place_read(namespace, descriptors)
            if cells is not None:
                return cells
        place_cells(store, namespace, dset, cfg.placement, descriptors=descriptors)
        if cfg.placement.layout != "bounded":
            return None
        return store.cells(namespace, spec.layout_id)

    def _place_read(self, namespace: str, descriptors: list[Descriptor]) -> list[Cell] | None:
        """The bounded placement of ``descriptors`` (the view's, in store order) after the
        stored Cells, read now, as ``build.stages.place_cells`` places them; the write names
        only the Cells it changes (``save_cells(stored=...)``), so the change log tells other
        processes which Cells to check when they place forward (``_advance``). None when the
        stored Cells hold a descriptor this view lacks or the unplaced ones are not a suffix:
        ``place_cells`` then reads the namespace's descriptors and decides."""
        store, spec = self.store, self.spec
        lid = spec.layout_id
        existing = store.cells(namespace, lid)
        order = {d.descriptor_id: i for i, d in enumerate(descriptors)}
        placed = {x for c in existing for x in c.descriptor_ids}
        if any(x not in order for x in placed):
            return None
        unplaced = [d for d in descriptors if d.descriptor_id not in placed]
        if placed and unplaced and order[unplaced[0].descriptor_id] < max(order[x] for x in placed):
            return None
        state = PLACEMENTS.take(store, namespace, lid, existing)
        if state is None:
            state = PlacementState(spec.config.placement, existing, {d.descriptor_id: d for d in descriptors})
        state.place(unplaced)
        cells = state.cells()
        if cells != existing:
            store.save_cells(namespace, lid, cells, stored=existing)
        PLACEMENTS.keep(store, namespace, lid, cells, state)
        return cells

    def forget(self, namespace: str) -> None:
        """Drop what is remembered of ``namespace`` (its Cells hold its people and keywords)."""
        with self._cells_lock:
            self._cells.pop(namespace, None)


def _placed(state: PlacementState, descriptors: list[Descriptor]) -> bool:
    """Place ``descriptors`` into ``state``; False when one of them was placed already (then
    the state is half changed, and the caller lets it go)."""
    try:
        state.place(descriptors)
    except DataFormatError:
        return False
    return True


class _Declined(Exception):
    """An append in place found the store changed under its plan (rolled back, nothing stored)."""
