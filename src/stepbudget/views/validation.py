"""Validation rows -> JSON-ready dict, rich tables and Figure 5.5 (measured vs predicted MFU)."""

from __future__ import annotations

from dataclasses import dataclass

import os

from rich.table import Table
from rich.text import Text

from stepbudget.units import fmt_time
from stepbudget.validation.compare import Row, Summary
from stepbudget.views import fmt
from stepbudget.views.i18n import t
from stepbudget.views.render import COLORS


def validation_dict(rows: list[Row], summaries: list[Summary], calibrated: list[Summary] | None = None,
                    profile: str = "none") -> dict:
    """The `validate --json` object (keys documented in docs/commands/validate.md); with a profile, the
    calibrated summaries beside the uncalibrated ones."""
    doc = {"profile": profile, "runs": [_run_dict(r) for r in rows], **_summaries_dict(summaries)}
    if calibrated is not None:
        doc["calibrated"] = _summaries_dict(calibrated)
    return doc


def _summaries_dict(summaries: list[Summary]) -> dict:
    overall = summaries[-1]
    return {
        "summary": {"n": overall.n, "median_abs_error": overall.median_abs_error,
                    "p90_abs_error": overall.p90_abs_error, "median_error": overall.median_error},
        "by_source": {s.source: {"n": s.n, "median_abs_error": s.median_abs_error, "p90_abs_error": s.p90_abs_error,
                                 "max_abs_error": s.max_abs_error, "median_error": s.median_error}
                      for s in summaries[:-1]},
    }


def _run_dict(r: Row) -> dict:
    return {"id": r.case.id, "source": r.case.source, "gpus": r.case.gpus, "framework": r.case.framework,
            "measured_step_s": r.case.measured_step_s, "measured_from": r.case.measured_from or None,
            "predicted_step_s": r.predicted_step_s, "error": r.error,
            "measured_mfu": r.case.measured_mfu, "predicted_mfu": r.predicted_mfu,
            "compute_s": r.compute_s, "bubble_s": r.bubble_s, "exposed_comm_s": r.exposed_comm_s,
            "calibrated_step_s": r.calibrated_step_s, "calibrated_error": r.calibrated_error,
            "memory_peak_bytes": r.memory.predicted_peak_bytes if r.memory else None,
            "memory_hbm_bytes": r.memory.hbm_bytes if r.memory else None,
            "fits": r.memory.fits if r.memory else None,
            "skipped": r.case.reason, "assumptions": r.case.assumptions,
            "measured_figures": [{"figure": how, "step_s": step} for step, how in r.case.measured_figures]}


def explain_dict(r: Row, budget_doc: dict) -> dict:
    """The `validate --explain ID --json` object: the run's row, the scenario it became, its budget."""
    sc = r.case.scenario  # explain() refuses a run without one; a row of any other run shows null
    return {"run": _run_dict(r), "scenario": None if sc is None else sc.model_dump(mode="json"), "budget": budget_doc}


def explain_lines(r: Row) -> list[str]:
    """What one run became: measured against predicted, how the step was measured, what was assumed."""
    c = r.case
    measured = fmt_time(c.measured_step_s) if c.measured_step_s else f"none ({c.reason})"
    how = f" ({c.measured_from})" if c.measured_from and c.measured_from != "step_time_s" else ""
    predicted = fmt_time(r.predicted_step_s) if r.predicted_step_s is not None else "-"
    lines = [f"[bold]{c.id}[/bold] ({c.source}, {c.gpus:,} GPUs, {c.framework or 'framework not stated'}): "
             f"measured {measured}{how}, predicted {predicted}, error {_pct(r.error, signed=True)}"]
    if len(c.measured_figures) > 1:
        lines.append("Each figure the source prints, as a step: " + "; ".join(
            f"{how.split()[0]} {fmt_time(step)}" for step, how in c.measured_figures))
    if c.assumptions:
        lines.append("Assumed where the source is silent:")
        lines += [f"  {a}" for a in c.assumptions]
    return lines


def _pct(x: float | None, signed: bool = False) -> str:
    return "-" if x is None else f"{x:+.1%}" if signed else f"{x:.1%}"


def _time(x: float | None) -> str:
    return "-" if x is None else fmt_time(x)


def _styled(error: float | None) -> Text:
    style = "" if error is None or abs(error) <= 0.10 else "yellow" if abs(error) <= 0.25 else "red"
    return Text(_pct(error, True), style=style)


def runs_table(rows: list[Row], profile: str | None = None) -> Table:
    """Each predicted run's measured and predicted step; with ``profile``, the calibrated step beside them."""
    t = Table(title="Predicted against measured (step time; error = predicted / measured - 1)", title_justify="left")
    cols = ["run", "GPUs", "measured", "predicted", "error", *(["calibrated", "error cal."] if profile else []),
            "MFU meas.", "MFU pred.", "HBM"]
    for col in cols:
        t.add_column(col, justify="left" if col == "run" else "right")
    # a row with an error has both step times, so _time never shows "-" here
    shown = [(r, error) for r in rows if (error := r.error) is not None]
    for r, error in shown:
        derived = "" if r.case.measured_from == "step_time_s" else "*"
        calibrated: list[str | Text] = [_time(r.calibrated_step_s), _styled(r.calibrated_error)] if profile else []
        t.add_row(r.case.id, f"{r.case.gpus:,}", _time(r.case.measured_step_s) + derived, _time(r.predicted_step_s),
                  _styled(error), *calibrated, _pct(r.case.measured_mfu), _pct(r.predicted_mfu), _hbm(r))
    if any(r.case.measured_from != "step_time_s" for r, _ in shown):
        t.caption = ("* measured step derived from the source's throughput, or its TFLOP/s or MFU with its FLOP "
                     "convention")
        t.caption_justify = "left"
    return t


def _hbm(r: Row) -> Text:
    """The busiest GPU's predicted peak as a share of its HBM; red past 100 % (it ran, so the model is wrong)."""
    if r.memory is None:
        return Text("-")
    return Text(f"{r.memory.predicted_peak_bytes / r.memory.hbm_bytes:.0%}", style="" if r.memory.fits else "red")


def memory_lines(rows: list[Row]) -> list[str]:
    """The runs predicted not to fit their GPU even with what their framework offers where they are silent (the
    conversion assumed it): each ran, so each is a memory-model error."""
    over = [r for r in rows if r.memory is not None and not r.memory.fits]
    if not over:
        return []
    return [f"[bold]Predicted not to fit ({len(over)}; each ran, with what it states and what its framework offers "
            "where it is silent, so each is a memory-model error)[/bold]",
            *(f"  {r.case.id}: {r.memory.predicted_peak_bytes / 1e9:.1f} GB of {r.memory.hbm_bytes / 1e9:.1f} GB"
              for r in over if r.memory)]


def in_fit_count(rows: list[Row], fitted: frozenset[str]) -> int:
    """How many of the calibrated rows are runs the profile was fitted on."""
    return sum(1 for r in rows if r.calibrated_error is not None and r.case.id in fitted)


def in_fit_line(rows: list[Row], fitted: frozenset[str]) -> list[str]:
    """Says which calibrated errors are in-sample: those of runs the profile was fitted on."""
    n, of = in_fit_count(rows, fitted), sum(1 for r in rows if r.calibrated_error is not None)
    if not of:
        return []
    said = "none of them in-sample" if not n else f"{n} in-sample (runs it was fitted on)"
    return [f"calibrated errors: {of} runs, {said}; `stepbudget calibrate` gives the cross-validated error"]


def ablation_table(rows: list) -> Table:
    """Published ablation steps: the source's MFU gain beside the model's, in MFU points."""
    t = Table(title="Published ablations: MFU gain of each step, source against model", title_justify="left")
    for col in ("study", "step", "paper MFU", "paper gain", "model MFU", "model gain", "gain error"):
        t.add_column(col, justify="left" if col in ("study", "step") else "right")
    for a in rows:
        model = (f"{a.predicted_gain_pts:+.1f}", f"{a.gain_error_pts:+.1f}") if a.modelled else ("(not modelled)", "-")
        t.add_row(a.id, a.step, f"{a.measured_after_mfu:.1%}", f"{a.measured_gain_pts:+.1f}",
                  f"{a.predicted_after_mfu:.1%}", *model)
    return t


def ablation_dict(rows: list) -> list[dict]:
    return [{"study": a.id, "step": a.step, "modelled": a.modelled, "measured_mfu": a.measured_after_mfu,
             "measured_gain_pts": a.measured_gain_pts, "predicted_mfu": a.predicted_after_mfu,
             "predicted_gain_pts": a.predicted_gain_pts} for a in rows]


def summary_table(summaries: list[Summary], calibrated: list[Summary] | None = None,
                  profile: str | None = None) -> Table:
    """Absolute error by source; with a profile's summaries, uncalibrated and calibrated side by side."""
    title = "Absolute step-time error by source" + (f" (calibrated: profile {profile})" if calibrated else "")
    t = Table(title=title, title_justify="left")
    cols = ["source", "runs", "median", "p90", "max", "signed median"]
    cols += ["median cal.", "p90 cal.", "signed cal."] if calibrated else []
    for col in cols:
        t.add_column(col, justify="left" if col == "source" else "right")
    by_source = {s.source: s for s in calibrated or []}
    for s in summaries:
        c = by_source.get(s.source)
        more = [_pct(c.median_abs_error), _pct(c.p90_abs_error), _pct(c.median_error, True)] if c else []
        t.add_row(Text(s.source, style="bold" if s.source == "all" else ""), str(s.n), _pct(s.median_abs_error),
                  _pct(s.p90_abs_error), _pct(s.max_abs_error), _pct(s.median_error, True), *more)
    return t


def skipped_lines(rows: list[Row]) -> list[str]:
    """One line per run not predicted: its id and why (a malformed run's reason already names it)."""
    return [f"{r.case.id}: {str(r.case.reason).removeprefix(f'run {r.case.id}: ')}" for r in rows if r.error is None]


def figure_5_5(rows: list[Row], path: str | os.PathLike, profile: str | None = None) -> None:
    """Measured MFU against GPUs with the model's predictions, one legend entry per system (chapter Figure 5.5);
    with ``profile``, the calibrated predictions."""
    from stepbudget.views.render import write

    shown = [r.calibrated() for r in rows] if profile else rows
    write(validation_figure(shown, profile=profile), path, "--plot")


@dataclass(frozen=True)
class Series:
    """One line of Figure 5.5: a system's runs of one model, at one batch or one sequence length where the
    model has several (``batch_tokens`` and ``seq_len`` are None otherwise)."""

    system: str
    model: str
    batch_tokens: int | None = None
    seq_len: int | None = None

    def __str__(self) -> str:
        extra = [f"batch {self.batch_tokens / 1e6:.3g}M tokens"] if self.batch_tokens else []
        extra += [f"{self.seq_len:,}-token sequences"] if self.seq_len else []
        return f"{self.system} ({', '.join([self.model, *extra])})"


def figure_series(rows: list[Row]) -> dict[Series, list[Row]]:
    """Figure 5.5's lines: one per system and model; split by batch where a model has a strong-scaling
    series at each of several batches (MegaScale's Table 2 runs 768 sequences up to 1,024 GPUs and
    6,144 beyond), so that no line joins two such series, and by sequence length (Llama 3's 131,072-token
    run beside its 8,192-token ones). A weak-scaling series, whose batch grows with the GPUs (MegaScale's
    530B runs), stays one line."""
    groups: dict[tuple[str, str, int], dict[int, list[Row]]] = {}
    for r in rows:
        sc = r.case.scenario  # a predicted MFU implies a scenario
        if sc is None or r.case.measured_mfu is None or r.predicted_mfu is None:
            continue
        fw = r.case.framework.lower()
        name = ("MegaScale-MoE" if "megascale-moe" in fw else "MegaScale" if "megascale" in fw
                else "Megatron-LM" if "megatron" in fw else r.case.source)
        tokens = sc.global_batch_seqs * sc.model.seq_len
        groups.setdefault((name, sc.model.name, sc.model.seq_len), {}).setdefault(tokens, []).append(r)
    seqs: dict[tuple[str, str], int] = {}
    for name, model, _ in groups:
        seqs[(name, model)] = seqs.get((name, model), 0) + 1
    out: dict[Series, list[Row]] = {}
    for (name, model, seq), by_batch in groups.items():
        seq_len = seq if seqs[(name, model)] > 1 else None
        if len(by_batch) > 1 and all(len(members) > 1 for members in by_batch.values()):
            for tokens, members in sorted(by_batch.items()):
                out[Series(name, model, tokens, seq_len)] = members
        else:
            out[Series(name, model, None, seq_len)] = [r for members in by_batch.values() for r in members]
    return out


def validation_figure(rows: list[Row], lang: str = "en", sources: tuple[str, ...] | None = None,
                      profile: str | None = None) -> dict:
    """Figure 5.5: measured MFU (solid) and predicted (dotted) against GPUs, one legend entry per system; a
    system with several series (a model, a batch) has one line each, grouped under its entry. ``profile``
    names the calibration the predictions carry, in the legend."""
    if sources is not None:
        rows = [r for r in rows if r.case.source in sources]
    systems: dict[str, int] = {}
    data: list[dict] = []  # plotly traces, plain dicts like the figure itself
    for series, members in figure_series(rows).items():
        members = sorted(members, key=lambda r: r.case.gpus)
        system = series.system
        extra = [t(lang, "fig.5.5.batch", tokens=f"{series.batch_tokens / 1e6:.3g}")] if series.batch_tokens else []
        extra += [t(lang, "fig.5.5.seq", seq=fmt.number(series.seq_len))] if series.seq_len else []
        name = t(lang, "fig.5.5.series", system=system, detail=t(lang, "app.list_sep").join([series.model, *extra]))
        first = system not in systems
        i = systems.setdefault(system, len(systems))
        x = [r.case.gpus for r in members]
        for kind, y, dash, symbol in (("measured", [r.case.measured_mfu for r in members], "solid", "circle"),
                                      ("predicted", [r.predicted_mfu for r in members], "dot", "circle-open")):
            data.append({"type": "scatter", "mode": "lines+markers", "x": x, "y": y, "legendgroup": system,
                         "name": system, "showlegend": first and kind == "measured",
                         "line": {"color": COLORS[i % len(COLORS)], "dash": dash},
                         "marker": {"symbol": symbol, "size": 8},
                         "customdata": [[t(lang, f"fig.5.5.{kind}"), name] for _ in members],
                         "hovertemplate": t(lang, "fig.5.5.hover", series="%{customdata[1]}", gpus="%{x:,}",
                                            kind="%{customdata[0]}", mfu="%{y:.1%}") + "<extra></extra>"})
    for kind, dash, symbol in (("measured", "solid", "circle"), ("predicted", "dot", "circle-open")):
        key = t(lang, "fig.5.5.calibrated_key", profile=profile) if profile and kind == "predicted" \
            else t(lang, f"fig.5.5.{kind}_key")
        data.append({"type": "scatter", "mode": "lines+markers", "x": [None], "y": [None], "name": key,
                     "line": {"color": "#555555", "dash": dash},
                     "marker": {"symbol": symbol, "size": 8}, "legendgroup": kind})
    layout = {"title": {"text": t(lang, "fig.5.5.title", runs=sum(len(d["x"]) for d in data[:-2]) // 2)},
              "template": "plotly_white", "width": 1000, "height": 560, "legend": {"orientation": "h", "y": -0.15},
              "xaxis": {"type": "log", "title": {"text": t(lang, "fig.5.5.x")}},
              "yaxis": {"title": {"text": t(lang, "fig.5.5.y")}, "tickformat": ".0%", "range": [0, 1]}}
    return {"data": data, "layout": layout}
