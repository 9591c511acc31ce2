"""Person names in English text: known speakers, nicknames and other capitalized names.

:func:`known_name` maps a token to the known participant it names (first name or a nickname
prefix such as "Mel" for Melanie); :func:`proper_names` finds person-like names in a
sentence; :func:`name_tokens` lists the tokens of a text that name a known participant.
"""

from __future__ import annotations

import functools
import re
from typing import Sequence

from memcompile_local.language.lexicon import NON_NAMES
from memcompile_local.language.tokens import normalize_apostrophes, normalize_name

__all__ = ["known_name", "proper_names", "name_tokens"]

_NAME_TOKEN = re.compile(r"[A-Za-z][A-Za-z'\-]*")


@functools.lru_cache(maxsize=1024)
def _known_table(known: tuple[str, ...]) -> dict[str, str]:
    """Every lowercased token that names one of ``known`` (the full name, the first name, a
    3+ letter prefix of the first name), mapped to the first such name in ``known`` order.

    Built once per list of names (a turn's speaker and addressee recur across its sentences)
    instead of comparing each token with each name. Shared between threads: read it, never
    change it.
    """
    table: dict[str, str] = {}
    for name in known:
        full = name.lower()
        first = full.split()[0] if full.split() else full
        for key in (full, first, *(first[:k] for k in range(3, len(first) + 1))):
            table.setdefault(key, name)  # an earlier name keeps a token they share
    return table


def known_name(token: str, known: Sequence[str]) -> str | None:
    """The known person a token refers to: exact first name or a 3+ letter nickname prefix."""
    return _known_table(tuple(known)).get(token.lower())


def proper_names(sentence: str, known: Sequence[str] = ()) -> list[str]:
    """Person-like names in a sentence, in order of appearance, without duplicates.

    A name is a run of capitalized words that is not an acronym, not in a small list of
    capitalized non-names (months, days, "I", holidays, interjections, pronouns), not
    preceded by "the" (places, titles), and not at the start of the sentence, where
    capitalization says nothing. Tokens matching a ``known`` name (first name or a nickname
    prefix such as "Mel" for "Melanie") are reported as that known name wherever they are.
    """
    sentence = sentence or ""
    if len(sentence) <= _CACHED_CHARS:
        return list(_cached_proper_names(sentence, tuple(known)))
    return list(_proper_names(sentence, tuple(known)))


def _proper_names(sentence: str, known: tuple[str, ...]) -> tuple[str, ...]:
    s = normalize_apostrophes(sentence)
    out: list[str] = []
    seen: set[str] = set()

    def add(name: str) -> None:
        key = normalize_name(name)
        if key and key not in seen:
            seen.add(key)
            out.append(name)

    def at_start(start: int) -> bool:
        """Nothing but whitespace before ``start``, or a sentence-opening mark (the last
        non-space character is looked at directly: slicing the prefix was quadratic)."""
        j = start - 1
        while j >= 0 and s[j].isspace():
            j -= 1
        return j < 0 or s[j] in ".!?:\"("

    table = _known_table(known) if known else None
    run: list[str] = []  # the capitalized words of the name being read
    run_end = -1
    skipped_end = -1
    previous = ""  # the token before this one
    for m in _NAME_TOKEN.finditer(s):
        start, end, raw = m.start(), m.end(), m.group(0)
        before, previous = previous, raw
        tok = raw[:-2] if raw.endswith("'s") else raw.rstrip("'")
        match = table.get(tok.lower()) if table else None
        if match is not None:
            if run:
                add(" ".join(run))
                run = []
            add(match)
            continue
        if not tok[:1].isupper() or (len(tok) > 1 and tok.isupper()):  # not capitalized
            skipped_end = -1
            if run:
                add(" ".join(run))
                run = []
            continue
        # A capitalized word right after "the" or a skipped one ("the Rose Garden") belongs to
        # a non-person proper noun and is skipped with it.
        if before.lower() == "the" or (skipped_end >= 0 and start - skipped_end <= 1):
            if run:
                add(" ".join(run))
                run = []
            skipped_end = end
            continue
        skipped_end = -1
        if tok in NON_NAMES or raw in NON_NAMES or at_start(start) or len(tok) < 2:
            if run:
                add(" ".join(run))
                run = []
            continue
        if run and start - run_end <= 1:
            run.append(tok)
        else:
            if run:
                add(" ".join(run))
            run = [tok]
        run_end = end
    if run:
        add(" ".join(run))
    return tuple(out)


# proper_names is a pure function of its arguments, and a rule extraction asks it of the same
# sentence twice (is the sentence small talk to a named person? which people does its claim
# name?), so recent answers are kept; immutable tuples, safe to share between threads. Only
# sentences up to _CACHED_CHARS are kept, so a long line of a pasted document is not held.
_CACHED_CHARS = 2000
_cached_proper_names = functools.lru_cache(maxsize=4096)(_proper_names)


def name_tokens(text: str, known: Sequence[str]) -> set[str]:
    """Lowercased capitalized tokens of ``text`` that refer to a known person ("Mel", "Caroline's").

    Only capitalized tokens count, so a common word that happens to be a name prefix
    ("car" for "Caroline") is not mistaken for a nickname.
    """
    out: set[str] = set()
    if not known:
        return out
    table = _known_table(tuple(known))
    for raw in _NAME_TOKEN.findall(normalize_apostrophes(text)):
        if raw[0].isupper():  # the token's first letter, which dropping "'s" keeps
            low = (raw[:-2] if raw.endswith("'s") else raw).lower()
            if low in table:
                out.add(low)
    return out
