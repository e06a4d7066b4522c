"""Which rate a sweep or a chapter figure evaluates a job at.

A scenario with ``rate_scope: step`` carries a rate measured over whole steps of one job (Llama 3's
400 TFLOP/s); the budget runs any job at the kernel rate that reproduces the step of the job the rate was
measured on (budget/step.py ``kernel_rate``, ``Scenario.rate_basis``). A search or a scaling curve compares
layouts, so it needs that kernel rate as a kernel-scope scenario; the measured job itself may be shown as
measured. ``carried`` is that rule.
"""

from __future__ import annotations

from typing import Any

from stepbudget.budget.rate import kernel_scenario
from stepbudget.enums import RateScope
from stepbudget.inputs.scenario import RATE_FIELDS, Scenario

NAME_FIELDS = ("name", "description", "source")
"""Fields that change nothing a step costs."""


def _job(sc: Scenario) -> dict[str, Any]:
    """What a step costs depends on: the scenario less its names and the rate it states."""
    data = sc.model_dump(mode="json", exclude=set(NAME_FIELDS))
    data["model"] = {k: v for k, v in data["model"].items() if k not in NAME_FIELDS}
    data["cluster"] = {k: v for k, v in data["cluster"].items() if k not in (*NAME_FIELDS, *RATE_FIELDS)}
    return data


def changed_job(sc: Scenario) -> bool:
    """Whether ``sc``'s job differs from the one its whole-step rate was measured on (names and the rate aside)."""
    basis = sc.rate_basis
    return basis is not sc and _job(basis) != _job(sc)


def carried(sc: Scenario) -> tuple[Scenario, float | None]:
    """``sc`` as a sweep evaluates it: a whole-step-rate job changed from the one it was measured on runs at the
    kernel rate that reproduces that job's step, as a kernel-scope scenario, with that rate; any other as it is."""
    if sc.cluster.rate_scope != RateScope.STEP or not changed_job(sc):
        return sc, None
    return kernel_scenario(sc)

