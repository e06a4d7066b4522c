"""Discrete-event simulation of a task graph on compute streams and shared links: ``run_graph(graph) -> Timeline``.

``run_graph`` checks its inputs once, then runs the event loop of ``sim/_core.py`` (compiled by numba where the
`fast` extra is installed, the same code as plain Python where it is not): a heap of events, FIFO compute
streams, flows sharing links max-min fairly, re-shared at every instant a flow starts or ends. The rules, and
what the simulation ignores, are in that module's docstring. ``run_events`` is the same loop on inputs already
checked, for the callers that build their own graph (``sim/flows.py``'s matrices of flows).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from stepbudget.sim import _core
from stepbudget.sim.graph import TaskGraph, TaskKind
from stepbudget.sim.timeline import Timeline

__all__ = ["run_events", "run_graph"]

_TIME_RTOL = 1e-12  # flows due within this relative time of "now" end together: those due at the same instant
_REPORT_EVENTS = 200_000  # events between progress reports (and chances to grow the heap): a fraction of a second

Progress = Callable[[int, int], None]
"""``progress(ended, tasks)``: how many of the graph's tasks have ended so far."""


def _per_item(values: np.ndarray | None, size: int, name: str, what: str) -> np.ndarray:
    if values is None:
        return np.ones(size)
    values = np.asarray(values, dtype=np.float64)
    if values.shape != (size,):
        raise ValueError(f"{name} has shape {values.shape}; pass one factor per {what}, shape ({size},)")
    return values


def run_graph(
    graph: TaskGraph,
    link_capacity_Bps: np.ndarray,
    *,
    link_rate_multiplier: np.ndarray | None = None,
    duration_multiplier: np.ndarray | None = None,
    finish_rtol: float = _TIME_RTOL,
    progress: Progress | None = None,
) -> Timeline:
    """Run ``graph`` from time 0 until every task has finished.

    Shapes: ``link_capacity_Bps (L,)`` in bytes/s with ``L >= graph.num_links``;
    ``link_rate_multiplier (L,)`` scales each link (0.5 = a link at half rate);
    ``duration_multiplier (T,)`` scales each compute task's ``duration_s`` (jitter, drawn by the caller).
    Links are shared max-min fair (``maxmin``'s rule). Flows due within ``finish_rtol`` of the elapsed time end
    together at the first of them (1e-12 by default: only those due at the same instant).
    ``progress(ended, tasks)`` is told how many tasks have ended, every 200,000 events and at the end.
    """
    capacity = np.asarray(link_capacity_Bps, dtype=np.float64)
    if capacity.ndim != 1 or capacity.size < graph.num_links:
        raise ValueError(f"link_capacity_Bps has shape {capacity.shape}; the graph uses "
                         f"{graph.num_links} links, so pass shape ({graph.num_links},) or longer")
    capacity = capacity * _per_item(link_rate_multiplier, capacity.size, "link_rate_multiplier", "link")
    if np.any(~(capacity > 0) | ~np.isfinite(capacity)):
        raise ValueError("link_capacity_Bps * link_rate_multiplier must be finite and > 0 on every "
                         f"link, got {capacity}; drop a dead link from the graph instead")
    factor = _per_item(duration_multiplier, graph.num_tasks, "duration_multiplier", "task")
    if np.any(~(factor >= 0) | ~np.isfinite(factor)):
        raise ValueError("duration_multiplier must be finite and >= 0 for every task")
    check_finish_rtol(finish_rtol)
    start_s, end_s, events = run_events(graph, capacity, graph.duration_s * factor, finish_rtol=finish_rtol,
                                        progress=progress)
    stuck = np.isnan(end_s)
    if np.any(stuck):
        shown = ", ".join(graph.label(int(i)) for i in np.flatnonzero(stuck)[:3])
        raise ValueError(f"{int(stuck.sum())} task(s) never became ready (first: {shown}); "
                         "the dependencies contain a cycle: make deps point to earlier work")
    return Timeline(start_s=start_s, end_s=end_s, graph=graph, engine_events=events)


def check_finish_rtol(finish_rtol: float) -> None:
    if not 0 <= finish_rtol < 1:
        raise ValueError(f"finish_rtol={finish_rtol!r}: give a fraction of the elapsed time in [0, 1)")


def _pair_of(link_ids: np.ndarray, rows: int) -> np.ndarray:
    """Each flow's row and column, shape (T, 2) int32, where every task crosses link r < rows, then rows + c."""
    pair = link_ids.reshape(-1, 2).astype(np.int32)
    pair[:, 1] -= rows
    return pair


def run_events(graph: TaskGraph, capacity_Bps: np.ndarray, duration_s: np.ndarray, *, finish_rtol: float,
               progress: Progress | None = None, pairs: tuple[int, int] | None = None,
               report_every: int = _REPORT_EVENTS) -> tuple[np.ndarray, np.ndarray, int]:
    """The event loop on checked inputs: each task's start and end (NaN for a task never ready) and the events run.

    ``capacity_Bps (L,)`` and ``duration_s (T,)`` with their multipliers applied. ``pairs=(R, C)``: every flow
    crosses a row's link ``r < R`` then a column's, ``R + c``, at most one flow per pair (``sim/flows.py``'s
    matrices): the links are shared on the matrix of moving pairs, the same rates to the bit, faster.
    ``progress(ended, tasks)`` every ``report_every`` events and at the end."""
    num_links = capacity_Bps.size
    succ_indptr, succ_ids = _core.successors(graph.dep_indptr, graph.dep_ids)
    instant = (graph.kind == TaskKind.JOIN) | ((graph.kind == TaskKind.TRANSFER) & (graph.size_bytes == 0))
    # duration_s copied: every array the loop reads then has the same flags (the graph's are read-only) whoever
    # calls, so the loop is compiled once
    g = _core.Graph(kind=graph.kind, stream=graph.stream, duration_s=np.array(duration_s, dtype=np.float64),
                    size_bytes=graph.size_bytes, instant=instant, link_indptr=graph.link_indptr,
                    link_ids=graph.link_ids, succ_indptr=succ_indptr, succ_ids=succ_ids, capacity=capacity_Bps,
                    pair=np.zeros((0, 2), np.int32) if pairs is None else _pair_of(graph.link_ids, pairs[0]))
    options = _core.Options(finish_rtol=float(finish_rtol), max_events=int(report_every))
    state = _core.new_state(graph.num_tasks, graph.num_streams, num_links, pairs or (0, 0))
    state.waiting[:] = np.diff(graph.dep_indptr)
    work = _core.new_work(graph.num_tasks, num_links, graph.link_ids.size)
    while True:
        with np.errstate(divide="ignore", over="ignore"):  # plain Python only: an underflowed rate is refused below
            status = _core.advance(g, options, state, work)
        if progress is not None:
            progress(int(state.counts[_core.ENDED]), graph.num_tasks)
        if status == _core.DONE:
            return state.start_s, state.end_s, int(state.counts[_core.EVENTS])
        if status == _core.UNDERFLOW:
            # every capacity is finite and > 0, so only a rate that underflowed gets here: stopping would leave
            # the flows unfinished for ever and blame a cycle
            raise ValueError(f"link rates of {int(state.diag[0])} flow(s) underflow: the smallest is "
                             f"{float(state.diag[1]):g} B/s for bytes that never finish; give links at least a "
                             "thousandth of a byte per second")
        if status == _core.NEED_ROOM:
            state = _core.with_room(state)
