"""Cleaning phrase and name lists that a model wrote (keywords, people, focus terms).

Model output repeats itself, pads with spaces and punctuation, and lists pronouns or role
words as people. These helpers trim, drop empties and case-insensitive duplicates, and keep
the first spelling of each phrase.
"""

from __future__ import annotations

from typing import Any, Sequence

from memcompile_local.language.tokens import normalize_name

__all__ = ["clean_phrases", "clean_people"]

# Pronouns and role words a model lists as "people": none of them names a person.
_NOT_PEOPLE = frozenset(
    "i me my you your he him his she her they them their we us our it speaker user assistant "
    "someone somebody everyone nobody unknown none".split()
)


def clean_phrases(values: Sequence[Any], *, drop: Sequence[str] = ()) -> list[str]:
    """Trimmed, non-empty string phrases without case-insensitive duplicates or names in ``drop``.

    Non-string items are skipped; the first spelling of a repeated phrase is kept.
    """
    banned = {normalize_name(d) for d in drop if d}
    out: list[str] = []
    seen: set[str] = set()
    for v in values:
        if not isinstance(v, str):
            continue
        text = " ".join(v.split()).strip(" .,;:")
        key = normalize_name(text)
        if not key or key in seen or key in banned:
            continue
        seen.add(key)
        out.append(text)
    return out


def clean_people(values: Sequence[Any]) -> list[str]:
    """:func:`clean_phrases` of a people list, without pronouns and role words ("me", "user")."""
    return [p for p in clean_phrases(values) if normalize_name(p) not in _NOT_PEOPLE]
