"""Anchor-preserving bounded frontier (MemCompile paper, Section 3.4.2, Eqs. 12-14, Appendix C.2).

The frontier pool ``W_q`` unites the anchors ``A0`` with the dense packet proposals ``D_q``
by dialogue id. Some ordering ``sigma_q`` of ``W_q`` (a listwise model call, MemPursuit, ...)
is produced elsewhere; this module applies the append rule:

    Delta = First_{K_Delta}( sigma_q[1:K_R] \\ A0 )      E = A0 || Delta

so every anchor stays, in its order, and at most ``K_Delta`` new packets are appended.
Both functions are pure.
"""

from __future__ import annotations

from typing import Sequence

__all__ = ["bounded_frontier", "frontier_pool"]


def _dedup(ids: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(ids))


def bounded_frontier(
    anchors: Sequence[str],
    ordering: Sequence[str],
    *,
    k_rank: int = 5,
    k_append: int = 2,
) -> tuple[str, ...]:
    """Final packet sequence E_q = A0 followed by the appended packets Delta (Eqs. 13-14).

    Inputs: the anchor ids ``A0`` in scheduling order, an ordering of the frontier pool (best
    first), the rank cutoff ``K_R`` and the append cap ``K_Delta``. Only the first ``k_rank``
    positions of ``ordering`` are examined; packets already in ``A0`` are skipped there and the
    first at most ``k_append`` of the rest are appended in ordering order. A repeated id in
    ``ordering`` counts as one position each time but is appended once.
    Output: tuple of packet ids (anchors first, unchanged).
    """
    if k_rank < 0 or k_append < 0:
        raise ValueError(f"bounded_frontier: k_rank and k_append must be >= 0, got {k_rank}, {k_append}")
    base = _dedup(anchors)
    in_base = set(base)
    added: list[str] = []
    for pid in list(ordering)[:k_rank]:
        if len(added) >= k_append:
            break
        if pid in in_base or pid in added:
            continue
        added.append(pid)
    return tuple(base + added)


def frontier_pool(anchors: Sequence[str], dense_ids: Sequence[str]) -> list[str]:
    """W_q = A0 united with D_q by dialogue id: anchors first, then dense ids in dense order.

    Duplicates (a dense proposal that is already an anchor, or a repeated id) appear once,
    at their first position.
    """
    return _dedup(list(anchors) + list(dense_ids))
