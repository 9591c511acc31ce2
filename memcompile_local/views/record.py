"""The view record: what query time reads of one built namespace."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from ..address.index import AddressIndex
from ..fused.index import FusionIndex
from ..types import Descriptor, SourcePacket


@dataclass(frozen=True)
class MemoryView:
    """What query time needs of one built namespace (loaded once, reused across questions)."""

    namespace: str
    packets: tuple[SourcePacket, ...]
    packets_by_id: Mapping[str, SourcePacket]
    descriptors_by_packet: Mapping[str, tuple[Descriptor, ...]]
    index: AddressIndex
    packet_matrix: np.ndarray | None  # (N, d) in packet order, l2-normalized
    row_of: Mapping[str, int]  # packet id -> row in packet_matrix
    fusion: FusionIndex | None = None  # when the fused selector is configured
