"""The all-to-all times against the fixture of the implementation before issue 21 (tests/fixtures/speed/make_a2a.py).

The bound, the FAST pipeline's time, its stages and whether plain is sent are exact; the plain all-to-all (and
the scheduled time where it is sent plain) within its grouping tolerance (PLAIN_GROUP_RTOL: flows due within
0.1 % of the elapsed time end together).
"""

import json
import re
import sys
from pathlib import Path

import pytest

from stepbudget.a2a.timing import PLAIN_GROUP_RTOL

FIXTURES = Path(__file__).parents[1] / "fixtures" / "speed"
sys.path.insert(0, str(FIXTURES))
import make_a2a  # noqa: E402 - the fixture's own inputs, so the test recomputes what it saved

SAVED = json.loads((FIXTURES / "a2a" / "times.json").read_text())
CASES = make_a2a.matrices()


@pytest.mark.parametrize("name", sorted(SAVED["matrices"]))
def test_matrix_times_match_the_fixture(name):
    D, S = CASES[name]
    got, want = make_a2a.times_of(D, S), SAVED["matrices"][name]
    assert got["plain_s"] == pytest.approx(want["plain_s"], rel=PLAIN_GROUP_RTOL, abs=0)
    assert _without(got, ("plain_s", "scheduled_s")) == pytest.approx(_without(want, ("plain_s", "scheduled_s")),
                                                                      rel=1e-12, abs=0)
    assert got["scheduled_s"] == pytest.approx(want["scheduled_s"], rel=_scheduled_rtol(want), abs=0)


def _scheduled_rtol(times: dict) -> float:
    """Sent plain, the scheduled time is the plain one, within its grouping; staged, it is exact."""
    return PLAIN_GROUP_RTOL if times["sent_plain"] else 1e-12


def _without(d: dict, keys: tuple[str, ...]) -> dict:
    return {k: v for k, v in d.items() if k not in keys}


@pytest.mark.parametrize("run", SAVED["moe"], ids=lambda r: f"{r['preset']}-{'-'.join(map(str, r['options'].values()))}")
def test_moe_json_matches_the_fixture(run):
    got, want = make_a2a.moe_of(run["preset"], run["options"]), run["json"]
    loose = ("plain_s", "speedup", "scheduled_s")  # speedup = plain / scheduled
    for key, rtol in (("plain_s", PLAIN_GROUP_RTOL), ("speedup", PLAIN_GROUP_RTOL),
                      ("scheduled_s", _scheduled_rtol(want["alltoall"]))):
        assert got["alltoall"][key] == pytest.approx(want["alltoall"][key], rel=rtol, abs=0)
    assert _without(got["alltoall"], loose) == pytest.approx(_without(want["alltoall"], loose), rel=1e-12, abs=0)
    assert _without(got, ("alltoall", "verdict")) == _without(want, ("alltoall", "verdict"))
    assert [_speedup_masked(line) for line in got["verdict"]] == [_speedup_masked(line) for line in want["verdict"]]


def _speedup_masked(line: str) -> str:
    """A verdict line with its printed speedup ("(2.68x)") masked: plain moves within its grouping, and 2.675 with it."""
    return re.sub(r"\(\d+\.\d\dx\)", "(x)", line)
