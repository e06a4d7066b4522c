"""Budget -> the task graph of one training step: one pipeline, every stage, every micro-batch.

The graph takes its numbers from the analytical budget of the same scenario and lets the
schedule and the links decide the timing:

- **Compute**: each stage runs its chunks' forward and backward passes in the schedule's order
  (GPipe, 1F1B, interleaved 1F1B as Megatron orders it), one task per layer; the busiest
  stage's per-micro-batch time of the budget, split 1 : 2 between forward and backward.
- **Critical-path exchanges** (TP, CP, EP): after each chunk pass, a transfer of its exposed
  time on the stage's NVLink (or NIC) link that the next pass waits for; the part the budget
  hides runs beside the compute and must finish before the next pass (a deadline).
- **PP**: each chunk pass sends its activation (forward) or gradient (backward) to the next
  virtual stage on the sender's link; the receiver waits for it.
- **DP**: one bucket per layer: a reduce-scatter (or all-reduce) launched when the layer's last
  backward finishes, an all-gather before the layer's first forward, on the stage's NIC, which
  PP sends share (``contention=False`` gives each dimension its own link). The optimizer step
  runs after the stage's buckets.

A collective is a transfer of ``time x capacity`` bytes: with a link to itself it takes the
budget's time (latency included); sharing a link, it slows as max-min sharing says. ZB-H1,
ZB-H2, DualPipe (and interleaving with m not a multiple of p) are run with their closed-form
bubble as idle time at the start of every stage, not task by task.

What the simulator takes from the budget, and what it decides
-------------------------------------------------------------
The graph's smallest unit is a layer's forward or backward on one stage. What happens inside
it (which kernel runs beside which collective) is not modelled, so every overlap that lives
inside a pass is taken from the budget; only what the order of passes, their dependencies and
the links decide is the simulator's own. ``_BudgetTerms`` gathers everything taken.

Taken, not decided (fields of ``budget``, ``budget.plan`` and ``budget.exchanges``):

- Compute: ``budget.compute_s - plan.optimizer_s``, spread evenly over micro-batches, chunks and
  layers; ``plan.optimizer_s`` once per stage.
- TP, CP, EP: each exchange's ``exposed_s`` (the three dimensions summed, one blocking transfer
  after each pass, on the link of the dimension with the most) and ``time_s - exposed_s`` (one
  transfer per dimension beside the pass), each spread 1 : 2 over the forward and backward passes.
  That split is the budget's overlap fraction phi (``overlap.tp``, ``.cp``, ``.ep`` or their
  "auto" defaults, budget/step.py ``_exposed``), used as given: without contention each transfer
  has its link to itself and takes its budget time, so "the simulation equals the budget without
  contention" holds for these terms by construction and cannot catch an overlap error in TP, CP
  or EP. ``nic_bytes > 0`` puts a dimension's transfers on the NIC.
- SM sharing: each layer is lengthened by ``plan.comm_sm_share`` times its share of the hidden
  TP/CP/EP time and of the budget's hidden DP and PP time (``time_s - exposed_s``), as the
  budget's ``contention_s`` is.
- Sizes: PP's ``call_s`` (one send); DP's ``time_s`` per collective kind (reduce-scatter or
  all-reduce, all-gather), its rounds ``calls / units`` and its bucket size (``units``, at least a
  layer); HSDP's cross-replica all-reduce ``time_s``. Every transfer moves its time times
  ``plan.nvlink_Bps`` or ``plan.nic_Bps``, so the budget's latency and algorithm are inside it.
- The bubble of a schedule run in closed form: ``budget.bubble_s`` plus PP's ``exposed_s``.

Decided by the task graph:

- The bubble and PP's exposed time (GPipe, 1F1B, interleaved 1F1B), from the schedule's order
  and the sends' dependencies; the budget's ``bubble_s`` and PP ``exposed_s`` are not used.
- DP's exposed time, from when buckets launch (after their layers' last backward; gathers before
  their first forward), their queue in issue order on one link and the compute left to hide them;
  the budget's DP ``exposed_s`` is not used. ``overlap.dp = 0`` (from the scenario) runs them
  outside the compute: reduces after the stage's backward, gathers before its first layer.
- Link sharing (``contention=True``): max-min sharing of each stage's NIC by its PP sends, DP
  buckets and the TP/CP/EP transfers that cross the NIC.
- Deadlines: which hidden transfers end after the compute meant to hide them (sim/step.py).

So the simulator checks the budget's bubble, PP and DP overlap; TP, CP and EP overlap need
another oracle (a measured trace, a published figure).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

import numpy as np

from stepbudget.budget.step import Budget
from stepbudget.enums import SCHEDULE_CODES, Axis, Collective, Schedule
from stepbudget.inputs.scenario import ScenarioError
from stepbudget.plan.derive import Plan
from stepbudget.sim.graph import Task, TaskGraph, compute, join, transfer

MAX_TASKS = 600_000
"""Most tasks one step graph may have (about 30 s and 1 GB of simulation); larger steps are coarsened
to one task per chunk pass, or refused."""

_GPIPE, _1F1B, _INTERLEAVED = (SCHEDULE_CODES[s] for s in (Schedule.GPIPE, Schedule.ONE_F_ONE_B,
                                                            Schedule.INTERLEAVED_1F1B))
_ON_PATH = (Axis.TP, Axis.CP, Axis.EP)
"""The dimensions whose exchanges sit in a pass: their hidden and exposed split is the budget's."""
_NONE = -1
"""What ``StepProgram.stage`` and ``.deadline`` hold where there is no stage or deadline."""


@dataclass(frozen=True)
class StepProgram:
    """A step as a task graph, with what each task stands for."""

    graph: TaskGraph
    capacity_Bps: np.ndarray
    """Shape (links,): each link's rate; collectives are sized in bytes at this rate."""
    link_names: list[str]
    stream_names: list[str]
    dim: np.ndarray
    """Per task: "compute", "tp", "cp", "pp", "dp", "ep", "idle" or "" (joins)."""
    role: np.ndarray
    """Per task: "fwd", "bwd", "exposed", "hidden", "send", "reduce", "gather", "optimizer", "bubble", ""."""
    stage: np.ndarray
    """Per task: pipeline stage (-1 for the final join)."""
    deadline: np.ndarray
    """Per task: the task it must finish before to stay hidden (-1: none)."""
    budget: Budget
    closed_form_bubble: bool
    """True when the schedule's bubble is idle time from its closed form, not task by task."""


def _order(schedule: int, p: int, s: int, m: int, v: int) -> list[tuple[str, int, int]]:
    """(pass, micro-batch, chunk) in the order stage ``s`` runs them."""
    if schedule == _GPIPE:
        return [("F", i, 0) for i in range(m)] + [("B", i, 0) for i in range(m)]
    if schedule == _INTERLEAVED:
        def chunk(k: int, forward: bool) -> tuple[int, int]:  # Megatron's get_model_chunk_id
            c = (k % (p * v)) // p
            return (k // (p * v)) * p + k % p, (c if forward else v - 1 - c)
        total = m * v
        # Megatron: with as many micro-batches as stages, every rank runs all its forwards first
        warmup = total if m == p else min((p - s - 1) * 2 + (v - 1) * p, total)
    else:
        def chunk(k: int, forward: bool) -> tuple[int, int]:
            return k, 0
        total = m
        warmup = min(p - s - 1, m)
    out = [("F", *chunk(k, True)) for k in range(warmup)]
    for i in range(total - warmup):
        out.append(("F", *chunk(warmup + i, True)))
        out.append(("B", *chunk(i, False)))
    out += [("B", *chunk(k, False)) for k in range(total - warmup, total)]
    return out


def _closed_form(schedule: int, p: int, m: int) -> bool:
    """Whether the schedule runs as its closed-form bubble: not GPipe or 1F1B, nor interleaving with p | m."""
    return schedule not in (_GPIPE, _1F1B, _INTERLEAVED) or (schedule == _INTERLEAVED and m % p != 0)


def _microbatches(plan: Plan) -> int:
    return max(int(round(float(plan.microbatches))), 1)


def program_size(budget: Budget) -> int:
    """About how many tasks ``step_program`` builds for ``budget`` (what simulating it costs): per forward or
    backward chunk pass of every stage and micro-batch, its layers, the exposed TP/CP/EP transfer after it,
    each hidden one beside it and their join, and the PP send; DP buckets and the optimizer are few.

    The passes' tasks are counted exactly but for the sends: every pass is counted with one, while a
    micro-batch's first forward and last backward send nothing (2 m fewer). Left out: DP gathers and
    buckets, the closed-form bubbles, the optimizer steps and the final join."""
    plan = budget.plan
    p, m = int(plan.pp), _microbatches(plan)
    closed_form = _closed_form(int(plan.schedule), p, m)
    v_run = 1 if closed_form else int(plan.v)
    layers_per_chunk = max(1, int(round(float(plan.layers_per_gpu) / v_run)))
    passes = 2 * p * m * v_run
    exposed, hidden, sends = 0.0, set(), False
    for x, e in zip(budget.exchanges, budget.exposed_s):
        if float(x.calls) <= 0:
            continue
        if x.dim in _ON_PATH:
            exposed += float(e)
            if float(x.time_s) > float(e):
                hidden.add(x.dim)
        sends |= x.dim == Axis.PP and not closed_form
    layers = 1 if passes * (layers_per_chunk + 3) > MAX_TASKS else layers_per_chunk
    return passes * (layers + (exposed > 0) + (len(hidden) + 1 if hidden else 0) + sends)


# -- what the graph runs: the pipeline's shape, and the budget's terms it takes as given ------------------------------

@dataclass(frozen=True)
class _Shape:
    """The pipeline as the graph runs it: a closed-form schedule runs as 1F1B with one chunk."""

    stages: int
    """p, pipeline stages."""
    chunks: int
    """v, model chunks per stage as run (1 for a closed-form schedule)."""
    microbatches: int
    """m, micro-batches per step (at least 1)."""
    schedule: int
    """The schedule code the passes are ordered by."""
    closed_form: bool
    """The bubble is idle time from the budget's closed form, not emerging from the order of passes."""
    layers_per_chunk: int
    """Layer tasks per chunk pass (1 when the step is too large to run layer by layer)."""
    microbatch_s: float
    """One micro-batch's forward and backward through all of a stage's chunks."""

    @property
    def passes(self) -> int:
        """Chunk passes of one direction on a stage: m v."""
        return self.microbatches * self.chunks

    @property
    def slots(self) -> int:
        """A stage's layer tasks of one pass direction, in forward order: v layers_per_chunk."""
        return self.chunks * self.layers_per_chunk

    def bucket(self, c: int, layer: int, n: int) -> int:
        """Which of ``n`` DP buckets holds ``layer`` of chunk ``c`` (slots split evenly, in forward order)."""
        return (c * self.layers_per_chunk + layer) * n // self.slots


def _shape(plan: Plan, budget: Budget) -> _Shape:
    """The pipeline to run, coarsened to a task per chunk pass when large; ScenarioError when too large."""
    p, v, m, schedule = int(plan.pp), int(plan.v), _microbatches(plan), int(plan.schedule)
    closed_form = _closed_form(schedule, p, m)
    v_run, sched_run = (1, _1F1B) if closed_form else (v, schedule)
    layers_per_chunk = max(1, int(round(float(plan.layers_per_gpu) / v_run)))
    passes_all = 2 * p * m * v_run  # each pass: its layers, an exchange, a send (and a join): layers + 3 tasks
    if passes_all * 4 > MAX_TASKS:
        raise ScenarioError(
            f"simulate: {m:,} micro-batches x {p} stages x {v_run} chunks x forward and backward = {passes_all:,} "
            f"passes is more than the simulator takes ({MAX_TASKS // 4:,}); raise layout.micro_batch or shrink the batch"
        )
    if passes_all * (layers_per_chunk + 3) > MAX_TASKS:
        layers_per_chunk = 1  # one task per chunk pass: the same times, coarser DP buckets
    comp = float(budget.compute_s - plan.optimizer_s)
    return _Shape(stages=p, chunks=v_run, microbatches=m, schedule=sched_run, closed_form=closed_form,
                  layers_per_chunk=layers_per_chunk, microbatch_s=comp / m)


@dataclass(frozen=True)
class _DPWork:
    """One kind of DP collective (reduce: reduce-scatter or all-reduce; gather: all-gather) of the budget."""

    total_s: float = 0.0
    """Its time per step, all calls."""
    rounds: int = 1
    """How often a step runs it over all layers: 1, or more when resharded (once per micro-batch pass)."""
    edge_s: float = 0.0
    """The time of a round's last bucket (first, for gathers): a bucket of ``units``, at least a layer."""

    def buckets(self, slots: int) -> int:
        """Buckets a round runs in: as many as give the budget's edge bucket, at most one per layer slot."""
        return int(min(max(round(self.total_s / self.edge_s), 1), slots)) if self.edge_s > 0 else slots


@dataclass(frozen=True)
class _BudgetTerms:
    """The budget's times the graph takes as given (the module docstring says which and why)."""

    exposed_s: dict[Axis, float]
    """TP, CP, EP: the step's exposed time, blocking after each pass."""
    hidden_s: dict[Axis, float]
    """TP, CP, EP: the step's hidden time (``time_s - exposed_s``), beside each pass."""
    over_nic: dict[Axis, bool]
    """TP, CP, EP: whether the dimension's exchanges cross the NIC."""
    reduce: _DPWork
    gather: _DPWork
    replicas_s: float
    """HSDP: the all-reduce across replicas of the step's gradient shards."""
    pp_call_s: float
    """One PP send."""
    pp_exposed_s: float
    """PP's exposed time, used only with a closed-form bubble."""
    behind_s: float
    """DP and PP time the budget hides behind compute: its SM share is charged evenly to the passes."""
    sm_share: float
    """``plan.comm_sm_share``: the share of compute a hidden communication kernel holds while it runs."""
    pp_over_nic: bool
    dp_not_overlapped: bool
    """``overlap.dp = 0``: buckets run outside the compute."""


def _budget_terms(budget: Budget) -> _BudgetTerms:
    """The budget's exchanges, summed by what the graph does with them."""
    plan = budget.plan
    exposed = {d: 0.0 for d in _ON_PATH}
    hidden = {d: 0.0 for d in _ON_PATH}
    over_nic = {d: False for d in _ON_PATH}
    dp = {"reduce": 0.0, "gather": 0.0}
    dp_rounds = {"reduce": 1, "gather": 1}
    dp_edge = {"reduce": 0.0, "gather": 0.0}
    replicas_s, pp_call, pp_exposed, behind = 0.0, 0.0, 0.0, 0.0
    layers = int(plan.layer_units)
    for x, exposed_s in zip(budget.exchanges, budget.exposed_s):
        if float(x.calls) <= 0:
            continue
        t, e = float(x.time_s), float(exposed_s)
        if x.dim in (Axis.DP, Axis.PP):
            behind += t - e
        if x.dim in exposed:
            exposed[x.dim] += e
            hidden[x.dim] += t - e
            over_nic[x.dim] |= bool(float(x.nic_bytes) > 0)
        elif x.dim == Axis.PP:
            pp_call, pp_exposed = float(x.call_s), e
        elif x.dim == Axis.DP and x.collective == Collective.ALL_REDUCE and plan.dp_replicas > 1:
            # HSDP (never DDP, whose all-reduce is the gradients'): once per step, after the last reduce-scatters
            replicas_s += t
        elif x.dim == Axis.DP:
            kind = "gather" if x.collective == Collective.ALL_GATHER else "reduce"
            units = float(np.asarray(x.units))
            rounds = max(int(round(float(x.calls) / units)), 1)
            dp[kind] += t
            dp_rounds[kind] = max(dp_rounds[kind], rounds)
            dp_edge[kind] += t / rounds / min(units, layers)  # a bucket, at least a layer (budget/step.py)
    work = {k: _DPWork(dp[k], dp_rounds[k], dp_edge[k]) for k in dp}
    dp_setting = plan.scenario.overlap.dp
    return _BudgetTerms(
        exposed_s=exposed, hidden_s=hidden, over_nic=over_nic, reduce=work["reduce"], gather=work["gather"],
        replicas_s=replicas_s, pp_call_s=pp_call, pp_exposed_s=pp_exposed, behind_s=behind,
        sm_share=plan.comm_sm_share, pp_over_nic=bool(int(np.asarray(plan.q["pp"])) == 1),
        dp_not_overlapped=dp_setting != "auto" and float(dp_setting) == 0,
    )


# -- the builder: tasks in emission order, what each stands for, and the links they cross ----------------------------

class _Builder:
    """Appends tasks and their labels; a link is made on first use: per stage, one for each kind of traffic,
    and with contention the NIC ones are one link."""

    def __init__(self, plan: Plan, contention: bool) -> None:
        self.tasks: list[Task] = []
        self.dim: list[str] = []
        self.role: list[str] = []
        self.stage: list[int | None] = []
        self.deadline: list[int | None] = []
        self.link_names: list[str] = []
        self.capacity: list[float] = []
        self._contention = contention
        self._nvlink_Bps, self._nic_Bps = float(plan.nvlink_Bps), float(plan.nic_Bps)

    def add(self, task: Task, dim: str, role: str, stage: int | None, deadline: int | None = None) -> int:
        self.tasks.append(task)
        self.dim.append(dim)
        self.role.append(role)
        self.stage.append(stage)
        self.deadline.append(deadline)
        return len(self.tasks) - 1

    def link(self, s: int, what: str, over_nic: bool) -> int:
        """Stage ``s``'s link for ``what`` traffic; with contention, all of a stage's NIC traffic shares one."""
        if self._contention and over_nic:
            name, rate = f"stage {s} NIC", self._nic_Bps
        else:
            name = f"stage {s} {what} ({'NIC' if over_nic else 'NVLink'})"
            rate = self._nic_Bps if over_nic else self._nvlink_Bps
        if name not in self.link_names:
            self.link_names.append(name)
            self.capacity.append(rate)
        return self.link_names.index(name)

    def send(self, name: str, seconds: float, link: int, deps: Sequence[int], dim: str, role: str, stage: int,
             deadline: int | None = None) -> int:
        """A transfer that takes ``seconds`` on ``link`` alone: its bytes are the time at the link's rate."""
        return self.add(transfer(name, seconds * self.capacity[link], [link], deps), dim, role, stage, deadline)

    def program(self, budget: Budget, shape: _Shape) -> StepProgram:
        def numbered(xs: list[int | None]) -> np.ndarray:
            return np.array([_NONE if x is None else x for x in xs])

        return StepProgram(
            graph=TaskGraph.from_tasks(self.tasks), capacity_Bps=np.array(self.capacity, dtype=float),
            link_names=self.link_names, stream_names=[f"stage {s} compute" for s in range(shape.stages)],
            dim=np.array(self.dim), role=np.array(self.role), stage=numbered(self.stage),
            deadline=numbered(self.deadline), budget=budget, closed_form_bubble=shape.closed_form,
        )


@dataclass(frozen=True)
class _Pass:
    """One chunk pass: the forward ("F") or backward ("B") of micro-batch ``mb`` through chunk ``c`` of stage ``s``."""

    kind: str
    mb: int
    c: int
    s: int

    @property
    def forward(self) -> bool:
        return self.kind == "F"

    @property
    def share(self) -> float:
        """Its direction's share of a micro-batch's compute and exchanges: forward 1, backward 2 (two gradients)."""
        return 1 / 3 if self.forward else 2 / 3

    @property
    def label(self) -> str:
        return f"{self.kind} s{self.s} m{self.mb} c{self.c}"

    def virtual_stage(self, p: int) -> int:
        """j = c p + s: the pass's place in the pipeline of p v virtual stages."""
        return self.c * p + self.s


class _Walk:
    """Where the walk over the stages' schedules stands: what each stage emitted last, and the tasks later
    passes (and the DP buckets after the walk) wait for."""

    def __init__(self, p: int) -> None:
        none: list[int | None] = [None] * p
        self.prev_end = list(none)
        """Per stage: the end of its previous pass (its bubble, in closed form), which the next one follows."""
        self.last_compute = list(none)
        self.pass_start = list(none)
        """Per stage: the first layer of its latest pass, from which the next pass's gather is prefetched."""
        self.pass_gather = list(none)
        """Per stage: its latest per-pass gather (resharded DP), which the next queues behind."""
        self.passes_done: dict[tuple[str, int, int, int], int] = {}
        """(pass, micro-batch, chunk, stage) -> the pass's last task."""
        self.sends: dict[tuple[str, int, int], int] = {}
        """(pass, micro-batch, virtual stage) -> what the next virtual stage receives: the send, or the pass end."""
        self.layer_tasks: dict[tuple[str, int, int, int, int], int] = {}
        """(pass, micro-batch, chunk, layer, stage) -> the layer's compute task."""


class _Unsent(Enum):
    """What a pass receives when the walk has not emitted its sender yet: the stage waits, the walk comes back."""

    SENDER = "not emitted yet"


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


def _closed_form_bubbles(b: _Builder, shape: _Shape, terms: _BudgetTerms, budget: Budget, walk: _Walk) -> None:
    """The budget's bubble (and PP's exposed time) as idle time at the start of every stage."""
    bubble = float(budget.bubble_s) + terms.pp_exposed_s
    for s in range(shape.stages):
        walk.prev_end[s] = b.add(compute(f"bubble s{s}", s, bubble), "idle", "bubble", s)


def _received(shape: _Shape, walk: _Walk, ps: _Pass) -> int | None | _Unsent:
    """The task ``ps`` receives from the previous virtual stage: None if nothing, SENDER if not emitted yet."""
    if shape.closed_form:
        return None
    j, last = ps.virtual_stage(shape.stages), shape.stages * shape.chunks - 1
    if ps.forward:
        return None if j == 0 else walk.sends.get(("F", ps.mb, j - 1), _Unsent.SENDER)
    if j == last:  # the last virtual stage turns its own forward around
        return walk.passes_done.get(("F", ps.mb, ps.c, ps.s), _Unsent.SENDER)
    return walk.sends.get(("B", ps.mb, j + 1), _Unsent.SENDER)


def _hidden_exchanges(b: _Builder, terms: _BudgetTerms, ps: _Pass, hidden: dict[Axis, float],
                      deps: list[int]) -> list[int]:
    """The pass's hidden TP, CP, EP time: transfers that start with it; their deadline is set at its end."""
    side = []
    for d, t in hidden.items():
        if t > 0:
            link = b.link(ps.s, d.value.upper(), terms.over_nic[d])
            side.append(b.send(f"{d.value.upper()} hidden {ps.label}", t, link, deps, d.value, "hidden", ps.s))
    return side


def _pass_gather(b: _Builder, shape: _Shape, terms: _BudgetTerms, walk: _Walk, ps: _Pass) -> int:
    """Resharded DP: the parameters gathered again before every pass, prefetched while the previous computes
    (FSDP); it queues behind the stage's previous gather."""
    s = ps.s
    link = b.link(s, "DP", True)
    seconds = terms.gather.total_s / (terms.gather.rounds * shape.chunks)
    after = [t for t in (walk.pass_start[s], walk.pass_gather[s]) if t is not None]
    gather = b.send(f"DP all-gather {ps.label}", seconds, link, after, "dp", "gather", s)
    walk.pass_gather[s] = gather
    return gather


def _layers(b: _Builder, shape: _Shape, terms: _BudgetTerms, walk: _Walk, ps: _Pass, deps: list[int],
            extra_s: float, gathers: dict[tuple[int, int, int], int]) -> int:
    """The pass's layer tasks (backward in reverse layer order); the first waits for ``deps``. Its last."""
    s, lpc = ps.s, shape.layers_per_chunk
    tasks: list[int] = []
    for layer in (range(lpc) if ps.forward else reversed(range(lpc))):
        layer_deps = [tasks[-1]] if tasks else list(deps)
        if ps.forward and ps.mb == 0 and (s, ps.c, layer) in gathers:
            layer_deps.append(gathers[(s, ps.c, layer)])
        if terms.dp_not_overlapped and gathers and not tasks and walk.last_compute[s] is None:
            # not overlapped: every bucket (the last one queues behind the rest) before any compute
            layer_deps.append(gathers[(s, shape.chunks - 1, lpc - 1)])
        dur = (shape.microbatch_s * ps.share / shape.chunks) / lpc + extra_s
        tasks.append(b.add(compute(f"{ps.label} l{layer}", s, dur, layer_deps), "compute",
                           "fwd" if ps.forward else "bwd", s))
        walk.layer_tasks[(ps.kind, ps.mb, ps.c, layer, s)] = tasks[-1]
    walk.pass_start[s] = tasks[0]  # the next pass's gather is prefetched from here
    walk.last_compute[s] = tasks[-1]
    return tasks[-1]


def _pass_end(b: _Builder, shape: _Shape, terms: _BudgetTerms, ps: _Pass, last: int, side: list[int]) -> int:
    """The pass's exposed TP, CP, EP time after its compute (one transfer, on the link of the dimension with the
    most), and a join with its hidden transfers: the task the stage's next pass and the send wait for."""
    end = last
    blocking = sum(terms.exposed_s[d] for d in terms.exposed_s) * ps.share / shape.passes
    if blocking > 0:
        d_main = max(terms.exposed_s, key=lambda d: terms.exposed_s[d])
        link = b.link(ps.s, d_main.value.upper(), terms.over_nic[d_main])
        end = b.send(f"{d_main.value.upper()} exposed {ps.label}", blocking, link, [last], d_main.value, "exposed",
                     ps.s)
    if side:
        end = b.add(join(f"pass end {ps.label}", [end, *side]), "", "", ps.s)
    return end


def _pp_send(b: _Builder, shape: _Shape, terms: _BudgetTerms, walk: _Walk, ps: _Pass, end: int) -> None:
    """The activation (forward) or gradient (backward) to the next virtual stage, on the sender's link."""
    j = ps.virtual_stage(shape.stages)
    target = j + 1 if ps.forward else j - 1
    if not 0 <= target < shape.stages * shape.chunks:
        return
    if not shape.closed_form and terms.pp_call_s > 0:
        link = b.link(ps.s, "PP", terms.pp_over_nic)
        walk.sends[(ps.kind, ps.mb, j)] = b.send(f"PP send {ps.kind} m{ps.mb} v{j}->v{target}", terms.pp_call_s,
                                                 link, [end], "pp", "send", ps.s)
    else:
        walk.sends[(ps.kind, ps.mb, j)] = end


def _chunk_pass(b: _Builder, shape: _Shape, terms: _BudgetTerms, walk: _Walk, ps: _Pass, received: int | None,
                gathers: dict[tuple[int, int, int], int]) -> None:
    """One chunk pass: its hidden exchanges, per-pass gather, layers, exposed exchange, join and send."""
    s = ps.s
    deps = [d for d in (walk.prev_end[s], received) if d is not None]
    hidden = {d: terms.hidden_s[d] * ps.share / shape.passes for d in terms.hidden_s}
    side = _hidden_exchanges(b, terms, ps, hidden, deps)
    # SMs the hidden kernels hold: this pass's TP/CP/EP, and its share of the hidden DP and PP
    extra = terms.sm_share * (sum(hidden.values()) + terms.behind_s * ps.share / shape.passes) / shape.layers_per_chunk
    if terms.gather.rounds > 1 and terms.gather.total_s > 0:
        deps.append(_pass_gather(b, shape, terms, walk, ps))
    last = _layers(b, shape, terms, walk, ps, deps, extra, gathers)
    for i in side:  # the hidden exchanges' deadline: the end of the pass they hide behind
        b.deadline[i] = last
    end = _pass_end(b, shape, terms, ps, last, side)
    walk.passes_done[(ps.kind, ps.mb, ps.c, s)] = end
    walk.prev_end[s] = end
    _pp_send(b, shape, terms, walk, ps, end)


def _walk_schedules(b: _Builder, shape: _Shape, terms: _BudgetTerms, walk: _Walk,
                    gathers: dict[tuple[int, int, int], int]) -> list[int]:
    """Every stage's passes in schedule order. A pass needs its sender emitted first, so the stages' orders are
    walked together, each stage up to a pass whose sender is not there yet. Each stage's last compute task."""
    p = shape.stages
    orders = [_order(shape.schedule, p, s, shape.microbatches, shape.chunks) for s in range(p)]
    pending = [0] * p
    progress = True
    while progress:
        progress = False
        for s in range(p):
            while pending[s] < len(orders[s]):
                ps = _Pass(*orders[s][pending[s]], s)
                received = _received(shape, walk, ps)
                if received is _Unsent.SENDER:
                    break
                progress = True
                pending[s] += 1
                _chunk_pass(b, shape, terms, walk, ps, received, gathers)
    last_compute = [t for t in walk.last_compute if t is not None]
    if any(pending[s] < len(orders[s]) for s in range(p)) or len(last_compute) < p:
        raise RuntimeError("pipeline schedule deadlocked while building the step graph")
    return last_compute


def _bucket_ready(shape: _Shape, walk: _Walk, s: int, rounds: int, n: int) -> dict[tuple[int, int], int]:
    """(micro-batch, bucket) -> the last backward task of its layers, for the last ``rounds`` micro-batches."""
    m = shape.microbatches
    ready: dict[tuple[int, int], int] = {}
    for mb in range(m - rounds, m):
        for c in range(shape.chunks):
            for layer in range(shape.layers_per_chunk):
                key, t = (mb, shape.bucket(c, layer, n)), walk.layer_tasks[("B", mb, c, layer, s)]
                ready[key] = max(ready[key], t) if key in ready else t
    return ready


def _reduce_buckets(b: _Builder, shape: _Shape, terms: _BudgetTerms, walk: _Walk, s: int, last_compute: int) -> list[int]:
    """DP reduce-scatter / all-reduce buckets of stage ``s``: each after the last backward of its layers (sharded:
    one per layer after every backward), queued on one link; HSDP's sums across replicas after the last round."""
    m, work = shape.microbatches, terms.reduce
    link = b.link(s, "DP", True)
    rounds = m if work.rounds > 1 else 1
    n = shape.slots if rounds > 1 else work.buckets(shape.slots)
    per_bucket = work.total_s / (rounds * n)
    ready = _bucket_ready(shape, walk, s, rounds, n)
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


def _gather_deadlines(b: _Builder, walk: _Walk, gathers: dict[tuple[int, int, int], int]) -> None:
    """A step's gather bucket is due at the first forward layer it holds (layers in order: the first one seen)."""
    for (s, c, layer), g in gathers.items():
        if b.deadline[g] is None:
            b.deadline[g] = walk.layer_tasks[("F", 0, c, layer, s)]


def step_program(budget: Budget, contention: bool = True) -> StepProgram:
    """The task graph of one step of ``budget``'s plan (a 0-d budget of a kernel-scope scenario).

    The graph decides the bubble, PP's and DP's exposed time and link sharing; it takes the compute time,
    TP/CP/EP's split into hidden and exposed time, the SM share and every transfer's time alone from the
    budget (the module docstring lists the fields), so without contention its TP, CP and EP match the
    budget by construction. Tasks are emitted in this order: the step's DP gathers, the closed-form bubbles,
    the chunk passes as the stages' schedules interleave, each stage's reduce buckets and optimizer step,
    and a final join; every dependency is an earlier task. ``contention=False`` gives each dimension of a
    stage its own link.
    """
    plan = budget.plan
    shape, terms = _shape(plan, budget), _budget_terms(budget)
    b, walk = _Builder(plan, contention), _Walk(shape.stages)
    gathers = _step_gathers(b, shape, terms)
    if shape.closed_form:
        _closed_form_bubbles(b, shape, terms, budget, walk)
    last_compute = _walk_schedules(b, shape, terms, walk, gathers)
    finals = []
    for s in range(shape.stages):
        buckets = _reduce_buckets(b, shape, terms, walk, s, last_compute[s]) if terms.reduce.total_s > 0 else []
        finals.append(b.add(compute(f"optimizer s{s}", s, float(plan.optimizer_s), [last_compute[s], *buckets]),
                            "compute", "optimizer", s))
    _gather_deadlines(b, walk, gathers)
    b.add(join("step end", finals), "", "", None)
    return b.program(budget, shape)
