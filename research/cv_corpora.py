"""Cross-validation of the model-free path over the three development corpora.

Run through ``research/ablate_model_free.py --cv --corpora locomo,realtalk,beam`` (see its
``--help``). LoCoMo dev4 (four conversations), REALTALK (four chats) and BEAM 100K (ten
chats) are each built once with the ``model-free`` preset into one store per (corpus,
conversation, configuration) under a cache folder (``scripts/dev_corpora.py``), so a second
run only loads them. Every
question with gold evidence is scored (REALTALK: reachable gold only; BEAM: abstention and
questions without source ids left out). For each row of ``ablate_model_free.cv_rows`` (a grid
over the constants the row introduces) and two baselines, it prints per corpus:

* **in-sample**: the grid point fit and scored on all of the corpus's questions;
* **CV** (leave one conversation out within the corpus): for each held-out conversation the
  point with the best mean recall@10 on the corpus's other conversations, scored on it;
  per category and per fold;
* **corpus out** (leave one corpus out): the point with the best mean, over the two other
  corpora, of their recall@10, scored on the held-out corpus;

and the shipping rule: a row ships only if its CV recall@10 does not fall below the shipped
row's on any corpus and rises above it on at least two.

Baselines (no constants, so every protocol gives one figure): MiniLM cosine between the
question and each raw turn (text and caption), top 10, and BM25 over the stemmed raw turns,
both as ``eval --baseline dense|bm25`` computes them.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the research modules beside this one
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))  # dev_corpora

from dev_corpora import (CORPUS_NAMES, DEFAULT_DATA, TITLES, Corpus, build_key, config_changes,  # noqa: E402,F401
                         load_corpus, open_memories, scored_categories, scored_questions)
from dropped import (chat_norm_index, own_documents, packet_channel_with_passages, passage_vectors,  # noqa: E402,F401
                     intent_only_texts)
from memcompile_local.address.lexical import LexicalIndex  # noqa: E402
from memcompile_local.bench.baselines import raw_turn_matrix  # noqa: E402
from memcompile_local.bench.coverage import gold_recall  # noqa: E402
from memcompile_local.build.stages import (embed_contexts, embed_packets, load_context_matrix,  # noqa: E402
                                           load_packet_matrix)
from memcompile_local.fused.documents import context_fits, plain_turn_text  # noqa: E402
from memcompile_local.fused.channels import FusedQuery, combine, lexical_channel, name_weighted  # noqa: E402
from memcompile_local.fused.index import FusionIndex  # noqa: E402
from memcompile_local.fused.retriever import FusedRetriever, query_vector, select_rows  # noqa: E402
from memcompile_local.language.stemming import stem_terms  # noqa: E402
from memcompile_local.memory import Memory  # noqa: E402
from memcompile_local.pipeline.compile import query_intent  # noqa: E402
from memcompile_local.types import Conversation  # noqa: E402

BASELINES = ("baseline: MiniLM cosine, raw turns (top 10)", "baseline: BM25, raw turns (top 10)")
REFERENCE_PREFIX = "package defaults"  # the shipped row: the bar of the shipping rule


# ---------------------------------------------------------------------------- dense variants
# Issue 25 item 3: what the dense channel embeds per turn, measured as index variants over the
# same build. Each is the package view's fused index with another packet matrix (the raw turn
# instead of z(p)), the context vector gated by the context document's length
# (context_window_words) and/or long turns' passages (research/dropped.py; passages were a
# package option until issue 49); their vectors are embedded into the cached store once
# (content-addressed, as a build embeds them), so a rerun only reads them.

NO_DENSE_VARIANTS = False  # set by run() from --no-dense-variants
CONTEXT_WINDOWS = (150, 200, 300)  # context_window_words grid (words)
PASSAGES = ((150, 30), (100, 20))  # (passage_words, passage_overlap_words) grid


def dense_variants(mem: Memory, view, cfg) -> dict[str, tuple[FusionIndex, Any, str]]:
    """Index variants "plain+q+<doc>+cw<W>+p<words>/<pool>" (see above): (index, passages or
    None, passage pooling); "<doc>" is "z" (the build's z(p)) or "turn" (the raw turn with its
    speaker), cw0 = context everywhere."""
    store, ns, emb = mem.store, view.namespace, mem.embedder
    packets = list(view.packets)
    base = view.fusion
    embed_packets(store, ns, "", emb, packets=packets, document="turn")
    matrices = {"z": view.packet_matrix, "turn": load_packet_matrix(store, ns, "", emb, document="turn")}
    # The build embeds only the context documents its gate reads (the others load as zero rows),
    # so the ungated variants (cw0) embed the rest here, once, into the cached store.
    embed_contexts(store, ns, emb, packets=packets, window=0)
    every_context = load_context_matrix(store, ns, emb, packets, window=0)
    gates = {0: None, **{w: np.asarray(context_fits(packets, w), dtype=bool) for w in CONTEXT_WINDOWS}}
    passages = {None: None, **{(pw, ov): passage_vectors(store, ns, emb, packets, pw, ov) for pw, ov in PASSAGES}}
    out = {}
    for doc, m in matrices.items():
        for w, gate in gates.items():
            for pk, pv in passages.items():
                pools = ("max", "top2") if pk is not None else ("top2",)
                for pool in pools:
                    tag = f"plain+q+{doc}+cw{w}" + (f"+p{pk[0]}/{pool}" if pk is not None else "")
                    index = dataclasses.replace(base, packet_matrix=m, context_rows=gate,
                                                context_matrix=every_context if gate is None else base.context_matrix)
                    out[tag] = (index, pv, pool)
    return out


# ---------------------------------------------------------------------------- chat normalization
# Issue 25 item 7: the package view's fused index with its BM25 documents (and questions)
# chat-normalized (research/dropped.py; a package option until issue 49); only the lexical
# channel differs from "plain+q+names".
CHAT_VARIANT = "plain+q+names+chat"


class CorpusQuestion:
    """A scored question with its channels under each index variant (the fields
    ``ablate_model_free.eval_setting`` reads) and its two baselines' picks."""

    def __init__(self, corpus, q, ns, view, qvecs, indexes, channels, channel_ms, baselines):
        self.corpus, self.q, self.ns, self.view, self.qvecs = corpus, q, ns, view, qvecs
        self.indexes, self.channels, self.channel_ms, self.baselines = indexes, channels, channel_ms, baselines


def with_name_weight(channels: dict, fusion) -> dict:
    """``channels`` with the lexical channel at ``fusion``'s name_term_weight and scope, computed
    from the full-weight channel and ``lexical_unnamed`` (the channel is linear in the weight)."""
    ch = dict(channels)
    unnamed = ch.pop("lexical_unnamed", None)
    if unnamed is not None:
        ch["lexical"] = name_weighted(ch["lexical"], unnamed, fusion.name_term_weight, fusion.name_term_scope)
    return ch


def question_channels(corpus: Corpus, mem: Memory, conv: Conversation, cfg, default_variant: str) -> tuple[list, int]:
    """Every scored question of one conversation with its channels; also how many of them the
    package's default setting selects exactly as ``Memory.compile`` does."""
    # Channels at unit weight and the name at full weight; each row applies its own (with_name_weight).
    channel_cfg = dataclasses.replace(cfg.fusion, time_match_weight=1.0, temporal_weight=1.0,
                                      speaker_weight=1.0, packet_weight=1.0, lexical_weight=1.0,
                                      name_term_weight=1.0, name_term_scope="always")
    burst_cfg = dataclasses.replace(channel_cfg, bursts=True, tolerant_names=True)
    dense_query = {"plain": "intent", "burst": "intent", "plain+q": "intent+question",
                   "plain+q+names": "intent+question"}
    ns = conv.namespace
    view = mem.view(ns)
    indexes = {"plain": view.fusion,
               "burst": FusionIndex.build(view.packets, view.descriptors_by_packet, burst_cfg,
                                          packet_matrix=view.packet_matrix, context_matrix=view.fusion.context_matrix)}
    indexes["plain+q"] = indexes["plain+q+names"] = indexes["plain"]
    variants = {} if NO_DENSE_VARIANTS else dense_variants(mem, view, cfg)
    indexes.update({tag: v[0] for tag, v in variants.items()})
    chat = chat_norm_index(view.fusion, view.packets, view.descriptors_by_packet, cfg.fusion)
    indexes[CHAT_VARIANT] = chat
    retriever = FusedRetriever(view.fusion, cfg.fusion)  # the package's: Memory.compile's query vector
    packets = mem.store.packets(ns)
    raw_dense = raw_turn_matrix(mem.store, mem.embedder, ns, packets)
    raw_bm25 = LexicalIndex([stem_terms(plain_turn_text(p)) for p in packets], k1=cfg.routing.bm25_k1, b=cfg.routing.bm25_b)
    out, same = [], 0
    for q in scored_questions(corpus, conv):
        t0 = time.perf_counter()
        intent = query_intent(q.question, cfg, None, view)
        qvec = retriever.query_vector(mem.embedder, q.question, intent.lexical_query())
        retriever.scores(q.question, qvec)
        channel_ms = (time.perf_counter() - t0) * 1000
        qvecs = {}
        intent_vec = None
        for name, mode in dense_query.items():
            if mode == "intent+question":  # the package's query vector
                qvecs[name] = qvec
                continue
            if intent_vec is None:  # dense_query "intent", dropped: the intent text alone
                intent_vec = query_vector(np.asarray(mem.embedder.embed(
                    intent_only_texts(q.question, intent.lexical_query())), dtype=np.float32))
            qvecs[name] = intent_vec
        channels = {name: FusedRetriever(ix, channel_cfg).scores(q.question, qvecs[name]).channels
                    for name, ix in indexes.items() if name not in variants and name != CHAT_VARIANT}
        # The lexical channel without the named participant's terms (name_term_weight 0) beside
        # every lexical channel: the ablation's sum mixes the two for the row's weight (the
        # channel is linear in it), as the package does for its default weight.
        unnamed: dict[int, np.ndarray] = {}
        for name, ix in indexes.items():
            if name not in variants and name != CHAT_VARIANT:
                if id(ix) not in unnamed:
                    unnamed[id(ix)] = lexical_channel(ix, FusedQuery(q.question, None, name_term_weight=0.0))
                channels[name]["lexical_unnamed"] = unnamed[id(ix)]
        for name, (ix, passages, pool) in variants.items():  # only the dense channel differs from "plain+q"
            qvecs[name] = qvecs["plain+q"]
            channels[name] = dict(channels["plain+q"],
                                  packet=packet_channel_with_passages(ix, qvecs[name], passages, pool))
        qvecs[CHAT_VARIANT] = qvecs["plain+q+names"]
        channels[CHAT_VARIANT] = dict(channels["plain+q+names"],
                                      lexical=lexical_channel(chat, FusedQuery(q.question, None)),
                                      lexical_unnamed=lexical_channel(chat, FusedQuery(q.question, None,
                                                                                       name_term_weight=0.0)))
        # The baselines, as eval --baseline dense / bm25 compute them (ties in dialogue order).
        qraw = np.asarray(mem.embedder.embed([q.question]), dtype=np.float32)[0]
        cos = raw_dense @ qraw
        dense_order = np.lexsort((np.arange(len(packets)), -cos))[:12]
        bm25_hits = raw_bm25.top_k(stem_terms(q.question), 12)
        baselines = {BASELINES[0]: [packets[i].packet_id for i in dense_order],
                     BASELINES[1]: [packets[i].packet_id for i, _ in bm25_hits]}
        Q = CorpusQuestion(corpus.name, q, ns, view, qvecs, indexes, channels, channel_ms, baselines)
        out.append(Q)
        total = combine(with_name_weight(channels[default_variant], cfg.fusion), cfg.fusion)
        mine = [view.packets[i].packet_id for i in select_rows(view.fusion, q.question, total, qvec, cfg.fusion,
                                                               cfg.evidence.k0)]
        same += list(mem.compile(ns, q.question).packet_ids) == mine
    return out, same


# ---------------------------------------------------------------------------- protocols

def _best(R: np.ndarray, mask: np.ndarray) -> int:
    return int(np.argmax(R[:, mask].mean(axis=1)))  # argmax: the first (default) point wins ties


def score_row(name: str, points: list, per_corpus: dict[str, tuple[np.ndarray, np.ndarray]],
              questions: dict[str, list]) -> dict:
    """The three protocols for one row, from (R@10, R@12) matrices (grid point x question)
    per corpus."""
    row: dict[str, Any] = {"name": name, "grid": len(points), "corpora": {}}
    corpus_means = {c: R10.mean(axis=1) for c, (R10, _) in per_corpus.items()}  # per grid point
    for c, (R10, R12) in per_corpus.items():
        qs = questions[c]
        ns_of = np.asarray([Q.ns for Q in qs])
        cat_of = np.asarray([str(Q.q.category) for Q in qs])
        cv10 = np.zeros(len(qs))
        cv12 = np.zeros(len(qs))
        picks = {}
        for ns in dict.fromkeys(Q.ns for Q in qs):
            held = ns_of == ns
            g = _best(R10, ~held) if (~held).any() else 0
            picks[ns] = points[g]
            cv10[held], cv12[held] = R10[g, held], R12[g, held]
        g_all = _best(R10, np.ones(len(qs), dtype=bool))
        others = [o for o in per_corpus if o != c]
        g_out = int(np.argmax(np.mean([corpus_means[o] for o in others], axis=0))) if others else g_all
        row["corpora"][c] = {
            "n": len(qs), "in_sample": 100 * R10[g_all].mean(), "in_sample_setting": points[g_all],
            "cv10": 100 * cv10.mean(), "cv12": 100 * cv12.mean(), "corpus_out": 100 * R10[g_out].mean(),
            "corpus_out_setting": points[g_out],
            "cats": {k: (100 * cv10[cat_of == k].mean() if (cat_of == k).any() else None)
                     for k in dict.fromkeys(cat_of)},
            "folds": {ns: 100 * cv10[ns_of == ns].mean() for ns in dict.fromkeys(ns_of)},
            "picks": picks,
            # Per question (the CV point's recall), so that runs of several builds can be
            # cross-validated as one grid afterwards (research/cv_builds.py).
            "questions": {"ns": ns_of.tolist(), "category": cat_of.tolist(),
                          "r10": cv10.tolist(), "r12": cv12.tolist()},
        }
    return row


def baseline_matrices(name: str, questions: list) -> tuple[np.ndarray, np.ndarray]:
    r10 = np.asarray([gold_recall(Q.baselines[name][:10], Q.q.evidence) for Q in questions])
    r12 = np.asarray([gold_recall(Q.baselines[name][:12], Q.q.evidence) for Q in questions])
    return r10[None, :], r12[None, :]


def shipping_rule(row: dict, reference: dict) -> tuple[str, dict[str, float]]:
    """"ships" / "does not ship" under the rule, and the CV recall@10 change per corpus."""
    delta = {c: row["corpora"][c]["cv10"] - reference["corpora"][c]["cv10"] for c in row["corpora"]}
    loses = [c for c, d in delta.items() if d < -1e-9]
    gains = [c for c, d in delta.items() if d > 1e-9]
    verdict = "ships" if not loses and len(gains) >= 2 else (
        f"does not ship (loses on {', '.join(loses)})" if loses else f"does not ship (gains on {len(gains)})")
    return verdict, delta


# ---------------------------------------------------------------------------- printing

def _f(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f}"


def print_tables(results: list[dict], corpora: list[Corpus], reference: dict | None) -> None:
    for corpus in corpora:
        c = corpus.name
        first = results[0]["corpora"][c]
        cats = [k for k in (str(k) for k in corpus.categories) if k in first["cats"]]
        cat_names = {str(k): v for k, v in corpus.categories.items()}
        folds = list(first["folds"])
        print(f"\n### {TITLES[c]}: {len(corpus.convs)} conversations, {first['n']} questions with gold\n")
        head = ("| row | grid | in-sample R@10 | CV R@10 | CV R@12 | corpus out R@10 | "
                + " | ".join(cat_names[k] for k in cats) + " | " + " | ".join(f"fold {ns}" for ns in folds)
                + " | folds > shipped |")
        print(head)
        print("|" + "---|" * (head.count("|") - 1))
        for r in results:
            x = r["corpora"][c]
            better = "-" if reference is None or r is reference else \
                f"{sum(x['folds'][ns] > reference['corpora'][c]['folds'][ns] + 1e-9 for ns in folds)}/{len(folds)}"
            print(f"| {r['name']} | {r['grid']} | {x['in_sample']:.1f} | {x['cv10']:.1f} | {x['cv12']:.1f} | "
                  f"{x['corpus_out']:.1f} | " + " | ".join(_f(x["cats"].get(k)) for k in cats) + " | "
                  + " | ".join(f"{x['folds'][ns]:.1f}" for ns in folds) + f" | {better} |")
    names = [c.name for c in corpora]
    print("\n### The shipping rule: CV recall@10 against the shipped row "
          "(ships only if it loses on no corpus and gains on at least two)\n")
    head = ("| row | " + " | ".join(f"{TITLES[c]} CV" for c in names) + " | "
            + " | ".join(f"{TITLES[c]} change" for c in names) + " | "
            + " | ".join(f"{TITLES[c]} corpus out" for c in names) + " | verdict |")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for r in results:
        if reference is None or r is reference:
            verdict, delta = ("reference" if r is reference else "-"), {c: 0.0 for c in names}
        else:
            verdict, delta = shipping_rule(r, reference)
        print(f"| {r['name']} | " + " | ".join(f"{r['corpora'][c]['cv10']:.1f}" for c in names) + " | "
              + " | ".join(f"{delta[c]:+.1f}" for c in names) + " | "
              + " | ".join(f"{r['corpora'][c]['corpus_out']:.1f}" for c in names) + f" | {verdict} |")


def run(args, *, cfg, cv_rows: Callable[[], list], eval_setting: Callable, default_variant: Callable,
        fusion_base=None) -> int:
    """The three-corpus study (``ablate_model_free.py --cv --corpora ...``); returns an exit code.

    ``fusion_base``: the FusionConfig the rows' changes apply to (default ``cfg.fusion``);
    ``ablate_model_free`` passes its ``AblationFusion`` of it, which also holds the knobs of
    the variants dropped from the package.

    The rows vary the weighted channel sum, so the study runs with ``fusion.ranker: weighted``
    (the learned ranker, which the default "auto" uses on user-assistant and bursty histories, is trained
    and cross-validated by ``scripts/train_ranker.py`` and ``research/train_ranker_variants.py``)."""
    cfg = cfg.replace(fusion={"ranker": "weighted"})
    if fusion_base is None:
        fusion_base = cfg.fusion
    fusion_base = dataclasses.replace(fusion_base, ranker="weighted")
    global NO_DENSE_VARIANTS
    NO_DENSE_VARIANTS = bool(getattr(args, "no_dense_variants", False))
    names = [n.strip() for n in args.corpora.split(",") if n.strip()]
    data = {"locomo": args.data, "realtalk": args.realtalk, "beam": args.beam, "longmemeval": None}
    corpora = [load_corpus(n, data[n] or DEFAULT_DATA[n]) for n in names]
    if getattr(args, "beam_chats", None):
        for c in corpora:
            if c.name == "beam":
                c.convs = c.convs[: args.beam_chats]
    cache = Path(args.cache).expanduser()
    progress = not args.quiet
    t0 = time.perf_counter()
    memories, built_s = open_memories(corpora, cfg, cache, progress)
    for corpus in corpora:
        secs = [s for (c, _), s in built_s.items() if c == corpus.name]
        turns = sum(len(s.turns) for conv in corpus.convs for s in conv.sessions)
        state = (f"built {len(secs)} now in {sum(secs):.1f} s" if secs else "all cached")
        print(f"{TITLES[corpus.name]}: {len(corpus.convs)} conversations, {turns} turns ({state}; cache {cache})")
    print(f"builds ready in {time.perf_counter() - t0:.1f} s")

    variant = default_variant(cfg.fusion)
    questions: dict[str, list] = {}
    for corpus in corpora:
        qs, same = [], 0
        for conv in tqdm(corpus.convs, desc=f"questions {corpus.name}", unit="conv", disable=not progress):
            part, ok = question_channels(corpus, memories[(corpus.name, conv.namespace)], conv, cfg, variant)
            qs += part
            same += ok
        questions[corpus.name] = qs
        print(f"{TITLES[corpus.name]}: {len(qs)} questions with gold; the package default setting == "
              f"Memory.compile on {same}/{len(qs)}")

    rows = cv_rows()
    # The shipped row first (the rule's bar), then the component rows as the LoCoMo table has them.
    ref_rows = [r for r in rows if r[0].startswith(REFERENCE_PREFIX)]
    rows = ref_rows + [r for r in rows if not r[0].startswith(REFERENCE_PREFIX)]
    if args.rows:
        rows = [r for r in rows if r[0].startswith(REFERENCE_PREFIX) or args.rows in r[0]]
    results = []
    for name in BASELINES:
        mats = {c: baseline_matrices(name, questions[c]) for c in names}
        results.append(score_row(name, [{}], mats, questions))
    reference = None
    for name, var, points in tqdm(rows, desc="rows", unit="row", disable=not progress):
        mats = {}
        for c in names:
            evals = [eval_setting(questions[c], fusion_base, p, var) for p in points]
            mats[c] = (np.stack([e[0] for e in evals]), np.stack([e[1] for e in evals]))
        row = score_row(name, points, mats, questions)
        results.append(row)
        if reference is None and name.startswith(REFERENCE_PREFIX):
            reference = row
    print("\nrecall@10 of reachable gold (REALTALK: evidence ids naming no turn left out; BEAM: abstention "
          "and questions without source ids left out). CV: leave one conversation out within the corpus; "
          "corpus out: constants fit on the two other corpora. Rows with a grid of 1 have nothing to fit "
          "(CV = in-sample); the shipped defaults were fit on LoCoMo dev4, so on REALTALK and BEAM they are "
          "held-out figures.")
    print_tables(results, corpora, reference)
    if args.cv_json:
        Path(args.cv_json).write_text(json.dumps(results, indent=1, default=str), encoding="utf-8")
        print(f"wrote {args.cv_json}")
    for mem in memories.values():
        mem.store.close()
    return 0
