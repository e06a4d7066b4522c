"""ScaleCurve -> JSON-ready dict and a rich table (the `scale` command)."""

from __future__ import annotations

from dataclasses import asdict

from rich.table import Table
from rich.text import Text

from stepbudget.budget.step import Budget
from stepbudget.sweep.scaling import ScaleCurve
from stepbudget.units import fmt_bytes, fmt_flops, fmt_time
from stepbudget.plan.derive import derive


def scale_dict(curve: ScaleCurve) -> dict:
    """The `scale --json` object (keys documented in docs/commands/scale.md)."""
    return {
        "scenario": curve.scenario.name,
        "mode": curve.mode,
        "researched": curve.researched,
        "kernel_rate_flops": float(derive(curve.scenario).flops_rate),
        "calibrated_rate": curve.calibrated_rate is not None,
        "points": [asdict(p) for p in curve.points],
    } | ({"as_measured": measured_dict(curve.measured)} if curve.measured is not None else {})


def measured_dict(b: Budget) -> dict:
    """What `budget` shows for the scenario as written (a curve's ``measured``), whose whole-step rate the curve
    carries as a kernel rate."""
    return {"gpus": b.plan.scenario.cluster.gpus, "rate_flops": float(b.plan.flops_rate), "compute_s": float(b.compute_s),
            "bubble_s": float(b.bubble_s), "step_s": float(b.step_s)}


def measured_note(curve: ScaleCurve) -> str | None:
    """One line on why `budget` and this table split the same measured step differently, at the scenario's size."""
    if curve.measured is None:
        return None
    m = measured_dict(curve.measured)
    at = next((p for p in curve.points if p.gpus == m["gpus"] and not curve.researched), None)
    same = (f"the same {fmt_time(at.step_s)} step as budget at {m['gpus']:,} GPUs, " if at is not None
            else f"budget's {fmt_time(m['step_s'])} step at {m['gpus']:,} GPUs, ")
    return (same + f"which shows compute {fmt_time(m['compute_s'])} and bubble {fmt_time(m['bubble_s'])} at the measured "
            f"{fmt_flops(m['rate_flops'])} whole-step rate (both inside it); here that rate is split as the kernel rate "
            f"{fmt_flops(float(derive(curve.scenario).flops_rate))} with the bubble and exposed time added")


def scale_table(curve: ScaleCurve) -> Table:
    rate = fmt_flops(float(derive(curve.scenario).flops_rate))
    how = "best layout searched at each size" if curve.researched else "model-parallel layout fixed, DP takes the rest"
    t = Table(title=f"{curve.scenario.name}: {curve.mode} scaling · {how} · kernel rate {rate}", title_justify="left")
    for col in ("GPUs", "layout", "batch", "m", "compute", "bubble", "DP exchange", "all exchanges", "exposed",
                "step", "comm share", "exposed share", "MFU", "memory"):
        t.add_column(col, justify="left" if col == "layout" else "right", no_wrap=col in ("GPUs", "layout"))
    for p in curve.points:
        lay = p.layout
        label = " ".join(f"{k.upper()}{lay[k]}" for k in ("tp", "cp", "pp", "dp", "ep") if lay[k] > 1 or k in ("tp", "dp"))
        wins = p.comm_s > p.compute_s
        t.add_row(
            f"{p.gpus:,}", label, f"{p.global_batch_seqs:,}", f"{p.microbatches:g}", fmt_time(p.compute_s),
            fmt_time(p.bubble_s), fmt_time(p.dp_s), Text(fmt_time(p.comm_s), style="bold red" if wins else ""),
            fmt_time(p.exposed_comm_s), fmt_time(p.step_s), f"{p.comm_share:.1%}", f"{p.exposed_share:.1%}",
            f"{p.mfu:.1%}", Text(fmt_bytes(p.memory_bytes), style="" if p.fits else "red"),
        )
    notes = [f"{p.gpus:,} GPUs: {p.note}" for p in curve.points if p.note]
    lines = [measured_note(curve)] + (["evaluated anyway - " + " | ".join(notes)] if notes else [])
    if any(lines):
        t.caption = "\n".join(line for line in lines if line)
        t.caption_justify = "left"
    return t
