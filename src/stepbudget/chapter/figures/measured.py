"""Figures 5.4, 5.5 and 5.6: the strong-scaling curve, the measured runs against the model, and MegaScale-MoE's
fused kernels against what the model says overlap can give."""

from __future__ import annotations


from stepbudget.a2a.ratio import moe_layer_times
from stepbudget.a2a.report import layer_inputs
from stepbudget.inputs.scenario import load
from stepbudget.sweep.calibrate import carried
from stepbudget.sweep.scaling import scale
from stepbudget.sweep.whatif import whatif
from stepbudget.views import fmt
from stepbudget.views.render import COLORS
from stepbudget.views.scaling import scaling_figure
from stepbudget.views.validation import validation_figure
from stepbudget.views.i18n import t

SIZES = (0.5, 1, 2, 4, 8)
"""Figure 5.4's sizes as multiples of the scenario's GPUs: Llama 3 405B's 16,384 halved once and doubled three
times, 8,192 to 131,072 (chapter 5.4)."""

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
