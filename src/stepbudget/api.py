"""The Python API: one function per command, with the command's options as keywords.

Each returns a frozen result that prints as one line, gives the command's ``--json`` object
(``to_dict()``), a pandas frame of its main table (``to_frame()``, pandas optional) and, in Jupyter,
the tables the command prints (``_repr_html_``, drawn by the same view functions as the CLI). The
library object behind it is ``.value``; its attributes read through (``sb.step_budget(...).step_s``).
Functions are named after their commands, but for two whose names the package's modules hold:
``budget`` is ``step_budget`` and ``wire`` is ``nic``.

    import stepbudget as sb
    sb.step_budget("llama3-405b", sets=["layout.pp=8", "layout.dp=256"])
    sb.search("megascale-175b", gpus=1024, top=3).to_frame()
    sb.simulate("hpn-gpt3-175b", link_rate=0.5).deadline_misses

The CLI calls these functions, so a notebook and a terminal see the same numbers.
"""

from __future__ import annotations

import importlib
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from rich.console import Console

from stepbudget.inputs.errors import OptionError, ScenarioError  # noqa: F401  the door's error types, with UnitError
from stepbudget.inputs.scenario import DEFAULT_SCENARIO, Scenario, load, parse_sets
from stepbudget.units import UnitError, parse
from stepbudget.plan.calibration import profile_label

MAX_TOP, MAX_STEPS, MAX_REPLICAS = 1_000, 100_000, 1_000_000
"""Bounds on options that size a table or an array: past them a run takes minutes and gigabytes."""
MIN_WINDOW_S, MAX_WINDOW_S = 1e-3, 86_400.0
"""A counter's poll interval: from 1 ms (finer than any NIC counter polls) to a day."""
MAX_CONVERGING, MAX_SWITCH_BUFFER = 1_024, 1e12
"""Bursts converging on one switch port (at most the radix of the largest switches, 512 ports, with room) and a
switch buffer (1 TB: far past the deepest, HBM-backed, switch buffers of a few GB)."""

Progress = Callable[[int, int], None]
"""``progress(done, total)``: called as long work advances (search chunks, simulated pipelines, runs, sizes)."""
ScenarioLike = Scenario | str | os.PathLike
"""A Scenario, a preset name or the path of a scenario file."""


def scenario_of(scenario: ScenarioLike, sets: Sequence[str] = ()) -> Scenario:
    """``scenario`` as a Scenario, with ``sets`` (``"section.field=value"``) applied: to a preset name or a path
    as ``--set`` applies them, to a Scenario as the typed edit they spell (``Scenario.assign``). The same job
    gives the same numbers either way."""
    if isinstance(scenario, Scenario):
        return scenario.assign(parse_sets(sets)) if sets else scenario
    return load(os.fspath(scenario), list(sets))


def finite(obj: object) -> object:
    """``obj`` with every infinite or NaN float as None and numpy scalars as Python numbers: JSON-ready."""
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def _flat(row: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """One table row: nested dicts become dotted columns (``by_dim.tp.time_s``), lists stay as they are."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out |= _flat(value, f"{name}.")
        else:
            out[name] = value
    return out


@dataclass(frozen=True, repr=False)
class Result:
    """What one command gives: the library's object, its --json document, its tables and its main rows."""

    value: Any
    """The library's own result (a Budget, a sweep SearchResult, a StepResult, ...)."""
    _document: Callable[[], dict]
    _tables: Callable[[], list]
    _rows: Callable[[dict], Iterable[Mapping[str, Any]]]
    _summary: Callable[[dict], str]
    extra: Mapping[str, Any] = field(default_factory=dict)
    """What the command adds to the library's result (a simulation's Monte Carlo steps, validation's summaries)."""
    profile: str | None = None
    """The calibration profile the numbers carry ("none", or its name and cross-validated error), for the commands
    that time a step."""

    def to_dict(self) -> dict:
        """The command's ``--json`` object: SI units, infinite values as None."""
        doc = finite(self._document())
        assert isinstance(doc, dict)
        return doc if self.profile is None else {**doc, "profile": self.profile}

    def rows(self) -> list[dict[str, Any]]:
        """The main table as flat dicts (one per exchange, layout, size, run, ...)."""
        return [_flat(r) for r in self._rows(self.to_dict())]

    def to_frame(self):
        """The main table as a pandas DataFrame (pandas is optional: ``pip install pandas``)."""
        try:
            import pandas
        except ImportError:
            raise ImportError("to_frame needs pandas: pip install pandas (rows() gives the same table as dicts)") from None
        return pandas.DataFrame(self.rows())

    def tables(self) -> list:
        """The rich tables and lines the command prints."""
        return [*self._tables(), *([f"profile: {self.profile}"] if self.profile is not None else [])]

    def _recorded(self, width: int) -> Console:
        """A console that has drawn the tables and shown nothing: in Jupyter, rich would also display each table
        it prints (force_jupyter=False), and the result would show twice."""
        with open(os.devnull, "w") as nowhere:
            console = Console(width=width, record=True, file=nowhere, force_jupyter=False)
            for item in self.tables():
                console.print(item)
        return console

    def text(self, width: int = 160) -> str:
        """What the command prints, as plain text."""
        return self._recorded(width).export_text()

    def _repr_html_(self) -> str:
        return self._recorded(160).export_html(inline_styles=True,
                                               code_format="<pre style='font-size:12px'>{code}</pre>")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._summary(self.to_dict())}>"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self.extra:
            return self.extra[name]
        return getattr(self.value, name)


class BudgetResult(Result):
    """``budget``: the step term by term."""


class MemoryResult(Result):
    """``memory``: memory per GPU against HBM."""


class RankedLayouts(Result):
    """``search``: every valid layout, ranked."""


class ScaleResult(Result):
    """``scale``: the scaling curve."""


class WhatIfResult(Result):
    """``whatif``: variants side by side."""


class ValidationResult(Result):
    """``validate``: predicted against published runs."""


class CalibrationResult(Result):
    """``calibrate``: a profile fitted to measured runs, with its in-sample and cross-validated error."""


class SimulationResult(Result):
    """``simulate``: one step task by task, and the tail over replicas when jittered."""


class WireResult(Result):
    """``wire``: what one NIC sees."""


class MoEResult(Result):
    """``moe``: the all-to-all's hiding ratio, traffic matrix and schedules."""


class SweepRunResult(Result):
    """``sweep``: what a run wrote where."""


class SweepReportResult(Result):
    """``sweep-report``: a sweep's points, best layout each, and its Pareto front."""


class ImportResult(Result):
    """``import``: the scenario a job's config files make, each field with the file and key it came from."""


def _ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 1e3:,.1f} ms" if x < 1 else f"{x:,.2f} s"


def step_budget(scenario: ScenarioLike = "llama3-405b", *, sets: Sequence[str] = (),
                tokens: float | str | None = None) -> BudgetResult:
    """``budget``: the step-time budget of ``scenario``: compute, bubble, bytes and time per dimension, exposure, MFU,
    throughput, whether it fits in HBM, and the tool defaults that move its step most. With ``tokens``, also the
    time and GPU-hours to train on that many tokens (a number, or a count as text: ``"15T"``, ``"300B"``).

    A whole-step-rate scenario changed by ``sets`` runs at the kernel rate that reproduces its measured job's step,
    whichever way the job is given (a name with ``sets``, a file, a Scenario)."""
    from stepbudget.budget.memory import memory_per_gpu
    from stepbudget.budget.step import estimate
    from stepbudget.plan.derive import derive
    from stepbudget.sweep.assumptions import assumptions
    from stepbudget.views.memory import fit_dict, fit_lines
    from stepbudget.views.provenance import assumptions_dict, assumptions_table, provenance_dict
    from stepbudget.views.tables import budget_dict, budget_tables, train_dict, train_lines

    if isinstance(tokens, str):
        tokens = _quantity("tokens", tokens, "count", "give a token count such as 15T or 300B")
    if tokens is not None and (not math.isfinite(tokens) or tokens <= 0):
        raise OptionError("tokens", f"{tokens:g} is not a number of tokens; give a positive count such as 15T or 300B")
    sc = scenario_of(scenario, sets)
    plan = derive(sc)
    b, mem = estimate(plan), memory_per_gpu(plan)
    assumed = assumptions(sc, float(b.step_s))

    def document() -> dict:
        return {**fit_dict(mem), **budget_dict(b), **train_dict(b, tokens), "assumptions": assumptions_dict(assumed),
                "provenance": provenance_dict(sc)}

    return BudgetResult(b, document,
                        lambda: [*fit_lines(mem), *budget_tables(b, mem), *train_lines(b, tokens), assumptions_table(assumed)],
                        lambda d: d["exchanges"],
                        lambda d: f"{d['scenario']}: step {_ms(d['step_s'])}, MFU {d['mfu']:.1%}"
                                  + ("" if d["fits"] else ", does not fit in HBM"),
                        profile=profile_label(sc))


def memory(scenario: ScenarioLike = "llama3-405b", *, sets: Sequence[str] = ()) -> MemoryResult:
    """Memory per GPU of ``scenario`` on its first pipeline rank, against HBM."""
    from stepbudget.budget.memory import memory_per_gpu
    from stepbudget.plan.derive import derive
    from stepbudget.views.memory import memory_dict, memory_table

    mem = memory_per_gpu(derive(scenario_of(scenario, sets)))
    return MemoryResult(mem, lambda: memory_dict(mem), lambda: [memory_table(mem)],
                        lambda d: [{"component": k, "bytes": v} for k, v in d["bytes"].items()],
                        lambda d: f"{d['scenario']}: {d['total_bytes'] / 1e9:,.1f} GB of {d['capacity_bytes'] / 1e9:,.0f} GB"
                                  f" ({'fits' if d['fits'] else 'does not fit'})")


def search(scenario: ScenarioLike = "llama3-405b", *, sets: Sequence[str] = (), gpus: int | None = None, top: int = 10,
           out: str | os.PathLike | None = None, uneven_stages: bool = False,
           progress: Progress | None = None) -> RankedLayouts:
    """Every valid layout of ``scenario``'s model and batch on ``gpus`` GPUs (default: the scenario's), ranked by
    step time; the ``top`` fastest kept with their budgets, every one written to ``out`` (Parquet) if given.
    ``uneven_stages`` also tries pipeline depths the layers do not divide, split as Megatron allows."""
    from stepbudget.sweep.search import search as run_search
    from stepbudget.views.search import search_dict, summary_lines, top_table, why_lines

    if gpus is not None and gpus < 1:
        raise OptionError("gpus", f"{gpus} is not a GPU count; give a positive integer")
    if not 1 <= top <= MAX_TOP:
        raise OptionError("top", f"{top} layouts cannot be printed; give 1 to {MAX_TOP:,} "
                                 "(--out, out= in Python, writes them all)")
    sc = scenario_of(scenario, sets)
    result = run_search(sc, gpus=gpus, top=top,
                        out=None if out is None else os.fspath(out), uneven_stages=uneven_stages, progress=progress)
    return RankedLayouts(result, lambda: search_dict(result),
                        lambda: [*summary_lines(result), top_table(result), "[bold]Why the winner wins[/bold]",
                                 *(f"  {line}" for line in why_lines(result))],
                        lambda d: [{"rank": t["rank"], "layout": t["layout"], **{k: t["budget"][k] for k in (
                            "step_s", "compute_s", "bubble_s", "exposed_comm_s", "mfu")},
                            "memory_bytes": t["memory"]["total_bytes"]} for t in d["top"]],
                        lambda d: f"{d['scenario']} on {d['gpus']:,} GPUs: {d['feasible']:,} of {d['evaluated']:,} "
                                  f"layouts fit; best {_ms(d['top'][0]['budget']['step_s']) if d['top'] else 'none'}",
                        profile=profile_label(sc))


def scale(scenario: ScenarioLike = "llama3-405b", gpus: Sequence[int] | str | None = None, *,
          sets: Sequence[str] = (), weak: bool = False, research: bool = False,
          progress: Progress | None = None) -> ScaleResult:
    """Strong scaling of ``scenario`` over ``gpus`` (default: its own size; or a comma-separated text,
    ``"8192,16384"``); ``weak`` keeps the batch per replica, ``research`` searches the best layout again at each
    size."""
    from stepbudget.sweep.scaling import parse_gpus
    from stepbudget.sweep.scaling import scale as run_scale
    from stepbudget.views.memory import misfit_lines
    from stepbudget.views.scaling import scale_dict, scale_table

    sc = scenario_of(scenario, sets)
    sizes = parse_gpus(gpus) if isinstance(gpus, str) and gpus.strip() else \
        list(gpus) if gpus is not None and not isinstance(gpus, str) else [sc.cluster.gpus]
    curve = run_scale(sc, sizes, weak=weak, research=research,
                      progress=progress)
    misfits = [(f"{p.gpus:,} GPUs", p.memory_bytes, sc.cluster.gpu.hbm_bytes) for p in curve.points if not p.fits]
    return ScaleResult(curve, lambda: {"fits": not misfits, **scale_dict(curve)},
                       lambda: [*misfit_lines(sc.name, sc.cluster.gpu.name, misfits), scale_table(curve)],
                       lambda d: d["points"],
                       lambda d: f"{d['scenario']} ({d['mode']}): " + ", ".join(
                           f"{p['gpus']:,} GPUs {p['mfu']:.1%} MFU" for p in d["points"][:4])
                           + (" ..." if len(d["points"]) > 4 else ""), profile=profile_label(sc))


def whatif(scenario: str | os.PathLike = "llama3-405b",
           variants: Mapping[str, Sequence[str]] | Sequence[tuple[str, Sequence[str]]] | None = None, *,
           vary: Sequence[str] = (), sets: Sequence[str] = (), chapter: bool = False) -> WhatIfResult:
    """``scenario`` (a preset name or a file, with ``sets``) and each variant, side by side. ``variants`` maps a
    name to its ``"section.field=value"`` changes (or lists (name, changes) pairs); each text of ``vary`` is one
    more variant, its changes separated by spaces as ``--vary`` takes them; ``chapter`` puts the chapter's cases
    first (llama3-405b only)."""
    from stepbudget.chapter.whatif import CHAPTER_CASES
    from stepbudget.sweep.whatif import parse_vary
    from stepbudget.sweep.whatif import whatif as run_whatif
    from stepbudget.views.memory import misfit_lines
    from stepbudget.views.whatif import traffic_table, whatif_dict, whatif_table

    ref = os.fspath(scenario)
    pairs = variants.items() if isinstance(variants, Mapping) else variants or ()
    chosen = [(name, tuple(changes)) for name, changes in pairs]
    chosen += [(text, parse_vary(text)) for text in vary]
    if chapter:
        if ref not in CHAPTER_CASES:
            raise OptionError("chapter", f"the chapter's cases are written for {', '.join(CHAPTER_CASES)}; "
                                         f"give variants of your own for {ref!r}")
        chosen = list(CHAPTER_CASES[ref].items()) + chosen
    if not chosen:
        raise OptionError("variants", "give at least one variant ('KEY=VALUE ...') or the chapter's cases")
    result = run_whatif(ref, list(sets), chosen)
    misfits = [(v.name, float(v.memory.total), v.memory.capacity) for v in result if not bool(v.memory.fits)]
    first = result[0].scenario
    return WhatIfResult(result, lambda: {"fits": not misfits, **whatif_dict(result)},
                        lambda: [*misfit_lines(first.name, first.cluster.gpu.name, misfits), whatif_table(result),
                                 traffic_table(result)],
                        lambda d: [{"name": v["name"], **{k: v["budget"][k] for k in ("step_s", "compute_s", "bubble_s",
                                                                                   "exposed_comm_s", "mfu")},
                                    "memory_bytes": v["memory"]["total_bytes"]} for v in d["variants"]],
                        lambda d: f"{len(d['variants'])} variants of {ref}",
                        profile=profile_label(result[0].scenario))  # the base variant


def validate(runs: str | os.PathLike | Sequence[str | os.PathLike] | None = None, *, profile: str | None = None,
             strict: bool = False, progress: Progress | None = None) -> ValidationResult:
    """Every published run in ``runs`` (one runs file or several; default: the shipped one) predicted by the model,
    against what was measured, with a summary per source. With ``profile``, also calibrated by it, side by side."""
    from stepbudget.inputs.profiles import load_profile
    from stepbudget.validation.compare import summaries_of
    from stepbudget.validation.compare import validate as run_validate
    from stepbudget.validation.ablation import ablations
    from stepbudget.views.validation import (ablation_dict, ablation_table, in_fit_count, in_fit_line, memory_lines,
                                             runs_table, skipped_lines, summary_table, validation_dict)

    rows, summaries = run_validate(_run_paths(runs), progress=progress, strict=strict, profile=profile)
    calibrated = summaries_of([r.calibrated() for r in rows]) if profile is not None else None
    chosen = load_profile(profile) if profile is not None else None
    label = chosen.label if chosen is not None else "none"
    fitted = chosen.fitted_runs if chosen is not None else frozenset()
    skipped = skipped_lines(rows)
    studies = ablations() if runs is None else []  # the shipped studies start from the shipped runs

    def document() -> dict:
        doc = {**validation_dict(rows, summaries, calibrated, label), "ablations": ablation_dict(studies)}
        return doc if chosen is None else {**doc, "calibrated_in_sample_runs": in_fit_count(rows, fitted)}

    return ValidationResult(rows, document,
                            lambda: [*memory_lines(rows), runs_table(rows, profile and label),
                                     summary_table(summaries, calibrated, label),
                                     *([ablation_table(studies)] if studies else []),
                                     *([f"[bold]Not predicted ({len(skipped)})[/bold]"] if skipped else []),
                                     *(f"  {line}" for line in skipped), *in_fit_line(rows, fitted),
                                     f"profile: {label}"],
                            lambda d: [{k: v for k, v in r.items() if k != "assumptions"} for r in d["runs"]],
                            lambda d: f"{d['summary']['n']} runs predicted, median |error| "
                                      f"{d['summary']['median_abs_error']:.1%}",
                            {"summaries": summaries, "calibrated_summaries": calibrated})


def _run_paths(runs: str | os.PathLike | Sequence[str | os.PathLike] | None) -> list[str] | None:
    return None if runs is None else [os.fspath(runs)] if isinstance(runs, (str, os.PathLike)) else \
        [os.fspath(r) for r in runs]


def calibrate(runs: str | os.PathLike | Sequence[str | os.PathLike] | None = None, *,
              params: Sequence[str] = ("gemm_scale", "step_s", "microbatch_s", "routed_token_s"),
              group_by: str = "none", out: str | os.PathLike | None = None, name: str | None = None,
              bootstrap: int = 200, strict: bool = False, command: str = "",
              progress: Progress | None = None) -> CalibrationResult:
    """A calibration profile fitted to the measured runs of ``runs`` (default: the shipped file): ``params`` by
    robust least squares, one profile per group (``group_by``: none, gpu or framework), each reported in-sample
    and leave-one-source-out cross-validated. With ``out``, each profile whose cross-validated error is no worse
    than the uncalibrated model's is written there (``STEM-GROUP.yaml`` when grouped)."""
    from stepbudget.validation.compare import validate as run_validate
    from stepbudget.validation.fit import calibrate as run_calibrate
    from stepbudget.validation.profile_files import write_profiles
    from stepbudget.views.calibration import calibration_dict, calibration_tables

    if bootstrap < 0 or bootstrap > 10_000:
        raise OptionError("bootstrap", f"{bootstrap}; give 0 to 10,000 resamples")
    paths = _run_paths(runs)
    rows, _ = run_validate(paths, strict=strict)
    fits = run_calibrate([r.case for r in rows], params, by=group_by, rounds=bootstrap, progress=progress)
    written, refused = write_profiles(fits, out, name, paths, command) if out is not None else ([], None)
    return CalibrationResult(fits, lambda: calibration_dict(fits, written, refused),
                             lambda: calibration_tables(fits, written, refused),
                             lambda d: [{"group": g["group"], **r} for g in d["groups"] for r in g["runs"]],
                             lambda d: ", ".join(f"{g['group']}: CV median "
                                                 f"{g['error']['cross_validated']['median_abs_error']:.1%}"
                                                 for g in d["groups"]), {"written": written, "refused": refused})


def simulate(scenario: ScenarioLike = "llama3-405b", *, sets: Sequence[str] = (), contention: bool = True,
             link_rate: float = 1.0, compute_cv: float = 0.0, link_cv: float = 0.0, straggler_p: float = 0.0,
             straggler_slowdown: float = 1.5, steps: int = 1, replicas: int | None = None, seed: int = 0,
             full: bool = False, progress: Progress | None = None, workers: int | None = None,
             scheduler: str | None = None) -> SimulationResult:
    """One step of ``scenario`` simulated task by task (max-min link sharing unless not ``contention``, every link
    at ``link_rate`` times its rate). With jitter (``compute_cv``, ``link_cv``, a straggler chance) or ``steps`` > 1,
    also ``steps`` steps, each the slowest of ``replicas`` DP replicas (default: the layout's DP): drawn from a
    bootstrap of up to 64 simulated pipelines, or with ``full`` every replica of every step simulated: spread over
    ``workers`` local Dask processes or the cluster at ``scheduler`` when either is given (the same results)."""
    from stepbudget.sim.step import (Jitter, check_draws, check_full, check_link_rate, full_tails, monte_carlo,
                                     sim_budget, simulate_step, tail_growth)
    from stepbudget.sweep.dist import check_workers
    from stepbudget.budget.memory import memory_per_gpu
    from stepbudget.views.memory import fit_dict, fit_lines
    from stepbudget.views.simulation import links_table, misses_table, simulate_dict, simulate_table, tails_table

    jit = Jitter(compute_cv=compute_cv, link_cv=link_cv, straggler_p=straggler_p, straggler_slowdown=straggler_slowdown)
    check_link_rate(link_rate)
    if not 1 <= steps <= MAX_STEPS:
        raise OptionError("steps", f"{steps} steps; give 1 to {MAX_STEPS:,}")
    if replicas is not None and not 1 <= replicas <= MAX_REPLICAS:
        raise OptionError("replicas", f"{replicas} replicas; give 1 to {MAX_REPLICAS:,} (or none: the layout's DP)")
    if (workers is not None or scheduler is not None) and not full:
        raise OptionError("workers", "only the full Monte Carlo (--full, full=True in Python) is spread over workers")
    check_workers(workers, scheduler)
    sc = scenario_of(scenario, sets)
    if steps > 1 or jit.any:  # the tail's draws, refused before the first simulated step
        (check_full if full else check_draws)(steps, replicas or sc.layout.dp)
    b = sim_budget(sc)
    result = simulate_step(b, contention=contention, link_rate=link_rate)
    mc = tails = None
    if steps > 1 or jit.any:
        R = replicas or int(b.plan.dp)
        spread = None
        if workers is not None or scheduler is not None:
            from stepbudget.sweep.dist import full_pipelines

            def spread(total: int) -> np.ndarray:
                return full_pipelines(sc, jit, seed, total, contention=contention, link_rate=link_rate,
                                      workers=workers, scheduler=scheduler, progress=progress)
        mc = monte_carlo(b, jit, steps, replicas=R, seed=seed, program=result.program, link_rate=link_rate,
                         progress=progress, full=full, pipelines=spread)
        at = sorted({1, 8, 64, R})
        tails = full_tails(mc.pipeline_s, at) if full else tail_growth(mc.pipeline_s, at, steps, seed)

    mem = memory_per_gpu(b.plan)

    def tables() -> list:
        return [*fit_lines(mem), simulate_table(result), *([misses_table(result)] if result.deadline_misses else []),
                links_table(result), *([tails_table(tails, steps, full)] if tails is not None else [])]

    return SimulationResult(
        result, lambda: {**fit_dict(mem), **simulate_dict(result, mc, tails)}, tables,
        lambda d: [{"term": "bubble", "exposed_s": d["bubble_s"]},
                   *({"term": k, "exposed_s": v} for k, v in d["exposed_comm_s"].items())],
        lambda d: f"{d['scenario']}: simulated {_ms(d['step_s'])} against the budget's {_ms(d['analytical_step_s'])}, "
                  f"{d['deadline_misses']} deadline misses", {"monte_carlo": mc, "tails": tails},
        profile=profile_label(b.plan.scenario))


def nic(scenario: ScenarioLike = "llama3-405b", *, sets: Sequence[str] = (), steps: int = 4,
        window_s: float | str = 15.0, converging: int = 2, switch_buffer_bytes: float | str = 64e6) -> WireResult:
    """``wire``: one NIC of ``scenario``'s job over ``steps`` steps: bursts at line rate, duty cycle, what a ``window_s``
    counter reads, and the buffer ``converging`` bursts need at one switch port (times and sizes as numbers in
    seconds and bytes, or as text: ``"15s"``, ``"64MB"``)."""
    from stepbudget.budget.step import estimate
    from stepbudget.plan.derive import derive
    from stepbudget.budget.memory import memory_per_gpu
    from stepbudget.views.memory import fit_dict, fit_lines
    from stepbudget.views.wire import wire_dict, wire_table
    from stepbudget.wire import wire_of

    window, buffer = (v if isinstance(v, str) else f"{v:g}{unit}" for v, unit in ((window_s, "s"),
                                                                                 (switch_buffer_bytes, "B")))
    window_s = _window(window)
    switch_buffer_bytes = _quantity("switch_buffer_bytes", buffer, "bytes", "give a size such as 64MB")
    if not 1 <= converging <= MAX_CONVERGING:
        raise OptionError("converging", f"{converging} bursts cannot converge on one switch port; give 1 to "
                                        f"{MAX_CONVERGING:,}")
    if not 0 <= switch_buffer_bytes <= MAX_SWITCH_BUFFER:
        raise OptionError("switch_buffer_bytes", f"{buffer!r} is not a switch buffer; give 0 B to 1 TB, e.g. 64MB")
    if steps < 1:
        raise OptionError("steps", f"{steps}; give at least 1 step")
    sc = scenario_of(scenario, sets)
    plan = derive(sc)
    w = wire_of(estimate(plan), steps=steps, window_s=window_s, k=converging, switch_buffer_bytes=switch_buffer_bytes)
    mem = memory_per_gpu(plan)
    return WireResult(w, lambda: {**fit_dict(mem), **wire_dict(w)}, lambda: [*fit_lines(mem), wire_table(w)],
                      lambda d: [{"t_s": t, "rate_Bps": r} for t, r in zip(d["series"]["t_s"], d["series"]["rate_Bps"])],
                      lambda d: f"{d['scenario']}: {d['bytes_per_nic'] / 1e9:,.1f} GB per NIC per step, "
                                f"duty cycle {d['duty_cycle']:.1%}", profile=profile_label(sc))


def moe(scenario: ScenarioLike = "deepseek-v3", *, sets: Sequence[str] = (), skew: str = "uniform",
        servers: int | None = None, gpus_per_server: int | None = None, matrix: np.ndarray | str | None = None,
        seed: int = 0, progress: Progress | None = None) -> MoEResult:
    """One MoE layer's all-to-all in ``scenario``: the hiding ratio on each link, the dispatch matrix under ``skew``
    (``uniform``, ``zipf:S``, ``experts:S``) or a measured ``matrix`` (bytes; an array or a .csv/.npy path), and its
    completion time plain and FAST-scheduled on ``servers`` x ``gpus_per_server`` GPUs."""
    from stepbudget.a2a.report import load_matrix, moe_report, parse_skew
    from stepbudget.views.moe import alltoall_table, moe_dict, ratio_table, verdict

    for option, value in (("servers", servers), ("gpus_per_server", gpus_per_server)):
        if value is not None and value < 1:
            raise OptionError(option, f"{value} must be a positive integer")
    if servers is not None and gpus_per_server is not None and servers * gpus_per_server < 2:
        raise OptionError("servers x gpus_per_server", "an all-to-all needs at least 2 GPUs; give more")
    m = load_matrix(matrix) if isinstance(matrix, str) else matrix
    report = moe_report(scenario_of(scenario, sets), parse_skew(skew), servers, gpus_per_server, m, seed, progress)
    return MoEResult(report, lambda: moe_dict(report),
                     lambda: [ratio_table(report), alltoall_table(report), "[bold]What it means[/bold]",
                              *(f"  {line}" for line in verdict(report))],
                     lambda d: [{"link": k, **v} for k, v in d["ratio"].items()],
                     lambda d: f"{d['scenario']}: {d['servers']} x {d['gpus_per_server']} GPUs, plain "
                               f"{_ms(d['alltoall']['plain_s'])}, scheduled {_ms(d['alltoall']['scheduled_s'])}")


def sweep(path: str | os.PathLike, out: str | os.PathLike, *, workers: int | None = None, scheduler: str | None = None,
          resume: bool = False, started: Callable | None = None, progress: Callable | None = None,
          client: object | None = None) -> SweepRunResult:
    """Run the sweep file ``path`` into the results folder ``out``: on ``workers`` local Dask processes (default:
    one per core; 0 or Dask missing: this process), on the cluster at ``scheduler``, or on a given Dask ``client``.
    ``resume`` goes on with a folder a run left; ``started(tally, where)`` and ``progress(tally)`` report."""
    from stepbudget.sweep.dist import check_workers, run_sweep
    from stepbudget.sweep.grid import load_sweep
    from stepbudget.views.sweep import run_dict, run_lines

    check_workers(workers, scheduler)  # then the file, both before any folder or worker exists
    run = run_sweep(load_sweep(path), os.fspath(out), workers=workers, scheduler=scheduler, resume=resume,
                    started=started, progress=progress, client=client)
    return SweepRunResult(run, lambda: run_dict(run), lambda: run_lines(run), lambda d: [d],
                          lambda d: f"{d['written']:,} points written to {d['out']} ({d['failed']:,} failed)")


def sweep_report(out: str | os.PathLike) -> SweepReportResult:
    """The results folder ``out`` of a sweep as a table: one row per point (its best layout), and the Pareto front
    of step time against GPUs. ``to_frame()`` has every column of each point's best row."""
    from stepbudget.sweep.report import sweep_report as read_report
    from stepbudget.views.sweep import report_dict, report_lines, report_table

    report = read_report(out)
    return SweepReportResult(report, lambda: report_dict(report), lambda: [report_table(report), *report_lines(report)],
                             lambda d: d["points"],
                             lambda d: f"{d['name']}: {d['written']:,} of {d['total']:,} points, {d['failed']:,} failed")


def _quantity(option: str, text: str, kind: str, fix: str) -> float:
    """``text`` read in ``kind``'s units (units.parse), or an OptionError naming ``option`` and the fix."""
    try:
        return parse(text, kind)
    except UnitError as e:
        raise OptionError(option, f"{e}; {fix}") from None


def _window(window: float | str) -> float:
    """A counter's window in seconds, from a number or text such as ``"15s"``: 1 ms to a day."""
    window_s = _quantity("window_s", window, "time", "give a time such as 15s") if isinstance(window, str) \
        else float(window)
    if not MIN_WINDOW_S <= window_s <= MAX_WINDOW_S:
        raise OptionError("window_s", f"{window!r} is not a counter window; give a time from 1 ms to a day, e.g. 15s")
    return window_s


def parse_straggler(text: str) -> tuple[float, float]:
    """``--straggler``'s ``"P"`` or ``"PxSLOWDOWN"`` -> (P, SLOWDOWN) for ``simulate``, the slow-down 1.5 when not
    given."""
    chance, _, slowdown = text.partition("x")
    try:
        return float(chance), float(slowdown or 1.5)
    except ValueError:
        raise OptionError("straggler", f"{text!r} is not P or PxSLOWDOWN, e.g. 0.01x1.5") from None


def import_configs(files: Sequence[str | os.PathLike], *, cluster: str | None = None, sets: Sequence[str] = (),
                   out: str | os.PathLike | None = None) -> ImportResult:
    """``import``: the job that the config files (a Hugging Face config.json, a Megatron-LM launch script, a NeMo,
    torchtitan, MaxText, DeepSpeed or GPT-NeoX config) state together, on ``cluster`` (a GPU name, or a preset's or
    scenario file's cluster), with ``sets`` laid over; written to ``out`` as a scenario file when given. Files that
    contradict each other, keys stated badly and a job the files leave incomplete are refused, one line each."""
    from stepbudget.inputs.files import atomic_write
    from stepbudget.inputs.scenario import build_stated, cluster_statement, imported
    from stepbudget.views.imported import import_dict, import_lines, scenario_text

    if not files:
        raise OptionError("files", "give at least one config file")
    if out is not None:
        check_output(os.fspath(out), (".yaml", ".yml"), "out")
    merged = imported(files, cluster_statement(cluster) if cluster else None, "files")
    stated = merged.stated.assign(parse_sets(sets), "--set") if sets else merged.stated
    sc = build_stated(stated)
    text = scenario_text(stated, merged.files)
    if out is not None:
        atomic_write(out, lambda tmp: tmp.write_text(text, encoding="utf-8"), "out")

    def document() -> dict:
        return {**import_dict(stated, sc, merged.files, text), "written": None if out is None else os.fspath(out)}

    return ImportResult(sc, document, lambda: import_lines(text, sc, merged.files),
                        lambda d: [{"field": k, "where": v} for k, v in d["stated"].items()],
                        lambda d: f"{len(d['stated'])} fields from {len(d['files'])} files")


def presets() -> list[tuple[str, str]]:
    """The shipped scenarios: (name, its one-line description)."""
    from stepbudget.inputs.scenario import preset_names, raw_scenario

    return [(name, str(raw_scenario(name).get("description", ""))) for name in preset_names()]


def models() -> list:
    """The model catalog's rows (``model: NAME`` in a scenario), each with its source."""
    from stepbudget.inputs.catalog import entries

    return entries()


def gpus() -> list[dict[str, Any]]:
    """The GPU rows (``cluster.gpu: NAME``), SI units: each GPU's datasheet figures and the node it ships in (its
    scale-up domain, per-GPU rate each way, NICs), with their sources."""
    from stepbudget.inputs.hardware import Cluster, gpu_node, gpu_presets

    rows = []
    for key, figures in gpu_presets().items():
        node = gpu_node(key)
        assert node is not None  # every shipped GPU row names its node (tests/inputs/test_gpus.py)
        cluster = Cluster.model_validate({"gpus": node["gpus_per_node"], "gpu": figures,
                                          **{k: v for k, v in node.items() if k != "source"}})
        links = cluster.model_dump(mode="json", include={"gpus_per_node", "nvlink_Bps", "nics_per_node", "nic_Bps"})
        rows.append({"key": key, "gpu": cluster.gpu.model_dump(mode="json"), "node": {**links, "source": node["source"]}})
    return rows


def profiles() -> list:
    """The shipped calibration profiles, loaded (each with its label: the runs it was fitted on and its error)."""
    from stepbudget.inputs.profiles import load_profile, shipped_profiles

    return [load_profile(name) for name in shipped_profiles()]


def resolved(scenario: ScenarioLike = DEFAULT_SCENARIO, *, sets: Sequence[str] = ()) -> Scenario:
    """``show``: the scenario a budget evaluates, completed, with where each field came from (``.sources``): a job
    changed from the one its whole-step rate was measured on as it runs, at the kernel rate that reproduces it."""
    from stepbudget.sweep.calibrate import carried

    return carried(scenario_of(scenario, sets))[0]


def explain(run_id: str, runs: str | os.PathLike | Sequence[str | os.PathLike] | None = None, *,
            profile: str | None = None) -> BudgetResult:
    """``validate --explain``: one published run as the model reads it (what it became, what was assumed) and its
    whole budget."""
    from stepbudget.validation.compare import explain as run_explain
    from stepbudget.views.tables import budget_dict, budget_tables
    from stepbudget.views.validation import explain_dict, explain_lines

    row, b = run_explain(_run_paths(runs), run_id, profile=profile)
    return BudgetResult(b, lambda: explain_dict(row, budget_dict(b)), lambda: [*explain_lines(row), *budget_tables(b)],
                        lambda d: d["exchanges"], lambda d: f"{run_id}: step {_ms(d['step_s'])}, MFU {d['mfu']:.1%}")


def figure_list(lang: str = "en") -> list[tuple[str, str, str]]:
    """The chapter's figures and animations: (id, what it shows, the job it is drawn for), in ``lang``."""
    from stepbudget.chapter.figures import FIGURES

    _check_lang(lang)
    return [(f.ident, f.describe(lang), f.job(lang)) for f in FIGURES.values()]


def _check_lang(lang: str) -> None:
    from stepbudget.views.i18n import LANGS

    if lang not in LANGS:
        raise OptionError("lang", f"{lang!r} is not a language of the figures; use one of {', '.join(LANGS)}")


def figure(ident: str, scenario: str | None = None, *, sets: Sequence[str] = (), lang: str = "en",
           window: float | str | None = None) -> dict:
    """One of the chapter's figures (``5.1`` ... ``5.9``, ``anim-5.1``, ``anim-5.2``) as a plotly figure dict, for
    ``scenario`` with ``sets`` (default: the chapter's own job), in ``lang``; ``window`` is Animation 5.2's counter
    window (seconds, or text such as ``"15s"``). ``views.render.write`` writes it as HTML, PNG or SVG."""
    from stepbudget.chapter.figures import FIGURES, build

    _check_lang(lang)
    if ident not in FIGURES:
        raise OptionError("ident", f"{ident!r} is not a figure; use one of {', '.join(FIGURES)}")
    options = {}
    if window is not None:
        if ident != "anim-5.2":
            raise OptionError("window_s", f"only anim-5.2 has a counter window; leave it off for {ident}")
        options["window_s"] = _window(window)
    return build(ident, lang, scenario, list(sets), **options)


def check_output(path: str, suffixes: Sequence[str], option: str) -> None:
    """Refuse, before any work, a file ``option`` names that could not be written: an extension other than
    ``suffixes``, a missing or read-only folder, a folder where the file should be."""
    from pathlib import Path

    from stepbudget.inputs.files import check_writable

    if Path(path).suffix not in suffixes:
        raise OptionError(option, f"{path[:80]!r} needs one of the extensions {', '.join(suffixes)}; rename it")
    check_writable(path, option)


def written_points(out: str | os.PathLike) -> int:
    """How many points of the sweep whose results folder is ``out`` have their file complete."""
    from stepbudget.sweep.results import written_points as count

    return count(out)


_CHAPTER: dict[str, tuple[str, str | None]] = {
    "firstorder": ("stepbudget.chapter.firstorder", None), "dimensions": ("stepbudget.chapter.dimensions", None),
    **{name: ("stepbudget.chapter.panels", name) for name in (
        "FullModel", "JobWire", "Unmapped", "compare", "dp_differs", "dp_totals", "full_model", "job_wire")},
    **{name: ("stepbudget.chapter.whatif", name) for name in (
        "HBM_CHOICES", "PANEL_CHANGES", "panel_whatif", "whatif_command")},
    "build_figure": ("stepbudget.chapter.figures", "build"), "FIGURES": ("stepbudget.chapter.figures", "FIGURES"),
    "TooLarge": ("stepbudget.chapter.figures.timeline", "TooLarge"),
    "layer_inputs": ("stepbudget.a2a.report", "layer_inputs"), "MAX_COUNT": ("stepbudget.inputs._types", "MAX_COUNT"),
}
"""The chapter's own layer, for the web app's panels: its first-order formulas, the panels' jobs, the figures.
Loaded on first use, so that a command that draws no panel does not import them."""

if TYPE_CHECKING:
    from stepbudget.a2a.report import layer_inputs  # noqa: F401
    from stepbudget.inputs._types import MAX_COUNT  # noqa: F401
    from stepbudget.chapter import dimensions, firstorder  # noqa: F401
    from stepbudget.chapter.figures import FIGURES  # noqa: F401
    from stepbudget.chapter.figures import build as build_figure  # noqa: F401
    from stepbudget.chapter.figures.timeline import TooLarge  # noqa: F401
    from stepbudget.chapter.panels import FullModel, JobWire, Unmapped, compare, dp_differs, dp_totals  # noqa: F401
    from stepbudget.chapter.panels import full_model, job_wire  # noqa: F401
    from stepbudget.chapter.whatif import HBM_CHOICES, PANEL_CHANGES, panel_whatif, whatif_command  # noqa: F401
else:
    def __getattr__(name: str):
        if name not in _CHAPTER:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        module, attr = _CHAPTER[name]  # attr None: the module itself
        loaded = importlib.import_module(module)
        return loaded if attr is None else getattr(loaded, attr)
