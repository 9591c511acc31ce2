"""BM25 over a corpus that grows by appended and replaced documents, without re-indexing it.

``LexicalIndex`` (``address/lexical.py``) indexes its token lists once with bm25s, which walks
every document in Python; after an append that is most of the cost of the new view. Every
precomputed BM25 impact depends on the average document length and on each term's idf, so
an appended document changes all of them, but what they are computed from (each document's
distinct terms with their counts, its length, each term's document frequency) changes only
where a document was added or replaced. ``GrowingLexicalIndex`` keeps those per-document
counts and recomputes the impacts in a few vectorized numpy operations.

Scores are the same function as ``LexicalIndex`` (Okapi BM25 with the epsilon floor,
``lexical.okapi_idf``, over the vocabulary of terms that occur), computed in another order of
float64 operations: equal to a fresh ``LexicalIndex`` up to rounding (a few ulp), which
``tests/test_view_load.py`` checks, with the same rankings.
"""

from __future__ import annotations

from collections import Counter
from typing import Mapping, Sequence

import numpy as np

from .lexical import LexicalIndex, okapi_idf


class GrowingLexicalIndex(LexicalIndex):
    """A ``LexicalIndex`` built from per-document term counts; ``grown`` derives the next one.

    Immutable once made: ``grown`` returns a new index and leaves this one serving whoever
    still holds it (a search running on the previous view).
    """

    def __init__(self, doc_terms: Sequence[tuple[np.ndarray, np.ndarray]], lengths: np.ndarray,
                 vocab: Mapping[str, int], doc_freq: np.ndarray, k1: float = 1.5, b: float = 0.75) -> None:
        # LexicalIndex.__init__ is not called: it would index the corpus with bm25s again.
        self.k1 = float(k1)
        self.b = float(b)
        self.n_docs = len(doc_terms)
        self._engine = None
        self._doc_terms = list(doc_terms)  # per document: (distinct term ids, their counts as float64)
        self._lengths = lengths  # tokens per document, float64
        self._all_vocab = dict(vocab)  # every term id ever given out (a term may have df 0 now)
        self._df = doc_freq  # documents containing each term id
        live = np.flatnonzero(doc_freq > 0)
        df = doc_freq.tolist()  # Python ints: indexing a numpy array per term is slower
        self._vocab = {t: i for t, i in vocab.items() if df[i] > 0}
        idf = np.zeros(len(doc_freq), dtype=np.float64)
        if live.size and self.n_docs:
            # The floor of negative idf is a mean over the terms that occur, as in LexicalIndex.
            idf[live] = okapi_idf(doc_freq[live], self.n_docs)
        sizes = np.fromiter((len(t) for t, _ in self._doc_terms), dtype=np.int64, count=self.n_docs)
        if not sizes.sum():
            self._indptr = np.zeros(len(doc_freq) + 1, dtype=np.int64)
            self._docs = np.zeros(0, dtype=np.int64)
            self._impact = np.zeros(0, dtype=np.float64)
            return
        terms = np.concatenate([t for t, _ in self._doc_terms])
        tf = np.concatenate([f for _, f in self._doc_terms])
        docs = np.repeat(np.arange(self.n_docs, dtype=np.int64), sizes)
        avgdl = float(lengths.mean())
        norm = self.k1 * (1.0 - self.b + self.b * lengths[docs] / avgdl)
        impact = idf[terms] * (tf * (self.k1 + 1.0)) / (tf + norm)
        order = np.argsort(terms, kind="stable")  # column (term) major, documents ascending
        self._docs = docs[order]
        self._impact = impact[order]
        self._indptr = np.concatenate([[0], np.cumsum(np.bincount(terms, minlength=len(doc_freq)))])

    @staticmethod
    def _count(tokens: Sequence[str], vocab: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
        """(distinct term ids, counts) of one document, giving new terms the next ids in ``vocab``."""
        counts = Counter(tokens)
        ids = np.fromiter((vocab.setdefault(t, len(vocab)) for t in counts), dtype=np.int64, count=len(counts))
        return ids, np.fromiter(counts.values(), dtype=np.float64, count=len(counts))

    @classmethod
    def from_tokens(cls, corpus_tokens: Sequence[Sequence[str]], k1: float = 1.5,
                    b: float = 0.75) -> "GrowingLexicalIndex":
        """The index of ``corpus_tokens`` (documents by position), as ``LexicalIndex(corpus_tokens)``."""
        vocab: dict[str, int] = {}
        doc_terms = [cls._count(t, vocab) for t in corpus_tokens]
        return cls(doc_terms, np.asarray([len(t) for t in corpus_tokens], dtype=np.float64), vocab,
                   cls._doc_freq(doc_terms, len(vocab)), k1=k1, b=b)

    @staticmethod
    def _doc_freq(doc_terms: Sequence[tuple[np.ndarray, np.ndarray]], n_terms: int) -> np.ndarray:
        if not doc_terms:
            return np.zeros(n_terms, dtype=np.int64)
        return np.bincount(np.concatenate([t for t, _ in doc_terms]), minlength=n_terms).astype(np.int64)

    def grown(self, replaced: Mapping[int, Sequence[str]], appended: Sequence[Sequence[str]]) -> "GrowingLexicalIndex":
        """The index after documents ``replaced`` (position -> new tokens) change and
        ``appended`` are added at the end; this index is left as it was."""
        vocab = dict(self._all_vocab)
        doc_terms = list(self._doc_terms)
        lengths = self._lengths.copy()
        out: list[np.ndarray] = []
        into: list[np.ndarray] = []
        for i, tokens in replaced.items():
            out.append(doc_terms[i][0])
            doc_terms[i] = self._count(tokens, vocab)
            into.append(doc_terms[i][0])
            lengths[i] = len(tokens)
        for tokens in appended:
            doc_terms.append(self._count(tokens, vocab))
            into.append(doc_terms[-1][0])
        df = np.zeros(len(vocab), dtype=np.int64)
        df[: len(self._df)] = self._df
        if out:
            np.subtract.at(df, np.concatenate(out), 1)
        if into:
            np.add.at(df, np.concatenate(into), 1)
        lengths = np.concatenate([lengths, np.asarray([len(t) for t in appended], dtype=np.float64)])
        return GrowingLexicalIndex(doc_terms, lengths, vocab, df, k1=self.k1, b=self.b)

    def scores(self, query_tokens: Sequence[str]) -> np.ndarray:
        """BM25 score of every document (float64, length n_docs); see ``LexicalIndex.scores``."""
        out = np.zeros(self.n_docs, dtype=np.float64)
        for t in query_tokens:  # a repeated query term counts once per occurrence
            i = self._vocab.get(t)
            if i is None:
                continue
            lo, hi = self._indptr[i], self._indptr[i + 1]
            out[self._docs[lo:hi]] += self._impact[lo:hi]  # a document occurs once per term column
        return out
