"""``import``: the scenario file a job's configs make, each field with the file and key it came from, and what the
configs hold that the tool reads past."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.text import Text

from stepbudget.inputs.complete import Stated
from stepbudget.inputs.importers.merge import ReadFile
from stepbudget.inputs.recipes import defaults_taken
from stepbudget.inputs.scenario import Scenario, flow_yaml
from stepbudget.views.provenance import annotated_yaml, provenance_dict

COMMENT_COLUMN = 48
"""Where the source comments of the written file start, as far as the values allow."""


def scenario_text(stated: Stated, files: Sequence[ReadFile]) -> str:
    """What the configs state, as a scenario file: YAML, each value followed by the file and key it came from. Read
    back, it states the same job; the framework it names fills the rest again."""
    read = ", ".join(f"{f.label} ({f.imported.format})" for f in files)
    head = f"# A scenario made by `stepbudget import` from {read}.\n# Each value's comment names the file and key it came from.\n"
    return head + annotated_yaml(stated.data, lambda name: stated.where.get(name, "").removeprefix("file "),
                                 COMMENT_COLUMN)


def recipe_lines(sc: Scenario) -> list[str]:
    """The framework defaults the job takes, each as its recipe gives it, with its source line."""
    taken = defaults_taken(sc.framework, sc.sources)
    if not taken:
        return []
    return ["Assumed from the framework's recipe, not stated in the files:",
            *(f"  {d.field} = {flow_yaml(d.value)}  ({r.where(d)})" for r, d in taken)]


def import_lines(text: str, sc: Scenario, files: Sequence[ReadFile]) -> list[Text]:
    """What ``import`` prints, as plain text: the lists in it are not rich markup."""
    ignored = [f"Read past in {f.label} (not part of a step's time, or not modelled): {', '.join(f.imported.ignored)}"
               for f in files if f.imported.ignored]
    return [Text(line) for line in (text.rstrip("\n"), "", *recipe_lines(sc), *ignored)]


def import_dict(stated: Stated, sc: Scenario, files: Sequence[ReadFile], text: str) -> dict[str, Any]:
    return {"files": [{"path": f.path, "format": f.imported.format, "framework": f.imported.framework,
                       "ignored": list(f.imported.ignored)} for f in files],
            "stated": dict(stated.where), "text": text, "scenario": sc.model_dump(mode="json"),
            "provenance": provenance_dict(sc)}
