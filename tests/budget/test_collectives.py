import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from stepbudget.budget.collectives import call_cost, ring_factor
from stepbudget.enums import FLAT, HIERARCHICAL, IN_NETWORK, TREE
from stepbudget.enums import Collective
from stepbudget.inputs.hardware import Tier
from stepbudget.plan.groups import tier_slowdown

RING_COLLS = [Collective.ALL_REDUCE, Collective.REDUCE_SCATTER, Collective.ALL_GATHER, Collective.ALL_TO_ALL]


def cost(coll, S, n, q, alg=HIERARCHICAL, nv=450e9, nic=50e9, a_nv=0.0, a_nic=0.0):
    return call_cost(coll, S, n, q, alg, nv, nic, a_nv, a_nic)


def test_nccl_tests_bus_factors():
    assert float(ring_factor(Collective.ALL_REDUCE, 8)) == 2 * 7 / 8
    assert float(ring_factor(Collective.ALL_GATHER, 8)) == 7 / 8
    assert float(ring_factor(Collective.ALL_TO_ALL, 4)) == 3 / 4
    assert float(ring_factor(Collective.SEND_RECV, 2)) == 1


def test_hierarchical_all_reduce_matches_formulas_1_4():
    S, g, N = 1e9, 8, 16
    c = cost(Collective.ALL_REDUCE, S, g * N, g)
    assert float(c.nvlink_bytes) == pytest.approx(2 * (g - 1) / g * S)
    assert float(c.nic_bytes) == pytest.approx(2 * (N - 1) / N * S / g)


def test_group_inside_a_node_never_touches_the_nic():
    for coll in RING_COLLS + [Collective.SEND_RECV]:
        c = cost(coll, 1e9, 8 if coll != Collective.SEND_RECV else 2, 8 if coll != Collective.SEND_RECV else 2)
        assert float(c.nic_bytes) == 0 and float(c.nvlink_bytes) > 0


def test_in_network_all_reduce_halves_nic_bytes():
    # SHARP: S/g per NIC each way instead of 2(N-1)/N * S/g (formulas.md 1.5)
    ring = cost(Collective.ALL_REDUCE, 1e9, 1024, 8)
    sharp = cost(Collective.ALL_REDUCE, 1e9, 1024, 8, IN_NETWORK)
    assert float(sharp.nic_bytes / ring.nic_bytes) == pytest.approx(1 / (2 * 127 / 128))


def test_tree_latency_is_logarithmic():
    # formulas.md 1.3: ring pays 2(n-1) steps, tree 2((q-1) + log2 N)
    ring = cost(Collective.ALL_REDUCE, 1.0, 128, 8, HIERARCHICAL, a_nv=3.4e-6, a_nic=14e-6)
    tree = cost(Collective.ALL_REDUCE, 1.0, 128, 8, TREE, a_nv=3.4e-6, a_nic=14e-6)
    assert float(ring.latency_s) == pytest.approx((254 - 30) * 3.4e-6 + 30 * 14e-6)
    assert float(tree.latency_s) == pytest.approx(2 * (7 * 3.4e-6 + 4 * 14e-6))


@given(coll=st.sampled_from(RING_COLLS), S=st.floats(1, 1e12), nodes=st.integers(1, 512),
       q=st.sampled_from([1, 2, 4, 8]), alg=st.sampled_from([HIERARCHICAL, FLAT]))
def test_bytes_conserve_over_the_links(coll, S, nodes, q, alg):
    """Whatever the algorithm, NVLink + NIC bytes are the ring's wire bytes per GPU."""
    n = nodes * q
    c = cost(coll, S, n, q, alg)
    assert float(c.nvlink_bytes + c.nic_bytes) == pytest.approx(float(c.bytes_per_gpu), rel=1e-9, abs=1e-6)


@given(coll=st.sampled_from(RING_COLLS + [Collective.SEND_RECV]), S=st.floats(1, 1e12), nodes=st.integers(1, 256),
       q=st.sampled_from([1, 2, 8]), alg=st.sampled_from([HIERARCHICAL, FLAT, TREE, IN_NETWORK]),
       bw=st.floats(1e9, 1e12), more=st.floats(1.0, 10.0))
def test_more_bandwidth_is_never_slower(coll, S, nodes, q, alg, bw, more):
    n = 2 if coll == Collective.SEND_RECV else nodes * q
    q = min(q, n)
    slow = cost(coll, S, n, q, alg, nv=9 * bw, nic=bw, a_nv=1e-6, a_nic=5e-6)
    fast_nic = cost(coll, S, n, q, alg, nv=9 * bw, nic=bw * more, a_nv=1e-6, a_nic=5e-6)
    fast_nv = cost(coll, S, n, q, alg, nv=9 * bw * more, nic=bw, a_nv=1e-6, a_nic=5e-6)
    assert float(fast_nic.time_s) <= float(slow.time_s) * (1 + 1e-12)
    assert float(fast_nv.time_s) <= float(slow.time_s) * (1 + 1e-12)


def test_array_inputs_broadcast_elementwise():
    S = np.array([[1e6, 1e9, 3e9], [2e6, 4e8, 1e10]])
    n = np.array([[8, 16, 1024], [2, 64, 128]])
    q = np.array([[8, 8, 8], [2, 1, 8]])
    out = cost(Collective.ALL_REDUCE, S, n, q, a_nv=1e-6, a_nic=1e-5)
    for i in np.ndindex(S.shape):
        one = cost(Collective.ALL_REDUCE, S[i], n[i], q[i], a_nv=1e-6, a_nic=1e-5)
        assert float(out.time_s[i]) == float(one.time_s)
        assert float(out.nic_bytes[i]) == float(one.nic_bytes)


@given(degree=st.integers(1, 1 << 16), stride=st.integers(1, 1 << 16), domain=st.integers(8, 1 << 15),
       over=st.floats(1, 16), pattern=st.sampled_from(["ring", "all-to-all"]))
def test_a_tier_never_slows_a_group_by_more_than_its_oversubscription(degree, stride, domain, over, pattern):
    # a ring crosses a tier at most once per hop, an all-to-all sends at most all its bytes out of a domain
    f = float(tier_slowdown(degree, stride, (Tier(domain_gpus=domain, oversubscription=over),), pattern))
    assert 1.0 <= f <= max(over, 1.0) + 1e-12
