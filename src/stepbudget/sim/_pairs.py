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

from stepbudget.sim._core import WATERFILL_FLOWS, _heap_push, _maxmin, next_to_fill, njit

# what advance returns (as _core.advance)
DONE, PAUSED, UNDERFLOW = 0, 1, 3
# scalar state: clock[0] now (the last finish), clock[1] the bytes' time (drained to it); count[0] positions in
# use, count[1] events, count[2] ended, count[3] ended but still in place (holes)
_NOW, _LAST = 0, 1
_SLOTS, EVENTS, ENDED, _HOLES = 0, 1, 2, 3


@dataclass(frozen=True, eq=False)
class State:
    """The flows still moving, by position in task order, and which pairs still move. Flows that end stay in
    place as holes (``done``) until a quarter of the positions are holes, then the rest close up in order."""

    clock: np.ndarray  # (2,) now, the time ``remaining`` holds
    count: np.ndarray  # (4,) positions, events, ended, holes
    ids: np.ndarray  # (F,) the task of each position
    row: np.ndarray  # (F,) int32: its row, link ``row``
    col: np.ndarray  # (F,) int32: its column, link ``R + col``
    done: np.ndarray  # (F,) ended: a hole
    remaining: np.ndarray  # (F,) bytes left, as of clock[_LAST]
    rate: np.ndarray  # (F,) B/s since clock[_LAST]
    finish_at: np.ndarray  # (F,) s
    candidates: np.ndarray  # (F,) work row: positions that may be due
    live: np.ndarray  # (R + C,) flows moving on each link
    moving: np.ndarray  # (R, C) 1.0 where the pair's flow moves, else 0.0
    moving_t: np.ndarray  # (C, R) the same, transposed: a column's flows contiguous


def new_state(size_bytes: np.ndarray) -> State:
    """The flows of the positive entries of ``size_bytes`` (R, C), in row-major order, all moving."""
    row, col = np.nonzero(size_bytes > 0)
    F = row.size
    moving = (size_bytes > 0).astype(np.float64)
    live = np.concatenate([moving.sum(axis=1), moving.sum(axis=0)]).astype(np.int64)
    return State(clock=np.zeros(2), count=np.array([F, 0, 0, 0], np.int64), ids=np.arange(F),
                 row=row.astype(np.int32), col=col.astype(np.int32), done=np.zeros(F, np.bool_),
                 remaining=size_bytes[row, col].astype(np.float64), rate=np.zeros(F), finish_at=np.zeros(F),
                 candidates=np.empty(F, np.int64), live=live, moving=moving, moving_t=moving.T.copy())


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
    while True:
        link, share, size = next_to_fill(key, val, size, left, count)
        if link < 0:
            break
        level[link], rank[link], open_[link] = share, filled, 0.0
        filled += 1
        if link < R:
            _fill_across(share, moving[link], R, open_, left, count)
        else:
            _fill_across(share, moving_t[link - R], 0, open_, left, count)
        count[link] = 0.0  # never read again


@njit(cache=True, error_model="numpy")
def _drained(remaining: float, rate: float, elapsed: float) -> float:
    """Bytes left after ``elapsed`` seconds at ``rate`` (_core._drain's sum, for one flow)."""
    return max(remaining - rate * elapsed, 0.0) if elapsed > 0 else remaining


@njit(cache=True, error_model="numpy")
def _close_up(clock, count, ids, row, col, done, remaining, rate, finish_at) -> int:
    """Drop the holes, keeping the order, and drain the rest to now; returns the flows moving."""
    elapsed = clock[_NOW] - clock[_LAST]
    kept = 0
    for i in range(count[_SLOTS]):
        if done[i]:
            continue
        r = _drained(remaining[i], rate[i], elapsed)
        ids[kept], row[kept], col[kept], done[kept] = ids[i], row[i], col[i], False
        remaining[kept], rate[kept], finish_at[kept] = r, rate[i], finish_at[i]
        kept += 1
    clock[_LAST] = clock[_NOW]
    count[_SLOTS], count[_HOLES] = kept, 0
    return kept


@njit(cache=True, error_model="numpy")
def _due_by(t: float, rtol: float) -> float:
    """The latest finish that ends with one due at ``t`` (run_graph's grouping)."""
    return t + rtol * max(t, 1e-9)


@njit(cache=True, error_model="numpy")
def _reshare_pass(clock, count, row, col, done, remaining, rate, finish_at, candidates, level, rank, R: int,
                  levels: bool, rtol: float) -> tuple[float, int]:
    """One pass over the flows: drain each to now at its old rate, take its new rate (the share of the first of
    its links to fill, with ``levels``; else already in ``rate``), and its finish. Returns the first finish and
    how many positions may be due with it: each that was, when the pass reached it, due with the first finish
    so far (a superset of those due with the first of all, as the first only comes earlier)."""
    now = clock[_NOW]
    elapsed = now - clock[_LAST]
    first, latest, found = np.inf, np.inf, 0
    for i in range(count[_SLOTS]):
        if done[i]:
            continue
        r = remaining[i] = _drained(remaining[i], rate[i], elapsed)
        if levels:  # both loaded, then one picked: a select, not a branch taken half the time at random
            a, b = np.uint64(row[i]), np.uint64(R + col[i])  # unsigned: no check for a negative index
            share_a, share_b = level[a], level[b]
            rate[i] = share_a if rank[a] < rank[b] else share_b
        at = now + r / rate[i]
        finish_at[i] = at
        if at <= latest:
            candidates[found] = i
            found += 1
            if at < first:
                first = at
                latest = _due_by(at, rtol)
    clock[_LAST] = now
    return first, found


@njit(cache=True, error_model="numpy")
def _end(count, ids, row, col, done, finish_at, candidates, found: int, first: float, rtol: float, live, moving,
         moving_t, end_s) -> None:
    """The engine's finish at ``first``: the flows due within rtol of the elapsed time end there."""
    R = moving.shape[0]
    latest = _due_by(first, rtol)
    ended = 0
    for k in range(found):
        i = candidates[k]
        if finish_at[i] <= latest:
            done[i] = True
            end_s[ids[i]] = first
            a, b = row[i], col[i]
            moving[a, b] = moving_t[b, a] = 0.0
            live[a] -= 1
            live[R + b] -= 1
            ended += 1
    count[ENDED] += ended
    count[_HOLES] += ended


@njit(cache=True, error_model="numpy")
def _least_rate(count, done, rate) -> float:
    least = np.inf
    for i in range(count[_SLOTS]):
        if not done[i]:
            least = min(least, rate[i])
    return least


@njit(cache=True, error_model="numpy")
def advance(capacity, indptr, link_ids, rtol, max_events, clock, count, ids, row, col, done, remaining, rate,
            finish_at, candidates, live, moving, moving_t, end_s, diag) -> int:
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
    while count[_SLOTS] > count[_HOLES]:
        if ran >= max_events:
            return PAUSED
        ran += 1
        n = count[_SLOTS] - count[_HOLES]
        # the re-sharing (_core._recompute)
        levels = n >= WATERFILL_FLOWS
        if levels:
            if 4 * count[_HOLES] > count[_SLOTS]:
                _close_up(clock, count, ids, row, col, done, remaining, rate, finish_at)
            _waterfill(capacity, live, moving, moving_t, level, rank, left, share_count, open_, key, val)
        else:  # the rounds of the engine's max-min, called as it calls them on the moving flows in task order
            _close_up(clock, count, ids, row, col, done, remaining, rate, finish_at)
            _maxmin(ids, n, indptr, link_ids, capacity, rate, entries[0], entries[1])
        first, found = _reshare_pass(clock, count, row, col, done, remaining, rate, finish_at, candidates, level,
                                     rank, R, levels, rtol)
        count[EVENTS] += 2  # the engine's re-sharing and finish events
        if not np.isfinite(first):
            diag[0], diag[1] = n, _least_rate(count, done, rate)
            return UNDERFLOW
        _end(count, ids, row, col, done, finish_at, candidates, found, first, rtol, live, moving, moving_t, end_s)
        clock[_NOW] = first
    return DONE
