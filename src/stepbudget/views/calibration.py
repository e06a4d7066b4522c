"""A calibration's fits -> JSON-ready dict, rich tables, and the profile file's document."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from stepbudget.inputs.profiles import kind as parameter_kind
from stepbudget.validation.fit import GroupFit
from stepbudget.validation.profile_files import WAYS, errors_doc, parameters_doc

HEAD = {"uncalibrated": "uncalibrated", "calibrated": "in-sample", "cross_validated": "cross-validated"}


def fit_dict(fit: GroupFit) -> dict:
    return {"group": fit.group, "parameters": parameters_doc(fit), "error": errors_doc(fit),
            "runs": [{"id": p.case.id, "source": p.case.source, "measured_step_s": p.case.measured_step_s,
                      "uncalibrated_s": p.uncalibrated_s, "calibrated_s": p.calibrated_s,
                      "cross_validated_s": p.cross_validated_s} for p in fit.predictions]}


def calibration_dict(fits: list[GroupFit], written: list[str], refused: str | None) -> dict:
    """The ``calibrate --json`` object (keys documented in docs/commands/calibrate.md)."""
    return {"groups": [fit_dict(f) for f in fits], "written": written, "refused": refused}


def _pct(x: float | None, signed: bool = False) -> str:
    return "-" if x is None else f"{x:+.1%}" if signed else f"{x:.1%}"


def _number(x: float, unit: str) -> str:
    if unit != "s":
        return f"{x:.3f}"
    if x < 1e-10:  # a cost the fit left at its bound of 0 (or a bootstrap draw a hair above it): under 0.1 ns
        return "0"
    return f"{x * 1e9:.3g} ns" if x < 1e-6 else f"{x * 1e6:.3g} us" if x < 1e-3 else \
        f"{x * 1e3:.3g} ms" if x < 1 else f"{x:.3g} s"


def parameters_table(fit: GroupFit) -> Table:
    t = Table(title=f"Parameters fitted ({fit.group}, {len(fit.predictions)} runs; 90 % bootstrap interval)",
              title_justify="left")
    for col in ("parameter", "value", "interval", "what"):
        t.add_column(col, justify="left" if col in ("parameter", "what") else "right")
    for name in fit.names:
        kind = parameter_kind(name)
        lo, hi = fit.intervals[name]
        t.add_row(name, _number(fit.values[name], kind.unit), f"{_number(lo, kind.unit)} .. {_number(hi, kind.unit)}",
                  kind.what)
    return t


def errors_table(fit: GroupFit) -> Table:
    t = Table(title=f"Step-time error by source ({fit.group}): median |error| (signed median)", title_justify="left")
    t.add_column("source")
    t.add_column("runs", justify="right")
    for way in WAYS:
        t.add_column(HEAD[way], justify="right")
    rows = zip(*(fit.summaries[w] for w in WAYS))
    for summaries in rows:
        first = summaries[0]
        cells = [f"{_pct(s.median_abs_error)} ({_pct(s.median_error, True)})" for s in summaries]
        t.add_row(Text(first.source, style="bold" if first.source == "all" else ""), str(first.n), *cells)
    overall = fit.summaries["cross_validated"][-1]
    t.caption = (f"cross-validated: each source predicted by a fit made without it (leave-one-source-out); "
                 f"p90 {_pct(overall.p90_abs_error)}, uncalibrated p90 "
                 f"{_pct(fit.summaries['uncalibrated'][-1].p90_abs_error)}")
    t.caption_justify = "left"
    return t


def calibration_tables(fits: list[GroupFit], written: list[str], refused: str | None) -> list:
    out: list = []
    for f in fits:
        out += [parameters_table(f), errors_table(f)]
    out += [f"wrote {w}" for w in written]
    if refused:
        out.append(f"[bold red]not written[/bold red]: {refused}")
    return out
