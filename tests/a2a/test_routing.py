"""Routing, traffic matrices, node-limited routing, summaries and validation."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stepbudget.a2a import routing
from stepbudget.a2a.routing import (
    expert_loads,
    expert_placement,
    expert_popularity,
    gpu_traffic_matrix,
    node_limited_traffic,
    remote_nodes_per_token,
    server_matrix,
    skew_stats,
)

H, W = 1024, 2  # hidden, bytes per element


# ---------------------------------------------------------------- popularity and sampling


@given(E=st.integers(1, 64), k=st.integers(1, 16), s=st.floats(0, 3))
def test_popularity_sums_to_k_and_is_capped(E, k, s):
    k = min(k, E)
    pi = expert_popularity(E, k, s)
    assert pi.sum() == pytest.approx(k)
    assert (pi <= 1 + 1e-12).all() and (pi > 0).all()
    assert (np.diff(pi) <= 1e-12).all()  # rank order, expert 0 hottest


def test_popularity_uniform_and_zipf():
    assert np.allclose(expert_popularity(32, 2, "uniform"), 2 / 32)
    pi = expert_popularity(32, 1, 0.8)
    ranks = np.arange(1, 33)
    assert np.allclose(pi, ranks**-0.8 / (ranks**-0.8).sum())  # no cap needed at k = 1
    assert expert_popularity(32, 8, 0.8)[0] == 1.0  # the hottest expert gets every token
    shuffled = expert_popularity(32, 8, 0.8, rng=1)
    assert np.allclose(np.sort(shuffled), np.sort(expert_popularity(32, 8, 0.8)))
    assert not np.allclose(shuffled, expert_popularity(32, 8, 0.8))


@settings(max_examples=40, deadline=None)
@given(
    E=st.integers(1, 40),
    k=st.integers(1, 8),
    s=st.floats(0, 2.5),
    seed=st.integers(0, 2**16),
    tokens=st.integers(0, 5000),
)
def test_each_token_gets_k_distinct_experts(E, k, s, seed, tokens):
    k = min(k, E)
    pi = expert_popularity(E, k, s)
    cells = routing._sample_cells(pi, k, tokens, 3, np.random.default_rng(seed))
    assert cells.tokens.sum(axis=1).tolist() == [tokens] * 3
    chosen = np.sort(cells.experts, axis=2)
    assert (np.diff(chosen, axis=2) > 0).all()  # distinct
    assert ((chosen >= 0) & (chosen < E)).all()


def test_inclusion_probabilities_are_exact_in_expectation():
    E, k, T = 12, 3, 200_000
    pi = expert_popularity(E, k, 1.1)
    copies = routing._copies_per_expert(routing._sample_cells(pi, k, T, 4, np.random.default_rng(7)), E)
    assert np.allclose(copies / T, pi, atol=0.006)  # binomial sd <= 0.0012


def test_expert_loads_totals_and_capacity():
    loads = expert_loads(32, 8, 4096, 0.8, rng=1)
    assert loads.sum() == 4096 * 8
    assert loads.max() <= 4096
    capped = expert_loads(32, 8, 4096, 0.8, rng=1, capacity_factor=1.25)
    cap = int(np.ceil(1.25 * 4096 * 8 / 32))
    assert capped.max() == cap
    assert (capped == np.minimum(loads, cap)).all()


def test_per_call_variation_and_reproducibility():
    a = gpu_traffic_matrix(2048, H, 32, 2, 32, skew=0.8, rng=5)
    b = gpu_traffic_matrix(2048, H, 32, 2, 32, skew=0.8, rng=5)
    c = gpu_traffic_matrix(2048, H, 32, 2, 32, skew=0.8, rng=6)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    gen = np.random.default_rng(0)
    first, second = (gpu_traffic_matrix(64, H, 8, 2, 8, skew=1.0, rng=gen) for _ in range(2))
    assert not np.array_equal(first, second)  # one Generator: a new draw per call


# ---------------------------------------------------------------- matrices


@pytest.mark.parametrize("skew", ["uniform", 0.0, 0.8, 2.0])
def test_traffic_matrix_rows_carry_every_copy(skew):
    T, k, n = 1000, 4, 16
    D = gpu_traffic_matrix(T, H, 64, k, n, skew=skew, rng=2)
    assert D.shape == (n, n)
    assert np.allclose(D.sum(axis=1), T * k * H * W)


def test_traffic_matrix_capacity_drops_copies():
    D = gpu_traffic_matrix(1000, H, 16, 4, 16, skew=1.5, rng=2, capacity_factor=1.0)
    assert D.max() <= np.ceil(1000 * 4 / 16) * H * W
    assert (D.sum(axis=1) < 1000 * 4 * H * W).all()


def test_zipf_is_more_skewed_than_uniform():
    uni = skew_stats(gpu_traffic_matrix(4096, H, 32, 2, 32, rng=3))
    zipf = skew_stats(gpu_traffic_matrix(4096, H, 32, 2, 32, skew=0.8, rng=3))
    assert uni.pair_max_over_median < 1.5
    assert zipf.pair_max_over_median > 4
    assert zipf.busiest_col_bytes > 2 * uni.busiest_col_bytes


def test_placement_contiguous_and_permuted():
    assert expert_placement(8, 4).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    order = [7, 6, 5, 4, 3, 2, 1, 0]
    assert expert_placement(8, 4, order).tolist() == [3, 3, 2, 2, 1, 1, 0, 0]
    # experts 0 and 1 on GPU 0 vs spread out: all copies of a 1-expert top-1 route land on its GPU
    D = gpu_traffic_matrix(10, H, 2, 2, 2, expert_to_gpu=[1, 1], rng=0)
    assert D[:, 0].sum() == 0 and np.allclose(D[:, 1], 2 * 10 * H * W)


def test_server_matrix_sums_tiles():
    D = np.arange(36, dtype=float).reshape(6, 6)
    M = server_matrix(D, 3, 2)
    oracle = [[D[2 * u : 2 * u + 2, 2 * v : 2 * v + 2].sum() for v in range(3)] for u in range(3)]
    assert np.array_equal(M, oracle)


def test_skew_stats_known_matrix():
    D = np.ones((4, 4))
    D[0, 3] = 13
    np.fill_diagonal(D, 100)  # diagonal never counts
    s = skew_stats(D)
    assert s.pair_max_over_median == 13
    assert s.busiest_row_bytes == 15 and s.busiest_col_bytes == 15


# ---------------------------------------------------------------- node-limited routing


def test_node_limit_without_binding_matches_plain_routing():
    nl = node_limited_traffic(512, H, 32, 4, 4, 2, 4, skew=0.8, rng=9)
    D = gpu_traffic_matrix(512, H, 32, 4, 8, skew=0.8, rng=9)
    assert np.array_equal(nl.copies, D)


@pytest.mark.parametrize("max_nodes", [1, 2, 4])
def test_node_limited_routing(max_nodes):
    S, G, T, k = 8, 4, 600, 8
    nl = node_limited_traffic(T, H, 64, k, S, G, max_nodes, skew=0.5, rng=4)
    free = node_limited_traffic(T, H, 64, k, S, G, S, skew=0.5, rng=4)
    assert nl.nodes_per_token <= max_nodes + 1e-12
    assert free.nodes_per_token > max_nodes
    assert np.allclose(nl.copies.sum(axis=1), T * k * H * W)  # still k copies per token
    # the NIC carries one copy per token per remote server, to the same local index
    n = S * G
    src, dst = np.nonzero(nl.nic)
    assert (src % G == dst % G).all() and (src // G != dst // G).all()
    assert (nl.nic.sum(axis=1) <= T * max_nodes * H * W + 1e-6).all()
    inter_copies = server_matrix(nl.copies, S, G)
    np.fill_diagonal(inter_copies, 0)
    assert nl.inter_server_bytes == nl.nic.sum() <= inter_copies.sum()  # dedup per node never sends more
    assert nl.nvlink.shape == (n, n) and np.all(np.diag(nl.nvlink) == 0)


def test_one_gpu_per_server_needs_no_forwarding():
    """G = 1, one expert per server: the NIC carries exactly the remote copies, NVLink nothing."""
    nl = node_limited_traffic(300, H, 6, 3, 6, 1, 6, skew=0.7, rng=1)
    assert not nl.nvlink.any()
    assert np.allclose(nl.nic, nl.copies - np.diag(np.diag(nl.copies)))


def test_forwarding_counts_copies_not_on_the_relay_gpu():
    """Top-1 to one expert on GPU (1, 1): GPU (0, 0) goes by NIC to (1, 0), then NVLink to (1, 1)."""
    nl = node_limited_traffic(10, H, 4, 1, 2, 2, 1, expert_to_gpu=[3, 3, 3, 3], rng=0)
    per_token = 10 * H * W
    assert nl.nic[0, 2] == per_token and nl.nic[1, 3] == per_token and nl.nic.sum() == 2 * per_token
    # GPU 2 relays GPU 0's tokens and sends its own; GPU 3 relays GPU 1's tokens to itself
    assert nl.nvlink[2, 3] == 2 * per_token and nl.nvlink.sum() == 2 * per_token


def _limit_by_sorting(experts, pi, e2s, S, Mn, k):
    """The node limit's repair as written before issue 21: two stable sorts over every server and expert."""
    cells = experts.shape[0]
    hits = np.zeros((cells, S))
    np.add.at(hits, (np.arange(cells)[:, None], e2s[experts]), 1.0 + pi[experts] / (k + 1))
    if Mn >= S or ((hits > 0).sum(axis=1) <= Mn).all():
        return experts
    kept = np.zeros_like(hits, dtype=bool)
    np.put_along_axis(kept, np.argsort(-hits, axis=1, kind="stable")[:, :Mn], True, axis=1)
    allowed = kept @ (e2s[None, :] == np.arange(S)[:, None])
    chosen = np.zeros_like(allowed)
    np.put_along_axis(chosen, experts, True, axis=1)
    return np.argsort(-np.where(allowed, pi + 2.0 * chosen, -1.0), axis=1, kind="stable")[:, :k]


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_node_limit_repair_is_the_stable_sorts(data):
    # the repair picks from a few candidates per cell; it must pick what sorting every expert picked, ties and
    # short refills (fewer allowed experts than k) included
    S, G = data.draw(st.integers(2, 9)), data.draw(st.integers(1, 4))
    E = S * G * data.draw(st.integers(1, 3))
    k, Mn = data.draw(st.integers(1, min(E, 9))), data.draw(st.integers(1, S))
    placement = data.draw(st.sampled_from(["round-robin", "random"]))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    gpu = np.arange(E) % (S * G) if placement == "round-robin" else rng.integers(0, S * G, E)
    e2s = gpu // G
    pi = np.minimum(rng.random(E), 1.0)
    pi[rng.random(E) < 0.3] = pi[0]  # popularity ties
    experts = np.stack([rng.choice(E, k, replace=False) for _ in range(int(rng.integers(1, 40)))])
    got = routing._limit_nodes(experts, pi, e2s, S, Mn, k, routing._popular_on_servers(pi, e2s, S, k))
    assert np.array_equal(got, _limit_by_sorting(experts, pi, e2s, S, Mn, k))


@pytest.mark.parametrize(("E", "k", "S", "G"), [(128, 8, 4, 8), (64, 6, 8, 4), (32, 3, 2, 8)])
def test_remote_nodes_closed_form_matches_sampled_routing(E, k, S, G):
    """Uniform routing, no binding limit: the sampled NIC crossings per token are the closed form's."""
    T = 4000
    nl = node_limited_traffic(T, H, E, k, S, G, S, rng=3)
    sampled = nl.nic.sum() / (S * G * T * H * W)
    assert sampled == pytest.approx(float(remote_nodes_per_token(E, k, S)), rel=0.02)


def test_remote_nodes_worked_values():
    # E=8 on 2 servers, k=2: a server gets none of the two with C(4,2)/C(8,2) = 6/28; the other
    # server is reached with 1 - 6/28 = 22/28
    assert float(remote_nodes_per_token(8, 2, 2)) == pytest.approx(22 / 28)
    # DeepSeek-V3 (256 experts on 8 servers, top-8, at most 4 servers): 3.18 of its 8 copies cross
    assert float(remote_nodes_per_token(256, 8, 8, 4)) == pytest.approx(3.175, abs=1e-3)
    assert float(remote_nodes_per_token(32, 3, 1)) == 0.0  # one server: nothing crosses a NIC


@settings(max_examples=60, deadline=None)
@given(E_per=st.integers(1, 32), k=st.integers(1, 16), N=st.integers(1, 16), M=st.integers(1, 16))
def test_remote_nodes_never_exceed_copies_nor_the_limit(E_per, k, N, M):
    E = E_per * N
    k = min(k, E_per * min(M, N))  # the chosen servers must hold k experts
    r = float(remote_nodes_per_token(E, k, N, M))
    assert 0.0 <= r <= k * (N - 1) / N + 1e-9  # never more than the plain all-to-all's remote copies
    assert r <= min(M, N) * (N - 1) / N + 1e-9
    assert float(remote_nodes_per_token(E, k, N)) >= r - 1e-9  # a node limit never adds crossings


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: expert_popularity(4, 5), "top_k"),
        (lambda: expert_popularity(4, 2, -0.5), "skew"),
        (lambda: expert_popularity(4, 2, "zipf"), "skew"),
        (lambda: expert_loads(4, 2, 10, capacity_factor=0), "capacity_factor"),
        (lambda: gpu_traffic_matrix(10, H, 6, 2, 4), "num_experts"),
        (lambda: gpu_traffic_matrix(10, H, 8, 2, 4, expert_to_gpu=[0] * 7), "expert_to_gpu"),
        (lambda: gpu_traffic_matrix(10, H, 8, 2, 4, bytes_per_elem=-2), "bytes_per_elem"),
        (lambda: expert_placement(8, 4, [0, 1, 2]), "order"),
        (lambda: node_limited_traffic(10, H, 8, 4, 4, 2, 1), "max_nodes"),
        (lambda: server_matrix(np.ones((6, 6)), 4, 2), "servers"),
        (lambda: server_matrix(np.ones((6, 5)), 3, 2), "square"),
        (lambda: skew_stats(-np.ones((3, 3))), "D"),
        (lambda: skew_stats(np.full((3, 3), np.nan)), "D"),
    ],
)
def test_bad_inputs_name_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()
