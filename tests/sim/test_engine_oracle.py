"""The engine (``run_graph``: sim/_core.py's loop, compiled) against the Python reference of tests/oracles/engine.py.

The reference shares links by numpy's progressive filling in rounds, the engine by sequential water-filling: the
same max-min allocation, summed in another order, so timelines are compared to a stated relative tolerance, not
bit for bit. They are compared where flows end together only when due at the same instant (finish_rtol 1e-12,
the default): a wider grouping could take a flow due at its edge into a batch in one and not in the other.
"""

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import stepbudget as sb
from oracles import engine as oracle
from stepbudget.maxmin import maxmin_rates
from stepbudget.sim import TaskGraph, compute, join, run_graph, transfer
from stepbudget.sim import _core
from stepbudget.sim.collectives import ring_all_reduce
from stepbudget.sim.engine import _pair_of
from stepbudget.sim.flows import matrix_graph
from stepbudget.sim.program import step_program
from stepbudget.sim.step import _lognormal, sim_budget

RTOL = 1e-9
"""Relative tolerance between the engine's times and the reference's: rounding, summed over a graph's events."""


def _agree(graph, capacity, **options):
    """Run both; every task's start and end within RTOL, and, where they agree to the bit, the same number of
    events. Where rounding differs, ends due together may be one event in one and two in the other (hypothesis
    found flows the engine ends at 7.999999999999999 beside a compute due at 8.0: 30 events there, 31 in the
    reference, which ends the flows at 8.0)."""
    ref = oracle.run_graph(graph, capacity, **options)
    got = run_graph(graph, capacity, **options)
    np.testing.assert_allclose(got.start_s, ref.start_s, rtol=RTOL, atol=0)
    np.testing.assert_allclose(got.end_s, ref.end_s, rtol=RTOL, atol=0)
    if np.array_equal(got.start_s, ref.start_s) and np.array_equal(got.end_s, ref.end_s):
        assert got.engine_events == ref.engine_events
    return got


# --- random graphs ---------------------------------------------------------------------------------


@st.composite
def graphs(draw, contention: bool):
    """Small graphs full of ties: few durations, sizes and capacities, joins and zero-byte flows. With contention,
    transfers share a few links (each over up to three, a link listed twice counting twice); without, each
    transfer has a link of its own."""
    n = draw(st.integers(1, 40))
    num_links, num_streams = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    tasks, own = [], num_links
    for i in range(n):
        deps = draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)) if i else []
        what = draw(st.sampled_from(["compute", "transfer", "join"]))
        if what == "compute":
            duration = draw(st.sampled_from([0.0, 1.0, 2.0, 0.5]))
            tasks.append(compute(f"c{i}", draw(st.integers(0, num_streams - 1)), duration, deps))
        elif what == "transfer":
            links = draw(st.lists(st.integers(0, num_links - 1), min_size=1, max_size=3)) if contention else [own]
            own += 1
            tasks.append(transfer(f"t{i}", draw(st.sampled_from([0.0, 1.0, 2.0, 3.0])), links, deps))
        else:
            tasks.append(join(f"j{i}", deps))
    capacity = np.array(draw(st.lists(st.sampled_from([1.0, 2.0, 3.0]), min_size=own, max_size=own)))
    return TaskGraph.from_tasks(tasks), capacity


@settings(max_examples=300, deadline=None)
@given(graphs(contention=True))
def test_random_graphs_with_contention_run_as_on_the_reference(case):
    _agree(*case)


@settings(max_examples=100, deadline=None)
@given(graphs(contention=False))
def test_random_graphs_without_contention_run_as_on_the_reference(case):
    _agree(*case)


@settings(max_examples=60, deadline=None)
@given(graphs(contention=True), st.integers(0, 2**32 - 1))
def test_jittered_links_and_durations_run_as_on_the_reference(case, seed):
    graph, capacity = case
    rng = np.random.default_rng(seed)
    _agree(graph, capacity, duration_multiplier=rng.uniform(0.5, 2.0, graph.num_tasks),
           link_rate_multiplier=rng.uniform(0.5, 2.0, capacity.size))


# --- whole steps and collectives -------------------------------------------------------------------


@pytest.mark.parametrize("name", ["hpn-gpt3-175b", "llama3-405b-puredp"])
@pytest.mark.parametrize("jittered", [False, True])
def test_a_presets_step_runs_as_on_the_reference(name, jittered):
    # the two smallest steps (the reference takes 0.1-3 s on the others; tests/sim/test_sim_fixtures.py holds
    # every preset to what the reference gave)
    prog = step_program(sim_budget(sb.load(name)))
    options = {}
    if jittered:  # ties broken apart by jitter, and links at uneven rates
        rng = np.random.default_rng(3)
        options = {"duration_multiplier": _lognormal(rng, 0.1, prog.graph.num_tasks),
                   "link_rate_multiplier": 1 / _lognormal(rng, 0.1, prog.capacity_Bps.size)}
    _agree(prog.graph, prog.capacity_Bps, **options)


def test_a_ring_all_reduce_runs_as_on_the_reference_and_its_closed_form():
    got = _agree(ring_all_reduce(64, 1e9), np.full(64, 50e9))
    assert got.makespan_s == pytest.approx(2 * 63 / 64 * 1e9 / 50e9, rel=1e-12)  # ring: 2(n-1)/n S/B


def test_an_all_to_all_over_shared_links_runs_as_on_the_reference():
    # 48 GPUs: 2,256 flows over their sender's link out and receiver's link in, sizes skewed: many levels of
    # max-min sharing, re-shared as flows end
    num_gpus = 48
    src, dst = np.nonzero(~np.eye(num_gpus, dtype=bool))
    sizes = np.random.default_rng(5).choice([1e6, 2e6, 3.5e6], src.size)
    graph = TaskGraph.from_tasks([transfer(f"f{i}", s, [a, num_gpus + b])
                                  for i, (s, a, b) in enumerate(zip(sizes, src, dst))])
    _agree(graph, np.full(2 * num_gpus, 50e9))


def test_the_heap_grows_past_its_first_room():
    # 3,000 tasks that start at once on 3,000 streams: more pending ends than the heap's first 1,024 places
    graph = TaskGraph.from_tasks([compute(f"c{i}", i, 1.0 + (i % 7)) for i in range(3000)] + [join("end", range(3000))])
    _agree(graph, np.ones(1))


# --- the engine's own rules -------------------------------------------------------------------------


def test_flows_due_within_finish_rtol_end_together_at_the_first():
    # three flows on their own links: 1 and 1.0005 bytes end together within 1e-3 of the elapsed time; 2 does not
    graph = TaskGraph.from_tasks([transfer("a", 1.0, [0]), transfer("b", 1.0005, [1]), transfer("c", 2.0, [2])])
    for run in (run_graph, oracle.run_graph):
        np.testing.assert_array_equal(run(graph, np.ones(3), finish_rtol=1e-3).end_s, [1.0, 1.0, 2.0])
        np.testing.assert_allclose(run(graph, np.ones(3)).end_s, [1.0, 1.0005, 2.0], rtol=1e-15)


def test_progress_counts_ended_tasks_up_to_all():
    graph, seen = ring_all_reduce(256, 1e9), []
    run_graph(graph, np.full(256, 50e9), progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (graph.num_tasks, graph.num_tasks)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_errors_are_the_references():
    cycle = TaskGraph.from_tasks([compute("a", 0, 1.0, [1]), compute("b", 0, 1.0, [0])])
    underflow = TaskGraph.from_tasks([transfer("t", 1e300, [0])])
    for run in (run_graph, oracle.run_graph):
        with pytest.raises(ValueError, match="cycle"):
            run(cycle, np.ones(1))
        with pytest.raises(ValueError, match="underflow"):
            run(underflow, np.array([1e-320]))
    with pytest.raises(ValueError, match="finish_rtol"):
        run_graph(cycle, np.ones(1), finish_rtol=1.5)


# --- the two ways to share links, against maxmin.py's progressive filling -------------------------


def _shared(graph: TaskGraph, capacity: np.ndarray, pairs: tuple[int, int] | None = None) -> np.ndarray:
    """The rates the engine gives every flow of ``graph``, all moving at once: on lists of each link's flows or,
    with ``pairs``, on the matrix of moving pairs."""
    T, L = graph.num_tasks, capacity.size
    pair = np.zeros((0, 2), np.int32) if pairs is None else _pair_of(graph.link_ids, pairs[0])
    g = _core.Graph(graph.kind, graph.stream, np.array(graph.duration_s), graph.size_bytes, np.zeros(T, bool),
                    graph.link_indptr, graph.link_ids, *_core.successors(graph.dep_indptr, graph.dep_ids), capacity,
                    pair)  # arrays of the kinds run_graph passes: the kernels are compiled once
    s, w = _core.new_state(T, 0, L, pairs or (0, 0)), _core.new_work(T, L, graph.link_ids.size)
    s.active[:] = np.arange(T)
    s.counts[_core._SLOTS] = T
    if pairs is None:
        _core._share_lists(g, s, w)
        assert not w.load.any()  # zeros again, as the next sharing needs them
        return w.rates
    s.moving[pair[:, 0], pair[:, 1]] = s.moving_t[pair[:, 1], pair[:, 0]] = 1.0
    s.live[:] = np.bincount(graph.link_ids, minlength=L)
    _core._share_pairs(g, s, w)
    a, b = pair[:, 0], pairs[0] + pair[:, 1]
    return np.where(w.rank[a] < w.rank[b], w.level[a], w.level[b])


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 6).flatmap(lambda links: st.tuples(
    st.lists(st.lists(st.integers(0, links - 1), min_size=1, max_size=4), min_size=1, max_size=60),
    st.lists(st.sampled_from([1.0, 2.0, 3.0, 7.5, 1e9]), min_size=links, max_size=links))))
def test_water_filling_on_lists_gives_the_progressive_fillings_rates(case):
    flows, capacity = case
    graph = TaskGraph.from_tasks([transfer(f"f{i}", 1.0, links) for i, links in enumerate(flows)])
    np.testing.assert_allclose(_shared(graph, np.array(capacity)), maxmin_rates(flows, np.array(capacity)), rtol=1e-12)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 8), st.integers(1, 8), st.integers(0, 2**32 - 1))
def test_water_filling_on_the_matrix_gives_the_lists_rates_to_the_bit(rows, cols, seed):
    rng = np.random.default_rng(seed)
    sizes = rng.choice([0.0, 1.0], size=(rows, cols))
    sizes.flat[0] = 1.0  # at least one flow
    capacity = rng.choice([1.0, 2.0, 3.0, 7.5], rows + cols)
    graph = matrix_graph(sizes)
    dense = _shared(graph, capacity, sizes.shape)
    np.testing.assert_array_equal(dense, _shared(graph, capacity))
    links = graph.link_ids.reshape(-1, 2).tolist()
    np.testing.assert_allclose(dense, maxmin_rates(links, capacity), rtol=1e-12)


# --- the same code as plain Python ---------------------------------------------------------------------

PLAIN = textwrap.dedent("""
    import json, sys
    sys.modules["numba"] = None  # as when the fast extra is missing: njit is a no-op
    import numpy as np
    from stepbudget.sim import _core, run_graph
    from stepbudget.sim.collectives import ring_all_reduce
    from stepbudget.sim.flows import matrix_end_times
    assert not _core.AVAILABLE
    ring = run_graph(ring_all_reduce(8, 1e9), np.full(8, 50e9), link_rate_multiplier=np.linspace(0.5, 1.5, 8))
    sizes = np.random.default_rng(2).choice([0.0, 1e6, 2e6, 3.5e6], (12, 12))
    ends = matrix_end_times(sizes, np.full(12, 1e9), np.linspace(1e9, 3e9, 12), finish_rtol=5e-4)
    print(json.dumps({"ring": ring.end_s.tolist(), "events": ring.engine_events, "matrix": ends.tolist()}))
""")


def test_without_numba_the_same_code_runs_as_plain_python_to_the_same_bits():
    import json

    from stepbudget.sim.flows import matrix_end_times

    out = subprocess.run([sys.executable, "-c", PLAIN], capture_output=True, text=True, timeout=300,
                         cwd=Path(__file__).parent)
    assert out.returncode == 0, out.stderr
    plain = json.loads(out.stdout)
    ring = run_graph(ring_all_reduce(8, 1e9), np.full(8, 50e9), link_rate_multiplier=np.linspace(0.5, 1.5, 8))
    sizes = np.random.default_rng(2).choice([0.0, 1e6, 2e6, 3.5e6], (12, 12))
    ends = matrix_end_times(sizes, np.full(12, 1e9), np.linspace(1e9, 3e9, 12), finish_rtol=5e-4)
    assert plain["ring"] == ring.end_s.tolist() and plain["events"] == ring.engine_events
    assert plain["matrix"] == ends.tolist()


# --- the reference's own parts: its heap, and the observer only it has --------------------------------


def test_the_references_heap_orders_by_time_then_priority_then_insertion():
    engine, seen = oracle.Engine(), []
    engine.schedule(2.0, lambda: seen.append("t2"))
    engine.schedule(1.0, lambda: seen.append("late"), oracle.Priority.LATE)
    engine.schedule(1.0, lambda: seen.append("normal-a"))
    engine.schedule(1.0, lambda: seen.append("normal-b"))
    engine.schedule(1.0, lambda: seen.append("urgent"), oracle.Priority.URGENT)
    engine.run()
    assert seen == ["urgent", "normal-a", "normal-b", "late", "t2"]
    assert engine.now == 2.0 and engine.events == 5


def test_the_references_run_until_stops_and_resumes():
    engine, seen = oracle.Engine(), []
    for t in (1.0, 2.0, 3.0):
        engine.schedule(t, lambda t=t: seen.append(t))
    engine.run(until=2.5)
    assert seen == [1.0, 2.0] and engine.now == 2.5
    engine.run()
    assert seen == [1.0, 2.0, 3.0]


def test_the_references_heap_refuses_the_past():
    engine = oracle.Engine()
    engine.schedule(1.0, lambda: None)
    engine.run()
    with pytest.raises(ValueError, match="time_s"):
        engine.schedule(0.5, lambda: None)


def test_the_references_observer_sees_every_start_and_end_in_time_order_and_the_rates():
    # the engine's timeline holds every start and end; the rates of each sharing only the reference tells
    seen = []
    tasks = [compute("a", 0, 1.0), transfer("x", 2.0, [0], deps=[0]), transfer("y", 2.0, [0], deps=[0])]
    graph = TaskGraph.from_tasks(tasks)
    oracle.run_graph(graph, np.ones(1), observer=lambda t, event, ids, rates: seen.append((t, event, ids.tolist(), rates)))
    times = [t for t, *_ in seen]
    assert times == sorted(times)
    started = sorted(i for _, e, ids, _ in seen if e == oracle.SimEvent.START for i in ids)
    ended = sorted(i for _, e, ids, _ in seen if e == oracle.SimEvent.END for i in ids)
    assert started == ended == [0, 1, 2]
    rates = [(t, r.tolist()) for t, e, _, r in seen if e == oracle.SimEvent.RATES]
    assert rates == [(1.0, [0.5, 0.5])]
    timeline = run_graph(graph, np.ones(1))
    assert sorted({t for t, e, _, _ in seen if e != oracle.SimEvent.RATES}) == sorted(
        set(timeline.start_s) | set(timeline.end_s))
