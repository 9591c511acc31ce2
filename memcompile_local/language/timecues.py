"""Is a question about time, and is a phrase nothing but a time expression?

:func:`is_temporal_question` is the one definition of a temporal question for the whole
pipeline: query intent, the fused retriever's temporal channel and the choice of the
temporal answer prompt all ask it. :func:`is_time_phrase` keeps bare time expressions
("last week", "May 2023") out of keyword lists.
"""

from __future__ import annotations

import re

from memcompile_local.language.timeparse import find_time_mentions

__all__ = ["is_temporal_question", "is_time_phrase"]

# Questions whose answer is a time or a duration.
_TEMPORAL = re.compile(
    r"\bwhen\b|\bsince\s+when\b|\b(?:what|which)\s+(?:date|day|time|year|month|week|weekend|season)\b|"
    r"\bhow\s+long\b|\bhow\s+many\s+(?:days|weeks|months|years|hours|minutes)\b|"
    r"\b(?:in|on|during)\s+(?:what|which)\s+(?:year|month|day|date)\b",
    re.IGNORECASE,
)
_BARE_ISO = re.compile(r"(?:19|20)\d{2}(?:-\d{2}(?:-\d{2})?)?")


def is_temporal_question(question: str) -> bool:
    """True when the question asks for a time or duration ("When ...", "How long ...", "... what year")."""
    return _TEMPORAL.search(question or "") is not None


def is_time_phrase(phrase: str) -> bool:
    """True when ``phrase`` is nothing but a time expression ("last week", "May 2023", "2023-05")."""
    mentions = find_time_mentions(phrase, None, strict_case=False)
    if not mentions:
        return bool(_BARE_ISO.fullmatch(phrase.strip()))
    covered = sum(m.end - m.start for m in mentions)
    return covered >= len(phrase.strip()) - 1
