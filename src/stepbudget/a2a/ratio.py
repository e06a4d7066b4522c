"""MegaScale-MoE computation-to-communication hiding ratio of one MoE layer.

Symbols (formulas.md 0, 3.5, 7.1): ``f`` expert FFN width (elements), ``h`` hidden size
(elements), ``k`` top-k, ``n`` expert-parallel degree, ``T`` tokens held by one GPU, ``w``
bytes per element, ``B`` per-GPU all-to-all bandwidth (bytes/s), ``P`` peak FLOP/s.

Every function broadcasts its inputs once (``np.broadcast_arrays``) and works elementwise, so a
scalar call returns 0-d arrays and a sweep returns arrays of the broadcast shape.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["MoELayerTimes", "hiding_ratio", "moe_layer_times"]


def _positive(name: str, value: np.ndarray) -> None:
    if not np.all(np.isfinite(value)) or np.any(value <= 0):
        raise ValueError(f"{name} must be finite and > 0, got {value!r}; pass positive SI values")


def _ep_degree(ep) -> np.ndarray:
    n = np.asarray(ep, dtype=float)
    if not np.all(np.isfinite(n)) or np.any(n < 1):
        raise ValueError(f"ep must be >= 1 (expert-parallel degree), got {ep!r}; pass ep >= 1 or None")
    return n


def hiding_ratio(expert_ffn, bandwidth_Bps, peak_flops, ep=None) -> np.ndarray:
    """Computation-to-communication ratio ``R`` of an MoE layer (dimensionless).

    ``ep=None`` gives the paper's approximate form ``1.5*f*B/P``; an EP degree ``n`` gives the
    exact form ``1.5*f*n/(n-1)*B/P`` (infinite at ``n = 1``: nothing to send). All-to-all can be
    hidden behind the expert GEMMs when ``R > 1``. Assumes SwiGLU experts and BF16 (w = 2)
    activations; use :func:`moe_layer_times` for other cases.

    Shapes: all arguments broadcast together; the result has the broadcast shape.
    Units: expert_ffn elements, bandwidth_Bps bytes/s, peak_flops FLOP/s.
    """
    f, B, P = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (expert_ffn, bandwidth_Bps, peak_flops)))
    _positive("expert_ffn", f)
    _positive("bandwidth_Bps", B)
    _positive("peak_flops", P)
    if ep is None:
        return 1.5 * f * B / P  # MS-MoE §7: R ~= (3/2)*h_ffn*bandwidth/peak (formulas.md 7.1)
    n = _ep_degree(ep)
    with np.errstate(divide="ignore"):
        remote = np.where(n > 1, n / np.maximum(n - 1, 1e-300), np.inf)
    return 1.5 * f * remote * B / P  # exact: (3/2)*h_ffn*n/(n-1)*bandwidth/peak (formulas.md 7.1)


@dataclass(frozen=True)
class MoELayerTimes:
    """Forward time terms of one MoE layer on one GPU (arrays of the broadcast input shape)."""

    compute_s: np.ndarray
    """Expert GEMMs, forward, at peak FLOP/s (s)."""
    comm_s: np.ndarray
    """Dispatch + combine all-to-all bytes sent by one GPU over the bandwidth (s)."""
    ratio: np.ndarray
    """compute_s / comm_s (inf where nothing is sent, i.e. ep = 1)."""


def moe_layer_times(
    tokens_per_gpu,
    hidden,
    expert_ffn,
    top_k,
    ep,
    bandwidth_Bps,
    peak_flops,
    bytes_per_elem=2,
    swiglu=True,
) -> MoELayerTimes:
    """Expert compute and all-to-all time of one MoE layer, forward, uniform routing.

    A GPU holds ``T = tokens_per_gpu`` tokens (sequence-parallel attention) and, with balanced
    routing, processes ``T*k`` token copies after dispatch. Ignores attention, router, shared
    experts, latency and overlap; backward has 2x FLOPs and 2x bytes, so the same ratio.

    Shapes: all arguments broadcast together; each field has the broadcast shape.
    Units: tokens, elements, bytes/s, FLOP/s, bytes per element; results in seconds.
    """
    inputs = {
        "tokens_per_gpu": tokens_per_gpu,
        "hidden": hidden,
        "expert_ffn": expert_ffn,
        "top_k": top_k,
        "bandwidth_Bps": bandwidth_Bps,
        "peak_flops": peak_flops,
        "bytes_per_elem": bytes_per_elem,
    }
    arrays = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in inputs.values()))
    for name, value in zip(inputs, arrays):
        _positive(name, value)
    T, h, f, k, B, P, w = arrays
    n = _ep_degree(ep)
    matrices = np.where(np.asarray(swiglu, dtype=bool), 3.0, 2.0)  # SwiGLU: gate, up, down (formulas.md 2.4)
    copies = T * k  # token copies processed per GPU after dispatch, balanced routing (formulas.md 7.1)
    compute_s = 2.0 * matrices * h * f * copies / P  # 2 FLOP per MAC x 3 h x f matrices per copy (formulas.md 7.1)
    f_remote = (n - 1) / n  # fraction of copies whose expert is on another GPU, uniform (formulas.md 3.5)
    comm_s = 2.0 * copies * h * w * f_remote / B  # dispatch + combine bytes sent per GPU (formulas.md 3.5)
    with np.errstate(divide="ignore"):
        ratio = np.where(comm_s > 0, compute_s / np.where(comm_s > 0, comm_s, 1.0), np.inf)
    return MoELayerTimes(compute_s=compute_s, comm_s=comm_s, ratio=ratio)
