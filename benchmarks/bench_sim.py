"""Scale figure for the step simulator: one ring all-reduce with every link simulated.

Run: ``PYTHONPATH=src python benchmarks/bench_sim.py [num_ranks ...]``.
A ring all-reduce over n GPUs is 2(n-1) steps of n concurrent flows (2*1023*1024 =
2,095,104 flows for n = 1,024); every step's flows share the links max-min fairly.
Reference (anchors.md): ASTRA-sim 2 takes 6-10 s of wall time for one all-reduce on
1,024 GPUs. Target: < 1 s. This is a script that prints figures, not a timed test.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from stepbudget.budget.collectives import ring_factor, ring_steps
from stepbudget.enums import Collective
from stepbudget.sim import run_graph
from stepbudget.sim.collectives import ring_all_reduce

SIZE_BYTES = 1e9  # 1 GB per rank
LINK_BPS = 50e9  # 400 Gb/s per link
REPEATS = 3


def bench(num_ranks: int) -> None:
    began = time.perf_counter()
    graph = ring_all_reduce(num_ranks, SIZE_BYTES)
    build_s = time.perf_counter() - began
    capacity = np.full(num_ranks, LINK_BPS)
    walls = []
    for _ in range(REPEATS):
        began = time.perf_counter()
        timeline = run_graph(graph, capacity)
        walls.append(time.perf_counter() - began)
    wall_s = min(walls)
    expected_s = ring_factor(Collective.ALL_REDUCE, num_ranks) * SIZE_BYTES / LINK_BPS  # ring, nccl-tests
    flows = graph.num_tasks
    print(
        f"ring all-reduce, {num_ranks:>5} GPUs: {flows:>9,} flows in "
        f"{int(ring_steps(Collective.ALL_REDUCE, num_ranks)):>5} steps | "
        f"build {build_s:6.3f} s | simulate {wall_s:6.3f} s (best of {REPEATS}; "
        f"all {', '.join(f'{w:.3f}' for w in walls)}) | "
        f"{2 * flows / wall_s / 1e6:5.2f} M flow events/s (start+end), "
        f"{timeline.engine_events / wall_s / 1e3:6.1f} k heap events/s ({timeline.engine_events:,}) | "
        f"simulated {timeline.makespan_s * 1e3:.6f} ms vs 2(n-1)/n*S/B {expected_s * 1e3:.6f} ms "
        f"(rel err {abs(timeline.makespan_s / expected_s - 1):.1e})"
    )


if __name__ == "__main__":
    for n in [int(arg) for arg in sys.argv[1:]] or [64, 256, 1024]:
        bench(n)
