"""The wire view of a budget (chapter 5.6, Panel 5.6): figures, table, JSON and the NIC-rate plot."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from rich.table import Table

from stepbudget.units import fmt_bytes, fmt_rate, fmt_time
from stepbudget.views.figures import write_figure
from stepbudget.wire import Wire


def wire_dict(w: Wire) -> dict:
    """The `wire --json` object (keys documented in the README)."""
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
    t.add_row("burst at line rate", fmt_time(d["burst_s"]), f"at {fmt_rate(d['line_rate_Bps'])}, then idle")
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
    """The NIC's rate over the steps, with what the counter's window reads."""
    write_figure(path, lambda: _plotly(w), lambda tmp: _matplotlib(w, tmp))


def _matplotlib(w: Wire, tmp: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 4))
    ax.step(w.t, w.rate * 8 / 1e9, where="post", label="NIC rate (line-rate bursts)")
    ax.axhline(float(w.view.counter_Bps) * 8 / 1e9, color="C3", linestyle="--",
               label=f"what a {float(w.view.window_s):g} s counter reads")
    ax.axhline(float(w.view.line_rate_Bps) * 8 / 1e9, color="grey", linestyle=":", label="line rate")
    ax.set(xlabel="seconds", ylabel="Gb/s", xlim=(0, w.t[-1]),
           title=f"{w.budget.plan.scenario.name}: one NIC, duty cycle {float(w.view.duty_cycle):.1%}")
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(tmp, format=tmp.suffix.lstrip("."), dpi=120)
    plt.close(fig)


def _plotly(w: Wire):
    import plotly.graph_objects as go

    fig = go.Figure(go.Scatter(x=w.t, y=w.rate * 8 / 1e9, line_shape="hv", name="NIC rate"))
    fig.add_hline(y=float(w.view.counter_Bps) * 8 / 1e9, line_dash="dash", annotation_text="counter")
    fig.update_layout(title="One NIC on the wire", xaxis_title="seconds", yaxis_title="Gb/s", template="plotly_white")
    return fig
