"""Host time and stage counts of the FAST-style schedule (stepbudget.a2a.fast_schedule), old vs new.

Run: ``PYTHONPATH=src python benchmarks/bench_schedule.py``. A script that prints figures, not a test.

1. Host time per ``fast_schedule`` call (balance + pad + BvN) for 4 x 8 and 64 x 8 GPUs under
   Zipf-0.8 routing, per matching. Targets (issue 21): <= 25 us at 4 x 8 (FAST §5 measured 25 us in
   C++ for 32 GPUs) and <= 1 ms at 64 x 8 with HEAVY.
2. Stage counts against the lower bound (most positive entries in a line of the padded matrix)
   and the Birkhoff bound (n-1)^2 + 1.

"old" is the implementation before issue 21 (schedule.py and _compiled.py at REFERENCE, read with
``git show`` into a scratch package); without git, only the new figures print. Both give the same
stages (tests/a2a/test_schedule_fixtures.py); the script checks that too.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np

from stepbudget.a2a import Matching, _compiled, balance_intra_server, fast_schedule, gpu_traffic_matrix, min_stages
from stepbudget.a2a.timing import choose_unit_bytes

REFERENCE = "a65e471bb6ee"  # the last commit before issue 21 changed schedule.py
TOKENS = 4096  # per GPU per MoE layer
HIDDEN = 7168  # DeepSeek-V3 hidden size
B_OUT = 50e9  # 400 Gb/s NIC per GPU
ALPHA = 5e-6  # s per scale-out stage
G = 8
PEER_US = 25.0  # FAST §5: 25 us per schedule in C++ for 32 GPUs


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


def old_schedule_module():
    """schedule.py at REFERENCE as a scratch package ``_old_a2a``, or None without git."""
    root = Path(__file__).resolve().parents[1]
    package = Path(tempfile.gettempdir()) / f"stepbudget-schedule-{REFERENCE}" / "_old_a2a"
    try:
        for name in ("schedule.py", "_compiled.py"):
            text = subprocess.run(["git", "show", f"{REFERENCE}:src/stepbudget/a2a/{name}"], cwd=root,
                                  capture_output=True, text=True, check=True).stdout
            package.mkdir(parents=True, exist_ok=True)
            if not (package / name).exists() or (package / name).read_text() != text:
                (package / name).write_text(text)
    except (OSError, subprocess.CalledProcessError):
        return None
    (package / "__init__.py").write_text("")
    (package / "routing.py").write_text("from stepbudget.a2a.routing import check_traffic_matrix  # noqa: F401\n")
    sys.path.insert(0, str(package.parent))
    return importlib.import_module("_old_a2a.schedule")


def same_schedule(a, b) -> bool:
    return all(np.array_equal(getattr(a, k), getattr(b, k)) for k in ("padded", "perms", "weights")) and all(
        np.array_equal(getattr(a.balanced, k), getattr(b.balanced, k)) for k in ("server_matrix", "row_bytes"))


def schedule_speed(old, servers: int, top_k: int, units: list[int]) -> None:
    n = servers * G
    D = gpu_traffic_matrix(TOKENS, HIDDEN, n, top_k, n, skew=0.8, rng=1)
    budget = 1.0 if servers > 8 else 0.5
    balance_us = per_call_s(lambda: balance_intra_server(D, servers, G)) * 1e6
    line = f"\n{servers} x {G} GPUs, {n} experts, top-{top_k}, Zipf 0.8: balance alone {balance_us:.1f} us"
    if old is not None:
        line += f" (old {per_call_s(lambda: old.balance_intra_server(D, servers, G)) * 1e6:.1f} us)"
    print(line)
    for unit in units:
        print(f"  unit {unit:>9,} B{'':<10}{'new us/call':>12} {'old us/call':>12} {'old/new':>8}")
        for matching in Matching:
            sched = fast_schedule(D, servers, G, matching=matching, unit_bytes=unit)
            new_s = per_call_s(partial(fast_schedule, D, servers, G, matching=matching, unit_bytes=unit), budget)
            old_txt = f"{'-':>12} {'-':>8}"
            if old is not None:
                ref = old.fast_schedule(D, servers, G, matching=matching, unit_bytes=unit)
                old_s = per_call_s(partial(old.fast_schedule, D, servers, G, matching=matching, unit_bytes=unit),
                                   budget)
                same = "same stages" if same_schedule(sched, ref) else "STAGES DIFFER"
                old_txt = f"{old_s * 1e6:12.1f} {old_s / new_s:7.1f}x {same}"
            print(
                f"    {matching.value:<10}{'':>10}{new_s * 1e6:12.1f} {old_txt} | stages {sched.stages:5d} "
                f"(lower bound {min_stages(sched.padded):3d}, Birkhoff {(servers - 1) ** 2 + 1:5d}, "
                f"Lambda {sched.line_sum:,} units)"
            )


def main() -> None:
    _compiled.warm()
    old = old_schedule_module()
    print("1-2. fast_schedule host time and stage counts, new vs old (schedule.py at "
          f"{REFERENCE if old is not None else 'n/a: git not found'}); numba: {_compiled.AVAILABLE}")
    print(f"peer: FAST's C++ scheduler, {PEER_US:.0f} us per call at 32 GPUs (FAST §5)")
    schedule_speed(old, 4, 8, [1, 1 << 20])
    schedule_speed(old, 4, 2, [1])
    D = gpu_traffic_matrix(TOKENS, HIDDEN, 64 * G, 8, 64 * G, skew=0.8, rng=1)
    auto = choose_unit_bytes(balance_intra_server(D, 64, G).server_matrix, ALPHA, B_OUT)
    print(f"\n(64 x 8: choose_unit_bytes picks {auto:,} B at alpha = {ALPHA * 1e6:.0f} us)")
    schedule_speed(old, 64, 8, [auto, 1 << 20])


if __name__ == "__main__":
    main()
