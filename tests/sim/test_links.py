"""Max-min fair link sharing: worked cases, the defining properties, a brute-force oracle."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oracles.engine import gather_csr
from stepbudget.maxmin import FlowLinks, flows_to_csr, maxmin_rates

RTOL = 1e-9


def link_load(flow_links, rates, num_links):
    """Sum of flow rates on each link (a link listed twice by a flow counts twice)."""
    csr = flows_to_csr(flow_links)
    return np.bincount(csr.link_ids, weights=np.repeat(rates, np.diff(csr.indptr)), minlength=num_links)


def sequential_water_filling(flow_links, capacity):
    """Textbook progressive filling, one bottleneck link per round (Bertsekas & Gallager, Data Networks, max-min flow control)."""
    rates = np.zeros(len(flow_links))
    frozen = np.zeros(len(flow_links), dtype=bool)
    remaining = np.array(capacity, dtype=float)
    while not frozen.all():
        counts = np.zeros(len(capacity))
        for f, links in enumerate(flow_links):
            if not frozen[f]:
                for link in links:
                    counts[link] += 1
        shares = np.where(counts > 0, remaining / np.maximum(counts, 1), np.inf)
        level = shares.min()
        worst = int(np.argmin(shares))
        for f, links in enumerate(flow_links):
            if not frozen[f] and worst in links:
                frozen[f] = True
                rates[f] = level
                for link in links:
                    remaining[link] -= level
    return rates


def test_two_equal_flows_share_one_link_equally():
    assert maxmin_rates([(0,), (0,)], np.array([100.0])) == pytest.approx([50.0, 50.0])


def test_flow_over_two_links_runs_at_the_slower_one():
    assert maxmin_rates([(0, 1)], np.array([100.0, 25.0])) == pytest.approx([25.0])


def test_spare_capacity_goes_to_the_unconstrained_flow():
    # flow 0 is held to 2 by link 1 (shared with flow 1); flow 2 takes the rest of link 0
    rates = maxmin_rates([(0, 1), (1,), (0,)], np.array([10.0, 4.0]))
    assert rates == pytest.approx([2.0, 2.0, 8.0])


def test_flow_frozen_by_its_most_shared_link():
    # five flows on three links of capacity 1: A = links 0,1,2; B = 0; C = 1; D and E = 2:
    # link 2 has three flows -> 1/3 each, so A, D, E freeze at 1/3;
    # B and C take 2/3 of links 0 and 1
    flows = [(0, 1, 2), (0,), (1,), (2,), (2,)]
    rates = maxmin_rates(flows, np.ones(3))
    assert rates == pytest.approx([1 / 3, 2 / 3, 2 / 3, 1 / 3, 1 / 3])


def test_csr_input_matches_list_input_and_linkless_flow_is_unconstrained():
    flows = [(0, 1), (), (1,)]
    capacity = np.array([3.0, 4.0])
    csr = flows_to_csr(flows)
    assert isinstance(csr, FlowLinks)
    np.testing.assert_array_equal(maxmin_rates(csr, capacity), maxmin_rates(flows, capacity))
    assert maxmin_rates(flows, capacity) == pytest.approx([2.0, np.inf, 2.0])


def test_no_flows_gives_empty_rates():
    assert maxmin_rates([], np.ones(2)).shape == (0,)


def test_gather_csr_selects_rows_in_order():
    csr = flows_to_csr([(1, 2), (3,), (), (4, 5, 6)])
    indptr, data = gather_csr(csr.indptr, csr.link_ids, np.array([3, 0, 2]))
    assert indptr.tolist() == [0, 3, 5, 5]
    assert data.tolist() == [4, 5, 6, 1, 2]


@pytest.mark.parametrize(
    ("flows", "capacity", "name"),
    [
        ([(0,)], np.array([-1.0]), "capacity_Bps"),
        ([(0, 3)], np.ones(2), "link ids"),
        ([(0,)], np.array([np.nan]), "capacity_Bps"),
    ],
)
def test_bad_input_names_the_argument(flows, capacity, name):
    with pytest.raises(ValueError, match=name):
        maxmin_rates(flows, capacity)


def test_bad_csr_names_indptr():
    with pytest.raises(ValueError, match="indptr"):
        maxmin_rates(FlowLinks(np.array([1, 2]), np.array([0])), np.ones(1))


flow_sets = st.integers(1, 8).flatmap(
    lambda num_links: st.tuples(
        st.lists(
            st.lists(st.integers(0, num_links - 1), min_size=1, max_size=num_links, unique=True).map(tuple),
            min_size=1,
            max_size=25,
        ),
        st.lists(st.floats(0.1, 100.0), min_size=num_links, max_size=num_links).map(np.array),
    )
)


@settings(max_examples=150, deadline=None)
@given(flow_sets)
def test_maxmin_contract(case):
    flows, capacity = case
    rates = maxmin_rates(flows, capacity)
    assert np.all(rates >= 0)
    load = link_load(flows, rates, capacity.size)
    assert np.all(load <= capacity * (1 + RTOL))
    saturated = load >= capacity * (1 - RTOL)
    for f, links in enumerate(flows):
        # a bottleneck: saturated, and no flow on it gets more than flow f
        assert any(
            saturated[link]
            and all(rates[g] <= rates[f] * (1 + RTOL) for g, other in enumerate(flows) if link in other)
            for link in links
        ), f"flow {f} on links {links} has no bottleneck"


@settings(max_examples=100, deadline=None)
@given(flow_sets)
def test_maxmin_matches_sequential_water_filling(case):
    flows, capacity = case
    expected = sequential_water_filling(flows, capacity)
    np.testing.assert_allclose(maxmin_rates(flows, capacity), expected, rtol=1e-9)


def test_contract_holds_for_thousands_of_flows():
    rng = np.random.default_rng(7)
    num_flows, num_links = 4000, 300
    flows = [tuple(rng.choice(num_links, size=rng.integers(1, 6), replace=False)) for _ in range(num_flows)]
    capacity = rng.uniform(1.0, 50.0, num_links)
    rates = maxmin_rates(flows, capacity)
    csr = flows_to_csr(flows)
    entry_flow = np.repeat(np.arange(num_flows), np.diff(csr.indptr))
    load = np.bincount(csr.link_ids, weights=rates[entry_flow], minlength=num_links)
    assert np.all(load <= capacity * (1 + RTOL))
    fastest_on_link = np.zeros(num_links)
    np.maximum.at(fastest_on_link, csr.link_ids, rates[entry_flow])
    is_bottleneck = (load[csr.link_ids] >= capacity[csr.link_ids] * (1 - RTOL)) & (
        rates[entry_flow] >= fastest_on_link[csr.link_ids] * (1 - RTOL)
    )
    assert np.all(np.logical_or.reduceat(is_bottleneck, csr.indptr[:-1]))
