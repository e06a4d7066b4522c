"""Simulate one step of a scenario, attribute each stage's idle time, and repeat it with jitter.

``simulate_step`` runs the step graph of ``sim/program.py`` once and reads the timeline back:
every gap on a stage's compute stream is charged to what the next task waited for (a PP
transfer, a TP/CP/EP exchange, a DP bucket, or another stage's compute: the bubble), and a
hidden exchange or DP bucket that ends after the compute it was meant to hide behind is a
deadline miss. ``monte_carlo`` draws jitter (compute and link slow-downs, stragglers) for many
steps, and for ``replicas`` data-parallel replicas takes each step as the slowest replica's.
"""

from __future__ import annotations

from collections.abc import Callable

from dataclasses import dataclass, field

import numpy as np

from stepbudget.inputs.errors import OptionError
from stepbudget.budget.step import DIMS, Budget, estimate
from stepbudget.inputs.scenario import Scenario
from stepbudget.plan.derive import derive
from stepbudget.sim.engine import run_graph
from stepbudget.sim.graph import TaskKind
from stepbudget.sim.program import StepProgram, step_program
from stepbudget.sim.timeline import Timeline
from stepbudget.budget.rate import kernel_scenario


@dataclass(frozen=True)
class Jitter:
    """Random slow-downs, each a multiplier >= 1 drawn per task, per link or per stage."""

    compute_cv: float = 0.0
    """Coefficient of variation of each compute task's time (lognormal, mean 1)."""
    link_cv: float = 0.0
    """Coefficient of variation of each link's rate for the step (lognormal, mean 1, as a slow-down)."""
    straggler_p: float = 0.0
    """Probability that a stage is a straggler for the whole step."""
    straggler_slowdown: float = 1.5
    """Compute time multiplier of a straggling stage."""

    def __post_init__(self) -> None:
        for name in ("compute_cv", "link_cv"):
            value = getattr(self, name)
            if not 0 <= value < 10:  # a CV of 10 is a tail no measured cluster shows; NaN fails here too
                raise OptionError(name, f"{value} is not a coefficient of variation; give a number in [0, 10), e.g. 0.05")
        if not 0 <= self.straggler_p <= 1:
            raise OptionError("straggler_p", f"{self.straggler_p} is not a probability; give 0 to 1, e.g. 0.01")
        if not 1 <= self.straggler_slowdown <= 1000:
            raise OptionError("straggler_slowdown", f"{self.straggler_slowdown} is not a slow-down; give 1 to 1000, "
                                "e.g. 1.5")

    @property
    def any(self) -> bool:
        return self.compute_cv > 0 or self.link_cv > 0 or self.straggler_p > 0


@dataclass(frozen=True)
class StepResult:
    program: StepProgram
    timeline: Timeline
    step_s: float
    """The timeline's makespan plus the scenario's fixed cost per step (cluster.step_overhead_s)."""
    analytical_step_s: float
    exposed_s: dict[str, float]
    """Idle time of the last stage to finish, by what it waited for: tp, cp, pp, dp, ep, bubble."""
    deadline_misses: list[dict] = field(default_factory=list)
    """Hidden exchanges and DP buckets that ended after the compute meant to hide them."""
    link_utilisation: dict[str, float] = field(default_factory=dict)
    """Busy share of the step for each link."""

    @property
    def step_overhead_s(self) -> float:
        """The scenario's fixed cost per step (cluster.step_overhead_s), which follows the timeline."""
        return float(self.program.budget.step_overhead_s)


def _lognormal(rng: np.random.Generator, cv: float, size) -> np.ndarray:
    if cv <= 0:
        return np.ones(size)
    sigma2 = np.log1p(cv * cv)  # mean 1, coefficient of variation cv
    return rng.lognormal(-sigma2 / 2, np.sqrt(sigma2), size)


def sim_budget(scenario: Scenario) -> Budget:
    """The analytical budget the simulator mirrors: kernel scope (a step-average rate is calibrated)."""
    return estimate(derive(kernel_scenario(scenario)[0]))


MIN_LINK_RATE = 1e-3
"""Slowest scale of every link (a 400 Gb/s NIC at 400 Mb/s): a link slower than that is down, not slow, and a step's
bytes over it already take hours. Below it the bounded inputs stop bounding the arithmetic: at 5e-324 every rate
underflows to 0 and no transfer ever ends."""
MAX_LINK_RATE = 100.0
"""Fastest scale of every link: 100 times its rate (a 400 Gb/s NIC at 40 Tb/s) is past any link built."""


def check_link_rate(link_rate: float) -> None:
    """ScenarioError unless ``link_rate`` is a scale a link can run at: ``MIN_LINK_RATE`` to ``MAX_LINK_RATE``."""
    if isinstance(link_rate, bool) or not isinstance(link_rate, (int, float, np.floating, np.integer)) \
            or not MIN_LINK_RATE <= link_rate <= MAX_LINK_RATE:  # NaN fails here too
        raise OptionError("link_rate", f"{link_rate!r} is not a scale a link runs at; give {MIN_LINK_RATE:g} to "
                            f"{MAX_LINK_RATE:g} (0.5 = half rate; below a thousandth a link is down, not slow)")


def simulate_step(
    budget: Budget,
    *,
    contention: bool = True,
    link_rate: float = 1.0,
    jitter: Jitter | None = None,
    rng: np.random.Generator | None = None,
    program: StepProgram | None = None,
) -> StepResult:
    """One simulated step of ``budget``'s plan. ``link_rate`` scales every link (0.5 = half rate)."""
    check_link_rate(link_rate)
    prog = program or step_program(budget, contention=contention)
    tl = _run(prog, link_rate, jitter, rng)
    step = tl.makespan_s + float(budget.step_overhead_s)  # the fixed cost per step follows the timeline
    return StepResult(
        program=prog, timeline=tl, step_s=step, analytical_step_s=float(budget.step_s),
        exposed_s=_attribute(prog, tl), deadline_misses=_misses(prog, tl), link_utilisation=_utilisation(prog, step),
    )


def _run(prog: StepProgram, link_rate: float, jitter: Jitter | None, rng: np.random.Generator | None) -> Timeline:
    """The program's timeline, with jittered task times, stragglers and link rates when ``jitter`` has any."""
    g = prog.graph
    durations = None
    rates = np.full(prog.capacity_Bps.size, float(link_rate))
    if jitter is not None and jitter.any:
        rng = rng or np.random.default_rng()
        durations = _lognormal(rng, jitter.compute_cv, g.num_tasks)
        stages = int(prog.stage.max()) + 1
        slow = np.where(rng.random(stages) < jitter.straggler_p, jitter.straggler_slowdown, 1.0)
        durations = durations * np.where(prog.stage >= 0, slow[np.maximum(prog.stage, 0)], 1.0)
        rates = rates / _lognormal(rng, jitter.link_cv, rates.size)
    return run_graph(g, prog.capacity_Bps, link_rate_multiplier=rates, duration_multiplier=durations)


def _attribute(prog: StepProgram, tl: Timeline) -> dict[str, float]:
    """Idle gaps on the compute stream of the stage that ends last, by what ended just before each gap; a
    closed-form schedule's bubble (idle time of its own at the stage's start) counts as the bubble."""
    g = prog.graph
    out = {d.value: 0.0 for d in DIMS} | {"bubble": 0.0}
    is_compute = g.kind == TaskKind.COMPUTE
    ends: dict[int, float] = {}
    for s in np.unique(prog.stage[prog.stage >= 0]):
        ends[int(s)] = tl.end_s[(prog.stage == s)].max()
    last = max(ends, key=ends.__getitem__)
    tasks = np.flatnonzero(is_compute & (prog.stage == last))
    tasks = tasks[np.argsort(tl.start_s[tasks], kind="stable")]
    prev_end = 0.0
    for t in tasks.tolist():
        gap = tl.start_s[t] - prev_end
        if gap > 1e-12 * max(tl.makespan_s, 1.0):
            dim, waited = _blamed(prog, tl, t)
            if dim == "pp":  # a transfer charges only its own time; before it started, another stage computed
                out["pp"] += min(gap, waited)
                out["bubble"] += max(gap - waited, 0.0)
            else:
                out[dim] += gap
        if prog.role[t] == "bubble":  # a closed-form schedule's bubble is a task of its own, not a gap
            out["bubble"] += float(tl.end_s[t] - tl.start_s[t])
        prev_end = tl.end_s[t]
    tail = ends[last] - prev_end  # after the last compute: DP buckets and joins
    out["dp"] += max(tail, 0.0)
    return out


def _blamed(prog: StepProgram, tl: Timeline, task: int) -> tuple[str, float]:
    """What ``task`` waited for (following joins to the dependency that finished last), and how long that ran."""
    g = prog.graph
    while True:
        deps = g.dep_ids[g.dep_indptr[task]:g.dep_indptr[task + 1]]
        if not deps.size:
            return "bubble", 0.0
        d = int(deps[np.argmax(tl.end_s[deps])])
        if g.kind[d] == TaskKind.JOIN or prog.dim[d] == "":
            task = d
            continue
        dim = str(prog.dim[d])
        ran = float(tl.end_s[d] - tl.start_s[d])
        return ("bubble", ran) if dim in ("compute", "idle") else (dim, ran)


def _misses(prog: StepProgram, tl: Timeline) -> list[dict]:
    """Hidden transfers that finished after the compute meant to hide them had ended (chapter 5.4).

    A transfer that hides behind compute (a reduce bucket, a pass's hidden TP/CP/EP) misses when it ends
    after its deadline task, the last compute that covers it. A parameter gather is needed by its layer's
    first forward: it misses when that forward was otherwise ready (its other inputs, the compute before it,
    had ended) and waited for the gather; a gather with nothing before it had nothing to hide behind.
    """
    g = prog.graph
    out = []
    for t in np.flatnonzero(prog.deadline >= 0).tolist():
        d = int(prog.deadline[t])
        if prog.role[t] == "gather":
            others = [int(x) for x in g.dep_ids[g.dep_indptr[d]:g.dep_indptr[d + 1]] if x != t]
            if not others:
                continue
            late = tl.end_s[t] - max(tl.end_s[x] for x in others)
        else:
            late = tl.end_s[t] - tl.end_s[d]
        if late > 1e-9 * max(tl.makespan_s, 1.0):
            out.append({"task": tl.label(t), "dim": str(prog.dim[t]), "stage": int(prog.stage[t]),
                        "late_s": float(late)})
    return out


def _utilisation(prog: StepProgram, step_s: float) -> dict[str, float]:
    """Busy share of the step (its fixed cost per step included) for each link."""
    g = prog.graph
    busy = np.zeros(prog.capacity_Bps.size)
    for t in np.flatnonzero(g.kind == TaskKind.TRANSFER).tolist():
        for link in g.link_ids[g.link_indptr[t]:g.link_indptr[t + 1]]:
            busy[link] += g.size_bytes[t]
    span = max(step_s, 1e-30)
    return {name: float(busy[i] / (prog.capacity_Bps[i] * span)) for i, name in enumerate(prog.link_names)}


MAX_DRAWS = 1 << 28
"""Most replica draws (steps x replicas, 268 M) one tail takes: about 19 ns each, so about 5 s a pass, and
simulate makes two (the step's tail and the tail growth at its replicas). The command line's own bounds
(100,000 steps, 1,000,000 replicas) would make 1e11 of them: over half an hour a pass."""
_BLOCK = 2_000_000
"""Draws made at once (three arrays of 16 MB): memory stays bounded whatever the replicas."""


def check_draws(steps: int, replicas: int) -> None:
    """ScenarioError naming ``steps x replicas`` unless both are at least 1 and their product is at most
    ``MAX_DRAWS``: checked before any pipeline is simulated."""
    for name, value in (("steps", steps), ("replicas", replicas)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise OptionError(name, f"{value!r} must be a whole number of at least 1")
    if steps * replicas > MAX_DRAWS:
        raise OptionError(
            "steps x replicas", f"{steps:,} steps x {replicas:,} replicas draw {steps * replicas:,} pipelines, more "
            f"than the {MAX_DRAWS:,} one tail takes (about 5 s); give fewer steps or replicas"
        )


MAX_FULL_PIPELINES = 1_000_000
"""Most pipelines ``monte_carlo(full=True)`` simulates (steps x replicas): at 50 ms a Llama 3 405B pipeline, about
14 hours on one core, which is what a sweep's workers are for; more is refused before any is simulated."""


def check_full(steps: int, replicas: int) -> None:
    """ScenarioError naming ``steps x replicas`` when a full Monte Carlo would simulate more than
    ``MAX_FULL_PIPELINES`` pipelines; checked before any is simulated."""
    check_draws(steps, replicas)
    if steps * replicas > MAX_FULL_PIPELINES:
        raise OptionError(
            "steps x replicas", f"{steps:,} steps x {replicas:,} replicas simulated in full are {steps * replicas:,} "
            f"pipelines, more than the {MAX_FULL_PIPELINES:,} one run takes; give fewer, or drop --full for the bootstrap"
        )


@dataclass(frozen=True)
class MonteCarlo:
    steps_s: np.ndarray
    """Shape (steps,): each step's time, the slowest of ``replicas`` pipelines."""
    replicas: int
    pipeline_s: np.ndarray
    """The simulated pipelines: shape (samples,) for the bootstrap, (steps, replicas) when ``full``."""
    full: bool = False
    """Every replica of every step simulated (no bootstrap)."""

    def percentile(self, q: float) -> float:
        return float(np.percentile(self.steps_s, q))


def jittered_pipeline_s(prog: StepProgram, jitter: Jitter, seed: int, index: int, link_rate: float = 1.0) -> float:
    """One jittered pipeline's timeline span (s), its draws seeded by ``(seed, index)`` alone: the same pipeline
    whichever process, and in whichever order, simulates it (a full Monte Carlo spread over workers)."""
    return _run(prog, link_rate, jitter, np.random.default_rng((seed, index))).makespan_s


def monte_carlo(budget: Budget, jitter: Jitter, steps: int, replicas: int = 1, samples: int | None = None,
                seed: int = 0, contention: bool = True, program: StepProgram | None = None,
                link_rate: float = 1.0, progress: Callable[[int, int], None] | None = None,
                full: bool = False, pipelines: Callable[[int], np.ndarray] | None = None) -> MonteCarlo:
    """``steps`` jittered steps; each is the slowest of ``replicas`` DP replicas.

    Replicas are independent pipelines that meet at every step's gradient reduction, so a step
    lasts as long as its slowest replica. ``samples`` pipelines are simulated (default
    ``min(steps, 64)``) and each step draws its ``replicas`` from them: the tail of the maximum
    grows with the replicas while the simulation cost does not. With ``full``, every one of the
    ``steps x replicas`` pipelines is simulated, pipeline ``i`` (step ``i // replicas``) seeded by
    ``(seed, i)``, and no draw is bootstrapped. ``progress(done, total)`` is called after
    each simulated pipeline. ``pipelines(total)``, if given, computes the full run's spans elsewhere (a sweep's
    workers: sweep/dist.py), each as ``jittered_pipeline_s`` of this program would. ScenarioError naming
    ``steps x replicas`` before any simulation when there are more
    draws than ``MAX_DRAWS`` (or, with ``full``, pipelines than ``MAX_FULL_PIPELINES``).
    """
    prog = program or step_program(budget, contention=contention)
    if full:
        return _full_monte_carlo(budget, prog, jitter, steps, replicas, seed, link_rate, progress, pipelines)
    check_draws(steps, replicas)
    rng = np.random.default_rng(seed)
    n = samples or min(steps, 64)
    # the scenario's fixed cost per step (cluster.step_overhead_s) follows each timeline, as in the budget
    makespans = []
    for i in range(n):
        makespans.append(_run(prog, link_rate, jitter, rng).makespan_s)
        if progress is not None:
            progress(i + 1, n)
    pipes = np.array(makespans) + float(budget.step_overhead_s)
    return MonteCarlo(steps_s=slowest_of(pipes, replicas, steps, rng), replicas=replicas, pipeline_s=pipes)


def _full_monte_carlo(budget: Budget, prog: StepProgram, jitter: Jitter, steps: int, replicas: int, seed: int,
                      link_rate: float, progress: Callable[[int, int], None] | None,
                      pipelines: Callable[[int], np.ndarray] | None = None) -> MonteCarlo:
    check_full(steps, replicas)
    total = steps * replicas
    if pipelines is not None:
        pipes = np.asarray(pipelines(total), dtype=float)
    else:
        pipes = np.empty(total)
        for i in range(total):
            pipes[i] = jittered_pipeline_s(prog, jitter, seed, i, link_rate)
            if progress is not None:
                progress(i + 1, total)
    pipes = pipes.reshape(steps, replicas) + float(budget.step_overhead_s)
    return MonteCarlo(steps_s=pipes.max(axis=1), replicas=replicas, pipeline_s=pipes, full=True)


def full_tails(pipes: np.ndarray, replicas: list[int]) -> dict[int, dict[str, float]]:
    """p50, p90 and p99 of the step when it waits for the slowest of its first R simulated replicas, for each R up
    to the replicas simulated (``pipes`` has shape (steps, replicas)): exact maxima, no bootstrap."""
    out = {}
    for R in replicas:
        if R <= pipes.shape[1]:
            s = pipes[:, :R].max(axis=1)
            out[R] = {f"p{q}_s": float(np.percentile(s, q)) for q in (50, 90, 99)}
    return out


def slowest_of(pipelines: np.ndarray, replicas: int, steps: int, rng: np.random.Generator) -> np.ndarray:
    """``steps`` draws of the slowest of ``replicas`` pipelines, from a smoothed bootstrap of ``pipelines``.

    Each replica is a resampled simulated pipeline plus Gaussian noise of Silverman's bandwidth
    (Silverman 1986, eq. 3.31), so the maximum over many replicas can exceed the slowest sample,
    as it would with more samples. Draws are made in blocks to bound memory.
    """
    n = pipelines.size
    spread = min(np.std(pipelines), (np.percentile(pipelines, 75) - np.percentile(pipelines, 25)) / 1.34)
    bandwidth = 0.9 * spread * n ** -0.2 if n > 1 else 0.0
    out = np.full(steps, -np.inf)
    block = max(1, _BLOCK // max(replicas, 1))
    for lo in range(0, steps, block):
        hi = min(lo + block, steps)
        for first in range(0, replicas, _BLOCK):  # one pass when replicas <= _BLOCK; columns beyond it in blocks
            draws = pipelines[rng.integers(0, n, size=(hi - lo, min(_BLOCK, replicas - first)))]
            if bandwidth > 0:
                draws = draws + rng.normal(0.0, bandwidth, size=draws.shape)
            out[lo:hi] = np.maximum(out[lo:hi], draws.max(axis=1))
    return out


def tail_growth(pipelines: np.ndarray, replicas: list[int], steps: int, seed: int = 0) -> dict[int, dict[str, float]]:
    """p50, p90 and p99 of the step when it waits for the slowest of R replicas, for each R."""
    for R in replicas:
        check_draws(steps, R)
    rng = np.random.default_rng(seed)
    out = {}
    for R in replicas:
        s = slowest_of(pipelines, R, steps, rng)
        out[R] = {f"p{q}_s": float(np.percentile(s, q)) for q in (50, 90, 99)}
    return out
