"""Words, content terms and token counts: the one tokenizer every lexical signal uses.

Jaccard terms, BM25 documents, people sets and token caps (B_C = 360) must agree on what a
word is, so they all come from here: lowercased Unicode word runs (``\\w+`` with apostrophes
kept inside words). :func:`count_tokens` counts those runs plus standalone punctuation
marks, a deterministic stand-in for a model tokenizer that needs no model files.
Everything here is a pure function of its input, safe to call from many threads.
"""

from __future__ import annotations

import functools
import re
from typing import Iterable

__all__ = [
    "STOPWORDS",
    "words",
    "terms",
    "term_set",
    "phrase_terms",
    "normalize_name",
    "normalize_apostrophes",
    "jaccard",
    "count_tokens",
    "cue_text",
    "has_cue",
]

_WORD = re.compile(r"\w+(?:'\w+)*", re.UNICODE)
_TOKEN = re.compile(r"\w+(?:'\w+)*|[^\w\s]", re.UNICODE)

# A compact English stopword list: function words that carry no retrieval signal.
STOPWORDS: frozenset[str] = frozenset(
    """a an the and or but if then else of to in on at by for with about from into onto over under
    is am are was were be been being do does did done doing have has had having will would shall should
    can could may might must it its it's this that these those there here what which who whom whose when
    where why how i me my mine myself you your yours yourself he him his himself she her hers herself we
    us our ours ourselves they them their theirs themselves as so than too very just not no nor only own
    same such both each few more most other some any all also up down out off again further once s t
    don't didn't doesn't isn't aren't wasn't weren't i'm i've i'd i'll you're you've you'd you'll he's
    she's we're we've they're they've that's there's what's let's oh yeah hey hi wow ok okay really
    """.split()
)


def words(text: str) -> list[str]:
    """Lowercased word runs of ``text`` in order (stopwords kept)."""
    text = text or ""
    if text.isascii():
        # Lowercasing ASCII first finds the same runs (no character changes class or length)
        # in one call; other text can ("İ" lowercases to two characters), so its words are
        # lowercased one by one.
        return _WORD.findall(text.lower())
    return [w.lower() for w in _WORD.findall(text)]


def terms(text: str) -> list[str]:
    """Lowercased content words in order: words minus stopwords and one-character tokens.

    A possessive ending is dropped ("caroline's" -> "caroline") so that a name matches its
    possessive form in Jaccard terms and people sets.
    """
    out = []
    for w in words(text):
        if w.endswith("'s"):
            w = w[:-2]
        if w not in STOPWORDS and len(w) > 1:
            out.append(w)
    return out


def term_set(text: str) -> frozenset[str]:
    """The set of :func:`terms` of ``text``."""
    return frozenset(terms(text))


def phrase_terms(phrases: Iterable[str]) -> frozenset[str]:
    """Content terms of a collection of phrases (keywords, people) as one set."""
    out: set[str] = set()
    for p in phrases:
        out.update(terms(p))
    return frozenset(out)


@functools.lru_cache(maxsize=8192)  # asked of the same few names over and over
def normalize_name(name: str) -> str:
    """Canonical form of a person name for set comparisons ("Mel  Smith" -> "mel smith")."""
    return " ".join(words(name))


def normalize_apostrophes(text: str) -> str:
    """Curly quotes to straight ones, so contraction and possessive rules see one spelling."""
    text = text or ""
    if text.isascii():
        return text  # no curly quote to replace (str.isascii is a flag read, not a scan)
    return text.replace("\u2019", "'").replace("\u2018", "'").replace("\u201c", '"').replace("\u201d", '"')


def jaccard(a: Iterable[str], b: Iterable[str]) -> float:
    """|A ∩ B| / |A ∪ B|, and 0.0 when both are empty."""
    sa, sb = set(a), set(b)
    if not sa and not sb:
        return 0.0
    return len(sa & sb) / len(sa | sb)


def count_tokens(text: str) -> int:
    """Token count used for n_i and Cell token caps (see the module docstring)."""
    return len(_TOKEN.findall(text or ""))


# The only non-ASCII characters that a case-insensitive regex matches to an ASCII letter
# (İ ı ſ K match i, i, s, k; checked over every code point in tests/test_extract_rule_identity.py).
_FOLDS_TO_ASCII = frozenset("\u0130\u0131\u017f\u212a")


def cue_text(text: str) -> str | None:
    """``text`` lowercased, for a cheap pre-check before a case-insensitive regex scan, or None
    when such a pre-check cannot be trusted for ``text``.

    If a ``re.IGNORECASE`` pattern can match only where one of some ASCII words (its cues)
    occurs, then it can match ``text`` only if ``has_cue(cue_text(text), cues)``: the regex
    matches an ASCII letter only to that letter in either case or to İ ı ſ K, and a text
    with none of those four holds the cue, lowercased, in its lowercased form.
    """
    if not text.isascii() and not _FOLDS_TO_ASCII.isdisjoint(text):
        return None
    return text.lower()


def has_cue(low: str | None, cues: Iterable[str]) -> bool:
    """Whether ``low`` (from :func:`cue_text`) holds one of ``cues`` (lowercase); True when
    ``low`` is None (no pre-check: run the regex)."""
    return low is None or any(c in low for c in cues)
