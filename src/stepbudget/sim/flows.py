"""Flows from the rows to the columns of a matrix, all starting at t = 0: when each ends, as ``run_graph`` says.

A plain all-to-all is such a set: the flow from GPU i to GPU j leaves on i's link and enters on j's, one flow per
pair, hundreds of thousands of them. ``matrix_end_times`` runs them as root transfers on the simulator's engine,
telling it they are pairs (``run_events(pairs=...)``): it then shares the links on a matrix of the pairs still
moving instead of lists rebuilt at every re-sharing, the same end times to the bit.
"""

from __future__ import annotations

import numpy as np

from stepbudget.sim.engine import Progress, check_finish_rtol, run_events
from stepbudget.sim.graph import TaskGraph, TaskKind

__all__ = ["matrix_end_times", "matrix_graph"]

_REPORT_EVENTS = 1_000
"""Events between progress reports (two per re-sharing): a few tenths of a second at 512 GPUs."""


def matrix_graph(size_bytes: np.ndarray) -> TaskGraph:
    """One root TRANSFER task per positive entry of ``size_bytes`` (R, C), in row-major order: entry (r, c)
    crosses link r, then link R + c."""
    R = size_bytes.shape[0]
    row, col = np.nonzero(size_bytes > 0)
    F = row.size
    return TaskGraph(kind=np.full(F, TaskKind.TRANSFER, dtype=np.int8), stream=np.full(F, -1),
                     duration_s=np.zeros(F), size_bytes=size_bytes[row, col].astype(np.float64),
                     link_indptr=np.arange(0, 2 * F + 1, 2), link_ids=np.stack([row, R + col], axis=1).ravel(),
                     dep_indptr=np.zeros(F + 1, dtype=np.int64), dep_ids=np.empty(0, dtype=np.int64))


def matrix_end_times(size_bytes, row_Bps, col_Bps, *, finish_rtol: float,
                     progress: Progress | None = None) -> np.ndarray:
    """End time (s) of the flow of each entry of ``size_bytes`` (R, C), shape (R, C); 0 where no byte moves.

    The flow of entry (r, c) moves its bytes over row r's link (``row_Bps`` (R,) bytes/s) and column c's
    (``col_Bps`` (C,)). All flows start at t = 0 and share the links max-min fairly, re-shared as flows end;
    flows due within ``finish_rtol`` of the elapsed time end together (``run_graph``'s rule). ``progress(ended,
    flows)`` follows them.
    """
    size = np.asarray(size_bytes, dtype=np.float64)
    capacity = np.concatenate([np.asarray(row_Bps, dtype=np.float64), np.asarray(col_Bps, dtype=np.float64)])
    if size.ndim != 2 or capacity.shape != (size.shape[0] + size.shape[1],):
        raise ValueError(f"size_bytes must be (R, C) with R row rates and C column rates; got {size.shape}, "
                         f"{np.shape(row_Bps)} and {np.shape(col_Bps)}")
    if not (np.isfinite(size).all() and (size >= 0).all()):
        raise ValueError("size_bytes must be finite and >= 0 for every pair")
    if np.any(~(capacity > 0) | ~np.isfinite(capacity)):
        raise ValueError("row_Bps and col_Bps must be finite and > 0 on every link")
    check_finish_rtol(finish_rtol)
    graph = matrix_graph(size)
    _, ends, _ = run_events(graph, capacity, graph.duration_s, finish_rtol=finish_rtol, progress=progress,
                            pairs=(size.shape[0], size.shape[1]), report_every=_REPORT_EVENTS)
    out = np.zeros_like(size)
    out[size > 0] = ends
    return out
