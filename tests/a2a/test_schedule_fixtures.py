"""FAST schedules against the fixture of the implementation before issue 21 (tests/fixtures/speed/make_schedule.py).

Stage for stage: the same server matrix, balancing, padding, matchings, weights and order, for every
matching; without numba (a fresh interpreter that cannot import it) the same stages too.

Tolerance: none, and stated so. Every field of a schedule is an integer (whole bytes, units, server indices)
from exact integer arithmetic; the only floats behind it are the row sums of the GPU matrix, which are exact
for whole bytes and numpy's own sums otherwise (rounded up to whole bytes). A relative tolerance on a server
index or a stage count has no meaning, so the arrays the fixture keeps whole are compared as arrays (a failure
shows where the stages part) and the rest by their SHA-256 digests. The times these schedules give are
compared within stated tolerances in test_timing_fixtures.py.

Each check times only itself: the inputs are built and the loops loaded (or compiled) once per module, in a
fixture before the first check, and not at collection (in every worker, whether it runs these or not).
"""

import functools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from stepbudget.a2a.schedule import bvn_decompose, fast_schedule, pad_to_equal_line_sums

FIXTURES = Path(__file__).parents[1] / "fixtures" / "speed"
sys.path.insert(0, str(FIXTURES))
import make_schedule  # noqa: E402 - the fixture's own inputs, so the test recomputes what it saved

SAVED = json.loads((FIXTURES / "schedule" / "schedules.json").read_text())


@functools.cache
def _arrays() -> dict[str, np.ndarray]:
    with np.load(FIXTURES / "schedule" / "arrays.npz") as npz:
        return {k: npz[k] for k in npz.files}


@functools.cache
def _cases() -> dict:
    return make_schedule.matrices()


@pytest.fixture(scope="module", autouse=True)
def _inputs_and_loops():
    """Build the inputs and load (or compile) every loop these checks call, once, before the first check."""
    _arrays()
    _cases()
    P = pad_to_equal_line_sums([[1, 2], [3, 0]])
    for matching in ("heavy", "bottleneck", "any"):
        bvn_decompose(P, matching)
        fast_schedule(np.ones((4, 4)), 2, 2, matching=matching)
        fast_schedule(np.full((4, 4), 0.5), 2, 2, matching=matching)  # not whole: numpy's row sums


def _schedule_of(key: str):
    want = SAVED["schedules"][key]
    D = _cases()[want["matrix"]][0]
    assert make_schedule.digest(D.view(np.int64)) == want["D"], "the input matrix changed: not a schedule change"
    return fast_schedule(D, want["servers"], want["gpus_per_server"], matching=want["matching"],
                         unit_bytes=want["unit_bytes"])


@pytest.mark.parametrize("key", sorted(SAVED["schedules"]))
def test_schedule_matches_the_fixture(key):
    want = SAVED["schedules"][key]
    got = _schedule_of(key)
    fields = make_schedule.fields(got)
    kept = _arrays()
    for name in make_schedule.KEPT_WHOLE:  # whole arrays first: a failure shows where the stages part
        if f"{key}/{name}" in kept:
            assert fields[name].tolist() == kept[f"{key}/{name}"].tolist(), name
    assert {k: make_schedule.digest(v) for k, v in fields.items()} == want["digests"]
    assert (got.stages, got.line_sum, got.unit_bytes) == (want["stages"], want["line_sum"], want["unit"])
    assert all(v.dtype == np.int64 for v in fields.values())


@pytest.mark.parametrize("name", sorted(SAVED["decompositions"]))
@pytest.mark.parametrize("matching", ["heavy", "bottleneck", "any"])
def test_decomposition_matches_the_fixture(name, matching):
    kept = _arrays()
    P = pad_to_equal_line_sums(kept[f"small/{name}/M"])
    assert P.tolist() == kept[f"small/{name}/padded"].tolist()
    stages = bvn_decompose(P, matching)
    assert [p.tolist() for p, _ in stages] == kept[f"small/{name}/{matching}/perms"].tolist()
    assert [w for _, w in stages] == kept[f"small/{name}/{matching}/weights"].tolist()


_WITHOUT_NUMBA = """
import sys
sys.modules["numba"] = None  # import numba raises ImportError: the loops run as plain Python
sys.path.insert(0, {fixtures!r})
import make_schedule, json, numpy as np
from stepbudget.a2a import _compiled
from stepbudget.a2a.schedule import fast_schedule
assert not _compiled.AVAILABLE
saved = json.loads(open({saved!r}).read())["schedules"]
cases = make_schedule.matrices()
for key in {keys!r}:
    want = saved[key]
    s = fast_schedule(cases[want["matrix"]][0], want["servers"], want["gpus_per_server"],
                      matching=want["matching"], unit_bytes=want["unit_bytes"])
    got = {{k: make_schedule.digest(v) for k, v in make_schedule.fields(s).items()}}
    assert got == want["digests"], key
print("ok", len({keys!r}))
"""


def test_without_numba_the_same_stages():
    """The loops as plain Python (numba missing) give the same schedules, on the cases up to 4 servers."""
    keys = sorted(k for k, v in SAVED["schedules"].items() if v["servers"] <= 4)
    script = _WITHOUT_NUMBA.format(fixtures=str(FIXTURES), saved=str(FIXTURES / "schedule" / "schedules.json"),
                                   keys=keys)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["ok", str(len(keys))]
