"""Task graphs for the step simulator: compute, transfers and joins with dependencies.

A graph is a frozen dataclass of numpy arrays, one entry per task, so that a
million-task collective is built with array arithmetic; ``TaskGraph.from_tasks``
builds the same thing from a short list of ``Task`` values for hand-written cases.

Naming: a *stream* is a serial FIFO compute resource (a CUDA stream on one GPU);
a *link* is one direction of one wire (a NIC port, an NVLink lane group); a
*transfer* moves ``size_bytes`` over a tuple of links at one rate (a flow).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

import numpy as np
from numpy.typing import DTypeLike

from stepbudget.maxmin import flows_to_csr

__all__ = ["Task", "TaskGraph", "TaskKind", "compute", "join", "transfer"]


class TaskKind(IntEnum):
    """What a task occupies. Stored as int8 in arrays.

    COMPUTE runs for ``duration_s`` on one stream, after the stream's earlier tasks;
    TRANSFER moves ``size_bytes`` over its links, sharing them max-min fairly;
    JOIN takes no time and finishes when its dependencies have (a barrier).
    """

    COMPUTE = 0
    TRANSFER = 1
    JOIN = 2


@dataclass(frozen=True)
class Task:
    """One task, for graphs written by hand; ``deps`` are indices into the task list."""

    name: str
    """Label shown in traces."""
    kind: TaskKind
    """COMPUTE, TRANSFER or JOIN."""
    deps: tuple[int, ...] = ()
    """Tasks that must finish before this one can start (indices into the list)."""
    stream: int = -1
    """Compute stream id (COMPUTE only), 0-based."""
    duration_s: float = 0.0
    """Compute time in seconds (COMPUTE only)."""
    size_bytes: float = 0.0
    """Bytes moved (TRANSFER only)."""
    links: tuple[int, ...] = ()
    """Link ids crossed (TRANSFER only), 0-based."""


def compute(name: str, stream: int, duration_s: float, deps: Sequence[int] = ()) -> Task:
    """A compute task of ``duration_s`` seconds on ``stream``."""
    return Task(name, TaskKind.COMPUTE, tuple(deps), stream=stream, duration_s=duration_s)


def transfer(name: str, size_bytes: float, links: Sequence[int], deps: Sequence[int] = ()) -> Task:
    """A transfer of ``size_bytes`` bytes over the link ids ``links``."""
    return Task(name, TaskKind.TRANSFER, tuple(deps), size_bytes=size_bytes, links=tuple(links))


def join(name: str, deps: Sequence[int] = ()) -> Task:
    """A zero-time barrier that finishes when all of ``deps`` have."""
    return Task(name, TaskKind.JOIN, tuple(deps))


_DTYPES = {
    "kind": np.int8, "stream": np.int64, "duration_s": np.float64, "size_bytes": np.float64,
    "link_indptr": np.int64, "link_ids": np.int64, "dep_indptr": np.int64, "dep_ids": np.int64,
    "names": str,
}


def _frozen(value: object, dtype: DTypeLike) -> np.ndarray:
    """``value`` as a read-only C-ordered array of ``dtype``: copied only when it is not one already (a view
    otherwise, so that a million-task graph is not copied field by field)."""
    array = np.asarray(value, dtype=dtype, order="C").view()
    array.setflags(write=False)
    return array


@dataclass(frozen=True, eq=False)
class TaskGraph:
    """``T`` tasks as arrays; validated when built.

    Dependencies and links are CSR pairs: task ``i`` depends on
    ``dep_ids[dep_indptr[i]:dep_indptr[i + 1]]`` and crosses
    ``link_ids[link_indptr[i]:link_indptr[i + 1]]``. An array already of its field's dtype is
    not copied: the graph holds a read-only view of it, so do not write to it afterwards.
    """

    kind: np.ndarray
    """Shape ``(T,)``, int8 ``TaskKind`` values."""
    stream: np.ndarray
    """Shape ``(T,)``, int64 stream id for COMPUTE tasks, -1 otherwise."""
    duration_s: np.ndarray
    """Shape ``(T,)``, seconds of compute (0 for other kinds)."""
    size_bytes: np.ndarray
    """Shape ``(T,)``, bytes moved by TRANSFER tasks (0 for other kinds)."""
    link_indptr: np.ndarray
    """Shape ``(T + 1,)``, int64 row pointers into ``link_ids``."""
    link_ids: np.ndarray
    """Shape ``(E,)``, int64 link ids crossed by transfers."""
    dep_indptr: np.ndarray
    """Shape ``(T + 1,)``, int64 row pointers into ``dep_ids``."""
    dep_ids: np.ndarray
    """Shape ``(D,)``, int64 ids of the tasks each task waits for."""
    names: np.ndarray | None = None
    """Shape ``(T,)`` of str, or None to label tasks by kind and index."""

    def __post_init__(self) -> None:
        for field, dtype in _DTYPES.items():
            value = getattr(self, field)
            if value is not None:
                object.__setattr__(self, field, _frozen(value, dtype))
        self._validate()

    def _validate(self) -> None:
        """Every rule over whole arrays (no Python per task); the tasks named only when one is broken."""
        num_tasks = self.kind.size
        for field in ("stream", "duration_s", "size_bytes"):
            if getattr(self, field).shape != (num_tasks,):
                raise ValueError(f"{field} has shape {getattr(self, field).shape}, "
                                 f"expected ({num_tasks},): one entry per task")
        if self.names is not None and self.names.shape != (num_tasks,):
            raise ValueError(f"names has shape {self.names.shape}, expected ({num_tasks},)")
        counts = {}
        for pointer, data in (("link_indptr", "link_ids"), ("dep_indptr", "dep_ids")):
            indptr, ids = getattr(self, pointer), getattr(self, data)
            if indptr.shape == (num_tasks + 1,):
                counts[data] = np.diff(indptr)  # entries per task
            if (indptr.shape != (num_tasks + 1,) or indptr[0] != 0 or indptr[-1] != ids.size
                    or counts[data].min(initial=0) < 0):
                raise ValueError(f"{pointer} must be non-decreasing, of length {num_tasks + 1}, "
                                 f"from 0 to len({data}) = {ids.size}")
        self._validate_kinds(counts["link_ids"])
        self._validate_deps(counts["dep_ids"])

    def _validate_kinds(self, num_links: np.ndarray) -> None:
        kind = self.kind
        if kind.size and (kind.min() < 0 or kind.max() > 2):
            raise ValueError("kind must hold TaskKind values 0 (COMPUTE), 1 (TRANSFER), 2 (JOIN)")
        is_compute, is_transfer = kind == TaskKind.COMPUTE, kind == TaskKind.TRANSFER
        if is_compute.any():  # (x >= 0) & (x < inf) is a finite x >= 0: NaN fails both comparisons
            d = self.duration_s
            bad = is_compute & ~((self.stream >= 0) & (d >= 0) & (d < np.inf))
            _reject(bad, self, "compute tasks need stream >= 0 and a finite duration_s >= 0")
        if is_transfer.any():
            b = self.size_bytes
            bad = is_transfer & ~((b >= 0) & (b < np.inf) & (num_links > 0))
            _reject(bad, self, "transfers need finite size_bytes >= 0 and at least one link "
                               "(use a join for a local no-op)")
        if not is_transfer.all():  # transfers may cross links; the rest must not
            _reject(~is_transfer & (num_links > 0), self, "only transfers cross links")
        if self.link_ids.size and self.link_ids.min() < 0:
            raise ValueError("link_ids must be >= 0")

    def _validate_deps(self, num_deps: np.ndarray) -> None:
        """Every dependency is another task: in range and not the task itself (whose owner each entry is)."""
        num_tasks, dep_ids = self.kind.size, self.dep_ids
        if not dep_ids.size:
            return
        dep_owner = np.repeat(np.arange(num_tasks), num_deps)
        if dep_ids.min() >= 0 and dep_ids.max() < num_tasks and not np.any(dep_ids == dep_owner):
            return
        bad_dep = (dep_ids < 0) | (dep_ids >= num_tasks) | (dep_ids == dep_owner)
        owner = np.zeros(num_tasks, dtype=bool)
        owner[dep_owner[bad_dep]] = True
        _reject(owner, self, f"dependencies must be other task ids in [0, {num_tasks})")

    @property
    def num_tasks(self) -> int:
        return int(self.kind.size)

    @property
    def num_streams(self) -> int:
        """Streams used: highest stream id + 1."""
        return int(self.stream.max(initial=-1)) + 1

    @property
    def num_links(self) -> int:
        """Links used: highest link id + 1."""
        return int(self.link_ids.max(initial=-1)) + 1

    def label(self, task: int) -> str:
        """Name of one task, or ``kind#index`` when the graph has no names."""
        if self.names is not None:
            return str(self.names[task])
        return f"{TaskKind(int(self.kind[task])).name.lower()}#{task}"

    @classmethod
    def from_tasks(cls, tasks: Sequence[Task]) -> TaskGraph:
        """Pack a list of ``Task`` values; ``deps`` refer to positions in the list."""
        links = flows_to_csr([task.links for task in tasks])
        deps = flows_to_csr([task.deps for task in tasks])
        return cls(
            kind=np.array([task.kind for task in tasks], dtype=np.int8),
            stream=np.array([task.stream for task in tasks], dtype=np.int64),
            duration_s=np.array([task.duration_s for task in tasks], dtype=np.float64),
            size_bytes=np.array([task.size_bytes for task in tasks], dtype=np.float64),
            link_indptr=links.indptr, link_ids=links.link_ids,
            dep_indptr=deps.indptr, dep_ids=deps.link_ids,
            names=np.array([task.name for task in tasks], dtype=str),
        )


def _reject(bad: np.ndarray, graph: TaskGraph, rule: str) -> None:
    """Raise a ValueError naming the first few offending tasks."""
    if np.any(bad):
        first = np.flatnonzero(bad)[:3]
        shown = ", ".join(graph.label(int(i)) for i in first)
        raise ValueError(f"{int(bad.sum())} task(s) break the rule: {rule} (first: {shown})")
