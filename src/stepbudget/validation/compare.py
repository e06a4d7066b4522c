"""Predicted against measured: step time and MFU per run, and the error summary per source.

The error of a run is ``predicted_step_s / measured_step_s - 1``: negative when the model is
too fast. Summaries use its absolute value: the median and the 90th percentile (numpy's
linear interpolation), per source and over every predictable run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from stepbudget.inputs.errors import OptionError
from stepbudget.budget.step import Budget, estimate
from stepbudget.inputs.profiles import load_profile
from stepbudget.inputs.scenario import Scenario
from stepbudget.plan.derive import derive
from stepbudget.validation.convert import Case, to_case
from stepbudget.validation.memory_fit import Fit, memory_fit
from stepbudget.validation.runs import Malformed, RunError, read_runs


@dataclass(frozen=True)
class Row:
    case: Case
    predicted_step_s: float | None
    predicted_mfu: float | None
    compute_s: float | None = None
    bubble_s: float | None = None
    exposed_comm_s: float | None = None
    calibrated_step_s: float | None = None
    """The step with the calibration profile ``validate`` was given (None without one)."""
    calibrated_mfu: float | None = None
    memory: Fit | None = None
    """The busiest GPU's predicted peak against its HBM: a published run ran, so it should fit."""

    @property
    def error(self) -> float | None:
        if self.predicted_step_s is None or not self.case.measured_step_s:
            return None
        return self.predicted_step_s / self.case.measured_step_s - 1

    @property
    def calibrated_error(self) -> float | None:
        if self.calibrated_step_s is None or not self.case.measured_step_s:
            return None
        return self.calibrated_step_s / self.case.measured_step_s - 1

    def calibrated(self) -> "Row":
        """This row with the calibrated step in place of the uncalibrated one (for summaries and figures)."""
        return dataclasses.replace(self, predicted_step_s=self.calibrated_step_s, predicted_mfu=self.calibrated_mfu)


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


def with_profile(sc: Scenario, profile: str) -> Scenario:
    """``sc`` run with calibration profile ``profile`` (checked by the caller with ``load_profile``)."""
    return sc.model_copy(update={"cluster": sc.cluster.model_copy(update={"profile": profile})})


def predict(case: Case, profile: str | None = None) -> Row:
    """The uncalibrated prediction of ``case``, and with ``profile`` the calibrated one beside it."""
    if case.scenario is None or case.reason is not None:
        return Row(case, None, None)
    row = _row(case, estimate(derive(case.scenario)))
    if profile is None:
        return row
    b = estimate(derive(with_profile(case.scenario, profile)))
    return dataclasses.replace(row, calibrated_step_s=float(b.step_s), calibrated_mfu=float(b.mfu))


def _row(case: Case, b: Budget) -> Row:
    """The row of a predicted run: its budget's terms, and its memory against its GPU's HBM."""
    return Row(case, float(b.step_s), float(b.mfu), float(b.compute_s), float(b.bubble_s), float(b.exposed_comm_s),
               memory=memory_fit(case))


def explain(paths: str | list[str] | None, run_id: str, profile: str | None = None) -> tuple[Row, Budget]:
    """One run of ``paths`` with its whole budget. ScenarioError when no run has ``run_id`` or the
    run cannot be turned into a scenario."""
    runs, bad = _runs(paths, strict=False)
    run = next((r for r in runs if r["id"] == run_id), None)
    malformed = next((m for m in bad if m.id == run_id), None)
    if malformed is not None:
        raise RunError(malformed.message)
    if run is None:
        example = f", e.g. {runs[0]['id']}" if runs else ""
        raise OptionError("run_id", f"no run {run_id!r} in the runs read; give an id that validate lists{example}")
    case = to_case(run)
    if case.scenario is None:
        raise OptionError("run_id", f"run {run_id!r} cannot be turned into a scenario: {case.reason}")
    if profile is not None:
        load_profile(profile)
    b = estimate(derive(case.scenario if profile is None else with_profile(case.scenario, profile)))
    return (Row(case, None, None) if case.reason is not None else _row(case, b)), b


def validate(paths: str | list[str] | None = None, progress: Callable[[int, int], None] | None = None, *,
             strict: bool = False, profile: str | None = None) -> tuple[list[Row], list[Summary]]:
    """Every run of ``paths`` (one file or several; default: the shipped file) predicted, and summaries per
    source then overall. ``progress(done, total)`` is called after each run. A malformed run is a row with
    its reason and no scenario (``strict``: RunError instead). With ``profile``, each row also carries the
    calibrated prediction."""
    if profile is not None:
        load_profile(profile)  # one line naming cluster.profile, before any run is read
    runs, bad = _runs(paths, strict)
    rows = [Row(_malformed_case(m), None, None) for m in bad]
    for run in runs:
        rows.append(predict(to_case(run), profile))
        if progress is not None:
            progress(len(rows) - len(bad), len(runs))
    return rows, summaries_of(rows)


def summaries_of(rows: list[Row]) -> list[Summary]:
    """Summaries per source (in the order the rows name them) then overall, of the rows with an error."""
    sources = list(dict.fromkeys(r.case.source for r in rows if r.error is not None))
    return [summarize(s, [r for r in rows if r.case.source == s]) for s in sources] + [summarize("all", rows)]


def _malformed_case(m: Malformed) -> Case:
    return Case(id=m.id, source="not read", gpus=0, framework="", scenario=None, reason=m.message,
                measured_step_s=None, measured_from="", measured_mfu=None)


def _runs(paths: str | list[str] | None, strict: bool = True) -> tuple[list[dict], list[Malformed]]:
    """The runs of one file or several, whose ids must not repeat across them, and the malformed ones
    (``strict``: RunError on the first)."""
    runs: list[dict] = []
    bad: list[Malformed] = []
    seen: dict[str, str | None] = {}  # run id -> the file it came from (None: the shipped one)
    for path in [paths] if paths is None or isinstance(paths, str) else paths:
        read, malformed = read_runs(path)
        if strict and malformed:
            raise RunError(malformed[0].message)
        bad += malformed
        for run in read:
            if run["id"] in seen:
                raise RunError(f"run {run['id']}: id: in both {seen[run['id']]} and {path}; give each run its own id")
            seen[run["id"]] = path
            runs.append(run)
    return runs, bad
