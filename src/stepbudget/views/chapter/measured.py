"""Figures 5.4, 5.5 and 5.6: the strong-scaling curve, the measured runs against the model, and MegaScale-MoE's
fused kernels against what the model says overlap can give."""

from __future__ import annotations

import numpy as np

from stepbudget.a2a.ratio import moe_layer_times
from stepbudget.a2a.report import layer_inputs
from stepbudget.inputs.scenario import load
from stepbudget.sweep.calibrate import carried
from stepbudget.sweep.scaling import ScaleCurve, scale
from stepbudget.sweep.whatif import whatif
from stepbudget.validation.compare import Row
from stepbudget.views import fmt
from stepbudget.views.chapter.figures import COLORS
from stepbudget.views.i18n import t

SIZES = (0.5, 1, 2, 4, 8)
"""Figure 5.4's sizes as multiples of the scenario's GPUs: Llama 3 405B's 16,384 halved once and doubled three
times, 8,192 to 131,072 (chapter 5.4)."""

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


def strong_scaling(lang: str, ref: str, sets: list[str]) -> dict:
    """Figure 5.4: the scenario's layout, its global batch fixed, at the chapter's five sizes."""
    sc, _ = carried(load(ref, sets))
    lay = sc.layout
    group = lay.tp * lay.cp * lay.pp
    sizes = [int(sc.cluster.gpus * f) for f in SIZES]
    # the sizes that hold whole replicas and split the batch evenly; should none of the others, scale() says why
    whole = [n for n in sizes if n % group == 0 and sc.global_batch_seqs % (n // group * lay.micro_batch) == 0]
    return scaling_figure(scale(sc, whole if len(whole) >= 2 else sizes), lang)


CHAPTER_SOURCES = ("MegaScale", "Llama 3")
"""The measured runs Figure 5.5 draws: MegaScale's Table 2 (MegaScale and Megatron-LM on A100) and Llama 3's
Table 4 (H100), as the chapter does."""


def validation_figure(rows: list[Row], lang: str = "en", sources: tuple[str, ...] | None = None,
                      profile: str | None = None) -> dict:
    """Figure 5.5: measured MFU (solid) and predicted (dotted) against GPUs, one legend entry per system; a
    system with several series (a model, a batch) has one line each, grouped under its entry. ``profile``
    names the calibration the predictions carry, in the legend."""
    from stepbudget.views.validation import figure_series

    if sources is not None:
        rows = [r for r in rows if r.case.source in sources]
    systems: dict[str, int] = {}
    data: list[dict] = []  # plotly traces, plain dicts like the figure itself
    for series, members in figure_series(rows).items():
        members = sorted(members, key=lambda r: r.case.gpus)
        system = series.system
        extra = [t(lang, "fig.5.5.batch", tokens=f"{series.batch_tokens / 1e6:.3g}")] if series.batch_tokens else []
        extra += [t(lang, "fig.5.5.seq", seq=fmt.number(series.seq_len))] if series.seq_len else []
        name = t(lang, "fig.5.5.series", system=system, detail=t(lang, "app.list_sep").join([series.model, *extra]))
        first = system not in systems
        i = systems.setdefault(system, len(systems))
        x = [r.case.gpus for r in members]
        for kind, y, dash, symbol in (("measured", [r.case.measured_mfu for r in members], "solid", "circle"),
                                      ("predicted", [r.predicted_mfu for r in members], "dot", "circle-open")):
            data.append({"type": "scatter", "mode": "lines+markers", "x": x, "y": y, "legendgroup": system,
                         "name": system, "showlegend": first and kind == "measured",
                         "line": {"color": COLORS[i % len(COLORS)], "dash": dash},
                         "marker": {"symbol": symbol, "size": 8},
                         "customdata": [[t(lang, f"fig.5.5.{kind}"), name] for _ in members],
                         "hovertemplate": t(lang, "fig.5.5.hover", series="%{customdata[1]}", gpus="%{x:,}",
                                            kind="%{customdata[0]}", mfu="%{y:.1%}") + "<extra></extra>"})
    for kind, dash, symbol in (("measured", "solid", "circle"), ("predicted", "dot", "circle-open")):
        key = t(lang, "fig.5.5.calibrated_key", profile=profile) if profile and kind == "predicted" \
            else t(lang, f"fig.5.5.{kind}_key")
        data.append({"type": "scatter", "mode": "lines+markers", "x": [None], "y": [None], "name": key,
                     "line": {"color": "#555555", "dash": dash},
                     "marker": {"symbol": symbol, "size": 8}, "legendgroup": kind})
    layout = {"title": {"text": t(lang, "fig.5.5.title", runs=sum(len(d["x"]) for d in data[:-2]) // 2)},
              "template": "plotly_white", "width": 1000, "height": 560, "legend": {"orientation": "h", "y": -0.15},
              "xaxis": {"type": "log", "title": {"text": t(lang, "fig.5.5.x")}},
              "yaxis": {"title": {"text": t(lang, "fig.5.5.y")}, "tickformat": ".0%", "range": [0, 1]}}
    return {"data": data, "layout": layout}


def measured_points(lang: str, ref: None, sets: list[str]) -> dict:
    """Figure 5.5 from the shipped runs (it has no scenario: the figure is the published runs); a
    ``cluster.profile=P`` among ``sets`` (``--profile P``) draws the predictions calibrated by it."""
    from stepbudget.validation.compare import validate

    profiles = [s.partition("=")[2].strip() for s in sets if s.partition("=")[0].strip() == "cluster.profile"]
    profile = profiles[-1] if profiles and profiles[-1].lower() != "none" else None
    rows, _ = validate(profile=profile)
    shown = [r.calibrated() for r in rows] if profile else rows
    return validation_figure(shown, lang, CHAPTER_SOURCES, profile=profile)


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
    layout = {"title": {"text": t(lang, "fig.5.6.title", scenario=sc.name, link=t(lang, "fig.5.6.nvlink")
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
