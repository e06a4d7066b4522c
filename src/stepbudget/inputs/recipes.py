"""Framework recipes: the documented defaults of one training framework, at one named version, that change a step.

A job that names its framework (``framework: megatron-lm``, or a runs file's ``layout.framework`` text that a
recipe's ``matches`` finds) takes, for every field it leaves unstated, the recipe's value: Megatron-LM's
argparse leaves every overlap off, NeMo 2's recipes switch them on. Each value carries the file and line of the
framework's repository at the recipe's version that sets it, and ``stepbudget show`` prints it beside the field.
The recipes are data: ``inputs/frameworks/KEY.yaml``, one per framework.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from stepbudget.enums import Origin
from stepbudget.inputs.documents import read_yaml
from stepbudget.inputs.errors import ScenarioError

ORDER = ("megatron-bridge", "nemo2", "nemo", "gpt-neox", "deepspeed", "megatron-lm", "torchtitan", "maxtext")
"""The recipes, in the order their ``matches`` are tried on a run's framework text: the stacks built on another
first (a NeMo 2 run's text names Megatron-Core too; Megatron-DeepSpeed runs DeepSpeed's engine)."""

FIELDS = frozenset({
    "overlap.tp", "overlap.cp", "overlap.dp", "overlap.pp", "overlap.ep", "overlap.ep_paired",
    "layout.dp_kind", "layout.reshard_after_forward", "layout.dp_bucket_params", "layout.sequence_parallel",
    "layout.recompute", "layout.attention_kernel", "layout.micro_batch", "layout.compiled", "layout.cp_kind",
    "layout.embedding_in_pipeline_split", "layout.loss_in_pipeline_split", "layout.order",
    "precision.grads", "precision.grad_buffer", "precision.params",
})
"""The fields a recipe may fill: how the framework runs a job, never the job's model or size (a default
micro-batch, where the framework has one, is how it runs a job that names none)."""
CONDITIONS = frozenset({"layout.schedule", "layout.dp_kind"})
"""Fields a recipe's row may depend on besides those it may fill."""


@dataclass(frozen=True)
class Default:
    """One documented default: the scenario field, its value there, and the framework's own words for it."""

    field: str
    value: Any
    native: str
    """The framework's own name and value, as its source writes it: ``overlap_grad_reduce: bool = False``."""
    source: str
    """``path:line`` in the framework's repository at the recipe's version."""
    when: Mapping[str, Any] | None = None
    """Fields of the job this default holds for (``{layout.schedule: interleaved-1f1b}``): a framework whose
    default depends on another setting has a row per case, the first that holds taken."""

    def holds(self, value_of: Callable[[str], Any]) -> bool:
        """Whether every condition holds, ``value_of(field)`` giving the job's value of a field."""
        return all(str(value_of(name)) == str(value) for name, value in (self.when or {}).items())


@dataclass(frozen=True)
class Recipe:
    key: str
    name: str
    repository: str
    version: str
    commit: str
    matches: str
    description: str
    defaults: tuple[Default, ...]
    wraps: tuple[str, ...] = ()
    """The frameworks this one wraps (NeMo runs Megatron-LM's model code; DeepSpeed's engine runs
    Megatron-DeepSpeed's): a job whose files name both runs under this one."""

    def default(self, field: str) -> Default | None:
        """The recipe's first row for ``field``, or None where it holds none."""
        return next((d for d in self.defaults if d.field == field), None)

    def where(self, default: Default) -> str:
        """Where one default comes from, as ``show`` prints it."""
        return f"{self.name} {self.version}, {default.source}: {default.native}"


def _recipe(key: str, data: Any) -> Recipe:
    """A recipe file's mapping, checked: a recipe is package data, so a bad one is a bug named by its file."""
    where = f"inputs/frameworks/{key}.yaml"
    if not isinstance(data, dict):
        raise ScenarioError(f"{where}: expected a mapping")
    heads = ("name", "repository", "version", "commit", "matches", "description")
    missing = [h for h in (*heads, "defaults") if h not in data]
    if missing:
        raise ScenarioError(f"{where}: missing {', '.join(missing)}")
    unknown = set(data) - {*heads, "defaults", "wraps"}
    if unknown:
        raise ScenarioError(f"{where}: unknown keys {', '.join(sorted(unknown))}")
    defaults = []
    for i, row in enumerate(data["defaults"]):
        if not isinstance(row, dict) or not {"field", "value", "native", "source"} <= set(row) <= \
                {"field", "value", "native", "source", "when"}:
            raise ScenarioError(f"{where}: defaults[{i}] needs field, value, native and source (and may say when)")
        if row["field"] not in FIELDS or not set(row.get("when") or {}) <= FIELDS | CONDITIONS:
            raise ScenarioError(f"{where}: defaults[{i}]: {row['field']!r} is not a field a recipe may fill, or its "
                                "condition names a field it may not read")
        defaults.append(Default(row["field"], row["value"], str(row["native"]), str(row["source"]), row.get("when")))
    for d in defaults:  # a field given twice: every row but its last one says when it holds
        rows = [x for x in defaults if x.field == d.field]
        if any(x.when is None for x in rows[:-1]):
            raise ScenarioError(f"{where}: {d.field} is given twice; say when each row but the last holds")
    re.compile(data["matches"])
    name, repository, version, commit, matches, description = (str(data[h]) for h in heads)
    wraps = tuple(str(k) for k in data.get("wraps") or ())
    return Recipe(key, name, repository, version, commit, matches, description, tuple(defaults), wraps)


@functools.cache
def recipes() -> dict[str, Recipe]:
    """Every shipped recipe by key, in ``ORDER``."""
    folder = resources.files("stepbudget.inputs") / "frameworks"
    return {key: _recipe(key, read_yaml((folder / f"{key}.yaml").read_text(encoding="utf-8"))) for key in ORDER}


def recipe(key: str) -> Recipe:
    """The recipe ``key`` names, or a ScenarioError naming the field and the known keys."""
    found = recipes().get(key.strip().lower()) if isinstance(key, str) else None
    if found is None:
        raise ScenarioError(f"framework: unknown framework {str(key)[:60]!r}; use one of {', '.join(ORDER)} "
                            "(stepbudget show names the defaults each fills)")
    return found


def wrapped(key: str) -> list[Recipe]:
    """The recipe ``key`` names, then those of the frameworks it wraps, each once, nearest first."""
    out: list[Recipe] = []
    queue = [key]
    while queue:
        r = recipe(queue.pop(0))
        if r not in out:
            out.append(r)
            queue += list(r.wraps)
    return out


def one_framework(keys: set[str]) -> str | None:
    """The framework a job's files name together: the one the others' stacks run under (a Megatron-LM script with
    a DeepSpeed config is DeepSpeed's job), None where they name stacks that do not build on each other."""
    top = {k for k in keys if not any(k in recipe(other).wraps for other in keys)}
    return top.pop() if len(top) == 1 else None


def defaults_taken(key: str | None, sources: Mapping[str, Any]) -> list[tuple[Recipe, Default]]:
    """The defaults a job took from recipe ``key`` and those it wraps: the rows whose source line its ``sources``
    (dotted field -> Source) name, with their recipe, in the recipes' order."""
    if key is None:
        return []
    wheres = {name: source.where for name, source in sources.items() if source.origin == Origin.FRAMEWORK}
    return [(r, d) for r in wrapped(key) for d in r.defaults if wheres.get(d.field) == r.where(d)]


def recipe_for(text: str) -> Recipe | None:
    """The recipe a run's framework text names ("NeMo 25.02.01 (NeMo 2 / Megatron-Core)"), or None."""
    low = text.lower()
    return next((r for r in recipes().values() if re.search(r.matches, low)), None)
