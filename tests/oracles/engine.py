"""The simulator's event engine in plain Python and numpy: the reference that tests/sim/test_engine_oracle.py holds
``stepbudget.sim.engine.run_graph`` (the compiled loop of sim/_core.py) to, on small graphs.

It was the library's engine until issue 33 (one implementation of each algorithm at run time), written apart from
the compiled one: callbacks on a heap instead of event codes, numpy's vectorised progressive filling
(``maxmin.maxmin_rates_unchecked``, rounds that freeze many bottlenecks at once) instead of sequential
water-filling, so the two agree up to rounding, not to the bit. Three layers, read top to bottom:

* ``Engine``: a heap of ``(time_s, priority, seq, callback)`` and a step loop, as in simpy's ``core.py``.
* Resources on an engine: ``Streams`` (serial FIFO compute, one task at a time per stream) and ``Network``
  (flows sharing links at max-min fair rates).
* ``run_graph(graph, link_capacity_Bps) -> Timeline``: releases each task when its dependencies have finished,
  onto a stream, onto the network, or through at once; an ``observer`` is told of every start, end and rate.

Network events are batched: any flow start or finish marks the rates stale and schedules one recomputation at
the same instant with ``Priority.LATE`` (after every other event at that time), so a thousand flows that finish
together cost one rate computation. The network keeps a single pending "next finish" event; a version counter
invalidates it lazily when the rates change.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Callable
from enum import IntEnum, StrEnum
from functools import partial

import numpy as np

from stepbudget.maxmin import FlowLinks, maxmin_rates_unchecked
from stepbudget.sim.graph import TaskGraph, TaskKind
from stepbudget.sim.timeline import Timeline

_TIME_RTOL = 1e-12  # flows due within this relative time of "now" finish together


def gather_csr(indptr: np.ndarray, data: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Select ``rows`` of a CSR structure, in the order given.

    Shapes: ``indptr (R + 1,)``, ``data (E,)``, ``rows (K,)`` -> ``(K + 1,)``, ``(E_K,)``.
    """
    begin = indptr[rows]
    lengths = indptr[rows + 1] - begin
    out_indptr = np.zeros(rows.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=out_indptr[1:])
    # position of each selected entry = row begin + offset inside the row
    offsets = np.arange(out_indptr[-1], dtype=np.int64) - np.repeat(out_indptr[:-1], lengths)
    return out_indptr, data[np.repeat(begin, lengths) + offsets]


class Priority(IntEnum):
    """Order of events due at the same time: lower values run first."""

    URGENT = 0
    NORMAL = 1
    LATE = 2
    """After all other events at this instant (batched rate recomputation)."""


class Engine:
    """A clock and a heap of ``(time_s, priority, seq, callback)``; ``seq`` keeps FIFO order."""

    def __init__(self) -> None:
        self.now: float = 0.0
        """Simulated time in seconds."""
        self.events: int = 0
        """Callbacks run so far."""
        self._heap: list[tuple[float, int, int, Callable[[], None]]] = []
        self._seq = itertools.count()

    def schedule(self, time_s: float, callback: Callable[[], None], priority: Priority = Priority.NORMAL) -> None:
        """Run ``callback()`` at ``time_s`` (not before ``now``)."""
        if not time_s >= self.now:
            raise ValueError(f"time_s={time_s} is before now={self.now}; events cannot go back in time")
        heapq.heappush(self._heap, (time_s, priority, next(self._seq), callback))

    def step(self) -> None:
        """Advance the clock to the next event and run it."""
        self.now, _, _, callback = heapq.heappop(self._heap)
        self.events += 1
        callback()

    def run(self, until: float | None = None) -> None:
        """Run events until none are left, or until the next is later than ``until``."""
        while self._heap and (until is None or self._heap[0][0] <= until):
            self.step()
        if until is not None:
            self.now = max(self.now, until)


class Streams:
    """Serial FIFO compute streams: each runs one task at a time, in submission order.

    ``on_start(task)`` and ``on_finish(task)`` are called at ``engine.now``.
    """

    def __init__(self, engine: Engine, num_streams: int, on_start: Callable[[int], None],
                 on_finish: Callable[[int], None]) -> None:
        self._engine, self._on_start, self._on_finish = engine, on_start, on_finish
        self._queues: list[deque[tuple[int, float]]] = [deque() for _ in range(num_streams)]
        self._busy = [False] * num_streams

    def submit(self, task: int, stream: int, duration_s: float) -> None:
        """Queue ``task`` on ``stream``; it starts when the stream is free."""
        if self._busy[stream]:
            self._queues[stream].append((task, duration_s))
        else:
            self._begin(stream, task, duration_s)

    def _begin(self, stream: int, task: int, duration_s: float) -> None:
        self._busy[stream] = True
        self._on_start(task)
        self._engine.schedule(self._engine.now + duration_s, partial(self._end, stream, task))

    def _end(self, stream: int, task: int) -> None:
        queue = self._queues[stream]
        if queue:
            self._begin(stream, *queue.popleft())
        else:
            self._busy[stream] = False
        self._on_finish(task)


class Network:
    """Links shared by flows; ``on_finish(flows)`` is called with the ids that complete.

    ``flow_links`` lists, for every flow id that may ever start, the links it crosses. Rates are max-min fair
    (``maxmin``) and are recomputed once per instant at which any flow started or finished;
    ``on_rates(flows, rates_Bps)``, if given, sees every new allocation.
    """

    def __init__(self, engine: Engine, flow_links: FlowLinks, capacity_Bps: np.ndarray,
                 on_finish: Callable[[np.ndarray], None],
                 on_rates: Callable[[np.ndarray, np.ndarray], None] | None = None,
                 finish_rtol: float = _TIME_RTOL) -> None:
        self._engine, self._links, self._capacity = engine, flow_links, capacity_Bps
        self._rtol = finish_rtol
        self._on_finish, self._on_rates = on_finish, on_rates
        num_flows = flow_links.indptr.size - 1
        self._remaining = np.zeros(num_flows)  # bytes left, as of self._last_s
        self._rate = np.zeros(num_flows)
        self._finish_at = np.full(num_flows, np.inf)
        self._active = np.empty(0, dtype=np.int64)
        self._last_s = 0.0
        self._version = 0  # bumped whenever the pending finish event becomes stale
        self._recompute_pending = False

    def start(self, flows: np.ndarray, size_bytes: np.ndarray) -> None:
        """Begin moving ``size_bytes[i]`` over the links of flow ``flows[i]`` now."""
        self._advance()
        self._remaining[flows] = size_bytes
        self._rate[flows] = 0.0
        self._active = np.concatenate([self._active, flows])
        self._invalidate()

    def _advance(self) -> None:
        """Drain the bytes moved since the last update at the current rates."""
        elapsed_s = self._engine.now - self._last_s
        if elapsed_s > 0 and self._active.size:
            active = self._active
            left = self._remaining[active] - self._rate[active] * elapsed_s  # bytes = rate * time
            self._remaining[active] = np.maximum(left, 0.0)
        self._last_s = self._engine.now

    def _invalidate(self) -> None:
        self._version += 1
        if not self._recompute_pending:
            self._recompute_pending = True
            self._engine.schedule(self._engine.now, self._recompute, Priority.LATE)

    def _recompute(self) -> None:
        self._recompute_pending = False
        self._advance()
        active = self._active
        if not active.size:
            return
        indptr, link_ids = gather_csr(self._links.indptr, self._links.link_ids, active)
        rates = maxmin_rates_unchecked(indptr, link_ids, self._capacity)
        self._rate[active] = rates
        with np.errstate(divide="ignore", over="ignore"):  # an infinite finish is refused just below
            finish_at = self._engine.now + self._remaining[active] / rates  # time = bytes / rate
        self._finish_at[active] = finish_at
        if self._on_rates is not None:
            self._on_rates(active, rates)
        next_s = float(finish_at.min())
        if not np.isfinite(next_s):
            raise ValueError(f"link rates of {active.size} flow(s) underflow: the smallest is {float(rates.min()):g} "
                             "B/s for bytes that never finish")
        self._engine.schedule(next_s, partial(self._finish_due, self._version))

    def _finish_due(self, version: int) -> None:
        if version != self._version:
            return  # stale: rates changed after this event was scheduled
        self._advance()
        now, active = self._engine.now, self._active
        due = self._finish_at[active] <= now + self._rtol * max(now, 1e-9)
        done = active[due]
        self._remaining[done] = 0.0
        self._rate[done] = 0.0
        self._active = active[~due]
        self._invalidate()
        self._on_finish(done)


class SimEvent(StrEnum):
    """What an observer is told about."""

    START = "start"
    END = "end"
    RATES = "rates"
    """New link-sharing allocation; ``rates_Bps`` gives each listed transfer's rate."""


Observer = Callable[[float, SimEvent, np.ndarray, "np.ndarray | None"], None]
"""``observer(time_s, event, task_ids, rates_Bps)``; ``rates_Bps`` is None unless RATES.
Called in batches, in time order; it must not modify the arrays."""


class _GraphRun:
    """The mutable state of one ``run_graph`` call."""

    def __init__(self, graph: TaskGraph, capacity_Bps: np.ndarray, duration_s: np.ndarray,
                 observer: Observer | None, finish_rtol: float) -> None:
        num_tasks = graph.num_tasks
        self.graph, self.duration_s, self.observer = graph, duration_s, observer
        self.engine = Engine()
        self.start_s = np.full(num_tasks, np.nan)
        self.end_s = np.full(num_tasks, np.nan)
        self.waiting = np.diff(graph.dep_indptr)  # unfinished dependencies per task
        owner = np.repeat(np.arange(num_tasks, dtype=np.int64), self.waiting)
        self.succ_ids = owner[np.argsort(graph.dep_ids, kind="stable")]
        self.succ_indptr = np.zeros(num_tasks + 1, dtype=np.int64)
        np.cumsum(np.bincount(graph.dep_ids, minlength=num_tasks), out=self.succ_indptr[1:])
        is_transfer = graph.kind == TaskKind.TRANSFER
        self.instant = (graph.kind == TaskKind.JOIN) | (is_transfer & (graph.size_bytes == 0))
        self.is_compute = graph.kind == TaskKind.COMPUTE
        self.is_flow = is_transfer & ~self.instant
        self.streams = Streams(self.engine, graph.num_streams, self._compute_started, self._compute_finished)
        on_rates = None if observer is None else self._rates_changed
        self.network = Network(self.engine, FlowLinks(graph.link_indptr, graph.link_ids), capacity_Bps,
                               self._complete, on_rates, finish_rtol)

    def run(self) -> None:
        roots = np.flatnonzero(self.waiting == 0)
        self.engine.schedule(0.0, partial(self._release, roots))
        self.engine.run()

    def _observe(self, event: SimEvent, tasks: np.ndarray, rates: np.ndarray | None = None) -> None:
        if self.observer is not None and tasks.size:
            self.observer(self.engine.now, event, tasks, rates)

    def _rates_changed(self, flows: np.ndarray, rates: np.ndarray) -> None:
        self._observe(SimEvent.RATES, flows, rates)

    def _compute_started(self, task: int) -> None:
        self.start_s[task] = self.engine.now
        self._observe(SimEvent.START, np.array([task]))

    def _compute_finished(self, task: int) -> None:
        self._complete(np.array([task]))

    def _ready_after(self, done: np.ndarray) -> np.ndarray:
        """Mark ``done`` finished now; return the successors that have no dependency left."""
        self.end_s[done] = self.engine.now
        self._observe(SimEvent.END, done)
        _, successors = gather_csr(self.succ_indptr, self.succ_ids, done)
        if not successors.size:
            return successors
        unique, count = np.unique(successors, return_counts=True)
        self.waiting[unique] -= count
        return unique[self.waiting[unique] == 0]

    def _complete(self, done: np.ndarray) -> None:
        self._release(self._ready_after(done))

    def _release(self, ready: np.ndarray) -> None:
        """Hand ready tasks to their resource; zero-time tasks finish at once."""
        graph = self.graph
        while ready.size:
            for task in ready[self.is_compute[ready]].tolist():
                self.streams.submit(task, int(graph.stream[task]), float(self.duration_s[task]))
            flows = ready[self.is_flow[ready]]
            if flows.size:
                self.start_s[flows] = self.engine.now
                self._observe(SimEvent.START, flows)
                self.network.start(flows, graph.size_bytes[flows])
            instant = ready[self.instant[ready]]
            self.start_s[instant] = self.engine.now
            self._observe(SimEvent.START, instant)
            ready = self._ready_after(instant) if instant.size else instant


def run_graph(graph: TaskGraph, link_capacity_Bps: np.ndarray, *, link_rate_multiplier: np.ndarray | None = None,
              duration_multiplier: np.ndarray | None = None, observer: Observer | None = None,
              finish_rtol: float = _TIME_RTOL) -> Timeline:
    """Run ``graph`` from time 0 until every task has finished (the library's ``run_graph``, its inputs trusted).

    ``link_rate_multiplier (L,)`` scales each link, ``duration_multiplier (T,)`` each compute task's time;
    ``observer`` is told of starts, ends and rate changes; flows due within ``finish_rtol`` of the elapsed time
    end together at the first of them.
    """
    capacity = np.asarray(link_capacity_Bps, dtype=np.float64)
    if link_rate_multiplier is not None:
        capacity = capacity * link_rate_multiplier
    durations = graph.duration_s if duration_multiplier is None else graph.duration_s * duration_multiplier
    run = _GraphRun(graph, capacity, durations, observer, finish_rtol)
    run.run()
    if np.any(np.isnan(run.end_s)):
        raise ValueError("the dependencies contain a cycle")
    return Timeline(start_s=run.start_s, end_s=run.end_s, graph=graph, engine_events=run.engine.events)
