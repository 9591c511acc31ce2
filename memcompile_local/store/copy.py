"""Copy memories between two stores of any backend, through the ``Store`` protocol alone.

A copy carries everything a namespace holds: its turns (same ids, order, sessions, agent and
metadata), every descriptor set with its extraction marks, every cell layout, every stored
vector under its key, vector space and content address, its meta rows and retained capsules.
A built memory therefore answers on the destination exactly as on the source, without a
rebuild and without a model call. Each namespace is written in one transaction of the
destination (all of it or none of it) and then read back and compared with the source.

Not copied: the request cache and token ledger (model responses, shared by all namespaces) and
the build queue's transient state; the destination keeps its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import groupby
from typing import Callable, Iterable

import numpy as np

from ..errors import StoreError
from ..types import Conversation, Session, SourcePacket, Turn
from .base import Store


@dataclass(frozen=True)
class CopyReport:
    """What one namespace's copy wrote."""

    namespace: str
    packets: int
    descriptors: int
    descriptor_sets: int
    cells: int
    embeddings: int
    meta: int
    capsules: int


def _conversation(namespace: str, packets: list[SourcePacket]) -> Conversation:
    # One Session per run of consecutive turns of one session, so the destination numbers the
    # turns in the source's order even where a later append went back to an earlier session.
    runs = groupby(sorted(packets, key=lambda p: p.ordinal),
                   key=lambda p: (p.session_index, p.session_id, p.session_time))
    sessions = tuple(
        Session(index=index, session_id=sid, time=when, turns=tuple(
            Turn(packet_id=p.packet_id, speaker=p.speaker, text=p.content, image_caption=p.image_caption,
                 image_query=p.image_query, agent_id=p.agent_id, metadata_json=p.metadata_json)
            for p in run))
        for (index, sid, when), run in runs
    )
    return Conversation(namespace=namespace, sessions=sessions)


def _capsule_groups(capsules: list[dict]) -> dict[tuple[str, int], list[dict]]:
    groups: dict[tuple[str, int], list[dict]] = {}
    for cap in capsules:
        body = {k: v for k, v in cap.items() if k not in ("writer", "budget")}
        groups.setdefault((cap["writer"], int(cap["budget"])), []).append(body)
    return groups


def copy_namespace(src: Store, dst: Store, namespace: str) -> CopyReport:
    """Copy ``namespace`` from ``src`` into ``dst``, where it must not exist yet; one transaction
    of ``dst``, then a full comparison (StoreError naming the first differences if any)."""
    if dst.packet_count(namespace) or namespace in dst.namespaces():
        raise StoreError(f"{getattr(dst, 'path', dst)!s}: namespace {namespace!r} already exists there; "
                         "forget it first or copy into another store")
    packets = src.packets(namespace)
    inv = src.inventory(namespace)
    capsules = src.capsules(namespace)
    groups = _capsule_groups(capsules)
    if len(groups) > 1:
        raise StoreError(f"namespace {namespace!r} holds capsules of {len(groups)} writers or budgets; "
                         "a store keeps one set per namespace")
    order = {p.packet_id: p.ordinal for p in packets}
    n_desc = 0
    vectors = 0
    with dst.transaction():
        dst.ingest(_conversation(namespace, packets))
        for dset in inv["descriptor_sets"]:
            by_packet: dict[str, list] = {pid: [] for pid in src.extracted_packet_ids(namespace, dset)}
            for d in src.descriptors(namespace, dset):
                by_packet.setdefault(d.packet_id, []).append(d)
            items = sorted(by_packet.items(), key=lambda kv: (order.get(kv[0], -1), kv[0]))
            dst.save_extractions(namespace, dset, [(pid, sorted(ds, key=lambda d: d.claim_index))
                                                   for pid, ds in items])
            n_desc += sum(len(ds) for ds in by_packet.values())
        n_cells = 0
        for layout in inv["layouts"]:
            cells = src.cells(namespace, layout)
            dst.save_cells(namespace, layout, cells)
            n_cells += len(cells)
        for (model_id, space), rows in groupby(sorted(inv["embeddings"]), key=lambda r: (r[0], r[1])):
            rows = list(rows)
            keys = [r[2] for r in rows]
            got = src.embeddings(namespace, model_id, keys)
            missing = [k for k in keys if k not in got]
            if missing:
                raise StoreError(f"namespace {namespace!r}: {len(missing)} vectors of {model_id!r} vanished "
                                 f"while copying (first {missing[0]!r}); nothing was written")
            dst.save_embeddings(namespace, model_id, keys, np.stack([got[k] for k in keys]),
                                content=[r[3] for r in rows], space=space)
            vectors += len(rows)
        for key in inv["meta"]:
            value = src.get_meta(namespace, key)
            if value is not None:
                dst.set_meta(namespace, key, value)
        for (writer, budget), caps in groups.items():
            dst.put_capsules(namespace, writer, budget, caps)
    diffs = differences(src, dst, namespace)
    if diffs:
        raise StoreError(f"namespace {namespace!r} differs after the copy: " + "; ".join(diffs[:5]))
    return CopyReport(namespace=namespace, packets=len(packets), descriptors=n_desc,
                      descriptor_sets=len(inv["descriptor_sets"]), cells=n_cells, embeddings=vectors,
                      meta=len(inv["meta"]), capsules=len(capsules))


def _packet_key(p: SourcePacket) -> tuple:
    return (p.packet_id, p.ordinal, p.session_index, p.session_id, p.session_time, p.speaker, p.content,
            p.image_caption, p.image_query, p.sha256, p.agent_id, p.metadata_json)


def differences(a: Store, b: Store, namespace: str) -> list[str]:
    """How ``namespace`` differs between two stores ([] when every row the protocol can read is
    equal: turns, descriptors, cells, vectors bit for bit, meta, capsules)."""
    out: list[str] = []

    def same(what: str, x, y) -> None:
        if x != y:
            out.append(what)

    pa, pb = a.packets(namespace), b.packets(namespace)
    # Ordinals are positions: compare them relative to the first (a store may start elsewhere).
    base_a = pa[0].ordinal if pa else 0
    base_b = pb[0].ordinal if pb else 0
    same("packets", [(_packet_key(p)[0], p.ordinal - base_a, *_packet_key(p)[2:]) for p in pa],
         [(_packet_key(p)[0], p.ordinal - base_b, *_packet_key(p)[2:]) for p in pb])
    ia, ib = a.inventory(namespace), b.inventory(namespace)
    same("inventory", ia, ib)
    for dset in ia["descriptor_sets"]:
        same(f"extraction marks of {dset!r}", a.extracted_packet_ids(namespace, dset),
             b.extracted_packet_ids(namespace, dset))
        same(f"descriptors of {dset!r}", a.descriptors(namespace, dset), b.descriptors(namespace, dset))
    for layout in ia["layouts"]:
        same(f"cells of {layout!r}", a.cells(namespace, layout), b.cells(namespace, layout))
    for model_id, rows in groupby(ia["embeddings"], key=lambda r: r[0]):
        keys = [r[2] for r in rows]
        va, vb = a.embeddings(namespace, model_id, keys), b.embeddings(namespace, model_id, keys)
        if va.keys() != vb.keys() or any(va[k].tobytes() != vb[k].tobytes() for k in va):
            out.append(f"vectors of {model_id!r}")
    same("meta", {k: a.get_meta(namespace, k) for k in ia["meta"]},
         {k: b.get_meta(namespace, k) for k in ia["meta"]})
    same("capsules", a.capsules(namespace), b.capsules(namespace))
    return out


def copy_store(src: Store, dst: Store, namespaces: Iterable[str] | None = None, *,
               on_done: Callable[[CopyReport], None] | None = None) -> list[CopyReport]:
    """Copy ``namespaces`` (default: every namespace of ``src``) one by one; a namespace that
    fails leaves the ones before it copied and writes nothing of itself."""
    names = list(src.namespaces() if namespaces is None else namespaces)
    unknown = [ns for ns in names if ns not in set(src.namespaces())]
    if unknown:
        raise StoreError(f"{getattr(src, 'path', src)!s}: no namespace {unknown[0]!r} to copy")
    reports = []
    for ns in names:
        report = copy_namespace(src, dst, ns)
        reports.append(report)
        if on_done is not None:
            on_done(report)
    return reports
