"""MemPursuit: greedy evidence composition by sparse convex reconstruction of the query (MemPursuit paper).

The query embedding ``q`` is approximated by a convex combination of selected candidate
embeddings. At every step the candidate best aligned with what the current reconstruction
still misses (the residual ``r = q - X_S^T w``) joins the selection, and the weights of the
whole selection are refit on the probability simplex::

    w* = argmin ||q - X_S^T w||^2   subject to  w >= 0,  sum(w) = 1.

Only inner products are needed. With ``G = X X^T`` and ``b = X q``,
``||q - X_S^T w||^2 = q.q - 2 b_S.w + w^T G_SS w`` and the correlation of candidate ``j``
with the residual is ``<x_j, r> = b_j - (G_{j,S} w)``. Both are O(P |S|) per step once
``G`` and ``b`` are known; the refit is a small quadratic programme solved exactly by a
primal active-set method on its KKT system (O(|S|^3) per solve, O(K^4) over a run).

Stopping (documented choice, the paper gives tau = 1e-5 but not every detail):

* budget: ``k`` candidates selected;
* exhausted: every candidate selected;
* tau: after a candidate joins (from the second selection on), the squared residual norm
  improvement ``||r_prev||^2 - ||r_new||^2`` is computed. If it is below ``tau`` the new
  candidate is *removed again* and selection stops, so every kept candidate improved the
  reconstruction by at least ``tau``. The first candidate is always kept: a read of at least
  one memory is always returned when ``k >= 1`` (with a sum-to-one constraint the first
  residual can exceed ``||q||``, so comparing it against the empty reconstruction would
  be meaningless).

``residual_norms[t]`` is the Euclidean norm ``||r||`` after the ``t+1``-th kept selection,
computed from Gram entries; near a zero residual its absolute accuracy is about
``sqrt(machine eps) * ||q||`` (1e-8 for unit vectors) because of cancellation, which is far
below any useful ``tau`` (the stop rule compares squared norms, accurate to ~1e-16).
The refit can only lower the optimum when a candidate joins (the old weights stay
feasible with the new weight at zero), so the sequence is non-increasing up to rounding.

``mem_pursuit_reference`` is a deliberately naive twin used by tests and the benchmark:
it recomputes the residual from the full vectors and solves every refit from scratch
(scipy's NNLS identifies the support, then the KKT system on that support is solved and
certified exactly). scipy is imported only there.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from typing import Sequence

import numpy as np

logger = logging.getLogger(__name__)

__all__ = [
    "PursuitResult",
    "mem_pursuit",
    "mem_pursuit_reference",
    "simplex_least_squares",
    "simplex_least_squares_bruteforce",
]

STOP_BUDGET = "budget"
STOP_TAU = "tau"
STOP_EXHAUSTED = "exhausted"


@dataclass(frozen=True)
class PursuitResult:
    """Outcome of one MemPursuit run.

    ``indices``: selected rows of the candidate matrix, in selection order.
    ``weights``: simplex weights aligned with ``indices`` (>= 0, sum 1).
    ``residual_norms``: ``||q - X_S^T w||`` after each kept selection.
    ``stopped``: "budget", "tau" or "exhausted" (see the module docstring).
    """

    indices: tuple[int, ...]
    weights: np.ndarray
    residual_norms: tuple[float, ...]
    stopped: str


# --------------------------------------------------------------------------------------
# Input checks
# --------------------------------------------------------------------------------------


def _check_inputs(query_vec, cand_vecs, k: int, tau: float | None) -> tuple[np.ndarray, np.ndarray]:
    q = np.asarray(query_vec, dtype=np.float64)
    X = np.asarray(cand_vecs, dtype=np.float64)
    if q.ndim != 1:
        raise ValueError(f"mem_pursuit: query_vec must have shape (d,), got {q.shape}")
    if X.ndim != 2 or X.shape[1] != q.shape[0]:
        raise ValueError(f"mem_pursuit: cand_vecs must have shape (P, {q.shape[0]}), got {X.shape}")
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 0:
        raise ValueError(f"mem_pursuit: k must be a non-negative integer, got {k!r}")
    if tau is not None and not (tau >= 0.0):
        raise ValueError(f"mem_pursuit: tau must be >= 0 or None, got {tau!r}")
    if not np.isfinite(q).all():
        raise ValueError("mem_pursuit: query_vec must be finite")
    return q, X


def _check_start(start, P: int, k: int) -> list[int]:
    """``start`` as a list of row indices: distinct, in range, at most ``k`` of them."""
    forced = [int(i) for i in start]
    if len(set(forced)) != len(forced) or any(not 0 <= i < P for i in forced):
        raise ValueError(f"mem_pursuit: start must hold distinct rows in [0, {P}), got {list(start)!r}")
    if len(forced) > k:
        raise ValueError(f"mem_pursuit: start holds {len(forced)} rows, more than k={k}")
    return forced


# --------------------------------------------------------------------------------------
# The simplex-constrained least-squares refit
# --------------------------------------------------------------------------------------


def _solve_face(G: np.ndarray, b: np.ndarray, free: np.ndarray) -> tuple[np.ndarray, float]:
    """Minimiser over the face {w_i = 0 off ``free``, sum w = 1} of w^T G w - 2 b.w.

    KKT on the face: G_FF w_F - nu 1 = b_F and 1^T w_F = 1. Returns (w_F, nu). Falls back
    to least squares when the face system is singular (duplicate vectors on the face).
    """
    m = free.shape[0]
    kkt = np.empty((m + 1, m + 1))
    kkt[:m, :m] = G[free][:, free]
    kkt[:m, m] = -1.0
    kkt[m, :m] = 1.0
    kkt[m, m] = 0.0
    rhs = np.empty(m + 1)
    rhs[:m] = b[free]
    rhs[m] = 1.0
    try:
        sol = np.linalg.solve(kkt, rhs)
    except np.linalg.LinAlgError:
        sol = np.linalg.lstsq(kkt, rhs, rcond=None)[0]
    return sol[:m], float(sol[m])


def simplex_least_squares(
    G: np.ndarray,
    b: np.ndarray,
    w0: np.ndarray | None = None,
    *,
    enter: int | None = None,
    tol: float | None = None,
) -> np.ndarray:
    """Exact minimiser of ``w^T G w - 2 b.w`` over the probability simplex.

    Inputs: ``G`` (n, n) positive semidefinite Gram matrix of the selected vectors, ``b`` (n,)
    their inner products with the query, optional feasible warm start ``w0`` (>= 0, sum 1),
    optional index ``enter`` (a zero weight of ``w0``) released into the free set from the
    start: the greedy loop passes the newly selected candidate, which saves re-solving the
    previous face only to find that the newcomer's multiplier is negative. Starting with a
    zero weight free is safe: if the face optimum wants it negative, the ratio test takes a
    zero step and fixes it again.
    Output: weights (n,) on the simplex.

    Primal active-set method: solve the equality-constrained problem on the current free
    set; if that point leaves the simplex, walk towards it until the first weight hits zero
    and fix that weight; once the face optimum is feasible, release the bound weight with the
    most negative multiplier ``lambda_i = (G w - b)_i - nu``; stop when none is negative.
    For a positive definite ``G`` this terminates at the unique optimum.
    """
    n = b.shape[0]
    if n == 0:
        return np.zeros(0)
    if n == 1:
        return np.ones(1)
    if tol is None:
        tol = 1e-12 * max(1.0, float(np.max(np.abs(np.diag(G)))))
    if w0 is None:
        w = np.zeros(n)
        w[int(np.argmax(b - 0.5 * np.diag(G)))] = 1.0  # best single vertex
    else:
        w = np.array(w0, dtype=np.float64)
    is_free = w > 0.0
    if enter is not None:
        is_free[enter] = True
    max_iter = 10 * n + 50
    for _ in range(max_iter):
        free = np.flatnonzero(is_free)
        v, nu = _solve_face(G, b, free)
        if np.all(v >= -tol):
            w[:] = 0.0
            w[free] = np.maximum(v, 0.0)
            total = w.sum()
            w /= total  # clipping at -tol may leave the sum off by rounding
            lam = G @ w - b - nu
            lam[free] = 0.0
            j = int(np.argmin(lam))
            if lam[j] >= -tol:
                return w
            is_free[j] = True
            continue
        # Ratio test: the largest step towards v that keeps every free weight >= 0.
        cur = w[free]
        step = v - cur
        neg = step < 0.0
        ratios = np.full(free.shape[0], np.inf)
        ratios[neg] = cur[neg] / -step[neg]
        blocking = int(np.argmin(ratios))
        alpha = min(1.0, float(ratios[blocking]))
        w[free] = cur + alpha * step
        w[free[blocking]] = 0.0
        is_free[free[blocking]] = False
        w[w < 0.0] = 0.0
        w /= w.sum()
    logger.warning("simplex_least_squares: active-set did not converge in %d iterations", max_iter)
    return w


def simplex_least_squares_bruteforce(G: np.ndarray, b: np.ndarray, *, tol: float = 1e-10) -> np.ndarray:
    """Exact simplex least squares by enumerating every support (tiny n only: 2^n faces).

    For each non-empty subset F the face optimum is computed from its KKT system; the
    feasible face optimum with the lowest objective is the global optimum (the problem is
    convex and the optimum lies in the relative interior of some face).
    """
    n = b.shape[0]
    if n > 14:
        raise ValueError(f"simplex_least_squares_bruteforce: n={n} is too large to enumerate")
    best_w = None
    best_val = np.inf
    for size in range(1, n + 1):
        for subset in itertools.combinations(range(n), size):
            free = np.array(subset)
            v, _ = _solve_face(G, b, free)
            if np.any(v < -tol) or abs(v.sum() - 1.0) > 1e-8:
                continue
            w = np.zeros(n)
            w[free] = np.maximum(v, 0.0)
            w /= w.sum()
            val = float(w @ G @ w - 2.0 * b @ w)
            if val < best_val - 1e-15:
                best_val, best_w = val, w
    assert best_w is not None  # every vertex is a feasible face
    return best_w


# --------------------------------------------------------------------------------------
# Fast greedy pursuit over Gram entries
# --------------------------------------------------------------------------------------


def mem_pursuit(
    query_vec,
    cand_vecs,
    *,
    k: int,
    tau: float | None = 1e-5,
    gram: np.ndarray | None = None,
    start: Sequence[int] = (),
) -> PursuitResult:
    """Select up to ``k`` complementary candidates for ``query_vec`` by MemPursuit.

    Inputs: ``query_vec`` (d,), ``cand_vecs`` (P, d) (any float dtype; computed in float64),
    budget ``k``, adaptive-stop threshold ``tau`` on the squared residual improvement
    (``None`` disables it), optional precomputed ``gram = cand_vecs @ cand_vecs.T``,
    optional ``start``: distinct rows that are selected first, in that order, whatever
    their correlation (the greedy steps then measure the residual left after them; ``tau``
    is not applied to them; they count against ``k``).
    Output: :class:`PursuitResult`. Ties in the residual correlation go to the lowest
    candidate index.

    Cost: ``b = X q`` once (O(Pd)); the Gram matrix ``G = X X^T`` once (O(P^2 d)) unless
    the budget is small against the pool, in which case only the columns ``G[:, j]`` of
    the selected candidates are formed, one matrix-vector product each (O(PKd) in total,
    identical numbers, less work when ``4K <= P``). Then O(P |S|) per step for the
    correlations ``b - G[:, S] w`` plus the exact refit on ``G_SS``.
    """
    q, X = _check_inputs(query_vec, cand_vecs, k, tau)
    P = X.shape[0]
    forced = _check_start(start, P, k)
    budget = min(int(k), P)
    if budget == 0:
        return PursuitResult((), np.zeros(0), (), STOP_EXHAUSTED if P == 0 else STOP_BUDGET)
    if gram is not None:
        G = np.asarray(gram, dtype=np.float64)
        if G.shape != (P, P):
            raise ValueError(f"mem_pursuit: gram must have shape ({P}, {P}), got {G.shape}")
    elif 4 * budget > P:
        G = X @ X.T
    else:
        G = None  # columns formed on demand
    b = X @ q
    if not np.isfinite(b).all():  # a non-finite entry of X always reaches b
        raise ValueError("mem_pursuit: cand_vecs must be finite")
    qq = float(q @ q)

    selected: list[int] = []
    available = np.ones(P, dtype=bool)
    w = np.zeros(0)
    norms: list[float] = []
    prev_sq = qq
    corr = b  # <x_j, r> with r = q before anything is selected
    stopped = STOP_BUDGET if budget < P else STOP_EXHAUSTED
    # Columns G[:, j] of the selected candidates, contiguous for the correlation update.
    G_cols = np.empty((P, budget))
    while len(selected) < budget:
        t = len(selected)
        if t < len(forced):
            j = forced[t]
        else:
            masked = np.where(available, corr, -np.inf)
            j = int(np.argmax(masked))  # argmax returns the first maximum: lowest index on ties
        selected.append(j)
        available[j] = False
        G_cols[:, t] = G[:, j] if G is not None else X @ X[j]
        S = np.asarray(selected)
        G_SS = G_cols[S, : t + 1]
        b_S = b[S]
        if t == 0:
            w_new = np.ones(1)
        else:
            w0 = np.zeros(t + 1)
            w0[:t] = w
            w_new = simplex_least_squares(G_SS, b_S, w0, enter=t)
        sq = max(qq - 2.0 * float(b_S @ w_new) + float(w_new @ G_SS @ w_new), 0.0)
        if t >= max(1, len(forced)) and tau is not None and prev_sq - sq < tau:
            selected.pop()
            stopped = STOP_TAU
            break
        w = w_new
        prev_sq = sq
        norms.append(float(np.sqrt(sq)))
        corr = b - G_cols[:, : t + 1] @ w
    return PursuitResult(tuple(selected), w, tuple(norms), stopped)


# --------------------------------------------------------------------------------------
# Naive reference (tests and benchmark)
# --------------------------------------------------------------------------------------


def _reference_refit(A: np.ndarray, q: np.ndarray, tol: float = 1e-9) -> np.ndarray:
    """Simplex least squares of ``q`` on the columns of ``A`` (d, n), solved from scratch.

    scipy's NNLS on the system augmented with a heavily weighted sum-to-one row finds the
    support; the exact face optimum on that support is then computed from the KKT system
    and its optimality conditions are checked. If the certificate fails (a support the
    penalty got wrong), the support is enumerated exactly for small n.
    """
    try:
        from scipy.optimize import nnls
    except ImportError as exc:  # scipy is a test/bench dependency only
        from memcompile_local.errors import MissingExtraError

        raise MissingExtraError("scipy", "bench", "mem_pursuit_reference") from exc
    d, n = A.shape
    if n == 1:
        return np.ones(1)
    scale = max(1.0, float(np.abs(A).max()), float(np.abs(q).max())) * 1e4
    A_aug = np.vstack([A, np.full((1, n), scale)])
    q_aug = np.concatenate([q, [scale]])
    u, _ = nnls(A_aug, q_aug, maxiter=50 * n)
    G = A.T @ A
    b = A.T @ q
    free = np.flatnonzero(u > 1e-12)
    if free.size:
        v, nu = _solve_face(G, b, free)
        if np.all(v >= -tol):
            w = np.zeros(n)
            w[free] = np.maximum(v, 0.0)
            w /= w.sum()
            lam = G @ w - b - nu
            lam[free] = 0.0
            if lam.min() >= -tol * max(1.0, float(np.abs(G).max())):
                return w
    logger.info("reference refit: NNLS support not certified, enumerating supports (n=%d)", n)
    return simplex_least_squares_bruteforce(G, b)


def mem_pursuit_reference(
    query_vec,
    cand_vecs,
    *,
    k: int,
    tau: float | None = 1e-5,
    start: Sequence[int] = (),
) -> PursuitResult:
    """Straightforward MemPursuit with the same selection and stopping rules as :func:`mem_pursuit`
    (``start`` included).

    Every step recomputes the residual ``q - X_S^T w`` from the full vectors, the
    correlations as ``X r`` and the refit from scratch without warm start. Slow by design;
    used to check the fast version. Needs scipy.
    """
    q, X = _check_inputs(query_vec, cand_vecs, k, tau)
    if not np.isfinite(X).all():
        raise ValueError("mem_pursuit_reference: cand_vecs must be finite")
    P = X.shape[0]
    forced = _check_start(start, P, k)
    budget = min(int(k), P)
    if budget == 0:
        return PursuitResult((), np.zeros(0), (), STOP_EXHAUSTED if P == 0 else STOP_BUDGET)
    selected: list[int] = []
    w = np.zeros(0)
    norms: list[float] = []
    r = q.copy()
    prev_sq = float(q @ q)
    stopped = STOP_BUDGET if budget < P else STOP_EXHAUSTED
    while len(selected) < budget:
        if len(selected) < len(forced):
            j = forced[len(selected)]
        else:
            scores = X @ r
            scores[selected] = -np.inf
            j = int(np.argmax(scores))
        trial = selected + [j]
        A = X[trial].T
        w_new = _reference_refit(A, q)
        r_new = q - A @ w_new
        sq = float(r_new @ r_new)
        if len(selected) >= max(1, len(forced)) and tau is not None and prev_sq - sq < tau:
            stopped = STOP_TAU
            break
        selected, w, r, prev_sq = trial, w_new, r_new, sq
        norms.append(float(np.sqrt(sq)))
    return PursuitResult(tuple(selected), w, tuple(norms), stopped)
