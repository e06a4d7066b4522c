"""MoE report -> JSON-ready dict, tables, a verdict an engineer can act on, and the heat map (Figure 5.7)."""

from __future__ import annotations

import os

import numpy as np
from rich.table import Table

from stepbudget.a2a.report import MoEReport
from stepbudget.a2a.timing import AllToAllTimes
from stepbudget.units import fmt_bytes, fmt_rate, fmt_time
from stepbudget.views.fmt import number  # R as Panel 5.5 shows it: three significant digits


def moe_dict(r: MoEReport) -> dict:
    """The `moe --json` object (keys documented in docs/commands/moe.md)."""
    t = r.times
    return {
        "scenario": r.scenario.name,
        "ratio": r.ratio,
        "chapter_ratios": [{"case": c, "exact": e, "printed": p} for c, e, p in r.chapter],
        "layer": {k: {"compute_s": float(v.compute_s), "comm_s": float(v.comm_s), "ratio": float(v.ratio)}
                  for k, v in r.layer.items()},
        "servers": r.servers, "gpus_per_server": r.gpus_per_server, "tokens_per_gpu": r.tokens_per_gpu,
        "skew": {"kind": r.skew.kind, "exponent": r.skew.exponent,
                 "pair_max_over_median": r.stats.pair_max_over_median,
                 "busiest_row_bytes": r.stats.busiest_row_bytes, "busiest_col_bytes": r.stats.busiest_col_bytes},
        "alltoall": {"lower_bound_s": t.lower_bound_s, "plain_s": t.plain_s, "scheduled_s": t.scheduled_s,
                     "staged_s": t.staged_s, "sent_plain": t.sent_plain, "stages": t.stages, "speedup": t.speedup,
                     "schedule_seconds": t.schedule_seconds},
        "forwarded_nic_bytes": r.forwarded_nic_bytes,
        "verdict": verdict(r),
    }


def verdict(r: MoEReport) -> list[str]:
    """What to do about it, in a few lines."""
    out = []
    nic, nv = r.ratio["nic"]["exact"], r.ratio["nvlink"]["exact"]
    if r.servers > 1:
        if nic < 1:
            out.append(f"R = {nic:.2f} on the NIC: the expert GEMMs of a micro-batch cannot hide its all-to-all "
                       f"across servers; overlap it with another micro-batch (DualPipe) or keep EP inside the "
                       f"scale-up domain (R = {nv:.1f} on NVLink)")
        else:
            out.append(f"R = {nic:.2f} on the NIC: the all-to-all can hide behind expert compute if it is overlapped")
    else:
        out.append(f"EP stays inside one server: the all-to-all runs on NVLink (R = {nv:.1f}); the NIC carries none of it")
    t = r.times
    if r.servers > 1:  # one server has no scale-out stages to schedule
        if t.lower_bound_s <= 0:
            out.append("the matrix moves no bytes between GPUs: nothing to schedule")
        elif t.speedup > 1.05:
            out.append(f"skew makes the plain all-to-all {t.plain_s / t.lower_bound_s:.1f}x the lower bound; "
                       f"a FAST-style schedule ({_stages(t.stages)}) finishes in {fmt_time(t.scheduled_s)} instead of "
                       f"{fmt_time(t.plain_s)} ({t.speedup:.2f}x)")
        elif (gap := max(t.plain_s / t.lower_bound_s - 1, 0.0)) < 1:  # rounding can put it a hair under the bound
            out.append(f"balanced enough: the plain all-to-all is within {gap:.0%} of "
                       f"the lower bound; a schedule buys nothing{_sent(t)}")
        else:  # a few bytes a pair: the links' start-up latency, which the bound leaves out, is the time
            out.append(f"the plain all-to-all takes {gap + 1:,.1f}x the lower bound, which counts no link latency; "
                       f"a schedule buys nothing{_sent(t)}")
    if r.forwarded_nic_bytes is not None:
        moe = r.scenario.model.moe  # never None: moe_report refuses a dense model
        limit = moe.node_limit if moe is not None else None
        how = f"at most {limit} servers a token, " if limit else ""
        share = f"{fmt_bytes(r.forwarded_nic_bytes)} over NICs per layer instead of {fmt_bytes(r.plain_nic_bytes)} " \
                f"({r.forwarded_nic_bytes / max(r.plain_nic_bytes, 1):.0%})"
        if r.forwards:
            out.append(f"one NIC copy per target server ({how}NVLink forwards the rest) sends {share}")
        else:
            out.append(f"one NIC copy per target server, NVLink forwarding the rest (layout.ep_kind: deepep, as "
                       f"DeepEP does), would send {share}")
    return out


def _sent(t: AllToAllTimes) -> str:
    """What a verdict adds when the scheduler sends plain: the staged time it passed over."""
    if not t.sent_plain:
        return ""
    return f" ({_stages(t.stages)} would take {fmt_time(t.staged_s)}), so the scheduler sends it plain"


def ratio_table(r: MoEReport) -> Table:
    t = Table(title=f"{r.scenario.name}: hiding ratio R = expert compute / all-to-all (R > 1 can hide; MegaScale-MoE "
                    "§7's form with BF16 tokens; the layer columns use the scenario's dispatch precision)",
              title_justify="left")
    for col in ("link", "bandwidth", "R exact (n/(n-1))", "R approx (1.5 f B/P)", "layer compute", "layer all-to-all"):
        t.add_column(col, justify="left" if col == "link" else "right")
    for name in ("nvlink", "nic"):
        q, lt = r.ratio[name], r.layer[name]
        t.add_row(name, fmt_rate(q["bandwidth_Bps"]), number(q["exact"]), number(q["approx"]),
                  fmt_time(float(lt.compute_s)), fmt_time(float(lt.comm_s)))
    for label, exact, printed in r.chapter:
        t.add_row(label, "", number(exact), f"(book: {printed:g})", "", "")
    return t


def _stages(n: int, word: str = "stage") -> str:
    return f"{n} {word}{'s' * (n != 1)}"


def _exponent(r: MoEReport) -> str:
    """The skew's exponent as a title shows it: none for uniform routing or a given matrix."""
    return f" {r.skew.exponent:g}" if r.skew.kind not in ("uniform", "measured") else ""


def _pair_ratio(r: MoEReport) -> str:
    x = r.stats.pair_max_over_median
    return f"{x:.1f}x" if np.isfinite(x) else "- (median pair is 0)"


def alltoall_table(r: MoEReport) -> Table:
    t = Table(title=f"One MoE layer's dispatch: {_stages(r.servers, 'server')} x {r.gpus_per_server} GPUs, "
                    f"{r.tokens_per_gpu:,} tokens per GPU, skew {r.skew.kind}"
                    + _exponent(r), title_justify="left",
              show_header=False)
    t.add_column(style="bold")
    t.add_column(justify="right")
    t.add_column(style="dim")
    s, a = r.stats, r.times
    t.add_row("busiest pair / median pair", _pair_ratio(r), "FAST measured > 12x in Megatron MoE")
    t.add_row("busiest sender / receiver", f"{fmt_bytes(s.busiest_row_bytes)} / {fmt_bytes(s.busiest_col_bytes)}", "")
    t.add_row("lower bound", fmt_time(a.lower_bound_s), "busiest server line over its NICs, or scale-up if slower")
    t.add_row("plain all-to-all", fmt_time(a.plain_s), "all pairs at once, max-min shared (incast at hot receivers)")
    t.add_row("FAST-style schedule", fmt_time(a.staged_s),
              f"{_stages(a.stages, 'one-to-one stage')}, computed in {a.schedule_seconds * 1e6:.0f} us")
    t.add_row("sent", "plain" if a.sent_plain else "staged",
              "staging is not faster here" if a.sent_plain else "the schedule beats all pairs at once")
    t.add_row("speedup", f"{a.speedup:.2f}x", "plain / sent")
    return t


def heatmap(r: MoEReport, path: str | os.PathLike) -> None:
    """Write the traffic matrix's heat map (``heatmap_plot``) to ``path``: .html, .png or .svg."""
    from stepbudget.views.render import write  # the chapter's package: loaded only to plot

    write(heatmap_plot(r), path, "--plot")


def heatmap_plot(r: MoEReport) -> dict:
    """The traffic matrix as a heat map (chapter Figure 5.7) in MB, source GPU down, destination GPU across,
    white lines at the server boundaries, as a plotly figure dict."""
    edges = [b * r.gpus_per_server - 0.5 for b in range(1, r.servers)]  # between the cells of two servers
    line = {"color": "white", "width": 1}
    shapes = [*({"type": "line", "xref": "x", "yref": "y domain", "x0": e, "x1": e, "y0": 0, "y1": 1, "line": line}
                for e in edges),
              *({"type": "line", "xref": "x domain", "yref": "y", "x0": 0, "x1": 1, "y0": e, "y1": e, "line": line}
                for e in edges)]
    ratio = r.stats.pair_max_over_median
    title = f"{r.scenario.name}: dispatch, skew {r.skew.kind}{_exponent(r)} " + (
        f"(pair max / median {ratio:.1f}x)" if np.isfinite(ratio) else "(median pair is 0)")
    data = [{"type": "heatmap", "z": (r.matrix / 1e6).tolist(), "colorscale": "Magma",
             "colorbar": {"title": {"text": "MB per layer call"}}}]
    layout = {"title": {"text": title}, "template": "plotly_white", "width": 760, "height": 680,
              "margin": {"l": 70, "r": 90, "t": 60, "b": 60}, "shapes": shapes,
              "xaxis": {"title": {"text": "destination GPU"}},
              "yaxis": {"title": {"text": "source GPU"}, "autorange": "reversed"}}
    return {"data": data, "layout": layout}
