"""Retention writers: which source evidence to keep under a token budget, before any question.

Every writer reads the stream of SourcePackets of one namespace in dialogue order, with the
descriptors the extractor wrote for each (the retrieval keys), and keeps capsules whose
excerpt tokens never exceed ``budget`` after a turn is written: when a new capsule
overflows the budget, capsules are evicted, lowest retention priority first (ties: the
older one), until it fits. What differs is the priority:

- ``ModelFreeWriter``: informativeness of the excerpt (names other than the speaker, dates,
  a first-person statement, numbers, keywords; a question or small talk scores less) times
  its novelty against what is kept (the share of its key stems no kept capsule has: a
  write-time residual coverage), per token to the power ``size_power``. A turn longer than
  ``max_tokens`` is cut into pieces of consecutive sentences that compete for the budget on
  their own, each scored by its own sentences' keys; at the end the kept pieces of a turn are
  joined into one capsule, so that a reader spends one slot on it (``cut="span"`` keeps only
  the turn's best span instead). A later capsule of the same speaker whose keys overlap an
  earlier one's by ``supersede_overlap`` (Jaccard) marks that one superseded and lowers its
  priority by ``supersede_decay``.
- ``LLMWriter``: a prompted writer per session (constrained JSON: which turns to keep, an
  importance 1-5, an optional verbatim span); a session whose answer cannot be read falls
  back to the model-free priorities for that session.
- ``RecentWriter``: the most recent turns. ``RandomWriter``: a seeded random sample.
- ``SummaryWriter``: one extractive summary per session (the session's most informative
  sentences in dialogue order, each session cut to an equal share of the budget).
"""

from __future__ import annotations

import hashlib
import heapq
import logging
import re
from dataclasses import dataclass, replace
from typing import Mapping, Protocol, Sequence

from pydantic import BaseModel, ConfigDict, Field

from ..address.extract_rule import is_low_value, split_sentences
from ..errors import ConfigError, OutputValidationError, TransportError
from ..language.names import proper_names
from ..language.stemming import stem_terms
from ..language.tokens import count_tokens
from ..llm.interface import LLMRequest, LLMResponse, Message, spec_for
from ..protocols import ModelClient
from ..types import Descriptor, SourcePacket
from .capsules import Capsule, RetentionResult

logger = logging.getLogger(__name__)

__all__ = ["Writer", "ModelFreeWriter", "LLMWriter", "RecentWriter", "RandomWriter", "SummaryWriter",
           "WRITERS", "make_writer", "source_tokens", "informativeness", "turn_capsule", "sentence_descriptors",
           "WRITER_PROMPT_VERSION"]

WRITER_PROMPT_VERSION = "ember-writer-v1"
_FIRST_PERSON = re.compile(r"\b(I|I'm|I've|I'd|I'll|my|mine|we|our|we're|we've)\b")
_NUMBER = re.compile(r"\d|\b(one|two|three|four|five|six|seven|eight|nine|ten|twenty|hundred|thousand)\b", re.I)

Descriptors = Mapping[str, Sequence[Descriptor]]


class Writer(Protocol):
    name: str

    def retain(self, packets: Sequence[SourcePacket], descriptors_by_packet: Descriptors, budget: int,
               *, namespace: str | None = None) -> RetentionResult: ...


# ----------------------------------------------------------------------------- keys and scores


def _keys(packet: SourcePacket, descs: Sequence[Descriptor], text: str) -> dict[str, tuple[str, ...]]:
    names: dict[str, None] = {}
    for d in descs:
        for n in d.people:
            names.setdefault(n, None)
    for n in proper_names(text):
        names.setdefault(n, None)
    names.pop(packet.speaker, None)
    return {
        "claims": tuple(d.text for d in descs),
        "names": tuple(names),
        "keywords": tuple(dict.fromkeys(k for d in descs for k in d.keywords)),
        "dates": tuple(dict.fromkeys(d.event_time for d in descs if d.event_time)),
    }


def informativeness(text: str, names: Sequence[str], dates: Sequence[str], keywords: Sequence[str],
                    speaker_names: Sequence[str] = ()) -> float:
    """How much an excerpt is likely to be asked about later (no question is known yet)."""
    s = text.strip()
    if not s or is_low_value(s, list(speaker_names)):
        return 0.1
    score = 0.5
    score += min(len(names), 3) * 1.0
    score += min(len(dates), 2) * 1.0
    score += 0.5 if _NUMBER.search(s) else 0.0
    score += 1.0 if _FIRST_PERSON.search(s) and not s.endswith("?") else 0.0
    score += min(len(keywords), 5) * 0.3
    if s.endswith("?"):
        score -= 0.5
    return max(score, 0.1)


def _key_stems(c: Capsule) -> set[str]:
    out: set[str] = set()
    for v in (*c.names, *c.keywords, *c.dates):
        out.update(stem_terms(v))
    return out


def _text_of(p: SourcePacket) -> str:
    return p.content + (f" (image: {p.image_caption})" if p.image_caption else "")


def sentence_descriptors(sentences: Sequence[str], descs: Sequence[Descriptor]) -> list[list[Descriptor]]:
    """The descriptors cut from each sentence of a turn: each descriptor goes to the sentence
    sharing the largest share of its claim's stems (ties: the earlier sentence; a claim sharing
    no stem with any sentence goes nowhere). A span's keys are then its own sentences' keys,
    not the whole turn's."""
    stems = [set(stem_terms(s)) for s in sentences]
    out: list[list[Descriptor]] = [[] for _ in sentences]
    for d in descs:
        own = set(stem_terms(d.text))
        if not own or not sentences:
            continue
        share = [len(own & st) / len(own) for st in stems]
        best = max(range(len(sentences)), key=lambda i: (share[i], -i))
        if share[best] > 0:
            out[best].append(d)
    return out


def turn_capsule(p: SourcePacket, descs: Sequence[Descriptor], *, max_tokens: int | None = None,
                 speakers: Sequence[str] = (), span_power: float = 0.5) -> Capsule:
    """The capsule of one turn: the whole turn, or its most informative contiguous sentence
    span of at most ``max_tokens`` tokens (informativeness of the span's own keys per
    token^0.5, ties: the earlier). The capsule's keys are those of the kept sentences."""
    text, span = _text_of(p), "turn"
    if max_tokens is not None and count_tokens(text) > max_tokens:
        sents = split_sentences(text)
        per_sentence = sentence_descriptors(sents, descs)
        best: tuple[float, int, str, list[Descriptor]] | None = None
        for i in range(len(sents)):
            for j in range(i + 1, len(sents) + 1):
                piece = " ".join(sents[i:j])
                n = count_tokens(piece)
                if n > max_tokens:
                    break
                own = [d for ds in per_sentence[i:j] for d in ds]
                k = _keys(p, own, piece)
                dens = informativeness(piece, k["names"], k["dates"], k["keywords"], speakers) / max(n, 1) ** span_power
                if best is None or dens > best[0] + 1e-12:
                    best = (dens, i, piece, own)
        if best is not None:
            text, span, descs = best[2], "sentences", best[3]
    k = _keys(p, descs, text)
    return Capsule(capsule_id=p.packet_id, sources=(p.packet_id,), session_index=p.session_index,
                   session_id=p.session_id, session_time=p.session_time, speaker=p.speaker, text=text,
                   claims=k["claims"], names=k["names"], keywords=k["keywords"], dates=k["dates"],
                   ordinal=p.ordinal, span=span)


def turn_pieces(p: SourcePacket, descs: Sequence[Descriptor], *, max_tokens: int) -> list[Capsule]:
    """A turn as capsules of at most ``max_tokens`` tokens each: the whole turn when it fits,
    else runs of consecutive sentences packed greedily in dialogue order (a single sentence
    longer than ``max_tokens`` is a piece of its own). Piece ``k`` of a cut turn has the id
    ``<packet id>#<k>`` (from 1); each piece's keys are those of its own sentences."""
    text = _text_of(p)
    if count_tokens(text) <= max_tokens:
        return [turn_capsule(p, descs)]
    sents = split_sentences(text)
    per_sentence = sentence_descriptors(sents, descs)
    runs: list[list[int]] = []
    used = 0
    for i, sent in enumerate(sents):
        n = count_tokens(sent)
        if runs and used + n <= max_tokens:
            runs[-1].append(i)
            used += n
        else:
            runs.append([i])
            used = n
    out = []
    for k, run in enumerate(runs, start=1):
        piece = " ".join(sents[i] for i in run)
        keys = _keys(p, [d for i in run for d in per_sentence[i]], piece)
        out.append(Capsule(capsule_id=f"{p.packet_id}#{k}", sources=(p.packet_id,), session_index=p.session_index,
                           session_id=p.session_id, session_time=p.session_time, speaker=p.speaker, text=piece,
                           claims=keys["claims"], names=keys["names"], keywords=keys["keywords"],
                           dates=keys["dates"], ordinal=p.ordinal, span="sentences", piece=k))
    return out


def merge_pieces(capsules: Sequence[Capsule]) -> list[Capsule]:
    """Kept pieces of one turn as one capsule (dialogue order): their texts joined by a space
    where they are adjacent and by " … " where pieces between them were dropped, their keys
    united, the highest value kept; other capsules unchanged. A reader then spends one slot on
    a turn, however it was cut."""
    groups: dict[str, list[Capsule]] = {}
    order: list[str] = []
    for c in capsules:
        key = c.sources[0] if c.piece else f"\x00{c.capsule_id}"
        if key not in groups:
            order.append(key)
        groups.setdefault(key, []).append(c)
    out = []
    for key in order:
        g = sorted(groups[key], key=lambda c: c.piece)
        if len(g) == 1 and not g[0].piece:
            out.append(g[0])
            continue
        text = g[0].text
        for a, b in zip(g, g[1:]):
            text += (" " if b.piece == a.piece + 1 else " … ") + b.text
        first = g[0]

        def union(field: str) -> tuple[str, ...]:
            return tuple(dict.fromkeys(v for c in g for v in getattr(c, field)))

        out.append(replace(first, capsule_id=first.sources[0], text=text, claims=union("claims"),
                           names=union("names"), keywords=union("keywords"), dates=union("dates"),
                           value=max(c.value for c in g), piece=0,
                           superseded_by=next((c.superseded_by for c in g if c.superseded_by), None)))
    # A piece superseded by a piece of a later turn names that turn's joined capsule.
    return [replace(c, superseded_by=_turn_id(c.superseded_by)) if c.superseded_by else c for c in out]


def _turn_id(capsule_id: str) -> str:
    head, sep, tail = capsule_id.rpartition("#")
    return head if sep and tail.isdigit() else capsule_id


def _density(value: float, tokens: int, power: float) -> float:
    return value / max(tokens, 1) ** power


class _Kept:
    """Capsules kept so far, with eviction by priority (lowest first, ties: the older), how
    many kept capsules hold each key stem (the novelty of the next capsule reads it) and which
    kept capsules hold it (the candidates a new capsule may supersede). The eviction order is
    a heap with stale entries skipped, so that writing a long stream is not quadratic."""

    def __init__(self, budget: int) -> None:
        if budget < 0:
            raise ConfigError(f"a retention budget must be >= 0 tokens, got {budget}")
        self.budget = budget
        self.items: dict[str, tuple[Capsule, float]] = {}
        self.tokens = 0
        self.stem_count: dict[str, int] = {}
        self._holders: dict[str, dict[str, None]] = {}  # stem -> kept capsule ids, insertion order
        self._stems: dict[str, set[str]] = {}
        self._heap: list[tuple[float, int, int, str, int]] = []
        self._entry: dict[str, int] = {}  # capsule id -> its live heap entry
        self._seq = 0

    def stems(self, c: Capsule) -> set[str]:
        if c.capsule_id not in self._stems:
            self._stems[c.capsule_id] = _key_stems(c)
        return self._stems[c.capsule_id]

    def sharing(self, stems: set[str]) -> list[str]:
        """Ids of kept capsules holding at least one of ``stems`` (first kept first)."""
        ids: dict[str, None] = {}
        for st in stems:
            ids.update(self._holders.get(st, {}))
        return sorted(ids, key=lambda i: (self.items[i][0].ordinal, self.items[i][0].piece, i))

    def _push(self, c: Capsule, priority: float) -> None:
        self._seq += 1
        self._entry[c.capsule_id] = self._seq
        heapq.heappush(self._heap, (priority, c.ordinal, c.piece, c.capsule_id, self._seq))

    def _drop(self, capsule_id: str) -> None:
        c = self.items.pop(capsule_id)[0]
        self._entry.pop(capsule_id, None)
        self.tokens -= c.tokens
        for st in self.stems(c):
            self.stem_count[st] -= 1
            self._holders[st].pop(capsule_id, None)

    def _evict_one(self) -> None:
        while self._heap:
            _, _, _, cid, seq = heapq.heappop(self._heap)
            if self._entry.get(cid) == seq:
                self._drop(cid)
                return

    def add(self, c: Capsule, priority: float) -> None:
        if c.capsule_id in self.items:
            self._drop(c.capsule_id)
        self._stems.pop(c.capsule_id, None)
        self.items[c.capsule_id] = (c, priority)
        self._push(c, priority)
        self.tokens += c.tokens
        for st in self.stems(c):
            self.stem_count[st] = self.stem_count.get(st, 0) + 1
            self._holders.setdefault(st, {})[c.capsule_id] = None
        while self.tokens > self.budget and self.items:
            self._evict_one()

    def update(self, c: Capsule, priority: float) -> None:
        """Change a kept capsule's metadata or priority (its text and keys stay)."""
        self.items[c.capsule_id] = (c, priority)
        self._push(c, priority)

    def result(self, writer: str, source_tokens: int, calls: int = 0, *, merge: bool = False) -> RetentionResult:
        """The kept capsules in dialogue order; with ``merge`` the pieces of a turn as one
        capsule (``merge_pieces``), evicting lowest priority first while the " … " marks of
        dropped pieces between kept ones would overflow the budget."""
        while True:
            caps = sorted((c for c, _ in self.items.values()), key=lambda c: (c.ordinal, c.piece, c.capsule_id))
            if not merge:
                return RetentionResult(writer, self.budget, tuple(caps), source_tokens, calls)
            merged = merge_pieces(caps)
            if sum(c.tokens for c in merged) <= self.budget or not self.items:
                return RetentionResult(writer, self.budget, tuple(merged), source_tokens, calls)
            self._evict_one()


def source_tokens(packets: Sequence[SourcePacket]) -> int:
    """The source-evidence tokens of a stream of turns (what a budget is a share of)."""
    return sum(count_tokens(_text_of(p)) for p in packets)


# ----------------------------------------------------------------------------- writers


@dataclass
class ModelFreeWriter:
    """Informativeness x novelty per token^size_power, pieces of long turns, supersession
    (module docstring). ``max_tokens``: the longest piece (the ``span`` cut: the longest span)."""

    max_tokens: int = 8  # the leave-one-conversation-out pick on locomo_dev4 (docs/decisions/2026-12-02-ember-retention.md)
    size_power: float = 0.5
    span_power: float = 0.5  # the span cut's informativeness per token^span_power
    cut: str = "pieces"  # "pieces": a long turn is several capsules (turn_pieces); "span": its one best span
    merge: bool = True  # with pieces: the kept pieces of a turn are read as one capsule (merge_pieces)
    novelty_floor: float = 0.5  # priority multiplier of a capsule that adds no new key
    supersede_overlap: float = 0.6
    supersede_decay: float = 0.8
    name: str = "model-free"

    def __post_init__(self) -> None:
        if self.cut not in ("pieces", "span"):
            raise ConfigError(f"the model-free writer cuts long turns into 'pieces' or one 'span', got {self.cut!r}")
        if self.max_tokens < 1:
            raise ConfigError(f"the model-free writer's max_tokens must be >= 1, got {self.max_tokens}")

    def capsules_of(self, p: SourcePacket, descs: Sequence[Descriptor], speakers: Sequence[str]) -> list[Capsule]:
        """The capsules one turn is written as: its pieces, or its one best span."""
        if self.cut == "pieces":
            return turn_pieces(p, descs, max_tokens=self.max_tokens)
        return [turn_capsule(p, descs, max_tokens=self.max_tokens, speakers=speakers, span_power=self.span_power)]

    @property
    def merges(self) -> bool:
        return self.cut == "pieces" and self.merge

    def priority(self, c: Capsule, kept_stems: Mapping[str, int], speakers: Sequence[str]) -> float:
        info = informativeness(c.text, c.names, c.dates, c.keywords, speakers)
        stems = _key_stems(c)
        novelty = (sum(1 for s in stems if not kept_stems.get(s)) / len(stems)) if stems else 0.0
        return _density(info * (self.novelty_floor + (1 - self.novelty_floor) * novelty), c.tokens, self.size_power)

    def write(self, kept: _Kept, c: Capsule, speakers: Sequence[str], value: float | None = None) -> None:
        """Write one capsule into ``kept`` (its priority from ``value`` when given, else scored)."""
        pr = self.priority(c, kept.stem_count, speakers) if value is None else _density(value, c.tokens,
                                                                                        self.size_power)
        new = _key_stems(c)
        if new:
            # Only a capsule sharing a stem can reach a positive overlap.
            ids = kept.sharing(new) if self.supersede_overlap > 0 else list(kept.items)
            for old, opr in [kept.items[i] for i in ids]:
                if old.speaker != c.speaker or old.superseded_by is not None or old.sources == c.sources:
                    continue
                have = kept.stems(old)
                if have and len(have & new) / len(have | new) >= self.supersede_overlap:
                    kept.update(old.superseded(c.capsule_id), opr * self.supersede_decay)
        kept.add(replace(c, value=pr), pr)

    def retain(self, packets: Sequence[SourcePacket], descriptors_by_packet: Descriptors, budget: int,
               *, namespace: str | None = None) -> RetentionResult:
        kept = _Kept(budget)
        speakers = sorted({p.speaker for p in packets})
        for p in packets:
            for c in self.capsules_of(p, descriptors_by_packet.get(p.packet_id, ()), speakers):
                self.write(kept, c, speakers)
        return kept.result(self.name, source_tokens(packets), merge=self.merges)


@dataclass
class RecentWriter:
    """Keep the most recent whole turns that fit."""

    name: str = "recent"

    def retain(self, packets: Sequence[SourcePacket], descriptors_by_packet: Descriptors, budget: int,
               *, namespace: str | None = None) -> RetentionResult:
        kept = _Kept(budget)
        for p in packets:
            kept.add(turn_capsule(p, descriptors_by_packet.get(p.packet_id, ())), float(p.ordinal))
        return kept.result(self.name, source_tokens(packets))


@dataclass
class RandomWriter:
    """Keep a seeded random sample of whole turns (each turn's priority is a hash of the
    seed and its id, so the sample does not depend on the order of other namespaces)."""

    seed: int = 0
    name: str = "random"

    def priority(self, packet_id: str) -> float:
        h = hashlib.sha256(f"{self.seed}:{packet_id}".encode()).digest()
        return int.from_bytes(h[:8], "big") / 2 ** 64

    def retain(self, packets: Sequence[SourcePacket], descriptors_by_packet: Descriptors, budget: int,
               *, namespace: str | None = None) -> RetentionResult:
        kept = _Kept(budget)
        for p in packets:
            kept.add(turn_capsule(p, descriptors_by_packet.get(p.packet_id, ())), self.priority(p.packet_id))
        return kept.result(self.name, source_tokens(packets))


@dataclass
class SummaryWriter:
    """One extractive summary capsule per session, every session cut to budget / sessions
    (its informative sentences, best first while they fit, shown in dialogue order)."""

    name: str = "summary"

    def retain(self, packets: Sequence[SourcePacket], descriptors_by_packet: Descriptors, budget: int,
               *, namespace: str | None = None) -> RetentionResult:
        speakers = sorted({p.speaker for p in packets})
        sessions: dict[int, list[SourcePacket]] = {}
        for p in packets:
            sessions.setdefault(p.session_index, []).append(p)
        share = budget // max(len(sessions), 1)
        caps: list[Capsule] = []
        for idx in sorted(sessions):
            ps = sessions[idx]
            sents: list[tuple[float, int, SourcePacket, str, list[Descriptor]]] = []
            for p in ps:
                split = split_sentences(_text_of(p))
                for s, own in zip(split, sentence_descriptors(split, descriptors_by_packet.get(p.packet_id, ()))):
                    k = _keys(p, own, s)  # a sentence is scored by its own keys, not its turn's
                    sents.append((informativeness(s, k["names"], k["dates"], k["keywords"], speakers),
                                  len(sents), p, s, own))
            chosen: list[tuple[int, SourcePacket, str, list[Descriptor]]] = []
            used = 0
            for info, pos, p, s, own in sorted(sents, key=lambda x: (-x[0], x[1])):
                if info <= 0.1:  # small talk is no summary, even when it would fit
                    break
                n = count_tokens(f"{p.speaker}: {s}")
                if used + n <= share:
                    chosen.append((pos, p, s, own))
                    used += n
            if not chosen:
                continue
            chosen.sort(key=lambda x: x[0])
            text = " ".join(f"{p.speaker}: {s}" for _, p, s, _ in chosen)
            srcs = tuple(dict.fromkeys(p.packet_id for _, p, _, _ in chosen))
            descs = [d for _, _, _, own in chosen for d in own]
            first = chosen[0][1]
            k = _keys(first, descs, text)
            caps.append(Capsule(capsule_id=f"{first.session_id}:summary", sources=srcs,
                                session_index=first.session_index, session_id=first.session_id,
                                session_time=first.session_time, speaker=first.speaker, text=text,
                                claims=k["claims"], names=k["names"], keywords=k["keywords"], dates=k["dates"],
                                ordinal=first.ordinal, span="summary"))
        return RetentionResult(self.name, budget, tuple(caps), source_tokens(packets))


# ----------------------------------------------------------------------------- LLM writer


class KeepItem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    turn: str = Field(description="the label of a message to keep, e.g. T003")
    importance: int = Field(ge=1, le=5, description="5: facts a later question is most likely to need")
    span: str = Field(default="", description="optional: the words of the message to keep, copied exactly")


class WriterOutput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    keep: list[KeepItem] = Field(default_factory=list)


_WRITER_SYSTEM = (
    "You decide what to remember from one session of a long conversation, before knowing any "
    "future question. Keep messages with lasting facts: names, dates, plans, preferences, events, "
    "numbers. Give each kept message an importance from 1 to 5 and, if only part of it matters, "
    "copy that part exactly as the span. Reply with JSON only."
)


class LLMWriter:
    """A prompted capsule writer: one request per session (all sessions in one batch); the
    model's importance is the capsule's value, eviction as the model-free writer's (per token,
    lowest first). A span that is not verbatim in its turn is replaced by the whole turn."""

    name = "llm"

    def __init__(self, client: ModelClient, *, max_chars: int = 400, max_tokens: int = 512,
                 fallback: ModelFreeWriter | None = None) -> None:
        self.client, self.max_chars, self.max_tokens = client, max_chars, max_tokens
        self.fallback = fallback or ModelFreeWriter()
        self.failed_sessions: list[str] = []

    def request(self, session: Sequence[SourcePacket], namespace: str | None) -> LLMRequest:
        lines = "\n".join(f"T{i + 1:03d} {p.speaker}: {_text_of(p)[: self.max_chars]}" for i, p in enumerate(session))
        user = f"Session time: {session[0].session_time}\n\n{lines}\n\nWhich messages should be kept?"
        return LLMRequest(messages=(Message("system", _WRITER_SYSTEM), Message("user", user)), stage="retain",
                          output=spec_for(WriterOutput), max_tokens=self.max_tokens,
                          prompt_version=WRITER_PROMPT_VERSION, namespace=namespace)

    def retain(self, packets: Sequence[SourcePacket], descriptors_by_packet: Descriptors, budget: int,
               *, namespace: str | None = None) -> RetentionResult:
        speakers = sorted({p.speaker for p in packets})
        sessions: dict[int, list[SourcePacket]] = {}
        for p in packets:
            sessions.setdefault(p.session_index, []).append(p)
        order = sorted(sessions)
        responses = self.client.complete_many([self.request(sessions[i], namespace) for i in order])
        kept = _Kept(budget)
        self.failed_sessions = []
        for idx, resp in zip(order, responses):
            ps = sessions[idx]
            value: dict[str, tuple[float, str]] = {}
            if isinstance(resp, LLMResponse):
                out = resp.validated if isinstance(resp.validated, WriterOutput) else WriterOutput.model_validate(resp.parsed)
                labels = {f"T{i + 1:03d}": p for i, p in enumerate(ps)}
                for item in out.keep:
                    p = labels.get(item.turn.strip().upper())
                    if p is not None and p.packet_id not in value:
                        value[p.packet_id] = (float(item.importance), item.span.strip())
                for p in ps:  # turns the model did not keep are written last-priority
                    descs = descriptors_by_packet.get(p.packet_id, ())
                    imp, span = value.get(p.packet_id, (0.05, ""))
                    c = turn_capsule(p, descs)
                    if span and span in c.text and span != c.text:
                        # The span's keys: those of the sentences it is in or holds, not the turn's.
                        sents = split_sentences(c.text)
                        own = [d for sent, ds in zip(sents, sentence_descriptors(sents, descs))
                               if sent in span or span in sent for d in ds]
                        k = _keys(p, own, span)
                        c = replace(c, text=span, span="sentences", claims=k["claims"], names=k["names"],
                                    keywords=k["keywords"], dates=k["dates"])
                    self.fallback.write(kept, c, speakers, value=imp)
            else:
                if not isinstance(resp, (OutputValidationError, TransportError)):
                    raise resp
                self.failed_sessions.append(ps[0].session_id)
                logger.info("retention writer fell back to model-free on %s: %s", ps[0].session_id,
                            type(resp).__name__)
                for p in ps:
                    for c in self.fallback.capsules_of(p, descriptors_by_packet.get(p.packet_id, ()), speakers):
                        self.fallback.write(kept, c, speakers)
        return kept.result(self.name, source_tokens(packets), calls=len(order), merge=self.fallback.merges)


WRITERS = ("model-free", "llm", "recent", "random", "summary")


def make_writer(name: str, *, client: ModelClient | None = None, seed: int = 0) -> Writer:
    """The writer called ``name`` (one of ``WRITERS``)."""
    if name == "model-free":
        return ModelFreeWriter()
    if name == "recent":
        return RecentWriter()
    if name == "random":
        return RandomWriter(seed=seed)
    if name == "summary":
        return SummaryWriter()
    if name == "llm":
        if client is None:
            raise ConfigError("the LLM retention writer needs a model backend")
        return LLMWriter(client)
    raise ConfigError(f"unknown retention writer {name!r}; expected one of {', '.join(WRITERS)}")
