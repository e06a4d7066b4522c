"""FAST schedule: balancing, padding, Birkhoff-von Neumann stages (formulas.md 7.3), and the loops against the
references in tests/oracles/matching.py."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from scipy.optimize import linear_sum_assignment

from stepbudget.a2a.routing import gpu_traffic_matrix, pair_skew_matrix, server_matrix
from stepbudget.a2a.schedule import (
    FastSchedule,
    Matching,
    balance_intra_server,
    bvn_decompose,
    fast_schedule,
    min_stages,
    pad_to_equal_line_sums,
)

from oracles import matching as oracle

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


# ---------------------------------------------------------------- against the references (tests/oracles/matching.py)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 20), seed=st.integers(0, 10**6), top=st.sampled_from([3, 1000, 10**12]),
       bottleneck=st.booleans())
def test_kuhn_stages_follow_the_list_code(n, seed, top, bottleneck):
    """ANY and BOTTLENECK: the loops and the list code they replaced, stage for stage; padding entry for entry."""
    M = np.random.default_rng(seed).integers(0, top, size=(n, n))
    P = pad_to_equal_line_sums(M)
    R = M.tolist()
    lam = oracle.pad(R)
    assert P.tolist() == R
    stages = bvn_decompose(P, Matching.BOTTLENECK if bottleneck else Matching.ANY)
    assert [(p.tolist(), w) for p, w in stages] == oracle.kuhn_bvn(R, lam, bottleneck)


def _stage_costs(P: np.ndarray, stages) -> list[tuple[float, float]]:
    """For each stage: HEAVY's cost of its matching on what is left of ``P``, and scipy's minimum there."""
    R = np.array(P, dtype=np.int64)
    rows = np.arange(R.shape[0])
    out = []
    for perm, w in stages:
        cost = oracle.heavy_cost(R)
        out.append((cost[rows, perm].sum(), cost[rows, linear_sum_assignment(cost)[1]].sum()))
        R[rows, perm] -= w
    return out


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 12), seed=st.integers(0, 10**6), ties=st.booleans(), holes=st.floats(0, 0.6))
def test_every_heavy_stage_is_a_minimum_cost_assignment(n, seed, ties, holes):
    """Jonker-Volgenant with column minima carried over: scipy's optimum at every stage, with ties and holes."""
    rng = np.random.default_rng(seed)
    M = rng.integers(1, 4, size=(n, n)) if ties else rng.integers(1, 10**6, size=(n, n))
    M[rng.random((n, n)) < holes] = 0
    P = pad_to_equal_line_sums(M)
    stages = bvn_decompose(P, Matching.HEAVY)
    assert_valid_decomposition(P, stages)
    for got, best in _stage_costs(P, stages):
        assert np.isfinite(got) and got == pytest.approx(best, rel=1e-12)


HEAVY_STAGES_SLACK = 2
"""HEAVY's stage count may differ from the reference's by this many: both are minimum-cost matchings, but equal
costs (or costs equal to rounding) break apart, and the stages after follow (measured: within 2 on small grids)."""
HEAVY_TIME_RTOL = 0.025
"""The staged pipeline's time with HEAVY's stages and with the reference's: its per-stage latency and scale-up
forwarding follow the stages (measured within 1.1 % on 2-8 servers of 2-8 GPUs, uniform, Zipf and pair skews)."""


def test_heavy_stages_match_scipys_on_tie_free_matrices():
    """No equal costs: the same matchings as scipy's assignment, stage for stage."""
    for seed in range(5):
        P = pad_to_equal_line_sums(np.random.default_rng(seed).integers(1, 10**6, size=(10, 10)))
        stages = bvn_decompose(P, Matching.HEAVY)
        reference = oracle.heavy_bvn(P)
        assert_valid_decomposition(P, stages)
        assert stages[0][0].tolist() == reference[0][0]  # the same optimum on the first stage
        assert abs(len(stages) - len(reference)) <= HEAVY_STAGES_SLACK
        assert sum(w for _, w in stages) == sum(w for _, w in reference) == P[0].sum()


@pytest.mark.parametrize("S", [2, 4, 6])
@pytest.mark.parametrize("G", [4, 8])
@pytest.mark.parametrize("skew", ["uniform", 0.8, 1.5, "pairs"])
def test_heavy_schedule_times_as_the_reference(S, G, skew):
    """Where ties may break apart: both rebuild the padded matrix exactly, within the bound, and take the same
    staged time within HEAVY_TIME_RTOL."""
    from stepbudget.a2a.timing import fast_alltoall_times

    n = S * G
    D = (pair_skew_matrix(n, 1e8, 0.8, rng=S) if skew == "pairs"
         else gpu_traffic_matrix(1024, 4096, n, 4, n, skew=skew, rng=G))
    for unit in (1, 1 << 16, 1 << 20):
        sched = fast_schedule(D, S, G, unit_bytes=unit)
        reference = oracle.heavy_bvn(sched.padded)
        for stages in (list(zip(sched.perms, sched.weights.tolist())), reference):
            assert_valid_decomposition(sched.padded, [(np.asarray(p), w) for p, w in stages])
        assert abs(sched.stages - len(reference)) <= HEAVY_STAGES_SLACK
        perms = np.array([p for p, _ in reference], dtype=np.int64).reshape(-1, S)
        weights = np.array([w for _, w in reference], dtype=np.int64)
        other = FastSchedule(sched.balanced, sched.unit_bytes, sched.padded, perms, weights)
        staged = [fast_alltoall_times(D, S, G, 50e9, 450e9, 5e-6, schedule=s, plain_s=1.0).staged_s
                  for s in (sched, other)]
        assert staged[0] == pytest.approx(staged[1], rel=HEAVY_TIME_RTOL)


def _plain_loops(monkeypatch) -> None:
    """Every compiled loop replaced by the Python it is written in (numba's py_func): as without numba."""
    from stepbudget.a2a import _compiled

    for name, value in vars(_compiled).copy().items():
        if hasattr(value, "py_func"):
            monkeypatch.setattr(_compiled, name, value.py_func)


def test_the_loops_as_plain_python_give_the_same_schedules(monkeypatch):
    """Without numba the same functions run as Python: the same stages, for every matching, whole bytes or not."""
    P = pad_to_equal_line_sums(np.random.default_rng(3).integers(0, 4, size=(12, 12)))  # ties
    D = gpu_traffic_matrix(1024, 4096, 32, 4, 32, skew=0.8, rng=11)
    inputs = (D, D + 0.25, np.asfortranarray(D))  # the loops' row sums, numpy's, and another layout

    def results():
        out = [pad_to_equal_line_sums(P[:, ::-1] // 2).tolist()]
        for matching in Matching:
            out.append([(p.tolist(), w) for p, w in bvn_decompose(P, matching)])
            for A in inputs:
                s = fast_schedule(A, 4, 8, matching=matching, unit_bytes=1000)
                out.append([s.balanced.row_bytes.tolist(), s.padded.tolist(), s.perms.tolist(), s.weights.tolist()])
        out.append(balance_intra_server(D, 4, 8).row_bytes.tolist())
        return out

    compiled = results()
    _plain_loops(monkeypatch)
    assert results() == compiled


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
