"""A finished (or interrupted) sweep as a whole: each point's best layout, the lines to plot, the Pareto front.

A point's best row is its rank-1 row. Points group into *options*: the values of every axis but the GPU
count (a GPU, a NIC rate, a model...), each a line of step time or MFU against GPUs. The Pareto front keeps
the points no other beats on both GPU count and step time (fewer or as many GPUs, and a shorter step).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from stepbudget.sweep.grid import GPUS
from stepbudget.sweep.results import read_grid, read_points


@dataclass(frozen=True)
class SweepReport:
    out: str
    name: str
    axes: dict[str, list[str]]
    task: dict
    total: int
    """Points in the grid."""
    rows: list[dict]
    """The best (rank-1) row of each written point, in grid order."""
    missing: list[int]
    """Grid points not written yet (an interrupted sweep)."""
    options: dict[str, list[dict]]
    """Option label -> its ok rows ordered by GPUs (one line of a plot); "all" when no axis but the GPU count."""
    pareto: list[dict]
    """The ok rows no other beats on GPUs and step time, by GPUs."""

    @property
    def failed(self) -> int:
        return sum(r["status"] == "failed" for r in self.rows)


def option_of(row: dict, axes: list[str]) -> str:
    """The label of a row's option: its values on every axis but the GPU count."""
    return ", ".join(f"{a}={row[a]}" for a in axes if a != GPUS) or "all"


def pareto_front(rows: list[dict]) -> list[dict]:
    """The rows with no other on fewer-or-equal GPUs and a shorter step, fastest first at each GPU count."""
    front: list[dict] = []
    best = float("inf")
    for r in sorted(rows, key=lambda r: (r["gpus"], r["step_s"], r["point"])):
        if r["step_s"] < best:
            front.append(r)
            best = r["step_s"]
    return front


def sweep_report(out: str | os.PathLike) -> SweepReport:
    """Read the results folder ``out`` (``stepbudget sweep --out``) into a report."""
    grid = read_grid(out)
    table = read_points(out)
    rows = [r for r in table.to_pylist() if r["rank"] in (1, None)]
    axes = list(grid["axes"])
    written = {r["point"] for r in rows}
    ok = [r for r in rows if r["status"] == "ok" and r["step_s"] is not None]
    options: dict[str, list[dict]] = {}
    for r in ok:
        options.setdefault(option_of(r, axes), []).append(r)
    return SweepReport(
        out=os.fspath(out), name=grid.get("name", ""), axes=grid["axes"], task=grid.get("task", {}),
        total=len(grid["points"]), rows=rows, missing=[p["point"] for p in grid["points"] if p["point"] not in written],
        options={k: sorted(v, key=lambda r: (r["gpus"], r["point"])) for k, v in options.items()},
        pareto=pareto_front(ok))
