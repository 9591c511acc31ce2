"""English stems of content terms, safe to compute from many threads at once.

Stems come from PyStemmer, the C build of the Snowball (Porter2) English algorithm: much
faster than the pure-Python ``snowballstemmer`` and identical to it on every distinct term of
the LoCoMo dev file (``scripts/bench_stemmer.py`` measures both and prints the figures).

A stemmer object is not shareable: the pure-Python one keeps the word it is working on in
its own fields (one object shared by question threads gave wrong stems and ``IndexError``),
and PyStemmer's keeps a word cache. Each thread therefore gets its own object
(``threading.local``), created on the thread's first call; a stem is a pure function of
the word, so every thread returns the same stems.
"""

from __future__ import annotations

import threading
from typing import Sequence

import Stemmer

from memcompile_local.language.tokens import terms

__all__ = ["stem_words", "stem_terms"]

_LOCAL = threading.local()


def _stemmer() -> Stemmer.Stemmer:
    stemmer = getattr(_LOCAL, "stemmer", None)
    if stemmer is None:
        stemmer = _LOCAL.stemmer = Stemmer.Stemmer("english")
    return stemmer


def stem_words(word_list: Sequence[str]) -> list[str]:
    """Snowball (Porter2) English stems of lowercased words, in order."""
    return _stemmer().stemWords(list(word_list))


def stem_terms(text: str) -> list[str]:
    """:func:`~memcompile_local.language.tokens.terms` of ``text`` reduced to their stems.

    "camped", "camping" -> "camp". Used by the lexical channels, where an inflected
    question word must still hit the turn.
    """
    return stem_words(terms(text))
