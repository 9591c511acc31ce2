"""BM25 lexical channel: bm25s engine checked against rank_bm25's BM25Okapi.

Equivalence claimed (see memcompile_local/address/lexical.py): our scores equal
``BM25Okapi(corpus, k1=1.5, b=0.75)`` (default epsilon 0.25) for the same token lists, including
the epsilon floor given to terms in more than half of the documents. No stock bm25s method does:
"atire" shares the (k1 + 1) tf factor but uses idf log(N/df); "robertson"/"lucene" omit the
(k1 + 1) factor; "robertson" clips negative idf to 0; "lucene" uses log(1 + (N-df+.5)/(df+.5)).
Our index uses bm25s's atire tf factor with its lucene idf and rescales each term column to the
Okapi idf. Rankings are compared with ties (equal scores) allowed to appear in either order.
"""

from __future__ import annotations

import json
import math
import random
import re

import numpy as np
import pytest

from memcompile_local.address.lexical import LexicalIndex, bm25_top, descriptor_document, okapi_idf, tokenize
from memcompile_local.types import Descriptor

from _data_paths import LOCOMO_DEV, require_dev

DEV = LOCOMO_DEV  # ../shared/data beside the clone; skipped locally without it, failing in CI
TOP = 96


def reference_top(ref, query, k):
    scores = np.asarray(ref.get_scores(query), dtype=np.float64)
    idx = [i for i in range(len(scores)) if scores[i] > 0]
    idx.sort(key=lambda i: (-scores[i], i))
    return [(i, float(scores[i])) for i in idx[:k]], scores


def assert_same_ranking(ours, theirs, ref_scores, tol=1e-6):
    assert len(ours) == len(theirs)
    for (i, s), (j, t) in zip(ours, theirs):
        assert s == pytest.approx(t, abs=tol)
        if i != j:  # only a tie may swap two documents
            assert ref_scores[i] == pytest.approx(ref_scores[j], abs=1e-9)


def test_hand_computed_scores_with_negative_idf_floor():
    docs = [["a", "b"], ["a", "c"], ["a"], ["d"]]
    idx = LexicalIndex(docs, k1=1.5, b=0.75)
    pos = math.log(4 - 1 + 0.5) - math.log(1 + 0.5)  # df = 1
    neg = math.log(4 - 3 + 0.5) - math.log(3 + 0.5)  # df = 3 < 0 -> floored
    floor = 0.25 * (neg + 3 * pos) / 4
    avgdl = 6 / 4

    def tf_part(tf, dl):
        return tf * 2.5 / (tf + 1.5 * (1 - 0.75 + 0.75 * dl / avgdl))

    expected = [floor * tf_part(1, 2), floor * tf_part(1, 2), floor * tf_part(1, 1), 0.0]
    assert idx.scores(["a"]) == pytest.approx(expected, abs=1e-12)
    assert idx.top_k(["a"], 10) == [(2, pytest.approx(expected[2])), (0, pytest.approx(expected[0])),
                                    (1, pytest.approx(expected[1]))]
    assert idx.scores(["b", "b"]) == pytest.approx([2 * pos * tf_part(1, 2), 0, 0, 0], abs=1e-12)
    assert okapi_idf([1, 3], 4) == pytest.approx([pos, 0.25 * (pos + neg) / 2])
    # the floor's mean is order independent to the last bit (vocabulary order follows set order)
    rng = random.Random(0)
    df = [rng.randint(1, 1000) for _ in range(200)]
    assert okapi_idf(df, 1000).tolist() == okapi_idf(df[::-1], 1000).tolist()[::-1]


def test_empty_and_stopword_queries_and_empty_corpus():
    idx = LexicalIndex([["pottery", "kiln"], ["adoption"]])
    assert idx.top_k([], 5) == []
    assert bm25_top(idx, "what is the of a", 5) == []
    assert bm25_top(idx, "unseenword", 5) == []
    assert idx.top_k(["pottery"], 0) == []
    empty = LexicalIndex([[], []])
    assert empty.top_k(["pottery"], 5) == [] and list(empty.scores(["x"])) == [0.0, 0.0]
    assert LexicalIndex([]).top_k(["x"], 3) == []


def test_ties_are_broken_by_document_order():
    idx = LexicalIndex([["x", "y"], ["z"], ["x", "y"], ["w"], ["v"], ["x", "y"], ["u"]])
    assert [i for i, _ in idx.top_k(["x"], 3)] == [0, 2, 5]
    assert [i for i, _ in idx.top_k(["x"], 2)] == [0, 2]
    # a term in most documents gets a negative floor here (mean idf < 0): nothing is returned
    assert LexicalIndex([["x", "y"], ["z"], ["x", "y"], ["x", "y"]]).top_k(["x"], 3) == []


def test_descriptor_document_and_tokenizer():
    d = Descriptor("i", "ns", "D1:1", 0, "Mel bought a kiln.", "Mel", 1, "t", ("Melanie",), ("pottery kiln",))
    assert descriptor_document(d) == "Mel bought a kiln. pottery kiln Melanie"
    assert tokenize(descriptor_document(d)) == ["mel", "bought", "kiln", "pottery", "kiln", "melanie"]


def load_dev():
    return json.loads(require_dev(DEV).read_text())


def raw_turn_docs(sample):
    conv = sample["conversation"]
    docs = []
    for key in sorted((k for k in conv if re.fullmatch(r"session_\d+", k)), key=lambda k: int(k.split("_")[1])):
        for turn in conv[key]:
            docs.append((turn["speaker"], turn["text"], turn.get("blip_caption") or ""))
    return docs


@pytest.mark.parametrize("which", [0, 1])
def test_matches_rank_bm25_on_dev_turns(which):
    rank_bm25 = pytest.importorskip("rank_bm25")
    sample = load_dev()[which]
    corpus = [tokenize(f"{speaker} {text} {caption}") for speaker, text, caption in raw_turn_docs(sample)]
    ours = LexicalIndex(corpus, k1=1.5, b=0.75)
    ref = rank_bm25.BM25Okapi(corpus, k1=1.5, b=0.75)
    checked = 0
    for qa in sample["qa"][:80]:
        q = tokenize(qa["question"])
        if not q:
            continue
        theirs, ref_scores = reference_top(ref, q, TOP)
        assert np.allclose(ours.scores(q), ref_scores, atol=1e-6)
        assert_same_ranking(ours.top_k(q, TOP), theirs, ref_scores)
        checked += 1
    assert checked > 50


def test_matches_rank_bm25_on_descriptor_like_docs_with_frequent_terms():
    """Sentence-level documents with the speaker as the person and the two longest terms as
    keywords. Every document gets the speaker's name, so each name is in about half the
    corpus: queries naming a speaker exercise the idf floor (negative Okapi idf)."""
    rank_bm25 = pytest.importorskip("rank_bm25")
    sample = load_dev()[0]
    docs = []
    for speaker, text, _ in raw_turn_docs(sample):
        for sentence in re.split(r"(?<=[.!?])\s+", text):
            content = tokenize(sentence)
            if not content:
                continue
            keywords = sorted(set(content), key=lambda w: (-len(w), w))[:2]
            d = Descriptor("i", "ns", "p", 0, sentence, speaker, 1, "t", (speaker,), tuple(keywords))
            docs.append(tokenize(descriptor_document(d)))
    ours = LexicalIndex(docs)
    ref = rank_bm25.BM25Okapi(docs, k1=1.5, b=0.75)
    floored = [t for t, v in ref.idf.items() if v == pytest.approx(ref.epsilon * ref.average_idf)]
    assert floored, "expected at least one term with a negative Okapi idf"
    queries = [tokenize(qa["question"]) for qa in sample["qa"][:60]]
    queries += [[name.lower(), "painting"] for name in floored]
    for q in queries:
        if not q:
            continue
        theirs, ref_scores = reference_top(ref, q, TOP)
        assert np.allclose(ours.scores(q), ref_scores, atol=1e-6)
        assert_same_ranking(ours.top_k(q, TOP), theirs, ref_scores)
