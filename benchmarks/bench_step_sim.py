"""Step simulator speed: one step of each preset (build, then simulate), and Monte Carlo.

Run: python benchmarks/bench_step_sim.py   (prints figures; not a test)
Targets (issue 5): one step of llama3-405b (126 layers, PP16, all micro-batches) under 1 s;
1,000 jittered steps under 60 s on one core. Issue 21: building a step's graph costs less than simulating it.
Per preset: the graph's build time (best of 3), the simulate time of the Python reference (tests/oracles/engine.py)
and of the engine (``run_graph``, compiled) side by side, their events/s and ratio, whether their timelines agree
to 1e-9 relative, and the simulated step against the budget.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

import stepbudget as sb
from stepbudget.sim.engine import run_graph
from stepbudget.sim.program import step_program
from stepbudget.sim.step import Jitter, monte_carlo, sim_budget, simulate_step

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from oracles import engine as reference  # noqa: E402 - the reference lives with the tests

ENGINES = {"python": reference.run_graph, "compiled": run_graph}
"""The Python reference and the engine, timed side by side."""


def best_of(fn, repeats: int = 3):
    walls, out = [], None
    for _ in range(repeats):
        began = time.perf_counter()
        out = fn()
        walls.append(time.perf_counter() - began)
    return min(walls), out


def simulate(prog, engine: str):
    """One run of the step's graph, un-jittered (what simulate_step runs at link_rate 1)."""
    return ENGINES[engine](prog.graph, prog.capacity_Bps)


def one_step(name: str) -> None:
    b = sim_budget(sb.load(name))
    build_s, prog = best_of(lambda: step_program(b))
    runs = {e: best_of(lambda: simulate(prog, e), 1 if e == "python" else 3) for e in ENGINES}
    events = runs["python"][1].engine_events
    cells = [f"{e} {s:6.3f} s ({tl.engine_events / s / 1e3:7.1f} k ev/s)" for e, (s, tl) in runs.items()]
    (slow_s, slow), (fast_s, fast) = runs["python"], runs["compiled"]
    same = np.allclose(slow.end_s, fast.end_s, rtol=1e-9, atol=0) and np.allclose(slow.start_s, fast.start_s,
                                                                                    rtol=1e-9, atol=0)
    cells.append(f"{slow_s / fast_s:5.1f}x, timelines {'agree' if same else 'DIFFER'}")
    sim_s = min(s for s, _ in runs.values())
    r = simulate_step(b, program=prog)
    print(f"  {name:<22} {prog.graph.num_tasks:>7,} tasks {events:>8,} events | build {build_s:6.3f} s "
          f"({build_s / sim_s:4.2f} of the fastest simulate) | simulate: {', '.join(cells)}"
          f" | step {r.step_s:.3f} s vs budget {r.analytical_step_s:.3f} s ({r.step_s / r.analytical_step_s - 1:+.2%})")


def main() -> None:
    simulate(step_program(sim_budget(sb.load("llama3-405b-puredp"))), "compiled")  # load (or compile) it first
    print("one step, contention on (build the graph, then simulate it on the reference and the engine):")
    for name in sb.preset_names():
        one_step(name)
    b = sim_budget(sb.load("llama3-405b"))
    jit = Jitter(compute_cv=0.05, link_cv=0.05, straggler_p=0.001, straggler_slowdown=1.5)
    t0 = time.perf_counter()
    mc = monte_carlo(b, jit, steps=1000, replicas=128, seed=0)
    t1 = time.perf_counter()
    print(f"llama3-405b, 1,000 jittered steps x 128 replicas from {mc.pipeline_s.size} simulated pipelines "
          f"(smoothed bootstrap): {t1 - t0:.1f} s; p50 {mc.percentile(50):.3f} s, p99 {mc.percentile(99):.3f} s")
    t0 = time.perf_counter()
    for i in range(10):
        simulate_step(b, jitter=jit, program=step_program(b))
    per = (time.perf_counter() - t0) / 10
    print(f"one jittered llama3-405b step simulated in full: {per:.2f} s -> 1,000 of them would take {1000 * per:.0f} s")


if __name__ == "__main__":
    main()
