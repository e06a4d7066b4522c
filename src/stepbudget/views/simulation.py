"""Simulated steps -> JSON-ready dict, rich tables, a Perfetto trace and a timeline figure."""

from __future__ import annotations

import json
import os
from pathlib import Path

from rich.table import Table

from stepbudget.sim.graph import TaskKind
from stepbudget.sim.step import MonteCarlo, StepResult
from stepbudget.sim.timeline import trace_events
from stepbudget.units import fmt_time
from stepbudget.views.figures import _atomic, write_figure


def simulate_dict(r: StepResult, mc: MonteCarlo | None = None, tails: dict | None = None) -> dict:
    """The `simulate --json` object (keys documented in the README)."""
    out = {
        "scenario": r.program.budget.plan.scenario.name,
        "step_s": r.step_s,
        "analytical_step_s": r.analytical_step_s,
        "step_overhead_s": r.step_overhead_s,
        "difference": r.step_s / r.analytical_step_s - 1,
        "exposed_comm_s": {k: v for k, v in r.exposed_s.items() if k != "bubble"},
        "bubble_s": r.exposed_s["bubble"],
        "deadline_misses": len(r.deadline_misses),
        "missed": r.deadline_misses[:50],
        "link_utilisation": r.link_utilisation,
        "tasks": r.program.graph.num_tasks,
        "engine_events": r.timeline.engine_events,
        "closed_form_bubble": r.program.closed_form_bubble,
    }
    if mc is not None:
        out |= {"steps": int(mc.steps_s.size), "replicas": mc.replicas, "p50_s": mc.percentile(50),
                "p90_s": mc.percentile(90), "p99_s": mc.percentile(99), "mean_s": float(mc.steps_s.mean())}
    if tails:
        out["by_replicas"] = {str(k): v for k, v in tails.items()}
    return out


def simulate_table(r: StepResult) -> Table:
    sc = r.program.budget.plan.scenario
    t = Table(title=f"{sc.name}: one simulated step ({r.program.graph.num_tasks:,} tasks, "
                    f"{r.timeline.engine_events:,} events)", title_justify="left", show_header=False)
    t.add_column(style="bold")
    t.add_column(justify="right")
    t.add_column(style="dim")
    t.add_row("simulated step", fmt_time(r.step_s), f"{r.step_s / r.analytical_step_s - 1:+.2%} against the budget")
    t.add_row("analytical step", fmt_time(r.analytical_step_s), "kernel-scope budget of the same scenario")
    t.add_row("bubble", fmt_time(r.exposed_s["bubble"]),
              "closed form (schedule not run task by task)" if r.program.closed_form_bubble
              else "last stage's wait for other stages' compute")
    for dim, sec in r.exposed_s.items():
        if dim != "bubble" and sec > 0:
            t.add_row(f"exposed {dim.upper()}", fmt_time(sec), "idle time of the last stage waiting for it")
    if r.step_overhead_s:
        t.add_row("fixed cost per step", fmt_time(r.step_overhead_s), "cluster.step_overhead_s, after the timeline")
    t.add_row("deadline misses", str(len(r.deadline_misses)), "hidden exchanges or DP buckets that ended late")
    return t


def _fixed_cost(r: StepResult) -> str:
    """A plot title's note of the fixed cost per step, which follows the drawn timeline."""
    return f" ({r.step_overhead_s:.3f} s of it the fixed cost per step, not drawn)" if r.step_overhead_s else ""


def misses_table(r: StepResult, limit: int = 12) -> Table:
    t = Table(title="Deadline misses (latest first)", title_justify="left")
    for col in ("task", "stage", "late by"):
        t.add_column(col, justify="left" if col == "task" else "right")
    for m in sorted(r.deadline_misses, key=lambda x: -x["late_s"])[:limit]:
        t.add_row(m["task"], str(m["stage"]), fmt_time(m["late_s"]))
    return t


def tails_table(tails: dict[int, dict[str, float]], steps: int) -> Table:
    t = Table(title=f"{steps:,} jittered steps: the step waits for the slowest of R data-parallel replicas",
              title_justify="left")
    for col in ("replicas R", "p50", "p90", "p99"):
        t.add_column(col, justify="right")
    for R, q in tails.items():
        t.add_row(f"{R:,}", fmt_time(q["p50_s"]), fmt_time(q["p90_s"]), fmt_time(q["p99_s"]))
    return t


def links_table(r: StepResult) -> Table:
    t = Table(title="Link utilisation over the step", title_justify="left")
    t.add_column("link")
    t.add_column("busy", justify="right")
    for name, u in sorted(r.link_utilisation.items(), key=lambda kv: -kv[1])[:12]:
        t.add_row(name, f"{u:.1%}")
    return t


def write_trace(r: StepResult, path: str | os.PathLike) -> None:
    """Chrome / Perfetto trace of the step: one track per stage's compute stream and per link."""
    events = trace_events(r.timeline, stream_names=r.program.stream_names, link_names=r.program.link_names)
    _atomic(Path(path), lambda tmp: tmp.write_text(json.dumps(events)), option="--trace")


def step_figure(r: StepResult, path: str | os.PathLike) -> None:
    """The simulated step as a timeline: compute per stage, then transfers per link (PNG, SVG or HTML)."""
    rows = _rows(r)
    write_figure(path, lambda: _plotly(rows, r), lambda tmp: _matplotlib(rows, r, tmp))


_COLORS = {"fwd": "#4C72B0", "bwd": "#55A868", "optimizer": "#8172B2", "bubble": "#CCCCCC", "tp": "#C44E52",
           "cp": "#DD8452", "pp": "#937860", "dp": "#DA8BC3", "ep": "#8C8C8C"}


def _rows(r: StepResult) -> list[tuple[str, list[tuple[float, float, str]]]]:
    tl, prog, g = r.timeline, r.program, r.program.graph
    rows: dict[str, list[tuple[float, float, str]]] = {}
    for t in range(g.num_tasks):
        if g.kind[t] == TaskKind.COMPUTE:
            key = prog.stream_names[int(g.stream[t])]
            color = _COLORS.get(str(prog.role[t]), "#4C72B0")
        elif g.kind[t] == TaskKind.TRANSFER:
            key = prog.link_names[int(g.link_ids[g.link_indptr[t]])]
            color = _COLORS.get(str(prog.dim[t]), "#999999")
        else:
            continue
        rows.setdefault(key, []).append((float(tl.start_s[t]), float(tl.end_s[t] - tl.start_s[t]), color))
    order = sorted(rows, key=lambda k: (not k.endswith("compute"), int(k.split()[1]) if k.split()[1].isdigit() else 0, k))
    return [(k, rows[k]) for k in order]


def _matplotlib(rows, r: StepResult, tmp: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    fig, ax = plt.subplots(figsize=(12, max(3, 0.28 * len(rows) + 1.5)))
    for y, (_, bars) in enumerate(rows):
        ax.broken_barh([(s, d) for s, d, _ in bars], (y - 0.4, 0.8), facecolors=[c for _, _, c in bars], linewidth=0)
    ax.set_yticks(range(len(rows)), [name for name, _ in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("seconds")
    ax.set_title(f"{r.program.budget.plan.scenario.name}: one simulated step, {r.step_s:.3f} s{_fixed_cost(r)} "
                 f"(budget {r.analytical_step_s:.3f} s), {len(r.deadline_misses)} deadline misses", fontsize=10)
    ax.legend(handles=[Patch(color=c, label=k) for k, c in _COLORS.items() if k != "bubble"], fontsize=7,
              ncol=5, loc="lower right")
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(tmp, format=tmp.suffix.lstrip("."), dpi=120)
    plt.close(fig)


def _plotly(rows, r: StepResult):
    import plotly.graph_objects as go

    fig = go.Figure()
    for name, bars in rows:
        fig.add_trace(go.Bar(y=[name] * len(bars), x=[d for _, d, _ in bars], base=[s for s, _, _ in bars],
                             orientation="h", marker_color=[c for _, _, c in bars], showlegend=False))
    fig.update_layout(barmode="overlay", title=f"One simulated step: {r.step_s:.3f} s{_fixed_cost(r)}", template="plotly_white",
                      yaxis={"autorange": "reversed"}, xaxis_title="seconds")
    return fig
