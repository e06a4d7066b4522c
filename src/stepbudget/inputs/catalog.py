"""The model catalog: released models by name, each row's shapes in the scenario's model schema and sourced
(inputs/catalog.yaml). ``model: llama3.1-70b`` in a scenario, or "Llama 3.1 70B" in a runs file, finds a row
here; spellings that differ only in case, spaces and punctuation find the same row."""

from __future__ import annotations

import copy
import difflib
import functools
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

from stepbudget.inputs.documents import read_yaml
from stepbudget.inputs.errors import ScenarioError

SHIPPED = "catalog.yaml"
"""The table, shipped in this package beside gpus.yaml."""

_META = ("aliases", "params_stated", "params_source", "seq_source", "note", "params_tolerance")
"""Row fields about the row, not the model: everything else is a field of the scenario's model section."""

DEFAULT_TOLERANCE = 0.01
"""How far the tool's parameter count may sit from the row's stated count (tests/inputs/test_catalog.py)."""

NEAR_MATCHES = 3
"""Names an unknown-model message suggests."""


@dataclass(frozen=True)
class Entry:
    """One catalog row."""

    key: str
    """The row's name in the table (``llama3.1-70b``)."""
    aliases: tuple[str, ...]
    """Other names that find the row (the Hugging Face repository id, other spellings)."""
    model: dict[str, Any]
    """The row's fields in the scenario's model schema, name and source included (a fresh copy per lookup)."""
    params_stated: float
    """Total parameters as ``params_source`` states them."""
    source: str
    """Where the shapes come from (config file, paper table)."""
    params_source: str = ""
    """Where params_stated comes from."""
    seq_source: str = ""
    """Which training context seq_len is, and who states it."""
    note: str = ""
    """Why the tool's count sits outside 1 % of params_stated, where it does."""
    params_tolerance: float = DEFAULT_TOLERANCE
    """The bound on |tool count / params_stated - 1| that the note justifies (1 % without a note)."""


def normalize(text: str) -> str:
    """A name reduced to its runs of letters and of digits, lower case, joined by "-": "Llama 3.1 70B",
    "llama3.1-70b" and "LLaMA-3.1-70B" all give "llama-3-1-70-b"; "8x7b" stays apart from "7b", and "2.5-7b"
    from "2-57b" (digit runs are kept apart, never run together)."""
    return "-".join(re.findall(r"[a-z]+|[0-9]+", text.casefold()))


@functools.cache
def _rows() -> dict[str, dict[str, Any]]:
    text = (resources.files("stepbudget.inputs") / SHIPPED).read_text(encoding="utf-8")
    return read_yaml(text)


@functools.cache
def _index() -> dict[str, str]:
    """Normalized key and alias -> row key. A spelling two rows share would be ambiguous: refused at build time
    by the tests, first row wins here."""
    out: dict[str, str] = {}
    for key, row in _rows().items():
        for name in (key, *row.get("aliases", ())):
            out.setdefault(normalize(name), key)
    return out


def names() -> list[str]:
    """Every row's key, in table order."""
    return list(_rows())


def entries() -> list[Entry]:
    """Every row, in table order."""
    return [_entry(key) for key in _rows()]


def _entry(key: str) -> Entry:
    row = copy.deepcopy(_rows()[key])
    model = {k: v for k, v in row.items() if k not in _META}
    return Entry(key=key, aliases=tuple(row.get("aliases", ())), model=model,
                 params_stated=float(row["params_stated"]), source=str(row.get("source", "")),
                 params_source=str(row.get("params_source", "")), seq_source=str(row.get("seq_source", "")),
                 note=str(row.get("note", "")).strip(),
                 params_tolerance=float(row.get("params_tolerance", DEFAULT_TOLERANCE)))


def lookup(name: str) -> Entry | None:
    """The row ``name`` (a key or an alias, in any case or punctuation) finds, or None."""
    key = _index().get(normalize(name))
    return None if key is None else _entry(key)


def near_matches(name: str, count: int = NEAR_MATCHES) -> list[str]:
    """Row keys whose names are closest to ``name`` (difflib's ratio on normalized names), best first."""
    index = _index()
    close = difflib.get_close_matches(normalize(name), list(index), n=4 * count, cutoff=0.5)
    return list(dict.fromkeys(index[c] for c in close))[:count]


def resolve(name: str) -> dict[str, Any]:
    """The model fields of the row ``name`` finds (a fresh dict the caller may edit), or a one-line
    ScenarioError that names near matches."""
    entry = lookup(name)
    if entry is None:
        near = near_matches(name)
        hint = f"; near matches: {', '.join(near)}" if near else ""
        raise ScenarioError(f"model: unknown model {name[:80]!r}{hint} (stepbudget models lists all)")
    return entry.model
