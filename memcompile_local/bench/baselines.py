"""Baselines a user expects beside the pipeline, answered with the same answer prompt.

- ``full-context``: every turn of the memory, in order, with session headers (only when it
  fits the model's context window, ``ModelConfig.context_window``).
- ``bm25``: raw-turn BM25 top-K (K = K0), rendered as raw turns.
- ``dense``: raw-turn dense top-K by cosine to the question embedding.
"""

from __future__ import annotations

import hashlib
from typing import Sequence

import numpy as np

from ..address.lexical import LexicalIndex
from ..build.stages import embedding_model_id
from ..config import PipelineConfig
from ..errors import ConfigError
from ..evidence.views import render_raw_packets
from ..fused.documents import plain_turn_text
from ..language.stemming import stem_terms
from ..language.tokens import count_tokens
from ..protocols import Embedder
from ..store.base import Store
from ..types import SourcePacket

BASELINES = ("full-context", "bm25", "dense")


def render_raw(packets: Sequence[SourcePacket]) -> str:
    return render_raw_packets(packets)


def baseline_context(kind: str, store: Store, embedder: Embedder | None, namespace: str, question: str,
                     cfg: PipelineConfig, cache: dict | None = None) -> tuple[list[str], str]:
    """(packet ids, rendered context) of a baseline for one question over ``store`` (the dense
    baseline embeds with ``embedder``).

    ``cache`` (owned by the caller, e.g. one per run) keeps each namespace's index between
    questions.
    """
    cache = {} if cache is None else cache
    packets = store.packets(namespace)
    k = cfg.evidence.k0
    if kind == "full-context":
        text = render_raw(packets)
        window = cfg.model.context_window
        if window is not None and count_tokens(text) > window:
            raise ConfigError(f"{namespace}: full context has {count_tokens(text)} tokens, more than the "
                              f"configured context_window {window}")
        return [p.packet_id for p in packets], text
    if kind == "bm25":
        index = _cached(cache, ("bm25", namespace, len(packets)),
                        lambda: LexicalIndex([stem_terms(plain_turn_text(p)) for p in packets],
                                             k1=cfg.routing.bm25_k1, b=cfg.routing.bm25_b))
        hits = index.top_k(stem_terms(question), k)
        chosen = [packets[i] for i, _ in hits]
        return [p.packet_id for p in chosen], render_raw(chosen)
    if kind == "dense":
        matrix = _cached(cache, ("dense", namespace, len(packets)),
                         lambda: raw_turn_matrix(store, embedder, namespace, packets))
        q = np.asarray(embedder.embed([question]), dtype=np.float32)[0]
        scores = matrix @ q
        order = np.lexsort((np.arange(len(packets)), -scores))[:k]  # cosine desc, dialogue order on ties
        chosen = [packets[i] for i in order]
        return [p.packet_id for p in chosen], render_raw(chosen)
    raise ConfigError(f"unknown baseline {kind!r}; expected one of {BASELINES}")


def _cached(cache: dict, key: tuple, make):
    if key not in cache:
        cache[key] = make()
    return cache[key]


def raw_turn_matrix(store: Store, embedder: Embedder, namespace: str, packets: Sequence[SourcePacket]) -> np.ndarray:
    """Raw-turn embeddings, stored in the memory store like the packet documents."""
    model_id = embedding_model_id(embedder)
    keys = [f"raw|{p.packet_id}|{hashlib.sha256(plain_turn_text(p).encode()).hexdigest()[:16]}" for p in packets]
    have = store.embeddings(namespace, model_id, keys)
    missing = [i for i, k in enumerate(keys) if k not in have]
    for start in range(0, len(missing), 64):
        idx = missing[start : start + 64]
        vecs = np.asarray(embedder.embed([plain_turn_text(packets[i]) for i in idx]), dtype=np.float32)
        store.save_embeddings(namespace, model_id, [keys[i] for i in idx], vecs)
        have.update({keys[i]: v for i, v in zip(idx, vecs)})
    return np.stack([have[k] for k in keys]).astype(np.float32)
