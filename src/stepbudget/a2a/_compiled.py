"""Compiled loops of the FAST-style schedule (numba, ``cache=True``): the one implementation of its row sums,
padding and matchings.

One call per ``fast_schedule``: ``heavy_schedule`` or ``kuhn_schedule`` (row sums of the GPU matrix, server
matrix, whole units, padding, then every greedy BvN stage, with no per-stage Python); one entry point per kind
of matching, so a process loads only the code it runs.

Matchings: HEAVY is the minimum-cost assignment on costs ``1/M[i, j]`` (zero entries: off the support), a fresh
Jonker-Volgenant assignment each stage; only each column's cheapest entry carries over between stages. ANY and
BOTTLENECK are Kuhn's augmenting paths, warm-started from the last stage. tests/oracles/matching.py holds the
references they are checked against: scipy's assignment for HEAVY (the same optimum; ties may break apart), the
list code for ANY and BOTTLENECK (step for step).

Without numba (the optional ``fast`` extra), ``AVAILABLE`` is False and ``njit`` is a no-op: the same functions
run as plain Python, with the same results, about 100x slower.
"""

from __future__ import annotations

import functools
import math
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
                 freerow: int) -> tuple[int, float]:
    """Distances ``d`` of the columns from ``freerow`` on the reduced costs, each reached from it directly,
    and the first set of columns at the minimum distance, ``col[:up]``: returns ``(up, mind)``.

    The set is gathered in the same pass, as ``_next_min_set`` from position 0 gathers it: position
    ``k`` still holds column ``k`` when the pass reaches it (swaps only touch positions up to ``k``).
    """
    mind = d[0] = c[freerow, 0] - v[0]
    pred[0] = freerow
    col[0] = 0
    up = 1
    for k in range(1, c.shape[0]):
        dk = d[k] = c[freerow, k] - v[k]
        pred[k] = freerow
        col[k] = k
        if dk <= mind:
            if dk < mind:
                up = 0
                mind = dk
            col[k] = col[up]
            col[up] = k
            up += 1
    return up, mind


@njit(cache=True)
def _free_in(y: np.ndarray, col: np.ndarray, low: int, up: int) -> int:
    """A free column among ``col[low:up]`` (the first), or -1."""
    for k in range(low, up):
        if y[col[k]] < 0:
            return col[k]
    return -1


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
    return up, mind, _free_in(y, col, low, up)


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
                   col: np.ndarray, freerow: int) -> tuple[int, int, float]:
    """Dijkstra over the columns from ``freerow``, until a free column is reached.

    Returns ``(end, last, mind)``: that free column, the last position of ``col`` scanned before the
    final set, and the final minimum distance.
    """
    up, mind = _start_paths(c, v, d, pred, col, freerow)
    end = _free_in(y, col, 0, up)
    low = 0
    last = -1
    while end < 0:  # scan one column of the set: relax through its row
        up, end = _scan_column(c, v, d, pred, y, col, low, up, mind)
        low += 1
        if end < 0 and up == low:  # the next set of columns at the minimum distance
            last = low - 1
            up, mind, end = _next_min_set(d, y, col, low, up)
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


OK, BAD_VALUE, NOT_EXACT = 0, 1, 2  # status of the schedules and ``_row_bytes``
_EXACT = 2.0**53  # below this, sums of whole float64 numbers are exact in any order
_WHOLE = 2.0**52  # from here up every float64 is whole: x + _WHOLE rounds x to an integer


@njit(cache=True)
def _stage_arrays(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Room for the stages: Farahat-Mirsky's bound ``(n-1)^2 + 1``, plus one."""
    cap = (n - 1) * (n - 1) + 2
    return np.empty((cap, n), np.int64), np.empty(cap, np.int64)


@njit(cache=True)
def _grown(perms: np.ndarray, weights: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The stage arrays, twice as long once stage ``k`` would not fit (never within the bound)."""
    if k < weights.shape[0]:
        return perms, weights
    more_p = np.empty((2 * k, perms.shape[1]), np.int64)
    more_w = np.empty(2 * k, np.int64)
    more_p[:k] = perms[:k]
    more_w[:k] = weights[:k]
    return more_p, more_w


@njit(cache=True)
def _cost(r: int) -> float:
    """HEAVY's cost of an entry: 1/r on the support, _OFF off it."""
    return 1.0 / r if r > 0 else _OFF


@njit(cache=True)
def _rescan_column(ct: np.ndarray, j: int, cmin: np.ndarray, carg: np.ndarray) -> None:
    """Cheapest row of column ``j`` (the lowest-numbered among equals) and its cost; ``ct`` the costs transposed."""
    imin = 0
    low = ct[j, 0]
    for i in range(1, ct.shape[0]):
        if ct[j, i] < low:
            imin = i
            low = ct[j, i]
    cmin[j] = low
    carg[j] = imin


@njit(cache=True)
def _reduce_columns(cmin: np.ndarray, carg: np.ndarray, x: np.ndarray, y: np.ndarray, v: np.ndarray) -> None:
    """Jonker-Volgenant's column reduction from each column's cheapest row ``carg`` and its cost ``cmin``: the dual
    ``v[j]`` = that cost; a row that is the cheapest of several columns takes the highest-numbered one (columns are
    scanned last to first), the rest stay free."""
    n = cmin.shape[0]
    x[:] = -1
    y[:] = -1
    for j in range(n - 1, -1, -1):
        imin = carg[j]
        v[j] = cmin[j]
        if x[imin] < 0:
            x[imin] = j
            y[j] = imin


@njit(cache=True)
def heavy_stages(R: np.ndarray, lam: int) -> tuple[np.ndarray, np.ndarray]:
    """Greedy BvN of the int64 matrix ``R`` (equal line sums ``lam``; consumed) with HEAVY matchings.

    Returns ``(perms (K, n), weights (K,))``; the stage weight is the lightest matched entry
    (formulas.md 7.3 step 4). Each stage is a fresh minimum-cost assignment on ``_cost(R)``, by
    Jonker-Volgenant (1987): column reduction gives each column its cheapest row and a dual v; the rows left
    free are assigned by shortest augmenting paths on the reduced costs c[i, j] - v[j] (Dijkstra over
    columns, scanning the columns at the current minimum distance together). Only the column minima carry
    over, since a stage changes one entry per column (rescanned when it was the minimum).
    """
    n = R.shape[0]
    cost = np.empty((n, n))
    for i in range(n):
        for j in range(n):
            cost[i, j] = _cost(R[i, j])
    cost_t = cost.T.copy()  # columns contiguous: the column minima rescan fast
    x = np.empty(n, np.int64)
    y = np.empty(n, np.int64)
    v = np.empty(n)
    d = np.empty(n)
    pred = np.empty(n, np.int64)
    col = np.empty(n, np.int64)
    free = np.empty(n, np.int64)
    cmin = np.empty(n)
    carg = np.empty(n, np.int64)
    for j in range(n):
        _rescan_column(cost_t, j, cmin, carg)
    perms, weights = _stage_arrays(n)
    k = 0
    while lam > 0:
        _reduce_columns(cmin, carg, x, y, v)
        for f in range(_free_rows(x, free)):  # shortest augmenting path from each free row
            freerow = free[f]
            end, last, mind = _shortest_path(cost, v, d, pred, y, col, freerow)
            _update_duals(v, d, col, last, mind)
            _flip_path(x, y, pred, end, freerow)
        w = R[0, x[0]]
        for i in range(1, n):
            if R[i, x[i]] < w:
                w = R[i, x[i]]
        for i in range(n):
            j = x[i]
            R[i, j] -= w
            cost[i, j] = cost_t[j, i] = _cost(R[i, j])
            if carg[j] == i:  # the column's cheapest entry got dearer
                _rescan_column(cost_t, j, cmin, carg)
        perms, weights = _grown(perms, weights, k)
        perms[k] = x
        weights[k] = w
        k += 1
        lam -= w
    return perms[:k].copy(), weights[:k].copy()  # not views: the room for the bound is 2 MB at 64 servers


# ---------------------------------------------------------------- ANY and BOTTLENECK: Kuhn's paths


@njit(cache=True)
def _augment(root: int, R: np.ndarray, row_col: np.ndarray, col_row: np.ndarray, floor: int,
             seen: np.ndarray, found_by: np.ndarray, stack: np.ndarray, next_col: np.ndarray) -> bool:
    """Kuhn augmenting path from free row ``root`` over edges ``R[i, j] > floor`` (iterative DFS).

    ``seen, found_by, stack, next_col`` are work arrays of length n.
    """
    n = R.shape[0]
    seen[:] = False
    stack[0] = root
    next_col[0] = 0
    top = 1
    while top > 0:
        i = stack[top - 1]
        j = next_col[top - 1]
        while j < n and (seen[j] or R[i, j] <= floor):
            j += 1
        if j == n:
            top -= 1
            continue
        next_col[top - 1] = j + 1
        seen[j] = True
        found_by[j] = i
        owner = col_row[j]
        if owner < 0:
            while True:  # flip the alternating path back to the root
                i = found_by[j]
                previous = row_col[i]
                row_col[i] = j
                col_row[j] = i
                if i == root:
                    return True
                j = previous
        stack[top] = owner
        next_col[top] = 0
        top += 1
    return False


@njit(cache=True)
def _repair(rows: np.ndarray, count: int, R: np.ndarray, row_col: np.ndarray, col_row: np.ndarray,
            floor: int, work: np.ndarray, seen: np.ndarray) -> bool:
    """Unmatch ``rows[:count]`` and re-augment each over edges ``> floor``; False if one cannot."""
    for k in range(count):
        i = rows[k]
        if row_col[i] >= 0:
            col_row[row_col[i]] = -1
            row_col[i] = -1
    for k in range(count):
        if not _augment(rows[k], R, row_col, col_row, floor, seen, work[0], work[1], work[2]):
            return False
    return True


@njit(cache=True)
def _raise_bottleneck(R: np.ndarray, row_col: np.ndarray, col_row: np.ndarray, rows: np.ndarray,
                      work: np.ndarray, seen: np.ndarray) -> None:
    """Turn a perfect matching into a max-min one: drop its lightest edges while it can re-augment."""
    n = R.shape[0]
    saved_rc = np.empty(n, np.int64)
    saved_cr = np.empty(n, np.int64)
    while True:
        low = R[0, row_col[0]]
        for i in range(1, n):
            low = min(low, R[i, row_col[i]])
        count = 0
        for i in range(n):
            if R[i, row_col[i]] == low:
                rows[count] = i
                count += 1
        saved_rc[:] = row_col
        saved_cr[:] = col_row
        if not _repair(rows, count, R, row_col, col_row, low, work, seen):
            row_col[:] = saved_rc
            col_row[:] = saved_cr
            return


@njit(cache=True)
def kuhn_stages(R: np.ndarray, lam: int, bottleneck: bool) -> tuple[np.ndarray, np.ndarray]:
    """Greedy BvN of the int64 matrix ``R`` (equal line sums ``lam``; consumed) with Kuhn matchings, each stage
    warm-started from the last: ANY, or BOTTLENECK (max-min) with ``bottleneck``. Returns ``(perms, weights)``."""
    n = R.shape[0]
    row_col = np.full(n, -1, np.int64)
    col_row = np.full(n, -1, np.int64)
    pending = np.arange(n)
    count = n
    rows = np.empty(n, np.int64)
    work = np.empty((3, n + 1), np.int64)  # found_by, stack, next_col
    seen = np.empty(n, np.bool_)
    perms, weights = _stage_arrays(n)
    k = 0
    while lam > 0:
        if not _repair(pending, count, R, row_col, col_row, 0, work, seen):
            raise AssertionError("no perfect matching on the support: line sums are not equal")
        if bottleneck:
            _raise_bottleneck(R, row_col, col_row, rows, work, seen)
        w = R[0, row_col[0]]  # stage weight = lightest matched entry (formulas.md 7.3 step 4)
        for i in range(1, n):
            w = min(w, R[i, row_col[i]])
        count = 0
        for i in range(n):
            j = row_col[i]
            R[i, j] -= w
            if R[i, j] == 0:
                pending[count] = i
                count += 1
        perms, weights = _grown(perms, weights, k)
        perms[k] = row_col
        weights[k] = w
        k += 1
        lam -= w
    return perms[:k].copy(), weights[:k].copy()


# ---------------------------------------------------------------- the whole schedule


@njit(cache=True)
def pad(R: np.ndarray) -> int:
    """Pad the int64 matrix ``R`` in place to equal line sums; return ``Lambda``.

    Walking deficit rows ``i`` and deficit columns ``j`` in index order, add ``min(row deficit, column
    deficit)`` to ``R[i, j]``.
    """
    n = R.shape[0]
    row_gap = np.zeros(n, np.int64)
    col_gap = np.zeros(n, np.int64)
    for i in range(n):
        for j in range(n):
            row_gap[i] += R[i, j]
            col_gap[j] += R[i, j]
    lam = max(row_gap.max(), col_gap.max())  # Lambda = max line sum (formulas.md 7.3 step 3)
    for k in range(n):  # loops, not array expressions: each of those is a compiled kernel of its own
        row_gap[k] = lam - row_gap[k]
        col_gap[k] = lam - col_gap[k]
    i = j = 0
    while i < n and j < n:  # FAST-code: to_scaled_doubly_stochastic_matrix (formulas.md 7.3)
        if row_gap[i] == 0:
            i += 1
        elif col_gap[j] == 0:
            j += 1
        else:
            delta = min(row_gap[i], col_gap[j])  # = Lambda - max(row_i, col_j) (formulas.md 7.3 step 3)
            R[i, j] += delta
            row_gap[i] -= delta
            col_gap[j] -= delta
    return lam


@njit(cache=True)
def _fine_entries(D: np.ndarray) -> int:
    """How many entries are finite and >= 0: an integer sum, no branch per entry."""
    fine = 0
    for s in range(D.shape[0]):
        for k in range(D.shape[1]):
            x = D[s, k]
            fine += (x >= 0.0) & (x < math.inf)
    return fine


@njit(cache=True)  # not fastmath: (x + 2^52) - 2^52 must round
def _plain_entries(D: np.ndarray) -> int:
    """How many entries are whole numbers in [0, 2^52): adding 2^52 rounds x to an integer, so
    ``(x + 2^52) - 2^52 == x`` iff x is whole (3x faster than counting with floor)."""
    count = 0
    for s in range(D.shape[0]):
        for k in range(D.shape[1]):
            x = D[s, k]
            count += (x >= 0.0) & (x < _WHOLE) & ((x + _WHOLE) - _WHOLE == x)
    return count


@njit(cache=True, fastmath={"reassoc"})  # reordered sums: exact for whole numbers below 2^53, else unused
def _halve(row: np.ndarray, G: int, half: np.ndarray) -> None:
    """``half[:len(row) // G]`` = sums of ``row``'s blocks of G (a power of 2) by pairwise halving.

    Each pass adds neighbours over contiguous memory, which vectorises; a G-long loop per block does not.
    """
    width = row.shape[0] // 2
    for m in range(width):
        half[m] = row[2 * m] + row[2 * m + 1]
    g = G // 2
    while g > 1:
        width //= 2
        for m in range(width):
            half[m] = half[2 * m] + half[2 * m + 1]
        g //= 2


@njit(cache=True, fastmath={"reassoc"})  # reordered sums: exact for whole numbers below 2^53, else unused
def _block_sums(D: np.ndarray, G: int, r: np.ndarray) -> float:
    """``r[u, i, v]`` = bytes GPU i of server u sends to server v, 0 for v = u; returns the largest sum."""
    S = r.shape[0]
    largest = 0.0
    halving = G > 1 and G & (G - 1) == 0
    half = np.empty(D.shape[1])
    for src in range(S * G):
        if halving:
            _halve(D[src], G, half)
        sends = r[src // G, src % G]
        for v in range(S):
            total = half[v] if halving else D[src, v * G:(v + 1) * G].sum()
            largest = max(largest, total)
            sends[v] = int(min(total, _EXACT))  # past 2^53 the result is not used
        sends[src // G] = 0  # u == v is the intra-server all-to-all
    return largest


@njit(cache=True)
def _row_bytes(D: np.ndarray, G: int, r: np.ndarray) -> int:
    """``r[u, i, v]`` = ceil of the bytes GPU i of server u sends to server v (0 for v = u); a status.

    BAD_VALUE on a negative, NaN or infinite entry; NOT_EXACT when an entry is not whole or a sum
    reaches 2^53, where the summation order could change the last bit (schedule.py then sums with
    numpy).
    """
    if _plain_entries(D) < D.size:  # rare: tell a bad entry from one that is not whole (or 2^52 and up)
        return BAD_VALUE if _fine_entries(D) < D.size else NOT_EXACT
    return OK if _block_sums(D, G, r) < _EXACT else NOT_EXACT


@njit(cache=True)
def server_units(r: np.ndarray, unit: int) -> tuple[np.ndarray, np.ndarray]:
    """``(tau, units)``: tau_uv = ceil(sum_i r_uiv / G) (FAST-code server2server_data, formulas.md 7.3),
    and tau in whole units, ceil(tau / unit) (FAST-code Matrix::scale)."""
    S, G = r.shape[0], r.shape[1]
    tau = np.zeros((S, S), np.int64)
    for u in range(S):
        for i in range(G):
            for v in range(S):
                tau[u, v] += r[u, i, v]
    units = np.empty((S, S), np.int64)
    for u in range(S):
        for v in range(S):
            tau[u, v] = (tau[u, v] + (G - 1)) // G
            units[u, v] = -(-tau[u, v] // unit)
    return tau, units


@njit(cache=True)
def balance(D: np.ndarray, G: int) -> tuple[int, np.ndarray, np.ndarray]:
    """Steps 1-2 of the FAST schedule: ``(status, r, tau)`` (see ``_row_bytes`` and ``server_units``)."""
    S = D.shape[0] // G
    r = np.empty((S, G, S), np.int64)
    status = _row_bytes(D, G, r)
    if status != OK:
        return status, r, np.empty((0, 0), np.int64)
    return status, r, server_units(r, 1)[0]


@njit(cache=True)
def _prepare(D: np.ndarray, G: int, unit: int) -> tuple:
    """Steps 1-3 of the FAST schedule of the float64 (S*G, S*G) matrix ``D``.

    Returns ``(status, r, tau, padded, lam)``: row bytes, server matrix, padded unit matrix and its
    line sum; unless ``status`` is OK only it holds.
    """
    S = D.shape[0] // G
    r = np.empty((S, G, S), np.int64)
    status = _row_bytes(D, G, r)
    if status != OK:
        empty = np.empty((0, 0), np.int64)
        return status, r, empty, empty, 0
    tau, padded = server_units(r, unit)  # a fresh array: padded in place
    lam = pad(padded)
    return status, r, tau, padded, lam


@njit(cache=True)
def heavy_schedule(D: np.ndarray, G: int, unit: int) -> tuple:
    """The whole schedule with HEAVY matchings: ``(status, r, tau, padded, perms, weights)``."""
    status, r, tau, padded, lam = _prepare(D, G, unit)
    if status != OK:
        return status, r, tau, padded, padded, np.empty(0, np.int64)
    perms, weights = heavy_stages(padded.copy(), lam)
    return status, r, tau, padded, perms, weights


@njit(cache=True)
def kuhn_schedule(D: np.ndarray, G: int, unit: int, bottleneck: bool) -> tuple:
    """The whole schedule with ANY or BOTTLENECK matchings: ``(status, r, tau, padded, perms, weights)``."""
    status, r, tau, padded, lam = _prepare(D, G, unit)
    if status != OK:
        return status, r, tau, padded, padded, np.empty(0, np.int64)
    perms, weights = kuhn_stages(padded.copy(), lam, bottleneck)
    return status, r, tau, padded, perms, weights


@functools.cache
def warm() -> None:
    """Load (or compile) the kernels for the argument types every caller passes, once per process."""
    if AVAILABLE:
        heavy_schedule(np.ones((4, 4)), 2, 1)
        kuhn_schedule(np.ones((4, 4)), 2, 1, True)
