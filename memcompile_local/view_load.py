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
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .address.dense import packet_document
from .address.index import AddressIndex
# Private helpers of build.py: the store's embedding key format and its "embed what is
# missing" step must be exactly the build's, so they are shared rather than copied.
from .build import _embed_missing, _keyed, context_model_id, embedding_model_id, layout_id
from .config import FusionConfig
from .fused import FusionIndex, FusionParts, context_documents
from .pipeline import MemoryView
from .types import Descriptor, SourcePacket

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


_EMPTY = _Memo((), {}, FusionParts(), {})


def _packet_documents(packets: Sequence[SourcePacket], by_packet: Mapping[str, Sequence[Descriptor]],
                      old: Mapping[tuple, str]) -> tuple[list[str], dict[tuple, str]]:
    """z(p) of each packet, taken from ``old`` when the packet and its descriptors are equal
    to a remembered one's; returns (documents, the memo for the next load)."""
    memo: dict[tuple, str] = {}
    docs = []
    for p in packets:
        key = (p, tuple(by_packet.get(p.packet_id, ())))
        doc = old.get(key)
        if doc is None:
            doc = packet_document(p, key[1])
        memo[key] = doc
        docs.append(doc)
    return docs, memo


def _matrix(store: Any, namespace: str, model_id: str, embedder: Any, keys: list[str], docs: list[str],
            old: _Rows | None, what: str) -> tuple[_Rows, int]:
    """(rows for ``keys`` in order, how many texts were embedded now).

    Rows of keys the previous load had are copied from it; the other keys are embedded when the
    store lacks them (``build._embed_missing``, content-addressed) and then read from the store.
    """
    old_row = old.row_of if old is not None else {}
    new = [(k, d) for k, d in zip(keys, docs) if k not in old_row]
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
            matrix[i] = np.asarray(got[k], dtype=np.float32)
    return _Rows({k: i for i, k in enumerate(keys)}, matrix), embedded


def fusion_index(
    packets: Sequence[SourcePacket],
    descriptors_by_packet: Mapping[str, Sequence[Descriptor]],
    cfg: FusionConfig,
    *,
    packet_matrix: np.ndarray | None,
    context_matrix: np.ndarray | None,
    memo: _Memo = _EMPTY,
) -> tuple[FusionIndex, FusionParts]:
    """``FusionIndex.build`` with the per-packet work taken from ``memo`` where its inputs are
    unchanged; returns (index, the parts to remember for the next load)."""
    return FusionIndex.build_reusing(packets, descriptors_by_packet, cfg, packet_matrix=packet_matrix,
                                     context_matrix=context_matrix, previous=memo.fusion)


class ViewLoader:
    """Loads MemoryViews for one ``Memory``, remembering each namespace's last load.

    Thread-safe: the remembered parts of a namespace are replaced whole after a load and
    never changed in place, so loads of one namespace running at once each read a complete
    earlier load.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._memos: dict[str, _Memo] = {}

    def drop(self, namespace: str) -> None:
        """Forget what was remembered of ``namespace`` (after a forget or a deleted turn)."""
        with self._lock:
            self._memos.pop(namespace, None)

    def remembered(self, namespace: str) -> bool:
        """Whether a previous load of ``namespace`` is remembered."""
        with self._lock:
            return namespace in self._memos

    def load(self, mem: Any, namespace: str) -> tuple[MemoryView, int]:
        """(the view of built ``namespace`` under ``mem``'s configuration, the generation read
        before its data). Embeds any document not embedded yet; raises RuntimeError when an
        embedding is missing after that (a concurrent write; the caller may load again)."""
        store, cfg = mem.store, mem.config
        dset = mem.extractor().descriptor_set
        lid = layout_id(dset, cfg.placement)
        embedder = mem.embedder
        use_fusion = mem.uses_fusion()
        use_context = mem.uses_context_embeddings()
        identity = (dset, lid, repr(cfg.fusion), embedding_model_id(embedder) if embedder is not None else None,
                    use_fusion, use_context)
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
            matrix = context = None
            if embedder is not None:
                model_id = embedding_model_id(embedder)
                pdocs, documents = _packet_documents(packets, by_packet, documents)
                keys, docs = _keyed(packets, pdocs)
                rows[model_id], n = _matrix(store, namespace, model_id, embedder, keys, docs,
                                            rows.get(model_id), "packet")
                embedded += n
                matrix = rows[model_id].matrix
                if use_context:
                    cid = context_model_id(embedder)
                    ckeys, cdocs = _keyed(packets, context_documents(packets))
                    rows[cid], n = _matrix(store, namespace, cid, embedder, ckeys, cdocs, rows.get(cid), "context")
                    embedded += n
                    context = rows[cid].matrix
            if not embedded and store.generation(namespace) == generation:
                break
        descriptors_by_packet = {k: tuple(v) for k, v in by_packet.items()}
        fusion, parts = None, FusionParts()
        if use_fusion:
            fusion, parts = fusion_index(packets, descriptors_by_packet, cfg.fusion, packet_matrix=matrix,
                                         context_matrix=context, memo=memo)
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
            self._memos[namespace] = _Memo(identity, rows, parts, documents)
        return view, generation
