"""What several figures share: a job named in words, axes of time a reader can read, one NIC's bursts."""

from __future__ import annotations

import math
from dataclasses import dataclass

from stepbudget.budget.step import estimate
from stepbudget.inputs.errors import OptionError
from stepbudget.inputs.scenario import Scenario
from stepbudget.plan.derive import derive
from stepbudget.views import fmt
from stepbudget.views.i18n import t
from stepbudget.wire import wire_of

DEGREES = ("tp", "cp", "pp", "ep", "dp")
"""The layout's degrees a job's name lists: those above 1, and DP always (the replicas)."""


def job_name(lang: str, sc: Scenario) -> str:
    """A job in words, as legends and titles name it: the model (the catalog's name), the GPUs and the layout
    (Llama 3 405B on 16,384 GPUs, TP 8 × PP 16 × DP 128), never a preset's id."""
    lay = sc.layout
    degrees = [(d, getattr(lay, d)) for d in DEGREES]
    layout = " × ".join(f"{t(lang, f'dim.{d}')} {fmt.number(n)}" for d, n in degrees if n > 1 or d == "dp")
    return t(lang, "fig.job_name", model=sc.model.name, gpus=fmt.gpus(lang, sc.cluster.gpus), layout=layout)


def nice_step(span: float, count: int) -> float:
    """The 1-2-5 step that cuts ``span`` into about ``count`` parts (at least that long)."""
    raw = span / max(count, 1)
    decade = 10.0 ** math.floor(math.log10(raw))
    return next(m * decade for m in (1, 2, 5, 10) if m * decade >= raw * (1 - 1e-9))


def ticks_between(low: float, high: float, count: int) -> list[float]:
    """Round values (multiples of a 1-2-5 step) from ``low`` to ``high``, about ``count`` of them."""
    if high <= low:
        return []
    step = nice_step(high - low, count)
    first = math.ceil(low / step * (1 - 1e-12)) * step
    return [round(first + i * step, 12) for i in range(int((high - first) / step * (1 + 1e-9)) + 1)]


def log_axis(values: list[float], label) -> dict:
    """A log axis over ``values`` with ticks at 1, 2 and 5 of each decade, labelled by ``label`` (a value ->
    text), its range from a tick at or below the least value to one at or above the largest: every value has a
    labelled tick above and below it."""
    positive = [v for v in values if v > 0 and math.isfinite(v)]
    if not positive:
        return {"type": "log"}
    low, high = min(positive), max(positive)
    ticks = [m * 10.0 ** e for e in range(math.floor(math.log10(low)) - 1, math.ceil(math.log10(high)) + 2)
             for m in (1, 2, 5)]
    bottom = max(v for v in ticks if v <= low * (1 + 1e-9))
    top = min(v for v in ticks if v >= high * (1 - 1e-9))
    shown = [v for v in ticks if bottom <= v <= top]
    pad = 0.04 * (math.log10(top) - math.log10(bottom) or 1)
    return {"type": "log", "tickvals": shown, "ticktext": [label(v) for v in shown],
            "range": [math.log10(bottom) - pad, math.log10(top) + pad]}


@dataclass(frozen=True)
class Bursts:
    """One NIC's traffic as the chapter draws it (5.6): a burst of ``burst_s`` at ``line_Bps`` every ``step_s``."""

    step_s: float
    burst_s: float
    line_Bps: float
    given: bool
    """Whether the step and burst were given (a panel's duty cycle and step) rather than the job's own."""

    @property
    def duty(self) -> float:
        return self.burst_s / self.step_s


def bursts_of(sc: Scenario, step_s: float | None = None, burst_s: float | None = None) -> Bursts:
    """The bursts of ``sc``'s NIC: its budget's step and the burst its bytes take at line rate (wire.py), or the
    ``step_s`` and ``burst_s`` given (both or neither), at the scenario's line rate."""
    line = float(sc.cluster.nic_Bps)
    if (step_s is None) != (burst_s is None):
        raise OptionError("burst_s", "give both the step and the burst length, or neither")
    if step_s is not None and burst_s is not None:
        if not 0 < burst_s <= step_s:
            raise OptionError("burst_s", f"a burst of {burst_s:.3g} s does not fit a {step_s:.3g} s step; give a "
                                         "burst longer than 0 and no longer than the step")
        return Bursts(float(step_s), float(burst_s), line, True)
    view = wire_of(estimate(derive(sc)), steps=1).view
    return Bursts(float(view.step_s), float(view.burst_s), line, False)
