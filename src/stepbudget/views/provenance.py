"""Where each field of a scenario came from: ``show``'s annotated YAML, the ``provenance`` JSON object, and the
table of the assumptions that move a step most (sweep/assumptions.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rich.console import JustifyMethod
from rich.table import Table
from rich.text import Text

from stepbudget.inputs.scenario import Scenario, flow_yaml
from stepbudget.sweep.assumptions import Assumption
from stepbudget.units import fmt_time


def provenance_dict(sc: Scenario) -> dict[str, dict[str, str]]:
    """Dotted field -> {"origin": stated | model catalog | hardware | tool default, "where": preset, file, row}."""
    return {name: source.to_dict() for name, source in sc.sources.items()}


def annotated_yaml(data: Mapping[str, Any], note: Callable[[str], str], column: int = 72) -> str:
    """``data`` as block YAML, each value followed by ``# note(dotted field)`` where the note is not empty, the
    comments aligned at the longest line up to ``column``."""
    lines: list[tuple[str, str]] = []

    def walk(node: Mapping[str, Any], path: tuple[str, ...], indent: str) -> None:
        for key, value in node.items():
            if isinstance(value, Mapping) and value:
                lines.append((f"{indent}{key}:", ""))
                walk(value, (*path, key), indent + "  ")
            else:
                lines.append((f"{indent}{key}: {flow_yaml(value)}", note(".".join((*path, key)))))

    walk(data, (), "")
    width = min(max((len(text) for text, n in lines if n), default=0), column)
    return "".join(f"{text:<{width}}  # {n}\n" if n else f"{text}\n" for text, n in lines)


def show_yaml(sc: Scenario) -> str:
    """The resolved scenario as YAML, SI units, each field followed by a comment saying where its value came from."""
    sources = sc.sources
    return annotated_yaml(sc.model_dump(mode="json"), lambda name: str(sources.get(name, "")))


def assumptions_dict(assumed: list[Assumption]) -> list[dict[str, Any]]:
    return [{"field": a.field, "value": a.value, "instead": a.instead, "why": a.why, "step_s": a.step_s,
             "change": a.change} for a in assumed]


def assumptions_table(assumed: list[Assumption]) -> Table | str:
    """The tool defaults that move the step most, with the step each alternative gives."""
    if not assumed:
        return "No tool default the job leaves unstated moves its step by 0.5 % or more (stepbudget show lists them all)."
    t = Table(title="Assumed, not stated: the defaults that move this step most (stepbudget show lists every field)",
              title_justify="left")
    columns: tuple[tuple[str, JustifyMethod], ...] = (("field", "left"), ("default", "right"), ("instead", "right"),
                                                      ("step", "right"), ("why instead", "left"))
    for col, just in columns:
        t.add_column(col, justify=just)
    for a in assumed:
        t.add_row(a.field, *(f"{v:.3g}" if isinstance(v, float) else flow_yaml(v) for v in (a.value, a.instead)),
                  Text(f"{fmt_time(a.step_s)} ({a.change:+.1%})", style="red" if a.change > 0 else "green"), a.why)
    return t
