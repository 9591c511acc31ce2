"""The learned ranker of the fused selector (``FusionConfig.ranker = "learned"``).

A model file (``models/ranker-v4.json``; written by ``scripts/train_ranker.py``) holds either
gradient-boosted regression trees exported from LightGBM's LambdaRank or a linear model, the
feature names it reads in order (``features.FEATURE_NAMES``), how it was trained (command,
sha256 of the development data, library and version, hyperparameters, cross-validated
figures) and, optionally, its calibration. This module loads and checks that file and
evaluates it with numpy alone: the training library is never imported at query time.

At query time the ranker scores the ``pool`` best turns of the weighted sum
(``features.query_features``) and reorders them; the other turns follow in weighted-sum order.
The fused total that orders the selection is that order (the turn placed first gets N, the
next N - 1, and so on; ties of the model's score break by the weighted-sum order), so
``retriever.select_rows`` keeps exactly the ranker's order; the model's own scores of the pool
are in the ``learned`` channel.

The score a search returns (``LearnedScores.relevance``) is the calibrated probability that the
turn is gold evidence for the question: a logistic curve of the model's output, fit by the
training script on the held-out (cross-validated) outputs of the development corpora's pools
(``calibration`` in the model file). A turn outside the pool was not judged and scores 0. A
model file without a calibration gives the logistic of its raw output, which keeps the order
and has no meaning as a probability.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import ConfigError
from ..evidence.relevance import ChannelValue, Explanation
from ..types import SourcePacket
from .channels import EXPLAIN_NAMES, FusedScores
from .features import FEATURE_NAMES, query_features
from .index import FusionIndex

FORMAT = "memcompile-ranker"
FORMAT_VERSION = 1
DEFAULT_MODEL = Path(__file__).parent / "models" / "ranker-v4.json"
# The columns a model may read that need vectors of their own at build time.
PLAIN_TURN_FEATURES = ("raw_cos", "raw_cos_gap")
# LightGBM's tolerance for "zero" under missing_type Zero (its kZeroThreshold).
_ZERO = 1e-35
_MISSING = {"None": 0, "Zero": 1, "NaN": 2}


class RankerModelError(ConfigError):
    """A ranker model file that cannot be used: names the file, the field and what was expected."""

    def __init__(self, path: str | Path, field: str, expected: str, got: Any):
        self.path, self.field, self.expected, self.got = str(path), field, expected, got
        shown = repr(got)
        super().__init__(f"{path}: field {field!r}: expected {expected}, got {shown[:120]}")


@dataclass(frozen=True)
class Trees:
    """Regression trees padded into arrays (T trees, M internal nodes, L leaves at most).

    Children: a value >= 0 is an internal node, a value < 0 is leaf ``~value``; ``root`` is 0,
    or -1 for a tree that is a single leaf."""

    root: np.ndarray  # (T,) int64
    feature: np.ndarray  # (T, M) int64
    threshold: np.ndarray  # (T, M) float64
    left: np.ndarray  # (T, M) int64
    right: np.ndarray  # (T, M) int64
    default_left: np.ndarray  # (T, M) bool
    missing: np.ndarray  # (T, M) int8: 0 None, 1 Zero, 2 NaN
    leaf_value: np.ndarray  # (T, L) float64
    depth: int  # the longest root-to-leaf path, in internal nodes
    # For the bitmask evaluation (``_exit_leaves``), None when a tree has over 64 leaves: bit i
    # is a tree's i-th leaf from the left; ``right_mask`` keeps every leaf outside a split's left
    # subtree (all bits for padding); ``leaf_at`` maps a bit to its leaf. The smallest unsigned
    # type that holds L bits (uint8 for the shipped 7-leaf trees) keeps the (T, M, R) masks small.
    right_mask: np.ndarray | None = None  # (T, M) uint8 to uint64
    leaf_at: np.ndarray | None = None  # (T, bits) int64

    def predict(self, X: np.ndarray) -> np.ndarray:
        """The sum of the trees' leaf values for each row of ``X`` (float64), as LightGBM's
        ``predict(raw_score=True)``: go left when the value is <= the threshold; a missing
        value (NaN, or zero under missing_type Zero) goes the split's default way, and NaN
        under missing_type None is read as 0."""
        X = np.asarray(X, dtype=np.float64)
        T, R = len(self.root), X.shape[0]
        if T == 0 or R == 0:
            return np.zeros(R)
        M = self.feature.shape[1]
        # Every split's decision for every row at once ((T*M, R); padding slots decide
        # nonsense nobody reads). The exit leaves then come from bitmasks (_exit_leaves), or,
        # for trees of over 64 leaves, from a walk that only gathers decisions: a thousand
        # trees cost a few array passes, not a few per tree level and tree.
        x = np.ascontiguousarray(X.T)[self.feature.ravel()]  # (T*M, R), C order for the reshapes below
        miss = self.missing.reshape(-1, 1)
        nan = np.isnan(x)
        if nan.any() or miss.any():  # the shipped model's splits are all missing_type None
            x = np.where(nan & (miss == 0), 0.0, x)
            is_missing = (nan & (miss == 2)) | ((miss == 1) & (nan | (np.abs(x) <= _ZERO)))
            go_left = np.where(is_missing, self.default_left.reshape(-1, 1), x <= self.threshold.reshape(-1, 1))
        else:
            go_left = x <= self.threshold.reshape(-1, 1)
        if self.right_mask is not None:
            leaf = self._exit_leaves(go_left.reshape(T, M, R))
            return self.leaf_value[np.arange(T)[:, None], leaf].sum(axis=0)
        go_left = go_left.ravel()
        left, right = self.left.ravel(), self.right.ravel()
        base = (np.arange(T) * M)[:, None]
        cols = np.arange(R)[None, :]
        node = np.broadcast_to(self.root[:, None], (T, R)).copy()
        for _ in range(self.depth):
            inner = node >= 0
            if not inner.any():
                break
            at = base + np.where(inner, node, 0)
            nxt = np.where(go_left[at * R + cols], left[at], right[at])
            node = np.where(inner, nxt, node)
        return self.leaf_value[np.arange(T)[:, None], ~node].sum(axis=0)

    def _exit_leaves(self, go_left: np.ndarray) -> np.ndarray:
        """(T, R) leaf of every tree and row without walking (the QuickScorer argument): each
        split that sends a row right rules out the leaves of its left subtree, and the row's
        leaf is the leftmost one no split ruled out, because every leaf left of it lies in the
        left subtree of a split on its path that went right, and no split on its path rules
        it out."""
        every = np.iinfo(self.right_mask.dtype).max
        kept = np.bitwise_and.reduce(np.where(go_left, every, self.right_mask[:, :, None]), axis=1)
        lowest = kept & (~kept + kept.dtype.type(1))
        bit = np.log2(lowest.astype(np.float64)).astype(np.int64)  # a power of two: exact
        return np.take_along_axis(self.leaf_at, bit, axis=1)


@dataclass(frozen=True)
class Linear:
    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: float

    def predict(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        return ((X - self.mean) / self.scale) @ self.coef + self.intercept


@dataclass(frozen=True)
class RankerModel:
    path: str
    kind: str  # "trees" or "linear"
    features: tuple[str, ...]  # the columns it reads, by name, in its own order
    pool: int  # candidates reordered per question
    scorer: Trees | Linear
    training: dict
    # The trees' starting score: ``init_scale`` times feature ``init_feature`` (the weighted sum,
    # so the trees learn corrections to it); scale 0: none.
    init_feature: int = 0  # a column of the model's own features
    init_scale: float = 0.0
    # Platt calibration (slope, intercept): P(gold) = 1 / (1 + exp(-(slope * score + intercept))).
    calibration: tuple[float, float] | None = None

    @cached_property  # read by every question: looked up once per model
    def columns(self) -> list[int]:
        """The model's features as columns of ``features.FEATURE_NAMES`` (query_features' matrix)."""
        return [FEATURE_NAMES.index(f) for f in self.features]

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Scores of the rows of ``X``, a matrix of the model's own columns (``columns``)."""
        X = np.asarray(X, dtype=np.float64)
        out = self.scorer.predict(X)
        return out + self.init_scale * X[:, self.init_feature] if self.init_scale else out

    def probability(self, scores: np.ndarray) -> np.ndarray:
        """``predict``'s scores as probabilities in [0, 1], increasing with the score: the
        calibration's logistic curve, or the plain logistic of the score without one."""
        slope, intercept = self.calibration if self.calibration is not None else (1.0, 0.0)
        z = slope * np.asarray(scores, dtype=np.float64) + intercept
        return 0.5 * (1.0 + np.tanh(0.5 * z))  # the logistic, without overflow for large |z|


def _need(path, doc: dict, field: str, kind, expected: str):
    if field not in doc:
        raise RankerModelError(path, field, expected, "nothing (the field is missing)")
    value = doc[field]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise RankerModelError(path, field, expected, value)
    return value


def _numbers(path, field: str, value, n: int | None = None, integer: bool = False) -> np.ndarray:
    ok = isinstance(value, list) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    if ok and integer:
        ok = all(isinstance(v, int) for v in value)
    if not ok or (n is not None and len(value) != n):
        size = f" of {n}" if n is not None else ""
        raise RankerModelError(path, field, f"a list{size} {'integers' if integer else 'numbers'}", value)
    arr = np.asarray(value, dtype=np.int64 if integer else np.float64)
    if not integer and not np.isfinite(arr).all():
        raise RankerModelError(path, field, "finite numbers", value)
    return arr


def _trees(path, docs: list, n_features: int) -> Trees:
    parsed = []
    for t, tree in enumerate(docs):
        where = f"trees[{t}]"
        if not isinstance(tree, dict):
            raise RankerModelError(path, where, "an object", tree)
        leaves = _numbers(path, f"{where}.leaf_value", tree.get("leaf_value"))
        feat = _numbers(path, f"{where}.feature", tree.get("feature"), integer=True)
        m = len(feat)
        thr = _numbers(path, f"{where}.threshold", tree.get("threshold"), m)
        left = _numbers(path, f"{where}.left", tree.get("left"), m, integer=True)
        right = _numbers(path, f"{where}.right", tree.get("right"), m, integer=True)
        dleft = tree.get("default_left")
        if not isinstance(dleft, list) or len(dleft) != m or not all(isinstance(v, bool) for v in dleft):
            raise RankerModelError(path, f"{where}.default_left", f"a list of {m} booleans", dleft)
        miss = tree.get("missing")
        if not isinstance(miss, list) or len(miss) != m or not all(v in _MISSING for v in miss):
            raise RankerModelError(path, f"{where}.missing", f"a list of {m} of {sorted(_MISSING)}", miss)
        if len(leaves) != m + 1:
            raise RankerModelError(path, f"{where}.leaf_value", f"{m + 1} leaves for {m} splits", len(leaves))
        if m and (feat.min() < 0 or feat.max() >= n_features):
            raise RankerModelError(path, f"{where}.feature", f"feature indices in [0, {n_features})", feat.tolist())
        for name, child in (("left", left), ("right", right)):
            if m and (child.max() >= m or child.min() < -(m + 1)):
                raise RankerModelError(path, f"{where}.{name}", f"children in [-{m + 1}, {m})", child.tolist())
        depth = _depth(path, where, left, right) if m else 0
        parsed.append((feat, thr, left, right, np.asarray(dleft), np.asarray([_MISSING[v] for v in miss]), leaves,
                       depth))
    T = len(parsed)
    M = max([len(p[0]) for p in parsed] + [1])
    L = max([len(p[6]) for p in parsed] + [1])
    feature = np.zeros((T, M), np.int64)
    threshold = np.zeros((T, M))
    left = np.full((T, M), -1, np.int64)
    right = np.full((T, M), -1, np.int64)
    default_left = np.zeros((T, M), bool)
    missing = np.zeros((T, M), np.int8)
    leaf_value = np.zeros((T, L))
    root = np.zeros(T, np.int64)
    for i, (f, th, lf, rt, dl, ms, lv, _) in enumerate(parsed):
        m = len(f)
        feature[i, :m], threshold[i, :m], left[i, :m], right[i, :m] = f, th, lf, rt
        default_left[i, :m], missing[i, :m] = dl, ms
        leaf_value[i, : len(lv)] = lv
        root[i] = 0 if m else -1
    masks = None
    if L <= 64:
        kind = next(np.dtype(f"uint{b}") for b in (8, 16, 32, 64) if L <= b)
        masks = np.full((T, M), np.iinfo(kind).max, kind), np.zeros((T, kind.itemsize * 8), np.int64)
        for i, p in enumerate(parsed):
            _leaf_bits(p[2], p[3], masks[0][i], masks[1][i])
    return Trees(root, feature, threshold, left, right, default_left, missing, leaf_value,
                 max([p[7] for p in parsed] + [0]), *(masks or (None, None)))


def _leaf_bits(left: np.ndarray, right: np.ndarray, right_mask: np.ndarray, leaf_at: np.ndarray) -> None:
    """Fill one tree's ``right_mask`` and ``leaf_at`` rows (Trees): leaves numbered left to right."""
    order: list[int] = []

    def walk(n: int) -> int:  # the bits of the leaves under child ``n``
        if n < 0:
            order.append(~n)
            return 1 << (len(order) - 1)
        lbits = walk(int(left[n]))
        rbits = walk(int(right[n]))
        right_mask[n] = int(np.iinfo(right_mask.dtype).max) & ~lbits
        return lbits | rbits

    walk(0 if len(left) else -1)
    leaf_at[: len(order)] = order


def _depth(path, where: str, left: np.ndarray, right: np.ndarray) -> int:
    """Longest path from node 0, checking that every node is reached once (a tree, no cycle)."""
    seen = np.zeros(len(left), bool)
    depth, level = 0, [0]
    while level:
        depth += 1
        nxt = []
        for n in level:
            if seen[n]:
                raise RankerModelError(path, f"{where}.left/right", "a tree (each node reached once)", int(n))
            seen[n] = True
            nxt += [int(c) for c in (left[n], right[n]) if c >= 0]
        level = nxt
    if not seen.all():
        raise RankerModelError(path, f"{where}.left/right", "every node reachable from node 0",
                               np.flatnonzero(~seen).tolist())
    return depth


def parse_model(doc: Any, path: str | Path = "<model>") -> RankerModel:
    """A ``RankerModel`` from the decoded JSON ``doc`` of a model file; ``RankerModelError``
    names the first field that is not what the format says."""
    if not isinstance(doc, dict):
        raise RankerModelError(path, "$", "a JSON object", type(doc).__name__)
    if doc.get("format") != FORMAT:
        raise RankerModelError(path, "format", repr(FORMAT), doc.get("format"))
    version = doc.get("format_version")
    if version != FORMAT_VERSION:
        raise RankerModelError(path, "format_version", f"{FORMAT_VERSION} (the version this package reads)", version)
    # A model reads any of the package's features by name (the shipped ranker-v4 the first 27),
    # so a model trained before a column was added keeps loading.
    features = _need(path, doc, "features", list, "a list of feature names")
    unknown = [f for f in features if f not in FEATURE_NAMES]
    if not features or unknown or len(set(features)) != len(features):
        raise RankerModelError(path, "features", f"distinct names of the package's features {list(FEATURE_NAMES)} "
                               f"(unknown {unknown})", features)
    pool = _need(path, doc, "pool", int, "a positive integer")
    if pool < 1:
        raise RankerModelError(path, "pool", "a positive integer", pool)
    kind = doc.get("kind")
    n = len(features)
    if kind == "trees":
        scorer: Trees | Linear = _trees(path, _need(path, doc, "trees", list, "a list of trees"), n)
    elif kind == "linear":
        lin = _need(path, doc, "linear", dict, "an object with mean, scale, coef, intercept")
        scale = _numbers(path, "linear.scale", lin.get("scale"), n)
        if (scale <= 0).any():
            raise RankerModelError(path, "linear.scale", "positive numbers", lin.get("scale"))
        intercept = lin.get("intercept")
        if not isinstance(intercept, (int, float)) or isinstance(intercept, bool):
            raise RankerModelError(path, "linear.intercept", "a number", intercept)
        scorer = Linear(_numbers(path, "linear.mean", lin.get("mean"), n), scale,
                        _numbers(path, "linear.coef", lin.get("coef"), n), float(intercept))
    else:
        raise RankerModelError(path, "kind", '"trees" or "linear"', kind)
    training = doc.get("training", {})
    if not isinstance(training, dict):
        raise RankerModelError(path, "training", "an object", training)
    init = doc.get("init_score", {"feature": features[0], "scale": 0.0})
    if not isinstance(init, dict) or init.get("feature") not in features:
        raise RankerModelError(path, "init_score.feature", f"one of the model's features {list(features)}",
                               init.get("feature") if isinstance(init, dict) else init)
    scale = init.get("scale")
    if not isinstance(scale, (int, float)) or isinstance(scale, bool) or not np.isfinite(scale):
        raise RankerModelError(path, "init_score.scale", "a finite number", scale)
    return RankerModel(str(path), kind, tuple(features), pool, scorer, training,
                       features.index(init["feature"]), float(scale), _calibration(path, doc.get("calibration")))


def _calibration(path, cal: Any) -> tuple[float, float] | None:
    """(slope, intercept) of a model file's ``calibration`` object, or None when it has none."""
    if cal is None:
        return None
    if not isinstance(cal, dict) or cal.get("method") != "platt":
        raise RankerModelError(path, "calibration.method", '"platt"', cal.get("method") if isinstance(cal, dict)
                               else cal)
    out = []
    for name in ("slope", "intercept"):
        v = cal.get(name)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not np.isfinite(v):
            raise RankerModelError(path, f"calibration.{name}", "a finite number", v)
        out.append(float(v))
    if out[0] <= 0:
        raise RankerModelError(path, "calibration.slope", "a positive number (a higher score is more likely gold)",
                               out[0])
    return out[0], out[1]


_CACHE: dict[str, RankerModel] = {}
_CACHE_LOCK = threading.Lock()


def load_model(path: str | Path | None = None) -> RankerModel:
    """The model file at ``path`` (default: the shipped ``models/ranker-v4.json``), read and
    checked once per process (models are immutable, so threads share one)."""
    p = Path(path).expanduser() if path else DEFAULT_MODEL
    key = str(p.resolve()) if p.exists() else str(p)
    with _CACHE_LOCK:
        model = _CACHE.get(key)
        if model is None:
            try:
                text = p.read_text(encoding="utf-8")
            except OSError as e:
                raise RankerModelError(p, "$", "a readable model file", str(e)) from None
            try:
                doc = json.loads(text)
            except json.JSONDecodeError as e:
                raise RankerModelError(p, "$", "JSON", f"{e.msg} at line {e.lineno}") from None
            model = _CACHE[key] = parse_model(doc, p)
    return model


def reads_plain_turns(path: str | Path | None = None) -> bool:
    """Whether the model file at ``path`` (default: the shipped one) reads the plain-turn cosine
    columns, so a build must embed each turn's plain text (``build.stages.dense_plan``)."""
    return any(f in PLAIN_TURN_FEATURES for f in load_model(path).features)


def ordered_total(n: int, rows: np.ndarray, scores: np.ndarray, order: np.ndarray) -> np.ndarray:
    """The fused total that puts ``rows`` (a head of ``order``, the weighted-sum order) by
    descending ``scores`` (ties: their place in ``order``), then the rest of ``order``:
    the first turn gets n, the last 1."""
    head = rows[np.lexsort((np.arange(len(rows)), -np.asarray(scores, dtype=np.float64)))]
    ranked = np.concatenate([head, order[len(rows):]])
    total = np.empty(n)
    total[ranked] = np.arange(n, 0, -1, dtype=np.float64)
    return total


# The feature columns ``explain`` shows for a turn the ranker judged, by the name a client reads.
EXPLAIN_FEATURES = (("bm25_turn", "raw_bm25"), (EXPLAIN_NAMES["lexical"], "lexical"), ("dense_turn", "cos_z"),
                    ("dense_context", "cos_context"), ("speaker", "speaker"), ("temporal", "temporal"),
                    ("time_match", "time_match"), ("weighted", "fused"))
_EXPLAIN_COLUMNS = tuple((name, FEATURE_NAMES.index(col)) for name, col in EXPLAIN_FEATURES)


@dataclass(frozen=True)
class LearnedScores(FusedScores):
    """``FusedScores`` of the learned ranker: ``total`` is its order; ``raw`` the model's score
    of each pool turn (NaN outside the pool); ``matrix`` the feature rows it read, one per
    pool turn (``pool_row``: the matrix row of each index row, -1 outside the pool)."""

    raw: np.ndarray = field(default_factory=lambda: np.zeros(0))
    probability: np.ndarray = field(default_factory=lambda: np.zeros(0))
    matrix: np.ndarray = field(default_factory=lambda: np.zeros((0, len(FEATURE_NAMES))))
    pool_row: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    selector = "learned"

    @property
    def relevance(self) -> np.ndarray:  # type: ignore[override]
        """The calibrated probability of each pool turn (see the module docstring); 0 outside."""
        return self.probability

    def explanation(self, row: int) -> Explanation:
        """The features the ranker read for packet ``row`` and its output (no contributions: the
        trees are not a sum over channels); outside the pool, the weighted sum alone."""
        at = int(self.pool_row[row])
        weighted = float(self.channels["weighted"][row])
        if at < 0:
            return Explanation(self.selector, None, (ChannelValue("weighted", weighted, None),))
        out = [ChannelValue(name, float(self.matrix[at, col]), None) for name, col in _EXPLAIN_COLUMNS]
        out.append(ChannelValue("ranker", float(self.raw[row]), None))
        return Explanation(self.selector, float(self.raw[row]), tuple(out))


def learned_scores(index: FusionIndex, packets: Sequence[SourcePacket], question: str, query_vec: np.ndarray | None,
                   cfg, model: RankerModel, *, anchor=None) -> LearnedScores:
    """The fused scores of every packet under the learned ranker (see the module docstring)."""
    qf = query_features(index, packets, question, query_vec, cfg, model.pool, anchor=anchor)
    learned = model.predict(qf.matrix[:, model.columns])
    n = len(index.packet_ids)
    full = np.full(n, np.nan)
    full[qf.rows] = learned
    probability = np.zeros(n)
    probability[qf.rows] = model.probability(learned)
    pool_row = np.full(n, -1, dtype=np.int64)
    pool_row[qf.rows] = np.arange(len(qf.rows))
    return LearnedScores(total=ordered_total(n, qf.rows, learned, qf.order),
                         channels={"weighted": qf.fused, "learned": full}, raw=full, probability=probability,
                         matrix=qf.matrix, pool_row=pool_row)
