"""The plain all-to-all as a fluid: the reference the simulator's engine replaced in issue 21.

``stepbudget.a2a.timing.plain_alltoall_s`` times every GPU pair as a root transfer of the simulator's engine
(``stepbudget.sim.flows.matrix_end_times``). Here the same flows move as a fluid at their max-min fair rates
(the simulator's rule, ``stepbudget.maxmin``), re-rated with numpy each time a flow ends: the slower, simpler
version it is checked against (tests/a2a/test_timing.py) and timed beside (benchmarks/bench_a2a.py).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from stepbudget.a2a.timing import _GROUP_MIN_FLOWS, _plain_s
from stepbudget.maxmin import maxmin_rates_unchecked

PLAIN_GROUP_RTOL = 1e-3
"""The fluid ends together the flows of a plain all-to-all due within 0.1 % of the elapsed time: each batch moves
its answer by at most that fraction, so the engine's plain time is checked against it within this tolerance."""


def _links_table(flow_links) -> np.ndarray:
    """Flows' links as an (F, H) int64 table padded with -1 (accepts ragged sequences)."""
    if isinstance(flow_links, np.ndarray) and flow_links.ndim == 2:
        return flow_links.astype(np.int64, copy=False)
    rows = [list(links) for links in flow_links]
    table = np.full((len(rows), max(max((len(r) for r in rows), default=0), 1)), -1, dtype=np.int64)
    for f, r in enumerate(rows):
        table[f, : len(r)] = r
    return table


def _check_links(table: np.ndarray, capacities) -> np.ndarray:
    cap = np.asarray(capacities, dtype=np.float64)
    if cap.ndim != 1 or np.isnan(cap).any() or (cap <= 0).any():
        raise ValueError(f"capacities must be a 1-D array of link rates > 0 (bytes/s, inf allowed), got {capacities!r}")
    if table.size and (table.max() >= cap.size or table.min() < -1):
        raise ValueError(f"flow_links name a link outside 0..{cap.size - 1}; pass one capacity per link")
    finite = np.where(table >= 0, np.isfinite(cap[table.clip(0)]), False).any(axis=1)
    if not finite.all():
        raise ValueError(
            f"flow {int(np.argmin(finite))} crosses no finite-capacity link, so its rate is unbounded; give it a link"
        )
    return cap


def _maxmin(table: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """Progressive filling on a checked link table: the simulator's rule (maxmin.py)."""
    used = table >= 0
    indptr = np.concatenate(([0], np.cumsum(used.sum(axis=1))))
    return maxmin_rates_unchecked(indptr, table[used], cap)


def maxmin_rates_padded(flow_links, capacities) -> np.ndarray:
    """Max-min fair rates of flows sharing links, shape ``(F,)`` in bytes/s (``maxmin.maxmin_rates``' rule).

    ``flow_links``: an (F, H) int table of link indices per flow padded with -1, or F sequences.
    ``capacities``: (L,) bytes/s per link (``inf`` = unconstrained). Progressive filling: raise all
    unfrozen flows' rates together until a link fills, freeze the flows that cross it, repeat; every
    flow ends with a saturated link on which no other flow is faster (Bertsekas & Gallager 6.5.2).
    """
    table = _links_table(flow_links)
    return _maxmin(table, _check_links(table, capacities))


def fluid_finish_times(flow_bytes, flow_links, capacities, group_rtol: float = 0.0,
                       progress: Callable[[int, int], None] | None = None) -> np.ndarray:
    """Finish time of each flow (s), shape ``(F,)``, all starting at t = 0.

    Flows move as a fluid at their max-min fair rates (:func:`maxmin_rates_padded`), re-computed each
    time a flow finishes. Zero-byte flows finish at 0.
    ``group_rtol > 0`` ends together the flows due within that fraction of the elapsed time (past
    ``_GROUP_MIN_FLOWS`` flows: one re-rating instead of many; each batch moves the answer by at most that
    fraction). ``progress(finished, flows)`` is called after each re-rating.
    """
    size = np.asarray(flow_bytes, dtype=np.float64)
    table = _links_table(flow_links)
    if size.shape != (table.shape[0],) or not np.isfinite(size).all() or (size < 0).any():
        raise ValueError(
            f"flow_bytes must be {table.shape[0]} finite sizes >= 0 (one per flow), got shape {size.shape}"
        )
    cap = _check_links(table, capacities)
    left = size.copy()
    finish = np.zeros_like(size)
    alive = np.flatnonzero(size > 0)
    now = 0.0
    while alive.size:
        r = _maxmin(table[alive], cap)
        due = left[alive] / r
        dt = float(due.min())
        start = now
        now += dt
        left[alive] -= r * dt
        # the flows this event is due to end, and those ending within rounding of it (sizes near the
        # smallest float never round to exactly zero left)
        done = (due <= dt) | (left[alive] <= 1e-9 * size[alive])
        if group_rtol > 0 and alive.size > _GROUP_MIN_FLOWS:  # and those due within group_rtol of the elapsed time
            done |= due <= dt + group_rtol * now
        finish[alive[done]] = start + due[done]  # each at its own due time at the current rates
        alive = alive[~done]
        if progress is not None:
            progress(size.size - alive.size, size.size)
    return finish


def fluid_plain_alltoall_s(D, servers, gpus_per_server, B_out, B_up, alpha_s=0.0,
                           progress: Callable[[int, int], None] | None = None) -> float:
    """``plain_alltoall_s`` as timed before issue 21: its network and scale-up flows under
    :func:`fluid_finish_times`, those due within PLAIN_GROUP_RTOL of the elapsed time together."""
    def finish(sizes, rate, before, total) -> float:
        watch = None if progress is None else lambda done, _: progress(before + done, total)
        src, dst = np.nonzero(sizes)
        links = np.stack([src, sizes.shape[0] + dst], axis=1)
        return float(fluid_finish_times(sizes[src, dst], links, np.full(2 * sizes.shape[0], rate),
                                        group_rtol=PLAIN_GROUP_RTOL, progress=watch).max(initial=0.0))

    return _plain_s(D, servers, gpus_per_server, B_out, B_up, alpha_s, finish)
