"""Loading a namespace's ``MemoryView``, reusing the work of its previous load.

Every write to a namespace changes its store generation, so the next search loads a new view.
After an append most of that view is the same as before: the same packets with the same
documents. ``ViewLoader.load`` reads the store once (packets, descriptors, Cells), computes
each document's text once, and takes from the previous load of the namespace whatever is
keyed by a text that did not change:

- dense rows, keyed by the store's embedding key (packet id + hash of the document text)
  under the embedding model id; only new keys are embedded (if missing) and read;
- the fused selector's stemmed lexical tokens, keyed by the lexical document text;
- per-packet dates and expansion terms, keyed by what they are computed from.

The BM25 statistics are rebuilt from the token lists on every load (they depend on every
document). The ``AddressIndex`` (Cell routing and descriptor BM25) is built on first use
only (``LazyAddressIndex``): the fused, model-free path never reads it unless a trace, the
representative-claim view or an LLM selector asks for it.

Nothing is reused by position or by generation: a key names the exact text a result was
computed from, so a view loaded this way equals one built from scratch. The generation the
caller keys the view on is read before the data of the final pass.

``ViewLoader.plan_append`` and ``adopt`` go one step further for a process that writes the
append itself (``views/append.py``): the new view is derived from the last one and the new
packets, without reading the namespace, with the BM25 counts grown in place
(``address/lexical_growth.py``). It equals a load from scratch field by field, BM25 scores up to float64
rounding (``tests/test_view_load.py``).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..address.cells import PlacementState
from ..address.dense import dense_document
from ..address.index import AddressIndex
from ..address.layouts import build_layout
# Helpers of build/stages.py: the store's embedding key format and its "embed what is
# missing" step must be exactly the build's, so they are shared rather than copied.
from ..build.spec import BuildSpec
from ..build.stages import (_embed_missing, _keyed, composed_contexts, context_document_keys, context_model_id,
                            embedding_model_id, is_unread_key, raw_document_keys, raw_model_id, text_address)
from ..config import FusionConfig
from ..fused.features import grow_turn_table
from ..fused.index import (FusionIndex, FusionParts, add_packet_rows, grown_entity_rows, grown_participants,
                           lexical_texts)
from ..language.stemming import stem_terms
from ..address.lexical_growth import GrowingLexicalIndex
from ..protocols import Embedder
from ..store.base import Store
from ..types import Cell, Descriptor, SourcePacket
from .record import MemoryView

log = logging.getLogger(__name__)


class LazyAddressIndex:
    """An ``AddressIndex`` built by ``make()`` on the first attribute read, once.

    Stands in for the index in a ``MemoryView``: every attribute is the built index's. The
    build runs under this object's lock, so concurrent first reads build it once and all see
    the same index.
    """

    def __init__(self, make: Callable[[], AddressIndex]):
        self._make: Callable[[], AddressIndex] | None = make
        self._index: AddressIndex | None = None
        self._lock = threading.Lock()

    @property
    def built(self) -> bool:
        """Whether the index has been built (by an attribute read or ``get``)."""
        return self._index is not None

    def get(self) -> AddressIndex:
        """The built index (built now on the first call)."""
        index = self._index
        if index is not None:
            return index
        with self._lock:
            if self._index is None:
                assert self._make is not None
                self._index = self._make()
                self._make = None  # drop the closure over the load's lists once built
            return self._index

    def __getattr__(self, name: str) -> Any:
        # Only called for names not set in __init__; private names are never the index's
        # (and copy/pickle probe them before __init__ has run).
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.get(), name)


@dataclasses.dataclass(frozen=True)
class _Rows:
    """One embedding kind of one load: store key -> row of ``matrix``."""

    row_of: Mapping[str, int]
    matrix: np.ndarray


@dataclasses.dataclass(frozen=True)
class _Memo:
    """What one load of a namespace computed, keyed by what each part was computed from.

    Never mutated after the load that made it, so concurrent loads may read it freely.
    """

    identity: tuple
    rows: Mapping[str, _Rows]  # embedding model id -> rows
    fusion: FusionParts  # the fused index's per-text results (stemmed documents, periods, terms)
    documents: Mapping[tuple, str]  # (packet, its descriptors) -> packet document z(p)
    # What an append in place (``plan_append``) extends: the view this memo made, the
    # generation it is keyed on, and its packets' lexical documents (None until computed).
    view: MemoryView | None = None
    generation: int | None = None
    lexical_docs: tuple[str, ...] | None = None


_EMPTY = _Memo((), {}, FusionParts(), {})


def _packet_documents(packets: Sequence[SourcePacket], by_packet: Mapping[str, Sequence[Descriptor]],
                      old: Mapping[tuple, str], kind: str = "packet") -> tuple[list[str], dict[tuple, str]]:
    """The dense document (``kind``, default z(p)) of each packet, taken from ``old`` when the
    packet and its descriptors are equal to a remembered one's; returns (documents, the memo
    for the next load). The memo is only reused under one configuration (the load identity)."""
    memo: dict[tuple, str] = {}
    docs = []
    for p in packets:
        key = (p, tuple(by_packet.get(p.packet_id, ())))
        doc = old.get(key)
        if doc is None:
            doc = dense_document(p, key[1], kind)
        memo[key] = doc
        docs.append(doc)
    return docs, memo


def _matrix(store: Store, namespace: str, model_id: str, embedder: Embedder, keys: list[str], docs: list[str],
            old: _Rows | None, what: str) -> tuple[_Rows, int]:
    """(rows for ``keys`` in order, how many texts were embedded now).

    Rows of keys the previous load had are copied from it; the other keys are embedded when the
    store lacks them (``build.stages._embed_missing``, content-addressed) and then read from the store.
    An unread key (``build.stages.unread_key``) is a zero row, embedded and read never.
    """
    old_row = old.row_of if old is not None else {}
    new = [(k, d) for k, d in zip(keys, docs) if k not in old_row and not is_unread_key(k)]
    embedded = 0
    got: dict[str, np.ndarray] = {}
    if new:
        new_keys = [k for k, _ in new]
        embedded = _embed_missing(store, namespace, model_id, embedder, new_keys, [d for _, d in new],
                                  batch_size=256, on_progress=None)
        got = store.embeddings(namespace, model_id, new_keys)
        missing = [k for k in new_keys if k not in got]
        if missing:
            raise RuntimeError(f"{len(missing)} {what} embeddings missing in {namespace!r}; run the build first")
    dim = old.matrix.shape[1] if old is not None and old.matrix.ndim == 2 and old.matrix.shape[0] else (
        len(next(iter(got.values()))) if got else embedder.dim)
    matrix = np.empty((len(keys), dim), dtype=np.float32)
    at_old = [(i, old_row[k]) for i, k in enumerate(keys) if k in old_row]
    if at_old:
        to, frm = zip(*at_old)
        matrix[list(to)] = old.matrix[list(frm)]  # type: ignore[union-attr]
    for i, k in enumerate(keys):
        if k not in old_row:
            matrix[i] = 0.0 if is_unread_key(k) else np.asarray(got[k], dtype=np.float32)
    return _Rows({k: i for i, k in enumerate(keys)}, matrix), embedded


class ViewLoader:
    """Loads MemoryViews for one view cache (``views.cache.ViewCache``), remembering each
    namespace's last load.

    Thread-safe: the remembered parts of a namespace are replaced whole after a load and
    never changed in place, so loads of one namespace running at once each read a complete
    earlier load.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._memos: dict[str, _Memo] = {}
        # The fused index's per-text results of the last load under each configuration, for the
        # first load of another namespace: LongMemEval haystacks share most sessions, and the
        # results are keyed by the exact text they were computed from (build/stages.py).
        self._shared_parts: dict[tuple, FusionParts] = {}

    def drop(self, namespace: str, *, keep_shared: bool = False) -> None:
        """Forget what was remembered of ``namespace``. After a forget or a deleted turn the
        shared per-text results go too, since they may hold its text; ``keep_shared`` keeps
        them (a view cache letting the namespace go for space: its text is still stored)."""
        with self._lock:
            self._memos.pop(namespace, None)
            if not keep_shared:
                self._shared_parts.clear()

    def remembered(self, namespace: str) -> bool:
        """Whether a previous load of ``namespace`` is remembered."""
        with self._lock:
            return namespace in self._memos

    def load(self, spec: BuildSpec, store: Store, embedder: Embedder | None,
             namespace: str) -> tuple[MemoryView, int]:
        """(the view of built ``namespace`` under ``spec``, the generation read before its
        data). Embeds any document not embedded yet; raises RuntimeError when an embedding is
        missing after that (a concurrent write; the caller may load again)."""
        cfg, dset, lid, dense = spec.config, spec.descriptor_set, spec.layout_id, spec.dense
        use_fusion, use_context, identity = spec.fusion, spec.context_vectors, spec.identity
        with self._lock:
            memo = self._memos.get(namespace, _EMPTY)
        if memo.identity != identity:
            memo = _EMPTY
        rows = dict(memo.rows)
        documents: Mapping[tuple, str] = memo.documents
        # Two passes at most. The view is keyed on the generation read before its data. A pass
        # that embedded (or linked) a vector wrote to the store, which moved the generation, as
        # does any other writer meanwhile: then the data are read once more, so the view's key
        # is current (the next search finds it) and never newer than its data.
        for attempt in range(2):
            generation = store.generation(namespace)
            packets = store.packets(namespace)
            descriptors = store.descriptors(namespace, dset)
            cells = store.cells(namespace, lid) if cfg.placement.layout != "flat" else []
            by_packet: dict[str, list[Descriptor]] = {}
            for d in descriptors:
                by_packet.setdefault(d.packet_id, []).append(d)
            embedded = 0
            matrix = context = raw = None
            if embedder is not None:
                model_id = embedding_model_id(embedder)
                pdocs, documents = _packet_documents(packets, by_packet, documents, dense.document)
                keys, docs = _keyed(packets, pdocs)
                rows[model_id], n = _matrix(store, namespace, model_id, embedder, keys, docs,
                                            rows.get(model_id), "packet")
                embedded += n
                matrix = rows[model_id].matrix
                if dense.context == "composed":  # summed from the packet rows, nothing embedded
                    context = composed_contexts(packets, matrix)
                elif use_context:
                    cid = context_model_id(embedder)
                    ckeys, cdocs = context_document_keys(None, namespace, packets, window=dense.context_window_words)
                    rows[cid], n = _matrix(store, namespace, cid, embedder, ckeys, cdocs, rows.get(cid), "context")
                    embedded += n
                    context = rows[cid].matrix
                if dense.raw_turns:  # each turn's plain text (the learned ranker's raw_cos columns)
                    rid = raw_model_id(embedder)
                    rkeys, rdocs = raw_document_keys(packets, dense.raw_window_words)
                    rows[rid], n = _matrix(store, namespace, rid, embedder, rkeys, rdocs, rows.get(rid), "plain turn")
                    embedded += n
                    raw = rows[rid].matrix
            if not embedded and store.generation(namespace) == generation:
                break
        descriptors_by_packet = {k: tuple(v) for k, v in by_packet.items()}
        fusion, parts = None, FusionParts()
        if use_fusion:
            donor = memo
            if not memo.fusion.tokens:  # a first load: take the texts another namespace's load computed
                with self._lock:
                    shared = self._shared_parts.get(identity)
                if shared is not None:
                    donor = dataclasses.replace(memo, fusion=shared)
            fusion, parts = FusionIndex.build_reusing(packets, descriptors_by_packet, cfg.fusion,
                                                      packet_matrix=matrix, context_matrix=context,
                                                      previous=donor.fusion, raw_matrix=raw)
        flat = cfg.placement.layout == "flat"
        index = LazyAddressIndex(lambda: AddressIndex.build(
            packets, descriptors, [] if flat else cells, matrix, layout=cfg.placement.layout,
            placement=cfg.placement, routing=cfg.routing))
        view = MemoryView(
            namespace=namespace,
            packets=tuple(packets),
            packets_by_id={p.packet_id: p for p in packets},
            descriptors_by_packet=descriptors_by_packet,
            index=index,  # type: ignore[arg-type]  # stands in for the AddressIndex, built on first use
            packet_matrix=matrix,
            row_of={p.packet_id: i for i, p in enumerate(packets)},
            fusion=fusion,
        )
        # The memo holds this load's rows and texts only (one view's worth), not every old one.
        with self._lock:
            self._memos[namespace] = _Memo(identity, rows, parts, documents, view, generation)
            if use_fusion:
                self._shared_parts[identity] = parts
        return view, generation

    # ------------------------------------------------------------------ appends in place
    def plan_append(self, spec: BuildSpec, store: Store, embedder: Embedder | None, namespace: str,
                    base: MemoryView, packets: Sequence[SourcePacket],
                    descriptors: Mapping[str, Sequence[Descriptor]]) -> "AppendPlan | None":
        """The view ``base`` becomes when ``packets`` (with their ``descriptors``, by packet id)
        are appended, made without reading the namespace from the store.

        ``base`` must be the view this loader made last for ``namespace`` (else None: the caller
        reloads). Nothing is written: the plan carries the vectors the store must get
        (``AppendPlan.saves``); after the caller wrote the packets, descriptors, Cells and those
        vectors, ``adopt`` makes the view current. The dense rows of documents whose text did not
        change, the stemmed tokens and the BM25 counts of unchanged documents are reused; the
        rest is computed as a load from scratch computes it (``tests/test_view_load.py``).
        """
        cfg, dense = spec.config, spec.dense
        use_fusion, use_context, identity = spec.fusion, spec.context_vectors, spec.identity
        with self._lock:
            memo = self._memos.get(namespace)
        if memo is None or memo.view is not base or memo.identity != identity or not packets:
            return None
        old = list(base.packets)
        n_old = len(old)
        if n_old and packets[0].ordinal <= old[-1].ordinal:
            return None
        allp = old + list(packets)
        by_packet = dict(base.descriptors_by_packet)
        for p in packets:
            if descriptors.get(p.packet_id):
                by_packet[p.packet_id] = tuple(descriptors[p.packet_id])
        rows = dict(memo.rows)
        documents = dict(memo.documents)
        saves: list[tuple[str, list[str], np.ndarray, list[str], str]] = []
        matrix = context = raw = None
        if embedder is not None:
            model_id = embedding_model_id(embedder)
            new_docs, memo_docs = _packet_documents(packets, by_packet, {}, dense.document)
            documents.update(memo_docs)
            keys, docs = _keyed(packets, new_docs)
            embed_context = dense.context != "composed" and use_context
            changed: dict[int, tuple[str, str]] = {}
            ckeys: list[str] = []
            cdocs: list[str] = []
            if embed_context:
                cid = context_model_id(embedder)
                # A context document quotes the turns before and after it in its session: of
                # the old packets only the last one's can change.
                start, near = max(0, n_old - 1), max(0, n_old - 2)
                ckeys, cdocs = context_document_keys(None, namespace, allp[near:], window=dense.context_window_words)
                ckeys, cdocs = ckeys[start - near:], cdocs[start - near:]
                old_ckeys = list(rows[cid].row_of) if cid in rows else []
                if len(old_ckeys) != n_old:
                    return None
                changed = {start + j: (k, d) for j, (k, d) in enumerate(zip(ckeys, cdocs))
                           if start + j < n_old and k != old_ckeys[start + j]}
                ckeys, cdocs = ckeys[n_old - start:], cdocs[n_old - start:]
            # A plain turn reads its own turn only: the old turns' rows stay as they are.
            rkeys: list[str] = []
            rdocs: list[str] = []
            if dense.raw_turns:
                rid = raw_model_id(embedder)
                if rid not in rows or len(rows[rid].row_of) != n_old:
                    return None
                rkeys, rdocs = raw_document_keys(packets, dense.raw_window_words)
            # Every new text of all kinds in one embed call (a model's per-call cost is most of it).
            vectors_of = _vectors_for(store, embedder, [*docs, *(d for _, d in changed.values()), *cdocs, *rdocs])
            rows[model_id], save = _grown_rows(vectors_of, embedder, model_id, rows.get(model_id), n_old, {},
                                               keys, docs)
            saves.extend(save)
            matrix = rows[model_id].matrix
            if dense.context == "composed":  # summed from the packet rows, nothing embedded
                context = composed_contexts(allp, matrix)
            elif embed_context:
                rows[cid], save = _grown_rows(vectors_of, embedder, cid, rows[cid], n_old, changed, ckeys, cdocs)
                saves.extend(save)
                context = rows[cid].matrix
            if dense.raw_turns:
                rows[rid], save = _grown_rows(vectors_of, embedder, rid, rows[rid], n_old, {}, rkeys, rdocs)
                saves.extend(save)
                raw = rows[rid].matrix
        parts, fusion, lexical_docs = memo.fusion, None, memo.lexical_docs
        if use_fusion:
            grown = _grown_fusion(base.fusion, memo, allp, n_old, by_packet, cfg.fusion,
                                  packet_matrix=matrix, context_matrix=context, raw_matrix=raw)
            if grown is None:
                fusion, parts = FusionIndex.build_reusing(allp, by_packet, cfg.fusion, packet_matrix=matrix,
                                                          context_matrix=context, previous=memo.fusion,
                                                          raw_matrix=raw)
                lexical_docs = None
            else:
                fusion, parts, lexical_docs = grown
        return AppendPlan(namespace=namespace, base=base, saves=tuple(saves), packets=tuple(allp),
                          descriptors_by_packet=by_packet, packet_matrix=matrix, fusion=fusion,
                          memo=_Memo(identity, rows, parts, documents, None, None, lexical_docs))

    def adopt(self, spec: BuildSpec, store: Store, plan: "AppendPlan", generation: int) -> MemoryView | None:
        """The planned view, remembered as this loader's last load of the namespace at
        ``generation`` (the generation the append's transaction wrote); None when the loader's
        memory of the namespace moved on since the plan (nothing is kept then).

        Its Cells are read when the AddressIndex is first used (a trace, an LLM path; the
        fused path never asks): the stored Cells while the namespace is still at
        ``generation``, else the placement of the view's descriptors from scratch, which is
        what the stored Cells were (``build.stages.place_cells``: an incremental placement equals
        one of the whole sequence).
        """
        cfg = spec.config
        namespace = plan.namespace
        packets = list(plan.packets)
        by_packet = plan.descriptors_by_packet
        matrix = plan.packet_matrix

        def address_index() -> AddressIndex:
            # Listing every descriptor waits for the first use too: it is O(history) per append.
            descriptors = [d for p in packets for d in by_packet.get(p.packet_id, ())]
            return AddressIndex.build(packets, descriptors, _cells_at(spec, store, namespace, generation, descriptors),
                                      matrix, layout=cfg.placement.layout, placement=cfg.placement,
                                      routing=cfg.routing)

        # The closure names only what the index is built from, never the plan: the plan holds
        # the view it extends, so capturing it would chain every earlier view to the newest one.
        index = LazyAddressIndex(address_index)
        n_old = len(plan.base.packets)
        # Both maps are the base's with the appended packets added: copies, not rebuilds.
        packets_by_id = dict(plan.base.packets_by_id)
        packets_by_id.update((p.packet_id, p) for p in packets[n_old:])
        row_of = dict(plan.base.row_of)
        row_of.update((p.packet_id, n_old + i) for i, p in enumerate(packets[n_old:]))
        view = MemoryView(
            namespace=plan.namespace,
            packets=plan.packets,
            packets_by_id=packets_by_id,
            descriptors_by_packet=plan.descriptors_by_packet,
            index=index,  # type: ignore[arg-type]
            packet_matrix=matrix,
            row_of=row_of,
            fusion=plan.fusion,
        )
        with self._lock:
            if self._memos.get(plan.namespace, _EMPTY).view is not plan.base:
                # Dropped (a forget or a deleted turn) or loaded anew meanwhile: the plan is stale,
                # and keeping it would hold text the store no longer has.
                return None
            self._memos[plan.namespace] = dataclasses.replace(plan.memo, view=view, generation=generation)
        return view


def _cells_at(spec: BuildSpec, store: Store, namespace: str, generation: int,
              descriptors: Sequence[Descriptor]) -> list[Cell]:
    """The Cells of ``namespace`` at ``generation`` under ``spec``'s placement (see ``adopt``)."""
    placement = spec.config.placement
    if placement.layout == "flat":
        return []
    lid = spec.layout_id
    with store.transaction():  # generation and Cells read in one snapshot
        if store.generation(namespace) == generation:
            return store.cells(namespace, lid)
    if placement.layout != "bounded":
        return build_layout(placement.layout, descriptors, placement)
    state = PlacementState(placement, [], {d.descriptor_id: d for d in descriptors})
    state.place(list(descriptors))
    return state.cells()


@dataclasses.dataclass(frozen=True)
class AppendPlan:
    """A view extended by appended packets, before the store has them (``ViewLoader.plan_append``).

    ``saves``: (model id, keys, float32 vectors, content addresses, vector space) the store must
    hold for the view to equal a load (``MemoryStore.save_embeddings`` with ``content``/``space``).
    """

    namespace: str
    base: MemoryView
    saves: tuple[tuple[str, list[str], np.ndarray, list[str], str], ...]
    packets: tuple[SourcePacket, ...]
    descriptors_by_packet: Mapping[str, tuple[Descriptor, ...]]
    packet_matrix: np.ndarray | None
    fusion: FusionIndex | None
    memo: _Memo


def _vectors_for(store: Store, embedder: Embedder, docs: Sequence[str]) -> dict[str, np.ndarray]:
    """Content address -> float32 vector of each of ``docs``: taken from the store when a key
    already embedded the same text in the embedder's space (as ``build.stages._embed_missing`` does),
    every other distinct text embedded now, all in one call."""
    space = embedding_model_id(embedder)
    text_of = {text_address(d): d for d in docs if d}  # "" is an unread context document: no vector
    vectors = dict(store.vectors_by_content(space, list(text_of))) if text_of else {}
    todo = [a for a in text_of if a not in vectors]
    if todo:
        vectors.update(zip(todo, np.asarray(embedder.embed([text_of[a] for a in todo]), dtype=np.float32)))
    return {a: np.asarray(v, dtype=np.float32) for a, v in vectors.items()}


def _grown_rows(vectors_of: Mapping[str, np.ndarray], embedder: Embedder, model_id: str, old: _Rows | None, n_old: int,
                changed: Mapping[int, tuple[str, str]], keys: list[str], docs: list[str],
                ) -> tuple[_Rows, list[tuple[str, list[str], np.ndarray, list[str], str]]]:
    """Rows after the documents ``changed`` (row -> (key, document)) are replaced and ``keys``
    (of ``docs``) appended, with their vectors from ``vectors_of`` (``_vectors_for``), and the
    vectors to save for them."""
    if old is None or len(old.row_of) != n_old:
        raise ValueError("the remembered rows do not match the view")
    new_keys = [k for k, _ in changed.values()] + keys
    new_docs = [d for _, d in changed.values()] + docs
    space = embedding_model_id(embedder)
    addresses = [text_address(d) for d in new_docs]
    width = old.matrix.shape[1] if old.matrix.ndim == 2 and old.matrix.shape[0] else embedder.dim
    # An unread context document (``build.stages.unread_key``) is a zero row, and is not saved.
    vectors = (np.stack([np.zeros(width, np.float32) if is_unread_key(k) else vectors_of[a]
                         for k, a in zip(new_keys, addresses)]) if addresses
               else np.zeros((0, width), np.float32))
    dim = old.matrix.shape[1] if old.matrix.ndim == 2 and old.matrix.shape[0] else vectors.shape[1]
    matrix = np.empty((n_old + len(keys), dim), dtype=np.float32)
    matrix[:n_old] = old.matrix
    matrix[n_old:] = vectors[len(changed):]
    # A dict copy, not a comprehension over every key (O(history) Python work per append).
    # The keys' order is the rows' order (callers read ``list(row_of)``), so from the first
    # changed row on they are taken off the end and entered again in order.
    row_of = dict(old.row_of)
    first = min(changed, default=n_old)
    tail = [row_of.popitem()[0] for _ in range(n_old - first)][::-1]
    for j, (row, (k, _)) in enumerate(changed.items()):
        matrix[row] = vectors[j]
        tail[row - first] = k
    row_of.update((k, first + i) for i, k in enumerate([*tail, *keys]))
    kept = [j for j, k in enumerate(new_keys) if not is_unread_key(k)]
    save = ([(model_id, [new_keys[j] for j in kept], vectors[kept], [addresses[j] for j in kept], space)]
            if kept else [])
    return _Rows(row_of, matrix), save


def _lexical_tail(packets: Sequence[SourcePacket], n_old: int, bursts: bool) -> tuple[int, int]:
    """(near, start): appending after ``packets[:n_old]`` can change the lexical documents of
    packets from ``start`` on only, and those are computed alike from ``packets[near:]``.

    A document quotes its session neighbours (one turn each side, or with bursts the
    neighbouring bursts and its own burst), so without bursts only the last old document can
    change; with bursts the whole last session run is recomputed (nothing before it is quoted).
    """
    if n_old == 0:
        return 0, 0
    if not bursts:
        return max(0, n_old - 2), n_old - 1
    start = n_old - 1
    while start > 0 and packets[start - 1].session_index == packets[n_old - 1].session_index:
        start -= 1
    return start, start


def _grown_fusion(base: FusionIndex | None, memo: _Memo, packets: Sequence[SourcePacket], n_old: int,
                  by_packet: Mapping[str, Sequence[Descriptor]], cfg: FusionConfig, *,
                  packet_matrix: np.ndarray | None, context_matrix: np.ndarray | None,
                  raw_matrix: np.ndarray | None = None,
                  ) -> tuple[FusionIndex, FusionParts, tuple[str, ...]] | None:
    """The fused index of ``packets`` from ``base`` (the index of the first ``n_old``), or None
    when it has to be built afresh (no base, a new participant under tolerant names, a BM25
    index that cannot grow: a load builds a GrowingLexicalIndex, only an index made elsewhere
    has another)."""
    if base is None or not isinstance(base.lexical, GrowingLexicalIndex):
        return None
    participants = grown_participants(base, packets, n_old)
    if cfg.tolerant_names and participants != base.participants:
        return None  # every document's canonical names may change
    old_docs = memo.lexical_docs
    if old_docs is None or len(old_docs) != n_old:
        old_docs = tuple(lexical_texts(packets[:n_old], by_packet, cfg, participants))
    near, start = _lexical_tail(packets, n_old, cfg.bursts)
    tail = lexical_texts(packets[near:], by_packet, cfg, participants)[start - near:]
    docs = old_docs[:start] + tuple(tail)
    old = memo.fusion
    tokens = dict(old.tokens)
    periods = dict(old.periods)
    expansion = dict(old.expansion)

    def stemmed(doc: str) -> list[str]:
        got = tokens.get(doc)
        if got is None:
            got = tokens[doc] = stem_terms(doc)
        return got

    replaced = {i: stemmed(docs[i]) for i in range(start, n_old) if docs[i] != old_docs[i]}
    appended = [stemmed(d) for d in docs[n_old:]]
    lexical = base.lexical.grown(replaced, appended)
    for i in replaced:  # a replaced text no other document has any more is not kept
        if old_docs[i] not in docs[start:]:
            tokens.pop(old_docs[i], None)
    # The appended turns' rows only, then joined to the base's arrays (no per-turn Python
    # work on the old turns).
    new_rows: dict = {}
    new_terms: list[tuple[str, ...]] = []
    new_dated: list[float] = []
    parts = FusionParts(participants, tokens, periods, expansion)
    add_packet_rows(packets, n_old, by_packet, parts, FusionParts(), new_rows, new_terms, new_dated)
    rows = dict(base.period_rows)
    for period, got in new_rows.items():
        rows[period] = np.concatenate([rows[period], got]) if period in rows else got
    entity = grown_entity_rows(base, packets, n_old) if cfg.answer_type_weight else None
    index = FusionIndex.assemble(packets, lexical, cfg, packet_matrix=packet_matrix, context_matrix=context_matrix,
                                 period_rows=rows, expansion_terms=base.expansion_terms + tuple(new_terms),
                                 dated=np.concatenate([base.dated, np.asarray(new_dated, dtype=np.float64)]),
                                 entity=entity, raw_matrix=raw_matrix, grown_from=(base, n_old))
    grow_turn_table(base, index, packets, n_old)  # the learned ranker's per-turn columns, when made
    return index, parts, docs

