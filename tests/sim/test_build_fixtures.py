"""The graph builders against the fixtures of tests/fixtures/speed/make_build.py, first saved from the implementation
before issue 21.

Each case is rebuilt and compared: its discrete arrays (kinds, streams, links, dependencies, names, labels) by
sha256, the same tasks in the same order (the engine breaks ties by task id); its arrays of numbers by sums to
RTOL. The simulated cases are run again on the engine and held to the reference engine's saved timeline: the same
events, span and sums of starts and ends to RTOL.
"""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

FIXTURES = Path(__file__).parents[1] / "fixtures" / "speed"
sys.path.insert(0, str(FIXTURES))
import make_build  # noqa: E402

from stepbudget.sim.collectives import ring_all_reduce  # noqa: E402
from stepbudget.sim.engine import run_graph  # noqa: E402
from stepbudget.sim.program import step_program  # noqa: E402

SAVED = json.loads((FIXTURES / "build" / "graphs.json").read_text())
RTOL = 1e-9
"""Relative tolerance on sums of numbers: a builder or an engine that sums in another order still passes."""


def _held(got: dict, want: dict) -> None:
    """``got`` and ``want`` alike: strings (digests, names) equal, numbers (sums, spans) to RTOL, events equal."""
    assert got.keys() == want.keys()
    for key, value in want.items():
        if isinstance(value, dict):
            _held(got[key], value)
        elif isinstance(value, float):
            assert got[key] == pytest.approx(value, rel=RTOL), key
        else:
            assert got[key] == value, key


@pytest.fixture(scope="module")
def budgets():
    return {}


def _budget(cache, name):
    if name not in cache:
        cache[name] = make_build.load_case(name)
    return cache[name]


@pytest.mark.parametrize("case", sorted(SAVED["programs"]))
def test_the_step_graph_is_the_one_saved(budgets, case):
    name, contention = case.rsplit(" contention=", 1)
    prog = step_program(_budget(budgets, name), contention=contention == "True")
    want = SAVED["programs"][case]
    _held(make_build.program_digest(prog), {k: v for k, v in want.items() if k != "times"})
    if "times" in want:
        _held(make_build.times_summary(run_graph(prog.graph, prog.capacity_Bps)), want["times"])


@pytest.mark.parametrize("case", sorted(SAVED["rings"]))
def test_the_ring_all_reduce_is_the_one_saved(case):
    n, size = case.split()
    g = ring_all_reduce(int(n), float(size))
    want = SAVED["rings"][case]
    _held(make_build.graph_digest(g), {k: v for k, v in want.items() if k != "times"})
    if "times" in want:
        _held(make_build.times_summary(run_graph(g, np.full(int(n), 25e9))), want["times"])
