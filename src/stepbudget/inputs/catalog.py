"""The model catalog: released models by name, each row's shapes in the scenario's model schema and sourced
(inputs/catalog.yaml). ``model: {catalog: llama3.1-70b, seq_len: 8192}`` in a scenario, or "Llama 3.1 70B" in a runs
file, finds a row here; spellings that differ only in case, spaces and punctuation find the same row, and so do a
name with a note in parentheses ("Llama 3.1 405B (proxy: 32 layers)") and a name with its size appended
("Grok-1 314B") where the size is the row's stated count. A row's context length (``context_len``) is metadata:
the context its source states, not the sequence length any job trains at, so the row gives no ``seq_len``."""

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

_META = ("aliases", "params_stated", "params_source", "context_len", "seq_source", "note", "params_tolerance")
"""Row fields about the row, not the model: everything else is a field of the scenario's model section."""

DEFAULT_TOLERANCE = 0.01
"""How far the tool's parameter count may sit from the row's stated count (tests/inputs/test_catalog.py)."""

NEAR_MATCHES = 3
"""Names an unknown-model message suggests."""

SIZE_MATCH = 0.05
"""How close a size appended to a name ("Grok-1 314B") must be to the row's stated count to find the row."""

_NOTE = re.compile(r"\([^()]*\)")
"""A parenthetical note in a name: "(MLPerf, NeMo)", "(recipe proxy, 16 of 64 layers)"."""
_SIZE = re.compile(r"[\s_-]*(\d+(?:\.\d+)?)\s*([mbt])\s*$", re.I)
"""A parameter count at the end of a name: "314B", "1.3b", "1T"."""
_SCALE = {"m": 1e6, "b": 1e9, "t": 1e12}


@dataclass(frozen=True)
class Entry:
    """One catalog row."""

    key: str
    """The row's name in the table (``llama3.1-70b``)."""
    aliases: tuple[str, ...]
    """Other names that find the row (the Hugging Face repository id, other spellings)."""
    model: dict[str, Any]
    """The row's fields in the scenario's model schema, name and source included, no ``seq_len`` (a fresh copy per
    lookup)."""
    params_stated: float
    """Total parameters as ``params_source`` states them."""
    source: str
    """Where the shapes come from (config file, paper table)."""
    params_source: str = ""
    """Where params_stated comes from."""
    context_len: int = 0
    """The context the row's source states (a pre-training length, a final long-context stage or a config's
    maximum: ``seq_source`` says which). Row metadata: never a job's training sequence length."""
    seq_source: str = ""
    """Which context ``context_len`` is, and who states it."""
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
                 params_source=str(row.get("params_source", "")), context_len=int(row.get("context_len", 0)),
                 seq_source=str(row.get("seq_source", "")),
                 note=str(row.get("note", "")).strip(),
                 params_tolerance=float(row.get("params_tolerance", DEFAULT_TOLERANCE)))


def lookup(name: str) -> Entry | None:
    """The row ``name`` finds, or None: a key or an alias in any case or punctuation, else the same without its
    parenthetical notes, else without a size appended at the end where that size is the row's stated count
    (within ``SIZE_MATCH``)."""
    index = _index()
    plain = _NOTE.sub(" ", name)
    key = index.get(normalize(name)) or index.get(normalize(plain))
    size = _SIZE.search(plain)
    if key is None and size:
        stem = index.get(normalize(plain[:size.start()]))
        stated = float(size.group(1)) * _SCALE[size.group(2).lower()]
        if stem is not None and abs(stated / float(_rows()[stem]["params_stated"]) - 1) <= SIZE_MATCH:
            key = stem
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
