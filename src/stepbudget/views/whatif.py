"""What-if variants -> JSON-ready dict and side-by-side tables (the `whatif` command)."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from stepbudget.budget.step import DIMS
from stepbudget.sweep.whatif import Variant
from stepbudget.units import fmt_bytes, fmt_time
from stepbudget.views.memory import memory_dict
from stepbudget.views.tables import budget_dict, degrees_label


def whatif_dict(variants: list[Variant]) -> dict:
    """The `whatif --json` object: one entry per variant, base first (keys documented in docs/commands/whatif.md)."""
    return {
        "scenario": variants[0].scenario.name,
        "variants": [
            {"name": v.name, "changes": list(v.changes), "budget": budget_dict(v.budget),
             "memory": memory_dict(v.memory), "traffic_matrix": v.traffic_matrix(),
             "bubble_fraction": v.bubble_fraction}
            for v in variants
        ],
    }


def _ratio(value: float, base: float) -> str:
    if base == 0:
        return "" if value == 0 else " (new)"
    r = value / base
    return "" if abs(r - 1) < 0.02 else f" (x{r:.2g})"


def whatif_table(variants: list[Variant]) -> Table:
    base = variants[0]
    how = ("each timed by its operators" if base.budget.plan.rate_source == "operators"
           else "at the base's kernel efficiency")
    t = Table(title=f"What if: {base.scenario.name} and {len(variants) - 1} variant(s), {how}", title_justify="left")
    t.add_column("", style="bold")
    for v in variants:
        t.add_column(v.name, justify="right", max_width=22, overflow="fold")

    def row(label, get, fmt, compare=True):
        values = [get(v) for v in variants]  # the first is the base's
        t.add_row(label, *(fmt(x) + (_ratio(x, values[0]) if compare and i else "") for i, x in enumerate(values)))

    t.add_row("GPUs", *(f"{v.scenario.cluster.gpus:,} {v.scenario.cluster.gpu.name.split()[0]}" for v in variants))
    t.add_row("layout", *(degrees_label(lambda a: getattr(v.scenario.layout, a))  # called at once, with this v
                          + (f" HSDP{v.scenario.layout.dp_replicas}" if v.scenario.layout.dp_replicas > 1 else "")
                          for v in variants))
    f = lambda x: float(x)  # noqa: E731
    row("step", lambda v: f(v.budget.step_s), fmt_time)
    row("compute", lambda v: f(v.budget.compute_s), fmt_time)
    row("bubble", lambda v: f(v.budget.bubble_s), fmt_time)
    row("bubble / compute", lambda v: v.bubble_fraction, lambda x: f"{x:.1%}")
    row("exposed comm", lambda v: f(v.budget.exposed_comm_s), fmt_time)
    row("MFU", lambda v: f(v.budget.mfu), lambda x: f"{x:.1%}", compare=False)
    t.add_row("memory / HBM", *(
        Text(f"{fmt_bytes(f(v.memory.total))} / {fmt_bytes(v.memory.capacity)}", style="" if bool(v.memory.fits) else "red")
        for v in variants))
    for d in DIMS:
        row(f"{d.value.upper()} bytes/GPU", lambda v, d=d: v.traffic_matrix()[d.value]["total"], fmt_bytes)
    return t


def _bytes(x: float) -> str:
    return fmt_bytes(x) if x else "-"


def traffic_table(variants: list[Variant]) -> Table:
    """The traffic matrix of each variant: bytes per GPU per step, NVLink | NIC, by dimension."""
    t = Table(title="Traffic matrix: bytes per GPU per step, NVLink | NIC", title_justify="left")
    t.add_column("dim", style="bold")
    for v in variants:
        t.add_column(v.name, justify="right", max_width=22, overflow="fold")
    mats = [v.traffic_matrix() for v in variants]
    for d in DIMS:
        t.add_row(d.value.upper(), *(f"{_bytes(m[d.value]['nvlink'])} | {_bytes(m[d.value]['nic'])}" for m in mats))
    return t
