"""Multi-hop study (branch multihop): model-free components aimed at LoCoMo multi-hop recall@10,
measured over the three development corpora on the weighted-sum path, in-sample and by
leave-one-conversation-out CV (``cv_corpora.score_row``), against the package's weighted path.

Loads the cached builds once (``cv_corpora.open_memories``, the ablation's cache key), computes
per question the package's weighted-sum total (``FusedRetriever.scores`` under
``ranker: weighted``) and a few candidate channels, then scores grids of
``total + w * channel`` (w = 0 first: the package's own selection).

    PYTHONPATH=. HF_HUB_OFFLINE=1 python research/multihop_study.py [--corpora locomo,realtalk,beam]
        [--dump /tmp/mh2/questions.pkl] [--load /tmp/mh2/questions.pkl]
"""

from __future__ import annotations

import argparse
import dataclasses
import pickle
import re
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import cv_corpora as cc  # noqa: E402

from memcompile_local import PipelineConfig  # noqa: E402
from memcompile_local.bench.baselines import raw_turn_matrix  # noqa: E402
from memcompile_local.bench.coverage import gold_recall  # noqa: E402
from memcompile_local.fused.channels import FusedQuery, answer_type_channel, score_order  # noqa: E402
from memcompile_local.fused.documents import has_assistant, is_assistant, named_participants, raw_text  # noqa: E402
from memcompile_local.fused.index import entity_rows  # noqa: E402
from memcompile_local.fused.retriever import FusedRetriever, select_rows  # noqa: E402
from memcompile_local.language.answertype import asks_for_entity  # noqa: E402
from memcompile_local.language.listcues import is_list_question  # noqa: E402
from memcompile_local.language.stemming import stem_terms  # noqa: E402
from memcompile_local.pipeline.compile import query_intent  # noqa: E402
from memcompile_local.pipeline.presets import apply_preset  # noqa: E402

def _normalized(s: np.ndarray) -> np.ndarray:
    """``s`` divided by its largest value (all 0 when none is above 0), as the lexical channel scales BM25."""
    top = float(s.max()) if s.size else 0.0
    return s / top if top > 0 else np.zeros(len(s))


_AUX = {"does": "do", "did": "did", "has": "have", "is": "am", "was": "was", "can": "can", "will": "will",
        "would": "would", "could": "could", "should": "should", "might": "might", "had": "had"}


def first_person(question: str, name: str) -> str:
    """The question with the one participant it names in the first person, as that
    participant's own turns say it ("What hobbies does Ines care about most" ->
    "What hobbies do I care about most")."""
    n = re.escape(name)
    s = re.sub(rf"\b{n}'s\b", "my", question, flags=re.IGNORECASE)
    s = re.sub(rf"\b({'|'.join(_AUX)})\s+{n}\b", lambda m: f"{_AUX[m.group(1).lower()]} I", s, flags=re.IGNORECASE)
    s = re.sub(rf"\b{n}\s+has\b", "I have", s, flags=re.IGNORECASE)
    s = re.sub(rf"\b{n}\s+is\b", "I am", s, flags=re.IGNORECASE)
    s = re.sub(rf"\b(to|for|with|about|from|at|by|help|helped|give|gave|tell|told|make|made|of)\s+{n}\b",
               lambda m: f"{m.group(1)} me", s, flags=re.IGNORECASE)
    s = re.sub(rf"\b{n}\b", "I", s, flags=re.IGNORECASE)
    s = re.sub(r"\bhis\b|\bher\b(?=\s+\w)", "my", s)
    s = re.sub(r"\bhimself\b|\bherself\b", "myself", s)
    s = re.sub(r"\bhim\b", "me", s)
    s = re.sub(r"\b(he|she)\b", "I", s)
    return s


class Q:
    """One scored question: what the grids read."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


def collect(corpora, mems, cfg) -> dict[str, list]:
    out: dict[str, list] = {}
    fusion = cfg.fusion
    for corpus in corpora:
        qs = []
        for conv in corpus.convs:
            mem = mems[(corpus.name, conv.namespace)]
            view = mem.view(conv.namespace)
            ix = view.fusion
            packets = list(view.packets)
            r = FusedRetriever(ix, fusion, packets=packets)
            raw = raw_turn_matrix(mem.store, mem.embedder, conv.namespace, packets)
            speakers = np.asarray(ix.speakers)
            texts = [p.content for p in packets]
            stems = [stem_terms(raw_text(p)) for p in packets]
            sq = cc.scored_questions(corpus, conv)
            # first-person rewrites, embedded in one call per conversation
            fp_texts, named_of, all_named = [], [], []
            for q in sq:
                named = named_participants(q.question, ix.participants, tolerant=ix.tolerant_names)
                one = named[0] if len(named) == 1 and not is_assistant(named[0]) else None
                named_of.append(one)
                all_named.append([x for x in named if not is_assistant(x)])
                fp_texts.append(first_person(q.question, one) if one else q.question)
            fp_vecs = np.asarray(mem.embedder.embed(fp_texts), dtype=np.float32) if fp_texts else None
            # per participant of two-named questions: the question in that participant's first person
            two_texts = [first_person(q.question, nm) for q, names in zip(sq, all_named) if len(names) >= 2 for nm in names]
            two_vecs = iter(np.asarray(mem.embedder.embed(two_texts), dtype=np.float32)) if two_texts else iter(())
            q_raw = np.asarray(mem.embedder.embed([q.question for q in sq]), dtype=np.float32) if sq else None
            for n, q in enumerate(sq):
                intent = query_intent(q.question, cfg, None, view)
                qv = r.query_vector(mem.embedder, q.question, intent.lexical_query())
                sc = r.scores(q.question, qv)
                one = named_of[n]
                own = (speakers == one).astype(np.float64) if one else np.zeros(len(packets))
                fv = fp_vecs[n]
                ch = {
                    "fp_z": (ix.packet_matrix @ fv).astype(np.float64),
                    "fp_ctx": (ix.context_matrix @ fv).astype(np.float64) if ix.context_matrix is not None else None,
                    "fp_raw": (raw @ fv).astype(np.float64),
                    "q_raw": (raw @ q_raw[n]).astype(np.float64),
                }
                names = all_named[n]
                two = {}
                if len(names) >= 2:
                    for nm in names:
                        v = next(two_vecs)
                        two[nm] = ((speakers == nm).astype(np.float64), (ix.packet_matrix @ v).astype(np.float64))
                    name_terms = {t for nm in names for t in stem_terms(nm)}
                    terms = ix.query_terms(q.question)
                    ch["lex_nonames"] = _normalized(ix.lexical.scores([t for t in terms if t not in name_terms]))
                qs.append(Q(corpus=corpus.name, names=names, two=two, ns=conv.namespace, q=q, cat=str(q.category), named=one,
                            fp=fp_texts[n], total=sc.total, channels={k: v for k, v in sc.channels.items()},
                            qvec=qv, own=own, extra=ch, ids=ix.packet_ids, ix=ix, stems=stems, texts=texts, packets=packets,
                            sessions=np.asarray([p.session_index for p in packets])))
        out[corpus.name] = qs
        print(f"{corpus.name}: {len(qs)} questions", flush=True)
    return out


# ----------------------------------------------------------------------------- candidate channels

def ch_own_fp(Qx, src="z", gate="named", relu=True):
    """Dense cosine of the first-person question with the named participant's own turns."""
    if Qx.named is None:
        return None
    e = Qx.extra
    if src == "z":
        c = e["fp_z"]
    elif src == "raw":
        c = e["fp_raw"]
    elif src == "zraw":
        c = np.maximum(e["fp_z"], e["fp_raw"])
    elif src == "zctx":
        c = np.maximum(e["fp_z"], e["fp_ctx"]) if e["fp_ctx"] is not None else e["fp_z"]
    v = c * Qx.own
    if gate == "list" and not is_list_question(Qx.q.question):
        return None
    return np.maximum(v, 0) if relu else v


def ch_own_fp_rel(Qx, src="z", gate="named"):
    """The same, minus the packet channel (what the rewrite adds), floored at 0."""
    c = ch_own_fp(Qx, src, gate)
    if c is None:
        return None
    return np.maximum(c - Qx.channels["packet"], 0) * Qx.own


def ch_own_rm3(Qx, read=5, n_terms=10, scope="own", gate="named"):
    """Speaker-restricted lexical feedback: the top terms of the best ``read`` turns of the named
    participant (tf x idf over raw-turn stems), scored by BM25 over the lexical index."""
    if Qx.named is None or (gate == "list" and not is_list_question(Qx.q.question)):
        return None
    ix = Qx.ix
    order = [int(i) for i in score_order(Qx.total) if Qx.own[i] > 0][:read]
    qterms = set(ix.query_terms(Qx.q.question))
    df = getattr(Qx.ix, "_mh_df", None)
    if df is None:
        df = {}
        for st in Qx.stems:
            for t in set(st):
                df[t] = df.get(t, 0) + 1
        object.__setattr__(Qx.ix, "_mh_df", df)
    N = len(Qx.stems)
    w: dict[str, float] = {}
    for i in order:
        for t in Qx.stems[i]:
            if t in qterms or len(t) < 3:
                continue
            w[t] = w.get(t, 0.0) + np.log(N / (1 + df.get(t, 0)))
    terms = [t for t, _ in sorted(w.items(), key=lambda kv: -kv[1])[:n_terms]]
    if not terms:
        return None
    s = _normalized(ix.lexical.scores(terms))
    return s * Qx.own if scope == "own" else s


def _raw_lexical(Qx):
    from memcompile_local.address.lexical import LexicalIndex
    lx = Qx.ix.__dict__.get("_mh_raw")
    if lx is None:
        lx = LexicalIndex(Qx.stems, k1=1.2, b=0.75)
        object.__setattr__(Qx.ix, "_mh_raw", lx)
    return lx


def ch_own_raw_bm25(Qx, gate="named"):
    """Questions naming one participant: BM25 over the raw text of that participant's own turns
    (no claims, no neighbours), the name's terms left out, divided by the best."""
    if Qx.named is None or (gate == "list" and not is_list_question(Qx.q.question)):
        return None
    name_terms = set(stem_terms(Qx.named))
    terms = [t for t in Qx.ix.query_terms(Qx.q.question) if t not in name_terms]
    return _normalized(_raw_lexical(Qx).scores(terms) * Qx.own)


_FIRST = re.compile(r"\b(i|i'm|i've|i'd|i'll|me|my|mine|myself|we|we're|we've|us|our|ours)\b", re.IGNORECASE)
_SECOND = re.compile(r"\b(you|you're|you've|you'd|you'll|your|yours|yourself|ya|u)\b", re.IGNORECASE)


def _self_orientation(Qx):
    """Per turn: (first-person - second-person pronouns) / (both + 1), in (-1, 1): a turn where
    the speaker tells about themselves, against one about the partner."""
    so = Qx.ix.__dict__.get("_mh_self")
    if so is None:
        so = np.asarray([(len(_FIRST.findall(t)) - len(_SECOND.findall(t))) / (len(_FIRST.findall(t)) + len(_SECOND.findall(t)) + 1)
                         for t in Qx.texts])
        object.__setattr__(Qx.ix, "_mh_self", so)
    return so


def ch_self(Qx, gate="named", form="ratio"):
    """Self-disclosure prior: for a question naming one participant, that participant's turns
    that talk about themselves (first person) rather than about the partner (second person)."""
    if gate in ("named", "list") and Qx.named is None:
        return None
    if gate == "list" and not is_list_question(Qx.q.question):
        return None
    so = _self_orientation(Qx)
    v = so if form == "ratio" else (so > 0).astype(np.float64)
    mask = Qx.own if Qx.named is not None else np.ones(len(so))
    return v * mask


_ENTITY_INDEX: dict[int, object] = {}  # id(view index) -> the index with its answer-type turns


def ch_entity(Qx):
    """Questions asking for people, places or titles: the package's answer-type channel (turns
    that name one, of the named participant where the question names one); None where it is
    off (other questions, user-assistant histories)."""
    if not asks_for_entity(Qx.q.question) or has_assistant(Qx.ix.participants):
        return None
    ix = _ENTITY_INDEX.get(id(Qx.ix))
    if ix is None:
        ix = _ENTITY_INDEX[id(Qx.ix)] = dataclasses.replace(Qx.ix, entity_rows=entity_rows(Qx.packets, Qx.ix.participants))
    return answer_type_channel(ix, FusedQuery(Qx.q.question, None))


def ch_two_lex(Qx, share):
    """Two-named questions: the lexical channel with the names' terms at ``share`` (returned
    as the change to the total)."""
    if len(Qx.names) < 2:
        return None
    lex = Qx.channels["lexical"]
    new = share * lex + (1 - share) * Qx.extra["lex_nonames"]
    return new - lex  # lexical_weight is 1.0


def ch_two_fp(Qx):
    """Two-named questions: each named participant's own turns by the cosine with the question
    in that participant's first person (the larger where both apply)."""
    if len(Qx.names) < 2:
        return None
    out = np.zeros(len(Qx.ids))
    for own, cos in Qx.two.values():
        out = np.maximum(out, own * np.maximum(cos, 0))
    return out


def ch_two_fp_rel(Qx):
    c = ch_two_fp(Qx)
    return None if c is None else np.maximum(c - Qx.channels["packet"], 0)


def sel_interleave(Qx, total, fusion, k, bonus):
    """Two-named questions: alternate picks from each named participant's order (the total
    plus ``bonus`` on that participant's turns), first participant first."""
    if len(Qx.names) < 2 or not bonus:
        return select_rows(Qx.ix, Qx.q.question, total, Qx.qvec, fusion, k)
    orders = [iter(score_order(total + bonus * own)) for own, _ in Qx.two.values()]
    out, seen = [], set()
    while len(out) < k:
        for it in orders:
            for i in it:
                if int(i) not in seen:
                    seen.add(int(i)); out.append(int(i)); break
            if len(out) == k:
                break
    return out


CANDIDATES = {
    "answer type: turns naming a person/place/title for who/where/which-X questions": ch_entity,
    "self-disclosure prior (ratio, named questions)": lambda Qx: ch_self(Qx, "named", "ratio"),
    "self-disclosure prior (binary, named questions)": lambda Qx: ch_self(Qx, "named", "bin"),
    "self-disclosure prior (ratio, list questions)": lambda Qx: ch_self(Qx, "list", "ratio"),
    "self-disclosure prior (ratio, every question)": lambda Qx: ch_self(Qx, "all", "ratio"),
    "own raw-turn BM25 (named questions)": ch_own_raw_bm25,
    "own raw-turn BM25 (list questions)": lambda Qx: ch_own_raw_bm25(Qx, "list"),
    "two-named: names' terms out of BM25 (share 0)": lambda Qx: ch_two_lex(Qx, 0.0),
    "two-named: names' terms at 0.25 in BM25": lambda Qx: ch_two_lex(Qx, 0.25),
    "two-named: each participant's own turns by the first-person cosine": ch_two_fp,
    "two-named: the same above the packet channel": ch_two_fp_rel,
    "own first-person dense (z)": lambda Qx: ch_own_fp(Qx, "z"),
    "own first-person dense (raw turn)": lambda Qx: ch_own_fp(Qx, "raw"),
    "own first-person dense (max z, raw)": lambda Qx: ch_own_fp(Qx, "zraw"),
    "own first-person dense (max z, context)": lambda Qx: ch_own_fp(Qx, "zctx"),
    "own first-person dense (z), list questions": lambda Qx: ch_own_fp(Qx, "z", "list"),
    "own first-person dense (z) above the packet channel": lambda Qx: ch_own_fp_rel(Qx, "z"),
    "own first-person dense (raw) above the packet channel": lambda Qx: ch_own_fp_rel(Qx, "raw"),
    "raw-turn cosine of the question (all turns)": lambda Qx: np.maximum(Qx.extra["q_raw"], 0),
    "own-speaker RM3 (5 turns, 10 terms)": lambda Qx: ch_own_rm3(Qx, 5, 10),
    "own-speaker RM3 (10 turns, 20 terms)": lambda Qx: ch_own_rm3(Qx, 10, 20),
    "own-speaker RM3 (10 turns, 20 terms), list questions": lambda Qx: ch_own_rm3(Qx, 10, 20, gate="list"),
    "own-speaker RM3 (10 turns, 30 terms), list questions": lambda Qx: ch_own_rm3(Qx, 10, 30, gate="list"),
    "own-speaker RM3 (15 turns, 20 terms), list questions": lambda Qx: ch_own_rm3(Qx, 15, 20, gate="list"),
    "own-speaker RM3 (5 turns, 20 terms), list questions": lambda Qx: ch_own_rm3(Qx, 5, 20, gate="list"),
    "own-speaker RM3 (10 turns, 20 terms), list questions, all speakers scored":
        lambda Qx: ch_own_rm3(Qx, 10, 20, scope="all", gate="list"),
}
WEIGHTS = (0.0, 0.02, 0.05, 0.1, 0.15, 0.25, 0.5, 0.75, 1.0, 1.5)
def own_dense(Qx, src):
    e = Qx.extra
    c = {"fp_z": e["fp_z"], "fp_raw": e["fp_raw"], "packet": Qx.channels["packet"],
         "fp_zraw": np.maximum(e["fp_z"], e["fp_raw"])}[src]
    return np.where(Qx.own > 0, c, -np.inf)


def sel_fp_slots(Qx, total, fusion, k, point):
    """Questions naming one participant: the last ``slots`` of K go to the best turns of that
    participant by the dense cosine ``src`` (the first-person question), not chosen yet."""
    slots, src, gate = point
    if not slots or Qx.named is None or (gate == "list" and not is_list_question(Qx.q.question)):
        return select_rows(Qx.ix, Qx.q.question, total, Qx.qvec, fusion, k)
    chosen = select_rows(Qx.ix, Qx.q.question, total, Qx.qvec, fusion, k - slots)
    have = set(chosen)
    for i in score_order(own_dense(Qx, src)):
        if len(chosen) == k:
            break
        if int(i) not in have:
            chosen.append(int(i)); have.add(int(i))
    return chosen


def margin(Qx):
    """(best - 10th best) / best fused score: low when no turn stands out (an aggregate question)."""
    o = score_order(Qx.total)
    top = float(Qx.total[o[0]])
    return (top - float(Qx.total[o[9]])) / top if top > 0 else 0.0


def sel_rm3_gated(Qx, total, fusion, k, point):
    """Own-speaker RM3 (10 turns, 20 terms, questions naming one participant) at weight ``w``,
    only where the fused margin is below ``theta`` (no turn stands out)."""
    w, theta = point
    c = Qx.__dict__.get("_rm3")
    if c is None and "_rm3" not in Qx.__dict__:
        c = Qx._rm3 = ch_own_rm3(Qx, 10, 20)
    if c is None or not w or margin(Qx) >= theta:
        return select_rows(Qx.ix, Qx.q.question, total, Qx.qvec, fusion, k)
    return select_rows(Qx.ix, Qx.q.question, total + w * c, Qx.qvec, fusion, k)


def sel_rm3_tail(Qx, total, fusion, k, point):
    """The first ``keep`` of the package's selection stay; the rest of K in the order of the
    total plus ``w`` x own-speaker RM3 (10 turns, 20 terms; questions naming one participant)."""
    w, keep = point
    c = Qx.__dict__.get("_rm3")
    if c is None and "_rm3" not in Qx.__dict__:
        c = Qx._rm3 = ch_own_rm3(Qx, 10, 20)
    if c is None or not w:
        return select_rows(Qx.ix, Qx.q.question, total, Qx.qvec, fusion, k)
    chosen = select_rows(Qx.ix, Qx.q.question, total, Qx.qvec, fusion, min(keep, k))
    have = set(chosen)
    for i in score_order(total + w * c):
        if len(chosen) >= k:
            break
        if int(i) not in have:
            chosen.append(int(i)); have.add(int(i))
    return chosen


ENTITY_WEIGHTS = (0.0, 0.1, 0.25, 0.4, 0.5, 0.6, 0.75, 0.9, 1.0, 1.5)
SELECTS = {"two-named: interleave the named participants' orders (bonus on own turns)": sel_interleave}


def recall_rows(qs, fusion, chan_fn, weights, select=None):
    if select is not None:
        R10 = np.zeros((len(weights), len(qs)))
        R12 = np.zeros_like(R10)
        for n, Qx in enumerate(qs):
            for g, w in enumerate(weights):
                R10[g, n] = gold_recall([Qx.ids[i] for i in select(Qx, Qx.total, fusion, 10, w)], Qx.q.evidence)
                R12[g, n] = gold_recall([Qx.ids[i] for i in select(Qx, Qx.total, fusion, 12, w)], Qx.q.evidence)
        return R10, R12
    chans = [chan_fn(Qx) for Qx in qs]
    R10 = np.zeros((len(weights), len(qs)))
    R12 = np.zeros_like(R10)
    for n, (Qx, c) in enumerate(zip(qs, chans)):
        for g, w in enumerate(weights):
            if g and c is None:
                R10[g, n], R12[g, n] = R10[0, n], R12[0, n]
                continue
            total = Qx.total + w * c if (w and c is not None) else Qx.total
            rows = select_rows(Qx.ix, Qx.q.question, total, Qx.qvec, fusion, 12)
            rows10 = select_rows(Qx.ix, Qx.q.question, total, Qx.qvec, fusion, 10)
            R12[g, n] = gold_recall([Qx.ids[i] for i in rows], Qx.q.evidence)
            R10[g, n] = gold_recall([Qx.ids[i] for i in rows10], Qx.q.evidence)
    return R10, R12


def report(name, weights, mats, questions, ref):
    row = cc.score_row(name, [{"w": w} for w in weights], mats, questions)
    parts = []
    for c, x in row["corpora"].items():
        R10 = mats[c][0]
        g_all = int(np.argmax(R10.mean(axis=1)))
        cat = np.asarray([Qx.cat for Qx in questions[c]])
        mh = "1" if c == "locomo" else None
        ins_mh = f" mh {100 * R10[g_all, cat == mh].mean():.1f}/{x['cats'].get(mh, 0):.1f}" if mh else ""
        parts.append(f"{c} in {x['in_sample']:.1f} (w={weights[g_all]}) cv {x['cv10']:.1f}"
                     f" ({x['cv10'] - ref['corpora'][c]['cv10']:+.1f}){ins_mh}")
    if "locomo" in mats:
        R10 = mats["locomo"][0]
        cat = np.asarray([Qx.cat for Qx in questions["locomo"]])
        print("    locomo per point (overall/mh): " + ", ".join(
            f"{w}: {100 * R10[g].mean():.1f}/{100 * R10[g, cat == '1'].mean():.1f}" for g, w in enumerate(weights)))
        print("    locomo per point (cats 1/2/3/4): " + ", ".join(
            f"{w}: " + "/".join(f"{100 * R10[g, cat == k].mean():.1f}" for k in "1234") for g, w in enumerate(weights)))
        lst = np.asarray([is_list_question(Qx.q.question) for Qx in questions["locomo"]])
        print(f"    locomo list questions: {lst.sum()} ({(lst & (cat == '1')).sum()} multi-hop); per point list/non-list: "
              + ", ".join(f"{w}: {100 * R10[g, lst].mean():.1f}/{100 * R10[g, ~lst].mean():.1f}" for g, w in enumerate(weights)))
    verdict, _ = cc.shipping_rule(row, ref)
    print(f"| {name} | " + " | ".join(parts) + f" | {verdict} |", flush=True)
    return row


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpora", default="locomo,realtalk,beam")
    ap.add_argument("--cache", default="~/.cache/memcompile-local/ablate")
    ap.add_argument("--dump")
    ap.add_argument("--only")
    a = ap.parse_args()
    cfg = apply_preset("model-free", PipelineConfig()).replace(fusion={"ranker": "weighted"})
    names = a.corpora.split(",")
    corpora = [cc.load_corpus(n, cc.DEFAULT_DATA[n]) for n in names]
    t0 = time.perf_counter()
    mems, built = cc.open_memories(corpora, cfg, Path(a.cache).expanduser(), False)
    assert not built, f"rebuilt {built}: cache key differs"
    questions = collect(corpora, mems, cfg)
    print(f"collected in {time.perf_counter() - t0:.0f} s", flush=True)
    base = {c: recall_rows(questions[c], cfg.fusion, lambda Qx: None, (0.0,)) for c in names}
    ref = cc.score_row("weighted path (package)", [{}], base, questions)
    for c in names:
        cat = np.asarray([Qx.cat for Qx in questions[c]])
        cats = {k: round(100 * base[c][0][0, cat == k].mean(), 1) for k in dict.fromkeys(cat)}
        print(f"reference {c}: R@10 {ref['corpora'][c]['in_sample']:.1f} cats {cats}")
    if a.dump:
        slim = {c: [dict(ns=Qx.ns, cat=Qx.cat, q=Qx.q.question, named=Qx.named, fp=Qx.fp) for Qx in qs]
                for c, qs in questions.items()}
        Path(a.dump).write_bytes(pickle.dumps(slim))
    for name, fn in CANDIDATES.items():
        if a.only and a.only not in name:
            continue
        weights = ENTITY_WEIGHTS if name.startswith("answer type") else WEIGHTS
        mats = {c: recall_rows(questions[c], cfg.fusion, fn, weights) for c in names}
        report(name, weights, mats, questions, ref)
    for name, fn in SELECTS.items():
        if a.only and a.only not in name:
            continue
        mats = {c: recall_rows(questions[c], cfg.fusion, None, WEIGHTS, fn) for c in names}
        report(name, WEIGHTS, mats, questions, ref)
    name = "own-speaker RM3 (10 turns, 20 terms) where the fused margin is low (w, theta)"
    if not a.only or a.only in name:
        for c in names:
            ms_ = np.asarray([margin(Qx) for Qx in questions[c]])
            print(f"    {c} margin quantiles 25/50/75: {np.percentile(ms_, [25, 50, 75]).round(3)}")
        pts = [(0.0, 0.0)] + [(w, t) for w in (0.5, 0.75, 1.0) for t in (0.1, 0.15, 0.2, 0.3, 9.0)]
        mats = {c: recall_rows(questions[c], cfg.fusion, None, pts, sel_rm3_gated) for c in names}
        report(name, pts, mats, questions, ref)
    name = "own-speaker RM3 (10 turns, 20 terms) orders only the slots after the first keep (w, keep)"
    if not a.only or a.only in name:
        pts = [(0.0, 10)] + [(w, kp) for w in (0.5, 0.75, 1.0, 1.5) for kp in (5, 6, 7, 8)]
        mats = {c: recall_rows(questions[c], cfg.fusion, None, pts, sel_rm3_tail) for c in names}
        report(name, pts, mats, questions, ref)
    for src in ("fp_z", "fp_raw", "fp_zraw", "packet"):
        for gate in ("named", "list"):
            name = f"slots: named participant's best turns by {src} ({gate} questions)"
            if a.only and a.only not in name:
                continue
            pts = [(sl, src, gate) for sl in (0, 1, 2, 3)]
            mats = {c: recall_rows(questions[c], cfg.fusion, None, pts, sel_fp_slots) for c in names}
            report(name, [p[0] for p in pts], mats, questions, ref)
    for m in mems.values():
        m.store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
