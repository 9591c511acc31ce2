"""Keyword phrases of English text: noun-phrase-like chunks between function words.

:func:`keyword_phrases` is the model-free keyword reader of both the rule extractor (for a
claim) and the rule intent (for a question), so a question's keywords and a turn's keywords
are cut the same way.
"""

from __future__ import annotations

import functools
import re
from typing import Iterable, Sequence

from memcompile_local.language.lemmas import lemma
from memcompile_local.language.lexicon import COMMON_VERBS, ED_NOUNS, IRREGULAR_VERBS, KEYWORD_EXCLUDE, LY_NOUNS
from memcompile_local.language.names import name_tokens
from memcompile_local.language.tokens import STOPWORDS, normalize_apostrophes, words

__all__ = ["keyword_phrases"]

_PHRASE_BREAK = re.compile(r"[^\w'\s-]|\s-\s|_")


def _chunk_word(raw: str) -> tuple[str, bool]:
    """A whitespace-separated piece of lowercased text as a chunk word (quotes and hyphens at
    its ends and a possessive 's dropped), and whether it may be part of a chunk as far as the
    fixed word lists and endings decide (the caller's excluded names are checked apart)."""
    w = raw.strip("'-")
    if w.endswith("'s"):
        w = w[:-2]
    return w, (
        len(w) > 1
        and w not in STOPWORDS
        and w not in KEYWORD_EXCLUDE
        and not w.isdigit()
        and not (w.endswith("ly") and len(w) > 4 and w not in LY_NOUNS)
        and not (w.endswith("ed") and len(w) > 4 and w not in ED_NOUNS)
        and "'" not in w
        and w not in IRREGULAR_VERBS
        and not (w.endswith("s") and w[:-1] in COMMON_VERBS)
        and not (w.endswith("ing") and lemma(w) in COMMON_VERBS)
    )


# A pure function of the piece, cached because chat vocabulary repeats; only pieces of up to
# 32 characters are cached, so that a long token (a hash, a base64 blob) is not held.
_cached_chunk_word = functools.lru_cache(maxsize=32768)(_chunk_word)


def keyword_phrases(text: str, *, exclude: Iterable[str] = (), known_names: Sequence[str] = (),
                    limit: int = 5) -> tuple[str, ...]:
    """Up to ``limit`` lowercase noun-phrase-like chunks of ``text``.

    A chunk is a maximal run of content words between stopwords, punctuation and excluded
    words (names in ``exclude``, nicknames of ``known_names``, time words, light verbs,
    small-talk words, numbers, adverbs in -ly, participles in -ed), cut to its last four
    words (the head of an English noun phrase is at its end). Chunks are ranked by word
    count, longest first, then by position; duplicates are dropped.
    """
    if limit <= 0:
        return ()
    banned: set[str] = set()  # besides KEYWORD_EXCLUDE, which _chunk_word checks
    for e in exclude:
        banned.update(words(e))
    banned.update(name_tokens(text, known_names))
    runs: list[tuple[int, list[str]]] = []  # (position, words)
    position = 0
    for segment in _PHRASE_BREAK.split(normalize_apostrophes(text).lower()):
        current: list[str] = []
        for raw in segment.split():
            w, ok = _cached_chunk_word(raw) if len(raw) <= 32 else _chunk_word(raw)
            if ok and w not in banned:
                current.append(w)
                continue
            if current:
                runs.append((position, current))
                position += 1
            current = []
        if current:
            runs.append((position, current))
            position += 1
    ranked = sorted(((-min(len(r), 4), pos, r[-4:]) for pos, r in runs))
    out: list[str] = []
    for _neg, _pos, run_words in ranked:
        phrase = " ".join(run_words)
        if phrase not in out:
            out.append(phrase)
        if len(out) >= limit:
            break
    return tuple(out)
