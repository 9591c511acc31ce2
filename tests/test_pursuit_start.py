"""MemPursuit started from given rows (``start``): what the fused selector's kept packets use."""

from __future__ import annotations

import numpy as np
import pytest

from memcompile_local.evidence.pursuit import mem_pursuit, mem_pursuit_reference, simplex_least_squares_bruteforce


def _unit_rows(rng, n, d):
    X = rng.normal(size=(n, d))
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def test_start_rows_come_first_and_the_next_pick_fits_their_residual():
    rng = np.random.default_rng(7)
    X = _unit_rows(rng, 12, 6)
    q = _unit_rows(rng, 1, 6)[0]
    start = [5, 2, 9]
    res = mem_pursuit(q, X, k=5, tau=None, start=start)
    assert list(res.indices[:3]) == start
    # The fourth pick maximizes the correlation with the residual of the exact simplex fit
    # of q on the start rows (computed here by enumerating supports).
    S = X[start]
    w = simplex_least_squares_bruteforce(S @ S.T, S @ q)
    corr = X @ (q - S.T @ w)
    corr[start] = -np.inf
    assert res.indices[3] == int(np.argmax(corr))
    assert len(res.residual_norms) == 5 and abs(res.weights.sum() - 1.0) < 1e-9


def test_fast_and_reference_pursuit_agree_with_a_start():
    scipy = pytest.importorskip("scipy")  # noqa: F841  (the reference refit needs it)
    rng = np.random.default_rng(11)
    for trial in range(20):
        P, d = int(rng.integers(4, 15)), int(rng.integers(3, 9))
        X = _unit_rows(rng, P, d)
        q = _unit_rows(rng, 1, d)[0]
        k = int(rng.integers(1, P + 1))
        start = list(rng.permutation(P)[: int(rng.integers(0, k + 1))])
        for tau in (None, 1e-5, 0.05):
            fast = mem_pursuit(q, X, k=k, tau=tau, start=start)
            ref = mem_pursuit_reference(q, X, k=k, tau=tau, start=start)
            assert fast.indices == ref.indices, (trial, tau)
            assert fast.stopped == ref.stopped
            assert np.allclose(fast.weights, ref.weights, atol=1e-6)
            assert list(fast.indices[: len(start)]) == [int(i) for i in start]


def test_tau_never_removes_a_start_row():
    q = np.asarray([1.0, 0.0, 0.0])
    X = np.asarray([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    # The second start row is a duplicate (no improvement); it stays, and pursuit stops at
    # the next row, which cannot improve an exact reconstruction either.
    res = mem_pursuit(q, X, k=3, tau=1e-5, start=[0, 1])
    assert res.indices == (0, 1) and res.stopped == "tau"
    # Without a start the duplicate is what tau stops at.
    assert mem_pursuit(q, X, k=3, tau=1e-5).indices == (0,)


@pytest.mark.parametrize("start, k", [([0, 0], 3), ([4], 3), ([-1], 3), ([0, 1, 2], 2)])
def test_bad_start_is_refused(start, k):
    X = np.eye(4)[:3]
    with pytest.raises(ValueError, match="start"):
        mem_pursuit(np.ones(4) / 2, X, k=k, start=start)
