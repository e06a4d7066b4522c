"""Predicted against measured: step time and MFU per run, and the error summary per source.

The error of a run is ``predicted_step_s / measured_step_s - 1``: negative when the model is
too fast. Summaries use its absolute value: the median and the 90th percentile (numpy's
linear interpolation), per source and over every predictable run.
"""

from __future__ import annotations

from collections.abc import Callable

from dataclasses import dataclass

import numpy as np

from stepbudget.budget.step import Budget, estimate
from stepbudget.inputs.scenario import ScenarioError
from stepbudget.plan.derive import derive
from stepbudget.validation.convert import Case, to_case
from stepbudget.validation.runs import RunError, load_runs


@dataclass(frozen=True)
class Row:
    case: Case
    predicted_step_s: float | None
    predicted_mfu: float | None
    compute_s: float | None = None
    bubble_s: float | None = None
    exposed_comm_s: float | None = None

    @property
    def error(self) -> float | None:
        if self.predicted_step_s is None or not self.case.measured_step_s:
            return None
        return self.predicted_step_s / self.case.measured_step_s - 1


@dataclass(frozen=True)
class Summary:
    source: str
    n: int
    median_abs_error: float | None
    p90_abs_error: float | None
    max_abs_error: float | None
    median_error: float | None
    """Signed median: negative when the model is too fast."""


def summarize(source: str, rows: list[Row]) -> Summary:
    errors = np.array([r.error for r in rows if r.error is not None])
    if errors.size == 0:
        return Summary(source, 0, None, None, None, None)
    a = np.abs(errors)
    return Summary(source, int(errors.size), float(np.median(a)), float(np.percentile(a, 90)), float(a.max()),
                   float(np.median(errors)))


def predict(case: Case) -> Row:
    if case.scenario is None or case.reason is not None:
        return Row(case, None, None)
    return _row(case, estimate(derive(case.scenario)))


def _row(case: Case, b: Budget) -> Row:
    return Row(case, float(b.step_s), float(b.mfu), float(b.compute_s), float(b.bubble_s), float(b.exposed_comm_s))


def explain(paths: str | list[str] | None, run_id: str) -> tuple[Row, Budget]:
    """One run of ``paths`` with its whole budget. ScenarioError when no run has ``run_id`` or the
    run cannot be turned into a scenario."""
    runs = _runs(paths)
    run = next((r for r in runs if r["id"] == run_id), None)
    if run is None:
        example = f", e.g. {runs[0]['id']}" if runs else ""
        raise ScenarioError(f"run_id: no run {run_id!r} in the runs read; give an id that validate lists{example}")
    case = to_case(run)
    if case.scenario is None:
        raise ScenarioError(f"run_id: run {run_id!r} cannot be turned into a scenario: {case.reason}")
    b = estimate(derive(case.scenario))
    return (Row(case, None, None) if case.reason is not None else _row(case, b)), b


def validate(paths: str | list[str] | None = None,
             progress: Callable[[int, int], None] | None = None) -> tuple[list[Row], list[Summary]]:
    """Every run of ``paths`` (one file or several; default: the shipped file) predicted, and summaries per
    source then overall. ``progress(done, total)`` is called after each run."""
    runs = _runs(paths)
    rows = []
    for run in runs:
        rows.append(predict(to_case(run)))
        if progress is not None:
            progress(len(rows), len(runs))
    sources = list(dict.fromkeys(r.case.source for r in rows))
    summaries = [summarize(s, [r for r in rows if r.case.source == s]) for s in sources]
    return rows, summaries + [summarize("all", rows)]


def _runs(paths: str | list[str] | None) -> list[dict]:
    """The runs of one file or several, whose ids must not repeat across them."""
    runs: list[dict] = []
    seen: dict[str, str | None] = {}  # run id -> the file it came from (None: the shipped one)
    for path in [paths] if paths is None or isinstance(paths, str) else paths:
        for run in load_runs(path):
            if run["id"] in seen:
                raise RunError(f"run {run['id']}: id: in both {seen[run['id']]} and {path}; give each run its own id")
            seen[run["id"]] = path
            runs.append(run)
    return runs
