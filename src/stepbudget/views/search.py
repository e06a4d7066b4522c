"""SearchResult -> JSON-ready dict, rich tables and the "why the winner wins" lines."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from stepbudget.budget.memory import memory_per_gpu
from stepbudget.budget.step import DIMS, estimate
from stepbudget.plan.derive import derive
from stepbudget.sweep.search import KNOBS, SearchResult, scenario_for
from stepbudget.units import fmt_bytes, fmt_flops, fmt_time
from stepbudget.views.memory import memory_dict
from stepbudget.views.tables import budget_dict, degrees_label, dp_label, schedule_label

_TERMS = ("compute_s", "bubble_s", *(f"exposed_{d.value}_s" for d in DIMS))
_TERM_NAMES = {"compute_s": "compute", "bubble_s": "bubble",
               **{f"exposed_{d.value}_s": f"exposed {d.value.upper()}" for d in DIMS}}


def row_label(row: dict) -> str:
    deg = degrees_label(row.__getitem__)
    sched = schedule_label(row["schedule"], row["virtual_stages"])
    dp = dp_label(row["dp_kind"], row["reshard_after_forward"])
    extra = [f"mb {row['micro_batch']}", dp]
    if row["recompute"] != "none":
        extra.append(f"{row['recompute']} recompute")
    if row["sequence_parallel"]:
        extra.append("SP")
    if row["cp"] > 1:
        extra.append(f"CP {row['cp_kind']}")
    if row.get("first_stage_layers") is not None:  # search --uneven-stages: Megatron's first/last stage layers
        extra.append(f"stages {row['first_stage_layers']}/…/{row['last_stage_layers']} layers")
    return f"{deg} · {sched} · " + " · ".join(extra)


def why_lines(result: SearchResult) -> list[str]:
    """One line per knob: the winner's value against the best layout with another value, and what differs most."""
    best = result.top[0]
    lines = []
    for knob in KNOBS:
        others = [(v, r) for v, r in result.best_by[knob].items() if v != best[knob]]
        if not others:
            continue
        value, alt = others[0]  # best_by is sorted fastest first
        slower = alt["step_s"] / best["step_s"] - 1
        deltas = sorted(((alt[t] - best[t], t) for t in _TERMS), reverse=True)
        worst, term = deltas[0]
        because = f"{_TERM_NAMES[term]} +{fmt_time(worst)}" if worst > 1e-9 * best["step_s"] else "same time, more memory"
        lines.append(
            f"{knob} = {best[knob]}: the best layout with {knob} = {value} is {slower:+.1%} slower "
            f"({because}; {row_label(alt)})"
        )
    return lines


def top_budgets(result: SearchResult) -> list[dict]:
    """The top layouts through the scalar path: full `budget --json` and `memory --json` objects."""
    out = []
    for rank, row in enumerate(result.top, 1):
        sc = scenario_for(result.scenario, row, result.gpus)
        plan = derive(sc)
        out.append({"rank": rank, "layout": {k: row[k] for k in row if not k.endswith(("_s", "_bytes")) and k != "mfu"},
                     "budget": budget_dict(estimate(plan)), "memory": memory_dict(memory_per_gpu(plan))})
    return out


def search_dict(result: SearchResult) -> dict:
    """The `search --json` object (keys documented in docs/commands/search.md)."""
    return {
        "scenario": result.scenario.name,
        "gpus": result.gpus,
        "candidates": result.candidates,
        "evaluated": result.evaluated,
        "schedule_invalid": result.schedule_invalid,
        "feasible": result.feasible,
        "dropped": result.dropped,
        "seconds": result.seconds,
        "layouts_per_s": result.evaluated / result.seconds if result.seconds > 0 else None,
        "kernel_rate_flops": float(derive(result.scenario).flops_rate),
        "calibrated_rate": result.calibrated_rate is not None,
        "top": top_budgets(result),
        "why": why_lines(result),
        "written": result.written,
    }


def summary_lines(result: SearchResult) -> list[str]:
    r = result
    lines = [
        f"{r.scenario.name} on {r.gpus:,} {r.scenario.cluster.gpu.name}: {r.evaluated:,} valid layouts evaluated in "
        f"{r.seconds:.2f} s ({r.evaluated / max(r.seconds, 1e-9):,.0f} layouts/s); {r.feasible:,} fit in "
        f"{fmt_bytes(r.scenario.cluster.gpu.hbm_bytes)}",
    ]
    drops = [f"{n:,} because {why}" for why, n in r.dropped.items() if n]
    if drops:
        lines.append("dropped: " + "; ".join(drops))
    if r.schedule_invalid:
        lines.append(f"skipped {r.schedule_invalid:,} candidates a schedule rejects (micro-batches per pipeline)")
    if r.calibrated_rate is not None:
        lines.append(f"kernel rate {fmt_flops(r.calibrated_rate)}: calibrated so the scenario's own layout keeps "
                     "its measured step time")
    return lines


def top_table(result: SearchResult) -> Table:
    t = Table(title=f"Top {len(result.top)} layouts by step time", title_justify="left")
    for col in ("#", "layout", "step", "compute", "bubble", *(f"exp {d.value.upper()}" for d in DIMS), "MFU", "memory"):
        t.add_column(col, justify="left" if col == "layout" else "right")
    for i, row in enumerate(result.top, 1):
        t.add_row(
            str(i), row_label(row), Text(fmt_time(row["step_s"]), style="bold" if i == 1 else ""),
            fmt_time(row["compute_s"]), fmt_time(row["bubble_s"]),
            *(fmt_time(row[f"exposed_{d.value}_s"]) for d in DIMS), f"{row['mfu']:.1%}", fmt_bytes(row["memory_bytes"]),
        )
    return t
