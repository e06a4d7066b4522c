"""Reference versions of the FAST schedule's padding and matchings, on Python lists and scipy.

The library runs one implementation of each (``stepbudget.a2a._compiled``: compiled with numba, plain
Python without it). These are the slower versions it is checked against on small cases
(tests/a2a/test_schedule.py):

- :func:`pad` and :func:`kuhn_bvn` are the list code schedule.py ran before issue 33 (without numba, for
  ANY and BOTTLENECK), the same algorithm step for step: the compiled stages must equal theirs exactly.
- :func:`heavy_bvn` takes each HEAVY stage from scipy's ``linear_sum_assignment`` (the schedule's matching
  before issue 21). Both find a minimum of the sum of ``1/M[i, j]``, but may break ties apart, so only the
  invariants are compared: the stages rebuild the padded matrix, their count is within the bound, the
  time is the same within a stated tolerance.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment

Stages = list[tuple[list[int], int]]
"""``[(perm, w), ...]``: row i -> column perm[i], ``w`` units."""


def pad(R: list[list[int]]) -> int:
    """Pad the list of lists ``R`` in place to equal line sums; return ``Lambda`` (formulas.md 7.3 step 3)."""
    n = len(R)
    row_gap = [sum(row) for row in R]
    col_gap = [sum(col) for col in zip(*R)]
    lam = max(max(row_gap), max(col_gap))
    row_gap = [lam - x for x in row_gap]
    col_gap = [lam - x for x in col_gap]
    i = j = 0
    while i < n and j < n:  # FAST-code: to_scaled_doubly_stochastic_matrix
        if row_gap[i] == 0:
            i += 1
        elif col_gap[j] == 0:
            j += 1
        else:
            delta = min(row_gap[i], col_gap[j])
            R[i][j] += delta
            row_gap[i] -= delta
            col_gap[j] -= delta
    return lam


# ---------------------------------------------------------------- ANY and BOTTLENECK: Kuhn's paths


def _augment(root: int, R: list, row_col: list, col_row: list, n: int, floor: int) -> bool:
    """Kuhn augmenting path from free row ``root`` over edges ``R[i][j] > floor`` (iterative DFS)."""
    seen = [False] * n
    found_by = [0] * n  # row that reached each column
    stack, next_col = [root], [0]
    while stack:
        i = stack[-1]
        row = R[i]
        j = next_col[-1]
        while j < n and (seen[j] or row[j] <= floor):
            j += 1
        if j == n:
            stack.pop()
            next_col.pop()
            continue
        next_col[-1] = j + 1
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
        stack.append(owner)
        next_col.append(0)
    return False


def _repair(rows: list, R: list, row_col: list, col_row: list, n: int, floor: int) -> bool:
    """Unmatch ``rows`` and re-augment each over edges ``> floor``; False if one cannot."""
    for i in rows:
        if row_col[i] >= 0:
            col_row[row_col[i]] = -1
            row_col[i] = -1
    return all(_augment(i, R, row_col, col_row, n, floor) for i in rows)


def _raise_bottleneck(R: list, row_col: list, col_row: list, n: int) -> None:
    """Turn a perfect matching into a max-min one: drop its lightest edges while it can re-augment."""
    while True:
        picked = [R[i][row_col[i]] for i in range(n)]
        low = min(picked)
        saved = row_col[:], col_row[:]
        if not _repair([i for i in range(n) if picked[i] == low], R, row_col, col_row, n, low):
            row_col[:], col_row[:] = saved
            return


def kuhn_bvn(R: list[list[int]], lam: int, bottleneck: bool) -> Stages:
    """Greedy BvN of ``R`` (equal line sums ``lam``; consumed) with Kuhn matchings, warm-started: ANY, or
    BOTTLENECK (max-min) with ``bottleneck``. The stage weight is the lightest matched entry."""
    n = len(R)
    row_col, col_row = [-1] * n, [-1] * n
    stages = []
    pending = list(range(n))
    while lam > 0:
        if not _repair(pending, R, row_col, col_row, n, 0):
            raise AssertionError("no perfect matching on the support: line sums are not equal")
        if bottleneck:
            _raise_bottleneck(R, row_col, col_row, n)
        w = min(R[i][row_col[i]] for i in range(n))
        pending = []
        for i in range(n):
            R[i][row_col[i]] -= w
            if not R[i][row_col[i]]:
                pending.append(i)
        stages.append((row_col[:], w))
        lam -= w
    return stages


# ---------------------------------------------------------------- HEAVY: scipy's assignment


def heavy_cost(R: np.ndarray) -> np.ndarray:
    """HEAVY's costs of the int matrix ``R``: ``1/R[i, j]`` on the support, ``inf`` (forbidden) off it."""
    with np.errstate(divide="ignore"):
        return np.where(R > 0, 1.0 / np.maximum(R, 1), np.inf)


def heavy_bvn(P: np.ndarray) -> Stages:
    """Greedy BvN of ``P`` (equal line sums; kept) whose every stage is scipy's minimum-cost assignment."""
    R = np.array(P, dtype=np.int64)
    n = R.shape[0]
    stages = []
    while n and R.any():
        perm = linear_sum_assignment(heavy_cost(R))[1]
        w = int(R[np.arange(n), perm].min())
        R[np.arange(n), perm] -= w
        stages.append((perm.tolist(), w))
    return stages
