"""Sweep files: a base scenario, axes over its fields, and what to do at each point of the grid.

A sweep file (YAML) names a base scenario, the axes to vary (any scenario field, the base itself, or a
named axis whose values each set several fields), how they combine (``product`` or ``zip``), points to
leave out, and the task each point runs (``search``, ``simulate``, ``moe``; with none, the budget of the
scenario's own layout). ``load_sweep`` validates the file and every axis value against the base, so a bad
value is one line naming the axis and the first point it is in; ``points`` resolves the grid.

Each point's id is a stable hash of its resolved scenario (SI units, as ``stepbudget show`` prints it), its
task and its axis values: the name of its result file, and the source of its Monte Carlo seed, so a point
gives the same rows on any worker, in any order, resumed or not.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from stepbudget.inputs.documents import plain, read_document
from stepbudget.inputs.files import read_text
from stepbudget.inputs.errors import prefixed
from stepbudget.inputs.scenario import Scenario, ScenarioError, _lines, load
from stepbudget.sim.step import Jitter
from stepbudget.sweep.calibrate import carried
from stepbudget.units import UnitError, parse

MAX_POINTS = 100_000
"""Most points one sweep file makes: at a second a point, a day on one core, or an hour on 24 workers."""
MAX_TOP = 100
"""Most layouts a point keeps from its search (rows per point)."""
GPUS = "cluster.gpus"
BASE = "base"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SearchTask(_Section):
    """Search every layout at the point and keep the ``top`` fastest (one row each, rank 1 first)."""

    top: int = Field(1, ge=1, le=MAX_TOP)
    uneven_stages: bool = False


class SimulateTask(_Section):
    """Simulate the point's best layout: one step, and with jitter ``steps`` steps' p50, p90 and p99."""

    steps: int = Field(64, ge=1, le=100_000)
    jitter: float = 0.0
    link_jitter: float = 0.0
    straggler_p: float = 0.0
    straggler_slowdown: float = 1.5
    replicas: int | None = Field(None, ge=1, le=1_000_000)
    """DP replicas a step waits for (default: the layout's DP)."""
    full: bool = False
    """Simulate every replica of every step, not a bootstrap of 64 pipelines."""
    link_rate: float = Field(1.0, ge=1e-3, le=100.0)

    def jitter_of(self) -> Jitter:
        return Jitter(compute_cv=self.jitter, link_cv=self.link_jitter, straggler_p=self.straggler_p,
                      straggler_slowdown=self.straggler_slowdown)


class MoETask(_Section):
    """Time one MoE layer's all-to-all at the point's best layout, plain and FAST-scheduled."""

    skew: str = "uniform"
    servers: int | None = Field(None, ge=1, le=4096)
    gpus_per_server: int | None = Field(None, ge=1, le=64)


class Task(_Section):
    search: SearchTask | None = None
    simulate: SimulateTask | None = None
    moe: MoETask | None = None


class SweepFile(_Section):
    name: str | None = None
    description: str | None = None
    base: str
    """A preset name or a scenario file (a relative path is found beside the sweep file)."""
    set: list[str] = Field(default_factory=list)
    """Overrides applied to the base at every point, before the axes."""
    axes: dict[str, list[Any]] = Field(default_factory=dict)
    combine: Literal["product", "zip"] = "product"
    exclude: list[dict[str, Any]] = Field(default_factory=list)
    """Points to leave out: each mapping names axes and the value (or list of values) that drops a point."""
    task: Task = Field(default_factory=Task)
    seed: int = Field(0, ge=0, le=2**32 - 1)


@dataclass(frozen=True)
class Axis:
    name: str
    labels: tuple[str, ...]
    """How each value is shown (a column of the results)."""
    sets: tuple[tuple[str, ...], ...]
    """The overrides each value makes (none for the ``base`` axis)."""
    bases: tuple[str | None, ...]
    """The base scenario each value names (``base`` axis), else None."""


@dataclass(frozen=True)
class Point:
    index: int
    id: str
    values: dict[str, str]
    """Axis name -> the value's label."""
    base: str
    sets: tuple[str, ...]
    task: Task
    gpus: int
    scenario: Scenario | None
    """The resolved scenario (its own GPU count; a search runs at ``gpus``), None when it does not resolve."""
    error: str | None = None
    """Why the point's scenario does not resolve: the point is recorded as failed with this reason."""

    @property
    def seed(self) -> int:
        """The point's Monte Carlo seed: from its id, so the same on any worker and in any order."""
        return int(self.id[:8], 16)


@dataclass(frozen=True)
class Sweep:
    spec: SweepFile
    path: str
    axes: tuple[Axis, ...]
    base: str
    """The base as a preset name or a path usable from here."""
    choices: tuple[tuple[int, ...], ...] = field(repr=False)
    """For each point, the value index on each axis."""

    @property
    def task(self) -> Task:
        return self.spec.task

    @property
    def name(self) -> str:
        return self.spec.name or Path(self.path).stem


def _text(value: object) -> str:
    """An axis value as an override's right-hand side and as its label: text as written, the rest as YAML flow."""
    return value if isinstance(value, str) else json.dumps(value)


def _axis(name: str, values: list[Any], beside: Path) -> Axis:
    if not values:
        raise ScenarioError(f"sweep: axes.{name}: no values; give a list of at least one")
    labels: list[str] = []
    sets: list[tuple[str, ...]] = []
    bases: list[str | None] = []
    for i, v in enumerate(values):
        if name == BASE:
            ref = str(v)
            labels.append(ref)
            bases.append(_beside(ref, beside))
            sets.append(())
        elif isinstance(v, dict):  # a named axis: each value sets several fields
            fields = {k: x for k, x in v.items() if k != "label"}
            if not fields:
                raise ScenarioError(f"sweep: axes.{name}[{i}]: a mapping of fields to set, e.g. {{cluster.gpu: b200}}; got none")
            labels.append(str(v.get("label") or " ".join(f"{k}={_text(x)}" for k, x in fields.items())))
            sets.append(tuple(f"{k}={_text(x)}" for k, x in fields.items()))
            bases.append(None)
        else:
            labels.append(_text(v))
            sets.append((f"{name}={_text(v)}",))
            bases.append(None)
    twice = next((x for i, x in enumerate(labels) if x in labels[:i]), None)
    if twice is not None:
        raise ScenarioError(f"sweep: axes.{name}: {twice!r} is given twice; remove one")
    return Axis(name, tuple(labels), tuple(sets), tuple(bases))


def _beside(ref: str, folder: Path) -> str:
    """A scenario file named relative to the sweep file is found beside it; a preset name stays as it is."""
    if Path(ref).suffix in (".yaml", ".yml", ".toml") and not Path(ref).is_absolute() and (folder / ref).exists():
        return str(folder / ref)
    return ref


def load_sweep(path: str | os.PathLike) -> Sweep:
    """Read and validate a sweep file: its fields, every axis value on its own, the size of the grid."""
    path = os.fspath(path)
    if Path(path).suffix not in (".yaml", ".yml", ".toml"):
        raise ScenarioError(f"sweep: {path[:80]!r} is not a .yaml or .toml file; give a sweep file")
    if not Path(path).exists():
        raise ScenarioError(f"sweep: file {path[:80]!r} not found; give the path of a sweep file")
    data = read_document(read_text(path, "sweep"), Path(path).suffix, "sweep", "a mapping of base:, axes: and task:")
    plain(data, "sweep")
    try:
        spec = SweepFile.model_validate(data)
    except ValidationError as e:
        raise ScenarioError("\n".join(f"sweep: {line}" for line in _lines(e))) from None
    _check_task(spec.task)
    beside = Path(path).parent
    axes = tuple(_axis(name, values, beside) for name, values in spec.axes.items())
    choices = _grid(spec, axes)
    sweep = Sweep(spec, path, axes, _beside(spec.base, beside), choices)
    _check_values(sweep)
    return sweep


def _check_task(task: Task) -> None:
    """The task's values that its model's bounds do not cover: the jitter's and the skew's own rules."""
    from stepbudget.a2a.report import parse_skew

    for name, check in (("simulate", lambda t: t.jitter_of()), ("moe", lambda t: parse_skew(t.skew))):
        part = getattr(task, name)
        try:
            if part is not None:
                check(part)
        except (ScenarioError, ValueError) as e:
            raise ScenarioError(f"sweep: task.{name}.{e}") from None


def _grid(spec: SweepFile, axes: tuple[Axis, ...]) -> tuple[tuple[int, ...], ...]:
    sizes = [len(a.labels) for a in axes]
    if spec.combine == "zip":
        if len(set(sizes)) > 1:
            raise ScenarioError("sweep: combine: zip needs axes of one length; got "
                                + ", ".join(f"{a.name}: {n}" for a, n in zip(axes, sizes)))
        grid = [(i,) * len(axes) for i in range(sizes[0] if sizes else 1)]
    else:
        total = 1
        for n in sizes:
            total *= n
        if total > MAX_POINTS:
            raise ScenarioError(f"sweep: the axes make {total:,} points, more than {MAX_POINTS:,}; split the sweep "
                                "or leave points out (exclude:)")
        grid = list(itertools.product(*(range(n) for n in sizes)))
    rules = [_rule(i, rule, axes) for i, rule in enumerate(spec.exclude)]
    return tuple(g for g in grid if not any(all(g[a] in allowed for a, allowed in r) for r in rules))


def _rule(i: int, rule: dict[str, Any], axes: tuple[Axis, ...]) -> list[tuple[int, set[int]]]:
    """exclude[i] as (axis position, value positions it drops)."""
    names = [a.name for a in axes]
    out = []
    for name, wanted in rule.items():
        if name not in names:
            raise ScenarioError(f"sweep: exclude[{i}]: {name!r} is not an axis; use one of {', '.join(names)}")
        axis = axes[names.index(name)]
        given = wanted if isinstance(wanted, list) else [wanted]
        picked = set()
        for w in given:
            label = _text(w) if not isinstance(w, dict) else None
            if label not in axis.labels:
                raise ScenarioError(f"sweep: exclude[{i}].{name}: {w!r} is not one of the axis' values "
                                    f"({', '.join(axis.labels)}); fix it or remove it")
            picked.add(axis.labels.index(label))
        out.append((names.index(name), picked))
    if not out:
        raise ScenarioError(f"sweep: exclude[{i}]: names no axis; write {{axis: value}}")
    return out


def _check_values(sweep: Sweep) -> None:
    """Each axis value on its own, on the base: one that fails there is a bad value (one line naming the axis
    and the first point it is in); a value that fails only with others is a failed point of the results."""
    if not sweep.choices:
        raise ScenarioError("sweep: exclude: leaves no point; drop a rule")
    try:
        load(sweep.base, list(sweep.spec.set))
    except (ScenarioError, UnitError) as e:
        raise prefixed(f"sweep: base {sweep.spec.base!r} with set: ", e) from None
    for k, axis in enumerate(sweep.axes):
        for j, label in enumerate(axis.labels):
            base = axis.bases[j] or sweep.base
            try:
                _resolve(base, tuple(sweep.spec.set), axis.sets[j], sweep.task)
            except (ScenarioError, UnitError) as e:
                first = next((n for n, c in enumerate(sweep.choices) if c[k] == j), None)
                where = f"point {first} and others" if first is not None else "no point (it is excluded)"
                raise prefixed(f"sweep: axes.{axis.name} = {label!r} ({where}): ", e) from None


def _key(override: str) -> str:
    return override.partition("=")[0].strip()


def _resolve(base: str, fixed: tuple[str, ...], varied: tuple[str, ...], task: Task) -> tuple[Scenario, int]:
    """The point's scenario and GPU count, from the sweep's fixed overrides and the point's axis values. A search
    keeps the layout and searches at the axes' GPU count; a budget at another GPU count keeps TP, CP and PP and
    gives DP the rest (strong scaling, as ``scale`` does) unless the axes set DP too."""
    gpus_sets = [s for s in varied if _key(s) == GPUS]
    others = [*fixed, *(s for s in varied if _key(s) != GPUS)]
    if not gpus_sets:
        sc, _ = carried(load(base, others))
        return sc, sc.cluster.gpus
    try:
        gpus = int(parse(gpus_sets[-1].partition("=")[2].strip(), "count"))
    except UnitError as e:
        raise ScenarioError(f"{GPUS}: {e}") from None
    if gpus < 1 or gpus > 2**40:
        raise ScenarioError(f"{GPUS}: {gpus} is not a GPU count; give a positive integer")
    if task.search is not None:
        sc, _ = carried(load(base, others))
        return sc, gpus
    if not any(_key(s) == "layout.dp" for s in varied):
        lay = load(base, others).layout
        group = lay.tp * lay.cp * lay.pp
        if gpus % group:
            raise ScenarioError(f"{GPUS}: {gpus:,} GPUs do not hold whole model replicas of tp*cp*pp = {group}; give a "
                                f"multiple of {group}, or search the layout (task: search)")
        others.append(f"layout.dp={gpus // group}")
    sc, _ = carried(load(base, [*others, gpus_sets[-1]]))
    return sc, gpus


def _digest(document: object) -> str:
    return hashlib.sha256(json.dumps(document, sort_keys=True, allow_nan=False).encode()).hexdigest()[:16]


def points(sweep: Sweep) -> list[Point]:
    """Every point of the grid, resolved, in grid order (a point that does not resolve carries its error)."""
    task_doc = sweep.task.model_dump(mode="json")
    out = []
    for n, choice in enumerate(sweep.choices):
        values = {a.name: a.labels[j] for a, j in zip(sweep.axes, choice)}
        base = next((b for a, j in zip(sweep.axes, choice) if (b := a.bases[j]) is not None), sweep.base)
        varied = tuple(s for a, j in zip(sweep.axes, choice) for s in a.sets[j])
        sets = (*sweep.spec.set, *varied)
        sc: Scenario | None
        try:
            sc, gpus = _resolve(base, tuple(sweep.spec.set), varied, sweep.task)
            error = None
            resolved: object = sc.model_dump(mode="json") | {"gpus": gpus}
        except (ScenarioError, UnitError) as e:
            sc, gpus, error = None, 0, str(e).splitlines()[0]
            resolved = {"base": base, "sets": list(sets)}
        ident = _digest({"scenario": resolved, "task": task_doc, "values": values, "seed": sweep.spec.seed})
        out.append(Point(n, ident, values, base, sets, sweep.task, gpus, sc, error))
    return out
