"""The source-normalization boundary (MemCompile paper, Section 3.3, Eqs. 8-10, Appendices A.2, A.4, B.3).

Address hits are descriptors; evidence is SourcePackets. ``normalize_to_packets`` resolves each
hit to its packet and collapses hits of one packet into one candidate:

* packet score = the largest r_i among its hits (Eq. 10);
* representative = the hit with that score, the earliest (smallest position) on ties;
* order = score descending, then earliest hit position, then packet order. Packet order is
  the packet ordinal (dialogue position) when an ordinal map is given, else the packet id
  string; a packet missing from a given map sorts after every mapped one, by id.

``mmr_anchors`` is the diagnostic pre-scheduler Top-10 of Appendix B.3. The source-aliasing
audit of Appendix A.4 is a benchmark metric: ``bench.coverage.aliasing_audit``.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

from ..config import RoutingConfig
from ..language.tokens import jaccard, term_set
from ..types import Candidate, Descriptor, PacketCandidate


def _packet_key(ordinals: Mapping[str, int] | None):
    if ordinals is None:
        return lambda pid: (0, 0, pid)
    return lambda pid: (0, ordinals[pid], pid) if pid in ordinals else (1, 0, pid)


def normalize_to_packets(
    candidates: Sequence[Candidate], ordinals: Mapping[str, int] | None = None
) -> list[PacketCandidate]:
    """Collapse descriptor hits into the packet pool U_q (Eqs. 8-10), in pool order.

    ``candidates`` may come in any order; ``Candidate.position`` defines "earliest".
    ``channels`` of a packet are the union of its hits' channels in first-seen order;
    ``support`` is the sum of max(0, r_i) over its hits.
    """
    groups: dict[str, list[Candidate]] = {}
    for c in candidates:
        groups.setdefault(c.packet_id, []).append(c)
    key = _packet_key(ordinals)
    out: list[PacketCandidate] = []
    for pid, hits in groups.items():
        rep = min(hits, key=lambda c: (-c.score, c.position))
        channels: list[str] = []
        for c in sorted(hits, key=lambda c: c.position):
            channels.extend(ch for ch in c.channels if ch not in channels)
        out.append(PacketCandidate(
            packet_id=pid,
            score=rep.score,
            first_position=min(c.position for c in hits),
            representative=rep.descriptor_id,
            n_hits=len(hits),
            channels=tuple(channels),
            support=sum(max(0.0, c.score) for c in hits),
        ))
    out.sort(key=lambda p: (-p.score, p.first_position, key(p.packet_id)))
    return out


def mmr_anchors(
    pool: Sequence[PacketCandidate],
    candidates: Sequence[Candidate],
    descriptors_by_id: Mapping[str, Descriptor],
    cells_of_descriptor: Mapping[str, int],
    cfg: RoutingConfig = RoutingConfig(),
    k: int | None = None,
) -> list[str]:
    """Packet ids of the diagnostic Top-k (default ``cfg.mmr_k``) by greedy MMR (Appendix B.3).

    Relevance of a packet = its representative's r_i + mmr_support * log(1 + sum of
    max(0, r_i) over all of ``candidates`` that resolve to it). Each greedy step takes the
    packet maximizing relevance - mmr_overlap * (largest Jaccard between the term set of its
    representative's claim and that of an already chosen representative) - mmr_same_cell *
    (number of chosen representatives in the same Cell as its representative). A
    representative outside every Cell (flat layout) shares a Cell with nobody. Ties go to
    the packet that comes first in ``pool``.
    """
    k = cfg.mmr_k if k is None else k
    support: dict[str, float] = {}
    for c in candidates:
        support[c.packet_id] = support.get(c.packet_id, 0.0) + max(0.0, c.score)
    relevance = [p.score + cfg.mmr_support * math.log1p(support.get(p.packet_id, 0.0)) for p in pool]
    rep_terms = [term_set(descriptors_by_id[p.representative].text) for p in pool]
    rep_cell = [cells_of_descriptor.get(p.representative) for p in pool]
    chosen: list[int] = []
    remaining = list(range(len(pool)))
    while remaining and len(chosen) < k:
        best, best_value = -1, -math.inf
        for i in remaining:
            overlap = max((jaccard(rep_terms[i], rep_terms[j]) for j in chosen), default=0.0)
            same_cell = 0 if rep_cell[i] is None else sum(1 for j in chosen if rep_cell[j] == rep_cell[i])
            value = relevance[i] - cfg.mmr_overlap * overlap - cfg.mmr_same_cell * same_cell
            if value > best_value:
                best, best_value = i, value
        chosen.append(best)
        remaining.remove(best)
    return [pool[i].packet_id for i in chosen]
