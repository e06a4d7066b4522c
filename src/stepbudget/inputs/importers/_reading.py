"""What every importer returns: the fields one config file states, in the scenario's schema, each with the key of
the file that states it, what the file holds that the tool does not use, and what it states badly."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

MAX_LINE = 400
"""Longest problem line: the key, the value as quoted and the fix, on one screen."""

Field = tuple[str, ...]
"""A field's place in the scenario's schema: ``("layout", "pp")``."""


@dataclass(frozen=True)
class Imported:
    """What one config file states."""

    format: str
    """The format read, as messages print it: "Megatron-LM arguments"."""
    values: Mapping[Field, Any]
    """Each field the file states -> its value in the scenario's schema and units."""
    keys: Mapping[Field, str]
    """Each field -> the file's own key (or keys, or how it was derived) that states it: "--num-layers"."""
    framework: str | None = None
    """The recipe (inputs/frameworks/NAME.yaml) the file's format implies: its stack fills what the file leaves
    unstated. None: the format names no framework (a Hugging Face config.json)."""
    ignored: tuple[str, ...] = ()
    """The file's keys the tool reads past: they change no number it computes."""
    problems: tuple[str, ...] = ()
    """One line per key the file states in a way the tool cannot take, naming the key and the fix."""
    base: bool = False
    """The file is a framework's file of defaults that the job's other files override (MaxText's base.yml): where
    another file states a field too, that file wins instead of the two being named as a contradiction."""


@dataclass
class Reading:
    """An importer's notes while it reads one file; ``done`` freezes them into an ``Imported``."""

    format: str
    values: dict[Field, Any] = field(default_factory=dict)
    keys: dict[Field, str] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def put(self, dotted: str, value: Any, key: str) -> None:
        """State the scenario field ``dotted`` ("model.num_layers") as ``value``, read from the file's ``key``."""
        path = tuple(dotted.split("."))
        self.values[path] = value
        self.keys[path] = key

    def has(self, dotted: str) -> bool:
        return tuple(dotted.split(".")) in self.values

    def ignore(self, key: str) -> None:
        """A key read past: it changes nothing the tool computes."""
        if key not in self.ignored:
            self.ignored.append(key)

    def problem(self, key: str, text: str) -> None:
        """``key`` holds something the tool cannot take: ``text`` says what and the fix. A line quoting a long value
        is cut to ``MAX_LINE`` characters, the fix kept at its end."""
        line = f"{key[:80]}: {text}"
        self.problems.append(line if len(line) <= MAX_LINE else f"{line[:MAX_LINE // 2]} ... {line[-MAX_LINE // 3:]}")

    def done(self, framework: str | None = None, base: bool = False) -> Imported:
        return Imported(self.format, dict(self.values), dict(self.keys), framework, tuple(self.ignored),
                        tuple(self.problems), base)


def number(value: Any) -> bool:
    """A real number as a config states it: an int or a float, never a bool (YAML's and JSON's true is no 1)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def integer(value: Any) -> int | None:
    """A count as a config states it (8, "8", 8.0), or None where it is not a whole number (``"auto"``, a shell
    expression left unresolved)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("+").isdigit():
        return int(value.strip())
    return None


def count(r: Reading, key: str, value: Any, least: int = 1) -> int | None:
    """A whole number of at least ``least`` as ``key`` states it, or None with a problem naming the key."""
    n = integer(value)
    if n is None or n < least:
        r.problem(key, f"{value!r} is no count; give a whole number >= {least}")
        return None
    return n


def json_object(text: str) -> dict[str, Any] | None:
    """The JSON object ``text`` holds, or None (not JSON, or not an object)."""
    if not text.lstrip().startswith("{"):
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None
