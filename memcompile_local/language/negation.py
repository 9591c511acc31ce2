"""Does a text deny something? The negation flag of a descriptor, for both extractors.

A claim's ``negated`` flag is read from the text, never from a model's answer, so the
rule-based and the LLM extractor must flag the same claim the same way.
"""

from __future__ import annotations

import re

from memcompile_local.language.tokens import normalize_apostrophes

__all__ = ["has_negation"]

_NEGATION = re.compile(
    r"\b(?:not|no|never|nobody|nothing|none|neither|nor|nowhere|cannot)\b|n't\b", re.IGNORECASE
)


def has_negation(text: str) -> bool:
    """True when the text contains a negation marker (not, no, never, n't, nothing, ...) as a whole word."""
    return _NEGATION.search(normalize_apostrophes(text)) is not None
