"""A measured whole-step rate as the kernel rate that reproduces it.

A paper's achieved FLOP/s (Llama 3's 400 TFLOP/s) is the model's FLOP over the whole step, bubble and exposed
exchanges included: a *step-scope* rate. The budget splits a step into compute, bubble and exposed time, so
it needs the rate the kernels ran at: ``budget.step.kernel_rate`` finds it on the job the rate was measured on
(``Scenario.rate_basis``). ``kernel_scenario`` is a job at that rate as a kernel rate, which the simulator and
the sweeps start from.
"""

from __future__ import annotations

from stepbudget.budget.step import kernel_rate
from stepbudget.enums import RateScope
from stepbudget.inputs.scenario import Scenario

__all__ = ["kernel_scenario"]


def kernel_scenario(sc: Scenario) -> tuple[Scenario, float | None]:
    """``sc`` with a kernel-scope rate, and that rate if it had to be found (else None)."""
    if sc.cluster.rate_scope == RateScope.KERNEL:
        return sc, None
    rate = kernel_rate(sc)
    where = f"the kernel rate that reproduces the step {sc.rate_basis.name} measured (budget/step.py kernel_rate)"
    kernel = {"achieved_flops": rate, "achieved_fraction": None, "rate_scope": RateScope.KERNEL.value}
    return sc.edit({"cluster": kernel}, where=where), rate
