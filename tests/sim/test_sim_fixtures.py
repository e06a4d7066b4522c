"""Simulated steps stay what the Python engine gave before the compiled engine and the faster graph builders
(tests/fixtures/speed/make_sim.py wrote the fixture with 2ef4220's engine, now tests/oracles/engine.py): the same
events, and span and sums of every start and end to RTOL."""

import json
from pathlib import Path

import numpy as np
import pytest

import stepbudget as sb
from stepbudget.sim.collectives import ring_all_reduce
from stepbudget.sim.engine import run_graph
from stepbudget.sim.program import step_program
from stepbudget.sim.step import Jitter, _run, sim_budget

SAVED = json.loads((Path(__file__).parents[1] / "fixtures" / "speed" / "sim" / "steps.json").read_text())
JITTER = Jitter(compute_cv=0.05, link_cv=0.05, straggler_p=0.05, straggler_slowdown=1.5)  # as make_sim.py draws
RTOL = 1e-9
"""Relative tolerance on the span and the sums: an engine that sums its rates in another order still passes."""


def _held(tl, saved: dict) -> None:
    assert tl.engine_events == saved["events"] and tl.start_s.size == saved["tasks"]
    for key, value in (("makespan_s", tl.makespan_s), ("sum_start_s", np.sum(tl.start_s)), ("sum_end_s", np.sum(tl.end_s))):
        assert value == pytest.approx(saved[key], rel=RTOL), key


@pytest.mark.parametrize("name", sb.preset_names())
def test_each_presets_step_is_the_saved_one(name):
    prog = step_program(sim_budget(sb.load(name)))
    _held(run_graph(prog.graph, prog.capacity_Bps), SAVED[name])
    _held(_run(prog, 1.0, JITTER, np.random.default_rng(11)), SAVED[f"{name} jittered"])


@pytest.mark.parametrize("n", [64, 256])
def test_ring_all_reduce_is_the_saved_one(n):
    _held(run_graph(ring_all_reduce(n, 1e9), np.full(n, 50e9)), SAVED[f"ring {n}"])
