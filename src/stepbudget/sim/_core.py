"""The simulator's event loop over compute streams and shared links, compiled by numba (``cache=True``).

``engine.run_graph`` is the door: it checks its inputs, builds the records below and calls ``advance``. Without
numba (the `fast` extra) ``njit`` is a no-op and the same functions run as plain Python: the same events and
sums, so the same timelines, about a hundred times slower.

Events, as simpy's ``core.py``: a heap of ``(time_s, priority, seq)`` entries, ``seq`` keeping the order in which
equal entries were pushed. There are four kinds:

* ``_RELEASE_ROOTS`` at t = 0: every task without dependencies is ready;
* ``_STREAM_END``: a compute task ends; its stream begins its next queued task first (FIFO, one at a time), then
  the ended task's successors are released;
* ``_RECOMPUTE`` (priority LATE: after every other event of its instant, so that a thousand flows that start or
  end together cost one): drain the bytes moved at the old rates, share the links max-min fairly among the flows
  moving, and push the next finish;
* ``_FINISH_DUE``, stale once the rates change (a version number; stale ones are popped and counted all the
  same): the flows due within ``finish_rtol * max(now, 1e-9)`` of it end together at it.

Ready tasks are handed out compute first, then flows, then zero-time tasks (joins and empty transfers, which end
at once and release theirs), each group in ascending task id, so ties break the same way every run.

Links are shared max-min fairly by sequential water-filling (Bertsekas & Gallager, Data Networks, "max-min flow
control"): the link with the least fair share fills first and freezes its flows at that share; the other links'
shares only rise. Two ways to walk a filled link's flows, the same subtractions in the same order, so the same
rates to the bit: lists of each link's flows rebuilt at each sharing (any graph), or, where every flow goes from a
row to a column of a matrix, one per pair (``Graph.pair``: a plain all-to-all, a quarter of a million flows at 512
GPUs), one pass without a branch over a line of a 0/1 matrix of the pairs still moving.

What it ignores: per-message latency (alpha) and protocol overheads unless the caller adds them as compute tasks;
flows reach their fair rate at once.

All state lives in arrays the caller allocates (``State``, ``Work``), so ``advance`` can stop after a number of
events (to report progress, or when the heap needs room) and go on where it stopped. Compiled, taking an array
from a record costs an atomic reference count: each function takes its rows once, and the per-event handlers are
inner functions of ``advance`` (inlined), so none is taken per event.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

try:
    import numba  # noqa: F401 - probe only; the kernels use njit
except ImportError:  # pragma: no cover - numba is the `fast` extra; without it the kernels run as plain Python
    AVAILABLE = False
else:
    AVAILABLE = True

if TYPE_CHECKING or AVAILABLE:
    from numba import njit
else:  # pragma: no cover
    def njit(*args, **kwargs):
        return lambda f: f

# event kinds
_RELEASE_ROOTS, _STREAM_END, _RECOMPUTE, _FINISH_DUE = 0, 1, 2, 3
_NORMAL, _LATE = 1, 2  # priorities: lower runs first at the same time
# what advance returns
DONE, PAUSED, NEED_ROOM, UNDERFLOW = 0, 1, 2, 3
# scalar state, by index into State.clock (float64) and State.counts (int64)
_NOW, _LAST = 0, 1
_SEQ, _HEAP, _SLOTS, _HOLES, _VERSION, _PENDING, EVENTS, ENDED, _FOUND = 0, 1, 2, 3, 4, 5, 6, 7, 8
_COMPUTE, _TRANSFER = 0, 1  # graph.TaskKind values; JOIN (2) and zero-byte transfers are instant


class Graph(NamedTuple):
    """The ``T`` tasks and ``L`` links as the loop reads them (never written)."""

    kind: np.ndarray  # (T,) int8 TaskKind
    stream: np.ndarray  # (T,) int64, -1 for tasks that are not compute
    duration_s: np.ndarray  # (T,) compute time, multipliers applied
    size_bytes: np.ndarray  # (T,)
    instant: np.ndarray  # (T,) bool: joins and zero-byte transfers end as they start
    link_indptr: np.ndarray  # (T + 1,) CSR of the links each transfer crosses
    link_ids: np.ndarray
    succ_indptr: np.ndarray  # (T + 1,) CSR of the tasks waiting on each task, ascending
    succ_ids: np.ndarray
    capacity: np.ndarray  # (L,) B/s, multipliers applied
    pair: np.ndarray
    """(T, 2) int32: each task's row r and column c, where every task is a root transfer over link r < R, then
    link R + c, one per (r, c), with (R, C) = State.moving.shape (a plain all-to-all): links are shared on the
    matrix of moving pairs. (0, 2): on lists of each link's flows."""


class Options(NamedTuple):
    finish_rtol: float
    """Flows due within this fraction of the elapsed time end together."""
    max_events: int
    """Events ``advance`` runs before it returns PAUSED (the caller reports progress and calls again)."""


class State(NamedTuple):
    """Everything the loop keeps between events, changed in place by ``advance``."""

    clock: np.ndarray  # (2,) now; the time the flows' bytes were last drained to
    counts: np.ndarray  # (9,) seq, heap size, slots, holes, version, recompute pending, events, ended, found
    heap_time: np.ndarray  # (H,)
    heap_key: np.ndarray  # (H, 4) int64: priority, seq, event kind, argument
    start_s: np.ndarray  # (T,)
    end_s: np.ndarray  # (T,)
    waiting: np.ndarray  # (T,) unfinished dependencies
    busy: np.ndarray  # (S,) per stream
    head: np.ndarray  # (S,) first queued task, -1 if none
    tail: np.ndarray  # (S,)
    next_task: np.ndarray  # (T,) the task queued after it on its stream
    active: np.ndarray  # (T,) slots: the flows moving, in the order they started; -1 a hole, closed up lazily
    remaining: np.ndarray  # (T,) per slot: bytes left, as of clock[_LAST]
    rate: np.ndarray  # (T,) per slot: B/s since the last sharing
    slot_pair: np.ndarray  # (T, 2) int32 per slot: its flow's Graph.pair (with Graph.pair; else (0, 2))
    candidates: np.ndarray  # (T,) slots that may end at the next finish (counts[_FOUND] of them)
    candidate_at: np.ndarray  # (T,) when each candidate is due
    moving: np.ndarray  # (R, C) 1.0 where the pair's flow moves (with Graph.pair; else (0, 0))
    moving_t: np.ndarray  # (C, R) the same, transposed: a column's flows contiguous
    live: np.ndarray  # (L,) flows moving on each link (with Graph.pair)
    diag: np.ndarray  # (2,) on UNDERFLOW: flows moving, least rate


class Work(NamedTuple):
    """Scratch rows, their contents meaningless between events but for ``load``: zeros, where links are shared on
    lists (each sharing adds each flow's links and takes them back)."""

    ready: np.ndarray  # (2, T) int64: tasks ready or just ended, two buffers that swap
    rates: np.ndarray  # (T,) lists: the rate of the flow in each slot
    frozen: np.ndarray  # (T,) lists: the flow in each slot has its rate
    flow_first: np.ndarray  # (T + 1,) lists: each slot's first entry
    entry_link: np.ndarray  # (E,) lists: the (slot, link) entries' links, grouped by slot
    on_link: np.ndarray  # (E,) lists: the slots on each link, grouped by link
    link_first: np.ndarray  # (L,) lists: where each link's slots begin in on_link
    link_end: np.ndarray  # (L,) lists: where they end
    left: np.ndarray  # (L,) capacity not yet given out
    load: np.ndarray  # (L,) flows on the link not yet frozen
    level: np.ndarray  # (L,) pairs: the share a link filled at
    rank: np.ndarray  # (L,) pairs: when it filled (L: never)
    open_: np.ndarray  # (L,) pairs: 1.0 until the link fills
    key: np.ndarray  # (L,) the water-filling's heap: a lower bound of each link's share
    val: np.ndarray  # (L,) its link


def new_state(num_tasks: int, num_streams: int, num_links: int, pairs: tuple[int, int] = (0, 0),
              heap_room: int = 1024) -> State:
    """A state at t = 0 with the first event pushed: release every task without dependencies (set ``waiting``)."""
    heap_room = max(heap_room, 4 * num_streams + 16)
    state = State(
        clock=np.zeros(2), counts=np.zeros(9, np.int64),
        heap_time=np.empty(heap_room), heap_key=np.empty((heap_room, 4), np.int64),
        start_s=np.full(num_tasks, np.nan), end_s=np.full(num_tasks, np.nan), waiting=np.empty(num_tasks, np.int64),
        busy=np.zeros(num_streams, np.bool_), head=np.full(num_streams, -1, np.int64),
        tail=np.full(num_streams, -1, np.int64), next_task=np.full(num_tasks, -1, np.int64),
        active=np.empty(num_tasks, np.int64), remaining=np.empty(num_tasks), rate=np.empty(num_tasks),
        slot_pair=np.empty((num_tasks if pairs[0] else 0, 2), np.int32), candidates=np.empty(num_tasks, np.int64),
        candidate_at=np.empty(num_tasks), moving=np.zeros(pairs), moving_t=np.zeros(pairs[::-1]),
        live=np.zeros(num_links, np.int64), diag=np.zeros(2),
    )
    _push(state.heap_time, state.heap_key, state.counts, 0.0, _NORMAL, _RELEASE_ROOTS, 0)
    return state


def new_work(num_tasks: int, num_links: int, num_entries: int) -> Work:
    def ints(n: int) -> np.ndarray:
        return np.empty(n, np.int64)

    return Work(ready=np.empty((2, max(num_tasks, 1)), np.int64), rates=np.empty(num_tasks),
                frozen=np.empty(num_tasks, np.bool_), flow_first=ints(num_tasks + 1), entry_link=ints(num_entries),
                on_link=ints(num_entries), link_first=ints(num_links), link_end=ints(num_links),
                left=np.empty(num_links), load=np.zeros(num_links), level=np.empty(num_links), rank=ints(num_links),
                open_=np.empty(num_links), key=np.empty(num_links), val=ints(num_links))


def with_room(state: State) -> State:
    """The state with a heap twice as large (``advance`` returned NEED_ROOM)."""
    size = int(state.counts[_HEAP])
    time = np.empty(2 * state.heap_time.size)
    key = np.empty((2 * state.heap_time.size, 4), np.int64)
    time[:size], key[:size] = state.heap_time[:size], state.heap_key[:size]
    return state._replace(heap_time=time, heap_key=key)


# ---------------------------------------------------------------- the event heap


@njit(cache=True)
def _before(t: np.ndarray, k: np.ndarray, a: int, b: int) -> bool:
    """Heap entry ``a`` comes before ``b``: by time, then priority, then seq."""
    if t[a] != t[b]:
        return t[a] < t[b]
    if k[a, 0] != k[b, 0]:
        return k[a, 0] < k[b, 0]
    return k[a, 1] < k[b, 1]


@njit(cache=True)
def _swap(t: np.ndarray, k: np.ndarray, a: int, b: int) -> None:
    t[a], t[b] = t[b], t[a]
    for c in range(4):
        k[a, c], k[b, c] = k[b, c], k[a, c]


@njit(cache=True)
def _push(t: np.ndarray, k: np.ndarray, counts: np.ndarray, time_s: float, priority: int, kind: int, arg: int) -> None:
    i = counts[_HEAP]
    counts[_HEAP] += 1
    t[i] = time_s
    k[i, 0], k[i, 1], k[i, 2], k[i, 3] = priority, counts[_SEQ], kind, arg
    counts[_SEQ] += 1
    while i > 0:
        parent = (i - 1) // 2
        if not _before(t, k, i, parent):
            break
        _swap(t, k, i, parent)
        i = parent


@njit(cache=True)
def _pop(t: np.ndarray, k: np.ndarray, counts: np.ndarray) -> None:
    """Drop the first entry (read it at index 0 before calling)."""
    n = counts[_HEAP] - 1
    counts[_HEAP] = n
    if n == 0:
        return
    t[0] = t[n]
    for c in range(4):
        k[0, c] = k[n, c]
    i = 0
    while True:
        left, right, first = 2 * i + 1, 2 * i + 2, i
        if left < n and _before(t, k, left, first):
            first = left
        if right < n and _before(t, k, right, first):
            first = right
        if first == i:
            return
        _swap(t, k, i, first)
        i = first


# ---------------------------------------------------------------- max-min sharing by water-filling


@njit(cache=True)
def _heap_push(key: np.ndarray, val: np.ndarray, size: int, k: float, v: int) -> int:
    i = size
    key[i], val[i] = k, v
    while i > 0:
        parent = (i - 1) // 2
        if key[parent] <= key[i]:
            break
        key[i], key[parent] = key[parent], key[i]
        val[i], val[parent] = val[parent], val[i]
        i = parent
    return size + 1


@njit(cache=True)
def _heap_pop(key: np.ndarray, val: np.ndarray, size: int) -> int:
    size -= 1
    key[0], val[0] = key[size], val[size]
    i = 0
    while True:
        left, right, first = 2 * i + 1, 2 * i + 2, i
        if left < size and key[left] < key[first]:
            first = left
        if right < size and key[right] < key[first]:
            first = right
        if first == i:
            return size
        key[i], key[first] = key[first], key[i]
        val[i], val[first] = val[first], val[i]
        i = first


@njit(cache=True, error_model="numpy")
def _next_to_fill(key: np.ndarray, val: np.ndarray, size: int, left: np.ndarray, load: np.ndarray
                  ) -> tuple[int, float, int]:
    """Water-filling's next link to fill: ``(link, share, heap size)``, link -1 once the heap is empty.

    Each link's key is a lower bound of its fair share (shares only rise as other links fill): a link popped with
    no flow left is dropped, one whose share rose goes back in at its share, and the first whose key is its share
    fills, at the least share of all (each link is re-keyed only when it reaches the top)."""
    while size > 0:
        least, link = key[0], val[0]
        size = _heap_pop(key, val, size)
        if load[link] <= 0:
            continue  # its flows were all frozen by other links
        share = left[link] / load[link]  # fair share: capacity left over the flows not frozen
        if share > least:
            size = _heap_push(key, val, size, share, link)
            continue
        return link, share, size
    return -1, 0.0, size


@njit(cache=True)
def _entries(g: Graph, s: State, w: Work) -> bool:
    """The (slot, link) entries of the flows moving, grouped by slot, and each link's flows in ``w.load`` (a link
    listed twice counts twice); whether a flow crosses more than one link."""
    active, link_indptr, link_ids, slots = s.active, g.link_indptr, g.link_ids, s.counts[_SLOTS]
    flow_first, entry_link, load, frozen = w.flow_first, w.entry_link, w.load, w.frozen
    e, crossing = 0, False
    for i in range(slots):
        flow_first[i] = e
        f = active[i]
        if f < 0:
            continue
        frozen[i] = False
        crossing |= link_indptr[f + 1] - link_indptr[f] > 1
        for p in range(link_indptr[f], link_indptr[f + 1]):
            entry_link[e] = link_ids[p]
            load[link_ids[p]] += 1.0
            e += 1
    flow_first[slots] = e
    return crossing


@njit(cache=True, error_model="numpy")
def _share_lists(g: Graph, s: State, w: Work) -> None:
    """The max-min rate of the flow in each slot into ``w.rates``, any graph, over the links in use (a step moves a
    few flows at a time over a few of its links): a filled link freezes its flows not frozen yet, each leaving its
    share on all its links. Each flow, frozen once, takes back from ``w.load`` what it added: zeros again."""
    capacity, slots = g.capacity, s.counts[_SLOTS]
    left, load, link_first, link_end, flow_first = w.left, w.load, w.link_first, w.link_end, w.flow_first
    entry_link, on_link, frozen, rates, key, val = w.entry_link, w.on_link, w.frozen, w.rates, w.key, w.val
    if not _entries(g, s, w):  # no flow crosses two links: each link fills alone, at capacity / flows
        for i in range(slots):
            if flow_first[i + 1] > flow_first[i]:
                link = entry_link[flow_first[i]]
                rates[i] = capacity[link] / load[link]
        for j in range(flow_first[slots]):
            load[entry_link[j]] = 0.0
        return
    size, start = 0, 0
    for link in range(load.size):  # pushed in ascending order, as _share_pairs does: equal shares fill alike
        if load[link] > 0:
            link_first[link], link_end[link], left[link] = start, start, capacity[link]
            start += int(load[link])
            size = _heap_push(key, val, size, left[link] / load[link], link)
    for i in range(slots):  # each link's slots, ascending (the order the flows started)
        for j in range(flow_first[i], flow_first[i + 1]):
            on_link[link_end[entry_link[j]]] = i
            link_end[entry_link[j]] += 1
    while True:
        link, share, size = _next_to_fill(key, val, size, left, load)
        if link < 0:
            return
        for p in range(link_first[link], link_end[link]):
            i = on_link[p]
            if frozen[i]:
                continue
            frozen[i] = True
            rates[i] = share
            for j in range(flow_first[i], flow_first[i + 1]):
                left[entry_link[j]] = max(left[entry_link[j]] - share, 0.0)  # rounding must not make a link negative
                load[entry_link[j]] -= 1.0


@njit(cache=True, error_model="numpy")
def _fill_across(share: float, pairs: np.ndarray, line: int, base: int, open_: np.ndarray, left: np.ndarray,
                 load: np.ndarray) -> None:
    """One link filled at ``share``, its flows on line ``line`` of ``pairs``: its moving flows not frozen yet (the
    link across still open) freeze, each leaving its share on the link across. A pair with no flow, or one across a
    filled link, subtracts 0 (exact: left >= 0, so max leaves it as it was), so the loop runs over the whole line
    without a branch."""
    for k in range(pairs.shape[1]):
        m = pairs[line, k] * open_[base + k]
        left[base + k] = max(left[base + k] - share * m, 0.0)
        load[base + k] -= m


@njit(cache=True, error_model="numpy")
def _share_pairs(g: Graph, s: State, w: Work) -> None:
    """``_share_lists`` on the matrix of moving pairs (with Graph.pair): the same heap, shares and subtractions in
    the same order, the links across walked along a line of ``moving`` (a row's columns ascending, a column's rows
    ascending: the order the flows started). A flow freezes at the share of the first of its two links to fill,
    so this records each filled link's share (``level``) and when it filled (``rank``), not a rate per flow."""
    capacity, live, moving, moving_t, rows = g.capacity, s.live, s.moving, s.moving_t, s.moving.shape[0]
    left, load, level, rank, open_, key, val = w.left, w.load, w.level, w.rank, w.open_, w.key, w.val
    num_links = capacity.size
    size = 0
    for link in range(num_links):
        left[link], load[link], rank[link], open_[link] = capacity[link], float(live[link]), num_links, 1.0
        if live[link] > 0:
            size = _heap_push(key, val, size, left[link] / load[link], link)
    filled = 0
    while True:
        link, share, size = _next_to_fill(key, val, size, left, load)
        if link < 0:
            break
        level[link], rank[link], open_[link] = share, filled, 0.0
        filled += 1
        if link < rows:
            _fill_across(share, moving, link, rows, open_, left, load)
        else:
            _fill_across(share, moving_t, link - rows, 0, open_, left, load)


# ---------------------------------------------------------------- the events


@njit(cache=True, error_model="numpy")
def _rerate(o: Options, s: State, w: Work, dense: bool) -> tuple[float, int]:
    """Each flow moving drained to now at its old rate, given its new one (``w.rates`` per slot, or with ``dense``
    the share of the first of its two links to fill). Returns the first finish and how many slots ``s.candidates``
    lists, with their finish: each that was, when the pass reached it, due with the first finish so far (a
    superset of those due with the first of all, as the first only comes earlier)."""
    active, remaining, rate, slot_pair, candidates = s.active, s.remaining, s.rate, s.slot_pair, s.candidates
    candidate_at, level, rank, rates, rtol = s.candidate_at, w.level, w.rank, w.rates, o.finish_rtol
    now, rows = s.clock[_NOW], np.uint64(s.moving.shape[0])
    elapsed = now - s.clock[_LAST]
    first, latest, found = np.inf, np.inf, 0
    for i in range(s.counts[_SLOTS]):
        if active[i] < 0:
            continue
        left = remaining[i]
        if elapsed > 0:  # bytes = rate x time, at the rate since the last sharing
            left = remaining[i] = max(left - rate[i] * elapsed, 0.0)
        if dense:  # both shares loaded, then one picked: a select, not a branch taken half the time at random;
            # unsigned, so no check for a negative index
            a, b = np.uint64(slot_pair[i, 0]), rows + np.uint64(slot_pair[i, 1])
            share_a, share_b = level[a], level[b]
            r = share_a if rank[a] < rank[b] else share_b
        else:
            r = rates[i]
        rate[i] = r
        at = now + left / r  # time = bytes / rate
        if at <= latest:
            candidates[found], candidate_at[found] = i, at
            found += 1
            if at < first:
                first, latest = at, at + rtol * max(at, 1e-9)
    return first, found


@njit(cache=True, error_model="numpy")
def _recompute(g: Graph, o: Options, s: State, w: Work) -> bool:
    """New max-min rates for the flows moving, drained to now at their old ones, and their next finish pushed;
    False if a rate underflowed (no finish in finite time)."""
    counts, active, remaining, rate, slot_pair = s.counts, s.active, s.remaining, s.rate, s.slot_pair
    counts[_PENDING] = 0
    if 4 * counts[_HOLES] > counts[_SLOTS]:  # close up the holes, keeping the order the flows started in
        kept = 0
        for i in range(counts[_SLOTS]):
            if active[i] >= 0:
                active[kept], remaining[kept], rate[kept] = active[i], remaining[i], rate[i]
                if slot_pair.shape[0]:
                    slot_pair[kept, 0], slot_pair[kept, 1] = slot_pair[i, 0], slot_pair[i, 1]
                kept += 1
        counts[_SLOTS], counts[_HOLES] = kept, 0
    flows = counts[_SLOTS] - counts[_HOLES]
    if flows == 0:
        return True
    dense = slot_pair.shape[0] > 0
    if dense:
        _share_pairs(g, s, w)
    else:
        _share_lists(g, s, w)
    first, counts[_FOUND] = _rerate(o, s, w, dense)
    s.clock[_LAST] = s.clock[_NOW]
    if not np.isfinite(first):
        least = np.inf
        for i in range(counts[_SLOTS]):
            if active[i] >= 0:
                least = min(least, rate[i])
        s.diag[0], s.diag[1] = flows, least
        return False
    _push(s.heap_time, s.heap_key, counts, first, _NORMAL, _FINISH_DUE, counts[_VERSION])
    return True


@njit(cache=True, error_model="numpy")
def advance(g: Graph, o: Options, s: State, w: Work) -> int:  # noqa: C901 - its handlers are inner functions (below)
    """Run events until none are left (DONE), ``o.max_events`` have run (PAUSED), the heap may overflow with the
    next event (NEED_ROOM: grow it and call again) or rates underflow (UNDERFLOW, ``s.diag`` says which)."""
    kind, stream, duration_s, size_bytes, instant = g.kind, g.stream, g.duration_s, g.size_bytes, g.instant
    succ_indptr, succ_ids, pair_of, pairs = g.succ_indptr, g.succ_ids, g.pair, g.pair.shape[0] > 0
    clock, counts, heap_time, heap_key, start_s, end_s = s.clock, s.counts, s.heap_time, s.heap_key, s.start_s, s.end_s
    waiting, busy, head, tail, next_task = s.waiting, s.busy, s.head, s.tail, s.next_task
    active, remaining, rate, candidates, candidate_at = s.active, s.remaining, s.rate, s.candidates, s.candidate_at
    slot_pair, moving, moving_t, live, rows = s.slot_pair, s.moving, s.moving_t, s.live, s.moving.shape[0]
    ready, other, rtol = w.ready[0], w.ready[1], o.finish_rtol

    def push(time_s, priority, event, arg):
        _push(heap_time, heap_key, counts, time_s, priority, event, arg)

    def invalidate():  # the rates are stale: so is the pending finish; recompute them once, at this instant
        counts[_VERSION] += 1
        if counts[_PENDING] == 0:
            counts[_PENDING] = 1
            push(clock[_NOW], _LATE, _RECOMPUTE, 0)

    def begin(st, t):
        busy[st] = True
        start_s[t] = clock[_NOW]
        push(clock[_NOW] + duration_s[t], _NORMAL, _STREAM_END, t)

    def pair(t, step):  # Graph.pair: the flow t moving (step 1) or ended (-1), in the matrix and its links' counts
        r, c = pair_of[t, 0], pair_of[t, 1]
        moving[r, c] = moving_t[c, r] = 1.0 if step > 0 else 0.0
        live[r] += step
        live[rows + c] += step

    def ready_after(done, n_done, out):  # done[:n_done] end now; their successors left with no dependency to out
        n = 0
        for i in range(n_done):
            t = done[i]
            end_s[t] = clock[_NOW]
            for p in range(succ_indptr[t], succ_indptr[t + 1]):
                waiting[succ_ids[p]] -= 1
                if waiting[succ_ids[p]] == 0:
                    out[n] = succ_ids[p]
                    n += 1
        counts[ENDED] += n_done
        if n > 1:
            out[:n].sort()
        return n

    def release(ready, n, other):  # ready[:n] to their resource; zero-time tasks end now and release theirs
        now = clock[_NOW]
        while n > 0:
            for i in range(n):  # compute, to its stream (queued behind a busy one)
                t = ready[i]
                if kind[t] == _COMPUTE:
                    st = stream[t]
                    if busy[st]:
                        if head[st] < 0:
                            head[st] = t
                        else:
                            next_task[tail[st]] = t
                        tail[st] = t
                    else:
                        begin(st, t)
            flows = False
            for i in range(n):  # flows, onto the network: at rate 0 until the recompute at this instant
                t = ready[i]
                if kind[t] == _TRANSFER and not instant[t]:
                    flows = True
                    start_s[t] = now
                    slot = counts[_SLOTS]
                    active[slot], remaining[slot], rate[slot] = t, size_bytes[t], 0.0
                    counts[_SLOTS] += 1
                    if pairs:
                        slot_pair[slot, 0], slot_pair[slot, 1] = pair_of[t, 0], pair_of[t, 1]
                        pair(t, 1)
            if flows:
                invalidate()
            m = 0
            for i in range(n):  # zero-time tasks end now
                t = ready[i]
                if instant[t]:
                    start_s[t] = now
                    ready[m] = t
                    m += 1
            n = ready_after(ready, m, other) if m else 0
            ready, other = other, ready

    def finish_due(done):  # the flows due with this finish end: the candidates of the last sharing, still current
        due_by = clock[_NOW] + rtol * max(clock[_NOW], 1e-9)
        n = 0
        for k in range(counts[_FOUND]):
            slot = candidates[k]
            if candidate_at[k] <= due_by:
                done[n] = active[slot]
                n += 1
                if pairs:
                    pair(active[slot], -1)
                remaining[slot], rate[slot], active[slot] = 0.0, 0.0, -1
        counts[_HOLES] += n
        invalidate()
        return n

    margin = busy.size + 4  # pushes one event can make: a begin per stream, a recompute, a finish
    ran = 0
    while counts[_HEAP] > 0:
        if ran >= o.max_events:
            return PAUSED
        if counts[_HEAP] + margin > heap_time.size:
            return NEED_ROOM
        clock[_NOW] = heap_time[0]
        event, arg = heap_key[0, 2], heap_key[0, 3]
        _pop(heap_time, heap_key, counts)
        counts[EVENTS] += 1
        ran += 1
        n = 0
        if event == _RELEASE_ROOTS:
            for t in range(kind.size):
                if waiting[t] == 0:
                    ready[n] = t
                    n += 1
        elif event == _STREAM_END:
            st = stream[arg]
            if head[st] >= 0:  # the next queued task begins before the ended task's successors are released
                t = head[st]
                head[st] = next_task[t]
                if head[st] < 0:
                    tail[st] = -1
                begin(st, t)
            else:
                busy[st] = False
            other[0] = arg
            n = ready_after(other, 1, ready)
        elif event == _RECOMPUTE:
            if not _recompute(g, o, s, w):
                return UNDERFLOW
        elif arg == counts[_VERSION]:  # a finish not made stale by a later change of rates
            n = ready_after(other, finish_due(other), ready)
        release(ready, n, other)
    return DONE


@njit(cache=True)
def successors(dep_indptr: np.ndarray, dep_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The successor CSR of a dependency CSR (a counting sort: each task's successors in ascending id)."""
    num_tasks = dep_indptr.size - 1
    indptr = np.zeros(num_tasks + 1, np.int64)
    for d in dep_ids:
        indptr[d + 1] += 1
    for t in range(num_tasks):
        indptr[t + 1] += indptr[t]
    fill = indptr[:-1].copy()
    ids = np.empty(dep_ids.size, np.int64)
    for t in range(num_tasks):
        for p in range(dep_indptr[t], dep_indptr[t + 1]):
            d = dep_ids[p]
            ids[fill[d]] = t
            fill[d] += 1
    return indptr, ids
