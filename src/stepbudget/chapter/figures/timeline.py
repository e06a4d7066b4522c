"""Figure 5.1 and Animation 5.1: one GPU's step from the simulator, as a timeline.

Both read the simulated timeline of pipeline stage 0 (one GPU of it: every GPU of a stage runs the same
program) and draw it on one time axis that always runs to the end of the step. A step of many passes shows its
first layers and its last, the repeated middle elided as a band; a step with little to elide is shown whole.
Figure 5.1 is the step at the NIC's rate; Animation 5.1 plays the same job at that rate and at half of it
(the NIC only: NVLink keeps its rate), so that the reader sees the buckets' transfers overrun the compute meant
to hide them and the step grow.
"""

from __future__ import annotations

import functools

import numpy as np

from stepbudget.chapter.figures.common import job_name
from stepbudget.chapter.figures.stage import (
    Axis, axis_of, band, bar_columns, elided_layers, every_row, kind_of, row_labels, row_of,
    rows_axis, stage0, stage_pieces, traces,
)
from stepbudget.inputs.scenario import ScenarioError, load
from stepbudget.sim.program import program_size
from stepbudget.sim.step import StepResult, sim_budget, simulate_step
from stepbudget.sweep.calibrate import carried
from stepbudget.units import BITS_PER_BYTE, fmt_bits_rate
from stepbudget.views import fmt
from stepbudget.views.i18n import t


@functools.lru_cache(maxsize=16)
def _simulated(ref: str, sets: tuple[str, ...], nic_scale: float = 1.0, max_tasks: int | None = None) -> StepResult:
    """The step the simulator runs for ``ref`` with ``sets`` (a whole-step rate carried to a changed job, at its
    kernel rate), its NIC at ``nic_scale`` of its rate; TooLarge past ``max_tasks`` tasks. Kept: Figure 5.1 and
    Animation 5.1 draw the same job, and a page draws both for every change of its controls."""
    sc = carried(load(ref, list(sets)))[0]
    if nic_scale != 1.0:
        nic = {"nic_Bps": float(sc.cluster.nic_Bps) * nic_scale}
        sc = carried(sc.edit({"cluster": nic}, where="animation 5.1's half rate"))[0]
    budget = sim_budget(sc)
    if max_tasks is not None and (size := program_size(budget)) > max_tasks:
        raise TooLarge(size, max_tasks)
    return simulate_step(budget)


class TooLarge(ScenarioError):
    """A step with more tasks than the caller would simulate for one figure (the web page's bound)."""

    def __init__(self, tasks: int, limit: int):
        super().__init__(f"figure 5.1: this step is about {tasks:,} tasks to simulate, more than {limit:,}")
        self.tasks, self.limit = tasks, limit


# --- Figure 5.1 -------------------------------------------------------------------------------------------


def one_step(lang: str, ref: str, sets: list[str], max_tasks: int | None = None) -> dict:
    """Figure 5.1: one GPU's step, its first layers and its last with the repeated middle elided (or the whole
    step, when little repeats), every exchange labelled; the axis ends at the step's end, the time its title
    states. ``max_tasks`` bounds the simulation (TooLarge past it): a page must answer in about a second."""
    r = _simulated(ref, tuple(sets), max_tasks=max_tasks)
    axis = axis_of([r])
    kinds = bar_columns(lang, stage_pieces(r), axis)
    rows = row_labels(lang)
    data = [trace | kinds[trace["meta"]] for trace in traces(lang, r, axis, kinds)] + [every_row(rows)]
    whole = "" if axis.elided else "_whole"
    layout = {"title": {"text": t(lang, f"fig.5.1.title{whole}", job=job_name(lang, r.program.budget.plan.scenario),
                                  step=fmt.time(lang, float(r.step_s)))},
              "template": "plotly_white", "width": 1000, "height": 440, "barmode": "overlay",
              "legend": {"orientation": "h", "y": -0.25},
              "xaxis": {"title": {"text": t(lang, f"fig.5.1.x{whole}")}, **axis.ticks(lang)},
              "yaxis": rows_axis(rows),
              "meta": {"step_s": float(r.step_s), "axis": [axis.head, axis.tail, axis.end, axis.gap]},
              **band(lang, axis, elided_layers(r, axis))}
    return {"data": data, "layout": layout}


# --- Animation 5.1 ----------------------------------------------------------------------------------------

FRAMES = 40
"""Frames per rate: enough for the buckets to be seen leaving one by one, few enough to stay light."""


def _late(r: StepResult) -> dict[str, float]:
    """Stage 0's transfers that ended after their deadline, by label: how late."""
    return {m["task"]: m["late_s"] for m in r.deadline_misses if m["stage"] == 0}


def _frames(lang: str, r: StepResult, axis: Axis, rate_key: str, rate: str, kinds: list[str]
            ) -> tuple[list[dict], list[dict]]:
    """The frames of one step at one rate, evenly over the axis as drawn (the band passes quickly), and the
    slider steps that jump to them."""
    tl, p = r.timeline, r.program
    tasks = stage0(r)
    rows = row_labels(lang)
    late = _late(r)
    misses = [x for x in tasks if tl.label(x) in late]
    reduce = [x for x in tasks if p.role[x] == "reduce" and p.deadline[x] >= 0]
    compute_end = max(float(tl.end_s[x]) for x in tasks if p.role[x] == "bwd")
    step = float(r.step_s)
    pieces = stage_pieces(r)
    frames, steps = [], []
    for i, x_now in enumerate(np.linspace(0, axis.x(step), FRAMES + 1)[1:].tolist()):
        now = step if i == FRAMES - 1 else axis.at(x_now)
        bars = bar_columns(lang, pieces, axis, now)
        data: list[dict] = [{"type": "bar", **bars.get(kind, {"x": [], "base": [], "y": [], "customdata": []})}
                            for kind in kinds]
        done = [x for x in misses if tl.end_s[x] <= now]
        data.append({"type": "scatter", "x": [axis.x(float(tl.end_s[x])) for x in done],
                     "y": [rows[row_of(r, x)] for x in done],
                     "customdata": [fmt.time(lang, late[tl.label(x)]) for x in done]})
        due = [float(tl.end_s[p.deadline[x]]) for x in reduce]
        due = [axis.x(d) for d in due if any(a <= d <= b for a, b in axis.windows())]  # none drawn in the band
        data.append({"type": "scatter", "x": due, "y": [rows["nic"]] * len(due)})
        tail = axis.clip(compute_end, step) if now >= step * (1 - 1e-9) and step > compute_end else []
        data.append({"type": "bar", "x": [b - a for a, b in tail], "base": [a for a, _ in tail],
                     "y": [rows["compute"]] * len(tail)})
        state = t(lang, "fig.anim-5.1.state_late", misses=len(done), late=fmt.time(
            lang, max(late[tl.label(x)] for x in done))) if done else t(lang, "fig.anim-5.1.state_none")
        title = t(lang, "fig.anim-5.1.frame", rate=rate, now=fmt.time(lang, now), step=fmt.time(lang, step),
                  state=state)
        name = f"{rate_key}:{i}"
        frames.append({"name": name, "group": rate_key, "data": [_kept(d) for d in data],
                       "layout": {"title": {"text": title}},
                       "traces": list(range(len(data)))})
        steps.append({"method": "animate", "label": "", "name": name,
                      "args": [[name], {"mode": "immediate", "frame": {"duration": 0, "redraw": True},
                                        "transition": {"duration": 0}}]})
    return frames, steps


def _kept(trace: dict) -> dict:
    """A frame's trace with nothing to draw yet holds one empty point, so that its legend entry stays (plotly
    drops a trace without points from the legend, and the plot would resize as the entries come)."""
    if trace["x"]:
        return trace
    return trace | {key: [None] for key in ("x", "y", "base", "customdata") if key in trace}


def bucket_deadlines(lang: str, ref: str, sets: list[str], max_tasks: int | None = None) -> dict:
    """Animation 5.1: Figure 5.1's job played frame by frame at the NIC's rate and at half of it (NVLink
    unchanged), on one axis, the late transfers marked. ``max_tasks`` bounds each simulation, as Figure 5.1's."""
    full, half = (_simulated(ref, tuple(sets), scale, max_tasks) for scale in (1.0, 0.5))
    nic = float(full.program.budget.plan.scenario.cluster.nic_Bps)
    axis = axis_of([full, half])
    present = {kind_of(r, x) for r in (full, half) for x in stage0(r)}
    drawn = bar_columns(lang, stage_pieces(half), axis)
    data = traces(lang, full, axis, {kind: drawn.get(kind, {"x": []}) for kind in present})
    kinds = [trace["meta"] for trace in data]
    data += [  # after the kinds in the legend: the late transfers, the deadlines, the exposed end of the step
        {"type": "scatter", "mode": "markers", "name": t(lang, "fig.anim-5.1.miss"), "x": [], "y": [],
         "legendrank": 1100, "marker": {"symbol": "x", "size": 12, "color": "#c0392b"},
         "hovertemplate": t(lang, "fig.anim-5.1.late", late="%{customdata}") + "<extra></extra>"},
        {"type": "scatter", "mode": "markers", "name": t(lang, "fig.anim-5.1.deadline"), "x": [], "y": [],
         "legendrank": 1101, "marker": {"symbol": "line-ns-open", "size": 16, "color": "#333333"}, "hoverinfo": "skip"},
        {"type": "bar", "orientation": "h", "name": t(lang, "fig.anim-5.1.exposed"), "x": [], "base": [], "y": [],
         "legendrank": 1102, "marker": {"color": "rgba(192,57,43,0.35)"}, "width": 0.9, "hoverinfo": "skip"},
    ]
    rates = {"full": t(lang, "fig.anim-5.1.rate.full", rate=fmt_bits_rate(nic)),
             "half": t(lang, "fig.anim-5.1.rate.half", rate=fmt_bits_rate(nic / 2))}
    frames, steps = [], []
    runs = (("full", full), ("half", half))
    for key, r in runs:
        f, s = _frames(lang, r, axis, key, rates[key], kinds)
        frames += f
        steps += s
    play = {"frame": {"duration": 120, "redraw": True}, "transition": {"duration": 0}, "fromcurrent": False,
            "mode": "immediate"}
    buttons = [
        {"label": t(lang, "fig.anim-5.1.play_full"), "method": "animate", "args": ["full", play]},
        {"label": t(lang, "fig.anim-5.1.play_half"), "method": "animate", "args": ["half", play]},
        {"label": t(lang, "fig.anim-5.1.pause"), "method": "animate",
         "args": [[None], {"mode": "immediate", "frame": {"duration": 0, "redraw": False}}]},
    ]
    shown = frames[FRAMES - 1]  # the page opens on the whole step at the full rate; the buttons play it
    for trace, values in zip(data, shown["data"]):
        trace.update(values)
    rows = row_labels(lang)
    data.append(every_row(rows))  # after the traces the frames change
    late = {key: _late(r) for key, r in runs}
    layout = {"title": shown["layout"]["title"], "template": "plotly_white", "width": 1000, "height": 620,
              "barmode": "overlay",
              "legend": {"orientation": "h", "y": -0.55, "yanchor": "top", "entrywidth": 0.5,
                         "entrywidthmode": "fraction"},  # two columns: long entries stay apart in a narrow box
              "xaxis": {"title": {"text": t(lang, "fig.5.1.x" if axis.elided else "fig.5.1.x_whole")},
                        **axis.ticks(lang)},
              "yaxis": rows_axis(rows),
              "margin": {"t": 150, "b": 250},  # the title and buttons above; the slider, then the legend, below
              "updatemenus": [{"type": "buttons", "direction": "right", "showactive": True, "x": 0, "y": 1.04,
                               "yanchor": "bottom", "xanchor": "left", "buttons": buttons}],
              "sliders": [{"active": FRAMES - 1, "steps": steps, "x": 0, "len": 1, "y": -0.25, "yanchor": "top",
                           "pad": {"t": 0, "b": 0}, "currentvalue": {"visible": False}}],
              "meta": {"still": frames[-1]["name"], "steps_s": {"full": full.step_s, "half": half.step_s},
                       "nic_bits": {k: float(r.program.budget.plan.scenario.cluster.nic_Bps) * BITS_PER_BYTE
                                    for k, r in runs},
                       "nvlink_bits": {k: float(r.program.budget.plan.nvlink_Bps) * BITS_PER_BYTE for k, r in runs},
                       "misses": {k: len(v) for k, v in late.items()},
                       "late_s": {k: max(v.values(), default=0.0) for k, v in late.items()}},
              **band(lang, axis, elided_layers(full, axis))}
    return {"data": data, "layout": layout, "frames": frames}
