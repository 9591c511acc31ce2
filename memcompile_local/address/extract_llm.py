"""LLM descriptor extraction (MemCompile paper, Section 3.2.1 and Appendix B.1).

Two-step mode (the default), for a batch of (packet, preceding packet) items:

1. one ``fact`` request per packet (previous turn + current turn + session time) returning
   ``{"facts": [...]}``; all of the batch's fact requests go to the client in one
   ``complete_many`` call so a batching backend sees them together;
2. one ``metadata`` request per extracted claim, again all in one ``complete_many``.

Combined mode sends one ``extract`` request per packet that returns the claims together
with their metadata.

Model output is post-processed defensively: claims are trimmed, bullet markers removed,
empty and duplicate claims dropped; names and keywords are deduplicated, keywords that are
a person or a bare time expression are dropped and the rest capped at
``config.max_keywords``; the event time is normalized against the session date
(:func:`~memcompile_local.language.timeparse.normalize_time`) and, when the model gave none,
read from a time expression in the claim itself; the interaction time is always the
packet's session date, never the model's copy; ``negated`` comes from a negation-marker
check on the claim text.

A packet whose fact, metadata or extract call fails is not dropped: after the whole batch
has been tried, :class:`PacketExtractionError` is raised naming every failed packet, with the
descriptors of the packets that did succeed attached (their responses are cached by the
client, so a retry of the batch costs nothing for them).
"""

from __future__ import annotations

import logging
import math
import re
from typing import Any, Sequence

from memcompile_local.address.prompts import (
    COMBINED_PROMPT_VERSION,
    COMBINED_SYSTEM,
    FACT_PROMPT_VERSION,
    FACT_SYSTEM,
    METADATA_PROMPT_VERSION,
    METADATA_SYSTEM,
    build_combined_user,
    build_fact_user,
    build_metadata_user,
)
from memcompile_local.address.schemas import (
    ClaimMetadata,
    CombinedExtraction,
    FactList,
    parse_model,
    spec_for,
)
from memcompile_local.config import ExtractionConfig
from memcompile_local.errors import ModelError, PacketExtractionError, PacketFailure
from memcompile_local.language.cleaning import clean_people, clean_phrases
from memcompile_local.language.negation import has_negation
from memcompile_local.language.timecues import is_time_phrase
from memcompile_local.language.timeparse import find_time_mentions, normalize_time, parse_session_time, session_date
from memcompile_local.language.tokens import count_tokens, normalize_name, words
from memcompile_local.llm.interface import LLMRequest, Message, stable_hash
from memcompile_local.protocols import ModelClient
from memcompile_local.types import Descriptor, EventFields, SourcePacket, descriptor_id

__all__ = [
    "LLMExtractor",
    "PacketFailure",
    "PacketExtractionError",
    "clean_claims",
    "MAX_CLAIMS_PER_TURN",
]

logger = logging.getLogger(__name__)

# A turn rarely holds more than a handful of facts; a longer list means the model is
# looping, and the tail would only flood Cells with near-duplicates.
MAX_CLAIMS_PER_TURN = 16

_BULLET = re.compile(r"^\s*(?:[-*\u2022]+|\d{1,2}[.)])\s+")


# ----------------------------------------------------------------------------- cleaning helpers


def clean_claims(facts: Sequence[Any], limit: int = MAX_CLAIMS_PER_TURN) -> list[str]:
    """Trimmed, de-bulleted, non-empty, de-duplicated claims (first occurrence kept)."""
    out: list[str] = []
    seen: set[str] = set()
    for fact in facts:
        if not isinstance(fact, str):
            continue
        text = " ".join(_BULLET.sub("", fact).split())
        key = " ".join(words(text))
        if not key or key in seen:
            continue
        seen.add(key)
        out.append(text)
    if len(out) > limit:
        logger.warning("model returned %d claims for one turn; keeping the first %d", len(out), limit)
        out = out[:limit]
    return out


def _predicate(value: str) -> str:
    """First lowercase alphabetic word of the model's predicate ("went to" -> "went")."""
    m = re.search(r"[a-z]+(?:-[a-z]+)?", (value or "").lower())
    return m.group(0) if m else ""


def _confidence(value: Any) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return 0.0
    if math.isnan(x):
        return 0.0
    return min(1.0, max(0.0, x))


# ----------------------------------------------------------------------------- extractor


class LLMExtractor:
    """``DescriptorExtractor`` that asks a model for claims and metadata (see module doc).

    ``combined=None`` takes the mode from ``config.combined_call``. ``descriptor_set``
    identifies the mode, the prompt versions, the keyword cap, ``max_tokens`` and a hash
    of the backend's identity (model, weights), so outputs of different models or prompts
    never share a store key.
    """

    def __init__(self, client: ModelClient, *, combined: bool | None = None,
                 config: ExtractionConfig = ExtractionConfig(), max_tokens: int = 2048) -> None:
        self.client = client
        self.config = config
        self.combined = config.combined_call if combined is None else bool(combined)
        self.max_tokens = int(max_tokens)
        self.max_keywords = max(0, int(config.max_keywords))
        backend = getattr(client, "backend", None)
        identity = backend.identity() if backend is not None and hasattr(backend, "identity") else {}
        model_hash = stable_hash(identity)[:12]
        versions = COMBINED_PROMPT_VERSION if self.combined else f"{FACT_PROMPT_VERSION}+{METADATA_PROMPT_VERSION}"
        self.descriptor_set = f"llm:{versions}:k{self.max_keywords}:m{self.max_tokens}:{model_hash}"

    # -- requests -----------------------------------------------------------------------------
    def _request(self, stage: str, system: str, user: str, model: type, prompt_version: str,
                 packet: SourcePacket) -> LLMRequest:
        """An extraction call: temperature 0, the output constrained by ``model``'s schema."""
        return LLMRequest(
            messages=(Message("system", system), Message("user", user)),
            stage=stage,
            output=spec_for(model),
            max_tokens=self.max_tokens,
            temperature=0.0,
            prompt_version=prompt_version,
            namespace=packet.namespace,
        )

    def fact_request(self, packet: SourcePacket, previous: SourcePacket | None) -> LLMRequest:
        return self._request("fact", FACT_SYSTEM, build_fact_user(packet, previous), FactList,
                             FACT_PROMPT_VERSION, packet)

    def metadata_request(self, claim: str, packet: SourcePacket, previous: SourcePacket | None) -> LLMRequest:
        return self._request("metadata", METADATA_SYSTEM, build_metadata_user(claim, packet, previous),
                             ClaimMetadata, METADATA_PROMPT_VERSION, packet)

    def combined_request(self, packet: SourcePacket, previous: SourcePacket | None) -> LLMRequest:
        return self._request("extract", COMBINED_SYSTEM, build_combined_user(packet, previous),
                             CombinedExtraction, COMBINED_PROMPT_VERSION, packet)

    # -- extraction ---------------------------------------------------------------------------
    def extract(self, items: Sequence[tuple[SourcePacket, SourcePacket | None]]) -> list[list[Descriptor]]:
        """One descriptor list per item, in order; raises PacketExtractionError on failures."""
        items = list(items)
        if not items:
            return []
        if self.combined:
            return self._extract_combined(items)
        return self._extract_two_step(items)

    def _extract_two_step(self, items: list[tuple[SourcePacket, SourcePacket | None]]) -> list[list[Descriptor]]:
        failures: dict[int, PacketFailure] = {}
        fact_results = self.client.complete_many([self.fact_request(p, prev) for p, prev in items])
        claims: list[list[str]] = []
        for i, ((packet, _prev), result) in enumerate(zip(items, fact_results)):
            try:
                if isinstance(result, BaseException):
                    raise result
                claims.append(clean_claims(parse_model(FactList, result, "fact").facts))
            except ModelError as exc:
                failures[i] = PacketFailure(packet.namespace, packet.packet_id, "fact", exc)
                claims.append([])

        requests: list[LLMRequest] = []
        owners: list[tuple[int, int]] = []  # (item index, claim index) of each metadata request
        for i, (packet, prev) in enumerate(items):
            if i in failures:
                continue
            for k, claim in enumerate(claims[i]):
                requests.append(self.metadata_request(claim, packet, prev))
                owners.append((i, k))
        meta_results = self.client.complete_many(requests) if requests else []

        metadata: dict[int, list[ClaimMetadata | None]] = {i: [None] * len(c) for i, c in enumerate(claims)}
        for (i, k), result in zip(owners, meta_results):
            if i in failures:
                continue
            packet = items[i][0]
            try:
                if isinstance(result, BaseException):
                    raise result
                metadata[i][k] = parse_model(ClaimMetadata, result, "metadata")
            except ModelError as exc:
                failures[i] = PacketFailure(packet.namespace, packet.packet_id, "metadata", exc)

        results: list[list[Descriptor] | None] = []
        for i, (packet, prev) in enumerate(items):
            if i in failures:
                results.append(None)
                continue
            pairs = [(c, m) for c, m in zip(claims[i], metadata[i]) if m is not None]
            results.append(self._descriptors(packet, prev, pairs))
        return self._finish(failures, results)

    def _extract_combined(self, items: list[tuple[SourcePacket, SourcePacket | None]]) -> list[list[Descriptor]]:
        failures: dict[int, PacketFailure] = {}
        responses = self.client.complete_many([self.combined_request(p, prev) for p, prev in items])
        results: list[list[Descriptor] | None] = []
        for i, ((packet, prev), result) in enumerate(zip(items, responses)):
            try:
                if isinstance(result, BaseException):
                    raise result
                parsed = parse_model(CombinedExtraction, result, "extract")
            except ModelError as exc:
                failures[i] = PacketFailure(packet.namespace, packet.packet_id, "extract", exc)
                results.append(None)
                continue
            kept = clean_claims([c.fact for c in parsed.claims])
            by_key: dict[str, Any] = {}
            for c in parsed.claims:  # first metadata of each distinct claim wins, like the claim itself
                by_key.setdefault(" ".join(words(" ".join(_BULLET.sub("", c.fact).split()))), c)
            pairs = [(text, by_key[" ".join(words(text))]) for text in kept]
            results.append(self._descriptors(packet, prev, pairs))
        return self._finish(failures, results)

    @staticmethod
    def _finish(failures: dict[int, PacketFailure],
                results: list[list[Descriptor] | None]) -> list[list[Descriptor]]:
        if failures:
            ordered = [failures[i] for i in sorted(failures)]
            for f in ordered:
                logger.warning("extraction failed for %s", f.describe())
            raise PacketExtractionError(ordered, results)
        return [r if r is not None else [] for r in results]

    # -- descriptors --------------------------------------------------------------------------
    def _descriptors(self, packet: SourcePacket, previous: SourcePacket | None,
                     pairs: Sequence[tuple[str, Any]]) -> list[Descriptor]:
        """Descriptors from (claim, metadata) pairs; metadata is ClaimMetadata or CombinedClaim."""
        anchor = parse_session_time(packet.session_time)
        interaction = session_date(packet.session_time)
        speakers = [packet.speaker] + ([previous.speaker] if previous is not None else [])
        out: list[Descriptor] = []
        for claim, meta in pairs:
            people = clean_people(meta.people)
            claim_words = set(words(claim))
            for name in speakers:  # a speaker named in the claim is involved even if the model forgot
                if name and set(words(name)) <= claim_words and normalize_name(name) not in {
                        normalize_name(p) for p in people}:
                    people.append(name.strip())
            keywords = [k for k in clean_phrases(meta.keywords, drop=people + speakers)
                        if not is_time_phrase(k)][: self.max_keywords]
            event = meta.event
            prefer = "future" if event.event_type == "plan" else "past"
            raw_time = (meta.time[0] if meta.time else "") or event.event_time
            event_time = normalize_time(raw_time, anchor, prefer=prefer) if raw_time else ""
            if not event_time:
                mentions = find_time_mentions(claim, anchor, prefer=prefer)
                event_time = mentions[0].value if mentions else ""
            index = len(out)
            out.append(Descriptor(
                descriptor_id=descriptor_id(packet.namespace, packet.packet_id, index),
                namespace=packet.namespace,
                packet_id=packet.packet_id,
                claim_index=index,
                text=claim,
                speaker=packet.speaker,
                session_index=packet.session_index,
                session_time=packet.session_time,
                people=tuple(people),
                keywords=tuple(keywords),
                event_time=event_time,
                interaction_time=interaction,
                n_tokens=count_tokens(claim),
                needs_profile=bool(meta.needs_profile_extraction),
                event=EventFields(
                    subject_people=tuple(clean_people(event.subject_people)),
                    predicate=_predicate(event.predicate),
                    focus_terms=tuple(clean_phrases(event.focus_terms)),
                    goal_context_terms=tuple(clean_phrases(event.goal_context_terms)),
                    event_type=event.event_type,
                    event_time=event_time,
                    polarity=event.polarity,
                    confidence=_confidence(event.confidence),
                ),
                negated=has_negation(claim),
            ))
        return out
