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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepbudget.budget.step import Budget
from stepbudget.enums import SCHEDULE_CODES, Axis, Collective, Schedule
from stepbudget.inputs.scenario import ScenarioError
from stepbudget.sim.graph import Task, TaskGraph, compute, join, transfer

MAX_TASKS = 600_000
"""Most tasks one step graph may have (about 30 s and 1 GB of simulation); larger steps are coarsened
to one task per chunk pass, or refused."""

_GPIPE, _1F1B, _INTERLEAVED = (SCHEDULE_CODES[s] for s in (Schedule.GPIPE, Schedule.ONE_F_ONE_B,
                                                            Schedule.INTERLEAVED_1F1B))


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


class _Builder:
    def __init__(self) -> None:
        self.tasks: list[Task] = []
        self.dim: list[str] = []
        self.role: list[str] = []
        self.stage: list[int] = []
        self.deadline: list[int] = []

    def add(self, task: Task, dim: str, role: str, stage: int, deadline: int = -1) -> int:
        self.tasks.append(task)
        self.dim.append(dim)
        self.role.append(role)
        self.stage.append(stage)
        self.deadline.append(deadline)
        return len(self.tasks) - 1


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


def program_size(budget: Budget) -> int:
    """About how many tasks ``step_program`` builds for ``budget`` (what simulating it costs): per forward or
    backward chunk pass of every stage and micro-batch, its layers, the exposed TP/CP/EP transfer after it,
    each hidden one beside it and their join, and the PP send; DP buckets and the optimizer are few."""
    plan = budget.plan
    p, m = int(plan.pp), max(int(round(float(plan.microbatches))), 1)
    schedule = int(plan.schedule)
    closed_form = schedule not in (_GPIPE, _1F1B, _INTERLEAVED) or (schedule == _INTERLEAVED and m % p)
    v_run = 1 if closed_form else int(plan.v)
    layers_per_chunk = max(1, int(round(float(plan.layers_per_gpu) / v_run)))
    passes = 2 * p * m * v_run
    exposed, hidden, sends = 0.0, set(), False
    for x, e in zip(budget.exchanges, budget.exposed_s):
        if float(x.calls) <= 0:
            continue
        if x.dim in (Axis.TP, Axis.CP, Axis.EP):
            exposed += float(e)
            if float(x.time_s) > float(e):
                hidden.add(x.dim)
        sends |= x.dim == Axis.PP and not closed_form
    layers = 1 if passes * (layers_per_chunk + 3) > MAX_TASKS else layers_per_chunk
    return passes * (layers + (exposed > 0) + (len(hidden) + 1 if hidden else 0) + sends)


def step_program(budget: Budget, contention: bool = True) -> StepProgram:
    """The task graph of one step of ``budget``'s plan (a 0-d budget of a kernel-scope scenario)."""
    plan = budget.plan
    sc = plan.scenario
    p, v = int(plan.pp), int(plan.v)
    m = max(int(round(float(plan.microbatches))), 1)
    schedule = int(plan.schedule)
    closed_form = schedule not in (_GPIPE, _1F1B, _INTERLEAVED) or (schedule == _INTERLEAVED and m % p)
    if closed_form:
        v_run, sched_run = 1, _1F1B
    else:
        v_run, sched_run = v, schedule
    comp = float(budget.compute_s - plan.optimizer_s)
    per_mb = comp / m
    layers_per_chunk = max(1, int(round(float(plan.layers_per_gpu) / v_run)))
    passes_all = 2 * p * m * v_run  # each pass: its layers, an exchange, a send (and a join): layers + 3 tasks
    if passes_all * 4 > MAX_TASKS:
        raise ScenarioError(
            f"simulate: {m:,} micro-batches x {p} stages x {v_run} chunks x forward and backward = {passes_all:,} "
            f"passes is more than the simulator takes ({MAX_TASKS // 4:,}); raise layout.micro_batch or shrink the batch"
        )
    if passes_all * (layers_per_chunk + 3) > MAX_TASKS:
        layers_per_chunk = 1  # one task per chunk pass: the same times, coarser DP buckets
    share = plan.comm_sm_share

    # exchanges of the budget, per chunk pass: exposed (blocking) and hidden parts of TP/CP/EP
    xs = list(zip(budget.exchanges, budget.exposed_s))
    on_nic = {Axis.TP: False, Axis.CP: False, Axis.EP: False}
    exposed_part = {Axis.TP: 0.0, Axis.CP: 0.0, Axis.EP: 0.0}
    hidden_part = {Axis.TP: 0.0, Axis.CP: 0.0, Axis.EP: 0.0}
    dp = {"reduce": 0.0, "gather": 0.0}
    dp_rounds = {"reduce": 1, "gather": 1}
    dp_edge = {"reduce": 0.0, "gather": 0.0}  # the time of the last bucket (first, for gathers) of a round
    replicas_s = 0.0
    pp_call, pp_exposed = 0.0, 0.0
    behind = 0.0  # DP and PP time the budget hides behind compute: its SM share is charged evenly below
    layers = int(plan.layer_units)
    for x, e in xs:
        if float(x.calls) <= 0:
            continue
        t, e = float(x.time_s), float(e)
        if x.dim in (Axis.DP, Axis.PP):
            behind += t - e
        if x.dim in exposed_part:
            exposed_part[x.dim] += e
            hidden_part[x.dim] += t - e
            on_nic[x.dim] |= bool(float(x.nic_bytes) > 0)
        elif x.dim == Axis.PP:
            pp_call, pp_exposed = float(x.call_s), e
        elif x.dim == Axis.DP and x.collective == Collective.ALL_REDUCE and plan.dp_replicas > 1:
            # HSDP (never DDP, whose all-reduce is the gradients'): once per step, after the last reduce-scatters
            replicas_s += t
        elif x.dim == Axis.DP:
            kind = "gather" if x.collective.value == "all-gather" else "reduce"
            units = float(np.asarray(x.units))
            rounds = max(int(round(float(x.calls) / units)), 1)
            dp[kind] += t
            dp_rounds[kind] = max(dp_rounds[kind], rounds)
            dp_edge[kind] += t / rounds / min(units, layers)  # a bucket, at least a layer (budget/step.py)
    passes = m * v_run
    dp_setting = sc.overlap.dp

    # links: per stage, one for each kind of traffic; with contention, the NIC ones are one link
    names: list[str] = []
    capacity: list[float] = []
    nvlink_Bps, nic_Bps = float(plan.nvlink_Bps), float(plan.nic_Bps)

    def link(name: str, rate: float) -> int:
        if name in names:
            return names.index(name)
        names.append(name)
        capacity.append(rate)
        return len(names) - 1

    def stage_link(s: int, what: str, over_nic: bool) -> int:
        if contention and over_nic:
            return link(f"stage {s} NIC", nic_Bps)
        return link(f"stage {s} {what} ({'NIC' if over_nic else 'NVLink'})", nic_Bps if over_nic else nvlink_Bps)

    pp_nic = bool(int(np.asarray(plan.q["pp"])) == 1)
    b = _Builder()
    passes_done: dict[tuple[str, int, int, int], int] = {}  # (pass, mb, chunk, stage) -> last task of the pass
    sends: dict[tuple[str, int, int, int], int] = {}  # (pass, mb, virtual stage) -> send task
    layer_tasks: dict[tuple[str, int, int, int, int], int] = {}  # (pass, mb, chunk, layer, stage) -> compute task
    stage_orders = [_order(sched_run, p, s, m, v_run) for s in range(p)]
    last_compute = [-1] * p

    # all-gather buckets before the first forward of each layer (ZeRO-1 after the previous step's update)
    gathers: dict[tuple[int, int, int], int] = {}
    dp_not_overlapped = dp_setting != "auto" and float(dp_setting) == 0
    pass_start = [-1] * p
    pass_gather = [-1] * p  # the last per-pass gather of each stage (resharded DP)
    slots = v_run * layers_per_chunk  # a rank's layer tasks, in forward order

    def buckets_of(kind: str) -> int:
        """Buckets a round of ``kind`` runs in: as many as give the budget's edge bucket, at most a layer's."""
        return int(min(max(round(dp[kind] / dp_edge[kind]), 1), slots)) if dp_edge[kind] > 0 else slots

    def bucket(c: int, layer: int, n: int) -> int:
        return (c * layers_per_chunk + layer) * n // slots

    for s in range(p):
        if dp["gather"] > 0 and dp_rounds["gather"] <= 1:
            n = buckets_of("gather")
            per_bucket = dp["gather"] / n
            L = stage_link(s, "DP", True)
            prev: list[int] = []
            issued: dict[int, int] = {}
            for c in range(v_run):
                for layer in range(layers_per_chunk):
                    k = bucket(c, layer, n)
                    if k not in issued:  # collectives on one communicator run in issue order (NCCL): they queue
                        prev = [b.add(transfer(f"DP all-gather s{s} bucket {k}", per_bucket * capacity[L], [L], prev),
                                      "dp", "gather", s)]
                        issued[k] = prev[0]
                    gathers[(s, c, layer)] = issued[k]

    # stage s's tasks, in schedule order; cross-stage dependencies need the sender to exist first,
    # so walk the stages' orders together, emitting a pass once what it receives has been emitted
    pending = [0] * p
    prev_end = [-1] * p
    idle = [-1] * p
    if closed_form:
        bubble = float(budget.bubble_s) + pp_exposed
        for s in range(p):
            idle[s] = prev_end[s] = b.add(compute(f"bubble s{s}", s, bubble), "idle", "bubble", s)
    virtual = p * v_run

    def receives(kind: str, mb: int, c: int, s: int) -> int | None:
        if closed_form:
            return None
        j = c * p + s
        if kind == "F":
            return None if j == 0 else sends.get(("F", mb, j - 1), -2)
        if j == virtual - 1:
            return passes_done.get(("F", mb, c, s), -2)
        return sends.get(("B", mb, j + 1), -2)

    progress = True
    while progress:
        progress = False
        for s in range(p):
            while pending[s] < len(stage_orders[s]):
                kind, mb, c = stage_orders[s][pending[s]]
                dep = receives(kind, mb, c, s)
                if dep == -2:
                    break  # the sender has not been emitted yet
                progress = True
                pending[s] += 1
                deps = [d for d in (prev_end[s], dep) if d is not None and d >= 0]
                frac = 1 / 3 if kind == "F" else 2 / 3
                hidden = {d: hidden_part[d] * frac / passes for d in hidden_part}
                side = []
                for d, t in hidden.items():
                    if t > 0:
                        L = stage_link(s, d.value.upper(), on_nic[d])
                        side.append(b.add(transfer(f"{d.value.upper()} hidden {kind} s{s} m{mb} c{c}", t * capacity[L], [L],
                                                   deps), d.value, "hidden", s))
                # SMs the hidden kernels hold: this pass's TP/CP/EP, and its share of the hidden DP and PP
                extra = share * (sum(hidden.values()) + behind * frac / passes) / layers_per_chunk
                if dp_rounds["gather"] > 1 and dp["gather"] > 0:  # resharded: gather again before every pass,
                    L = stage_link(s, "DP", True)  # prefetched while the previous pass computes (FSDP)
                    size = dp["gather"] / (dp_rounds["gather"] * v_run) * capacity[L]
                    ag = b.add(transfer(f"DP all-gather {kind} s{s} m{mb} c{c}", size, [L],
                                        [t for t in (pass_start[s], pass_gather[s]) if t >= 0]),
                               "dp", "gather", s)
                    pass_gather[s] = ag
                    deps.append(ag)
                last, first_in_pass = None, -1
                for layer in (range(layers_per_chunk) if kind == "F" else reversed(range(layers_per_chunk))):
                    layer_deps = list(deps) if last is None else [last]
                    if kind == "F" and mb == 0 and (s, c, layer) in gathers:
                        layer_deps.append(gathers[(s, c, layer)])
                    dur = (per_mb * frac / v_run) / layers_per_chunk + extra
                    if dp_not_overlapped and gathers and last is None and last_compute[s] < 0:
                        # not overlapped: every bucket (the last one queues behind the rest) before any compute
                        layer_deps.append(gathers[(s, v_run - 1, layers_per_chunk - 1)])
                    last = b.add(compute(f"{kind} s{s} m{mb} c{c} l{layer}", s, dur, layer_deps), "compute",
                                 "fwd" if kind == "F" else "bwd", s)
                    layer_tasks[(kind, mb, c, layer, s)] = last
                    if first_in_pass < 0:
                        first_in_pass = last
                pass_start[s] = first_in_pass  # the next pass's gather is prefetched from here
                last_compute[s] = last
                for i in side:  # the hidden exchanges' deadline: the end of the pass they hide behind
                    b.deadline[i] = last
                end = last
                blocking = sum(exposed_part[d] for d in exposed_part) * frac / passes
                if blocking > 0:
                    d_main = max(exposed_part, key=exposed_part.get)
                    L = stage_link(s, d_main.value.upper(), on_nic[d_main])
                    end = b.add(transfer(f"{d_main.value.upper()} exposed {kind} s{s} m{mb} c{c}", blocking * capacity[L],
                                         [L], [last]), d_main.value, "exposed", s)
                if side:
                    end = b.add(join(f"pass end {kind} s{s} m{mb} c{c}", [end, *side]), "", "", s)
                passes_done[(kind, mb, c, s)] = end
                prev_end[s] = end
                j = c * p + s
                target = j + 1 if kind == "F" else j - 1
                if 0 <= target < virtual and not closed_form and pp_call > 0:
                    L = stage_link(s, "PP", pp_nic)
                    sends[(kind, mb, j)] = b.add(transfer(f"PP send {kind} m{mb} v{j}->v{target}", pp_call * capacity[L],
                                                          [L], [end]), "pp", "send", s)
                elif 0 <= target < virtual:
                    sends[(kind, mb, j)] = end
    if any(pending[s] < len(stage_orders[s]) for s in range(p)):
        raise RuntimeError("pipeline schedule deadlocked while building the step graph")

    # DP reduce-scatter / all-reduce buckets: each after the last backward of its layers (or, sharded,
    # one per layer after every backward)
    finals = []
    for s in range(p):
        buckets = []
        if dp["reduce"] > 0:
            L = stage_link(s, "DP", True)
            rounds = m if dp_rounds["reduce"] > 1 else 1
            n = slots if rounds > 1 else buckets_of("reduce")
            per_bucket = dp["reduce"] / (rounds * n)
            ready: dict[tuple[int, int], int] = {}  # (micro-batch, bucket) -> its last backward task
            replica_sums: list[int] = []
            for mb in range(m - rounds, m):
                for c in range(v_run):
                    for layer in range(layers_per_chunk):
                        key = (mb, bucket(c, layer, n))
                        ready[key] = max(ready.get(key, -1), layer_tasks[("B", mb, c, layer, s)])
            last_round = sum(1 for mb, _ in ready if mb == m - 1)
            for after, (mb, k) in sorted((t, key) for key, t in ready.items()):  # in backward order
                if dp_not_overlapped:
                    after = last_compute[s]  # not overlapped: after the stage's backward ends
                deps = [after] + buckets[-1:]  # one communicator: buckets queue in issue order (NCCL)
                # due by the stage's last backward, unless that launches it: then nothing is left to hide behind
                due = -1 if after == last_compute[s] else last_compute[s]
                buckets.append(b.add(transfer(f"DP reduce s{s} m{mb} bucket {k}", per_bucket * capacity[L], [L],
                                              deps), "dp", "reduce", s, deadline=due))
                if replicas_s > 0 and mb == m - 1:  # the bucket's shard, summed across the HSDP replicas
                    deps = [buckets[-1]] + replica_sums[-1:]
                    replica_sums.append(b.add(transfer(f"DP all-reduce across replicas s{s} bucket {k}",
                                                       replicas_s / last_round * capacity[L], [L], deps), "dp", "reduce", s,
                                              deadline=due))
            buckets += replica_sums
        opt = b.add(compute(f"optimizer s{s}", s, float(plan.optimizer_s), [last_compute[s], *buckets]), "compute",
                    "optimizer", s)
        finals.append(opt)
    for (s, c, layer), g in gathers.items():  # layers in order: a bucket is due at the first layer it holds
        if b.deadline[g] < 0:
            b.deadline[g] = layer_tasks[("F", 0, c, layer, s)]
    b.add(join("step end", finals), "", "", -1)

    graph = TaskGraph.from_tasks(b.tasks)
    return StepProgram(
        graph=graph, capacity_Bps=np.array(capacity, dtype=float), link_names=names,
        stream_names=[f"stage {s} compute" for s in range(p)], dim=np.array(b.dim), role=np.array(b.role),
        stage=np.array(b.stage), deadline=np.array(b.deadline), budget=budget, closed_form_bubble=bool(closed_form),
    )
