"""The simulator's inputs are bounded where the arithmetic stays finite: a link rate, jitter, the Monte Carlo draws.
Past a bound: one line naming the option, exit 2; within it: a step that ends, with finite times."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _util import one_line

import stepbudget as sb
from stepbudget.inputs.scenario import ScenarioError
from stepbudget.sim import TaskGraph, run_graph, transfer
from stepbudget.sim import step as sim_step
from stepbudget.sim.step import (MAX_DRAWS, MAX_LINK_RATE, MIN_LINK_RATE, Jitter, check_draws, check_link_rate,
                                 monte_carlo, sim_budget, simulate_step, slowest_of)


@pytest.fixture(scope="module")
def hpn():
    return sim_budget(sb.load("hpn-gpt3-175b"))


# --- the link rate -----------------------------------------------------------------------------------------


def test_a_denormal_link_rate_is_one_line_not_a_stuck_graph():
    line = one_line("simulate", "hpn-gpt3-175b", "--link-rate", "5e-324")
    assert line.startswith("stepbudget: error: --link-rate: 5e-324 is not a scale a link runs at; give 0.001 to 100")


@pytest.mark.parametrize("rate", [5e-324, 1e-300, 9.99e-4, 0.0, -1.0, 100.01, 1e308, float("nan"), float("inf"), True])
def test_the_library_refuses_a_rate_outside_the_bounds(rate):
    with pytest.raises(ScenarioError, match=r"^link_rate: .* give 0\.001 to 100"):
        check_link_rate(rate)


@pytest.mark.parametrize("rate", [MIN_LINK_RATE, MAX_LINK_RATE])
def test_a_rate_at_either_bound_finishes_with_a_finite_step(hpn, rate):
    r = simulate_step(hpn, link_rate=rate)
    assert math.isfinite(r.step_s) and r.step_s > 0
    assert np.all(np.isfinite(r.timeline.end_s))
    assert all(math.isfinite(v) for v in r.exposed_s.values())


@given(rate=st.floats(MIN_LINK_RATE, MAX_LINK_RATE))
@settings(max_examples=6, deadline=None)
def test_any_rate_within_the_bounds_finishes_no_faster_than_full_rate_when_slower(hpn, rate):
    r = simulate_step(hpn, link_rate=rate)
    full = simulate_step(hpn, link_rate=1.0)
    assert math.isfinite(r.step_s)
    assert (r.step_s >= full.step_s * (1 - 1e-9)) if rate <= 1 else (r.step_s <= full.step_s * (1 + 1e-9))


def test_an_underflowing_link_is_named_not_blamed_on_a_cycle():
    graph = TaskGraph.from_tasks([transfer("a", 1e9, [0])])
    with pytest.raises(ValueError, match="underflow"):
        run_graph(graph, np.array([1e-320]))


# --- jitter --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("option, value, flag", [
    ("--jitter", "1e308", "--jitter"), ("--link-jitter", "1e308", "--link-jitter"),
    ("--jitter", "-5e-324", "--jitter"), ("--straggler", "1e308", "--straggler P"),
    ("--straggler", "0.5x1e308", "--straggler SLOWDOWN"), ("--straggler", "0.5x5e-324", "--straggler SLOWDOWN"),
])
def test_extreme_jitter_is_one_line_naming_the_option(option, value, flag):
    assert one_line("simulate", "hpn-gpt3-175b", option, value).startswith(f"stepbudget: error: {flag}: ")


@pytest.mark.parametrize("jitter", [
    Jitter(compute_cv=5e-324), Jitter(link_cv=5e-324), Jitter(compute_cv=9.999), Jitter(link_cv=9.999),
    Jitter(straggler_p=0.999999), Jitter(straggler_p=0.999999, straggler_slowdown=1000.0),
    Jitter(compute_cv=9.999, link_cv=9.999, straggler_p=1.0, straggler_slowdown=1000.0),
])
def test_extreme_jitter_within_the_bounds_gives_finite_steps(hpn, jitter):
    mc = monte_carlo(hpn, jitter, steps=8, replicas=4, samples=2, seed=1)
    assert np.all(np.isfinite(mc.steps_s)) and np.all(mc.steps_s > 0)
    assert math.isfinite(mc.percentile(99))


# --- Monte Carlo draws ----------------------------------------------------------------------------------------


def entry_point_line(monkeypatch, capsys, *args: str) -> str:
    """Run the installed entry point (cli.run) in-process: exit 2 and one stderr line, which is returned."""
    from stepbudget import cli

    monkeypatch.setattr("sys.argv", ["stepbudget", *args])
    with pytest.raises(SystemExit) as done:
        cli.run()
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert done.value.code == 2 and len(err) == 1 and err[0].startswith("stepbudget: error: "), err
    return err[0]


def test_the_command_lines_largest_steps_and_replicas_are_refused_before_simulating(monkeypatch, capsys):
    # it used to draw 1e11 pipelines twice: over an hour
    monkeypatch.setattr(sim_step, "_run", lambda *a: pytest.fail("simulated before checking the draws"))
    line = entry_point_line(monkeypatch, capsys, "simulate", "hpn-gpt3-175b", "--jitter", "0.1", "--steps", "100000",
                            "--replicas", "1000000")
    assert line.startswith("stepbudget: error: --steps x --replicas: 100,000 steps x 1,000,000 replicas")
    assert f"{MAX_DRAWS:,}" in line


def test_monte_carlo_refuses_too_many_draws_before_any_pipeline(hpn, monkeypatch):
    monkeypatch.setattr(sim_step, "_run", lambda *a: pytest.fail("simulated before checking the draws"))
    with pytest.raises(ScenarioError, match=r"^steps x replicas: 2 steps x 134,217,729 replicas"):
        monte_carlo(hpn, Jitter(compute_cv=0.1), steps=2, replicas=MAX_DRAWS // 2 + 1)
    with pytest.raises(ScenarioError, match=r"^replicas: 0 must be a whole number of at least 1"):
        check_draws(1, 0)
    check_draws(1, MAX_DRAWS)
    check_draws(MAX_DRAWS, 1)


def test_many_replicas_are_drawn_in_bounded_blocks(monkeypatch):
    monkeypatch.setattr(sim_step, "_BLOCK", 10)
    pipes = np.array([1.0, 2.0, 3.0, 2.5])
    out = slowest_of(pipes, 25, 7, np.random.default_rng(0))
    assert out.shape == (7,) and np.all(np.isfinite(out))
    band = 0.9 * (np.percentile(pipes, 75) - np.percentile(pipes, 25)) / 1.34 * 4 ** -0.2  # Silverman's, as drawn
    assert np.all(out >= 2.0) and np.all(out <= 3.0 + 6 * band)  # the slowest of 25, within its smoothing band
    # identical pipelines: the slowest of any number of replicas, in any blocks, is that pipeline
    assert np.array_equal(slowest_of(np.full(4, 2.0), 25, 3, np.random.default_rng(0)), np.full(3, 2.0))
