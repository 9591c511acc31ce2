"""Answer-type cues: questions that ask for a named thing, and turns that name one.

A question asking who, where, or which/what people, places or titles ("Which novels did Ines
lend out?", "What towns has Tomas cycled through?", "Who did Ines sail with?") is answered by turns
that name such a thing; ``names_entity`` marks a turn that does: a capitalized word inside a
sentence that is not a participant's name, a greeting, an interjection or a date word, or a
quoted title. The fused selector's ``answer_type`` channel reads both (fused/channels.py).
"""

from __future__ import annotations

import re
from typing import Iterable

ENTITY_QUESTION = re.compile(
    r"\b(who|whom|where|(?:what|which) (?:\w+ )?(?:people|persons|friends|names?|cit(?:y|ies)|countr(?:y|ies)|places?|"
    r"states?|books?|novels?|movies?|films?|songs?|bands?|artists?|games?|shows?|series|authors?|restaurants?|brands?|"
    r"teams?))\b", re.IGNORECASE)

# A capitalized word (or run of them) not right after a sentence end.
_CAPITALIZED = re.compile(r"(?<![.!?]\s)(?<![.!?])\b([A-Z][a-z]+(?:\s[A-Z][a-z]+)*)")
_QUOTED = re.compile(r'"[^"]{3,60}"')
_NOT_ENTITY = frozenset({
    "I", "Hey", "Hi", "Thanks", "Thank", "Wow", "Yeah", "Yes", "No", "Oh", "Ok", "Okay", "Cool", "Great", "Sure",
    "Haha", "Lol", "Awesome", "Nice", "Good", "Congrats", "Hope", "Glad", "Sorry", "Well", "So", "And", "But",
    "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday", "January", "February", "March",
    "April", "May", "June", "July", "August", "September", "October", "November", "December", "Mom", "Dad"})


def asks_for_entity(question: str) -> bool:
    """Whether the question asks for a person, a place or a title."""
    return bool(ENTITY_QUESTION.search(question))


def names_entity(text: str, participants: Iterable[str]) -> bool:
    """Whether ``text`` names a person, place or title other than the participants (see the
    module docstring); the text's first word never counts."""
    names = {w for p in participants for w in p.split()}
    for m in _CAPITALIZED.finditer(text):
        first = m.group(1).split()[0]
        if m.start() > 0 and first not in _NOT_ENTITY and first not in names:
            return True
    return bool(_QUOTED.search(text))
