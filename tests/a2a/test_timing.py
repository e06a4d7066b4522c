"""All-to-all completion times: plain all-to-all on the engine, FAST pipeline, bound; and the fluid reference the
plain all-to-all is checked against (tests/oracles/alltoall.py: max-min sharing, fluid finish times)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from stepbudget.a2a.routing import gpu_traffic_matrix
from stepbudget.a2a.timing import (
    alltoall_times,
    choose_unit_bytes,
    fast_alltoall_s,
    fast_alltoall_times,
    lower_bound_s,
    plain_alltoall_s,
)

from oracles.alltoall import PLAIN_GROUP_RTOL, fluid_finish_times, fluid_plain_alltoall_s, maxmin_rates_padded

B_OUT = 50e9  # 400 Gb/s NIC per GPU
B_UP = 450e9  # NVLink per GPU, one way
HIDDEN = 7168


# ---------------------------------------------------------------- the reference: max-min sharing, fluid


def test_two_equal_flows_on_one_link_get_half_each():
    assert maxmin_rates_padded([[0], [0]], [10.0]).tolist() == [5.0, 5.0]


def test_bottleneck_elsewhere_leaves_the_rest():
    # link 1 (cap 4) is shared by flows 0 and 2; flow 1 then takes what link 0 has left
    assert maxmin_rates_padded([[0, 1], [0], [1, 2]], [10.0, 4.0, 100.0]).tolist() == [2.0, 8.0, 2.0]


def test_incast_receiver_is_shared():
    # 4 senders into receiver link 4; each sender also has a private flow to its own link 5..8
    links = [[i, 4] for i in range(4)] + [[i, 5 + i] for i in range(4)]
    caps = [10.0] * 4 + [8.0] + [100.0] * 4
    r = maxmin_rates_padded(links, caps)
    assert np.allclose(r[:4], 2.0)  # the busy receiver splits 8 four ways
    assert np.allclose(r[4:], 8.0)  # senders' spare capacity goes elsewhere


flow_sets = st.integers(1, 6).flatmap(
    lambda L: st.tuples(
        st.lists(st.lists(st.integers(0, L - 1), min_size=1, max_size=3, unique=True), min_size=1, max_size=12),
        st.lists(st.floats(0.5, 100.0), min_size=L, max_size=L),
    )
)


@settings(max_examples=150, deadline=None)
@given(flows=flow_sets)
def test_maxmin_is_feasible_and_fair(flows):
    links, caps = flows
    caps = np.array(caps)
    r = maxmin_rates_padded(links, caps)
    load = np.zeros(caps.size)
    for f, ls in enumerate(links):
        load[ls] += r[f]
    assert (r > 0).all()
    assert (load <= caps * (1 + 1e-9)).all()  # never above any link capacity
    for f, ls in enumerate(links):  # each flow has a full link where nobody runs faster
        users = [[g for g, other in enumerate(links) if link in other] for link in ls]
        assert any(load[link] >= caps[link] * (1 - 1e-9) and r[f] >= max(r[u]) * (1 - 1e-9)
                   for link, u in zip(ls, users))


def test_fluid_flows_speed_up_when_others_finish():
    t = fluid_finish_times([10.0, 30.0], [[0], [0]], [10.0])
    assert np.allclose(t, [2.0, 4.0])  # 5 B/s each until t = 2, then 10 B/s


# ---------------------------------------------------------------- plain all-to-all and the bound


def test_plain_incast_on_one_receiver():
    S, G = 2, 4
    D = np.zeros((8, 8))
    D[:4, 4] = 1e9  # all four GPUs of server 0 send to GPU 0 of server 1
    assert plain_alltoall_s(D, S, G, B_OUT, B_UP) == pytest.approx(4e9 / B_OUT)
    assert lower_bound_s(D, S, G, B_OUT, B_UP) == pytest.approx(4e9 / (G * B_OUT))
    fast = fast_alltoall_times(D, S, G, B_OUT, B_UP)
    assert fast.inter_s.sum() == pytest.approx(1e9 / B_OUT)  # spread over the 4 rails
    assert fast.total_s < plain_alltoall_s(D, S, G, B_OUT, B_UP) / 2


small_matrices = st.tuples(st.integers(1, 3), st.integers(1, 3)).flatmap(
    lambda sg: st.tuples(
        st.just(sg),
        arrays(np.float64, (sg[0] * sg[1],) * 2, elements=st.one_of(st.just(0.0), st.integers(0, 10**9).map(float))),
    )
)


@settings(max_examples=40, deadline=None)
@given(case=small_matrices, ratio=st.sampled_from([1.0, 9.0, 1e6]), alpha=st.sampled_from([0.0, 5e-6]))
def test_bound_below_plain_and_fast(case, ratio, alpha):
    (S, G), D = case
    bound = lower_bound_s(D, S, G, B_OUT, B_OUT * ratio)
    assert plain_alltoall_s(D, S, G, B_OUT, B_OUT * ratio, alpha) >= bound * (1 - 1e-9)
    assert fast_alltoall_s(D, S, G, B_OUT, B_OUT * ratio, alpha) >= bound * (1 - 1e-9)


@settings(max_examples=40, deadline=None)
@given(case=small_matrices)
def test_fast_meets_the_bound_when_scale_up_is_free(case):
    (S, G), D = case
    bound = lower_bound_s(D, S, G, B_OUT, 1e9 * B_OUT)
    fast = fast_alltoall_s(D, S, G, B_OUT, 1e9 * B_OUT, unit_bytes=1)
    rounding = 2 * S / B_OUT  # ceil to whole bytes per GPU and per server pair
    assert bound * (1 - 1e-12) <= fast <= bound + rounding + 1e-12 * bound  # float sums: 1 ulp


def test_fast_meets_the_bound_on_a_zipf_load():
    D = gpu_traffic_matrix(4096, HIDDEN, 32, 8, 32, skew=0.8, rng=1)
    bound = lower_bound_s(D, 4, 8, B_OUT, 1e9 * B_OUT)
    assert fast_alltoall_s(D, 4, 8, B_OUT, 1e9 * B_OUT) == pytest.approx(bound, rel=1e-9)


def test_alpha_adds_one_latency_per_stage_when_scale_up_is_free():
    D = gpu_traffic_matrix(1024, HIDDEN, 32, 2, 32, skew=0.8, rng=2)
    base = fast_alltoall_times(D, 4, 8, B_OUT, 1e9 * B_OUT, unit_bytes=1)
    late = fast_alltoall_times(D, 4, 8, B_OUT, 1e9 * B_OUT, 10e-6, unit_bytes=1)
    assert late.staged_s == pytest.approx(base.staged_s + late.schedule.stages * 10e-6, rel=1e-6)


# ---------------------------------------------------------------- FAST vs plain (FAST §5 setting: 4 x 8)


def test_balanced_load_fast_within_5_percent_of_plain():
    D = gpu_traffic_matrix(4096, HIDDEN, 32, 8, 32, rng=3)
    t = alltoall_times(D, 4, 8, B_OUT, B_UP)
    assert t.scheduled_s <= 1.05 * t.plain_s
    assert t.plain_s <= 1.05 * t.scheduled_s


@pytest.mark.parametrize(("top_k", "at_least"), [(2, 3.0), (8, 2.0)])
def test_zipf_08_fast_beats_plain(top_k, at_least):
    """Measured (rng=1, alpha 5 us): top-2 3.6x, top-8 2.8x; FAST §5 reports 1.2-1.3x against NCCL."""
    D = gpu_traffic_matrix(4096, HIDDEN, 32, top_k, 32, skew=0.8, rng=1)
    t = alltoall_times(D, 4, 8, B_OUT, B_UP, alpha_s=5e-6)
    assert t.speedup == pytest.approx(t.plain_s / t.scheduled_s)
    assert t.speedup > at_least
    assert t.lower_bound_s <= t.scheduled_s and t.stages >= 3
    assert not t.sent_plain and t.scheduled_s == t.staged_s  # skew: the staged schedule is sent


# ---------------------------------------------------------------- never slower than plain


def test_a_balanced_load_is_sent_plain():
    """Measured (rng=3, alpha 5 us): staged 0.97-0.98x plain, FAST §5's parity on balanced loads."""
    D = gpu_traffic_matrix(4096, HIDDEN, 32, 8, 32, rng=3)
    t = alltoall_times(D, 4, 8, B_OUT, B_UP, alpha_s=5e-6)
    assert t.staged_s > t.plain_s and t.sent_plain
    assert t.scheduled_s == t.plain_s and t.speedup == 1.0


def test_a_hot_server_is_sent_plain_and_a_hot_gpu_staged():
    S, G = 4, 8
    hot_server = np.zeros((S * G, S * G))
    hot_server[G:, :G] = 4e6  # every other server sends everything to server 0: its NICs are the bound either way
    hot_gpu = np.full((S * G, S * G), 1e6)
    hot_gpu[:, 0] *= 8  # incast on one GPU: staging spreads it over server 0's rails
    np.fill_diagonal(hot_gpu, 0)
    plain, staged = (alltoall_times(D, S, G, B_OUT, B_UP, alpha_s=5e-6) for D in (hot_server, hot_gpu))
    assert plain.sent_plain and plain.plain_s == pytest.approx(plain.lower_bound_s + 5e-6)
    assert not staged.sent_plain and staged.speedup > 3


@settings(max_examples=40, deadline=None)
@given(case=small_matrices, ratio=st.sampled_from([1.0, 9.0]), alpha=st.sampled_from([0.0, 5e-6, 1e-3]))
def test_the_scheduler_never_sends_slower_than_plain(case, ratio, alpha):
    (S, G), D = case
    t = alltoall_times(D, S, G, B_OUT, B_OUT * ratio, alpha)
    assert t.scheduled_s == min(t.staged_s, t.plain_s) and t.sent_plain == (t.plain_s <= t.staged_s)
    assert t.speedup >= 1.0 or t.scheduled_s == 0
    assert fast_alltoall_s(D, S, G, B_OUT, B_OUT * ratio, alpha) == t.scheduled_s


@pytest.mark.parametrize("skew", ["uniform", 0.8])
@pytest.mark.parametrize("top_k", [2, 8])
def test_plain_on_the_engine_matches_the_fluid(skew, top_k):
    D = gpu_traffic_matrix(4096, HIDDEN, 32, top_k, 32, skew=skew, rng=5)
    engine, fluid = plain_alltoall_s(D, 4, 8, B_OUT, B_UP), fluid_plain_alltoall_s(D, 4, 8, B_OUT, B_UP)
    assert engine == pytest.approx(fluid, rel=PLAIN_GROUP_RTOL)  # both group ends within 0.1 % of the elapsed time


@settings(max_examples=40, deadline=None)
@given(case=small_matrices)
def test_plain_below_the_grouping_is_the_exact_fluid(case):
    (S, G), D = case  # at most 9 x 8 flows: every end is its own event on both paths
    assert plain_alltoall_s(D, S, G, B_OUT, B_UP) == pytest.approx(fluid_plain_alltoall_s(D, S, G, B_OUT, B_UP),
                                                                   rel=1e-9)


# ---------------------------------------------------------------- unit choice


def test_unit_choice_trades_stages_for_rounding():
    M = np.array([[0, 10**9, 3 * 10**8], [7 * 10**8, 0, 10**6], [5, 10**9, 0]])
    assert choose_unit_bytes(M, 0.0, B_OUT) == 1
    assert choose_unit_bytes(M, 1e-3, B_OUT) > choose_unit_bytes(M, 1e-6, B_OUT) >= 1
    D = gpu_traffic_matrix(4096, HIDDEN, 128, 8, 128, skew=0.8, rng=4)
    fine = fast_alltoall_times(D, 16, 8, B_OUT, B_UP, 20e-6, unit_bytes=1)
    auto = fast_alltoall_times(D, 16, 8, B_OUT, B_UP, 20e-6)
    assert auto.schedule.unit_bytes > 1
    assert auto.schedule.stages < fine.schedule.stages


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: maxmin_rates_padded([[0]], [0.0]), "capacities"),
        (lambda: maxmin_rates_padded([[3]], [1.0]), "flow_links"),
        (lambda: maxmin_rates_padded([[0]], [np.inf]), "flow"),
        (lambda: fluid_finish_times([-1.0], [[0]], [1.0]), "flow_bytes"),
        (lambda: plain_alltoall_s(np.ones((4, 4)), 2, 2, -1.0, B_UP), "B_out"),
        (lambda: fast_alltoall_s(np.ones((4, 4)), 2, 2, B_OUT, 0.0), "B_up"),
        (lambda: fast_alltoall_s(np.ones((4, 4)), 2, 2, B_OUT, B_UP, -1e-6), "alpha_s"),
        (lambda: lower_bound_s(np.ones((4, 4)), 3, 2, B_OUT, B_UP), "servers"),
        (lambda: alltoall_times(np.ones((4, 3)), 2, 2, B_OUT, B_UP), "square"),
    ],
)
def test_bad_inputs_name_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_flows_near_the_smallest_float_still_finish():
    # a size no subtraction rounds to zero left: the flow due at the event retires with it
    finish = fluid_finish_times(np.array([1e-320, 1e9]), [[0], [0]], np.array([1e9]))
    assert finish[0] >= 0 and finish[1] == pytest.approx(1.0)


@pytest.mark.parametrize("plain_alltoall_s", [fluid_plain_alltoall_s, plain_alltoall_s], ids=["fluid", "engine"])
def test_progress_follows_the_plain_alltoalls_flows_to_the_end(plain_alltoall_s):
    rng = np.random.default_rng(3)
    S, G = 4, 4
    D = rng.uniform(1e6, 1e8, (S * G, S * G))
    np.fill_diagonal(D, 0)
    seen = []
    with_progress = plain_alltoall_s(D, S, G, 50e9, 400e9, progress=lambda done, total: seen.append((done, total)))
    assert with_progress == plain_alltoall_s(D, S, G, 50e9, 400e9)  # watching does not change the answer
    flows = S * G * (S * G - 1)
    assert {total for _, total in seen} == {flows} and seen[-1] == (flows, flows)
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)  # never goes back
