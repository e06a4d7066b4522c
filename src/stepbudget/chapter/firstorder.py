"""The chapter's first-order model: the arithmetic of Panels 5.1-5.6, over arrays.

Symbols (chapter 5; formulas.md 9): ``N`` parameters, ``G`` GPUs, ``B`` global batch in tokens,
``F`` achieved FLOP/s per GPU, ``M`` model-parallel group (the GPUs that share one copy of the
model: TP x CP x PP), ``D = G / M`` data-parallel group, ``beta`` link bandwidth (bytes/s),
``w`` bytes per element, ``phi`` overlap fraction. SI units throughout.

Each function broadcasts its inputs once (``np.broadcast_arrays``) and works elementwise: 0-d
inputs give 0-d answers, arrays give arrays of the broadcast shape. No latency, no bubble, no
TP, PP or EP traffic: the full model (``budget/step.py``) adds those, and ``chapter/panels.py``
says which of its terms differ for the same inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from stepbudget import _html, wire
from stepbudget.a2a.ratio import hiding_ratio, moe_layer_times

__all__ = [
    "BF16", "FP32", "DPExchange", "DPKind", "MoELayer", "StepRoofline", "StrongScaling", "WireTiles",
    "attainable", "balance", "compute_s", "dp_bytes_per_gpu", "dp_exchange", "dp_factor", "flops_per_gpu", "intensity",
    "moe_layer", "roofline", "strong_scaling", "wire_tiles",
]

BF16, FP32 = 2, 4
"""Bytes per element."""


class DPKind(StrEnum):
    """How the DP group exchanges one step's gradients and parameters (chapter 5.3's table)."""

    ALL_REDUCE = "all-reduce"
    """Ring all-reduce of the gradients (DDP): 2(D-1)/D of the gradient per GPU."""
    FSDP = "fsdp"
    """Reduce-scatter of the gradients and one all-gather of the parameters (FSDP, ZeRO-3 without
    reshard; Llama 3): (D-1)/D of each."""
    FSDP_RESHARD = "fsdp-reshard"
    """FSDP that reshards after the forward and gathers the parameters again for the backward:
    one reduce-scatter and two all-gathers."""


class _Shown:
    """A first-order result renders as a table in Jupyter, as the panels show it."""

    def _repr_html_(self) -> str:
        return _html.fields(self)


# legs of one step per kind: (gradient legs, parameter legs), each (D-1)/D of the shard (chapter 5.3)
_LEGS = {DPKind.ALL_REDUCE: (2, 0), DPKind.FSDP: (1, 1), DPKind.FSDP_RESHARD: (1, 2)}


def _arrays(*values) -> tuple[np.ndarray, ...]:
    return np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in values))


def flops_per_gpu(N, B, G) -> np.ndarray:
    """FLOP one GPU computes per step."""
    N, B, G = _arrays(N, B, G)
    return 6 * N * B / G  # 6N per token (Kaplan 2020; formulas.md 2.1), shared by G GPUs


def compute_s(N, B, G, F) -> np.ndarray:
    """T_comp = 6NB / (G F): the step's arithmetic at the achieved rate (chapter 5.4)."""
    return flops_per_gpu(N, B, G) / np.asarray(F, dtype=float)  # chapter 5.4, formulas.md 9.1


def dp_factor(D) -> np.ndarray:
    """(D - 1)/D: the share of a buffer each GPU of a D-way ring sends per pass."""
    D = np.asarray(D, dtype=float)
    return (D - 1) / D  # ring reduce-scatter or all-gather, nccl-tests PERFORMANCE.md (formulas.md 1.2)


def dp_bytes_per_gpu(N, M, D, kind: DPKind | str = DPKind.ALL_REDUCE, grad_bytes=BF16, param_bytes=BF16) -> np.ndarray:
    """Bytes each GPU sends per step in its DP group's exchange (chapter 5.3's table).

    Every GPU holds ``N / M`` parameters. An all-reduce sends ``2 (D-1)/D`` of the gradient; FSDP
    one ``(D-1)/D`` of the gradient (reduce-scatter) and of the parameters (all-gather), and a
    second all-gather of the parameters when it reshards after the forward.
    """
    N, M, D, wg, wp = _arrays(N, M, D, grad_bytes, param_bytes)
    grad_legs, param_legs = _LEGS[DPKind(kind)]
    shard = N / M  # parameters per GPU (chapter 5.3, formulas.md 9.2)
    return dp_factor(D) * shard * (grad_legs * wg + param_legs * wp)  # formulas.md 3.4


def intensity(flops, bytes_moved) -> np.ndarray:
    """FLOP per byte moved (infinite where nothing moves)."""
    flops, bytes_moved = _arrays(flops, bytes_moved)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(bytes_moved > 0, flops / np.where(bytes_moved > 0, bytes_moved, 1), np.inf)  # chapter 5.2


def balance(F, bandwidth_Bps) -> np.ndarray:
    """The balance point F / beta: the intensity at which the link's time equals the compute time."""
    F, bw = _arrays(F, bandwidth_Bps)
    return F / bw  # chapter 5.2 (400 TFLOP/s over 50 GB/s: 8,000 FLOP/B)


def attainable(intensity, F, bandwidth_Bps) -> np.ndarray:
    """The roofline: FLOP/s reachable at ``intensity`` FLOP/B when a link of ``bandwidth_Bps`` feeds a GPU of ``F``."""
    I, F, bw = _arrays(intensity, F, bandwidth_Bps)  # noqa: E741 (the chapter's symbol)
    return np.minimum(F, I * bw)  # Williams, Waterman, Patterson 2009; chapter 5.2


@dataclass(frozen=True)
class StepRoofline(_Shown):
    """Panel 5.1: one step of one GPU against the network and memory rooflines."""

    flops_per_gpu: np.ndarray
    bytes_per_gpu: np.ndarray
    """The DP exchange: a BF16 ring all-reduce of the gradient over D = G / M."""
    compute_s: np.ndarray
    comm_s: np.ndarray
    """bytes_per_gpu at the NIC's rate."""
    intensity: np.ndarray
    """FLOP per byte sent on the NIC."""
    balance_nic: np.ndarray
    balance_hbm: np.ndarray
    comm_over_compute: np.ndarray
    link_bound: np.ndarray
    """intensity < balance_nic: the NIC, not the arithmetic, sets the step."""
    shortfall: np.ndarray
    """balance_nic / intensity: how many times too few FLOP each byte carries (< 1 when compute-bound)."""


def roofline(N, G, B, F, nic_Bps, M=1, hbm_Bps=3.35e12, grad_bytes=BF16) -> StepRoofline:
    """Panel 5.1: FLOP and bytes per GPU per step, intensity against the NIC's and HBM's balance points."""
    N, G, B, F, nic, M, hbm, wg = _arrays(N, G, B, F, nic_Bps, M, hbm_Bps, grad_bytes)
    flops = flops_per_gpu(N, B, G)
    sent = dp_bytes_per_gpu(N, M, G / M, DPKind.ALL_REDUCE, wg)
    inten, bal = intensity(flops, sent), balance(F, nic)
    comp, comm = flops / F, sent / nic
    with np.errstate(divide="ignore"):
        shortfall = bal / inten
    return StepRoofline(flops_per_gpu=flops, bytes_per_gpu=sent, compute_s=comp, comm_s=comm, intensity=inten,
                        balance_nic=bal, balance_hbm=balance(F, hbm), comm_over_compute=comm / comp,
                        link_bound=inten < bal, shortfall=shortfall)


@dataclass(frozen=True)
class DPExchange(_Shown):
    """Panel 5.2: the DP exchange of one GPU for a split, a group size and a precision per leg."""

    params_per_gpu: np.ndarray
    shard_bytes: np.ndarray
    """The GPU's parameters at their precision: N / M x w_param."""
    bytes_per_gpu: np.ndarray
    comm_s: np.ndarray
    share_of_compute: np.ndarray
    """comm_s / compute_s."""
    intensity: np.ndarray
    """FLOP (compute_s x F) per DP byte sent."""
    balance: np.ndarray


def dp_exchange(N, M, D, kind: DPKind | str, grad_bytes, param_bytes, nic_Bps, compute_time_s, F) -> DPExchange:
    """Panel 5.2 for any model-parallel group ``M``, DP group ``D``, collective kind and leg precisions."""
    N, M, D, wg, wp, nic, T, F = _arrays(N, M, D, grad_bytes, param_bytes, nic_Bps, compute_time_s, F)
    sent = dp_bytes_per_gpu(N, M, D, kind, wg, wp)
    comm = sent / nic  # T_comm on the NIC, bandwidth only (chapter 5.3)
    return DPExchange(params_per_gpu=N / M, shard_bytes=N / M * wp, bytes_per_gpu=sent, comm_s=comm,
                      share_of_compute=comm / T, intensity=intensity(T * F, sent), balance=balance(F, nic))


@dataclass(frozen=True)
class StrongScaling(_Shown):
    """Panel 5.4: the two halves of a step and what overlap leaves exposed."""

    dp: np.ndarray
    """D = G / M."""
    dp_factor: np.ndarray
    compute_s: np.ndarray
    bytes_per_gpu: np.ndarray
    """The DP exchange: a ring all-reduce of the gradient at ``grad_bytes`` an element over D."""
    comm_s: np.ndarray
    comm_share: np.ndarray
    """T_comm / (T_comp + T_comm): the step's communication share if nothing were hidden."""
    hidden_s: np.ndarray
    exposed_s: np.ndarray
    step_s: np.ndarray
    mfu: np.ndarray
    """F / peak x T_comp / step: the estimate of model FLOPs utilisation."""


def strong_scaling(N, G, B, M, nic_Bps, F, phi, peak_flops, grad_bytes=BF16) -> StrongScaling:
    """Panel 5.4: T_comp = 6NB/(GF), T_comm = 2(D-1)/D x w N/M / beta, exposed = T_comm - min(phi T_comm, T_comp)."""
    N, G, B, M, nic, F, phi, peak, wg = _arrays(N, G, B, M, nic_Bps, F, phi, peak_flops, grad_bytes)
    D = G / M
    comp = compute_s(N, B, G, F)
    sent = dp_bytes_per_gpu(N, M, D, DPKind.ALL_REDUCE, wg)
    comm = sent / nic  # chapter 5.4's T_comm
    hidden = np.minimum(phi * comm, comp)  # hidden time cannot exceed the compute it hides behind (chapter 5.4)
    exposed = comm - hidden  # (1 - phi) T_comm while phi T_comm <= T_comp
    step = comp + exposed  # T_step = T_comp + T_exposed (chapter 5.4)
    return StrongScaling(dp=D, dp_factor=dp_factor(D), compute_s=comp, bytes_per_gpu=sent, comm_s=comm,
                         comm_share=comm / (comp + comm), hidden_s=hidden, exposed_s=exposed, step_s=step,
                         mfu=F / peak * comp / step)


@dataclass(frozen=True)
class MoELayer(_Shown):
    """Panel 5.5: one MoE layer's expert compute and its all-to-all on NVLink, on the NIC and on the chosen link."""

    compute_s: np.ndarray
    nvlink_s: np.ndarray
    nic_s: np.ndarray
    link_s: np.ndarray
    ratio: np.ndarray
    """R on the chosen link, exact form with n/(n-1) (formulas.md 7.1)."""
    ratio_approx: np.ndarray
    """R = 1.5 f B / P, MegaScale-MoE 7's form."""
    ratio_nvlink: np.ndarray
    ratio_nic: np.ndarray
    hides: np.ndarray
    """R > 1 on the chosen link: the all-to-all fits behind the expert GEMMs."""


def moe_layer(expert_ffn, hidden, tokens_per_gpu, top_k, ep, peak_flops, link_Bps, nvlink_Bps=400e9,
              nic_Bps=50e9) -> MoELayer:
    """Panel 5.5: forward expert GEMMs and dispatch + combine of one layer, uniform routing, SwiGLU, BF16."""
    times = {name: moe_layer_times(tokens_per_gpu, hidden, expert_ffn, top_k, ep, bw, peak_flops)
             for name, bw in (("link", link_Bps), ("nvlink", nvlink_Bps), ("nic", nic_Bps))}
    ratio = hiding_ratio(expert_ffn, link_Bps, peak_flops, ep)  # exact form, formulas.md 7.1
    return MoELayer(compute_s=times["link"].compute_s, nvlink_s=times["nvlink"].comm_s, nic_s=times["nic"].comm_s,
                    link_s=times["link"].comm_s, ratio=ratio,
                    ratio_approx=hiding_ratio(expert_ffn, link_Bps, peak_flops),  # MS-MoE 7: 1.5 f B / P
                    ratio_nvlink=hiding_ratio(expert_ffn, nvlink_Bps, peak_flops, ep),
                    ratio_nic=hiding_ratio(expert_ffn, nic_Bps, peak_flops, ep), hides=ratio > 1)


@dataclass(frozen=True)
class WireTiles(_Shown):
    """Panel 5.6: what one NIC's wire shows when it bursts at line rate for part of every step."""

    line_rate_Bps: np.ndarray
    step_s: np.ndarray
    duty_cycle: np.ndarray
    burst_s: np.ndarray
    bytes_per_burst: np.ndarray
    average_Bps: np.ndarray
    peak_to_average: np.ndarray
    k_converging: np.ndarray
    excess_bytes: np.ndarray
    """What k bursts arriving together at one port of the line rate leave queued: (k - 1) T R."""
    buffer_bytes: np.ndarray
    absorbed: np.ndarray
    """excess_bytes <= buffer_bytes."""
    max_burst_absorbed_s: np.ndarray
    drain_s: np.ndarray
    window_s: np.ndarray
    counter_Bps: np.ndarray
    """What a counter polled every window_s reports when the window spans many steps: D R."""
    counter_min_Bps: np.ndarray
    counter_max_Bps: np.ndarray
    web_flows: np.ndarray
    cv_web: np.ndarray
    """Burstiness of ``web_flows`` independent flows at this duty cycle: sqrt((1 - D) / (n D))."""
    cv_training: np.ndarray
    """Burstiness of the training job's flows, phase-locked by the step: sqrt((1 - D) / D), whatever their number."""


def _given(value: np.ndarray | None, name: str) -> np.ndarray:
    """A figure wire_view computes only when ``name`` is given, as wire_tiles always gives it."""
    if value is None:
        raise ValueError(f"wire_tiles: {name} must be a number, not None")
    return value


def wire_tiles(line_rate_Bps, step_s, duty_cycle=None, burst_s=None, k_converging=2, buffer_bytes=64e6,
               window_s=15.0, web_flows=1000) -> WireTiles:
    """Panel 5.6 from the line rate and either the duty cycle or the burst length (exactly one of them)."""
    if (duty_cycle is None) == (burst_s is None):
        raise ValueError("wire_tiles: give exactly one of duty_cycle or burst_s")
    R, T_step = _arrays(line_rate_Bps, step_s)
    T = T_step * np.asarray(duty_cycle, dtype=float) if burst_s is None else np.asarray(burst_s, dtype=float)
    view = wire.wire_view(T * R, T_step, R, window_s=window_s, k_converging=k_converging,
                          switch_buffer_bytes=buffer_bytes, flows_per_gpu=web_flows)
    return WireTiles(
        line_rate_Bps=view.line_rate_Bps, step_s=view.step_s, duty_cycle=view.duty_cycle, burst_s=view.burst_s,
        bytes_per_burst=view.bytes_per_step, average_Bps=view.average_Bps, peak_to_average=view.peak_to_average,
        k_converging=view.k_converging, excess_bytes=view.buffer_bytes,
        buffer_bytes=_given(view.switch_buffer_bytes, "buffer_bytes"), absorbed=_given(view.fits_in_buffer, "buffer_bytes"),
        max_burst_absorbed_s=_given(view.max_burst_s, "buffer_bytes"), drain_s=view.drain_s,
        window_s=view.window_s, counter_Bps=view.counter_Bps, counter_min_Bps=view.counter_min_Bps,
        counter_max_Bps=view.counter_max_Bps, web_flows=_given(view.flows_per_gpu, "web_flows"),
        cv_web=_given(view.cv_if_independent, "web_flows"), cv_training=view.cv_synchronized,
    )
