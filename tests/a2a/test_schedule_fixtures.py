"""FAST schedules against the fixture of the implementation before issue 21 (tests/fixtures/speed/make_schedule.py).

Stage for stage: the same server matrix, balancing, padding, matchings, weights and order, for every
matching; without numba (a fresh interpreter that cannot import it) the same stages too.
"""

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
with np.load(FIXTURES / "schedule" / "arrays.npz") as _npz:
    ARRAYS = {k: _npz[k] for k in _npz.files}
CASES = make_schedule.matrices()


def _schedule_of(key: str):
    want = SAVED["schedules"][key]
    D = CASES[want["matrix"]][0]
    assert make_schedule.digest(D.view(np.int64)) == want["D"], "the input matrix changed: not a schedule change"
    return fast_schedule(D, want["servers"], want["gpus_per_server"], matching=want["matching"],
                         unit_bytes=want["unit_bytes"])


@pytest.mark.parametrize("key", sorted(SAVED["schedules"]))
def test_schedule_matches_the_fixture(key):
    want = SAVED["schedules"][key]
    got = _schedule_of(key)
    fields = make_schedule.fields(got)
    for name in make_schedule.KEPT_WHOLE:  # whole arrays first: a failure shows where the stages part
        if f"{key}/{name}" in ARRAYS:
            assert fields[name].tolist() == ARRAYS[f"{key}/{name}"].tolist(), name
    assert {k: make_schedule.digest(v) for k, v in fields.items()} == want["digests"]
    assert (got.stages, got.line_sum, got.unit_bytes) == (want["stages"], want["line_sum"], want["unit"])
    assert all(v.dtype == np.int64 for v in fields.values())


@pytest.mark.parametrize("name", sorted(SAVED["decompositions"]))
@pytest.mark.parametrize("matching", ["heavy", "bottleneck", "any"])
def test_decomposition_matches_the_fixture(name, matching):
    P = pad_to_equal_line_sums(ARRAYS[f"small/{name}/M"])
    assert P.tolist() == ARRAYS[f"small/{name}/padded"].tolist()
    stages = bvn_decompose(P, matching)
    assert [p.tolist() for p, _ in stages] == ARRAYS[f"small/{name}/{matching}/perms"].tolist()
    assert [w for _, w in stages] == ARRAYS[f"small/{name}/{matching}/weights"].tolist()


_WITHOUT_NUMBA = """
import sys
sys.modules["numba"] = None  # import numba raises ImportError: the plain-Python kernels run
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
    """The pure-Python fallback (numba missing) gives the same schedules, on the cases up to 4 servers."""
    keys = sorted(k for k, v in SAVED["schedules"].items() if v["servers"] <= 4)
    script = _WITHOUT_NUMBA.format(fixtures=str(FIXTURES), saved=str(FIXTURES / "schedule" / "schedules.json"),
                                   keys=keys)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["ok", str(len(keys))]
