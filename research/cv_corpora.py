"""Cross-validation of the model-free path over the three development corpora.

Run through ``scripts/ablate_model_free.py --cv --corpora locomo,realtalk,beam`` (see its
``--help``). LoCoMo dev4 (four conversations), REALTALK (four chats) and BEAM 100K (ten
chats) are each built once with the ``model-free`` preset into one store per (corpus,
conversation, configuration) under a cache folder, so a second run only loads them. Every
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
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
from tqdm import tqdm

from memcompile_local import __version__
from memcompile_local.address import extract_rule
from memcompile_local.address.lexical import LexicalIndex
from memcompile_local.bench.baselines import _raw_matrix
from memcompile_local.bench.corpora import split_reachable
from memcompile_local.bench.coverage import gold_recall
from memcompile_local.data import (BEAM_CATEGORIES, LOCOMO_CATEGORY_NAMES, REALTALK_CATEGORY_NAMES, load_beam,
                                   load_locomo, load_longmemeval, load_realtalk)
from memcompile_local.fused.documents import plain_turn_text
from memcompile_local.fused.channels import FusedQuery, combine, lexical_channel, name_weighted, packet_channel
from memcompile_local.fused.index import FusionIndex, lexical_texts
from memcompile_local.fused.retriever import FusedRetriever, select_rows
from memcompile_local.language.stemming import stem_terms
from memcompile_local.llm.client import LLMClient, NoModelBackend
from memcompile_local.llm.interface import stable_hash
from memcompile_local.memory import Memory
from memcompile_local.pipeline.compile import query_intent
from memcompile_local.store import MemoryStore
from memcompile_local.types import Conversation

CORPUS_NAMES = ("locomo", "realtalk", "beam", "longmemeval")
TITLES = {"locomo": "LoCoMo dev4", "realtalk": "REALTALK", "beam": "BEAM 100K", "longmemeval": "LongMemEval S"}
DEFAULT_DATA = {"locomo": "../shared/data/locomo/locomo_dev4.json", "realtalk": "../shared/data/realtalk",
                "beam": "../shared/data/beam/100K",
                "longmemeval": "../shared/data/longmemeval/longmemeval_s_single.json"}
BASELINES = ("baseline: MiniLM cosine, raw turns (top 10)", "baseline: BM25, raw turns (top 10)")
REFERENCE_PREFIX = "package defaults"  # the shipped row: the bar of the shipping rule


@dataclass
class Corpus:
    name: str
    convs: list[Conversation]
    categories: dict[Any, str]  # the scored categories, in report order


def scored_categories(name: str) -> dict[Any, str]:
    """The scored categories of a corpus (not LongMemEval's: its file names them), in report order."""
    if name == "locomo":
        return {c: LOCOMO_CATEGORY_NAMES[c] for c in (1, 2, 3, 4)}
    if name == "realtalk":
        return dict(REALTALK_CATEGORY_NAMES)
    if name == "beam":
        return {c: c.replace("_", " ") for c in BEAM_CATEGORIES if c != "abstention"}
    raise ValueError(f"unknown corpus {name!r}; expected one of {', '.join(CORPUS_NAMES)}")


def load_corpus(name: str, data: str) -> Corpus:
    if name == "locomo":
        return Corpus(name, load_locomo(data), scored_categories(name))
    if name == "realtalk":
        return Corpus(name, load_realtalk(data), scored_categories(name))
    if name == "longmemeval":  # one haystack per question: a measurement, not a cross-validation
        convs = load_longmemeval(data)
        return Corpus(name, convs, {c: c for c in dict.fromkeys(q.category for cv in convs for q in cv.questions)})
    if name == "beam":
        # The released chats hold one 348,853-character reply: the study reads every turn.
        return Corpus(name, load_beam(data, max_turn_chars=None), scored_categories(name))
    raise ValueError(f"unknown corpus {name!r}; expected one of {', '.join(CORPUS_NAMES)}")


def scored_questions(corpus: Corpus, conv: Conversation):
    """The questions of ``conv`` that recall is scored on, with reachable gold as evidence."""
    known = {t.packet_id for _, t in conv.iter_turns()}
    out = []
    for q in conv.questions:
        if q.category not in corpus.categories or q.is_abstention:
            continue
        kept, _ = split_reachable(q.evidence, known)
        if kept:
            out.append(dataclasses.replace(q, evidence=tuple(kept)))
    return out


# Query-side FusionConfig fields added after the cached stores were first built: they change
# no build, so they stay out of the key and the stores already built are reused.
# (chat_norm changes the BM25 index a view builds when it loads, not what a build stores.)
QUERY_ONLY_FUSION_FIELDS = ("name_term_weight", "name_term_scope", "context_window_words", "ranker", "ranker_model",
                            "chat_norm", "answer_type_weight", "role_weight", "request_frame")
# Passage fields change a build only when passages are on (passage_words > 0).
PASSAGE_FUSION_FIELDS = ("passage_words", "passage_overlap_words", "passage_pool")


def _value(text: str) -> float | int | str:
    """A --set value: an int for a whole number (integer fields validate), else a float, else
    the text itself (a Literal field such as request_frame=drop)."""
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        return float(text)
    except ValueError:
        return text


def config_changes(pairs: list[str]) -> dict[str, dict[str, float | int | str]]:
    """``--set`` pairs of train_ranker.py and ablate_model_free.py as ``PipelineConfig.replace``
    sections: "SECTION.FIELD=VALUE", or "FIELD=VALUE" for a fusion field; values as ``_value``
    reads them (whole numbers stay ints, so integer fields validate; text stays text)."""
    out: dict[str, dict[str, float | int | str]] = {}
    for kv in pairs:
        key, sep, value = kv.partition("=")
        if not sep:
            raise SystemExit(f"--set {kv!r}: expected FIELD=VALUE")
        section, _, name = key.rpartition(".")
        out.setdefault(section or "fusion", {})[name] = _value(value)
    return out


def build_key(cfg, fusion=None) -> str:
    """What a cached build depends on besides the conversation: config, code versions.

    ``fusion`` (default ``cfg.fusion``) is the fused config the key reads; the ablation passes
    its ``AblationFusion``, whose dropped knobs were FusionConfig fields when the cache was first
    built, so the key of an unchanged build stays the same."""
    config = cfg.to_dict()
    fused = dataclasses.asdict(fusion if fusion is not None else cfg.fusion)
    config["fusion"] = {k: v for k, v in fused.items() if k not in QUERY_ONLY_FUSION_FIELDS
                        and (fused.get("passage_words") or k not in PASSAGE_FUSION_FIELDS)}
    return stable_hash({"config": config, "package": __version__,
                        "rule_extractor": extract_rule.RULE_EXTRACTOR_VERSION})[:12]


def open_memories(corpora: list[Corpus], cfg, cache: Path, progress: bool, fusion=None) -> tuple[dict, dict]:
    """One built Memory per (corpus, conversation), each in its own store under ``cache``;
    returns the memories and the build seconds of those built now (cached ones: absent)."""
    key = build_key(cfg, fusion)
    memories: dict[tuple[str, str], Memory] = {}
    built_s: dict[tuple[str, str], float] = {}
    embedder = None
    todo = [(c, conv) for c in corpora for conv in c.convs]
    for corpus, conv in tqdm(todo, desc="build", unit="conv", disable=not progress):
        path = cache / corpus.name / f"{conv.namespace}-{key}.sqlite"
        path.parent.mkdir(parents=True, exist_ok=True)
        store = MemoryStore(path)
        mem = Memory(store, cfg, client=LLMClient(NoModelBackend(), store), embedder=embedder)
        mem.add(conv.namespace, conv)
        if not mem.is_built(conv.namespace):
            t0 = time.perf_counter()
            mem.build(conv.namespace)
            built_s[(corpus.name, conv.namespace)] = time.perf_counter() - t0
        embedder = mem.embedder
        memories[(corpus.name, conv.namespace)] = mem
    return memories, built_s


# ---------------------------------------------------------------------------- dense variants
# Issue 25 item 3: what the dense channel embeds per turn, measured as index variants over the
# same build. Each is the package view's fused index with another packet matrix (the raw turn
# instead of z(p)), the context vector gated by the context document's length
# (context_window_words) and/or long turns' passages; their vectors are embedded into the
# cached store once (content-addressed, as a build embeds them), so a rerun only reads them.

NO_DENSE_VARIANTS = False  # set by run() from --no-dense-variants
CONTEXT_WINDOWS = (150, 200, 300)  # context_window_words grid (words)
PASSAGES = ((150, 30), (100, 20))  # (passage_words, passage_overlap_words) grid


def _stored_matrix(store, ns, model_id, embedder, keys, docs):
    from memcompile_local.build.stages import _embed_missing, _load_matrix
    _embed_missing(store, ns, model_id, embedder, keys, docs, batch_size=256, on_progress=None)
    return _load_matrix(store, ns, model_id, embedder, keys, "variant")


def dense_variants(mem: Memory, view, cfg) -> dict[str, FusionIndex]:
    """Index variants "plain+q+<doc>+cw<W>+p<words>/<pool>" (see above); "<doc>" is "z" (the
    build's z(p)) or "turn" (the raw turn with its speaker), cw0 = context everywhere."""
    from memcompile_local.build.stages import (context_document_keys, context_model_id, embedding_model_id,
                                               packet_document_keys, passage_document_keys, passage_model_id)
    from memcompile_local.fused.documents import context_documents
    store, ns, emb = mem.store, view.namespace, mem.embedder
    packets = list(view.packets)
    base = view.fusion
    keys, docs = packet_document_keys(store, ns, "", packets=packets, document="turn")
    matrices = {"z": view.packet_matrix, "turn": _stored_matrix(store, ns, embedding_model_id(emb), emb, keys, docs)}
    words = np.asarray([len(d.split()) for d in context_documents(packets)])
    gates = {0: None, **{w: words <= w for w in CONTEXT_WINDOWS}}
    # The build embeds only the context documents its gate reads (the others load as zero rows),
    # so the ungated variants (cw0) embed the rest here, once, into the cached store.
    ckeys, cdocs = context_document_keys(store, ns, packets)
    every_context = _stored_matrix(store, ns, context_model_id(emb), emb, ckeys, cdocs)
    passages = {None: (None, None)}
    for pw, ov in PASSAGES:
        pkeys, pdocs, owner = passage_document_keys(packets, pw, ov)
        pm = _stored_matrix(store, ns, passage_model_id(emb), emb, pkeys, pdocs) if pkeys else None
        passages[(pw, ov)] = (pm, np.asarray(owner, dtype=np.int64) if pkeys else None)
    out = {}
    for doc, m in matrices.items():
        for w, gate in gates.items():
            for pk, (pm, owner) in passages.items():
                pools = ("max", "top2") if pk is not None else ("top2",)
                for pool in pools:
                    tag = f"plain+q+{doc}+cw{w}" + (f"+p{pk[0]}/{pool}" if pk is not None else "")
                    out[tag] = dataclasses.replace(base, packet_matrix=m, context_rows=gate, passage_matrix=pm,
                                                   passage_owner=owner, passage_pool=pool,
                                                   context_matrix=every_context if gate is None else base.context_matrix)
    return out


# ---------------------------------------------------------------------------- chat normalization
# Issue 25 item 7: the package view's fused index with its BM25 documents (and, through the
# index's flag, its questions) chat-normalized (FusionConfig.chat_norm); only the lexical
# channel differs from "plain+q+names".
CHAT_VARIANT = "plain+q+names+chat"


def chat_variant(view, cfg) -> FusionIndex:
    fusion = dataclasses.replace(cfg.fusion, chat_norm=True)
    docs = lexical_texts(view.packets, view.descriptors_by_packet, fusion, view.fusion.participants)
    lexical = LexicalIndex([stem_terms(d) for d in docs], k1=fusion.bm25_k1, b=fusion.bm25_b)
    return dataclasses.replace(view.fusion, lexical=lexical, chat_norm=True)


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
    indexes.update(variants)
    chat = chat_variant(view, cfg)
    indexes[CHAT_VARIANT] = chat
    retriever = FusedRetriever(view.fusion, cfg.fusion)  # the package's: Memory.compile's query vector
    packets = mem.store.packets(ns)
    raw_dense = _raw_matrix(mem.store, mem.embedder, ns, packets)
    raw_bm25 = LexicalIndex([stem_terms(plain_turn_text(p)) for p in packets], k1=cfg.routing.bm25_k1, b=cfg.routing.bm25_b)
    out, same = [], 0
    for q in scored_questions(corpus, conv):
        t0 = time.perf_counter()
        intent = query_intent(q.question, cfg, None, view)
        qvec = retriever.query_vector(mem.embedder, q.question, intent.lexical_query())
        retriever.scores(q.question, qvec)
        channel_ms = (time.perf_counter() - t0) * 1000
        qvecs = {}
        for name, mode in dense_query.items():
            qvecs[name] = qvec if mode == cfg.fusion.dense_query else FusedRetriever(
                view.fusion, dataclasses.replace(cfg.fusion, dense_query=mode)).query_vector(
                mem.embedder, q.question, intent.lexical_query())
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
        for name, ix in variants.items():  # only the dense channel differs from "plain+q"
            qvecs[name] = qvecs["plain+q"]
            channels[name] = dict(channels["plain+q"], packet=packet_channel(ix, FusedQuery(q.question, qvecs[name])))
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
            # cross-validated as one grid afterwards (scripts/cv_builds.py).
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
    and cross-validated by ``scripts/train_ranker.py``)."""
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
    memories, built_s = open_memories(corpora, cfg, cache, progress, fusion_base)
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
