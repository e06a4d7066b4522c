"""What-if: the same job with a few fields changed, side by side (`stepbudget whatif`).

The chapter's own cases and Panel 5.7's toggles are chapter/whatif.py.

Each variant is the base scenario with ``KEY=VALUE`` overrides, validated like ``--set``.
Every variant is the budget of its job, split at the kernel rate (``kernel_scenario``): a whole-step
rate is the kernel rate that reproduces the step of the job it was measured on (the preset or file
as written, budget/step.py ``kernel_rate``), carried to every variant as a share of its GPU's peak,
so a variant that changes the GPU generation gets that GPU's peak, and a variant that changes the
layout gets its own bubble. A base timed by the operator model times every variant by its own
operators (a new attention kernel or block shape shows). A variant that states its own achieved
rate states the rate measured on that job.

The traffic matrix of a variant is its bytes per GPU per step, by dimension and by link.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from stepbudget.budget.memory import Memory, memory_per_gpu
from stepbudget.budget.rate import kernel_scenario
from stepbudget.budget.step import DIMS, Budget, estimate
from stepbudget.inputs.errors import OptionError, prefixed
from stepbudget.inputs.scenario import Scenario, ScenarioError, load, parse_sets
from stepbudget.plan.derive import derive


@dataclass(frozen=True)
class Variant:
    name: str
    changes: tuple[str, ...]
    scenario: Scenario
    budget: Budget
    memory: Memory

    @property
    def bubble_fraction(self) -> float:
        """The bubble as a share of compute: what halves when PP halves at a fixed batch per replica."""
        return float(self.budget.bubble_s / self.budget.compute_s)

    def traffic_matrix(self) -> dict[str, dict[str, float]]:
        """Bytes per GPU per step: dimension -> {"nvlink", "nic", "total"}."""
        b = self.budget
        nv, nic, tot = b.by_dim("nvlink_bytes"), b.by_dim("nic_bytes"), b.by_dim("bytes_per_gpu")
        return {d.value: {"nvlink": float(nv[d.value]), "nic": float(nic[d.value]), "total": float(tot[d.value])}
                for d in DIMS}


def parse_vary(text: str) -> tuple[str, ...]:
    """'layout.pp=8 cluster.gpus=8192' -> ('layout.pp=8', 'cluster.gpus=8192'); quotes keep spaces."""
    try:
        items = tuple(shlex.split(text.replace(";", " ")))
    except ValueError as e:
        raise OptionError("vary", f"{text!r}: {e}; quote values that contain spaces") from None
    bad = [x for x in items if "=" not in x or not x.partition("=")[0]]
    if not items or bad:
        raise OptionError("vary", f"{text!r}: write KEY=VALUE pairs separated by spaces, "
                            "e.g. 'layout.pp=8 cluster.gpus=8192'")
    return items


def whatif(ref: str, sets: list[str], variants: list[tuple[str, tuple[str, ...]]]) -> list[Variant]:
    """The base (``ref`` with ``sets``) and each named variant, all as the budget of that job tells them: a
    whole-step rate at the kernel rate that reproduces the step of the job it was measured on (``ref``'s own
    job), by their own operators when the operator model times the base."""
    base = load(ref, sets)
    out = []
    for name, changes in [("base", ())] + list(variants):
        try:
            sc = kernel_scenario(base.assign(parse_sets(changes)) if changes else base)[0]
        except ScenarioError as e:
            raise prefixed(f"variant {name!r}: ", e) from None
        plan = derive(sc)
        out.append(Variant(name, tuple(changes), sc, estimate(plan), memory_per_gpu(plan)))
    return out
