"""Memory -> JSON-ready dict and a rich table (the `memory` command)."""

from __future__ import annotations

from rich.console import JustifyMethod
from rich.table import Table
from rich.text import Text

from stepbudget.budget.memory import COMPONENTS, Memory
from stepbudget.units import fmt_bytes
from stepbudget.views.tables import _num, layout_label

_NOTES = {
    "params": "parameters kept between steps",
    "grads": "gradient accumulation buffer",
    "optimizer": "optimizer state with FP32 master copy",
    "gathered": "unsharded layers being gathered (ZeRO-3/FSDP)",
    "activations": "stored for backward, all micro-batches in flight",
    "extras": "embedding dropout masks; output layer and logits when pp = 1",
}


def memory_dict(mem: Memory) -> dict:
    """The `memory --json` object (keys documented in docs/commands/memory.md). 0-d only."""
    sc = mem.plan.scenario
    return {
        "scenario": sc.name,
        "gpu": sc.cluster.gpu.name,
        "capacity_bytes": mem.capacity,
        "bytes": {k: _num(getattr(mem, k)) for k in COMPONENTS},
        "model_state_bytes": _num(mem.model_state),
        "total_bytes": _num(mem.total),
        "headroom_bytes": _num(mem.headroom),
        "fits": bool(mem.fits),
        "layers_on_rank": _num(mem.layers),
        "inflight_microbatches": _num(mem.inflight),
    }


def fit_dict(mem: Memory) -> dict:
    """Whether a timed job fits in HBM, with the bytes it needs and has: every command that times a step says it."""
    return {"fits": bool(mem.fits), "memory_bytes": _num(mem.total), "hbm_bytes": mem.capacity}


def fit_lines(mem: Memory) -> list[str]:
    """The first line of every command that times a step whose job does not fit in HBM (none when it fits)."""
    sc = mem.plan.scenario
    return misfit_lines(sc.name, sc.cluster.gpu.name, [("", float(mem.total), mem.capacity)] if not bool(mem.fits) else [])


def misfit_lines(name: str, gpu: str, misfits: list[tuple[str, float, float]]) -> list[str]:
    """One line naming every job of a command's table that does not fit: (label, bytes needed, HBM bytes) each."""
    if not misfits:
        return []
    if len(misfits) == 1 and not misfits[0][0]:
        _, need, hbm = misfits[0]
        return [f"[bold red]does not fit:[/bold red] {name} needs {fmt_bytes(need)} per GPU on its busiest pipeline rank, "
                f"{fmt_bytes(hbm)} of HBM on {gpu}; this step cannot run as described (stepbudget memory shows where "
                "the bytes go)"]
    each = "; ".join(f"{label} ({fmt_bytes(need)} per GPU of {fmt_bytes(hbm)})" for label, need, hbm in misfits)
    return [f"[bold red]does not fit in HBM:[/bold red] {each}; those steps cannot run as described"]


def memory_table(mem: Memory) -> Table:
    d = memory_dict(mem)
    sc = mem.plan.scenario
    t = Table(title=f"{sc.name}: memory per GPU on the first pipeline rank · {layout_label(sc)}", title_justify="left")
    columns: tuple[tuple[str, JustifyMethod], ...] = (("component", "left"), ("bytes", "right"),
                                                      ("share of HBM", "right"), ("what", "left"))
    for col, just in columns:
        t.add_column(col, justify=just)
    for k in COMPONENTS:
        t.add_row(k, fmt_bytes(d["bytes"][k]), f"{d['bytes'][k] / mem.capacity:.1%}", _NOTES[k])
    style = "bold green" if d["fits"] else "bold red"
    t.add_row(Text("total", style=style), Text(fmt_bytes(d["total_bytes"]), style=style),
              Text(f"{d['total_bytes'] / mem.capacity:.1%}", style=style),
              f"{d['layers_on_rank']:g} layers x {d['inflight_microbatches']:.3g} micro-batches in flight")
    verdict = (f"fits in {fmt_bytes(mem.capacity)} {sc.cluster.gpu.name}, {fmt_bytes(d['headroom_bytes'])} spare"
               if d["fits"] else f"does not fit in {fmt_bytes(mem.capacity)} {sc.cluster.gpu.name}: "
               f"short by {fmt_bytes(-d['headroom_bytes'])}")
    t.caption = verdict
    t.caption_justify = "left"
    return t
