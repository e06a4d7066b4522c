"""ScaleCurve -> JSON-ready dict, a rich table (the `scale` command) and its figure (the chapter's Figure 5.4)."""

from __future__ import annotations

from dataclasses import asdict

import numpy as np
from rich.table import Table
from rich.text import Text

from stepbudget.budget.step import Budget
from stepbudget.sweep.scaling import ScaleCurve
from stepbudget.units import fmt_bytes, fmt_flops, fmt_time
from stepbudget.plan.derive import derive
from stepbudget.views import fmt
from stepbudget.views.i18n import t
from stepbudget.views.render import COLORS


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


_TIMES = ("compute_s", "bubble_s", "dp_s", "exposed_comm_s", "step_s")
_SHARES = ("comm_share", "exposed_share", "mfu")


def _log_ticks(values: list[float], lang: str) -> dict:
    """Ticks at 1, 2 and 5 of each decade the values span, labelled as times (100 ms, 1 s): a log axis of
    seconds is read in ms below 1 s."""
    positive = [v for v in values if v > 0]
    if not positive:
        return {}
    lo, hi = np.floor(np.log10(min(positive))), np.ceil(np.log10(max(positive)))
    ticks = [m * 10.0 ** e for e in np.arange(lo, hi + 1) for m in (1, 2, 5)]
    ticks = [v for v in ticks if min(positive) / 2 <= v <= max(positive) * 2]
    return {"tickvals": ticks, "ticktext": [fmt.time(lang, v) for v in ticks]}


def scaling_figure(curve: ScaleCurve, lang: str = "en") -> dict:
    """Figure 5.4 of a scaling curve: time per step by part, and the shares of the step, against the GPU count."""
    x = [p.gpus for p in curve.points]
    sc = curve.scenario
    data = [{"type": "scatter", "mode": "lines+markers", "name": t(lang, f"fig.5.4.part.{key}"), "x": x,
             "y": [getattr(p, key) for p in curve.points], "line": {"color": COLORS[i]},
             "customdata": [fmt.time(lang, getattr(p, key)) for p in curve.points],
             "hovertemplate": t(lang, "fig.5.4.hover", gpus="%{x:,}", value="%{customdata}")
             + "<extra>%{fullData.name}</extra>"}
            for i, key in enumerate(_TIMES)]
    data += [{"type": "scatter", "mode": "lines+markers", "name": t(lang, f"fig.5.4.part.{key}"), "x": x,
              "y": [getattr(p, key) for p in curve.points], "xaxis": "x2", "yaxis": "y2",
              "line": {"color": COLORS[5 + i], "dash": "dot"}}
             for i, key in enumerate(_SHARES)]
    rate = (t(lang, "fig.5.4.rate.carried", rate=fmt.flops(curve.calibrated_rate)) if curve.calibrated_rate
            else t(lang, "fig.5.4.rate.kernel", rate=fmt.flops(float(sc.cluster.achieved_flops or sc.peak_gemm_flops))))
    how = (t(lang, "fig.5.4.researched") if curve.researched else
           t(lang, "fig.5.4.fixed", **{k: curve.points[0].layout[k] for k in ("tp", "cp", "pp")}))
    ticks = {"type": "log", "title": {"text": t(lang, "fig.5.4.x")}, "tickvals": x, "ticktext": [f"{n:,}" for n in x]}
    values = [getattr(p, key) for p in curve.points for key in _TIMES]
    layout = {"title": {"text": t(lang, f"fig.5.4.title.{curve.mode}", scenario=sc.name, rate=rate, how=how)},
              "template": "plotly_white", "width": 1100, "height": 520, "legend": {"orientation": "h", "y": -0.2},
              "xaxis": {**ticks, "domain": [0, 0.45]}, "xaxis2": {**ticks, "domain": [0.55, 1], "anchor": "y2"},
              "yaxis": {"type": "log", "title": {"text": t(lang, "fig.5.4.y")}, **_log_ticks(values, lang)},
              "yaxis2": {"title": {"text": t(lang, "fig.5.4.y2")}, "tickformat": ".0%", "range": [0, 1],
                         "anchor": "x2"}}
    return {"data": data, "layout": layout}
