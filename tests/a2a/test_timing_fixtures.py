"""The all-to-all times against the fixture of the implementation before issue 21 (tests/fixtures/speed/make_a2a.py).

The bound, the FAST schedule's time and its stages are exact; the plain all-to-all within its grouping
tolerance (PLAIN_GROUP_RTOL: flows due within 0.1 % of the elapsed time end together).
"""

import json
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
    assert got["lower_bound_s"] == pytest.approx(want["lower_bound_s"], rel=1e-12, abs=0)
    assert got["scheduled_s"] == pytest.approx(want["scheduled_s"], rel=1e-12, abs=0)
    assert got["stages"] == want["stages"]


def _without(d: dict, keys: tuple[str, ...]) -> dict:
    return {k: v for k, v in d.items() if k not in keys}


@pytest.mark.parametrize("run", SAVED["moe"], ids=lambda r: f"{r['preset']}-{'-'.join(map(str, r['options'].values()))}")
def test_moe_json_matches_the_fixture(run):
    got, want = make_a2a.moe_of(run["preset"], run["options"]), run["json"]
    loose = ("plain_s", "speedup")  # speedup = plain / scheduled
    for key in loose:
        assert got["alltoall"][key] == pytest.approx(want["alltoall"][key], rel=PLAIN_GROUP_RTOL, abs=0)
    assert _without(got["alltoall"], loose) == pytest.approx(_without(want["alltoall"], loose), rel=1e-12, abs=0)
    assert _without(got, ("alltoall",)) == _without(want, ("alltoall",))
