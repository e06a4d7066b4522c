"""Simulated steps -> JSON-ready dict, rich tables, a Perfetto trace and a timeline figure (a plotly dict)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
from rich.table import Table

from stepbudget.enums import Axis, Schedule
from stepbudget.sim.graph import TaskKind
from stepbudget.sim.step import MonteCarlo, StepResult
from stepbudget.sim.timeline import trace_events
from stepbudget.units import fmt_time
from stepbudget.inputs.files import atomic_write


SAME_STEP = 0.01
"""How far a simulated step without jitter may be from the budget's and still be the same step (tests/sim hold
them within it without contention); past it, a schedule run in closed form says why."""


def simulate_dict(r: StepResult, mc: MonteCarlo | None = None, tails: dict | None = None) -> dict:
    """The `simulate --json` object (keys documented in docs/commands/simulate.md)."""
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
                "p90_s": mc.percentile(90), "p99_s": mc.percentile(99), "mean_s": float(mc.steps_s.mean()),
                "full": mc.full, "simulated_pipelines": int(mc.pipeline_s.size)}
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
    if abs(r.step_s / r.analytical_step_s - 1) > SAME_STEP:
        t.caption = parted_note(r)
        t.caption_justify = "left"
    return t


def parted_note(r: StepResult) -> str:
    """Why a step simulated without jitter parts from the budget's: which term differs, and why."""
    b = r.program.budget
    plan, lay = b.plan, b.plan.scenario.layout
    m, p = float(np.asarray(plan.microbatches)), int(plan.pp)
    dp = float(sum(np.asarray(e) for x, e in zip(b.exchanges, b.exposed_s) if x.dim == Axis.DP))
    apart = r.step_s - r.analytical_step_s
    said = f"{apart / r.analytical_step_s:+.2%} against the budget: "
    if r.program.closed_form_bubble:
        why = (f"{lay.schedule.value} with {m:g} micro-batches, not a multiple of its {p} stages (Megatron refuses it),"
               if lay.schedule == Schedule.INTERLEAVED_1F1B else lay.schedule.value)
        said += (f"{why} runs as the budget's closed-form bubble, idle at the start of each stage, then one chunk a "
                 "stage in 1F1B order (sim/program.py), so its DP buckets hide behind that order, not the schedule's")
    elif abs(r.exposed_s["dp"] - dp) > 0.5 * abs(apart):
        said += ("the DP buckets queue on their link behind one another at the end of the backward, which the "
                 "budget's overlap formula leaves out")
    elif any(name.endswith(" NIC") for name in r.program.link_names):  # shared: "stage 0 NIC", not "stage 0 PP (NIC)"
        return said + ("a stage's PP sends and DP buckets share its NIC here, max-min, where the budget gives each "
                       "its link to itself (--no-contention does too)")
    else:
        return said + ("the schedule's order and the links decide the bubble, PP and DP here (sim/program.py); the "
                       "budget's formulas approximate them")
    return said + f": exposed DP {fmt_time(r.exposed_s['dp'])} here, {fmt_time(dp)} in the budget"


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


def tails_table(tails: dict[int, dict[str, float]], steps: int, full: bool = False) -> Table:
    how = "every replica simulated" if full else "replicas drawn from the simulated pipelines"
    t = Table(title=f"{steps:,} jittered steps: the step waits for the slowest of R data-parallel replicas ({how})",
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
    atomic_write(Path(path), lambda tmp: tmp.write_text(json.dumps(events)), "--trace")


def step_figure(r: StepResult, path: str | os.PathLike) -> None:
    """Write the simulated step's timeline (``step_plot``) to ``path``: .html, .png or .svg."""
    from stepbudget.views.render import write  # the chapter's package: loaded only to plot

    write(step_plot(r), path, "--plot")


_COLORS = {"fwd": "#4C72B0", "bwd": "#55A868", "optimizer": "#8172B2", "bubble": "#CCCCCC", "tp": "#C44E52",
           "cp": "#DD8452", "pp": "#937860", "dp": "#DA8BC3", "ep": "#8C8C8C"}
"""Colour of a compute task by its role, of a transfer by its parallel dimension."""


def step_plot(r: StepResult) -> dict:
    """The simulated step as a timeline, a plotly figure dict: a row per stage's compute stream, then one per
    link, and a horizontal bar from each task's start to its end; one trace per role or dimension (its colour
    and legend entry), in ``_COLORS``' order."""
    rows, bars = _bars(r)
    data = [{"type": "bar", "orientation": "h", "name": kind, "marker": {"color": color},
             "y": [row for row, _, _ in drawn], "base": [start for _, start, _ in drawn],
             "x": [seconds for _, _, seconds in drawn]}
            for (kind, color), drawn in sorted(bars.items(), key=lambda kv: _kind_order(kv[0][0]))]
    title = (f"{r.program.budget.plan.scenario.name}: one simulated step, {r.step_s:.3f} s{_fixed_cost(r)} "
             f"(budget {r.analytical_step_s:.3f} s), {len(r.deadline_misses)} deadline misses")
    layout = {"title": {"text": title}, "template": "plotly_white", "barmode": "overlay",
              "width": 1200, "height": 28 * len(rows) + 150,  # a row's bars and its label, whatever the stages
              "margin": {"l": 160, "r": 30, "t": 60, "b": 70},
              "xaxis": {"title": {"text": "seconds"}},
              "yaxis": {"categoryorder": "array", "categoryarray": rows, "autorange": "reversed"},
              "legend": {"x": 1, "y": 0, "xanchor": "right", "yanchor": "bottom"}}
    return {"data": data, "layout": layout}


def _kind_order(kind: str) -> int:
    return list(_COLORS).index(kind) if kind in _COLORS else len(_COLORS)


def _bars(r: StepResult) -> tuple[list[str], dict[tuple[str, str], list[tuple[str, float, float]]]]:
    """The timeline's rows top to bottom (the stages' compute streams, then the links by stage), and each
    (kind, colour)'s bars as (row, start s, seconds); joins, which take no time, are not drawn."""
    tl, prog, g = r.timeline, r.program, r.program.graph
    bars: dict[tuple[str, str], list[tuple[str, float, float]]] = {}
    rows: set[str] = set()
    for t in range(g.num_tasks):
        if g.kind[t] == TaskKind.COMPUTE:
            row, kind, fallback = prog.stream_names[int(g.stream[t])], str(prog.role[t]), "#4C72B0"
        elif g.kind[t] == TaskKind.TRANSFER:
            row, kind, fallback = prog.link_names[int(g.link_ids[g.link_indptr[t]])], str(prog.dim[t]), "#999999"
        else:
            continue
        rows.add(row)
        bars.setdefault((kind, _COLORS.get(kind, fallback)), []).append(
            (row, float(tl.start_s[t]), float(tl.end_s[t] - tl.start_s[t])))
    order = sorted(rows, key=lambda k: (not k.endswith("compute"), int(k.split()[1]) if k.split()[1].isdigit() else 0, k))
    return order, bars
