"""A measured whole-step rate as the kernel rate that reproduces it.

A paper's achieved FLOP/s (Llama 3's 400 TFLOP/s) is the model's FLOP over the whole step, bubble and exposed
exchanges included: a *step-scope* rate. The budget splits a step into compute, bubble and exposed time, so
it needs the rate the kernels ran at. ``kernel_scenario`` finds the kernel rate at which the scenario's own
layout, with its bubble and exposed exchanges added, takes the same step time as measured. The simulator and
the sweeps (sweep/calibrate.py) start from it.
"""

from __future__ import annotations

import dataclasses

from stepbudget.budget.step import estimate
from stepbudget.enums import RateScope
from stepbudget.inputs.scenario import Scenario
from stepbudget.plan.derive import derive

__all__ = ["kernel_scenario"]


def _with_rate(sc: Scenario, rate: float) -> Scenario:
    cluster = sc.cluster.model_copy(update={"achieved_flops": rate, "rate_scope": RateScope.KERNEL})
    return sc.model_copy(update={"cluster": cluster})


def kernel_scenario(sc: Scenario) -> tuple[Scenario, float | None]:
    """``sc`` with a kernel-scope rate, and that rate if it had to be calibrated (else None)."""
    if sc.cluster.rate_scope == RateScope.KERNEL:
        return sc, None
    plan = derive(sc)
    measured, step_rate = float(estimate(plan).step_s), float(plan.flops_rate)

    def step_at(rate: float) -> float:  # only the rate and its scope change: the plan is derived once
        return float(estimate(dataclasses.replace(plan, flops_rate=rate, rate_scope=RateScope.KERNEL)).step_s)

    lo, hi = step_rate, step_rate
    while step_at(hi) > measured:  # kernel rate >= step rate
        hi *= 2
        if hi > 1e3 * step_rate:  # exposed time alone exceeds the measurement: keep the step rate
            return _with_rate(sc, step_rate), step_rate
    for _ in range(60):  # bisection on a step time that falls as the rate rises
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if step_at(mid) > measured else (lo, mid)
    rate = 0.5 * (lo + hi)
    return _with_rate(sc, rate), rate
