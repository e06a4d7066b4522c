"""Field types shared by the input models: quantities with units, read at the door."""

from __future__ import annotations

import functools
from typing import Annotated, get_args

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from stepbudget.units import parse


def _quantity(kind: str):
    return BeforeValidator(lambda v: parse(v, kind) if isinstance(v, (str, int, float)) else v)


# bounds far outside any machine, so that a typo (a rate without its unit) is refused by name
# instead of overflowing downstream arithmetic
Bytes = Annotated[float, _quantity("bytes"), Field(ge=1, le=1e21)]
Rate = Annotated[float, _quantity("rate"), Field(ge=1, le=1e18)]
Flops = Annotated[float, _quantity("flops"), Field(ge=1e6, le=1e21)]
Seconds = Annotated[float, _quantity("time"), Field(ge=0, le=1e7)]
MAX_COUNT = 2**40
"""Largest count or degree read (about 1.1e12): far past any job, and its products stay exact in int64."""
Count = Annotated[int, BeforeValidator(lambda v: int(parse(v, "count")) if isinstance(v, str) else v),
                  Field(gt=0, le=MAX_COUNT)]
Degree = Annotated[int, Field(ge=1, le=MAX_COUNT)]

MIN_EFFICIENCY = 1e-3
"""Smallest share of a datasheet figure read (an efficiency, a clock share, an achieved fraction): 0.1 %. The
lowest any kernel or link is measured at is a few percent (a tiny GEMM: 6.5 of 989 TFLOP/s, 0.7 %); a thousandth
is a broken one. Below it the arithmetic stops being finite: 5e-324 of a rate is 0, and a time over it inf."""
Efficiency = Annotated[float, Field(ge=MIN_EFFICIENCY, le=1)]
"""A share of a datasheet figure that a kernel, link or clock reaches: ``MIN_EFFICIENCY`` to 1."""

_ELEMENT_BYTES = {"fp32": 4.0, "tf32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0}


def _element_bytes(v: object) -> object:
    if isinstance(v, str):
        key = v.strip().lower()
        if key not in _ELEMENT_BYTES:
            raise ValueError(f"unknown precision {v!r}; use one of {sorted(_ELEMENT_BYTES)} or bytes per element")
        return _ELEMENT_BYTES[key]
    return v


ElementBytes = Annotated[float, BeforeValidator(_element_bytes), Field(ge=0.125, le=8)]  # one bit to fp64


def _takes_bool(annotation: object) -> bool:
    return annotation is bool or any(_takes_bool(a) for a in get_args(annotation))


def _takes_number(annotation: object) -> bool:
    return annotation in (int, float) or any(_takes_number(a) for a in get_args(annotation))


@functools.cache
def _number_fields(model: type[BaseModel]) -> frozenset[str]:
    """Fields of ``model`` that take a number and not a boolean (looked up once per class)."""
    return frozenset(name for name, f in model.model_fields.items()
                     if _takes_number(f.annotation) and not _takes_bool(f.annotation))


class Frozen(BaseModel):
    """Base for every input section: unknown fields are errors, values never change after load."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_booleans_for_numbers(cls, data: object) -> object:
        # YAML reads yes/no/true as booleans, which pydantic would take as 1 and 0
        if isinstance(data, dict):
            for name in _number_fields(cls) & data.keys():
                if isinstance(data[name], bool):
                    raise ValueError(f"{name}: {data[name]!r} is not a number; give the number")
        return data
