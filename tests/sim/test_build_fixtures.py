"""The graph builders against the fixtures saved from the implementation before issue 21 (make_build.py).

Each case is rebuilt and every array compared by its sha256: the same tasks, in the same order (the engine breaks
ties by task id), with the same labels. The simulated cases are run again on the Python engine and their start and
end times compared byte for byte.
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
from stepbudget.sim.program import step_program  # noqa: E402

SAVED = json.loads((FIXTURES / "build" / "graphs.json").read_text())


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
    got = make_build.program_digest(prog)
    assert {k: v for k, v in got.items() if k != "times"} == {k: v for k, v in want.items() if k != "times"}
    if "times" in want:
        tl = make_build.python_run(prog.graph, prog.capacity_Bps)
        assert make_build.times_digest(tl) == want["times"]


@pytest.mark.parametrize("case", sorted(SAVED["rings"]))
def test_the_ring_all_reduce_is_the_one_saved(case):
    n, size = case.split()
    g = ring_all_reduce(int(n), float(size))
    want = SAVED["rings"][case]
    assert make_build.graph_digest(g) == {k: v for k, v in want.items() if k != "times"}
    if "times" in want:
        assert make_build.times_digest(make_build.python_run(g, np.full(int(n), 25e9))) == want["times"]
