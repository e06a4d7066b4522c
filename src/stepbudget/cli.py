"""Command line: options -> scenario -> library -> views. Bad input: one line, exit code 2."""

from __future__ import annotations

import functools
import json
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Callable, Iterable, NoReturn, Optional, Protocol, cast

import typer
from rich.console import Console
from rich.progress import Progress, TextColumn

from stepbudget import api
from stepbudget.api import DEFAULT_SCENARIO, OptionError, ScenarioError, UnitError

app = typer.Typer(add_completion=False, no_args_is_help=False, help="Where the time of a distributed training step goes.")
_probe = Console()
console = _probe if _probe.is_terminal else Console(width=150)  # pipes get full rows, not 80 columns

Sets = Annotated[Optional[list[str]], typer.Option("--set", help="Override a field: section.field=value (repeatable).")]
AsJson = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")]
ScenarioArg = Annotated[str, typer.Argument(help=(
    "Preset name, path to a YAML/TOML scenario, or a job's config files joined by + "
    "(config.json+pretrain_gpt.sh+h100-sxm; see stepbudget import)."))]
ProfileOpt = Annotated[Optional[str], typer.Option(
    "--profile", help="Calibration profile: none, a shipped name (stepbudget profiles) or a file calibrate wrote.")]
WorkersOpt = Annotated[Optional[int], typer.Option(
    "--workers", help="Local Dask worker processes (default: one per core; 0: this process).")]
SchedulerOpt = Annotated[Optional[str], typer.Option(
    "--scheduler", help="Address of a running Dask scheduler, e.g. tcp://10.0.0.5:8786 (instead of --workers).")]


FLAGS = {"tokens": "--tokens", "group_by": "--group-by", "params": "--params", "bootstrap": "--bootstrap",
         "steps x replicas": "--steps x --replicas", "sizes": "--gpus", "gpus": "--gpus", "top": "--top",
         "weak": "--weak", "skew": "--skew", "matrix": "--matrix", "servers": "--servers",
         "gpus_per_server": "--gpus-per-server", "servers x gpus_per_server": "--servers x --gpus-per-server",
         "run_id": "--explain", "runs file": "--runs", "out": "--out", "window_s": "--window", "steps": "--steps",
         "compute_cv": "--jitter", "link_cv": "--link-jitter", "workers": "--workers", "scheduler": "--scheduler",
         "straggler": "--straggler", "straggler_p": "--straggler P", "straggler_slowdown": "--straggler SLOWDOWN",
         "link_rate": "--link-rate", "replicas": "--replicas", "vary": "--vary",
         "variants": "--vary", "chapter": "--chapter", "converging": "--converging",
         "switch_buffer_bytes": "--switch-buffer", "lang": "--lang", "ident": "ID",
         "override": "--set", "files": "FILE", "cluster": "--cluster"}
"""The library's name of each option (``OptionError.option``, the API's keyword) and the flag that gives it here."""


def _lines(e: Exception) -> list[str]:
    """What an input error says, a line per problem: an option's problem names its flag."""
    if isinstance(e, OptionError):
        return [f"{FLAGS.get(e.option, e.option)}{e.sep}{line}" for line in e.problem.splitlines() or [e.problem]]
    return str(e).splitlines() or [str(e)]


def _say(problem: str | Exception) -> None:
    """One line per problem (a ScenarioError lists them all, a line each) on stderr."""
    for line in _lines(problem) if isinstance(problem, Exception) else problem.splitlines() or [problem]:
        print(f"stepbudget: error: {line}", file=sys.stderr)


def fail(problem: str | Exception) -> NoReturn:
    """The problems, a line each, then exit code 2."""
    _say(problem)
    raise typer.Exit(2)


def refusing(run: Callable) -> Callable:
    """``run`` with the library's refusals of its input (each naming a field or an option) as lines and exit 2."""
    @functools.wraps(run)  # typer reads the options from the signature, which wraps keeps
    def refused(*args, **kwargs):
        try:
            return run(*args, **kwargs)
        except (ScenarioError, UnitError) as e:
            fail(e)
    return refused


def command(name: str | None = None) -> Callable[[Callable], Callable]:
    """``@app.command``, each refusal of the command's input one line per problem, exit 2."""
    return lambda run: app.command(name)(refusing(run))


def _check_runs(runs: list[str] | None) -> None:
    if runs and not all(r.strip() for r in runs):
        fail("--runs: an empty path; give a runs file, or leave --runs out for the shipped one")


def _profiled(sets: list[str] | None, profile: str | None) -> list[str] | None:
    """``--profile X`` is ``--set cluster.profile=X``, after the other overrides."""
    return sets if profile is None else [*(sets or []), f"cluster.profile={profile}"]


def _print_json(obj: object) -> None:
    # JSON has no inf or NaN: an infinite ratio (nothing to divide by) is written as null
    print(json.dumps(api.finite(obj), indent=2, allow_nan=False))


def _emit(as_json: bool, document: Callable[[], object], shown: Callable[[], Iterable], wrote: Iterable = ()) -> None:
    """Print the JSON document, or what ``shown`` lists (tables, lines) and then each file written."""
    if as_json:
        _print_json(document())
        return
    for item in shown():
        console.print(item)
    for path in wrote:
        if path is not None:
            console.print(f"wrote {path}")


def _show(as_json: bool, result: api.Result, wrote: Iterable = (), more: Iterable = ()) -> None:
    """Print an API result: its --json object, or its tables (then ``more`` lines and each file written)."""
    _emit(as_json, result.to_dict, lambda: [*result.tables(), *more], wrote)


@app.callback(invoke_without_command=True)
@refusing
def main(ctx: typer.Context) -> None:
    """With no command: the budget of the default scenario (llama3-405b)."""
    if ctx.invoked_subcommand is None:
        _show(False, api.step_budget(DEFAULT_SCENARIO))


@command()
def presets() -> None:
    """List the shipped scenarios, one line each."""
    for name, description in api.presets():
        console.print(f"[bold]{name:<22}[/bold] {description}")


@command()
def models(as_json: AsJson = False) -> None:
    """List the model catalog (model: NAME in a scenario), with each row's source."""
    from stepbudget.views.models import models_dict, models_table

    rows = api.models()
    _emit(as_json, lambda: models_dict(rows), lambda: [models_table(rows)])


@command()
def gpus(as_json: AsJson = False) -> None:
    """List the GPU rows (cluster.gpu: NAME in a scenario) and the nodes they ship in, with their sources."""
    from stepbudget.views.gpus import gpus_dict, gpus_table

    rows = api.gpus()
    _emit(as_json, lambda: gpus_dict(rows), lambda: [gpus_table(rows)])


@command()
def show(scenario: ScenarioArg, sets: Sets = None, profile: ProfileOpt = None, as_json: AsJson = False) -> None:
    """The resolved scenario as YAML, SI units, each field with its source: stated, catalog, framework, GPU, default."""
    from stepbudget.views.provenance import provenance_dict, show_yaml

    sc = api.resolved(scenario, sets=_profiled(sets, profile) or [])
    if as_json:
        _print_json({"scenario": sc.model_dump(mode="json"), "provenance": provenance_dict(sc)})
        return
    print(show_yaml(sc), end="")


@command()
def budget(scenario: ScenarioArg = DEFAULT_SCENARIO, sets: Sets = None, profile: ProfileOpt = None,
           tokens: Annotated[Optional[str], typer.Option(
               "--tokens", help="Also the time and GPU-hours to train on this many tokens, e.g. 15T or 300B.")] = None,
           as_json: AsJson = False) -> None:
    """Step-time budget: compute, bubble, bytes and time per dimension, exposure, MFU, roofline, throughput."""
    _show(as_json, api.step_budget(scenario, sets=_profiled(sets, profile) or [], tokens=tokens))


@command()
def memory(scenario: ScenarioArg = DEFAULT_SCENARIO, sets: Sets = None, profile: ProfileOpt = None,
           check: Annotated[bool, typer.Option(
               "--check", help="Exit 1 when the job does not fit in HBM (0 when it does), for scripts.")] = False,
           as_json: AsJson = False) -> None:
    """Memory per GPU: parameters, gradients, optimizer, gathered layers, activations, against HBM."""
    result = api.memory(scenario, sets=_profiled(sets, profile) or [])
    _show(as_json, result)
    if check and not bool(result.value.fits):
        raise typer.Exit(1)


@command()
def search(
    scenario: ScenarioArg = DEFAULT_SCENARIO,
    sets: Sets = None,
    profile: ProfileOpt = None,
    gpus: Annotated[Optional[int], typer.Option("--gpus", help="GPU count to search (default: the scenario's).")] = None,
    top: Annotated[int, typer.Option("--top", help="How many of the fastest layouts to print.")] = 10,
    out: Annotated[Optional[str], typer.Option("--out", help="Write every evaluated layout to this Parquet file.")] = None,
    uneven_stages: Annotated[bool, typer.Option(
        "--uneven-stages", help="Also try pipeline depths the layers do not divide (Megatron's first/last stages).")]
    = False,
    as_json: AsJson = False,
) -> None:
    """Every valid layout for the model, cluster and batch: drop what does not fit, rank by step time."""
    sc = api.scenario_of(scenario, _profiled(sets, profile) or [])
    _check_out(out, (".parquet",), "--out")
    try:
        with _progress(not as_json) as bar:
            result = api.search(sc, gpus=gpus, top=top, out=out, uneven_stages=uneven_stages, progress=bar)
    except KeyboardInterrupt:
        print("stepbudget: search interrupted; nothing was written", file=sys.stderr)
        raise typer.Exit(130) from None
    _show(as_json, result, more=[f"wrote {result.written:,} layouts to {out}"] if out else [])


@command()
def scale(
    scenario: ScenarioArg = DEFAULT_SCENARIO,
    gpus: Annotated[str, typer.Option("--gpus", help="Comma-separated GPU counts, e.g. 8192,16384,32768.")] = "",
    sets: Sets = None,
    profile: ProfileOpt = None,
    weak: Annotated[bool, typer.Option(
        "--weak", help="Keep the batch per replica (weak scaling), not the global batch.")] = False,
    research: Annotated[bool, typer.Option("--research", help="Search the best layout again at each size.")] = False,
    plot: Annotated[Optional[str], typer.Option("--plot", help="Write the curve to FILE.html, FILE.png or FILE.svg.")] = None,
    as_json: AsJson = False,
) -> None:
    """Strong (or weak) scaling: compute, DP time, communication share, exposed share and MFU per size."""
    from stepbudget.views.figures import scale_figure

    sc = api.scenario_of(scenario, _profiled(sets, profile) or [])
    _check_plot(plot)
    with _progress(research and not as_json, "searching each size", "sizes") as bar:
        curve = api.scale(sc, gpus or None, weak=weak, research=research, progress=bar)
    if plot is not None:

        scale_figure(curve.value, plot)
    _show(as_json, curve, [plot])


@command()
def whatif(
    scenario: ScenarioArg = DEFAULT_SCENARIO,
    vary: Annotated[Optional[list[str]], typer.Option(
        "--vary", help="One variant: KEY=VALUE pairs separated by spaces (repeatable, one per variant).")] = None,
    chapter: Annotated[bool, typer.Option(
        "--chapter", help="Add the chapter's cases (HBM, batch, MoE, 128K, NIC, NVLink, GPU).")] = False,
    sets: Sets = None,
    profile: ProfileOpt = None,
    as_json: AsJson = False,
) -> None:
    """Compare variants of a scenario side by side, with each one's traffic matrix."""
    _show(as_json, api.whatif(scenario, vary=vary or [], sets=_profiled(sets, profile) or [], chapter=chapter))


@command()
def validate(
    runs: Annotated[Optional[list[str]], typer.Option(
        "--runs", help="Runs file in the schema of the shipped published_runs.yaml; give it again for more files.")] = None,
    plot: Annotated[Optional[str], typer.Option("--plot", help="Write Figure 5.5 to FILE.html, FILE.png or FILE.svg.")] = None,
    explain: Annotated[Optional[str], typer.Option(
        "--explain", help="One run's budget instead: what it became, what was assumed, where its time goes.")] = None,
    profile: ProfileOpt = None,
    strict: Annotated[bool, typer.Option("--strict", help="Stop at the first malformed run (exit 2).")] = False,
    as_json: AsJson = False,
) -> None:
    """Predict published runs (MegaScale, MegaScale-MoE, Llama 3, DeepSeek-V3) and show the error."""
    from stepbudget.views.validation import figure_5_5

    _check_plot(plot)
    _check_runs(runs)
    if explain is not None:
        _show(as_json, api.explain(explain, runs or None, profile=profile))
        return
    with _progress(not as_json, "predicting", "runs") as bar:
        result = api.validate(runs or None, profile=profile, strict=strict, progress=bar)
    if plot is not None:
        figure_5_5(result.value, plot, profile)  # with a profile, the calibrated predictions
    _show(as_json, result, [plot])


@command()
def calibrate(
    runs: Annotated[Optional[list[str]], typer.Option(
        "--runs", help="Measured runs in the schema of the shipped published_runs.yaml; give it again for more files.")] = None,
    params: Annotated[str, typer.Option(
        "--params", help="Parameters to fit, comma-separated: gemm_scale, step_s, microbatch_s, routed_token_s.")]
    = "gemm_scale,step_s,microbatch_s,routed_token_s",
    group_by: Annotated[str, typer.Option("--group-by", help="One profile per: none, gpu or framework.")] = "none",
    out: Annotated[Optional[str], typer.Option("--out", help="Write the profile here (PROFILE.yaml; grouped: "
                                                             "PROFILE-GROUP.yaml each, or GROUP.yaml in a folder).")] = None,
    name: Annotated[Optional[str], typer.Option("--name", help="The profile's name (default: --out's stem).")] = None,
    bootstrap: Annotated[int, typer.Option("--bootstrap", help="Resamples behind each interval (0: none).")] = 200,
    strict: Annotated[bool, typer.Option("--strict", help="Stop at the first malformed run (exit 2).")] = False,
    as_json: AsJson = False,
) -> None:
    """Fit a calibration profile to measured runs; report in-sample and leave-one-source-out error."""
    if out is None or not Path(out).is_dir():  # a folder takes one GROUP.yaml per group
        _check_out(out, (".yaml", ".yml"), "--out")
    _check_runs(runs)
    command = " ".join(["stepbudget calibrate", *(f"--runs {r}" for r in runs or []), f"--params {params}",
                        f"--group-by {group_by}", *([f"--out {out}"] if out else [])])
    with _progress(not as_json, "fitting", "steps") as bar:
        result = api.calibrate(runs or None, params=params.split(","), group_by=group_by, out=out, name=name,
                               bootstrap=bootstrap, strict=strict, command=command, progress=bar)
    _show(as_json, result)
    if result.refused and out is not None:
        raise typer.Exit(1)  # the tables (or the JSON's "refused") said which profile and why


@command()
def profiles() -> None:
    """List the shipped calibration profiles, with their cross-validated error."""
    for p in api.profiles():
        console.print(f"[bold]{p.name:<20}[/bold] {p.label}  {p.document.get('description', '')}")


@command()
def simulate(
    scenario: ScenarioArg = DEFAULT_SCENARIO,
    sets: Sets = None,
    profile: ProfileOpt = None,
    jitter: Annotated[float, typer.Option("--jitter", help="Coefficient of variation of each compute task's time.")] = 0.0,
    link_jitter: Annotated[float, typer.Option("--link-jitter", help="Coefficient of variation of each link's rate.")] = 0.0,
    straggler: Annotated[str, typer.Option("--straggler", help="P[xSLOWDOWN]: chance a stage straggles, e.g. 0.01x1.5.")] = "0",
    steps: Annotated[int, typer.Option("--steps", help="Monte Carlo steps (with jitter): p50/p90/p99.")] = 1,
    replicas: Annotated[int, typer.Option("--replicas", help="DP replicas a step waits for (default: the layout's DP).")] = 0,
    link_rate: Annotated[float, typer.Option("--link-rate", help="Scale every link's rate (0.5 = half rate).")] = 1.0,
    no_contention: Annotated[bool, typer.Option("--no-contention", help="Give each dimension its own link.")] = False,
    trace: Annotated[Optional[str], typer.Option("--trace", help="Write a Chrome/Perfetto trace to FILE.json.")] = None,
    plot: Annotated[Optional[str], typer.Option("--plot", help="Write the step's timeline to FILE.png, .svg or .html.")] = None,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Random seed for jitter.")] = 0,
    full: Annotated[bool, typer.Option("--full", help="Simulate every replica of every step (steps x replicas "
                                       "pipelines), not a bootstrap of 64.")] = False,
    workers: WorkersOpt = None,
    scheduler: SchedulerOpt = None,
    as_json: AsJson = False,
) -> None:
    """Simulate one step task by task: link sharing, deadlines, jitter and the tail over DP replicas."""
    from stepbudget.views.simulation import step_figure, write_trace

    sc = api.scenario_of(scenario, _profiled(sets, profile) or [])
    _check_out(trace, (".json",), "--trace")
    _check_plot(plot)
    if replicas < 0:
        fail(f"--replicas: {replicas}; give 1 to {api.MAX_REPLICAS:,}, or 0 for the layout's DP")
    p_strag, slowdown = api.parse_straggler(straggler)
    jittered = steps > 1 or jitter > 0 or link_jitter > 0 or p_strag > 0
    with _progress(not as_json and jittered, "simulating", "pipelines") as bar:
        result = api.simulate(sc, contention=not no_contention, link_rate=link_rate, compute_cv=jitter,
                              link_cv=link_jitter, straggler_p=p_strag, straggler_slowdown=slowdown, steps=steps,
                              replicas=replicas or None, seed=seed, full=full, progress=bar, workers=workers,
                              scheduler=scheduler)
    if trace is not None:
        write_trace(result.value, trace)
    if plot is not None:
        step_figure(result.value, plot)
    _show(as_json, result, [trace, plot])


@command()
def wire(
    scenario: ScenarioArg = DEFAULT_SCENARIO,
    sets: Sets = None,
    profile: ProfileOpt = None,
    steps: Annotated[int, typer.Option("--steps", help="Steps of NIC rate to show.")] = 4,
    window: Annotated[str, typer.Option("--window", help="Counter poll interval, e.g. 15s.")] = "15s",
    converging: Annotated[int, typer.Option("--converging", help="Bursts that converge on one switch port.")] = 2,
    switch_buffer: Annotated[str, typer.Option("--switch-buffer", help="Switch buffer for that port, e.g. 64MB.")] = "64MB",
    plot: Annotated[Optional[str], typer.Option("--plot", help="Write the NIC rate to FILE.png, .svg or .html.")] = None,
    as_json: AsJson = False,
) -> None:
    """What the traffic looks like on one NIC: line-rate bursts, duty cycle, counters, buffers, flows."""
    from stepbudget.views.wire import wire_figure

    _check_plot(plot)
    w = api.nic(scenario, sets=_profiled(sets, profile) or [], steps=steps, window_s=window, converging=converging,
                switch_buffer_bytes=switch_buffer)
    if plot is not None:
        wire_figure(w.value, plot)
    _show(as_json, w, [plot])


@command()
def moe(
    scenario: ScenarioArg = "deepseek-v3",
    sets: Sets = None,
    profile: ProfileOpt = None,
    skew: Annotated[str, typer.Option(
        "--skew", help="uniform, zipf:S (pairs, FAST's benchmark) or experts:S (hot experts).")] = "uniform",
    servers: Annotated[Optional[int], typer.Option(
        "--servers", help="Servers in the EP group (default: from the layout).")] = None,
    gpus_per_server: Annotated[Optional[int], typer.Option("--gpus-per-server", help="GPUs per server in the EP group.")] = None,
    matrix: Annotated[Optional[str], typer.Option("--matrix", help="A measured matrix in bytes: FILE.csv or FILE.npy.")] = None,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Random seed for routing.")] = 0,
    plot: Annotated[Optional[str], typer.Option("--plot", help="Heat map of the matrix: FILE.png, .svg or .html.")] = None,
    as_json: AsJson = False,
) -> None:
    """MoE all-to-all: hiding ratio, one layer's traffic matrix, plain against FAST-style schedule."""
    from stepbudget.views.moe import heatmap

    sc = api.scenario_of(scenario, _profiled(sets, profile) or [])
    _check_plot(plot)
    with _progress(not as_json, "timing the plain all-to-all", "flows") as bar:
        report = api.moe(sc, skew=skew, servers=servers, gpus_per_server=gpus_per_server, matrix=matrix, seed=seed,
                         progress=bar)
    if plot is not None:
        heatmap(report.value, plot)
    _show(as_json, report, [plot])


@command("import")
def import_(
    files: Annotated[list[str], typer.Argument(metavar="FILE...", help=(
        "Config files of one job: a Hugging Face config.json, a Megatron-LM launch script or args file, a NeMo 1 "
        "YAML, a NeMo 2 or Megatron-Bridge recipe (.py), a torchtitan TOML, a MaxText YAML, a DeepSpeed JSON, a "
        "GPT-NeoX YAML."))],
    cluster: Annotated[Optional[str], typer.Option(
        "--cluster", help="The GPUs it runs on: a GPU name (h100-sxm), or a preset or scenario file's cluster.")] = None,
    out: Annotated[Optional[str], typer.Option("--out", help="Write the scenario to FILE.yaml.")] = None,
    sets: Sets = None,
    as_json: AsJson = False,
) -> None:
    """A scenario from your config files, each field with its file and key; their framework's defaults fill the rest."""
    result = api.import_configs(files, cluster=cluster, sets=sets or [], out=out)
    _show(as_json, result, [out])


@command()
def sweep(
    file: Annotated[str, typer.Argument(metavar="FILE", help="Sweep file (YAML): base scenario, axes, task.")],
    out: Annotated[Optional[str], typer.Option("--out", help="Results folder: one Parquet file per point.")] = None,
    workers: WorkersOpt = None,
    scheduler: SchedulerOpt = None,
    resume: Annotated[bool, typer.Option(
        "--resume", help="Go on with the folder an earlier run wrote: its complete points are skipped.")] = False,
    as_json: AsJson = False,
) -> None:
    """Run a design-space sweep (a grid of scenarios, a task at each point) on Dask workers; resumable."""
    from stepbudget.views.sweep import progress_line, started_line

    if out is None or not out.strip():
        fail("--out: give the folder for the results, e.g. --out results/")
    _check_installed(("pyarrow", "parquet"), "sweep: writing its results")
    last: dict = {}
    try:
        with _sweep_progress(not as_json) as (shown, say):
            def started(tally, where) -> None:
                say(started_line(tally, where))
                progress(tally)

            def progress(tally) -> None:
                last["tally"] = tally
                shown(tally, progress_line)

            result = api.sweep(file, out, workers=workers, scheduler=scheduler, resume=resume, started=started,
                               progress=progress)
    except KeyboardInterrupt:  # after the bar is gone, so the message is the last thing on the screen
        t = last.get("tally")  # the files themselves say how many are written: a write may end as Ctrl-C lands
        done = f"{api.written_points(out):,} of {t.total:,} points are written" if t is not None else "nothing was run"
        print(f"stepbudget: sweep interrupted: {done}; stepbudget sweep {file} --out {out} --resume goes on",
              file=sys.stderr)
        raise typer.Exit(130) from None
    _show(as_json, result)


@contextmanager
def _sweep_progress(show: bool):
    """A bar on a terminal's stderr, a line every few seconds on a log's; yields ``shown(tally, line)``, which
    shows a tally (``line`` formats it), and ``say(text)``, which prints a line above the bar."""
    import time

    err = Console(stderr=True)

    def said(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    if not show or not err.is_terminal:
        seen = {"at": time.monotonic()}

        def logged(tally, line) -> None:
            now = time.monotonic()
            if show and (now - seen["at"] >= 5 or tally.done == tally.total):
                seen["at"] = now
                said(line(tally))

        yield logged, said
        return
    from rich.progress import BarColumn

    with Progress(TextColumn("sweep"), BarColumn(bar_width=24), TextColumn("{task.fields[line]}"), console=err,
                  transient=True) as bar:
        task = bar.add_task("sweep", total=None, line="")
        yield (lambda tally, line: bar.update(task, completed=tally.done, total=tally.total,
                                              line=line(tally).removeprefix("sweep: "))), \
            (lambda text: bar.console.print(text, highlight=False, soft_wrap=True))


@command("sweep-report")
def sweep_report(
    folder: Annotated[str, typer.Argument(metavar="DIR", help="The results folder a sweep wrote (--out).")],
    plot: Annotated[Optional[str], typer.Option(
        "--plot", help="Write best step and MFU against GPUs, and the Pareto front, to FILE.html, .png or .svg.")] = None,
    as_json: AsJson = False,
) -> None:
    """A sweep's results as one table (best layout per point) and a plot; readable while it runs."""
    _check_installed(("pyarrow", "parquet"), "sweep-report: reading the results")
    _check_plot(plot)
    result = api.sweep_report(folder)
    if plot is not None:
        from stepbudget.views.sweep import write_report_figure

        write_report_figure(result.value, plot)
    _show(as_json, result, [plot])


LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


@command()
def figure(
    ident: Annotated[Optional[str], typer.Argument(
        metavar="ID", help="5.1 ... 5.9, anim-5.1 or anim-5.2 (see --list).")] = None,
    scenario: Annotated[Optional[str], typer.Argument(
        help="Preset name or path to a YAML/TOML scenario (default: the chapter's).")] = None,
    sets: Sets = None,
    profile: ProfileOpt = None,
    out: Annotated[Optional[str], typer.Option("--out", help="Write FILE.html (interactive), FILE.png or FILE.svg.")] = None,
    lang: Annotated[str, typer.Option("--lang", help="Language of the figure's text: en or zh-Hant.")] = "en",
    window: Annotated[Optional[str], typer.Option(
        "--window", help="anim-5.2: the counter's window, e.g. 15s (default 15 s).")] = None,
    listing: Annotated[bool, typer.Option("--list", help="List the figures, one line each.")] = False,
) -> None:
    """One of the chapter's figures or animations, from the library's numbers, as a file."""
    from stepbudget.views.render import FORMATS, write

    if listing:
        for ident_, what, job in api.figure_list(lang):
            console.print(f"[bold]{ident_:<9}[/bold] {what} ({job})", highlight=False,
                          soft_wrap=True)  # one line each, however narrow the terminal
        return
    if ident is None:
        fail("ID: name a figure, e.g. stepbudget figure 5.3 --out ring.png (stepbudget figure --list shows them)")
    if out is None:
        fail("--out: give the file to write, e.g. --out fig.html (interactive), fig.png or fig.svg")
    _check_out(out, FORMATS, "--out")
    drawn = api.figure(ident, scenario, sets=_profiled(sets, profile) or [], lang=lang, window=window)
    write(drawn, out)
    console.print(f"wrote {out}")


@command()
def serve(
    host: Annotated[str, typer.Option("--host", help="Address to listen on (default: this machine only).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8050,
    lang: Annotated[str, typer.Option("--lang", help="Language of a page whose URL names none: en or zh-Hant.")] = "en",
    open_browser: Annotated[bool, typer.Option("--open", help="Open the page in the default browser.")] = False,
) -> None:
    """The chapter's seven panels as a local web app, in English or Traditional Chinese; Ctrl-C stops it."""
    import socket

    from stepbudget.views.i18n import LANGS

    if lang not in LANGS:
        fail(f"--lang: {lang!r} is not a language of the app; use one of {', '.join(LANGS)}")
    if not 0 < port < 65536:
        fail(f"--port: {port} is not a TCP port; give 1 to 65535")
    _check_installed(("dash", "web"), "serve")
    from stepbudget.web.app import serve as run_server

    def ready(url: str) -> None:
        if host not in LOCAL_HOSTS:
            print(f"stepbudget: warning: --host {host}: the app has no authentication; anyone who can reach this "
                  "address can use it", file=sys.stderr)
        print(f"stepbudget serve: {url} (Ctrl-C stops it)", file=sys.stderr, flush=True)

    try:
        run_server(host, port, lang, open_browser, ready)
    except socket.gaierror as e:
        fail(f"--host: cannot listen on {host!r} ({e.strerror or e}); give an address of this machine, e.g. 127.0.0.1")
    except OSError as e:
        fail(f"--port: cannot listen on {host}:{port} ({e.strerror or e}); choose another --port, or stop what uses it")
    print("stepbudget serve: stopped", file=sys.stderr, flush=True)
    sys.stdout.flush()
    # the warm-up and werkzeug's request threads are daemons that may be inside C++ (numba's LLVM compiling a
    # kernel); finalizing the interpreter under them can abort the process (glibc: "FATAL: exception not
    # rethrown"), so a stopped server ends here, its last line written and nothing of the user's left open
    os._exit(0)


def _check_plot(path: str | None) -> None:
    from stepbudget.views.figures import FORMATS

    _check_out(path, FORMATS, "--plot")


WRITERS = {".html": ("plotly", "plot"), ".png": ("kaleido", "plot"), ".svg": ("kaleido", "plot"),
           ".parquet": ("pyarrow", "parquet")}
"""The package that writes each kind of file, and the optional extra that installs it (pyproject.toml)."""


def _check_out(path: str | None, suffixes: tuple[str, ...], option: str) -> None:
    """One-line error unless ``path`` (if given) has one of ``suffixes``, can be written (files.check_writable)
    and what writes it is installed: all before any work."""
    if path is None:
        return
    if Path(path).suffix in suffixes:  # else check_output names the extensions
        _check_installed(WRITERS.get(Path(path).suffix), f"{option}: writing {Path(path).suffix}")
    api.check_output(path, suffixes, option)
    if Path(path).suffix in (".png", ".svg"):  # the browser that draws it starts now, alongside the work
        from stepbudget.views.render import start

        start(option)


def _check_installed(needed: tuple[str, str] | None, what: str) -> None:
    """One line naming the extra to install when the optional package ``needed`` = (module, extra) is missing."""
    import importlib.util

    if needed is not None and importlib.util.find_spec(needed[0]) is None:
        module, extra = needed
        fail(f"{what} needs {module}, which is not installed; pip install 'stepbudget[{extra}]' (or '.[{extra}]' "
             "from the repository)")


@contextmanager
def _progress(show: bool, doing: str = "searching", what: str = "candidates"):
    """A rich progress bar on stderr while a long run goes; yields its update callback ``(done, total)``."""
    err = Console(stderr=True)
    if not show or not err.is_terminal:  # pipes and logs get the result, not a bar's redraws
        yield None
        return
    with Progress(*Progress.get_default_columns(), TextColumn(f"{{task.completed:,.0f}} {what}"),
                  console=err, transient=True) as bar:
        task = bar.add_task(doing, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


class _UsageError(Protocol):
    """What run() reads of Click's UsageError, from whichever copy of Click raised it."""

    def format_message(self) -> str: ...


def run() -> None:
    """Entry point: turns any input error that escaped into one line and exit code 2, Ctrl-C into exit 130, and
    a reader that stopped reading (``| head``) into a quiet exit 1."""
    import signal

    if sys.stdout is None:  # started with stdout closed (">&-"): nothing could be shown, and fd 1 is free
        print("stepbudget: error: stdout: it is closed; run with stdout open (e.g. > out.txt)", file=sys.stderr)
        sys.exit(2)
    # a terminated run unwinds like an interrupted one, so its temporary files are removed
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    sys.unraisablehook = _unraisable
    try:
        code = _dispatch()
        sys.stdout.flush()  # a full disk or a closed pipe is found here, not at exit
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:  # the reader stopped reading ("| head"): exit 1 quietly, as Click and rich do
        _silence_stdout()
        sys.exit(1)
    except OSError as e:
        if e.filename is not None:
            raise
        _silence_stdout()  # a write to stdout failed (no space, an I/O error): the file names no path
        print(f"stepbudget: error: stdout: cannot write the output ({e.strerror or e}); free space or write "
              "elsewhere", file=sys.stderr)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)


def _unraisable(unraisable: Any) -> None:
    """A Ctrl-C that lands where Python cannot raise it (inside a C extension's call back into Python, such as
    pydantic's validators, or a finalizer) is delivered again to the main thread, which exits 130 as on any other
    Ctrl-C; anything else is reported as Python reports it."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
        import _thread

        _thread.interrupt_main()
        return
    sys.__unraisablehook__(unraisable)


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's own flush at exit does not fail a second time."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _dispatch() -> object:
    """Run the command line; a usage or input error is one line and exit 2."""
    try:
        return app(standalone_mode=False)
    except (ScenarioError, UnitError) as e:  # refused outside a command (each command's own are caught by refusing)
        _say(e)
        sys.exit(2)
    except Exception as e:
        # Click's usage errors (an unknown option, "--steps abc"): Typer vendors Click from 0.2x on,
        # so the class is matched by name, not imported
        names = {c.__name__ for c in type(e).__mro__}
        if "Abort" in names:  # Ctrl-C outside a command's own handling
            raise KeyboardInterrupt from None
        if "UsageError" not in names:
            raise
        ctx = getattr(e, "ctx", None)
        where = f"stepbudget {ctx.info_name} --help" if ctx is not None and ctx.parent is not None else "stepbudget --help"
        message = cast(_UsageError, e).format_message()  # "UsageError" is in its class names
        print(f"stepbudget: error: {message} (see {where})", file=sys.stderr)
        sys.exit(2)
