"""The step's tasks, section by section: a builder that appends tasks and their labels, and one function per
section of the step (the step's DP gathers, the closed-form bubbles, each chunk pass's exchanges, layers, end and
send as the stages' schedules interleave, the DP reduce buckets, the gathers' deadlines).

The sections read the pipeline's shape and the budget's terms from sim/terms.py and append to one ``_Builder``;
sim/program.py calls them in emission order, so every dependency is an earlier task.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

from stepbudget.budget.step import Budget
from stepbudget.enums import Axis
from stepbudget.plan.derive import Plan
from stepbudget.sim.graph import Task, compute, join, transfer
from stepbudget.sim.terms import _BudgetTerms, _order, _Pass, _Shape


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
