"""Fit a calibration profile to measured runs, and say how well it predicts runs it never saw.

The parameters (inputs/profiles.py) are few, named and bounded. The fit is robust least squares on
``log(predicted / measured)`` step time (scipy ``least_squares``, soft-L1 loss: a run off by 40 % pulls
like one off by a few, so one odd run does not drag the rest). The predicted step of a run is the
operator model's with the profile applied (plan/calibration.py):

    step(theta) = base(gemm_scale) + step_s + microbatch_s (m + p - 1) + routed_token_s * routed

``base(s)`` is the run's budget with its compute rate times ``s``, evaluated on ``SCALE_GRID`` once and
interpolated, so the fit never derives a plan again; at the end every figure is recomputed with the full
model and the profile, so what ``calibrate`` reports is what ``--profile`` gives.

Errors are reported three ways: uncalibrated, in-sample (the fit's own runs) and leave-one-source-out
cross-validated: for each source, the fit is made without its runs and predicts them. The profile's
quoted error is the cross-validated one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from stepbudget.inputs.errors import OptionError
from stepbudget.budget.step import estimate
from stepbudget.inputs.profiles import PARAMETERS, Profile, gpu_family, kind
from stepbudget.plan.derive import Plan, derive
from stepbudget.validation.compare import Row, Summary, summarize
from stepbudget.validation.convert import Case

SCALE_GRID = np.linspace(PARAMETERS["gemm_scale"].low, PARAMETERS["gemm_scale"].high, 41)
"""Compute-rate scales at which each run's budget is evaluated once (steps of 0.025): the fit interpolates."""
LOSS, F_SCALE = "soft_l1", 0.05
"""Soft-L1 on the log error with a 5 % knee: quadratic for small misses, linear past it."""
DEFAULT_PARAMS = ("gemm_scale", "step_s", "microbatch_s", "routed_token_s")
BOOTSTRAP = 200
"""Resamples of the runs behind each parameter's interval (a 90 % percentile interval)."""
GROUPS = ("none", "gpu", "framework")

FRAMEWORK_GROUPS = (
    (r"deepspeed", "deepspeed"),  # Megatron-DeepSpeed and DeepSpeed's pipeline engine: DeepSpeed's runtime
    (r"megatron|megascale|nemo|mcore", "megatron-family"),
    (r"torchtitan|olmo-core|fsdp2", "torchtitan-fsdp2"),  # PyTorch FSDP2 stacks (OLMo-core is one)
    (r"composer|llm-foundry|mosaic", "composer-fsdp"),
)
"""A run's ``layout.framework`` -> the stack a ``--group-by framework`` profile is fitted per (first match)."""


def framework_group(framework: str) -> str:
    low = framework.lower()
    return next((g for pattern, g in FRAMEWORK_GROUPS if re.search(pattern, low)), "other")


@dataclass(frozen=True)
class Point:
    """One predictable run, made ready to fit."""

    case: Case
    plan: Plan
    """Its plan without a profile."""
    family: str
    """The GPU family its ``gemm_scale`` is fitted per."""
    base_s: np.ndarray
    """Its budget's step, without the profile's costs, at each scale of ``SCALE_GRID``."""

    @property
    def slots(self) -> float:
        return float(self.plan.microbatch_slots)

    @property
    def routed(self) -> float:
        return float(self.plan.routed_token_layers)

    @property
    def fixed_s(self) -> float:
        """The scenario's own ``cluster.step_overhead_s``."""
        return float(self.plan.scenario.cluster.step_overhead_s)

    @property
    def measured_s(self) -> float:
        return float(self.case.measured_step_s or 0.0)  # points are made from runs with a measured step

    def step_s(self, values: dict[str, float]) -> float:
        s = values.get(f"gemm_scale:{self.family}", 1.0)
        return (float(np.interp(s, SCALE_GRID, self.base_s)) + self.fixed_s + values.get("step_s", 0.0)
                + values.get("microbatch_s", 0.0) * self.slots + values.get("routed_token_s", 0.0) * self.routed)

    def exact_s(self, values: dict[str, float]) -> float:
        """The step the full model gives with these values: what ``cluster.profile`` does (plan/derive.py)."""
        return float(estimate(self.plan.with_profile(Profile("fit", dict(values)))).step_s)


def point_of(case: Case) -> Point:
    """``case`` with its budget evaluated across ``SCALE_GRID`` (a case with a scenario and a measured step)."""
    sc = case.scenario
    assert sc is not None and case.measured_step_s
    plan = derive(sc.model_copy(update={"cluster": sc.cluster.model_copy(update={"profile": "none"})}))
    family = gpu_family(sc.cluster.gpu.name)
    fixed = float(sc.cluster.step_overhead_s)
    base = np.array([float(estimate(plan.with_profile(Profile("scale", {f"gemm_scale:{family}": s}))).step_s) - fixed
                     for s in SCALE_GRID])
    return Point(case, plan, family, base)


def parameter_names(points: Sequence[Point], wanted: Sequence[str]) -> list[str]:
    """The parameters a fit over ``points`` can identify: a ``gemm_scale`` per GPU family among them, a routed-token
    cost only where some run routes tokens."""
    names = []
    for w in wanted:
        if w == "gemm_scale":
            names += [f"gemm_scale:{f}" for f in sorted({p.family for p in points})]
        elif w == "routed_token_s":
            names += [w] if any(p.routed > 0 for p in points) else []
        else:
            names.append(w)
    return names


def fit_values(points: Sequence[Point], names: Sequence[str]) -> dict[str, float]:
    """The parameter values that fit ``points`` best (robust least squares on the log step error)."""
    if not names or not points:
        return {}
    kinds = [kind(n) for n in names]
    lo, hi = np.array([k.low for k in kinds]), np.array([k.high for k in kinds])
    # a cost starts just inside its bound of 0: started on a bound, the trust region can stall there
    x0 = np.array([k.neutral + (0.01 * (k.high - k.low) if k.neutral == k.low else 0.0) for k in kinds])
    measured = np.array([p.measured_s for p in points])

    def residuals(x: np.ndarray) -> np.ndarray:
        values = dict(zip(names, x))
        return np.log(np.array([p.step_s(values) for p in points]) / measured)

    fit = least_squares(residuals, np.clip(x0, lo, hi), bounds=(lo, hi), loss=LOSS, f_scale=F_SCALE,
                        x_scale=(hi - lo) / 10)  # each parameter in steps of a tenth of its range
    return dict(zip(names, (float(v) for v in fit.x)))


def bootstrap(points: Sequence[Point], names: Sequence[str], rounds: int = BOOTSTRAP,
              seed: int = 0) -> dict[str, tuple[float, float]]:
    """A 90 % percentile interval of each parameter over ``rounds`` resamples of the runs (with replacement)."""
    rng = np.random.default_rng(seed)
    wanted = list(dict.fromkeys(n.partition(":")[0] for n in names))
    draws = []
    for _ in range(rounds):
        sample = [points[i] for i in rng.integers(0, len(points), len(points))]
        present = set(parameter_names(sample, wanted))  # a resample may miss a GPU family or every MoE run
        fitted = fit_values(sample, [n for n in names if n in present])
        draws.append([fitted.get(n, kind(n).neutral) for n in names])
    a = np.array(draws).reshape(len(draws), len(names))
    return {n: (float(np.percentile(a[:, i], 5)), float(np.percentile(a[:, i], 95))) for i, n in enumerate(names)}


@dataclass(frozen=True)
class Fold:
    """One fold of leave-one-source-out: the source held out, the runs fitted on and the runs predicted."""

    held_out: str
    train: tuple[int, ...]
    test: tuple[int, ...]


def folds(points: Sequence[Point]) -> list[Fold]:
    """One fold per source: fit on every other source's runs, predict this one's."""
    sources = list(dict.fromkeys(p.case.source for p in points))
    return [Fold(s, tuple(i for i, p in enumerate(points) if p.case.source != s),
                 tuple(i for i, p in enumerate(points) if p.case.source == s)) for s in sources]


@dataclass(frozen=True)
class Prediction:
    """One run's measured step against the uncalibrated, calibrated (in-sample) and cross-validated steps."""

    case: Case
    uncalibrated_s: float
    calibrated_s: float
    cross_validated_s: float | None
    """None when the run's group has one source: nothing is left to fit when it is held out."""
    held_out_values: dict[str, float]
    """The parameters of the fit that never saw this run's source."""

    def error(self, which: str) -> float | None:
        step = getattr(self, f"{which}_s")
        return None if step is None or not self.case.measured_step_s else step / self.case.measured_step_s - 1


@dataclass(frozen=True)
class GroupFit:
    """The fit of one group of runs: its profile's values, intervals, and errors three ways."""

    group: str
    names: list[str]
    values: dict[str, float]
    intervals: dict[str, tuple[float, float]]
    predictions: list[Prediction]
    summaries: dict[str, list[Summary]]
    """"uncalibrated", "calibrated" and "cross_validated": per source, then "all"."""

    @property
    def overall(self) -> dict[str, Summary]:
        return {k: v[-1] for k, v in self.summaries.items()}

    @property
    def worse_than_uncalibrated(self) -> bool:
        cv, un = self.overall["cross_validated"].median_abs_error, self.overall["uncalibrated"].median_abs_error
        return cv is None or un is None or cv > un


def _summaries(predictions: list[Prediction], which: str) -> list[Summary]:
    rows = [Row(p.case, getattr(p, f"{which}_s"), None) for p in predictions]
    sources = list(dict.fromkeys(p.case.source for p in predictions))
    return [summarize(s, [r for r in rows if r.case.source == s]) for s in sources] + [summarize("all", rows)]


def fit_group(group: str, points: list[Point], wanted: Sequence[str], rounds: int = BOOTSTRAP,
              progress: Callable[[], None] | None = None) -> GroupFit:
    """Fit ``points``, bootstrap the intervals, and cross-validate leaving one source out at a time."""
    names = parameter_names(points, wanted)
    values = fit_values(points, names)
    intervals = bootstrap(points, names, rounds) if rounds else {n: (v, v) for n, v in values.items()}
    held: list[dict[str, float] | None] = [None for _ in points]  # the values of the fold that held each run out
    for fold in folds(points) if len(folds(points)) > 1 else []:
        train = [points[i] for i in fold.train]
        fold_values = fit_values(train, parameter_names(train, wanted))
        for i in fold.test:
            held[i] = fold_values
        if progress is not None:
            progress()
    predictions = [Prediction(p.case, p.exact_s({}), p.exact_s(values),
                              None if (h := held[i]) is None else p.exact_s(h), h or {}) for i, p in enumerate(points)]
    summaries = {k: _summaries(predictions, k) for k in ("uncalibrated", "calibrated", "cross_validated")}
    return GroupFit(group, names, values, intervals, predictions, summaries)


def group_of(point: Point, by: str) -> str:
    if by == "gpu":
        return point.family
    if by == "framework":
        return framework_group(point.case.framework)
    return "all"


def check_params(params: Sequence[str]) -> list[str]:
    """The parameter kinds asked for, each known; ScenarioError naming ``--params`` otherwise."""
    out = [p.strip() for p in params if p.strip()]
    for p in out:
        if p not in PARAMETERS:
            raise OptionError("params", f"{p!r} is not a parameter; use some of {', '.join(PARAMETERS)}")
    if not out:
        raise OptionError("params", f"none given; use some of {', '.join(PARAMETERS)}")
    return list(dict.fromkeys(out))


def calibrate(cases: Sequence[Case], params: Sequence[str] = DEFAULT_PARAMS, by: str = "none",
              rounds: int = BOOTSTRAP, progress: Callable[[int, int], None] | None = None) -> list[GroupFit]:
    """Fit one profile per group of the predictable ``cases`` (``by``: none, gpu or framework)."""
    if by not in GROUPS:
        raise OptionError("group_by", f"{by!r}; use one of {', '.join(GROUPS)}")
    wanted = check_params(params)
    usable = [c for c in cases if c.scenario is not None and c.reason is None and c.measured_step_s]
    if not usable:
        raise OptionError("runs file", "no run can be predicted; give runs with a model, layout and measured step")
    points: list[Point] = []
    total = 2 * len(usable)
    for c in usable:
        points.append(point_of(c))
        if progress is not None:
            progress(len(points), total)
    groups: dict[str, list[Point]] = {}
    for p in points:
        groups.setdefault(group_of(p, by), []).append(p)
    done = [len(points)]

    def step() -> None:
        done[0] += 1
        if progress is not None:
            progress(min(done[0], total), total)

    return [fit_group(g, members, wanted, rounds, step) for g, members in sorted(groups.items())]


def as_profile(fit: GroupFit, name: str) -> Profile:
    """The profile a group's fit gives (values only: the file's document is written by ``profile_document``)."""
    cv = fit.overall["cross_validated"].median_abs_error
    return Profile(name=name, values=dict(fit.values), cv_median_abs_error=cv)
