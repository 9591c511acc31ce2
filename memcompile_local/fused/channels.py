"""The channels of the fused score, as a table, and their weighted sum.

Each channel scores every packet of a ``FusionIndex`` for one query, normalized to a
comparable range; ``fused_scores`` adds them up, each times its ``FusionConfig`` weight
(``<name>_weight``). Scores are fused by value, not by rank: a channel that is confident (one
very high BM25 score) keeps that confidence. A channel whose weight is 0 is not computed.

- lexical: BM25 (Snowball-stemmed terms) over the lexical documents, divided by the query's
  best score, so it lies in [0, 1]; with ``name_term_weight`` below 1, the terms of the one
  participant the question names count that much (the speaker channel already says who; a
  first-person turn rewritten to "Nora ..." matches "Nora" in every claim, so a question whose
  other terms match nothing would rank that speaker's shortest turns first); with
  ``name_term_scope="alone"`` only when no other term of the question matches any turn;
- packet: the larger of the cosine between the query vector and the packet document z(p)
  and the cosine with the packet's context document, so the dense channel sees the
  neighbourhood the lexical one does (with ``context_window_words``, the context cosine
  counts only for packets whose context document has at most that many words: a longer one
  is cut to its first window, mostly the previous turn);
- speaker: 1 for packets spoken by the one participant the question names (questions about a
  person are mostly answered by that person's own turns);
- temporal: for a question that asks about time, 1 for packets with a claim whose event time
  was resolved;
- time_match: for a question that names a period ("in June", "August 2023"), 1 for packets
  whose session date or a resolved event time falls in it.

A new channel is one function in ``CHANNELS`` and one ``<name>_weight`` field of FusionConfig.

Scores a client reads (``FusedScores.relevance``): the weighted sum divided by the largest sum
the channels computed for the query can reach (each at most 1 times its positive weight), so
it lies in [0, 1] on a fixed scale of the configuration and the memory, not of the query: a
threshold means the same for every question. ``FusedScores.explanation`` lists each channel's
value and weighted contribution, read from the arrays the sum was made of.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Mapping, Sequence

import numpy as np

from ..config import FusionConfig
from ..evidence.relevance import ChannelValue, Explanation
from ..language.answertype import asks_for_entity
from ..language.stemming import stem_terms
from ..language.timecues import is_temporal_question
from .documents import has_assistant, named_participants, role_side
from .index import FusionIndex


@dataclass(frozen=True)
class FusedQuery:
    """What the channels read of one query: the question as asked, its query vector and the
    date it is asked (``anchor``; its relative times resolve against it)."""

    question: str
    vector: np.ndarray | None
    anchor: dt.datetime | None = None
    name_term_weight: float = 1.0  # FusionConfig.name_term_weight
    name_term_scope: str = "always"  # FusionConfig.name_term_scope


@dataclass(frozen=True)
class DenseChannel:
    """The packet channel (``values``) with the two cosines it took the larger of: with z(p)
    (``turn``) and with the context document (``context``, None without context vectors),
    the context one counting only on the rows of ``counts`` (None: everywhere)."""

    values: np.ndarray
    turn: np.ndarray
    context: np.ndarray | None = None
    counts: np.ndarray | None = None


# How ``FusedScores.explanation`` names each channel (the names a client reads in ``explain``).
EXPLAIN_NAMES = {"lexical": "bm25_context", "speaker": "speaker", "temporal": "temporal",
                 "time_match": "time_match", "answer_type": "answer_type", "role": "role"}
# The packet channel is the larger of two cosines; ``explain`` names each and credits the larger.
DENSE_PARTS = ("dense_turn", "dense_context")


@dataclass(frozen=True)
class FusedScores:
    """Every packet's scores under the fused selector, aligned with the index's packet ids.

    ``total`` orders the selection (``retriever.select_rows`` reads it). ``relevance`` is the
    score a search returns for each packet, in [0, 1] (see the module docstring; the learned
    ranker's subclass has its own). ``channels``: each computed channel before weighting;
    ``weights``: the weight of each channel; ``dense``: the two cosines the packet channel took
    the larger of and the context gate (``DenseChannel``)."""

    total: np.ndarray
    channels: dict[str, np.ndarray]
    weights: Mapping[str, float] = field(default_factory=dict)
    dense: DenseChannel | None = None

    selector = "fused"  # the name ``explain`` gives the selector

    @cached_property
    def scale(self) -> float:
        """The largest weighted sum the computed channels can give: each channel lies in
        [0, 1] (the packet channel is a cosine, at most 1), so a packet scores at most the sum
        of the positive weights. 0 when no channel with a positive weight was computed."""
        return float(sum(max(self.weights.get(name, 0.0), 0.0) for name in self.channels))

    @cached_property
    def relevance(self) -> np.ndarray:
        """``total`` over ``scale``, clipped to [0, 1] (negative weights or cosines can take a
        sum below 0): monotone in ``total``, so the order is the sum's."""
        if self.scale <= 0:
            return np.zeros(len(self.total))
        return np.clip(self.total / self.scale, 0.0, 1.0)

    def explanation(self, row: int) -> Explanation:
        """Each channel's value for packet ``row`` and what it added to the sum (``raw``):
        the contributions add up to ``total[row]``."""
        out = []
        for name, values in self.channels.items():
            w = self.weights.get(name, 0.0)
            if name == "packet" and self.dense is not None:
                out.extend(_dense_values(self.dense, row, w * float(values[row])))
            else:
                out.append(ChannelValue(EXPLAIN_NAMES.get(name, name), float(values[row]), w * float(values[row])))
        return Explanation(self.selector, float(self.total[row]), tuple(out))


def _dense_values(dense: DenseChannel, row: int, contribution: float) -> list[ChannelValue]:
    """The two cosines of the packet channel at ``row``: the one the channel took carries the
    contribution (the z(p) cosine on a tie, or where the context gate does not let the context
    cosine count), the other 0."""
    t = float(dense.turn[row])
    if dense.context is None:
        return [ChannelValue(DENSE_PARTS[0], t, contribution)]
    c = float(dense.context[row])
    took_context = (dense.counts is None or bool(dense.counts[row])) and c > t
    return [ChannelValue(DENSE_PARTS[0], t, 0.0 if took_context else contribution),
            ChannelValue(DENSE_PARTS[1], c, contribution if took_context else 0.0)]


def _normalized(s: np.ndarray) -> np.ndarray:
    top = float(s.max()) if s.size else 0.0
    return s / top if top > 0 else np.zeros(len(s))


def lexical_channel(index: FusionIndex, query: FusedQuery) -> np.ndarray:
    terms = index.query_terms(query.question)
    if query.name_term_weight == 1.0:
        return _normalized(index.lexical.scores(terms))
    named = named_participants(query.question, index.participants, tolerant=index.tolerant_names)
    name_terms = set(stem_terms(named[0])) if len(named) == 1 else set()
    own = [t for t in terms if t in name_terms]
    if not own:
        return _normalized(index.lexical.scores(terms))
    rest = index.lexical.scores([t for t in terms if t not in name_terms])
    if query.name_term_scope == "alone" and rest.max() > 0:
        return _normalized(index.lexical.scores(terms))
    name = index.lexical.scores(own)
    # Divided by the best score of all terms at full weight, so a name-only match stays small
    # instead of being scaled back up to 1.
    top = float((rest + name).max())
    return (rest + query.name_term_weight * name) / top if top > 0 else np.zeros(len(rest))


def name_weighted(full: np.ndarray, unnamed: np.ndarray, weight: float, scope: str) -> np.ndarray:
    """:func:`lexical_channel` at name weight ``weight`` and ``scope``, from the same channel at
    weight 1 (``full``) and at weight 0 (``unnamed``): the channel is linear in the weight, and
    under "alone" the weight applies only where no other term matched (``unnamed`` all zero).
    What an ablation uses to score many weights from two computed channels."""
    if scope == "alone" and unnamed.any():
        return full
    return weight * full + (1.0 - weight) * unnamed


def packet_channel(index: FusionIndex, query: FusedQuery) -> DenseChannel | None:
    """The packet channel with its two cosines; None (no channel) without a query vector or
    packet embeddings."""
    if query.vector is None or index.packet_matrix is None:
        return None
    cos, ctx = dense_cosines(index, query.vector)
    return DenseChannel(packet_scores(index, cos, ctx), cos, ctx, None if ctx is None else index.context_rows)


def dense_cosines(index: FusionIndex, vector: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """The cosine of ``vector`` with every packet's z(p) and with its context document (None
    without context vectors), float64; the index must have packet embeddings."""
    cos = (index.packet_matrix @ vector).astype(np.float64)
    ctx = (index.context_matrix @ vector).astype(np.float64) if index.context_matrix is not None else None
    return cos, ctx


def packet_scores(index: FusionIndex, cos: np.ndarray, ctx: np.ndarray | None) -> np.ndarray:
    """The packet channel from ``dense_cosines``: the larger of the two cosines where the
    context gate lets the context one count, else the z(p) cosine."""
    if ctx is None:
        return cos.copy()
    return np.maximum(cos, ctx) if index.context_rows is None else np.where(index.context_rows,
                                                                           np.maximum(cos, ctx), cos)


def speaker_channel(index: FusionIndex, query: FusedQuery) -> np.ndarray:
    return _own_turns(index, named_participants(query.question, index.participants, tolerant=index.tolerant_names))


def role_channel(index: FusionIndex, query: FusedQuery) -> np.ndarray | None:
    """1.0 on the turns of the side a question that names nobody points at with its pronouns
    (documents.role_side); None on a history without an assistant, so the sum there
    is exactly what it was."""
    if not has_assistant(index.participants):
        return None
    if named_participants(query.question, index.participants, tolerant=index.tolerant_names):
        return np.zeros(len(index.packet_ids))  # the speaker channel has it
    return _own_turns(index, role_side(query.question, index.participants))


def _own_turns(index: FusionIndex, named: Sequence[str]) -> np.ndarray:
    """1.0 on the turns of the one participant in ``named`` (all 0 unless exactly one)."""
    bonus = np.zeros(len(index.packet_ids))
    if len(named) == 1:
        bonus[[i for i, s in enumerate(index.speakers) if s == named[0]]] = 1.0
    return bonus


def temporal_channel(index: FusionIndex, query: FusedQuery) -> np.ndarray:
    return index.dated if is_temporal_question(query.question) else np.zeros(len(index.packet_ids))


def time_match_channel(index: FusionIndex, query: FusedQuery) -> np.ndarray:
    return index.time_match(query.question, query.anchor)


def answer_type_channel(index: FusionIndex, query: FusedQuery) -> np.ndarray:
    """For a question asking for a person, place or title: 1 for turns that name one (of the
    one participant the question names, where it names one)."""
    n = len(index.packet_ids)
    if index.entity_rows is None or not asks_for_entity(query.question):
        return np.zeros(n)
    named = named_participants(query.question, index.participants, tolerant=index.tolerant_names)
    if len(named) == 1:
        return index.entity_rows * _own_turns(index, named)
    return index.entity_rows.copy()


# A channel function gives every packet's score (or a DenseChannel holding them), or None
# when the channel has nothing to say for this index and query.
Channel = Callable[[FusionIndex, FusedQuery], "np.ndarray | DenseChannel | None"]

# name -> score function; the weight of channel ``name`` is ``FusionConfig.<name>_weight``.
# The order is the order of the sum.
CHANNELS: dict[str, Channel] = {
    "lexical": lexical_channel,
    "packet": packet_channel,
    "speaker": speaker_channel,
    "temporal": temporal_channel,
    "time_match": time_match_channel,
    "answer_type": answer_type_channel,
    "role": role_channel,
}


def channel_weights(cfg: FusionConfig) -> dict[str, float]:
    """The weight of each channel of ``CHANNELS`` under ``cfg``."""
    return {name: getattr(cfg, f"{name}_weight") for name in CHANNELS}


def fused_scores(index: FusionIndex, question: str, query_vec: np.ndarray | None, cfg: FusionConfig, *,
                 anchor: dt.datetime | None = None) -> FusedScores:
    """The fused score of every packet (aligned with ``index.packet_ids``) and its channels;
    ``anchor`` is the date the question is asked (its relative time expressions resolve against it)."""
    query = FusedQuery(question, query_vec, anchor, cfg.name_term_weight, cfg.name_term_scope)
    weights = channel_weights(cfg)
    channels: dict[str, np.ndarray] = {}
    dense = None
    for name, weight in weights.items():
        if not weight:
            continue
        values = CHANNELS[name](index, query)
        if isinstance(values, DenseChannel):  # kept, so an explanation reads the cosines the sum read
            dense, values = values, values.values
        if values is not None:
            channels[name] = values
    return FusedScores(total=combine(channels, cfg, len(index.packet_ids)), channels=channels, weights=weights,
                       dense=dense)


def combine(channels: Mapping[str, np.ndarray], cfg: FusionConfig, n: int | None = None) -> np.ndarray:
    """The weighted sum of ``fused_scores`` channels under ``cfg``."""
    weights = channel_weights(cfg)
    total = np.zeros(n if n is not None else len(next(iter(channels.values()))))
    for name, values in channels.items():
        total += weights[name] * values
    return total


def score_order(total: np.ndarray) -> np.ndarray:
    """Row indices by descending score, ties by dialogue order."""
    return np.lexsort((np.arange(len(total)), -total))
