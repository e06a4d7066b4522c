"""Strong and weak scaling: the same job on more GPUs (chapter 5.4, Figure 5.4).

Strong scaling keeps the global batch: compute per GPU falls as 1/G while the DP exchange per
GPU stays put, so the communication share rises. Weak scaling keeps the batch per replica:
compute per GPU stays and the global batch grows with DP. The model-parallel layout (TP, CP,
PP, EP, schedule, micro-batch) is held fixed and DP takes the rest of the GPUs, or, with
``research``, the best layout is searched again at each size.

Each size is one ``derive`` -> ``estimate`` of the scenario with DP and the batch replaced; a
scenario whose rate is a whole-step measurement is first turned into a kernel rate (calibrate.py), so that
its own size reproduces the measured step and other sizes get their own bubble.
"""

from __future__ import annotations

from collections.abc import Callable

from dataclasses import dataclass

import numpy as np

from stepbudget.inputs.errors import OptionError
from stepbudget.budget.memory import memory_per_gpu
from stepbudget.budget.pipeline import check_schedule
from stepbudget.budget.step import Budget, estimate
from stepbudget.enums import SCHEDULE_BY_CODE, Axis
from stepbudget.inputs._types import MAX_COUNT
from stepbudget.inputs.layout import shard_groups_split
from stepbudget.inputs.scenario import Scenario, ScenarioError
from stepbudget.plan.derive import derive
from stepbudget.budget.rate import kernel_scenario
from stepbudget.sweep.space import MAX_SEARCH_GPUS


@dataclass(frozen=True)
class ScalePoint:
    gpus: int
    layout: dict
    """tp, cp, pp, dp, ep, schedule, virtual_stages, micro_batch at this size."""
    global_batch_seqs: int
    microbatches: float
    compute_s: float
    bubble_s: float
    dp_s: float
    """Time of all DP exchanges (hidden or not)."""
    comm_s: float
    exposed_comm_s: float
    step_s: float
    comm_share: float
    """comm_s / (compute_s + comm_s): the chapter's communication share."""
    exposed_share: float
    mfu: float
    memory_bytes: float
    fits: bool
    note: str | None = None
    """Why this size breaks a rule (schedule, memory) while still being evaluated."""


@dataclass(frozen=True)
class ScaleCurve:
    scenario: Scenario
    """The kernel-scope base every point was evaluated from."""
    mode: str
    """"strong" or "weak"."""
    researched: bool
    points: list[ScalePoint]
    calibrated_rate: float | None
    measured: Budget | None = None
    """The scenario as written, when its rate is a measured whole-step rate: what ``budget`` shows at its own size
    (compute and bubble at the measured rate, both inside it) against this curve's split at the kernel rate."""


MAX_SIZES = 64
"""Most sizes one curve takes: each is one budget (milliseconds), and 64 points are more than a plot can tell apart
(every power of two from 1 to 2^40 is 41)."""
MAX_RESEARCH_SIZES = 16
"""Most sizes one curve searches again (``research``): each is a whole layout search, seconds each and up to half
a minute at the largest (sweep/space.py MAX_CANDIDATES); 16 powers of two span 8 to 262,144 GPUs."""


def _gpus(n: int) -> str:
    """A GPU count for a message: with thousands separators, or its length when it is too long to read."""
    return f"{n:,} GPUs" if abs(n) < 10**24 else f"a {len(str(abs(n)))}-digit number of GPUs"


def parse_gpus(text: str) -> list[int]:
    """'1024,2048,4096' -> [1024, 2048, 4096]; ScenarioError naming ``sizes`` otherwise (bounds as ``check_sizes``)."""
    parts = [x for x in text.split(",") if x.strip()]
    if len(parts) > MAX_SIZES:
        raise OptionError("sizes", f"{len(parts):,} GPU counts, more than the {MAX_SIZES} one curve takes; "
                            "give fewer sizes, e.g. powers of two")
    try:
        sizes = [int(x.replace("_", "")) for x in parts]
    except ValueError:
        shown = text if len(text) <= 60 else text[:57] + "..."
        raise OptionError("sizes", f"{shown!r} is not a comma-separated list of GPU counts, e.g. 1024,2048,4096") from None
    if not sizes or any(n < 1 for n in sizes):
        shown = text if len(text) <= 60 else text[:57] + "..."
        raise OptionError("sizes", f"{shown!r} needs one or more positive GPU counts, e.g. 1024,2048,4096")
    check_sizes(sizes)
    return sizes


def check_sizes(sizes: list[int], research: bool = False) -> None:
    """ScenarioError naming ``sizes`` unless each is a GPU count of at most ``MAX_COUNT`` (``MAX_SEARCH_GPUS``
    when each size is searched again) and there are at most ``MAX_SIZES`` (``MAX_RESEARCH_SIZES``) of them."""
    most, limit = (MAX_RESEARCH_SIZES, MAX_SEARCH_GPUS) if research else (MAX_SIZES, MAX_COUNT)
    why = "a search's bound, sweep/space.py" if research else "cluster.gpus' bound"
    if not sizes:
        raise OptionError("sizes", "no GPU count given; give one or more, e.g. 1024,2048,4096")
    if len(sizes) > most:
        raise OptionError("sizes", f"{len(sizes):,} GPU counts, more than the {most} one "
                            f"{'re-searched ' if research else ''}curve takes; give fewer sizes")
    for n in sizes:
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise OptionError("sizes", f"{n!r} is not a GPU count; give positive integers, e.g. 1024,2048,4096")
        if n > limit:
            raise OptionError("sizes", f"{_gpus(int(n))} is past the largest size, {limit:,} ({why}); "
                                f"give sizes up to {limit:,}")


def scale(scenario: Scenario, sizes: list[int], *, weak: bool = False, research: bool = False,
          progress: Callable[[int, int], None] | None = None) -> ScaleCurve:
    """The scaling curve of ``scenario`` over ``sizes`` GPU counts (strong unless ``weak``); with ``research``,
    ``progress(done, total)`` is called after each size's search. ScenarioError naming ``sizes`` before any
    work when a size or their number is past its bound (``check_sizes``)."""
    check_sizes(sizes, research)
    sizes = [int(n) for n in sizes]
    base, rate = kernel_scenario(scenario)
    measured = estimate(derive(scenario)) if rate is not None else None
    lay = base.layout
    group = lay.tp * lay.cp * lay.pp
    seqs0, dp0 = base.global_batch_seqs, lay.dp
    if research:
        points = []
        for n in sizes:
            points.append(_best(base, n, seqs0, dp0, weak))
            if progress is not None:
                progress(len(points), len(sizes))
        return ScaleCurve(base, "weak" if weak else "strong", True, points, rate, measured)
    for n in sizes:
        if n % group:
            raise ScenarioError(
                f"sizes: {n} GPUs do not hold whole model replicas of tp*cp*pp = {group}; use multiples of {group}"
            )
    dp = np.array([n // group for n in sizes])
    if weak and seqs0 % dp0:
        raise OptionError("weak", f"{seqs0} sequences do not split evenly over dp = {dp0}; change the batch")
    if weak:
        _check_weak_batch(sizes, [int(d) for d in dp], seqs0 // dp0)
    seqs = dp * (seqs0 // dp0) if weak else np.full(len(sizes), seqs0)
    short = [(n, d) for n, d, s in zip(sizes, dp, seqs) if s % (d * lay.micro_batch)]
    if short:
        n, d = short[0]
        raise ScenarioError(
            f"sizes: at {n} GPUs dp = {d} and micro_batch {lay.micro_batch} do not divide the {seqs0} sequences of the "
            f"batch; choose sizes where dp*micro_batch divides it, or scale weakly"
        )
    r = lay.dp_replicas
    split = shard_groups_split(r, lay.tp, lay.cp, dp, lay.ep, lay.expert_tp_degree, base.model.moe is not None)
    if not np.all(split):
        n, d = sizes[int(np.argmin(split))], dp[int(np.argmin(split))]
        raise ScenarioError(
            f"sizes: at {n} GPUs dp = {d} does not split into layout.dp_replicas = {r} shard groups of 2 or more "
            "ranks; choose sizes whose dp*cp is a multiple of 2*dp_replicas, or lower dp_replicas"
        )
    points = [_evaluate(base, n, int(s), {"dp": np.asarray(d)}) for n, d, s in zip(sizes, dp, seqs)]
    return ScaleCurve(base, "weak" if weak else "strong", False, points, rate, measured)


def _check_weak_batch(sizes: list[int], dps: list[int], per_replica: int) -> None:
    """Weak scaling grows the batch with DP: ScenarioError naming ``sizes`` where it would pass the largest batch."""
    for n, d in zip(sizes, dps):
        if d * per_replica > MAX_COUNT:
            raise OptionError("sizes", f"weak scaling to {n:,} GPUs needs {d * per_replica:,} sequences per step, past "
                                f"the largest batch ({MAX_COUNT:,}, batch.global_batch_seqs' bound); give fewer GPUs")


def _with_batch(sc: Scenario, seqs: int, gpus: int) -> Scenario:
    batch = sc.batch.model_copy(update={"global_batch_seqs": seqs, "global_batch_tokens": None})
    return sc.model_copy(update={"batch": batch, "cluster": sc.cluster.model_copy(update={"gpus": gpus})})


def _evaluate(base: Scenario, gpus: int, seqs: int, layout: dict) -> ScalePoint:
    sc = _with_batch(base, seqs, gpus)
    plan = derive(sc, layout)
    b = estimate(plan)
    mem = memory_per_gpu(plan)
    dims = b.by_dim("time_s")
    f = lambda x: float(np.asarray(x))  # noqa: E731
    sched = SCHEDULE_BY_CODE[int(plan.schedule)]
    notes = [check_schedule(sched, int(plan.pp), f(plan.microbatches), int(plan.v))]
    if not bool(mem.fits):
        notes.append(f"needs {f(mem.total) / 1e9:.0f} GB of {mem.capacity / 1e9:.0f} GB HBM")
    expert_ranks = int(plan.tp * plan.cp * plan.dp)
    if expert_ranks % (int(plan.ep) * int(plan.expert_tp)):  # the scenario validator's rule, for scaled layouts
        notes.append(f"EP {int(plan.ep)} x expert TP {int(plan.expert_tp)} does not divide the {expert_ranks} "
                     "non-pipeline ranks: lower layout.ep")
    return ScalePoint(
        gpus=gpus,
        layout={"tp": int(plan.tp), "cp": int(plan.cp), "pp": int(plan.pp), "dp": int(plan.dp), "ep": int(plan.ep),
                "schedule": str(sched), "virtual_stages": int(plan.v), "micro_batch": int(plan.micro_batch)},
        global_batch_seqs=seqs, microbatches=f(plan.microbatches),
        compute_s=f(b.compute_s), bubble_s=f(b.bubble_s), dp_s=f(dims[Axis.DP.value]), comm_s=f(b.comm_s),
        exposed_comm_s=f(b.exposed_comm_s), step_s=f(b.step_s), comm_share=f(b.comm_share),
        exposed_share=f(b.exposed_share), mfu=f(b.mfu), memory_bytes=f(mem.total), fits=bool(mem.fits),
        note="; ".join(n for n in notes if n) or None,
    )


def _best(base: Scenario, gpus: int, seqs0: int, dp0: int, weak: bool) -> ScalePoint:
    from stepbudget.sweep.search import scenario_for, search  # search imports this package's calibrate

    seqs = seqs0
    if weak:
        group = base.layout.tp * base.layout.cp * base.layout.pp
        _check_weak_batch([gpus], [max(1, gpus // group)], seqs0 // dp0)
        seqs = max(1, gpus // group) * (seqs0 // dp0)
    sc = _with_batch(base, seqs, gpus)
    result = search(sc, gpus=gpus, top=1)
    return _evaluate(scenario_for(result.scenario, result.top[0], gpus), gpus, seqs, {})
