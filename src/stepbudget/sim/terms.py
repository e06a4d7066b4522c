"""What the step graph runs: the pipeline's shape, the order a stage runs its passes in, the order the walk
emits every stage's passes in, and the budget's terms the graph takes as given (sim/program.py's docstring says
which terms and why).

``_shape(plan, budget)`` is the pipeline as run (a closed-form schedule runs as 1F1B with one chunk, a large
step one task per chunk pass); ``_order`` is one stage's (pass, micro-batch, chunk) sequence, each a ``_Pass``
(``_order_arrays``, the same as arrays); ``_walk_schedules(shape)`` interleaves the stages' orders so that every
pass comes after its sender; ``_budget_terms(budget)`` sums the budget's exchanges by what the graph does with
them. No tasks are made here: sim/sections.py emits them from these records.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepbudget.budget.step import Budget
from stepbudget.enums import SCHEDULE_CODES, Axis, Collective, Schedule
from stepbudget.inputs.scenario import ScenarioError
from stepbudget.plan.derive import Plan

MAX_TASKS = 600_000
"""Most tasks one step graph may have (about 30 s and 1 GB of simulation); larger steps are coarsened
to one task per chunk pass, or refused."""

_GPIPE, _1F1B, _INTERLEAVED = (SCHEDULE_CODES[s] for s in (Schedule.GPIPE, Schedule.ONE_F_ONE_B,
                                                            Schedule.INTERLEAVED_1F1B))
_NONE = -1
"""No task (a missing dependency, stage or deadline), no pass, no link."""
_ON_PATH = (Axis.TP, Axis.CP, Axis.EP)
"""The dimensions whose exchanges sit in a pass: their hidden and exposed split is the budget's."""


# -- the schedule: the order of a stage's chunk passes ----------------------------------------------------------------

def _order_arrays(schedule: int, p: int, s: int, m: int, v: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(forward, micro-batch, chunk), shape (2 m v,) each, in the order stage ``s`` runs its passes: ``warmup``
    forwards, then one forward and one backward in turn, then the backwards left (GPipe: every forward first)."""
    k = np.arange(m * v if schedule == _INTERLEAVED else m)
    total = k.size
    if schedule == _INTERLEAVED:
        # Megatron: with as many micro-batches as stages, every rank runs all its forwards first
        warmup = total if m == p else min((p - s - 1) * 2 + (v - 1) * p, total)
        mb = (k // (p * v)) * p + k % p  # Megatron's get_model_chunk_id: pass k's micro-batch and chunk
        c_fwd = (k % (p * v)) // p
        c_bwd = v - 1 - c_fwd
    else:
        warmup = total if schedule == _GPIPE else min(p - s - 1, m)
        mb, c_fwd = k, np.zeros_like(k)
        c_bwd = c_fwd
    f_at = np.where(k < warmup, k, 2 * k - warmup)  # forward k: in the warmup, then every other slot
    b_at = np.where(k < total - warmup, warmup + 2 * k + 1, total + k)  # backward k: after forward warmup + k
    forward = np.zeros(2 * total, dtype=bool)
    forward[f_at] = True
    mbs, chunks = np.empty(2 * total, dtype=np.int64), np.empty(2 * total, dtype=np.int64)
    mbs[f_at], mbs[b_at] = mb, mb
    chunks[f_at], chunks[b_at] = c_fwd, c_bwd
    return forward, mbs, chunks


def _order(schedule: int, p: int, s: int, m: int, v: int) -> list[tuple[str, int, int]]:
    """(pass, micro-batch, chunk) in the order stage ``s`` runs them."""
    forward, mb, c = _order_arrays(schedule, p, s, m, v)
    return [("F" if f else "B", i, j) for f, i, j in zip(forward.tolist(), mb.tolist(), c.tolist())]


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


# -- the pipeline as the graph runs it --------------------------------------------------------------------------------

def _closed_form(schedule: int, p: int, m: int) -> bool:
    """Whether the schedule runs as its closed-form bubble: not GPipe or 1F1B, nor interleaving with p | m."""
    return schedule not in (_GPIPE, _1F1B, _INTERLEAVED) or (schedule == _INTERLEAVED and m % p != 0)


def _microbatches(plan: Plan) -> int:
    return max(int(round(float(plan.microbatches))), 1)


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


# -- the walk: the order the stages' passes are emitted in ------------------------------------------------------------

@dataclass(frozen=True)
class _Passes:
    """Every chunk pass in emission order (arrays of shape ``(P,)``): what it is, the stage's pass before it and
    the pass it receives from (-1: none), and where each (direction, micro-batch, chunk, stage) went."""

    forward: np.ndarray
    mb: np.ndarray
    c: np.ndarray
    s: np.ndarray
    prev: np.ndarray
    received: np.ndarray
    index: np.ndarray
    """Shape (2, m, v, p): the emission position of the forward (0) or backward (1) pass (mb, c, s)."""


def _code(shape: _Shape, backward: np.ndarray, mb: np.ndarray, c: np.ndarray, s: np.ndarray) -> np.ndarray:
    """A pass as one integer: its place in an array of shape (2, m, v, p)."""
    return ((backward * shape.microbatches + mb) * shape.chunks + c) * shape.stages + s


def _senders(shape: _Shape, forward: np.ndarray, mb: np.ndarray, c: np.ndarray, s: np.ndarray) -> np.ndarray:
    """The pass each pass receives from the previous virtual stage (``_code``; -1: nothing): a forward the forward
    of virtual stage j - 1, a backward the backward of j + 1, and the last virtual stage turns its own forward
    around. A closed-form schedule receives nothing (its bubble stands in for the pipeline's)."""
    p = shape.stages
    if shape.closed_form:
        return np.full(forward.size, _NONE, dtype=np.int64)
    j, last = c * p + s, p * shape.chunks - 1
    sender = np.where(forward, j - 1, np.where(j == last, j, j + 1))
    backward = ~forward & (j != last)
    code = _code(shape, backward.astype(np.int64), mb, sender // p, sender % p)
    return np.where(forward & (j == 0), _NONE, code)


def _sweeps(bounds: list[int], sender: list[int], later: list[int]) -> list[int]:
    """The walk's sweep that emits each pass (stage-major; stage s's passes are ``bounds[s]:bounds[s + 1]``).

    A sweep visits the stages in order and each emits its passes until one whose sender is not emitted yet. So a
    pass goes in the sweep of the stage's pass before it, or of its sender (one later when the sender's stage
    comes after its own, ``later``), whichever is last. Each stage is run up to a pass whose sender has no sweep
    yet and resumed when that sender gets one."""
    t = [_NONE] * len(sender)
    at = bounds[:-1]
    waiting: dict[int, list[int]] = {}
    ready = list(range(len(at) - 1, -1, -1))
    while ready:
        s = ready.pop()
        i, end = at[s], bounds[s + 1]
        sweep = t[i - 1] if i > bounds[s] else 0
        while i < end:
            x = sender[i]
            if x >= 0:
                if t[x] < 0:
                    waiting.setdefault(x, []).append(s)
                    break
                sweep = max(sweep, t[x] + later[i])
            t[i] = sweep
            ready.extend(waiting.pop(i, ()))
            i += 1
        at[s] = i
    if any(at[s] < bounds[s + 1] for s in range(len(at))):
        raise RuntimeError("pipeline schedule deadlocked while building the step graph")
    return t


def _walk_schedules(shape: _Shape) -> _Passes:
    """Every stage's passes in schedule order. A pass needs its sender emitted first, so the stages' orders are
    walked together in sweeps, each stage up to a pass whose sender is not there yet: passes in the order of
    (sweep, stage, place in the stage's order)."""
    p, m, v = shape.stages, shape.microbatches, shape.chunks
    orders = [_order_arrays(shape.schedule, p, s, m, v) for s in range(p)]
    forward, mb, c = (np.concatenate([o[k] for o in orders]) for k in range(3))
    size = 2 * m * v
    s = np.repeat(np.arange(p), size)
    place = np.tile(np.arange(size), p)
    stage_major = np.empty(2 * m * v * p, dtype=np.int64)  # pass code -> its position, stage by stage
    stage_major[_code(shape, (~forward).astype(np.int64), mb, c, s)] = np.arange(s.size)
    code = _senders(shape, forward, mb, c, s)
    sender = np.where(code >= 0, stage_major[code], _NONE)
    t = _sweeps(list(range(0, s.size + 1, size)), sender.tolist(), (sender // size > s).astype(int).tolist())
    order = np.lexsort((place, s, np.array(t)))
    emitted = np.empty_like(order)
    emitted[order] = np.arange(order.size)  # stage-major position -> emission position
    prev = np.where(place > 0, np.arange(s.size) - 1, _NONE)
    index = np.empty_like(stage_major)
    index[_code(shape, (~forward).astype(np.int64), mb, c, s)] = emitted
    return _Passes(forward=forward[order], mb=mb[order], c=c[order], s=s[order],
                   prev=np.where(prev >= 0, emitted[prev], _NONE)[order],
                   received=np.where(sender >= 0, emitted[sender], _NONE)[order],
                   index=index.reshape(2, m, v, p))


# -- the budget's terms the graph takes as given ----------------------------------------------------------------------

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
    contention_s: float
    """``budget.contention_s``: compute time the SMs of hidden communication kernels take, charged to the passes
    in their shares."""
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
    replicas_s, pp_call, pp_exposed = 0.0, 0.0, 0.0
    layers = int(plan.layer_units)
    for x, exposed_s in zip(budget.exchanges, budget.exposed_s):
        if float(x.calls) <= 0:
            continue
        t, e = float(x.time_s), float(exposed_s)
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
        replicas_s=replicas_s, pp_call_s=pp_call, pp_exposed_s=pp_exposed, contention_s=float(budget.contention_s),
        pp_over_nic=bool(int(np.asarray(plan.q["pp"])) == 1),
        dp_not_overlapped=dp_setting != "auto" and float(dp_setting) == 0,
    )
