"""FAST schedule: balancing, padding, Birkhoff-von Neumann stages (formulas.md 7.3)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from stepbudget.a2a.routing import gpu_traffic_matrix, server_matrix
from stepbudget.a2a.schedule import (
    Matching,
    balance_intra_server,
    bvn_decompose,
    fast_schedule,
    min_stages,
    pad_to_equal_line_sums,
)

WORKED = [[0, 6, 2], [3, 0, 4], [5, 1, 0]]


def rebuild(stages, n):
    out = np.zeros((n, n), dtype=object)  # Python ints: no overflow, exact
    for perm, w in stages:
        out[np.arange(n), perm] += w
    return out


def assert_valid_decomposition(P, stages):
    P = np.asarray(P)
    n = P.shape[0]
    for perm, w in stages:
        assert sorted(perm.tolist()) == list(range(n))  # a permutation
        assert isinstance(w, int) and w > 0
    assert (rebuild(stages, n) == P.astype(object)).all()  # exact
    assert len(stages) <= max(n * n - 2 * n + 2, 0)
    if P.any():
        assert sum(w for _, w in stages) == P[0].sum()
        assert len(stages) >= min_stages(P)


# ---------------------------------------------------------------- worked example


def test_worked_example_padding():
    P = pad_to_equal_line_sums(WORKED)
    assert P.tolist() == [[0, 6, 2], [3, 1, 4], [5, 1, 2]]
    assert (P.sum(axis=0) == 8).all() and (P.sum(axis=1) == 8).all()


@pytest.mark.parametrize("matching", list(Matching))
def test_worked_example_stages(matching):
    P = pad_to_equal_line_sums(WORKED)
    stages = bvn_decompose(P, matching)
    assert_valid_decomposition(P, stages)
    # formulas.md 7.3: pi=[2,1,0] w=1; [1,2,0] 4; [2,0,1] 1; [1,0,2] 2 (order may differ)
    expected = {((2, 1, 0), 1), ((1, 2, 0), 4), ((2, 0, 1), 1), ((1, 0, 2), 2)}
    assert {(tuple(p.tolist()), w) for p, w in stages} == expected


def test_any_matching_follows_fast_code_first_stage():
    first_perm, first_w = bvn_decompose(pad_to_equal_line_sums(WORKED), Matching.ANY)[0]
    assert first_perm.tolist() == [2, 1, 0] and first_w == 1


# ---------------------------------------------------------------- properties

square_ints = st.integers(1, 7).flatmap(
    lambda n: arrays(np.int64, (n, n), elements=st.one_of(st.just(0), st.integers(0, 60), st.integers(0, 10**15)))
)


@settings(max_examples=150, deadline=None)
@given(M=square_ints, matching=st.sampled_from(list(Matching)))
def test_padding_then_bvn_rebuilds_exactly(M, matching):
    P = pad_to_equal_line_sums(M)
    lam = max(M.sum(axis=0).max(), M.sum(axis=1).max())
    assert (P >= M).all()
    assert (P.sum(axis=0) == lam).all() and (P.sum(axis=1) == lam).all()
    assert_valid_decomposition(P, bvn_decompose(P, matching))


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(2, 9),
    hot=st.integers(1, 10**12),
    i=st.integers(0, 8),
    j=st.integers(0, 8),
    zero_row=st.booleans(),
)
def test_adversarial_single_hot_pair_and_zero_rows(n, hot, i, j, zero_row):
    M = np.ones((n, n), dtype=np.int64)
    M[i % n, j % n] = hot
    if zero_row:
        M[(i + 1) % n] = 0
        M[:, (j + 1) % n] = 0
    P = pad_to_equal_line_sums(M)
    for matching in Matching:
        assert_valid_decomposition(P, bvn_decompose(P, matching))


@pytest.mark.parametrize("matching", list(Matching))
def test_all_zero_and_tiny(matching):
    assert bvn_decompose(np.zeros((4, 4), dtype=int), matching) == []
    assert pad_to_equal_line_sums(np.zeros((3, 3))).sum() == 0
    stages = bvn_decompose([[5]], matching)
    assert [(p.tolist(), w) for p, w in stages] == [([0], 5)]


def test_dense_random_matrices_respect_birkhoff_bound():
    rng = np.random.default_rng(0)
    for n in (3, 4, 5, 8, 12):
        for _ in range(5):
            P = pad_to_equal_line_sums(rng.integers(1, 10**9, size=(n, n)))
            for matching in Matching:
                assert_valid_decomposition(P, bvn_decompose(P, matching))


def test_heavy_matchings_need_fewer_stages_than_any():
    """Regression from benchmarks/bench_a2a.py: 16 servers x 8 GPUs, Zipf 0.8, 1 MiB units."""
    D = gpu_traffic_matrix(4096, 4096, 128, 8, 128, skew=0.8, rng=1)
    stages = {m: fast_schedule(D, 16, 8, matching=m, unit_bytes=1 << 20).stages for m in Matching}
    assert stages[Matching.HEAVY] * 2 < stages[Matching.ANY]
    assert stages[Matching.BOTTLENECK] * 2 < stages[Matching.ANY]


# ---------------------------------------------------------------- balancing


@settings(max_examples=60, deadline=None)
@given(S=st.integers(1, 4), G=st.integers(1, 4), data=st.data())
def test_balancing_keeps_bytes_and_hits_targets(S, G, data):
    n = S * G
    D = data.draw(arrays(np.int64, (n, n), elements=st.integers(0, 10**6))).astype(float)
    b = balance_intra_server(D, S, G)
    M = server_matrix(D, S, G)
    tau = b.server_matrix
    assert tau.dtype == np.int64 and not np.diag(tau).any()
    off = ~np.eye(S, dtype=bool)
    assert (tau[off] == np.ceil(M[off] / G)).all()  # tau = ceil(tile total / g)
    assert (b.moved_bytes.sum(axis=1) == b.received_bytes.sum(axis=1)).all()  # nothing lost per pair
    after = b.row_bytes - b.moved_bytes + b.received_bytes
    assert (after <= tau[:, None, :]).all()
    assert (after.sum(axis=1) == b.row_bytes.sum(axis=1)).all()
    assert b.scale_up_send_bytes.sum() == b.scale_up_recv_bytes.sum()
    assert b.scale_up_send_bytes.shape == (n,)


def test_balanced_input_moves_nothing():
    D = np.full((32, 32), 1000.0)
    b = balance_intra_server(D, 4, 8)
    assert (b.server_matrix[~np.eye(4, dtype=bool)] == 8000).all()
    assert not b.scale_up_send_bytes.any() and not b.scale_up_recv_bytes.any()


def test_skewed_tile_is_evened_out():
    D = np.zeros((4, 4))
    D[0, 2] = 90  # GPU 0 of server 0 holds everything for server 1
    D[1, 3] = 10
    b = balance_intra_server(D, 2, 2)
    assert b.server_matrix[0, 1] == 50
    assert b.scale_up_send_bytes.tolist() == [40, 0, 0, 0]
    assert b.scale_up_recv_bytes.tolist() == [0, 40, 0, 0]


# ---------------------------------------------------------------- the schedule


@pytest.mark.parametrize("unit", [1, 1000, 1 << 20])
def test_schedule_covers_the_server_matrix(unit):
    D = gpu_traffic_matrix(1024, 4096, 32, 4, 32, skew=0.8, rng=11)
    sched = fast_schedule(D, 4, 8, unit_bytes=unit)
    tau_units = -(-sched.balanced.server_matrix // unit)
    assert (sched.padded >= tau_units).all()
    assert sched.line_sum == sched.padded.sum(axis=1).max()
    rebuilt = np.zeros((4, 4), dtype=np.int64)
    for perm, w in zip(sched.perms, sched.weights):
        rebuilt[np.arange(4), perm] += w
    assert (rebuilt == sched.padded).all()
    assert sched.stages <= min(4 * 4 - 2 * 4 + 2, sched.line_sum)


def test_one_server_has_no_stages():
    sched = fast_schedule(np.ones((4, 4)), 1, 4)
    assert sched.stages == 0 and sched.perms.shape == (0, 1)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: pad_to_equal_line_sums([[1, 2, 3]]), "square"),
        (lambda: pad_to_equal_line_sums([[1, -2], [0, 0]]), "M"),
        (lambda: pad_to_equal_line_sums([[1.5, 0], [0, 0]]), "whole units"),
        (lambda: bvn_decompose(WORKED), "pad_to_equal_line_sums"),
        (lambda: bvn_decompose(pad_to_equal_line_sums(WORKED), "greedy"), "matching"),
        (lambda: min_stages([[np.nan]]), "P"),
        (lambda: balance_intra_server(np.ones((6, 6)), 4, 2), "servers"),
        (lambda: balance_intra_server(np.full((4, 4), -1.0), 2, 2), "D"),
        (lambda: fast_schedule(np.ones((4, 4)), 2, 2, unit_bytes=0), "unit_bytes"),
        (lambda: fast_schedule(np.ones((4, 4)), 2, 2, unit_bytes=1.5), "unit_bytes"),
        (lambda: fast_schedule(np.full((4, 4), np.nan), 2, 2), "D"),
        (lambda: fast_schedule(np.full((4, 4), np.inf), 2, 2), "D"),
        (lambda: fast_schedule(np.full((4, 4), -1.0), 2, 2), "D"),
        (lambda: fast_schedule(np.ones((4, 4)), 3, 2), "servers"),
        (lambda: fast_schedule(np.ones((4, 4)), 2, 2, matching="greedy"), "matching"),
    ],
)
def test_bad_inputs_name_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 20), seed=st.integers(0, 10**6), top=st.sampled_from([3, 1000, 10**12]),
       bottleneck=st.booleans())
def test_compiled_kuhn_stages_follow_the_list_code(n, seed, top, bottleneck):
    """ANY and BOTTLENECK: the compiled loop and the list code it replaces (kept without numba), stage for stage."""
    from stepbudget.a2a import _compiled, schedule

    M = np.random.default_rng(seed).integers(0, top, size=(n, n))
    P = pad_to_equal_line_sums(M)
    lam = int(P.sum(axis=1)[0])
    lists = schedule._bvn_python(P.tolist(), lam, bottleneck)
    perms, weights = _compiled.kuhn_stages(P.copy(), lam, bottleneck)
    assert [p for p, _ in lists] == perms.tolist()
    assert [w for _, w in lists] == weights.tolist()


def test_without_numba_heavy_runs_the_same_loops(monkeypatch):
    """AVAILABLE False: HEAVY's stages from the same Jonker-Volgenant loops (run here as numba's py_func)."""
    from stepbudget.a2a import _compiled

    P = pad_to_equal_line_sums(np.random.default_rng(3).integers(0, 4, size=(12, 12)))  # ties
    compiled = bvn_decompose(P, Matching.HEAVY)
    monkeypatch.setattr(_compiled, "AVAILABLE", False)
    if hasattr(_compiled.heavy_stages, "py_func"):
        monkeypatch.setattr(_compiled, "heavy_stages", _compiled.heavy_stages.py_func)
    plain = bvn_decompose(P, Matching.HEAVY)
    assert [(p.tolist(), w) for p, w in compiled] == [(p.tolist(), w) for p, w in plain]


@pytest.mark.parametrize(
    "entry", [0.5, 1e-300, 2.0**52, 2.0**52 + 2, 2.0**53, -0.0, 12345.0], ids=repr
)
def test_row_sums_are_numpys_whatever_the_entries(entry):
    """Whole bytes below 2^52 take the compiled sums, the rest numpy's: the same row bytes as numpy either way."""
    from stepbudget.a2a import schedule

    D = np.random.default_rng(5).integers(0, 10**6, size=(16, 16)).astype(float)
    D[3, 9] = entry
    want = schedule._rows_numpy(D, 2, 8)
    assert balance_intra_server(D, 2, 8).row_bytes.tolist() == want.tolist()
    assert fast_schedule(D, 2, 8, unit_bytes=1 << 62).balanced.row_bytes.tolist() == want.tolist()


@pytest.mark.parametrize("G", [1, 3, 4, 6])
def test_any_block_width_and_layout_sums_as_numpy(G):
    """Blocks of any width (halving for powers of 2, a loop otherwise), C or Fortran order: numpy's row bytes."""
    from stepbudget.a2a import schedule

    S = 3
    D = np.random.default_rng(G).integers(0, 10**9, size=(S * G, S * G)).astype(float)
    want = schedule._rows_numpy(D, S, G)
    for layout in (D, np.asfortranarray(D), D.T.copy().T):
        assert balance_intra_server(layout, S, G).row_bytes.tolist() == want.tolist()
    a, b = fast_schedule(D, S, G), fast_schedule(np.asfortranarray(D), S, G)
    assert a.perms.tolist() == b.perms.tolist() and a.weights.tolist() == b.weights.tolist()


def test_a_unit_beyond_int64_makes_each_entry_one_unit():
    D = gpu_traffic_matrix(1024, 4096, 32, 4, 32, skew=0.8, rng=11)
    sched = fast_schedule(D, 4, 8, unit_bytes=1 << 70)
    ones = (sched.balanced.server_matrix > 0).astype(np.int64)  # ceil(tau / unit) for tau < unit
    assert (sched.padded >= ones).all()
    assert sched.line_sum == max(ones.sum(axis=0).max(), ones.sum(axis=1).max())


def test_compiled_heavy_matches_scipy_heavy():
    """The compiled Hungarian finds the same optimum as scipy (ties may break apart): valid, as many stages."""
    from stepbudget.a2a import _compiled

    if not _compiled.AVAILABLE:
        pytest.skip("numba is not installed")
    for seed in range(5):
        P = pad_to_equal_line_sums(np.random.default_rng(seed).integers(0, 10**6, size=(10, 10)))
        stages = bvn_decompose(P, Matching.HEAVY)
        rebuilt = sum(w * np.eye(10, dtype=np.int64)[perm] for perm, w in stages)
        assert np.array_equal(rebuilt, P)
        R = P.tolist()
        lam = int(P.sum(axis=1)[0])
        perms, weights = _compiled.heavy_stages(np.array(R, dtype=np.int64), lam)
        from scipy.optimize import linear_sum_assignment
        with np.errstate(divide="ignore"):
            first = linear_sum_assignment(1.0 / P)[1]
        assert perms[0].tolist() == first.tolist()  # the same optimum on the first, tie-free stage
        assert abs(len(weights) - len(stages)) <= 2 and weights.sum() == lam


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 12), seed=st.integers(0, 10**6), ties=st.booleans(), holes=st.floats(0, 0.6))
def test_compiled_assignment_is_optimal(n, seed, ties, holes):
    """Jonker-Volgenant in _compiled.py reaches scipy's optimum, with ties and entries off the support."""
    from scipy.optimize import linear_sum_assignment

    from stepbudget.a2a import _compiled

    if not _compiled.AVAILABLE:
        pytest.skip("numba is not installed")
    rng = np.random.default_rng(seed)
    c = rng.integers(1, 4, size=(n, n)).astype(float) if ties else rng.random((n, n))
    c[rng.random((n, n)) < holes] = _compiled._OFF
    np.fill_diagonal(c, np.where(np.diag(c) == _compiled._OFF, 1.0, np.diag(c)))  # keep a perfect matching
    x, y = np.empty(n, np.int64), np.empty(n, np.int64)
    work = [np.empty(n), np.empty(n), np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64)]
    _compiled._assignment(c, x, y, *work)
    assert sorted(x.tolist()) == list(range(n))
    best = c[np.arange(n), linear_sum_assignment(c)[1]].sum()
    assert c[np.arange(n), x].sum() == pytest.approx(best, rel=1e-12)
