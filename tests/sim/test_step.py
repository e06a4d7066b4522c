"""The step simulator against the budget, Animation 5.1's half-rate link, jitter tails, traces, CLI."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

import stepbudget as sb
from stepbudget.cli import app
from stepbudget.enums import Axis
from stepbudget.sim.graph import TaskKind
from stepbudget.sim.program import step_program
from stepbudget.sim.step import Jitter, monte_carlo, sim_budget, simulate_step, slowest_of
from stepbudget.wire import wire_of

from _util import ONE_GPU_DDP


@pytest.fixture(scope="module")
def budgets():
    return {name: sim_budget(sb.load(name)) for name in sb.preset_names()}


@pytest.mark.parametrize("name", sb.preset_names())
def test_without_jitter_or_contention_the_simulation_is_the_budget(budgets, name):
    b = budgets[name]
    r = simulate_step(b, contention=False)
    assert r.step_s == pytest.approx(float(b.step_s), rel=0.01)


def test_sharing_the_nic_never_makes_a_step_faster(budgets):
    for name in ("llama3-405b", "hpn-gpt3-175b"):
        alone = simulate_step(budgets[name], contention=False).step_s
        shared = simulate_step(budgets[name], contention=True).step_s
        assert shared >= alone * (1 - 1e-9)


def test_the_schedule_runs_task_by_task(budgets):
    b = budgets["llama3-405b"]  # interleaved 1F1B, p = 16, v = 4, m = 16
    prog = step_program(b)
    assert not prog.closed_form_bubble
    compute = prog.graph.kind == TaskKind.COMPUTE
    layers = 2  # 8 layer slots per stage, 4 chunks
    assert np.count_nonzero(compute & (prog.role == "fwd")) == 16 * 16 * 4 * layers
    assert np.count_nonzero(compute & (prog.role == "bwd")) == 16 * 16 * 4 * layers
    assert np.count_nonzero(prog.dim == "pp") == 2 * 16 * (16 * 4 - 1)  # every virtual-stage boundary, both ways
    assert step_program(budgets["deepseek-v3"]).closed_form_bubble  # DualPipe: the closed form


def test_1f1b_bubble_emerges_from_the_dependencies():
    # 1F1B without exchanges: (p - 1)(t_f + t_b) of idle on top of m (t_f + t_b)
    sc = sb.load("hpn-gpt3-175b", ["layout.tp=1", "layout.pp=8", "layout.dp=4096", "cluster.gpus=32768",
                                   "batch.global_batch_seqs=32768", "cluster.nic_Bps=1e15", "cluster.nvlink_Bps=1e15",
                                   "cluster.nic_latency_s=0", "cluster.nvlink_latency_s=0"])
    b = sim_budget(sc)
    r = simulate_step(b, contention=False)
    m, per_mb = 8, float(b.compute_s - b.plan.optimizer_s) / 8
    assert r.step_s == pytest.approx(per_mb * (m + 7) + float(b.plan.optimizer_s), rel=1e-3)


def _animation_5_1(rate: float):
    # one GPU's step (no pipeline), a gradient bucket per few layers, DP behind backward (Animation 5.1's old job)
    sc = sb.load("llama3-405b", list(ONE_GPU_DDP))
    b = sim_budget(sc)
    return b, simulate_step(b, link_rate=rate)


def test_a_parameter_gather_is_due_at_the_first_layer_that_waits_for_it():
    sc = sb.load("llama3-405b", [s.replace("layout.dp_kind=ddp", "layout.dp_kind=zero1") for s in ONE_GPU_DDP])
    prog = step_program(sim_budget(sc))
    g = prog.graph
    for t in np.flatnonzero(prog.role == "gather"):
        due = int(prog.deadline[t])
        waiting = [x for x in np.flatnonzero(prog.role == "fwd")
                   if t in g.dep_ids[g.dep_indptr[x]:g.dep_indptr[x + 1]]]
        assert due == min(waiting)  # the first forward layer of the bucket, not its last


def test_animation_5_1_half_rate_turns_hidden_dp_into_exposed_and_names_the_late_buckets():
    b, _ = _animation_5_1(1.0)
    backward = float(b.compute_s - b.plan.optimizer_s) * 2 / 3
    reduce = sum(float(x.time_s) for x in b.exchanges if x.dim == Axis.DP and x.collective.value != "all-gather")
    rate = reduce / (0.7 * backward)  # a link at which the reduce-scatter takes 70 % of the backward
    _, full = _animation_5_1(rate)
    _, half = _animation_5_1(rate / 2)
    late_full = [m for m in full.deadline_misses if m["dim"] == "dp"]
    late_half = [m for m in half.deadline_misses if m["dim"] == "dp"]
    assert half.exposed_s["dp"] > full.exposed_s["dp"] + 0.3 * backward  # 1.4 x backward of buckets: 0.4 exposed
    assert len(late_half) > len(late_full)
    assert all(m["task"].startswith("DP reduce") and m["late_s"] > 0 for m in late_half)


def test_animation_5_1_job_hides_its_buckets_at_full_rate_and_misses_at_half():
    counts = [len(_animation_5_1(rate)[1].deadline_misses) for rate in (1.0, 0.5, 0.25)]
    assert counts[0] == 0 < counts[1] < counts[2]


def test_jitter_tail_grows_with_replicas(budgets):
    b = budgets["hpn-gpt3-175b"]
    mc = monte_carlo(b, Jitter(compute_cv=0.1, link_cv=0.1), steps=400, replicas=1, samples=24, seed=1)
    assert mc.percentile(99) >= mc.percentile(50)
    rng = np.random.default_rng(0)
    tails = [np.percentile(slowest_of(mc.pipeline_s, R, 400, rng), 99) for R in (1, 16, 256)]
    assert tails[0] <= tails[1] <= tails[2]
    assert tails[2] > tails[0]


def test_stragglers_slow_the_step(budgets):
    b = budgets["hpn-gpt3-175b"]
    calm = monte_carlo(b, Jitter(compute_cv=0.01), steps=50, samples=8, seed=2)
    slow = monte_carlo(b, Jitter(compute_cv=0.01, straggler_p=1.0, straggler_slowdown=1.5), steps=50, samples=8, seed=2)
    assert slow.percentile(50) > 1.3 * calm.percentile(50)


def test_jittered_steps_run_at_the_given_link_rate(budgets):
    # the same draws at half the link rate: every pipeline waits at least as long, and the exposed exchanges longer
    b = budgets["hpn-gpt3-175b"]
    full = monte_carlo(b, Jitter(compute_cv=0.01), steps=20, samples=4, seed=3)
    half = monte_carlo(b, Jitter(compute_cv=0.01), steps=20, samples=4, seed=3, link_rate=0.5)
    assert np.all(half.pipeline_s >= full.pipeline_s) and half.pipeline_s.mean() > full.pipeline_s.mean()


def test_wire_bytes_under_the_curve_equal_the_budget_and_the_counter_reads_duty_times_rate():
    b = sb.estimate(sb.derive(sb.load("llama3-405b")))
    w = wire_of(b, steps=5)
    area = float(np.sum(w.rate[:-1] * np.diff(w.t)))
    cl = b.plan.scenario.cluster
    assert area == pytest.approx(5 * float(b.link_bytes()["nic"]) * cl.gpus_per_node / cl.nics_per_node)
    assert float(w.view.counter_Bps) == pytest.approx(float(w.view.duty_cycle) * cl.nic_Bps)


def test_panel_5_6_same_average_different_duty():
    # Panel 5.6: 25 % at 400 Gb/s against 50 % at 200 Gb/s moves the same bytes per step
    from stepbudget.wire import wire_view

    step, bytes_ = 1.0, 0.25 * 50e9
    fast, slow = wire_view(bytes_, step, 50e9), wire_view(bytes_, step, 25e9)
    assert float(fast.duty_cycle) == pytest.approx(0.25) and float(slow.duty_cycle) == pytest.approx(0.5)
    for same in ("average_Bps", "counter_Bps", "buffer_bytes"):  # what an averaged view and the queue see
        assert float(getattr(slow, same)) == pytest.approx(float(getattr(fast, same)))
    assert float(slow.burst_s) == pytest.approx(2 * float(fast.burst_s))  # what the wire sees changes
    assert float(slow.peak_to_average) == pytest.approx(float(fast.peak_to_average) / 2)
    assert float(slow.cv_synchronized) < float(fast.cv_synchronized)


def test_trace_follows_the_trace_event_format(budgets, tmp_path):
    out = tmp_path / "step.json"
    result = CliRunner().invoke(app, ["simulate", "hpn-gpt3-175b", "--trace", str(out)])
    assert result.exit_code == 0, result.output
    events = json.loads(out.read_text())["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert complete and all({"ph", "ts", "dur", "pid", "tid", "name"} <= set(e) for e in complete)
    assert all(e["dur"] >= 0 for e in complete)
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert "stage 0 compute" in names and any("NIC" in n for n in names)


def test_cli_simulate_json():
    r = CliRunner().invoke(app, ["simulate", "hpn-gpt3-175b", "--jitter", "0.05", "--steps", "40", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert {"step_s", "analytical_step_s", "exposed_comm_s", "deadline_misses", "link_utilisation",
            "p50_s", "p90_s", "p99_s"} <= set(d)
    assert set(d["exposed_comm_s"]) == {"tp", "cp", "pp", "dp", "ep"}
    assert d["p50_s"] <= d["p90_s"] <= d["p99_s"]


def test_cli_wire_json_and_plot(tmp_path):
    out = tmp_path / "wire.png"
    r = CliRunner().invoke(app, ["wire", "llama3-405b", "--window", "15s", "--plot", str(out), "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert {"duty_cycle", "burst_s", "line_rate_Bps", "counter_Bps", "buffer_bytes"} <= set(d)
    assert out.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("command, args, fragment", [
    ("simulate", ["--jitter", "-1"], "--jitter"),
    ("simulate", ["--link-rate", "0"], "--link-rate"),
    ("simulate", ["--straggler", "abc"], "--straggler"),
    ("simulate", ["--trace", "t.txt"], "--trace"),
    ("wire", ["--window", "fast"], "--window"),
    ("wire", ["--plot", "w.pdf"], "--plot"),
])
def test_cli_bad_input_is_one_line(command, args, fragment):
    r = CliRunner().invoke(app, [command, "hpn-gpt3-175b", *args])
    assert r.exit_code == 2 and fragment in r.output and "Traceback" not in r.output


@pytest.mark.parametrize("preset", ["llama3-405b", "hpn-gpt3-175b", "megascale-175b", "deepseek-v3",
                                    "megascale-moe-352b"])
def test_a_slower_link_never_misses_fewer_deadlines(preset):
    b = sim_budget(sb.load(preset))
    misses = [len(simulate_step(b, link_rate=rate).deadline_misses) for rate in (1.0, 0.5, 0.25)]
    assert misses == sorted(misses)


@pytest.mark.parametrize("preset", ["megascale-175b", "deepseek-v3", "megascale-moe-352b"])
def test_half_rate_misses_more_deadlines(preset):
    # a miss is a transfer that ends after the compute meant to hide it: a parameter gather its layer's first
    # forward waited for, a bucket or hidden exchange that outlasted its compute (chapter 5.4). Llama 3's
    # interleaving (v = 4) leaves p passes of slack after every chunk but the last, so there only the last
    # chunk's buckets miss, at any rate, and their lateness grows
    b = sim_budget(sb.load(preset))
    full, half = (simulate_step(b, link_rate=rate) for rate in (1.0, 0.5))
    assert len(half.deadline_misses) > len(full.deadline_misses)
    gathers = [m for m in half.deadline_misses if "all-gather" in m["task"]]
    assert all(m["late_s"] > 0 for m in gathers)


@pytest.mark.parametrize("name", sb.preset_names())
def test_program_size_says_about_how_many_tasks_a_step_is(name, budgets):
    from stepbudget.sim.program import program_size

    tasks = step_program(budgets[name]).graph.num_tasks
    assert 0.9 * tasks <= program_size(budgets[name]) <= 1.1 * tasks


def test_monte_carlo_reports_progress_pipeline_by_pipeline(budgets):
    calls = []
    mc = monte_carlo(budgets["hpn-gpt3-175b"], Jitter(compute_cv=0.05), steps=50, samples=6, seed=2,
                     progress=lambda done, total: calls.append((done, total)))
    assert calls == [(i, 6) for i in range(1, 7)] and len(mc.pipeline_s) == 6


@pytest.mark.parametrize("field, value", [("compute_cv", -1.0), ("link_cv", 10.0), ("compute_cv", float("nan")),
                                          ("straggler_p", 1.5), ("straggler_slowdown", 0.9)])
def test_jitter_refuses_what_the_command_line_refuses(field, value):
    from stepbudget.inputs.scenario import ScenarioError

    with pytest.raises(ScenarioError, match=field):
        Jitter(**{field: value})
    with pytest.raises(ScenarioError, match="link_rate"):
        simulate_step(sim_budget(sb.load("hpn-gpt3-175b")), link_rate=0.0)


def test_full_monte_carlo_simulates_every_replica_each_seeded_by_its_index(budgets):
    # pipeline i of a full Monte Carlo depends on (seed, i) alone: simulated alone, out of order, it is the same
    # pipeline, so workers that split the indices give one process's answer; a step is its replicas' slowest
    from stepbudget.sim.step import jittered_pipeline_s

    b = budgets["hpn-gpt3-175b"]
    jit = Jitter(compute_cv=0.05, straggler_p=0.2, straggler_slowdown=1.5)
    mc = monte_carlo(b, jit, steps=5, replicas=3, seed=7, full=True)
    assert mc.full and mc.pipeline_s.shape == (5, 3)
    prog = step_program(b)
    alone = [jittered_pipeline_s(prog, jit, 7, i) + float(b.step_overhead_s) for i in reversed(range(15))][::-1]
    np.testing.assert_array_equal(mc.pipeline_s.ravel(), alone)
    np.testing.assert_array_equal(mc.steps_s, np.max(np.reshape(alone, (5, 3)), axis=1))
    assert np.unique(mc.pipeline_s).size > 1  # the draws differ from pipeline to pipeline


def test_full_tails_are_exact_maxima_and_grow_with_replicas(budgets):
    from stepbudget.sim.step import full_tails

    mc = monte_carlo(budgets["hpn-gpt3-175b"], Jitter(compute_cv=0.1), steps=12, replicas=8, seed=1, full=True)
    tails = full_tails(mc.pipeline_s, [1, 8, 64])
    assert set(tails) == {1, 8}  # no more replicas than were simulated
    assert tails[8]["p50_s"] == pytest.approx(np.percentile(mc.steps_s, 50))
    assert all(tails[1][q] <= tails[8][q] for q in ("p50_s", "p90_s", "p99_s"))


def test_cli_simulate_full_json_and_its_bound():
    r = CliRunner().invoke(app, ["simulate", "hpn-gpt3-175b", "--jitter", "0.05", "--steps", "6", "--replicas", "2",
                                 "--full", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["full"] is True and d["simulated_pipelines"] == 12 and set(d["by_replicas"]) == {"1", "2"}
    r = CliRunner().invoke(app, ["simulate", "hpn-gpt3-175b", "--jitter", "0.05", "--steps", "2000", "--replicas",
                                 "1000", "--full"])
    assert r.exit_code == 2 and "steps x --replicas" in r.output and "--full" in r.output
