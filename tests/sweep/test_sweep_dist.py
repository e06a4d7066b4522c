"""Sweeps on Dask: the same rows as one process, every point once whatever dies or is interrupted, resumable.

A 2-worker LocalCluster (one per core of CI's machine) is started once for the module; a test that kills one
of its workers leaves the nanny to start another.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from stepbudget import cli
from stepbudget.sim.step import Jitter, monte_carlo, sim_budget
from stepbudget.sweep.dist import full_pipelines, run_sweep
from stepbudget.sweep.grid import load_sweep, points
from stepbudget.sweep.results import MANIFEST, POINTS, read_points

pytest.importorskip("distributed")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sweeps"
SMALL = FIXTURES / "small.yaml"


@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None) \
            as cluster, Client(cluster) as c:
        yield c


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The small sweep run in this process: what every other way of running it must write."""
    out = tmp_path_factory.mktemp("reference") / "out"
    run = run_sweep(load_sweep(SMALL), str(out), workers=0)
    assert run.total == run.written == 9 and run.failed == 3
    return read_points(out).to_pylist()


def _ids(out: Path) -> list[str]:
    return sorted(p.name for p in (out / POINTS).iterdir())


def _manifest(out: Path) -> list[dict]:
    path = out / MANIFEST
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_two_dask_workers_write_what_one_process_writes_row_for_row(client, reference, tmp_path):
    run = run_sweep(load_sweep(SMALL), str(tmp_path / "out"), client=client)
    assert run.where.workers == 2 and run.written == 9 and run.failed == 3
    assert read_points(tmp_path / "out").to_pylist() == reference
    assert len(reference) == 6 * 2 + 3  # six points of two layouts, three failed points of one row
    assert [r["reason"] for r in reference if r["status"] == "failed"] == \
        ["gpus: 100 GPUs do not fill whole nodes of 8; use a multiple of 8"] * 3
    ids = _ids(tmp_path / "out")
    assert ids == sorted(f"{p.id}.parquet" for p in points(load_sweep(SMALL)))
    assert sorted(line["id"] for line in _manifest(tmp_path / "out")) == [i.removesuffix(".parquet") for i in ids]


def test_scheduler_points_the_command_at_a_running_cluster(client, tmp_path):
    # what a user does with a cluster they run (dask scheduler + dask worker): the scheduler's address, nothing else
    budget = FIXTURES / "budget.yaml"
    run_sweep(load_sweep(budget), str(tmp_path / "here"), workers=0)
    result = CliRunner().invoke(cli.app, ["sweep", str(budget), "--out", str(tmp_path / "there"), "--scheduler",
                                          client.scheduler.address, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["where"]["kind"] == "cluster" and doc["where"]["workers"] == 2 and doc["written"] == 4
    assert read_points(tmp_path / "there").to_pylist() == read_points(tmp_path / "here").to_pylist()
    assert client.scheduler_info()["workers"]  # the command closed its own client, not the cluster


def test_a_worker_killed_mid_sweep_loses_and_duplicates_nothing(client, reference, tmp_path):
    out = tmp_path / "out"
    done: dict = {}
    runner = threading.Thread(target=lambda: done.update(run=run_sweep(load_sweep(SMALL), str(out), client=client)))
    runner.start()
    deadline = time.monotonic() + 120
    while not _manifest(out) and time.monotonic() < deadline:
        time.sleep(0.05)
    pids = client.run(os.getpid)
    os.kill(next(iter(pids.values())), signal.SIGKILL)  # mid-sweep: its point is run again elsewhere
    runner.join(timeout=300)
    assert not runner.is_alive()
    assert done["run"].written == 9
    lines = _manifest(out)
    assert len(lines) == len({line["id"] for line in lines}) == 9
    assert read_points(out).to_pylist() == reference
    assert not [p for p in (out / POINTS).iterdir() if p.name.startswith(".")]
    client.wait_for_workers(2, timeout=60)  # the nanny replaced it, for the tests after this one


def _sweep_process(*args: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "stepbudget", "sweep", str(SMALL), *args], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


@pytest.mark.parametrize("sig,workers,code,group", [
    (signal.SIGINT, "0", 130, False),
    (signal.SIGINT, "2", 130, True),  # a terminal's Ctrl-C: every process of the group, Dask's workers too
    (signal.SIGTERM, "1", 128 + signal.SIGTERM, False),
])
def test_an_interrupted_sweep_resumes_to_the_uninterrupted_result(reference, tmp_path, sig, workers, code, group):
    out = tmp_path / "out"
    proc = _sweep_process("--out", str(out), "--workers", workers, cwd=tmp_path)
    deadline = time.monotonic() + 180
    while len(_manifest(out)) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    if group:
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    if workers == "0":  # Dask may still log its own loop's cancellation when interrupted (see the docs)
        assert "Traceback" not in err and "ERROR" not in err, err
    # the point files are what is written (--resume rebuilds the manifest from them): Ctrl-C may land between a
    # file's rename and its manifest line
    written = len([p for p in (out / POINTS).glob("*.parquet") if not p.name.startswith(".")])
    assert 2 <= written < 9, "the sweep ended before it could be interrupted"
    if sig == signal.SIGINT:
        assert f"{written} of 9 points are written" in err and "--resume goes on" in err
    assert not [p for p in (out / POINTS).iterdir() if p.name.startswith(".")]
    # without --resume the folder is refused; with it, the rest run and nothing is written twice
    refused = CliRunner().invoke(cli.app, ["sweep", str(SMALL), "--out", str(out), "--workers", "0"])
    assert refused.exit_code == 2 and "add --resume" in refused.output
    resumed = CliRunner().invoke(cli.app, ["sweep", str(SMALL), "--out", str(out), "--workers", "0", "--resume", "--json"])
    assert resumed.exit_code == 0, resumed.output
    doc = json.loads(resumed.stdout)
    assert doc["before"] == written and doc["before"] + doc["written"] == doc["total"] == 9
    lines = _manifest(out)
    assert len(lines) == len({line["id"] for line in lines}) == 9
    assert read_points(out).to_pylist() == reference
    assert not [p for p in (out / POINTS).iterdir() if p.name.startswith(".")]


def test_a_full_monte_carlo_is_the_same_on_one_process_one_worker_and_two(client):
    from stepbudget.inputs.scenario import load

    sc = load("megascale-175b", ["batch.global_batch_seqs=128", "cluster.gpus=64", "layout.dp=1"])
    jit = Jitter(compute_cv=0.05, link_cv=0.02)
    here = monte_carlo(sim_budget(sc), jit, 6, replicas=3, seed=7, full=True)
    spread = monte_carlo(sim_budget(sc), jit, 6, replicas=3, seed=7, full=True,
                         pipelines=lambda total: full_pipelines(sc, jit, 7, total, workers=2))
    one = full_pipelines(sc, jit, 7, 18, workers=1)
    assert np.array_equal(here.pipeline_s, spread.pipeline_s)
    assert np.array_equal(here.steps_s, spread.steps_s) and here.percentile(99) == spread.percentile(99)
    assert np.array_equal(one + float(sim_budget(sc).step_overhead_s), here.pipeline_s.ravel())
    assert len(set(here.pipeline_s.ravel())) == 18  # each pipeline its own draws


def test_simulate_full_on_workers_prints_what_one_process_prints(tmp_path):
    args = ["simulate", "megascale-175b", "--set", "batch.global_batch_seqs=128", "--set", "cluster.gpus=64",
            "--set", "layout.dp=1", "--jitter", "0.05", "--steps", "4", "--replicas", "2", "--full", "--json"]
    here = CliRunner().invoke(cli.app, args)
    spread = CliRunner().invoke(cli.app, [*args, "--workers", "2"])
    assert here.exit_code == spread.exit_code == 0, spread.output
    a, b = json.loads(here.stdout), json.loads(spread.stdout)
    tail = ("steps", "replicas", "p50_s", "p90_s", "p99_s", "mean_s", "full", "simulated_pipelines", "by_replicas")
    assert {k: a[k] for k in tail} == {k: b[k] for k in tail}
    assert a["full"] is True and a["simulated_pipelines"] == 8 and a["p50_s"] < a["p99_s"]


def test_sweep_report_shows_the_study_and_writes_its_plot(client, reference, tmp_path):
    out = tmp_path / "out"
    run_sweep(load_sweep(SMALL), str(out), client=client)
    result = CliRunner().invoke(cli.app, ["sweep-report", str(out), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["total"] == doc["written"] == 9 and doc["failed"] == 3 and doc["missing_points"] == []
    best = [r for r in reference if r["rank"] in (1, None)]
    assert [p["step_s"] for p in doc["points"]] == [r["step_s"] for r in best]
    ok = [p for p in doc["points"] if p["status"] == "ok"]
    # the front: no point with as few GPUs or fewer is faster than a point on it
    for f in doc["pareto"]:
        assert not [p for p in ok if p["gpus"] <= f["gpus"] and p["step_s"] < f["step_s"]]
    assert {f["gpus"] for f in doc["pareto"]} == {64, 128}
    assert set(doc["columns"]) >= {"step_s", "mfu", "p99_s", "layout"}
    table = CliRunner().invoke(cli.app, ["sweep-report", str(out), "--plot", str(tmp_path / "study.svg")],
                               terminal_width=200)
    assert table.exit_code == 0, table.output
    assert "failed: gpus: 100 GPUs" in table.output and "Pareto front" in table.output
    svg = (tmp_path / "study.svg").read_text()
    assert svg.count("<svg") >= 1 and "Pareto front" in svg


@pytest.mark.parametrize("args,message", [
    (["sweep", str(SMALL)], "--out: give the folder for the results"),
    (["sweep", str(SMALL), "--out", "o", "--workers", "-1"], "--workers: -1 is not a number of worker processes"),
    (["sweep", str(SMALL), "--out", "o", "--workers", "2", "--scheduler", "tcp://127.0.0.1:1"], "--workers: give --workers"),
    (["sweep", str(SMALL), "--out", "o", "--scheduler", "tcp://127.0.0.1:1"], "--scheduler: cannot reach"),
    (["sweep", "nosuch.yaml", "--out", "o"], "sweep: file 'nosuch.yaml' not found"),
    (["sweep-report", "."], "DIR: '.' holds no sweep results"),
    (["simulate", "llama3-405b", "--jitter", "0.1", "--workers", "2"], "--workers: only the full Monte Carlo (--full"),
])
def test_bad_sweep_options_are_one_line(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"stepbudget: error: {message}") and result.output.count("\n") == 1, result.output
    assert not (tmp_path / "o").exists()  # refused before a results folder is made: the fixed command needs no --resume


def test_out_that_holds_other_files_or_is_a_file_is_refused(tmp_path):
    (tmp_path / "mine.txt").write_text("keep me")
    result = CliRunner().invoke(cli.app, ["sweep", str(SMALL), "--out", str(tmp_path), "--workers", "0"])
    assert result.exit_code == 2 and "holds other files" in result.output
    result = CliRunner().invoke(cli.app, ["sweep", str(SMALL), "--out", str(tmp_path / "mine.txt"), "--workers", "0"])
    assert result.exit_code == 2 and "is a file" in result.output
    assert (tmp_path / "mine.txt").read_text() == "keep me"


def test_resume_runs_again_a_point_its_workers_died_on_and_keeps_a_failed_one(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from stepbudget.sweep.point import failed_row
    from stepbudget.sweep.results import schema

    budget = FIXTURES / "budget.yaml"
    out = tmp_path / "out"
    run_sweep(load_sweep(budget), str(out), workers=0)
    want = read_points(out).to_pylist()
    lost, kept = points(load_sweep(budget))[:2]
    for p, reason in ((lost, "worker: KilledWorker: attempted to run it 3 times"), (kept, "no layout fits")):
        row = failed_row(p, reason)
        pq.write_table(pa.Table.from_pylist([row], schema=schema(list(p.values))), out / POINTS / f"{p.id}.parquet")
    lines = [{**line, "status": "failed"} if line["id"] in (lost.id, kept.id) else line for line in _manifest(out)]
    (out / MANIFEST).write_text("".join(json.dumps(line) + "\n" for line in lines))
    again = run_sweep(load_sweep(budget), str(out), workers=0, resume=True)
    assert again.before == 3 and again.written == 1 and again.failed == 1
    rows = read_points(out).to_pylist()
    assert rows[0] == want[0]  # run again: what the first run wrote
    assert rows[1]["status"] == "failed" and rows[1]["reason"] == "no layout fits"
    assert rows[2:] == want[2:]
