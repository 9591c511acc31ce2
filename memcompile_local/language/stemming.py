"""English stems of content terms, safe to compute from many threads at once.

A Snowball stemmer object keeps the word it is working on in its own fields, so one object
shared by question threads returns wrong stems and raises ``IndexError`` when two threads
stem at the same time. Each thread therefore gets its own stemmer (``threading.local``),
created on the thread's first call; the stems themselves are a pure function of the word.
"""

from __future__ import annotations

import threading
from typing import Sequence

import snowballstemmer

from memcompile_local.language.tokens import terms

__all__ = ["stem_words", "stem_terms"]

_LOCAL = threading.local()


def _stemmer():
    stemmer = getattr(_LOCAL, "stemmer", None)
    if stemmer is None:
        stemmer = _LOCAL.stemmer = snowballstemmer.stemmer("english")
    return stemmer


def stem_words(word_list: Sequence[str]) -> list[str]:
    """Snowball (Porter2) English stems of lowercased words, in order."""
    return list(_stemmer().stemWords(list(word_list)))


def stem_terms(text: str) -> list[str]:
    """:func:`~memcompile_local.language.tokens.terms` of ``text`` reduced to their stems.

    "camped", "camping" -> "camp". Used by the lexical channels, where an inflected
    question word must still hit the turn.
    """
    return stem_words(terms(text))
