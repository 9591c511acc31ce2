#!/usr/bin/env python
"""Nested cross-validation of the model-free path over the four development corpora (issue 48).

Corpora: LoCoMo dev4 (four conversations), REALTALK (four chats), BEAM 100K (ten chats) and
LongMemEval S dev100 (one haystack per question; abstention questions are not scored). Builds
are the cached ``model-free`` builds of ``scripts/dev_corpora.py`` (LongMemEval's questions in
one shared store, plus any ``--extra-store`` holding more of them: a question is scored when
one of the stores has it built).

Folds (fixed before any figure was read). Four outer folds; fold k holds LoCoMo conversation k,
REALTALK chat k, the BEAM chats whose position in the folder is k modulo 4 and, per LongMemEval
question type, the questions at positions k modulo 4 of that type (file order): every
conversation and every question is held out exactly once, each fold a slice of every corpus.

Protocol. For each outer fold: every setting is trained on the three other folds and scored on
it (its *outer* figure); and the *procedure* chooses the setting on those three folds only (an
inner leave-one-fold-out cross-validation over them: trained on two, scored on the third) and
the chosen setting, trained on the three folds, is scored on the held-out one (the *nested*
figure, the one the docs publish). The procedure is the shipping rule itself: starting from the
reference (the shipped path, its ranker retrained on the training folds), a component is taken
when its inner recall@10 falls on no corpus and rises on at least two against the reference's;
the components taken are combined. Applied to all four folds at once (its choice scored by the
plain four-fold CV), the same rule decides what ships.

Settings (``SETTINGS``; each one property of the history or question, no tuned constant):

* ``reference``: the shipped path: ``fusion.ranker: auto`` (the learned ranker on
  user-assistant and bursty histories, the weighted sum on alternating dialogue), its ranker
  retrained on the training folds with the shipped parameters (``scripts/train_ranker.py``);
* ``learned-everywhere``: one ranker for every history, no switch;
* ``anchor``: the question is asked on its ``question_date`` (LongMemEval): relative times
  ("last Saturday", "four weeks ago") resolve against it in the time-match channel;
* ``distinct``: a turn whose text is the same as a turn already selected (case and spacing
  aside) gives its slot to the next turn: identical filler turns from different sessions do
  not fill several of the ten slots;
* ``sessions``: a question that asks for several things or a count ("how many", "in total",
  list questions) gets at most two turns from one session before a turn of another session
  (session coverage);
* ``recency``: two ranker columns over the candidate pool: the largest cosine between a turn
  and a candidate of a later session, and of an earlier one (a value stated again later is
  superseded; the newest statement of it is not);
* ``preference``: two ranker columns: the question asks for a recommendation, suggestion, tips
  or advice (``research/preference_cues.asks_for_recommendation``), and the turn is the user's own
  first-person statement of taste, habit or constraint (``preference_turn``: an assistant's turn
  never is one; in a history between people every turn is a user's);
* ``assistant``: a question that refers back to what the assistant said or made
  (``research/preference_cues.refers_to_assistant``: the pronoun cue of ``language/roles`` and "the
  plan you put together") takes the assistant's turns before the user's: the ranked order with
  the assistant's turns moved ahead of the others, each side in its own order (a selection
  rule; histories without an assistant are untouched).

Recall is recall@10 of reachable gold turns (LongMemEval also session recall@10: the share of
answer sessions with a selected turn). Prints per corpus and category the nested figure, each
setting's outer figure, the baselines, the corpus-out figures of the two user-assistant corpora
(trained on BEAM, scored on LongMemEval, and the reverse), and writes everything to ``--json``.

    python research/nested_cv.py --cache /work/cache48/ablate --json nested.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import dev_corpora  # noqa: E402
from memcompile_local.bench.coverage import gold_recall, session_of  # noqa: E402
from memcompile_local.config import PipelineConfig  # noqa: E402
from memcompile_local.fused.channels import score_order  # noqa: E402
from memcompile_local.fused.documents import is_assistant, raw_text  # noqa: E402
from memcompile_local.fused.features import FEATURE_NAMES, query_features  # noqa: E402
from memcompile_local.fused.ranker import PLAIN_TURN_FEATURES, ordered_total  # noqa: E402
from memcompile_local.fused.retriever import FusedRetriever, pursuit_complement, uses_learned_ranker  # noqa: E402
from memcompile_local.language.listcues import is_list_question  # noqa: E402
from preference_cues import (asks_for_recommendation, preference_turn,  # noqa: E402
                                                   refers_to_assistant)
from memcompile_local.language.timeparse import parse_session_time  # noqa: E402
from memcompile_local.pipeline.compile import query_intent  # noqa: E402
from memcompile_local.pipeline.presets import apply_preset  # noqa: E402

K = 10
POOL = 50  # the shipped model's pool (scripts/train_ranker.py --pool)
FOLDS = dev_corpora.FOLDS
BASE_FEATURES = tuple(f for f in FEATURE_NAMES if f not in PLAIN_TURN_FEATURES)  # the shipped model's columns
RECENCY_FEATURES = ("later_similar", "earlier_similar")
PREFERENCE_FEATURES = ("q_preference", "user_preference")
# The shipped ranker's parameters (scripts/train_ranker.py), not tuned here.
INIT_SCALE = 5.0
ROUNDS = 100
PARAMS = {"objective": "lambdarank", "metric": "ndcg", "eval_at": [10], "learning_rate": 0.05,
          "num_leaves": 7, "min_data_in_leaf": 200, "lambda_l2": 10.0, "feature_fraction": 1.0,
          "bagging_fraction": 0.7, "bagging_freq": 1, "lambdarank_truncation_level": 30,
          "deterministic": True, "force_col_wise": True, "num_threads": 2, "seed": 0, "verbose": -1}
SEEDS = 10  # boosters averaged (the shipped ten) in every model an outer fold is scored with
INNER_SEEDS = 3  # boosters averaged in the inner loop's models (the choice only; fixed before any figure)
PER_SESSION = 2  # "sessions": turns of one session before another session's turn is preferred
# Questions that want several things or a count: the list cue, and counting or totals.
AGGREGATE = re.compile(r"\bhow many\b|\bhow much\b|\bin total\b|\btotal\b|\ball (?:the|of)\b|\beach\b",
                       re.IGNORECASE)

COMPONENTS = ("learned-everywhere", "anchor", "distinct", "sessions", "recency", "preference", "assistant")


@dataclass(frozen=True)
class Setting:
    """A point of the study: the reference plus some components."""

    components: frozenset = frozenset()

    @property
    def name(self) -> str:
        return "reference" if not self.components else "reference + " + " + ".join(
            c for c in COMPONENTS if c in self.components)

    def has(self, c: str) -> bool:
        return c in self.components


REFERENCE = Setting()
SETTINGS = [REFERENCE] + [Setting(frozenset([c])) for c in COMPONENTS]


@dataclass
class Variant:
    """What one query side (with or without the question's date) computes for a question."""

    rows: np.ndarray  # (R,) kept candidate rows: the fused head of KEEP, then gold outside it
    X: np.ndarray  # (R, len(BASE_FEATURES) + len(RECENCY_FEATURES) + len(PREFERENCE_FEATURES))
    label: np.ndarray
    in_head: int
    order: np.ndarray  # (N,) rows by the weighted sum
    fused: np.ndarray


@dataclass
class Q:
    corpus: str
    ns: str
    fold: int
    category: str
    question: str
    evidence: tuple
    sessions_gold: tuple  # LongMemEval's answer_session_ids (else the gold turns' sessions)
    view: object
    qvec: np.ndarray | None
    learned_auto: bool  # whether ranker "auto" takes the learned ranker on this history
    variants: dict = field(default_factory=dict)  # "plain" / "anchor" -> Variant
    dense: list = field(default_factory=list)  # the plain dense baseline's picks


KEEP = 60  # feature rows kept per question (>= POOL)


def recency_columns(view, rows: np.ndarray, head: int) -> np.ndarray:
    """(len(rows), 2): the largest z(p) cosine between each row and a candidate of the first
    ``head`` rows (the pool the ranker scores) of a later session, and of an earlier one (0 where
    none). Only the pool is compared against, as at query time: the gold rows a training set
    appends after the pool are never part of another row's comparison."""
    E = view.packet_matrix
    out = np.zeros((len(rows), 2))
    if E is None or not len(rows) or head <= 0:
        return out
    sess = np.asarray([view.packets[int(r)].session_index for r in rows])
    S = (E[rows] @ E[rows[:head]].T).astype(np.float64)
    later = sess[None, :head] > sess[:, None]
    earlier = sess[None, :head] < sess[:, None]
    out[:, 0] = np.where(later, S, -1.0).max(axis=1).clip(0.0)
    out[:, 1] = np.where(earlier, S, -1.0).max(axis=1).clip(0.0)
    return out


def turn_role(p) -> str:
    """The role of a turn: "assistant" for the assistant's, "user" for every other (in a history
    between people, every turn)."""
    return "assistant" if is_assistant(p.speaker) else "user"


def preference_columns(view, rows: np.ndarray, question: str) -> np.ndarray:
    """(len(rows), 2): whether the question asks for a recommendation (the same on every row),
    and whether each row is the user's own statement of a preference. Each row's value is a
    property of that turn alone, so the gold rows a training set appends change no other row."""
    out = np.zeros((len(rows), 2))
    out[:, 0] = float(asks_for_recommendation(question))
    for i, r in enumerate(rows):
        p = view.packets[int(r)]
        out[i, 1] = float(preference_turn(raw_text(p), turn_role(p)))
    return out


def variant(view, packets, q, qvec, cfg, anchor, gold) -> Variant:
    qf = query_features(view.fusion, packets, q.question, qvec, cfg.fusion, len(packets), anchor=anchor)
    head = list(qf.rows[:KEEP])
    rows = np.asarray(head + sorted(gold - set(head)), dtype=np.int64)
    pos = {int(r): i for i, r in enumerate(qf.rows)}
    X = qf.matrix[[pos[int(r)] for r in rows]][:, [FEATURE_NAMES.index(f) for f in BASE_FEATURES]]
    X = np.hstack([X, recency_columns(view, rows, min(POOL, len(head))), preference_columns(view, rows, q.question)])
    return Variant(rows, X, np.asarray([float(int(r) in gold) for r in rows]), len(head), qf.order, qf.fused)


def collect(corpus, mem, conv, cfg, fold_of) -> list[Q]:
    view = mem.view(conv.namespace)
    retriever = FusedRetriever(view.fusion, cfg.fusion, view.packets)
    packets = list(view.packets)
    row_of = {p.packet_id: i for i, p in enumerate(packets)}
    auto = uses_learned_ranker(view.fusion, cfg.fusion.__class__(ranker="auto"))
    out = []
    for q in dev_corpora.scored_questions(corpus, conv):
        intent = query_intent(q.question, cfg, None, view)
        qvec = retriever.query_vector(mem.embedder, q.question, intent.lexical_query())
        gold = {row_of[e] for e in q.evidence if e in row_of}
        sess = tuple(q.evidence_sessions) if corpus.name == "longmemeval" else \
            tuple(dict.fromkeys(packets[r].session_id for r in sorted(gold)))
        item = Q(corpus.name, conv.namespace, fold_of(conv, q), str(q.category), q.question, tuple(q.evidence),
                 sess, view, qvec, auto)
        item.variants["plain"] = variant(view, packets, q, qvec, cfg, None, gold)
        anchor = parse_session_time(q.question_date) if getattr(q, "question_date", None) else None
        item.variants["anchor"] = item.variants["plain"] if anchor is None else \
            variant(view, packets, q, qvec, cfg, anchor, gold)
        # The plain dense baseline embeds every raw turn once more: LongMemEval's haystacks (about
        # 500 long turns per question) would double the build, so it is left out there.
        if corpus.name != "longmemeval":
            item.dense = dev_corpora.plain_dense_order(mem, conv.namespace, q.question, K)
        out.append(item)
    return out


# ---------------------------------------------------------------------------- selection

def text_key(p) -> str:
    return " ".join(raw_text(p).casefold().split())


def distinct_order(view, order: np.ndarray) -> np.ndarray:
    """``order`` with every turn whose text repeats an earlier turn's moved to the end."""
    seen: set[str] = set()
    first, later = [], []
    for r in order:
        key = text_key(view.packets[int(r)])
        (later if key in seen else first).append(int(r))
        seen.add(key)
    return np.asarray(first + later, dtype=np.int64)


def session_capped(view, order: np.ndarray, k: int) -> np.ndarray:
    """The first ``k`` of ``order`` taking at most PER_SESSION turns of a session while other
    sessions' turns remain in the head of 3k; then the rest in order."""
    head = [int(r) for r in order[: 3 * k]]
    taken: list[int] = []
    count: dict[int, int] = {}
    for r in head:
        s = view.packets[r].session_index
        if count.get(s, 0) < PER_SESSION:
            taken.append(r)
            count[s] = count.get(s, 0) + 1
        if len(taken) == k:
            break
    chosen = set(taken)
    rest = [int(r) for r in order if int(r) not in chosen]
    return np.asarray(taken + rest, dtype=np.int64)


def assistant_first(view, order: np.ndarray) -> np.ndarray:
    """``order`` with the assistant's turns ahead of the others, each side in its own order."""
    rows = [int(r) for r in order]
    first = [r for r in rows if turn_role(view.packets[r]) == "assistant"]
    rest = [r for r in rows if turn_role(view.packets[r]) != "assistant"]
    return np.asarray(first + rest, dtype=np.int64)


def select(q: Q, total: np.ndarray, s: Setting, cfg) -> list[str]:
    view = q.view
    order = score_order(total)
    if s.has("assistant") and refers_to_assistant(q.question):
        order = assistant_first(view, order)
    if s.has("distinct") or cfg.fusion.distinct_turns:  # on by default since run 4 (settings log)
        order = distinct_order(view, order)
    if s.has("sessions") and (is_list_question(q.question) or AGGREGATE.search(q.question)):
        order = session_capped(view, order, K)
        return [view.packets[int(i)].packet_id for i in order[:K]]
    if is_list_question(q.question):
        rows = pursuit_complement(view.fusion, order, q.qvec, cfg.fusion, K)
    else:
        rows = [int(i) for i in order[:K]]
    return [view.packets[int(i)].packet_id for i in rows]


# ---------------------------------------------------------------------------- the ranker

def columns(s: Setting) -> list[int]:
    n = len(BASE_FEATURES)
    return list(range(n)) + ([n, n + 1] if s.has("recency") else []) + ([n + 2, n + 3] if s.has("preference") else [])


FUSED_COL = BASE_FEATURES.index("fused")


def design(qs: list[Q], s: Setting, train: bool):
    Xs, ys, groups = [], [], []
    cols = columns(s)
    key = "anchor" if s.has("anchor") else "plain"
    for q in qs:
        v = q.variants[key]
        start = min(POOL, v.in_head)
        take = np.arange(start)
        if train:
            take = np.concatenate([take, np.flatnonzero(v.label[start:] > 0) + start])
        Xs.append(v.X[take][:, cols])
        ys.append(v.label[take])
        groups.append(len(take))
    return np.vstack(Xs), np.concatenate(ys), groups


class Bagged:
    """The shipped ranker's kind: SEEDS LambdaRank boosters from INIT_SCALE x the weighted sum, averaged."""

    def fit(self, X, y, groups, seeds):
        import lightgbm as lgb
        data = lgb.Dataset(X, y, group=groups, init_score=INIT_SCALE * X[:, FUSED_COL], free_raw_data=False)
        self.boosters = [lgb.train({**PARAMS, "seed": sd}, data, num_boost_round=ROUNDS) for sd in range(seeds)]
        return self

    def predict(self, X):
        trees = np.mean([b.predict(X, raw_score=True, num_threads=1) for b in self.boosters], axis=0)
        return INIT_SCALE * X[:, FUSED_COL] + trees


MODEL_CACHE: dict = {}


def train(qs: list[Q], s: Setting, seeds: int, tag: tuple) -> Bagged:
    """The ranker of setting ``s`` on ``qs`` (only the components that change its rows or columns
    make a new model; ``tag`` names the training set)."""
    key = (tag, s.has("anchor"), s.has("recency"), s.has("preference"), seeds)
    if key not in MODEL_CACHE:
        X, y, g = design(qs, s, True)
        MODEL_CACHE[key] = Bagged().fit(X, y, g, seeds)
    return MODEL_CACHE[key]


def score(model: Bagged, qs: list[Q], s: Setting, cfg) -> dict[int, list[str]]:
    """Picks of every question of ``qs`` under setting ``s`` with ``model``."""
    X, _, groups = design(qs, s, False)
    pred = model.predict(X)
    out, at = {}, 0
    key = "anchor" if s.has("anchor") else "plain"
    for q, g in zip(qs, groups):
        v = q.variants[key]
        learned = s.has("learned-everywhere") or q.learned_auto
        if learned:
            total = ordered_total(len(v.order), v.rows[:g], pred[at: at + g], v.order)
        else:
            total = v.fused
        out[id(q)] = select(q, total, s, cfg)
        at += g
    return out


def turn_recall(q: Q, picks: list[str]) -> float:
    return float(gold_recall(picks[:K], q.evidence))


def session_recall(q: Q, picks: list[str]) -> float | None:
    if not q.sessions_gold:
        return None
    got = {session_of(p) for p in picks[:K]} if q.corpus == "longmemeval" else \
        {q.view.packets[q.view.fusion.row_of[p]].session_id for p in picks[:K]}
    return len(got & set(q.sessions_gold)) / len(set(q.sessions_gold))


def run_cv(qs: list[Q], settings: list[Setting], folds: list[int], seeds: int, cfg, tag: tuple) -> dict:
    """Leave-one-fold-out over ``folds`` (of ``qs``): picks per question per setting."""
    picks: dict[Setting, dict[int, list[str]]] = {s: {} for s in settings}
    for f in folds:
        train_qs = [q for q in qs if q.fold in folds and q.fold != f]
        held = [q for q in qs if q.fold == f]
        if not held:
            continue
        for s in settings:
            model = train(train_qs, s, seeds, tag + (f,))
            picks[s].update(score(model, held, s, cfg))
    return picks


def corpus_means(qs: list[Q], picks: dict[int, list[str]]) -> dict[str, float]:
    by: dict[str, list[float]] = {}
    for q in qs:
        if id(q) in picks:
            by.setdefault(q.corpus, []).append(turn_recall(q, picks[id(q)]))
    return {c: 100 * float(np.mean(v)) for c, v in by.items()}


def rule(cand: dict[str, float], ref: dict[str, float]) -> bool:
    """The shipping rule: falls on no corpus, rises on at least two."""
    delta = {c: cand[c] - ref[c] for c in ref}
    return all(d > -1e-9 for d in delta.values()) and sum(d > 1e-9 for d in delta.values()) >= 2


def procedure(qs: list[Q], folds: list[int], seeds: int, cfg, tag: tuple) -> tuple[Setting, dict]:
    """The setting the rule chooses on ``folds`` by leave-one-fold-out CV over them."""
    picks = run_cv(qs, SETTINGS, folds, seeds, cfg, tag)
    inner = [q for q in qs if q.fold in folds]
    means = {s: corpus_means(inner, picks[s]) for s in SETTINGS}
    taken = [c for c, s in zip(COMPONENTS, SETTINGS[1:]) if rule(means[s], means[REFERENCE])]
    return Setting(frozenset(taken)), {s.name: means[s] for s in SETTINGS}


# ---------------------------------------------------------------------------- figures

def table(qs: list[Q], picks: dict[int, list[str]]) -> dict:
    """Per corpus: recall@10 overall, per category, per fold (LongMemEval also session recall)."""
    out: dict = {}
    for c in dict.fromkeys(q.corpus for q in qs):
        cq = [q for q in qs if q.corpus == c and id(q) in picks]
        r = np.asarray([turn_recall(q, picks[id(q)]) for q in cq])
        srec = [session_recall(q, picks[id(q)]) for q in cq]
        cats = dict.fromkeys(q.category for q in cq)
        entry = {"n": len(cq), "turn": 100 * r.mean(),
                 "cats": {k: 100 * float(np.mean([x for x, q in zip(r, cq) if q.category == k])) for k in cats},
                 "folds": {f: 100 * float(np.mean([x for x, q in zip(r, cq) if q.fold == f]))
                           for f in sorted({q.fold for q in cq})}}
        if c == "longmemeval":
            entry["session"] = 100 * float(np.mean([x for x in srec if x is not None]))
            entry["session_cats"] = {k: 100 * float(np.mean([x for x, q in zip(srec, cq)
                                                             if q.category == k and x is not None])) for k in cats}
        out[c] = entry
    return out


def fmt(x):
    return "n/a" if x is None else f"{x:.1f}"


def print_corpus_tables(rows: dict[str, dict], corpora) -> None:
    for corpus in corpora:
        c = corpus.name
        first = next(iter(rows.values()))[c]
        cats = list(first["cats"])
        names = {str(k): v for k, v in corpus.categories.items()}
        print(f"\n### {dev_corpora.TITLES[c]}: {first['n']} questions\n")
        head = "| row | recall@10 | " + " | ".join(names.get(k, k) for k in cats)
        if c == "longmemeval":
            head += " | session recall@10 | " + " | ".join(f"{names.get(k, k)} (session)" for k in cats)
        head += " | " + " | ".join(f"fold {f}" for f in first["folds"]) + " |"
        print(head)
        print("|" + "---|" * (head.count("|") - 1))
        for name, r in rows.items():
            if c not in r:
                continue
            x = r[c]
            line = f"| {name} | {x['turn']:.1f} | " + " | ".join(fmt(x["cats"].get(k)) for k in cats)
            if c == "longmemeval":
                line += f" | {x['session']:.1f} | " + " | ".join(fmt(x["session_cats"].get(k)) for k in cats)
            line += " | " + " | ".join(f"{v:.1f}" for v in x["folds"].values()) + " |"
            print(line)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", default=dev_corpora.DEFAULT_CACHE)
    ap.add_argument("--lme", default="../shared/data/longmemeval/longmemeval_s_dev100.json.gz")
    ap.add_argument("--extra-store", action="append", default=[], help="another store with LongMemEval builds")
    ap.add_argument("--corpora", default="locomo,realtalk,beam,longmemeval")
    ap.add_argument("--lme-questions", default=None, metavar="FILE",
                    help="only these LongMemEval question ids (one a line; research/nested_cv_lme39.txt: "
                         "the 39 of the 2026-12-06 run)")
    ap.add_argument("--seeds", type=int, default=SEEDS)
    ap.add_argument("--inner-seeds", type=int, default=INNER_SEEDS)
    ap.add_argument("--json", default=None)
    ap.add_argument("--settings", default=None, metavar="NAMES",
                    help="only these components beside the reference (comma-separated, e.g. recency)")
    ap.add_argument("--tables-from", default=None, metavar="JSON", help="print the tables of a saved --json run")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                    help="a config field of every build and selection, e.g. model.embed_model=PATH (the "
                         "embedder study: builds go to their own cache entries)")
    args = ap.parse_args()
    if args.settings:
        global SETTINGS, COMPONENTS
        COMPONENTS = tuple(c for c in COMPONENTS if c in args.settings.split(","))
        SETTINGS = [REFERENCE] + [Setting(frozenset([c])) for c in COMPONENTS]
    if args.tables_from:
        saved = json.loads(Path(args.tables_from).read_text(encoding="utf-8"))
        names = [n for n in args.corpora.split(",") if n and n in saved["counts"]]
        corpora = []
        for n in names:
            corpus = dev_corpora.Corpus(n, [], dev_corpora.scored_categories(n) if n != "longmemeval" else {})
            corpora.append(corpus)
        print_corpus_tables(saved["rows"], corpora)
        for k, v in saved.get("corpus_out", {}).items():
            print(f"| {k} | {v['turn']:.1f} | {fmt(v.get('session'))} |")
        return 0
    cfg = apply_preset("model-free", PipelineConfig())
    if args.set:
        cfg = cfg.replace(**dev_corpora.config_changes(args.set))
    cache = Path(args.cache).expanduser()
    names = [n for n in args.corpora.split(",") if n]
    corpora, memories = [], {}
    t0 = time.perf_counter()
    for n in names:
        corpus = dev_corpora.load_corpus(n, args.lme if n == "longmemeval" else dev_corpora.DEFAULT_DATA[n])
        if n == "longmemeval":
            if args.lme_questions:
                wanted = set(Path(args.lme_questions).read_text(encoding="utf-8").split())
                corpus.convs = [cv for cv in corpus.convs if cv.questions[0].question_id in wanted]
            memories.update(dev_corpora.open_longmemeval(corpus, cfg, cache, args.extra_store))
        else:
            got, built = dev_corpora.open_memories([corpus], cfg, cache, False)
            memories.update(got)
        corpora.append(corpus)
    qs: list[Q] = []
    for corpus in corpora:
        fold_of = dev_corpora.fold_plan(corpus, FOLDS)
        for conv in corpus.convs:
            qs += collect(corpus, memories[(corpus.name, conv.namespace)], conv, cfg, fold_of)
        print(f"{corpus.name}: features of {sum(q.corpus == corpus.name for q in qs)} questions "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
    counts = {c.name: sum(q.corpus == c.name for q in qs) for c in corpora}
    print(f"features of {len(qs)} questions in {time.perf_counter() - t0:.0f} s: {counts}", flush=True)

    folds = list(range(FOLDS))
    out: dict = {"counts": counts, "seeds": args.seeds, "inner_seeds": args.inner_seeds,
                 "longmemeval_ids": sorted({q.ns[len("lme-"):] for q in qs if q.corpus == "longmemeval"})}

    def save() -> None:
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=1, default=str), encoding="utf-8")

    t0 = time.perf_counter()
    outer = run_cv(qs, SETTINGS, folds, args.seeds, cfg, ("outer",))
    print(f"outer CV of {len(SETTINGS)} settings in {time.perf_counter() - t0:.0f} s", flush=True)
    rows: dict = {}
    for s in SETTINGS:
        rows[f"outer: {s.name}"] = table(qs, outer[s])
    rows["baseline: MiniLM cosine, raw turns"] = table(qs, {id(q): q.dense for q in qs})
    if "longmemeval" in rows["baseline: MiniLM cosine, raw turns"]:
        del rows["baseline: MiniLM cosine, raw turns"]["longmemeval"]
    weighted = {id(q): select(q, q.variants["plain"].fused, REFERENCE, cfg) for q in qs}
    rows["weighted sum everywhere (no ranker)"] = table(qs, weighted)
    out["rows"] = rows
    save()
    # What ships: the rule on the plain four-fold CV figures (the outer models above, reused).
    final, final_means = procedure(qs, folds, args.seeds, cfg, ("outer",))
    out["final"], out["final_means"] = final.name, final_means
    print(f"on all four folds the rule takes: {final.name}", flush=True)
    save()

    nested: dict[int, list[str]] = {}
    chosen = {}
    for f in folds:
        rest = [g for g in folds if g != f]
        s, inner = procedure(qs, rest, args.inner_seeds, cfg, ("inner", f))
        chosen[f] = {"setting": s.name, "inner": inner}
        print(f"outer fold {f}: the rule on folds {rest} takes {s.name}", flush=True)
        model = train([q for q in qs if q.fold in rest], s, args.seeds, ("outer", f))
        nested.update(score(model, [q for q in qs if q.fold == f], s, cfg))
    rows = {"nested (the rule, chosen per outer fold)": table(qs, nested), **rows}
    out["rows"], out["chosen"] = rows, chosen
    save()
    print_corpus_tables(rows, corpora)

    # Corpus out between the two user-assistant corpora (each setting fixed, trained on the other).
    co = {}
    if {"beam", "longmemeval"} <= set(names):
        for src, dst in (("beam", "longmemeval"), ("longmemeval", "beam")):
            tr = [q for q in qs if q.corpus == src]
            te = [q for q in qs if q.corpus == dst]
            for s in SETTINGS:
                got = score(train(tr, s, args.seeds, ("corpus", src)), te, s, cfg)
                co[f"{src} -> {dst}: {s.name}"] = table(te, got)[dst]
            allq = [q for q in qs if q.corpus != dst]  # for comparison: trained on every other corpus
            got = score(train(allq, REFERENCE, args.seeds, ("all-but", dst)), te, REFERENCE, cfg)
            co[f"three others -> {dst}: reference"] = table(te, got)[dst]
        print("\n### Corpus out (user-assistant corpora)\n\n| trained -> scored: setting | turn recall@10 | session |")
        print("|---|---|---|")
        for k, v in co.items():
            print(f"| {k} | {v['turn']:.1f} | {fmt(v.get('session'))} |")
    out["corpus_out"] = co
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
