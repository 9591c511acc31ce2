"""MERA: missing-evidence retrieval rounds (Missing-Evidence Retrieval Augmentation).

A question keeps an *evidence state* of its own, apart from the global memory: the packets
verified as evidence so far and the pieces still missing. Each round a planner reads the
question and the verified evidence and either says "enough" or writes follow-up queries,
each aimed at one missing piece; every query searches the whole memory (not the evidence's
neighbourhood); the new hits are verified and the verified ones are merged into the state.
The final packet set is chosen from the union of the first selection and the verified hits,
within the same packet budget K0 as the path without rounds.

What goes in: the question, the first selection (best first), a ``search`` callable
``query -> [(packet id, score), ...]`` over the whole memory, the packets and descriptors of
the view, a planner and a verifier. What comes out: ``MeraResult`` (final ids, the state's
rounds with their queries, hits, verified packets and tokens, and the cumulative evidence
set after each round, which the harness scores as the per-round recall curve).

Planners and verifiers come in two kinds each:

- ``RulePlanner`` / ``RuleVerifier``: no model. The planner's missing pieces are the names,
  dates and keywords of the verified evidence that the question does not contain; the
  verifier accepts a hit that shares a name, date or keyword with the question or the
  evidence and whose search score is above a share of the query's best score.
- ``LLMPlanner`` / ``LLMVerifier``: prompted, with JSON constrained to a pydantic schema,
  through the package's ``ModelClient`` (so every response is cached under its full request
  identity and counted once). A plan the model gets wrong is repaired (empty, duplicate and
  surplus queries dropped) or, when it cannot be read at all, replaced by the rule planner's
  plan with the failure recorded; a verification that fails falls back to the rule check.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, Sequence

from pydantic import BaseModel, ConfigDict, Field

from ..errors import OutputValidationError, TransportError
from ..language.stemming import stem_terms
from ..llm.interface import LLMRequest, LLMResponse, Message, spec_for, stable_hash
from ..protocols import ModelClient
from ..types import Descriptor, SourcePacket

logger = logging.getLogger(__name__)

__all__ = [
    "PlannedQuery", "Plan", "Verdict", "RoundRecord", "EvidenceState", "MeraResult", "Planner", "Verifier",
    "RulePlanner", "RuleVerifier", "LLMPlanner", "LLMVerifier", "evidence_cues", "run_mera", "merge_final",
    "PLAN_PROMPT_VERSION", "VERIFY_PROMPT_VERSION",
]

PLAN_PROMPT_VERSION = "mera-plan-v1"
VERIFY_PROMPT_VERSION = "mera-verify-v1"

Search = Callable[[str], Sequence[tuple[str, float]]]


# ----------------------------------------------------------------------------- state


@dataclass(frozen=True)
class PlannedQuery:
    """One follow-up query and the missing piece it targets."""

    query: str
    missing: str


@dataclass(frozen=True)
class Plan:
    """A planner's answer for one round. ``source``: "rule", "llm" or "fallback" (the LLM's
    plan could not be read and the rule plan was used; ``error`` names why); ``repaired``:
    the LLM plan was changed to be usable (queries dropped)."""

    queries: tuple[PlannedQuery, ...]
    enough: bool
    source: str
    repaired: bool = False
    error: str = ""
    tokens: int = 0


@dataclass(frozen=True)
class Verdict:
    """Whether one candidate packet is evidence for the question, and the span that shows it."""

    packet_id: str
    accepted: bool
    span: str = ""
    source: str = "rule"


@dataclass(frozen=True)
class RoundRecord:
    """One round of the evidence state: its plan, the new hits searched, those verified."""

    index: int
    plan: Plan
    hits: tuple[str, ...]
    verified: tuple[str, ...]
    tokens: int  # planner + verifier tokens spent in this round


@dataclass
class EvidenceState:
    """The question's evidence state: verified packets in the order found, the pieces asked
    for so far, the packets already judged. Separate from (and never written to) the memory."""

    question: str
    verified: list[str] = field(default_factory=list)
    judged: set[str] = field(default_factory=set)
    asked: list[str] = field(default_factory=list)  # missing pieces already queried
    rounds: list[RoundRecord] = field(default_factory=list)
    tokens: int = 0


@dataclass(frozen=True)
class MeraResult:
    packet_ids: tuple[str, ...]  # the final set, at most the budget, best first
    first: tuple[str, ...]  # the selection before any round
    cumulative: tuple[tuple[str, ...], ...]  # first selection u verified hits, after round 0, 1, ..
    rounds: tuple[RoundRecord, ...]
    stopped: str  # "enough", "round_limit", "token_budget", "no_hits"
    tokens: int
    round0_tokens: int = 0  # the verification of the first selection

    def trace(self) -> dict[str, Any]:
        return {
            "stopped": self.stopped, "tokens": self.tokens, "round0_tokens": self.round0_tokens,
            "rounds": [{"index": r.index, "queries": [[q.query, q.missing] for q in r.plan.queries],
                        "enough": r.plan.enough, "plan_source": r.plan.source, "repaired": r.plan.repaired,
                        "error": r.plan.error, "hits": list(r.hits), "verified": list(r.verified),
                        "tokens": r.tokens} for r in self.rounds],
            "cumulative": [list(c) for c in self.cumulative],
        }


class Planner(Protocol):
    def plan(self, question: str, evidence: Sequence[SourcePacket], asked: Sequence[str],
             *, namespace: str | None = None) -> Plan: ...


class Verifier(Protocol):
    def verify(self, question: str, evidence: Sequence[SourcePacket], candidates: Sequence[tuple[SourcePacket, float]],
               *, best_score: float, namespace: str | None = None) -> tuple[list[Verdict], int]: ...


# ----------------------------------------------------------------------------- cues


def evidence_cues(packet: SourcePacket, descriptors: Sequence[Descriptor]) -> list[str]:
    """The names, dates and keywords of one packet's claims, in claim order, distinct."""
    out: dict[str, None] = {}
    for d in descriptors:
        for value in (*d.people, d.event_time, *d.keywords):
            value = (value or "").strip()
            if value and value.lower() != packet.speaker.lower():
                out.setdefault(value, None)
    return list(out)


def _stems(text: str) -> set[str]:
    return set(stem_terms(text))


# ----------------------------------------------------------------------------- rule planner / verifier


class RulePlanner:
    """Follow-up queries from what the verified evidence names and the question does not.

    Each cue (a claim's person, event time or keyword) of the first ``read`` verified packets
    whose stems are not all in the question counts once per packet that has it; the
    ``queries`` cues with the highest count (ties: first seen) not asked before become
    queries ``"<cue> <question>"``, so the search reads the question's subject together with
    the piece the evidence points at. No cue left: "enough".
    """

    def __init__(self, descriptors_by_packet: Mapping[str, Sequence[Descriptor]], *, queries: int = 3,
                 read: int = 5) -> None:
        self.descriptors_by_packet = descriptors_by_packet
        self.queries = queries
        self.read = read

    def missing_cues(self, question: str, evidence: Sequence[SourcePacket], asked: Sequence[str]) -> list[str]:
        in_question = _stems(question)
        done = {a.lower() for a in asked}
        count: dict[str, int] = {}
        first: dict[str, int] = {}
        for p in evidence[: self.read]:
            for cue in evidence_cues(p, self.descriptors_by_packet.get(p.packet_id, ())):
                stems = _stems(cue)
                if not stems or stems <= in_question or cue.lower() in done:
                    continue
                count[cue] = count.get(cue, 0) + 1
                first.setdefault(cue, len(first))
        return sorted(count, key=lambda c: (-count[c], first[c]))

    def plan(self, question: str, evidence: Sequence[SourcePacket], asked: Sequence[str],
             *, namespace: str | None = None) -> Plan:
        cues = self.missing_cues(question, evidence, asked)[: self.queries]
        if not cues:
            return Plan(queries=(), enough=True, source="rule")
        return Plan(queries=tuple(PlannedQuery(f"{c} {question}", c) for c in cues), enough=False, source="rule")


class RuleVerifier:
    """Accept a hit whose search score is at least ``threshold`` times the query's best and
    that shares a stemmed name, date or keyword with the question or the verified evidence."""

    def __init__(self, descriptors_by_packet: Mapping[str, Sequence[Descriptor]], *, threshold: float = 0.5) -> None:
        self.descriptors_by_packet = descriptors_by_packet
        self.threshold = threshold

    def _terms(self, p: SourcePacket) -> set[str]:
        out = _stems(p.content)
        for cue in evidence_cues(p, self.descriptors_by_packet.get(p.packet_id, ())):
            out |= _stems(cue)
        return out

    def accepts(self, question: str, evidence: Sequence[SourcePacket], candidate: SourcePacket, score: float,
                best_score: float) -> bool:
        if best_score > 0 and score < self.threshold * best_score:
            return False
        context = _stems(question)
        for p in evidence:
            for cue in evidence_cues(p, self.descriptors_by_packet.get(p.packet_id, ())):
                context |= _stems(cue)
        return bool(self._terms(candidate) & context)

    def verify(self, question: str, evidence: Sequence[SourcePacket], candidates: Sequence[tuple[SourcePacket, float]],
               *, best_score: float, namespace: str | None = None) -> tuple[list[Verdict], int]:
        return [Verdict(p.packet_id, self.accepts(question, evidence, p, s, best_score)) for p, s in candidates], 0


# ----------------------------------------------------------------------------- LLM planner / verifier


class PlanQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str = Field(description="a search query for the memory")
    missing: str = Field(description="the piece of information this query is meant to find")


class PlanOutput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    enough: bool = Field(description="true when the evidence already answers the question")
    queries: list[PlanQuery] = Field(default_factory=list, description="follow-up queries, at most the number asked")


class VerifyOutput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    relevant: bool = Field(description="true when the message helps answer the question")
    span: str = Field(default="", description="the words of the message that help, copied exactly")


_PLAN_SYSTEM = (
    "You plan searches over a person's long conversation history. Given a question and the "
    "messages found so far, decide whether they are enough to answer it. If not, write short "
    "search queries, each for one piece of information that is still missing (a name, a date, "
    "an event the found messages point to). Reply with JSON only."
)
_VERIFY_SYSTEM = (
    "You check whether a message from a conversation history helps answer a question. Reply "
    "with JSON only: relevant true or false, and the span of the message that helps, copied word for word."
)


def _evidence_lines(evidence: Sequence[SourcePacket], max_chars: int) -> str:
    if not evidence:
        return "(nothing found yet)"
    return "\n".join(f"[{p.packet_id}] {p.session_time} {p.speaker}: {p.content[:max_chars]}" for p in evidence)


def _tokens(r: LLMResponse) -> int:
    return int(r.prompt_tokens) + int(r.completion_tokens)


class LLMPlanner:
    """The prompted planner: question + verified evidence -> ``PlanOutput`` JSON.

    A response that does not validate (or a transport failure) falls back to ``fallback``'s
    plan, typed ``source="fallback"`` with the error's class name; a valid plan with empty,
    duplicate, already asked or surplus queries is repaired (those dropped, ``repaired=True``).
    """

    def __init__(self, client: ModelClient, fallback: Planner, *, queries: int = 3, read: int = 5,
                 max_chars: int = 400, max_tokens: int = 256) -> None:
        self.client, self.fallback = client, fallback
        self.queries, self.read, self.max_chars, self.max_tokens = queries, read, max_chars, max_tokens

    def request(self, question: str, evidence: Sequence[SourcePacket], asked: Sequence[str],
                namespace: str | None) -> LLMRequest:
        user = (f"Question: {question}\n\nMessages found so far:\n{_evidence_lines(evidence[: self.read], self.max_chars)}"
                f"\n\nAlready searched for: {', '.join(asked) if asked else '(nothing)'}\n\n"
                f"Write at most {self.queries} queries, or set enough to true.")
        return LLMRequest(messages=(Message("system", _PLAN_SYSTEM), Message("user", user)), stage="mera_plan",
                          output=spec_for(PlanOutput), max_tokens=self.max_tokens,
                          prompt_version=f"{PLAN_PROMPT_VERSION}:{stable_hash([self.queries, self.read])}",
                          namespace=namespace)

    def plan(self, question: str, evidence: Sequence[SourcePacket], asked: Sequence[str],
             *, namespace: str | None = None) -> Plan:
        req = self.request(question, evidence, asked, namespace)
        try:
            resp = self.client.complete(req)
        except (OutputValidationError, TransportError) as e:
            logger.info("MERA plan fell back to the rule planner: %s", type(e).__name__)
            fb = self.fallback.plan(question, evidence, asked, namespace=namespace)
            return Plan(fb.queries, fb.enough, "fallback", error=type(e).__name__)
        out = resp.validated if isinstance(resp.validated, PlanOutput) else PlanOutput.model_validate(resp.parsed)
        done = {a.lower() for a in asked}
        kept: list[PlannedQuery] = []
        seen: set[str] = set()
        for q in out.queries:
            text = " ".join(q.query.split())
            if not text or text.lower() in seen or (q.missing or text).lower() in done:
                continue
            seen.add(text.lower())
            kept.append(PlannedQuery(text, " ".join((q.missing or text).split())))
        repaired = len(kept) != len(out.queries) or len(kept) > self.queries
        kept = kept[: self.queries]
        enough = out.enough or not kept
        return Plan(tuple(kept) if not out.enough else (), enough, "llm", repaired=repaired, tokens=_tokens(resp))


class LLMVerifier:
    """A yes/no-with-span check per candidate, all candidates of a round in one batch
    (``complete_many``). A span not found in the message is dropped (the verdict stands); a
    failed item falls back to ``fallback``'s rule check."""

    def __init__(self, client: ModelClient, fallback: RuleVerifier, *, max_chars: int = 600, max_tokens: int = 96) -> None:
        self.client, self.fallback, self.max_chars, self.max_tokens = client, fallback, max_chars, max_tokens

    def request(self, question: str, candidate: SourcePacket, namespace: str | None) -> LLMRequest:
        user = (f"Question: {question}\n\nMessage ({candidate.session_time}, {candidate.speaker}): "
                f"{candidate.content[: self.max_chars]}")
        return LLMRequest(messages=(Message("system", _VERIFY_SYSTEM), Message("user", user)), stage="mera_verify",
                          output=spec_for(VerifyOutput), max_tokens=self.max_tokens,
                          prompt_version=VERIFY_PROMPT_VERSION, namespace=namespace)

    def verify(self, question: str, evidence: Sequence[SourcePacket], candidates: Sequence[tuple[SourcePacket, float]],
               *, best_score: float, namespace: str | None = None) -> tuple[list[Verdict], int]:
        if not candidates:
            return [], 0
        results = self.client.complete_many([self.request(question, p, namespace) for p, _ in candidates])
        out: list[Verdict] = []
        tokens = 0
        for (p, score), r in zip(candidates, results):
            if isinstance(r, LLMResponse):
                v = r.validated if isinstance(r.validated, VerifyOutput) else VerifyOutput.model_validate(r.parsed)
                span = v.span if v.span and v.span in p.content else ""
                out.append(Verdict(p.packet_id, bool(v.relevant), span, "llm"))
                tokens += _tokens(r)
            else:
                out.append(Verdict(p.packet_id, self.fallback.accepts(question, evidence, p, score, best_score),
                                   source="fallback"))
        return out, tokens


# ----------------------------------------------------------------------------- rounds


def merge_final(first: Sequence[str], found: Sequence[str], k: int, slots: int) -> list[str]:
    """The final set within budget ``k``: the first ``k - n`` packets of the first selection,
    then the ``n = min(slots, |found|)`` first verified hits, then the rest of the first
    selection if room is left (none is, unless the first selection was short)."""
    new = [p for p in dict.fromkeys(found) if p not in first][: max(0, min(slots, k))]
    out = list(first[: max(0, k - len(new))]) + new
    for p in first:
        if len(out) >= k:
            break
        if p not in out:
            out.append(p)
    return out[:k]


def run_mera(
    question: str,
    first: Sequence[str],
    search: Search,
    packets_by_id: Mapping[str, SourcePacket],
    planner: Planner,
    verifier: Verifier,
    *,
    k: int,
    max_rounds: int = 2,
    hits_per_query: int = 5,
    final_slots: int = 2,
    max_tokens: int | None = None,
    namespace: str | None = None,
) -> MeraResult:
    """The rounds for one question (module docstring). Round 0 verifies the first selection
    against the question; each later round plans, searches, verifies and merges. Stops on
    "enough", on ``max_rounds``, when no query finds a packet not judged yet, or when the
    planner and verifier tokens reach ``max_tokens``."""
    state = EvidenceState(question)
    first = list(dict.fromkeys(first))
    verdicts, tokens = verifier.verify(question, [], [(packets_by_id[p], 1.0) for p in first], best_score=1.0,
                                       namespace=namespace)
    state.judged.update(first)
    state.verified.extend(v.packet_id for v in verdicts if v.accepted)
    state.tokens += tokens
    cumulative = [tuple(first)]
    found: list[str] = []
    stopped = "round_limit"
    for r in range(1, max_rounds + 1):
        if max_tokens is not None and state.tokens >= max_tokens:
            stopped = "token_budget"
            break
        evidence = [packets_by_id[p] for p in state.verified]
        plan = planner.plan(question, evidence, state.asked, namespace=namespace)
        spent = plan.tokens
        if plan.enough or not plan.queries:
            state.rounds.append(RoundRecord(r, plan, (), (), spent))
            state.tokens += spent
            stopped = "enough"
            break
        hits: list[tuple[str, float]] = []
        best: dict[str, float] = {}
        for q in plan.queries:
            state.asked.append(q.missing)
            ranked = list(search(q.query))
            top = max((s for _, s in ranked), default=0.0)
            for pid, score in ranked[:hits_per_query]:
                if pid not in state.judged and pid not in best:
                    hits.append((pid, score))
                    best[pid] = top
        state.judged.update(pid for pid, _ in hits)
        verdicts = []
        if hits:
            # One batch per round; the rule check reads each hit's score against its query's best.
            cands = [(packets_by_id[pid], s / best[pid] if best[pid] > 0 else 0.0) for pid, s in hits]
            verdicts, t = verifier.verify(question, evidence, cands, best_score=1.0, namespace=namespace)
            spent += t
        new = [v.packet_id for v in verdicts if v.accepted]
        state.verified.extend(new)
        found.extend(new)
        state.tokens += spent
        state.rounds.append(RoundRecord(r, plan, tuple(pid for pid, _ in hits), tuple(new), spent))
        cumulative.append(tuple(first) + tuple(found))
        if not hits:
            stopped = "no_hits"
            break
    while len(cumulative) < max_rounds + 1:  # a round not run adds nothing: the curve stays flat
        cumulative.append(cumulative[-1])
    final = merge_final(first, found, k, final_slots)
    return MeraResult(tuple(final), tuple(first), tuple(cumulative), tuple(state.rounds), stopped, state.tokens,
                      round0_tokens=tokens)

