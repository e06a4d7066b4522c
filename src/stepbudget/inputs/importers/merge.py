"""Several config files -> one job: what each states, laid together, each field keeping the file and key it came from.

Files are laid in the order given. Two files that state one field differently contradict each other: both are
named and neither is picked, unless one of them is a framework's file of defaults (MaxText's base.yml), which the
other overrides. Each file's unused keys are listed once as ignored, and what a file states badly is a problem
naming the file and the key.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepbudget.inputs.complete import Stated, dotted
from stepbudget.inputs.importers import read_config
from stepbudget.inputs.importers._reading import Field, Imported
from stepbudget.inputs.recipes import one_framework


DESCRIPTIVE = ("name", "source", "description")
"""Fields that describe rather than size a job: two files that word them differently do not contradict."""


@dataclass(frozen=True)
class ReadFile:
    """One config file as read: its path and what it states."""

    path: str
    imported: Imported

    @property
    def label(self) -> str:
        return Path(self.path).name


@dataclass(frozen=True)
class Merged:
    """What the files state together, and what they say besides."""

    stated: Stated
    files: tuple[ReadFile, ...]
    problems: tuple[str, ...]
    """Contradictions between files and what a file states badly, one line each."""

    @property
    def ignored(self) -> list[tuple[str, tuple[str, ...]]]:
        """(file, its keys read past), for the files that have any."""
        return [(f.label, f.imported.ignored) for f in self.files if f.imported.ignored]


def read_files(paths: Sequence[str | os.PathLike], what: str = "scenario") -> tuple[ReadFile, ...]:
    return tuple(ReadFile(os.fspath(p), read_config(p, what)) for p in paths)


def merge(files: Sequence[ReadFile], under: Stated | None = None) -> Merged:
    """The files' statements laid over ``under`` (a cluster the job runs on, or nothing), in order."""
    stated, problems = under or Stated(), []
    claims: dict[Field, tuple[Any, str, bool]] = {}  # field -> (value, "file key", from a file of defaults)
    frameworks: dict[str, str] = {}
    # a job file that names a catalog model replaces a defaults file's model, as MaxText's model_name loads
    # configs/models/<name>.yml over base.yml; the sequence length stays a run setting
    row_named = any(("model", "catalog") in f.imported.values for f in files if not f.imported.base)
    for f in files:
        problems += [f"{f.label}: {line}" for line in f.imported.problems]
        if f.imported.framework:
            frameworks.setdefault(f.imported.framework, f"{f.label} ({f.imported.format})")
        triples = []
        for path, value in f.imported.values.items():
            if row_named and f.imported.base and path[0] == "model" and path != ("model", "seq_len"):
                continue
            where = f"{f.label} {f.imported.keys.get(path, '')}".strip()
            before = claims.get(path)
            if before is not None and path[-1] in DESCRIPTIVE:
                continue  # two files may name one model differently: the first file's name stands
            if before is not None and before[0] != value and not before[2] and not f.imported.base:
                problems.append(f"{dotted(path)}: {before[1]} gives {before[0]!r}, {where} gives {value!r}; "
                                "make the files agree")
                continue
            if before is not None and (f.imported.base or (before[0] == value and not before[2])):
                continue  # a file of defaults never overrides the job's own; an agreeing one keeps the first's name
            claims[path] = (value, where, f.imported.base)
            triples.append((path, value, f"file {where}"))
        stated = stated.assign_each(triples)
    if frameworks:
        key = one_framework(set(frameworks))
        if key is None:
            named = "; ".join(f"{k} from {w}" for k, w in frameworks.items())
            problems.append(f"framework: the files name frameworks that do not run on each other ({named}); "
                            "give the files of one job")
        else:
            stated = stated.assign([(("framework",), key)], f"file {frameworks[key]}")
    return Merged(stated, tuple(files), tuple(problems))
