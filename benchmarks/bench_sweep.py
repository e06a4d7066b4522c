"""Sweeps and full Monte Carlo on Dask: points per second by worker count, Dask's cost per task, pipelines per second.

Run: python benchmarks/bench_sweep.py [--quick]   (prints figures; not a test)

1. The shipped example (examples/sweeps/cluster-design.yaml: 16 points, each a layout search and 8 jittered
   simulated steps) run by ``run_sweep`` in this process (workers=0), then on a LocalCluster of 1 and of 2
   single-threaded worker processes, one after another in this run, each into a fresh temporary folder. The wall
   time includes starting and closing the cluster, as ``stepbudget sweep --workers N`` pays it; the cluster's start
   (LocalCluster + Client of N workers, as ``sweep/dist.py`` makes them) and close are timed on their own first,
   best of 2. ``--quick`` runs a smaller sweep derived from the example instead (cluster.gpus 4,096 and 8,192,
   search only, no simulate: 10 points), and shorter runs below, so the script ends in a minute or two.
2. Dask's cost per task: a budget-only sweep (Llama 3 405B, 40 NIC rates, a few milliseconds a point) run in this
   process and through a 1-worker cluster started beforehand (``client=``, so the start is not counted), best of 3
   after a warm-up each, with the two parts of it that stay in this process either way timed apart: resolving the
   grid (``points``) and writing each point's file; and bare ``client.submit`` + ``as_completed`` round trips of a
   function returning its argument against calling it here.
3. ``simulate --full``: every pipeline of a full Monte Carlo of Llama 3 405B (5 % compute jitter) in this process
   (``monte_carlo(full=True)``) and spread by ``full_pipelines`` over clusters of 1 and 2 workers started
   beforehand; steps x replicas are chosen from one pipeline's measured time so the run in this process takes
   about 15 s (3 s with --quick), each cluster's run once on fresh workers and once more on the same ones. The
   spans must equal this process's to the bit, whatever the worker count.

Each worker is a fresh process that imports stepbudget (and loads the compiled engine) in its first task: that is in
the figures of parts 1 and 3's first runs, as it is in a real run. This process holds the scheduler and the client,
resolves the grid and writes each point's Parquet file, so on a 2-core machine 2 workers share the cores with it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import tempfile
import time

import numpy as np
import yaml

import stepbudget as sb
from stepbudget.sim.step import Jitter, jittered_pipeline_s, monte_carlo, sim_budget
from stepbudget.sweep.dist import client_for, full_pipelines, run_sweep
from stepbudget.sweep.grid import load_sweep, points
from stepbudget.sweep.point import evaluate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "sweeps", "cluster-design.yaml")
WORKERS = (1, 2)
NIC_RATES = [f"{100 + 10 * i}Gb/s" for i in range(40)]  # 100 .. 490 Gb/s: a budget-only point each
TRIVIAL_TASKS = 200
MC_PRESET = "llama3-405b"
MC_JITTER = Jitter(compute_cv=0.05)
MC_REPLICAS = 16
MC_SEED = 0


def machine() -> str:
    model = platform.processor() or "?"
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    import dask
    import distributed

    return (f"machine: {os.cpu_count()} CPUs ({model}); Python {platform.python_version()}, dask {dask.__version__}, "
            f"distributed {distributed.__version__}, {platform.system()} {platform.release()}; load average "
            f"{os.getloadavg()[0]:.2f} (other work on the machine slows every figure)")


def write_sweep(folder: str, name: str, doc: dict) -> str:
    path = os.path.join(folder, f"{name}.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(doc, f, sort_keys=False)
    return path


def example_sweep(folder: str, quick: bool) -> str:
    """The shipped example, or with ``quick`` the same at 4,096 and 8,192 GPUs with the search alone."""
    if not quick:
        return EXAMPLE
    with open(EXAMPLE) as f:
        doc = yaml.safe_load(f)
    doc["name"] = "cluster-design-quick"
    doc["axes"]["cluster.gpus"] = [4096, 8192]
    doc["task"].pop("simulate", None)
    return write_sweep(folder, "cluster-design-quick", doc)


def timed_call(fn):
    began = time.perf_counter()
    out = fn()
    return time.perf_counter() - began, out


def cluster_start(workers: int, tries: int = 2) -> tuple[float, float]:
    """Best of ``tries``: seconds to start a LocalCluster + Client of ``workers`` (as ``run_sweep`` makes them)
    and seconds to close them."""
    start = close = float("inf")
    for _ in range(tries):
        cm = client_for(workers, None)
        up, _ = timed_call(cm.__enter__)
        down, _ = timed_call(lambda: cm.__exit__(None, None, None))
        start, close = min(start, up), min(close, down)
    return start, close


def sweep_rates(sweep_path: str) -> None:
    sweep = load_sweep(sweep_path)
    n = len(points(sweep))
    print(f"\n1. sweep {os.path.relpath(sweep_path, ROOT) if sweep_path == EXAMPLE else sweep.name}: {n} points "
          f"(task: {', '.join(k for k, v in sweep.task.model_dump().items() if v is not None) or 'budget'})", flush=True)
    starts = {w: cluster_start(w) for w in WORKERS}
    for w, (up, down) in starts.items():
        print(f"  cluster of {w} worker{'s' if w > 1 else ''}: start {up:.2f} s, close {down:.2f} s (best of 2)", flush=True)
    rates = {}
    for w in (0, *WORKERS):
        with tempfile.TemporaryDirectory() as out:
            wall, run = timed_call(lambda: run_sweep(sweep, os.path.join(out, "results"), workers=w))
        rates[w] = run.written / wall
        label = "in this process" if w == 0 else f"{w} Dask worker{'s' if w > 1 else ''}"
        extra = ""
        if w:
            up, down = starts[w]
            busy = wall - up - down
            extra = (f"; without the cluster's start and close ({up + down:.2f} s) {busy:.1f} s = "
                     f"{run.written / busy:.3f} points/s")
        print(f"  {label:>16}: {run.written} points ({run.failed} failed) in {wall:.1f} s wall = {rates[w]:.3f} "
              f"points/s{extra}", flush=True)
    print(f"  2 workers / 1 worker: {rates[2] / rates[1]:.2f}x; 1 worker / in process: {rates[1] / rates[0]:.2f}x; "
          f"2 workers / in process: {rates[2] / rates[0]:.2f}x")


def best_sweep(sweep, folder: str, tag: str, tries: int = 3, **kw) -> float:
    run_sweep(sweep, os.path.join(folder, f"{tag}-warm"), **kw)  # imports, the worker's first-task costs
    best = float("inf")
    for i in range(tries):
        best = min(best, timed_call(lambda: run_sweep(sweep, os.path.join(folder, f"{tag}-{i}"), **kw))[0])
    return best


def identity(x):
    return x


def round_trips(client) -> tuple[float, float]:
    """Seconds per task: ``TRIVIAL_TASKS`` submits of ``identity`` gathered with as_completed, and the calls here."""
    from distributed import as_completed

    def through_dask() -> None:
        futures = [client.submit(identity, i, pure=False) for i in range(TRIVIAL_TASKS)]
        for f in as_completed(futures):
            f.result()

    def here() -> None:
        for i in range(TRIVIAL_TASKS):
            identity(i)

    through_dask()  # warm-up: the function pickled and cached on the worker
    dask_s = min(timed_call(through_dask)[0] for _ in range(3))
    here_s = min(timed_call(here)[0] for _ in range(3))
    return dask_s / TRIVIAL_TASKS, here_s / TRIVIAL_TASKS


def per_task_overhead(folder: str) -> None:
    doc = {"name": "nic-budget", "base": "llama3-405b", "axes": {"cluster.nic_Bps": NIC_RATES}, "seed": 0}
    sweep = load_sweep(write_sweep(folder, "nic-budget", doc))
    pts = points(sweep)
    n = len(pts)
    print(f"\n2. Dask's cost per task: budget-only sweep of {n} points ({NIC_RATES[0]} .. {NIC_RATES[-1]}, no task)",
          flush=True)
    for p in pts:  # warm-up
        evaluate(p)
    resolve_s = min(timed_call(lambda: points(sweep))[0] for _ in range(3))  # run_sweep does this first, here
    eval_s = min(timed_call(lambda: [evaluate(p) for p in pts])[0] for _ in range(3))
    inproc_s = best_sweep(sweep, folder, "here", workers=0)
    with client_for(1, None) as (client, _):
        dask_s = best_sweep(sweep, folder, "dask", client=client)
        trip_s, call_s = round_trips(client)
    print(f"  resolving the grid (points(), in this process before any point is sent): {resolve_s / n * 1e3:.2f} ms a "
          f"point; evaluate alone: {eval_s / n * 1e3:.2f} ms a point")
    print(f"  run_sweep in this process:  {inproc_s:.3f} s = {inproc_s / n * 1e3:.2f} ms a point (resolve + evaluate + "
          f"the rest, mostly the Parquet file and manifest line: {(inproc_s - resolve_s - eval_s) / n * 1e3:.2f} ms)")
    print(f"  run_sweep, 1 Dask worker:   {dask_s:.3f} s = {dask_s / n * 1e3:.2f} ms a point (cluster started "
          f"beforehand; best of 3 after a warm-up)")
    print(f"  Dask's cost per point: {(dask_s - inproc_s) / n * 1e3:+.2f} ms (the worker evaluates while this process "
          f"writes, so it can be negative)")
    print(f"  bare round trip, {TRIVIAL_TASKS} tasks returning their argument: {trip_s * 1e3:.3f} ms a task through "
          f"submit + as_completed, {call_s * 1e6:.3f} us called here: Dask adds {(trip_s - call_s) * 1e3:.3f} ms a task",
          flush=True)


def full_mc(quick: bool) -> None:
    sc = sb.load(MC_PRESET)
    budget = sim_budget(sc)
    from stepbudget.sim.program import step_program

    prog = step_program(budget)
    jittered_pipeline_s(prog, MC_JITTER, MC_SEED, 0)  # first call: the compiled engine loaded
    one = min(timed_call(lambda i=i: jittered_pipeline_s(prog, MC_JITTER, MC_SEED, i))[0] for i in range(1, 6))
    target = 3.0 if quick else 15.0
    steps = max(2, round(target / (one * MC_REPLICAS)))
    total = steps * MC_REPLICAS
    print(f"\n3. simulate --full: {MC_PRESET}, compute jitter {MC_JITTER.compute_cv:.0%}, one pipeline {one * 1e3:.1f} ms "
          f"-> {steps} steps x {MC_REPLICAS} replicas = {total:,} pipelines (about {total * one:.0f} s in one process)",
          flush=True)

    def run(pipelines=None) -> np.ndarray:
        return monte_carlo(budget, MC_JITTER, steps, replicas=MC_REPLICAS, seed=MC_SEED, full=True,
                           pipelines=pipelines).pipeline_s

    here_s, ref = timed_call(run)
    print(f"  in this process: {here_s:.2f} s = {total / here_s:.1f} pipelines/s", flush=True)
    arrays = {w: spread(w, run, sc, total, here_s, ref) for w in WORKERS}
    same = all(ref.tobytes() == a.tobytes() for a in arrays.values())
    print(f"  identical: {same} (1 worker, 2 workers and this process, bit for bit; {ref.size:,} spans, "
          f"p99 step {np.percentile(ref.max(axis=1), 99) * 1e3:.3f} ms)")


def spread(w: int, run, sc, total: int, here_s: float, ref: np.ndarray) -> np.ndarray:
    """The full Monte Carlo on a cluster of ``w`` workers started beforehand: once on fresh workers, once more on the
    same (imports done, step program built)."""
    cm = client_for(w, None)
    up, (client, _) = timed_call(cm.__enter__)
    try:
        address = client.scheduler.address
        walls, arrays = [], []
        for _ in range(2):
            wall, out = timed_call(lambda: run(lambda n: full_pipelines(sc, MC_JITTER, MC_SEED, n, scheduler=address)))
            walls.append(wall)
            arrays.append(out)
    finally:
        cm.__exit__(None, None, None)
    cold, warm = walls
    print(f"  {w} Dask worker{'s' if w > 1 else ' '}: {cold:.2f} s = {total / cold:.1f} pipelines/s, "
          f"{total / cold / w:.1f} per worker ({total / cold / w / (total / here_s):.2f}x this process's rate); "
          f"again on the same workers {warm:.2f} s = {total / warm:.1f} pipelines/s, {total / warm / w:.1f} per worker; "
          f"cluster start {up:.2f} s before (with it: {total / (cold + up):.1f} pipelines/s); identical to this "
          f"process's: {all(ref.tobytes() == a.tobytes() for a in arrays)}", flush=True)
    return arrays[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a 10-point search-only sweep and short runs (1-2 min)")
    args = parser.parse_args()
    print(machine(), flush=True)
    with tempfile.TemporaryDirectory() as folder:
        sweep_rates(example_sweep(folder, args.quick))
        per_task_overhead(folder)
    full_mc(args.quick)


if __name__ == "__main__":
    main()
