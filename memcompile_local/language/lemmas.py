"""Base forms of English verbs ("went" -> "go", "baking" -> "bake", "tries" -> "try").

A small rule set (irregular table, -ied/-ed/-ing/-ies/-es/-s endings, undoing consonant
doubling and restoring a silent e) that is good enough for cue words and predicates; it is
not a general lemmatizer.
"""

from __future__ import annotations

import re

from memcompile_local.language.lexicon import IRREGULAR_VERBS, PRESENT_VERBS

__all__ = ["lemma"]

# Stems that lost a silent e before -ed/-ing: prioritiz(e), carv(e), danc(e), judg(e), us(e),
# cur(e), celebrat(e), and one-vowel stems such as bak(e), skat(e).
_NEEDS_E = re.compile(r"(?:iz|yz|v|[^aeiou]c|dg|^us|[^aeiou]us|ur|[^aeiou]at)$|^[^aeiou]+[aeiou][bkmptz]$")


_VOWEL = re.compile(r"[aeiouy]")


def _strip_suffix(w: str, n: int) -> str:
    """Base of an -ed/-ing form: undo consonant doubling, restore a silent e when likely."""
    base = w[:-n]
    if len(base) > 2 and base[-1] == base[-2] and base[-1] not in "lsfz":
        return base[:-1]
    if base + "e" in PRESENT_VERBS or (len(base) >= 3 and _NEEDS_E.search(base)):
        return base + "e"
    return base


def lemma(word: str) -> str:
    """Base form of one (lowercased) word; words that are not verb forms come back unchanged."""
    w = word.lower()
    if w in IRREGULAR_VERBS:
        return IRREGULAR_VERBS[w]
    if w.endswith("ied") and len(w) > 4:
        return w[:-3] + "y"
    if w.endswith("ed") and len(w) > 4:
        return _strip_suffix(w, 2)
    if w.endswith("ing") and len(w) > 4 and _VOWEL.search(w[:-3]):
        return _strip_suffix(w, 3)
    if w.endswith("ies") and len(w) > 4:
        return w[:-3] + "y"
    if w.endswith("es") and w[:-2] in PRESENT_VERBS:
        return w[:-2]
    if w.endswith("s") and w[:-1] in PRESENT_VERBS:
        return w[:-1]
    return w
