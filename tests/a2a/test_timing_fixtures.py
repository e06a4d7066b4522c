"""The all-to-all times against the fixture of the implementation before issue 21 (tests/fixtures/speed/make_a2a.py).

Every number is compared within a stated relative tolerance, never bit for bit: the bound, the FAST pipeline's
time and the rest of ``moe --json`` within ARITHMETIC_RTOL (the same formulas; float sums may reorder), the plain
all-to-all (and the scheduled time where it is sent plain, and the speedup) within PLAIN_GROUP_RTOL (the fixture
holds the fluid reference's plain times, tests/oracles/alltoall.py). Counts, flags and words are compared exactly.
Each test computes only the entry it checks: the inputs are built and the loops loaded once per module, in a
fixture before the first check, and not at collection (in every worker, whether it runs these or not).
"""

import functools
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from oracles.alltoall import PLAIN_GROUP_RTOL

ARITHMETIC_RTOL = 1e-12
"""Numbers the same arithmetic gives: equal to a few ulps (a reordered float sum), far below any change of model."""

FIXTURES = Path(__file__).parents[1] / "fixtures" / "speed"
sys.path.insert(0, str(FIXTURES))
import make_a2a  # noqa: E402 - the fixture's own inputs, so the test recomputes what it saved

SAVED = json.loads((FIXTURES / "a2a" / "times.json").read_text())


@functools.cache
def _cases() -> dict:
    return make_a2a.matrices()


@pytest.fixture(scope="module", autouse=True)
def _inputs_and_loops():
    """Build the inputs and load (or compile) the schedule's loops and the engine, once, before the first check."""
    _cases()
    make_a2a.times_of(np.full((16, 16), 64.0) - np.diag(np.full(16, 64.0)), 2)


def _flat(value, path: str = "") -> dict[str, object]:
    """A JSON value as ``{path: leaf}``; lists by index."""
    if isinstance(value, dict):
        return {k: v for key in value for k, v in _flat(value[key], f"{path}/{key}").items()}
    if isinstance(value, list):
        return {k: v for i, item in enumerate(value) for k, v in _flat(item, f"{path}/{i}").items()}
    return {path: value}


def assert_close(got, want, rtol: dict[str, float]) -> None:
    """Same keys; floats within ``rtol[path]`` (ARITHMETIC_RTOL where not named), everything else equal."""
    got, want = _flat(got), _flat(want)
    assert sorted(got) == sorted(want)
    for key, expected in want.items():
        value = got[key]
        if isinstance(expected, float) and not isinstance(value, bool):
            assert value == pytest.approx(expected, rel=rtol.get(key, ARITHMETIC_RTOL), abs=0), key
        else:
            assert value == expected and isinstance(value, bool) == isinstance(expected, bool), key


def _plain_rtol(times: dict, at: str = "") -> dict[str, float]:
    """The plain time within its grouping; the scheduled one too where it is sent plain (staged, it is exact)."""
    return {f"{at}/plain_s": PLAIN_GROUP_RTOL, f"{at}/speedup": PLAIN_GROUP_RTOL,  # speedup = plain / scheduled
            f"{at}/scheduled_s": PLAIN_GROUP_RTOL if times["sent_plain"] else ARITHMETIC_RTOL}


@pytest.mark.parametrize("name", sorted(SAVED["matrices"]))
def test_matrix_times_match_the_fixture(name):
    want = SAVED["matrices"][name]
    got = make_a2a.times_of(*_cases()[name])
    assert_close(got, want, _plain_rtol(want))
    assert got["scheduled_s"] == min(got["staged_s"], got["plain_s"])  # what the scheduler sends: the faster


@pytest.mark.parametrize("run", SAVED["moe"], ids=lambda r: f"{r['preset']}-{'-'.join(map(str, r['options'].values()))}")
def test_moe_json_matches_the_fixture(run):
    got, want = make_a2a.moe_of(run["preset"], run["options"]), run["json"]
    assert [_speedup_masked(line) for line in got.pop("verdict")] == [_speedup_masked(line) for line in want["verdict"]]
    assert_close(got, _without(want, "verdict"), _plain_rtol(want["alltoall"], "/alltoall"))
    times = got["alltoall"]
    assert times["speedup"] == pytest.approx(times["plain_s"] / times["scheduled_s"], rel=ARITHMETIC_RTOL)


def _without(d: dict, key: str) -> dict:
    return {k: v for k, v in d.items() if k != key}


def _speedup_masked(line: str) -> str:
    """A verdict line with its printed speedup ("(2.68x)") masked: plain moves within its grouping, and 2.675 with it."""
    return re.sub(r"\(\d+\.\d\dx\)", "(x)", line)


def test_assert_close_states_its_tolerance():
    """The comparison itself: within the stated tolerance passes, beyond it fails, words and counts are exact."""
    want = {"a": 1.0, "plain_s": 2.0, "n": 3, "word": "x", "list": [0.5], "flag": False}
    close = {"a": 1.0 + 1e-15, "plain_s": 2.001, "n": 3, "word": "x", "list": [0.5], "flag": False}
    assert_close(close, want, {"/plain_s": 1e-3})
    for bad in ({"a": 1.0 + 1e-9}, {"plain_s": 2.01}, {"n": 4}, {"word": "y"}, {"list": [0.5, 1.0]}, {"flag": 0}):
        with pytest.raises(AssertionError):
            assert_close({**want, **bad}, want, {"/plain_s": 1e-3})
