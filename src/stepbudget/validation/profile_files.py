"""Write the profiles a calibration fitted: one file per group, atomically, only where they help.

A profile is written only if its leave-one-source-out error is no worse than the uncalibrated model's on
the same runs: a fit that does not carry to runs it never saw would make predictions worse, not better.
"""

from __future__ import annotations

import datetime
import os
from importlib.metadata import version
from collections.abc import Callable
from pathlib import Path

import yaml

from stepbudget.inputs.files import atomic_write, check_writable
from stepbudget.inputs.profiles import SCHEMA, parse_profile
from stepbudget.inputs.profiles import kind as parameter_kind
from stepbudget.validation.compare import Summary
from stepbudget.validation.fit import LOSS, GroupFit

WAYS = ("uncalibrated", "calibrated", "cross_validated")
"""The three errors every fit reports: the model as built, the fit on its own runs, each source held out."""


def _summary(s: Summary) -> dict:
    return {"n": s.n, "median_abs_error": s.median_abs_error, "p90_abs_error": s.p90_abs_error,
            "median_error": s.median_error}


def parameters_doc(fit: GroupFit) -> dict:
    out = {}
    for name in fit.names:
        kind = parameter_kind(name)
        lo, hi = fit.intervals[name]
        out[name] = {"value": fit.values[name], "interval_90": [lo, hi], "unit": kind.unit or "1",
                     "bounds": [kind.low, kind.high], "what": kind.what}
    return out


def errors_doc(fit: GroupFit) -> dict:
    return {way: {**_summary(fit.summaries[way][-1]),
                  "by_source": {s.source: _summary(s) for s in fit.summaries[way][:-1]}} for way in WAYS}


def profile_document(fit: GroupFit, name: str, files: list[str], command: str, tool_version: str, date: str) -> dict:
    """The profile file: its parameters, the runs it was fitted on, when and by what, and its errors."""
    return {
        "schema_version": SCHEMA,
        "profile": name,
        "description": f"Calibration of the operator model fitted on {len(fit.predictions)} measured runs"
                       + ("" if fit.group == "all" else f" (group: {fit.group})"),
        "fitted": {"date": date, "stepbudget": tool_version, "loss": f"{LOSS} on log(predicted / measured) step time",
                   "intervals": "90 % bootstrap percentile intervals over the runs"},
        "refit": command,
        "parameters": parameters_doc(fit),
        "fitted_on": {"files": files, "runs": [p.case.id for p in fit.predictions]},
        "error": {way: {**_summary(fit.summaries[way][-1]),
                        **({"method": "leave-one-source-out"} if way == "cross_validated" else {})} for way in WAYS},
    }




def target(out: str | os.PathLike, group: str, grouped: bool) -> Path:
    """Where a group's profile goes: ``out`` itself for one group, ``STEM-GROUP.yaml`` beside it otherwise, and
    ``GROUP.yaml`` inside ``out`` when it is a folder."""
    path = Path(out)
    if path.is_dir():
        return path / f"{group}.yaml"
    return path if not grouped else path.with_name(f"{path.stem}-{group}{path.suffix or '.yaml'}")


def refusal(fit: GroupFit) -> str | None:
    """Why ``fit``'s profile is not written (its cross-validated error is the worse), None when it is."""
    if not fit.worse_than_uncalibrated:
        return None
    cv, un = fit.overall["cross_validated"], fit.overall["uncalibrated"]
    cv_text = "not measured (one source)" if cv.median_abs_error is None else f"{cv.median_abs_error:.1%}"
    un_text = "-" if un.median_abs_error is None else f"{un.median_abs_error:.1%}"
    return (f"{fit.group}: its cross-validated median |error| {cv_text} is worse than the uncalibrated {un_text}; "
            "add runs from more sources or fit fewer parameters (--params)")


def _writer(text: str) -> Callable[[Path], object]:
    return lambda tmp: tmp.write_text(text, encoding="utf-8")


def write_profiles(fits: list[GroupFit], out: str | os.PathLike, name: str | None, files: list[str] | None,
                   command: str) -> tuple[list[str], str | None]:
    """Write each fit that helps; (the paths written, the refusals in one line or None)."""
    grouped = len(fits) > 1 or fits[0].group != "all"
    refused = [r for f in fits if (r := refusal(f))]
    written = []
    for f in fits:
        if refusal(f):
            continue
        path = target(out, f.group, grouped)
        check_writable(str(path), "--out")
        base = name or path.stem
        doc = profile_document(f, f"{base}-{f.group}" if grouped and name else base,
                               files or ["published_runs.yaml (shipped)"], command, version("stepbudget"),
                               datetime.date.today().isoformat())
        text = yaml.safe_dump(doc, sort_keys=False, width=110, allow_unicode=True)
        parse_profile(text, str(path))  # what is written must read back
        atomic_write(path, _writer(text), "--out")
        written.append(str(path))
    return written, "; ".join(refused) or None
