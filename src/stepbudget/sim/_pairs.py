"""Root transfers from rows to columns of a matrix, run as the compiled engine runs them, its sharing dense.

``run_graph`` on a graph of root TRANSFER tasks (no dependencies, no compute) does one thing per event: re-share
the links max-min fairly among the flows still moving, then end the flows due first (and those due within
``rtol`` of the elapsed time). Where each flow leaves on a row's link and enters on a column's, at most one flow
per pair (a plain all-to-all: sender's link out, receiver's link in), the engine's water-filling, which walks
each filled link's flows through two levels of indirection (a quarter of a million flows at 512 GPUs, thousands
of re-sharings), is a pass over one line of a dense 0/1 matrix per filled link, with no branch. Every sum is
``_core``'s, in ``_core``'s order, over the same heap, so the end times are the compiled engine's to the bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepbudget.sim._core import WATERFILL_FLOWS, _heap_pop, _heap_push, _maxmin, njit

# what advance returns (as _core.advance)
DONE, PAUSED, UNDERFLOW = 0, 1, 3
# scalar state: clock[0] now, clock[1] last drain; count[0] moving flows, count[1] events, count[2] ended
_NOW, _LAST = 0, 1
_MOVING, EVENTS, ENDED = 0, 1, 2


@dataclass(frozen=True, eq=False)
class State:
    """The flows still moving, by position in task order (compacted as flows end), and which pairs still move."""

    clock: np.ndarray  # (2,) now, last drain
    count: np.ndarray  # (3,) moving, events, ended
    ids: np.ndarray  # (F,) the task of each position
    row: np.ndarray  # (F,) its row: link ``row``
    col: np.ndarray  # (F,) its column: link ``R + col``
    remaining: np.ndarray  # (F,) bytes left, as of clock[_LAST]
    rate: np.ndarray  # (F,) B/s
    finish_at: np.ndarray  # (F,) s
    live: np.ndarray  # (R + C,) flows moving on each link
    moving: np.ndarray  # (R, C) 1.0 where the pair's flow moves, else 0.0
    moving_t: np.ndarray  # (C, R) the same, transposed: a column's flows contiguous


def new_state(size_bytes: np.ndarray) -> State:
    """The flows of the positive entries of ``size_bytes`` (R, C), in row-major order, all moving."""
    row, col = np.nonzero(size_bytes > 0)
    F = row.size
    moving = (size_bytes > 0).astype(np.float64)
    live = np.concatenate([moving.sum(axis=1), moving.sum(axis=0)]).astype(np.int64)
    return State(clock=np.zeros(2), count=np.array([F, 0, 0], np.int64), ids=np.arange(F), row=row, col=col,
                 remaining=size_bytes[row, col].astype(np.float64), rate=np.zeros(F), finish_at=np.zeros(F),
                 live=live, moving=moving, moving_t=moving.T.copy())


@njit(cache=True, error_model="numpy")
def _fill_across(share: float, pairs: np.ndarray, base: int, open_: np.ndarray, left: np.ndarray,
                 count: np.ndarray) -> None:
    """One link filled at ``share``: its moving flows not frozen yet (the link across still open) freeze, each
    leaving its share on the link across. A pair with no flow, or one across a filled link, subtracts 0 (exact:
    left >= 0, so max leaves it as it was), so the loop runs over the whole line without a branch."""
    for k in range(pairs.size):
        m = pairs[k] * open_[base + k]
        left[base + k] = max(left[base + k] - share * m, 0.0)
        count[base + k] -= m


@njit(cache=True, error_model="numpy")
def _waterfill(capacity: np.ndarray, live: np.ndarray, moving: np.ndarray, moving_t: np.ndarray, level: np.ndarray,
               rank: np.ndarray, left: np.ndarray, count: np.ndarray, open_: np.ndarray, key: np.ndarray,
               val: np.ndarray) -> None:
    """``_core._waterfill`` on the matrix: the same heap, shares and subtractions in the same order.

    A flow freezes at the share of the first of its two links to fill, so this records each filled link's share
    (``level``) and when it filled (``rank``; links that never fill stay at L) instead of a rate per flow. Each
    link's share leaves its flows' other links in task order, as the engine's lists hold them: a row's columns
    ascending, a column's rows ascending."""
    R = moving.shape[0]
    num_links = capacity.size
    size = 0
    for link in range(num_links):
        left[link] = capacity[link]
        count[link] = float(live[link])
        rank[link] = num_links
        open_[link] = 1.0
        if live[link] > 0:
            size = _heap_push(key, val, size, left[link] / count[link], link)
    filled = 0
    while size > 0:
        least, link = key[0], val[0]
        size = _heap_pop(key, val, size)
        if count[link] <= 0:
            continue  # its flows were all frozen by other links
        share = left[link] / count[link]
        if share > least:  # its share rose since it was pushed: back in at its share
            size = _heap_push(key, val, size, share, link)
            continue
        level[link], rank[link], open_[link] = share, filled, 0.0
        filled += 1
        if link < R:
            _fill_across(share, moving[link], R, open_, left, count)
        else:
            _fill_across(share, moving_t[link - R], 0, open_, left, count)
        count[link] = 0.0  # never read again


@njit(cache=True, error_model="numpy")
def _end_due(clock, count, ids, row, col, remaining, rate, finish_at, live, moving, moving_t, end_s, n: int,
             next_s: float, rtol: float) -> int:
    """The engine's finish: drain to ``next_s``, end the flows due within rtol of the elapsed time, keep the rest
    in order; returns how many are kept."""
    R = moving.shape[0]
    elapsed = next_s - clock[_LAST]
    clock[_NOW] = clock[_LAST] = next_s
    due_by = next_s + rtol * max(next_s, 1e-9)
    kept = 0
    for i in range(n):
        r = remaining[i]
        if elapsed > 0:
            r = max(r - rate[i] * elapsed, 0.0)
        if finish_at[i] <= due_by:
            end_s[ids[i]] = next_s
            a, b = row[i], col[i]
            moving[a, b] = moving_t[b, a] = 0.0
            live[a] -= 1
            live[R + b] -= 1
        else:
            ids[kept], row[kept], col[kept] = ids[i], row[i], col[i]
            remaining[kept], rate[kept], finish_at[kept] = r, rate[i], finish_at[i]
            kept += 1
    count[ENDED] += n - kept
    return kept


@njit(cache=True, error_model="numpy")
def advance(capacity, indptr, link_ids, rtol, max_events, clock, count, ids, row, col, remaining, rate, finish_at,
            live, moving, moving_t, end_s, diag) -> int:
    """Re-share, then end the flows due, until none is left (DONE), ``max_events`` have run (PAUSED) or rates
    underflow (UNDERFLOW; ``diag`` holds the flows moving and the least rate). ``indptr, link_ids``: every task's
    two links as the task graph lists them (``_core._maxmin``'s rounds read them below WATERFILL_FLOWS)."""
    num_links = capacity.size
    R = moving.shape[0]
    left, share_count, open_ = np.empty(num_links), np.empty(num_links), np.empty(num_links)
    level, rank = np.empty(num_links), np.empty(num_links, np.int64)
    key, val = np.empty(num_links), np.empty(num_links, np.int64)
    entries = np.empty((2, max(2 * ids.size, 1)), np.int64)
    ran = 0
    while count[_MOVING] > 0:
        if ran >= max_events:
            return PAUSED
        ran += 1
        n = count[_MOVING]
        # the re-sharing (_core._recompute): every flow was drained to this instant when the last flows ended
        levels = n >= WATERFILL_FLOWS
        if levels:
            _waterfill(capacity, live, moving, moving_t, level, rank, left, share_count, open_, key, val)
        else:  # the rounds of the engine's max-min, called as it calls them
            _maxmin(ids, n, indptr, link_ids, capacity, rate, entries[0], entries[1])
        now = clock[_NOW]
        next_s, least = np.inf, np.inf
        for i in range(n):
            if levels:  # the share of the first of its links to fill
                a, b = row[i], R + col[i]
                rate[i] = level[a] if rank[a] < rank[b] else level[b]
            finish_at[i] = now + remaining[i] / rate[i]
            next_s = min(next_s, finish_at[i])
            least = min(least, rate[i])
        count[EVENTS] += 2  # the engine's re-sharing and finish events
        if not np.isfinite(next_s):
            diag[0], diag[1] = n, least
            return UNDERFLOW
        count[_MOVING] = _end_due(clock, count, ids, row, col, remaining, rate, finish_at, live, moving, moving_t,
                                  end_s, n, next_s, rtol)
    return DONE
