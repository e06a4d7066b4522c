"""Command line: options -> scenario -> library -> views. Bad input: one line, exit code 2."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Optional

import typer
import yaml
from rich.console import Console

from stepbudget import derive, estimate
from stepbudget.inputs.scenario import DEFAULT_SCENARIO, ScenarioError, load, preset_names, raw_scenario
from stepbudget.units import UnitError
from stepbudget.budget.memory import memory_per_gpu
from stepbudget.views.memory import memory_dict, memory_table
from stepbudget.views.tables import budget_dict, exchanges_table, roofline_table, summary_table

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


def run() -> None:
    """Entry point: turns any input error that escaped into one line and exit code 2."""
    try:
        app()
    except (ScenarioError, UnitError) as e:
        print(f"stepbudget: error: {e}", file=sys.stderr)
        sys.exit(2)
