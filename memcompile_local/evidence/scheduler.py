"""Closed-pool listwise packet scheduling (MemCompile paper, Section 3.4.1 and Appendix A.2).

A model sees the question and a closed list of SourcePackets under opaque labels C001,
C002, ... (assigned in pool order) and returns the labels of the packets it wants, best
first. Labels are mapped back to packet ids through the label table of the request, never
by matching text, so the scheduler can only reorder and select packets of the pool.

Protocol (what ``schedule_packets`` does):

1. Target cardinality ``T = min(k, |pool|)``.
2. A round sends the candidates not yet chosen, relabelled C001.. in pool order, and asks
   for exactly the number still missing. (Relabelling keeps every round's list contiguous
   and self-contained; each round has its own label table.)
3. A response is valid when it holds exactly that many distinct labels, all from the
   round's table. An invalid response is answered with a schema correction appended to
   the conversation (the invalid reply as the assistant turn, then a user turn naming the
   duplicates, unknown labels and wrong count), up to ``max_retries`` times.
4. After the last attempt of a round, the valid labels of the final response are kept,
   first occurrence only, in response order, at most the missing count.
5. While fewer than ``T`` packets are chosen, a further round is run over the rest of the
   pool. If a round keeps nothing at all, the missing packets are filled deterministically
   in pool order and the fill is recorded in the trace, which bounds the number of rounds.

Cache identity: the messages already contain the question, the ordered candidate list and
the rendered contents; in addition ``prompt_version`` carries a hash of (ordered packet ids,
hashes of the rendered candidate lines, requested count, protocol version), so a cached
ranking can never be reused for a different pool.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import Any, Sequence

from memcompile_local.errors import DataFormatError, OutputValidationError
from memcompile_local.fence import header_value, json_quote
from memcompile_local.llm.interface import LLMRequest, Message, RankingSpec, stable_hash
from memcompile_local.llm.validate import ranking_problems
from memcompile_local.protocols import ModelClient
from memcompile_local.types import SourcePacket

from .prompts import (
    SCHEDULER_PROMPTS,
    SCHEDULER_PROTOCOL_VERSION,
    PromptTemplate,
    scheduler_correction_message,
    scheduler_user_message,
)

logger = logging.getLogger(__name__)

__all__ = [
    "ScheduleResult",
    "schedule_packets",
    "render_candidate",
    "packet_content",
    "label_for",
    "ranking_problems",
]


@dataclass(frozen=True)
class ScheduleResult:
    """Outcome of one scheduling call.

    ``packet_ids``: chosen packets, best first (length ``min(k, |pool|)``).
    ``attempts``: model calls made over all rounds. ``rounds``: rounds run.
    ``repaired``: anything other than a valid first answer in the first round happened
    (a correction, a later round or a deterministic fill). ``trace``: one dict per attempt
    and per fill, JSON-serialisable.
    """

    packet_ids: tuple[str, ...]
    attempts: int
    rounds: int
    repaired: bool
    trace: tuple[dict[str, Any], ...] = ()


def label_for(index: int) -> str:
    """Opaque label of the ``index``-th (0-based) candidate of a round: C001, C002, ..."""
    return f"C{index + 1:03d}"


def packet_content(packet: SourcePacket) -> str:
    """What a candidate shows as content: the turn text plus its image caption when present."""
    text = packet.content.strip()
    if packet.image_caption:
        text = f"{text} [shared image: {packet.image_caption.strip()}]".strip()
    return text


def render_candidate(label: str, packet: SourcePacket, *, max_content_chars: int | None = None) -> str:
    """One candidate line: ``[C001] dia_id=.. speaker=.. recorded_date=.. content="..."``.

    The content is JSON-quoted with every control and line-break character escaped
    (``fence.json_quote``), and the other fields are single-line labels, quoted when they hold
    an ``=`` or anything else that could pose as a further field
    (``fence.header_value``): stored text cannot break the line format or forge a candidate.
    ``max_content_chars`` (optional) shortens very long turns with an ellipsis.
    """
    content = packet_content(packet)
    if max_content_chars is not None and len(content) > max_content_chars:
        content = content[: max(0, max_content_chars - 1)].rstrip() + "…"
    quoted = json_quote(content)
    return (
        f"[{label}] dia_id={header_value(packet.packet_id, separators='= ')} "
        f"speaker={header_value(packet.speaker, separators='=')} "
        f"recorded_date={header_value(packet.session_time, separators='=')} content={quoted}"
    )


def _valid_unique(returned: Sequence[Any] | None, labels: Sequence[str]) -> list[str]:
    """Valid labels of ``returned`` in response order, first occurrence only."""
    if not returned:
        return []
    allowed = set(labels)
    out: list[str] = []
    for x in returned:
        if isinstance(x, str) and x in allowed and x not in out:
            out.append(x)
    return out


def _identity_hash(packet_ids: Sequence[str], lines: Sequence[str], k: int) -> str:
    digests = [hashlib.sha256(line.encode("utf-8")).hexdigest() for line in lines]
    return stable_hash(
        {"packets": list(packet_ids), "lines": digests, "k": k, "protocol": SCHEDULER_PROTOCOL_VERSION}
    )[:24]


def _check_pool(pool: Sequence[SourcePacket]) -> None:
    seen: set[str] = set()
    for i, packet in enumerate(pool):
        if not isinstance(packet, SourcePacket):
            raise DataFormatError("<schedule pool>", f"pool[{i}]", "a SourcePacket",
                                  f"got {type(packet).__name__}")
        if packet.packet_id in seen:
            raise DataFormatError("<schedule pool>", f"pool[{i}]", "distinct packet ids",
                                  f"{packet.packet_id!r} appears twice")
        seen.add(packet.packet_id)


def schedule_packets(
    client: ModelClient,
    question: str,
    pool: Sequence[SourcePacket],
    *,
    k: int,
    stage: str = "schedule",
    namespace: str | None = None,
    max_retries: int = 3,
    prompt: PromptTemplate | None = None,
    max_tokens: int | None = None,
    max_content_chars: int | None = None,
) -> ScheduleResult:
    """Choose ``min(k, |pool|)`` packets of ``pool`` for ``question`` with a listwise model call.

    Inputs: an ``LLMClient`` (anything with ``complete(LLMRequest) -> LLMResponse`` that
    raises ``OutputValidationError`` carrying ``.parsed``/``.text`` for invalid rankings),
    the question, the closed pool in its normalized order, the budget ``k``, the stage name
    ("schedule" for anchors, "frontier" for the frontier ordering), the namespace whose text
    the prompt contains, the number of schema-correction retries per round, and the prompt
    (default: the stage's prompt from ``prompts.SCHEDULER_PROMPTS``).
    Output: :class:`ScheduleResult`. Transport errors from the client propagate.
    """
    if not isinstance(k, int) or isinstance(k, bool) or k < 0:
        raise ValueError(f"schedule_packets: k must be a non-negative int, got {k!r}")
    if max_retries < 0:
        raise ValueError(f"schedule_packets: max_retries must be >= 0, got {max_retries!r}")
    _check_pool(pool)
    if prompt is None:
        prompt = SCHEDULER_PROMPTS.get(stage, SCHEDULER_PROMPTS["schedule"])
    target = min(k, len(pool))
    chosen: list[str] = []
    trace: list[dict[str, Any]] = []
    attempts = 0
    rounds = 0
    repaired = False

    while len(chosen) < target:
        rounds += 1
        taken = set(chosen)
        remaining = [p for p in pool if p.packet_id not in taken]
        need = target - len(chosen)
        labels = [label_for(i) for i in range(len(remaining))]
        table = dict(zip(labels, (p.packet_id for p in remaining)))
        lines = [render_candidate(lab, p, max_content_chars=max_content_chars)
                 for lab, p in zip(labels, remaining)]
        ident = _identity_hash([p.packet_id for p in remaining], lines, need)
        spec = RankingSpec(labels=tuple(labels), k=need)
        messages: list[Message] = [
            Message("system", prompt.system),
            Message("user", scheduler_user_message(question, lines, need, later_round=rounds > 1)),
        ]
        tokens = max_tokens if max_tokens is not None else 32 + 8 * need
        final_returned: list[Any] | None = None
        for attempt in range(1, max_retries + 2):
            attempts += 1
            request = LLMRequest(
                messages=tuple(messages),
                stage=stage,
                output=spec,
                max_tokens=tokens,
                prompt_version=f"{prompt.version}|{SCHEDULER_PROTOCOL_VERSION}|{ident}",
                namespace=namespace,
            )
            cached = False
            try:
                response = client.complete(request)
                # The client validated the ranking against the spec (llm.validate.ranking_problems).
                returned: list[Any] | None = list(response.parsed)
                problems: list[str] = []
                text = response.text
                cached = response.cached
            except OutputValidationError as exc:
                returned = list(exc.parsed) if isinstance(exc.parsed, (list, tuple)) else None
                problems = ranking_problems(returned, labels, need)
                text = exc.text
            final_returned = returned
            trace.append({
                "round": rounds, "attempt": attempt, "stage": stage, "pool": len(remaining),
                "need": need, "returned": list(returned) if returned is not None else None,
                "problems": problems, "valid": not problems, "cached": cached,
            })
            if not problems:
                break
            repaired = True
            if attempt <= max_retries:
                messages.append(Message("assistant", text or ""))
                messages.append(Message("user", scheduler_correction_message(problems, need)))
        if rounds > 1:
            repaired = True
        kept = _valid_unique(final_returned, labels)[:need]
        trace[-1]["kept"] = [table[lab] for lab in kept]
        if kept:
            chosen.extend(table[lab] for lab in kept)
            continue
        # Nothing usable after every retry: fill in pool order so the budget is still met and
        # the loop terminates.
        fill = [p.packet_id for p in remaining[:need]]
        logger.warning("scheduler stage %r round %d: no valid labels after %d attempts; "
                       "filling %d packets in pool order", stage, rounds, max_retries + 1, len(fill))
        trace.append({"round": rounds, "fill": fill, "stage": stage})
        chosen.extend(fill)
        repaired = True

    return ScheduleResult(tuple(chosen), attempts, rounds, repaired, tuple(trace))
