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

The graph is built along its data flow: sim/terms.py reads the pipeline's shape and the budget's
terms, sim/sections.py emits the step's tasks section by section, and ``step_program`` here calls
the sections in emission order and returns the ``StepProgram``.

What the simulator takes from the budget, and what it decides
-------------------------------------------------------------
The graph's smallest unit is a layer's forward or backward on one stage. What happens inside
it (which kernel runs beside which collective) is not modelled, so every overlap that lives
inside a pass is taken from the budget; only what the order of passes, their dependencies and
the links decide is the simulator's own. ``_BudgetTerms`` (sim/terms.py) gathers everything taken.

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
- SM sharing: each layer is lengthened by its pass's share of the budget's ``contention_s``, the
  compute that hidden communication kernels' SMs take.
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

from dataclasses import dataclass

import numpy as np

from stepbudget.budget.step import Budget
from stepbudget.enums import Axis
from stepbudget.sim.graph import TaskGraph
from stepbudget.sim.sections import (_Builder, _Built, _chunk_passes, _closed_form_bubbles, _gather_deadlines,
                                     _reduce_buckets, _step_gathers)
from stepbudget.sim.terms import MAX_TASKS, _ON_PATH, _budget_terms, _closed_form, _microbatches, _shape, _Shape

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


def _program(built: _Built, budget: Budget, shape: _Shape) -> StepProgram:
    """The builder's tasks and labels as a ``StepProgram``; no stage or deadline is ``_NONE``."""
    return StepProgram(
        graph=built.graph, capacity_Bps=built.capacity_Bps, link_names=built.link_names,
        stream_names=[f"stage {s} compute" for s in range(shape.stages)], dim=built.dim, role=built.role,
        stage=built.stage, deadline=built.deadline, budget=budget, closed_form_bubble=shape.closed_form,
    )


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
    b = _Builder(plan, contention)
    gathers = _step_gathers(b, shape, terms)
    bubbles = _closed_form_bubbles(b, shape, terms, budget) if shape.closed_form else []
    tasks = _chunk_passes(b, shape, terms, bubbles, gathers)
    last_compute = tasks.last_compute()
    finals = []
    for s in range(shape.stages):
        buckets = _reduce_buckets(b, shape, terms, tasks, s, last_compute[s]) if terms.reduce.total_s > 0 else []
        finals.append(b.compute(f"optimizer s{s}", s, float(plan.optimizer_s), [last_compute[s], *buckets],
                                "compute", "optimizer", s))
    _gather_deadlines(b, tasks, gathers)
    b.join("step end", finals, None)
    return _program(b.build(), budget, shape)
