"""The builders: each takes (lang, scenario name or path, overrides) and returns a plotly figure dict."""

from __future__ import annotations

import numpy as np

from stepbudget.chapter import firstorder as fo
from stepbudget.budget.step import estimate
from stepbudget.inputs.scenario import ScenarioError, load
from stepbudget.plan.derive import derive
from stepbudget.sim.collectives import ring_schedule
from stepbudget.sweep.calibrate import carried
from stepbudget.chapter.dimensions import rows_of
from stepbudget.sweep.whatif import whatif
from stepbudget.units import BITS_PER_BYTE, fmt_bits_rate
from stepbudget.chapter.figures.common import bursts_of, job_name
from stepbudget.views import fmt
from stepbudget.views.i18n import t
from stepbudget.views.render import COLORS
from stepbudget.wire import rate_series

DIMS = ("tp", "cp", "pp", "dp")


def _budget(ref: str, sets: list[str]):
    sc, _ = carried(load(ref, sets))
    return estimate(derive(sc))


def _layout(lang: str, ident: str, **values) -> dict:
    return {"title": {"text": t(lang, f"fig.{ident}.title", **values)}, "template": "plotly_white",
            "width": 1000, "height": 520, "font": {"size": 12}, "legend": {"orientation": "h", "y": -0.18}}


CHAPTER_POINTS = {"llama3-405b-puredp": "fig.5.2.pure_dp", "llama3-405b": "fig.5.2.tp_pp"}
"""Figure 5.2's points: Llama 3 405B as pure data parallelism, and as it ran, TP 8 x PP 16 (chapter 5.2)."""


def roofline(lang: str, ref: str, sets: list[str]) -> dict:
    """Figure 5.2: attainable FLOP/s against FLOP per byte, the HBM, NVLink and NIC roofs, the step's points."""
    b = _budget(ref, sets)
    p = b.plan
    F = float(p.flops_rate)
    links = {"hbm": float(p.hbm_Bps), "nvlink": float(p.nvlink_Bps), "nic": float(p.nic_Bps)}
    grid = np.logspace(0, 7, 300)
    data = [{"type": "scatter", "mode": "lines", "x": grid.tolist(), "y": fo.attainable(grid, F, bw).tolist(),
             "name": t(lang, f"fig.5.2.roof.{name}", rate=fmt.rate(bw)), "line": {"color": COLORS[i]}}
            for i, (name, bw) in enumerate(links.items())]
    points = [(t(lang, "fig.5.2.point", job=job_name(lang, b.plan.scenario)), b)]
    if ref in CHAPTER_POINTS:  # the chapter's two points of Llama 3 405B, beside a job of the same model
        points = [(t(lang, key), _budget(name, [])) for name, key in CHAPTER_POINTS.items()
                  if name != ref or sets] + points
    for i, (name, budget) in enumerate(points):
        x = float(budget.intensity["nic"])
        # where the step is: its model FLOP per GPU over its step time, under the roofs (PaLM App. B's MFU numerator)
        achieved = float(budget.plan.model_flops_per_gpu / budget.step_s)
        data.append({"type": "scatter", "mode": "markers+text", "x": [x], "y": [achieved],
                     "text": [t(lang, "fig.5.2.point_label", intensity=fmt.number(x), achieved=fmt.flops(achieved))],
                     "name": name,
                     "marker": {"size": 12, "color": COLORS[4 + i], "symbol": "diamond"}, "textposition": "top center"})
    shapes, notes = [], []
    for i, (name, bw) in enumerate(links.items()):
        x = float(fo.balance(F, bw))
        shapes.append({"type": "line", "x0": x, "x1": x, "y0": F / 1e3, "y1": F, "xref": "x", "yref": "y",
                       "line": {"dash": "dot", "color": COLORS[i], "width": 1}})
        # on log axes plotly places notes by the logarithm (shapes by the value)
        notes.append({"x": float(np.log10(x)), "y": float(np.log10(F * 1.25)), "xref": "x", "yref": "y",
                      "showarrow": False, "text": fmt.number(x)})
    layout = _layout(lang, "5.2", rate=fmt.flops(F))
    layout |= {"shapes": shapes, "annotations": notes,
               "xaxis": {"type": "log", "title": {"text": t(lang, "fig.5.2.x")}, "range": [0, 7], "tickformat": "~s"},
               "yaxis": {"type": "log", "title": {"text": t(lang, "fig.5.2.y")}, "tickformat": "~s",
                         "range": [float(np.log10(F / 1e3)), float(np.log10(F * 2))]}}
    return {"data": data, "layout": layout}


def ring(lang: str, ref: str, sets: list[str], ranks: int = 4) -> dict:
    """Figure 5.3: a ring all-reduce over four GPUs, send by send, as the simulator runs it."""
    b = _budget(ref, sets)
    size = float(b.plan.params_dense_per_gpu) * b.plan.scenario.precision.grads
    r = ring_schedule(ranks, size, float(b.plan.nic_Bps))
    gpu = [t(lang, "fig.5.3.gpu", rank=i) for i in range(ranks)]
    data = []
    for c in range(ranks):
        sent = np.flatnonzero(r.chunk == c)
        data.append({"type": "bar", "orientation": "h", "name": t(lang, "fig.5.3.chunk", chunk=c),
                     "y": [gpu[i] for i in r.sender[sent]], "x": (r.end_s[sent] - r.start_s[sent]).tolist(),
                     "base": r.start_s[sent].tolist(), "marker": {"color": COLORS[c]},
                     "text": [t(lang, "fig.5.3.send", chunk=c, to=int(to)) for to in r.receiver[sent]],
                     "customdata": r.step[sent].tolist()})
    middle = float(r.end_s[r.phase == 0].max())
    end = float(r.end_s.max())
    shapes = [{"type": "rect", "x0": 0, "x1": middle, "y0": -0.5, "y1": ranks - 0.5, "xref": "x", "yref": "y",
               "fillcolor": "#eef3fa", "line": {"width": 0}, "layer": "below"}]
    notes = [{"x": middle / 2, "y": 1.04, "xref": "x", "yref": "paper", "showarrow": False,
              "text": t(lang, "fig.5.3.rs", steps=ranks - 1)},
             {"x": (middle + end) / 2, "y": 1.04, "xref": "x", "yref": "paper", "showarrow": False,
              "text": t(lang, "fig.5.3.ag", steps=ranks - 1)}]
    layout = _layout(lang, "5.3", n=ranks, sends=2 * (ranks - 1), share=fmt.number(2 * (ranks - 1) / ranks),
                     size=fmt.data(size), sent=fmt.data(r.bytes_per_rank))
    layout |= {"barmode": "overlay", "shapes": shapes, "annotations": notes, "height": 420,
               "xaxis": {"title": {"text": t(lang, "fig.x_time")}, "tickformat": "~s", "ticksuffix": "s"},
               "yaxis": {"autorange": "reversed", "categoryorder": "array", "categoryarray": gpu}}
    return {"data": data, "layout": layout}


def host_nics(lang: str, ref: str, sets: list[str], step_s: float | None = None, burst_s: float | None = None) -> dict:
    """Figure 5.8: every NIC of one host over two steps, bursting at line rate in lockstep (HPN Figure 2's shape):
    the job's own steps and bursts, or ``step_s`` and ``burst_s`` given (Panel 5.6's step and duty cycle) at the
    job's line rate."""
    sc, _ = carried(load(ref, sets))
    b = bursts_of(sc, step_s, burst_s)
    times, rate = rate_series(b.step_s, b.burst_s, b.line_Bps, 2)
    n = sc.cluster.nics_per_node  # every NIC carries its GPUs' share and bursts with the others (wire.host_nics)
    peak = b.line_Bps * BITS_PER_BYTE
    values = {"nics": n, "job": job_name(lang, sc), "step": fmt.time(lang, b.step_s), "burst": fmt.time(lang, b.burst_s),
              "rate": fmt_bits_rate(b.line_Bps), "duty": fmt.percent(b.duty)}
    data, layout = [], _layout(lang, "5.8", **values)
    if b.given:
        layout["title"]["text"] = t(lang, "fig.5.8.title_given", **values)
    height = 1.0 / n
    for i in range(n):
        axis = "" if i == 0 else str(i + 1)
        data.append({"type": "scatter", "mode": "lines", "x": times.tolist(), "y": (rate * BITS_PER_BYTE).tolist(),
                     "name": t(lang, "fig.5.8.nic", nic=i), "line": {"shape": "hv", "color": COLORS[i % len(COLORS)]},
                     "xaxis": f"x{axis}", "yaxis": f"y{axis}", "showlegend": False})
        layout[f"yaxis{axis}"] = {"domain": [1 - (i + 1) * height + 0.01, 1 - i * height - 0.01],
                                  "tickvals": [0, peak], "ticktext": ["0", fmt_bits_rate(b.line_Bps)],
                                  "range": [0, peak * 1.15], "automargin": True,
                                  "title": {"text": t(lang, "fig.5.8.nic", nic=i)}}
        layout[f"xaxis{axis}"] = {"anchor": f"y{axis}", "matches": "x", "showticklabels": i == n - 1,
                                  **({"title": {"text": t(lang, "fig.x_time")}, "ticksuffix": "s"} if i == n - 1 else {})}
    layout["height"] = 90 * n + 120
    layout["meta"] = {"step_s": b.step_s, "burst_s": b.burst_s}
    return {"data": data, "layout": layout}


def context(lang: str, ref: str, sets: list[str]) -> dict:
    """Figure 5.9: a 16x longer sequence, CP 16 taken from DP: how the GPUs divide, and CP's exchange per layer."""
    from stepbudget.inputs.scenario import load

    sc = load(ref, sets)
    lay = sc.layout
    if lay.dp % 16:
        raise ScenarioError(f"figure 5.9: layout.dp = {lay.dp} cannot give CP 16 of its GPUs; use a DP that 16 divides")
    longer = (f"model.seq_len={sc.model.seq_len * 16}", f"layout.cp={lay.cp * 16}", f"layout.dp={lay.dp // 16}")
    base, long = whatif(ref, sets, [("long", longer)])
    data = []
    cases = [t(lang, "fig.5.9.case", seq=fmt.number(v.scenario.model.seq_len)) for v in (base, long)]
    for i, dim in enumerate(DIMS):
        degrees = [getattr(v.scenario.layout, dim) for v in (base, long)]
        data.append({"type": "bar", "orientation": "h", "name": t(lang, f"dim.{dim}"), "y": cases,
                     "x": np.log2(degrees).tolist(), "marker": {"color": COLORS[i]},
                     "text": [f"{t(lang, f'dim.{dim}')}{d}" for d in degrees], "customdata": degrees})
    cp = [r for r in rows_of(long.budget) if r.dim == "cp"]
    data.append({"type": "bar", "name": t(lang, "fig.5.9.cp_time"), "x": [t(lang, f"what.{r.what}") for r in cp],
                 "y": [r.per_layer_s for r in cp], "xaxis": "x2", "yaxis": "y2", "marker": {"color": COLORS[1]},
                 "text": [t(lang, "fig.5.9.cp_label", bytes=fmt.data(r.per_layer_bytes or 0),
                            time=fmt.time(lang, r.per_layer_s or 0), status=t(lang, f"fig.status.{r.status}"))
                          for r in cp]})
    layout = _layout(lang, "5.9", gpus=fmt.gpus(lang, sc.cluster.gpus))
    layout |= {"barmode": "stack",
               "xaxis": {"domain": [0, 0.55], "title": {"text": t(lang, "fig.5.9.x")}},
               "yaxis": {"domain": [0, 1], "automargin": True},
               "xaxis2": {"domain": [0.65, 1], "anchor": "y2"},
               "yaxis2": {"domain": [0, 1], "anchor": "x2", "title": {"text": t(lang, "fig.5.9.y2")},
                          "tickformat": "~s", "ticksuffix": "s"}}
    return {"data": data, "layout": layout}
