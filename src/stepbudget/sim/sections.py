"""The step's tasks, section by section: a builder that gathers tasks and their labels column by column, and one
function per section of the step (the step's DP gathers, the closed-form bubbles, every chunk pass as the stages'
schedules interleave, the DP reduce buckets, the gathers' deadlines).

The sections read the pipeline's shape and the budget's terms from sim/terms.py and append to one ``_Builder``;
sim/program.py calls them in emission order, so every dependency is an earlier task. The small sections add their
tasks one by one; the chunk passes, nearly all of a step's tasks, are emitted as one block of arrays: the walk over
the schedules (sim/terms.py) orders the passes, and every pass of a direction then has the same tasks (its hidden
exchanges, per-pass gather, layers, exposed exchange, join and send), filled in by array arithmetic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from stepbudget.budget.step import Budget
from stepbudget.enums import Axis
from stepbudget.plan.derive import Plan
from stepbudget.sim.graph import TaskGraph, TaskKind
from stepbudget.sim.terms import _NONE, _BudgetTerms, _Pass, _Passes, _Shape, _walk_schedules


# -- the builder: tasks in emission order, column by column, and the links they cross ---------------------------------

@dataclass(frozen=True)
class _Block:
    """Consecutive tasks as arrays, one entry per task: what ``_Builder`` joins into the graph. ``link`` is the
    builder's key of the one link a transfer crosses (``_NONE`` for other tasks); ``dep_ids`` holds
    ``dep_count[i]`` entries per task, in task order."""

    kind: np.ndarray
    stream: np.ndarray
    duration_s: np.ndarray
    size_bytes: np.ndarray
    link: np.ndarray
    dep_count: np.ndarray
    dep_ids: np.ndarray
    name: np.ndarray
    dim: np.ndarray
    role: np.ndarray
    stage: np.ndarray
    deadline: np.ndarray


class _Rows:
    """Tasks added one at a time, as lists, until the builder turns them into a ``_Block``."""

    def __init__(self) -> None:
        self.kind: list[int] = []
        self.stream: list[int] = []
        self.duration_s: list[float] = []
        self.size_bytes: list[float] = []
        self.link: list[int] = []
        self.dep_count: list[int] = []
        self.dep_ids: list[int] = []
        self.name: list[str] = []
        self.dim: list[str] = []
        self.role: list[str] = []
        self.stage: list[int] = []
        self.deadline: list[int] = []

    def block(self) -> _Block:
        def ints(xs: list[int]) -> np.ndarray:
            return np.array(xs, dtype=np.int64)

        return _Block(
            kind=np.array(self.kind, dtype=np.int8), stream=ints(self.stream),
            duration_s=np.array(self.duration_s, dtype=np.float64), size_bytes=np.array(self.size_bytes, dtype=np.float64),
            link=ints(self.link), dep_count=ints(self.dep_count), dep_ids=ints(self.dep_ids),
            name=np.array(self.name, dtype=str), dim=np.array(self.dim, dtype=str), role=np.array(self.role, dtype=str),
            stage=ints(self.stage), deadline=ints(self.deadline),
        )


@dataclass(frozen=True)
class _Built:
    """The builder's tasks as a graph, with per-task labels and the links in the order they were first used."""

    graph: TaskGraph
    capacity_Bps: np.ndarray
    link_names: list[str]
    dim: np.ndarray
    role: np.ndarray
    stage: np.ndarray
    deadline: np.ndarray


class _Builder:
    """Appends tasks and their labels, one by one (``add``) or as a block of arrays (``block``); a link is named on
    first use: per stage, one for each kind of traffic, and with contention the NIC ones are one link. Link ids
    are given in the order the tasks first cross them."""

    def __init__(self, plan: Plan, contention: bool) -> None:
        self.num_tasks = 0
        self._blocks: list[_Block] = []
        self._rows = _Rows()
        self._due: dict[int, int] = {}
        self._link_keys: dict[str, int] = {}
        self._link_names: list[str] = []
        self._link_rates: list[float] = []
        self._contention = contention
        self._nvlink_Bps, self._nic_Bps = float(plan.nvlink_Bps), float(plan.nic_Bps)

    def link(self, s: int, what: str, over_nic: bool) -> int:
        """Stage ``s``'s link for ``what`` traffic; with contention, all of a stage's NIC traffic shares one."""
        if self._contention and over_nic:
            name, rate = f"stage {s} NIC", self._nic_Bps
        else:
            name = f"stage {s} {what} ({'NIC' if over_nic else 'NVLink'})"
            rate = self._nic_Bps if over_nic else self._nvlink_Bps
        if name not in self._link_keys:
            self._link_keys[name] = len(self._link_names)
            self._link_names.append(name)
            self._link_rates.append(rate)
        return self._link_keys[name]

    def rate(self, link: int) -> float:
        """The rate of the builder's link ``link``, bytes/s."""
        return self._link_rates[link]

    def add(self, kind: TaskKind, name: str, deps: Sequence[int], dim: str, role: str, stage: int | None,
            deadline: int | None = None, *, stream: int = _NONE, duration_s: float = 0.0, size_bytes: float = 0.0,
            link: int = _NONE) -> int:
        r = self._rows
        r.kind.append(kind)
        r.stream.append(stream)
        r.duration_s.append(duration_s)
        r.size_bytes.append(size_bytes)
        r.link.append(link)
        r.dep_count.append(len(deps))
        r.dep_ids.extend(deps)
        r.name.append(name)
        r.dim.append(dim)
        r.role.append(role)
        r.stage.append(_NONE if stage is None else stage)
        r.deadline.append(_NONE if deadline is None else deadline)
        self.num_tasks += 1
        return self.num_tasks - 1

    def compute(self, name: str, stream: int, duration_s: float, deps: Sequence[int], dim: str, role: str,
                stage: int) -> int:
        """A compute task of ``duration_s`` seconds on ``stream``."""
        return self.add(TaskKind.COMPUTE, name, deps, dim, role, stage, stream=stream, duration_s=duration_s)

    def join(self, name: str, deps: Sequence[int], stage: int | None) -> int:
        """A zero-time barrier that finishes when all of ``deps`` have."""
        return self.add(TaskKind.JOIN, name, deps, "", "", stage)

    def send(self, name: str, seconds: float, link: int, deps: Sequence[int], dim: str, role: str, stage: int,
             deadline: int | None = None) -> int:
        """A transfer that takes ``seconds`` on ``link`` alone: its bytes are the time at the link's rate."""
        return self.add(TaskKind.TRANSFER, name, deps, dim, role, stage, deadline,
                        size_bytes=seconds * self._link_rates[link], link=link)

    def block(self, block: _Block) -> None:
        """Append a block of tasks (its dependencies already task ids of the graph)."""
        self._flush()
        self._blocks.append(block)
        self.num_tasks += block.kind.size

    def set_deadline(self, task: int, due: int) -> None:
        """Give ``task`` a deadline unless it has one."""
        self._due.setdefault(task, due)

    def has_deadline(self, task: int) -> bool:
        return task in self._due

    def _flush(self) -> None:
        if self._rows.kind:
            self._blocks.append(self._rows.block())
            self._rows = _Rows()

    def build(self) -> _Built:
        """The graph: blocks joined, links renumbered by first use, the deadlines set after the fact applied."""
        self._flush()

        def joined(field: str) -> np.ndarray:
            return np.concatenate([getattr(block, field) for block in self._blocks])

        link = joined("link")
        crossing = link[link != _NONE]
        used, first = np.unique(crossing, return_index=True)
        order = used[np.argsort(first)]  # the builder's keys in the order tasks first cross them
        renumber = np.full(len(self._link_names), _NONE, dtype=np.int64)
        renumber[order] = np.arange(order.size)
        link_indptr = np.zeros(link.size + 1, dtype=np.int64)
        np.cumsum(link != _NONE, out=link_indptr[1:])
        dep_indptr = np.zeros(link.size + 1, dtype=np.int64)
        np.cumsum(joined("dep_count"), out=dep_indptr[1:])
        deadline = joined("deadline")
        if self._due:
            deadline[np.fromiter(self._due.keys(), dtype=np.int64)] = np.fromiter(self._due.values(), dtype=np.int64)
        graph = TaskGraph(
            kind=joined("kind"), stream=joined("stream"), duration_s=joined("duration_s"),
            size_bytes=joined("size_bytes"), link_indptr=link_indptr, link_ids=renumber[crossing],
            dep_indptr=dep_indptr, dep_ids=joined("dep_ids"), names=joined("name"),
        )
        return _Built(graph=graph, capacity_Bps=np.array([self._link_rates[k] for k in order], dtype=float),
                      link_names=[self._link_names[k] for k in order], dim=joined("dim"),
                      role=joined("role"), stage=joined("stage"), deadline=deadline)


# -- the sections of the step, in the order their tasks are emitted ---------------------------------------------------

def _step_gathers(b: _Builder, shape: _Shape, terms: _BudgetTerms) -> dict[tuple[int, int, int], int]:
    """All-gather buckets before the first forward of each layer, once per step (ZeRO-1 after the previous
    step's update): (stage, chunk, layer) -> the bucket it waits for; empty when resharded, whose gathers run per pass."""
    gathers: dict[tuple[int, int, int], int] = {}
    work = terms.gather
    if not (work.total_s > 0 and work.rounds <= 1):
        return gathers
    n = work.buckets(shape.slots)
    per_bucket = work.total_s / n
    for s in range(shape.stages):
        link = b.link(s, "DP", True)
        prev: list[int] = []
        issued: dict[int, int] = {}
        for c in range(shape.chunks):
            for layer in range(shape.layers_per_chunk):
                k = shape.bucket(c, layer, n)
                if k not in issued:  # collectives on one communicator run in issue order (NCCL): they queue
                    prev = [b.send(f"DP all-gather s{s} bucket {k}", per_bucket, link, prev, "dp", "gather", s)]
                    issued[k] = prev[0]
                gathers[(s, c, layer)] = issued[k]
    return gathers


def _closed_form_bubbles(b: _Builder, shape: _Shape, terms: _BudgetTerms, budget: Budget) -> list[int]:
    """The budget's bubble (and PP's exposed time) as idle time at the start of every stage: the tasks."""
    bubble = float(budget.bubble_s) + terms.pp_exposed_s
    return [b.compute(f"bubble s{s}", s, bubble, [], "idle", "bubble", s) for s in range(shape.stages)]


@dataclass(frozen=True)
class _Direction:
    """What every pass of one direction emits: its hidden exchanges (dimension, seconds), layer time and exposed
    exchange time (0: none)."""

    hidden: list[tuple[Axis, float]]
    layer_s: float
    exposed_s: float


def _direction(shape: _Shape, terms: _BudgetTerms, ps: _Pass) -> _Direction:
    """A forward or backward pass's times: its share of the budget's hidden and exposed TP, CP, EP time; its layers,
    lengthened by its share of the compute the hidden kernels' SMs take (the budget's contention_s)."""
    hidden = {d: terms.hidden_s[d] * ps.share / shape.passes for d in terms.hidden_s}
    extra = terms.contention_s * ps.share / shape.passes / shape.layers_per_chunk
    layer_s = (shape.microbatch_s * ps.share / shape.chunks) / shape.layers_per_chunk + extra
    blocking = sum(terms.exposed_s[d] for d in terms.exposed_s) * ps.share / shape.passes
    return _Direction([(d, t) for d, t in hidden.items() if t > 0], layer_s, blocking)


@dataclass(frozen=True)
class _Layout:
    """Where each pass's tasks sit in the block of chunk passes (positions from the block's start, shape (P,)):
    ``H`` hidden exchanges, ``G`` per-pass gather, ``L`` layers, ``X`` exposed exchange, ``J`` join, ``S`` send."""

    H: np.ndarray
    G: int
    L: int
    X: np.ndarray
    J: np.ndarray
    S: np.ndarray
    start: np.ndarray
    first_layer: np.ndarray
    """The first layer emitted: layer 0 forward, the last layer backward."""
    last_layer: np.ndarray
    end: np.ndarray
    """What the stage's next pass (and the send) waits for: the join, the exposed exchange or the last layer."""
    out: np.ndarray
    """What the next virtual stage receives: the send, or the pass end."""

    @property
    def size(self) -> int:
        return int(self.out[-1]) + 1


def _layout(shape: _Shape, terms: _BudgetTerms, ps: _Passes, dirs: dict[bool, _Direction]) -> _Layout:
    p, v, L = shape.stages, shape.chunks, shape.layers_per_chunk
    H = np.where(ps.forward, len(dirs[True].hidden), len(dirs[False].hidden))
    G = int(terms.gather.rounds > 1 and terms.gather.total_s > 0)
    X = np.where(ps.forward, dirs[True].exposed_s > 0, dirs[False].exposed_s > 0).astype(np.int64)
    J = (H > 0).astype(np.int64)
    target = _target(ps, p)
    sends = not shape.closed_form and terms.pp_call_s > 0
    S = ((target >= 0) & (target < p * v) & sends).astype(np.int64)
    size = H + G + L + X + J + S
    start = np.cumsum(size) - size
    first_layer = start + H + G
    end = first_layer + L - 1 + X + J
    return _Layout(H=H, G=G, L=L, X=X, J=J, S=S, start=start, first_layer=first_layer, last_layer=first_layer + L - 1,
                   end=end, out=end + S)


def _target(ps: _Passes, p: int) -> np.ndarray:
    """The virtual stage each pass sends to: j + 1 forward, j - 1 backward (j = c p + s)."""
    j = ps.c * p + ps.s
    return np.where(ps.forward, j + 1, j - 1)


@dataclass(frozen=True)
class _PassTasks:
    """Where each pass's tasks are, by task id: what the reduce buckets and the deadlines look up."""

    passes: _Passes
    first_layer: np.ndarray
    """Shape (P,): the pass's first layer task (layer 0 forward, the last layer backward)."""
    layers_per_chunk: int

    def layer_task(self, kind: str, mb: int, c: int, layer: int, s: int) -> int:
        """The compute task of ``layer`` in pass (kind, mb, c) of stage ``s``."""
        i = self.passes.index[0 if kind == "F" else 1, mb, c, s]
        return int(self.first_layer[i]) + (layer if kind == "F" else self.layers_per_chunk - 1 - layer)

    def last_compute(self) -> list[int]:
        """Each stage's last compute task: the last layer of its last pass."""
        last_pass = np.zeros(self.passes.index.shape[-1], dtype=np.int64)
        np.maximum.at(last_pass, self.passes.s, np.arange(self.passes.s.size))
        return (self.first_layer[last_pass] + self.layers_per_chunk - 1).tolist()


class _Columns:
    """The chunk passes' tasks as arrays being filled: ``put`` writes one task of each of chosen passes, with its
    dependencies as columns of task ids (-1: absent in that row)."""

    def __init__(self, size: int, stage: np.ndarray) -> None:
        self.kind = np.full(size, TaskKind.JOIN, dtype=np.int8)
        self.stream = np.full(size, _NONE, dtype=np.int64)
        self.duration_s = np.zeros(size)
        self.size_bytes = np.zeros(size)
        self.link = np.full(size, _NONE, dtype=np.int64)
        self.stage = stage
        self.deadline = np.full(size, _NONE, dtype=np.int64)
        self._deps: list[tuple[np.ndarray, list[np.ndarray]]] = []
        self._text: list[tuple[np.ndarray, np.ndarray, str, str | np.ndarray]] = []

    def put(self, at: np.ndarray, kind: TaskKind, name: np.ndarray, dim: str, role: str | np.ndarray,
            deps: list[np.ndarray]) -> None:
        self.kind[at] = kind
        self._text.append((at, name, dim, role))
        self._deps.append((at, deps))

    def transfer(self, at: np.ndarray, b: _Builder, link: np.ndarray, seconds: np.ndarray | float) -> None:
        """Make the tasks at ``at`` transfers on the builder's links ``link``, taking ``seconds`` there alone."""
        self.link[at] = link
        self.size_bytes[at] = seconds * np.array([b.rate(k) for k in range(int(link.max()) + 1)])[link]

    def _labels(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Names, dims and roles, each written once at the width ``np.array`` of them would take."""
        def filled(values: list[tuple[np.ndarray, str | np.ndarray]]) -> np.ndarray:
            width = max(max(1, int(np.char.str_len(v).max(initial=0))) for _, v in values)
            out = np.zeros(self.kind.size, dtype=f"<U{width}")
            for at, v in values:
                out[at] = v
            return out

        return (filled([(at, name) for at, name, _, _ in self._text]),
                filled([(at, dim) for at, _, dim, _ in self._text]),
                filled([(at, role) for at, _, _, role in self._text]))

    def block(self) -> _Block:
        """The tasks, each one's present dependency columns in the order given."""
        count = np.zeros(self.kind.size, dtype=np.int64)
        stacked = [(at, np.stack(deps, axis=1)) for at, deps in self._deps]  # (tasks, columns) per put
        for at, deps in stacked:
            count[at] = (deps >= 0).sum(axis=1)  # every task is put once
        begin = np.cumsum(count) - count
        ids = np.empty(int(count[-1] + begin[-1]) if count.size else 0, dtype=np.int64)
        for at, deps in stacked:
            present = deps >= 0
            place = begin[at][:, None] + np.cumsum(present, axis=1) - 1  # row by row, present columns in order
            ids[place[present]] = deps[present]
        name, dim, role = self._labels()
        return _Block(kind=self.kind, stream=self.stream, duration_s=self.duration_s, size_bytes=self.size_bytes,
                      link=self.link, dep_count=count, dep_ids=ids, name=name, dim=dim, role=role,
                      stage=self.stage, deadline=self.deadline)


def _text(values: np.ndarray) -> np.ndarray:
    """Non-negative integers as decimal strings (looked up: a cast formats each one in turn)."""
    digits = np.array([str(i) for i in range(int(values.max(initial=0)) + 1)])
    return digits[values]


def _join_text(*parts: str | np.ndarray) -> np.ndarray:
    out = np.asarray(parts[0])
    for part in parts[1:]:
        out = np.char.add(out, part)
    return out


def _stage_links(b: _Builder, p: int, what: str, over_nic: bool) -> np.ndarray:
    """Shape (p,): each stage's link for ``what`` traffic (the builder's keys)."""
    return np.array([b.link(s, what, over_nic) for s in range(p)], dtype=np.int64)


@dataclass(frozen=True)
class _PassBlock:
    """What the section functions of the chunk passes share: the passes, their layout and labels, and the
    dependencies every pass starts from (the stage's previous pass end, what it receives), as task ids."""

    shape: _Shape
    terms: _BudgetTerms
    ps: _Passes
    dirs: dict[bool, _Direction]
    lay: _Layout
    base: int
    label: np.ndarray
    starts_after: list[np.ndarray]


def _chunk_passes(b: _Builder, shape: _Shape, terms: _BudgetTerms, bubbles: list[int],
                  gathers: dict[tuple[int, int, int], int]) -> _PassTasks:
    """Every chunk pass, in the walk's order, as one block: its hidden exchanges, per-pass gather, layers, exposed
    exchange, join and send (the functions below, one per kind of task)."""
    ps = _walk_schedules(shape)
    dirs = {True: _direction(shape, terms, _Pass("F", 0, 0, 0)), False: _direction(shape, terms, _Pass("B", 0, 0, 0))}
    lay, base = _layout(shape, terms, ps, dirs), b.num_tasks
    first = np.asarray(bubbles, dtype=np.int64)[ps.s] if bubbles else np.full(ps.s.size, _NONE)
    prev_end = np.where(ps.prev >= 0, lay.end[ps.prev] + base, first)  # the stage's previous pass, or its bubble
    received = np.where(ps.received >= 0, lay.out[ps.received] + base, _NONE)
    label = _join_text(np.where(ps.forward, "F s", "B s"), _text(ps.s), " m", _text(ps.mb), " c", _text(ps.c))
    x = _PassBlock(shape, terms, ps, dirs, lay, base, label, [prev_end, received])
    cols = _Columns(lay.size, np.repeat(ps.s, lay.out - lay.start + 1))
    _hidden_exchanges(b, x, cols)
    gather = _pass_gathers(b, x, cols)
    _layers(x, cols, gather, gathers)
    _pass_ends(b, x, cols)
    _pp_sends(b, x, cols)
    b.block(cols.block())
    return _PassTasks(passes=ps, first_layer=lay.first_layer + base, layers_per_chunk=lay.L)


def _hidden_exchanges(b: _Builder, x: _PassBlock, cols: _Columns) -> None:
    """The pass's hidden TP, CP, EP time: transfers that start with it, due at its last layer."""
    for forward, direction in x.dirs.items():
        rows = np.flatnonzero(x.ps.forward == forward)
        for k, (d, t) in enumerate(direction.hidden):
            at = x.lay.start[rows] + k
            cols.put(at, TaskKind.TRANSFER, np.char.add(f"{d.value.upper()} hidden ", x.label[rows]), d.value,
                     "hidden", [dep[rows] for dep in x.starts_after])
            cols.transfer(at, b, _stage_links(b, x.shape.stages, d.value.upper(), x.terms.over_nic[d])[x.ps.s[rows]], t)
            cols.deadline[at] = x.lay.last_layer[rows] + x.base


def _pass_gathers(b: _Builder, x: _PassBlock, cols: _Columns) -> np.ndarray:
    """Resharded DP: the parameters gathered again before every pass, prefetched while the previous computes
    (FSDP); it queues behind the stage's previous gather. Each pass's gather task (-1: none)."""
    if not x.lay.G:
        return np.full(x.ps.s.size, _NONE)
    at, prev = x.lay.start + x.lay.H, x.ps.prev
    gather = at + x.base
    after = [np.where(prev >= 0, x.lay.first_layer[prev] + x.base, _NONE), np.where(prev >= 0, gather[prev], _NONE)]
    cols.put(at, TaskKind.TRANSFER, np.char.add("DP all-gather ", x.label), "dp", "gather", after)
    seconds = x.terms.gather.total_s / (x.terms.gather.rounds * x.shape.chunks)
    cols.transfer(at, b, _stage_links(b, x.shape.stages, "DP", True)[x.ps.s], seconds)
    return gather


def _layers(x: _PassBlock, cols: _Columns, gather: np.ndarray, gathers: dict[tuple[int, int, int], int]) -> None:
    """The pass's layer tasks (backward in reverse layer order): the first waits for the pass's start, each next
    for the one before; a micro-batch 0 forward layer for its step gather, and with DP not overlapped the
    stage's first layer for every bucket (the last one queues behind the rest)."""
    ps, L, shape = x.ps, x.lay.L, x.shape
    table = np.full((shape.stages, shape.chunks, L), _NONE, dtype=np.int64)
    for slot, g in gathers.items():
        table[slot] = g
    e = np.arange(L)[None, :]  # (P, L): the pass's e-th layer task
    first, fwd = e == 0, ps.forward[:, None]
    layer = np.where(fwd, e, L - 1 - e)
    at = x.lay.first_layer[:, None] + e
    step_gather = np.where(fwd & (ps.mb == 0)[:, None], table[ps.s[:, None], ps.c[:, None], layer], _NONE)
    not_overlapped = np.full(ps.s.size, _NONE)
    if x.terms.dp_not_overlapped and gathers:
        not_overlapped = np.where(ps.prev < 0, table[ps.s, shape.chunks - 1, L - 1], _NONE)
    prev_end, received = x.starts_after

    def first_only(dep: np.ndarray) -> np.ndarray:
        return np.where(first, dep[:, None], _NONE)

    # the first: [previous pass end, what it receives, its gather, its step gather, every bucket]; the rest:
    # [the layer before, its step gather]
    deps = [np.where(first, prev_end[:, None], at - 1 + x.base), first_only(received), first_only(gather),
            step_gather, first_only(not_overlapped)]
    name = _join_text(x.label[:, None], " l", _text(layer))
    at = at.ravel()
    cols.put(at, TaskKind.COMPUTE, name.ravel(), "compute", np.repeat(np.where(ps.forward, "fwd", "bwd"), L),
             [d.ravel() for d in deps])
    cols.stream[at] = np.repeat(ps.s, L)
    cols.duration_s[at] = np.repeat(np.where(ps.forward, x.dirs[True].layer_s, x.dirs[False].layer_s), L)


def _pass_ends(b: _Builder, x: _PassBlock, cols: _Columns) -> None:
    """The pass's exposed TP, CP, EP time after its compute (one transfer, on the link of the dimension with the
    most), and a join with its hidden transfers: the task the stage's next pass and the send wait for."""
    lay, ps = x.lay, x.ps
    end = lay.last_layer + x.base
    if lay.X.any():
        d_main = max(x.terms.exposed_s, key=lambda d: x.terms.exposed_s[d])
        rows = np.flatnonzero(lay.X)
        at = lay.last_layer[rows] + 1
        cols.put(at, TaskKind.TRANSFER, np.char.add(f"{d_main.value.upper()} exposed ", x.label[rows]),
                 d_main.value, "exposed", [end[rows]])
        seconds = np.where(ps.forward[rows], x.dirs[True].exposed_s, x.dirs[False].exposed_s)
        links = _stage_links(b, x.shape.stages, d_main.value.upper(), x.terms.over_nic[d_main])
        cols.transfer(at, b, links[ps.s[rows]], seconds)
        end = end + lay.X
    if lay.J.any():
        rows = np.flatnonzero(lay.J)
        hidden = [np.where(lay.H[rows] > k, lay.start[rows] + k + x.base, _NONE) for k in range(int(lay.H.max()))]
        cols.put(lay.end[rows], TaskKind.JOIN, np.char.add("pass end ", x.label[rows]), "", "",
                 [end[rows], *hidden])


def _pp_sends(b: _Builder, x: _PassBlock, cols: _Columns) -> None:
    """The activation (forward) or gradient (backward) to the next virtual stage, on the sender's link."""
    lay, ps = x.lay, x.ps
    if not lay.S.any():
        return
    rows = np.flatnonzero(lay.S)
    j, target = ps.c[rows] * x.shape.stages + ps.s[rows], _target(ps, x.shape.stages)[rows]
    name = _join_text(np.where(ps.forward[rows], "PP send F m", "PP send B m"), _text(ps.mb[rows]), " v", _text(j),
                      "->v", _text(target))
    cols.put(lay.out[rows], TaskKind.TRANSFER, name, "pp", "send", [lay.end[rows] + x.base])
    cols.transfer(lay.out[rows], b, _stage_links(b, x.shape.stages, "PP", x.terms.pp_over_nic)[ps.s[rows]],
                  x.terms.pp_call_s)


def _bucket_ready(shape: _Shape, tasks: _PassTasks, s: int, rounds: int, n: int) -> dict[tuple[int, int], int]:
    """(micro-batch, bucket) -> the last backward task of its layers, for the last ``rounds`` micro-batches."""
    m = shape.microbatches
    ready: dict[tuple[int, int], int] = {}
    for mb in range(m - rounds, m):
        for c in range(shape.chunks):
            for layer in range(shape.layers_per_chunk):
                key, t = (mb, shape.bucket(c, layer, n)), tasks.layer_task("B", mb, c, layer, s)
                ready[key] = max(ready[key], t) if key in ready else t
    return ready


def _reduce_buckets(b: _Builder, shape: _Shape, terms: _BudgetTerms, tasks: _PassTasks, s: int,
                    last_compute: int) -> list[int]:
    """DP reduce-scatter / all-reduce buckets of stage ``s``: each after the last backward of its layers (sharded:
    one per layer after every backward), queued on one link; HSDP's sums across replicas after the last round."""
    m, work = shape.microbatches, terms.reduce
    link = b.link(s, "DP", True)
    rounds = m if work.rounds > 1 else 1
    n = shape.slots if rounds > 1 else work.buckets(shape.slots)
    per_bucket = work.total_s / (rounds * n)
    ready = _bucket_ready(shape, tasks, s, rounds, n)
    last_round = sum(1 for mb, _ in ready if mb == m - 1)
    buckets: list[int] = []
    replica_sums: list[int] = []
    for after, (mb, k) in sorted((t, key) for key, t in ready.items()):  # in backward order
        if terms.dp_not_overlapped:
            after = last_compute  # not overlapped: after the stage's backward ends
        deps = [after] + buckets[-1:]  # one communicator: buckets queue in issue order (NCCL)
        # due by the stage's last backward, unless that launches it: then nothing is left to hide behind
        due = None if after == last_compute else last_compute
        buckets.append(b.send(f"DP reduce s{s} m{mb} bucket {k}", per_bucket, link, deps, "dp", "reduce", s, due))
        if terms.replicas_s > 0 and mb == m - 1:  # the bucket's shard, summed across the HSDP replicas
            deps = [buckets[-1]] + replica_sums[-1:]
            replica_sums.append(b.send(f"DP all-reduce across replicas s{s} bucket {k}", terms.replicas_s / last_round,
                                       link, deps, "dp", "reduce", s, due))
    return buckets + replica_sums


def _gather_deadlines(b: _Builder, tasks: _PassTasks, gathers: dict[tuple[int, int, int], int]) -> None:
    """A step's gather bucket is due at the first forward layer it holds (layers in order: the first one seen)."""
    for (s, c, layer), g in gathers.items():
        if not b.has_deadline(g):
            b.set_deadline(g, tasks.layer_task("F", 0, c, layer, s))
