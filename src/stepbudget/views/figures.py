"""Figure files: HTML (plotly) or PNG/SVG (matplotlib), written whole or not at all.

Static images come from matplotlib so that no browser is needed; HTML embeds plotly's
script so the file opens offline. Files are written beside the target and renamed over it,
so a failed plot never leaves half a file where a good one was. The scaling curve is the
chapter's Figure 5.4 (views/chapter).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

from stepbudget.inputs.scenario import ScenarioError
from stepbudget.sweep.scaling import ScaleCurve

FORMATS = (".html", ".png", ".svg")

def _atomic(path: Path, write: Callable[[Path], object], option: str = "--plot") -> None:
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


def scale_figure(curve: ScaleCurve, path: str | os.PathLike) -> None:
    """Write the scaling curve to ``path`` (.html, .png or .svg) as the chapter's Figure 5.4."""
    from stepbudget.views.chapter.measured import scaling_figure  # the chapter's figures write through _atomic
    from stepbudget.views.chapter.render import write

    write(scaling_figure(curve), path, "--plot")
