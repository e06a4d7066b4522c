"""Completion time of one all-to-all on a two-tier cluster: bound, plain (NCCL-like), FAST.

Cluster: ``S`` servers x ``G`` GPUs; GPU ``g`` is local index ``g % G`` of server ``g // G``. Each
GPU has one NIC of ``B_out`` bytes/s each way (scale-out) and a scale-up port of ``B_up`` bytes/s
each way (NVLink through a non-blocking switch). ``alpha_s`` is the fixed cost of one scale-out
step. ``D`` is the (S*G, S*G) dispatch matrix in bytes (routing.py); the diagonal never moves.

The plain all-to-all starts every pair at once on the simulator's engine
(``stepbudget.sim.flows.matrix_end_times``: ``run_graph``'s end times on a dense path), which shares the links
max-min fairly (``stepbudget.maxmin``) and re-shares them each time a flow ends, so a receiver that many senders
target (incast) is shared among them while their other flows finish. FAST sends its staged schedule only where
that beats plain. (tests/oracles/alltoall.py keeps the fluid simulator the engine replaced, as a reference.)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from stepbudget.sim.engine import _TIME_RTOL
from stepbudget.sim.flows import matrix_end_times

from .routing import check_traffic_matrix, server_matrix
from .schedule import Matching, FastSchedule, balance_intra_server, fast_schedule

__all__ = [
    "AllToAllTimes",
    "FastTimes",
    "alltoall_times",
    "choose_unit_bytes",
    "fast_alltoall_s",
    "fast_alltoall_times",
    "lower_bound_s",
    "plain_alltoall_s",
]


# ---------------------------------------------------------------- inputs


def _rates(B_out, B_up) -> tuple[float, float]:
    for name, value in (("B_out", B_out), ("B_up", B_up)):
        if not np.isfinite(value) or value <= 0:
            raise ValueError(f"{name} must be a finite rate > 0 in bytes/s, got {value!r}; e.g. 50e9 for 400 Gb/s")
    return float(B_out), float(B_up)


def _alpha(alpha_s) -> float:
    if not np.isfinite(alpha_s) or alpha_s < 0:
        raise ValueError(f"alpha_s must be a latency >= 0 in seconds, got {alpha_s!r}")
    return float(alpha_s)


def _inputs(D, servers, gpus_per_server, B_out, B_up, alpha_s=0.0):
    """The common door of the timing functions: checked matrix, S, G, rates and latency."""
    D = check_traffic_matrix(D, servers, gpus_per_server)
    B_out, B_up = _rates(B_out, B_up)
    return D, int(servers), int(gpus_per_server), B_out, B_up, _alpha(alpha_s)


def _tiles(D: np.ndarray, S: int, G: int) -> np.ndarray:
    """(S, S, G, G) view: bytes from GPU i of server u to GPU j of server v."""
    return D.reshape(S, G, S, G).transpose(0, 2, 1, 3)


def _intrinsic_s(D: np.ndarray, S: int, G: int, B_up: float) -> float:
    """Intra-server all-to-all over scale-up: busiest port line / B_up (diagonal excluded)."""
    own = _tiles(D, S, G)[np.arange(S), np.arange(S)] * ~np.eye(G, dtype=bool)  # (S, G, G)
    return float(max(own.sum(axis=2).max(initial=0), own.sum(axis=1).max(initial=0))) / B_up


# ---------------------------------------------------------------- bound and plain


def lower_bound_s(D, servers, gpus_per_server, B_out, B_up) -> float:
    """Lower bound on any all-to-all of ``D`` (s): ``max(T_out, T_intra)``.

    ``T_out``: the busiest server's scale-out bytes (sent or received) over its ``G`` NICs
    (formulas.md 7.3 step 2, before the per-pair rounding of tau). ``T_intra``: the busiest
    scale-up port of the intra-server traffic. Their max, not their sum: a schedule may overlap
    them (FAST overlaps the intrinsic all-to-all with stage 0).
    """
    D, S, G, B_out, B_up, _ = _inputs(D, servers, gpus_per_server, B_out, B_up)
    M = server_matrix(D, S, G) * ~np.eye(S, dtype=bool)
    busiest = max(M.sum(axis=1).max(), M.sum(axis=0).max())
    out_s = busiest / (G * B_out)  # max line sum / (g * B_out) (formulas.md 7.3 step 2)
    return float(max(out_s, _intrinsic_s(D, S, G, B_up)))


_GROUP_MIN_FLOWS = 256  # below this many flows, every end is its own event (exact)
PLAIN_FINISH_RTOL = 5e-4
"""The engine's grouping (run_graph's finish_rtol): past _GROUP_MIN_FLOWS flows, those due within 0.05 % of the
elapsed time end together. It ends a batch at its first flow's due time, not at each flow's own, so its error is
one-sided and twice a fluid's at the same tolerance: half of the fluid reference's 0.1 % keeps the plain time within
0.1 % of it (tests/oracles/alltoall.py; measured within 5e-4 on 8 x 8 and 16 x 8 uniform, Zipf and pair-skewed
loads; at 1e-3 it was 1.5e-3 off)."""
_EXACT_RTOL = _TIME_RTOL
"""Below _GROUP_MIN_FLOWS flows the engine ends together only the flows due at the same instant (its default)."""

Finisher = Callable[[np.ndarray, float, int, int], float]
"""``finish(sizes, rate, before, total) -> s``: when the last flow of ``sizes`` (n, n) ends, all started at t = 0,
the flow of entry (i, j) leaving on GPU i's link and entering on GPU j's, every link at ``rate`` bytes/s; ``before``
of the ``total`` flows ran in parts timed already (for a progress count)."""


def _plain_s(D, servers, gpus_per_server, B_out, B_up, alpha_s, finish: Finisher) -> float:
    """The plain all-to-all timed by ``finish``, plus one ``alpha_s``.

    Its flows over the network (GPUs of different servers, NIC out of the sender to NIC in of the receiver) and
    over scale-up (the same server's other GPUs, scale-up port out to port in) share no link: timed apart.
    """
    D, S, G, B_out, B_up, alpha_s = _inputs(D, servers, gpus_per_server, B_out, B_up, alpha_s)
    server = np.arange(S * G) // G
    same = server[:, None] == server[None, :]
    network, scale_up = np.where(same, 0.0, D), np.where(same & ~np.eye(S * G, dtype=bool), D, 0.0)
    parts = [(sizes, rate, int(np.count_nonzero(sizes))) for sizes, rate in ((network, B_out), (scale_up, B_up))]
    total = sum(flows for _, _, flows in parts)
    ends, before = [], 0
    for sizes, rate, flows in parts:
        if flows:
            ends.append(finish(sizes, rate, before, total))
            before += flows
    # one launch latency (every pair starts at once), paid on the network only if a byte crosses it
    return (alpha_s if parts[0][2] else 0.0) + max(ends, default=0.0)


def plain_alltoall_s(D, servers, gpus_per_server, B_out, B_up, alpha_s=0.0,
                     progress: Callable[[int, int], None] | None = None) -> float:
    """Completion time (s) of an all-to-all that starts every pair at once (NCCL-like).

    Every GPU pair is one root transfer of the simulator's engine (:func:`stepbudget.sim.flows.matrix_end_times`),
    sharing the NICs (B_out) and scale-up ports (B_up) max-min fairly, re-shared as transfers end; plus one
    ``alpha_s``. Past _GROUP_MIN_FLOWS flows, those due within PLAIN_FINISH_RTOL of the elapsed time end
    together. ``progress(finished, flows)`` follows the flows as they end: the network's, then the scale-up
    domain's.
    """
    def finish(sizes, rate, before, total) -> float:
        watch = None if progress is None else lambda ended, _: progress(before + ended, total)
        rtol = PLAIN_FINISH_RTOL if np.count_nonzero(sizes) > _GROUP_MIN_FLOWS else _EXACT_RTOL
        links = np.full(sizes.shape[0], rate)
        return float(matrix_end_times(sizes, links, links, finish_rtol=rtol, progress=watch).max(initial=0.0))

    return _plain_s(D, servers, gpus_per_server, B_out, B_up, alpha_s, finish)


# ---------------------------------------------------------------- FAST


def choose_unit_bytes(server_matrix, alpha_s, B_out) -> int:
    """Unit (bytes, a power of 2) that minimises the estimated scale-out time of a FAST schedule.

    Estimate per unit ``u``: ``alpha_s * min((n-1)^2 + 1, Lambda_u) + Lambda_u * u / B_out`` with
    ``Lambda_u`` the max line sum of ``ceil(M / u)`` - fewer stages against rounding up [derived;
    FAST-code coarsens the same way when latency dominates, formulas.md 7.3 step 7].
    """
    M = np.asarray(server_matrix, dtype=np.int64)
    alpha_s = _alpha(alpha_s)
    B_out, _ = _rates(B_out, 1.0)
    top = int(M.max(initial=0))
    if alpha_s == 0 or top == 0:
        return 1
    n = M.shape[0]
    units = 2 ** np.arange(min(top.bit_length() + 1, 62), dtype=np.int64)
    scaled = -(-M[None] // units[:, None, None])
    lam = np.maximum(scaled.sum(axis=2).max(axis=1), scaled.sum(axis=1).max(axis=1))
    stages = np.minimum((n - 1) ** 2 + 1, lam)  # greedy BvN bound (schedule.py)
    estimate = alpha_s * stages + lam * units / B_out  # K*alpha + Lambda*unit*beta (formulas.md 7.3 step 6)
    return int(units[np.argmin(estimate)])


@dataclass(frozen=True)
class FastTimes:
    """Named time terms of a FAST all-to-all (formulas.md 7.3 step 6, FAST-code ``pipeline3``)."""

    balance_s: float
    """Scale-up moves that even out each server's GPUs (step 1)."""
    intrinsic_s: float
    """Intra-server all-to-all, overlapped with stage 0."""
    inter_s: np.ndarray
    """(K,) scale-out stage times ``alpha + w_k * unit / B_out``."""
    dispatch_s: np.ndarray
    """(K,) scale-up forwarding on the receiving servers after each stage."""
    staged_s: float
    """The staged pipeline: balance + max(inter_0, intrinsic) + sum_k max(dispatch_{k-1}, inter_k) + dispatch_{K-1}."""
    plain_s: float
    """All pairs at once (:func:`plain_alltoall_s`), what the scheduler sends where staging is not faster."""
    total_s: float
    """What the scheduler sends: min(staged_s, plain_s)."""
    sent_plain: bool
    """Whether staging buys nothing (staged_s >= plain_s: its per-stage latency and forwarding cost more than
    the plain all-to-all loses to sharing), so the all-to-all is sent plain."""
    schedule: FastSchedule
    """The staged schedule (sent or not)."""


def _unit_bytes(D: np.ndarray, S: int, G: int, alpha_s: float, B_out: float, unit_bytes: int | None) -> int:
    """``unit_bytes`` as given, or :func:`choose_unit_bytes` for the intra-balanced server matrix."""
    if unit_bytes is not None:
        return unit_bytes
    return choose_unit_bytes(balance_intra_server(D, S, G).server_matrix, alpha_s, B_out)


def _holdings(D: np.ndarray, sched: FastSchedule, S: int, G: int) -> np.ndarray:
    """(S, S, G, G) bytes GPU i of u holds for GPU j of v after balancing (fluid mix of moved bytes).

    A GPU above target hands over the same fraction of every destination; the handed-over bytes
    are shared among the GPUs below target in proportion to what each takes.
    """
    T = _tiles(D, S, G) * ~np.eye(S, dtype=bool)[:, :, None, None]
    rows = T.sum(axis=3)  # (S, S, G)
    moved = sched.balanced.moved_bytes.transpose(0, 2, 1).astype(np.float64)
    taken = sched.balanced.received_bytes.transpose(0, 2, 1).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out_share = np.where(rows > 0, np.minimum(moved / rows, 1.0), 0.0)  # [derived] a slice of every destination
        pool = (T * out_share[..., None]).sum(axis=2)  # (S, S, G_j) destinations of moved bytes
        total = taken.sum(axis=2, keepdims=True)
        in_share = np.where(total > 0, taken / total, 0.0)
    return T * (1.0 - out_share[..., None]) + in_share[..., None] * pool[:, :, None, :]


def _dispatch_s(D: np.ndarray, sched: FastSchedule, S: int, G: int, B_up: float) -> np.ndarray:
    """(K,) scale-up forwarding time after each stage: busiest port of any receiving server."""
    H = _holdings(D, sched, S, G)
    held = H.sum(axis=3)  # (S, S, G) real bytes each GPU sends to its rail peer of server v
    with np.errstate(divide="ignore", invalid="ignore"):
        mix = np.where(held[..., None] > 0, H / held[..., None], 0.0) * ~np.eye(G, dtype=bool)  # j != i only
    sent = np.zeros_like(held)
    u = np.arange(S)
    out = np.empty(sched.stages)
    for k, (perm, w) in enumerate(zip(sched.perms, sched.weights)):
        pair = (u, perm)
        now = np.clip(held[pair] - sent[pair], 0.0, float(w * sched.unit_bytes))  # real bytes first, per GPU
        sent[pair] += now
        forward = now[..., None] * mix[pair]  # (S, G_i, G_j) relayed from GPU i to GPU j of server v
        port = max(forward.sum(axis=2).max(initial=0), forward.sum(axis=1).max(initial=0))
        out[k] = port / B_up
    return out


def fast_alltoall_times(
    D,
    servers,
    gpus_per_server,
    B_out,
    B_up,
    alpha_s=0.0,
    *,
    matching: Matching | str = Matching.HEAVY,
    unit_bytes: int | None = None,
    schedule: FastSchedule | None = None,
    plain_s: float | None = None,
) -> FastTimes:
    """Time terms of the FAST schedule of ``D`` (formulas.md 7.3 step 6, pipeline3), and whether it is sent.

    ``unit_bytes=None`` picks the unit with :func:`choose_unit_bytes` (1 byte when alpha is 0).
    Pass a precomputed ``schedule`` to skip scheduling, and ``plain_s`` (:func:`plain_alltoall_s` of the same
    inputs) to skip simulating the plain all-to-all. Scale-up steps are charged bandwidth only. Where the staged
    pipeline is not faster than plain (a balanced load: every stage's alpha and the forwarding buy nothing) the
    scheduler sends plain, so ``total_s`` is never above ``plain_s``.
    """
    D, S, G, B_out, B_up, alpha_s = _inputs(D, servers, gpus_per_server, B_out, B_up, alpha_s)
    if schedule is None:
        unit_bytes = _unit_bytes(D, S, G, alpha_s, B_out, unit_bytes)
        schedule = fast_schedule(D, S, G, matching=matching, unit_bytes=unit_bytes)
    moved = np.maximum(schedule.balanced.scale_up_send_bytes, schedule.balanced.scale_up_recv_bytes)
    balance_s = float(moved.max(initial=0)) / B_up
    intrinsic_s = _intrinsic_s(D, S, G, B_up)
    w_bytes = schedule.weights * float(schedule.unit_bytes)
    inter_s = alpha_s + w_bytes / B_out  # alpha_out + w_k * beta_out * unit_bytes (formulas.md 7.3 step 6)
    dispatch_s = _dispatch_s(D, schedule, S, G, B_up)
    if schedule.stages == 0:
        staged = balance_s + intrinsic_s
    else:  # FAST-code pipeline3: t_balance + max(inter_0, t_intr) + sum max(t_disp_{k-1}, inter_k) + t_disp_{K-1}
        overlapped = float(np.maximum(dispatch_s[:-1], inter_s[1:]).sum())
        staged = balance_s + max(inter_s[0], intrinsic_s) + overlapped + dispatch_s[-1]
    if plain_s is None:
        plain_s = plain_alltoall_s(D, S, G, B_out, B_up, alpha_s)
    sent_plain = bool(plain_s <= staged)  # a tie sends plain: no schedule to run
    return FastTimes(
        balance_s=balance_s,
        intrinsic_s=intrinsic_s,
        inter_s=inter_s,
        dispatch_s=dispatch_s,
        staged_s=float(staged),
        plain_s=float(plain_s),
        total_s=float(min(staged, plain_s)),
        sent_plain=sent_plain,
        schedule=schedule,
    )


def fast_alltoall_s(D, servers, gpus_per_server, B_out, B_up, alpha_s=0.0, **options) -> float:
    """Completion time (s) of what the FAST scheduler sends for ``D``: its staged schedule, or plain where that is
    not slower; options as :func:`fast_alltoall_times`."""
    return fast_alltoall_times(D, servers, gpus_per_server, B_out, B_up, alpha_s, **options).total_s


@dataclass(frozen=True)
class AllToAllTimes:
    """One all-to-all three ways (seconds)."""

    lower_bound_s: float
    """No schedule can beat this (:func:`lower_bound_s`)."""
    plain_s: float
    """All pairs at once under max-min sharing (:func:`plain_alltoall_s`)."""
    scheduled_s: float
    """What the FAST scheduler sends (:func:`fast_alltoall_s`): min(staged_s, plain_s)."""
    staged_s: float
    """The FAST staged pipeline, sent or not (:attr:`FastTimes.staged_s`)."""
    sent_plain: bool
    """Whether the scheduler sends plain because staging is not faster (scheduled_s == plain_s)."""
    stages: int
    """Scale-out stages of the FAST staged schedule (sent or not)."""
    speedup: float
    """plain_s / scheduled_s, never below 1."""
    schedule_seconds: float
    """Host wall time to compute the FAST schedule (measured, varies run to run)."""


def alltoall_times(
    D,
    servers,
    gpus_per_server,
    B_out,
    B_up,
    alpha_s=0.0,
    *,
    matching: Matching | str = Matching.HEAVY,
    unit_bytes: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> AllToAllTimes:
    """Lower bound, plain and FAST completion times of ``D`` (S*G, S*G) bytes on the cluster (FAST sends plain where
    staging is not faster).
    ``progress(finished, flows)`` follows the plain all-to-all, the part that grows with the group."""
    D, S, G, B_out, B_up, alpha_s = _inputs(D, servers, gpus_per_server, B_out, B_up, alpha_s)
    unit_bytes = _unit_bytes(D, S, G, alpha_s, B_out, unit_bytes)
    from . import _compiled  # numba loads only when a schedule is timed

    _compiled.warm()  # the first call in a process loads (or compiles) the compiled loop: time a warm call
    started = time.perf_counter()
    schedule = fast_schedule(D, S, G, matching=matching, unit_bytes=unit_bytes)
    schedule_seconds = time.perf_counter() - started
    plain = plain_alltoall_s(D, S, G, B_out, B_up, alpha_s, progress=progress)
    fast = fast_alltoall_times(D, S, G, B_out, B_up, alpha_s, schedule=schedule, plain_s=plain)
    return AllToAllTimes(
        lower_bound_s=lower_bound_s(D, S, G, B_out, B_up),
        plain_s=plain,
        scheduled_s=fast.total_s,
        staged_s=fast.staged_s,
        sent_plain=fast.sent_plain,
        stages=schedule.stages,
        speedup=plain / fast.total_s if fast.total_s > 0 else 1.0,
        schedule_seconds=schedule_seconds,
    )
