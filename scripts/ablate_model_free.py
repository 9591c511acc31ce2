#!/usr/bin/env python
"""Per-component ablation of the model-free path on a LoCoMo file (issue: model-free selection).

Builds each conversation with the ``model-free`` preset (rule descriptors, MiniLM embeddings;
zero model calls), then for every question of categories 1-4 with gold evidence computes the
fused selector's channels once and scores variants:

* ``full``: the package's model-free path (checked to equal ``Memory.compile``'s selection);
* ``- X``: one component of the package switched off (its recall delta is what it adds);
* ``+ Y``: ideas that were measured and removed from the package because they did not pay
  off; they are re-implemented here, on top of the same channels, so the numbers can be
  reproduced.

Prints recall@10 and recall@12 (overall and per category; recall@10 per conversation too,
so a component that helps on one conversation only shows) and the per-query latency of the
whole model-free query path (question embedding included) as p50/p95, on each conversation
and on a ~600-turn conversation made by joining sessions of the file's conversations.

    python scripts/ablate_model_free.py --data ../shared/data/locomo/locomo_dev.json
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from memcompile_local.address.lexical import LexicalIndex  # noqa: E402
from memcompile_local.language.stemming import stem_terms  # noqa: E402
from memcompile_local.language.tokens import terms  # noqa: E402
from memcompile_local.bench.coverage import gold_recall  # noqa: E402
from memcompile_local.bench.metrics import LOCOMO_CATEGORY_NAMES  # noqa: E402
from memcompile_local.config import PipelineConfig  # noqa: E402
from memcompile_local.data import load_locomo  # noqa: E402
from memcompile_local.fused import (  # noqa: E402
    FusionIndex,
    _raw,
    fused_scores,
    lexical_documents,
    session_neighbours,
)
from memcompile_local.evidence.presets import apply_preset  # noqa: E402
from memcompile_local.evidence.pursuit import mem_pursuit  # noqa: E402
from memcompile_local.llm.client import LLMClient, NoModelBackend  # noqa: E402
from memcompile_local.memory import Memory  # noqa: E402
from memcompile_local.store import MemoryStore  # noqa: E402
from memcompile_local.types import Conversation  # noqa: E402

CATS = (1, 2, 3, 4)
# A question that asks for several things ("What books has ...", "In what ways ...", "... both ...").
LIST_QUESTION = re.compile(
    r"^(?:what|which)\s+(?:\S+\s+){0,2}?(?:\w+(?:s|es)|people|children)\s+(?:has|have|does|do|did|is|are|were)\b"
    r"|^(?:in )?what (?:ways|kinds?|types?|sorts?)\b|\bboth\b", re.IGNORECASE)


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
         "temporal": f.temporal_weight, "claim": 1.0}  # claim: removed channel, re-created below

    def fuse(ch, drop=None, lexical=None):
        total = np.zeros(len(next(iter(ch.values()))))
        for name, v in ch.items():
            if name == drop:
                continue
            total += W[name] * (lexical if (name == "lexical" and lexical is not None) else v)
        return total

    def full(Q, k):
        return top(fuse(Q.ch), k)

    def drop(name):
        return lambda Q, k: top(fuse(Q.ch, drop=name), k)

    def no_neighbors(Q, k):
        return top(fuse(Q.ch, lexical=Q.view.__dict__["_lex_no_nbr"](Q.q.question)), k)

    def no_dense_context(Q, k):
        own = (Q.view.packet_matrix @ Q.qvec).astype(np.float64)
        return top(fuse(Q.ch) - W["packet"] * Q.ch["packet"] + W["packet"] * own, k)

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
        return top(fuse(Q.ch) - W["packet"] * Q.ch["packet"] + W["packet"] * (own + ctx) / 2, k)

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
    import itertools

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
    from dataclasses import replace

    sessions, n = [], 0
    for ci, conv in enumerate(convs):
        for s in conv.sessions:
            if n >= target_turns:
                break
            turns = tuple(replace(t, packet_id=f"C{ci}-{t.packet_id}") for t in s.turns)
            sessions.append(replace(s, index=len(sessions) + 1, session_id=f"c{ci}-{s.session_id}", turns=turns))
            n += len(turns)
    return Conversation(namespace=f"joined-{n}", sessions=tuple(sessions), questions=convs[0].questions)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="../shared/data/locomo/locomo_dev.json")
    ap.add_argument("--store", default=None, help="store file (default: a temporary file)")
    ap.add_argument("--latency-runs", type=int, default=3)
    ap.add_argument("--plot", default=None, metavar="PNG", help="also draw the recall@10 rows as a bar chart")
    args = ap.parse_args()

    cfg = apply_preset("model-free", PipelineConfig())
    tmp = tempfile.TemporaryDirectory()
    store = MemoryStore(args.store or Path(tmp.name) / "ablate.sqlite")
    mem = Memory(store, cfg, client=LLMClient(NoModelBackend(), store))
    convs = load_locomo(args.data)
    questions: list[Question] = []
    t_build = time.perf_counter()
    for conv in convs:
        mem.add(conv.namespace, conv)
        mem.build(conv.namespace)
    print(f"built {len(convs)} conversations in {time.perf_counter() - t_build:.1f} s (zero model calls)")

    mismatches = 0
    for conv in convs:
        view = mem.view(conv.namespace)
        plain = FusionIndex.build(view.packets, view.descriptors_by_packet, cfg.fusion.__class__(
            **{**cfg.fusion.__dict__, "neighbor_context": False}))
        docs = lexical_documents(view.packets, view.descriptors_by_packet, neighbor_context=True)
        unstemmed = LexicalIndex([terms(d) for d in docs], k1=cfg.fusion.bm25_k1, b=cfg.fusion.bm25_b)

        def lex_from(index, tok):
            def f(question):
                s = index.scores(tok(question))
                return s / s.max() if s.max() > 0 else s
            return f
        view.__dict__["_lex_no_nbr"] = lex_from(plain.lexical, stem_terms)
        view.__dict__["_lex_no_stem"] = lex_from(unstemmed, terms)
        # BM25F-like: own document and neighbour text as two fields, neighbours at weight 0.5.
        own_docs = lexical_documents(view.packets, view.descriptors_by_packet, neighbor_context=False)
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
            from memcompile_local.pipeline import query_intent

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
        from memcompile_local.bench.plots import ablation_plot

        print(f"wrote {ablation_plot(plot_rows, args.plot)}")
    cross_conversation_check(questions, namespaces)

    # Latency of the whole query path (rule intent, question embedding, all channels, top-K).
    targets = [(c.namespace, c) for c in convs]
    joined = joined_conversation(convs, 600)
    mem.add(joined.namespace, joined)
    mem.build(joined.namespace)
    targets.append((joined.namespace, joined))
    print(f"\nper-query latency of Memory.compile on the model-free path ({args.latency_runs} passes, "
          f"2 shared CPU cores)")
    for ns, conv in targets:
        n_turns = len(store.packets(ns))
        qs = [q.question for q in conv.questions if q.category in CATS]
        mem.compile(ns, qs[0])  # warm: index load, model load
        times = []
        for _ in range(args.latency_runs):
            for question in qs:
                t0 = time.perf_counter()
                mem.compile(ns, question)
                times.append((time.perf_counter() - t0) * 1000)
        times.sort()
        p50 = times[len(times) // 2]
        p95 = times[min(len(times) - 1, int(round(0.95 * len(times))) - 1)]
        print(f"  {ns:14s} {n_turns:4d} turns: p50 {p50:6.2f} ms  p95 {p95:6.2f} ms  ({len(times)} queries)")
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
