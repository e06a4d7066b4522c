"""Speed figures for calibration (stepbudget.validation.fit) over every shipped and example run.

Run: ``PYTHONPATH=src python benchmarks/bench_calibrate.py``. A script that prints figures, not a test.

1. Reading and converting the runs, and evaluating each run's budget on the fit's 41 rate scales.
2. One fit (robust least squares) of the default parameters over all runs, and of the generic profile's two.
3. Leave-one-source-out: one fit per source.
4. 200 bootstrap resamples of the generic fit.
5. The full model's step (what ``--profile`` gives) against the fit's interpolated one, over every run, with the
   values of the fit of every parameter (its GPU scales fall between the grid's points).
"""

from __future__ import annotations

import glob
import time
from pathlib import Path

import numpy as np

from stepbudget.validation.compare import _runs
from stepbudget.validation.convert import to_case
from stepbudget.validation.fit import (DEFAULT_PARAMS, bootstrap, fit_values, folds, parameter_names, point_of)

ROOT = Path(__file__).resolve().parents[1]


def _timed(label: str, work):
    start = time.perf_counter()
    out = work()
    print(f"{label:<58} {time.perf_counter() - start:8.3f} s")
    return out


def main() -> None:
    files = [str(ROOT / "src/stepbudget/validation/published_runs.yaml"), *sorted(glob.glob(str(ROOT / "examples/*_runs.yaml")))]
    runs = _timed("read and check the runs files", lambda: _runs(files, strict=False)[0])
    cases = _timed(f"convert {len(runs)} runs to scenarios", lambda: [to_case(r) for r in runs])
    usable = [c for c in cases if c.scenario is not None and c.reason is None and c.measured_step_s]
    points = _timed(f"budgets of {len(usable)} runs at 41 rate scales each", lambda: [point_of(c) for c in usable])
    every = parameter_names(points, DEFAULT_PARAMS)
    generic = parameter_names(points, ("microbatch_s", "routed_token_s"))
    values = _timed(f"one fit of {len(every)} parameters", lambda: fit_values(points, every))
    _timed(f"one fit of the generic profile's {len(generic)}", lambda: fit_values(points, generic))
    fs = folds(points)
    _timed(f"leave-one-source-out: {len(fs)} fits of {len(every)} parameters",
           lambda: [fit_values([points[i] for i in f.train], every) for f in fs])
    _timed("200 bootstrap resamples of the generic fit", lambda: bootstrap(points, generic, 200))
    exact = np.array([p.exact_s(values) for p in points])
    fast = np.array([p.step_s(values) for p in points])
    print(f"{'interpolated step against the full model, max |relative difference|':<58} "
          f"{np.max(np.abs(fast / exact - 1)):8.2e}")


if __name__ == "__main__":
    main()
