"""``fence.escape_controls`` returns a printable text as it is; it must agree with the escape
applied character by character on every kind of character."""

from __future__ import annotations

import random
import unicodedata

from memcompile_local import fence


def _slow(text: str, keep_tabs: bool) -> str:
    out = []
    for ch in text:
        if ch == "\t" and keep_tabs:
            out.append(ch)
        elif unicodedata.category(ch) in fence._UNSAFE_CATEGORIES:
            out.append(fence._escape_char(ch))
        else:
            out.append(ch)
    return "".join(out)


def test_the_printable_shortcut_escapes_what_the_character_walk_escapes():
    rng = random.Random(7)
    # One character of every category that occurs below U+3000, plus the separators and marks
    # a chat export carries (no-break space, zero-width joiner, line separator, BOM).
    by_category: dict[str, str] = {}
    for cp in range(0x3000):
        by_category.setdefault(unicodedata.category(chr(cp)), chr(cp))
    pool = list(by_category.values()) + list("\u00a0\u200d\u2028\u2029\ufeff\t\n\r\x1b\x7f ") + list("abc xyz")
    texts = ["", "plain words only", "tab\there", "line\u2028sep", "emoji \U0001f469\u200d\U0001f4bb ok"]
    texts += ["".join(rng.choice(pool) for _ in range(rng.randint(1, 40))) for _ in range(3000)]
    for t in texts:
        for keep in (True, False):
            assert fence.escape_controls(t, keep_tabs=keep) == _slow(t, keep), repr(t)
    assert fence.escape_controls("a\nb") == "a\\nb"  # the walk still runs where something needs escaping
