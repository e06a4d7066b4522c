"""The compiled engine (sim/_core.py) gives the Python engine's timelines, to the last bit, on every kind of graph."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import stepbudget as sb
from stepbudget.maxmin import flows_to_csr, maxmin_rates
from stepbudget.sim import TaskGraph, compute, join, run_graph, transfer
from stepbudget.sim import _core
from stepbudget.sim.collectives import ring_all_reduce
from stepbudget.sim.program import step_program
from stepbudget.sim.step import _lognormal, sim_budget

pytestmark = pytest.mark.skipif(not _core.AVAILABLE, reason="numba (the fast extra) is not installed")


def _both(graph, capacity, **options):
    py = run_graph(graph, capacity, engine="python", **options)
    fast = run_graph(graph, capacity, engine="compiled", **options)
    return py, fast


def _same(py, fast):
    np.testing.assert_array_equal(fast.start_s, py.start_s)
    np.testing.assert_array_equal(fast.end_s, py.end_s)
    assert fast.engine_events == py.engine_events


@pytest.mark.parametrize("name", sb.preset_names())
@pytest.mark.parametrize("jittered", [False, True])
def test_every_preset_step_is_the_python_engines(name, jittered):
    prog = step_program(sim_budget(sb.load(name)))
    options = {}
    if jittered:  # ties broken apart by jitter, and links at uneven rates
        rng = np.random.default_rng(3)
        options = {"duration_multiplier": _lognormal(rng, 0.1, prog.graph.num_tasks),
                   "link_rate_multiplier": 1 / _lognormal(rng, 0.1, prog.capacity_Bps.size)}
    _same(*_both(prog.graph, prog.capacity_Bps, **options))


def test_a_ring_all_reduce_is_the_python_engines_and_its_closed_form():
    py, fast = _both(ring_all_reduce(64, 1e9), np.full(64, 50e9))
    _same(py, fast)
    assert fast.makespan_s == pytest.approx(2 * 63 / 64 * 1e9 / 50e9, rel=1e-12)  # ring: 2(n-1)/n S/B


@st.composite
def graphs(draw):
    """Small graphs full of ties: few durations, sizes and capacities, shared links, joins and zero-byte flows."""
    n = draw(st.integers(1, 40))
    num_links, num_streams = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    tasks = []
    for i in range(n):
        deps = draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)) if i else []
        what = draw(st.sampled_from(["compute", "transfer", "join"]))
        if what == "compute":
            duration = draw(st.sampled_from([0.0, 1.0, 2.0, 0.5]))
            tasks.append(compute(f"c{i}", draw(st.integers(0, num_streams - 1)), duration, deps))
        elif what == "transfer":
            links = draw(st.lists(st.integers(0, num_links - 1), min_size=1, max_size=3))
            tasks.append(transfer(f"t{i}", draw(st.sampled_from([0.0, 1.0, 2.0, 3.0])), links, deps))
        else:
            tasks.append(join(f"j{i}", deps))
    capacity = np.array(draw(st.lists(st.sampled_from([1.0, 2.0, 3.0]), min_size=num_links, max_size=num_links)))
    return TaskGraph.from_tasks(tasks), capacity


@settings(max_examples=300, deadline=None)
@given(graphs(), st.sampled_from([1e-12, 1e-3, 0.2]))
def test_random_graphs_with_ties_run_the_same_on_both_engines(case, rtol):
    graph, capacity = case
    _same(*_both(graph, capacity, finish_rtol=rtol))


def test_flows_due_within_finish_rtol_end_together_at_the_first():
    # three flows on their own links: 1 and 1.0005 bytes end together within 1e-3 of the elapsed time; 2 does not
    graph = TaskGraph.from_tasks([transfer("a", 1.0, [0]), transfer("b", 1.0005, [1]), transfer("c", 2.0, [2])])
    for engine in ("python", "compiled"):
        tl = run_graph(graph, np.ones(3), engine=engine, finish_rtol=1e-3)
        np.testing.assert_array_equal(tl.end_s, [1.0, 1.0, 2.0])
        exact = run_graph(graph, np.ones(3), engine=engine)
        np.testing.assert_allclose(exact.end_s, [1.0, 1.0005, 2.0], rtol=1e-15)


def test_the_heap_grows_past_its_first_room():
    # 3,000 tasks that start at once on 3,000 streams: more pending ends than the heap's first 1,024 places
    graph = TaskGraph.from_tasks([compute(f"c{i}", i, 1.0 + (i % 7)) for i in range(3000)] + [join("end", range(3000))])
    _same(*_both(graph, np.ones(1)))


def test_progress_counts_ended_tasks_up_to_all():
    graph, seen = ring_all_reduce(256, 1e9), []
    run_graph(graph, np.full(256, 50e9), engine="compiled", progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (graph.num_tasks, graph.num_tasks)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_errors_are_the_python_engines():
    cycle = TaskGraph.from_tasks([compute("a", 0, 1.0, [1]), compute("b", 0, 1.0, [0])])
    underflow = TaskGraph.from_tasks([transfer("t", 1e300, [0])])
    for engine in ("python", "compiled"):
        with pytest.raises(ValueError, match="cycle"):
            run_graph(cycle, np.ones(1), engine=engine)
        with pytest.raises(ValueError, match="underflow"):
            run_graph(underflow, np.array([1e-320]), engine=engine)
    with pytest.raises(ValueError, match="observer"):
        run_graph(cycle, np.ones(1), engine="compiled", observer=lambda *a: None)
    with pytest.raises(ValueError, match="engine="):
        run_graph(cycle, np.ones(1), engine="gpu")
    with pytest.raises(ValueError, match="finish_rtol"):
        run_graph(cycle, np.ones(1), finish_rtol=1.5)


def _waterfill(flows, capacity):
    csr = flows_to_csr(flows)
    n = len(flows)
    out, entries = np.empty(max(n, 1)), np.empty((2, max(csr.link_ids.size, 1)), np.int64)
    _core._waterfill(np.arange(n), n, csr.indptr, csr.link_ids, capacity, out, entries[0], entries[1])
    return out[:n]


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 6).flatmap(lambda links: st.tuples(
    st.lists(st.lists(st.integers(0, links - 1), max_size=4), max_size=60),
    st.lists(st.sampled_from([1.0, 2.0, 3.0, 7.5, 1e9]), min_size=links, max_size=links))))
def test_water_filling_gives_the_progressive_fillings_rates(case):
    # the engine's rates for 4,096 flows and more: the same unique max-min allocation, up to rounding
    flows, capacity = case
    np.testing.assert_allclose(_waterfill(flows, np.array(capacity)), maxmin_rates(flows, np.array(capacity)),
                               rtol=1e-12)


def test_an_all_to_all_past_the_water_filling_threshold_is_the_python_engines():
    # 72 GPUs: 5,112 flows over their sender's link out and receiver's link in, more than WATERFILL_FLOWS at once
    num_gpus = 72
    src, dst = np.nonzero(~np.eye(num_gpus, dtype=bool))
    assert src.size >= _core.WATERFILL_FLOWS
    sizes = np.random.default_rng(5).choice([1e6, 2e6, 3.5e6], src.size)
    graph = TaskGraph.from_tasks([transfer(f"f{i}", s, [a, num_gpus + b])
                                  for i, (s, a, b) in enumerate(zip(sizes, src, dst))])
    py, fast = _both(graph, np.full(2 * num_gpus, 50e9))
    np.testing.assert_allclose(fast.end_s, py.end_s, rtol=1e-9)
    assert fast.engine_events == py.engine_events
