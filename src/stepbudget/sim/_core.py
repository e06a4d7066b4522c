"""The event engine of ``engine.py`` compiled (numba, ``cache=True``): the same events in the same order.

``run_graph`` runs a task graph here when numba imports and no observer is given. Every rule is the
Python engine's, one for one, so the timelines are the same to the last rounding:

* a heap of ``(time_s, priority, seq)`` events: a task's end on its stream, the network's batched
  rate recomputation (``LATE``, after every other event of its instant) and its next flow finish
  (stale once the rates change; popped and counted all the same, as the Python engine counts them);
* FIFO streams: when a task ends, the stream begins its next task before the ended task's
  successors are released; ready tasks are handed out compute first, then flows, then zero-time
  tasks, each group in ascending task id;
* flows share links max-min fairly by the same progressive filling as ``maxmin.py``, with the
  same sums in the same order; flows due within ``rtol * max(now, 1e-9)`` of a finish end together.

All state lives in arrays that the caller allocates (``State``), so ``advance`` can stop after a
number of events (to report progress, or when the heap needs more room) and go on where it stopped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

try:
    import numba  # noqa: F401 - probe only; the kernels use njit
except ImportError:  # pragma: no cover - numba is the `fast` extra; without it engine.py runs its Python engine
    AVAILABLE = False
else:
    AVAILABLE = True

if TYPE_CHECKING or AVAILABLE:
    from numba import njit
else:  # pragma: no cover
    def njit(*args, **kwargs):
        return lambda f: f

# event kinds (the Python engine's callbacks)
_RELEASE_ROOTS, _STREAM_END, _RECOMPUTE, _FINISH_DUE = 0, 1, 2, 3
_NORMAL, _LATE = 1, 2  # engine.Priority values
# what advance returns
DONE, PAUSED, NEED_ROOM, UNDERFLOW = 0, 1, 2, 3
# scalar state, by index into State.clock (float64) and State.count (int64)
_NOW, _LAST = 0, 1
_SEQ, _HEAP, _ACTIVE, _VERSION, _PENDING, EVENTS, ENDED = 0, 1, 2, 3, 4, 5, 6
_COMPUTE, _TRANSFER = 0, 1  # graph.TaskKind values; JOIN (2) and zero-byte transfers are instant


@dataclass(frozen=True, eq=False)
class State:
    """Everything the engine keeps between events (arrays, changed in place by ``advance``)."""

    clock: np.ndarray  # (2,) now, last drain of the flows
    count: np.ndarray  # (7,) seq, heap size, active flows, version, recompute pending, events, tasks ended
    heap_time: np.ndarray
    heap_key: np.ndarray  # (H, 4) int64: priority, seq, event kind, argument
    start_s: np.ndarray
    end_s: np.ndarray
    waiting: np.ndarray  # unfinished dependencies per task
    busy: np.ndarray  # per stream
    head: np.ndarray  # per stream: first queued task, -1 if none
    tail: np.ndarray
    next_task: np.ndarray  # per task: the task queued after it on its stream
    active: np.ndarray  # flows moving, in the order they started
    remaining: np.ndarray  # bytes left per task (flows), as of clock[_LAST]
    rate: np.ndarray
    finish_at: np.ndarray
    scratch: np.ndarray  # (2, T) int64 work rows: the ready lists
    entries: np.ndarray  # (2, E) int64 work rows: max-min's (flow, link) entries
    rates: np.ndarray  # (T,) max-min's rates, in active order
    diag: np.ndarray  # (2,) on UNDERFLOW: flows active, least rate


def new_state(num_tasks: int, num_streams: int, num_entries: int, heap_room: int = 1024) -> State:
    heap_room = max(heap_room, 4 * num_streams + 16)
    return State(
        clock=np.zeros(2), count=np.zeros(7, np.int64),
        heap_time=np.empty(heap_room), heap_key=np.empty((heap_room, 4), np.int64),
        start_s=np.full(num_tasks, np.nan), end_s=np.full(num_tasks, np.nan), waiting=np.empty(num_tasks, np.int64),
        busy=np.zeros(num_streams, np.bool_), head=np.full(num_streams, -1, np.int64),
        tail=np.full(num_streams, -1, np.int64), next_task=np.full(num_tasks, -1, np.int64),
        active=np.empty(num_tasks, np.int64), remaining=np.zeros(num_tasks), rate=np.zeros(num_tasks),
        finish_at=np.full(num_tasks, np.inf), scratch=np.empty((2, max(num_tasks, 1)), np.int64),
        entries=np.empty((2, max(num_entries, 1)), np.int64), rates=np.empty(max(num_tasks, 1)), diag=np.zeros(2),
    )


def with_room(state: State) -> State:
    """The state with a heap twice as large (``advance`` returned NEED_ROOM)."""
    size = int(state.count[_HEAP])
    time = np.empty(2 * state.heap_time.size)
    key = np.empty((2 * state.heap_time.size, 4), np.int64)
    time[:size], key[:size] = state.heap_time[:size], state.heap_key[:size]
    return State(**{**state.__dict__, "heap_time": time, "heap_key": key})


# ---------------------------------------------------------------- heap


@njit(cache=True)
def _before(t: np.ndarray, k: np.ndarray, a: int, b: int) -> bool:
    """Heap entry ``a`` comes before ``b``: (time, priority, seq), as Python compares the tuples."""
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
def _push(t: np.ndarray, k: np.ndarray, count: np.ndarray, time_s: float, priority: int, kind: int, arg: int) -> None:
    i = count[_HEAP]
    count[_HEAP] += 1
    t[i] = time_s
    k[i, 0], k[i, 1], k[i, 2], k[i, 3] = priority, count[_SEQ], kind, arg
    count[_SEQ] += 1
    while i > 0:
        parent = (i - 1) // 2
        if not _before(t, k, i, parent):
            break
        _swap(t, k, i, parent)
        i = parent


@njit(cache=True)
def _pop(t: np.ndarray, k: np.ndarray, count: np.ndarray) -> None:
    """Drop the first entry (read it at index 0 before calling)."""
    n = count[_HEAP] - 1
    count[_HEAP] = n
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


# ---------------------------------------------------------------- max-min (maxmin.maxmin_rates_unchecked, in loops)


@njit(cache=True)
def _entries(active: np.ndarray, n: int, link_indptr: np.ndarray, link_ids: np.ndarray, count: np.ndarray,
             out: np.ndarray, entry_flow: np.ndarray, entry_link: np.ndarray) -> int:
    """The (flow, link) entries of flows ``active[:n]``, grouped by flow; ``count`` of entries per link."""
    e = 0
    for i in range(n):
        f = active[i]
        for p in range(link_indptr[f], link_indptr[f + 1]):
            entry_flow[e], entry_link[e] = i, link_ids[p]
            count[link_ids[p]] += 1.0
            e += 1
        if link_indptr[f + 1] == link_indptr[f]:
            out[i] = np.inf  # a flow over no link is unconstrained
    return e


@njit(cache=True)
def _least_offers(entry_flow: np.ndarray, entry_link: np.ndarray, e: int, share: np.ndarray, least: np.ndarray) -> None:
    """Each link's least offer: the smallest, over its flows, of the least share on the flow's path."""
    j = 0
    while j < e:
        k, offer = j, np.inf
        while k < e and entry_flow[k] == entry_flow[j]:
            offer = min(offer, share[entry_link[k]])
            k += 1
        for m in range(j, k):
            least[entry_link[m]] = min(least[entry_link[m]], offer)
        j = k


@njit(cache=True)
def _freeze(entry_flow: np.ndarray, entry_link: np.ndarray, e: int, share: np.ndarray, least: np.ndarray,
            count: np.ndarray, used: np.ndarray, out: np.ndarray) -> int:
    """Freeze each flow that crosses a bottleneck at its offer, adding the offer to ``used`` per link in entry
    order; keep the others' entries in front, in order; return how many entries are kept."""
    kept, j = 0, 0
    while j < e:
        k, offer, frozen = j, np.inf, False
        while k < e and entry_flow[k] == entry_flow[j]:
            offer = min(offer, share[entry_link[k]])
            frozen |= share[entry_link[k]] <= least[entry_link[k]]
            k += 1
        if frozen:
            out[entry_flow[j]] = offer
            for m in range(j, k):
                used[entry_link[m]] += offer
                count[entry_link[m]] -= 1.0
        else:
            for m in range(j, k):
                entry_flow[kept], entry_link[kept] = entry_flow[m], entry_link[m]
                kept += 1
        j = k
    return kept


@njit(cache=True, error_model="numpy")
def _maxmin(active: np.ndarray, n: int, link_indptr: np.ndarray, link_ids: np.ndarray, capacity: np.ndarray,
            out: np.ndarray, entry_flow: np.ndarray, entry_link: np.ndarray) -> None:
    """Max-min fair rate of flows ``active[:n]`` into ``out[:n]``: the rounds of maxmin.py's progressive filling,
    each link's frozen offers summed in entry order before they leave its remaining capacity, as bincount does."""
    num_links = capacity.size
    remaining = capacity.copy()
    count = np.zeros(num_links)
    share = np.empty(num_links)
    least = np.empty(num_links)
    used = np.zeros(num_links)
    e = _entries(active, n, link_indptr, link_ids, count, out, entry_flow, entry_link)
    while e > 0:
        for j in range(e):  # fair share of each link among its unfrozen flows
            link = entry_link[j]
            share[link] = remaining[link] / count[link] if count[link] > 0 else np.inf
            least[link] = np.inf
        _least_offers(entry_flow, entry_link, e, share, least)
        e = _freeze(entry_flow, entry_link, e, share, least, count, used, out)
        for link in range(num_links):  # remaining -= the round's sums; a link no flow froze on subtracts nothing
            if used[link] != 0.0:
                remaining[link] = max(remaining[link] - used[link], 0.0)
                used[link] = 0.0


WATERFILL_FLOWS = 4096
"""From this many active flows on, rates come from sequential water-filling (``_waterfill``, O(E log L)) instead
of the parallel rounds (O(rounds x E), and the rounds grow with a skewed all-to-all's group). Both give the unique
max-min allocation; their sums differ only in rounding, so below this (every preset's step) the rounds keep the
timelines bit-identical to the Python engine's."""


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
def next_to_fill(key: np.ndarray, val: np.ndarray, size: int, left: np.ndarray, count: np.ndarray
                 ) -> tuple[int, float, int]:
    """Water-filling's next link to fill: ``(link, share, heap size)``, link -1 once the heap is empty.

    Each link's key is a lower bound of its fair share (shares only rise as other links fill): a link popped with
    no flow left is dropped, one whose share rose goes back in at its share, and the first whose key is its share
    fills, at the least share of all."""
    while size > 0:
        least, link = key[0], val[0]
        size = _heap_pop(key, val, size)
        if count[link] <= 0:
            continue  # its flows were all frozen by other links
        share = left[link] / count[link]
        if share > least:
            size = _heap_push(key, val, size, share, link)
            continue
        return link, share, size
    return -1, 0.0, size


@njit(cache=True, error_model="numpy")
def _waterfill(active: np.ndarray, n: int, link_indptr: np.ndarray, link_ids: np.ndarray, capacity: np.ndarray,
               out: np.ndarray, entry_flow: np.ndarray, entry_link: np.ndarray) -> None:
    """Max-min fair rates by sequential water-filling (Bertsekas & Gallager, "max-min flow control"): the link with
    the least fair share saturates first and freezes its flows at that share; the others' shares only rise, so each
    link's key in a heap stays a lower bound of its share, and a link popped with a key below its share goes back
    in at its share (each link is re-keyed only when it reaches the top)."""
    num_links = capacity.size
    remaining = capacity.copy()
    count = np.zeros(num_links)
    e = _entries(active, n, link_indptr, link_ids, count, out, entry_flow, entry_link)
    # the flows on each link (CSR over entries)
    start = np.zeros(num_links + 1, np.int64)
    for j in range(e):
        start[entry_link[j] + 1] += 1
    for link in range(num_links):
        start[link + 1] += start[link]
    fill, on_link = start[:-1].copy(), np.empty(e, np.int64)
    first = np.zeros(n + 1, np.int64)  # each flow's entries (they are grouped by flow)
    for j in range(e):
        on_link[fill[entry_link[j]]] = entry_flow[j]
        fill[entry_link[j]] += 1
        first[entry_flow[j] + 1] = j + 1
    for i in range(n):
        first[i + 1] = max(first[i + 1], first[i])
    frozen = np.zeros(n, np.bool_)
    key, val, size = np.empty(num_links), np.empty(num_links, np.int64), 0
    for link in range(num_links):
        if count[link] > 0:
            size = _heap_push(key, val, size, remaining[link] / count[link], link)
    while True:
        link, share, size = next_to_fill(key, val, size, remaining, count)
        if link < 0:
            break
        for p in range(start[link], start[link + 1]):
            i = on_link[p]
            if frozen[i]:
                continue
            frozen[i] = True
            out[i] = share
            for j in range(first[i], first[i + 1]):
                other = entry_link[j]
                remaining[other] = max(remaining[other] - share, 0.0)
                count[other] -= 1.0


# ---------------------------------------------------------------- the engine


@njit(cache=True, error_model="numpy")
def _drain(clock: np.ndarray, count: np.ndarray, active: np.ndarray, remaining: np.ndarray, rate: np.ndarray) -> None:
    """Network._advance: the bytes moved since the last drain, at the current rates."""
    elapsed = clock[_NOW] - clock[_LAST]
    if elapsed > 0:
        for i in range(count[_ACTIVE]):
            f = active[i]
            remaining[f] = max(remaining[f] - rate[f] * elapsed, 0.0)
    clock[_LAST] = clock[_NOW]


@njit(cache=True)
def _invalidate(clock, count, heap_time, heap_key) -> None:
    count[_VERSION] += 1
    if count[_PENDING] == 0:
        count[_PENDING] = 1
        _push(heap_time, heap_key, count, clock[_NOW], _LATE, _RECOMPUTE, 0)


@njit(cache=True)
def _begin(stream: int, task: int, duration_s, clock, count, heap_time, heap_key, start_s, busy) -> None:
    busy[stream] = True
    start_s[task] = clock[_NOW]
    _push(heap_time, heap_key, count, clock[_NOW] + duration_s[task], _NORMAL, _STREAM_END, task)


@njit(cache=True)
def _ready_after(done, n_done, out, clock, count, end_s, waiting, succ_indptr, succ_ids) -> int:
    """Mark ``done[:n_done]`` finished now; write the successors left with no dependency to ``out``, ascending."""
    n = 0
    for i in range(n_done):
        t = done[i]
        end_s[t] = clock[_NOW]
        for p in range(succ_indptr[t], succ_indptr[t + 1]):
            s = succ_ids[p]
            waiting[s] -= 1
            if waiting[s] == 0:
                out[n] = s
                n += 1
    count[ENDED] += n_done
    out[:n].sort()
    return n


@njit(cache=True)
def _release(ready, n, other, kind, stream, duration_s, size_bytes, instant, clock, count, heap_time, heap_key,
             start_s, end_s, waiting, succ_indptr, succ_ids, busy, head, tail, next_task, active, remaining, rate,
             link_indptr, link_ids) -> None:
    """_GraphRun._release: hand ``ready[:n]`` to their resource; zero-time tasks finish at once, and so on.
    ``other`` is a second buffer as long as ``ready``: the two swap as instants release their successors."""
    while n > 0:
        for i in range(n):  # compute, to its stream (queued behind a busy one)
            t = ready[i]
            if kind[t] == _COMPUTE:
                s = stream[t]
                if busy[s]:
                    if head[s] < 0:
                        head[s] = t
                    else:
                        next_task[tail[s]] = t
                    tail[s] = t
                else:
                    _begin(s, t, duration_s, clock, count, heap_time, heap_key, start_s, busy)
        flows = False
        for i in range(n):  # flows, onto the network (Network.start)
            t = ready[i]
            if kind[t] == _TRANSFER and not instant[t]:
                if not flows:
                    _drain(clock, count, active, remaining, rate)
                    flows = True
                start_s[t] = clock[_NOW]
                remaining[t] = size_bytes[t]
                rate[t] = 0.0
                active[count[_ACTIVE]] = t
                count[_ACTIVE] += 1
        if flows:
            _invalidate(clock, count, heap_time, heap_key)
        m = 0
        for i in range(n):  # zero-time tasks end now
            t = ready[i]
            if instant[t]:
                start_s[t] = clock[_NOW]
                ready[m] = t
                m += 1
        if m == 0:
            return
        n = _ready_after(ready, m, other, clock, count, end_s, waiting, succ_indptr, succ_ids)
        ready, other = other, ready


@njit(cache=True, error_model="numpy")
def _recompute(clock, count, heap_time, heap_key, active, remaining, rate, finish_at, link_indptr, link_ids,
               capacity, rates, entry_flow, entry_link, diag) -> bool:
    """Network._recompute: new max-min rates for the active flows and their next finish; False on underflow."""
    count[_PENDING] = 0
    _drain(clock, count, active, remaining, rate)
    n = count[_ACTIVE]
    if n == 0:
        return True
    if n >= WATERFILL_FLOWS:
        _waterfill(active, n, link_indptr, link_ids, capacity, rates, entry_flow, entry_link)
    else:
        _maxmin(active, n, link_indptr, link_ids, capacity, rates, entry_flow, entry_link)
    next_s, least = np.inf, np.inf
    for i in range(n):
        f = active[i]
        rate[f] = rates[i]
        finish_at[f] = clock[_NOW] + remaining[f] / rates[i]
        next_s = min(next_s, finish_at[f])
        least = min(least, rates[i])
    if not np.isfinite(next_s):
        diag[0], diag[1] = n, least
        return False
    _push(heap_time, heap_key, count, next_s, _NORMAL, _FINISH_DUE, count[_VERSION])
    return True


@njit(cache=True, error_model="numpy")
def advance(kind, stream, duration_s, size_bytes, instant, link_indptr, link_ids, succ_indptr, succ_ids, capacity,
            rtol, max_events, clock, count, heap_time, heap_key, start_s, end_s, waiting, busy, head, tail, next_task,
            active, remaining, rate, finish_at, scratch, entries, rates, diag) -> int:
    """Run events until none are left (DONE), ``max_events`` have run (PAUSED), the heap may overflow with the next
    event (NEED_ROOM: grow it and call again) or rates underflow (UNDERFLOW, ``diag`` says which)."""
    ready, other, entry_flow, entry_link = scratch[0], scratch[1], entries[0], entries[1]
    margin = busy.size + 4  # pushes one event can make: a begin per stream, a recompute, a finish
    ran = 0
    while count[_HEAP] > 0:
        if ran >= max_events:
            return PAUSED
        if count[_HEAP] + margin > heap_time.size:
            return NEED_ROOM
        clock[_NOW] = heap_time[0]
        event, arg = heap_key[0, 2], heap_key[0, 3]
        _pop(heap_time, heap_key, count)
        count[EVENTS] += 1
        ran += 1
        if event == _RELEASE_ROOTS:
            n = 0
            for t in range(kind.size):
                if waiting[t] == 0:
                    ready[n] = t
                    n += 1
            _release(ready, n, other, kind, stream, duration_s, size_bytes, instant, clock, count, heap_time,
                     heap_key, start_s, end_s, waiting, succ_indptr, succ_ids, busy, head, tail, next_task, active,
                     remaining, rate, link_indptr, link_ids)
        elif event == _STREAM_END:
            s = stream[arg]
            if head[s] >= 0:  # Streams._end: the next queued task begins first
                t = head[s]
                head[s] = next_task[t]
                if head[s] < 0:
                    tail[s] = -1
                _begin(s, t, duration_s, clock, count, heap_time, heap_key, start_s, busy)
            else:
                busy[s] = False
            other[0] = arg
            n = _ready_after(other, 1, ready, clock, count, end_s, waiting, succ_indptr, succ_ids)
            _release(ready, n, other, kind, stream, duration_s, size_bytes, instant, clock, count, heap_time,
                     heap_key, start_s, end_s, waiting, succ_indptr, succ_ids, busy, head, tail, next_task, active,
                     remaining, rate, link_indptr, link_ids)
        elif event == _RECOMPUTE:
            if not _recompute(clock, count, heap_time, heap_key, active, remaining, rate, finish_at, link_indptr,
                              link_ids, capacity, rates, entry_flow, entry_link, diag):
                return UNDERFLOW
        elif arg == count[_VERSION]:  # a finish not made stale by a later change of rates
            _drain(clock, count, active, remaining, rate)
            now = clock[_NOW]
            due_by = now + rtol * max(now, 1e-9)
            n, kept = 0, 0
            for i in range(count[_ACTIVE]):
                f = active[i]
                if finish_at[f] <= due_by:
                    remaining[f], rate[f] = 0.0, 0.0
                    other[n] = f
                    n += 1
                else:
                    active[kept] = f
                    kept += 1
            count[_ACTIVE] = kept
            _invalidate(clock, count, heap_time, heap_key)
            n = _ready_after(other, n, ready, clock, count, end_s, waiting, succ_indptr, succ_ids)
            _release(ready, n, other, kind, stream, duration_s, size_bytes, instant, clock, count, heap_time,
                     heap_key, start_s, end_s, waiting, succ_indptr, succ_ids, busy, head, tail, next_task, active,
                     remaining, rate, link_indptr, link_ids)
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


@njit(cache=True)
def push_roots(heap_time: np.ndarray, heap_key: np.ndarray, count: np.ndarray) -> None:
    """The first event: release every task without dependencies at time 0 (run_graph's first schedule)."""
    _push(heap_time, heap_key, count, 0.0, _NORMAL, _RELEASE_ROOTS, 0)
