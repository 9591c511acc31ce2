"""A second implementation of the ``Store`` protocol, in plain dicts (no SQL), for the tests
that check that the storage seam is real: the pipeline, the views and the facade run on it
exactly as on SQLite. Not durable, not shared between processes; one lock for all of it."""

from __future__ import annotations

import copy
import hashlib
import json
import threading
from contextlib import contextmanager
from typing import Sequence

import numpy as np

from memcompile_local.errors import ImmutablePacketError, StalePlanError, StoreError
from memcompile_local.store.base import ForgetResult, IngestResult
from memcompile_local.types import (Cell, Conversation, Descriptor, SourcePacket, canonical_metadata_json,
                                    content_sha256)


class DictStore:
    path = "<dict store>"

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._counter = 0  # store-wide generation counter
        self._generation: dict[str, int] = {}
        self._packets: dict[str, list[SourcePacket]] = {}
        self._descriptors: dict[tuple[str, str], dict[str, list[Descriptor]]] = {}  # (ns, set) -> pid -> list
        self._cells: dict[tuple[str, str], list[Cell]] = {}
        self._embeddings: dict[tuple[str, str], dict[str, tuple[str, str]]] = {}  # (ns, model) -> key -> (space, address)
        self._vectors: dict[tuple[str, str], np.ndarray] = {}  # (space, address) -> vector
        self._meta: dict[tuple[str, str], str] = {}
        self._capsules: dict[str, list[dict]] = {}
        self.closed = False

    # -- generations and transactions
    def _bump(self, ns: str) -> None:
        self._counter += 1
        self._generation[ns] = self._counter

    @contextmanager
    def transaction(self):
        with self._lock:
            yield self

    _STATE = ("_counter", "_generation", "_packets", "_descriptors", "_cells", "_embeddings", "_vectors", "_meta", "_capsules")

    @contextmanager
    def savepoint(self):
        with self._lock:
            saved = copy.deepcopy({name: getattr(self, name) for name in self._STATE})
            try:
                yield
            except BaseException:
                for name, value in saved.items():
                    setattr(self, name, value)
                raise

    def generation(self, namespace: str) -> int:
        with self._lock:
            return self._generation.get(namespace, self._counter)

    def namespaces(self) -> list[str]:
        with self._lock:
            return sorted(ns for ns, ps in self._packets.items() if ps)

    # -- packets
    def ingest(self, conversation: Conversation) -> IngestResult:
        ns = conversation.namespace
        with self._lock:
            stored = {p.packet_id: p for p in self._packets.get(ns, [])}
            new: list[SourcePacket] = []
            skipped = 0
            ordinal = max((p.ordinal for p in stored.values()), default=-1) + 1
            for session, turn in conversation.iter_turns():
                p = SourcePacket(namespace=ns, packet_id=turn.packet_id, ordinal=ordinal, session_index=session.index,
                                 session_id=session.session_id, session_time=session.time, speaker=turn.speaker,
                                 content=turn.text, image_caption=turn.image_caption,
                                 sha256=content_sha256(turn.text, turn.image_caption), image_query=turn.image_query,
                                 agent_id=turn.agent_id, metadata_json=canonical_metadata_json(turn.metadata_json))
                old = stored.get(p.packet_id)
                if old is not None:
                    fields = ("sha256", "session_index", "session_id", "session_time", "speaker", "image_query",
                              "agent_id", "metadata_json")
                    if any(getattr(old, f) != getattr(p, f) for f in fields):
                        raise ImmutablePacketError(f"{self.path}: {p.packet_id!r} is stored with different data")
                    skipped += 1
                    continue
                stored[p.packet_id] = p
                new.append(p)
                ordinal += 1
            if new:
                self._packets.setdefault(ns, []).extend(new)
                self._bump(ns)
            return IngestResult(namespace=ns, added=len(new), skipped=skipped)

    def packets(self, namespace: str) -> list[SourcePacket]:
        with self._lock:
            return list(self._packets.get(namespace, []))

    def packet_count(self, namespace: str) -> int:
        with self._lock:
            return len(self._packets.get(namespace, []))

    def get_packet(self, namespace: str, packet_id: str) -> SourcePacket | None:
        with self._lock:
            return next((p for p in self._packets.get(namespace, []) if p.packet_id == packet_id), None)

    # -- descriptors and Cells
    def save_extractions(self, namespace: str, descriptor_set: str,
                         items: Sequence[tuple[str, Sequence[Descriptor]]]) -> None:
        with self._lock:
            if not items:
                return
            by_packet = self._descriptors.setdefault((namespace, descriptor_set), {})
            for pid, descriptors in items:
                if self.get_packet(namespace, pid) is None:
                    raise StoreError(f"{self.path}: namespace {namespace!r} has no packet {pid!r}")
                by_packet[pid] = list(descriptors)
            self._bump(namespace)

    def extracted_packet_ids(self, namespace: str, descriptor_set: str) -> set[str]:
        with self._lock:
            return set(self._descriptors.get((namespace, descriptor_set), {}))

    def descriptors(self, namespace: str, descriptor_set: str) -> list[Descriptor]:
        with self._lock:
            by_packet = self._descriptors.get((namespace, descriptor_set), {})
            return [d for p in self._packets.get(namespace, [])
                    for d in sorted(by_packet.get(p.packet_id, ()), key=lambda d: (d.claim_index, d.descriptor_id))]

    def packet_claims(self, namespace: str, packet_id: str) -> list[str]:
        with self._lock:
            return [d.text for (ns, _), by_packet in self._descriptors.items() if ns == namespace
                    for d in by_packet.get(packet_id, ())]

    def save_cells(self, namespace: str, layout_id: str, cells: Sequence[Cell], *,
                   stored: Sequence[Cell] | None = None) -> None:
        with self._lock:  # a dict holds the whole layout either way: stored changes nothing
            self._cells[(namespace, layout_id)] = sorted(cells, key=lambda c: c.cell_id)
            self._bump(namespace)

    def cells(self, namespace: str, layout_id: str) -> list[Cell]:
        with self._lock:
            return list(self._cells.get((namespace, layout_id), []))

    # -- vectors
    def save_embeddings(self, namespace: str, model_id: str, keys: Sequence[str], vectors: np.ndarray, *,
                        content: Sequence[str] | None = None, space: str | None = None) -> None:
        arr = np.ascontiguousarray(np.asarray(vectors), dtype="<f4")
        if arr.ndim != 2 or arr.shape[0] != len(keys):
            raise StoreError(f"vectors must have shape ({len(keys)}, dim)")
        space = model_id if space is None else space
        addresses = (list(content) if content is not None
                     else ["v:" + hashlib.sha256(arr[i].tobytes()).hexdigest() for i in range(len(keys))])
        with self._lock:
            rows = self._embeddings.setdefault((namespace, model_id), {})
            for k, a, v in zip(keys, addresses, arr):
                self._vectors.setdefault((space, a), v.copy())
                rows[k] = (space, a)
            if keys:
                self._bump(namespace)

    def embeddings(self, namespace: str, model_id: str, keys: Sequence[str]) -> dict[str, np.ndarray]:
        with self._lock:
            rows = self._embeddings.get((namespace, model_id), {})
            return {k: self._vectors[rows[k]].copy() for k in keys if k in rows}

    def vectors_by_content(self, space: str, content: Sequence[str]) -> dict[str, np.ndarray]:
        with self._lock:
            return {a: self._vectors[(space, a)].copy() for a in content if (space, a) in self._vectors}

    # -- meta
    def get_meta(self, namespace: str, key: str) -> str | None:
        with self._lock:
            return self._meta.get((namespace, key))

    def set_meta(self, namespace: str, key: str, value: str) -> None:
        with self._lock:
            self._meta[(namespace, key)] = value
            self._bump(namespace)

    # -- capsules and inventory
    def put_capsules(self, namespace: str, writer: str, budget: int, capsules) -> None:
        with self._lock:
            self._capsules[namespace] = sorted(
                ({**json.loads(json.dumps(dict(c))), "writer": writer, "budget": int(budget)} for c in capsules),
                key=lambda c: c["capsule_id"])
            self._bump(namespace)

    def capsules(self, namespace: str) -> list[dict]:
        with self._lock:
            return copy.deepcopy(self._capsules.get(namespace, []))

    def inventory(self, namespace: str) -> dict:
        with self._lock:
            return {
                "descriptor_sets": sorted({s for (ns, s), rows in self._descriptors.items() if ns == namespace and rows}),
                "layouts": sorted({lay for (ns, lay) in self._cells if ns == namespace}),
                "embeddings": sorted((m, sp, k, a) for (ns, m), rows in self._embeddings.items() if ns == namespace
                                     for k, (sp, a) in rows.items()),
                "meta": sorted(k for (ns, k) in self._meta if ns == namespace),
            }

    # -- erasure
    def _drop_unreferenced(self) -> int:
        used = {ref for rows in self._embeddings.values() for ref in rows.values()}
        gone = [k for k in self._vectors if k not in used]
        for k in gone:
            del self._vectors[k]
        return len(gone)

    def delete_rows(self, plan, *, wait_s: float | None = None) -> ForgetResult:
        ns, pid = plan.namespace, plan.packet_id
        with self._lock:
            if self.get_packet(ns, pid) is None:
                raise StoreError(f"{self.path}: namespace {ns!r} has no packet {pid!r}")
            if self.generation(ns) != plan.generation:
                raise StalePlanError(f"{self.path}: {ns!r} changed since the plan")
            counts = {"descriptors": 0, "extraction_markers": 0, "cells": 0, "embeddings": 0, "meta": 0}
            for (n, _), by_packet in self._descriptors.items():
                if n == ns:
                    for redo in plan.reextract:
                        if redo in by_packet:
                            counts["descriptors"] += len(by_packet.pop(redo))
                            counts["extraction_markers"] += 1
            if plan.drop_cells:
                for key in [k for k in self._cells if k[0] == ns]:
                    counts["cells"] += len(self._cells.pop(key))
            for (n, _), rows in self._embeddings.items():
                if n == ns:
                    for key in [k for k in rows if k.startswith(tuple(plan.embedding_key_prefixes))]:
                        del rows[key]
                        counts["embeddings"] += 1
            counts["vectors"] = self._drop_unreferenced()
            for (n, key), value in list(self._meta.items()):
                if n == ns and key.startswith(plan.meta_list_prefix):
                    ids = json.loads(value)
                    if pid in ids:
                        self._meta[(n, key)] = json.dumps([i for i in ids if i != pid])
                        counts["meta"] += 1
            self._packets[ns] = [p for p in self._packets[ns] if p.packet_id != pid]
            counts["packets"] = 1
            self._bump(ns)
            return ForgetResult(counts, namespace=ns, scrub_complete=True)

    def forget(self, namespace: str, *, wait_s: float | None = None) -> ForgetResult:
        with self._lock:
            counts = {"packets": len(self._packets.pop(namespace, []))}
            counts["descriptors"] = sum(len(v) for k in [k for k in self._descriptors if k[0] == namespace]
                                        for v in self._descriptors.pop(k).values())
            counts["cells"] = sum(len(self._cells.pop(k)) for k in [k for k in self._cells if k[0] == namespace])
            counts["embeddings"] = sum(len(self._embeddings.pop(k))
                                       for k in [k for k in self._embeddings if k[0] == namespace])
            counts["meta"] = sum(1 for k in [k for k in self._meta if k[0] == namespace] if self._meta.pop(k))
            counts["capsules"] = len(self._capsules.pop(namespace, []))
            counts["vectors"] = self._drop_unreferenced()
            self._generation.pop(namespace, None)
            self._counter += 1
            return ForgetResult(counts, namespace=namespace, scrub_complete=True)

    def changes_since(self, namespace: str, generation: int, *, after_ordinal: int, descriptor_set: str,
                      layout_id: str | None = None):
        # This store keeps no change log: a view it serves is always read again whole.
        return None

    def stats(self, namespace: str | None = None) -> dict:
        with self._lock:
            names = [namespace] if namespace else self.namespaces()
            return {"namespaces": {ns: {"packets": self.packet_count(ns)} for ns in names}}

    def close(self) -> None:
        self.closed = True
