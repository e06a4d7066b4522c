"""matrix_end_times: run_graph's end times for flows from a matrix's rows to its columns, on the dense path."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stepbudget.sim import _core, run_graph
from stepbudget.sim.flows import matrix_end_times, matrix_graph

pytestmark = pytest.mark.skipif(not _core.AVAILABLE, reason="the dense path is compiled (numba)")


def _by_engine(sizes, row_Bps, col_Bps, rtol):
    timeline = run_graph(matrix_graph(sizes), np.concatenate([row_Bps, col_Bps]), engine="compiled", finish_rtol=rtol)
    out = np.zeros_like(sizes)
    out[sizes > 0] = timeline.end_s
    return out


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9), st.integers(1, 9), st.integers(0, 2**32 - 1), st.sampled_from([1e-12, 5e-4, 1e-2]))
def test_small_matrices_end_as_on_the_engine(rows, cols, seed, rtol):
    # below WATERFILL_FLOWS flows both share by the engine's rounds: the same bits, holes and ties included
    rng = np.random.default_rng(seed)
    sizes = rng.choice([0.0, 1e6, 2e6, 3.5e6, rng.random() * 1e7], size=(rows, cols))
    row_Bps, col_Bps = rng.choice([1e9, 5e9, 5e10], rows), rng.choice([1e9, 5e9, 5e10], cols)
    got = matrix_end_times(sizes, row_Bps, col_Bps, finish_rtol=rtol)
    assert np.array_equal(got, _by_engine(sizes, row_Bps, col_Bps, rtol))


@pytest.mark.parametrize("rtol", [1e-12, 5e-4])
@pytest.mark.parametrize("kind", ["uniform", "zipf", "holes"])
def test_large_matrices_end_as_on_the_engine(kind, rtol):
    # 96 x 96 GPUs: 9,120 flows, past the engine's water-filling threshold, then below it as they end
    n = 96
    rng = np.random.default_rng(7)
    sizes = {"uniform": np.full((n, n), 4e6),
             "zipf": 1e6 * rng.zipf(1.6, (n, n)).clip(max=1000).astype(float),
             "holes": np.where(rng.random((n, n)) < 0.3, 0.0, rng.random((n, n)) * 1e7)}[kind]
    np.fill_diagonal(sizes, 0.0)
    assert np.count_nonzero(sizes) >= _core.WATERFILL_FLOWS
    row_Bps, col_Bps = np.full(n, 50e9), rng.choice([25e9, 50e9], n)
    got = matrix_end_times(sizes, row_Bps, col_Bps, finish_rtol=rtol)
    assert np.array_equal(got, _by_engine(sizes, row_Bps, col_Bps, rtol))


def test_one_flow_per_link_ends_at_its_size_over_its_rate():
    got = matrix_end_times(np.diag([1e9, 2e9, 0.0]), np.full(3, 1e9), np.array([1e9, 4e9, 1e9]), finish_rtol=0.0)
    assert got.tolist() == [[1.0, 0, 0], [0, 2.0, 0], [0, 0, 0]]


def test_progress_counts_every_flow_once():
    seen = []
    sizes = np.random.default_rng(1).random((80, 80)) * 1e6
    matrix_end_times(sizes, np.full(80, 1e9), np.full(80, 1e9), finish_rtol=5e-4,
                     progress=lambda ended, flows: seen.append((ended, flows)))
    assert seen[-1] == (6400, 6400) and all(a[0] <= b[0] for a, b in zip(seen, seen[1:]))


@pytest.mark.parametrize(("args", "match"), [
    ((np.ones(3), np.ones(3), np.ones(1)), "size_bytes must be"),
    ((np.ones((2, 2)), np.ones(3), np.ones(2)), "size_bytes must be"),
    ((-np.ones((2, 2)), np.ones(2), np.ones(2)), "finite and >= 0"),
    ((np.ones((2, 2)), np.array([1.0, 0.0]), np.ones(2)), "finite and > 0"),
])
def test_bad_inputs_are_named(args, match):
    with pytest.raises(ValueError, match=match):
        matrix_end_times(*args, finish_rtol=0.0)
