"""The wire view of a budget (chapter 5.6, Panel 5.6): figures, table, JSON and the NIC-rate plot."""

from __future__ import annotations

import os

import numpy as np
from rich.table import Table

from stepbudget.units import fmt_bits_rate, fmt_bytes, fmt_rate, fmt_time
from stepbudget.wire import Wire


def wire_dict(w: Wire) -> dict:
    """The `wire --json` object (keys documented in docs/commands/wire.md)."""
    v = w.view
    f = lambda x: None if x is None else float(np.asarray(x))  # noqa: E731
    return {
        "scenario": w.budget.plan.scenario.name,
        "step_s": f(v.step_s), "bytes_per_nic": w.bytes_per_nic, "line_rate_Bps": f(v.line_rate_Bps),
        "burst_s": f(v.burst_s), "duty_cycle": f(v.duty_cycle), "average_Bps": f(v.average_Bps),
        "window_s": f(v.window_s), "counter_Bps": f(v.counter_Bps),
        "counter_min_Bps": f(v.counter_min_Bps), "counter_max_Bps": f(v.counter_max_Bps),
        "peak_to_average": f(v.peak_to_average), "k_converging": f(v.k_converging),
        "buffer_bytes": f(v.buffer_bytes), "drain_s": f(v.drain_s), "switch_buffer_bytes": f(v.switch_buffer_bytes),
        "fits_in_buffer": bool(v.fits_in_buffer), "max_burst_s": f(v.max_burst_s),
        "flows_per_gpu": f(v.flows_per_gpu), "flow_entropy_bits": f(v.flow_entropy_bits),
        "cv_synchronized": f(v.cv_synchronized), "cv_if_independent": f(v.cv_if_independent),
        "cv_1000_web_flows": f(v.cv_1000_web_flows),
        "series": {"t_s": w.t.tolist(), "rate_Bps": w.rate.tolist()},
    }


def wire_table(w: Wire) -> Table:
    d = wire_dict(w)
    t = Table(title=f"{d['scenario']}: one NIC on the wire", title_justify="left", show_header=False)
    t.add_column(style="bold")
    t.add_column(justify="right")
    t.add_column(style="dim")
    t.add_row("bytes per step", fmt_bytes(d["bytes_per_nic"]), "what this NIC sends each step (budget)")
    line = d["line_rate_Bps"]  # as vendors quote it, in bits, with the bytes the table counts in
    t.add_row("burst at line rate", fmt_time(d["burst_s"]), f"at {fmt_bits_rate(line)} ({fmt_rate(line)}), then idle")
    idle = d["duty_cycle"] == 0  # no byte crosses this NIC: no bursts to compare
    t.add_row("step", fmt_time(d["step_s"]), f"duty cycle {d['duty_cycle']:.1%}"
              + ("; the NIC carries none of this job's traffic" if idle else f"; peak / average {d['peak_to_average']:.1f}"))
    t.add_row(f"{d['window_s']:g} s counter reads", fmt_rate(d["counter_Bps"]),
              f"duty x line rate (between {fmt_rate(d['counter_min_Bps'])} and {fmt_rate(d['counter_max_Bps'])} "
              "with the window's phase)")
    t.add_row(f"buffer for {d['k_converging']:g} converging bursts", fmt_bytes(d["buffer_bytes"]),
              f"(k - 1) x burst x rate; the switch has {fmt_bytes(d['switch_buffer_bytes'])}: "
              + ("fits" if d["fits_in_buffer"] else f"does not fit (it absorbs {fmt_time(d['max_burst_s'])} of burst)"))
    t.add_row("flows per GPU", f"{d['flows_per_gpu']:g}",
              f"entropy {d['flow_entropy_bits']:.1f} bits (Meta: ~4 QPs per ring, ~15 per all-to-all)")
    if not idle:
        t.add_row("burstiness (CV)", f"{d['cv_synchronized']:.2f}", f"flows in lockstep; {d['cv_if_independent']:.2f} "
                  f"if independent, {d['cv_1000_web_flows']:.3f} for 1,000 web-like flows")
    return t


def wire_figure(w: Wire, path: str | os.PathLike) -> None:
    """Write the NIC's rate over the steps (``wire_plot``) to ``path``: .html, .png or .svg."""
    from stepbudget.views.render import write  # the chapter's package: loaded only to plot

    write(wire_plot(w), path, "--plot")


def wire_plot(w: Wire) -> dict:
    """The NIC's rate over the steps in Gb/s, with what the counter's window reads and the line rate, as a
    plotly figure dict."""
    v, end = w.view, float(w.t[-1])
    counter, line = float(v.counter_Bps) * 8 / 1e9, float(v.line_rate_Bps) * 8 / 1e9
    data = [
        {"type": "scatter", "mode": "lines", "name": "NIC rate (line-rate bursts)", "x": w.t.tolist(),
         "y": (w.rate * 8 / 1e9).tolist(), "line": {"shape": "hv", "color": "#1f77b4"}},
        {"type": "scatter", "mode": "lines", "name": f"what a {float(v.window_s):g} s counter reads", "x": [0.0, end],
         "y": [counter, counter], "line": {"dash": "dash", "color": "#d62728"}},
        {"type": "scatter", "mode": "lines", "name": "line rate", "x": [0.0, end], "y": [line, line],
         "line": {"dash": "dot", "color": "grey"}},
    ]
    layout = {"title": {"text": f"{w.budget.plan.scenario.name}: one NIC, duty cycle {float(v.duty_cycle):.1%}"},
              "template": "plotly_white", "width": 1100, "height": 420,
              "margin": {"l": 70, "r": 30, "t": 60, "b": 60},
              "xaxis": {"title": {"text": "seconds"}, "range": [0.0, end]}, "yaxis": {"title": {"text": "Gb/s"}},
              "legend": {"x": 0.01, "y": 0.5, "xanchor": "left", "yanchor": "middle"}}
    return {"data": data, "layout": layout}
