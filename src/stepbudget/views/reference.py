"""The scenario reference, written from the input models themselves: every section, every field, its type,
default and docstring. The docs site's scenario page is this text (docs/hooks.py), so it never drifts from the
code."""

from __future__ import annotations

import enum
import typing
from collections.abc import Iterator

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from stepbudget.inputs.scenario import Scenario

_UNITS = {  # the input types that read a quantity with its unit (inputs/_types.py), as a reader writes them
    "Rate": "rate, bytes/s (`400Gb/s`, `50GB/s`)",
    "Bytes": "bytes (`80GB`, `141GiB`)",
    "Flops": "FLOP/s (`989TFLOP/s`)",
    "Seconds": "time, s (`14us`, `0.6s`)",
    "Count": "count (`2M`, `16384`)",
    "Degree": "degree, an integer ≥ 1",
    "ElementBytes": "bytes per element, or `fp32`, `bf16`, `fp16`, `fp8`",
    "Overlap": "share hidden in [0, 1], or `auto`",
}


def sections(model: type[BaseModel] = Scenario, path: str = "") -> Iterator[tuple[str, type[BaseModel]]]:
    """Every input section under ``model``, depth first, with its dotted path (``cluster.gpu.kernels``)."""
    yield path, model
    for name, field in model.model_fields.items():
        for sub in _models(field.annotation):
            yield from sections(sub, f"{path}.{name}" if path else name)


def _models(annotation: object) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in typing.get_args(annotation) for m in _models(a)]


def _written_type(model: type[BaseModel], name: str) -> str:
    """The field's type as its source writes it (``Degree | None``), from the annotation string."""
    for cls in model.__mro__:
        if name in cls.__dict__.get("__annotations__", {}):
            return str(cls.__dict__["__annotations__"][name])
    return ""


def _type(model: type[BaseModel], name: str) -> str:
    written = _written_type(model, name)
    optional = written.endswith(" | None")
    base = written.removesuffix(" | None")
    annotation = model.model_fields[name].annotation
    choices = _choices(annotation)
    if base in _UNITS:
        text = _UNITS[base]
    elif choices:
        text = "one of " + ", ".join(f"`{c}`" for c in choices)
    elif base.startswith("tuple["):
        text = f"list of {base[6:-6]}" if base.endswith(", ...]") else base
    else:
        text = base
    return text + (" (optional)" if optional else "")


def _choices(annotation: object) -> list[str]:
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return [str(m.value) for m in annotation]
    if typing.get_origin(annotation) is typing.Literal:
        return [str(a) for a in typing.get_args(annotation)]
    return [c for a in typing.get_args(annotation) for c in _choices(a) if a is not type(None)]


def _default(model: type[BaseModel], name: str) -> str:
    field = model.model_fields[name]
    if field.default is PydanticUndefined and field.default_factory is None:
        return "required"
    value = field.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return "its section's defaults"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, tuple):
        value = "[" + ", ".join(str(v.value if isinstance(v, enum.Enum) else v) for v in value) + "]"
    if value == "":
        return "empty"
    return "none" if value is None else f"`{value}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def scenario_reference() -> str:
    """Markdown: one table per section (``model``, ``cluster.gpu``, ...): field, type, default, what it is."""
    out = []
    for path, model in sections():
        title = f"`{path}`" if path else "Top level"
        doc = " ".join((model.__doc__ or "").split())
        out += [f"## {title}", "", doc, "", "| field | type | default | what |", "|---|---|---|---|"]
        for name, field in model.model_fields.items():
            if _models(field.annotation):
                what = f"section `{path + '.' if path else ''}{name}` (below)"
            else:
                what = field.description or "-"
            out.append(f"| `{name}` | {_cell(_type(model, name))} | {_cell(_default(model, name))} | {_cell(what)} |")
        out.append("")
    return "\n".join(out)
