"""Passages: a long turn cut into windows an embedder reads whole.

A sentence embedder reads a bounded number of word pieces (all-MiniLM-L6-v2: 256) and drops
the rest, so a 2,000-character assistant reply is embedded by its first paragraph only. The
dense channel embeds such a turn as several passages instead and scores the turn by its best
passage; the unit that is selected and shown stays the turn (the paper's normalization
boundary, applied below the turn: passage hits collapse to their turn's packet id).

``split_passages`` is a pure function of the text and two word counts: consecutive sentences
packed into windows of at most ``max_words`` words, each window after the first starting
with the last sentences of the one before it (at most ``overlap_words`` words of them), so a
fact that straddles a cut is whole in one window. A turn of at most ``max_words`` words is
one passage, the turn itself. Words are whitespace runs (a model-free stand-in for word
pieces: English prose runs about 1.3 pieces a word, code and markup more).
"""

from __future__ import annotations

import re

import numpy as np

# A sentence ends at ., ! or ? followed by space, or at a line break (lists, code, headings).
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\s*\n+\s*")


def sentences(text: str) -> list[str]:
    """The sentences and lines of ``text``, in order, without empty pieces."""
    return [s for s in (p.strip() for p in _SENTENCE_END.split(text or "")) if s]


def _word_chunks(sentence: str, max_words: int) -> list[str]:
    """A sentence longer than ``max_words`` words cut into runs of ``max_words`` words."""
    ws = sentence.split()
    return [" ".join(ws[i:i + max_words]) for i in range(0, len(ws), max_words)]


def split_passages(text: str, max_words: int, overlap_words: int) -> tuple[str, ...]:
    """The passages of ``text`` (see the module docstring); ``(text,)`` when it is short.

    ``overlap_words`` must be below ``max_words``. Deterministic: the same text and counts
    give the same passages.
    """
    if max_words < 1 or not 0 <= overlap_words < max_words:
        raise ValueError(f"passages need 0 <= overlap_words < max_words, got {overlap_words}, {max_words}")
    if len((text or "").split()) <= max_words:
        return (text,)
    units: list[tuple[str, int]] = []  # (sentence, words), no sentence longer than max_words
    for s in sentences(text):
        for piece in _word_chunks(s, max_words):
            units.append((piece, len(piece.split())))
    out: list[str] = []
    start = 0
    while start < len(units):
        end, size = start, 0
        while end < len(units) and size + units[end][1] <= max_words:
            size += units[end][1]
            end += 1
        out.append(" ".join(u for u, _ in units[start:end]))
        if end >= len(units):
            break
        # The next window repeats the last sentences of this one, up to overlap_words words,
        # and always moves forward by at least one sentence.
        back, kept = end, 0
        while back - 1 > start and kept + units[back - 1][1] <= overlap_words:
            back -= 1
            kept += units[back][1]
        start = back
    return tuple(out)


def long_turn_passages(text: str, words: int, overlap: int) -> tuple[str, ...]:
    """The passages of a turn longer than ``words`` words; ``()`` for a shorter turn (its own
    document serves the dense channel)."""
    if not words or len((text or "").split()) <= words:
        return ()
    return split_passages(text, words, overlap)


def best_passage_scores(cosines: np.ndarray, owner: np.ndarray, n: int, *, pool: str = "max") -> np.ndarray:
    """Per text, the pooled score of its passages (``owner[j]``: the text of passage ``j``).

    ``pool``: "max" (the best passage) or "top2" (the mean of the two best; a text with one
    passage keeps that passage's score). Texts without a passage score 0.
    """
    if not len(owner):
        return np.zeros(n, dtype=np.float64)
    out = np.full(n, -np.inf, dtype=np.float64)
    np.maximum.at(out, owner, cosines)
    if pool == "top2":
        second = np.full(n, -np.inf, dtype=np.float64)
        # Knock out one best passage per text, then take the best of the rest.
        order = np.lexsort((-cosines, owner))  # by text, best passage first
        first_of = np.r_[True, owner[order][1:] != owner[order][:-1]]
        rest = order[~first_of]
        np.maximum.at(second, owner[rest], cosines[rest])
        out = np.where(np.isfinite(second), (out + second) / 2, out)
    elif pool != "max":
        raise ValueError(f"unknown passage pooling {pool!r}: expected 'max' or 'top2'")
    out[~np.isfinite(out)] = 0.0
    return out
