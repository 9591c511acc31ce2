#!/usr/bin/env python
"""Train the fused selector's shipped learned ranker and write its model file.

Reads the cached model-free builds of the four development corpora (LoCoMo dev4, REALTALK,
BEAM 100K, LongMemEval S dev100; ``dev_corpora.open_memories``: a store already built is only
loaded; LongMemEval's questions from the shared store and any ``--extra-store``), computes for
every scored question the package's feature rows (``fused.features.query_features``, the very
function the package calls at query time) and trains the shipped setting on them:

* candidates per question: the ``--pool`` best turns by the weighted sum, plus every gold turn
  when training (label 1 gold, 0 otherwise); at scoring time only the pool, as the package does;
* the model: ten LightGBM LambdaRank boosters (``BAGGED_SEEDS``), each of 100 trees of seven
  leaves grown on a random 70% of the rows per round, starting from 5 x the weighted sum (so
  the trees learn corrections to it), averaged (``LambdaRankBagged``; parameters ``PARAMS``,
  fixed before the figures were read); it reads the feature columns that need no plain-turn
  vectors (``FEATURES``);
* protocols, per corpus: in-sample (trained on every question of the three corpora), CV (leave
  one conversation out) and corpus out (trained on the two other corpora); recall@10 of
  ``fused.retriever.select_rows`` on the ranker's order (list questions still get MemPursuit),
  beside the weighted sum and the plain MiniLM cosine over raw turns;
* calibration: a logistic curve of the model's score fit to the held-out (CV) scores of every
  question's pool, label gold or not (``calibrate``), so the package's search score under the
  ranker is a probability measured on data the scoring model did not see.

``--write PATH`` exports the model trained on everything, with its calibration and training
record (format in ``memcompile_local/fused/ranker.py``), and checks that the package's
evaluator gives LightGBM's scores and that ``Memory.compile`` with it selects what this script
selects on every question. The experiment variants measured beside it (other settings, extra
features, shrinkage, ablations) are in ``research/train_ranker_variants.py``.

    python scripts/train_ranker.py                      # the CV table and the calibration
    python scripts/train_ranker.py --cache CACHE --extra-store LME_EVAL_STORE --folds 4 --write memcompile_local/fused/models/ranker-v4.json
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata as md
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import dev_corpora  # noqa: E402
from memcompile_local.bench.coverage import gold_recall  # noqa: E402
from memcompile_local.config import PipelineConfig  # noqa: E402
from memcompile_local.fused.features import FEATURE_NAMES, query_features  # noqa: E402
from memcompile_local.fused.ranker import (FORMAT, FORMAT_VERSION, PLAIN_TURN_FEATURES, ordered_total,  # noqa: E402
                                           parse_model)
from memcompile_local.fused.retriever import FusedRetriever, select_rows, uses_learned_ranker  # noqa: E402
from memcompile_local.llm.client import LLMClient, NoModelBackend  # noqa: E402
from memcompile_local.memory import Memory  # noqa: E402
from memcompile_local.pipeline.compile import query_intent  # noqa: E402
from memcompile_local.pipeline.presets import apply_preset  # noqa: E402

K = 10
KEEP_ROWS = 100  # feature rows kept per question (the largest --pool)
# The columns the shipped model reads: every feature but the plain-turn cosine, whose vectors a
# build makes only for a model that reads them.
FEATURES = tuple(f for f in FEATURE_NAMES if f not in PLAIN_TURN_FEATURES)
COLUMNS = [FEATURE_NAMES.index(f) for f in FEATURES]
FUSED_COL = FEATURES.index("fused")
INIT_SCALE = 5.0  # the trees start from INIT_SCALE x the weighted sum
ROUNDS = 100
PARAMS = {"objective": "lambdarank", "metric": "ndcg", "eval_at": [10], "learning_rate": 0.05,
          "num_leaves": 7, "min_data_in_leaf": 200, "lambda_l2": 10.0, "feature_fraction": 1.0,
          "bagging_fraction": 0.7, "bagging_freq": 1, "lambdarank_truncation_level": 30,
          "deterministic": True, "force_col_wise": True, "num_threads": 2, "seed": 0, "verbose": -1}
BAGGED_SEEDS = tuple(range(10))


@dataclass
class Q:
    """One scored question with the feature rows the ranker reads."""

    corpus: str
    ns: str
    category: str
    question: str
    evidence: tuple
    view: object
    qvec: np.ndarray | None
    rows: np.ndarray  # (R,) index rows of the kept feature rows: the fused head, then gold outside it
    X: np.ndarray  # (R, len(FEATURE_NAMES)) the package's features
    label: np.ndarray  # (R,) 1.0 gold
    in_head: int  # how many of ``rows`` are the fused head (the rest: gold outside it)
    order: np.ndarray  # (N,) every row by the weighted sum
    fused: np.ndarray  # (N,) the weighted sum
    shipped: list  # the weighted sum's K picks (packet ids)
    dense: list  # the plain dense baseline's K picks
    E: np.ndarray | None = None  # candidate columns a research script adds


def data_files(paths: list[str]) -> list[Path]:
    out = []
    for p in map(Path, paths):
        out += sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
    return out


def data_sha256(files: list[Path]) -> str:
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0")
        h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def collect(corpus, mem, conv, cfg) -> list[Q]:
    """Feature rows of the conversation's scored questions."""
    view = mem.view(conv.namespace)
    retriever = FusedRetriever(view.fusion, cfg.fusion, view.packets)
    packets = list(view.packets)
    ids = [p.packet_id for p in packets]
    row_of = {pid: i for i, pid in enumerate(ids)}
    out = []
    for q in dev_corpora.scored_questions(corpus, conv):
        intent = query_intent(q.question, cfg, None, view)
        qvec = retriever.query_vector(mem.embedder, q.question, intent.lexical_query())
        qf = query_features(view.fusion, packets, q.question, qvec, cfg.fusion, len(packets))
        gold = {row_of[e] for e in q.evidence if e in row_of}
        head = list(qf.rows[:KEEP_ROWS])
        rows = np.asarray(head + sorted(gold - set(head)), dtype=np.int64)
        pos = {int(r): i for i, r in enumerate(qf.rows)}
        X = qf.matrix[[pos[int(r)] for r in rows]]
        shipped = select_rows(view.fusion, q.question, qf.fused, qvec, cfg.fusion, K)
        out.append(Q(corpus.name, conv.namespace, str(q.category), q.question, tuple(q.evidence), view, qvec, rows,
                     X, np.asarray([float(int(r) in gold) for r in rows]), len(head), qf.order, qf.fused,
                     [ids[i] for i in shipped],
                     # The plain dense baseline embeds every raw turn once more: on LongMemEval's
                     # haystacks that is a second build, so it is not computed there (empty picks).
                     dev_corpora.plain_dense_order(mem, conv.namespace, q.question, K)
                     if corpus.name != "longmemeval" else []))
    return out


def design(qs: list[Q], pool: int, train: bool):
    """Feature matrix (the ``FEATURES`` columns), labels and group sizes: the fused head of
    ``pool`` rows (plus gold outside it when training)."""
    Xs, ys, groups = [], [], []
    for q in qs:
        start = min(pool, q.in_head)
        take = np.arange(start)
        if train:
            take = np.concatenate([take, np.flatnonzero(q.label[start:] > 0) + start])
        Xs.append(q.X[take][:, COLUMNS])
        ys.append(q.label[take])
        groups.append(len(take))
    return np.vstack(Xs), np.concatenate(ys), groups


class LambdaRankBagged:
    """``BAGGED_SEEDS`` LambdaRank boosters over the same rows, each bagging 70% of them per
    round, averaged; every booster starts from ``INIT_SCALE`` x the weighted sum. The export
    is one tree list: every booster's trees, leaves divided by the count (the same sum)."""

    kind = "trees"

    def fit(self, X, y, groups):
        import lightgbm as lgb
        data = lgb.Dataset(X, y, group=groups, init_score=INIT_SCALE * X[:, FUSED_COL], free_raw_data=False)
        self.boosters = [lgb.train({**PARAMS, "seed": s}, data, num_boost_round=ROUNDS) for s in BAGGED_SEEDS]
        return self

    def predict(self, X):
        trees = np.mean([b.predict(X, raw_score=True, num_threads=1) for b in self.boosters], axis=0)
        return INIT_SCALE * X[:, FUSED_COL] + trees

    def dumps(self) -> list[tuple[dict, float]]:
        return [(t, 1.0 / len(self.boosters)) for b in self.boosters for t in b.dump_model()["tree_info"]]


def fit(train: list[Q], pool: int) -> LambdaRankBagged:
    X, y, groups = design(train, pool, train=True)
    return LambdaRankBagged().fit(X, y, groups)


def picks(q: Q, scores: np.ndarray, pool: int, cfg) -> list[str]:
    """The package's selection on the ranker's order of the fused head."""
    rows = q.rows[: min(pool, q.in_head)]
    total = ordered_total(len(q.order), rows, scores, q.order)
    sel = select_rows(q.view.fusion, q.question, total, q.qvec, cfg.fusion, K, packets=q.view.packets)
    return [q.view.packets[i].packet_id for i in sel]


def scored(model, qs: list[Q], pool: int, cfg) -> tuple[dict[int, list[str]], list[tuple[np.ndarray, np.ndarray]]]:
    """Picks per question, and per question the (scores, labels) of its pool rows."""
    X, _, groups = design(qs, pool, train=False)
    s = model.predict(X)
    out, pools, at = {}, [], 0
    for q, g in zip(qs, groups):
        out[id(q)] = picks(q, s[at: at + g], pool, cfg)
        pools.append((s[at: at + g], q.label[:g]))
        at += g
    return out, pools


def protocols(qs: list[Q], pool: int, cfg, folds: dict[int, int] | None = None) -> dict:
    """Picks per question under in-sample, leave-one-conversation-out (or, with ``folds``, a
    question id -> fold map, leave one fold out) and corpus out, and the held-out (CV) pool
    scores the calibration is fit on."""
    res: dict = {"in_sample": scored(fit(qs, pool), qs, pool, cfg)[0], "cv": {}, "corpus_out": {}, "held_out": []}

    def part(q):
        return folds[id(q)] if folds is not None else (q.corpus, q.ns)

    for key in dict.fromkeys(part(q) for q in qs):
        held = [q for q in qs if part(q) == key]
        got, pools = scored(fit([q for q in qs if part(q) != key], pool), held, pool, cfg)
        res["cv"].update(got)
        res["held_out"] += pools
    for c in dict.fromkeys(q.corpus for q in qs):
        held = [q for q in qs if q.corpus == c]
        others = [q for q in qs if q.corpus != c]
        # One corpus alone has nothing to train a corpus-out model on: its CV picks stand in.
        res["corpus_out"].update(scored(fit(others, pool), held, pool, cfg)[0] if others
                                 else {id(q): res["cv"][id(q)] for q in held})
    return res


def calibrate(held_out: list[tuple[np.ndarray, np.ndarray]],
              how: str = "leave one conversation out") -> dict:
    """Platt scaling: the logistic curve P(gold | score) = 1 / (1 + exp(-(slope * score +
    intercept))) of largest likelihood on the held-out pool rows (Newton's method on the two
    parameters), with how well it fits (log loss and the mean predicted against the observed
    gold share in five bins of the score)."""
    s = np.concatenate([p[0] for p in held_out]).astype(np.float64)
    y = np.concatenate([p[1] for p in held_out]).astype(np.float64)
    X = np.stack([s, np.ones_like(s)], axis=1)
    w = np.zeros(2)
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-(X @ w)))
        grad = X.T @ (p - y)
        hess = (X * (p * (1 - p))[:, None]).T @ X + 1e-9 * np.eye(2)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.max(np.abs(step)) < 1e-10:
            break
    p = np.clip(1.0 / (1.0 + np.exp(-(X @ w))), 1e-12, 1 - 1e-12)
    edges = np.quantile(s, [0.0, 0.8, 0.9, 0.95, 0.98, 1.0])
    bins = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        m = (s >= lo) & (s <= hi)
        if m.any():
            bins.append({"score": [round(float(lo), 4), round(float(hi), 4)], "rows": int(m.sum()),
                         "predicted": round(float(p[m].mean()), 4), "observed": round(float(y[m].mean()), 4)})
    return {"method": "platt", "slope": float(w[0]), "intercept": float(w[1]),
            "fit": f"held-out scores of every question's pool ({how})",
            "rows": int(len(s)), "gold_rows": int(y.sum()),
            "log_loss": round(float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))), 5), "bins": bins}


def recall(qs: list[Q], chosen: dict[int, list[str]]) -> np.ndarray:
    return np.asarray([gold_recall(chosen[id(q)][:K], q.evidence) for q in qs])


def summarize(name: str, qs_by: dict[str, list[Q]], res: dict) -> dict:
    row = {"name": name, "corpora": {}}
    for c, qs in qs_by.items():
        cv = recall(qs, res["cv"])
        nss = np.asarray([q.ns for q in qs])
        row["corpora"][c] = {"n": len(qs), "in_sample": 100 * recall(qs, res["in_sample"]).mean(),
                             "cv10": 100 * cv.mean(), "corpus_out": 100 * recall(qs, res["corpus_out"]).mean(),
                             "folds": {ns: 100 * cv[nss == ns].mean() for ns in dict.fromkeys(nss)}}
    return row


def fixed(name: str, qs_by: dict[str, list[Q]], attr: str) -> dict:
    same = {id(q): getattr(q, attr) for qs in qs_by.values() for q in qs}
    return summarize(name, qs_by, {"in_sample": same, "cv": same, "corpus_out": same})


def auto(name: str, qs_by: dict[str, list[Q]], res: dict, cfg) -> dict:
    """``fusion.ranker: auto`` under each protocol: the ranker's picks where the package would
    use it (``retriever.uses_learned_ranker``), the weighted sum's elsewhere."""
    rule = cfg.fusion.__class__(ranker="auto")
    learned = {id(q): uses_learned_ranker(q.view.fusion, rule) for qs in qs_by.values() for q in qs}
    mixed = {p: {id(q): got[id(q)] if learned[id(q)] else q.shipped for qs in qs_by.values() for q in qs}
             for p, got in res.items() if p in ("in_sample", "cv", "corpus_out")}
    return summarize(name, qs_by, mixed)


def export(model, path: Path, pool: int, meta: dict, calibration: dict) -> dict:
    """Write ``model`` as a model file (checked by the package's parser first)."""
    doc = {"format": FORMAT, "format_version": FORMAT_VERSION, "kind": model.kind, "features": list(FEATURES),
           "pool": pool, "trees": [], "init_score": {"feature": "fused", "scale": INIT_SCALE}}
    for t, share in model.dumps():
        tree = flatten(t["tree_structure"])
        tree["leaf_value"] = [share * v for v in tree["leaf_value"]]  # the mean: every tree, leaves / members
        doc["trees"].append(tree)
    doc["calibration"] = calibration
    doc["training"] = meta
    parse_model(doc, path)  # what the package will read must load
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=None, separators=(",", ":")) + "\n", encoding="utf-8")
    return doc


def flatten(root: dict) -> dict:
    """One LightGBM ``dump_model`` tree as the model file's node arrays (ranker.Trees)."""
    tree = {"feature": [], "threshold": [], "left": [], "right": [], "default_left": [], "missing": [],
            "leaf_value": []}

    def walk(node) -> int:
        if "leaf_value" in node:
            tree["leaf_value"].append(float(node["leaf_value"]))
            return ~(len(tree["leaf_value"]) - 1)
        if node.get("decision_type") != "<=":
            raise ValueError(f"split {node.get('split_index')}: only numerical '<=' splits are exported")
        i = len(tree["feature"])
        for k in ("feature", "threshold", "left", "right", "default_left", "missing"):
            tree[k].append(None)
        tree["feature"][i] = int(node["split_feature"])
        tree["threshold"][i] = float(node["threshold"])
        tree["default_left"][i] = bool(node["default_left"])
        tree["missing"][i] = str(node["missing_type"])
        tree["left"][i] = walk(node["left_child"])
        tree["right"][i] = walk(node["right_child"])
        return i
    walk(root)
    return tree


def parity(qs: list[Q], memories: dict, cfg, path: Path, model, pool: int) -> tuple[int, int]:
    """How many questions ``Memory.compile`` with the written model selects exactly as here."""
    learned = cfg.replace(fusion={"ranker": "learned", "ranker_model": str(path)})
    mems = {}
    same = 0
    for q in qs:
        if (q.corpus, q.ns) not in mems:
            base = memories[(q.corpus, q.ns)]
            mems[(q.corpus, q.ns)] = Memory(base.store, learned, client=LLMClient(NoModelBackend(), base.store),
                                            embedder=base.embedder)
        X, _, _ = design([q], pool, train=False)
        same += list(mems[(q.corpus, q.ns)].compile(q.ns, q.question).packet_ids) == picks(q, model.predict(X), pool,
                                                                                              learned)
    return same, len(qs)


def print_table(rows: list[dict], names: list[str]) -> None:
    print("\n| row | " + " | ".join(f"{dev_corpora.TITLES[c]}: in-sample / CV / corpus out" for c in names) + " |")
    print("|---|" + "---|" * len(names))
    for r in rows:
        print(f"| {r['name']} | " + " | ".join(
            "{in_sample:.1f} / {cv10:.1f} / {corpus_out:.1f}".format(**r["corpora"][c]) for c in names) + " |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpora", default="locomo,realtalk,beam,longmemeval")
    ap.add_argument("--data", default=None, help=f"LoCoMo file (default {dev_corpora.DEFAULT_DATA['locomo']})")
    ap.add_argument("--realtalk", default=None, help=f"REALTALK folder (default {dev_corpora.DEFAULT_DATA['realtalk']})")
    ap.add_argument("--beam", default=None, help=f"BEAM size folder (default {dev_corpora.DEFAULT_DATA['beam']})")
    ap.add_argument("--lme", default=None,
                    help=f"LongMemEval file (default {dev_corpora.DEFAULT_DATA['longmemeval']})")
    ap.add_argument("--extra-store", action="append", default=[], metavar="PATH",
                    help="another store holding LongMemEval builds of the same configuration (e.g. an eval run's)")
    ap.add_argument("--cache", default=dev_corpora.DEFAULT_CACHE, help="the cached builds (dev_corpora)")
    ap.add_argument("--pool", type=int, default=50, help=f"candidates reordered per question (at most {KEEP_ROWS})")
    ap.add_argument("--write", default=None, metavar="PATH", help="export the model trained on everything")
    ap.add_argument("--json", default=None, metavar="PATH", help="also write the figures as JSON")
    ap.add_argument("--folds", type=int, default=0, metavar="N",
                    help="CV and calibration by the N-fold plan of dev_corpora.fold_plan instead of leaving one "
                         "conversation out (LongMemEval has one conversation per question: 4 keeps it to 4 models)")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()
    if not 1 <= args.pool <= KEEP_ROWS:
        ap.error(f"--pool must be in [1, {KEEP_ROWS}]")
    cfg = apply_preset("model-free", PipelineConfig())
    names = [n.strip() for n in args.corpora.split(",") if n.strip()]
    paths = {"locomo": args.data, "realtalk": args.realtalk, "beam": args.beam, "longmemeval": args.lme}
    paths = {n: paths.get(n) or dev_corpora.DEFAULT_DATA[n] for n in names}
    corpora = [dev_corpora.load_corpus(n, paths[n]) for n in names]
    t0 = time.perf_counter()
    cache = Path(args.cache).expanduser()
    # LongMemEval: its questions built in the shared store or an --extra-store (none is built here:
    # a full build is hours on two cores; `eval longmemeval --store` or research/nested_cv.py make them).
    memories, built = dev_corpora.open_memories([c for c in corpora if c.name != "longmemeval"], cfg, cache,
                                                not args.quiet)
    for c in corpora:
        if c.name == "longmemeval":
            memories.update(dev_corpora.open_longmemeval(c, cfg, cache, args.extra_store))
            print(f"LongMemEval: {len(c.convs)} questions built")
    print(f"builds ready in {time.perf_counter() - t0:.1f} s ({len(built)} built now)")
    t0 = time.perf_counter()
    qs_by = {c.name: [q for conv in c.convs for q in collect(c, memories[(c.name, conv.namespace)], conv, cfg)]
             for c in corpora}
    qs = [q for c in names for q in qs_by[c]]
    print(f"features of {len(qs)} questions in {time.perf_counter() - t0:.1f} s; pool {args.pool}")
    t0 = time.perf_counter()
    folds = None
    if args.folds:  # the four-fold plan of research/nested_cv.py (LongMemEval: one namespace per question)
        folds = {}
        for c in corpora:
            fold_of = dev_corpora.fold_plan(c, args.folds)
            for conv in c.convs:
                for q in qs_by[c.name]:
                    if q.ns == conv.namespace:
                        folds[id(q)] = fold_of(conv, next(x for x in conv.questions if x.question == q.question))
    res = protocols(qs, args.pool, cfg, folds)
    print(f"trained and scored {1 + len({(q.corpus, q.ns) for q in qs}) + len(names)} models in "
          f"{time.perf_counter() - t0:.1f} s")
    rows = [fixed("plain MiniLM cosine, raw turns", qs_by, "dense"), fixed("weighted sum", qs_by, "shipped"),
            summarize("learned ranker", qs_by, res),
            auto("auto: learned on user-assistant and bursty histories, weighted on alternating dialogue",
                 qs_by, res, cfg)]
    print("\nrecall@10 of reachable gold")
    print_table(rows, names)
    calibration = calibrate(res["held_out"], f"leave one of {args.folds} folds out" if args.folds
                            else "leave one conversation out")
    print(f"\ncalibration on {calibration['rows']} held-out pool rows ({calibration['gold_rows']} gold): "
          f"P(gold) = 1 / (1 + exp(-({calibration['slope']:.4f} x score + {calibration['intercept']:.4f}))), "
          f"log loss {calibration['log_loss']}")
    for b in calibration["bins"]:
        print(f"  score {b['score'][0]:8.3f} to {b['score'][1]:8.3f}: {b['rows']:6d} rows, predicted "
              f"{b['predicted']:.3f}, observed {b['observed']:.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "calibration": calibration}, indent=1), encoding="utf-8")
    if args.write:
        path = Path(args.write)
        files = data_files([paths[n] for n in names])
        model = fit(qs, args.pool)
        row = next(r for r in rows if r["name"] == "learned ranker")
        meta = {"command": "python scripts/train_ranker.py " + " ".join(sys.argv[1:]),
                "data_sha256": data_sha256(files), "data_files": len(files), "data": {n: paths[n] for n in names},
                "library": "lightgbm", "library_version": md.version("lightgbm"), "kind": "lambdarank-bagged",
                "params": {**PARAMS, "seeds": list(BAGGED_SEEDS), "num_boost_round": ROUNDS,
                           "init_scale": INIT_SCALE},
                "questions": len(qs), "pool": args.pool,
                "cv": {c: {k: round(v, 2) for k, v in row["corpora"][c].items()
                           if k in ("in_sample", "cv10", "corpus_out")} for c in names}}
        doc = export(model, path, args.pool, meta, calibration)
        print(f"wrote {path} ({path.stat().st_size} bytes)")
        X, _, _ = design(qs, args.pool, train=False)
        gap = float(np.max(np.abs(parse_model(doc, path).predict(X) - model.predict(X))))
        print(f"the package's evaluator against lightgbm on {len(X)} rows: max |difference| {gap:.3g}")
        same, n = parity(qs, memories, cfg, path, model, args.pool)
        print(f"the written model == Memory.compile on {same}/{n}")
    for mem in memories.values():
        mem.store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
