"""Lexical answer metrics: the mem0-harness F1 and BLEU-1, and the official LoCoMo F1.

Two conventions are in use for LoCoMo and they give different numbers for the same answer,
so both are provided and every report names which one a figure is:

``mem0_f1`` / ``mem0_bleu1``
    The convention of the comparison tables in the MemCompile paper (Table 1),
    which follow the widely used mem0 evaluation harness.

    * F1 works on token *sets*. A string is lowercased, each of ``. , ! ?`` is replaced by a
      space and the result is split on whitespace. With P the prediction set and G the gold
      set, precision = |P & G| / |P|, recall = |P & G| / |G| and F1 = 2PR / (P + R); the
      score is 0 when either string (after stripping) or either set is empty.
    * BLEU-1 is sentence BLEU with weights (1, 0, 0, 0) and NLTK's smoothing ``method1`` on
      NLTK word tokens of the lowercased strings: clipped unigram precision times the
      brevity penalty. NLTK returns 0 outright when no unigram matches (before smoothing is
      applied), so ``method1`` never changes a BLEU-1 value; the implementation below
      follows that exactly and is tested against ``nltk.translate.bleu_score``.

``locomo_f1``
    The F1 of the LoCoMo benchmark's own evaluation: lowercase, strip ASCII punctuation,
    drop the words a / an / the / and, collapse whitespace, Porter-stem every token and
    compare token *multisets*. Category 1 (multi-hop) answers are lists: prediction and gold
    are split on commas and the score is the mean, over gold items, of the best F1 against
    any predicted item. Category 3 (open-domain) gold is cut at its first ``;``. Categories
    2 and 4 are scored plainly. Category 5 (adversarial) has no gold answer and is not
    scored; asking for it raises ``DataFormatError``.

Tokenization for BLEU. The mem0 harness calls ``nltk.word_tokenize``, which first splits
text into sentences with the Punkt model (``punkt_tab`` data) and then applies NLTK's
Treebank-style ``NLTKWordTokenizer`` to each sentence. When the Punkt data is installed it
is used as is. When it is not (it cannot be downloaded offline), the sentence split is
approximated by :func:`_split_sentences`: on lowercased text Punkt breaks after a period
that ends an ordinary word and is followed by whitespace, and does not break after numbers,
single-letter initials or known abbreviations (its orthographic checks need a capitalised
next word, which lowercased text never has). Benchmark answers are almost always a single
sentence or phrase, for which both paths give identical tokens; :func:`bleu_tokenizer_name`
says which path is active so a report can record it.

nltk is an optional dependency (the ``bench`` extra) and is imported only when a metric
that needs it is called; without it those metrics raise ``MissingExtraError``.
"""

from __future__ import annotations

import functools
import logging
import math
import re
import string
from collections import Counter
from typing import Any, Iterable, Sequence

from memcompile_local.errors import DataFormatError, MissingExtraError

__all__ = [
    "mem0_tokens",
    "mem0_f1",
    "bleu_tokens",
    "bleu1_from_tokens",
    "mem0_bleu1",
    "bleu_tokenizer_name",
    "locomo_normalize",
    "locomo_tokens",
    "locomo_token_f1",
    "locomo_f1",
    "LOCOMO_CATEGORY_NAMES",
    "SCORED_LOCOMO_CATEGORIES",
    "locomo_category",
]

logger = logging.getLogger(__name__)

# LoCoMo's integer categories as the benchmark files number them (owned by the loader).
from memcompile_local.data.locomo import LOCOMO_CATEGORY_NAMES  # noqa: E402
SCORED_LOCOMO_CATEGORIES: tuple[int, ...] = (1, 2, 3, 4)


def _nltk() -> Any:
    """Import nltk or raise ``MissingExtraError`` naming the ``bench`` extra."""
    try:
        import nltk  # noqa: PLC0415 - optional heavy dependency, imported on use
    except ImportError as exc:
        raise MissingExtraError("nltk", "bench", "BLEU-1 and LoCoMo F1") from exc
    return nltk


def _as_text(value: Any) -> str:
    """Answers may arrive as numbers (LoCoMo stores some years as ints); None means empty."""
    if value is None:
        return ""
    return str(value)


# --------------------------------------------------------------------------------------
# mem0-harness F1
# --------------------------------------------------------------------------------------

_MEM0_PUNCT = str.maketrans({".": " ", ",": " ", "!": " ", "?": " "})


def mem0_tokens(text: Any) -> list[str]:
    """Lowercase, replace each of ``. , ! ?`` by a space, split on whitespace."""
    return _as_text(text).lower().translate(_MEM0_PUNCT).split()


def mem0_f1(prediction: Any, gold: Any) -> float:
    """Set-overlap F1 of the mem0 harness (see the module docstring); a value in [0, 1]."""
    pred = _as_text(prediction).strip()
    ref = _as_text(gold).strip()
    if not pred or not ref:
        return 0.0
    pred_set = set(mem0_tokens(pred))
    ref_set = set(mem0_tokens(ref))
    if not pred_set or not ref_set:
        return 0.0
    common = len(pred_set & ref_set)
    precision = common / len(pred_set)
    recall = common / len(ref_set)
    if precision + recall == 0:
        return 0.0
    return 2 * precision * recall / (precision + recall)


# --------------------------------------------------------------------------------------
# BLEU-1
# --------------------------------------------------------------------------------------

# Abbreviations after which the offline sentence split does not break. Punkt's pretrained
# English model knows many more; these are unambiguous ones likely in conversational answers
# (words that are also ordinary words, such as "no", "sun" or "mar", are left out).
_ABBREVIATIONS = frozenset(
    """mr mrs ms dr prof sr jr st mt ft vs etc inc ltd corp dept approx
    jan feb apr jun jul aug sep sept oct nov dec tue tues thu thur thurs fri
    e.g i.e u.s u.k a.m p.m""".split()
)
_NUMBER_LIKE = re.compile(r"^-?[\.,]?\d[\d,\.\-]*$")
_PERIOD_BREAK = re.compile(r"(\S*)\.(?=\s+\S)")


def _split_sentences(text: str) -> list[str]:
    """Approximate Punkt's sentence split of *lowercased* text (see the module docstring).

    Breaks after a period followed by whitespace and more text when the token the period
    ends is an ordinary word: not a number, not a single-letter initial, not a known
    abbreviation, not an ellipsis. ``?`` and ``!`` need no split because the word tokenizer
    separates them everywhere anyway.
    """
    pieces: list[str] = []
    start = 0
    for match in _PERIOD_BREAK.finditer(text):
        # Strip brackets/quotes so "(the park)." still counts as ending the word "park".
        core = match.group(1).rstrip(")]}\"'").lstrip("([{\"'")
        if (not core or _NUMBER_LIKE.match(core) or (len(core) == 1 and core.isalpha())
                or core in _ABBREVIATIONS or core.endswith(".")):
            continue
        pieces.append(text[start:match.end()])
        start = match.end()
    pieces.append(text[start:])
    return [p.strip() for p in pieces if p.strip()]


@functools.lru_cache(maxsize=1)
def _punkt_available() -> bool:
    """Whether ``nltk.word_tokenize`` works here (it needs the Punkt data of this nltk version)."""
    nltk = _nltk()
    try:
        nltk.word_tokenize("a test. another test")
    except LookupError:
        return False
    return True


@functools.lru_cache(maxsize=1)
def _treebank() -> Any:
    from nltk.tokenize import NLTKWordTokenizer  # noqa: PLC0415 - optional dependency

    return NLTKWordTokenizer()


def bleu_tokenizer_name() -> str:
    """Which tokenizer :func:`bleu_tokens` uses in this environment (for reports)."""
    if _punkt_available():
        return "nltk.word_tokenize (Punkt sentence split + NLTKWordTokenizer)"
    return "NLTKWordTokenizer with offline period sentence split (Punkt data not installed)"


def bleu_tokens(text: Any) -> list[str]:
    """NLTK word tokens of the lowercased text, as the mem0 harness feeds BLEU."""
    nltk = _nltk()
    lowered = _as_text(text).lower()
    if _punkt_available():
        return list(nltk.word_tokenize(lowered))
    tokenizer = _treebank()
    tokens: list[str] = []
    for sentence in _split_sentences(lowered):
        tokens.extend(tokenizer.tokenize(sentence))
    return tokens


def bleu1_from_tokens(hypothesis: Sequence[str], reference: Sequence[str]) -> float:
    """Sentence BLEU-1 with one reference, equal to NLTK's with weights (1,0,0,0) and method1.

    p1 = sum over hypothesis word types of min(count in hypothesis, count in reference)
    divided by max(1, len(hypothesis)). NLTK returns 0 when that numerator is 0, before any
    smoothing, so method1's epsilon never enters a unigram-only score. The brevity penalty
    is 1 when the hypothesis is longer than the reference and exp(1 - r / c) otherwise
    (c = hypothesis length, r = reference length). BLEU-1 = p1 * BP, computed as
    ``BP * exp(log p1)`` like NLTK so the floats agree to the last bits.
    """
    hyp_counts = Counter(hypothesis)
    ref_counts = Counter(reference)
    matches = sum(min(n, ref_counts[w]) for w, n in hyp_counts.items())
    if matches == 0:
        return 0.0
    hyp_len = len(hypothesis)
    ref_len = len(reference)
    p1 = matches / max(1, hyp_len)
    bp = 1.0 if hyp_len > ref_len else math.exp(1 - ref_len / hyp_len)
    return bp * math.exp(math.log(p1))


def mem0_bleu1(prediction: Any, gold: Any) -> float:
    """BLEU-1 of the mem0 harness: :func:`bleu1_from_tokens` on :func:`bleu_tokens`."""
    return bleu1_from_tokens(bleu_tokens(prediction), bleu_tokens(gold))


# --------------------------------------------------------------------------------------
# Official LoCoMo F1
# --------------------------------------------------------------------------------------

_ASCII_PUNCT = str.maketrans("", "", string.punctuation)
_LOCOMO_DROP = re.compile(r"\b(a|an|the|and)\b")


def locomo_normalize(text: Any) -> str:
    """Lowercase, delete ASCII punctuation, blank out a/an/the/and, collapse whitespace.

    Punctuation is deleted (not replaced by a space), so ``"don't"`` becomes ``"dont"`` and
    ``"10:30"`` becomes ``"1030"``; the word filter runs after punctuation removal.
    """
    lowered = _as_text(text).lower().translate(_ASCII_PUNCT)
    return " ".join(_LOCOMO_DROP.sub(" ", lowered).split())


@functools.lru_cache(maxsize=1)
def _stemmer() -> Any:
    _nltk()
    from nltk.stem import PorterStemmer  # noqa: PLC0415 - optional dependency

    return PorterStemmer()


def locomo_tokens(text: Any) -> list[str]:
    """Porter stems of the normalized words, in order."""
    stem = _stemmer().stem
    return [stem(w) for w in locomo_normalize(text).split()]


def locomo_token_f1(prediction: Any, gold: Any) -> float:
    """Multiset-overlap F1 of two strings after :func:`locomo_tokens`; 0 when nothing overlaps."""
    pred = locomo_tokens(prediction)
    ref = locomo_tokens(gold)
    same = sum((Counter(pred) & Counter(ref)).values())
    if same == 0:
        return 0.0
    precision = same / len(pred)
    recall = same / len(ref)
    return 2 * precision * recall / (precision + recall)


def locomo_category(category: Any, where: str = "category") -> int:
    """The integer LoCoMo category of ``category`` (int or digit string), else ``DataFormatError``."""
    if isinstance(category, bool):
        value = None
    elif isinstance(category, int):
        value = category
    elif isinstance(category, str) and category.strip().isdigit():
        value = int(category.strip())
    else:
        value = None
    if value not in LOCOMO_CATEGORY_NAMES:
        raise DataFormatError("<locomo question>", where, "a LoCoMo category 1-5", f"got {category!r}")
    return value  # type: ignore[return-value]


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0


def locomo_f1(prediction: Any, gold: Any, category: Any) -> float:
    """The LoCoMo benchmark's F1 for one question of category 1-4 (see the module docstring).

    Raises ``DataFormatError`` for category 5 (not scored) or an unknown category.
    """
    cat = locomo_category(category)
    if cat == 5:
        raise DataFormatError("<locomo question>", "category", "a scored LoCoMo category 1-4",
                              "category 5 (adversarial) has no gold answer and is not scored")
    pred = _as_text(prediction)
    ref = _as_text(gold)
    if cat == 1:
        pred_items = [p.strip() for p in pred.split(",")]
        gold_items = [g.strip() for g in ref.split(",")]
        return _mean(max(locomo_token_f1(p, g) for p in pred_items) for g in gold_items)
    if cat == 3:
        ref = ref.split(";", 1)[0].strip()
    return locomo_token_f1(pred, ref)


# --------------------------------------------------------------------------------------
# Evidence recall per LongMemEval question type
# --------------------------------------------------------------------------------------

def _recall(selected: Sequence[str], gold: Sequence[str]) -> float | None:
    gold_set = set(gold)
    return len(gold_set & set(selected)) / len(gold_set) if gold_set else None


def recall_by_type(rows: Iterable[dict[str, Any]], *, type_key: str = "question_type",
                   k: int | None = None) -> dict[str, Any]:
    """Turn and session recall of every selection stage, per question type and overall.

    A row's stages are ``selected_ids`` (as ``selected``) and each ``recall_stages`` entry
    (``final``, ``pool_top10``, ``baseline_dense``, ...). Turn recall: the share of the row's
    ``gold_evidence`` turns selected; session recall: the share of its ``answer_session_ids``
    with a selected turn. Abstention rows and rows without the gold of a kind are left out of
    that kind's mean. ``k``: score only the first ``k`` ids of each stage (None: all).

    Returns ``{"k", "types": [...], "stages": [...], "table": {stage: {type or "overall":
    {"n_turn", "turn", "n_session", "session", "mean_selected"}}}}``; means are None when no row
    counts.
    """
    from memcompile_local.bench.coverage import session_of

    rows = list(rows)
    types = sorted({str(r.get(type_key)) for r in rows})
    stages: list[str] = []
    if any("selected_ids" in r for r in rows):
        stages.append("selected")
    for r in rows:
        for s in r.get("recall_stages") or {}:
            if s not in stages:
                stages.append(s)
    table: dict[str, dict[str, dict[str, Any]]] = {}
    for stage in stages:
        acc: dict[str, dict[str, list[float]]] = {}
        for r in rows:
            ids = r.get("selected_ids") if stage == "selected" and "selected" not in (r.get("recall_stages") or {}) \
                else (r.get("recall_stages") or {}).get(stage)
            if ids is None or r.get("is_abstention"):
                continue
            ids = list(ids)[:k] if k is not None else list(ids)
            turn = _recall(ids, r.get("gold_evidence") or ())
            session = _recall([session_of(i) for i in ids], r.get("answer_session_ids") or ())
            for group in (str(r.get(type_key)), "overall"):
                a = acc.setdefault(group, {"turn": [], "session": [], "size": []})
                a["size"].append(float(len(ids)))
                if turn is not None:
                    a["turn"].append(turn)
                if session is not None:
                    a["session"].append(session)
        table[stage] = {
            group: {"n_turn": len(a["turn"]), "turn": _mean(a["turn"]) if a["turn"] else None,
                    "n_session": len(a["session"]), "session": _mean(a["session"]) if a["session"] else None,
                    "mean_selected": _mean(a["size"]) if a["size"] else None}
            for group, a in acc.items()}
    return {"k": k, "types": types, "stages": stages, "table": table}
