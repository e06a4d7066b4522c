"""What a simulation returns, and its export to the Chrome / Perfetto trace format.

Trace Event Format (Google, "Trace Event Format" document, used by chrome://tracing
and ui.perfetto.dev): complete events ``ph: "X"`` with ``ts`` and ``dur`` in
microseconds on a ``(pid, tid)`` track, and metadata events ``ph: "M"`` named
``process_name`` / ``thread_name`` that label the tracks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from stepbudget.sim.graph import TaskGraph, TaskKind

__all__ = ["Timeline", "trace_events", "COMPUTE_PID", "NETWORK_PID"]

COMPUTE_PID = 1
"""Trace process holding one track per compute stream."""
NETWORK_PID = 2
"""Trace process holding one track per link."""
_US_PER_S = 1e6  # trace timestamps are microseconds


def _graph_field(name: str, doc: str) -> property:
    return property(lambda self: getattr(self.graph, name), doc=doc)


@dataclass(frozen=True, eq=False)
class Timeline:
    """When each of ``T`` tasks of ``graph`` ran. Arrays are indexed by task id, times in seconds;
    the tasks' kind, stream, size, links and names are the graph's."""

    start_s: np.ndarray
    """Shape ``(T,)``: when the task began (a compute task: when its stream took it)."""
    end_s: np.ndarray
    """Shape ``(T,)``: when the task finished."""
    graph: TaskGraph
    """The task graph that ran."""
    engine_events: int = 0
    """Heap events the engine processed (a cost figure for benchmarks)."""

    kind = _graph_field("kind", "Shape ``(T,)``, int8 ``TaskKind``.")
    stream = _graph_field("stream", "Shape ``(T,)``, stream id of compute tasks, -1 otherwise.")
    size_bytes = _graph_field("size_bytes", "Shape ``(T,)``, bytes of transfers, 0 otherwise.")
    link_indptr = _graph_field("link_indptr", "Shape ``(T + 1,)``, CSR row pointers into ``link_ids``.")
    link_ids = _graph_field("link_ids", "Shape ``(E,)``, links crossed by each transfer.")
    names = _graph_field("names", "Shape ``(T,)`` of str, or None (tasks then show as ``kind#index``).")

    @property
    def makespan_s(self) -> float:
        """Time from 0 to the end of the last task, in seconds."""
        return float(self.end_s.max(initial=0.0))

    @property
    def duration_s(self) -> np.ndarray:
        """Shape ``(T,)``: ``end_s - start_s``."""
        return self.end_s - self.start_s

    def label(self, task: int) -> str:
        """Name of one task, or ``kind#index``."""
        return self.graph.label(task)


def _metadata(pid: int, tid: int | None, name: str) -> dict[str, Any]:
    event: dict[str, Any] = {"ph": "M", "pid": pid, "name": "thread_name" if tid is not None
                             else "process_name", "args": {"name": name}}
    if tid is not None:
        event["tid"] = tid
    return event


def trace_events(
    timeline: Timeline,
    *,
    stream_names: Sequence[str] | None = None,
    link_names: Sequence[str] | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Export ``timeline`` as ``{"traceEvents": [...]}`` for Perfetto or chrome://tracing.

    Each compute task is one ``X`` event on its stream's track; each transfer is one
    ``X`` event on the track of every link it crosses; joins take no time and are
    left out. Tracks are named ``stream_names[i]`` / ``link_names[j]`` when given,
    else ``stream i`` / ``link j``. Write it with ``json.dump``.
    """
    events: list[dict[str, Any]] = [
        _metadata(COMPUTE_PID, None, "compute streams"),
        _metadata(NETWORK_PID, None, "links"),
    ]
    ts_us = timeline.start_s * _US_PER_S
    dur_us = (timeline.end_s - timeline.start_s) * _US_PER_S
    is_compute = timeline.kind == TaskKind.COMPUTE
    for stream in np.unique(timeline.stream[is_compute]):
        name = stream_names[stream] if stream_names is not None else f"stream {stream}"
        events.append(_metadata(COMPUTE_PID, int(stream), name))
    for link in np.unique(timeline.link_ids):
        name = link_names[link] if link_names is not None else f"link {link}"
        events.append(_metadata(NETWORK_PID, int(link), name))
    for task in np.flatnonzero(is_compute).tolist():
        events.append({"ph": "X", "name": timeline.label(task), "cat": "compute",
                       "pid": COMPUTE_PID, "tid": int(timeline.stream[task]),
                       "ts": float(ts_us[task]), "dur": float(dur_us[task])})
    for task in np.flatnonzero(timeline.kind == TaskKind.TRANSFER).tolist():
        lo, hi = timeline.link_indptr[task], timeline.link_indptr[task + 1]
        for link in timeline.link_ids[lo:hi]:
            events.append({"ph": "X", "name": timeline.label(task), "cat": "transfer",
                           "pid": NETWORK_PID, "tid": int(link),
                           "ts": float(ts_us[task]), "dur": float(dur_us[task]),
                           "args": {"bytes": float(timeline.size_bytes[task])}})
    return {"traceEvents": events}
