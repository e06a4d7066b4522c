"""Speed and quality figures for the MoE all-to-all scheduler (stepbudget.a2a).

Run: ``PYTHONPATH=src python benchmarks/bench_a2a.py``. A script that prints figures, not a test.

1. Host time per ``fast_schedule`` call (balance + pad + BvN) for 4 x 8 and 64 x 8 GPUs under
   Zipf-0.8 routing, per matching strategy. Targets: <= 25 us at 4 x 8 (FAST §5 measured 25 us in
   C++ for 32 GPUs), <= 5 ms at 64 x 8.
2. Stage counts against the lower bound (most positive entries in a line of the padded matrix)
   and the Birkhoff bound (n-1)^2 + 1.
3. Plain (all pairs at once, max-min fair) vs FAST completion time; FAST §5 reports 1.2-1.3x on
   Zipf 0.8 and parity on balanced loads (4 servers x 8 H200, 400 Gb/s NIC per GPU).
"""

from __future__ import annotations

import time
from functools import partial

import numpy as np

from stepbudget.a2a import (
    Matching,
    alltoall_times,
    balance_intra_server,
    choose_unit_bytes,
    fast_schedule,
    gpu_traffic_matrix,
    min_stages,
)

TOKENS = 4096  # per GPU per MoE layer
HIDDEN = 7168  # DeepSeek-V3 hidden size
B_OUT = 50e9  # 400 Gb/s NIC per GPU
B_UP = 450e9  # NVLink 4 per GPU, one way
ALPHA = 5e-6  # s per scale-out stage
G = 8


def per_call_s(fn, budget_s: float = 0.5) -> float:
    """Best of 5 rounds of the mean time per call, after one warm-up call."""
    began = time.perf_counter()
    fn()
    once = max(time.perf_counter() - began, 1e-7)
    calls = max(1, min(20000, int(budget_s / 5 / once)))
    rounds = []
    for _ in range(5):
        began = time.perf_counter()
        for _ in range(calls):
            fn()
        rounds.append((time.perf_counter() - began) / calls)
    return min(rounds)


def schedule_speed(servers: int, top_k: int, units: list[int]) -> None:
    n = servers * G
    D = gpu_traffic_matrix(TOKENS, HIDDEN, n, top_k, n, skew=0.8, rng=1)
    balance_us = per_call_s(lambda: balance_intra_server(D, servers, G)) * 1e6
    print(f"\n{servers} x {G} GPUs, {n} experts, top-{top_k}, Zipf 0.8: balance alone {balance_us:.1f} us")
    for unit in units:
        print(f"  unit {unit:>9,} B")
        for matching in Matching:
            sched = fast_schedule(D, servers, G, matching=matching, unit_bytes=unit)
            call = partial(fast_schedule, D, servers, G, matching=matching, unit_bytes=unit)
            seconds = per_call_s(call, 1.0 if servers > 8 else 0.5)
            print(
                f"    {matching.value:<10} {seconds * 1e6:10.1f} us/call | stages {sched.stages:5d} "
                f"(lower bound {min_stages(sched.padded):3d}, Birkhoff bound {(servers - 1) ** 2 + 1:5d}, "
                f"Lambda {sched.line_sum:,} units)"
            )


def speedups(servers: int, seeds: range) -> None:
    n = servers * G
    for label, skew, top_k in (("uniform", "uniform", 8), ("Zipf 0.8", 0.8, 2), ("Zipf 0.8", 0.8, 8)):
        rows = []
        for seed in seeds:
            D = gpu_traffic_matrix(TOKENS, HIDDEN, n, top_k, n, skew=skew, rng=seed)
            rows.append(alltoall_times(D, servers, G, B_OUT, B_UP, ALPHA))
        speed = np.array([r.speedup for r in rows])
        gap = np.array([r.scheduled_s / r.lower_bound_s - 1 for r in rows])
        mean = {key: np.mean([getattr(r, key) for r in rows]) for key in ("plain_s", "scheduled_s", "stages")}
        print(
            f"  {servers} x {G}, {label:<8} top-{top_k}: plain/FAST {speed.mean():.2f}x "
            f"(min {speed.min():.2f}, max {speed.max():.2f}) | FAST over bound +{gap.mean() * 100:.1f} % | "
            f"plain {mean['plain_s'] * 1e3:.2f} ms, FAST {mean['scheduled_s'] * 1e3:.2f} ms, "
            f"{mean['stages']:.0f} stages, schedule {np.mean([r.schedule_seconds for r in rows]) * 1e6:.0f} us"
        )


def main() -> None:
    print("1-2. fast_schedule host time and stage counts")
    schedule_speed(4, 8, [1, 1 << 20])
    schedule_speed(4, 2, [1])
    D = gpu_traffic_matrix(TOKENS, HIDDEN, 64 * G, 8, 64 * G, skew=0.8, rng=1)
    auto = choose_unit_bytes(balance_intra_server(D, 64, G).server_matrix, ALPHA, B_OUT)
    print(f"\n(64 x 8: choose_unit_bytes picks {auto:,} B at alpha = {ALPHA * 1e6:.0f} us)")
    schedule_speed(64, 8, [auto, 1 << 20])
    print(
        f"\n3. plain vs FAST (B_out {B_OUT / 1e9:.0f} GB/s, B_up {B_UP / 1e9:.0f} GB/s, "
        f"alpha {ALPHA * 1e6:.0f} us, {TOKENS} tokens x {HIDDEN} x 2 B per GPU)"
    )
    speedups(4, range(1, 6))
    speedups(8, range(1, 3))


if __name__ == "__main__":
    main()
