"""Command line: options -> scenario -> library -> views. Bad input: one line, exit code 2."""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer
import yaml
from rich.console import Console
from rich.progress import Progress, TextColumn

from stepbudget import derive, estimate
from stepbudget.inputs.scenario import DEFAULT_SCENARIO, ScenarioError, load, preset_names, raw_scenario
from stepbudget.units import UnitError
from stepbudget.budget.memory import memory_per_gpu
from stepbudget.views.memory import memory_dict, memory_table
from stepbudget.views.tables import budget_dict, exchanges_table, operators_table, roofline_table, summary_table

app = typer.Typer(add_completion=False, no_args_is_help=False, help="Where the time of a distributed training step goes.")
_probe = Console()
console = _probe if _probe.is_terminal else Console(width=150)  # pipes get full rows, not 80 columns

Sets = Annotated[Optional[list[str]], typer.Option("--set", help="Override a field: section.field=value (repeatable).")]
AsJson = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")]
ScenarioArg = Annotated[str, typer.Argument(help="Preset name or path to a YAML/TOML scenario.")]


def fail(message: str) -> None:
    print(f"stepbudget: error: {message}", file=sys.stderr)
    raise typer.Exit(2)


def _load(scenario: str, sets: list[str] | None):
    try:
        return load(scenario, sets or [])
    except (ScenarioError, UnitError) as e:
        fail(str(e))


def _print_json(obj: object) -> None:
    print(json.dumps(obj, indent=2, allow_nan=False))


def _budget(scenario: str, sets: list[str] | None, as_json: bool) -> None:
    sc = _load(scenario, sets)
    b = estimate(derive(sc))
    if as_json:
        _print_json(budget_dict(b))
        return
    console.print(summary_table(b))
    console.print(exchanges_table(b))
    if b.plan.operators:
        console.print(operators_table(b))
    console.print(roofline_table(b))


@app.callback(invoke_without_command=True)
def main(ctx: typer.Context) -> None:
    """With no command: the budget of the default scenario (llama3-405b)."""
    if ctx.invoked_subcommand is None:
        _budget(DEFAULT_SCENARIO, [], False)


@app.command()
def presets() -> None:
    """List the shipped scenarios, one line each."""
    for name in preset_names():
        data = raw_scenario(name)
        console.print(f"[bold]{name:<22}[/bold] {data.get('description', '')}")


@app.command()
def show(scenario: ScenarioArg, sets: Sets = None) -> None:
    """Print the resolved scenario (preset, base and --set applied, units in SI) as YAML."""
    sc = _load(scenario, sets)
    print(yaml.safe_dump(sc.model_dump(mode="json"), sort_keys=False, width=110), end="")


@app.command()
def budget(scenario: ScenarioArg = DEFAULT_SCENARIO, sets: Sets = None, as_json: AsJson = False) -> None:
    """Step-time budget: compute, bubble, bytes and time per dimension, exposure, MFU, roofline."""
    _budget(scenario, sets, as_json)


@app.command()
def memory(scenario: ScenarioArg = DEFAULT_SCENARIO, sets: Sets = None, as_json: AsJson = False) -> None:
    """Memory per GPU: parameters, gradients, optimizer, gathered layers, activations, against HBM."""
    mem = memory_per_gpu(derive(_load(scenario, sets)))
    if as_json:
        _print_json(memory_dict(mem))
        return
    console.print(memory_table(mem))


@app.command()
def search(
    scenario: ScenarioArg = DEFAULT_SCENARIO,
    sets: Sets = None,
    gpus: Annotated[Optional[int], typer.Option("--gpus", help="GPU count to search (default: the scenario's).")] = None,
    top: Annotated[int, typer.Option("--top", help="How many of the fastest layouts to print.")] = 10,
    out: Annotated[Optional[str], typer.Option("--out", help="Write every evaluated layout to this Parquet file.")] = None,
    as_json: AsJson = False,
) -> None:
    """Every valid layout for the model, cluster and batch: drop what does not fit, rank by step time."""
    from stepbudget.sweep.search import search as run_search
    from stepbudget.views.search import search_dict, summary_lines, top_table, why_lines

    sc = _load(scenario, sets)
    if gpus is not None and gpus < 1:
        fail(f"--gpus: {gpus} is not a GPU count; give a positive integer")
    if top < 1:
        fail(f"--top: {top} layouts cannot be printed; give 1 or more")
    if out is not None:
        _check_out(out, (".parquet",), "--out")
    try:
        with _progress(not as_json) as bar:
            result = run_search(sc, gpus=gpus, top=top, out=out, progress=bar)
    except KeyboardInterrupt:
        print("stepbudget: search interrupted; nothing was written", file=sys.stderr)
        raise typer.Exit(130) from None
    except ScenarioError as e:
        fail(str(e))
    if as_json:
        _print_json(search_dict(result))
        return
    for line in summary_lines(result):
        console.print(line)
    console.print(top_table(result))
    console.print("[bold]Why the winner wins[/bold]")
    for line in why_lines(result):
        console.print(f"  {line}")
    if out:
        console.print(f"wrote {result.written:,} layouts to {out}")


@app.command()
def scale(
    scenario: ScenarioArg = DEFAULT_SCENARIO,
    gpus: Annotated[str, typer.Option("--gpus", help="Comma-separated GPU counts, e.g. 8192,16384,32768.")] = "",
    sets: Sets = None,
    weak: Annotated[bool, typer.Option("--weak", help="Keep the batch per replica (weak scaling), not the global batch.")] = False,
    research: Annotated[bool, typer.Option("--research", help="Search the best layout again at each size.")] = False,
    plot: Annotated[Optional[str], typer.Option("--plot", help="Write the curve to FILE.html, FILE.png or FILE.svg.")] = None,
    as_json: AsJson = False,
) -> None:
    """Strong (or weak) scaling: compute, DP time, communication share, exposed share and MFU per size."""
    from stepbudget.sweep.scaling import parse_gpus
    from stepbudget.sweep.scaling import scale as run_scale
    from stepbudget.views.figures import FORMATS
    from stepbudget.views.scaling import scale_dict, scale_table

    sc = _load(scenario, sets)
    if plot is not None:
        _check_out(plot, FORMATS, "--plot")
    try:
        sizes = parse_gpus(gpus or str(sc.cluster.gpus))
        curve = run_scale(sc, sizes, weak=weak, research=research)
    except ScenarioError as e:
        fail(str(e))
    if plot is not None:
        from stepbudget.views.figures import scale_figure

        scale_figure(curve, plot)
    if as_json:
        _print_json(scale_dict(curve))
    else:
        console.print(scale_table(curve))
        if plot is not None:
            console.print(f"wrote {plot}")


@app.command()
def whatif(
    scenario: ScenarioArg = DEFAULT_SCENARIO,
    vary: Annotated[Optional[list[str]], typer.Option(
        "--vary", help="One variant: KEY=VALUE pairs separated by spaces (repeatable, one per variant).")] = None,
    chapter: Annotated[bool, typer.Option("--chapter", help="Add the chapter's cases (HBM, batch, MoE, 128K, NIC, NVLink, GPU).")] = False,
    sets: Sets = None,
    as_json: AsJson = False,
) -> None:
    """Compare variants of a scenario side by side, with each one's traffic matrix."""
    from stepbudget.sweep.whatif import CHAPTER_CASES, parse_vary
    from stepbudget.sweep.whatif import whatif as run_whatif
    from stepbudget.views.whatif import traffic_table, whatif_dict, whatif_table

    if not vary and not chapter:
        fail("whatif: give at least one --vary 'KEY=VALUE ...' or --chapter")
    if chapter and scenario not in CHAPTER_CASES:
        fail(f"--chapter: the chapter's cases are written for {', '.join(CHAPTER_CASES)}; use --vary for {scenario!r}")
    try:
        variants = [(text, parse_vary(text)) for text in vary or []]
        if chapter:
            variants = list(CHAPTER_CASES[scenario].items()) + variants
        result = run_whatif(scenario, list(sets or []), variants)
    except (ScenarioError, UnitError) as e:
        fail(str(e))
    if as_json:
        _print_json(whatif_dict(result))
        return
    console.print(whatif_table(result))
    console.print(traffic_table(result))


@app.command()
def validate(
    runs: Annotated[Optional[str], typer.Option("--runs", help="Runs file in the schema of the shipped published_runs.yaml.")] = None,
    plot: Annotated[Optional[str], typer.Option("--plot", help="Write Figure 5.5 to FILE.html, FILE.png or FILE.svg.")] = None,
    as_json: AsJson = False,
) -> None:
    """Predict published runs (MegaScale, MegaScale-MoE, Llama 3, DeepSeek-V3) and show the error."""
    from stepbudget.validation.compare import validate as run_validate
    from stepbudget.views.figures import FORMATS
    from stepbudget.views.validation import figure_5_5, runs_table, skipped_lines, summary_table, validation_dict

    if plot is not None:
        _check_out(plot, FORMATS, "--plot")
    try:
        rows, summaries = run_validate(runs)
    except ScenarioError as e:
        fail(str(e))
    if plot is not None:
        figure_5_5(rows, plot)
    if as_json:
        _print_json(validation_dict(rows, summaries))
        return
    console.print(runs_table(rows))
    console.print(summary_table(summaries))
    skipped = skipped_lines(rows)
    if skipped:
        console.print(f"[bold]Not predicted ({len(skipped)})[/bold]")
        for line in skipped:
            console.print(f"  {line}")
    if plot is not None:
        console.print(f"wrote {plot}")


def _check_out(path: str, suffixes: tuple[str, ...], option: str) -> None:
    """One-line error unless ``path`` has one of ``suffixes`` and its folder exists."""
    if Path(path).suffix not in suffixes:
        fail(f"{option}: {path!r} needs one of the extensions {', '.join(suffixes)}; rename it")
    folder = Path(path).resolve().parent
    if not folder.is_dir():
        fail(f"{option}: folder {str(folder)!r} does not exist; create it or choose another path")


@contextmanager
def _progress(show: bool):
    """A rich progress bar on stderr while a long run goes; yields its update callback."""
    err = Console(stderr=True)
    if not show or not err.is_terminal:  # pipes and logs get the result, not a bar's redraws
        yield None
        return
    with Progress(*Progress.get_default_columns(), TextColumn("{task.completed:,.0f} candidates"),
                  console=err, transient=True) as bar:
        task = bar.add_task("searching", total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


def run() -> None:
    """Entry point: turns any input error that escaped into one line and exit code 2."""
    try:
        app()
    except (ScenarioError, UnitError) as e:
        print(f"stepbudget: error: {e}", file=sys.stderr)
        sys.exit(2)
