"""One GPU of pipeline stage 0 as Figure 5.1 and Animation 5.1 draw it: its simulated tasks as bars on three
rows (compute, NVLink, NIC), and the one time axis a step is drawn on, whole or with its repeated middle elided.

Every GPU of a stage runs the same program, so stage 0's timeline is one GPU's step. The axis always runs to the
end of the step: what is left out is the middle, drawn as a band that says how many layers it holds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from stepbudget.chapter.figures.common import ticks_between
from stepbudget.enums import DataParallel
from stepbudget.sim.graph import TaskKind
from stepbudget.sim.step import StepResult
from stepbudget.views import fmt
from stepbudget.views.i18n import t

KINDS = {  # (dim, role) of a simulator task -> what the figure calls it
    ("compute", "fwd"): "fwd", ("compute", "bwd"): "bwd", ("compute", "optimizer"): "optimizer",
    ("idle", "bubble"): "bubble", ("tp", "exposed"): "tp", ("cp", "exposed"): "cp", ("ep", "exposed"): "ep",
    ("pp", "send"): "pp", ("dp", "reduce"): "reduce", ("dp", "gather"): "gather",
}
COLORS = {"fwd": "#3b6ea8", "bwd": "#5aa469", "optimizer": "#8e6bb8", "bubble": "#d9d9d9", "tp": "#d1603d",
          "cp": "#c49a2c", "ep": "#7a7a7a", "pp": "#4aa3a1", "reduce": "#b8527a", "allreduce": "#b8527a",
          "gather": "#e3a6c0"}
ORDER = ("fwd", "bwd", "optimizer", "bubble", "tp", "cp", "ep", "pp", "reduce", "allreduce", "gather")
"""The legend's order: the compute, then each exchange as the chapter names them (5.1)."""
ROWS = ("compute", "nvlink", "nic")
SHOWN_LAYERS = 8
"""Layers of compute the elided view keeps at each end of the step: the first forward ones and the last backward
ones, with every exchange around them (several passes where a pass is a few layers)."""
BAND = 0.12
"""Share of the axis the elided middle takes, drawn as a grey band."""


# --- stage 0's tasks, as the figures draw them -------------------------------------------------------------


def _pass(label: str) -> str:
    """The chunk pass a layer task belongs to: "F s0 m3 c1 l0" -> "F s0 m3 c1"."""
    return label.rsplit(" l", 1)[0]


def row_of(r: StepResult, task: int) -> str:
    g = r.program.graph
    if g.kind[task] == TaskKind.COMPUTE:  # a layer, the optimizer or a closed-form bubble
        return "compute"
    link = r.program.link_names[int(g.link_ids[g.link_indptr[task]])]
    return "nvlink" if "NVLink" in link else "nic"


def stage0(r: StepResult) -> list[int]:
    p = r.program
    return [int(x) for x in np.flatnonzero(p.stage == 0)
            if (str(p.dim[x]), str(p.role[x])) in KINDS and r.timeline.end_s[x] > r.timeline.start_s[x]]


def kind_of(r: StepResult, task: int) -> str:
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


@dataclass(frozen=True)
class Piece:
    """One bar: a kind of work on a row from ``start`` to ``end`` (seconds into the step), and the task's label."""

    kind: str
    row: str
    start: float
    end: float
    label: str


def stage_pieces(r: StepResult) -> list[Piece]:
    """Stage 0's tasks as bars, each layer's compute cut in two around its share of the pass's exposed TP
    all-reduce (Megatron: one after attention, one after the MLP, chapter 5.1), so that the all-reduces sit in
    the middle and at the end of each layer as they run; the pass's total is the simulator's."""
    tl, p = r.timeline, r.program
    tasks = stage0(r)
    passes: dict[str, list[int]] = {}
    for x in tasks:
        if p.dim[x] == "compute" and p.role[x] in ("fwd", "bwd"):
            passes.setdefault(_pass(tl.label(x)), []).append(x)
    spread: dict[int, float] = {}  # layer task -> its share of its pass's exposed TP
    out = []
    for x in tasks:
        label = tl.label(x)
        if (p.dim[x], p.role[x]) == ("tp", "exposed") and (layers := passes.get(label.replace("TP exposed ", ""))):
            for layer in layers:
                spread[layer] = float(tl.end_s[x] - tl.start_s[x]) / len(layers)
        elif x not in passes.get(_pass(label), []):
            out.append(Piece(kind_of(r, x), row_of(r, x), float(tl.start_s[x]), float(tl.end_s[x]), label))
    for layers in passes.values():
        for x in layers:
            kind, label = kind_of(r, x), tl.label(x)
            s, e, tp = float(tl.start_s[x]), float(tl.end_s[x]), spread.get(x, 0.0)
            half = (e - s) / 2
            # each layer starts later by the TP time of the layers before it in the pass, so the pass ends where
            # the simulator's exposed TP after it ends: the same time, drawn where each all-reduce runs
            s += tp * sum(1 for y in layers if tl.start_s[y] < tl.start_s[x])
            out += [Piece(kind, "compute", s, s + half, label), Piece("tp", "nvlink", s + half, s + half + tp / 2, label),
                    Piece(kind, "compute", s + half + tp / 2, s + 2 * half + tp / 2, label),
                    Piece("tp", "nvlink", s + 2 * half + tp / 2, s + 2 * half + tp, label)]
    return [x for x in out if x.end > x.start]


# --- one axis for the whole step -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Axis:
    """Where a figure shows the step's time: ``[0, head]`` and ``[tail, end]`` at one scale, the middle between
    them drawn as a band ``gap`` wide; a step shown whole has ``head == tail == end``."""

    head: float
    tail: float
    end: float
    gap: float

    @property
    def elided(self) -> bool:
        return self.tail > self.head

    @property
    def shift(self) -> float:
        """How far left the tail is drawn: the elided time less the band."""
        return self.tail - self.head - self.gap if self.elided else 0.0

    @property
    def width(self) -> float:
        return self.end - self.shift

    def x(self, s: float) -> float:
        """Where time ``s`` is drawn: as it is in the head, ``shift`` earlier in the tail, across the band between."""
        if s <= self.head or not self.elided:
            return s
        if s >= self.tail:
            return s - self.shift
        return self.head + self.gap * (s - self.head) / (self.tail - self.head)

    def at(self, x: float) -> float:
        """The time drawn at ``x`` (the inverse of ``x``)."""
        if x <= self.head or not self.elided:
            return x
        if x >= self.head + self.gap:
            return x + self.shift
        return self.head + (x - self.head) / self.gap * (self.tail - self.head)

    def windows(self) -> list[tuple[float, float]]:
        return [(0.0, self.head), (self.tail, self.end)] if self.elided else [(0.0, self.end)]

    def clip(self, s: float, e: float) -> list[tuple[float, float]]:
        """``[s, e]`` as drawn: its parts in the shown windows, in axis coordinates."""
        return [(self.x(max(s, a)), self.x(min(e, b))) for a, b in self.windows() if min(e, b) > max(s, a)]

    def ticks(self, lang: str) -> dict:
        """Round times in each shown window and its edges (0, the band's two sides, the step's end), each
        labelled with the time it stands for."""
        edges = [0.0, self.end] + ([self.head, self.tail] if self.elided else [])
        inner = [v for a, b in self.windows()
                 for v in ticks_between(a, b, max(2, round(6 * (self.x(b) - self.x(a)) / self.width)))]
        near = 0.07 * self.width
        values = sorted(set(edges) | {v for v in inner if all(abs(self.x(v) - self.x(e)) > near for e in edges)})
        return {"tickvals": [self.x(v) for v in values], "ticktext": [fmt.time(lang, v) for v in values],
                "range": [0.0, self.width]}


def axis_of(results: list[StepResult]) -> Axis:
    """One axis for one or more simulated steps of a job (Animation 5.1 draws two rates on the same axis): the
    first ``SHOWN_LAYERS`` forward layers of stage 0 and its last backward ones, each with what runs beside them,
    the middle elided where it is longer than what is shown; otherwise the whole step."""
    heads, tails = [], []
    for r in results:
        tl, p = r.timeline, r.program
        tasks = stage0(r)
        layers = sorted((x for x in tasks if p.role[x] in ("fwd", "bwd") and p.dim[x] == "compute"),
                        key=lambda x: tl.start_s[x])
        head = float(tl.end_s[layers[min(SHOWN_LAYERS, len(layers)) - 1]])
        # the exposed TP and the PP send after the last layer shown, whole
        head = max([head] + [float(tl.end_s[x]) for x in tasks if p.dim[x] in ("tp", "cp", "ep", "pp")
                             and tl.start_s[x] <= head + 1e-12])
        heads.append(head)
        tails.append(float(tl.start_s[layers[-min(SHOWN_LAYERS, len(layers))]]))
    head, tail, end = max(heads), min(tails), max(float(r.step_s) for r in results)
    shown = head + end - tail
    if tail - head <= shown:  # too little repeats to elide: the whole step
        return Axis(end, end, end, 0.0)
    return Axis(head, tail, end, BAND / (1 - BAND) * shown)


def bar_columns(lang: str, pieces: list[Piece], axis: Axis, now: float | None = None) -> dict[str, dict]:
    """Plotly bar columns by kind: each piece started before ``now`` (all when None), cut at ``now``, as drawn."""
    rows = row_labels(lang)
    kinds: dict[str, dict] = {}
    for piece in pieces:
        end = piece.end if now is None else min(piece.end, now)
        for x0, x1 in axis.clip(piece.start, end):
            k = kinds.setdefault(piece.kind, {"x": [], "base": [], "y": [], "customdata": []})
            k["x"].append(x1 - x0)
            k["base"].append(x0)
            k["y"].append(rows[piece.row])
            start = axis.at(x0)
            k["customdata"].append([where(lang, piece.label), fmt.time(lang, start), fmt.time(lang, axis.at(x1) - start)])
    return kinds


def row_labels(lang: str) -> dict[str, str]:
    return {row: t(lang, f"fig.5.1.row.{row}") for row in ROWS}


def rows_axis(rows: dict[str, str]) -> dict:
    """The rows top to bottom."""
    return {"autorange": "reversed", "categoryorder": "array", "categoryarray": list(rows.values()), "automargin": True}


def every_row(rows: dict[str, str]) -> dict:
    """An unseen trace on every row, so that each row stands though no bar is on it yet (plotly draws only the
    categories that hold data)."""
    return {"type": "scatter", "mode": "markers", "x": [0.0] * len(rows), "y": list(rows.values()),
            "marker": {"opacity": 0}, "showlegend": False, "hoverinfo": "skip"}


def kind_name(lang: str, kind: str, r: StepResult) -> str:
    """A kind's legend entry; a closed-form bubble holds the pipeline's sends too (sim/program.py)."""
    return t(lang, "fig.5.1.kind.bubble_sends" if kind == "bubble" and r.program.closed_form_bubble
             else f"fig.5.1.kind.{kind}")


def band(lang: str, axis: Axis, elided: int) -> dict:
    """The grey band over the elided middle, and its note."""
    if not axis.elided:
        return {}
    return {"shapes": [{"type": "rect", "xref": "x", "yref": "paper", "x0": axis.head, "x1": axis.head + axis.gap,
                        "y0": 0, "y1": 1, "fillcolor": "#eeeeee", "line": {"width": 0}, "layer": "below"}],
            "annotations": [{"x": axis.head + axis.gap / 2, "y": 0.5, "xref": "x", "yref": "paper", "showarrow": False,
                             "text": t(lang, "fig.5.1.elided", layers=fmt.number(elided))}]}


def elided_layers(r: StepResult, axis: Axis) -> int:
    """Layers of compute stage 0 runs inside the band."""
    tl, p = r.timeline, r.program
    return sum(1 for x in stage0(r) if p.dim[x] == "compute" and p.role[x] in ("fwd", "bwd")
               and tl.start_s[x] >= axis.head and tl.end_s[x] <= axis.tail)


HOVER = "%{customdata[0]}<br>%{customdata[1]} + %{customdata[2]}<extra>%{fullData.name}</extra>"
ON_TOP = ("tp", "cp", "ep", "pp")
"""Kinds drawn over the others (overlaid bars): the short sends and all-reduces over the long DP buckets."""
PLOT_PX = 820
"""About how many pixels wide the plot area of a 1,000-pixel figure is."""


def traces(lang: str, r: StepResult, axis: Axis, kinds: dict[str, dict]) -> list[dict]:
    """An empty bar trace per kind present (``meta`` names it), in the legend's order but drawn with the short
    exchanges on top; where the NIC carries DP buckets and PP sends at once, DP takes the row's upper half and
    PP its lower, so that neither hides the other. A kind whose bars are a few pixels wide has no outline."""
    both = "pp" in kinds and any(k in kinds for k in ("reduce", "allreduce", "gather"))
    out = []
    for kind in sorted((k for k in ORDER if k in kinds), key=lambda k: k in ON_TOP):
        widths = kinds[kind]["x"]
        thin = bool(widths) and float(np.median(widths)) / axis.width * PLOT_PX < 4
        half = {"width": 0.4, "offset": 0.0 if kind == "pp" else -0.4} if both and kind in (
            "pp", "reduce", "allreduce", "gather") else {}
        out.append({"type": "bar", "orientation": "h", "name": kind_name(lang, kind, r), "meta": kind,
                    "legendrank": 1000 + ORDER.index(kind), "x": [], "base": [], "y": [], **half,
                    "marker": {"color": COLORS[kind], "line": {"color": "white", "width": 0 if thin else 0.5}},
                    "hovertemplate": HOVER})
    return out
