"""Layout search: evaluate every valid layout over arrays, keep those that fit, rank by step time.

Chunks of the layout space go through ``memory_per_gpu`` and, for the layouts that fit in HBM
(all of them when they are written), ``derive`` -> ``estimate`` (the same code as one
scenario), so memory stays bounded by the chunk size. Kept per
chunk: the best ``top`` feasible layouts, the best layout for each value of each knob (to
say why the winner wins) and drop counts; every evaluated layout can stream to Parquet.
"""

from __future__ import annotations

import dataclasses
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from stepbudget.budget.memory import memory_per_gpu
from stepbudget.budget.step import DIMS, estimate
from stepbudget.inputs.scenario import Scenario, ScenarioError, build
from stepbudget.plan.derive import Plan, derive, ruled_split, state_plan
from stepbudget.budget.rate import kernel_scenario
from stepbudget.sweep.space import (CHOICE_COLUMNS, COLUMNS, STRUCTURE_COLUMNS, Space, check_search_gpus,
                                    layout_space, splits_unevenly)
from stepbudget.sweep.store import BOOLS, CODE_NAMES, ParquetSink

KNOBS = ("tp", "cp", "pp", "ep", "schedule", "virtual_stages", "micro_batch", "dp_kind", "recompute")
"""Layout knobs the search reports a best layout for, value by value."""

METRICS = ("step_s", "compute_s", "bubble_s", "exposed_comm_s", *(f"exposed_{d.value}_s" for d in DIMS),
           "mfu", "memory_bytes", "model_state_bytes")

MAX_CHUNK = 1 << 20
"""Most layouts evaluated at once: a chunk's arrays take about 1.3 kB a layout (DeepSeek-V3 on 8,192 GPUs peaks at
1.4 GB with 2^20 and 0.3 GB with the default 2^17, which is also 2.8 times faster), so a larger chunk only costs."""

SPLIT_COLUMNS = ("first_stage_layers", "last_stage_layers")
"""Columns an uneven search adds: the first and last ranks' layers of an uneven split, -1 (None in a row) where
the layout keeps the scenario's own split (even, or stated at its own pp)."""

DROP_STATE = "model state alone exceeds HBM"
DROP_ACTIVATIONS = "activations push it past HBM"


class SearchError(ScenarioError):
    """The space is empty after a constraint: the message names it and by how much."""


@dataclass(frozen=True)
class SearchResult:
    scenario: Scenario
    """The base scenario as evaluated (kernel-scope rate, ``gpus`` GPUs)."""
    gpus: int
    candidates: int
    """Flat size of the space before the validity filter."""
    evaluated: int
    """Valid layouts evaluated."""
    schedule_invalid: int
    """Candidates a pipeline schedule rejects (micro-batch count not a multiple of p, odd for DualPipe)."""
    feasible: int
    dropped: dict[str, int]
    seconds: float
    top: list[dict]
    """Best feasible layouts, fastest first: layout columns and METRICS."""
    best_by: dict[str, dict[object, dict]] = field(default_factory=dict)
    """For each knob in KNOBS: value -> best feasible layout with that value."""
    calibrated_rate: float | None = None
    """Kernel rate found from a step-scope measurement (calibrate.py), if one was needed."""
    written: int = 0
    """Rows written to Parquet."""


def layout_row(cols: dict[str, np.ndarray], metrics: dict[str, np.ndarray], i: int) -> dict:
    """Layout ``i`` of a chunk as plain values (names for coded knobs), with its metrics."""
    out: dict[str, object] = {}
    for k, v in cols.items():
        x = int(v[i])
        out[k] = CODE_NAMES[k][x] if k in CODE_NAMES else bool(x) if k in BOOLS else None if k in SPLIT_COLUMNS and x < 0 else x
    return out | {k: float(v[i]) for k, v in metrics.items()}


TIE_S_PER_BYTE = 1e-18
"""Rank key = step_s + this x memory: equal step times (all exchanges hidden) put the smaller layout first."""


def _rank(row: dict) -> float:
    return row["step_s"] + TIE_S_PER_BYTE * row["memory_bytes"]


def _first(step: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` least steps, in order, equal steps by position: the same on every machine.

    ``argpartition`` alone picks among steps equal to the k-th, and orders them, by a selection whose vectorized
    path depends on the CPU, so two machines could rank the same layouts differently."""
    kth = step[np.argpartition(step, k - 1)[k - 1]]
    below = np.flatnonzero(step < kth)
    tied = np.flatnonzero(step == kth)[: k - below.size]
    picked = np.concatenate([below, tied])
    return picked[np.lexsort((picked, step[picked]))]


def split_columns(base: Scenario, cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``SPLIT_COLUMNS`` of a chunk: the uneven split (plan/derive.py ``uneven_split``) where pp x v does not
    divide the layer slots, as derive times it; -1 where it divides or the scenario states its own split."""
    pp = cols["pp"]
    first, _, last, ruled = ruled_split(base.pipeline_slots, pp, cols["virtual_stages"])
    if base.layout.uneven_split:  # derive keeps the stated split at the scenario's own pp
        ruled &= pp != base.layout.pp
    return {"first_stage_layers": np.where(ruled, first, -1), "last_stage_layers": np.where(ruled, last, -1)}


def _with_split(base: Scenario, pp: int, first: int, last: int) -> Scenario:
    """``base`` stating one uneven split at ``pp`` (unchecked: the search's rows are valid by construction)."""
    lay = base.layout.model_copy(update={"pp": pp, "first_stage_layers": first, "last_stage_layers": last,
                                         "stage_layers": None})
    return base.model_copy(update={"layout": lay})


def _rows_of(plan: Plan, at: np.ndarray, scenario: Scenario) -> Plan:
    """The layouts ``at`` of ``plan`` (a boolean mask over its shape) as a plan of ``scenario``."""
    shape = plan.shape

    def cut(x):
        if isinstance(x, dict):
            return {k: cut(y) for k, y in x.items()}
        return x[at] if isinstance(x, np.ndarray) and x.shape == shape else x

    fields = (f.name for f in dataclasses.fields(plan) if f.name != "scenario")
    return dataclasses.replace(plan, scenario=scenario, **{name: cut(getattr(plan, name)) for name in fields})


def _memory(base: Scenario, cols: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(total, model state) bytes of each layout's busiest rank, from a plan that times nothing (derive.py
    ``state_plan``). An uneven split's ranks differ, and budget/memory.py compares them for a split the scenario
    states: each distinct split (a handful per chunk, one per pp and v) is measured as that split stated, on its
    own rows of the plan."""
    plan = state_plan(base, cols)
    mem = memory_per_gpu(plan)
    state = mem.model_state
    total = state + mem.activations + mem.extras  # Memory.total, its model state summed once
    total, state = (x if np.shape(x) == plan.shape else np.array(np.broadcast_to(x, plan.shape), dtype=float)
                    for x in (np.asarray(total, dtype=float), np.asarray(state, dtype=float)))
    if "first_stage_layers" not in cols:
        return total, state
    first, last = cols["first_stage_layers"], cols["last_stage_layers"]
    ruled = first >= 0
    for pp, f, l_ in np.unique(np.stack([cols["pp"], first, last], axis=1)[ruled], axis=0).tolist():
        at = ruled & (cols["pp"] == pp) & (first == f) & (last == l_)
        split = memory_per_gpu(_rows_of(plan, at, _with_split(base, pp, f, l_)))
        total[at], state[at] = split.total, split.model_state
    return total, state


def _timings(base: Scenario, cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The step's terms of each layout (METRICS before memory)."""
    plan = derive(base, cols)  # an uneven split's busiest rank sets its time (plan/derive.py _busiest_stage_s)
    b = estimate(plan)
    exposed = b.by_dim("exposed_s")
    out = {
        "step_s": b.step_s, "compute_s": b.compute_s, "bubble_s": b.bubble_s, "exposed_comm_s": b.exposed_comm_s,
        **{f"exposed_{d}_s": exposed[d] for d in exposed},
        "mfu": b.mfu,
    }
    return {k: np.broadcast_to(np.asarray(v, dtype=float), plan.shape) for k, v in out.items()}


def _metrics(base: Scenario, cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """METRICS of every layout of a chunk."""
    memory, model_state = _memory(base, cols)
    return _timings(base, cols) | {"memory_bytes": memory, "model_state_bytes": model_state}


@dataclass(frozen=True)
class _Chunk:
    """One chunk evaluated: every layout's memory, and the columns and METRICS of the layouts timed."""

    memory: np.ndarray
    model_state: np.ndarray
    fits: np.ndarray
    cols: dict[str, np.ndarray]
    """Layouts timed: those that fit, or every one when all are written."""
    metrics: dict[str, np.ndarray]
    every: bool


def _evaluate(base: Scenario, cols: dict[str, np.ndarray], capacity: float, every: bool) -> _Chunk:
    """Memory of every layout of a chunk, times of those that fit (of all with ``every``, to write them):
    memory needs none of the timing's work, and a layout past HBM is only counted."""
    memory, state = _memory(base, cols)
    fits = memory <= capacity
    timed = cols if every else {k: v[fits] for k, v in cols.items()}
    m = _timings(base, timed)
    m |= {"memory_bytes": memory, "model_state_bytes": state} if every else {
        "memory_bytes": memory[fits], "model_state_bytes": state[fits]}
    return _Chunk(memory, state, fits, timed, m, every)


def _check_not_empty(evaluated, bad_schedule, feasible_n, least_memory, capacity, dropped, space) -> None:
    if evaluated == 0 and bad_schedule == 0 and space.dp_replicas > 1:
        raise SearchError(
            f"layout.dp_replicas: no layout on {space.gpus:,} GPUs splits dp*cp into {space.dp_replicas} shard groups "
            "of 2 or more ranks with a sharded dp_kind; lower dp_replicas or use more GPUs"
        )
    if evaluated == 0:
        raise SearchError(
            f"every candidate layout breaks a pipeline schedule's micro-batch rule ({bad_schedule:,} rejected); "
            "raise batch.global_batch_seqs"
        )
    if feasible_n == 0:
        need = least_memory
        raise SearchError(
            f"cluster.gpu: no layout fits in {capacity / 1e9:.0f} GB of HBM; the smallest needs {need / 1e9:.1f} GB "
            f"(short by {(need - capacity) / 1e9:.1f} GB: {dropped[DROP_STATE]:,} layouts exceed it on model state "
            f"alone); use a GPU with more HBM or more GPUs"
        )


def scenario_for(base: Scenario, row: dict, gpus: int | None = None) -> Scenario:
    """The validated scenario of one search row (the scalar path)."""
    data = base.model_dump(mode="json")
    data["cluster"]["gpus"] = gpus or base.cluster.gpus
    data["layout"].update({k: row[k] for k in COLUMNS})
    if row.get("first_stage_layers") is not None:  # an uneven search's split
        data["layout"].update({k: row[k] for k in SPLIT_COLUMNS} | {"stage_layers": None})
    elif base.layout.uneven_split and row["pp"] != base.layout.pp:  # the stated split holds at its own pp only
        data["layout"].update(dict.fromkeys((*SPLIT_COLUMNS, "stage_layers")))
    return build(data)


class _Tally:
    """What a search keeps while its chunks go by: the counts, the fastest rows, the best row per knob value."""

    def __init__(self, space: Space, top: int, capacity: float):
        self.top, self.capacity = top, capacity
        self.evaluated = self.feasible = self.bad_schedule = self.done = 0
        self.dropped = {DROP_STATE: 0, DROP_ACTIVATIONS: 0}
        self.tops: list[dict] = []
        self.best_by: dict[str, dict[object, dict]] = {k: {} for k in KNOBS}
        self.least_memory = np.inf  # bytes of the layout that needs the least HBM
        self.knob_values = {k: np.unique(space.structures[:, STRUCTURE_COLUMNS.index(k)] if k in STRUCTURE_COLUMNS
                                         else space.choices[:, CHOICE_COLUMNS.index(k)]) for k in KNOBS}

    def add(self, c: _Chunk) -> None:
        """Count one chunk of evaluated layouts."""
        fits, state_over = c.fits, c.model_state > self.capacity
        self.evaluated += len(fits)
        self.feasible += int(np.count_nonzero(fits))
        self.dropped[DROP_STATE] += int(np.count_nonzero(state_over))
        self.dropped[DROP_ACTIVATIONS] += int(np.count_nonzero(~fits & ~state_over))
        self.least_memory = min(self.least_memory, float(c.memory.min()))
        cols, m = c.cols, c.metrics
        if not len(cols["tp"]):
            return
        # ranked over the whole chunk, the layouts past HBM last: the same selection, in the same order among
        # equal step times, whichever layouts were timed
        step = np.full(len(fits), np.inf)
        rank = np.asarray(_rank(m))
        step[fits] = rank[fits] if c.every else rank
        row = np.arange(len(fits)) if c.every else np.cumsum(fits) - 1  # chunk position -> timed row
        for i in _first(step, min(self.top, len(fits))):
            if fits[i]:
                self.tops.append(layout_row(cols, m, int(row[i])))
        self._best_per_knob(cols, m, step if c.every else step[fits])

    def _best_per_knob(self, cols: dict, m: dict, step: np.ndarray) -> None:
        for knob in KNOBS:
            for value in self.knob_values[knob]:
                masked = np.where(cols[knob] == value, step, np.inf)
                i = int(np.argmin(masked))
                if np.isfinite(masked[i]):
                    row = layout_row(cols, m, i)
                    name = row[knob]
                    if name not in self.best_by[knob] or _rank(row) < _rank(self.best_by[knob][name]):
                        self.best_by[knob][name] = row


def search(
    scenario: Scenario,
    gpus: int | None = None,
    top: int = 10,
    out: str | None = None,
    chunk: int = 1 << 17,
    progress: Callable[[int, int], None] | None = None,
    uneven_stages: bool = False,
) -> SearchResult:
    """Every valid layout of ``scenario`` on ``gpus`` GPUs, ranked; ``out`` streams all of them to Parquet.

    ``uneven_stages`` also tries the pp and v that do not divide the layers, split as plan/derive.py
    ``uneven_split`` says (space.py ``splits_unevenly``: not beside embedding/loss slots, nor under a stated
    rate); its rows and Parquet columns then carry ``SPLIT_COLUMNS``.

    Raises ``SearchError`` when no layout is valid or none fits in HBM, and ScenarioError naming ``gpus`` before
    any work when the count or the space is past its bound (space.py ``MAX_SEARCH_GPUS``, ``MAX_CANDIDATES``).
    """
    start = time.perf_counter()
    check_search_gpus(gpus, scenario.cluster.gpus)
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise ScenarioError(f"top: {top!r} is not a number of layouts to keep; give a positive integer")
    if isinstance(chunk, bool) or not isinstance(chunk, int) or not 1 <= chunk <= MAX_CHUNK:
        raise ScenarioError(f"chunk: {chunk!r} layouts per chunk; give 1 to {MAX_CHUNK:,}")
    base, rate = kernel_scenario(scenario)
    space = layout_space(base, gpus, uneven_stages)
    uneven = splits_unevenly(base, uneven_stages)
    if space.empty_reason:
        raise SearchError(space.empty_reason)
    base = base.model_copy(update={"cluster": base.cluster.model_copy(update={"gpus": space.gpus})})
    capacity = float(base.cluster.gpu.hbm_bytes)
    tally = _Tally(space, top, capacity)
    # the sink publishes FILE only if the block ends without an exception (store.py)
    with ParquetSink(out) if out else nullcontext() as sink:
        for covered, cols, invalid in space.chunks(chunk):
            tally.done += covered
            tally.bad_schedule += invalid
            if len(cols["tp"]):
                if uneven:
                    cols |= split_columns(base, cols)
                c = _evaluate(base, cols, capacity, every=sink is not None)
                tally.add(c)
                if sink is not None:
                    sink.write(cols | c.metrics | {"fits": c.fits})
            if progress is not None:
                progress(tally.done, space.size)
        _check_not_empty(tally.evaluated, tally.bad_schedule, tally.feasible, tally.least_memory, capacity,
                         tally.dropped, space)
    tally.tops.sort(key=_rank)
    return SearchResult(
        scenario=base, gpus=space.gpus, candidates=space.size, evaluated=tally.evaluated,
        schedule_invalid=tally.bad_schedule, feasible=tally.feasible, dropped=tally.dropped,
        seconds=time.perf_counter() - start, top=tally.tops[:top],
        best_by={k: dict(sorted(v.items(), key=lambda kv: _rank(kv[1]))) for k, v in tally.best_by.items()},
        calibrated_rate=rate, written=sink.rows if sink else 0,
    )
