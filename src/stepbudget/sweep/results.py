"""A sweep's results folder: one Parquet file per point, a manifest, and nothing half-written.

    DIR/sweep.json          the grid: the sweep file, its axes and task, every point's id and values
    DIR/points/ID.parquet   one point's rows, written to a hidden temporary name and renamed when complete
    DIR/manifest.jsonl      one line per completed point (id, status, seconds), appended after its rename
    DIR/.lock               held while a sweep runs, so two runs never write one folder

A point's file exists whole or not at all (a rename is atomic on one file system), so the files are the truth:
``--resume`` skips every point whose file exists, rebuilds the manifest from them, and removes the temporary
files an interrupted run left; a point recorded as failed because its workers died runs again. A point is
written once: its file name is its id, and a second result for an id already written (a task Dask ran again
after a worker died) is dropped. ``read_points`` reads the folder with
pyarrow, as pandas, polars or duckdb would (``pd.read_parquet("DIR/points")``).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

from stepbudget.inputs.errors import OptionError
from stepbudget.inputs.files import atomic_write
from stepbudget.inputs.scenario import ScenarioError
from stepbudget.sweep.grid import Point, Sweep
from stepbudget.sweep.point import COLUMNS

POINTS, MANIFEST, GRID, LOCK = "points", "manifest.jsonl", "sweep.json", ".lock"
FORMAT = 1
"""Version of the folder's layout, in sweep.json."""
LOST = "worker: "
"""How a failed point's reason starts when Dask lost it (its workers died): such a point runs again on resume."""


def schema(axes: list[str]):
    """The Arrow schema of every point file of a sweep: its axes as text, then ``COLUMNS``."""
    import pyarrow as pa

    kinds = {"string": pa.string(), "int": pa.int64(), "float": pa.float64(), "bool": pa.bool_()}
    return pa.schema([*(pa.field(a, pa.string()) for a in axes), *(pa.field(k, kinds[v[0]]) for k, v in COLUMNS.items())])


class ResultsDir:
    """The results folder of one sweep run: opened (and locked) by ``open_results``."""

    def __init__(self, root: Path, sweep: Sweep, lock_fd: int):
        self.root, self.sweep, self._lock = root, sweep, lock_fd
        self.points = root / POINTS
        self.schema = schema([a.name for a in sweep.axes])

    def done(self) -> set[str]:
        """Ids of the points whose file is complete."""
        return {p.name.removesuffix(".parquet") for p in self.points.glob("*.parquet") if not p.name.startswith(".")}

    def write(self, point: Point, rows: list[dict], seconds: float) -> bool:
        """Publish one point's rows, then its manifest line; False (nothing written) when the point is written
        already. The file is complete and on disk before it gets its name."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        target = self.points / f"{point.id}.parquet"
        if target.exists():
            return False
        table = pa.Table.from_pylist(rows, schema=self.schema)

        def synced(tmp: Path) -> None:  # the rename must never name a file whose bytes a crash could lose
            with open(tmp, "wb") as f:
                pq.write_table(table, f, compression="zstd")
                _sync(f)

        atomic_write(target, synced, "out")
        self._append({"id": point.id, "point": point.index, "status": rows[0]["status"],
                      "seconds": round(seconds, 6), "finished": time.time()})
        return True

    def _append(self, line: dict) -> None:
        with open(self.root / MANIFEST, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")
            _sync(f)

    def failed(self, ids: set[str]) -> int:
        """How many of ``ids`` the manifest has as failed."""
        return sum(1 for line in _lines(self.root / MANIFEST) if line.get("id") in ids and line.get("status") == "failed")

    def reconcile(self) -> None:
        """Remove temporary files left by an interrupted run, and rewrite the manifest from the point files:
        one line per complete file (its old line where there is one), none for a point without a file."""
        for tmp in self.points.glob(".*.partial-*"):
            with contextlib.suppress(OSError):
                tmp.unlink()
        for line in _lines(self.root / MANIFEST):  # a point its workers died on may run where memory allows
            path = self.points / f"{line.get('id')}.parquet"
            if line.get("status") == "failed" and path.is_file() and _first(path, "reason").startswith(LOST):
                path.unlink()
        done = self.done()
        kept: dict[str, str] = {}
        for line in _lines(self.root / MANIFEST):
            ident = line.get("id")
            if ident in done and ident not in kept:
                kept[ident] = json.dumps(line)
        for ident in sorted(done - kept.keys()):  # renamed, then interrupted before its line was appended
            kept[ident] = json.dumps({"id": ident, "status": _first(self.points / f"{ident}.parquet", "status")})
        _replace(self.root / MANIFEST, "".join(v + "\n" for v in kept.values()))

    def close(self) -> None:
        for tmp in self.points.glob(".*.partial-*"):
            with contextlib.suppress(OSError):
                tmp.unlink()
        os.close(self._lock)


def _lines(path: Path) -> Iterator[dict]:
    """The manifest's lines; a line cut short by a crash is skipped."""
    if not path.exists():
        return
    for text in path.read_text(encoding="utf-8", errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            line = json.loads(text)
            if isinstance(line, dict):
                yield line


def _first(path: Path, column: str) -> str:
    """A point file's first row's ``column`` (its status or reason)."""
    import pyarrow.parquet as pq

    return str(pq.read_table(path, columns=[column]).column(column)[0])


def _sync(f) -> None:
    f.flush()
    os.fsync(f.fileno())


def _replace(path: Path, text: str) -> None:
    def synced(tmp: Path) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            _sync(f)

    atomic_write(path, synced, "out")


def grid_document(sweep: Sweep, points: list[Point]) -> dict:
    return {"format": FORMAT, "name": sweep.name, "sweep_file": os.path.abspath(sweep.path), "base": sweep.spec.base,
            "axes": {a.name: list(a.labels) for a in sweep.axes}, "combine": sweep.spec.combine,
            "task": sweep.task.model_dump(mode="json"), "seed": sweep.spec.seed,
            "points": [{"point": p.index, "id": p.id, "values": p.values} for p in points]}


def open_results(out: str | os.PathLike, sweep: Sweep, points: list[Point], resume: bool) -> ResultsDir:
    """The results folder ``out``, locked for this run: new (or empty), or with ``resume`` one a sweep wrote
    before. ScenarioError naming ``out`` when it holds another sweep's results without ``resume``, holds other
    files, or another run holds it."""
    root = Path(out)
    try:
        if root.exists() and not root.is_dir():
            raise OptionError("out", f"{str(root)!r} is a file; give a folder for the results")
        had_grid = (root / GRID).exists()
        if root.exists() and not had_grid and any(p.name != LOCK for p in root.iterdir()):
            raise OptionError("out", f"{str(root)!r} holds other files; give a new or empty folder for the results")
        if had_grid and not resume:
            raise OptionError("out", f"{str(root)!r} holds a sweep's results already; add --resume to go on with it, "
                                "or give a new folder")
        (root / POINTS).mkdir(parents=True, exist_ok=True)
        fd = os.open(root / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise OptionError("out", f"cannot use {str(root)!r} ({e.strerror or e}); choose a writable folder") from None
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except ImportError:  # no flock (Windows): one run at a time is the user's to keep
        pass
    except OSError:
        os.close(fd)
        raise OptionError("out", f"another sweep is writing {str(root)!r}; wait for it to end or give another folder") \
            from None
    results = ResultsDir(root, sweep, fd)
    try:
        results.reconcile()
        _replace(root / GRID, json.dumps(grid_document(sweep, points), indent=1) + "\n")
    except OSError as e:
        results.close()
        raise OptionError("out", f"cannot write in {str(root)!r} ({e.strerror or e}); choose a writable folder") \
            from None
    return results


def read_grid(out: str | os.PathLike) -> dict:
    """The sweep.json of a results folder; ScenarioError naming the folder when it is not one."""
    path = Path(out) / GRID
    if not path.is_file():
        raise ScenarioError(f"DIR: {str(out)!r} holds no sweep results (no {GRID}); give the folder `stepbudget sweep "
                            "--out` wrote")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ScenarioError(f"DIR: {str(path)!r} cannot be read ({e}); give the folder `stepbudget sweep --out` wrote") \
            from None


def written_points(out: str | os.PathLike) -> int:
    """How many of the grid's points have their file complete in ``out``: what an interrupted run leaves."""
    ids = {p["id"] for p in read_grid(out)["points"]}
    return sum(1 for p in (Path(out) / POINTS).glob("*.parquet") if p.name.removesuffix(".parquet") in ids)


def read_points(out: str | os.PathLike):
    """Every complete point's rows as one Arrow table (the grid's points only), sorted by point and rank."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    grid = read_grid(out)
    ids = {p["id"] for p in grid["points"]}
    files = sorted(p for p in (Path(out) / POINTS).glob("*.parquet")
                   if not p.name.startswith(".") and p.name.removesuffix(".parquet") in ids)
    want = schema(list(grid["axes"]))
    tables = [pq.read_table(f, schema=want) for f in files]
    table = pa.concat_tables(tables) if tables else want.empty_table()
    return table.sort_by([("point", "ascending"), ("rank", "ascending")])
