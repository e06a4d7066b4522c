"""Where a sweep's points run: in this process, or on dask.distributed workers.

``run_sweep`` resolves the grid, opens the results folder (``results.py``), skips the points already written,
and hands the rest to a runner. With Dask installed the runner is a ``LocalCluster`` of ``workers`` processes
(one thread each: the model is numpy and numba, and a process per core is what scales) or the cluster whose
scheduler is at ``scheduler``; without Dask, or with ``workers=0``, the points run here, one after another.
Either way each result is written by this process as it arrives, so workers need no shared file system, and
a point is written once whatever Dask retries.

A worker that dies mid-point is replaced by its nanny, and Dask runs the point again elsewhere; after
``distributed.scheduler.allowed-failures`` deaths (3 by default) the point is recorded as failed. Ctrl-C or
SIGTERM stops the run between writes: every point written so far stays, and ``--resume`` goes on.

``full_pipelines`` spreads the pipelines of ``simulate --full`` over the same kind of workers, in slices of
pipeline indices; each is seeded by ``(seed, index)`` alone, so the spans equal one process's to the bit.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from stepbudget.inputs.errors import OptionError
from stepbudget.inputs.scenario import Scenario
from stepbudget.sim.step import Jitter
from stepbudget.sweep.grid import Point, Sweep, points as grid_points
from stepbudget.sweep.point import failed_row, timed
from stepbudget.sweep.results import LOST, open_results

DASHBOARD = "127.0.0.1:8787"
"""Where a local cluster's dashboard listens: this machine only, Dask's usual port (another if it is taken)."""
MAX_WORKERS = 1024


@dataclass(frozen=True)
class Where:
    """Where the points run, for the first line of progress."""

    kind: str
    """"process" (here), "local" (a LocalCluster) or "cluster" (a scheduler's)."""
    workers: int
    dashboard: str | None = None
    why: str | None = None
    """Why the points run here when workers were asked for (Dask missing)."""


@dataclass(frozen=True)
class Tally:
    """A sweep's progress: points done out of the total (those done before included), failures, speed."""

    total: int
    done: int
    before: int
    failed: int
    elapsed_s: float

    @property
    def rate(self) -> float:
        """Points per second in this run."""
        ran = self.done - self.before
        return ran / self.elapsed_s if self.elapsed_s > 0 and ran else 0.0

    @property
    def eta_s(self) -> float | None:
        return (self.total - self.done) / self.rate if self.rate else None


@dataclass(frozen=True)
class SweepRun:
    out: str
    total: int
    before: int
    """Points already written when the run started (``resume``)."""
    written: int
    failed: int
    """Failed points among all written (this run and before)."""
    seconds: float
    where: Where


def dask_installed() -> bool:
    return importlib.util.find_spec("distributed") is not None


def check_workers(workers: int | None, scheduler: str | None) -> None:
    if workers is not None and not 0 <= workers <= MAX_WORKERS:
        raise OptionError("workers", f"{workers} is not a number of worker processes; give 0 (this process) to "
                            f"{MAX_WORKERS}")
    if workers is not None and scheduler is not None:
        raise OptionError("workers", "give --workers (a local cluster) or --scheduler (an existing one), not both")
    if scheduler is not None and not scheduler.strip():
        raise OptionError("scheduler", "an empty address; give the scheduler's, e.g. tcp://10.0.0.5:8786")
    if scheduler is not None and not dask_installed():
        raise OptionError("scheduler", "running on a Dask cluster needs dask.distributed, which is not installed; "
                            "pip install 'stepbudget[dist]' (or '.[dist]' from the repository)")


@contextmanager
def client_for(workers: int | None, scheduler: str | None) -> Iterator[tuple[Any, Where]]:
    """A Dask client and where it runs, or (None, Where("process")) to run here: ``workers=0``, or Dask missing."""
    check_workers(workers, scheduler)
    n = (os.cpu_count() or 1) if workers is None else workers
    if scheduler is None and (n == 0 or not dask_installed()):
        why = None if n == 0 else "dask.distributed is not installed (pip install 'stepbudget[dist]')"
        yield None, Where("process", 1, why=why)
        return
    import dask
    from distributed import Client, LocalCluster

    # a worker that dies is replaced and its task runs again: Dask's log lines about it are not the user's to read
    with dask.config.set({"logging.distributed": "error"}):
        if scheduler is not None:
            reach(scheduler)
            try:
                client = Client(scheduler, timeout="20s")
            except (OSError, TimeoutError, ValueError, TypeError) as e:  # TypeError: tls:// with no TLS settings
                raise OptionError("scheduler", f"cannot reach {scheduler!r} ({_first_line(e)[:120]}); check "
                                    "the address and that the scheduler runs") from None
            with client:
                yield client, Where("cluster", len(client.scheduler_info()["workers"]), client.dashboard_link)
            return
        try:
            with _workers_ignore_ctrl_c():
                cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1",
                                       dashboard_address=DASHBOARD if _has_bokeh() else None,
                                       silence_logs=logging.CRITICAL)  # workers too: their shutdown noise
        except (RuntimeError, OSError, TimeoutError) as e:
            raise OptionError("workers", f"the local Dask cluster did not start ({_first_line(e)[:120]}); "
                                "give --workers 0 to run in this process") from None
        with cluster, Client(cluster) as client:
            try:
                yield client, Where("local", n, client.dashboard_link if _has_bokeh() else None)
            except (KeyboardInterrupt, SystemExit):  # stopped: the cluster closes quietly, its shutdown is not news
                logging.getLogger("distributed").setLevel(logging.CRITICAL)
                raise


def reach(scheduler: str) -> None:
    """Refuse at once a TCP scheduler address nothing listens at: Dask's client would retry a refused
    connection until its 20 s timeout, and a mistyped port is the commonest mistake."""
    import socket
    from urllib.parse import urlsplit

    try:
        where = urlsplit(scheduler if "://" in scheduler else f"tcp://{scheduler}")
        if where.scheme not in ("tcp", "tls") or where.hostname is None or where.port is None:
            return  # ucx, inproc: Dask's own connect says what is wrong
        socket.create_connection((where.hostname, where.port), timeout=5).close()
    except (OSError, ValueError) as e:
        raise OptionError("scheduler", f"cannot reach {scheduler!r} ({_first_line(e)[:120]}); check "
                            "the address and that the scheduler runs") from None


@contextmanager
def _workers_ignore_ctrl_c() -> Iterator[None]:
    """Worker processes started inside ignore SIGINT (an ignored signal stays ignored in a child, and Python then
    installs no handler of its own): a terminal's Ctrl-C reaches every process of the group, and only this one
    should act on it, closing the cluster in order, rather than each worker dying with a traceback."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():  # signal handlers are the main thread's
        yield
        return
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def _first_line(e: BaseException) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0]


def _has_bokeh() -> bool:
    return importlib.util.find_spec("bokeh") is not None


def run_sweep(sweep: Sweep, out: str, *, workers: int | None = None, scheduler: str | None = None,
              resume: bool = False, started: Callable[[Tally, Where], None] | None = None,
              progress: Callable[[Tally], None] | None = None, client: object | None = None) -> SweepRun:
    """Run every point of ``sweep`` not yet in ``out``, writing each as it completes. ``started`` is called
    once the workers are up, ``progress`` after each point. A given Dask ``client`` is used as it is."""
    points = grid_points(sweep)
    if client is None and scheduler is not None:
        reach(scheduler)  # before the results folder is made: a mistyped address leaves nothing to --resume
    results = open_results(out, sweep, points, resume)
    start = time.perf_counter()
    try:
        before = results.done()
        todo = [p for p in points if p.id not in before]
        count = {"done": len(before & {p.id for p in points}), "failed": results.failed(before & {p.id for p in points})}
        first = count["done"]

        def tally() -> Tally:
            return Tally(len(points), count["done"], first, count["failed"], time.perf_counter() - start)

        def record(point: Point, rows: list[dict], seconds: float) -> None:
            if results.write(point, rows, seconds):
                count["done"] += 1
                count["failed"] += rows[0]["status"] == "failed"
            if progress is not None:
                progress(tally())

        ready = [p for p in todo if p.scenario is not None]
        for p in todo:  # a point that does not resolve has its reason already: recorded here, not sent
            if p.scenario is None:
                record(p, [failed_row(p, p.error or "the scenario does not resolve")], 0.0)
        if client is not None:
            where = Where("cluster", len(client.scheduler_info()["workers"]))  # type: ignore[attr-defined]
            if started is not None:
                started(tally(), where)
            _run_dask(client, ready, record)
        else:
            with client_for(workers, scheduler) as (made, where):
                if started is not None:
                    started(tally(), where)
                if made is None:
                    for p in ready:
                        record(p, *timed(p))
                else:
                    _run_dask(made, ready, record)
        return SweepRun(out, len(points), first, count["done"] - first, count["failed"], time.perf_counter() - start,
                        where)
    finally:
        results.close()


def _run_dask(client: Any, todo: list[Point], record: Callable[[Point, list[dict], float], None]) -> None:
    from distributed import as_completed

    by_key = {}
    futures = []
    for p in todo:
        f = client.submit(timed, p, key=f"stepbudget-point-{p.id}", pure=False)
        by_key[f.key] = p
        futures.append(f)
    try:
        for f in as_completed(futures):
            p = by_key[f.key]
            if f.status == "finished":
                rows, seconds = f.result()
            else:  # the point's workers died (KilledWorker) or Dask lost it: recorded, the others go on
                e = f.exception()
                rows, seconds = [failed_row(p, f"{LOST}{type(e).__name__}: {_first_line(e)[:200]}")], 0.0
            record(p, rows, seconds)
            f.release()
    finally:
        client.cancel([f for f in futures if not f.done()])


def full_pipelines(scenario: Scenario, jitter: Jitter, seed: int, total: int, *, contention: bool = True,
                   link_rate: float = 1.0, workers: int | None = None, scheduler: str | None = None,
                   progress: Callable[[int, int], None] | None = None) -> np.ndarray:
    """The spans of pipelines 0 .. ``total`` - 1 of a full Monte Carlo (``sim.step.jittered_pipeline_s``),
    computed on Dask workers in slices; the same array one process computes."""
    with client_for(workers, scheduler) as (client, where):
        if client is None:  # Dask missing or workers=0: the same pipelines, here
            return _slice(scenario, jitter, seed, 0, total, contention, link_rate)
        from distributed import as_completed

        slices = max(1, min(total, where.workers * 8))
        edges = np.linspace(0, total, slices + 1).astype(int)
        out = np.empty(total)
        futures = {client.submit(_slice, scenario, jitter, seed, int(a), int(b), contention, link_rate, pure=False):
                   (int(a), int(b)) for a, b in zip(edges[:-1], edges[1:]) if b > a}
        done = 0
        for f in as_completed(list(futures)):
            a, b = futures[f]
            out[a:b] = f.result()
            done += b - a
            if progress is not None:
                progress(done, total)
        return out


_PROGRAMS: dict[tuple[str, bool], object] = {}
"""The step program each worker built, by scenario and contention: a worker's slices share one."""


def _slice(scenario: Scenario, jitter: Jitter, seed: int, start: int, stop: int, contention: bool,
           link_rate: float) -> np.ndarray:
    from stepbudget.sim.program import step_program
    from stepbudget.sim.step import jittered_pipeline_s, sim_budget

    key = (scenario.model_dump_json(), contention)
    if key not in _PROGRAMS:
        _PROGRAMS.clear()
        _PROGRAMS[key] = step_program(sim_budget(scenario), contention=contention)
    prog = _PROGRAMS[key]
    return np.array([jittered_pipeline_s(prog, jitter, seed, i, link_rate) for i in range(start, stop)])  # type: ignore[arg-type]
