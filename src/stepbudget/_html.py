"""Results as HTML tables, for Jupyter (``_repr_html_``): a title, a header, rows of text, every cell escaped.

The numbers are formatted as the CLI formats them (units.py). A result over arrays (a sweep) shows its
shape and the range of each figure instead of every element.
"""

from __future__ import annotations

import dataclasses
from html import escape

import numpy as np

from stepbudget.units import fmt_bytes, fmt_flop, fmt_flops, fmt_rate, fmt_time

_BY_NAME = ((lambda n: n.endswith("_Bps"), fmt_rate), (lambda n: "bytes" in n, fmt_bytes),
            (lambda n: n.endswith("_s"), fmt_time), (lambda n: n == "flops_per_gpu", fmt_flop),
            (lambda n: n.endswith("_flops"), fmt_flops),
            (lambda n: n.startswith(("balance", "intensity")), "{:,.0f}".format),
            (lambda n: n in ("mfu", "hfu") or n.endswith(("share", "duty_cycle", "share_of_compute")), "{:.1%}".format))
"""How a figure is shown, by its field's name (SI units inside, units.py)."""


def table(title: str, header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return (f"<table><caption style='text-align:left'><b>{escape(title)}</b></caption>"
            f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")


def figure(name: str, value) -> str:
    """One field's value in its unit: 6.22 s, 1.62 TB, 8,000; an array as its shape and range."""
    array = np.asarray(value)
    show = next((f for matches, f in _BY_NAME if matches(name)), None)
    if show is None:
        show = (lambda x: "yes" if x else "no") if array.dtype == bool else "{:.4g}".format
    if array.ndim == 0:
        return show(array.item())
    if array.dtype == bool:
        return f"{int(array.sum())} of {array.size} true (shape {array.shape})"
    return f"{show(float(array.min()))} to {show(float(array.max()))} (shape {array.shape})"


def fields(result, title: str | None = None) -> str:
    """A dataclass of figures as a two-column table: field, value."""
    rows = [[f.name, figure(f.name, getattr(result, f.name))] for f in dataclasses.fields(result)
            if getattr(result, f.name) is not None]
    return table(title or type(result).__name__, ["figure", "value"], rows)


def short_repr(kind: str, name: str, **figures) -> str:
    """A result's one-line repr: ``<Budget llama3-405b: step_s 6.28 s, mfu 40.1%>``; arrays as their range."""
    shown = ", ".join(f"{key} {figure(key, value)}" for key, value in figures.items())
    return f"<{kind} {name}: {shown}>"
