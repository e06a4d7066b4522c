"""matrix_end_times: run_graph's end times for flows from a matrix's rows to its columns, links shared on the
matrix of moving pairs (the engine's dense walk) instead of lists of each link's flows."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oracles import engine as oracle
from stepbudget.sim import run_graph
from stepbudget.sim.flows import matrix_end_times, matrix_graph

RTOL = 1e-9
"""Relative tolerance against the Python reference (tests/oracles/engine.py), which sums in another order."""


def _by_run(run, sizes, row_Bps, col_Bps, rtol):
    """End times of the same flows as root transfers of ``run`` (run_graph or the reference), shape of ``sizes``."""
    timeline = run(matrix_graph(sizes), np.concatenate([row_Bps, col_Bps]), finish_rtol=rtol)
    out = np.zeros_like(sizes)
    out[sizes > 0] = timeline.end_s
    return out


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9), st.integers(1, 9), st.integers(0, 2**32 - 1), st.sampled_from([1e-12, 5e-4, 1e-2]))
def test_small_matrices_end_as_on_run_graph_to_the_bit(rows, cols, seed, rtol):
    # the two walks of the water-filling make the same subtractions in the same order: holes and ties included
    rng = np.random.default_rng(seed)
    sizes = rng.choice([0.0, 1e6, 2e6, 3.5e6, rng.random() * 1e7], size=(rows, cols))
    row_Bps, col_Bps = rng.choice([1e9, 5e9, 5e10], rows), rng.choice([1e9, 5e9, 5e10], cols)
    got = matrix_end_times(sizes, row_Bps, col_Bps, finish_rtol=rtol)
    assert np.array_equal(got, _by_run(run_graph, sizes, row_Bps, col_Bps, rtol))
    if rtol == 1e-12:  # only flows due at the same instant end together: the reference's times, to RTOL
        np.testing.assert_allclose(got, _by_run(oracle.run_graph, sizes, row_Bps, col_Bps, rtol), rtol=RTOL, atol=0)


@pytest.mark.parametrize("rtol", [1e-12, 5e-4])
@pytest.mark.parametrize("kind", ["uniform", "zipf", "holes"])
def test_large_matrices_end_as_on_run_graph_to_the_bit(kind, rtol):
    # 96 x 96 GPUs: 9,120 flows, as many re-sharings as flows end apart
    n = 96
    rng = np.random.default_rng(7)
    sizes = {"uniform": np.full((n, n), 4e6),
             "zipf": 1e6 * rng.zipf(1.6, (n, n)).clip(max=1000).astype(float),
             "holes": np.where(rng.random((n, n)) < 0.3, 0.0, rng.random((n, n)) * 1e7)}[kind]
    np.fill_diagonal(sizes, 0.0)
    row_Bps, col_Bps = np.full(n, 50e9), rng.choice([25e9, 50e9], n)
    got = matrix_end_times(sizes, row_Bps, col_Bps, finish_rtol=rtol)
    assert np.array_equal(got, _by_run(run_graph, sizes, row_Bps, col_Bps, rtol))


def test_a_mid_sized_matrix_ends_as_on_the_reference():
    # 24 x 24 with holes: 414 flows, re-shared as each ends
    rng = np.random.default_rng(3)
    sizes = np.where(rng.random((24, 24)) < 0.25, 0.0, rng.choice([1e6, 2e6, 5e6], (24, 24)))
    row_Bps, col_Bps = np.full(24, 50e9), rng.choice([25e9, 50e9], 24)
    np.testing.assert_allclose(matrix_end_times(sizes, row_Bps, col_Bps, finish_rtol=1e-12),
                               _by_run(oracle.run_graph, sizes, row_Bps, col_Bps, 1e-12), rtol=RTOL, atol=0)


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
