"""The fused retriever: model-free packet selection by score fusion (the ``fused`` anchor selector).

Selects K packets with no model call, at query time or at build time (descriptors come from
the rule-based extractor): one ``FusedRetriever`` over a namespace's ``FusionIndex`` makes the
query's dense texts and vector, scores every packet once (``channels.fused_scores``: a
weighted sum of the channels of ``channels.CHANNELS``) and returns the kept packets with their
scores. Ties break by dialogue order.

For questions that ask for several things (``is_list_question``), the K packets are composed
from the fused top-P (``complement_pool``) instead of taken in score order, so near-duplicates
give way to evidence that adds something: the first ``complement_keep`` stay in score order
and are MemPursuit's first selections, so each later pick is the pool packet that best
explains what they leave of the query.

Each kept packet has a score in [0, 1] (``Retrieval.relevance``: the weighted sum on its fixed
scale, or the learned ranker's calibrated probability) and, on request, the per-channel
explanation read from the arrays it was selected by (``Retrieval.explanation``).

Which of these pay off, and by how much, was decided by leave-one-conversation-out
cross-validation (research/ablate_model_free.py, which also re-implements the variants
measured there and dropped).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..config import FusionConfig
from ..errors import ConfigError
from ..evidence.pursuit import mem_pursuit
from ..evidence.relevance import Explanation
from ..language.listcues import is_list_question
from ..protocols import Embedder
from .channels import FusedScores, fused_scores, score_order
from .documents import has_assistant, raw_text
from .index import FusionIndex
from ..types import SourcePacket

# ----------------------------------------------------------------------------- query vector


def dense_query_texts(question: str, intent_query: str) -> list[str]:
    """The texts the dense channel embeds for one question, in order: the rule intent's query
    text (``QueryIntent.lexical_query``), then the question as asked unless the two are the
    same text. The intent text repeats the question's names and keywords, which pulls its
    embedding towards them; the plain question keeps what it asks about."""
    if not question or question == intent_query:
        return [intent_query]
    return [intent_query, question]


def query_vector(rows: np.ndarray) -> np.ndarray:
    """The one query vector of the embeddings of ``dense_query_texts`` (rows): their mean,
    so each packet's cosine with it is the mean of its cosines with the rows. Not
    renormalized: the fusion weights were fit on that mean."""
    rows = np.asarray(rows, dtype=np.float32)
    if rows.ndim == 1:
        return rows
    return rows[0] if len(rows) == 1 else rows.mean(axis=0)


# ----------------------------------------------------------------------------- selection

def pursuit_complement(index: FusionIndex, order: np.ndarray, query_vec: np.ndarray | None,
                       cfg: FusionConfig, k: int) -> list[int]:
    """K rows composed from the fused top-P (``complement_pool``): the first ``complement_keep``
    in score order, the rest in the order MemPursuit picks them from the pool's packet
    embeddings, starting from the kept packets (so every later pick is the one that best
    explains what they leave of the query); packets it does not pick follow in score order."""
    pool = [int(i) for i in order[: max(cfg.complement_pool, k)]]
    keep = min(cfg.complement_keep, k)
    chosen = pool[:keep]
    E = index.packet_matrix
    if E is None or not pool[keep:] or k <= keep or query_vec is None:
        return [int(i) for i in order[:k]]
    res = mem_pursuit(query_vec, E[pool], k=k, tau=0.0, start=range(keep))
    picked = chosen + [pool[i] for i in res.indices if pool[i] not in chosen]
    return (picked + [i for i in pool if i not in picked])[:k]


def turn_text_key(packet: SourcePacket) -> str:
    """What two turns with the same text share: the turn and its caption, case and spacing aside."""
    return " ".join(raw_text(packet).casefold().split())


def distinct_text_order(order: np.ndarray, packets: Sequence[SourcePacket], needed: int) -> np.ndarray:
    """``order`` with each turn whose text repeats a turn before it moved behind the first
    ``needed`` turns of distinct text (a copy of "Thanks!" or "ok" from another session says
    nothing the first did not, so it gives its slot to the next turn). Only the head is read:
    the scan stops once ``needed`` distinct turns are found."""
    seen: set[str] = set()
    head: list[int] = []
    repeats: list[int] = []
    at = 0
    while at < len(order) and len(head) < needed:
        row = int(order[at])
        key = turn_text_key(packets[row])
        (repeats if key in seen else head).append(row)
        seen.add(key)
        at += 1
    if not repeats:
        return order
    return np.concatenate([np.asarray(head + repeats, dtype=np.int64), np.asarray(order[at:], dtype=np.int64)])


def select_rows(index: FusionIndex, question: str, total: np.ndarray, query_vec: np.ndarray | None,
                cfg: FusionConfig, k: int, allowed: np.ndarray | None = None,
                packets: Sequence[SourcePacket] | None = None) -> list[int]:
    """The ``k`` rows the fused selector keeps for fused scores ``total`` (see module docstring).

    ``allowed`` (a boolean mask over the rows): only those rows are candidates, so the k are
    chosen among them (a caller's filter restricts the pool before the cut, not after).
    ``packets`` (the index's packets, in row order): with ``cfg.distinct_turns``, a turn whose
    text repeats a better-placed one's gives up its slot (``distinct_text_order``)."""
    order = score_order(total)
    if allowed is not None:
        order = order[allowed[order]]
    if packets is not None and cfg.distinct_turns:
        order = distinct_text_order(order, packets, max(cfg.complement_pool, k))
    if is_list_question(question):
        return pursuit_complement(index, order, query_vec, cfg, k)
    return [int(i) for i in order[:k]]


@dataclass(frozen=True)
class Retrieval:
    """What one ``FusedRetriever.retrieve`` found: the kept packets, best first, and the fused
    scores of every packet (``relevance`` and ``explanation`` read one packet's)."""

    packet_ids: tuple[str, ...]
    scores: FusedScores
    row_of: dict[str, int]

    def relevance(self, packet_id: str) -> float:
        """The packet's score in [0, 1] (``FusedScores.relevance``)."""
        return float(self.scores.relevance[self.row_of[packet_id]])

    def explanation(self, packet_id: str) -> Explanation:
        """The channels the packet was scored by (``FusedScores.explanation``)."""
        return self.scores.explanation(self.row_of[packet_id])


# ``ranker: auto`` takes the learned ranker on a history where at least this share of turns
# follow a turn of the same speaker in their session (FusionIndex.burst_share). The weighted sum
# was fit on strictly alternating dialogue (share 0 in every LoCoMo conversation); the four
# REALTALK chats measure 0.33 to 0.48. Any value between separates the development corpora
# alike, so the figure is not fitted: 0.1 keeps a mostly alternating chat on the weighted sum.
AUTO_BURST_SHARE = 0.1


def uses_learned_ranker(index: FusionIndex, cfg: FusionConfig) -> bool:
    """Whether ``cfg.ranker`` means the learned ranker on ``index``'s history: always under
    "learned", never under "weighted", and under "auto" when some turn's speaker is the
    assistant (the user-assistant loaders, BEAM's and LongMemEval's, name the roles so) or
    when the history comes in bursts (``AUTO_BURST_SHARE``): histories unlike the strictly
    alternating dialogue the weighted sum was fit on."""
    if cfg.ranker == "auto":
        return index.burst_share >= AUTO_BURST_SHARE or has_assistant(index.participants)
    return cfg.ranker == "learned"


class FusedRetriever:
    """The model-free retriever over one namespace's ``FusionIndex`` under one ``FusionConfig``."""

    def __init__(self, index: FusionIndex, cfg: FusionConfig, packets: Sequence[SourcePacket] | None = None):
        self.index = index
        self.cfg = cfg
        # The index's packets, in row order: the learned ranker reads their text, roles and places.
        self.packets = packets
        self.learned = uses_learned_ranker(index, cfg)

    def query_texts(self, question: str, intent_query: str) -> list[str]:
        return dense_query_texts(question, intent_query)

    def query_vector(self, embedder: Embedder | None, question: str, intent_query: str) -> np.ndarray | None:
        """The query vector of ``question`` (None without an embedder), in one embed call."""
        if embedder is None:
            return None
        # Embedders trained with query/document prefixes (e5, bge) embed queries on their own path.
        embed = getattr(embedder, "embed_query", None) or embedder.embed
        return query_vector(np.asarray(embed(self.query_texts(question, intent_query)), dtype=np.float32))

    def scores(self, question: str, query_vec: np.ndarray | None, *, anchor: dt.datetime | None = None) -> FusedScores:
        """Every packet's fused scores; ``anchor`` is the date the question is asked (the time
        match resolves the question's relative times against it). Under ``ranker="learned"`` the
        total is the learned ranker's order (fused/ranker.py); under "auto", when the index has an
        assistant speaker."""
        if self.learned:
            if self.packets is None:
                raise ConfigError(f"fusion.ranker={self.cfg.ranker!r} on this history needs the index's packets "
                                  "(FusedRetriever(..., packets=))")
            from .ranker import learned_scores, load_model  # the weighted path never reads a model file
            return learned_scores(self.index, self.packets, question, query_vec, self.cfg,
                                  load_model(self.cfg.ranker_model), anchor=anchor)
        return fused_scores(self.index, question, query_vec, self.cfg, anchor=anchor)

    def retrieve(self, question: str, query_vec: np.ndarray | None, k: int, *,
                 anchor: dt.datetime | None = None, allowed: np.ndarray | None = None) -> Retrieval:
        """The ``k`` packets the fused selector keeps, best first, with every packet's scores
        (scored once; ``anchor``: see ``scores``; ``allowed``: see ``select_rows``)."""
        scores = self.scores(question, query_vec, anchor=anchor)
        rows = select_rows(self.index, question, scores.total, query_vec, self.cfg, k, allowed, self.packets)
        return Retrieval(tuple(self.index.packet_ids[i] for i in rows), scores, self.index.row_of)

    def ranking(self, question: str, query_vec: np.ndarray | None, n: int, *,
                anchor: dt.datetime | None = None, allowed: np.ndarray | None = None) -> list[str]:
        """The first ``n`` packets by fused score alone (the pool handed to an LLM scheduler),
        among the ``allowed`` rows when a mask is given."""
        total = self.scores(question, query_vec, anchor=anchor).total
        order = score_order(total)
        if allowed is not None:
            order = order[allowed[order]]
        return [self.index.packet_ids[i] for i in order[:n]]
