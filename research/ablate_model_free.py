#!/usr/bin/env python
"""Ablations of the model-free path on a LoCoMo file: in-sample rows, ``--cv``, ``--pool-recall``.

Builds each conversation with the ``model-free`` preset (rule descriptors, MiniLM embeddings;
zero model calls) into a store that is kept between runs (``--store``; a rerun only loads
it), then computes the fused selector's channels once per question (categories 1-4 with
gold evidence) and scores rows on top of them.

* default: per-component rows on the file as a whole (``full``; ``- X`` one component off;
  ``removed: + Y`` ideas measured earlier and dropped, re-implemented here so their numbers
  can be reproduced), recall@10/@12 overall, per category and per conversation;
* ``--cv``: leave-one-conversation-out. Every row is a small grid over the constants it
  introduces; for each fold its setting is fit on the other conversations (best mean
  recall@10) and scored on the held-out one. Prints a markdown table with the in-sample and
  the cross-validated recall@10, recall@12, per category, per fold, how many folds beat
  today's shipped row, and p50 query latency; then the per-query latency of
  ``Memory.compile`` on a ~680-turn conversation joined from the file's sessions;
* ``--pool-recall``: recall of the closed pool an LLM scheduler is handed, at its first 20,
  40 and all positions, for the paper's normalized pool and for the fused ranking.

    python research/ablate_model_free.py --data ../shared/data/locomo/locomo_dev4.json --cv

* ``--cv --corpora locomo,realtalk,beam``: the same rows over the three development corpora
  (``--data`` is then the LoCoMo file; ``--realtalk``, ``--beam`` the other two), built once
  into ``--cache``; per corpus in-sample, leave-one-conversation-out and leave-one-corpus-out
  recall@10, two raw-turn baselines, and the shipping rule (``research/cv_corpora.py``).

    python research/ablate_model_free.py --cv --corpora locomo,realtalk,beam
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the research modules beside this one

from memcompile_local.address.lexical import LexicalIndex  # noqa: E402
from memcompile_local.language.stemming import stem_terms  # noqa: E402
from memcompile_local.language.tokens import terms  # noqa: E402
from memcompile_local.bench.coverage import gold_recall  # noqa: E402
from memcompile_local.bench.metrics import LOCOMO_CATEGORY_NAMES  # noqa: E402
from plots import ablation_plot  # noqa: E402
from dropped import intent_only_texts, own_documents  # noqa: E402
from memcompile_local.address.intent import rule_intent  # noqa: E402
from memcompile_local.address.query import address_query  # noqa: E402
from memcompile_local.pipeline.normalize import normalize_to_packets  # noqa: E402
from memcompile_local.pipeline.compile import query_intent  # noqa: E402
from memcompile_local.config import FusionConfig, PipelineConfig  # noqa: E402
from memcompile_local.data import load_locomo  # noqa: E402
from memcompile_local.fused.channels import (  # noqa: E402
    FusedQuery, channel_weights, fused_scores, lexical_channel, name_weighted, score_order)
from memcompile_local.fused.documents import lexical_documents, raw_text as _raw, session_neighbours  # noqa: E402
from memcompile_local.fused.index import FusionIndex  # noqa: E402
from memcompile_local.fused.retriever import dense_query_texts, query_vector  # noqa: E402
from memcompile_local.language.listcues import LIST_QUESTION, is_list_question  # noqa: E402
from memcompile_local.pipeline.presets import apply_preset  # noqa: E402
from memcompile_local.evidence.pursuit import mem_pursuit  # noqa: E402
from memcompile_local.llm.client import LLMClient, NoModelBackend  # noqa: E402
from memcompile_local.memory import Memory  # noqa: E402
from memcompile_local.store import MemoryStore  # noqa: E402
from memcompile_local.types import Conversation  # noqa: E402

CATS = (1, 2, 3, 4)


# ============================================================================ dropped package variants
# Variants of the fused selector that were measured with --cv and dropped from the package:
# the dense cosine divided by its best value (packet_scale="max"), MMR as the complementary
# selection (complement="mmr", mmr_lambda), complementary selection on every question
# (complement_scope="all"), MemPursuit from an empty selection (pursuit_start="empty") and
# the evidence-conditioned second round (second_round_*). Their knobs live on
# ``AblationFusion``; the selection below is the package's plus these knobs, so at their
# defaults it selects exactly what the package selects (load_questions checks that).
# The FusionConfig fields issue 49 removed (dropped.py re-implements them) are knobs here too,
# at the package's behaviour, so a row's grid can still name them.

@dataclasses.dataclass(frozen=True)
class AblationFusion(FusionConfig):
    """FusionConfig plus the knobs of the dropped variants (defaults: the package's behaviour)."""

    complement: str = "pursuit"  # also "mmr" or "none" here
    dense_query: str = "intent+question"  # or "intent": the intent text alone (index variant "plain")
    neighbor_context: bool = True
    dense_neighbor_context: bool = True
    chat_norm: bool = False  # index variant "plain+q+names+chat"
    request_frame: str = "keep"
    passage_words: int = 0  # index variants "...+p<words>/<pool>"
    passage_overlap_words: int = 30
    passage_pool: str = "top2"
    complement_scope: str = "list"  # "list" questions only, or "all"
    packet_scale: str = "cosine"  # "max": cosines divided by the query's best
    pursuit_start: str = "kept"  # or "empty": MemPursuit over the whole pool from nothing
    mmr_lambda: float = 0.3
    second_round_slots: int = 0  # last slots filled by the evidence-conditioned second round
    second_round_read: int = 3  # top packets whose names/keywords re-query the lexical channel
    second_round_weight: float = 0.5

    @classmethod
    def of(cls, fusion: FusionConfig) -> "AblationFusion":
        return cls(**{f.name: getattr(fusion, f.name) for f in dataclasses.fields(fusion)})


_KNOBS = {f.name: f.default for f in dataclasses.fields(AblationFusion)}


def _knob(cfg, name):
    return getattr(cfg, name, _KNOBS[name])


def _normalized(s: np.ndarray) -> np.ndarray:
    top = float(s.max()) if s.size else 0.0
    return s / top if top > 0 else np.zeros(len(s))


def combine(channels, cfg, n=None) -> np.ndarray:
    """The package's weighted channel sum, the packet cosine divided by its best value first
    when ``packet_scale == "max"`` (so it spans [.., 1] like the lexical one)."""
    weights = channel_weights(cfg)
    total = np.zeros(n if n is not None else len(next(iter(channels.values()))))
    for name, values in channels.items():
        if name == "lexical_unnamed":  # read with "lexical" below
            continue
        if name == "lexical" and "lexical_unnamed" in channels:  # the row's name_term_weight
            values = name_weighted(values, channels["lexical_unnamed"], cfg.name_term_weight, cfg.name_term_scope)
        if name == "packet" and _knob(cfg, "packet_scale") == "max":
            top_value = float(values.max()) if values.size else 0.0
            values = values / top_value if top_value > 0 else values
        total += weights[name] * values
    return total


def complementary(index, total, order, query_vec, cfg, k) -> list[int]:
    """K rows from the fused top-P: the first ``complement_keep`` in score order, the rest by
    MemPursuit (from the kept packets, or with ``pursuit_start="empty"`` from nothing) or by
    MMR (score minus ``mmr_lambda`` times the largest cosine to a packet already chosen)."""
    pool = [int(i) for i in order[: max(cfg.complement_pool, k)]]
    keep = min(cfg.complement_keep, k)
    chosen = pool[:keep]
    rest = pool[keep:]
    E = index.packet_matrix
    if E is None or not rest or k <= keep:
        return [int(i) for i in order[:k]]
    if _knob(cfg, "complement") == "pursuit":
        if query_vec is None:
            return [int(i) for i in order[:k]]
        start = range(keep) if _knob(cfg, "pursuit_start") == "kept" else ()
        res = mem_pursuit(query_vec, E[pool], k=k, tau=0.0, start=start)
        picked = chosen + [pool[i] for i in res.indices if pool[i] not in chosen]
        return (picked + [i for i in pool if i not in picked])[:k]
    sims = E[rest] @ E[chosen].T if chosen else np.zeros((len(rest), 0))
    redundancy = sims.max(axis=1) if chosen else np.zeros(len(rest))
    base = total[rest]
    left = list(range(len(rest)))
    while len(chosen) < k and left:
        value = base[left] - _knob(cfg, "mmr_lambda") * redundancy[left]
        j = left[int(np.lexsort((np.asarray(left), -value))[0])]
        left.remove(j)
        chosen.append(rest[j])
        redundancy = np.maximum(redundancy, E[rest] @ E[rest[j]])
    return chosen


def second_round(index, question, total, first, cfg, k) -> list[int]:
    """The first ``k - second_round_slots`` rows of ``first``, then the best rows by
    ``total + second_round_weight * lexical(new terms)`` not chosen yet; the new terms are the
    names and keywords of the first ``second_round_read`` rows the question does not contain."""
    slots = min(_knob(cfg, "second_round_slots"), k)
    asked = set(index.query_terms(question))
    new: dict[str, None] = {}
    for i in first[: _knob(cfg, "second_round_read")]:
        for t in index.expansion_terms[i]:
            if t not in asked:
                new.setdefault(t, None)
    if not slots or not new:
        return list(first[:k])
    kept = list(first[: k - slots])
    again = total + _knob(cfg, "second_round_weight") * _normalized(index.lexical.scores(list(new)))
    taken = set(kept)
    for i in score_order(again):
        if len(kept) == k:
            break
        if int(i) not in taken:
            kept.append(int(i))
            taken.add(int(i))
    return kept


def select_rows(index, question, total, query_vec, cfg, k) -> list[int]:
    """The package's selection (``fused.retriever.select_rows``) with the dropped knobs."""
    order = score_order(total)
    if _knob(cfg, "complement") != "none" and (_knob(cfg, "complement_scope") == "all" or is_list_question(question)):
        rows = complementary(index, total, order, query_vec, cfg, k)
    else:
        rows = [int(i) for i in order[:k]]
    if _knob(cfg, "second_round_slots"):
        rows = second_round(index, question, total, rows, cfg, k)
    return rows


def top(scores: np.ndarray, k: int) -> list[int]:
    return list(np.lexsort((np.arange(len(scores)), -scores))[:k])


def greedy(scores: np.ndarray, k: int, penalty) -> list[int]:
    """Greedy selection where penalty(chosen_index, remaining_scores) lowers the rest."""
    s = scores.astype(np.float64).copy()
    out: list[int] = []
    for _ in range(min(k, len(s))):
        i = int(np.lexsort((np.arange(len(s)), -s))[0])
        out.append(i)
        s[i] = -np.inf
        penalty(i, s)
    return out


class Question:
    def __init__(self, q, ns, view, qvec, channels):
        self.q, self.ns, self.view, self.qvec, self.ch = q, ns, view, qvec, channels
        self.channel_ms = 0.0  # time to compute qvec and the channels (set by main)


def variants(cfg):
    f = cfg.fusion
    W = {"lexical": f.lexical_weight, "packet": f.packet_weight, "speaker": f.speaker_weight,
         "temporal": f.temporal_weight, "time_match": f.time_match_weight, "claim": 1.0}  # claim: removed channel, re-created below

    def fuse(ch, drop=None, lexical=None, packet=None):  # the package's sum, one channel dropped or swapped
        swap = {"lexical": lexical, "packet": packet}
        kept = {name: (swap[name] if swap.get(name) is not None else v) for name, v in ch.items() if name != drop}
        return combine(kept, f, len(next(iter(ch.values())))) if kept else np.zeros(len(ch["lexical"]))

    def full(Q, k):
        return top(fuse(Q.ch), k)

    def drop(name):
        return lambda Q, k: top(fuse(Q.ch, drop=name), k)

    def no_neighbors(Q, k):
        return top(fuse(Q.ch, lexical=Q.view.__dict__["_lex_no_nbr"](Q.q.question)), k)

    def no_dense_context(Q, k):
        own = (Q.view.packet_matrix @ Q.qvec).astype(np.float64)
        return top(fuse(Q.ch, packet=own), k)

    def with_lexical(fn_name):  # a variant that swaps in another lexical channel
        return lambda Q, k: top(fuse(Q.ch, lexical=Q.view.__dict__[fn_name](Q.q.question)), k)

    def list_diversity(Q, k, pen=0.2):
        if not LIST_QUESTION.search(Q.q.question):
            return full(Q, k)
        return session_diversity(Q, k, pen)

    def no_stemming(Q, k):
        return top(fuse(Q.ch, lexical=Q.view.__dict__["_lex_no_stem"](Q.q.question)), k)

    def rank_fusion(Q, k):  # reciprocal-rank fusion of the same channels (k=60)
        total = np.zeros(len(Q.ch["lexical"]))
        for name, v in Q.ch.items():
            if name == "speaker":
                total += W[name] * v / 60.0
                continue
            ranks = np.empty(len(v))
            ranks[np.lexsort((np.arange(len(v)), -v))] = np.arange(1, len(v) + 1)
            total += 1.0 / (60.0 + ranks)
        return top(total, k)

    def session_diversity(Q, k, pen=0.1):
        sess = np.asarray([p.session_index for p in Q.view.packets])

        def p(i, s):
            s[(sess == sess[i]) & np.isfinite(s)] -= pen
        return greedy(fuse(Q.ch), k, p)

    def adjacent_suppression(Q, k, pen=0.1):
        sess = np.asarray([p.session_index for p in Q.view.packets])

        def p(i, s):
            for j in (i - 1, i + 1):
                if 0 <= j < len(s) and sess[j] == sess[i] and np.isfinite(s[j]):
                    s[j] -= pen
        return greedy(fuse(Q.ch), k, p)

    def neighbor_propagation(Q, k, g=0.2):
        base = fuse(Q.ch)
        sess = np.asarray([p.session_index for p in Q.view.packets])
        out = base.copy()
        for i in range(len(base)):
            nb = [base[j] for j in (i - 1, i + 1) if 0 <= j < len(base) and sess[j] == sess[i]]
            if nb:
                out[i] += g * max(nb)
        return top(out, k)

    def prf(Q, k, m=5, n_terms=10, w=0.3):
        base = fuse(Q.ch)
        seen = set(stem_terms(Q.q.question))
        counts: dict[str, int] = {}
        for i in top(base, m):
            pid = Q.view.packets[i].packet_id
            words = set()
            for d in Q.view.descriptors_by_packet.get(pid, ()):
                words.update(stem_terms(d.text))
            for t in words - seen:
                counts[t] = counts.get(t, 0) + 1
        expansion = [t for t, _ in sorted(counts.items(), key=lambda x: (-x[1], x[0]))[:n_terms]]
        if not expansion:
            return top(base, k)
        s = Q.view.fusion.lexical.scores(expansion)
        return top(base + w * (s / s.max() if s.max() > 0 else s), k)

    def pursuit_split(Q, k, direct=6, pool=50):
        base = fuse(Q.ch)
        order = top(base, pool)
        chosen = order[:direct]
        rest = [i for i in order if i not in chosen]
        X = Q.view.packet_matrix[rest]
        res = mem_pursuit(Q.qvec, X, k=k - direct, tau=0.0)
        picked = chosen + [rest[i] for i in res.indices]
        return (picked + [i for i in order if i not in picked])[:k]

    def mean_cosines(Q, k):
        own = (Q.view.packet_matrix @ Q.qvec).astype(np.float64)
        ctx = (Q.view.fusion.context_matrix @ Q.qvec).astype(np.float64)
        return top(fuse(Q.ch, packet=(own + ctx) / 2), k)

    def mmr(Q, k, lam=0.2):
        E = Q.view.packet_matrix
        base = fuse(Q.ch)
        out, sim = [], np.zeros(len(base))
        s = base.copy()
        for _ in range(k):
            v = s - lam * sim
            v[out] = -np.inf
            i = int(np.lexsort((np.arange(len(v)), -v))[0])
            out.append(i)
            sim = np.maximum(sim, E @ E[i])
        return out

    def cell_prior(Q, k, pen=0.1):
        idx = Q.view.index
        cells_of = []
        for p in Q.view.packets:
            cells_of.append({idx.cell_of_descriptor[d] for d in idx.packet_descriptors.get(p.packet_id, ())
                             if d in idx.cell_of_descriptor})

        def pn(i, s):
            for j in range(len(s)):
                if np.isfinite(s[j]) and cells_of[i] & cells_of[j]:
                    s[j] -= pen
        return greedy(fuse(Q.ch), k, pn)

    def with_claims(Q, k):
        return top(fuse(Q.ch) + Q.view.__dict__["_claim_channel"](Q.qvec), k)

    return [
        ("full (package model-free path)", full),
        ("- neighbour context in BM25 docs", no_neighbors),
        ("- neighbour context in dense channel", no_dense_context),
        ("- stemming", no_stemming),
        ("- lexical channel", drop("lexical")),
        ("- packet channel", drop("packet")),
        ("- speaker cue", drop("speaker")),
        ("- temporal cue (dated claims)", drop("temporal")),
        ("removed: rank fusion instead of score", rank_fusion),
        ("removed: mean, not max, of the two cosines", mean_cosines),
        ("removed: + session diversity", session_diversity),
        ("removed: + session diversity, list questions", list_diversity),
        ("removed: BM25F own + 0.5 x neighbours", with_lexical("_lex_bm25f")),
        ("removed: participant names out of BM25", with_lexical("_lex_no_names")),
        ("removed: + adjacent-turn suppression", adjacent_suppression),
        ("removed: + neighbour score propagation", neighbor_propagation),
        ("removed: + pseudo-relevance feedback", prf),
        ("removed: + MemPursuit for slots 7-10", pursuit_split),
        ("removed: + MMR over packet embeddings", mmr),
        ("removed: + Cells as diversity prior", cell_prior),
        ("removed: + claim max-cosine channel", with_claims),
    ]


GRID = {"packet": (0.5, 1.0, 1.5), "speaker": (0.1, 0.2, 0.3, 0.5), "temporal": (0.1, 0.2, 0.3)}


def cross_conversation_check(questions, namespaces) -> None:
    """Pick the channel weights on one conversation, score them on the other.

    A stand-in for conversations not seen during design: if the shipped weights only fit the
    dev questions, weights chosen on one conversation will do clearly worse on the other.
    """
    def recall_at_10(qs, w):
        out = []
        for Q in qs:
            total = Q.ch["lexical"] + sum(w[name] * Q.ch[name] for name in w)
            out.append(gold_recall([Q.view.packets[i].packet_id for i in top(total, 10)], Q.q.evidence))
        return 100 * statistics.fmean(out)

    grid = [dict(zip(GRID, combo)) for combo in itertools.product(*GRID.values())]
    shipped = {"packet": 1.0, "speaker": 0.3, "temporal": 0.2}
    print(f"\ncross-conversation check: weights picked on one conversation from a {len(grid)}-point grid "
          f"(lexical fixed at 1), recall@10 on the other")
    for fit in namespaces:
        for held in namespaces:
            if held == fit:
                continue
            fit_q = [Q for Q in questions if Q.ns == fit]
            held_q = [Q for Q in questions if Q.ns == held]
            best = max(grid, key=lambda w: (recall_at_10(fit_q, w), -abs(w["packet"] - 1.0)))
            print(f"  fit on {fit}: best {best} -> {recall_at_10(fit_q, best):.1f} there; on {held}: "
                  f"{recall_at_10(held_q, best):.1f} (shipped weights {recall_at_10(held_q, shipped):.1f}, "
                  f"best possible {max(recall_at_10(held_q, w) for w in grid):.1f})")


def joined_conversation(convs, target_turns: int) -> Conversation:
    """Sessions of several conversations, renumbered, until ``target_turns`` turns."""
    replace = dataclasses.replace
    sessions, n = [], 0
    for ci, conv in enumerate(convs):
        for s in conv.sessions:
            if n >= target_turns:
                break
            turns = tuple(replace(t, packet_id=f"C{ci}-{t.packet_id}") for t in s.turns)
            sessions.append(replace(s, index=len(sessions) + 1, session_id=f"c{ci}-{s.session_id}", turns=turns))
            n += len(turns)
    return Conversation(namespace=f"joined-{n}", sessions=tuple(sessions), questions=convs[0].questions)




# ============================================================================ --cv
# Leave-one-conversation-out: each row is a family of fused-selector settings (a small grid
# over the constants the row introduces). For every fold the row's setting is the grid point
# with the best mean recall@10 on the other conversations; the held-out conversation is then
# scored with it. "in-sample" fits and scores on all conversations. The first grid point of a
# row is its default, and wins ties, so a flat grid keeps the default.

# The fused selector as shipped before this table (dev-2 weights, no time match, raw cosines).
SHIPPED_TODAY = {"packet_weight": 1.0, "speaker_weight": 0.3, "temporal_weight": 0.2, "time_match_weight": 0.0,
                 "packet_scale": "cosine", "complement": "none", "pursuit_start": "empty"}
# The row of what was shipped before this round (today's weights + time match): the second
# per-fold bar, the one a component added this round must clear.
SHIPPED_ROW = "+ time match (question period vs dates)"
BASE_GRID = {"packet_weight": (1.0, 0.5, 1.5), "speaker_weight": (0.3, 0.1, 0.5),
             "temporal_weight": (0.2, 0.0, 0.1, 0.3)}


def grid(**axes) -> list[dict]:


    names = list(axes)
    return [dict(zip(names, combo)) for combo in itertools.product(*(axes[n] for n in names))]


def cv_rows(winner_base: dict | None = None) -> list[tuple[str, str, list[dict]]]:
    """(row name, index variant, grid of FusionConfig changes from the package defaults).
    Component rows sit on top of the channel weights shipped before this table, so each row
    measures one thing against them; the combined rows fit the kept components together; the
    last row is the package's defaults as they are (the combined winner's all-data fit)."""
    base = dict(SHIPPED_TODAY)
    now = {**base, "time_match_weight": 0.75}  # shipped before this round: today's weights + time match
    rows = [
        ("today's shipped weights (no fit)", "plain", [dict(base)]),
        ("today's components, weights refit (36-point grid)", "plain", [{**base, **g} for g in grid(**BASE_GRID)]),
        ("+ time match (question period vs dates)", "plain",
         [{**base, "time_match_weight": w} for w in (0.5, 0.3, 0.75, 1.0)]),
        ("time match instead of dated-turn bonus", "plain",
         [{**base, "temporal_weight": 0.0, "time_match_weight": w} for w in (0.5, 0.3, 0.75, 1.0)]),
        ("+ dense cosine divided by its best", "plain",
         [{**base, "packet_scale": "max", "packet_weight": w} for w in (1.5, 1.0, 2.0)]),
        ("+ MMR over fused top-30", "plain",
         [{**base, "complement": "mmr", **g} for g in grid(mmr_lambda=(0.3, 0.1, 0.5), complement_keep=(6, 4),
                                                       complement_scope=("list", "all"))]),
        ("+ MemPursuit over fused top-30", "plain",
         [{**base, "complement": "pursuit", **g} for g in grid(complement_keep=(6, 4, 8),
                                                           complement_scope=("list", "all"))]),
        ("+ second round (names/keywords of top packets)", "plain",
         [{**base, **g} for g in grid(second_round_slots=(2, 1, 3, 4), second_round_weight=(0.5, 0.3, 1.0),
                                      second_round_read=(3, 5))]),
        ("+ bursts and tolerant names", "burst", [dict(base, bursts=True, tolerant_names=True)]),
        ("combined: time match, scaled dense, MemPursuit (list)", "plain",
         [{**base, **g} for g in grid(time_match_weight=(0.5, 1.0), packet_scale=("max",), packet_weight=(1.5, 2.0),
                                      complement=("pursuit", "none"), temporal_weight=(0.2, 0.1))]),
        ("combined: time match, scaled dense", "plain",
         [{**base, **g} for g in grid(time_match_weight=(0.5, 1.0), packet_scale=("max",), packet_weight=(1.5, 2.0),
                                      temporal_weight=(0.2, 0.1))]),
        ("combined: time match, weights refit", "plain",
         [{**base, **g} for g in grid(time_match_weight=(0.5, 0.75), packet_weight=(1.0, 1.5), speaker_weight=(0.3, 0.5),
                                      temporal_weight=(0.2, 0.1))]),
        ("combined: time match, MemPursuit (list)", "plain",
         [{**base, **g} for g in grid(time_match_weight=(0.5, 0.75), complement=("pursuit",), complement_keep=(6, 8))]),
        ("combined: time match, bursts and tolerant names", "burst",
         [{**base, "bursts": True, "tolerant_names": True, "time_match_weight": w} for w in (0.5, 0.75)]),
        # This round (rows on top of time match, its weight refit with them): the question
        # embedded beside the intent text, MemPursuit on list questions, and ideas measured
        # and dropped (each a small selection function below, not a package component).
        ("+ question embedded beside the intent text", "plain+q",
         [{**now, **g} for g in grid(time_match_weight=(0.75, 0.5), packet_weight=(1.0, 1.25, 1.5, 2.0))]),
        ("+ MemPursuit on list questions (over time match)", "plain",
         [{**now, **g} for g in grid(time_match_weight=(0.75, 0.5), complement=("none", "pursuit"),
                                     complement_keep=(6, 4, 8))]),
        ("combined: question beside intent, MemPursuit (list)", "plain+q",
         [{**now, **g} for g in grid(time_match_weight=(0.75, 0.5), packet_weight=(1.0, 1.25, 1.5, 2.0),
                                     complement=("none", "pursuit"))]),
        ("dropped: + query-term coverage (idf share of distinct terms)", "plain",
         [{**now, **g, "select": term_coverage, "params": {"weight": w}}
          for g in grid(time_match_weight=(0.75, 0.5)) for w in (0.0, 0.1, 0.2, 0.3, 0.5)]),
        ("dropped: + score of the turn replied to (propagation)", "plain",
         [{**now, **g, "select": reply_propagation, "params": {"share": w}}
          for g in grid(time_match_weight=(0.75, 0.5)) for w in (0.0, 0.1, 0.2, 0.3)]),
        ("dropped: + at most c packets per session (list questions)", "plain",
         [{**now, **g, "select": session_cap, "params": {"cap": c}}
          for g in grid(time_match_weight=(0.75, 0.5)) for c in (99, 2, 3, 4)]),
        ("dropped: + slots kept for the dense channel's top (not list questions)", "plain+q",
         [{**now, "packet_weight": 1.5, **g, "select": dense_slots, "params": {"slots": r, "depth": d}}
          for g in grid(time_match_weight=(0.75, 0.5)) for r in (0, 1, 2) for d in (3, 5)]),
        # Round of 2026-12-01 (multi-hop): MemPursuit whose first selections are the kept
        # packets, so its picks explain what they leave of the query (the default grid
        # point first), alone over the package defaults and refit with the combined row's grid.
        ("+ MemPursuit starts from the kept packets (list)", "plain+q",
         [{"pursuit_start": s} for s in ("kept", "empty")]),
        ("combined: question beside intent, MemPursuit from the kept packets (list)", "plain+q",
         [{**now, **g, "pursuit_start": "kept"} for g in grid(time_match_weight=(0.75, 0.5),
                                                              packet_weight=(1.0, 1.25, 1.5, 2.0),
                                                              complement=("none", "pursuit"))]),
        # Measured over the package defaults (pursuit from the kept packets) and dropped; the
        # first grid point of each is the package's own setting.
        ("dropped: MemPursuit pool and keep refit (P 30/40/60, keep 6/4/5)", "plain+q",
         grid(complement_pool=(30, 40, 60), complement_keep=(6, 4, 5))),
        ("dropped: + MemPursuit on how-many / where-has questions too", "plain+q",
         [{"select": pursuit_pattern, "params": {"pattern": name}} for name in AGGREGATE_PATTERNS]),
        ("dropped: + MemPursuit over turn+context vectors (list)", "plain+q",
         [{"select": pursuit_with_context, "params": {"share": a}} for a in (0.0, 0.5, 1.0, 1.5)]),
        ("dropped: + free slots to the best turn of sessions not yet chosen (list)", "plain+q",
         [{"select": session_spread, "params": {"keep": kp}} for kp in (99, 4, 6, 8)]),
        ("dropped: + second round (names/keywords of top packets), list questions only", "plain+q",
         [{}] + [{"select": list_second_round, "params": {"slots": n, "weight": w, "read": r}}
                 for n in (1, 2) for w in (0.3, 1.0) for r in (3, 5)]),
        ("dropped: + score of the same speaker's turn two back/ahead", "plain+q",
         [{"select": two_back_propagation, "params": {"share": g, "scope": sc}}
          for sc in ("list", "all") for g in (0.0, 0.1, 0.2, 0.3)]),
        ("dropped: + dense pseudo-relevance feedback from the top packets (list)", "plain+q",
         [{}] + [{"select": dense_feedback, "params": {"read": m, "weight": w}} for m in (2, 3, 5) for w in (0.2, 0.5, 1.0)]),
        ("dropped: channel weights refit for list questions", "plain+q",
         [{"select": list_weights, "params": {"packet": pw, "speaker": sw}}
          for pw in (1.5, 1.0, 2.0, 3.0) for sw in (0.3, 0.0, 0.6)]),
        # Questions that name the user (issue 25 item 4): the terms of the one participant a
        # question names keep this share of their BM25 score (the speaker channel says who).
        ("+ named participant's terms down-weighted in BM25 (name_term_weight)", "plain+q+names",
         [{"name_term_weight": w} for w in (1.0, 0.5, 0.25, 0.0)]),
        ("+ named participant's terms down-weighted only when no other term matches (name_term_scope alone)",
         "plain+q+names", [{"name_term_weight": w, "name_term_scope": "alone"} for w in (1.0, 0.5, 0.25, 0.0)]),
        ("+ named-user fix fixed at 0.25 alone (nothing fitted)", "plain+q+names",
         [{"name_term_weight": 0.25, "name_term_scope": "alone"}]),
        # Long turns (issue 25 item 3): what the dense channel embeds per turn (index variants
        # of cv_corpora.dense_variants over the same builds; the first point is the package's).
        ("+ dense context vector only where its document fits (context_window_words 150/200/300)", "plain+q",
         [{"variant": f"plain+q+z+cw{w}"} for w in (0, 150, 200, 300)]),
        ("+ dense: long turns scored by their passages (150 or 100 words; best or top-2 mean)", "plain+q",
         [{"variant": "plain+q+z+cw0"}] + [{"variant": f"plain+q+z+cw0+p{pw}/{pool}"}
                                           for pw in (150, 100) for pool in ("max", "top2")]),
        ("+ dense document: the raw turn instead of z(p)", "plain+q",
         [{"variant": f"plain+q+{doc}+cw0"} for doc in ("z", "turn")]),
        ("dense, no fit: the release before (context vector everywhere)", "plain+q", [{"variant": "plain+q+z+cw0"}]),
        ("dense, no fit: context vector where its document has at most 150 words", "plain+q",
         [{"variant": "plain+q+z+cw150"}]),
        ("dense, no fit: at most 300 words (shipped)", "plain+q", [{"variant": "plain+q+z+cw300"}]),
        ("dense, no fit: raw-turn document, context at most 150 words", "plain+q", [{"variant": "plain+q+turn+cw150"}]),
        ("dense, no fit: raw-turn document, context at most 300 words", "plain+q", [{"variant": "plain+q+turn+cw300"}]),
        ("dense, no fit: raw-turn document, context at most 300 words, dense weight 2", "plain+q",
         [{"variant": "plain+q+turn+cw300", "packet_weight": 2.0}]),
        ("dense, no fit: raw-turn document, context at most 150 words, dense weight 2", "plain+q",
         [{"variant": "plain+q+turn+cw150", "packet_weight": 2.0}]),
        ("dense, no fit: raw-turn document, context at most 150 words, passages 150/top-2", "plain+q",
         [{"variant": "plain+q+turn+cw150+p150/top2"}]),
        ("combined: dense document, context gate, passages", "plain+q",
         [{"variant": f"plain+q+{doc}+cw{w}{p}"} for doc in ("z", "turn") for w in (0, 150, 200, 300)
          for p in ("", "+p150/top2", "+p150/max")]),
        ("combined: dense document, context gate, passages, dense weight refit", "plain+q",
         [{"variant": f"plain+q+{doc}+cw{w}{p}", "packet_weight": pw} for pw in (1.5, 1.0, 2.0)
          for doc in ("z", "turn") for w in (0, 150, 200, 300) for p in ("", "+p150/top2")]),
        # Chat-log spellings (issue 25 item 7): the BM25 terms of turns and questions with chat
        # abbreviations, elongations and emoji rewritten as words (language/chatnorm.py); over
        # the package defaults, nothing to fit (the index variant is cv_corpora.chat_variant).
        ("+ chat normalization in BM25 (slang, elongation, emoji; chat_norm, no fit)", "plain+q+names",
         [{"variant": "plain+q+names+chat", "chat_norm": True}]),
        ("package defaults (shipped; fit on all four, not a CV figure)", default_variant(FusionConfig()), [{}]),
    ]
    return rows


def default_variant(fusion: FusionConfig) -> str:
    """The channel variant the package's fused settings read (which query vector)."""
    return "plain+q" if getattr(fusion, "dense_query", "intent+question") == "intent+question" else "plain"


def embed_query(embedder, texts: list[str]) -> np.ndarray:
    """The query vector of ``texts`` as the package makes it (their embeddings' mean)."""
    embed = getattr(embedder, "embed_query", None) or embedder.embed
    return query_vector(np.asarray(embed(texts), dtype=np.float32))


# Ideas measured with --cv and dropped: selections over the fused total, (Q, variant, total,
# cfg, k, **params) -> rows.

def term_coverage(Q, variant, total, cfg, k, weight):
    """A bonus for packets matching a larger idf-weighted share of the question's distinct terms."""
    ix = Q.indexes[variant]
    cov = getattr(Q, "_coverage", None)
    if cov is None:
        terms_ = list(dict.fromkeys(ix.query_terms(Q.q.question)))
        n = len(ix.packet_ids)
        cov = np.zeros(n)
        if terms_:
            hit = np.stack([ix.lexical.scores([t]) > 0 for t in terms_])
            df = hit.sum(axis=1)
            idf = np.maximum(np.log((n - df + 0.5) / (df + 0.5)), 0.1) * (df > 0)
            if idf.sum() > 0:
                cov = (idf[:, None] * hit).sum(axis=0) / idf.sum()
        Q._coverage = cov
    return [int(i) for i in score_order(total + weight * cov)[:k]]


def reply_propagation(Q, variant, total, cfg, k, share):
    """Each packet gains ``share`` of the score of the previous turn of its session (the turn it answers)."""
    sess = np.asarray([p.session_index for p in Q.view.packets])
    prev = np.r_[0.0, total[:-1]] * np.r_[False, sess[1:] == sess[:-1]]
    return [int(i) for i in score_order(total + share * np.maximum(prev, 0))[:k]]


def session_cap(Q, variant, total, cfg, k, cap):
    """For list questions, at most ``cap`` of the K packets from one session (the rest in score order)."""
    order = [int(i) for i in score_order(total)]
    if not is_list_question(Q.q.question):
        return order[:k]
    sess = [p.session_index for p in Q.view.packets]
    kept, spill, count = [], [], {}
    for i in order:
        if len(kept) == k:
            break
        if count.get(sess[i], 0) < cap:
            kept.append(i)
            count[sess[i]] = count.get(sess[i], 0) + 1
        else:
            spill.append(i)
    return (kept + spill)[:k]


def dense_slots(Q, variant, total, cfg, k, slots, depth):
    """For questions that are not list questions, the last ``slots`` of K go to the best of the
    dense channel's top ``depth`` (with the speaker and time-match bonuses) not chosen yet."""
    order = [int(i) for i in score_order(total)]
    if not slots or is_list_question(Q.q.question):
        return order[:k]
    ch = Q.channels[variant]
    dense = ch["packet"] + cfg.speaker_weight * ch["speaker"] + cfg.time_match_weight * ch["time_match"]
    chosen = order[:k - slots]
    chosen += [int(i) for i in score_order(dense)[:depth] if int(i) not in chosen][:slots]
    return (chosen + [i for i in order if i not in chosen])[:k]


# Measured in the round on multi-hop questions and dropped (rows "dropped: ..." over the
# package defaults, MemPursuit starting from the kept packets).

AGGREGATE_PATTERNS = {
    "list": LIST_QUESTION,
    "list or how many": re.compile(LIST_QUESTION.pattern + r"|^how many\b", re.IGNORECASE),
    "list, how many or where has": re.compile(LIST_QUESTION.pattern + r"|^how many\b|^where (?:has|have)\b",
                                              re.IGNORECASE),
}


def _pursue(Q, variant, total, cfg, k, query_vec=None):
    """The package's complementary selection (MemPursuit) for these scores, whatever the question."""
    qv = Q.qvecs[variant] if query_vec is None else query_vec
    return complementary(Q.indexes[variant], total, score_order(total), qv,
                         dataclasses.replace(cfg, complement="pursuit"), k)


def pursuit_pattern(Q, variant, total, cfg, k, pattern):
    """MemPursuit for the questions ``AGGREGATE_PATTERNS[pattern]`` matches (counts, places)."""
    if not AGGREGATE_PATTERNS[pattern].search(Q.q.question):
        return [int(i) for i in score_order(total)[:k]]
    return _pursue(Q, variant, total, cfg, k)


def pursuit_with_context(Q, variant, total, cfg, k, share):
    """MemPursuit over each pool packet's vector plus ``share`` times its context vector,
    renormalized (the packet's neighbourhood takes part in what it explains)."""
    order = [int(i) for i in score_order(total)]
    if not is_list_question(Q.q.question) or not share:
        return select_rows(Q.indexes[variant], Q.q.question, total, Q.qvecs[variant], cfg, k)
    ix = Q.indexes[variant]
    pool = order[:max(cfg.complement_pool, k)]
    X = ix.packet_matrix[pool] + share * ix.context_matrix[pool]
    X = X / np.linalg.norm(X, axis=1, keepdims=True)
    keep = min(cfg.complement_keep, k)
    res = mem_pursuit(Q.qvecs[variant], X, k=k, tau=0.0, start=range(keep))
    picked = list(dict.fromkeys([*pool[:keep], *(pool[i] for i in res.indices)]))
    return (picked + [i for i in pool if i not in picked])[:k]


def session_spread(Q, variant, total, cfg, k, keep):
    """List questions: the first ``keep`` in score order, then (instead of MemPursuit) the best
    turn of each session not yet represented, sessions by their best score (fused top-30)."""
    if not is_list_question(Q.q.question) or keep >= k:  # keep >= k: the package's selection
        return select_rows(Q.indexes[variant], Q.q.question, total, Q.qvecs[variant], cfg, k)
    order = [int(i) for i in score_order(total)]
    sess = [p.session_index for p in Q.view.packets]
    chosen = order[:keep]
    seen = {sess[i] for i in chosen}
    for i in order[:30]:
        if len(chosen) == k:
            break
        if sess[i] not in seen:
            chosen.append(i)
            seen.add(sess[i])
    return (chosen + [i for i in order if i not in chosen])[:k]


def list_second_round(Q, variant, total, cfg, k, slots, weight, read):
    """The package's second round, for list questions only, after their complementary selection."""
    rows = select_rows(Q.indexes[variant], Q.q.question, total, Q.qvecs[variant], cfg, k)
    if not is_list_question(Q.q.question):
        return rows
    c = dataclasses.replace(cfg, second_round_slots=slots, second_round_weight=weight, second_round_read=read)
    return second_round(Q.indexes[variant], Q.q.question, total, rows, c, k)


def two_back_propagation(Q, variant, total, cfg, k, share, scope):
    """Each packet gains ``share`` of the larger score of the turns two before and two after it
    in its session (in a two-person chat, the same speaker continuing the topic)."""
    if not share or (scope == "list" and not is_list_question(Q.q.question)):
        return select_rows(Q.indexes[variant], Q.q.question, total, Q.qvecs[variant], cfg, k)
    P = Q.view.packets
    pos = np.maximum(total, 0.0)
    near = np.zeros(len(total))
    for i in range(len(P)):
        for j in (i - 2, i + 2):
            if 0 <= j < len(P) and P[j].session_index == P[i].session_index and P[j].speaker == P[i].speaker:
                near[i] = max(near[i], pos[j])
    return select_rows(Q.indexes[variant], Q.q.question, total + share * near, Q.qvecs[variant], cfg, k)


def dense_feedback(Q, variant, total, cfg, k, read, weight):
    """List questions: ``weight`` times the cosine with the centroid of the top ``read``
    packets joins the score, and pursuit explains query plus centroid."""
    if not is_list_question(Q.q.question):
        return [int(i) for i in score_order(total)[:k]]
    ix = Q.indexes[variant]
    centroid = ix.packet_matrix[score_order(total)[:read]].mean(axis=0)
    centroid /= np.linalg.norm(centroid)
    cos = np.maximum(ix.packet_matrix @ centroid, ix.context_matrix @ centroid)
    return _pursue(Q, variant, total + weight * cos, cfg, k, query_vec=Q.qvecs[variant] + 0.5 * centroid)


def list_weights(Q, variant, total, cfg, k, packet, speaker):
    """List questions scored with their own dense and speaker weights."""
    if not is_list_question(Q.q.question):
        return [int(i) for i in score_order(total)[:k]]
    c = dataclasses.replace(cfg, packet_weight=packet, speaker_weight=speaker)
    return _pursue(Q, variant, combine(Q.channels[variant], c), c, k)


class CVQuestion:
    """One scored question: its query vector and channels under each variant, timed once."""

    def __init__(self, q, ns, view, qvecs, indexes, channels, channel_ms):
        self.q, self.ns, self.view, self.qvecs = q, ns, view, qvecs
        self.indexes, self.channels, self.channel_ms = indexes, channels, channel_ms


def eval_setting(questions, fusion_base, changes: dict, variant: str):
    """Per-question recall@10 and @12 (arrays) and selection ms of one fused setting.

    ``changes`` are FusionConfig fields, plus for a measured-and-dropped idea that is not a
    package component, ``"select"``: a function (Q, total, cfg, k, **params) -> rows with
    its constants under ``"params"``."""
    changes = dict(changes)
    select = changes.pop("select", None)
    params = changes.pop("params", {})
    variant = changes.pop("variant", variant)  # a grid point may read another index variant
    cfg = dataclasses.replace(fusion_base, **changes)
    r10 = np.zeros(len(questions))
    r12 = np.zeros(len(questions))
    ms = np.zeros(len(questions))
    for n, Q in enumerate(questions):
        ch = Q.channels[variant]
        qvec = Q.qvecs[variant]

        def pick(k):
            if select is not None:
                return select(Q, variant, total, cfg, k, **params)
            return select_rows(Q.indexes[variant], Q.q.question, total, qvec, cfg, k)
        t0 = time.perf_counter()
        total = combine(ch, cfg)
        rows = pick(12)
        ms[n] = Q.channel_ms + (time.perf_counter() - t0) * 1000
        ids = [Q.view.packets[i].packet_id for i in rows]
        rows10 = pick(10)
        r10[n] = gold_recall([Q.view.packets[i].packet_id for i in rows10], Q.q.evidence)
        r12[n] = gold_recall(ids, Q.q.evidence)
    return r10, r12, ms


def run_cv(questions, fusion_base, plot_path: str | None, only: str | None = None) -> list[dict]:
    """Print the leave-one-conversation-out table; returns one summary dict per row.

    ``only``: run only the rows whose name contains it (the two reference rows always run)."""
    namespaces = list(dict.fromkeys(Q.ns for Q in questions))
    ns_of = np.asarray([Q.ns for Q in questions])
    cat_of = np.asarray([Q.q.category for Q in questions])
    results = []
    reference = None  # today's shipped row: the per-fold bar every component must clear
    shipped = None  # the row shipped before this round
    print(f"\nleave-one-conversation-out on {len(namespaces)} conversations ({len(questions)} questions); "
          "each row's constants fit on three conversations (best mean recall@10 of its grid), "
          "scored on the fourth")
    have = set(questions[0].channels) if questions else set()
    for n_row, (name, variant, points) in enumerate(cv_rows()):
        if only and only not in name and n_row and name != SHIPPED_ROW:
            continue
        needed = {p.get("variant", variant) for p in points}
        if not needed <= have:  # index variants only the three-corpus study builds (cv_corpora)
            print(f"  (row {name!r} needs --corpora: index variants {', '.join(sorted(needed - have))})")
            continue
        evals = [eval_setting(questions, fusion_base, p, variant) for p in points]
        R10 = np.stack([e[0] for e in evals])
        R12 = np.stack([e[1] for e in evals])

        def best(mask):
            return int(np.argmax(R10[:, mask].mean(axis=1)))  # argmax: first (default) point wins ties
        cv10 = np.zeros(len(questions))
        cv12 = np.zeros(len(questions))
        picks = {}
        for ns in namespaces:
            held = ns_of == ns
            g = best(~held)
            picks[ns] = points[g]
            cv10[held] = R10[g, held]
            cv12[held] = R12[g, held]
        g_all = best(np.ones(len(questions), dtype=bool))
        row = {
            "name": name, "variant": variant, "in_sample": 100 * R10[g_all].mean(), "in_sample_setting": points[g_all],
            "cv10": 100 * cv10.mean(), "cv12": 100 * cv12.mean(),
            "cats": {c: 100 * cv10[cat_of == c].mean() for c in CATS},
            "folds": {ns: 100 * cv10[ns_of == ns].mean() for ns in namespaces},
            "p50": float(np.median(evals[g_all][2])), "picks": picks, "grid": len(points),
        }
        if reference is None:
            reference = row
        if name == SHIPPED_ROW:
            shipped = row
        row["helped"] = sum(row["folds"][ns] > reference["folds"][ns] + 1e-9 for ns in namespaces)
        row["helped_now"] = (sum(row["folds"][ns] > shipped["folds"][ns] + 1e-9 for ns in namespaces)
                             if shipped is not None else None)
        results.append(row)
        print(f"  {name}: in-sample {row['in_sample']:.1f} (setting {points[g_all]}), CV {row['cv10']:.1f}",
              flush=True)
    print_cv_table(results, namespaces)
    if plot_path:
        rows = [(r["name"], r["cv10"], r["cats"][1]) for r in results]
        title = "Model-free path: cross-validated recall@10 per row (leave one conversation out)"
        print(f"wrote {ablation_plot(rows, plot_path, title=title)}")
    return results


def print_cv_table(results, namespaces) -> None:
    head = ("| row | grid | in-sample R@10 | CV R@10 | CV R@12 | " + " | ".join(
        LOCOMO_CATEGORY_NAMES[c] for c in CATS) + " | " + " | ".join(f"fold {ns}" for ns in namespaces)
        + " | folds > today | folds > shipped | p50 ms |")
    print("\n" + head)
    print("|" + "---|" * (head.count("|") - 1))
    for r in results:
        cats = " | ".join(f"{r['cats'][c]:.1f}" for c in CATS)
        folds = " | ".join(f"{r['folds'][ns]:.1f}" for ns in namespaces)
        now = "-" if r["helped_now"] is None else f"{r['helped_now']}/{len(namespaces)}"
        print(f"| {r['name']} | {r['grid']} | {r['in_sample']:.1f} | {r['cv10']:.1f} | {r['cv12']:.1f} | {cats} | "
              f"{folds} | {r['helped']}/{len(namespaces)} | {now} | {r['p50']:.1f} |")
    print("\nsettings picked per fold (fit on the other conversations):")
    for r in results:
        if r["grid"] > 1:
            print(f"  {r['name']}: " + "; ".join(f"{ns}: {s}" for ns, s in r["picks"].items()))


# ============================================================================ --pool-recall


def run_pool_recall(questions, cfg) -> float:
    """Recall of the scheduler's closed pool at its first 20, 40 and all positions; returns the
    mean size of the paper's normalized pool (the default N of the fused pool)."""
    sizes, rows = [], {"normalized (paper)": {20: [], 40: [], "all": []}}
    fused_all: dict = {20: [], 40: [], "N": [], "all": []}
    pools = []
    for Q in questions:
        view = Q.view
        intent = rule_intent(Q.q.question, known_people=sorted({p.speaker for p in view.packets}))
        address = address_query(view.index, intent, cfg.routing, layout=cfg.placement.layout)
        pool = [pc.packet_id for pc in normalize_to_packets(address.candidates, view.index.packet_ordinal)]
        sizes.append(len(pool))
        total = combine(Q.channels["plain"], cfg.fusion)
        ranking = [view.packets[i].packet_id for i in score_order(total)]
        pools.append((Q, pool, ranking))
    mean_size = statistics.fmean(sizes)
    n = int(round(mean_size))
    for Q, pool, ranking in pools:
        for at in (20, 40):
            rows["normalized (paper)"][at].append(gold_recall(pool[:at], Q.q.evidence))
            fused_all[at].append(gold_recall(ranking[:at], Q.q.evidence))
        rows["normalized (paper)"]["all"].append(gold_recall(pool, Q.q.evidence))
        fused_all["N"].append(gold_recall(ranking[:n], Q.q.evidence))
        fused_all["all"].append(gold_recall(ranking, Q.q.evidence))
    print(f"\npool recall on {len(questions)} questions (rule descriptors, rule intent; the paper pool "
          f"holds {mean_size:.1f} packets on average, median {statistics.median(sizes):.0f}, "
          f"max {max(sizes)})")
    print("| pool | recall@20 | recall@40 | recall@N (N = mean paper pool) | recall, whole pool |")
    print("|---|---:|---:|---:|---:|")
    p = rows["normalized (paper)"]
    print(f"| normalized address pool (paper) | {100 * statistics.fmean(p[20]):.1f} | "
          f"{100 * statistics.fmean(p[40]):.1f} | {100 * statistics.fmean(p['all']):.1f} (its own size) | "
          f"{100 * statistics.fmean(p['all']):.1f} |")
    print(f"| fused ranking (model-free scores) | {100 * statistics.fmean(fused_all[20]):.1f} | "
          f"{100 * statistics.fmean(fused_all[40]):.1f} | {100 * statistics.fmean(fused_all['N']):.1f} (N={n}) | "
          f"{100 * statistics.fmean(fused_all['all']):.1f} (every packet) |")
    return mean_size


def default_store(data: str) -> Path:
    """A store file kept between runs, one per data file (the build is the slow part)."""
    return Path(tempfile.gettempdir()) / "memcompile_ablate" / f"{Path(data).stem}.sqlite"


def load_questions(mem, convs, cfg) -> list[CVQuestion]:
    """Every scored question with its channels under the plain and the burst index."""
    channel_cfg = dataclasses.replace(cfg.fusion, time_match_weight=1.0, temporal_weight=1.0,
                                      speaker_weight=1.0, packet_weight=1.0, lexical_weight=1.0,
                                      name_term_weight=1.0, name_term_scope="always")
    burst_cfg = dataclasses.replace(channel_cfg, bursts=True, tolerant_names=True)
    # Which query vector each variant's dense channel uses: the intent text alone, or its
    # mean with the question's (the package's; "intent" was FusionConfig.dense_query); the package default's is the one
    # compile_context computes, so the check against Memory.compile below is exact.
    dense_query = {"plain": "intent", "burst": "intent", "plain+q": "intent+question"}
    out = []
    mismatches = 0
    for conv in convs:
        view = mem.view(conv.namespace)
        indexes = {
            "plain": view.fusion,
            "burst": FusionIndex.build(view.packets, view.descriptors_by_packet, burst_cfg,
                                       packet_matrix=view.packet_matrix, context_matrix=view.fusion.context_matrix),
        }
        indexes["plain+q"] = indexes["plain"]
        for q in conv.questions:
            if q.category not in CATS or not q.evidence:
                continue
            for _ in range(1 if out else 2):  # one warm-up pass before the first timed question
                t0 = time.perf_counter()
                intent = query_intent(q.question, cfg, None, view)
                qvec = embed_query(mem.embedder, dense_query_texts(q.question, intent.lexical_query()))
                fused_scores(view.fusion, q.question, qvec, cfg.fusion)
                channel_ms = (time.perf_counter() - t0) * 1000
            qvecs = {}
            for name, mode in dense_query.items():
                qvecs[name] = qvec if mode == "intent+question" else embed_query(
                    mem.embedder, intent_only_texts(q.question, intent.lexical_query()))
            channels = {name: fused_scores(ix, q.question, qvecs[name], channel_cfg).channels
                        for name, ix in indexes.items()}
            # Beside each lexical channel, the same without the named participant's terms, which
            # ``combine`` mixes in for the row's name_term_weight (as the package does).
            unnamed = {id(ix): lexical_channel(ix, FusedQuery(q.question, None, name_term_weight=0.0))
                       for ix in {id(ix): ix for ix in indexes.values()}.values()}
            for name, ix in indexes.items():
                channels[name]["lexical_unnamed"] = unnamed[id(ix)]
            Q = CVQuestion(q, conv.namespace, view, qvecs, indexes, channels, channel_ms)
            out.append(Q)
            total = combine(channels[default_variant(cfg.fusion)], cfg.fusion)
            mine = [view.packets[i].packet_id for i in select_rows(view.fusion, q.question, total, qvec, cfg.fusion,
                                                                   cfg.evidence.k0)]
            mismatches += list(mem.compile(conv.namespace, q.question).packet_ids) != mine
    print(f"{len(out)} questions with gold evidence; the package default setting == Memory.compile on "
          f"{len(out) - mismatches}/{len(out)}")
    return out


def latency(mem, store, convs, runs: int, target_turns: int) -> None:
    """Per-query latency of the whole model-free query path (Memory.compile)."""
    targets = [(c.namespace, c) for c in convs]
    joined = joined_conversation(convs, target_turns)
    mem.add(joined.namespace, joined)
    mem.build(joined.namespace)
    targets.append((joined.namespace, joined))
    print(f"\nper-query latency of Memory.compile on the model-free path ({runs} passes, "
          f"2 shared CPU cores; question embedding included)")
    for ns, conv in targets:
        n_turns = len(store.packets(ns))
        qs = [q.question for q in conv.questions if q.category in CATS]
        mem.compile(ns, qs[0])  # warm: index load, model load
        times = []
        for _ in range(runs):
            for question in qs:
                t0 = time.perf_counter()
                mem.compile(ns, question)
                times.append((time.perf_counter() - t0) * 1000)
        times.sort()
        p50 = times[len(times) // 2]
        p95 = times[min(len(times) - 1, int(round(0.95 * len(times))) - 1)]
        print(f"  {ns:14s} {n_turns:4d} turns: p50 {p50:6.2f} ms  p95 {p95:6.2f} ms  ({len(times)} queries)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None, help="LoCoMo file (default ../shared/data/locomo/locomo_dev4.json)")
    ap.add_argument("--store", default=None, help="store file, kept between runs (default: one per data "
                                                  "file under the system temp folder)")
    ap.add_argument("--cv", action="store_true", help="leave-one-conversation-out table")
    ap.add_argument("--pool-recall", action="store_true", help="recall of the LLM scheduler's pool")
    ap.add_argument("--latency-runs", type=int, default=3)
    ap.add_argument("--latency-turns", type=int, default=680, help="size of the joined latency conversation")
    ap.add_argument("--no-latency", action="store_true")
    ap.add_argument("--plot", default=None, metavar="PNG", help="also draw the rows as a bar chart")
    ap.add_argument("--rows", default=None, metavar="TEXT", help="--cv: only the rows whose name contains TEXT "
                                                                   "(and the two reference rows)")
    g = ap.add_argument_group("several corpora (--cv --corpora; research/cv_corpora.py)")
    g.add_argument("--corpora", default=None, metavar="NAMES",
                   help="comma-separated corpora to cross-validate over: locomo, realtalk, beam, longmemeval (a measurement: one haystack)")
    g.add_argument("--realtalk", default=None, help="REALTALK chat folder (default ../shared/data/realtalk)")
    g.add_argument("--beam", default=None, help="BEAM size folder (default ../shared/data/beam/100K)")
    g.add_argument("--cache", default="~/.cache/memcompile-local/ablate",
                   help="folder of the built stores, one per corpus, conversation and configuration")
    g.add_argument("--cv-json", default=None, metavar="PATH", help="also write the rows' figures as JSON")
    g.add_argument("--quiet", action="store_true", help="no progress bars")
    g.add_argument("--embed-model", default=None, metavar="NAME_OR_DIR",
                   help="sentence-transformers model of the builds (default: the package's, all-MiniLM-L6-v2)")
    g.add_argument("--beam-chats", type=int, default=None, metavar="N",
                   help="only the first N BEAM chats (a slow embedder's subset)")
    g.add_argument("--no-dense-variants", action="store_true",
                   help="skip the dense document / context gate / passage variants (their rows then fail)")
    g.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=N",
                   help="a config field of every build and row (numbers only), e.g. extraction.max_rule_claims=12")
    args = ap.parse_args()
    if args.corpora:
        if not args.cv:
            ap.error("--corpora needs --cv")
        import cv_corpora  # research/, beside this file

        # The rows here vary the weighted channel sum; the learned ranker (which "auto", the
        # default, uses on user-assistant and bursty histories) is trained and scored by train_ranker.py.
        cfg = apply_preset("model-free", PipelineConfig()).replace(fusion={"ranker": "weighted"})
        if args.set:
            cfg = cfg.replace(**cv_corpora.config_changes(args.set))
            print("config changes:", ", ".join(args.set))
        if args.embed_model:
            cfg = cfg.replace(model={"embed_model": str(Path(args.embed_model).expanduser())
                                     if Path(args.embed_model).expanduser().exists() else args.embed_model})
        return cv_corpora.run(args, cfg=cfg, cv_rows=cv_rows, eval_setting=eval_setting,
                              default_variant=default_variant, fusion_base=AblationFusion.of(cfg.fusion))

    args.data = args.data or "../shared/data/locomo/locomo_dev4.json"
    cfg = apply_preset("model-free", PipelineConfig()).replace(fusion={"ranker": "weighted"})
    store_path = Path(args.store) if args.store else default_store(args.data)
    store_path.parent.mkdir(parents=True, exist_ok=True)
    store = MemoryStore(store_path)
    mem = Memory(store, cfg, client=LLMClient(NoModelBackend(), store))
    convs = load_locomo(args.data)
    t_build = time.perf_counter()
    for conv in convs:
        mem.add(conv.namespace, conv)
        mem.build(conv.namespace)
    print(f"built {len(convs)} conversations in {time.perf_counter() - t_build:.1f} s (zero model calls; "
          f"store {store_path})")
    if not (args.cv or args.pool_recall):
        return legacy_rows(mem, store, convs, cfg, args)
    questions = load_questions(mem, convs, cfg)
    if args.pool_recall:
        run_pool_recall(questions, cfg)
    if args.cv:
        run_cv(questions, AblationFusion.of(cfg.fusion), args.plot, args.rows)
    if not args.no_latency:
        latency(mem, store, convs, args.latency_runs, args.latency_turns)
    store.close()
    return 0


def legacy_rows(mem, store, convs, cfg, args) -> int:
    """The in-sample per-component rows (the default mode)."""
    questions: list[Question] = []
    mismatches = 0
    for conv in convs:
        view = mem.view(conv.namespace)
        # neighbor_context off (dropped.py): BM25 over each turn's own document.
        plain_lexical = LexicalIndex([stem_terms(d) for d in own_documents(view.packets, view.descriptors_by_packet)],
                                     k1=cfg.fusion.bm25_k1, b=cfg.fusion.bm25_b)
        docs = lexical_documents(view.packets, view.descriptors_by_packet)
        unstemmed = LexicalIndex([terms(d) for d in docs], k1=cfg.fusion.bm25_k1, b=cfg.fusion.bm25_b)

        def lex_from(index, tok):
            def f(question):
                s = index.scores(tok(question))
                return s / s.max() if s.max() > 0 else s
            return f
        view.__dict__["_lex_no_nbr"] = lex_from(plain_lexical, stem_terms)
        view.__dict__["_lex_no_stem"] = lex_from(unstemmed, terms)
        # BM25F-like: own document and neighbour text as two fields, neighbours at weight 0.5.
        own_docs = own_documents(view.packets, view.descriptors_by_packet)
        P = view.packets
        nbr_docs = [" ".join(_raw(P[j]) for j in session_neighbours(P, i)) for i in range(len(P))]
        own_ix = LexicalIndex([stem_terms(d) for d in own_docs], k1=cfg.fusion.bm25_k1, b=cfg.fusion.bm25_b)
        nbr_ix = LexicalIndex([stem_terms(d) for d in nbr_docs], k1=cfg.fusion.bm25_k1, b=cfg.fusion.bm25_b)

        def bm25f(question, own_ix=own_ix, nbr_ix=nbr_ix):
            t = stem_terms(question)
            s = own_ix.scores(t) + 0.5 * nbr_ix.scores(t)
            return s / s.max() if s.max() > 0 else s
        view.__dict__["_lex_bm25f"] = bm25f
        names = {t for n in view.fusion.participants for t in stem_terms(n)}

        def no_names(question, index=view.fusion.lexical, names=names):
            t = [x for x in stem_terms(question) if x not in names] or stem_terms(question)
            s = index.scores(t)
            return s / s.max() if s.max() > 0 else s
        view.__dict__["_lex_no_names"] = no_names
        # The removed claim channel: best cosine between the query and any claim of the packet.
        descs = [d for p in view.packets for d in view.descriptors_by_packet.get(p.packet_id, ())]
        claim_m = np.asarray(mem.embedder.embed([d.text for d in descs]), dtype=np.float32)
        owner = np.asarray([view.row_of[d.packet_id] for d in descs])

        def claim_channel(qvec, claim_m=claim_m, owner=owner, n=len(view.packets)):
            best = np.full(n, -1.0)
            np.maximum.at(best, owner, (claim_m @ qvec).astype(np.float64))
            best[best < -0.5] = 0.0
            return best
        view.__dict__["_claim_channel"] = claim_channel
        for q in conv.questions:
            if q.category not in CATS or not q.evidence:
                continue
            for _ in range(2):  # the second pass is timed (warm caches)
                t0 = time.perf_counter()
                intent = query_intent(q.question, cfg, None, view)
                qvec = np.asarray(mem.embedder.embed([intent.lexical_query()]), dtype=np.float32)[0]
                ch = fused_scores(view.fusion, q.question, qvec, cfg.fusion).channels
                channel_ms = (time.perf_counter() - t0) * 1000
            Q = Question(q, conv.namespace, view, qvec, ch)
            Q.channel_ms = channel_ms
            questions.append(Q)
            ctx = mem.compile(conv.namespace, q.question)
            full = [view.packets[i].packet_id for i in variants(cfg)[0][1](Q, cfg.evidence.k0)]
            mismatches += list(ctx.packet_ids) != full

    print(f"{len(questions)} questions with gold evidence; full variant == Memory.compile on "
          f"{len(questions) - mismatches}/{len(questions)}")
    namespaces = list(dict.fromkeys(Q.ns for Q in questions))
    header = f"{'variant':46s} {'R@10':>6s} {'R@12':>6s} " + " ".join(
        f"{LOCOMO_CATEGORY_NAMES[c][:9]:>9s}" for c in CATS) + f" {'full@10':>7s} " + " ".join(
        f"{ns[:9]:>9s}" for ns in namespaces) + f" {'p50 ms':>6s} {'p95 ms':>6s}"
    print(header)
    print("(row latency: rule intent, question embedding and the package's channels, plus the row's own\n"
          " selection work; a row that drops a channel still pays for computing it here)")
    plot_rows = []
    for name, fn in variants(cfg):
        rec = {10: [], 12: []}
        per_cat: dict[int, list[float]] = {c: [] for c in CATS}
        full_cov = 0
        per_ns: dict[str, list[float]] = {ns: [] for ns in namespaces}
        ms: list[float] = []
        for Q in questions:
            for k in (10, 12):
                t0 = time.perf_counter()
                chosen = fn(Q, k)
                if k == 10:
                    ms.append(Q.channel_ms + (time.perf_counter() - t0) * 1000)
                picked = [Q.view.packets[i].packet_id for i in chosen]
                r = gold_recall(picked, Q.q.evidence)
                rec[k].append(r)
                if k == 10:
                    per_cat[Q.q.category].append(r)
                    full_cov += r == 1.0
                    per_ns[Q.ns].append(r)
        cats = " ".join(f"{100 * statistics.fmean(per_cat[c]):9.1f}" for c in CATS)
        by_ns = " ".join(f"{100 * statistics.fmean(per_ns[ns]):9.1f}" for ns in namespaces)
        plot_rows.append((name, 100 * statistics.fmean(rec[10]), 100 * statistics.fmean(per_cat[1])))
        ms.sort()
        lat = f"{ms[len(ms) // 2]:6.1f} {ms[min(len(ms) - 1, int(round(0.95 * len(ms))) - 1)]:6.1f}"
        print(f"{name:46s} {100 * statistics.fmean(rec[10]):6.1f} {100 * statistics.fmean(rec[12]):6.1f} {cats} "
              f"{full_cov:7d} {by_ns} {lat}")

    if args.plot:
        print(f"wrote {ablation_plot(plot_rows, args.plot)}")
    cross_conversation_check(questions, namespaces)
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
