"""Person names in English text: known speakers, nicknames and other capitalized names.

:func:`known_name` maps a token to the known participant it names (first name or a nickname
prefix such as "Mel" for Melanie); :func:`proper_names` finds person-like names in a
sentence; :func:`name_tokens` lists the tokens of a text that name a known participant.
"""

from __future__ import annotations

import re
from typing import Sequence

from memcompile_local.language.lexicon import NON_NAMES
from memcompile_local.language.tokens import normalize_apostrophes, normalize_name

__all__ = ["known_name", "proper_names", "name_tokens"]

_NAME_TOKEN = re.compile(r"[A-Za-z][A-Za-z'\-]*")


def known_name(token: str, known: Sequence[str]) -> str | None:
    """The known person a token refers to: exact first name or a 3+ letter nickname prefix."""
    t = token.lower()
    for name in known:
        full = name.lower()
        first = full.split()[0] if full.split() else full
        if t == full or t == first or (len(t) >= 3 and first.startswith(t)):
            return name
    return None


def proper_names(sentence: str, known: Sequence[str] = ()) -> list[str]:
    """Person-like names in a sentence, in order of appearance, without duplicates.

    A name is a run of capitalized words that is not an acronym, not in a small list of
    capitalized non-names (months, days, "I", holidays, interjections, pronouns), not
    preceded by "the" (places, titles), and not at the start of the sentence, where
    capitalization says nothing. Tokens matching a ``known`` name (first name or a nickname
    prefix such as "Mel" for "Melanie") are reported as that known name wherever they are.
    """
    s = normalize_apostrophes(sentence)
    tokens = [(m.start(), m.end(), m.group(0)) for m in _NAME_TOKEN.finditer(s)]
    out: list[str] = []
    seen: set[str] = set()

    def add(name: str) -> None:
        key = normalize_name(name)
        if key and key not in seen:
            seen.add(key)
            out.append(name)

    known_list = list(known)
    run: list[str] = []
    run_end = -1
    skipped_end = -1

    def flush() -> None:
        nonlocal run
        if run:
            add(" ".join(run))
        run = []

    for idx, (start, end, raw) in enumerate(tokens):
        tok = raw[:-2] if raw.endswith("'s") else raw.rstrip("'")
        match = known_name(tok, known_list) if known_list else None
        prefix = s[:start].rstrip()
        at_start = not prefix or prefix[-1] in ".!?:\"(" or prefix.endswith(("...",))
        prev_word = tokens[idx - 1][2].lower() if idx > 0 else ""
        if match is not None:
            flush()
            add(match)
            continue
        capitalized = tok[:1].isupper() and not (len(tok) > 1 and tok.isupper())
        # A capitalized word right after a skipped one ("the Rose Garden") belongs to the same
        # non-person proper noun and is skipped with it.
        continues_skipped = skipped_end >= 0 and start - skipped_end <= 1 and capitalized
        if capitalized and (prev_word == "the" or continues_skipped):
            flush()
            skipped_end = end
            continue
        skipped_end = -1
        if not capitalized or tok in NON_NAMES or raw in NON_NAMES or at_start or len(tok) < 2:
            flush()
            continue
        if run and start - run_end <= 1:
            run.append(tok)
        else:
            flush()
            run = [tok]
        run_end = end
    flush()
    return out


def name_tokens(text: str, known: Sequence[str]) -> set[str]:
    """Lowercased capitalized tokens of ``text`` that refer to a known person ("Mel", "Caroline's").

    Only capitalized tokens count, so a common word that happens to be a name prefix
    ("car" for "Caroline") is not mistaken for a nickname.
    """
    out: set[str] = set()
    if not known:
        return out
    for raw in _NAME_TOKEN.findall(normalize_apostrophes(text)):
        tok = raw[:-2] if raw.endswith("'s") else raw
        if tok[:1].isupper() and known_name(tok, known) is not None:
            out.add(tok.lower())
    return out
