"""Sweeps -> progress lines, the report's table and JSON, and its figure (the `sweep` and `sweep-report` commands)."""

from __future__ import annotations

from rich.table import Table

from stepbudget.sweep.dist import SweepRun, Tally, Where
from stepbudget.sweep.grid import GPUS
from stepbudget.sweep.point import COLUMNS
from stepbudget.sweep.report import SweepReport
from stepbudget.units import fmt_time
from stepbudget.views.render import COLORS



def _eta(s: float | None) -> str:
    return "?" if s is None else fmt_time(s) if s < 120 else f"{s / 60:,.0f} min"


def started_line(t: Tally, where: Where) -> str:
    todo = t.total - t.done
    what = (f"{t.total:,} points" + (f" ({t.done:,} written before, {todo:,} to run)" if t.before else ""))
    if where.kind == "process":
        place = "in this process" + (f": {where.why}" if where.why else "")
    elif where.kind == "local":
        place = f"on {where.workers} local Dask worker{'s' * (where.workers != 1)}"
    else:
        place = f"on a Dask cluster of {where.workers} worker{'s' * (where.workers != 1)}"
    dash = f"; dashboard {where.dashboard}" if where.dashboard else ""
    return f"sweep: {what} {place}{dash}"


def progress_line(t: Tally) -> str:
    return (f"sweep: {t.done:,}/{t.total:,} points, {t.rate:,.2f} points/s, ETA {_eta(t.eta_s)}, "
            f"{t.failed:,} failed")


def run_lines(run: SweepRun) -> list[str]:
    return [f"sweep: {run.written:,} points written in {fmt_time(run.seconds)} ({run.before:,} before, "
            f"{run.total:,} in the grid, {run.failed:,} failed); stepbudget sweep-report {run.out} shows them"]


def run_dict(run: SweepRun) -> dict:
    return {"out": run.out, "total": run.total, "before": run.before, "written": run.written, "failed": run.failed,
            "seconds": run.seconds, "where": {"kind": run.where.kind, "workers": run.where.workers,
                                              "dashboard": run.where.dashboard}}


SHOWN = ("step_s", "mfu", "exposed_share", "p99_s", "a2a_scheduled_s")


def report_dict(r: SweepReport) -> dict:
    """The `sweep-report --json` object: the grid, the best row of each point (every column), the front."""
    return {"out": r.out, "name": r.name, "axes": r.axes, "task": r.task, "total": r.total, "written": len(r.rows),
            "failed": r.failed, "missing_points": r.missing, "points": r.rows,
            "pareto": [{"point": p["point"], "gpus": p["gpus"], "step_s": p["step_s"]} for p in r.pareto],
            "columns": {k: v[1] for k, v in COLUMNS.items()}}


def _cell(row: dict, key: str) -> str:
    v = row.get(key)
    if v is None:
        return ""
    if key in ("mfu", "exposed_share"):
        return f"{v:.1%}"
    return fmt_time(v)


def report_table(r: SweepReport) -> Table:
    axes = [a for a in r.axes if a != GPUS]  # the GPUs column shows it, resolved
    front = {p["point"] for p in r.pareto}
    shown = [k for k in SHOWN if any(row.get(k) is not None for row in r.rows)]
    t = Table(title=f"{r.name}: {len(r.rows):,} of {r.total:,} points, {r.failed:,} failed (* on the Pareto front of "
                    "step time against GPUs)", title_justify="left")
    for col in ("#", *axes, "GPUs", "best layout", *(_TITLES[k] for k in shown)):
        t.add_column(col, justify="left" if col in (*axes, "best layout") else "right")
    for row in r.rows:
        mark = "*" if row["point"] in front else ""
        values = [str(row.get(a) or "") for a in axes]
        gpus = f"{row['gpus']:,}" if row.get("gpus") else ""
        if row["status"] == "failed":
            t.add_row(f"{row['point']}{mark}", *values, gpus, f"[red]failed: {row['reason']}[/red]", *([""] * len(shown)))
        else:
            t.add_row(f"{row['point']}{mark}", *values, gpus, row["layout"], *(_cell(row, k) for k in shown))
    return t


_TITLES = {"step_s": "step", "mfu": "MFU", "exposed_share": "exposed share", "p99_s": "p99 step",
           "a2a_scheduled_s": "all-to-all (FAST)"}


def report_lines(r: SweepReport) -> list[str]:
    out = []
    if r.missing:
        out.append(f"{len(r.missing):,} points not written yet (stepbudget sweep ... --resume runs them)")
    if r.pareto:
        out.append("Pareto front (fewest GPUs for each step time): " + ", ".join(
            f"{p['gpus']:,} GPUs {fmt_time(p['step_s'])}" for p in r.pareto))
    return out


def report_figure(r: SweepReport) -> dict:
    """Best step time and MFU against GPUs, one line per option, and the Pareto front over the step times."""
    data: list[dict] = []
    for i, (label, rows) in enumerate(r.options.items()):
        color = COLORS[i % len(COLORS)]
        x = [row["gpus"] for row in rows]
        data.append({"type": "scatter", "mode": "lines+markers", "name": label, "x": x, "y": [row["step_s"] for row in rows],
                     "line": {"color": color}, "legendgroup": label,
                     "hovertemplate": "%{x:,} GPUs: %{y:.3s}s<extra>" + label + "</extra>"})
        data.append({"type": "scatter", "mode": "lines+markers", "name": label, "x": x, "y": [row["mfu"] for row in rows],
                     "xaxis": "x2", "yaxis": "y2", "line": {"color": color, "dash": "dot"}, "legendgroup": label,
                     "showlegend": False, "hovertemplate": "%{x:,} GPUs: MFU %{y:.1%}<extra>" + label + "</extra>"})
    if r.pareto:
        data.append({"type": "scatter", "mode": "lines+markers", "name": "Pareto front", "x": [p["gpus"] for p in r.pareto],
                     "y": [p["step_s"] for p in r.pareto], "line": {"color": "#222222", "width": 3, "dash": "dash"},
                     "marker": {"size": 10, "symbol": "diamond"}})
    gpus = sorted({row["gpus"] for rows in r.options.values() for row in rows})
    ticks = {"type": "log", "title": {"text": "GPUs"}, "tickvals": gpus, "ticktext": [f"{n:,}" for n in gpus]}
    layout = {"title": {"text": f"{r.name}: best step time and MFU against GPUs, one line per option"},
              "template": "plotly_white", "width": 1100, "height": 560, "legend": {"orientation": "h", "y": -0.22},
              "xaxis": {**ticks, "domain": [0, 0.45]}, "xaxis2": {**ticks, "domain": [0.55, 1], "anchor": "y2"},
              "yaxis": {"title": {"text": "step time (s)"}, "rangemode": "tozero"},
              "yaxis2": {"title": {"text": "MFU"}, "tickformat": ".0%", "anchor": "x2", "rangemode": "tozero"}}
    return {"data": data, "layout": layout}


def write_report_figure(r: SweepReport, path: str) -> None:
    from stepbudget.views.render import write

    write(report_figure(r), path, "--plot")
