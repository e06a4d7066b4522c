"""The NIC's view (formulas.md §8): worked numbers, Panel 5.6, properties, shapes."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stepbudget.wire import (
    WireView,
    aggregate_cv,
    average_rate,
    buffer_for_bursts,
    counter_bounds,
    counter_reading,
    drain_time,
    duty_cycle,
    flow_entropy,
    max_burst_for_buffer,
    rate_series,
    wire_view,
)

GB = 1e9
Gbps = 1e9 / 8  # bytes/s per Gb/s
R400 = 400 * Gbps  # 50 GB/s


def bytes_under(t, rate):
    return float(np.sum(rate[:-1] * np.diff(t)))


# --- worked numbers ---------------------------------------------------------------------------------


def test_duty_cycle_and_average_rate():
    assert duty_cycle(0.25, 1.0) == 0.25
    assert average_rate(12.5 * GB, 1.0) == pytest.approx(12.5 * GB)


def test_two_bursts_of_1ms_at_50GBps_need_50MB():  # formulas.md 8.2
    assert buffer_for_bursts(2, 1e-3, R400) == pytest.approx(50e6)
    assert max_burst_for_buffer(50e6, 2, R400) == pytest.approx(1e-3)
    assert drain_time(2, 1e-3) == pytest.approx(1e-3)


def test_50ms_burst_at_400Gbps_is_2_5GB_of_excess():  # chapter 5.6, "Three consequences"
    assert buffer_for_bursts(2, 50e-3, R400) == pytest.approx(2.5 * GB)


def test_lone_burst_never_queues():
    assert buffer_for_bursts(1, 1.0, R400) == 0.0
    assert max_burst_for_buffer(1e6, 1, R400) == np.inf


def test_15s_counter_over_1s_steps_reads_duty_times_line_rate():
    t, rate = rate_series(step_s=1.0, burst_s=0.25, line_rate_Bps=R400, steps=60)
    poll_s, reading = counter_reading(t, rate, window_s=15.0)
    assert poll_s.tolist() == [15.0, 30.0, 45.0, 60.0]
    np.testing.assert_allclose(reading, 0.25 * R400, rtol=1e-12)
    assert rate.max() == R400  # ... while the wire runs at 400 Gb/s


def test_microburst_5s_on_25s_off_reads_one_sixth_on_a_30s_poll():  # PathSolutions, formulas.md 8.4
    t, rate = rate_series(step_s=30.0, burst_s=5.0, line_rate_Bps=1.0, steps=4, burst_start_s=0.0)
    _, reading = counter_reading(t, rate, window_s=30.0)
    np.testing.assert_allclose(reading, 1 / 6, rtol=1e-12)


def test_fast_counter_sees_the_burst_at_line_rate():
    t, rate = rate_series(step_s=1.0, burst_s=0.25, line_rate_Bps=R400, steps=2)
    _, reading = counter_reading(t, rate, window_s=0.25)
    assert reading.max() == pytest.approx(R400) and reading.min() == 0.0


def test_rate_series_shape_default_burst_ends_the_step():
    t, rate = rate_series(step_s=1.0, burst_s=0.25, line_rate_Bps=2.0, steps=2)
    assert t.tolist() == [0.0, 0.75, 1.0, 1.75, 2.0]
    assert rate.tolist() == [0.0, 2.0, 0.0, 2.0, 0.0]


def test_rate_series_on_a_grid_averages_each_bin():
    t, rate = rate_series(step_s=1.0, burst_s=0.25, line_rate_Bps=4.0, steps=1, dt=0.5)
    assert t.tolist() == [0.0, 0.5, 1.0]
    assert rate == pytest.approx([0.0, 2.0, 0.0])


def test_counter_bounds_closed_form():
    # W = 2.5 steps of 1 s with 0.25 s bursts: 2 whole bursts plus 0 to 0.25 s of a third
    low, high = counter_bounds(1.0, 0.25, 1.0, 2.5)
    assert (low, high) == pytest.approx((0.5 / 2.5, 0.75 / 2.5))
    assert counter_bounds(1.0, 0.25, 1.0, 15.0) == pytest.approx((0.25, 0.25))


def test_aggregate_cv_falls_as_one_over_sqrt_n():
    assert aggregate_cv(1, 0.5) == pytest.approx(1.0)
    assert aggregate_cv(100, 0.5) == pytest.approx(0.1)
    assert aggregate_cv(1e6, 0.25) == pytest.approx(np.sqrt(3) / 1000)


def test_flow_entropy_is_low_for_elephants():
    assert flow_entropy(np.full(16, 1e6)) == pytest.approx(4.0)
    elephants = flow_entropy(np.r_[np.full(4, 1e9), np.full(1000, 1e3)])  # training host
    mice = flow_entropy(np.full(1004, 1e4))  # web host: many small flows
    assert elephants < 2.1 < mice
    assert flow_entropy(np.array([[1.0, 1.0], [1.0, 0.0]])).tolist() == [1.0, 0.0]


# --- Panel 5.6: same average, different duty cycle and line rate -------------------------------------


def test_panel_5_6_average_fixed_duty_traded_against_line_rate():
    step_s, bytes_per_step = 1.0, 0.25 * R400 * 1.0  # 25 % at 400 Gb/s = 12.5 GB per 1 s step
    fast = wire_view(bytes_per_step, step_s, R400, switch_buffer_bytes=64e6, flows_per_gpu=4)
    slow = wire_view(bytes_per_step, step_s, 200 * Gbps, switch_buffer_bytes=64e6, flows_per_gpu=4)
    assert (fast.duty_cycle, slow.duty_cycle) == pytest.approx((0.25, 0.50))
    unchanged = ["average_Bps", "counter_Bps", "counter_min_Bps", "counter_max_Bps", "buffer_bytes",
                 "fits_in_buffer", "flow_entropy_bits"]
    changed = ["line_rate_Bps", "duty_cycle", "burst_s", "peak_to_average", "drain_s", "max_burst_s",
               "cv_if_independent", "cv_synchronized"]
    for name in unchanged:
        assert getattr(fast, name) == pytest.approx(getattr(slow, name)), name
    for name in changed:
        assert getattr(fast, name) != pytest.approx(getattr(slow, name)), name
    assert fast.average_Bps == pytest.approx(12.5 * GB)  # a 15 s counter shows 100 Gb/s either way
    assert (fast.burst_s, slow.burst_s) == pytest.approx((0.25, 0.5))
    assert (fast.peak_to_average, slow.peak_to_average) == pytest.approx((4.0, 2.0))
    # two converging bursts queue one burst's bytes whatever the rate: (k-1) R T = bytes per burst
    assert fast.buffer_bytes == pytest.approx(12.5 * GB)
    assert not fast.fits_in_buffer  # far above a shallow-buffer switch
    assert (fast.max_burst_s, slow.max_burst_s) == pytest.approx((64e6 / R400, 64e6 / (200 * Gbps)))


def test_wire_view_fields_against_formulas():
    view = wire_view(bytes_per_step=50e6, step_s=10e-3, line_rate_Bps=R400, window_s=15.0)
    assert isinstance(view, WireView)
    assert view.burst_s == pytest.approx(1e-3)
    assert view.duty_cycle == pytest.approx(0.1)
    assert view.counter_Bps == pytest.approx(0.1 * R400)
    assert view.buffer_bytes == pytest.approx(50e6)
    assert view.fits_in_buffer is None and view.flows_per_gpu is None


# --- shapes: (), (2,), (2, 3) against the 0-d answer ----------------------------------------------------


@pytest.mark.parametrize("shape", [(), (2,), (2, 3)])
def test_wire_view_broadcasts_elementwise(shape):
    rng = np.random.default_rng(len(shape))
    step_s = rng.uniform(0.5, 2.0, shape)
    line_rate = rng.uniform(10, 50, shape) * GB
    bytes_per_step = rng.uniform(0.0, 1.0, shape) * step_s * line_rate
    buffer = rng.uniform(1e6, 1e9, shape)
    view = wire_view(bytes_per_step, step_s, line_rate, window_s=2.5, k_converging=3,
                     switch_buffer_bytes=buffer, flows_per_gpu=8)
    for index in np.ndindex(shape):
        one = wire_view(bytes_per_step[index], step_s[index], line_rate[index], window_s=2.5,
                        k_converging=3, switch_buffer_bytes=buffer[index], flows_per_gpu=8)
        for name in ("burst_s", "duty_cycle", "average_Bps", "counter_min_Bps", "counter_max_Bps",
                     "buffer_bytes", "drain_s", "fits_in_buffer", "max_burst_s", "cv_if_independent"):
            assert np.shape(getattr(view, name)) == shape
            assert getattr(view, name)[index] == getattr(one, name), name
        # an independent oracle for the element: the formulas written out
        D = bytes_per_step[index] / line_rate[index] / step_s[index]
        assert one.duty_cycle == pytest.approx(D)
        assert one.buffer_bytes == pytest.approx(2 * bytes_per_step[index])


# --- properties ----------------------------------------------------------------------------------------

trains = st.tuples(
    st.floats(1e-3, 10.0),  # step_s
    st.floats(0.0, 1.0),  # burst as a share of the step
    st.floats(1e6, 1e12),  # line rate, bytes/s
    st.integers(1, 40),  # steps
    st.floats(0.0, 1.0),  # where the burst starts, as a share of the idle time
)


@settings(max_examples=200, deadline=None)
@given(trains, st.one_of(st.none(), st.floats(0.01, 3.0)))
def test_bytes_are_conserved(train, dt_in_steps):
    step_s, share, rate_Bps, steps, phase = train
    burst_s = share * step_s
    start_s = phase * (step_s - burst_s)
    dt = None if dt_in_steps is None else dt_in_steps * step_s
    t, rate = rate_series(step_s, burst_s, rate_Bps, steps, dt=dt, burst_start_s=start_s)
    # exact up to rounding of the time stamps: each burst edge is off by <= eps * t_end
    rounding = 4 * np.finfo(float).eps * t[-1] * rate_Bps * steps
    assert bytes_under(t, rate) == pytest.approx(rate_Bps * burst_s * steps, rel=1e-9, abs=rounding)
    assert np.all(np.diff(t) > 0) and rate[-1] == 0.0


@settings(max_examples=200, deadline=None)
@given(trains, st.floats(0.05, 10.0))
def test_counter_never_exceeds_line_rate_and_stays_within_its_bounds(train, window_in_steps):
    step_s, share, rate_Bps, steps, phase = train
    burst_s = share * step_s
    window_s = window_in_steps * step_s
    t, rate = rate_series(step_s, burst_s, rate_Bps, steps, burst_start_s=phase * (step_s - burst_s))
    if window_s > t[-1]:
        with pytest.raises(ValueError, match="window_s"):
            counter_reading(t, rate, window_s)
        return
    _, reading = counter_reading(t, rate, window_s)
    low, high = counter_bounds(step_s, burst_s, rate_Bps, window_s)
    slack = 1e-9 * rate_Bps
    assert np.all(reading <= rate_Bps + slack)
    assert np.all(reading >= low - slack) and np.all(reading <= high + slack)


@settings(max_examples=200, deadline=None)
@given(st.floats(0.0, 1e3), st.floats(1e-6, 1e3))
def test_duty_cycle_is_the_busy_share_of_the_step_and_no_more(comm_s, extra_s):
    step_s = comm_s + extra_s
    D = duty_cycle(comm_s, step_s)
    assert 0.0 <= D <= 1.0 and D * step_s == pytest.approx(comm_s, abs=1e-12)  # formulas.md 8.1
    assert duty_cycle(comm_s, 2 * step_s) == pytest.approx(D / 2, abs=1e-15)  # twice the step, half the share
    with pytest.raises(ValueError, match="comm_s"):  # busy longer than the step: the step left it out
        duty_cycle(step_s * 1.001 + 1e-9, step_s)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0.0, 1e12), min_size=1, max_size=50).filter(lambda x: sum(x) > 0))
def test_flow_entropy_between_0_and_log2_n(sizes):
    H = flow_entropy(np.array(sizes))
    assert -1e-9 <= H <= np.log2(len(sizes)) + 1e-9


# --- bad inputs name the argument ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: duty_cycle(2.0, 1.0), "comm_s"),
        (lambda: duty_cycle(0.5, 0.0), "step_s"),
        (lambda: duty_cycle(-0.1, 1.0), "comm_s"),
        (lambda: average_rate(-1.0, 1.0), "bytes_per_step"),
        (lambda: average_rate(1.0, np.nan), "step_s"),
        (lambda: rate_series(1.0, 2.0, R400, 3), "burst_s"),
        (lambda: rate_series(1.0, 0.5, 0.0, 3), "line_rate_Bps"),
        (lambda: rate_series(1.0, 0.5, R400, 0), "steps"),
        (lambda: rate_series(1.0, 0.5, R400, 2.5), "steps"),
        (lambda: rate_series(1.0, 0.5, R400, 3, dt=0.0), "dt"),
        (lambda: rate_series(1.0, 0.5, R400, 3, burst_start_s=0.75), "burst_start_s"),
        (lambda: rate_series(np.ones(2), 0.5, R400, 3), "step_s"),
        (lambda: counter_reading(np.array([0.0, 1.0]), np.array([1.0, 0.0]), 0.0), "window_s"),
        (lambda: counter_reading(np.array([0.0, 1.0]), np.array([1.0, 0.0]), 2.0), "window_s"),
        (lambda: counter_reading(np.array([1.0, 0.0]), np.array([1.0, 0.0]), 0.5), "t"),
        (lambda: counter_reading(np.array([0.0, 1.0]), np.array([-1.0, 0.0]), 0.5), "rate"),
        (lambda: buffer_for_bursts(0, 1e-3, R400), "k"),
        (lambda: buffer_for_bursts(2, -1e-3, R400), "burst_s"),
        (lambda: max_burst_for_buffer(1e6, 2, 0.0), "rate_Bps"),
        (lambda: drain_time(2, -1.0), "burst_s"),
        (lambda: aggregate_cv(0, 0.5), "n"),
        (lambda: aggregate_cv(4, 0.0), "duty"),
        (lambda: flow_entropy(np.zeros(3)), "bytes_per_flow"),
        (lambda: flow_entropy(np.array([1.0, -1.0])), "bytes_per_flow"),
        (lambda: wire_view(2 * R400, 1.0, R400), "bytes_per_step"),
        (lambda: wire_view(1e9, 1.0, 0.0), "line_rate_Bps"),
        (lambda: wire_view(1e9, 1.0, R400, window_s=-1.0), "window_s"),
        (lambda: wire_view(1e9, 1.0, R400, k_converging=0.5), "k_converging"),
        (lambda: wire_view(1e9, 1.0, R400, flows_per_gpu=0), "flows_per_gpu"),
        (lambda: wire_view(1e9, np.ones(2), np.full(3, R400)), r"step_s\(2,\), line_rate_Bps\(3,\)"),
    ],
)
def test_bad_input_raises_value_error_naming_it(call, name):
    with pytest.raises(ValueError, match=rf"(^|\W){name}(=|\(|\W)"):
        call()


def test_every_nic_of_a_host_carries_the_same_bursts_in_bits_per_second():
    import stepbudget as sb
    from stepbudget.wire import host_nics, wire_of

    sc = sb.load("hpn-gpt3-175b")
    b = sb.estimate(sb.derive(sc))
    t, rates = host_nics(b, steps=2)
    one = wire_of(b, steps=2)
    assert len(rates) == sc.cluster.nics_per_node
    for rate in rates:
        assert np.array_equal(rate, one.rate * 8)  # one NIC's series, in bits/s
    assert rates[0].max() == pytest.approx(sc.cluster.nic_Bps * 8) and t[-1] == pytest.approx(2 * float(b.step_s))
