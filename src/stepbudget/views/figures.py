"""Figure files: the extensions ``--plot`` takes, the scaling curve, and the rule that a file is written whole
or not at all.

Every figure is one plotly figure dict, written by ``render.write``: HTML through plotly (its
script embedded, so the file opens offline), PNG or SVG through plotly's own static export (kaleido, drawing in a
headless Chrome or Chromium, with nothing fetched). ``inputs.files.atomic_write`` writes beside the target and
renames over it, so a failed plot never leaves half a file where a good one was. The scaling curve is the chapter's
Figure 5.4 (views/scaling.py).
"""

from __future__ import annotations

import os

from stepbudget.sweep.scaling import ScaleCurve
from stepbudget.views.scaling import scaling_figure

FORMATS = (".html", ".png", ".svg")


def scale_figure(curve: ScaleCurve, path: str | os.PathLike) -> None:
    """Write the scaling curve to ``path`` (.html, .png or .svg) as the chapter's Figure 5.4."""
    from stepbudget.views.render import write

    write(scaling_figure(curve), path, "--plot")
