"""Compiled inner loops of the FAST-style schedule (numba, ``cache=True``), used when numba imports.

``heavy_stages``: the whole greedy BvN decomposition with HEAVY matchings in one compiled loop: no
per-stage Python (a scipy call and its bookkeeping cost more than the matching at 4 servers). The
matching is the minimum-cost assignment on costs ``1/M[i, j]`` (zero entries: off the support),
found with Jonker and Volgenant's algorithm, the same optimum scipy's ``linear_sum_assignment``
finds (ties may break differently); 2-3x faster than scipy at 64 servers, since column reduction
assigns most rows before any augmenting path. When numba is missing, ``AVAILABLE`` is False and
schedule.py runs scipy and Python.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import numpy as np

try:
    import numba  # noqa: F401 - probe only; the kernels use njit
except ImportError:  # pragma: no cover - numba is a dependency; this keeps the module importable without it
    AVAILABLE = False
else:
    AVAILABLE = True

if TYPE_CHECKING or AVAILABLE:  # type-checked against numba's own stubs
    from numba import njit
else:  # pragma: no cover - without numba the kernels run as the plain Python they are written in
    def njit(*args, **kwargs):
        return lambda f: f

_OFF = 1e12  # cost of an entry off the support: above any finite total (each 1/x <= 1, n terms)


@njit(cache=True)
def _column_reduction(c: np.ndarray, x: np.ndarray, y: np.ndarray, v: np.ndarray) -> None:
    """Give each column its cheapest row and the dual ``v[j]`` = that cost; a row that is the cheapest of
    several columns takes the highest-numbered one (columns are scanned last to first), the rest stay free."""
    n = c.shape[0]
    x[:] = -1
    y[:] = -1
    for j in range(n - 1, -1, -1):
        imin = 0
        for i in range(1, n):
            if c[i, j] < c[imin, j]:
                imin = i
        v[j] = c[imin, j]
        if x[imin] < 0:
            x[imin] = j
            y[j] = imin


@njit(cache=True)
def _free_rows(x: np.ndarray, free: np.ndarray) -> int:
    """Write the unassigned rows into ``free[:count]``; return the count."""
    nfree = 0
    for i in range(x.shape[0]):
        if x[i] < 0:
            free[nfree] = i
            nfree += 1
    return nfree


@njit(cache=True)
def _start_paths(c: np.ndarray, v: np.ndarray, d: np.ndarray, pred: np.ndarray, col: np.ndarray,
                 freerow: int) -> None:
    """Distances ``d`` of the columns from ``freerow`` on the reduced costs, each reached from it directly."""
    for j in range(c.shape[0]):
        d[j] = c[freerow, j] - v[j]
        pred[j] = freerow
        col[j] = j


@njit(cache=True)
def _next_min_set(d: np.ndarray, y: np.ndarray, col: np.ndarray, low: int, up: int) -> tuple[int, float, int]:
    """Gather the unscanned columns at the minimum distance into ``col[low:up]``.

    Returns ``(up, mind, end)``: the new end of the set, its distance, and a free column in it (-1 if none).
    """
    n = d.shape[0]
    mind = d[col[up]]
    up += 1
    for k in range(up, n):
        j = col[k]
        if d[j] <= mind:
            if d[j] < mind:
                up = low
                mind = d[j]
            col[k] = col[up]
            col[up] = j
            up += 1
    for k in range(low, up):
        if y[col[k]] < 0:
            return up, mind, col[k]
    return up, mind, -1


@njit(cache=True)
def _scan_column(c: np.ndarray, v: np.ndarray, d: np.ndarray, pred: np.ndarray, y: np.ndarray, col: np.ndarray,
                 low: int, up: int, mind: float) -> tuple[int, int]:
    """Relax the columns beyond ``col[:up]`` through the row assigned to column ``col[low]``.

    A column brought to the minimum distance joins the set; returns ``(up, end)``, ``end`` the first
    free column reached at that distance (-1 if none).
    """
    j1 = col[low]
    i = y[j1]
    u1 = c[i, j1] - v[j1] - mind
    for k in range(up, c.shape[0]):
        j = col[k]
        h = c[i, j] - v[j] - u1
        if h < d[j]:
            pred[j] = i
            if h == mind:
                if y[j] < 0:
                    return up, j
                col[k] = col[up]
                col[up] = j
                up += 1
            d[j] = h
    return up, -1


@njit(cache=True)
def _shortest_path(c: np.ndarray, v: np.ndarray, d: np.ndarray, pred: np.ndarray, y: np.ndarray,
                   col: np.ndarray) -> tuple[int, int, float]:
    """Dijkstra over the columns from the row ``_start_paths`` set, until a free column is reached.

    Returns ``(end, last, mind)``: that free column, the last position of ``col`` scanned before the
    final set, and the final minimum distance.
    """
    low = up = last = 0
    end = -1
    mind = 0.0
    while end < 0:
        if up == low:  # the next set of columns at the minimum distance
            last = low - 1
            up, mind, end = _next_min_set(d, y, col, low, up)
        if end < 0:  # scan one column of the set: relax through its row
            up, end = _scan_column(c, v, d, pred, y, col, low, up, mind)
            low += 1
    return end, last, mind


@njit(cache=True)
def _update_duals(v: np.ndarray, d: np.ndarray, col: np.ndarray, last: int, mind: float) -> None:
    """Raise the duals of the columns scanned before the last set by how much closer than ``mind`` they were."""
    for k in range(last + 1):
        j1 = col[k]
        v[j1] += d[j1] - mind


@njit(cache=True)
def _flip_path(x: np.ndarray, y: np.ndarray, pred: np.ndarray, end: int, freerow: int) -> None:
    """Flip the augmenting path from column ``end`` back to ``freerow``: one more row assigned."""
    while True:
        i = pred[end]
        y[end] = i
        j1 = end
        end = x[i]
        x[i] = j1
        if i == freerow:
            break


@njit(cache=True)
def _assignment(c: np.ndarray, x: np.ndarray, y: np.ndarray, v: np.ndarray, d: np.ndarray, pred: np.ndarray,
                col: np.ndarray, free: np.ndarray) -> None:
    """Minimum-cost perfect assignment of the square ``c``: row i -> column x[i] (y: column -> row).

    Jonker-Volgenant (1987): column reduction gives each column its cheapest row and a dual v; the
    rows left free are assigned by shortest augmenting paths on the reduced costs c[i, j] - v[j]
    (Dijkstra over columns, scanning the columns at the current minimum distance together). Work
    arrays ``v, d, pred, col, free`` have length n.
    """
    _column_reduction(c, x, y, v)
    for f in range(_free_rows(x, free)):  # augmentation from each free row
        freerow = free[f]
        _start_paths(c, v, d, pred, col, freerow)
        end, last, mind = _shortest_path(c, v, d, pred, y, col)
        _update_duals(v, d, col, last, mind)
        _flip_path(x, y, pred, end, freerow)


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
    x = np.empty(n, np.int64)
    y = np.empty(n, np.int64)
    v = np.empty(n)
    d = np.empty(n)
    pred = np.empty(n, np.int64)
    col = np.empty(n, np.int64)
    free = np.empty(n, np.int64)
    cap = (n - 1) * (n - 1) + 2  # Farahat-Mirsky bound on greedy BvN stages, plus one
    perms = np.empty((cap, n), np.int64)
    weights = np.empty(cap, np.int64)
    k = 0
    while lam > 0:
        _assignment(cost, x, y, v, d, pred, col, free)
        w = R[0, x[0]]
        for i in range(1, n):
            if R[i, x[i]] < w:
                w = R[i, x[i]]
        for i in range(n):
            j = x[i]
            R[i, j] -= w
            cost[i, j] = 1.0 / R[i, j] if R[i, j] > 0 else _OFF
        perms[k] = x
        weights[k] = w
        k += 1
        lam -= w
    return perms[:k], weights[:k]


@functools.cache
def warm() -> None:
    """Load (or compile) ``heavy_stages`` for the argument types every caller passes, once per process."""
    if AVAILABLE:
        heavy_stages(np.ones((2, 2), dtype=np.int64), 2)
