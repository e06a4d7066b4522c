"""Completion-time figures for the MoE all-to-all (stepbudget.a2a.timing): plain vs FAST, and how fast.

Run: ``PYTHONPATH=src python benchmarks/bench_a2a.py``. A script that prints figures, not a test.

fast_schedule's host time and stage counts are benchmarks/bench_schedule.py's.

1. Plain (all pairs at once, max-min fair) vs FAST completion time; FAST §5 reports 1.2-1.3x on
   Zipf 0.8 and parity on balanced loads (4 servers x 8 H200, 400 Gb/s NIC per GPU). The staged
   pipeline's own ratio is shown beside what is sent (plain where staging is not faster).
2. The plain all-to-all three ways in the same run: the engine's dense path (``plain_alltoall_s``,
   sim/flows.py), the general compiled engine it ran on before (run_graph over the same flows: the same
   bits), and the fluid simulator of before issue 21 (``fluid_plain_alltoall_s`` of tests/oracles/alltoall.py,
   numpy max-min per re-rating): wall time and ratios side by side.
3. Wall time of the whole ``moe`` report (api.moe, DeepSeek-V3) at 32 x 8, 64 x 8 and 128 x 8 GPUs (its 256
   experts set to one per GPU past 256 GPUs, which they do not split over).
   Pass ``--old-up-to N`` / ``--new-up-to N`` to time the older paths / the dense path up to N servers of 8
   in section 2 (defaults 32 and 128; at 64 x 8 the general engine takes 13-62 s, the fluid 100-180 s).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from stepbudget.a2a import alltoall_times, gpu_traffic_matrix, plain_alltoall_s, timing
from stepbudget.sim import run_graph
from stepbudget.sim.flows import matrix_graph

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from oracles.alltoall import fluid_plain_alltoall_s  # noqa: E402 - the reference lives with the tests

TOKENS = 4096  # per GPU per MoE layer
HIDDEN = 7168  # DeepSeek-V3 hidden size
B_OUT = 50e9  # 400 Gb/s NIC per GPU
B_UP = 450e9  # NVLink 4 per GPU, one way
ALPHA = 5e-6  # s per scale-out stage
G = 8


def speedups(servers: int, seeds: range) -> None:
    n = servers * G
    for label, skew, top_k in (("uniform", "uniform", 8), ("Zipf 0.8", 0.8, 2), ("Zipf 0.8", 0.8, 8)):
        rows = []
        for seed in seeds:
            D = gpu_traffic_matrix(TOKENS, HIDDEN, n, top_k, n, skew=skew, rng=seed)
            rows.append(alltoall_times(D, servers, G, B_OUT, B_UP, ALPHA))
        speed = np.array([r.speedup for r in rows])
        staged = np.array([r.plain_s / r.staged_s for r in rows])
        gap = np.array([r.scheduled_s / r.lower_bound_s - 1 for r in rows])
        mean = {key: np.mean([getattr(r, key) for r in rows]) for key in ("plain_s", "scheduled_s", "stages")}
        print(
            f"  {servers} x {G}, {label:<8} top-{top_k}: plain/FAST {speed.mean():.2f}x "
            f"(min {speed.min():.2f}, max {speed.max():.2f}; staged alone {staged.min():.2f}-{staged.max():.2f}, "
            f"sent plain {sum(r.sent_plain for r in rows)}/{len(rows)}) | FAST over bound +{gap.mean() * 100:.1f} % | "
            f"plain {mean['plain_s'] * 1e3:.2f} ms, FAST {mean['scheduled_s'] * 1e3:.2f} ms, "
            f"{mean['stages']:.0f} stages, schedule {np.mean([r.schedule_seconds for r in rows]) * 1e6:.0f} us"
        )


def wall_s(fn, repeat: int) -> tuple[float, object]:
    """Best wall time of ``repeat`` calls of ``fn`` and its last answer."""
    best, out = np.inf, None
    for _ in range(repeat):
        began = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - began)
    return best, out


def _engine_finish(sizes: np.ndarray, rate: float, before: int, total: int) -> float:
    """The plain all-to-all's flows on run_graph's general compiled engine (its path before the dense one)."""
    flows = np.count_nonzero(sizes)
    rtol = timing.PLAIN_FINISH_RTOL if flows > timing._GROUP_MIN_FLOWS else timing._EXACT_RTOL
    capacity = np.full(2 * sizes.shape[0], rate)
    return float(run_graph(matrix_graph(sizes), capacity, finish_rtol=rtol).end_s.max(initial=0.0))


def plain_three_ways(old_up_to: int, new_up_to: int) -> None:
    for servers in (s for s in (4, 8, 16, 32, 64, 128) if s <= max(old_up_to, new_up_to)):
        n = servers * G
        for label, skew in (("uniform", "uniform"), ("Zipf 0.8", 0.8)):
            D = gpu_traffic_matrix(TOKENS, HIDDEN, n, 8, n, skew=skew, rng=1)
            repeat = 3 if servers <= 16 else 1
            line = f"  {servers:>3} x {G}, {label:<8} top-8:"
            if servers <= new_up_to:
                new_s, new = wall_s(lambda: plain_alltoall_s(D, servers, G, B_OUT, B_UP, ALPHA), repeat)
                line += f" dense {new * 1e3:9.5f} ms in {new_s:6.2f} s"
            if servers <= old_up_to:
                engine_s, engine = wall_s(lambda: timing._plain_s(D, servers, G, B_OUT, B_UP, ALPHA, _engine_finish),
                                          repeat)
                old_s, old = wall_s(lambda: fluid_plain_alltoall_s(D, servers, G, B_OUT, B_UP, ALPHA), repeat)
                line += (f" | engine {engine_s:6.2f} s ({'same bits' if engine == new else 'DIFFERS'}, "
                         f"{engine_s / new_s:4.1f}x) | fluid {old_s:6.2f} s ({old_s / new_s:5.1f}x; "
                         f"dense/fluid {new / old - 1:+.1e} in time)")
            print(line, flush=True)


def moe_walls() -> None:
    from stepbudget import api

    for servers in (32, 64, 128):
        experts = max(256, servers * G)  # DeepSeek-V3's 256 experts split over at most 256 GPUs
        sets = [] if experts == 256 else [f"model.moe.num_experts={experts}"]
        for skew in ("uniform", "zipf:0.8"):
            try:
                seconds, result = wall_s(lambda: api.moe("deepseek-v3", sets=sets, skew=skew, servers=servers,
                                                         gpus_per_server=G), 1)
            except ValueError as e:  # a group over MAX_EP_GPUS is refused in one line
                print(f"  moe deepseek-v3 --servers {servers} --gpus-per-server {G}: {e}")
                continue
            a = result.to_dict()["alltoall"]
            print(f"  moe deepseek-v3 {' '.join(f'--set {x}' for x in sets):<33} --servers {servers:>3} "
                  f"--gpus-per-server {G} --skew {skew:<8}: {seconds:6.2f} s (plain {a['plain_s'] * 1e3:.3f} ms, "
                  f"sent {'plain' if a['sent_plain'] else 'staged'}, {a['speedup']:.2f}x)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old-up-to", type=int, default=32,
                        help="largest servers count the general engine and the fluid path are timed at")
    parser.add_argument("--new-up-to", type=int, default=128, help="largest servers count the dense path is timed at")
    args = parser.parse_args()
    print(
        f"1. plain vs FAST (B_out {B_OUT / 1e9:.0f} GB/s, B_up {B_UP / 1e9:.0f} GB/s, "
        f"alpha {ALPHA * 1e6:.0f} us, {TOKENS} tokens x {HIDDEN} x 2 B per GPU)"
    )
    speedups(4, range(1, 6))
    speedups(8, range(1, 3))
    print(f"\n2. plain all-to-all: the engine's dense path, its general path and the fluid reference "
          f"(best of 3 up to 16 x {G}, else 1 call)")
    plain_three_ways(args.old_up_to, args.new_up_to)
    print("\n3. the whole moe report (DeepSeek-V3, one call)")
    moe_walls()


if __name__ == "__main__":
    main()
