"""Query intent: people, keywords, time constraint and attribute need of a question.

Two sources with one output type (:class:`~memcompile_local.types.QueryIntent`):

* :func:`rule_intent`: no model. People are the known speakers named in the question
  (nicknames included) plus other capitalized names; keywords are noun-phrase-like chunks
  (:func:`~memcompile_local.language.phrases.keyword_phrases`, the rule extractor's chunker);
  the time constraint is the first time expression (absolute ones normalized to
  ``YYYY[-MM[-DD]]``, relative ones kept as written, since a question has no session date to
  anchor them); ``need_attribute`` and ``is_temporal`` come from cue words (the latter is
  :func:`~memcompile_local.language.timecues.is_temporal_question`).
* :func:`llm_intent` / :func:`llm_intent_many`: the model reads the question alone (stage
  ``intent``) and returns ``{"need_attribute", "people", "keywords", "time"}``; the answer
  is cleaned like extraction output, and ``is_temporal`` is the rule cue or a non-empty
  time. A failed model call falls back to :func:`rule_intent` (logged) unless
  ``fallback=False``, in which case the ``ModelError`` propagates.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Sequence

from memcompile_local.address.prompts import INTENT_PROMPT_VERSION, INTENT_SYSTEM, build_intent_user
from memcompile_local.address.schemas import IntentModel, parse_model, spec_for
from memcompile_local.errors import ModelError
from memcompile_local.language.cleaning import clean_people, clean_phrases
from memcompile_local.language.names import known_name, proper_names
from memcompile_local.language.phrases import keyword_phrases
from memcompile_local.language.timecues import is_temporal_question, is_time_phrase
from memcompile_local.language.timeparse import find_time_mentions, normalize_time
from memcompile_local.language.tokens import normalize_apostrophes
from memcompile_local.llm.interface import LLMRequest, Message
from memcompile_local.types import QueryIntent

__all__ = [
    "needs_attribute",
    "rule_intent",
    "intent_request",
    "llm_intent",
    "llm_intent_many",
    "MAX_INTENT_KEYWORDS",
]

logger = logging.getLogger(__name__)

MAX_INTENT_KEYWORDS = 5

# Questions that ask for a lasting personal attribute (preference, job, identity, health...).
_ATTRIBUTE = re.compile(
    r"\b(?:favou?rites?|likes?|loves?|prefer\w*|enjoys?|job|occupation|career|profession|"
    r"works?\s+as|hobby|hobbies|identity|identif\w*|relationship\s+status|married|single|dating|"
    r"partner|health|allerg\w*|goals?|dreams?|aspir\w*|personality|traits?|religio\w*|"
    r"political|beliefs?|believes?|values|likely|pursue|interested\s+in|passion\w*|"
    r"what\s+kind\s+of\s+person|would\s+\w+\s+(?:be|want|enjoy|like|consider))\b",
    re.IGNORECASE,
)

_QUESTION_WORDS = ("what", "when", "where", "who", "whom", "why", "how", "which", "would", "does", "did",
                   "is", "are", "was", "were", "has", "have", "do", "kind", "type", "sort", "likely",
                   "ever", "many", "much", "long")


def needs_attribute(question: str) -> bool:
    """True when the question's cue words ask for a stable personal attribute."""
    return _ATTRIBUTE.search(question or "") is not None


def _question_people(question: str, known_people: Sequence[str]) -> list[str]:
    known = [k for k in known_people if k and k.strip()]
    found: list[str] = []
    for token in re.findall(r"[A-Za-z][A-Za-z'\-]*", normalize_apostrophes(question)):
        base = token[:-2] if token.endswith("'s") else token
        name = known_name(base, known) if known and base[:1].isupper() else None
        if name is not None and name not in found:
            found.append(name)
    for name in proper_names(question, known):
        if name not in found:
            found.append(name)
    return found


def _time_constraint(question: str) -> str | None:
    mentions = find_time_mentions(normalize_apostrophes(question), None)
    return mentions[0].value if mentions else None


def rule_intent(question: str, *, known_people: Sequence[str] = ()) -> QueryIntent:
    """Model-free intent of ``question`` (see module docstring)."""
    q = question or ""
    people = _question_people(q, known_people)
    masked = list(normalize_apostrophes(q))
    for m in find_time_mentions("".join(masked), None):
        masked[m.start:m.end] = [","] * (m.end - m.start)
    keywords = keyword_phrases("".join(masked), exclude=list(people) + list(_QUESTION_WORDS),
                               known_names=list(people) + list(known_people), limit=MAX_INTENT_KEYWORDS)
    return QueryIntent(
        question=q,
        people=tuple(people),
        keywords=keywords,
        time=_time_constraint(q),
        need_attribute=needs_attribute(q),
        is_temporal=is_temporal_question(q),
    )


def intent_request(question: str, *, namespace: str | None = None, max_tokens: int = 256) -> LLMRequest:
    """The ``intent`` request for one question (the prompt sees the question only)."""
    return LLMRequest(
        messages=(Message("system", INTENT_SYSTEM), Message("user", build_intent_user(question))),
        stage="intent",
        output=spec_for(IntentModel),
        max_tokens=max_tokens,
        temperature=0.0,
        prompt_version=INTENT_PROMPT_VERSION,
        namespace=namespace,
    )


def _from_model(question: str, parsed: IntentModel, known_people: Sequence[str]) -> QueryIntent:
    known = [k for k in known_people if k and k.strip()]
    people: list[str] = []
    for p in clean_people(parsed.people):
        canonical = known_name(p.split()[0], known) if known else None
        name = canonical or p
        if name not in people:
            people.append(name)
    keywords = [k for k in clean_phrases(parsed.keywords, drop=people) if not is_time_phrase(k)]
    time = normalize_time(parsed.time, None) if parsed.time else ""
    return QueryIntent(
        question=question,
        people=tuple(people),
        keywords=tuple(keywords[:MAX_INTENT_KEYWORDS]),
        time=time or None,
        need_attribute=bool(parsed.need_attribute),
        is_temporal=is_temporal_question(question) or bool(time),
    )


def llm_intent(client: Any, question: str, *, namespace: str | None = None,
               known_people: Sequence[str] = (), fallback: bool = True, max_tokens: int = 256) -> QueryIntent:
    """Model-read intent of one question (stage ``intent``)."""
    return llm_intent_many(client, [question], namespace=namespace, known_people=known_people,
                           fallback=fallback, max_tokens=max_tokens)[0]


def llm_intent_many(client: Any, questions: Sequence[str], *, namespace: str | None = None,
                    known_people: Sequence[str] = (), fallback: bool = True,
                    max_tokens: int = 256) -> list[QueryIntent]:
    """Intents of several questions with one batched ``complete_many`` call, in order."""
    questions = list(questions)
    if not questions:
        return []
    results = client.complete_many([intent_request(q, namespace=namespace, max_tokens=max_tokens)
                                    for q in questions])
    out: list[QueryIntent] = []
    for q, result in zip(questions, results):
        try:
            if isinstance(result, BaseException):
                raise result
            out.append(_from_model(q, parse_model(IntentModel, result, "intent"), known_people))
        except ModelError as exc:
            if not fallback:
                raise
            logger.warning("query intent model call failed (%s: %s); using the rule-based intent",
                           type(exc).__name__, exc)
            out.append(rule_intent(q, known_people=known_people))
    return out
