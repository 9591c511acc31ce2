"""BM25 over a corpus that grows by appended and replaced documents, without re-indexing it.

``LexicalIndex`` (``address/lexical.py``) indexes its token lists once with bm25s, which walks
every document in Python; after an append that is most of the cost of the new view. Every
precomputed BM25 impact depends on the average document length and on each term's idf, so
an appended document changes all of them, but what they are computed from (each document's
distinct terms with their counts, its length, each term's document frequency) changes only
where a document was added or replaced. ``GrowingLexicalIndex`` keeps those counts as one
flat array of postings, inserts and removes the changed documents' postings, and recomputes
the impacts in a few vectorized numpy operations (no per-document Python work on old ones).

The fused selector's index and the learned ranker's raw-turn index are built as this class
from the start (``from_tokens`` counts postings in one pass, a few times faster than bm25s's
indexing), so an append in place grows the index a load made. The Address Plane's
descriptor BM25 stays a ``LexicalIndex``.

Scores are the same function as ``LexicalIndex`` (Okapi BM25 with the epsilon floor,
``lexical.okapi_idf``, over the vocabulary of terms that occur), computed in another order of
float64 operations: equal to a fresh ``LexicalIndex`` up to rounding (a few ulp), which
``tests/test_view_load.py`` checks, with the same rankings.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable, Mapping, Sequence

import numpy as np

from .lexical import LexicalIndex, okapi_idf


class GrowingLexicalIndex(LexicalIndex):
    """A ``LexicalIndex`` built from per-document term counts; ``grown`` derives the next one.

    Immutable once made: ``grown`` returns a new index and leaves this one serving whoever
    still holds it (a search running on the previous view).
    """

    def __init__(self, terms: np.ndarray, docs: np.ndarray, tf: np.ndarray, lengths: np.ndarray,
                 vocab: Mapping[str, int], doc_freq: np.ndarray, k1: float = 1.5, b: float = 0.75) -> None:
        # LexicalIndex.__init__ is not called: it would index the corpus with bm25s again.
        # One posting per (distinct term, document), sorted by term id: ``_terms``, ``_docs``
        # and ``_tf`` (its count, float64). Kept flat so that ``grown`` inserts and removes
        # postings with array operations instead of re-sorting per-document lists.
        self.k1 = float(k1)
        self.b = float(b)
        self.n_docs = len(lengths)
        self._engine = None
        self._terms, self._docs, self._tf = terms, docs, tf
        self._lengths = lengths  # tokens per document, float64
        self._all_vocab = dict(vocab)  # every term id ever given out (a term may have df 0 now)
        self._df = doc_freq  # documents containing each term id
        live = np.flatnonzero(doc_freq > 0)
        df = doc_freq.tolist()  # Python ints: indexing a numpy array per term is slower
        self._vocab = {t: i for t, i in vocab.items() if df[i] > 0}
        self._indptr = np.searchsorted(terms, np.arange(len(doc_freq) + 1), side="left")
        if not terms.size:
            self._impact = np.zeros(0, dtype=np.float64)
            return
        idf = np.zeros(len(doc_freq), dtype=np.float64)
        # The floor of negative idf is a mean over the terms that occur, as in LexicalIndex.
        idf[live] = okapi_idf(doc_freq[live], self.n_docs)
        avgdl = float(lengths.mean())
        norm = self.k1 * (1.0 - self.b + self.b * lengths[docs] / avgdl)
        self._impact = idf[terms] * (tf * (self.k1 + 1.0)) / (tf + norm)

    @staticmethod
    def _postings(documents: Iterable[tuple[int, Sequence[str]]], vocab: dict[str, int],
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(term ids, document positions, counts) of ``documents`` ((position, tokens) pairs),
        sorted by term id, giving new terms the next ids in ``vocab``."""
        terms: list[int] = []
        docs: list[int] = []
        tf: list[int] = []
        for position, tokens in documents:
            counts = Counter(tokens)
            terms.extend(vocab.setdefault(t, len(vocab)) for t in counts)
            docs.extend([position] * len(counts))
            tf.extend(counts.values())
        t = np.asarray(terms, dtype=np.int64)
        order = np.argsort(t, kind="stable")
        return t[order], np.asarray(docs, dtype=np.int64)[order], np.asarray(tf, dtype=np.float64)[order]

    @classmethod
    def from_tokens(cls, corpus_tokens: Sequence[Sequence[str]], k1: float = 1.5,
                    b: float = 0.75) -> "GrowingLexicalIndex":
        """The index of ``corpus_tokens`` (documents by position), as ``LexicalIndex(corpus_tokens)``."""
        vocab: dict[str, int] = {}
        terms, docs, tf = cls._postings(enumerate(corpus_tokens), vocab)
        return cls(terms, docs, tf, np.asarray([len(t) for t in corpus_tokens], dtype=np.float64), vocab,
                   np.bincount(terms, minlength=len(vocab)).astype(np.int64), k1=k1, b=b)

    def grown(self, replaced: Mapping[int, Sequence[str]], appended: Sequence[Sequence[str]]) -> "GrowingLexicalIndex":
        """The index after documents ``replaced`` (position -> new tokens) change and
        ``appended`` are added at the end; this index is left as it was."""
        vocab = dict(self._all_vocab)
        terms, docs, tf = self._terms, self._docs, self._tf
        lengths = np.concatenate([self._lengths, np.asarray([len(t) for t in appended], dtype=np.float64)])
        df = np.zeros(len(vocab), dtype=np.int64)
        df[: len(self._df)] = self._df
        if replaced:
            gone = np.zeros(self.n_docs, dtype=bool)
            gone[list(replaced)] = True
            out = gone[docs]
            np.subtract.at(df, terms[out], 1)
            keep = ~out
            terms, docs, tf = terms[keep], docs[keep], tf[keep]
            for i, tokens in replaced.items():
                lengths[i] = len(tokens)
        new = [*replaced.items(), *enumerate(appended, start=self.n_docs)]
        new_terms, new_docs, new_tf = self._postings(new, vocab)
        if len(vocab) > len(df):
            df = np.concatenate([df, np.zeros(len(vocab) - len(df), dtype=np.int64)])
        np.add.at(df, new_terms, 1)
        # Each new posting goes after the postings of its term (the order inside a term's
        # column does not matter: a document occurs once in it).
        at = np.searchsorted(terms, new_terms, side="right")
        return GrowingLexicalIndex(np.insert(terms, at, new_terms), np.insert(docs, at, new_docs),
                                   np.insert(tf, at, new_tf), lengths, vocab, df, k1=self.k1, b=self.b)

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
