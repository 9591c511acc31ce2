"""Hand-worked cases for the lexical metrics, and BLEU-1 against NLTK's implementation."""

from __future__ import annotations

import math

import pytest

from memcompile_local.bench import metrics as M
from memcompile_local.errors import DataFormatError


# --------------------------------------------------------------------------------------
# mem0 F1 (token sets; . , ! ? become spaces)
# --------------------------------------------------------------------------------------

def test_mem0_f1_extra_words():
    # P = {yes, she, did}, G = {yes}: precision 1/3, recall 1, F1 = 2*(1/3)/(4/3) = 0.5
    assert M.mem0_f1("Yes, she did!", "yes") == pytest.approx(0.5)


def test_mem0_f1_uses_sets_not_counts():
    # P = {the, cat} (the repeated word counts once), G = {the, cat, sat}
    # precision 2/2, recall 2/3, F1 = 2*(2/3)/(5/3) = 0.8
    assert M.mem0_f1("the the cat", "The cat sat") == pytest.approx(0.8)


def test_mem0_f1_punctuation_rules():
    # . and , and ! and ? are replaced: "7 May, 2023." -> {7, may, 2023}
    assert M.mem0_f1("7 May, 2023.", "7 may 2023") == 1.0
    # ":" is not one of the four: {at, 10:30} vs {10, 30} share nothing
    assert M.mem0_f1("at 10:30", "10 30") == 0.0
    # "?" glued to a word is split off: {why, not} vs {why} -> P 1/2, R 1 -> 2/3
    assert M.mem0_f1("why?not", "why") == pytest.approx(2 / 3)


def test_mem0_f1_empty_and_numbers():
    assert M.mem0_f1("", "anything") == 0.0
    assert M.mem0_f1("anything", "   ") == 0.0
    assert M.mem0_f1(None, "x") == 0.0
    # Only punctuation: the token set is empty, so 0 rather than a division by zero.
    assert M.mem0_f1("...", "yes") == 0.0
    # LoCoMo stores some gold years as ints.
    assert M.mem0_f1("2022", 2022) == 1.0


def test_mem0_tokens():
    assert M.mem0_tokens("Hi! Is it 5.30, Bob?") == ["hi", "is", "it", "5", "30", "bob"]


# --------------------------------------------------------------------------------------
# BLEU-1
# --------------------------------------------------------------------------------------

def test_bleu1_hand_worked():
    # Two matches out of two hypothesis tokens, p1 = 1; c = 2 < r = 6, BP = exp(1 - 6/2) = exp(-2)
    assert M.bleu1_from_tokens(["the", "cat"], ["the", "cat", "sat", "on", "the", "mat"]) == pytest.approx(
        math.exp(-2))
    # Clipping: "the" x3 in the hypothesis, once in the reference -> 1/3; c = 3 > r = 2, BP = 1
    assert M.bleu1_from_tokens(["the", "the", "the"], ["the", "cat"]) == pytest.approx(1 / 3)
    # Equal lengths: BP = exp(0) = 1; 2 of 3 match
    assert M.bleu1_from_tokens(["a", "b", "x"], ["a", "b", "c"]) == pytest.approx(2 / 3)
    # No match: 0 (NLTK returns 0 before smoothing)
    assert M.bleu1_from_tokens(["x"], ["y"]) == 0.0
    assert M.bleu1_from_tokens([], ["y"]) == 0.0
    assert M.bleu1_from_tokens(["y"], []) == 0.0


def test_mem0_bleu1_tokenization_and_sentence_split():
    pytest.importorskip("nltk")
    # Lowercased Treebank tokens; the final period and the comma are their own tokens.
    assert M.bleu_tokens("Yes, she went.") == ["yes", ",", "she", "went", "."]
    # A period ending a word in mid-text ends a sentence, so "park" is split from ".":
    # hyp = we went to the park . it was fun . (10 tokens), ref = the park (2)
    # matches: the, park -> p1 = 2/10; c > r so BP = 1
    assert M.bleu_tokens("We went to the park. It was fun.") == [
        "we", "went", "to", "the", "park", ".", "it", "was", "fun", "."]
    assert M.mem0_bleu1("We went to the park. It was fun.", "the park") == pytest.approx(0.2)
    # Numbers, initials and abbreviations do not end a sentence (Punkt keeps them whole in
    # lowercased text), and an ellipsis is one token.
    assert M.bleu_tokens("At 5 p.m. on Jan. 3. wait... ok") == [
        "at", "5", "p.m.", "on", "jan.", "3.", "wait", "...", "ok"]
    # Gold ints are rendered as text: "2022" vs ["in", "2022"]: p1 = 1/2, c = 2 > r = 1
    assert M.mem0_bleu1("In 2022", 2022) == pytest.approx(0.5)
    assert M.mem0_bleu1("", "x") == 0.0
    # The report names the tokenizer that produced these tokens: Punkt when its data is installed.
    assert M.bleu_tokenizer_name() == (
        "nltk.word_tokenize (Punkt sentence split + NLTKWordTokenizer)" if M._punkt_available()
        else "NLTKWordTokenizer with offline period sentence split (Punkt data not installed)")


_BLEU_PAIRS = [
    ("7 May 2023", "7 May 2023"),
    ("On 7 May 2023", "7 May 2023"),
    ("May 2023", "7 May 2023"),
    ("She went to the LGBTQ support group last week.", "7 May 2023"),
    ("Psychology, counseling", "Psychology, counseling certification"),
    ("counseling and mental health", "Psychology, counseling certification"),
    ("the the the the", "the cat is on the mat"),
    ("cat", "the cat is on the mat"),
    ("the cat is on the mat", "cat"),
    ("Yes", "Yes, she would."),
    ("No.", "Likely yes"),
    ("Unknown", "Sweden"),
    ("", "Sweden"),
    ("Sweden", ""),
    ("A sunset painting of a lake, with pink and orange hues!", "a painting of a sunset"),
    ("camping, hiking, swimming, and pottery", "pottery, camping, painting, swimming"),
    ("She's been doing it since 2016.", "since 2016"),
    ("Mel and her kids (3 of them) went camping.", "camping with her kids"),
    ("\"Becoming Nicole\"", "\"Becoming Nicole\" by Amy Ellis Nutt"),
    ("two years ago, in 2021", "2021"),
    ("running; races? yes!", "running races"),
    ("e-mail her at 10:30 tomorrow", "email at 10:30"),
]


@pytest.mark.parametrize("prediction,gold", _BLEU_PAIRS)
def test_bleu1_matches_nltk(prediction, gold):
    pytest.importorskip("nltk")
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

    hyp = M.bleu_tokens(prediction)
    ref = M.bleu_tokens(gold)
    expected = sentence_bleu([ref], hyp, weights=(1, 0, 0, 0),
                             smoothing_function=SmoothingFunction().method1)
    assert M.bleu1_from_tokens(hyp, ref) == pytest.approx(float(expected), abs=1e-12)
    assert M.mem0_bleu1(prediction, gold) == pytest.approx(float(expected), abs=1e-12)


@pytest.mark.parametrize("prediction,gold", [p for p in _BLEU_PAIRS if p[0].count(". ") == 0])
def test_single_sentence_tokens_equal_treebank(prediction, gold):
    """For one-sentence answers the offline path gives exactly NLTKWordTokenizer's tokens."""
    pytest.importorskip("nltk")
    from nltk.tokenize import NLTKWordTokenizer

    assert M.bleu_tokens(prediction) == NLTKWordTokenizer().tokenize(prediction.lower())


# --------------------------------------------------------------------------------------
# LoCoMo F1 (normalize, stem, multiset overlap)
# --------------------------------------------------------------------------------------

def test_locomo_normalize():
    assert M.locomo_normalize("The painting of a sunrise!") == "painting of sunrise"
    # Punctuation is deleted, not spaced; "and" is dropped like the articles.
    assert M.locomo_normalize("Don't stop, Ann and Bob.") == "dont stop ann bob"
    # Word boundaries: "another" and "bandana" keep their letters.
    assert M.locomo_normalize("another bandana") == "another bandana"
    assert M.locomo_normalize(None) == ""


def test_locomo_f1_articles_and_stemming():
    pytest.importorskip("nltk")
    # pred -> "painting of sunrise" -> [paint, of, sunris]; gold -> [sunris, paint]
    # common 2: P = 2/3, R = 1, F1 = 2*(2/3)/(5/3) = 0.8
    assert M.locomo_f1("The painting of a sunrise!", "sunrise painting", 4) == pytest.approx(0.8)
    # pred [run, race], gold "ran a race" -> [ran, race]: common 1, P = R = 1/2, F1 = 0.5
    assert M.locomo_f1("running races", "ran a race", 2) == pytest.approx(0.5)
    # "don't" -> "dont": pred [i, dont, know], gold [dont]: P = 1/3, R = 1 -> 0.5
    assert M.locomo_f1("I don't know", "dont", 4) == pytest.approx(0.5)


def test_locomo_f1_multiset_overlap():
    pytest.importorskip("nltk")
    # Counter overlap: dog x1 and cat x1 -> 2 of 3 on each side -> F1 = 2/3
    assert M.locomo_f1("dog dog cat", "dog cat cat", 4) == pytest.approx(2 / 3)
    # mem0's set F1 sees identical sets here.
    assert M.mem0_f1("dog dog cat", "dog cat cat") == 1.0


def test_locomo_f1_category1_comma_split():
    pytest.importorskip("nltk")
    # gold items paris, rome, berlin; predicted items rome, paris
    # best per gold item: 1, 1, 0 -> mean 2/3
    assert M.locomo_f1("Rome, Paris", "Paris, Rome, Berlin", 1) == pytest.approx(2 / 3)
    # One predicted item [hike, camp] against gold items [camp] and [hike]:
    # each P = 1/2, R = 1 -> 2/3; mean 2/3. In category 4 the comma is just punctuation,
    # so both sides are {hike, camp} -> 1.0.
    assert M.locomo_f1("Hiking and camping", "camping, hiking", 1) == pytest.approx(2 / 3)
    assert M.locomo_f1("Hiking and camping", "camping, hiking", 4) == pytest.approx(1.0)
    assert M.locomo_f1("", "a, b", 1) == 0.0


def test_locomo_f1_category3_semicolon_cut():
    pytest.importorskip("nltk")
    # Only "Psychology" is the gold for category 3 -> exact match
    assert M.locomo_f1("psychology", "Psychology; counseling", 3) == pytest.approx(1.0)
    # Without the cut the ';' is deleted: gold [psycholog, counsel] -> P 1, R 1/2 -> 2/3
    assert M.locomo_f1("psychology", "Psychology; counseling", 4) == pytest.approx(2 / 3)


def test_locomo_f1_categories_and_empty():
    pytest.importorskip("nltk")
    # int gold: pred [in, 2022] vs [2022] -> P 1/2, R 1 -> 2/3; string category accepted
    assert M.locomo_f1("In 2022.", 2022, "2") == pytest.approx(2 / 3)
    assert M.locomo_f1("", "x", 2) == 0.0
    assert M.locomo_f1("the", "a", 4) == 0.0  # both normalize to nothing
    with pytest.raises(DataFormatError):
        M.locomo_f1("x", "x", 5)
    with pytest.raises(DataFormatError):
        M.locomo_f1("x", "x", 7)
    with pytest.raises(DataFormatError):
        M.locomo_f1("x", "x", "multi-hop")


def test_locomo_category_names():
    assert M.LOCOMO_CATEGORY_NAMES[1] == "multi-hop"
    assert M.LOCOMO_CATEGORY_NAMES[4] == "single-hop"
    assert M.locomo_category("3") == 3
    with pytest.raises(DataFormatError):
        M.locomo_category(True)


def test_missing_nltk_raises_missing_extra(monkeypatch):
    import sys

    from memcompile_local.errors import MissingExtraError

    for cached in (M._punkt_available, M._treebank, M._stemmer):
        cached.cache_clear()
    monkeypatch.setitem(sys.modules, "nltk", None)  # makes "import nltk" fail
    with pytest.raises(MissingExtraError) as info:
        M.mem0_bleu1("a", "a")
    assert info.value.extra == "bench" and info.value.package == "nltk"
    with pytest.raises(MissingExtraError):
        M.locomo_f1("a", "a", 4)
    assert M.mem0_f1("a", "a") == 1.0  # the set F1 needs no nltk
