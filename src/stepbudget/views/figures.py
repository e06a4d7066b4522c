"""Figures: the scaling curve (chapter Figure 5.4) as HTML (plotly) or PNG/SVG (matplotlib).

Static images come from matplotlib so that no browser is needed; HTML embeds plotly's
script so the file opens offline. Files are written beside the target and renamed over it,
so a failed plot never leaves half a file where a good one was.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

from stepbudget.inputs.scenario import ScenarioError
from stepbudget.sweep.scaling import ScaleCurve

FORMATS = (".html", ".png", ".svg")

_TIMES = (("compute_s", "compute"), ("bubble_s", "bubble"), ("dp_s", "DP exchange"),
          ("exposed_comm_s", "exposed communication"), ("step_s", "step"))
_SHARES = (("comm_share", "communication share"), ("exposed_share", "exposed share"), ("mfu", "MFU"))


def _atomic(path: Path, write: Callable[[Path], None], option: str = "--plot") -> None:
    """Write ``path`` through a temporary file beside it, so a failure never leaves half a file;
    a path that cannot be written is a one-line input error naming ``option``."""
    tmp = path.with_name(f".{path.name}.partial-{os.getpid()}{path.suffix}")
    try:
        write(tmp)
        os.replace(tmp, path)
    except OSError as e:
        raise ScenarioError(f"{option}: cannot write {str(path)!r} ({e.strerror or e}); choose a writable path") from None
    finally:
        tmp.unlink(missing_ok=True)


def write_figure(path: str | os.PathLike, plotly_figure: Callable[[], Any], draw: Callable[[Path], None]) -> None:
    """Write ``path`` atomically: .html from ``plotly_figure()`` (its script embedded, so the file opens
    offline), .png/.svg by ``draw(tmp)`` with matplotlib."""
    path = Path(path)
    if path.suffix == ".html":
        _atomic(path, lambda tmp: plotly_figure().write_html(tmp, include_plotlyjs=True, full_html=True))
    else:
        _atomic(path, draw)


def _title(curve: ScaleCurve) -> str:
    sc = curve.scenario
    how = "best layout at each size" if curve.researched else (
        "TP{tp} CP{cp} PP{pp}".format(**curve.points[0].layout) + ", DP takes the rest")
    batch = "global batch fixed" if curve.mode == "strong" else "batch per replica fixed"
    return f"{sc.name}: {curve.mode} scaling ({batch}; {how})"


def scale_figure(curve: ScaleCurve, path: str | os.PathLike) -> None:
    """Write the scaling curve to ``path`` (.html, .png or .svg)."""
    write_figure(Path(path), lambda: _plotly(curve), lambda tmp: _matplotlib(curve, tmp))


def _plotly(curve: ScaleCurve):
    from plotly.subplots import make_subplots
    import plotly.graph_objects as go

    x = [p.gpus for p in curve.points]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("time per step (s)", "share of the step"))
    for key, name in _TIMES:
        fig.add_trace(go.Scatter(x=x, y=[getattr(p, key) for p in curve.points], name=name, mode="lines+markers"), 1, 1)
    for key, name in _SHARES:
        fig.add_trace(go.Scatter(x=x, y=[getattr(p, key) for p in curve.points], name=name, mode="lines+markers",
                                 line={"dash": "dot"}), 1, 2)
    fig.update_xaxes(type="log", title_text="GPUs", tickvals=x, ticktext=[f"{n:,}" for n in x])
    fig.update_yaxes(type="log", row=1, col=1)
    fig.update_yaxes(tickformat=".0%", range=[0, 1], row=1, col=2)
    fig.update_layout(title=_title(curve), template="plotly_white")
    return fig


def _matplotlib(curve: ScaleCurve, tmp: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [p.gpus for p in curve.points]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for key, name in _TIMES:
        left.plot(x, [getattr(p, key) for p in curve.points], marker="o", label=name)
    left.set(xscale="log", yscale="log", xlabel="GPUs", ylabel="seconds per step")
    for key, name in _SHARES:
        right.plot(x, [getattr(p, key) for p in curve.points], marker="o", linestyle=":", label=name)
    right.set(xscale="log", xlabel="GPUs", ylim=(0, 1))
    right.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    for ax in (left, right):
        ax.set_xticks(x, [f"{n:,}" for n in x], minor=False)
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(_title(curve), fontsize=10)
    fig.tight_layout()
    fig.savefig(tmp, format=tmp.suffix.lstrip("."))
    plt.close(fig)
