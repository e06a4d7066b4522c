"""The panels' controls: what each one reads, its default, its bounds, and the message when it can't.

A text field is read with its unit by the package's one parser (``units.parse``: a count takes k, M, G, B and Mi)
and checked against bounds. What goes wrong is a ``FieldError`` carrying a catalog code and its values, so the
message under the field is written in the page's language. Choices (radio buttons, check boxes) come from a closed
list; a value outside it, which only a hand-edited URL can give, falls back to the default.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from stepbudget.api import MAX_COUNT, UnitError, parse

class FieldError(ValueError):
    """A control's text can't be used: ``code`` names the catalog message (err.<code>), ``values`` fill it."""

    def __init__(self, code: str, **values):
        super().__init__(code)
        self.code, self.values = code, values


@dataclass(frozen=True)
class Slider:
    """The slider beside a text field: the span it covers (SI units, as the field reads) and how its positions
    step: ``powers`` of two (GPUs, batches, degrees), ``log`` for quantities that span decades (parameters,
    bandwidths, rates), ``linear`` in ``step`` for a fraction or a small count. It writes the field's text in the
    default's unit (assets/stepbudget.js), so what a reader drags is what a reader could have typed."""

    low: float
    high: float
    scale: str = "log"
    step: float = 1.0

    def position(self, value: float) -> float:
        """Where ``value`` sits on the slider (its log2, log10 or the value itself)."""
        return math.log2(value) if self.scale == "powers" else math.log10(value) if self.scale == "log" else value

    def ends(self) -> tuple[float, float, float]:
        """The slider's min, max and step in positions."""
        if self.scale == "powers":
            return math.log2(self.low), math.log2(self.high), 1.0
        if self.scale == "log":
            return math.log10(self.low), math.log10(self.high), (math.log10(self.high) - math.log10(self.low)) / 400
        return self.low, self.high, self.step


@dataclass(frozen=True)
class Field:
    """One text control: ``kind`` is count, integer, fraction, or a unit kind (rate, flops, bytes, time)."""

    name: str
    kind: str
    default: str
    low: float = 0.0
    high: float = float(MAX_COUNT)
    low_open: bool = True
    """Whether ``low`` itself is refused (most quantities must be > 0)."""
    example: str = ""
    slider: Slider | None = None

    def read(self, text: object) -> float:
        """The value in SI units, or FieldError."""
        value = _read(self.kind, text, self.example or self.default)
        if not math.isfinite(value):
            raise FieldError("not_finite", value=str(text), example=self.example or self.default)
        if value < self.low or (self.low_open and value == self.low) or value > self.high:
            raise FieldError("range_open" if self.low_open else "range", value=str(text).strip(), low=self.low,
                             high=self.high, example=self.example or self.default)
        return value


    def shown_as(self) -> dict:
        """How the slider writes a value back in the default's style: the unit after the number, its scale,
        whether a space separates them, and whether thousands are grouped (16,384)."""
        m = re.fullmatch(r"\s*([0-9.,]+)(\s*)(.*?)\s*", self.default)
        number, space, unit = (m.group(1), m.group(2), m.group(3)) if m else (self.default, "", "")
        value = self.read(self.default)
        plain = float(number.replace(",", "")) if m else value
        return {"kind": self.kind, "unit": unit, "space": space, "scale": value / plain if plain else 1.0,
                "grouped": "," in number, "whole": self.kind in ("count", "integer")}


@dataclass(frozen=True)
class Choice:
    """One closed control: radio buttons or check boxes (``many``) over ``options``."""

    name: str
    options: tuple[str, ...]
    default: str | tuple[str, ...]
    many: bool = False

    def read(self, value: object) -> str | tuple[str, ...]:
        if self.many:
            items = value.split(",") if isinstance(value, str) else value if isinstance(value, (list, tuple)) else ()
            picked = tuple(o for o in self.options if o in items)
            return picked if all(i in self.options for i in items if i) else tuple(self.default)
        return value if value in self.options else self.default


_GROUPED = re.compile(r"^\s*[-+]?\d{1,3}(,\d{3})+(\.\d*)?(?![0-9,])")
"""Commas group thousands (16,384, 16,384ms): a comma anywhere else (1,5) is not read as a number."""


def _read(kind: str, text: object, example: str) -> float:
    if text is None or (isinstance(text, str) and not text.strip()):
        raise FieldError("empty", example=example)
    shown = str(text).strip()
    if "," in shown and not _GROUPED.match(shown):
        raise FieldError("commas", value=shown, example=example)
    if shown.startswith("-"):
        raise FieldError("negative", value=shown, example=example)
    s = shown.replace(",", "").replace("_", "")
    if kind in ("count", "integer"):
        refused = FieldError("not_count" if kind == "count" else "not_integer", value=str(text).strip(), example=example)
        if kind == "integer" and not re.fullmatch(r"[0-9.eE+]+", s):  # a suffix (2k) is a count, not an integer
            raise refused
        try:
            value = parse(s, "count")  # the one unit parser: k, M, G, T, B (a billion), Ki, Mi, Gi (16Mi = 2^24)
        except UnitError:
            raise refused from None
        if not value.is_integer():
            raise FieldError("not_whole", value=str(text).strip(), example=example)
        return value
    if kind == "fraction":
        pct = s.endswith("%")
        try:
            value = float(s.rstrip("%").strip())
        except ValueError:
            raise FieldError("not_fraction", value=str(text).strip(), example=example) from None
        return value / 100 if pct else value
    if kind == "real":
        try:
            return float(s)
        except ValueError:
            raise FieldError("not_number", value=str(text).strip(), example=example) from None
    if re.fullmatch(r"[-+]?[0-9.eE+-]+", s):
        raise FieldError("no_unit", value=str(text).strip(), example=example)  # a bare number in a quantity field
    try:
        return parse(s, kind)
    except UnitError:
        raise FieldError("bad_unit", value=str(text).strip(), kind=kind, example=example) from None
