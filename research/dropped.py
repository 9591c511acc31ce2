"""The fused-selector options measured and dropped from the package, rebuilt on its public API.

Each was a ``FusionConfig`` field before the package lost it (issue 49); the research scripts
keep them so that their rows can be reproduced:

* ``chat_norm``: BM25 over chat-normalized turns and questions (``chatnorm.normalize_chat``):
  ``chat_norm_index`` is a view's fused index with that lexical index;
* ``passage_words`` / ``passage_overlap_words`` / ``passage_pool``: long turns embedded as
  passages and scored by their pooled cosine (``passages``): ``passage_vectors`` embeds them
  into the store once, ``packet_channel_with_passages`` is the packet channel reading them;
* ``request_frame: drop``: a framed question embedded as its content (``framing``):
  ``framed_query_texts``;
* ``dense_query: intent``: the dense channel embedding the intent text alone:
  ``intent_only_texts``;
* ``neighbor_context: false``: lexical documents without the session neighbours
  (``own_documents``);
* ``dense_neighbor_context: false`` and ``complement: none``: the packet channel without the
  context cosine, selection in score order (the ablation's own selection functions).
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Mapping, Sequence

import numpy as np

from chatnorm import normalize_chat
from framing import question_content
from passages import best_passage_scores, long_turn_passages
from memcompile_local.address.lexical import LexicalIndex
from memcompile_local.build.stages import embedding_key_prefix, embedding_model_id
from memcompile_local.fused.channels import packet_scores
from memcompile_local.fused.documents import canonical_names, raw_text
from memcompile_local.fused.index import FusionIndex, lexical_texts
from memcompile_local.fused.retriever import dense_query_texts
from memcompile_local.language.stemming import stem_terms
from memcompile_local.types import Descriptor, SourcePacket


# ----------------------------------------------------------------------------- chat_norm

@dataclasses.dataclass(frozen=True)
class ChatNormIndex(FusionIndex):
    """A fused index whose BM25 documents were chat-normalized: questions are normalized the
    same way before they are stemmed (participants' names kept)."""

    def query_terms(self, question: str) -> list[str]:
        text = canonical_names(question, self.participants) if self.tolerant_names else question
        return stem_terms(normalize_chat(text, self.participants))


def chat_norm_index(index: FusionIndex, packets: Sequence[SourcePacket],
                    descriptors_by_packet: Mapping[str, Sequence[Descriptor]], fusion) -> ChatNormIndex:
    """``index`` (a view's fused index) with its lexical documents chat-normalized."""
    docs = [normalize_chat(d, index.participants)
            for d in lexical_texts(packets, descriptors_by_packet, fusion, index.participants)]
    lexical = LexicalIndex([stem_terms(d) for d in docs], k1=fusion.bm25_k1, b=fusion.bm25_b)
    fields = {f.name: getattr(index, f.name) for f in dataclasses.fields(FusionIndex)}
    return ChatNormIndex(**{**fields, "lexical": lexical})


# ----------------------------------------------------------------------------- passages

def passage_model_id(embedder) -> str:
    """Store model id of long turns' passage vectors (as the package named them)."""
    return f"{embedding_model_id(embedder)}|passage-v1"


def passage_document_keys(packets: Sequence[SourcePacket], words: int, overlap: int
                          ) -> tuple[list[str], list[str], list[int]]:
    """(keys, passages, owner) of the turns of ``packets`` longer than ``words`` words, in
    packet order: ``owner[j]`` is the row of passage ``j``'s turn. Keys as the package made them."""
    keys: list[str] = []
    docs: list[str] = []
    owner: list[int] = []
    for i, p in enumerate(packets):
        for j, d in enumerate(long_turn_passages(raw_text(p), words, overlap)):
            keys.append(f"{embedding_key_prefix(p.packet_id)}{j}-{hashlib.sha256(d.encode()).hexdigest()[:16]}")
            docs.append(d)
            owner.append(i)
    return keys, docs, owner


def passage_vectors(store, namespace: str, embedder, packets: Sequence[SourcePacket], words: int, overlap: int,
                    batch_size: int = 256) -> tuple[np.ndarray, np.ndarray] | None:
    """(passage vectors, owner row of each) of the long turns, embedded into the store the
    first time (the store keeps them under the passage model id); None without long turns."""
    keys, docs, owner = passage_document_keys(packets, words, overlap)
    if not keys:
        return None
    model_id = passage_model_id(embedder)
    have = store.embeddings(namespace, model_id, keys)
    missing = [i for i, k in enumerate(keys) if k not in have]
    for start in range(0, len(missing), batch_size):
        idx = missing[start:start + batch_size]
        vecs = np.asarray(embedder.embed([docs[i] for i in idx]), dtype=np.float32)
        store.save_embeddings(namespace, model_id, [keys[i] for i in idx], vecs)
        have.update({keys[i]: v for i, v in zip(idx, vecs)})
    return np.stack([have[k] for k in keys]).astype(np.float32), np.asarray(owner, dtype=np.int64)


def packet_channel_with_passages(index: FusionIndex, vector: np.ndarray, passages: tuple[np.ndarray, np.ndarray] | None,
                                 pool: str) -> np.ndarray:
    """The package's packet channel where a turn with passages scores by their pooled cosine
    (``passages.best_passage_scores``) instead of its own z(p) cosine."""
    cos = (index.packet_matrix @ vector).astype(np.float64)
    ctx = (index.context_matrix @ vector).astype(np.float64) if index.context_matrix is not None else None
    if passages is not None:
        matrix, owner = passages
        rows = np.unique(owner)
        pooled = best_passage_scores((matrix @ vector).astype(np.float64), owner, len(cos), pool=pool)
        cos = cos.copy()
        cos[rows] = pooled[rows]
    return packet_scores(index, cos, ctx)


# ----------------------------------------------------------------------------- query texts

def framed_query_texts(question: str, intent_query: str) -> list[str]:
    """``request_frame: drop``: a question with a request frame is embedded as its content
    alone; any other question as the package embeds it."""
    content = question_content(question)
    if content != question:
        return [content]
    return dense_query_texts(question, intent_query)


def intent_only_texts(question: str, intent_query: str) -> list[str]:
    """``dense_query: intent``: the rule intent's text alone."""
    return [intent_query]


# ----------------------------------------------------------------------------- neighbours

def own_documents(packets: Sequence[SourcePacket], descriptors_by_packet: Mapping[str, Sequence[Descriptor]]
                  ) -> list[str]:
    """``neighbor_context: false``: each packet's lexical document without its session
    neighbours (turn, caption, claims)."""
    out = []
    for p in packets:
        parts = [p.content, p.image_caption or "", *(d.text for d in descriptors_by_packet.get(p.packet_id, ()))]
        out.append(" ".join(x for x in parts if x))
    return out
