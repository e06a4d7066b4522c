"""Collectives written as task graphs, built with array arithmetic.

Only the ring all-reduce for now: the oracle for the simulator (its time is the
closed form of formulas.md §1.1) and the scale benchmark.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepbudget.budget.collectives import ring_steps
from stepbudget.enums import Collective
from stepbudget.sim.graph import TaskGraph, TaskKind

__all__ = ["RingSchedule", "ring_all_reduce", "ring_schedule"]


def ring_all_reduce(num_ranks: int, size_bytes: float) -> TaskGraph:
    """Ring all-reduce of ``size_bytes`` per rank over ``num_ranks`` ranks, every send a flow.

    Rank ``i`` sends over link ``i`` (towards rank ``i + 1 mod n``). There are
    ``2(n - 1)`` steps (n - 1 reduce-scatter, n - 1 all-gather) of ``n`` concurrent
    sends of ``S / n`` bytes; task ``s * n + i`` is rank ``i``'s send in step ``s``.
    It waits for the chunk rank ``i - 1`` sent in step ``s - 1`` and for rank ``i``'s
    own previous send. On links of ``B`` bytes/s it takes ``2(n-1)/n * S/B``
    (ring all-reduce, nccl-tests PERFORMANCE.md; alpha ignored).
    """
    if not (isinstance(num_ranks, int | np.integer) and num_ranks >= 2):
        raise ValueError(f"num_ranks={num_ranks!r}: a ring needs an integer number of ranks >= 2")
    if not (np.isfinite(size_bytes) and size_bytes >= 0):
        raise ValueError(f"size_bytes={size_bytes!r}: pass a finite number of bytes >= 0")
    n = int(num_ranks)
    num_steps = int(ring_steps(Collective.ALL_REDUCE, n))  # n-1 reduce-scatter steps + n-1 all-gather steps
    num_tasks = num_steps * n
    rank = np.arange(n, dtype=np.int64)
    before = np.arange(num_steps - 1, dtype=np.int64)[:, None] * n  # first task of step s-1, for steps s >= 1
    deps = np.empty((num_steps - 1, n, 2), dtype=np.int64)  # every step after the first waits for two sends:
    np.add(before, (rank - 1) % n, out=deps[..., 0])  # step s-1, rank i-1 (mod n): the chunk it receives
    np.add(before, rank, out=deps[..., 1])  # step s-1, rank i: its own previous send
    dep_indptr = np.arange(-n, num_tasks - n + 1, dtype=np.int64)  # task t has 2 deps from t = n on
    np.maximum(dep_indptr, 0, out=dep_indptr)
    dep_indptr *= 2
    return TaskGraph(
        kind=np.full(num_tasks, TaskKind.TRANSFER, dtype=np.int8),
        stream=np.full(num_tasks, -1, dtype=np.int64),
        duration_s=np.zeros(num_tasks),
        size_bytes=np.full(num_tasks, size_bytes / n),  # one chunk: S/n
        link_indptr=np.arange(num_tasks + 1, dtype=np.int64),
        link_ids=np.broadcast_to(rank, (num_steps, n)).ravel(),  # rank i sends on link i in every step
        dep_indptr=dep_indptr,
        dep_ids=deps.ravel(),
    )


@dataclass(frozen=True)
class RingSchedule:
    """Every send of a simulated ring all-reduce: which rank sends which chunk to whom, and when.

    Arrays of shape ``(2 (n - 1) n,)``, one entry per send, in task order (step-major). ``phase`` is 0 in the
    reduce-scatter and 1 in the all-gather; ``chunk`` is the S/n piece the send carries.
    """

    ranks: int
    step: np.ndarray
    phase: np.ndarray
    sender: np.ndarray
    receiver: np.ndarray
    chunk: np.ndarray
    start_s: np.ndarray
    end_s: np.ndarray
    bytes_per_rank: float
    """What each rank sends in all: 2 (n - 1) chunks of S / n, 2 (n - 1) / n x S (formulas.md 1.1)."""


def ring_schedule(num_ranks: int, size_bytes: float, link_Bps: float) -> RingSchedule:
    """The ring all-reduce the simulator costs, simulated on links of ``link_Bps``, send by send."""
    from stepbudget.sim.engine import run_graph  # the engine runs the graph this module builds

    g = ring_all_reduce(num_ranks, size_bytes)
    n = int(num_ranks)
    tl = run_graph(g, np.full(n, float(link_Bps)))
    task = np.arange(g.num_tasks)
    step, rank = task // n, task % n
    rs = step < n - 1
    # reduce-scatter step s: rank i passes on chunk (i - s) mod n, summed so far; all-gather step s':
    # rank i passes on the finished chunk (i + 1 - s') mod n (Patarasuk and Yuan 2009; nccl ring)
    chunk = np.where(rs, (rank - step) % n, (rank + 1 - (step - (n - 1))) % n)
    return RingSchedule(ranks=n, step=step, phase=np.where(rs, 0, 1), sender=rank, receiver=(rank + 1) % n,
                        chunk=chunk, start_s=tl.start_s, end_s=tl.end_s,
                        bytes_per_rank=float(2 * (n - 1) / n * size_bytes))  # ring all-reduce, formulas.md 1.1
