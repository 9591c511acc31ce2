"""The experiment variants of the learned ranker's training (research/train_ranker_variants.py):
the shrinkage choice, corpus-balanced weights, conversation subsets and the monotone setting.
Research code: marked ``research``, run in CI like the rest."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

from memcompile_local.fused.features import FEATURE_NAMES

pytestmark = pytest.mark.research
F = len(FEATURE_NAMES)


def _train_ranker():
    pytest.importorskip("lightgbm", reason="lightgbm (the train extra) is not installed")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "research"))
    import train_ranker_variants
    return train_ranker_variants


def test_shrinkage_choice_takes_the_best_worst_corpus_gain_and_keeps_alpha_0_on_ties():
    tr = _train_ranker()
    qs = [dataclasses.make_dataclass("Q", ["corpus"])(c) for c in ("a", "a", "b", "b")]
    grid = [("k", 0.0), ("k", 0.5), ("k", 1.0)]
    everyone = np.ones(4, bool)
    rec = {("k", 0.0): np.asarray([0.5, 0.5, 0.5, 0.5]),
           ("k", 0.5): np.asarray([0.5, 0.6, 0.6, 0.5]),   # +0.05 on both corpora
           ("k", 1.0): np.asarray([1.0, 1.0, 0.4, 0.5])}   # +0.5 on a, -0.05 on b
    assert tr.choose(rec, qs, everyone, grid) == ("k", 0.5)
    # Only corpus a's questions: alpha 1 gains most there.
    assert tr.choose(rec, qs, np.asarray([True, True, False, False]), grid) == ("k", 1.0)
    flat = {p: np.full(4, 0.5) for p in grid}
    assert tr.choose(flat, qs, everyone, grid) == ("k", 0.0)


def test_corpus_balanced_weights_give_each_corpus_the_same_total():
    tr = _train_ranker()
    Q = dataclasses.make_dataclass("Q", ["corpus"])
    qs = [Q("locomo")] * 3 + [Q("beam")]
    groups = [2, 3, 1, 4]
    w = tr.corpus_weights(qs, groups, "corpus")
    per_q = np.add.reduceat(w, np.cumsum([0] + groups[:-1])) / groups  # constant within a question
    assert np.allclose(per_q, [2 / 3, 2 / 3, 2 / 3, 2.0]) and np.isclose(per_q[:3].sum(), per_q[3])
    assert tr.corpus_weights(qs, groups, "none") is None
    assert tr.corpus_weights(qs, groups, "locomo").tolist() == [2.0] * 6 + [1.0] * 4


def test_conversation_subsets_leave_out_a_share_of_every_corpus_and_keep_one():
    tr = _train_ranker()
    Q = dataclasses.make_dataclass("Q", ["corpus", "ns"])
    qs = [Q("beam", f"b{i}") for i in range(10) for _ in range(2)] + [Q("locomo", f"l{i}") for i in range(4)] \
        + [Q("solo", "s0")]
    subsets = tr.conversation_subsets(qs, range(10), drop=0.3)
    for keep in subsets:
        by = {c: sum(k[0] == c for k in keep) for c in ("beam", "locomo", "solo")}
        assert by == {"beam": 7, "locomo": 3, "solo": 1}  # round(0.3 n) out; a lone conversation stays
    assert len({frozenset(k) for k in subsets}) > 1  # the seeds draw different subsets
    shuffled = qs[18::-1] + qs[19:]  # beam's questions reversed, the corpora still in their order
    assert tr.conversation_subsets(shuffled, range(10), drop=0.3) == subsets


def test_monotone_kind_cannot_rank_a_better_match_lower():
    tr = _train_ranker()
    rng = np.random.default_rng(3)
    X = rng.random((800, F))
    bm25, rank = FEATURE_NAMES.index("raw_bm25"), FEATURE_NAMES.index("fused_rank")
    # Gold in the middle of raw_bm25 and of fused_rank: a free tree learns the bump.
    y = ((np.abs(X[:, bm25] - 0.5) < 0.15) & (np.abs(X[:, rank] - 0.5) < 0.3)).astype(float)
    groups = [20] * 40
    probe = np.repeat(rng.random((1, F)), 21, axis=0)
    grid = np.linspace(0.0, 1.0, 21)

    def curves(kind):
        model = tr.MODELS[kind]().fit(X, y, groups)
        out = []
        for col in (bm25, rank):
            P = probe.copy()
            P[:, col] = grid
            out.append(model.parts(P)[1])  # the trees alone (the init score is fused, held fixed)
        return out

    up, down = curves("lambdarank-bagged-monotone")
    assert np.all(np.diff(up) >= -1e-12) and np.all(np.diff(down) <= 1e-12)
    assert tr.monotone_constraints(F + 2)[bm25] == 1 and tr.monotone_constraints(F + 2)[-2:] == [0, 0]
    free_up, free_down = curves("lambdarank-bagged")  # the same data without the constraint does bend
    assert np.any(np.diff(free_up) < -1e-9) or np.any(np.diff(free_down) > 1e-9)
