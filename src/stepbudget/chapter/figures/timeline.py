"""Figure 5.1 and Animation 5.1: one GPU's step from the simulator, as a timeline.

Both read the simulated timeline of pipeline stage 0 (one GPU of it: every GPU of a stage runs the same
program). Figure 5.1 shows two stretches of that step, the first passes and the last, with the middle
elided; Animation 5.1 plays the whole step at the full and at half the link rate, so that the reader sees
the buckets' transfers overrun the compute meant to hide them.
"""

from __future__ import annotations

import re

import numpy as np

from stepbudget.enums import DataParallel
from stepbudget.inputs.scenario import ScenarioError, load
from stepbudget.sim.graph import TaskKind
from stepbudget.sim.program import program_size, step_program
from stepbudget.sim.step import StepResult, sim_budget, simulate_step
from stepbudget.sweep.calibrate import carried
from stepbudget.views import fmt
from stepbudget.views.i18n import t

KINDS = {  # (dim, role) of a simulator task -> what the figure calls it
    ("compute", "fwd"): "fwd", ("compute", "bwd"): "bwd", ("compute", "optimizer"): "optimizer",
    ("tp", "exposed"): "tp", ("cp", "exposed"): "cp", ("ep", "exposed"): "ep", ("pp", "send"): "pp",
    ("dp", "reduce"): "reduce", ("dp", "gather"): "gather",
}
COLORS = {"fwd": "#3b6ea8", "bwd": "#5aa469", "optimizer": "#8e6bb8", "tp": "#d1603d", "cp": "#c49a2c",
          "ep": "#7a7a7a", "pp": "#4aa3a1", "reduce": "#b8527a", "allreduce": "#b8527a", "gather": "#e3a6c0"}
ROWS = ("compute", "nvlink", "nic")


def _budget(ref: str, sets: list[str]):
    """The budget the simulator runs for ``ref`` with ``sets`` (its kernel rate)."""
    sc, _ = carried(load(ref, sets))
    return sim_budget(sc)


def _pass(label: str) -> str:
    """The chunk pass a layer task belongs to: "F s0 m3 c1 l0" -> "F s0 m3 c1"."""
    return label.rsplit(" l", 1)[0]


def _row(r: StepResult, task: int) -> str:
    g = r.program.graph
    if g.kind[task] == TaskKind.COMPUTE:
        return "compute"
    link = r.program.link_names[int(g.link_ids[g.link_indptr[task]])]
    return "nvlink" if "NVLink" in link else "nic"


def _stage0(r: StepResult) -> list[int]:
    p = r.program
    return [int(x) for x in np.flatnonzero(p.stage == 0)
            if (str(p.dim[x]), str(p.role[x])) in KINDS and r.timeline.end_s[x] > r.timeline.start_s[x]]


def _row_labels(lang: str) -> dict[str, str]:
    return {row: t(lang, f"fig.5.1.row.{row}") for row in ROWS}


def _kind(r: StepResult, task: int) -> str:
    kind = KINDS[(str(r.program.dim[task]), str(r.program.role[task]))]
    if kind == "reduce" and r.program.budget.plan.scenario.layout.dp_kind == DataParallel.DDP:
        return "allreduce"  # DDP reduces each bucket whole: a reduce-scatter and an all-gather in one
    return kind


_PLACES = (("mb", re.compile(r"\bm(\d+)\b")), ("chunk", re.compile(r"\bc(\d+)\b")),
           ("layer", re.compile(r"\bl(\d+)\b")), ("bucket", re.compile(r"\bbucket (\d+)\b")))
_SEND = re.compile(r"\bv(\d+)->v(\d+)\b")


def where(lang: str, label: str) -> str:
    """Where in the step a simulator task is, in words (micro-batch 3, chunk 1, layer 0), read from its label
    ("F s0 m3 c1 l0", "DP reduce s0 m15 bucket 7", "PP send F m0 v0->v1")."""
    parts = [t(lang, f"fig.5.1.at.{key}", n=int(m.group(1))) for key, pattern in _PLACES if (m := pattern.search(label))]
    if (send := _SEND.search(label)) is not None:
        parts.append(t(lang, "fig.5.1.at.send", a=int(send.group(1)), b=int(send.group(2))))
    return t(lang, "app.list_sep").join(parts)


# --- Figure 5.1 -------------------------------------------------------------------------------------------


def _pieces(r: StepResult, tasks: list[int]) -> list[tuple[str, str, float, float, str]]:
    """(kind, row, start, end, hover) of a stretch of stage 0, each layer's compute cut in two around its share of
    the pass's exposed TP all-reduce (Megatron: one after attention, one after the MLP, chapter 5.1), so that
    the all-reduces sit in the middle and at the end of each layer as they run; the pass's total is the simulator's."""
    tl, p = r.timeline, r.program
    out = []
    passes: dict[str, list[int]] = {}
    for x in tasks:
        label = tl.label(x)
        if p.dim[x] == "compute" and p.role[x] in ("fwd", "bwd"):
            passes.setdefault(_pass(label), []).append(x)
    spread: dict[int, float] = {}  # TP task -> its time spread over its pass's layers
    for x in tasks:
        if (p.dim[x], p.role[x]) == ("tp", "exposed"):
            key = tl.label(x).replace("TP exposed ", "")
            layers = passes.get(key, [])
            for layer in layers:
                spread[layer] = float(tl.end_s[x] - tl.start_s[x]) / len(layers)
            if layers:
                continue
        if x in passes.get(_pass(tl.label(x)), []):
            continue
        kind = _kind(r, x)
        out.append((kind, _row(r, x), float(tl.start_s[x]), float(tl.end_s[x]), tl.label(x)))
    for layers in passes.values():
        for x in layers:
            kind = _kind(r, x)
            s, e, tp = float(tl.start_s[x]), float(tl.end_s[x]), spread.get(x, 0.0)
            half = (e - s) / 2
            # each layer starts later by the TP time of the layers before it in the pass, so the pass ends where
            # the simulator's exposed TP after it ends: the same time, drawn where each all-reduce runs
            s += tp * sum(1 for y in layers if tl.start_s[y] < tl.start_s[x])
            out += [(kind, "compute", s, s + half, tl.label(x)),
                    ("tp", "nvlink", s + half, s + half + tp / 2, tl.label(x)),
                    (kind, "compute", s + half + tp / 2, s + 2 * half + tp / 2, tl.label(x)),
                    ("tp", "nvlink", s + 2 * half + tp / 2, s + 2 * half + tp, tl.label(x))]
    return out


class TooLarge(ScenarioError):
    """A step with more tasks than the caller would simulate for one figure (the web page's bound)."""

    def __init__(self, tasks: int, limit: int):
        super().__init__(f"figure 5.1: this step is about {tasks:,} tasks to simulate, more than {limit:,}")
        self.tasks, self.limit = tasks, limit


def one_step(lang: str, ref: str, sets: list[str], max_tasks: int | None = None) -> dict:
    """Figure 5.1: one GPU's step, its first passes and its last with the rest elided, every exchange labelled.
    ``max_tasks`` bounds the simulation (TooLarge past it): a page must answer in about a second."""
    budget = _budget(ref, sets)
    if max_tasks is not None and (size := program_size(budget)) > max_tasks:
        raise TooLarge(size, max_tasks)
    r = simulate_step(budget)
    tl, p = r.timeline, r.program
    tasks = _stage0(r)
    compute = [x for x in tasks if p.dim[x] == "compute" and p.role[x] in ("fwd", "bwd")]
    first_fwd = [x for x in compute if p.role[x] == "fwd"]
    last_bwd = [x for x in compute if p.role[x] == "bwd"]
    passes_fwd = list(dict.fromkeys(_pass(tl.label(x)) for x in first_fwd))
    passes_bwd = list(dict.fromkeys(_pass(tl.label(x)) for x in last_bwd))
    shown = min(2, len(passes_fwd))
    head_end = max(float(tl.end_s[x]) for x in first_fwd if _pass(tl.label(x)) in passes_fwd[:shown])
    tail_start = min(float(tl.start_s[x]) for x in last_bwd
                     if _pass(tl.label(x)) in passes_bwd[-min(2, len(passes_bwd)):])
    head_end += 0.15 * head_end  # the PP send and the exposed TP after the last shown pass
    if tail_start <= head_end:  # a short step: shown whole
        tail_start = head_end
    end = float(r.step_s)
    head = [x for x in tasks if tl.start_s[x] < head_end]
    tail = [x for x in tasks if tl.end_s[x] > tail_start]
    gap = 0.25 * (head_end + end - tail_start)
    shift = tail_start - head_end - gap if tail_start > head_end else 0.0
    rows = _row_labels(lang)
    kinds: dict[str, dict] = {}
    for piece, moved in ((_pieces(r, head), 0.0), (_pieces(r, tail), shift)):
        for kind, row, s, e, hover in piece:
            s, e = (s, min(e, head_end)) if moved == 0.0 else (max(s, tail_start), e)
            if e <= s:
                continue
            k = kinds.setdefault(kind, {"x": [], "base": [], "y": [], "customdata": []})
            k["x"].append(e - s)
            k["base"].append(s - moved)
            k["y"].append(rows[row])
            k["customdata"].append([where(lang, hover), fmt.time(lang, s), fmt.time(lang, e - s)])
    data = [{"type": "bar", "orientation": "h", "name": t(lang, f"fig.5.1.kind.{kind}"), **v,
             "marker": {"color": COLORS[kind], "line": {"color": "white", "width": 0.5}},
             "hovertemplate": "%{customdata[0]}<br>%{customdata[1]} + %{customdata[2]}<extra>%{fullData.name}</extra>"}
            for kind, v in kinds.items()]
    elided = len(passes_fwd) + len(passes_bwd) - shown - min(2, len(passes_bwd))
    layout = {"title": {"text": t(lang, "fig.5.1.title", scenario=p.budget.plan.scenario.name,
                                  step=fmt.time(lang, end))},
              "template": "plotly_white", "width": 1000, "height": 420, "barmode": "overlay",
              "legend": {"orientation": "h", "y": -0.25},
              "xaxis": {"title": {"text": t(lang, "fig.5.1.x")},
                        "tickvals": [0, head_end, head_end + gap, end - shift],
                        "ticktext": [fmt.time(lang, v) for v in (0, head_end, tail_start, end)]},
              "yaxis": {"autorange": "reversed", "categoryorder": "array", "categoryarray": list(rows.values())}}
    if shift:
        layout["shapes"] = [{"type": "rect", "xref": "x", "yref": "paper", "x0": head_end, "x1": head_end + gap,
                             "y0": 0, "y1": 1, "fillcolor": "#eeeeee", "line": {"width": 0}, "layer": "below"}]
        layout["annotations"] = [{"x": head_end + gap / 2, "y": 0.5, "xref": "x", "yref": "paper",
                                  "showarrow": False, "text": t(lang, "fig.5.1.elided", passes=elided)}]
    return {"data": data, "layout": layout}


# --- Animation 5.1 ----------------------------------------------------------------------------------------

FRAMES = 40
"""Frames per rate: enough for the buckets to be seen leaving one by one, few enough to stay light."""


def _frames(lang: str, r: StepResult, rate_key: str, kinds: list[str]) -> tuple[list[dict], list[dict]]:
    """The frames of one step at one rate, and the slider steps that jump to them."""
    tl, p = r.timeline, r.program
    tasks = _stage0(r)
    rows = _row_labels(lang)
    late = {m["task"]: m["late_s"] for m in r.deadline_misses if m["stage"] == 0}
    misses = [x for x in tasks if tl.label(x) in late]
    reduce = [x for x in tasks if p.role[x] == "reduce" and p.deadline[x] >= 0]
    compute_end = max(float(tl.end_s[x]) for x in tasks if p.role[x] == "bwd")
    step = float(r.step_s)
    by_kind = {kind: [x for x in tasks if _kind(r, x) == kind] for kind in kinds}
    frames, steps = [], []
    for i, now in enumerate(np.linspace(0, step, FRAMES + 1)[1:].tolist()):
        data = []
        for kind in kinds:
            mine = [x for x in by_kind[kind] if tl.start_s[x] < now]
            data.append({"type": "bar", "x": [min(float(tl.end_s[x]), now) - float(tl.start_s[x]) for x in mine],
                         "base": [float(tl.start_s[x]) for x in mine], "y": [rows[_row(r, x)] for x in mine],
                         "customdata": [where(lang, tl.label(x)) for x in mine]})
        done = [x for x in misses if tl.end_s[x] <= now]
        data.append({"type": "scatter", "x": [float(tl.end_s[x]) for x in done], "y": [rows[_row(r, x)] for x in done],
                     "customdata": [fmt.time(lang, late[tl.label(x)]) for x in done]})
        data.append({"type": "scatter", "x": [float(tl.end_s[p.deadline[x]]) for x in reduce], "y": [rows["nic"]] * len(reduce)})
        tail = now >= step * (1 - 1e-9) and step > compute_end
        data.append({"type": "bar", "x": [step - compute_end] if tail else [], "base": [compute_end] if tail else [],
                     "y": [rows["compute"]] if tail else []})
        name = f"{rate_key}:{i}"
        title = t(lang, "fig.anim-5.1.frame", rate=t(lang, f"fig.anim-5.1.rate.{rate_key}"),
                  now=fmt.time(lang, now), misses=len(done), step=fmt.time(lang, step))
        frames.append({"name": name, "group": rate_key, "data": data, "layout": {"title": {"text": title}},
                       "traces": list(range(len(data)))})
        label = t(lang, f"fig.anim-5.1.rate.{rate_key}") if i == 0 else ""  # 80 labels would overlap
        steps.append({"method": "animate", "label": label, "name": name,
                      "args": [[name], {"mode": "immediate", "frame": {"duration": 0, "redraw": True},
                                        "transition": {"duration": 0}}]})
    return frames, steps


_ORDER = ("fwd", "bwd", "optimizer", "tp", "cp", "ep", "pp", "reduce", "allreduce", "gather")


def bucket_deadlines(lang: str, ref: str, sets: list[str]) -> dict:
    """Animation 5.1: the step at the full link rate and at half, frame by frame, the late buckets marked."""
    budget = _budget(ref, sets)
    program = step_program(budget)  # one task graph, run at both rates
    full, half = (simulate_step(budget, link_rate=rate, program=program) for rate in (1.0, 0.5))
    span = max(full.step_s, half.step_s) * 1.02
    rows = _row_labels(lang)
    present = {_kind(full, x) for x in _stage0(full)}  # the same tasks at either rate
    kinds = [k for k in _ORDER if k in present]
    data: list[dict] = [  # plotly traces, plain dicts like the figure itself
        {"type": "bar", "orientation": "h", "name": t(lang, f"fig.5.1.kind.{kind}"), "x": [], "base": [], "y": [],
         "marker": {"color": COLORS[kind], "line": {"color": "white", "width": 0.5}},
         "hovertemplate": "%{customdata}<extra>%{fullData.name}</extra>"}
        for kind in kinds]
    data.append({"type": "scatter", "mode": "markers", "name": t(lang, "fig.anim-5.1.miss"), "x": [], "y": [],
                 "marker": {"symbol": "x", "size": 12, "color": "#c0392b"},
                 "hovertemplate": t(lang, "fig.anim-5.1.late", late="%{customdata}") + "<extra></extra>"})
    data.append({"type": "scatter", "mode": "markers", "name": t(lang, "fig.anim-5.1.deadline"), "x": [], "y": [],
                 "marker": {"symbol": "line-ns-open", "size": 16, "color": "#333333"}, "hoverinfo": "skip"})
    data.append({"type": "bar", "orientation": "h", "name": t(lang, "fig.anim-5.1.exposed"), "x": [], "base": [],
                 "y": [], "marker": {"color": "rgba(192,57,43,0.35)"}, "width": 0.9})
    frames, steps = [], []
    for key, r in (("full", full), ("half", half)):
        f, s = _frames(lang, r, key, kinds)
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
    first = frames[0]
    for trace, values in zip(data, first["data"]):
        trace.update(values)
    layout = {"title": first["layout"]["title"], "template": "plotly_white", "width": 1000, "height": 520,
              "barmode": "overlay", "legend": {"orientation": "h", "y": -0.42},
              "xaxis": {"title": {"text": t(lang, "fig.x_time")}, "range": [0, span], "ticksuffix": "s"},
              "yaxis": {"autorange": "reversed", "categoryorder": "array", "categoryarray": list(rows.values())},
              "margin": {"t": 130},  # the title above, the buttons under it: they must not overlap at any width
              "updatemenus": [{"type": "buttons", "direction": "right", "showactive": True, "x": 0, "y": 1.04,
                               "yanchor": "bottom",
                               "xanchor": "left", "buttons": buttons}],
              "sliders": [{"active": 0, "steps": steps, "x": 0, "len": 1, "y": -0.18,
                           "currentvalue": {"visible": False}}],
              "meta": {"still": frames[-1]["name"], "steps_s": {"full": full.step_s, "half": half.step_s},
                       "misses": {"full": sum(m["stage"] == 0 for m in full.deadline_misses),
                                  "half": sum(m["stage"] == 0 for m in half.deadline_misses)}}}
    return {"data": data, "layout": layout, "frames": frames}
