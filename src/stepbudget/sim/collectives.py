"""Collectives written as task graphs, built with array arithmetic.

Only the ring all-reduce for now: the oracle for the simulator (its time is the
closed form of formulas.md §1.1) and the scale benchmark.
"""

from __future__ import annotations

import numpy as np

from stepbudget.budget.collectives import ring_steps
from stepbudget.enums import Collective
from stepbudget.sim.graph import TaskGraph, TaskKind

__all__ = ["ring_all_reduce"]


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
    rank = np.tile(np.arange(n, dtype=np.int64), num_steps)
    task = np.arange(num_tasks, dtype=np.int64)
    later = task >= n  # every step after the first waits for two sends of the step before
    received = task - n - rank + (rank - 1) % n  # step s-1, rank i-1 (mod n)
    own = task - n  # step s-1, rank i
    dep_ids = np.stack([received, own], axis=1)[later].ravel()
    dep_indptr = np.zeros(num_tasks + 1, dtype=np.int64)
    np.cumsum(np.where(later, 2, 0), out=dep_indptr[1:])
    return TaskGraph(
        kind=np.full(num_tasks, TaskKind.TRANSFER, dtype=np.int8),
        stream=np.full(num_tasks, -1, dtype=np.int64),
        duration_s=np.zeros(num_tasks),
        size_bytes=np.full(num_tasks, size_bytes / n),  # one chunk: S/n
        link_indptr=np.arange(num_tasks + 1, dtype=np.int64),
        link_ids=rank,
        dep_indptr=dep_indptr,
        dep_ids=dep_ids,
    )
