"""How long each figure takes: built (the library's numbers into a plotly dict), and written as HTML, PNG and SVG;
and how big each is. PNG and SVG side by side with the times of the plotly-to-matplotlib converter they replaced.

Run: python benchmarks/bench_figures.py [REPEATS]   (prints figures; not a test)

The web app draws the same dicts, so the build time is what a panel's figure costs the server; the JSON size
is what the page receives. PNG and SVG are drawn by plotly's static export in one headless Chromium for the
whole process: its start is timed once, on its own, and the times per figure are those of a browser already
running (as for a command's second figure, or a test process's). A command that writes one image pays the start
once (about 2-3 s here), less what it overlaps with its own work when it calls ``render.start`` first.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from stepbudget import api
from stepbudget.chapter.figures import FIGURES, build
from stepbudget.views import render
from stepbudget.views.simulation import step_plot
from stepbudget.views.wire import wire_plot

CONVERTER_MS = {  # (png, svg): the converter (views/render.py before issue 33), median of 3, on the 2-core dev box
    "5.1": (222, 171), "5.2": (444, 336), "5.3": (285, 208), "5.4": (408, 348), "5.5": (84, 66), "5.6": (388, 215),
    "5.7": (219, 173), "5.8": (194, 122), "5.9": (119, 84), "anim-5.1": (236, 169), "anim-5.2": (68, 47),
    "simulate": (12430, 12638), "wire": (165, 94),  # the commands' --plot: a step's 8,432 bars; one NIC's series
}


def _timed(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _figures():
    """(name, build time or None, figure): the chapter's figures, then two of the commands' --plot figures."""
    for ident in FIGURES:
        yield ident, build, build(ident)
    yield "simulate", None, step_plot(api.simulate("llama3-405b", link_rate=0.5).value)
    yield "wire", None, wire_plot(api.nic("llama3-405b").value)


def main(repeats: int = 3) -> None:
    build("5.2")  # imports and the presets' caches, once
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        render.write(build("5.5"), Path(folder) / "first.png")
        print(f"browser start and first PNG: {(time.perf_counter() - started) * 1e3:.0f} ms (once a process)\n")
        print(f"{'figure':<9} {'build':>8} {'json':>8} {'html':>8}   {'png: before':>11} {'after':>7}   "
              f"{'svg: before':>11} {'after':>7}   (median of {repeats}; before = the matplotlib converter)")
        for name, builder, fig in _figures():
            built = f"{_timed(lambda: builder(name), repeats) * 1e3:6.0f}ms" if builder else f"{'-':>8}"
            size = len(json.dumps(fig)) / 1e3
            written = {suffix: _timed(lambda: render.write(fig, Path(folder) / f"f{suffix}"), repeats)
                       for suffix in (".html", ".png", ".svg")}
            png, svg = CONVERTER_MS[name]
            print(f"{name:<9} {built} {size:6.0f}kB {written['.html'] * 1e3:6.0f}ms   {png:9.0f}ms "
                  f"{written['.png'] * 1e3:5.0f}ms   {svg:9.0f}ms {written['.svg'] * 1e3:5.0f}ms")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
