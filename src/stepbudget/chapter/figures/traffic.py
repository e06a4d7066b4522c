"""Figure 5.7 and Animation 5.2: what the traffic looks like, inside one MoE call and on one NIC."""

from __future__ import annotations

import numpy as np

from stepbudget.inputs.errors import OptionError
from stepbudget.a2a.report import Skew, dispatch_matrix
from stepbudget.a2a.routing import skew_stats
from stepbudget.inputs.scenario import load
from stepbudget.sweep.calibrate import carried
from stepbudget.chapter.figures.common import Bursts, bursts_of, job_name
from stepbudget.units import BITS_PER_BYTE, fmt_bits_rate
from stepbudget.views import fmt
from stepbudget.views.i18n import t
from stepbudget.wire import MAX_POINTS, counter_reading, rate_series

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
    layout = {"title": {"text": t(lang, "fig.5.7.title", job=job_name(lang, sc), n=n, servers=servers, skew=skew,
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


FRAMES = (10, 4, 16)
"""Animation 5.2's frames: from one burst out to two steps, held on the two steps, then out to the counter window."""
MAX_READINGS = 5_000
"""Most counter readings the animation draws over its widest view (a window far shorter than the step)."""


def _ranges(b: Bursts, far: float) -> list[list[float]]:
    """The x range of each frame: one burst with a burst's length either side, widening (edges in step, widths
    geometric) to two steps, held there, then to ``far``, the counter window."""
    start = b.step_s - b.burst_s  # the first burst ends the first step (compute, then the exchange)
    keys = [(max(0.0, start - b.burst_s), min(start + 2 * b.burst_s, 2 * b.step_s)), (0.0, 2 * b.step_s), (0.0, far)]
    out: list[list[float]] = []
    legs = ((keys[0], keys[1], FRAMES[0]), (keys[1], keys[1], FRAMES[1]), (keys[1], keys[2], FRAMES[2]))
    for leg, ((a0, a1), (b0, b1), frames) in enumerate(legs):
        w0, w1 = a1 - a0, b1 - b0
        for k in range(frames):
            u = k / (frames - 1) if leg == 0 else (k + 1) / frames  # from the burst itself; each leg ends on its key
            w = w0 * (w1 / w0) ** u
            f = (w - w0) / (w1 - w0) if w1 != w0 else u
            out.append([b0, b1] if u == 1 else [a0 + (b0 - a0) * f, a1 + (b1 - a1) * f])
    return out


def counter_window(lang: str, ref: str, sets: list[str], window_s: float = 15.0, step_s: float | None = None,
                   burst_s: float | None = None) -> dict:
    """Animation 5.2: one NIC's bursts (the job's, or ``step_s`` and ``burst_s`` given, as Panel 5.6 sets them),
    from one burst at millisecond resolution out to two steps, then to one counter window of ``window_s``, where
    the counter reads the same bytes as a flat average. A window shorter than the step does not average: its
    readings follow the bursts, and the note says so. The title stays; what each frame shows is a note drawn as
    data (a page keeps a frame's data, not its layout, once the axis has moved)."""
    sc, _ = carried(load(ref, sets))
    b = bursts_of(sc, step_s, burst_s)
    near = 2 * b.step_s
    far = max(window_s, near)
    if far / window_s > MAX_READINGS:
        raise OptionError("window_s", f"a {window_s:g} s window gives {far / window_s:,.0f} readings over "
                            f"two {b.step_s:.3g} s steps, more than {MAX_READINGS:,} to draw; choose a window of at "
                            f"least {far / MAX_READINGS:.3g} s")
    steps = int(np.ceil(far / b.step_s)) + 1
    if steps > MAX_POINTS:
        raise OptionError("window_s", f"a {window_s:g} s window spans {steps:,} steps of {b.step_s:.3g} s, more "
                            f"than {MAX_POINTS:,} to draw; choose a shorter window or a longer step")
    t_s, rate_Bps = rate_series(b.step_s, b.burst_s, b.line_Bps, steps)
    polls, counts = counter_reading(t_s, rate_Bps, window_s)
    seen = polls <= far * (1 + 1e-9)
    polls, readings = polls[seen], counts[seen] * BITS_PER_BYTE  # what the counter reports, window by window
    line = b.line_Bps * BITS_PER_BYTE
    low, high = float(readings.min()), float(readings.max())
    flat = high - low <= 0.01 * max(high, 1e-300)
    rate, burst, step = fmt_bits_rate(b.line_Bps), fmt.time(lang, b.burst_s), fmt.time(lang, b.step_s)
    says = {
        "burst": t(lang, "fig.anim-5.2.burst", burst=burst, rate=rate, bytes=fmt.data(b.burst_s * b.line_Bps)),
        "steps": t(lang, "fig.anim-5.2.steps", burst=burst, idle=fmt.time(lang, b.step_s - b.burst_s),
                   duty=fmt.percent(b.duty)),
        "window": t(lang, "fig.anim-5.2.frame", window=fmt.time(lang, window_s), average=fmt_bits_rate(low / BITS_PER_BYTE))
        if flat else t(lang, "fig.anim-5.2.follows", window=fmt.time(lang, window_s), step=step,
                       low=fmt_bits_rate(low / BITS_PER_BYTE), high=fmt_bits_rate(high / BITS_PER_BYTE)),
    }
    ranges = _ranges(b, far)
    data = [
        {"type": "scatter", "mode": "lines", "x": t_s.tolist(), "y": (rate_Bps * BITS_PER_BYTE).tolist(),
         "name": t(lang, "fig.anim-5.2.nic"), "line": {"shape": "hv", "color": "#3b6ea8"}, "fill": "tozeroy"},
        {"type": "scatter", "mode": "lines", "x": [0.0, *polls.tolist()], "y": [*readings.tolist(), float(readings[-1])],
         "name": t(lang, "fig.anim-5.2.counter", window=fmt.time(lang, window_s)),
         "line": {"color": "#d1603d", "width": 3, "shape": "hv"}, "opacity": 0.0},
        {"type": "scatter", "mode": "lines", "x": [0, far], "y": [line, line],
         "name": t(lang, "fig.anim-5.2.line", rate=rate), "line": {"color": "#555555", "dash": "dot"}},
        {"type": "scatter", "mode": "text", "x": [0.005], "y": [0.985], "xaxis": "x2", "yaxis": "y2",
         "text": [says["burst"]], "textposition": "bottom right", "showlegend": False, "hoverinfo": "skip",
         "textfont": {"size": 13, "color": "#333333"}},
    ]
    frames: list[dict] = []  # plotly frames and slider steps, plain figure dicts like the figure itself
    slider: list[dict] = []
    for k, span in enumerate(ranges):
        shown = k >= len(ranges) - 4  # the counter's line appears once the window is in view
        phase = "window" if shown else "burst" if span[1] - span[0] < 1.5 * b.step_s else "steps"
        name = str(k)
        frames.append({"name": name, "traces": [1, 3],
                       "data": [{"type": "scatter", "opacity": 1.0 if shown else 0.0},
                                {"type": "scatter", "text": [says[phase]]}],
                       "layout": {"xaxis": {"range": span}}})
        slider.append({"method": "animate", "label": "", "name": name,
                       "args": [[name], {"mode": "immediate", "frame": {"duration": 0, "redraw": True}}]})
    play = {"frame": {"duration": 90, "redraw": True}, "transition": {"duration": 0}, "fromcurrent": False,
            "mode": "immediate"}
    title = t(lang, "fig.anim-5.2.title_given" if b.given else "fig.anim-5.2.title",
              job=job_name(lang, sc), burst=burst, rate=rate, step=step, duty=fmt.percent(b.duty),
              window=fmt.time(lang, window_s))
    layout = {"title": {"text": title}, "template": "plotly_white", "width": 1000, "height": 500,
              "legend": {"orientation": "h", "y": -0.62, "yanchor": "top"},
              "xaxis": {"title": {"text": t(lang, "fig.x_time")}, "range": ranges[0], "tickformat": "~s", "ticksuffix": "s"},
              "yaxis": {"title": {"text": t(lang, "fig.anim-5.2.y")}, "range": [0, line * 1.3], "tickformat": "~s",
                        "ticksuffix": "b/s"},
              "xaxis2": {"overlaying": "x", "range": [0, 1], "visible": False, "fixedrange": True},
              "yaxis2": {"overlaying": "y", "range": [0, 1], "visible": False, "fixedrange": True},
              "margin": {"t": 150, "b": 180},  # the title above, the buttons under it; the slider, then the legend
              "updatemenus": [{"type": "buttons", "direction": "right", "x": 0, "y": 1.04, "yanchor": "bottom",
                               "xanchor": "left",
                               "buttons": [{"label": t(lang, "fig.anim-5.2.zoom"), "method": "animate",
                                            "args": [None, play]},
                                           {"label": t(lang, "fig.anim-5.1.pause"), "method": "animate",
                                            "args": [[None], {"mode": "immediate",
                                                              "frame": {"duration": 0, "redraw": False}}]}]}],
              "sliders": [{"active": 0, "steps": slider, "x": 0, "len": 1, "y": -0.28, "yanchor": "top",
                           "currentvalue": {"visible": False}}],
              "meta": {"still": frames[-1]["name"], "step_s": b.step_s, "burst_s": b.burst_s, "window_s": window_s}}
    return {"data": data, "layout": layout, "frames": frames}
