"""Figures 5.4, 5.5 and 5.6: the strong-scaling curve, the measured runs against the model, and MegaScale-MoE's
fused kernels against what the model says overlap can give."""

from __future__ import annotations


import numpy as np

from stepbudget.a2a.ratio import moe_layer_times
from stepbudget.a2a.report import layer_inputs
from stepbudget.budget.rate import kernel_scenario
from stepbudget.budget.step import Budget, estimate
from stepbudget.chapter import firstorder as fo
from stepbudget.chapter.figures.common import job_name, log_axis
from stepbudget.enums import RateScope
from stepbudget.inputs.scenario import Scenario, load
from stepbudget.plan.derive import derive
from stepbudget.sweep.calibrate import carried
from stepbudget.sweep.scaling import ScaleCurve, ScalePoint, scale
from stepbudget.sweep.whatif import whatif
from stepbudget.views import fmt
from stepbudget.views.render import COLORS, wrap
from stepbudget.views.validation import validation_figure
from stepbudget.views.i18n import t

SIZES = (0.5, 1, 2, 4, 8)
"""Figure 5.4's sizes as multiples of the scenario's GPUs: Llama 3 405B's 16,384 halved once and doubled three
times, 8,192 to 131,072 (chapter 5.4)."""
PHI = 0.9
"""Panel 5.4's overlap fraction: the first-order step needs one, though Figure 5.4 draws only its two halves."""
FULL = (("compute_s", "#3b6ea8"), ("bubble_s", "#d1603d"), ("dp_s", "#5aa469"), ("exposed_comm_s", "#8e6bb8"),
        ("step_s", "#c49a2c"))
SHARES = (("comm_share", "#4aa3a1"), ("exposed_share", "#b8527a"), ("mfu", "#7a7a7a"))


def _whole_sizes(sc: Scenario, sizes: list[int]) -> list[int]:
    """The sizes that hold whole replicas and split the batch evenly, where the full model has a layout."""
    lay = sc.layout
    group = lay.tp * lay.cp * lay.pp
    return [n for n in sizes if n % group == 0 and sc.global_batch_seqs % (n // group * lay.micro_batch) == 0]


def strong_scaling(lang: str, ref: str, sets: list[str]) -> dict:
    """Figure 5.4: the chapter's two formulas (compute 6NB/(GF), exchange 2(D-1)/D x 2N/M / beta, firstorder.py,
    at the job's stated rate) at five sizes, dashed, beside the full model's terms for the same layout, solid,
    at the sizes where that layout splits the batch; the job's own size marked, and a note where the full
    model's exposed share does not rise as the formula's communication share does."""
    stated = load(ref, sets)
    plan = derive(stated)
    sc, _ = carried(stated)
    lay = sc.layout
    M = lay.tp * lay.cp * lay.pp
    G = sc.cluster.gpus
    sizes = [int(G * f) for f in SIZES]
    whole = _whole_sizes(sc, sizes)
    curve = scale(sc, whole) if whole else None  # None: the formulas alone, and the note says why
    points = curve.points if curve is not None else []
    N, B, F = plan.counts.params_active, plan.tokens_per_step, float(plan.flops_rate)
    first = fo.strong_scaling(N, np.array(sizes, dtype=float), B, M, float(plan.nic_Bps), F, PHI, float(plan.peak_flops))
    x = [p.gpus for p in points]
    data = [_line(lang, "fig.5.4.formula.compute", sizes, first.compute_s.tolist(), FULL[0][1], True),
            _line(lang, "fig.5.4.formula.comm", sizes, first.comm_s.tolist(), FULL[2][1], True)]
    data += [_line(lang, f"fig.5.4.part.{key}", x, [getattr(p, key) for p in points], color, False)
             for key, color in FULL]
    data.append(_line(lang, "fig.5.4.formula.share", sizes, first.comm_share.tolist(), SHARES[0][1], True, "2"))
    data += [_line(lang, f"fig.5.4.part.{key}", x, [getattr(p, key) for p in points], color, False, "2")
             for key, color in SHARES]
    kernel = float(derive(curve.scenario if curve is not None else kernel_scenario(sc)[0]).flops_rate)
    rate = t(lang, "fig.5.4.rate.carried" if stated.cluster.rate_scope == RateScope.STEP else "fig.5.4.rate.kernel",
             rate=fmt.flops(kernel))
    ticks = {"type": "log", "title": {"text": t(lang, "fig.5.4.x")}, "tickvals": sizes,
             "ticktext": [f"{n:,}" for n in sizes], "range": [np.log10(sizes[0] / 1.3), np.log10(sizes[-1] * 1.3)]}
    times = [v for d in data if d.get("yaxis") != "y2" for v in d["y"]]
    mark = {"type": "line", "x0": G, "x1": G, "y0": 0, "y1": 1, "line": {"dash": "dot", "color": "#555555", "width": 1}}
    here = {"xref": "x", "yref": "paper", "x": float(np.log10(G)), "y": 0, "xanchor": "left", "yanchor": "bottom",
            "xshift": 3, "showarrow": False, "text": t(lang, "fig.5.4.here", gpus=fmt.gpus(lang, G)), "font": {"size": 11}}
    notes = [here, {**here, "xref": "x2"}]
    why = _why(lang, sc, curve, whole, sizes)
    if why:  # under the title, above both plots
        notes.append({"xref": "paper", "yref": "paper", "x": 0, "y": 1.03, "xanchor": "left", "yanchor": "bottom",
                      "showarrow": False, "align": "left", "font": {"size": 12, "color": "#444444"},
                      "text": wrap(why, 150).replace("\n", "<br>"), "name": "note"})
    layout = {"title": {"text": t(lang, "fig.5.4.chapter", job=job_name(lang, stated), F=fmt.flops(F), rate=rate),
                        "y": 0.97, "yanchor": "top"},
              "template": "plotly_white", "width": 1100, "height": 680,
              "legend": {"orientation": "h", "y": -0.2, "yanchor": "top", "entrywidth": 0.5, "entrywidthmode": "fraction"},
              "margin": {"t": 155 if why else 110, "b": 200},
              "xaxis": {**ticks, "domain": [0, 0.45]}, "xaxis2": {**ticks, "domain": [0.55, 1], "anchor": "y2"},
              "yaxis": {"title": {"text": t(lang, "fig.5.4.y")}, **log_axis(times, lambda v: fmt.time(lang, v))},
              "yaxis2": {"title": {"text": t(lang, "fig.5.4.y2")}, "tickformat": ".0%", "range": [0, 1], "anchor": "x2"},
              "shapes": [{**mark, "xref": "x", "yref": "y domain"}, {**mark, "xref": "x2", "yref": "y2 domain"}],
              "annotations": notes, "meta": {"sizes": sizes, "full_sizes": x, "gpus": G}}
    return {"data": data, "layout": layout}


def _line(lang: str, key: str, x: list, y: list, color: str, formula: bool, axis: str = "") -> dict:
    """One curve: the chapter's formula dashed with open markers, the full model solid."""
    shares = axis == "2"
    shown = [fmt.percent(v) if shares else fmt.time(lang, v) for v in y]
    return {"type": "scatter", "mode": "lines+markers", "name": t(lang, key), "x": x, "y": y,
            "xaxis": f"x{axis}", "yaxis": f"y{axis}", "customdata": shown,
            "line": {"color": color, "dash": "dash" if formula else "solid", "width": 2},
            "marker": {"symbol": "circle-open" if formula else "circle", "size": 8 if formula else 6},
            "hovertemplate": t(lang, "fig.5.4.hover", gpus="%{x:,}", value="%{customdata}") + "<extra>%{fullData.name}</extra>"}


def _why(lang: str, sc: Scenario, curve: ScaleCurve | None, whole: list[int], sizes: list[int]) -> str:
    """The note under Figure 5.4, in one line: which sizes the full model leaves out, and why its exposed share
    does not rise with the GPUs while the formula's communication share does, from the terms of its budgets at
    the smallest and the largest size (each reason only where the numbers show it)."""
    parts = []
    missing = [n for n in sizes if n not in whole]
    if missing:
        parts.append(t(lang, "fig.5.4.why.missing", sizes=t(lang, "app.list_sep").join(f"{n:,}" for n in missing),
                       seqs=fmt.number(sc.global_batch_seqs), micro=fmt.number(sc.layout.micro_batch)))
    pts = curve.points if curve is not None else []
    if curve is not None and len(pts) >= 2 and pts[-1].exposed_share <= pts[0].exposed_share:
        a, b = (_budget_at(curve, p) for p in (pts[0], pts[-1]))
        reasons = []
        if pts[-1].bubble_s / pts[-1].step_s > pts[0].bubble_s / pts[0].step_s + 0.05:
            reasons.append(t(lang, "fig.5.4.why.bubble", bubble=fmt.time(lang, pts[-1].bubble_s),
                             low=fmt.percent(pts[0].bubble_s / pts[0].step_s),
                             high=fmt.percent(pts[-1].bubble_s / pts[-1].step_s)))
        if float(a.exposed_comm_s) > 2 * _dim(a, "exposed_s", "dp"):  # most of it not DP's
            reasons.append(t(lang, "fig.5.4.why.critical"))
        latency = _dim(b, "time_s", "dp") - _dim(b, "bandwidth_s", "dp")
        if pts[-1].dp_s > 1.1 * pts[0].dp_s and latency > 0.1 * _dim(b, "time_s", "dp"):
            reasons.append(t(lang, "fig.5.4.why.latency", low=fmt.time(lang, pts[0].dp_s),
                             high=fmt.time(lang, pts[-1].dp_s), latency=fmt.time(lang, latency)))
        parts.append(t(lang, "fig.5.4.why.falls", low=fmt.percent(pts[0].exposed_share),
                       high=fmt.percent(pts[-1].exposed_share),
                       reasons=t(lang, "app.list_sep").join(reasons) or t(lang, "fig.5.4.why.none")))
    return " ".join(parts)


def _budget_at(curve: ScaleCurve, point: ScalePoint) -> Budget:
    """The full model's budget at one point of a strong-scaling curve: its base at that size, DP taking the rest."""
    sc = curve.scenario
    return estimate(derive(sc.edit({"cluster": {"gpus": point.gpus}, "layout": {"dp": point.layout["dp"]}},
                                   where="figure 5.4")))


def _dim(b: Budget, what: str, dim: str) -> float:
    return float(np.asarray(b.by_dim(what)[dim]))


CHAPTER_SOURCES = ("MegaScale", "Llama 3")
"""The measured runs Figure 5.5 draws: MegaScale's Table 2 (MegaScale and Megatron-LM on A100) and Llama 3's
Table 4 (H100), as the chapter does."""


def measured_points(lang: str, ref: None, sets: list[str]) -> dict:
    """Figure 5.5 from the shipped runs (it has no scenario: the figure is the published runs); a
    ``cluster.profile=P`` among ``sets`` (``--profile P``) draws the predictions calibrated by it."""
    from stepbudget.validation.compare import validate

    profiles = [s.partition("=")[2].strip() for s in sets if s.partition("=")[0].strip() == "cluster.profile"]
    profile = profiles[-1] if profiles and profiles[-1].lower() != "none" else None
    rows, _ = validate(profile=profile)
    shown = [r.calibrated() for r in rows] if profile else rows
    figure = validation_figure(shown, lang, CHAPTER_SOURCES, profile=profile)
    gpus = [x for d in figure["data"] for x in d["x"] if x is not None]
    # powers of two, written out (256, 1,024, 16,384): plotly's own log ticks read 2 3 4 5 ... 1000 2 ...
    powers = [2 ** k for k in range(int(np.floor(np.log2(min(gpus)))), int(np.ceil(np.log2(max(gpus)))) + 1)]
    figure["layout"]["xaxis"] |= {"tickvals": powers, "ticktext": [f"{n:,}" for n in powers],
                                  "range": [np.log10(powers[0]) - 0.06, np.log10(powers[-1]) + 0.06]}
    return figure


TABLE_5 = (("baseline", 1.00), ("sp_ep", 1.13), ("inter", 1.22), ("intra", 1.28))
"""MegaScale-MoE (arXiv 2505.11432) Table 5, measured on 240 H800: throughput of each step of its optimisations
normalised to Megatron-LM's (exact, from the table)."""
PAIR_RANGE = (1.2, 4.7)
"""MegaScale-MoE §4.2 / Figure 6: fused kernels cut each communication-and-compute pair's time 1.2-4.7x (the
range as the text states it; the per-pair bars of its figure are not read off here)."""


def fused_kernels(lang: str, ref: str, sets: list[str]) -> dict:
    """Figure 5.6: per pair, the model's time run one after the other and fully overlapped (what a fused kernel
    can reach), beside MegaScale-MoE's measured range; and Table 5's steps beside the model's overlap gain."""
    sc, _ = carried(load(ref, sets))
    li = layer_inputs(sc)
    bw = li.nvlink_Bps if li.ep_in_node else li.nic_Bps
    lt = moe_layer_times(li.tokens_per_gpu, li.hidden, li.expert_ffn, li.top_k, li.ep, bw, li.peak_flops,
                         li.dispatch_bytes, li.swiglu)
    comm, compute = float(lt.comm_s) / 2, float(lt.compute_s)  # dispatch and combine each carry half the bytes
    up = 2 / 3 if li.swiglu else 1 / 2  # SwiGLU: gate and up before the activation, down after (formulas.md 2.4)
    # backward: each GEMM's two gradients (2x FLOPs), the all-to-all of activation gradients the size of the
    # activations (the same bytes); forward pairs as MegaScale-MoE §4.2 fuses them
    pairs = (("dispatch_fc1", comm, up * compute), ("fc2_combine", comm, (1 - up) * compute),
             ("combine_fc2_bwd", comm, 2 * (1 - up) * compute), ("fc1_dispatch_bwd", comm, 2 * up * compute))
    names = [t(lang, f"fig.5.6.pair.{key}") for key, _, _ in pairs]
    serial = [a + b for _, a, b in pairs]
    fused = [max(a, b) for _, a, b in pairs]  # perfect overlap inside the pair: the longer of the two
    gain = [s / f for s, f in zip(serial, fused)]
    data = [
        {"type": "bar", "name": t(lang, "fig.5.6.serial"), "x": names, "y": serial, "marker": {"color": COLORS[1]},
         "text": [fmt.time(lang, v) for v in serial], "textposition": "outside"},
        {"type": "bar", "name": t(lang, "fig.5.6.fused"), "x": names, "y": fused, "marker": {"color": COLORS[0]},
         "text": [t(lang, "fig.5.6.gain", gain=fmt.number(g)) for g in gain], "textposition": "outside"},
    ]
    base, off = whatif(ref, sets, [("off", ("overlap.ep=0",))])
    model_gain = float(off.budget.step_s) / float(base.budget.step_s)
    steps = [t(lang, f"fig.5.6.step.{key}") for key, _ in TABLE_5]
    data += [
        {"type": "bar", "name": t(lang, "fig.5.6.table5"), "x": steps, "y": [v for _, v in TABLE_5],
         "xaxis": "x2", "yaxis": "y2", "marker": {"color": COLORS[2]},
         "text": [f"{v:.2f}×" for _, v in TABLE_5], "textposition": "outside"},
        {"type": "bar", "name": t(lang, "fig.5.6.model_overlap", base=f"{TABLE_5[1][1]:.2f}", gain=f"{model_gain:.3f}"),
         "x": [steps[1], steps[3]],
         "y": [TABLE_5[1][1], TABLE_5[1][1] * model_gain], "xaxis": "x2", "yaxis": "y2",
         "marker": {"color": COLORS[3]}, "text": ["", f"{TABLE_5[1][1] * model_gain:.2f}×"], "textposition": "outside"},
    ]
    lo, hi = PAIR_RANGE
    layout = {"title": {"text": t(lang, "fig.5.6.title", job=job_name(lang, sc), link=t(lang, "fig.5.6.nvlink")
                                  if li.ep_in_node else t(lang, "fig.5.6.nic"))},
              "template": "plotly_white", "width": 1100, "height": 560, "barmode": "group",
              "legend": {"orientation": "h", "y": -0.3},
              "xaxis": {"domain": [0, 0.55]}, "yaxis": {"title": {"text": t(lang, "fig.5.6.y")}, "ticksuffix": "s",
                                                         "tickformat": "~s"},
              "xaxis2": {"domain": [0.65, 1], "anchor": "y2"},
              "yaxis2": {"anchor": "x2", "title": {"text": t(lang, "fig.5.6.y2")}, "range": [0, 1.5]},
              "annotations": [{"xref": "paper", "yref": "paper", "x": 0, "y": 1.06, "showarrow": False,
                               "xanchor": "left", "text": t(lang, "fig.5.6.published", lo=lo, hi=hi,
                                                            most=fmt.number(max(gain)))}]}
    return {"data": data, "layout": layout}
