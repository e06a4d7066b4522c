"""Importers: the configs engineers already have, read into the scenario's schema.

Each module reads one format, found by its content rather than its file name, and exposes ``FORMAT`` (the
format's name in messages), ``detect(text, name) -> bool`` and ``read(text, name) -> Imported`` (_reading.py).
``read_config`` picks the importer; ``merge.py`` lays several files into one job.
"""

from __future__ import annotations

import functools
import importlib
import os
from pathlib import Path
from types import ModuleType

from stepbudget.inputs.errors import OptionError
from stepbudget.inputs.files import read_text
from stepbudget.inputs.importers._reading import Imported

IMPORTERS = ("hf", "deepspeed", "megatron", "bridge", "nemo", "neox", "torchtitan", "maxtext")
"""The importer modules, tried in this order; each ``detect`` is specific enough that at most one claims a file.
They are imported on first use: a job given as a scenario never pays for them."""


@functools.cache
def importers() -> tuple[ModuleType, ...]:
    return tuple(importlib.import_module(f"{__name__}.{name}") for name in IMPORTERS)


def importer_of(text: str, name: str) -> ModuleType | None:
    """The importer whose format ``text`` is written in (``name``: the file's name, for formats that need it)."""
    return next((m for m in importers() if m.detect(text, name)), None)


def formats() -> list[str]:
    return [m.FORMAT for m in importers()]


def read_config(path: str | os.PathLike, what: str = "scenario") -> Imported:
    """What the config file at ``path`` states, or an OptionError naming ``what`` when no importer reads it."""
    text = read_text(path, what)
    found = importer_of(text, Path(path).name)
    if found is None:
        raise OptionError(what, f"{os.fspath(path)!r} is no format stepbudget reads ({', '.join(formats())}, or a "
                                "scenario); check the file")
    return found.read(text, Path(path).name)
