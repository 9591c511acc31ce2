"""The fused retriever: model-free packet selection by score fusion (the ``fused`` anchor selector).

Selects K packets with no model call, at query time or at build time (descriptors come from
the rule-based extractor). Each packet gets one score, a weighted sum of channels that are
each normalized to a comparable range:

- lexical: BM25 (Snowball-stemmed terms) over a packet document made of the turn, its
  image caption, its claims and, with ``neighbor_context``, the previous and next turn of
  the same session (an answer is often the reply to the turn that matched, or the turn a
  reply refers to); divided by the best score of the query, so it lies in [0, 1];
- packet: the cosine between the query and the packet document z(p) of the dense channel;
  with ``dense_neighbor_context``, the larger of that and the cosine with the packet's
  context document (previous turn, the turn, next turn of the same session, each with its
  speaker), so the dense channel sees the same neighbourhood the lexical one does;
- speaker: a bonus for packets spoken by the one conversation participant the question
  names (questions about a person are mostly answered by that person's own turns);
- temporal: for a question that asks about time ("When did ...", "How long ago ..."), a
  bonus for packets with at least one claim whose event time was resolved (the turn dates
  something, which is what such a question needs).

Scores are fused by value, not by rank: a channel that is confident (one very high BM25
score) keeps that confidence. Ties break by dialogue order. Which of these channels pay off,
and by how much, is measured by ``scripts/ablate_model_free.py``; the weights are few and
were chosen on the development conversations as described in the README.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from .address.lexical import LexicalIndex
from .language.names import known_name
from .language.stemming import stem_terms
from .language.timecues import is_temporal_question
from .config import FusionConfig
from .types import Descriptor, SourcePacket


def session_neighbours(packets: Sequence[SourcePacket], i: int) -> tuple[int, ...]:
    """Indices of the previous and next packet when they belong to the same session as ``i``."""
    return tuple(j for j in (i - 1, i + 1)
                 if 0 <= j < len(packets) and packets[j].session_index == packets[i].session_index)


def lexical_documents(
    packets: Sequence[SourcePacket],
    descriptors_by_packet: Mapping[str, Sequence[Descriptor]],
    *,
    neighbor_context: bool,
) -> list[str]:
    """The lexical document of each packet (packets in dialogue order)."""
    own = []
    for p in packets:
        parts = [p.content, p.image_caption or "", *(d.text for d in descriptors_by_packet.get(p.packet_id, ()))]
        own.append(" ".join(x for x in parts if x))
    if not neighbor_context:
        return own
    docs = []
    for i in range(len(packets)):
        near = session_neighbours(packets, i)
        before = [_raw(packets[j]) for j in near if j < i]
        after = [_raw(packets[j]) for j in near if j > i]
        docs.append(" ".join([*before, own[i], *after]))
    return docs


def _raw(p: SourcePacket) -> str:
    return f"{p.content} {p.image_caption}" if p.image_caption else p.content


def context_documents(packets: Sequence[SourcePacket]) -> list[str]:
    """The dense context document of each packet: previous, own and next turn of its session.

    Raw turns only (no claims), one line per turn prefixed by its speaker, so a reply embeds
    next to the question it answers. Packets are in dialogue order.
    """
    docs = []
    for i in range(len(packets)):
        rows = sorted((i, *session_neighbours(packets, i)))
        docs.append("\n".join(f"{packets[j].speaker}: {_raw(packets[j])}" for j in rows))
    return docs


@dataclass(frozen=True)
class FusionIndex:
    """Query-time structures of the fused selector for one namespace."""

    packet_ids: tuple[str, ...]
    speakers: tuple[str, ...]  # speaker of each packet
    participants: tuple[str, ...]  # distinct speakers of the conversation
    lexical: LexicalIndex
    packet_matrix: np.ndarray | None  # (N, d) l2-normalized z(p) embeddings
    context_matrix: np.ndarray | None  # (N, d) l2-normalized context-document embeddings
    dated: np.ndarray  # (N,) 1.0 where a claim of the packet has a resolved event time

    @classmethod
    def build(
        cls,
        packets: Sequence[SourcePacket],
        descriptors_by_packet: Mapping[str, Sequence[Descriptor]],
        cfg: FusionConfig,
        *,
        packet_matrix: np.ndarray | None = None,
        context_matrix: np.ndarray | None = None,
    ) -> "FusionIndex":
        for name, m in (("packet_matrix", packet_matrix), ("context_matrix", context_matrix)):
            if m is not None and m.shape[0] != len(packets):
                raise ValueError(f"{name} has {m.shape[0]} rows for {len(packets)} packets")
        docs = lexical_documents(packets, descriptors_by_packet, neighbor_context=cfg.neighbor_context)
        lexical = LexicalIndex([stem_terms(d) for d in docs], k1=cfg.bm25_k1, b=cfg.bm25_b)
        speakers = tuple(p.speaker for p in packets)
        return cls(
            packet_ids=tuple(p.packet_id for p in packets),
            speakers=speakers,
            participants=tuple(dict.fromkeys(speakers)),
            lexical=lexical,
            packet_matrix=packet_matrix,
            context_matrix=context_matrix if cfg.dense_neighbor_context else None,
            dated=np.asarray([any(d.event_time for d in descriptors_by_packet.get(p.packet_id, ()))
                              for p in packets], dtype=np.float64),
        )


@dataclass(frozen=True)
class FusedScores:
    total: np.ndarray
    channels: dict[str, np.ndarray]


def named_participants(question: str, participants: Sequence[str]) -> list[str]:
    """Participants the question names: the name as a word (possessives included), or a
    capitalized nickname the rule extractor also resolves ("Mel" for Melanie)."""
    out = []
    for name in participants:
        if name and re.search(rf"(?<!\w){re.escape(name)}(?:'s)?(?!\w)", question, re.IGNORECASE):
            out.append(name)
    for token in re.findall(r"(?<!\w)[A-Z][a-z]+(?!\w)", question):
        name = known_name(token, participants)
        if name and name not in out:
            out.append(name)
    return out


def fused_scores(index: FusionIndex, question: str, query_vec: np.ndarray | None, cfg: FusionConfig) -> FusedScores:
    """The fused score of every packet (aligned with ``index.packet_ids``)."""
    n = len(index.packet_ids)
    channels: dict[str, np.ndarray] = {}
    if cfg.lexical_weight:
        s = index.lexical.scores(stem_terms(question))
        top = float(s.max()) if n else 0.0
        channels["lexical"] = s / top if top > 0 else np.zeros(n)
    if query_vec is not None and cfg.packet_weight and index.packet_matrix is not None:
        cos = index.packet_matrix @ query_vec
        if index.context_matrix is not None:
            cos = np.maximum(cos, index.context_matrix @ query_vec)
        channels["packet"] = cos.astype(np.float64)
    if cfg.speaker_weight:
        named = named_participants(question, index.participants)
        bonus = np.zeros(n)
        if len(named) == 1:
            bonus[[i for i, s in enumerate(index.speakers) if s == named[0]]] = 1.0
        channels["speaker"] = bonus
    if cfg.temporal_weight:
        channels["temporal"] = index.dated if is_temporal_question(question) else np.zeros(n)
    weights = {"lexical": cfg.lexical_weight, "packet": cfg.packet_weight, "speaker": cfg.speaker_weight,
               "temporal": cfg.temporal_weight}
    total = np.zeros(n)
    for name, values in channels.items():
        total += weights[name] * values
    return FusedScores(total=total, channels=channels)


def select_fused(index: FusionIndex, question: str, query_vec: np.ndarray | None, cfg: FusionConfig,
                 k: int) -> list[str]:
    """The ``k`` best packets by fused score, ties by dialogue order."""
    s = fused_scores(index, question, query_vec, cfg).total
    order = np.lexsort((np.arange(len(s)), -s))[:k]
    return [index.packet_ids[i] for i in order]
