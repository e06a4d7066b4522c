"""Figure 5.7 and Animation 5.2: what the traffic looks like, inside one MoE call and on one NIC."""

from __future__ import annotations

import numpy as np

from stepbudget.inputs.errors import OptionError
from stepbudget.a2a.report import Skew, dispatch_matrix
from stepbudget.a2a.routing import skew_stats
from stepbudget.budget.step import estimate
from stepbudget.inputs.scenario import load
from stepbudget.plan.derive import derive
from stepbudget.sweep.calibrate import carried
from stepbudget.units import BITS_PER_BYTE
from stepbudget.views import fmt
from stepbudget.views.i18n import t
from stepbudget.wire import wire_of

HOT = 12.0
"""FAST's measure of a skewed call: pairs carrying more than 12x the median (FAST Figure 2, chapter 5.5)."""
CALLS = 12
"""Consecutive calls in the strip: each a fresh draw of the routing model, seeded."""


def skew_in_one_call(lang: str, ref: str, sets: list[str], skew: float = 1.0, servers: int = 4,
                     gpus_per_server: int = 8, seed: int = 0) -> dict:
    """Figure 5.7: one call's 32x32 dispatch matrix (pairs skewed Zipf ``skew``), server boundaries and the hot
    pairs marked; beside it, one pair's bytes over consecutive calls.

    FAST measured pairs above 12x the median in Megatron-LM's MoE pre-training (FAST §2, chapter 5.5); the
    routing model's pair skew reaches that from Zipf 1.0 (at 0.8, FAST's benchmark load, the largest pair is
    9.2x the median), so the figure draws 1.0."""
    sc, _ = carried(load(ref, sets))
    calls = [dispatch_matrix(sc, Skew("pairs", skew), servers, gpus_per_server, seed + call) for call in range(CALLS)]
    D = calls[0] / 1e6
    n = D.shape[0]
    median = float(np.median(D[~np.eye(n, dtype=bool)]))
    hot_src, hot_dst = np.nonzero((D > HOT * median) & ~np.eye(n, dtype=bool))
    i, j = np.unravel_index(int(np.argmax(D - np.diag(np.diag(D)))), D.shape)
    strip = [float(m[i, j]) / 1e6 for m in calls]
    data = [
        {"type": "heatmap", "z": D.tolist(), "zmin": 0, "zmax": float(D.max()), "colorscale": "Viridis",
         "colorbar": {"title": {"text": t(lang, "fig.5.7.mb")}, "x": 0.6, "len": 0.9},
         "hovertemplate": t(lang, "fig.5.7.hover", src="%{y}", dst="%{x}", mb="%{z:.2f}") + "<extra></extra>"},
        {"type": "scatter", "mode": "markers", "x": hot_dst.tolist(), "y": hot_src.tolist(),
         "name": t(lang, "fig.5.7.hot", times=fmt.number(HOT)),
         "marker": {"symbol": "square-open", "size": 9, "color": "#ff4136", "line": {"width": 2}}},
        {"type": "scatter", "mode": "lines+markers", "x": list(range(1, CALLS + 1)), "y": strip, "xaxis": "x2",
         "yaxis": "y2", "name": t(lang, "fig.5.7.pair", src=int(i), dst=int(j)), "line": {"color": "#d1603d"}},
    ]
    G = gpus_per_server
    shapes = [{"type": "line", "xref": "x", "yref": "y", "line": {"color": "white", "width": 2},
               **({"x0": b * G - 0.5, "x1": b * G - 0.5, "y0": -0.5, "y1": n - 0.5} if vertical else
                  {"x0": -0.5, "x1": n - 0.5, "y0": b * G - 0.5, "y1": b * G - 0.5})}
              for b in range(1, servers) for vertical in (True, False)]
    spread = max(strip) / max(min(strip), 1e-12)
    layout = {"title": {"text": t(lang, "fig.5.7.title", scenario=sc.name, n=n, servers=servers, skew=skew,
                                  hot=len(hot_src), times=fmt.number(HOT),
                                  ratio=fmt.number(skew_stats(calls[0]).pair_max_over_median))},
              "template": "plotly_white", "width": 1100, "height": 560, "shapes": shapes,
              "legend": {"orientation": "h", "y": -0.15},
              "xaxis": {"domain": [0, 0.55], "title": {"text": t(lang, "fig.5.7.dst")}, "constrain": "domain"},
              "yaxis": {"autorange": "reversed", "title": {"text": t(lang, "fig.5.7.src")}, "scaleanchor": "x"},
              "xaxis2": {"domain": [0.72, 1], "anchor": "y2", "title": {"text": t(lang, "fig.5.7.call")},
                         "dtick": 2},
              "yaxis2": {"type": "log", "anchor": "x2", "title": {"text": t(lang, "fig.5.7.strip_y")}},
              "annotations": [{"xref": "x2 domain", "yref": "y2 domain", "x": 0.5, "y": 1.08, "showarrow": False,
                               "text": t(lang, "fig.5.7.spread", spread=fmt.number(spread), calls=CALLS)}]}
    return {"data": data, "layout": layout}


FRAMES = 30
"""Zoom frames from two steps out to the counter window."""


MAX_READINGS = 5_000
"""Most counter readings the animation draws over its widest view (a window far shorter than the step)."""


def counter_window(lang: str, ref: str, sets: list[str], window_s: float = 15.0) -> dict:
    """Animation 5.2: one NIC over two steps (bursts at line rate, idle between), zooming out to one counter
    window of ``window_s``, where the counter reads the same bytes as a flat average. A window shorter than
    the step does not average: its readings follow the bursts, and the title says so."""
    sc, _ = carried(load(ref, sets))
    b = estimate(derive(sc))
    step = float(b.step_s)
    near = 2 * step
    far = max(window_s, near)
    if far / window_s > MAX_READINGS:
        raise OptionError("window_s", f"a {window_s:g} s window gives {far / window_s:,.0f} readings over "
                            f"two {step:.3g} s steps, more than {MAX_READINGS:,} to draw; choose a window of at "
                            f"least {far / MAX_READINGS:.3g} s")
    w = wire_of(b, steps=int(np.ceil(far / step)) + 1, window_s=window_s)
    rate = (w.rate * BITS_PER_BYTE).tolist()
    line = float(sc.cluster.nic_Bps) * BITS_PER_BYTE
    seen = w.poll_s <= far * (1 + 1e-9)
    polls, readings = w.poll_s[seen], w.counter[seen] * BITS_PER_BYTE  # what the counter reports, window by window
    low, high = float(readings.min()), float(readings.max())
    flat = high - low <= 0.01 * max(high, 1e-300)
    data = [
        {"type": "scatter", "mode": "lines", "x": w.t.tolist(), "y": rate, "name": t(lang, "fig.anim-5.2.nic"),
         "line": {"shape": "hv", "color": "#3b6ea8"}, "fill": "tozeroy"},
        {"type": "scatter", "mode": "lines", "x": [0.0, *polls.tolist()], "y": [*readings.tolist(), float(readings[-1])],
         "name": t(lang, "fig.anim-5.2.counter", window=fmt.time(lang, window_s)),
         "line": {"color": "#d1603d", "width": 3, "shape": "hv"}, "opacity": 0.0},
        {"type": "scatter", "mode": "lines", "x": [0, far], "y": [line, line],
         "name": t(lang, "fig.anim-5.2.line", rate=fmt.line_rate(sc.cluster.nic_Bps)),
         "line": {"color": "#555555", "dash": "dot"}},
    ]
    last = t(lang, "fig.anim-5.2.frame", window=fmt.time(lang, window_s), average=fmt.line_rate(low / BITS_PER_BYTE)
             ) if flat else t(lang, "fig.anim-5.2.follows", window=fmt.time(lang, window_s), step=fmt.time(lang, step),
                              low=fmt.line_rate(low / BITS_PER_BYTE), high=fmt.line_rate(high / BITS_PER_BYTE))
    frames: list[dict] = []  # plotly frames and slider steps, plain figure dicts like the figure itself
    steps: list[dict] = []
    for k, right in enumerate(np.geomspace(near, far, FRAMES).tolist()):
        shown = k >= FRAMES - 4  # the counter's line appears once the window is in view
        name = str(k)
        title = last if shown else t(lang, "fig.anim-5.2.near", span=fmt.time(lang, right),
                                     peak=fmt.line_rate(line / BITS_PER_BYTE))
        frames.append({"name": name, "data": [{"type": "scatter", "opacity": 1.0 if shown else 0.0}], "traces": [1],
                       "layout": {"xaxis": {"range": [0, right]}, "title": {"text": title}}})
        steps.append({"method": "animate", "label": "", "name": name,
                      "args": [[name], {"mode": "immediate", "frame": {"duration": 0, "redraw": True}}]})
    play = {"frame": {"duration": 80, "redraw": True}, "transition": {"duration": 0}, "fromcurrent": False}
    layout = {"title": frames[0]["layout"]["title"], "template": "plotly_white", "width": 1000, "height": 480,
              "legend": {"orientation": "h", "y": -0.4},
              "xaxis": {"title": {"text": t(lang, "fig.x_time")}, "range": [0, near], "ticksuffix": "s"},
              "yaxis": {"title": {"text": t(lang, "fig.anim-5.2.y")}, "range": [0, line * 1.15], "tickformat": "~s",
                        "ticksuffix": "b/s"},
              "margin": {"t": 130},  # the title above, the buttons under it: they must not overlap at any width
              "updatemenus": [{"type": "buttons", "direction": "right", "x": 0, "y": 1.04, "yanchor": "bottom",
                               "xanchor": "left",
                               "buttons": [{"label": t(lang, "fig.anim-5.2.zoom"), "method": "animate",
                                            "args": [None, play]},
                                           {"label": t(lang, "fig.anim-5.1.pause"), "method": "animate",
                                            "args": [[None], {"mode": "immediate",
                                                              "frame": {"duration": 0, "redraw": False}}]}]}],
              "sliders": [{"active": 0, "steps": steps, "x": 0, "len": 1, "y": -0.2,
                           "currentvalue": {"visible": False}}],
              "meta": {"still": frames[-1]["name"]}}
    return {"data": data, "layout": layout, "frames": frames}
