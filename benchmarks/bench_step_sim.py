"""Step simulator speed: one step of each preset, and Monte Carlo over jittered steps.

Run: python benchmarks/bench_step_sim.py   (prints figures; not a test)
Targets (issue 5): one step of llama3-405b (126 layers, PP16, all micro-batches) under 1 s;
1,000 jittered steps under 60 s on one core.
"""

from __future__ import annotations

import time

import stepbudget as sb
from stepbudget.sim.program import step_program
from stepbudget.sim.step import Jitter, monte_carlo, sim_budget, simulate_step


def main() -> None:
    print("one step, contention on (build the graph, then simulate):")
    for name in sb.preset_names():
        b = sim_budget(sb.load(name))
        t0 = time.perf_counter()
        prog = step_program(b)
        t1 = time.perf_counter()
        r = simulate_step(b, program=prog)
        t2 = time.perf_counter()
        print(f"  {name:<22} {prog.graph.num_tasks:>7,} tasks {r.timeline.engine_events:>8,} events | build "
              f"{t1 - t0:5.2f} s, simulate {t2 - t1:5.2f} s ({r.timeline.engine_events / (t2 - t1) / 1e3:6.1f} k events/s)"
              f" | step {r.step_s:.3f} s vs budget {r.analytical_step_s:.3f} s ({r.step_s / r.analytical_step_s - 1:+.2%})")
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
