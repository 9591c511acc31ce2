"""BM25 over a corpus that grows by appended and replaced documents, without re-indexing it.

``LexicalIndex`` (``address/lexical.py``) indexes its token lists once with bm25s, which walks
every document in Python; after an append that is most of the cost of the new view. What BM25
scores are computed from (each document's distinct terms with their counts, its length, each
term's document frequency) changes only where a document was added or replaced, so
``GrowingLexicalIndex`` keeps exactly that and computes each posting's weight when a query
reads it: an append then costs its own documents, not the corpus.

The postings (one per distinct term and document: term id, document position, count) are kept
in at most two term-sorted segments: the **base**, and a small **delta** holding the documents
added or replaced since the base was made. A document's current postings are in the segment
``owner`` names; a replaced document's old postings stay in the base (which is shared with the
index it was grown from) and are skipped. When the delta outgrows a sixteenth of the postings,
the two are merged into a new base, so an append costs, amortized, a few times its own
postings, and the corpus is never walked in Python after it was first indexed.

The fused selector's index and the learned ranker's raw-turn index are built as this class
from the start (``from_tokens`` counts postings in one pass, a few times faster than bm25s's
indexing), so an append in place and a catch-up grow the index a load made. The Address
Plane's descriptor BM25 stays a ``LexicalIndex``.

Scores are the same function as ``LexicalIndex`` (Okapi BM25 with the epsilon floor,
``lexical.okapi_idf``, over the vocabulary of terms that occur), computed in another order of
float64 operations: equal to a fresh ``LexicalIndex`` up to rounding (a few ulp), and equal
bit for bit to ``from_tokens`` over the same final corpus, whatever the appends and
replacements were (``tests/test_view_load.py``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np

from .lexical import LexicalIndex, okapi_idf

# A delta larger than this share of all postings (and than MIN_MERGE) is merged into the base.
MERGE_SHARE = 16
MIN_MERGE = 4096


@dataclass(frozen=True)
class _Segment:
    """Term-sorted postings: ``terms`` (term ids, ascending), ``docs`` (document positions),
    ``tf`` (counts, float64); ``indptr[t]:indptr[t + 1]`` is term ``t``'s column for every term
    id below ``len(indptr) - 1``."""

    terms: np.ndarray
    docs: np.ndarray
    tf: np.ndarray
    indptr: np.ndarray

    @classmethod
    def of(cls, terms: np.ndarray, docs: np.ndarray, tf: np.ndarray, n_terms: int) -> "_Segment":
        order = np.argsort(terms, kind="stable")
        terms, docs, tf = terms[order], docs[order], tf[order]
        return cls(terms, docs, tf, np.searchsorted(terms, np.arange(n_terms + 1), side="left"))

    @property
    def size(self) -> int:
        return int(self.terms.size)


_EMPTY = np.zeros(0, dtype=np.int64)


class GrowingLexicalIndex(LexicalIndex):
    """A ``LexicalIndex`` built from per-document term counts; ``grown`` derives the next one.

    Immutable once made: ``grown`` returns a new index (sharing the arrays it did not change)
    and leaves this one serving whoever still holds it (a search running on the previous view).
    """

    def __init__(self, base: _Segment, delta: _Segment | None, owner: np.ndarray, lengths: np.ndarray,
                 vocab: Mapping[str, int], doc_terms: Sequence[np.ndarray], doc_freq: np.ndarray,
                 k1: float = 1.5, b: float = 0.75) -> None:
        # LexicalIndex.__init__ is not called: it would index the corpus with bm25s again.
        self.k1 = float(k1)
        self.b = float(b)
        self.n_docs = len(lengths)
        self._engine = None
        self._base, self._delta = base, delta
        self._owner = owner  # per document: 0 = its postings are in the base, 1 = in the delta
        self._lengths = lengths  # tokens per document, float64
        self._all_vocab = vocab  # every term id ever given out (a term may have df 0 now); never changed
        self._doc_terms = doc_terms  # per document: its distinct term ids (what a replacement takes off df)
        self._df = doc_freq  # documents containing each term id
        live = doc_freq > 0
        self._idf = np.zeros(len(doc_freq), dtype=np.float64)
        # The floor of negative idf is a mean over the terms that occur, as in LexicalIndex.
        self._idf[live] = okapi_idf(doc_freq[live], self.n_docs)
        self._avgdl = float(lengths.mean()) if self.n_docs else 0.0

    @property
    def _vocab(self) -> dict[str, int]:
        """Term -> id of the terms that occur (``LexicalIndex``'s vocabulary)."""
        df = self._df
        return {t: i for t, i in self._all_vocab.items() if i < len(df) and df[i] > 0}

    @staticmethod
    def _postings(documents: Iterable[tuple[int, Sequence[str]]], vocab: dict[str, int],
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]:
        """(term ids, document positions, counts) of ``documents`` ((position, tokens) pairs)
        in document order, giving new terms the next ids in ``vocab``, and each document's
        distinct term ids."""
        terms: list[int] = []
        docs: list[int] = []
        tf: list[int] = []
        starts: list[int] = []
        for position, tokens in documents:
            counts = Counter(tokens)
            starts.append(len(terms))
            terms.extend(vocab.setdefault(t, len(vocab)) for t in counts)
            docs.extend([position] * len(counts))
            tf.extend(counts.values())
        t = np.asarray(terms, dtype=np.int64)
        per_doc = np.split(t, starts[1:]) if starts else []
        return t, np.asarray(docs, dtype=np.int64), np.asarray(tf, dtype=np.float64), per_doc

    @classmethod
    def from_tokens(cls, corpus_tokens: Sequence[Sequence[str]], k1: float = 1.5,
                    b: float = 0.75) -> "GrowingLexicalIndex":
        """The index of ``corpus_tokens`` (documents by position), as ``LexicalIndex(corpus_tokens)``."""
        vocab: dict[str, int] = {}
        terms, docs, tf, doc_terms = cls._postings(enumerate(corpus_tokens), vocab)
        return cls(_Segment.of(terms, docs, tf, len(vocab)), None, np.zeros(len(corpus_tokens), dtype=np.int8),
                   np.asarray([len(t) for t in corpus_tokens], dtype=np.float64), vocab, doc_terms,
                   np.bincount(terms, minlength=len(vocab)).astype(np.int64), k1=k1, b=b)

    def grown(self, replaced: Mapping[int, Sequence[str]], appended: Sequence[Sequence[str]]) -> "GrowingLexicalIndex":
        """The index after documents ``replaced`` (position -> new tokens) change and
        ``appended`` are added at the end; this index is left as it was."""
        vocab = self._all_vocab
        new_docs = [*replaced.items(), *enumerate(appended, start=self.n_docs)]
        if any(t not in vocab for _, tokens in new_docs for t in tokens):
            vocab = dict(vocab)  # ids once given stay: the old index's columns keep their meaning
        terms, docs, tf, doc_terms_new = self._postings(new_docs, vocab)
        n_terms = len(vocab)
        df = np.zeros(n_terms, dtype=np.int64)
        df[: len(self._df)] = self._df
        lengths = np.concatenate([self._lengths, np.asarray([len(t) for t in appended], dtype=np.float64)])
        owner = np.concatenate([self._owner, np.ones(len(appended), dtype=np.int8)])
        doc_terms = list(self._doc_terms)
        doc_terms.extend(doc_terms_new[len(replaced):])
        for (i, tokens), new_terms in zip(replaced.items(), doc_terms_new):
            np.subtract.at(df, doc_terms[i], 1)
            doc_terms[i] = new_terms
            lengths[i] = len(tokens)
            owner[i] = 1
        np.add.at(df, terms, 1)
        # The delta: its documents' postings that are still theirs, with the new ones.
        delta = self._delta
        if delta is not None and delta.size:
            changed = np.zeros(len(owner), dtype=bool)
            changed[list(replaced)] = True
            keep = ~changed[delta.docs]
            terms = np.concatenate([delta.terms[keep], terms])
            docs = np.concatenate([delta.docs[keep], docs])
            tf = np.concatenate([delta.tf[keep], tf])
        base = self._base
        if terms.size > MIN_MERGE and terms.size * MERGE_SHARE > base.size + terms.size:
            # Merge: the base's postings of documents it still holds, and the delta's.
            alive = owner[base.docs] == 0
            merged = _Segment.of(np.concatenate([base.terms[alive], terms]), np.concatenate([base.docs[alive], docs]),
                                 np.concatenate([base.tf[alive], tf]), n_terms)
            return GrowingLexicalIndex(merged, None, np.zeros(len(owner), dtype=np.int8), lengths, vocab, doc_terms,
                                       df, k1=self.k1, b=self.b)
        return GrowingLexicalIndex(base, _Segment.of(terms, docs, tf, n_terms), owner, lengths, vocab, doc_terms,
                                   df, k1=self.k1, b=self.b)

    def scores(self, query_tokens: Sequence[str]) -> np.ndarray:
        """BM25 score of every document (float64, length n_docs); see ``LexicalIndex.scores``."""
        out = np.zeros(self.n_docs, dtype=np.float64)
        k1, b, avgdl = self.k1, self.b, self._avgdl
        segments = (self._base,) if self._delta is None else (self._base, self._delta)
        for t in query_tokens:  # a repeated query term counts once per occurrence
            i = self._all_vocab.get(t)
            if i is None or i >= len(self._df) or self._df[i] == 0:
                continue
            idf = self._idf[i]
            for s, seg in enumerate(segments):
                if i + 1 >= len(seg.indptr):
                    continue
                lo, hi = seg.indptr[i], seg.indptr[i + 1]
                if lo == hi:
                    continue
                d, tf = seg.docs[lo:hi], seg.tf[lo:hi]
                if self._delta is not None:  # a document's postings count in the segment that owns it
                    mine = self._owner[d] == s
                    d, tf = d[mine], tf[mine]
                norm = k1 * (1.0 - b + b * self._lengths[d] / avgdl)
                out[d] += idf * (tf * (k1 + 1.0)) / (tf + norm)  # a document occurs once per term column
        return out
