"""The event engine (``run_graph``, the compiled loop of sim/_core.py) against closed forms and hand-worked cases.

tests/sim/test_engine_oracle.py holds it to the Python reference of tests/oracles/engine.py on random graphs.
"""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stepbudget.sim import (
    TaskGraph,
    TaskKind,
    compute,
    join,
    run_graph,
    trace_events,
    transfer,
)
from stepbudget.sim.collectives import ring_all_reduce

GB = 1e9  # bytes
B = 50 * GB  # a 400 Gb/s NIC in bytes/s


def run(tasks, capacity, **options):
    return run_graph(TaskGraph.from_tasks(tasks), np.asarray(capacity, dtype=float), **options)


# --- link sharing in time ------------------------------------------------------------------------


def test_two_equal_flows_on_one_link_each_take_twice_as_long():
    alone = run([transfer("a", GB, [0])], [B])
    shared = run([transfer("a", GB, [0]), transfer("b", GB, [0])], [B])
    assert alone.end_s[0] == pytest.approx(GB / B, rel=1e-12)
    assert shared.end_s == pytest.approx([2 * GB / B] * 2, rel=1e-12)


def test_flow_over_two_links_runs_at_the_slower_one():
    timeline = run([transfer("a", GB, [0, 1])], [B, B / 4])
    assert timeline.end_s[0] == pytest.approx(4 * GB / B, rel=1e-12)


def test_late_flow_takes_half_the_link_and_the_first_speeds_up_when_it_leaves():
    # link of 1 B/s; A (10 B) alone for 2 s, then B (4 B) joins: both at 0.5 B/s,
    # B ends at 2 + 4/0.5 = 10 s with A at 2 + 4 = 6 B sent; A sends its last 4 B alone by 14 s
    tasks = [transfer("A", 10.0, [0]), compute("wait", 0, 2.0), transfer("B", 4.0, [0], deps=[1])]
    timeline = run(tasks, [1.0])
    assert timeline.end_s[[0, 2]] == pytest.approx([14.0, 10.0], rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.01, 100.0), min_size=1, max_size=30))
def test_flows_started_together_finish_as_processor_sharing(sizes):
    # n flows from t = 0 on one link of 1 B/s: the k-th smallest ends at
    # (sum of the smaller ones + (n - k + 1) * its size) / C  (egalitarian processor sharing)
    timeline = run([transfer(f"f{i}", size, [0]) for i, size in enumerate(sizes)], [1.0])
    ordered = np.sort(sizes)
    n = ordered.size
    expected = np.cumsum(ordered) - ordered + (n - np.arange(n)) * ordered
    np.testing.assert_allclose(np.sort(timeline.end_s), expected, rtol=1e-9)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 20.0), st.floats(0.01, 10.0)), min_size=1, max_size=20))
def test_shared_link_is_work_conserving(arrivals):
    # the link is busy whenever a flow is active, so it empties when a FIFO queue would
    tasks = []
    for i, (arrival_s, size) in enumerate(arrivals):
        tasks.append(compute(f"wait {i}", i, arrival_s))
        tasks.append(transfer(f"flow {i}", size, [0], deps=[2 * i]))
    timeline = run(tasks, [2.0])
    busy_until = 0.0
    for arrival_s, size in sorted(arrivals):
        busy_until = max(busy_until, arrival_s) + size / 2.0
    assert timeline.makespan_s == pytest.approx(busy_until, rel=1e-9)


def test_half_rate_link_multiplier_doubles_transfer_time():
    tasks = [transfer("a", GB, [0])]
    timeline = run(tasks, [B], link_rate_multiplier=np.array([0.5]))
    assert timeline.end_s[0] == pytest.approx(2 * GB / B, rel=1e-12)


@pytest.mark.parametrize("n", [2, 3, 4, 8, 16, 64])
def test_ring_all_reduce_takes_2_n_minus_1_over_n_S_over_B(n):
    S = 1 * GB
    timeline = run_graph(ring_all_reduce(n, S), np.full(n, B))
    expected = 2 * (n - 1) / n * S / B  # ring all-reduce, nccl-tests PERFORMANCE.md
    assert timeline.makespan_s == pytest.approx(expected, rel=1e-9)
    assert np.all(timeline.kind == TaskKind.TRANSFER)


def test_ring_builder_matches_a_hand_written_ring():
    n, S = 4, 8.0
    tasks = []
    for step in range(2 * (n - 1)):
        for rank in range(n):
            deps = [] if step == 0 else [(step - 1) * n + (rank - 1) % n, (step - 1) * n + rank]
            tasks.append(transfer(f"s{step} r{rank}", S / n, [rank], deps))
    by_hand = run(tasks, np.ones(n))
    built = run_graph(ring_all_reduce(n, S), np.ones(n))
    np.testing.assert_allclose(built.end_s, by_hand.end_s, rtol=1e-12)
    # a ring is only as fast as its slowest link: one link at half rate doubles the time
    slow = run_graph(ring_all_reduce(n, S), np.ones(n), link_rate_multiplier=np.r_[0.5, np.ones(n - 1)])
    assert slow.makespan_s == pytest.approx(2 * built.makespan_s, rel=1e-9)


# --- overlap: Animation 5.1's deadline ------------------------------------------------------


def test_overlapped_transfer_hidden_when_it_fits_exposed_by_the_overshoot_at_half_rate():
    layer_s, transfer_s = 10e-3, 8e-3  # the transfer fits under the second layer's compute
    tasks = [
        compute("layer 1", 0, layer_s),
        compute("layer 2", 0, layer_s, deps=[0]),
        transfer("bucket 1", transfer_s * B, [0], deps=[0]),
        join("step", deps=[1, 2]),
    ]
    full = run(tasks, [B])
    assert full.end_s[3] == pytest.approx(2 * layer_s, rel=1e-12)  # hidden
    half = run(tasks, [B], link_rate_multiplier=np.array([0.5]))
    exposed_s = 2 * transfer_s - layer_s  # T_exposed = max(0, T_comm - W), formulas.md 6.1
    assert half.end_s[3] == pytest.approx(2 * layer_s + exposed_s, rel=1e-12)


def bucketed_backward(num_layers, layer_s, bucket_bytes):
    """Backward on stream 0, one gradient bucket per layer, buckets all-reduced in order on link 0."""
    tasks = []
    for layer in range(num_layers):
        tasks.append(compute(f"bwd {layer}", 0, layer_s, deps=[2 * layer - 2] if layer else []))
        previous_bucket = [2 * layer - 1] if layer else []  # NCCL runs buckets in order on one stream
        tasks.append(transfer(f"bucket {layer}", bucket_bytes, [0], deps=[2 * layer, *previous_bucket]))
    tasks.append(join("step", deps=[2 * num_layers - 2, 2 * num_layers - 1]))
    return tasks


@pytest.mark.parametrize("multiplier", [1.0, 0.5, 0.25])
def test_bucketed_all_reduce_matches_the_ddp_recursion(multiplier):
    num_layers, layer_s, bucket_bytes = 6, 4e-3, 0.15 * GB  # 3 ms per bucket at full rate
    timeline = run(bucketed_backward(num_layers, layer_s, bucket_bytes), [B],
                   link_rate_multiplier=np.array([multiplier]))
    comm_s = bucket_bytes / (B * multiplier)
    end_s = 0.0
    for k in range(num_layers):  # start_k = max(r_k, end_{k-1}); end_k = start_k + c_k, formulas.md 6.2
        end_s = max((k + 1) * layer_s, end_s) + comm_s
    exposed_s = max(0.0, end_s - num_layers * layer_s)
    assert timeline.end_s[-1] == pytest.approx(num_layers * layer_s + exposed_s, rel=1e-12)
    if multiplier == 1.0:
        assert exposed_s == pytest.approx(comm_s)  # only the last bucket is exposed


# --- compute streams, jitter, joins ----------------------------------------------------------


def test_stream_runs_ready_tasks_one_at_a_time_in_order():
    timeline = run([compute("a", 0, 1.0), compute("b", 0, 2.0), compute("c", 1, 0.5)], [1.0])
    assert timeline.start_s.tolist() == [0.0, 1.0, 0.0]
    assert timeline.end_s.tolist() == [1.0, 3.0, 0.5]


def test_duration_multiplier_stretches_compute():
    tasks = [compute("a", 0, 1.0), compute("b", 0, 1.0, deps=[0])]
    timeline = run(tasks, [1.0], duration_multiplier=np.array([1.5, 1.0]))
    assert timeline.end_s.tolist() == [1.5, 2.5]


def test_join_and_empty_transfer_take_no_time():
    tasks = [compute("a", 0, 1.0), join("j", deps=[0]), transfer("empty", 0.0, [0], deps=[1])]
    timeline = run(tasks, [1.0])
    assert timeline.start_s.tolist() == [0.0, 1.0, 1.0]
    assert timeline.end_s.tolist() == [1.0, 1.0, 1.0]


# --- validation ----------------------------------------------------------------------------------


def test_cycle_is_reported():
    with pytest.raises(ValueError, match="cycle"):
        run([compute("a", 0, 1.0, deps=[1]), compute("b", 0, 1.0, deps=[0])], [1.0])


@pytest.mark.parametrize(
    ("tasks", "message"),
    [
        ([compute("a", -1, 1.0)], "stream"),
        ([compute("a", 0, -1.0)], "duration_s"),
        ([transfer("a", 1.0, [])], "link"),
        ([transfer("a", -1.0, [0])], "size_bytes"),
        ([compute("a", 0, 1.0, deps=[0])], "dependencies"),
        ([compute("a", 0, 1.0, deps=[5])], "dependencies"),
    ],
)
def test_bad_tasks_are_rejected_when_the_graph_is_built(tasks, message):
    with pytest.raises(ValueError, match=message):
        TaskGraph.from_tasks(tasks)


def test_bad_capacities_and_multipliers_name_the_argument():
    graph = TaskGraph.from_tasks([transfer("a", 1.0, [0, 1])])
    with pytest.raises(ValueError, match="link_capacity_Bps"):
        run_graph(graph, np.ones(1))
    with pytest.raises(ValueError, match="link_rate_multiplier"):
        run_graph(graph, np.ones(2), link_rate_multiplier=np.ones(3))
    with pytest.raises(ValueError, match="link_rate_multiplier"):
        run_graph(graph, np.ones(2), link_rate_multiplier=np.array([1.0, 0.0]))
    with pytest.raises(ValueError, match="duration_multiplier"):
        run_graph(graph, np.ones(2), duration_multiplier=np.array([-1.0]))


def test_graph_arrays_are_read_only():
    graph = TaskGraph.from_tasks([compute("a", 0, 1.0)])
    with pytest.raises(ValueError):
        graph.duration_s[0] = 2.0


# --- trace export ----------------------------------------------------------------------------------


def test_trace_events_structure():
    tasks = [compute("fwd", 0, 1e-3), transfer("send", 1e6, [0, 1], deps=[0]), join("done", deps=[1])]
    trace = trace_events(run(tasks, [1e9, 1e9]), link_names=["nic0 tx", "switch port 3"])
    events = json.loads(json.dumps(trace))["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    for event in complete:
        assert {"name", "cat", "ts", "dur", "pid", "tid"} <= event.keys()
    assert [(e["name"], e["tid"]) for e in complete] == [("fwd", 0), ("send", 0), ("send", 1)]
    assert complete[0]["dur"] == pytest.approx(1000.0)  # microseconds
    assert complete[1]["ts"] == pytest.approx(1000.0) and complete[1]["dur"] == pytest.approx(1000.0)
    names = {(e["pid"], e.get("tid"), e["name"]): e["args"]["name"] for e in events if e["ph"] == "M"}
    assert set(names.values()) == {"compute streams", "links", "stream 0", "nic0 tx", "switch port 3"}
    assert all(key[2] in {"process_name", "thread_name"} for key in names)
