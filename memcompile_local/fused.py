"""The fused retriever: model-free packet selection by score fusion (the ``fused`` anchor selector).

Selects K packets with no model call, at query time or at build time (descriptors come from
the rule-based extractor). Each packet gets one score, a weighted sum of channels that are
each normalized to a comparable range:

- lexical: BM25 (Snowball-stemmed terms) over a packet document made of the turn, its
  image caption, its claims and, with ``neighbor_context``, the previous and next turn of
  the same session (an answer is often the reply to the turn that matched, or the turn a
  reply refers to); divided by the best score of the query, so it lies in [0, 1]. With
  ``bursts``, "turn" means a burst: the run of consecutive messages one speaker sent in a
  row, which chat apps split one thought over;
- packet: the cosine between the query and the packet document z(p) of the dense channel;
  with ``dense_query="intent+question"`` the query vector is the mean of two embeddings,
  the rule intent's query text (question, people, keywords) and the question as asked, so
  the cosine is the mean of the two cosines (``dense_query_texts``, ``query_vector``);
  with ``dense_neighbor_context``, the larger of that and the cosine with the packet's
  context document (previous turn, the turn, next turn of the same session, each with its
  speaker), so the dense channel sees the same neighbourhood the lexical one does; with
  ``packet_scale="max"`` divided by the query's best cosine, as the lexical channel is;
- speaker: a bonus for packets spoken by the one conversation participant the question
  names (questions about a person are mostly answered by that person's own turns); with
  ``tolerant_names`` a name also counts written in lower case, shortened or one typo off;
- temporal: for a question that asks about time ("When did ...", "How long ago ..."), a
  bonus for packets with at least one claim whose event time was resolved;
- time match: for a question that names a period ("in June", "in 2022", "August 2023"), a
  bonus for packets whose session date or a resolved event time falls in that period.

Scores are fused by value, not by rank: a channel that is confident (one very high BM25
score) keeps that confidence. Ties break by dialogue order. Two stages then may change
which K packets are kept:

- complementary selection (``complement``; MemPursuit on list questions by default): for
  questions that ask for several things, the K packets are composed from the fused top-P
  by MMR or by MemPursuit instead of taken in score order, so near-duplicates give way to
  evidence that adds something. The first ``complement_keep`` stay in score order; with
  ``pursuit_start="kept"`` (the default) they are MemPursuit's first selections, so each
  later pick is the pool packet that best explains what they leave of the query;
- an evidence-conditioned second round (``second_round_slots``): the names and keywords of
  the first-round top packets that the question does not contain re-query the lexical
  channel, and the last slots go to the best packets of that second ranking (off by default).

Which of these pay off, and by how much, is decided by leave-one-conversation-out
cross-validation in ``scripts/ablate_model_free.py --cv``.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from .address.lexical import LexicalIndex
from .config import FusionConfig
from .evidence.pursuit import mem_pursuit
from .language.names import known_name
from .language.stemming import stem_terms
from .language.timecues import is_temporal_question
from .language.timeparse import find_time_mentions, parse_session_time
from .types import Descriptor, SourcePacket

# A question that asks for several things ("What books has ...", "In what ways ...", "... both ...").
LIST_QUESTION = re.compile(
    r"^(?:what|which)\s+(?:\S+\s+){0,2}?(?:\w+(?:s|es)|people|children)\s+(?:has|have|does|do|did|is|are|were)\b"
    r"|^(?:in )?what (?:ways|kinds?|types?|sorts?)\b|\bboth\b", re.IGNORECASE)

_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september",
           "october", "november", "december")
_ISO_PERIOD = re.compile(r"(?<!\d)((?:19|20)\d{2})(?:-(0[1-9]|1[0-2])(?:-(0[1-9]|[12]\d|3[01]))?)?")
_MONTH_WORD = re.compile(r"\b(" + "|".join(_MONTHS) + r")\b", re.IGNORECASE)
_WORD = re.compile(r"[A-Za-z][A-Za-z'\-]*")

Period = tuple[int | None, int | None, int | None]  # (year, month, day); None where left open


def is_list_question(question: str) -> bool:
    """True for a question whose answer is several things spread over the conversation."""
    return LIST_QUESTION.search(question or "") is not None


# ----------------------------------------------------------------------------- documents


def session_neighbours(packets: Sequence[SourcePacket], i: int) -> tuple[int, ...]:
    """Indices of the previous and next packet when they belong to the same session as ``i``."""
    return tuple(j for j in (i - 1, i + 1)
                 if 0 <= j < len(packets) and packets[j].session_index == packets[i].session_index)


def bursts(packets: Sequence[SourcePacket]) -> list[tuple[int, ...]]:
    """Runs of consecutive packets of one session sent by one speaker, in dialogue order."""
    out: list[list[int]] = []
    for i, p in enumerate(packets):
        prev = packets[i - 1] if i else None
        if prev is not None and prev.session_index == p.session_index and prev.speaker == p.speaker:
            out[-1].append(i)
        else:
            out.append([i])
    return [tuple(b) for b in out]


def lexical_documents(
    packets: Sequence[SourcePacket],
    descriptors_by_packet: Mapping[str, Sequence[Descriptor]],
    *,
    neighbor_context: bool,
    group_bursts: bool = False,
) -> list[str]:
    """The lexical document of each packet (packets in dialogue order).

    Own text (turn, caption, claims), with ``group_bursts`` preceded and followed by the raw
    text of the other messages of its burst; with ``neighbor_context`` the raw text of the
    previous and next turn (burst) of the session around that. When every burst is one
    message the two settings give the same documents.
    """
    own = []
    for p in packets:
        parts = [p.content, p.image_caption or "", *(d.text for d in descriptors_by_packet.get(p.packet_id, ()))]
        own.append(" ".join(x for x in parts if x))
    if not group_bursts:
        if not neighbor_context:
            return own
        docs = []
        for i in range(len(packets)):
            near = session_neighbours(packets, i)
            before = [_raw(packets[j]) for j in near if j < i]
            after = [_raw(packets[j]) for j in near if j > i]
            docs.append(" ".join([*before, own[i], *after]))
        return docs
    groups = bursts(packets)
    docs = [""] * len(packets)
    for g, members in enumerate(groups):
        before: list[str] = []
        after: list[str] = []
        if neighbor_context:
            if g > 0 and packets[groups[g - 1][0]].session_index == packets[members[0]].session_index:
                before = [_raw(packets[j]) for j in groups[g - 1]]
            if g + 1 < len(groups) and packets[groups[g + 1][0]].session_index == packets[members[0]].session_index:
                after = [_raw(packets[j]) for j in groups[g + 1]]
        for i in members:
            mates_before = [_raw(packets[j]) for j in members if j < i]
            mates_after = [_raw(packets[j]) for j in members if j > i]
            docs[i] = " ".join([*before, *mates_before, own[i], *mates_after, *after])
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


# ----------------------------------------------------------------------------- query vector


def dense_query_texts(question: str, intent_query: str, cfg: FusionConfig) -> list[str]:
    """The texts the dense channel embeds for one question, in order.

    ``intent_query`` is the rule intent's query text (``QueryIntent.lexical_query``). With
    ``cfg.dense_query == "intent+question"`` the question as asked follows it, unless the
    two are the same text: the intent text repeats the question's names and keywords, which
    pulls its embedding towards them; the plain question keeps what it asks about.
    """
    if cfg.dense_query == "intent" or not question or question == intent_query:
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


# ----------------------------------------------------------------------------- names


def _one_edit_apart(a: str, b: str) -> bool:
    """True when ``a`` becomes ``b`` by one substitution, insertion, deletion or swap of
    neighbours (the typos a thumb makes); False for equal strings."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        return len(diff) == 1 or (len(diff) == 2 and diff[1] == diff[0] + 1
                                  and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]])
    short, long_ = (a, b) if len(a) < len(b) else (b, a)
    i = 0
    while i < len(short) and short[i] == long_[i]:
        i += 1
    return short[i:] == long_[i + 1:]


def tolerant_name(token: str, participants: Sequence[str]) -> str | None:
    """The participant a chat token names, allowing how people write names in chat.

    Capitalized tokens resolve as the rule extractor does (first name, or a nickname of 3+
    letters that starts it: "Mel"). A lower-case token must be the first name itself, a
    prefix of 4+ letters ("caro"), or, for names of 5+ letters, one typo away ("melanei");
    a short lower-case word ("car", "mel") is too often an ordinary word to count.
    """
    t = token.lower()
    if t.endswith("'s"):
        t = t[:-2]
    if len(t) < 3:
        return None
    if token[:1].isupper():
        name = known_name(t, participants)
        if name:
            return name
    for name in participants:
        first = (name.lower().split() or [""])[0]
        if not first:
            continue
        if t == first or (len(t) >= 4 and first.startswith(t)):
            return name
    for name in participants:
        first = (name.lower().split() or [""])[0]
        if len(first) >= 5 and len(t) >= 4 and _one_edit_apart(t, first):
            return name
    return None


def canonical_names(text: str, participants: Sequence[str]) -> str:
    """``text`` with every token that tolerantly names a participant replaced by that
    participant's first name, so "mel", "Mel" and "melanei" all index as "Melanie"."""
    def sub(m: re.Match) -> str:
        token = m.group(0)
        name = tolerant_name(token, participants)
        if not name:
            return token
        return name.split()[0] + ("'s" if token.lower().endswith("'s") else "")
    return _WORD.sub(sub, text or "")


def named_participants(question: str, participants: Sequence[str], *, tolerant: bool = False) -> list[str]:
    """Participants the question names: the name as a word (possessives included), or a
    capitalized nickname the rule extractor also resolves ("Mel" for Melanie); with
    ``tolerant``, also lower-case, shortened and one-typo spellings (``tolerant_name``)."""
    out = []
    for name in participants:
        if name and re.search(rf"(?<!\w){re.escape(name)}(?:'s)?(?!\w)", question, re.IGNORECASE):
            out.append(name)
    pattern = _WORD if tolerant else re.compile(r"(?<!\w)[A-Z][a-z]+(?!\w)")
    for token in pattern.findall(question):
        name = tolerant_name(token, participants) if tolerant else known_name(token, participants)
        if name and name not in out:
            out.append(name)
    return out


# ----------------------------------------------------------------------------- time


def periods(value: str) -> list[Period]:
    """The (year, month, day) periods a normalized time value names.

    "2023-05-08", "the week before 2023-05-08" -> [(2023, 5, 8)]; "2023-05" -> [(2023, 5, None)];
    "2022" -> [(2022, None, None)]; "in june" -> [(None, 6, None)]. A value with an ISO date is
    read from that date only.
    """
    out: list[Period] = []
    for m in _ISO_PERIOD.finditer(value or ""):
        out.append(tuple(int(g) if g else None for g in m.groups()))  # type: ignore[arg-type]
    if not out:
        out = [(None, _MONTHS.index(m.group(1).lower()) + 1, None) for m in _MONTH_WORD.finditer(value or "")]
    return list(dict.fromkeys(out))


def question_periods(question: str, anchor: dt.datetime | None = None) -> list[Period]:
    """Periods named by the question's time expressions, relative ones ("last week") resolved
    against ``anchor`` (the date the question is asked) or dropped without one."""
    out: list[Period] = []
    for mention in find_time_mentions(question or "", anchor):
        out.extend(periods(mention.value))
    return list(dict.fromkeys(out))


def packet_periods(packet: SourcePacket, descriptors: Sequence[Descriptor]) -> set[Period]:
    """Dates of a packet: its session date and its claims' resolved event times."""
    out: set[Period] = set()
    when = parse_session_time(packet.session_time) if packet.session_time else None
    if when is not None:
        out.add((when.year, when.month, when.day))
    for d in descriptors:
        out.update(periods(d.event_time))
    return out


def period_key(packet: SourcePacket, descriptors: Sequence[Descriptor]) -> tuple:
    """What a packet's periods are computed from: its session time and its claims' event times."""
    return (packet.session_time, tuple(d.event_time for d in descriptors))


def expansion_words(descriptors: Sequence[Descriptor]) -> str:
    """What a packet's expansion terms are computed from: its claims' keywords and people."""
    return " ".join(w for d in descriptors for w in (*d.keywords, *d.people))


def expansion_of(words: str) -> tuple[str, ...]:
    """The distinct stemmed expansion terms of ``expansion_words``' text, in order."""
    return tuple(dict.fromkeys(stem_terms(words)))


def _period_matches(asked: Period, have: Period) -> bool:
    """Every part the question names (year, month, day) equals the packet date's."""
    if all(a is None for a in asked):
        return False
    return all(a is None or a == h for a, h in zip(asked, have))


# ----------------------------------------------------------------------------- index


@dataclass
class FusionParts:
    """Per-text results of one ``FusionIndex.build_reusing``, keyed by what each was computed
    from. A build only reads the ``previous`` parts it is given and fills a new object, so
    parts handed to concurrent builds are never changed."""

    participants: tuple[str, ...] = ()  # the participants ``tokens`` were made canonical against
    tokens: dict[str, list[str]] = field(default_factory=dict)  # lexical document -> stemmed tokens
    periods: dict[tuple, frozenset] = field(default_factory=dict)  # (session time, event times) -> periods
    expansion: dict[str, tuple[str, ...]] = field(default_factory=dict)  # claim names/keywords -> terms


def _memo(new: dict, old: Mapping, key, compute):
    """``new[key]``, taken from ``old`` or computed once."""
    if key not in new:
        new[key] = old[key] if key in old else compute()
    return new[key]


def add_packet_rows(packets: Sequence[SourcePacket], start: int, by_packet: Mapping[str, Sequence[Descriptor]],
                    parts: FusionParts, old: FusionParts, period_rows: dict[Period, list[int]],
                    expansion_terms: list[tuple[str, ...]], dated: list[float]) -> None:
    """Add the rows of ``packets[start:]`` to ``period_rows`` (period -> rows dated then),
    ``expansion_terms`` and ``dated`` (1.0 where a claim has a resolved event time). Periods
    and expansion terms are kept in ``parts`` by what they are computed from, taken from
    ``old`` or ``parts`` itself when already there."""
    for i in range(start, len(packets)):
        p = packets[i]
        descs = by_packet.get(p.packet_id, ())
        for period in _memo(parts.periods, old.periods, period_key(p, descs),
                            lambda p=p, descs=descs: frozenset(packet_periods(p, descs))):
            period_rows.setdefault(period, []).append(i)
        words = expansion_words(descs)
        expansion_terms.append(_memo(parts.expansion, old.expansion, words, lambda words=words: expansion_of(words)))
        dated.append(float(any(d.event_time for d in descs)))


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
    period_rows: Mapping[Period, np.ndarray]  # (year, month, day) -> rows of packets dated then
    expansion_terms: tuple[tuple[str, ...], ...]  # stemmed names/keywords of each packet's claims
    tolerant_names: bool = False

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
        return cls.build_reusing(packets, descriptors_by_packet, cfg, packet_matrix=packet_matrix,
                                 context_matrix=context_matrix)[0]

    @classmethod
    def build_reusing(
        cls,
        packets: Sequence[SourcePacket],
        descriptors_by_packet: Mapping[str, Sequence[Descriptor]],
        cfg: FusionConfig,
        *,
        packet_matrix: np.ndarray | None = None,
        context_matrix: np.ndarray | None = None,
        previous: "FusionParts | None" = None,
    ) -> "tuple[FusionIndex, FusionParts]":
        """``build``, taking each per-text result (stemmed document, dated periods, expansion
        terms) from ``previous`` where its input is unchanged; returns the index and the parts
        to hand to the next build (a view reload after an append recomputes only new turns)."""
        for name, m in (("packet_matrix", packet_matrix), ("context_matrix", context_matrix)):
            if m is not None and m.shape[0] != len(packets):
                raise ValueError(f"{name} has {m.shape[0]} rows for {len(packets)} packets")
        old = previous or FusionParts()
        participants = tuple(dict.fromkeys(p.speaker for p in packets))
        docs = lexical_documents(packets, descriptors_by_packet, neighbor_context=cfg.neighbor_context,
                                 group_bursts=cfg.bursts)
        if cfg.tolerant_names:
            docs = [canonical_names(d, participants) for d in docs]
        # Canonical names depend on the participants: tokens made against others are not reused.
        old_tokens = old.tokens if old.participants == participants or not cfg.tolerant_names else {}
        parts = FusionParts(participants=participants)
        corpus = [_memo(parts.tokens, old_tokens, d, lambda d=d: stem_terms(d)) for d in docs]
        lexical = LexicalIndex(corpus, k1=cfg.bm25_k1, b=cfg.bm25_b)
        rows: dict[Period, list[int]] = {}
        expansion: list[tuple[str, ...]] = []
        dated: list[float] = []
        add_packet_rows(packets, 0, descriptors_by_packet, parts, old, rows, expansion, dated)
        index = cls.assemble(packets, lexical, cfg, packet_matrix=packet_matrix, context_matrix=context_matrix,
                             period_rows=rows, expansion_terms=expansion, dated=dated)
        return index, parts

    @classmethod
    def assemble(
        cls,
        packets: Sequence[SourcePacket],
        lexical: LexicalIndex,
        cfg: FusionConfig,
        *,
        packet_matrix: np.ndarray | None,
        context_matrix: np.ndarray | None,
        period_rows: Mapping[Period, Sequence[int]],
        expansion_terms: Sequence[tuple[str, ...]],
        dated: Sequence[float],
    ) -> "FusionIndex":
        """The index of ``packets`` from its computed parts (a build, or an append in place)."""
        speakers = tuple(p.speaker for p in packets)
        return cls(
            packet_ids=tuple(p.packet_id for p in packets),
            speakers=speakers,
            participants=tuple(dict.fromkeys(speakers)),
            lexical=lexical,
            packet_matrix=packet_matrix,
            context_matrix=context_matrix if cfg.dense_neighbor_context else None,
            dated=np.asarray(dated, dtype=np.float64),
            period_rows={k: np.asarray(v, dtype=np.int64) for k, v in period_rows.items()},
            expansion_terms=tuple(expansion_terms),
            tolerant_names=cfg.tolerant_names,
        )

    def query_terms(self, question: str) -> list[str]:
        """The question's lexical terms, names made canonical when the index is tolerant."""
        return stem_terms(canonical_names(question, self.participants) if self.tolerant_names else question)

    def time_match(self, question: str, anchor: dt.datetime | None = None) -> np.ndarray:
        """1.0 for packets dated in a period the question names, else 0 (all 0 when it names none).

        A named day matches that day; when no packet is dated that day, its month does
        (a question's date may be off by the days between an event and its telling)."""
        out = np.zeros(len(self.packet_ids))
        for asked in question_periods(question, anchor):
            for attempt in (asked, asked[:2] + (None,)):
                hit = [rows for have, rows in self.period_rows.items() if _period_matches(attempt, have)]
                for rows in hit:
                    out[rows] = 1.0
                if hit or attempt[2] is None:
                    break
        return out


# ----------------------------------------------------------------------------- scoring


@dataclass(frozen=True)
class FusedScores:
    total: np.ndarray
    channels: dict[str, np.ndarray]


def _normalized(s: np.ndarray) -> np.ndarray:
    top = float(s.max()) if s.size else 0.0
    return s / top if top > 0 else np.zeros(len(s))


def channel_weights(cfg: FusionConfig) -> dict[str, float]:
    """The weight of each channel of ``fused_scores`` under ``cfg``."""
    return {"lexical": cfg.lexical_weight, "packet": cfg.packet_weight, "speaker": cfg.speaker_weight,
            "temporal": cfg.temporal_weight, "time_match": cfg.time_match_weight}


def fused_scores(index: FusionIndex, question: str, query_vec: np.ndarray | None, cfg: FusionConfig, *,
                 anchor: dt.datetime | None = None) -> FusedScores:
    """The fused score of every packet (aligned with ``index.packet_ids``); ``anchor`` is the
    date the question is asked (its relative time expressions are resolved against it)."""
    n = len(index.packet_ids)
    channels: dict[str, np.ndarray] = {}
    if cfg.lexical_weight:
        channels["lexical"] = _normalized(index.lexical.scores(index.query_terms(question)))
    if query_vec is not None and cfg.packet_weight and index.packet_matrix is not None:
        cos = index.packet_matrix @ query_vec
        if index.context_matrix is not None:
            cos = np.maximum(cos, index.context_matrix @ query_vec)
        channels["packet"] = cos.astype(np.float64)
    if cfg.speaker_weight:
        named = named_participants(question, index.participants, tolerant=index.tolerant_names)
        bonus = np.zeros(n)
        if len(named) == 1:
            bonus[[i for i, s in enumerate(index.speakers) if s == named[0]]] = 1.0
        channels["speaker"] = bonus
    if cfg.temporal_weight:
        channels["temporal"] = index.dated if is_temporal_question(question) else np.zeros(n)
    if cfg.time_match_weight:
        channels["time_match"] = index.time_match(question, anchor)
    return FusedScores(total=combine(channels, cfg, n), channels=channels)


def combine(channels: Mapping[str, np.ndarray], cfg: FusionConfig, n: int | None = None) -> np.ndarray:
    """The weighted sum of ``fused_scores`` channels under ``cfg`` (the packet cosine divided by
    its best value first when ``packet_scale == "max"``, so it spans [.., 1] like the lexical one)."""
    weights = channel_weights(cfg)
    total = np.zeros(n if n is not None else len(next(iter(channels.values()))))
    for name, values in channels.items():
        if name == "packet" and cfg.packet_scale == "max":
            top = float(values.max()) if values.size else 0.0
            values = values / top if top > 0 else values
        total += weights[name] * values
    return total


def score_order(total: np.ndarray) -> np.ndarray:
    """Row indices by descending score, ties by dialogue order."""
    return np.lexsort((np.arange(len(total)), -total))


# ----------------------------------------------------------------------------- selection


def complementary(index: FusionIndex, total: np.ndarray, order: np.ndarray, query_vec: np.ndarray | None,
                  cfg: FusionConfig, k: int) -> list[int]:
    """K rows composed from the fused top-P (``complement_pool``): the first ``complement_keep``
    in score order, the rest by MMR (score minus ``mmr_lambda`` times the largest cosine to
    a packet already chosen) or in the order MemPursuit picks them from the pool's packet
    embeddings (packets it does not pick follow in score order); with ``pursuit_start ==
    "kept"`` the pursuit starts from the kept packets instead of an empty selection."""
    pool = [int(i) for i in order[: max(cfg.complement_pool, k)]]
    keep = min(cfg.complement_keep, k)
    chosen = pool[:keep]
    rest = pool[keep:]
    E = index.packet_matrix
    if E is None or not rest or k <= keep:
        return [int(i) for i in order[:k]]
    if cfg.complement == "pursuit":
        if query_vec is None:
            return [int(i) for i in order[:k]]
        # "empty": pursuit runs over the whole pool from an empty selection and its picks
        # that are not kept fill the free slots in pursuit order. "kept": the kept packets
        # are its first selections, so every later pick is the one that best explains what
        # they leave of the query (the residual after them).
        start = range(keep) if cfg.pursuit_start == "kept" else ()
        res = mem_pursuit(query_vec, E[pool], k=k, tau=0.0, start=start)
        picked = chosen + [pool[i] for i in res.indices if pool[i] not in chosen]
        return (picked + [i for i in pool if i not in picked])[:k]
    # MMR over the rest of the pool, redundancy measured against everything chosen so far.
    sims = E[rest] @ E[chosen].T if chosen else np.zeros((len(rest), 0))
    redundancy = sims.max(axis=1) if chosen else np.zeros(len(rest))
    base = total[rest]
    left = list(range(len(rest)))
    while len(chosen) < k and left:
        value = base[left] - cfg.mmr_lambda * redundancy[left]
        j = left[int(np.lexsort((np.asarray(left), -value))[0])]
        left.remove(j)
        chosen.append(rest[j])
        redundancy = np.maximum(redundancy, E[rest] @ E[rest[j]])
    return chosen


def second_round(index: FusionIndex, question: str, total: np.ndarray, first: Sequence[int],
                 cfg: FusionConfig, k: int) -> list[int]:
    """The first ``k - second_round_slots`` rows of ``first``, then the best rows by
    ``total + second_round_weight * lexical(new terms)`` not chosen yet, where the new terms
    are the names and keywords of the first ``second_round_read`` rows that the question
    does not contain (what the found evidence points at and the question never said)."""
    slots = min(cfg.second_round_slots, k)
    asked = set(index.query_terms(question))
    new: dict[str, None] = {}
    for i in first[: cfg.second_round_read]:
        for t in index.expansion_terms[i]:
            if t not in asked:
                new.setdefault(t, None)
    if not slots or not new:
        return list(first[:k])
    kept = list(first[: k - slots])
    again = total + cfg.second_round_weight * _normalized(index.lexical.scores(list(new)))
    taken = set(kept)
    for i in score_order(again):
        if len(kept) == k:
            break
        if int(i) not in taken:
            kept.append(int(i))
            taken.add(int(i))
    return kept


def select_rows(index: FusionIndex, question: str, total: np.ndarray, query_vec: np.ndarray | None,
                cfg: FusionConfig, k: int) -> list[int]:
    """The ``k`` rows the fused selector keeps for fused scores ``total`` (see module docstring)."""
    order = score_order(total)
    if cfg.complement != "none" and (cfg.complement_scope == "all" or is_list_question(question)):
        rows = complementary(index, total, order, query_vec, cfg, k)
    else:
        rows = [int(i) for i in order[:k]]
    if cfg.second_round_slots:
        rows = second_round(index, question, total, rows, cfg, k)
    return rows


def select_fused(index: FusionIndex, question: str, query_vec: np.ndarray | None, cfg: FusionConfig,
                 k: int, *, anchor: dt.datetime | None = None) -> list[str]:
    """The ``k`` packets the fused selector keeps, best first (``anchor``: see ``fused_scores``)."""
    total = fused_scores(index, question, query_vec, cfg, anchor=anchor).total
    return [index.packet_ids[i] for i in select_rows(index, question, total, query_vec, cfg, k)]


def fused_ranking(index: FusionIndex, question: str, query_vec: np.ndarray | None, cfg: FusionConfig,
                  n: int, *, anchor: dt.datetime | None = None) -> list[str]:
    """The first ``n`` packets by fused score alone (the pool handed to an LLM scheduler)."""
    total = fused_scores(index, question, query_vec, cfg, anchor=anchor).total
    return [index.packet_ids[i] for i in score_order(total)[:n]]
