"""Completion: what a job states, filled in one fixed order, every field keeping where its value came from.

    stated  ->  model catalog row  ->  framework recipe  ->  hardware row  ->  tool default

1. **Stated.** What the preset or scenario file writes (the files its ``base:`` names first), then each ``--set``
   or typed edit, in order (``Stated.over``, ``Stated.assign``). A stated value always wins.
2. **Model catalog.** ``model: NAME`` or ``model: {catalog: NAME, ...}`` takes every model field the job leaves
   unstated from the catalog row NAME finds (inputs/catalog.py): activation, FFN width, KV heads, vocabulary, tied
   embeddings, positions, the MoE and MLA blocks (a stated ``moe: null`` drops the row's). A row's context length
   is not a training sequence length: ``model.seq_len`` is the job's to state.
3. **Framework recipe.** ``framework: NAME`` takes, for every field the job leaves unstated, the documented
   default of that framework at the recipe's version (inputs/recipes.py, inputs/frameworks/NAME.yaml): which
   exchanges overlap, the gradient precision, the optimizer sharding, the default recompute, with the source line;
   then what the framework it wraps documents (Megatron-LM's, under NeMo or Megatron-DeepSpeed), but for the
   gradients' precision, which is the wrapper's.
4. **Hardware.** ``cluster.gpu: NAME`` takes the GPU row's datasheet figures (inputs/gpus.yaml), and the node
   that GPU ships in fills the node size, NVLink rate and NICs the job leaves unstated. A job on one node needs no
   NIC: an unstated one there is a placeholder no exchange uses.
5. **Tool default.** Every field still unset takes its documented default (the field docstrings of
   inputs/model.py, hardware.py and layout.py). Two defaults depend on the job: a job with expert
   parallelism that states no rank order takes Megatron-Core's, which keeps EP inside the node where it fits, and
   an unstated DP degree is the GPUs the other degrees leave, where they divide them.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from stepbudget.enums import Balance, Origin
from stepbudget.inputs import catalog, recipes
from stepbudget.inputs.errors import OptionError, ScenarioError
from stepbudget.inputs.hardware import gpu_node, gpu_presets, named_gpu
from stepbudget.inputs._types import Frozen
from stepbudget.inputs.layout import Layout, OverlapSettings, Precision
from stepbudget.inputs.model import BALANCED_LOAD

Path = tuple[str, ...]
"""A field's place in the scenario's schema: ``("layout", "pp")``."""

CATALOG_KEY = "catalog"
"""The key that names a catalog row inside a section: ``model: {catalog: llama3.1-70b, seq_len: 8192}``."""
NAMED_SECTIONS: dict[Path, tuple[str, ...]] = {("model",): ("seq_len",), ("cluster", "gpu"): ()}
"""Sections a row name may fill, with the fields a new row name keeps: the sequence length is the job's, not the
model's."""
NODE_FIELDS = ("gpus_per_node", "nvlink_Bps", "nics_per_node", "nic_Bps")
"""Cluster fields the node a GPU ships in fills (gpus.yaml ``node``)."""
UNUSED_NIC = "400Gb/s"
"""The NIC of a one-node job that states none: no exchange crosses it, so its rate changes no number."""


@dataclass(frozen=True)
class Source:
    """Where one resolved field's value came from: its origin and, where one is named, which preset, file, catalog
    row or GPU row."""

    origin: Origin
    where: str = ""

    def __str__(self) -> str:
        return f"{self.origin.value} ({self.where})" if self.where else self.origin.value

    def to_dict(self) -> dict[str, str]:
        return {"origin": self.origin.value, "where": self.where}


def dotted(path: Path) -> str:
    return ".".join(path)


@dataclass(frozen=True)
class Stated:
    """What a job states: a nested mapping in the scenario's schema, a catalog model or a named GPU held as
    ``{catalog: NAME, ...}``, and where each value it states was stated (dotted field -> "preset llama3-405b",
    "file job.yaml", "--set", "edit")."""

    data: Mapping[str, Any] = field(default_factory=dict)
    where: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, data: Mapping[str, Any], where: str) -> "Stated":
        return cls().over(data, where)

    def over(self, data: Mapping[str, Any], where: str) -> "Stated":
        """These statements with the mapping ``data`` laid over them, field by field: a mapping over a section
        merges into it, anything else replaces; a row name (``model: NAME``) replaces the section it names."""
        return self.assign(_assignments(data), where)

    def then(self, other: "Stated") -> "Stated":
        """These statements with ``other``'s laid over them, each value keeping where ``other`` says it was stated."""
        return self.assign_each((path, value, other.where.get(dotted(path), "given"))
                                for path, value in _assignments(other.data))

    def assign(self, pairs: Iterable[tuple[Path, Any]], where: str) -> "Stated":
        """These statements with each ``(path, value)`` set in order; a mapping value replaces the section whole."""
        return self.assign_each((path, value, where) for path, value in pairs)

    def assign_each(self, triples: Iterable[tuple[Path, Any, str]]) -> "Stated":
        """These statements with each ``(path, value, where)`` set in order, each value stated at its ``where``."""
        data, stated_at = copy.deepcopy(dict(self.data)), dict(self.where)
        for path, value, where in triples:
            _assign(data, stated_at, path, value, where)
        return Stated(data, stated_at)


def _assignments(data: Mapping[str, Any], prefix: Path = ()) -> Iterator[tuple[Path, Any]]:
    """The (path, value) pairs that lay ``data`` over a statement field by field; a row name first in its section."""
    keys = sorted(data, key=lambda k: k != CATALOG_KEY) if prefix in NAMED_SECTIONS else list(data)
    for key in keys:
        value, path = data[key], (*prefix, str(key))
        if isinstance(value, Mapping):
            yield from _assignments(value, path)  # an empty mapping states nothing
        else:
            yield path, value


def _forget(stated_at: dict[str, str], path: Path, keep: tuple[str, ...] = ()) -> None:
    """Drop where the fields under ``path`` were stated (but the ``keep`` fields directly inside it)."""
    key, kept = dotted(path), {dotted((*path, k)) for k in keep}
    for name in [n for n in stated_at if (n == key or n.startswith(key + ".")) and n not in kept]:
        del stated_at[name]


def _assign(data: dict, stated_at: dict[str, str], path: Path, value: Any, where: str) -> None:
    if path in NAMED_SECTIONS and isinstance(value, str):
        path = (*path, CATALOG_KEY)  # model: NAME is model: {catalog: NAME}
    node = data
    for i, part in enumerate(path[:-1]):
        child = node.get(part)
        if isinstance(child, str) and path[: i + 1] in NAMED_SECTIONS:
            child = node[part] = {CATALOG_KEY: child}  # a field of a row: the row, with that field stated
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise OptionError("override", f"{dotted(path)}: {part!r} is a value, not a section; check the key", sep=" ")
        node = child
    section, name = path[:-1], path[-1]
    if name == CATALOG_KEY and section in NAMED_SECTIONS:
        keep = NAMED_SECTIONS[section]  # a new row replaces the section, but for what is the job's
        kept = {k: v for k, v in node.items() if k in keep}
        node.clear()
        node.update({CATALOG_KEY: value, **kept})
        _forget(stated_at, section, keep)
    else:
        node[name] = copy.deepcopy(value)
        _forget(stated_at, path)
    for leaf in _leaves(value, path):  # where each value it states came from
        stated_at[leaf] = where


# ---- completion ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Completed:
    """A stated job with every row it names filled in: the mapping to validate, the source of each value it holds,
    and the problems completion found (each one line naming the field and the fix)."""

    data: dict[str, Any]
    sources: dict[str, Source]
    problems: list[str]


def complete(stated: Stated) -> Completed:
    """Stated fields, then the model catalog's row, then the GPU's hardware row (this module's docstring); the tool
    defaults are the validation's (``provenance`` names them)."""
    data = copy.deepcopy(dict(stated.data))
    sources = {name: Source(Origin.STATED, where) for name, where in stated.where.items()}
    problems: list[str] = []
    _model_row(data, sources, problems)
    _framework_recipe(data, sources, problems)
    _hardware_row(data, sources, problems)
    _expert_order(data, sources)
    _data_parallel(data, sources)
    _expert_load(data, sources)
    return Completed(data, sources, problems)


EXPERT_ORDER = ("tp", "cp", "ep", "dp", "pp")
"""The rank order of a job with EP > 1 that states none: Megatron-Core's default, ``order: str = "tp-cp-ep-dp-pp"``
(megatron/core/parallel_state.py), which keeps an EP group of up to a node's GPUs inside the node."""


def _expert_order(data: dict, sources: dict[str, Source]) -> None:
    layout = data.get("layout")
    if not isinstance(layout, dict) or "order" in layout:
        return
    ep = layout.get("ep")
    if isinstance(ep, int) and not isinstance(ep, bool) and ep > 1:
        layout["order"] = list(EXPERT_ORDER)
        sources["layout.order"] = Source(Origin.DEFAULT, "Megatron-Core's order for expert parallelism, "
                                                         "parallel_state.py order='tp-cp-ep-dp-pp'")


def _expert_load(data: dict, sources: dict[str, Source]) -> None:
    """An MoE job that states no busiest-expert load takes the one measured under its balance (model.BALANCED_LOAD),
    named with its source; padding to capacity or a stated skew sets the load instead, so none is filled there."""
    model = data.get("model")
    moe = model.get("moe") if isinstance(model, dict) else None
    if not isinstance(moe, dict) or "expert_load" in moe or moe.get("pad_to_capacity") or moe.get("popularity_skew"):
        return
    try:
        load, where = BALANCED_LOAD[Balance(moe.get("balance", Balance.AUX_LOSS))]
    except ValueError:  # an unknown balance: validation names it
        return
    moe["expert_load"] = load
    sources["model.moe.expert_load"] = Source(Origin.DEFAULT, where)


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _data_parallel(data: dict, sources: dict[str, Source]) -> None:
    """An unstated DP degree is the GPUs the other degrees leave, where they divide them: what Megatron-LM
    (``data_parallel_size = world_size // (tp * pp * cp)``, parallel_state.py) and torchtitan (``dp_shard = -1``)
    do. Where they do not divide, DP stays unset and the GPU-count check names the mismatch."""
    layout, cluster = data.get("layout"), data.get("cluster")
    if not isinstance(layout, dict) or not isinstance(cluster, dict) or "dp" in layout:
        return
    gpus = _count(cluster.get("gpus"))
    degrees = [_count(layout.get(axis, 1)) for axis in ("tp", "cp", "pp")]
    if gpus is None or None in degrees:
        return
    other = degrees[0] * degrees[1] * degrees[2]  # type: ignore[operator]
    if gpus % other == 0:
        layout["dp"] = gpus // other
        sources["layout.dp"] = Source(Origin.DEFAULT, "the GPUs the other degrees leave: cluster.gpus / (tp*cp*pp)")


def _fill(target: dict, row: Mapping[str, Any], path: Path, source: Source, sources: dict[str, Source]) -> None:
    """Every field of ``row`` that ``target`` leaves unstated, recorded as from ``source``; a section both hold merges
    field by field, and a section ``target`` states as null stays null."""
    for key, value in row.items():
        if key not in target:
            target[key] = copy.deepcopy(value)
            for name in _leaves(value, (*path, key)):
                sources[name] = source
        elif isinstance(target[key], dict) and isinstance(value, Mapping):
            _fill(target[key], value, (*path, key), source, sources)


def _leaves(value: Any, path: Path) -> Iterator[str]:
    if isinstance(value, Mapping) and value:
        for key, inner in value.items():
            yield from _leaves(inner, (*path, str(key)))
    else:
        yield dotted(path)


def _row_name(section: object, field_name: str, problems: list[str]) -> str | None:
    """The row a section names (and the name taken out of it), None when it names none or names it badly."""
    if not isinstance(section, dict) or CATALOG_KEY not in section:
        return None
    name = section.pop(CATALOG_KEY)
    if not isinstance(name, str) or not name.strip():
        known = ("one `stepbudget models` lists" if field_name == "model"
                 else f"one of {', '.join(gpu_presets())} or give its figures")
        problems.append(f"{field_name}: {str(name)[:80]!r} is not a name; give {known}")
        return None
    return name


def _model_row(data: dict, sources: dict[str, Source], problems: list[str]) -> None:
    model = data.get("model")
    name = _row_name(model, "model", problems)
    if name is None:
        return
    assert isinstance(model, dict)  # _row_name found a name in it
    entry = catalog.lookup(name)
    if entry is None:
        try:
            catalog.resolve(name)  # its message names the near matches
        except ScenarioError as e:
            problems.append(str(e))
        return
    row = entry.model
    row.pop("seq_len", None)  # a row's context is not the length the job trains at (this module's docstring)
    _fill(model, row, ("model",), Source(Origin.CATALOG, entry.key), sources)


def _framework_recipe(data: dict, sources: dict[str, Source], problems: list[str]) -> None:
    key = data.get("framework")
    if key is None:
        return
    try:
        recipe = recipes.recipe(key)
    except ScenarioError as e:
        problems.append(str(e))
        return
    for r in recipes.wrapped(recipe.key):
        for default in r.defaults:  # the first row of a field that holds fills it
            section, name = default.field.split(".")
            if r is not recipe and section == "precision":
                continue  # the wrapping framework's engine reduces and keeps the gradients, not the wrapped one's
            node = data.setdefault(section, {})
            if isinstance(node, dict) and name not in node and default.holds(lambda field: _value(data, field)):
                node[name] = copy.deepcopy(default.value)
                sources[default.field] = Source(Origin.FRAMEWORK, r.where(default))


_SECTIONS: dict[str, type[Frozen]] = {"layout": Layout, "overlap": OverlapSettings, "precision": Precision}
"""The sections a recipe fills or reads, whose field defaults a condition compares with where the job is silent."""


def _value(data: dict, field: str) -> Any:
    """A field's value as the job states it so far, else its documented default."""
    section, name = field.split(".")
    node = data.get(section)
    if isinstance(node, dict) and name in node:
        return node[name]
    return _SECTIONS[section].model_fields[name].default


def _hardware_row(data: dict, sources: dict[str, Source], problems: list[str]) -> None:
    cluster = data.get("cluster")
    if not isinstance(cluster, dict):
        return
    name = _row_name(cluster.get("gpu"), "cluster.gpu", problems)
    figures = named_gpu(name)
    if name is not None and figures is None:
        problems.append(f"cluster.gpu: unknown GPU {name[:80]!r}; use one of {', '.join(gpu_presets())} or give its "
                        "figures")
    if name is None or figures is None:
        _one_node_nic(cluster, sources)
        return
    _fill(cluster["gpu"], figures, ("cluster", "gpu"), Source(Origin.HARDWARE, name), sources)
    node = gpu_node(name) or {}
    where = Source(Origin.HARDWARE, f"{name} node: {node.get('source', '')}".strip())
    per_node = cluster.get("gpus_per_node")
    for key in NODE_FIELDS:
        if key not in cluster and key in node:
            cluster[key] = node[key]
            sources[f"cluster.{key}"] = where
            if key == "nics_per_node" and isinstance(per_node, int) and per_node != node["gpus_per_node"]:
                # a node of another size keeps the row's NICs per GPU (8 for 8 GPUs: one each)
                cluster[key] = max(1, round(per_node * node[key] / node["gpus_per_node"]))
    _one_node_nic(cluster, sources)


def _one_node_nic(cluster: dict, sources: dict[str, Source]) -> None:
    gpus, per_node = cluster.get("gpus"), cluster.get("gpus_per_node", 8)
    one_node = isinstance(gpus, int) and isinstance(per_node, int) and not isinstance(gpus, bool) and gpus <= per_node
    if one_node and "nic_Bps" not in cluster:
        cluster["nic_Bps"] = UNUSED_NIC
        sources["cluster.nic_Bps"] = Source(Origin.DEFAULT, "unused: the job fits in one node")


def provenance(resolved: Mapping[str, Any], sources: Mapping[str, Source]) -> dict[str, Source]:
    """The source of every field of a resolved scenario (its JSON dump), in the dump's order: what completion
    recorded, else the tool default."""
    default = Source(Origin.DEFAULT)
    return {name: sources.get(name, default) for name in _leaves(resolved, ())}
