"""Scale figure for the step simulator: one ring all-reduce with every link simulated.

Run: ``PYTHONPATH=src python benchmarks/bench_sim.py [num_ranks ...]``.
A ring all-reduce over n GPUs is 2(n-1) steps of n concurrent flows (2*1023*1024 =
2,095,104 flows for n = 1,024); every step's flows share the links max-min fairly.
The engine (``run_graph``, compiled) runs beside the Python reference of tests/oracles/engine.py,
whose timelines it must match to 1e-9 relative.
Reference (anchors.md): ASTRA-sim 2 takes 6-10 s of wall time for one all-reduce on
1,024 GPUs; with ASTRA_SIM_BIN and ASTRA_SIM_WORK set (see ``astra_sim``) its analytical backend
runs the same ring beside ours. This is a script that prints figures, not a timed test.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

from pathlib import Path

import numpy as np

from stepbudget.budget.collectives import ring_factor, ring_steps
from stepbudget.enums import Collective
from stepbudget.sim import TaskGraph, TaskKind, run_graph
from stepbudget.sim.collectives import ring_all_reduce

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from oracles import engine as reference  # noqa: E402 - the reference lives with the tests

SIZE_BYTES = 1e9  # 1 GB per rank
LINK_BPS = 50e9  # 400 Gb/s per link
REPEATS = 3


def best_of(fn, repeats: int = REPEATS):
    walls, out = [], None
    for _ in range(repeats):
        began = time.perf_counter()
        out = fn()
        walls.append(time.perf_counter() - began)
    return min(walls), out


def bench(num_ranks: int) -> None:
    build_s, graph = best_of(lambda: ring_all_reduce(num_ranks, SIZE_BYTES))
    capacity = np.full(num_ranks, LINK_BPS)
    python_s, slow = best_of(lambda: reference.run_graph(graph, capacity), 1 if num_ranks > 256 else REPEATS)
    compiled_s, fast = best_of(lambda: run_graph(graph, capacity))
    same = (np.allclose(slow.end_s, fast.end_s, rtol=1e-9, atol=0)
            and np.allclose(slow.start_s, fast.start_s, rtol=1e-9, atol=0))
    expected_s = ring_factor(Collective.ALL_REDUCE, num_ranks) * SIZE_BYTES / LINK_BPS  # ring, nccl-tests
    flows = graph.num_tasks
    print(
        f"ring all-reduce, {num_ranks:>5} GPUs: {flows:>9,} flows in "
        f"{int(ring_steps(Collective.ALL_REDUCE, num_ranks)):>5} steps | build {build_s:6.3f} s | simulate: "
        f"python {python_s:6.3f} s, compiled {compiled_s:6.3f} s ({python_s / compiled_s:5.1f}x; timelines "
        f"{'agree' if same else 'DIFFER'}) | build + simulate {build_s + compiled_s:6.3f} s | "
        f"{fast.engine_events / compiled_s / 1e3:8.1f} k heap events/s, {2 * flows / compiled_s / 1e6:5.1f} M flow "
        f"starts+ends/s | simulated {fast.makespan_s * 1e3:.6f} ms vs 2(n-1)/n*S/B {expected_s * 1e3:.6f} ms "
        f"(rel err {abs(fast.makespan_s / expected_s - 1):.1e})"
    )


def alltoall(num_gpus: int, gpus_per_server: int = 8, seed: int = 0) -> None:
    """The plain all-to-all's shape (a2a/timing.py): every ordered pair one flow over its sender's NIC out and its
    receiver's NIC in, sizes skewed, ended together within 1e-3 of the elapsed time."""
    rng = np.random.default_rng(seed)
    src, dst = np.nonzero(~np.eye(num_gpus, dtype=bool))
    src, dst = src[src // gpus_per_server != dst // gpus_per_server], dst[src // gpus_per_server != dst // gpus_per_server]
    sizes = rng.zipf(1.8, src.size).clip(max=1000) * 1e5
    links = np.stack([src, num_gpus + dst], axis=1).ravel()
    zero = np.zeros(src.size, dtype=np.int64)
    graph = TaskGraph(kind=np.full(src.size, TaskKind.TRANSFER, dtype=np.int8), stream=zero - 1,
                      duration_s=np.zeros(src.size), size_bytes=sizes,
                      link_indptr=np.arange(0, 2 * src.size + 1, 2), link_ids=links,
                      dep_indptr=np.zeros(src.size + 1, dtype=np.int64), dep_ids=zero[:0])
    wall_s, tl = best_of(lambda: run_graph(graph, np.full(2 * num_gpus, LINK_BPS), finish_rtol=1e-3), 1)
    print(f"plain all-to-all, {num_gpus:>4} GPUs: {src.size:>8,} flows (Zipf sizes), finish_rtol 1e-3 | compiled "
          f"{wall_s:6.2f} s, {tl.engine_events:,} events, simulated {tl.makespan_s * 1e3:.3f} ms")


def astra_sim(num_ranks: int) -> None:
    """ASTRA-sim's analytical (congestion-unaware) backend on the same ring, where a build of it is named by
    ASTRA_SIM_BIN and its inputs lie in ASTRA_SIM_WORK: all_reduce/{n}npus_1024MB/all_reduce.*.et (one
    1,024 MiB all-reduce per NPU, the repository's examples/workload/microbenchmarks generator),
    Ring_{n}npus.yml (topology [Ring], bandwidth [50.0] GB/s of 2^30 B, latency [0.0]), sys_ring.json
    (examples/system/native_collectives/Ring_4chunks.json) and mem.json (NO_MEMORY_EXPANSION). The build
    recipe and its two local patches are in docs/speed.md."""
    binary, work = os.environ.get("ASTRA_SIM_BIN"), os.environ.get("ASTRA_SIM_WORK")
    if not (binary and work):
        return
    args = [binary, f"--workload-configuration={work}/all_reduce/{num_ranks}npus_1024MB/all_reduce",
            f"--system-configuration={work}/sys_ring.json", f"--remote-memory-configuration={work}/mem.json",
            f"--network-configuration={work}/Ring_{num_ranks}npus.yml"]
    began = time.perf_counter()
    out = subprocess.run(args, capture_output=True, text=True, cwd=work).stdout
    wall_s = time.perf_counter() - began
    cycles = re.search(r"sys\[0\] finished, (\d+) cycles", out)
    simulated = f"simulated {int(cycles.group(1)) / 1e6:.6f} ms" if cycles else "no finish line in its output"
    print(f"  ASTRA-sim analytical, same ring of 1 GiB at 50 GiB/s: {wall_s:6.2f} s wall, {simulated}")


if __name__ == "__main__":
    run_graph(ring_all_reduce(4, 1.0), np.ones(4))  # load (or compile) the engine first
    for n in [int(arg) for arg in sys.argv[1:]] or [64, 256, 1024]:
        bench(n)
        astra_sim(n)
    for n in (128, 256):  # 512 GPUs (64 x 8): benchmarks/bench_a2a.py times moe there
        alltoall(n)
