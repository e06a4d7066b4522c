"""Compiled inner loops of the FAST-style schedule (numba, ``cache=True``), used when numba imports.

``heavy_stages``: the whole greedy BvN decomposition with HEAVY matchings for a few servers, where
Python's per-stage overhead (a scipy call, list bookkeeping) costs more than the matching itself.
The matching is the minimum-cost assignment on costs ``1/M[i, j]`` (zero entries: off the support),
found with the Hungarian algorithm with potentials (Kuhn-Munkres; the O(n^3) shortest-augmenting-
path form of Jonker and Volgenant 1987), the same optimum scipy's ``linear_sum_assignment`` finds
(ties may break differently). ``heavy_update``: one stage's bookkeeping for many servers, between
two scipy calls. When numba is missing, ``AVAILABLE`` is False and schedule.py runs Python.
"""

from __future__ import annotations

import numpy as np

try:
    from numba import njit

    AVAILABLE = True
except ImportError:  # pragma: no cover - numba is a dependency; this keeps the module importable without it
    AVAILABLE = False

    def njit(*args, **kwargs):
        return lambda f: f

_OFF = 1e12  # cost of an entry off the support: above any finite total (each 1/x <= 1, n terms)


@njit(cache=True)
def _assignment(cost: np.ndarray, p: np.ndarray, way: np.ndarray, u: np.ndarray, v: np.ndarray,
                minv: np.ndarray, used: np.ndarray, out: np.ndarray) -> None:
    """Minimum-cost perfect assignment of the square ``cost``: row i -> column out[i] (1-based work arrays)."""
    n = cost.shape[0]
    inf = 1e300
    u[:] = 0.0
    v[:] = 0.0
    p[:] = 0
    for i in range(1, n + 1):
        p[0] = i
        j0 = 0
        minv[:] = inf
        used[:] = False
        while True:  # grow the shortest-path tree from row i until a free column is reached
            used[j0] = True
            i0 = p[j0]
            delta = inf
            j1 = 0
            for j in range(1, n + 1):
                if not used[j]:
                    cur = cost[i0 - 1, j - 1] - u[i0] - v[j]  # reduced cost
                    if cur < minv[j]:
                        minv[j] = cur
                        way[j] = j0
                    if minv[j] < delta:
                        delta = minv[j]
                        j1 = j
            for j in range(n + 1):  # keep the potentials feasible
                if used[j]:
                    u[p[j]] += delta
                    v[j] -= delta
                else:
                    minv[j] -= delta
            j0 = j1
            if p[j0] == 0:
                break
        while True:  # flip the augmenting path
            j1 = way[j0]
            p[j0] = p[j1]
            j0 = j1
            if j0 == 0:
                break
    for j in range(1, n + 1):
        out[p[j] - 1] = j - 1


@njit(cache=True)
def heavy_stages(R: np.ndarray, lam: int) -> tuple[np.ndarray, np.ndarray]:
    """Greedy BvN of the int64 matrix ``R`` (equal line sums ``lam``; consumed) with HEAVY matchings.

    Returns ``(perms (K, n), weights (K,))``; the stage weight is the lightest matched entry
    (formulas.md 7.3 step 4).
    """
    n = R.shape[0]
    cost = np.empty((n, n))
    for i in range(n):
        for j in range(n):
            cost[i, j] = 1.0 / R[i, j] if R[i, j] > 0 else _OFF
    p = np.zeros(n + 1, np.int64)
    way = np.zeros(n + 1, np.int64)
    u = np.zeros(n + 1)
    v = np.zeros(n + 1)
    minv = np.empty(n + 1)
    used = np.empty(n + 1, np.bool_)
    perm = np.empty(n, np.int64)
    cap = (n - 1) * (n - 1) + 2  # Farahat-Mirsky bound on greedy BvN stages, plus one
    perms = np.empty((cap, n), np.int64)
    weights = np.empty(cap, np.int64)
    k = 0
    while lam > 0:
        _assignment(cost, p, way, u, v, minv, used, perm)
        w = R[0, perm[0]]
        for i in range(1, n):
            if R[i, perm[i]] < w:
                w = R[i, perm[i]]
        for i in range(n):
            j = perm[i]
            R[i, j] -= w
            cost[i, j] = 1.0 / R[i, j] if R[i, j] > 0 else _OFF
        perms[k] = perm
        weights[k] = w
        k += 1
        lam -= w
    return perms[:k], weights[:k]


@njit(cache=True)
def heavy_update(A: np.ndarray, cost: np.ndarray, perm: np.ndarray) -> int:
    """One stage on many servers: subtract the lightest matched entry along ``perm``; return it."""
    n = A.shape[0]
    w = A[0, perm[0]]
    for i in range(1, n):
        if A[i, perm[i]] < w:
            w = A[i, perm[i]]
    for i in range(n):
        j = perm[i]
        A[i, j] -= w
        cost[i, j] = 1.0 / A[i, j] if A[i, j] > 0 else np.inf
    return w
