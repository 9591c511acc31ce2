"""MemPursuit: fast Gram-based version against the naive reference and exact refits."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from memcompile_local.evidence.pursuit import (
    PursuitResult,
    mem_pursuit,
    mem_pursuit_reference,
    simplex_least_squares,
    simplex_least_squares_bruteforce,
)


def _unit_rows(rng, n, d):
    X = rng.standard_normal((n, d))
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def _instance(seed, P, d):
    rng = np.random.default_rng(seed)
    X = _unit_rows(rng, P, d)
    q = _unit_rows(rng, 1, d)[0]
    return q, X


def _objective(G, b, w):
    return float(w @ G @ w - 2.0 * b @ w)


@pytest.mark.parametrize(
    "seed,P,d,k",
    [(0, 12, 8, 5), (1, 30, 16, 8), (2, 50, 64, 12), (3, 80, 32, 20), (4, 120, 384, 15), (5, 7, 5, 7)],
)
def test_same_selection_as_reference(seed, P, d, k):
    q, X = _instance(seed, P, d)
    for tau in (None, 1e-5, 1e-2):
        fast = mem_pursuit(q, X, k=k, tau=tau)
        ref = mem_pursuit_reference(q, X, k=k, tau=tau)
        assert fast.indices == ref.indices, (tau, fast.indices, ref.indices)
        assert fast.stopped == ref.stopped
        np.testing.assert_allclose(fast.weights, ref.weights, atol=1e-8)
        np.testing.assert_allclose(fast.residual_norms, ref.residual_norms, atol=1e-8)


@pytest.mark.parametrize("seed", range(6))
def test_weights_on_simplex_and_residual_non_increasing(seed):
    q, X = _instance(100 + seed, 60, 24)
    res = mem_pursuit(q, X, k=15, tau=None)
    assert isinstance(res, PursuitResult)
    assert len(res.indices) == 15 and len(set(res.indices)) == 15
    assert res.weights.shape == (15,)
    assert np.all(res.weights >= 0.0)
    assert abs(res.weights.sum() - 1.0) <= 1e-9
    norms = np.array(res.residual_norms)
    assert np.all(np.diff(norms) <= 1e-12)
    # The reported norm is the true residual of the reported weights.
    r = q - X[list(res.indices)].T @ res.weights
    assert abs(np.linalg.norm(r) - norms[-1]) <= 1e-9


def test_first_pick_is_most_similar_and_ties_go_to_lowest_index():
    rng = np.random.default_rng(7)
    X = _unit_rows(rng, 10, 6)
    q = _unit_rows(rng, 1, 6)[0]
    X[3] = q  # exact copy of the query ...
    X[8] = q  # ... twice: the tie must resolve to index 3
    res = mem_pursuit(q, X, k=3, tau=None)
    assert res.indices[0] == 3
    # Norms come from Gram entries (q.q - 2 b.w + w'Gw): absolute accuracy ~ sqrt(eps).
    assert res.residual_norms[0] == pytest.approx(0.0, abs=1e-7)


def test_adaptive_stop_on_exact_convex_combination():
    rng = np.random.default_rng(11)
    X = _unit_rows(rng, 40, 32)
    q = 0.6 * X[5] + 0.4 * X[17]
    res = mem_pursuit(q, X, k=10, tau=1e-5)
    assert res.stopped == "tau"
    assert sorted(res.indices) == [5, 17]
    w = dict(zip(res.indices, res.weights))
    assert w[5] == pytest.approx(0.6, abs=1e-9)
    assert w[17] == pytest.approx(0.4, abs=1e-9)
    assert res.residual_norms[-1] < 1e-6
    # Without the adaptive rule the budget is spent.
    full = mem_pursuit(q, X, k=10, tau=None)
    assert full.stopped == "budget" and len(full.indices) == 10
    assert full.indices[:2] == res.indices
    ref = mem_pursuit_reference(q, X, k=10, tau=1e-5)
    assert ref.indices == res.indices and ref.stopped == "tau"


def test_budget_and_exhaustion():
    q, X = _instance(21, 6, 10)
    assert mem_pursuit(q, X, k=6, tau=None).stopped == "exhausted"
    assert mem_pursuit(q, X, k=60, tau=None).indices.__len__() == 6
    assert mem_pursuit(q, X, k=3, tau=None).stopped == "budget"
    empty = mem_pursuit(q, X, k=0)
    assert empty.indices == () and empty.weights.shape == (0,)
    none = mem_pursuit(q, X[:0], k=5)
    assert none.indices == () and none.stopped == "exhausted"


def test_gram_argument_and_lazy_columns_agree():
    q, X = _instance(31, 200, 48)
    lazy = mem_pursuit(q, X, k=10, tau=None)  # 4k <= P: columns formed on demand
    given = mem_pursuit(q, X, k=10, tau=None, gram=X @ X.T)
    assert lazy.indices == given.indices
    np.testing.assert_allclose(lazy.weights, given.weights, atol=1e-12)
    with pytest.raises(ValueError):
        mem_pursuit(q, X, k=10, gram=np.eye(3))


def test_bad_inputs_raise():
    q, X = _instance(41, 10, 4)
    with pytest.raises(ValueError):
        mem_pursuit(q[:3], X, k=2)
    with pytest.raises(ValueError):
        mem_pursuit(q, X, k=-1)
    with pytest.raises(ValueError):
        mem_pursuit(q, X, k=2, tau=-1.0)
    bad = X.copy()
    bad[4, 2] = np.nan
    with pytest.raises(ValueError):
        mem_pursuit(q, bad, k=2)


def _kkt_certificate(G, b, w, tol=1e-8):
    """Check the optimality conditions of the simplex QP directly."""
    grad = G @ w - b  # half the gradient of w'Gw - 2b'w
    free = w > 1e-12
    nu = float(np.mean(grad[free]))
    assert np.all(np.abs(grad[free] - nu) <= tol)  # equal on the support
    assert np.all(grad[~free] - nu >= -tol)  # no descent by entering a zero weight


@pytest.mark.parametrize("seed", range(25))
def test_refit_is_true_constrained_optimum_on_tiny_instances(seed):
    rng = np.random.default_rng(500 + seed)
    n = int(rng.integers(2, 7))
    d = int(rng.integers(n, 10))
    A = _unit_rows(rng, n, d)
    q = rng.standard_normal(d)
    q *= rng.uniform(0.2, 2.0) / np.linalg.norm(q)
    G, b = A @ A.T, A @ q
    w = simplex_least_squares(G, b)
    w_bf = simplex_least_squares_bruteforce(G, b)
    assert np.all(w >= 0) and abs(w.sum() - 1) <= 1e-9
    np.testing.assert_allclose(w, w_bf, atol=1e-8)
    _kkt_certificate(G, b, w)
    # No point of a fine grid on the simplex beats it.
    if n <= 3:
        best = min(
            _objective(G, b, np.array(c, dtype=float) / 20.0)
            for c in itertools.product(range(21), repeat=n)
            if sum(c) == 20
        )
        assert _objective(G, b, w) <= best + 1e-12


def test_refit_warm_start_and_entering_index_reach_same_optimum():
    rng = np.random.default_rng(77)
    A = _unit_rows(rng, 6, 8)
    q = rng.standard_normal(8)
    G, b = A @ A.T, A @ q
    cold = simplex_least_squares(G, b)
    w0 = np.zeros(6)
    w0[[1, 4]] = [0.5, 0.5]
    warm = simplex_least_squares(G, b, w0, enter=2)
    np.testing.assert_allclose(cold, warm, atol=1e-10)


def test_refit_handles_hand_computed_two_point_case():
    # Two orthonormal vectors, query (0.3, 0.9): unconstrained weights (0.3, 0.9) do not sum to
    # one; the simplex optimum projects onto w1 + w2 = 1: w = (0.2, 0.8).
    A = np.array([[1.0, 0.0], [0.0, 1.0]])
    q = np.array([0.3, 0.9])
    w = simplex_least_squares(A @ A.T, A @ q)
    np.testing.assert_allclose(w, [0.2, 0.8], atol=1e-12)
    # Query far on the side of the first vector: the second weight is clipped to zero.
    w = simplex_least_squares(A @ A.T, A @ np.array([2.0, -1.0]))
    np.testing.assert_allclose(w, [1.0, 0.0], atol=1e-12)


def test_duplicate_candidates_do_not_break_the_refit():
    rng = np.random.default_rng(91)
    X = _unit_rows(rng, 20, 12)
    X[9] = X[2]
    q = 0.5 * X[2] + 0.5 * X[14]
    res = mem_pursuit(q, X, k=6, tau=None)
    assert np.all(res.weights >= 0) and abs(res.weights.sum() - 1) <= 1e-9
    assert res.residual_norms[1] < 1e-6
    assert np.all(np.diff(res.residual_norms) <= 1e-7)  # sqrt(eps) noise near zero residual
