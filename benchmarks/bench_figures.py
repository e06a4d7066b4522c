"""How long each of the chapter's figures takes: built (the library's numbers into a plotly dict), and written
as HTML, PNG and SVG; and how big each is.

Run: python benchmarks/bench_figures.py [REPEATS]   (prints figures; not a test)

The web app draws the same dicts, so the build time is what a panel's figure costs the server; the JSON size
is what the page receives.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from stepbudget.chapter.figures import FIGURES, build
from stepbudget.views.render import write


def _timed(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(repeats: int = 3) -> None:
    build("5.2")  # imports and the presets' caches, once
    print(f"{'figure':<9} {'build':>8} {'json':>8} {'html':>8} {'png':>8} {'svg':>8}   (median of {repeats})")
    with tempfile.TemporaryDirectory() as folder:
        for ident in FIGURES:
            built = _timed(lambda: build(ident), repeats)
            fig = build(ident)
            size = len(json.dumps(fig)) / 1e3
            written = {suffix: _timed(lambda: write(fig, Path(folder) / f"f{suffix}"), repeats)
                       for suffix in (".html", ".png", ".svg")}
            print(f"{ident:<9} {built * 1e3:6.0f}ms {size:6.0f}kB " +
                  " ".join(f"{written[s] * 1e3:6.0f}ms" for s in (".html", ".png", ".svg")))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
