"""A chapter figure, a plain plotly figure dict, written as a file: HTML through plotly (its script inlined,
so the file opens offline and keeps its interactivity), PNG or SVG through matplotlib (no browser needed).

The matplotlib side draws what the chapter's and the commands' ``--plot`` figures use of plotly: scatter
(lines, markers, text), bars (horizontal or vertical, with a base), heat maps with their colour scale and
colour bar title, rectangles and lines as shapes, text annotations, log axes, several axes placed by their
domains, margins in pixels and a legend placed by its anchors. An animation is drawn at its still.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path

from stepbudget.inputs.files import atomic_write

COLORS = ["#3b6ea8", "#d1603d", "#5aa469", "#8e6bb8", "#c49a2c", "#4aa3a1", "#b8527a", "#7a7a7a"]
"""The figures' palette, one colour a series in order (chapter figures, the commands' --plot)."""
FORMATS = (".html", ".png", ".svg")
_DASH = {"dot": ":", "dash": "--", "dashdot": "-.", "solid": "-", None: "-"}
_SYMBOL = {"circle": "o", "circle-open": "o", "square": "s", "square-open": "s", "line-ns-open": "|", "diamond": "D",
           "x": "x", "triangle-up": "^", None: "o"}


def write(figure: dict, path: str | os.PathLike, option: str = "--out") -> None:
    """Write ``figure`` to ``path`` (.html, .png or .svg) through a temporary file beside it."""
    path = Path(path)
    if path.suffix == ".html":
        import plotly.io as pio

        atomic_write(path, lambda tmp: pio.write_html(figure, tmp, include_plotlyjs=True, full_html=True,
                                                 auto_play=False), option)
    else:
        atomic_write(path, lambda tmp: draw(figure, tmp), option)


def _axis_name(ref: str, kind: str) -> str:
    return kind + "axis" + ref[1:]  # "x2" -> "xaxis2", "x" -> "xaxis"


def draw(figure: dict, path: Path) -> None:
    """The figure's first frame as a static image (the format from ``path``'s suffix)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure = _still(figure)
    layout = figure.get("layout", {})
    width, height = layout.get("width", 1000) / 100, layout.get("height", 520) / 100
    plt.rcParams["font.family"] = _fonts()
    fig = plt.figure(figsize=(width, height))
    shown = layout.get("showlegend", True) and any(tr.get("name") and tr.get("showlegend", True)
                                                   for tr in figure.get("data", []))
    below = shown and layout.get("legend", {}).get("orientation") == "h"
    title = layout.get("title", {})
    text = title.get("text", "") if isinstance(title, dict) else str(title or "")
    heading = wrap(text.replace("<br>", " "), int(width * 11.5)) if text else ""
    lower = 0.05 * heading.count("\n")  # a second line of title takes from the plot, not from what is above it
    area = _area(layout, below, lower)
    axes: dict[tuple[str, str], object] = {}
    traces = figure.get("data", [])
    pairs = [(trace.get("xaxis", "x"), trace.get("yaxis", "y")) for trace in traces]
    bars = {pair: [i for i, (p, tr) in enumerate(zip(pairs, traces)) if p == pair and tr.get("type") == "bar"]
            for pair in pairs}  # barmode "group": each bar trace of an axes gets its own slot in a category
    for i, (pair, trace) in enumerate(zip(pairs, traces)):
        if pair not in axes:
            axes[pair] = _axes(fig, layout, area, *pair)
        slot = (bars[pair].index(i), len(bars[pair])) if i in bars[pair] else (0, 1)
        _trace(axes[pair], trace, layout, slot)
    if not axes:
        axes[("x", "y")] = _axes(fig, layout, area, "x", "y")
    for (x, y), ax in axes.items():
        _style(ax, layout.get(_axis_name(x, "x"), {}), layout.get(_axis_name(y, "y"), {}))
    for shape in layout.get("shapes", []):
        _shape(_where(fig, axes, area, shape.get("xref", "x"), shape.get("yref", "y")), shape)
    for note in layout.get("annotations", []):
        at = dict(note)
        for dim in ("x", "y"):  # plotly places a note on a log axis by the logarithm of its value
            ref = note.get(f"{dim}ref", dim)
            if not ref.endswith(("paper", "domain")) and layout.get(_axis_name(ref, dim), {}).get("type") == "log":
                at[dim] = 10 ** note[dim]
        _annotate(_where(fig, axes, area, note.get("xref", "x"), note.get("yref", "y")), at)
    if heading:
        fig.suptitle(heading, fontsize=11)
    if shown:
        _legend(fig, axes, layout.get("legend", {}), below)
    for ax in axes.values():
        _unsnap_thin_bars(ax)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a missing CJK glyph is drawn as a box, not an error
        fig.savefig(path, format=path.suffix.lstrip("."), dpi=100)
    plt.close(fig)


def _still(figure: dict) -> dict:
    """The frame an animation is drawn at as a still: ``layout.meta.still`` (its last state, where the story
    ends), applied over the first; a figure without frames is itself."""
    name = (figure.get("layout", {}).get("meta") or {}).get("still")
    frame = next((f for f in figure.get("frames", []) if f.get("name") == name), None)
    if frame is None:
        return figure
    data = [dict(trace) for trace in figure["data"]]
    for index, update in zip(frame.get("traces", range(len(frame["data"]))), frame["data"]):
        data[index].update({k: v for k, v in update.items() if k != "type"})
    # the margin makes room for the play buttons and slider, which a still does not draw
    layout = {k: v for k, v in figure["layout"].items() if k != "margin"}
    for key, value in frame.get("layout", {}).items():
        layout[key] = {**layout.get(key, {}), **value} if isinstance(value, dict) else value
    return {"data": data, "layout": layout}


def wrap(text: str, columns: int) -> str:
    """Break a title into lines of at most ``columns`` Latin letters' width, a CJK character counting two,
    at a space where there is one."""
    import unicodedata

    lines, line, width = [], "", 0
    for ch in text:
        w = 2 if unicodedata.east_asian_width(ch) in "WF" else 1
        if width + w > columns:
            cut = line.rfind(" ")
            head, line = (line[:cut], line[cut + 1:]) if cut > 0 else (line, "")
            lines.append(head)
            width = sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in line)
        line += ch
        width += w
    return "\n".join([*lines, line])


@dataclass(frozen=True)
class _Area:
    """Where plotly's "paper" (the plotting area all axes share) lies on the matplotlib figure."""

    left: float
    bottom: float
    width: float
    height: float


def _area(layout: dict, below: bool, lower: float) -> _Area:
    """The paper's place: plotly's ``layout.margin`` in pixels on each side it gives; otherwise fractions of the
    figure that leave room for a title above and the tick labels, or a legend below (``below``), under it."""
    width, height, margin = layout.get("width", 1000), layout.get("height", 520), layout.get("margin", {})
    left = margin["l"] / width if "l" in margin else 0.12
    right = 1 - margin["r"] / width if "r" in margin else 0.97
    bottom = margin["b"] / height if "b" in margin else (0.25 if below else 0.1)
    top = 1 - margin["t"] / height if "t" in margin else (0.88 if below else 0.86)
    return _Area(left, bottom, right - left, top - bottom - lower)


def _legend(fig, axes: dict, legend: dict, below: bool) -> None:
    """One legend for all axes, each label once: under the plot (``below``) or inside the first axes."""
    handles, labels = [], []
    for ax in axes.values():
        for h, label in zip(*ax.get_legend_handles_labels()):
            if label not in labels and not label.startswith("_"):
                handles.append(h)
                labels.append(label)
    if not handles:
        return
    if below:
        fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=min(len(labels), 4), frameon=False)
    else:
        next(iter(axes.values())).legend(handles, labels, fontsize=8, loc=_legend_place(legend))


def _legend_place(legend: dict) -> str:
    """A legend inside the plot as matplotlib places it: by plotly's ``xanchor`` and ``yanchor`` when given
    (``right`` and ``bottom`` -> "lower right"), else where it covers the least."""
    if "xanchor" not in legend and "yanchor" not in legend:
        return "best"
    vertical = {"top": "upper", "middle": "center", "bottom": "lower"}.get(legend.get("yanchor", "top"), "upper")
    horizontal = {"left": "left", "center": "center", "right": "right"}.get(legend.get("xanchor", "left"), "left")
    return "center" if vertical == horizontal == "center" else f"{vertical} {horizontal}"


def _where(fig, axes: dict, area: _Area, xref: str, yref: str):
    """A transform placing a shape or note given in plotly's references: data ("x2"), an axis's domain
    ("x2 domain") or the paper, each dimension on its own."""
    from matplotlib.transforms import Affine2D, blended_transform_factory

    paper = Affine2D().scale(area.width, area.height).translate(area.left, area.bottom) + fig.transFigure

    def one(ref: str, dim: int):
        if ref == "paper":
            return paper, None
        base = ref.split()[0]
        ax = next((a for pair, a in axes.items() if pair[dim] == base), next(iter(axes.values())))
        return (ax.transAxes if ref.endswith("domain") else ax.transData), ax

    (tx, ax_x), (ty, ax_y) = one(xref, 0), one(yref, 1)
    return blended_transform_factory(tx, ty), ax_x or ax_y or next(iter(axes.values()))


_CJK = ("Noto Sans CJK TC", "Noto Sans CJK JP", "Noto Sans CJK SC", "Noto Serif CJK TC", "WenQuanYi Zen Hei",
        "AR PL UMing TW", "Droid Sans Fallback")
"""Fonts with Traditional Chinese glyphs, tried after DejaVu Sans (Debian's fonts-noto-cjk gives the first)."""


def _fonts() -> list[str]:
    """DejaVu Sans, then the first CJK family installed: matplotlib falls back glyph by glyph (3.6 and later)."""
    import logging

    from matplotlib import font_manager

    logging.getLogger("matplotlib.font_manager").setLevel(logging.ERROR)
    installed = {f.name for f in font_manager.fontManager.ttflist}
    return ["DejaVu Sans", *[name for name in _CJK if name in installed][:1]]


def _axes(fig, layout: dict, area: _Area, x: str, y: str):
    xd = layout.get(_axis_name(x, "x"), {}).get("domain", [0, 1])
    yd = layout.get(_axis_name(y, "y"), {}).get("domain", [0, 1])
    left, bottom = area.left + area.width * xd[0], area.bottom + area.height * yd[0]
    return fig.add_axes([left, bottom, area.width * (xd[1] - xd[0]) - 0.02, area.height * (yd[1] - yd[0]) - 0.02])


def _color(value):
    """A plotly colour as matplotlib takes it: "rgba(192,57,43,0.35)" becomes a tuple of fractions."""
    if isinstance(value, str) and value.startswith("rgb"):
        parts = [float(v) for v in value[value.index("(") + 1:-1].split(",")]
        return (*[v / 255 for v in parts[:3]], *(parts[3:] or [1.0]))
    return value


def _colors(value, n: int) -> list:
    return [_color(v) for v in value] if isinstance(value, (list, tuple)) else [_color(value)] * n


def _places(ax, values: list, axis: dict) -> list[float]:
    """Positions for a trace's places: numbers as they are, categories by the axis's order (plotly's rule:
    ``categoryarray`` when given, else first seen first), remembered on the axes for its tick labels."""
    if not values or not isinstance(values[0], str):
        return [float(v) for v in values]
    order: list[str] = ax.__dict__.setdefault("_sb_categories", list(axis.get("categoryarray") or []))
    for v in values:
        if v not in order:
            order.append(v)
    return [float(order.index(v)) for v in values]


def _trace(ax, t: dict, layout: dict, slot: tuple[int, int] = (0, 1)) -> None:
    kind = t.get("type", "scatter")
    name = t.get("name") if t.get("showlegend", True) else None
    if kind == "bar":
        _bars(ax, t, layout, slot, name)
    elif kind == "heatmap":
        _heatmap(ax, t)
    else:
        mode = t.get("mode", "lines+markers")
        line, marker = t.get("line", {}), t.get("marker", {})
        style = dict(color=line.get("color") or (marker.get("color") if isinstance(marker.get("color"), str) else None),
                     label=name, linestyle=_DASH.get(line.get("dash")) if "lines" in mode else "none",
                     marker=_SYMBOL.get(marker.get("symbol")) if "markers" in mode else None,
                     linewidth=line.get("width", 1.5), markersize=marker.get("size", 6) * 0.75)
        if marker.get("symbol", "").endswith("-open"):
            style["markerfacecolor"] = "none"
        if line.get("shape") == "hv":
            style["drawstyle"] = "steps-post"
        xs, ys = list(t.get("x", [])), list(t.get("y", []))
        if ys and isinstance(ys[0], str):  # a category axis: the positions the bars of that axis use
            ys = _places(ax, ys, layout.get(_axis_name(t.get("yaxis", "y"), "y"), {}))
        if "lines" in mode or "markers" in mode:
            ax.plot(xs, ys, **style)
        if "text" in mode:
            for x, y, text in zip(xs, ys, t.get("text") or []):
                ax.annotate(str(text), (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")


def _bars(ax, t: dict, layout: dict, slot: tuple[int, int], name: str | None) -> None:
    """A bar trace: horizontal or vertical, on numbers or categories, with a base, stacked or grouped by
    ``layout.barmode`` (``slot``: this trace's place among the axes' bar traces, and their count)."""
    horizontal = t.get("orientation") == "h"
    values, places = (t["x"], t["y"]) if horizontal else (t["y"], t["x"])
    axis = layout.get(_axis_name(t.get("yaxis" if horizontal else "xaxis", "y" if horizontal else "x"),
                                 "y" if horizontal else "x"), {})
    at = _places(ax, list(places), axis)
    colors = _colors(t.get("marker", {}).get("color"), len(values))
    base = _colors(t.get("base", 0), len(values))
    if layout.get("barmode") == "stack":  # each bar starts where the last trace's bar at its place ended
        stack: dict = ax.__dict__.setdefault("_sb_stack", {})
        base = [stack.get(p, 0.0) for p in at]
        for p, v in zip(at, values):
            stack[p] = stack.get(p, 0.0) + float(v)
    size = t.get("width", 0.8)
    if layout.get("barmode") == "group" and slot[1] > 1:
        size /= slot[1]
        at = [p + (slot[0] - (slot[1] - 1) / 2) * size for p in at]
    draw = ax.barh if horizontal else ax.bar
    edge = t.get("marker", {}).get("line", {}) if len(values) <= 60 else {}  # edges would wash out thin bars
    bars = draw(at, values, size, base, color=colors, label=name, zorder=2, edgecolor=_color(edge.get("color")),
                linewidth=edge.get("width", 0))
    for bar, text in zip(bars, t.get("text") or []):
        if text:
            cx, cy = bar.get_x() + bar.get_width() / 2, bar.get_y() + bar.get_height() / 2
            ax.text(cx, cy, str(text), ha="center", va="center", fontsize=7)
    categories = ax.__dict__.get("_sb_categories")
    if categories:
        margin = layout.get("margin", {})  # a row's label may be as wide as the left margin (7 px a letter)
        columns = max(14, int(margin["l"] / 7)) if horizontal and "l" in margin else 14
        (ax.set_yticks if horizontal else ax.set_xticks)(range(len(categories)),
                                                         [wrap(c, columns) for c in categories])


def _unsnap_thin_bars(ax) -> None:
    """Draw a bar thinner than a pixel by its coverage. Matplotlib snaps a bar's edges to whole pixels, so such a
    bar comes out a pixel wide or not at all by where it falls (a step's 1 ms sends among 7 s look bunched or
    missing); wider bars keep their snapped edges, which leave no seam between neighbours."""
    ax.get_xlim(), ax.get_ylim()  # settle the autoscaled limits, so that transData is final
    for container in ax.containers:
        for bar in container:
            (x0, y0), (x1, y1) = ax.transData.transform([(bar.get_x(), bar.get_y()),
                                                         (bar.get_x() + bar.get_width(), bar.get_y() + bar.get_height())])
            if min(abs(x1 - x0), abs(y1 - y0)) < 1:
                bar.set_snap(False)


def _heatmap(ax, t: dict) -> None:
    import numpy as np

    z = np.asarray(t["z"], dtype=float)
    # rows bottom-up, as plotly draws them: a reversed y axis then puts row 0 at the top, as it does there;
    # over the grid (zorder 1.5), which plotly draws beneath its traces
    image = ax.imshow(z, aspect="auto", cmap=_colormap(t.get("colorscale")), vmin=t.get("zmin"), vmax=t.get("zmax"),
                      origin="lower", zorder=2)
    bar = ax.figure.colorbar(image, ax=ax, fraction=0.04)
    title = t.get("colorbar", {}).get("title", {})
    bar.set_label(title.get("text", "") if isinstance(title, dict) else str(title or ""), fontsize=9)


def _colormap(scale) -> str:
    """A named plotly colour scale as the matplotlib colour map of that name ("Magma" -> "magma"); plotly's
    default, or a scale given as a list of stops, is drawn in viridis."""
    from matplotlib import colormaps

    name = scale.lower() if isinstance(scale, str) else ""
    return name if name in colormaps else "viridis"


def _style(ax, xaxis: dict, yaxis: dict) -> None:
    import matplotlib.ticker as ticker

    for axis, spec, setter in ((ax.xaxis, xaxis, "x"), (ax.yaxis, yaxis, "y")):
        title = spec.get("title", {})
        label = title.get("text", "") if isinstance(title, dict) else str(title or "")
        getattr(ax, f"set_{setter}label")(label, fontsize=9)
        if spec.get("type") == "log":
            getattr(ax, f"set_{setter}scale")("log")
            if spec.get("tickformat") is None and spec.get("tickvals") is None:
                axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
            axis.set_minor_formatter(ticker.NullFormatter())  # as plotly: labels at the major (or given) ticks only
            lo, hi = spec.get("range", (None, None))
            if lo is not None:
                getattr(ax, f"set_{setter}lim")(10 ** lo, 10 ** hi)
        elif spec.get("range"):
            getattr(ax, f"set_{setter}lim")(*spec["range"])
        if spec.get("autorange") == "reversed":
            getattr(ax, f"invert_{setter}axis")()
        if spec.get("tickvals") is not None:
            getattr(ax, f"set_{setter}ticks")(spec["tickvals"], spec.get("ticktext") or None, fontsize=8)
        if str(spec.get("tickformat", "")).endswith("%"):
            axis.set_major_formatter(ticker.PercentFormatter(1.0))
        elif spec.get("tickvals") is None and (spec.get("tickformat") == "~s" or spec.get("ticksuffix")):
            axis.set_major_formatter(ticker.EngFormatter(unit=spec.get("ticksuffix", ""), sep=" "))
        if spec.get("showticklabels") is False:
            getattr(ax, f"set_{setter}ticklabels")([])
    ax.tick_params(labelsize=8)
    ax.grid(True, alpha=0.25)


def _shape(where, s: dict) -> None:
    from matplotlib.patches import Rectangle

    transform, ax = where
    line = s.get("line", {})
    z = 0 if s.get("layer") == "below" else 3
    if s.get("type") == "rect":
        ax.add_patch(Rectangle((s["x0"], s["y0"]), s["x1"] - s["x0"], s["y1"] - s["y0"], transform=transform,
                               facecolor=s.get("fillcolor", "none"), edgecolor=line.get("color", "none"),
                               linewidth=line.get("width", 0), alpha=s.get("opacity", 1), zorder=z))
    elif s.get("type") == "line":
        ax.plot([s["x0"], s["x1"]], [s["y0"], s["y1"]], color=line.get("color", "grey"), transform=transform,
                linestyle=_DASH.get(line.get("dash")), linewidth=line.get("width", 1), zorder=z)


def _annotate(where, a: dict) -> None:
    transform, ax = where
    ax.annotate(str(a.get("text", "")), (a["x"], a["y"]), xycoords=transform, fontsize=8,
                ha={"left": "left", "right": "right"}.get(a.get("xanchor", ""), "center"),
                arrowprops={"arrowstyle": "->"} if a.get("showarrow") else None, annotation_clip=False)
