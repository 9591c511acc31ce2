"""The Address Plane of one namespace, held in memory for query serving.

``AddressIndex.build`` is pure: it takes packets, descriptors, Cells and (optionally) the
packet embedding matrix, checks that they refer to each other consistently, and precomputes
everything a query reads (BM25 index, term sets, Cell features, lookups). Loading these
records from the store is the caller's job.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping, Sequence

import numpy as np

from ..config import PlacementConfig, RoutingConfig
from ..errors import ConfigError, DataFormatError
from ..types import Cell, Descriptor, SourcePacket
from .dense import DenseIndex
from .layouts import LAYOUTS
from .lexical import LexicalIndex
from .routing import CellFeatures
from .scoring import DescriptorTerms


def _where(namespace: str) -> str:
    return f"<address index {namespace!r}>"


@dataclass(frozen=True)
class AddressIndex:
    """Everything query serving needs for one namespace (read-only after ``build``)."""

    namespace: str
    layout: str
    item_cap: int  # M_C in the density term of Eq. 22
    packets: tuple[SourcePacket, ...]  # dialogue order
    descriptors: tuple[Descriptor, ...]  # dialogue and claim order
    cells: tuple[Cell, ...]
    lexical: LexicalIndex  # document i = descriptors[i]
    bm25_k1: float
    bm25_b: float
    dense: DenseIndex | None
    descriptor_by_id: Mapping[str, Descriptor]
    descriptor_position: Mapping[str, int]
    descriptor_terms: tuple[DescriptorTerms, ...]  # aligned with descriptors
    packet_by_id: Mapping[str, SourcePacket]
    packet_ordinal: Mapping[str, int]
    packet_descriptors: Mapping[str, tuple[str, ...]]  # packet id -> descriptor ids, claim order
    cell_by_id: Mapping[int, Cell]
    cell_of_descriptor: Mapping[str, int]
    cell_features: tuple[CellFeatures, ...]

    @classmethod
    def build(
        cls,
        packets: Sequence[SourcePacket],
        descriptors: Sequence[Descriptor],
        cells: Sequence[Cell],
        packet_embeddings: np.ndarray | None = None,
        *,
        layout: str = "bounded",
        placement: PlacementConfig = PlacementConfig(),
        routing: RoutingConfig = RoutingConfig(),
    ) -> "AddressIndex":
        """Validate and index one namespace.

        ``packets`` are ordered by ordinal here; ``descriptors`` must be in dialogue and claim
        order; ``packet_embeddings`` has one row per packet in ordinal order. ``layout`` names
        how ``cells`` were built (``flat`` means no Cells). Raises DataFormatError when the
        records do not fit together and ConfigError for an unknown layout.
        """
        if layout not in LAYOUTS:
            raise ConfigError(f"unknown placement layout {layout!r}; expected one of {list(LAYOUTS)}")
        ordered = tuple(sorted(packets, key=lambda p: p.ordinal))
        namespace = ordered[0].namespace if ordered else (descriptors[0].namespace if descriptors else "")
        where = _where(namespace)
        packet_by_id: dict[str, SourcePacket] = {}
        for i, p in enumerate(ordered):
            if p.namespace != namespace:
                raise DataFormatError(where, f"packets[{i}] ({p.packet_id})", f"namespace {namespace!r}",
                                      f"got {p.namespace!r}")
            if p.packet_id in packet_by_id:
                raise DataFormatError(where, f"packets[{i}]", "distinct packet ids", f"{p.packet_id!r} repeats")
            packet_by_id[p.packet_id] = p

        by_id: dict[str, Descriptor] = {}
        per_packet: dict[str, list[str]] = {}
        for i, d in enumerate(descriptors):
            if d.descriptor_id in by_id:
                raise DataFormatError(where, f"descriptors[{i}]", "distinct descriptor ids",
                                      f"{d.descriptor_id!r} repeats")
            if d.packet_id not in packet_by_id:
                raise DataFormatError(where, f"descriptors[{i}] ({d.descriptor_id})",
                                      "a packet_id of one of the given SourcePackets", f"got {d.packet_id!r}")
            by_id[d.descriptor_id] = d
            per_packet.setdefault(d.packet_id, []).append(d.descriptor_id)

        cell_of: dict[str, int] = {}
        cell_by_id: dict[int, Cell] = {}
        for c in cells:
            if c.cell_id in cell_by_id:
                raise DataFormatError(where, f"cell {c.cell_id}", "distinct cell ids")
            cell_by_id[c.cell_id] = c
            for did in c.descriptor_ids:
                if did not in by_id:
                    raise DataFormatError(where, f"cell {c.cell_id}", "descriptor ids of the given descriptors",
                                          f"unknown {did!r}")
                if did in cell_of:
                    raise DataFormatError(where, f"cell {c.cell_id}", "each descriptor in at most one Cell",
                                          f"{did!r} is also in cell {cell_of[did]}")
                cell_of[did] = c.cell_id
        if layout == "flat" and cells:
            raise DataFormatError(where, "cells", "no Cells for the flat layout", f"got {len(cells)}")

        dense = None
        if packet_embeddings is not None:
            dense = DenseIndex([p.packet_id for p in ordered], packet_embeddings)

        descs = tuple(descriptors)
        return cls(
            namespace=namespace,
            layout=layout,
            item_cap=placement.item_cap if layout == "bounded" else placement.block_size,
            packets=ordered,
            descriptors=descs,
            cells=tuple(sorted(cells, key=lambda c: c.cell_id)),
            lexical=LexicalIndex.from_descriptors(descs, k1=routing.bm25_k1, b=routing.bm25_b),
            bm25_k1=routing.bm25_k1,
            bm25_b=routing.bm25_b,
            dense=dense,
            descriptor_by_id=MappingProxyType(by_id),
            descriptor_position=MappingProxyType({d.descriptor_id: i for i, d in enumerate(descs)}),
            descriptor_terms=tuple(DescriptorTerms.of(d) for d in descs),
            packet_by_id=MappingProxyType(packet_by_id),
            packet_ordinal=MappingProxyType({p.packet_id: p.ordinal for p in ordered}),
            packet_descriptors=MappingProxyType({k: tuple(v) for k, v in per_packet.items()}),
            cell_by_id=MappingProxyType(cell_by_id),
            cell_of_descriptor=MappingProxyType(cell_of),
            cell_features=tuple(CellFeatures.of(c) for c in sorted(cells, key=lambda c: c.cell_id)),
        )
