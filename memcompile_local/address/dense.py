"""Dense packet channel (MemCompile paper, Section 3.2.4 and Appendix C.2).

Every SourcePacket gets a document z(p): the raw turn (speaker and content), the image
caption and image query when present, every claim extracted from the packet in construction
order, the packet's people and keywords (union over its claims, first-seen order,
case-insensitively deduplicated) and the recorded session time. The model-free path may
embed a shorter document instead (``dense_document``: z(p) without claim lines, or the raw
turn) and compose its neighbour-context vectors from the turn vectors
(``composed_context_matrix``); the LLM paths always embed z(p). The enriched query q+ is the
question followed by the query-only people, keywords and time (``QueryIntent.lexical_query``).
Embeddings are l2-normalized, so cosine similarity is one matrix-vector product; the top K_D
packets are taken with ties broken by packet ordinal (the row order of the matrix).
"""

from __future__ import annotations

import functools
from typing import Sequence

import numpy as np

from ..errors import ConfigError, DataFormatError
from ..llm.interface import Embedder
from ..types import Descriptor, QueryIntent, SourcePacket
from ..language.tokens import normalize_name


def _distinct(values) -> list[str]:
    seen, out = set(), []
    for v in values:
        key = normalize_name(v)
        if key and key not in seen:
            seen.add(key)
            out.append(v.strip())
    return out


def packet_document(packet: SourcePacket, claims: Sequence[Descriptor] = ()) -> str:
    """z(p): the text embedded for a packet (``claims`` in construction order)."""
    lines = [turn_document(packet)]
    lines.extend(c.text for c in claims if c.text)
    people = _distinct(p for c in claims for p in c.people)
    keywords = _distinct(k for c in claims for k in c.keywords)
    if people:
        lines.append("People: " + ", ".join(people))
    if keywords:
        lines.append("Keywords: " + ", ".join(keywords))
    if packet.session_time:
        lines.append(f"Time: {packet.session_time}")
    return "\n".join(lines)


def turn_document(packet: SourcePacket) -> str:
    """The raw turn as the dense channel embeds it: speaker and content, then the image
    caption and image query when present (the first lines of z(p))."""
    lines = [f"{packet.speaker}: {packet.content}".strip()]
    if packet.image_caption:
        lines.append(f"Image: {packet.image_caption}")
    if packet.image_query:
        lines.append(f"Image query: {packet.image_query}")
    return "\n".join(lines)


DENSE_DOCUMENTS = ("packet", "turn")
"""What the dense channel may embed per packet: z(p), or the raw turn."""


def dense_document(packet: SourcePacket, claims: Sequence[Descriptor] = (), kind: str = "packet") -> str:
    """The document of ``packet`` of one of ``DENSE_DOCUMENTS``; ``"packet"`` is the paper's z(p).

    Memoized by everything the document reads (``_document``): the build and the view load
    of a namespace, and every namespace holding the same turn, compute it once.
    """
    if kind not in DENSE_DOCUMENTS:
        raise ConfigError(f"dense document kind {kind!r}: expected one of {', '.join(DENSE_DOCUMENTS)}")
    claim_fields = () if kind == "turn" else tuple((c.text, tuple(c.people), tuple(c.keywords)) for c in claims)
    return _document(kind, packet.speaker, packet.content, packet.image_caption, packet.image_query,
                     packet.session_time, claim_fields)


@functools.lru_cache(maxsize=1 << 14)
def _document(kind: str, speaker: str, content: str, caption: str | None, query: str | None, when: str,
              claims: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...]) -> str:
    # Only the fields the document is made of reach here, so equal keys give equal documents.
    packet = SourcePacket(namespace="", packet_id="", ordinal=0, session_index=0, session_id="", session_time=when,
                          speaker=speaker, content=content, image_caption=caption, sha256="", image_query=query)
    if kind == "turn":
        return turn_document(packet)
    parts = [Descriptor(descriptor_id="", namespace="", packet_id="", claim_index=0, text=text, speaker="",
                        session_index=0, session_time="", people=people, keywords=keywords)
             for text, people, keywords in claims]
    return packet_document(packet, parts)


def forget_documents() -> None:
    """Drop the memoized documents (they hold turn text; ``extract_memo.forget_memo`` calls it)."""
    _document.cache_clear()


def composed_context_matrix(session_indices: Sequence[int], matrix: np.ndarray) -> np.ndarray:
    """Context vectors composed from per-turn vectors, without embedding anything.

    Row i is the l2-normalized sum of the l2-normalized rows i-1, i and i+1 of ``matrix``, a
    neighbour counting only when it lies in the same session as i (``session_indices[i]``,
    rows in dialogue order): the vector analogue of the neighbour-context document (previous,
    own and next turn of the session).
    """
    m = l2_normalize(matrix)
    s = np.asarray(session_indices)
    if m.ndim != 2 or m.shape[0] != s.shape[0]:
        raise DataFormatError("<dense context>", "packet matrix",
                              f"a 2-d array with one row per packet ({s.shape[0]} rows)", f"got shape {m.shape}")
    out = m.copy()
    if m.shape[0] > 1:
        same = s[1:] == s[:-1]  # same[j]: rows j and j+1 share a session
        out[1:][same] += m[:-1][same]
        out[:-1][same] += m[1:][same]
    return l2_normalize(out)


def enriched_query(intent: QueryIntent) -> str:
    """q+: the question plus query-only people, keywords and time."""
    return intent.lexical_query()


def l2_normalize(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero), as float32."""
    m = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(m, axis=-1, keepdims=True)
    return np.divide(m, norms, out=np.zeros_like(m), where=norms > 0)


def embed_packets(
    embedder: Embedder, packets: Sequence[SourcePacket], claims_by_packet: dict[str, Sequence[Descriptor]]
) -> np.ndarray:
    """Embedding matrix (len(packets) x dim) of the packet documents, rows l2-normalized."""
    if not packets:
        return np.zeros((0, embedder.dim), dtype=np.float32)
    docs = [packet_document(p, claims_by_packet.get(p.packet_id, ())) for p in packets]
    return l2_normalize(embedder.embed(docs))


class DenseIndex:
    """Packets' l2-normalized embeddings; row i belongs to ``packet_ids[i]`` (dialogue order)."""

    def __init__(self, packet_ids: Sequence[str], matrix: np.ndarray) -> None:
        m = np.asarray(matrix)
        if m.ndim != 2 or m.shape[0] != len(packet_ids):
            raise DataFormatError("<dense index>", "packet embedding matrix",
                                  f"a 2-d array with one row per packet ({len(packet_ids)} rows)",
                                  f"got shape {m.shape}")
        if len(set(packet_ids)) != len(packet_ids):
            raise DataFormatError("<dense index>", "packet_ids", "distinct packet ids")
        self.packet_ids = tuple(packet_ids)
        self.matrix = l2_normalize(m)

    @property
    def dim(self) -> int:
        return int(self.matrix.shape[1])

    def similarities(self, qvec: np.ndarray) -> np.ndarray:
        """Cosine of the (l2-normalized) query with every packet: one matrix-vector product.

        BLAS may round two identical rows differently in the last bit; ties below are ties of
        these computed values.
        """
        q = np.asarray(qvec, dtype=np.float32).reshape(-1)
        if q.shape[0] != self.dim:
            raise DataFormatError("<dense index>", "query embedding",
                                  f"a vector of length {self.dim}", f"got length {q.shape[0]}")
        return self.matrix @ l2_normalize(q[None, :])[0]

    def top_k(self, qvec: np.ndarray, k: int) -> list[tuple[str, float]]:
        """Up to ``k`` (packet id, cosine) pairs, best first, ties by row order."""
        sims = self.similarities(qvec)
        n = sims.shape[0]
        if k <= 0 or n == 0:
            return []
        if k < n:
            # Keep every row that ties with the k-th best, then order stably: exact tie-break.
            kth = np.partition(sims, n - k)[n - k]
            rows = np.flatnonzero(sims >= kth)
        else:
            rows = np.arange(n)
        order = rows[np.lexsort((rows, -sims[rows]))][:k]
        return [(self.packet_ids[i], float(sims[i])) for i in order]


def dense_proposals(index: DenseIndex | None, query_embedding: np.ndarray | None,
                    k_dense: int) -> tuple[tuple[str, float], ...]:
    """D_q: the ``k_dense`` packets of highest cosine with the embedded q+ (Section 3.2.4).

    ``query_embedding`` None (no embedder configured) gives no proposals; an embedding with
    an index that holds no packet embeddings is a configuration error.
    """
    if query_embedding is None:
        return ()
    if index is None:
        raise ConfigError("a query embedding was given but the memory holds no packet embeddings")
    return tuple(index.top_k(query_embedding, k_dense))
