"""The NIC's view of a training step: bursts, duty cycle, counters, buffers (formulas.md §8).

Every GPU computes, then its NIC sends the step's bytes at line rate, then idles;
all GPUs of a job do it at the same moment (chapter 5.6, HPN Figure 2). These
functions turn a step's bytes and time into what the wire and its instruments see.

Symbols (SI units): ``T_step`` = ``step_s`` (s), ``R`` = ``line_rate_Bps`` (bytes/s),
``T`` = ``burst_s`` (s, one burst at line rate), ``D`` = ``duty_cycle`` (-),
``W`` = ``window_s`` (s, counter poll interval), ``k`` = bursts converging on one
port (-), ``n`` = independent flows (-). Elementwise functions broadcast their
arguments; a 0-d input gives a 0-d answer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepbudget.budget.step import Budget
from stepbudget.enums import Collective
from stepbudget.inputs.errors import OptionError
from stepbudget.units import BITS_PER_BYTE

__all__ = [
    "WireView",
    "aggregate_cv",
    "average_rate",
    "buffer_for_bursts",
    "counter_bounds",
    "counter_reading",
    "drain_time",
    "duty_cycle",
    "flow_entropy",
    "max_burst_for_buffer",
    "rate_series",
    "wire_view",
]


def _require(ok: np.ndarray | bool, name: str, value: object, rule: str) -> None:
    """Raise ``ValueError`` naming the argument, its value and the rule, unless ``ok`` holds everywhere."""
    if not np.all(ok):
        shown = np.asarray(value)
        text = repr(shown.item()) if shown.ndim == 0 else np.array2string(shown, threshold=6)
        raise OptionError(name, f"{text}: {rule}", sep="=")


def _float(name: str, value: object) -> np.ndarray:
    array = np.asarray(value, dtype=np.float64)
    _require(~np.isnan(array), name, value, "must be a number, not NaN")
    return array


def duty_cycle(comm_s: np.ndarray | float, step_s: np.ndarray | float) -> np.ndarray:
    """Share of the step the link is busy, in [0, 1]; broadcasts."""
    comm_s, step_s = _float("comm_s", comm_s), _float("step_s", step_s)
    _require(step_s > 0, "step_s", step_s, "the step time must be > 0 seconds")
    _require(comm_s >= 0, "comm_s", comm_s, "the busy time must be >= 0 seconds")
    _require(comm_s <= step_s, "comm_s", comm_s,
             f"a link cannot be busy longer than the step (step_s={step_s}); "
             "the step must include its exposed communication")
    return comm_s / step_s  # D = T_comm,link / T_step, formulas.md 8.1


def average_rate(bytes_per_step: np.ndarray | float, step_s: np.ndarray | float) -> np.ndarray:
    """Mean rate over a step in bytes/s; broadcasts."""
    bytes_per_step, step_s = _float("bytes_per_step", bytes_per_step), _float("step_s", step_s)
    _require(bytes_per_step >= 0, "bytes_per_step", bytes_per_step, "must be >= 0 bytes")
    _require(step_s > 0, "step_s", step_s, "the step time must be > 0 seconds")
    return bytes_per_step / step_s  # R_avg = bytes_per_step / T_step = D * R, formulas.md 8.1


def rate_series(
    step_s: float,
    burst_s: float,
    line_rate_Bps: float,
    steps: int,
    dt: float | None = None,
    burst_start_s: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """One NIC's rate over ``steps`` steps: a burst at line rate, then idle, each step.

    Returns ``(t, rate)`` of equal length ``N``, a step function: ``rate[i]`` (bytes/s)
    holds on ``[t[i], t[i + 1])``; the series ends at ``t[-1] = steps * step_s`` where
    ``rate[-1] = 0``. With ``dt=None`` the points are the burst edges (exact); with a
    ``dt`` they are a grid of bins of ``dt`` seconds and each rate is the bin's mean
    (what a counter polled every ``dt`` shows), the last bin padded with idle time.
    Either way the bytes ``sum(rate[:-1] * diff(t))`` equal ``line_rate_Bps * burst_s * steps``.
    The burst starts ``burst_start_s`` into each step; by default it ends the step
    (compute first, then the exchange, chapter 5.6).
    """
    for name, value in (("step_s", step_s), ("burst_s", burst_s), ("line_rate_Bps", line_rate_Bps)):
        _require(np.ndim(value) == 0, name, value, "rate_series takes one NIC: pass a scalar")
    _require(step_s > 0, "step_s", step_s, "the step time must be > 0 seconds")
    _require(0 <= burst_s <= step_s, "burst_s", burst_s, f"must lie in [0, step_s={step_s}]")
    _require(line_rate_Bps > 0, "line_rate_Bps", line_rate_Bps, "must be > 0 bytes/s")
    _require(isinstance(steps, int | np.integer) and steps >= 1, "steps", steps,
             "must be an integer >= 1")
    start_s = step_s - burst_s if burst_start_s is None else float(burst_start_s)
    _require(0 <= start_s <= step_s - burst_s, "burst_start_s", burst_start_s,
             f"the burst must fit in the step: pass a value in [0, step_s - burst_s = {step_s - burst_s}]")
    end_s = steps * step_s
    if dt is None:
        on_s = np.arange(steps) * step_s + start_s
        t = np.concatenate([[0.0], np.stack([on_s, on_s + burst_s], axis=1).ravel(), [end_s]])
        rate = np.concatenate([[0.0], np.tile([line_rate_Bps, 0.0], steps), [0.0]])
        keep = np.r_[np.diff(t) > 0, True]  # drop zero-length segments
        return t[keep], rate[keep]
    _require(np.ndim(dt) == 0 and dt > 0, "dt", dt, "the bin width must be a scalar > 0 seconds")
    bins = int(np.ceil(end_s / dt * (1 - 1e-12)))  # enough bins to cover the series
    t = np.arange(bins + 1) * dt
    sent = _bytes_sent(t, step_s, burst_s, line_rate_Bps, steps, start_s)
    return t, np.r_[np.diff(sent) / dt, 0.0]  # bin mean = bytes in bin / dt


def _bytes_sent(t: np.ndarray, step_s: float, burst_s: float, line_rate_Bps: float,
                steps: int, start_s: float) -> np.ndarray:
    """Bytes sent from 0 to each time ``t`` by the periodic burst train."""
    step = np.floor(t / step_s)
    done = np.minimum(step, steps) * burst_s  # bursts of earlier steps, complete
    partial = np.where(step < steps, np.clip(t - step * step_s - start_s, 0.0, burst_s), 0.0)
    return line_rate_Bps * (done + partial)  # bytes = R * time at line rate


def counter_reading(t: np.ndarray, rate: np.ndarray, window_s: float) -> tuple[np.ndarray, np.ndarray]:
    """What a byte counter polled every ``window_s`` reports for the series ``(t, rate)``.

    ``(t, rate)`` is a step function as returned by ``rate_series``. Windows start at
    ``t[0]``; only whole windows are read. Returns ``(poll_s, reading_Bps)``, shape
    ``(M,)`` each: the poll time at the end of each window and ``bytes_in_window / W``
    (formulas.md 8.4).
    """
    t, rate = _float("t", t), _float("rate", rate)
    _require(t.ndim == 1 and t.shape == rate.shape and t.size >= 2, "t", t.shape,
             "t and rate must be 1-D of the same length >= 2 (a step function)")
    _require(np.diff(t) >= 0, "t", t, "times must be non-decreasing")
    _require(rate >= 0, "rate", rate, "rates must be >= 0 bytes/s")
    _require(np.ndim(window_s) == 0 and window_s > 0, "window_s", window_s, "must be a scalar > 0 seconds")
    windows = int(np.floor((t[-1] - t[0]) / window_s * (1 + 1e-12)))
    _require(windows >= 1, "window_s", window_s,
             f"longer than the series ({t[-1] - t[0]} s); simulate more steps or poll faster")
    sent = np.r_[0.0, np.cumsum(rate[:-1] * np.diff(t))]  # cumulative bytes at each point
    poll_s = t[0] + window_s * np.arange(windows + 1)
    in_window = np.diff(np.interp(poll_s, t, sent))  # exact: cumulative bytes are piecewise linear
    return poll_s[1:], in_window / window_s  # reported_rate = bytes_in_window / W, 8.4


def counter_bounds(step_s: np.ndarray | float, burst_s: np.ndarray | float,
                   line_rate_Bps: np.ndarray | float, window_s: np.ndarray | float
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Lowest and highest reading (bytes/s) a ``window_s`` counter can show, over all phases.

    For a periodic train of bursts of ``burst_s`` at ``line_rate_Bps`` every ``step_s``
    [derived]: with ``W = q * T_step + r``, a window holds ``q`` whole bursts plus at
    most ``min(r, T)`` and at least ``max(0, r - (T_step - T))`` more seconds of burst.
    Broadcasts; equal bounds (= D * R) when ``W`` is a whole number of steps.
    """
    step_s, burst_s = _float("step_s", step_s), _float("burst_s", burst_s)
    line_rate_Bps, window_s = _float("line_rate_Bps", line_rate_Bps), _float("window_s", window_s)
    _require(step_s > 0, "step_s", step_s, "the step time must be > 0 seconds")
    _require((burst_s >= 0) & (burst_s <= step_s), "burst_s", burst_s, "must lie in [0, step_s]")
    _require(line_rate_Bps >= 0, "line_rate_Bps", line_rate_Bps, "must be >= 0 bytes/s")
    _require(window_s > 0, "window_s", window_s, "must be > 0 seconds")
    whole = np.floor(window_s / step_s)  # q whole steps in the window
    rest_s = window_s - whole * step_s  # r
    most_s = whole * burst_s + np.minimum(rest_s, burst_s)
    least_s = whole * burst_s + np.maximum(0.0, rest_s - (step_s - burst_s))
    return line_rate_Bps * least_s / window_s, line_rate_Bps * most_s / window_s  # R * tau / W, 8.4


def buffer_for_bursts(k: np.ndarray | float, burst_s: np.ndarray | float,
                      rate_Bps: np.ndarray | float) -> np.ndarray:
    """Peak queue in bytes when ``k`` bursts at ``rate_Bps`` converge on one port of that rate."""
    k, burst_s, rate_Bps = _float("k", k), _float("burst_s", burst_s), _float("rate_Bps", rate_Bps)
    _require(k >= 1, "k", k, "the number of converging bursts must be >= 1")
    _require(burst_s >= 0, "burst_s", burst_s, "must be >= 0 seconds")
    _require(rate_Bps >= 0, "rate_Bps", rate_Bps, "must be >= 0 bytes/s")
    return (k - 1) * burst_s * rate_Bps  # Q_max = (k - 1) * R * T, formulas.md 8.2


def max_burst_for_buffer(buffer_bytes: np.ndarray | float, k: np.ndarray | float,
                         rate_Bps: np.ndarray | float) -> np.ndarray:
    """Longest burst (s) that ``k`` converging senders can send before ``buffer_bytes`` overflows.

    ``inf`` for ``k = 1`` (a lone burst never queues).
    """
    buffer_bytes, k = _float("buffer_bytes", buffer_bytes), _float("k", k)
    rate_Bps = _float("rate_Bps", rate_Bps)
    _require(buffer_bytes >= 0, "buffer_bytes", buffer_bytes, "must be >= 0 bytes")
    _require(k >= 1, "k", k, "the number of converging bursts must be >= 1")
    _require(rate_Bps > 0, "rate_Bps", rate_Bps, "must be > 0 bytes/s")
    with np.errstate(divide="ignore", invalid="ignore"):  # k = 1 with no buffer is 0 / 0: still no queue
        return np.where(k > 1, buffer_bytes / ((k - 1) * rate_Bps), np.inf)  # T <= Bf / ((k - 1) * R), formulas.md 8.2


def drain_time(k: np.ndarray | float, burst_s: np.ndarray | float) -> np.ndarray:
    """Seconds the port needs after ``k`` simultaneous bursts of ``burst_s`` to empty its queue."""
    k, burst_s = _float("k", k), _float("burst_s", burst_s)
    _require(k >= 1, "k", k, "the number of converging bursts must be >= 1")
    _require(burst_s >= 0, "burst_s", burst_s, "must be >= 0 seconds")
    return (k - 1) * burst_s  # drain = Q_max / R = (k - 1) * T, formulas.md 8.2


def aggregate_cv(n: np.ndarray | float, duty: np.ndarray | float) -> np.ndarray:
    """Coefficient of variation of the sum of ``n`` independent on/off flows of duty ``duty``.

    Holds only for independent flows; the flows of one synchronous job are phase-locked
    and add up like ``k`` coincident bursts instead (formulas.md 8.3).
    """
    n, duty = _float("n", n), _float("duty", duty)
    _require(n >= 1, "n", n, "the number of flows must be >= 1")
    _require((duty > 0) & (duty <= 1), "duty", duty, "the duty cycle must lie in (0, 1]")
    return np.sqrt((1 - duty) / (n * duty))  # CV = sqrt((1 - D) / (n D)), binomial, 8.3


def flow_entropy(bytes_per_flow: np.ndarray, axis: int = -1) -> np.ndarray:
    """Shannon entropy in bits of the flow-size distribution along ``axis``.

    ``log2(n)`` for ``n`` equal flows; near 0 when a few elephant flows carry the bytes
    (Meta RoCE: training traffic has low entropy). Shape: ``bytes_per_flow`` without ``axis``.
    """
    sizes = _float("bytes_per_flow", bytes_per_flow)
    _require(sizes.ndim >= 1, "bytes_per_flow", bytes_per_flow, "pass an array of flow sizes")
    _require(sizes >= 0, "bytes_per_flow", bytes_per_flow, "flow sizes must be >= 0 bytes")
    total = sizes.sum(axis=axis, keepdims=True)
    _require(total > 0, "bytes_per_flow", bytes_per_flow, "needs at least one flow with bytes > 0")
    share = sizes / total
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(share > 0, -share * np.log2(share), 0.0)  # H = -sum p log2 p, Shannon 1948
    return terms.sum(axis=axis)


@dataclass(frozen=True, eq=False)
class WireView:
    """What one NIC's wire shows for one training step (arrays broadcast from the inputs)."""

    bytes_per_step: np.ndarray
    """Bytes the NIC sends per step."""
    step_s: np.ndarray
    """Step time in seconds."""
    line_rate_Bps: np.ndarray
    """NIC line rate in bytes/s (the rate of every burst)."""
    window_s: np.ndarray
    """Counter poll interval in seconds."""
    burst_s: np.ndarray
    """Length of the burst at line rate: bytes_per_step / line_rate_Bps."""
    duty_cycle: np.ndarray
    """Share of the step the link is busy, in [0, 1]."""
    average_Bps: np.ndarray
    """Mean rate over the step: bytes_per_step / step_s."""
    counter_Bps: np.ndarray
    """What a counter polled every window_s reads when window_s >> step_s: D * R."""
    counter_min_Bps: np.ndarray
    """Lowest reading over all window phases (equals counter_Bps for whole steps)."""
    counter_max_Bps: np.ndarray
    """Highest reading over all window phases (line rate once window_s <= burst_s)."""
    peak_to_average: np.ndarray
    """Line rate over mean rate: 1 / D."""
    k_converging: np.ndarray
    """Bursts assumed to converge on one port (incast or an ECMP collision)."""
    buffer_bytes: np.ndarray
    """Peak queue of k converging bursts: (k - 1) * T * R."""
    drain_s: np.ndarray
    """Time to empty that queue after the bursts: (k - 1) * T."""
    switch_buffer_bytes: np.ndarray | None
    """Switch buffer available to the port, if given."""
    fits_in_buffer: np.ndarray | None
    """buffer_bytes <= switch_buffer_bytes, if a buffer was given."""
    max_burst_s: np.ndarray | None
    """Longest burst the switch buffer absorbs with k converging, if a buffer was given."""
    flows_per_gpu: np.ndarray | None
    """Flows (queue pairs) per GPU, if given."""
    flow_entropy_bits: np.ndarray | None
    """Entropy of equal-size flows: log2(flows_per_gpu)."""
    cv_if_independent: np.ndarray | None
    """Burstiness of the NIC's flows if they were independent: sqrt((1 - D) / (n D))."""
    cv_synchronized: np.ndarray
    """Burstiness of phase-locked flows, as in one training job: sqrt((1 - D) / D)."""
    cv_1000_web_flows: np.ndarray
    """The same duty cycle spread over 1,000 independent flows, as web traffic: sqrt((1 - D) / (1000 D))."""


def wire_view(
    bytes_per_step: np.ndarray | float,
    step_s: np.ndarray | float,
    line_rate_Bps: np.ndarray | float,
    window_s: np.ndarray | float = 15.0,
    k_converging: np.ndarray | float = 2,
    switch_buffer_bytes: np.ndarray | float | None = None,
    flows_per_gpu: np.ndarray | float | None = None,
) -> WireView:
    """The wire figures of chapter 5.6 / Panel 5.6 for one NIC; all inputs broadcast together."""
    inputs = {"bytes_per_step": bytes_per_step, "step_s": step_s, "line_rate_Bps": line_rate_Bps,
              "window_s": window_s, "k_converging": k_converging}
    optional = {"switch_buffer_bytes": switch_buffer_bytes, "flows_per_gpu": flows_per_gpu}
    given = {**inputs, **{name: v for name, v in optional.items() if v is not None}}
    floats = {name: _float(name, value) for name, value in given.items()}
    try:
        arrays = dict(zip(floats, np.broadcast_arrays(*floats.values()), strict=True))
    except ValueError:
        shapes = ", ".join(f"{name}{np.shape(value)}" for name, value in floats.items())
        raise ValueError(f"wire_view inputs do not broadcast together: {shapes}; "
                         "give them compatible shapes (numpy broadcasting)") from None
    Q, T_step, R, W, k = (arrays[name] for name in inputs)
    _require(R > 0, "line_rate_Bps", line_rate_Bps, "must be > 0 bytes/s")
    _require(Q >= 0, "bytes_per_step", bytes_per_step, "must be >= 0 bytes")
    _require(W > 0, "window_s", window_s, "the counter poll interval must be > 0 seconds")
    _require(k >= 1, "k_converging", k_converging, "the number of converging bursts must be >= 1")
    T = Q / R  # burst at line rate: T = bytes / R, 8.1
    _require(T <= T_step * (1 + 1e-9), "bytes_per_step", bytes_per_step,  # equal to the step, up to rounding
             "takes longer than step_s at line_rate_Bps; raise step_s or line_rate_Bps")
    T = np.minimum(T, T_step)
    D = duty_cycle(T, T_step)
    counter_min, counter_max = counter_bounds(T_step, T, R, W)
    buffer = buffer_for_bursts(k, T, R)
    Bf, n = arrays.get("switch_buffer_bytes"), arrays.get("flows_per_gpu")
    if n is not None:
        _require(n >= 1, "flows_per_gpu", flows_per_gpu, "must be >= 1")
    with np.errstate(divide="ignore"):
        peak_to_average = 1.0 / D  # R / R_avg = 1 / D, 8.1
        cv_synchronized = np.sqrt((1 - D) / D)  # phase-locked flows add like one: n = 1 in 8.3
        cv_independent = None if n is None else np.sqrt((1 - D) / (n * D))  # 8.3
        cv_web = cv_synchronized / np.sqrt(1000)  # 8.3 with n = 1,000 independent flows
    return WireView(
        bytes_per_step=Q, step_s=T_step, line_rate_Bps=R, window_s=W, burst_s=T, duty_cycle=D,
        average_Bps=average_rate(Q, T_step), counter_Bps=D * R,  # D * R for W >> T_step, 8.4
        counter_min_Bps=counter_min, counter_max_Bps=counter_max, peak_to_average=peak_to_average,
        k_converging=k, buffer_bytes=buffer, drain_s=drain_time(k, T), switch_buffer_bytes=Bf,
        fits_in_buffer=None if Bf is None else buffer <= Bf,
        max_burst_s=None if Bf is None else max_burst_for_buffer(Bf, k, R),
        flows_per_gpu=n, flow_entropy_bits=None if n is None else np.log2(n),  # H of n equal flows
        cv_if_independent=cv_independent, cv_synchronized=cv_synchronized, cv_1000_web_flows=cv_web,
    )


# --- one NIC of a budgeted job ---------------------------------------------------------------

MAX_POINTS = 1_000_000
"""Most steps, or counter readings, one NIC's series is drawn over (a bound on memory: 16 MB an array)."""

QPS_RING = 4
"""Queue pairs per GPU of a ring collective (Meta RoCE paper Table 2: about 4 for all-reduce on 128 GPUs)."""
QPS_ALL_TO_ALL = 15
"""Queue pairs per GPU of an all-to-all (same table: about 15)."""


_RATES = "cluster.nic_Bps, cluster.nvlink_Bps, cluster.achieved_flops"
"""The fields whose units set a step's length, named when a step is implausibly long."""


@dataclass(frozen=True)
class Wire:
    """One NIC of a budget's job over a few steps: the wire view, its rate series and the counter's."""

    budget: Budget
    view: WireView
    bytes_per_nic: float
    t: np.ndarray
    rate: np.ndarray
    poll_s: np.ndarray
    counter: np.ndarray


def _flows(budget: Budget) -> int:
    flows = 0
    for x in budget.exchanges:
        if float(x.calls) > 0 and float(x.nic_bytes) > 0:
            if x.collective == Collective.ALL_TO_ALL:
                flows += QPS_ALL_TO_ALL
            elif x.collective == Collective.SEND_RECV:
                flows += 2
            else:
                flows += QPS_RING
    return max(flows, 1)


def wire_of(budget: Budget, steps: int = 4, window_s: float = 15.0, k: int = 2,
            switch_buffer_bytes: float = 64e6) -> Wire:
    """One NIC of ``budget``'s job over ``steps`` steps: a line-rate burst per step, then idle."""
    sc = budget.plan.scenario
    cl = sc.cluster
    per_nic = float(budget.link_bytes()["nic"]) * cl.gpus_per_node / cl.nics_per_node  # the NIC carries its GPUs' share
    step = float(budget.step_s)
    _require(per_nic <= cl.nic_Bps * step * (1 + 1e-9), "cluster.nic_Bps", cl.nic_Bps,
             f"one NIC's {per_nic:.3g} bytes a step take longer than the {step:.3g} s step at this rate; "
             "check the rate and its unit (e.g. 400Gb/s)")
    view = wire_view(per_nic, step, cl.nic_Bps, window_s=window_s, k_converging=k,
                     switch_buffer_bytes=switch_buffer_bytes, flows_per_gpu=_flows(budget))
    _require(steps <= MAX_POINTS, "steps", steps, f"more than {MAX_POINTS:,} steps to draw; show fewer")
    span = max(window_s, step * steps)
    _require(span / step <= MAX_POINTS, "window_s", window_s,
             f"spans {span / step:.3g} steps of {step:.3g} s (more than {MAX_POINTS:,}); poll more often (a shorter window), "
             f"or check the scenario's rates and their units ({_RATES})")
    _require(span / window_s <= MAX_POINTS, "window_s", window_s,
             f"gives {span / window_s:.3g} counter readings over {steps} steps of {step:.3g} s (more than "
             f"{MAX_POINTS:,}); poll less often (a longer window), show fewer steps, or check the scenario's "
             f"rates and their units ({_RATES})")
    t, rate = rate_series(step, float(view.burst_s), cl.nic_Bps, steps)
    long_steps = int(np.ceil(span / step)) + 1  # enough steps for at least one whole counter window
    tl, rl = rate_series(step, float(view.burst_s), cl.nic_Bps, long_steps)
    poll, reading = counter_reading(tl, rl, window_s)
    return Wire(budget, view, per_nic, t, rate, poll, reading)


def host_nics(budget: Budget, steps: int = 2) -> tuple[np.ndarray, list[np.ndarray]]:
    """The rate of each NIC of one host over ``steps`` steps, in bits/s as line rates are quoted (HPN Figure 2):
    every NIC of the host carries its GPUs' share and bursts with the others, in lockstep. Returns ``(t, rates)``."""
    w = wire_of(budget, steps=steps)
    nics = budget.plan.scenario.cluster.nics_per_node
    return w.t, [w.rate * BITS_PER_BYTE for _ in range(nics)]  # the same burst train on every NIC
