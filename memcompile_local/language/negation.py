"""Does a text deny something? The negation flag of a descriptor, for both extractors.

A claim's ``negated`` flag is read from the text, never from a model's answer, so the
rule-based and the LLM extractor must flag the same claim the same way.
"""

from __future__ import annotations

import re

from memcompile_local.language.tokens import cue_text, has_cue, normalize_apostrophes

__all__ = ["has_negation"]

_NEGATION = re.compile(
    r"\b(?:not|no|never|nobody|nothing|none|neither|nor|nowhere|cannot)\b|n't\b", re.IGNORECASE
)


# Every match holds one of these ("no" is in not, nobody, nothing, none, nor, nowhere and
# cannot), so a text without them is not scanned (see ``cue_text``).
_NEGATION_CUES = ("no", "never", "neither", "n't")


def has_negation(text: str) -> bool:
    """True when the text contains a negation marker (not, no, never, n't, nothing, ...) as a whole word."""
    s = normalize_apostrophes(text)
    return has_cue(cue_text(s), _NEGATION_CUES) and _NEGATION.search(s) is not None
