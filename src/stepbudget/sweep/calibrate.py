"""From a measured whole-step rate to a kernel rate, so other layouts can be compared.

A scenario with ``rate_scope: step`` carries a rate measured over whole steps of one layout
(Llama 3's 400 TFLOP/s): the bubble and critical-path exchanges of that layout are inside
it. Another layout has another bubble, so a search or a scaling curve needs the rate the
kernels ran at. ``kernel_scenario`` finds the kernel rate at which the scenario's own
layout, with its bubble and exposed exchanges added, takes the same step time as measured.

A whole-step rate holds only for the job it was measured on. ``carried`` is the rule every
command follows when a step-rate scenario is changed: the rate becomes that kernel rate, as a
share of the GPU's GEMM peak, and the changed job gets its own bubble and exposed exchanges.
"""

from __future__ import annotations

import functools

from stepbudget.budget.rate import kernel_scenario
from stepbudget.budget.step import Budget, estimate
from stepbudget.enums import RateScope
from stepbudget.inputs.scenario import Scenario, load, preset_names
from stepbudget.plan.derive import derive

RATE_FIELDS = ("cluster.achieved_flops", "cluster.achieved_fraction", "cluster.rate_scope")
"""Overrides that state the rate: they describe the measurement, not a change to the job."""
NAME_FIELDS = ("name", "description", "source")
"""Overrides that change nothing a step costs."""


def at_kernel_fraction(sc: Scenario, fraction: float) -> Scenario:
    """``sc`` with its compute at ``fraction`` of its GPU's GEMM peak, as a kernel rate."""
    cluster = sc.cluster.model_copy(update={"achieved_flops": None, "achieved_fraction": fraction,
                                            "rate_scope": RateScope.KERNEL})
    return sc.model_copy(update={"cluster": cluster})


def _key(override: str) -> str:
    return override.partition("=")[0].strip()


def carried(ref: str, sets: list[str]) -> tuple[Scenario, float | None]:
    """``ref`` with ``sets``, and the kernel rate its whole-step rate was carried at (None if kept as is).

    A scenario with ``rate_scope: step`` is kept as written unless ``sets`` change the job (anything but
    the rate and the names). Then the rate stated by ``ref`` and the rate overrides, measured on ``ref``'s
    own layout, is turned into the kernel rate that reproduces that layout's step, and the changed job
    runs at it (as a share of its GPU's GEMM peak): what ``scale``, ``search`` and ``whatif`` do, so a
    changed size or layout gets its own bubble instead of the measured layout's.
    """
    sc = load(ref, sets)
    changes = [s for s in sets if _key(s) not in RATE_FIELDS + NAME_FIELDS]
    if sc.cluster.rate_scope != RateScope.STEP or not changes:
        return sc, None
    kernel, rate = kernel_of(ref, [s for s in sets if _key(s) in RATE_FIELDS])
    return at_kernel_fraction(sc, float(derive(kernel).flops_rate) / kernel.peak_gemm_flops), rate


def kernel_of(ref: str, sets: list[str] | tuple[str, ...] = ()) -> tuple[Scenario, float | None]:
    """``kernel_scenario(load(ref, sets))``, calibrated once per preset and overrides."""
    if ref in preset_names():
        return _preset_kernel(ref, tuple(sets))
    return kernel_scenario(load(ref, list(sets)))  # a file may change between calls: calibrated every time


@functools.lru_cache(maxsize=256)
def _preset_kernel(ref: str, sets: tuple[str, ...]) -> tuple[Scenario, float | None]:
    # presets are package data: a name and its overrides always calibrate to the same rate
    return kernel_scenario(load(ref, list(sets)))


def kernel_view(sc: Scenario) -> Budget | None:
    """The budget of a whole-step-rate scenario at the kernel rate that reproduces its step: the same step
    split into compute, bubble and exposed time as ``scale``, ``search`` and ``whatif`` see it. None when
    ``sc``'s rate is already a kernel rate."""
    if sc.cluster.rate_scope != RateScope.STEP:
        return None
    return estimate(derive(kernel_scenario(sc)[0]))
