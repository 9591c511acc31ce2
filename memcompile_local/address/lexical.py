"""Lexical channel: BM25 over descriptor documents (MemCompile paper, Section 3.2.4, Appendix B.3).

Documents and queries are tokenized with ``text.terms`` (lowercased content words, stopwords
and one-character tokens removed), the same normalization behind every Jaccard term set, so
the lexical channel and the candidate score (Eq. 7) see one vocabulary. A descriptor's
document is its claim text followed by its keyword phrases and its people. Repeated query
terms count once per occurrence (an intent keyword that repeats a question word weighs double).

Scoring function: Okapi BM25 as implemented by rank_bm25's ``BM25Okapi`` (k1 = 1.5,
b = 0.75 from the config):

    score(q, d) = sum_{t in q} idf(t) * tf(t,d) * (k1 + 1) / (tf(t,d) + k1 * (1 - b + b * |d| / avgdl))
    idf(t)      = log(N - df + 0.5) - log(df + 0.5), and for terms where that is negative
                  (df > N/2): OKAPI_EPSILON * mean idf over the vocabulary.

bm25s is the engine. None of its built-in variants equals this function: ``atire`` has the
same term-frequency factor (with ``k1 + 1``) but idf log(N/df); ``robertson`` and ``lucene``
drop the ``k1 + 1`` factor, ``robertson`` clips negative idf to 0 instead of the epsilon floor,
and ``lucene`` uses log(1 + (N - df + 0.5)/(df + 0.5)). So the index is built with the
``atire`` term-frequency factor and the always-positive ``lucene`` idf, and each term's column
of bm25s's precomputed sparse impact matrix is then multiplied by ``idf_okapi / idf_lucene``.
The result equals BM25Okapi up to float64 rounding (tests/test_lexical.py checks this on
the dev conversations). The scale matters: Eq. 7 maps raw scores through log(1 + s).

Only documents with a strictly positive score are returned; ties are broken by document
order so the top-k is deterministic.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Sequence

import numpy as np

from ..types import Descriptor
from ..language.tokens import terms

# rank_bm25's default floor factor for negative idf values (BM25Okapi(epsilon=0.25)).
OKAPI_EPSILON = 0.25


def descriptor_document(descriptor: Descriptor) -> str:
    """The text BM25 indexes for a descriptor: claim, then keywords, then people."""
    return " ".join([descriptor.text, *descriptor.keywords, *descriptor.people])


def tokenize(text: str) -> list[str]:
    """BM25 tokens of a document or query (``text.terms``)."""
    return terms(text)


def okapi_idf(doc_freq: Sequence[int], n_docs: int, epsilon: float = OKAPI_EPSILON) -> np.ndarray:
    """BM25Okapi idf for each document frequency, with the epsilon floor for negative values."""
    df = np.asarray(doc_freq, dtype=np.float64)
    idf = np.log(n_docs - df + 0.5) - np.log(df + 0.5)
    if idf.size:
        # fsum is exact, so the mean does not depend on the vocabulary's (hash-seeded) order
        floor = epsilon * math.fsum(idf.tolist()) / idf.size
        idf = np.where(idf < 0, floor, idf)
    return idf


class LexicalIndex:
    """BM25 over a fixed list of token lists; documents are addressed by their position."""

    def __init__(self, corpus_tokens: Sequence[Sequence[str]], k1: float = 1.5, b: float = 0.75) -> None:
        self.k1 = float(k1)
        self.b = float(b)
        self.n_docs = len(corpus_tokens)
        self._engine = None
        self._vocab: dict[str, int] = {}
        if not any(corpus_tokens):
            return  # nothing to index: every query returns []
        import bm25s  # core dependency; imported here to keep package import light

        docs = [list(t) for t in corpus_tokens]
        engine = bm25s.BM25(k1=self.k1, b=self.b, method="atire", idf_method="lucene", dtype="float64")
        engine.index(docs, show_progress=False)
        vocab = {tok: i for tok, i in engine.vocab_dict.items() if tok != ""}
        # Swap bm25s's lucene idf for the Okapi idf, one column (term) of the CSC matrix at a time.
        df_by_token = Counter(tok for doc in docs for tok in set(doc))
        ordered = sorted(vocab, key=vocab.__getitem__)
        df = np.asarray([df_by_token[tok] for tok in ordered], dtype=np.float64)
        lucene = np.log(1.0 + (self.n_docs - df + 0.5) / (df + 0.5))  # > 0 for every df <= N
        factor = okapi_idf(df, self.n_docs) / lucene
        data = engine.scores["data"]
        indptr = engine.scores["indptr"]
        for tok, f in zip(ordered, factor):
            tid = vocab[tok]
            data[indptr[tid]:indptr[tid + 1]] *= f
        self._engine = engine
        self._vocab = vocab

    @classmethod
    def from_descriptors(cls, descriptors: Sequence[Descriptor], k1: float = 1.5, b: float = 0.75) -> "LexicalIndex":
        return cls([tokenize(descriptor_document(d)) for d in descriptors], k1=k1, b=b)

    def scores(self, query_tokens: Sequence[str]) -> np.ndarray:
        """BM25 score of every document (float64, length n_docs)."""
        ids = [self._vocab[t] for t in query_tokens if t in self._vocab]
        if self._engine is None or not ids:
            return np.zeros(self.n_docs, dtype=np.float64)
        return np.asarray(self._engine.get_scores_from_ids(ids), dtype=np.float64)

    def top_k(self, query_tokens: Sequence[str], k: int) -> list[tuple[int, float]]:
        """Up to ``k`` (document index, score) pairs with score > 0, best first, ties by index."""
        if k <= 0 or self.n_docs == 0:
            return []
        s = self.scores(query_tokens)
        positive = np.flatnonzero(s > 0)
        if positive.size == 0:
            return []
        # lexsort: last key is primary -> score descending, then document index ascending
        order = positive[np.lexsort((positive, -s[positive]))][:k]
        return [(int(i), float(s[i])) for i in order]


def bm25_top(index: LexicalIndex, query: str, k: int) -> list[tuple[int, float]]:
    """Convenience: tokenize a query string and return ``index.top_k``."""
    return index.top_k(tokenize(query), k)
