"""How long one budget takes, in-process: the scalar path and the same model over arrays.

Run: python benchmarks/bench_budget.py   (prints figures; not a test)
"""

from __future__ import annotations

import time

import numpy as np

import stepbudget as sb


def per_call(fn, repeat: int) -> float:
    fn()  # warm-up
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(repeat):
            fn()
        best = min(best, (time.perf_counter() - t0) / repeat)
    return best


def main() -> None:
    print("one scenario, in-process (best of 5):")
    for name in sb.preset_names():
        sc = sb.load(name)
        est = per_call(lambda: sb.estimate(sb.derive(sc)), 200)
        full = per_call(lambda: sb.estimate(sb.derive(sb.load(name))), 50)
        print(f"  {name:<22} derive+estimate {est * 1e3:6.3f} ms   load+derive+estimate {full * 1e3:6.3f} ms")

    sc = sb.load("llama3-405b", ["cluster.rate_scope=kernel"])
    n = 100_000
    rng = np.random.default_rng(0)
    tp = rng.choice([1, 2, 4, 8], n)
    pp = rng.choice([1, 2, 4, 8, 16], n)
    dp = 16384 // (tp * pp)
    t0 = time.perf_counter()
    b = sb.estimate(sb.derive(sc, {"tp": tp, "pp": pp, "dp": dp}))
    dt = time.perf_counter() - t0
    scalar = per_call(lambda: sb.estimate(sb.derive(sc)), 200)
    print(f"same model over arrays: {n:,} layouts in {dt:.3f} s = {dt / n * 1e6:.2f} µs per layout "
          f"({n / dt:,.0f} layouts/s); scalar path {scalar * 1e3:.3f} ms -> {scalar / (dt / n):,.0f}x")
    assert b.step_s.shape == (n,)


if __name__ == "__main__":
    main()
