"""One scenario's MoE all-to-all, end to end: hiding ratio, layer times, traffic matrix, schedules.

Takes a scenario (model, cluster, layout) and builds what the `moe` command shows: the hiding
ratio R on NVLink and on the NIC (formulas.md 7.1), one MoE layer's compute, NVLink and NIC
times, the dispatch traffic matrix of one EP group for one micro-batch (balanced, expert-skewed,
pair-skewed as FAST's benchmark, or a measured matrix), and its completion time three ways:
lower bound, all pairs at once, FAST-style schedule.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from stepbudget.inputs.errors import OptionError
from stepbudget.a2a.matrix_input import GROUP, MAX_EP_GPUS, check_ep_group, checked_matrix, group_count, load_matrix
from stepbudget.a2a.ratio import MoELayerTimes, hiding_ratio, moe_layer_times
from stepbudget.a2a.routing import (SkewStats, gpu_traffic_matrix, node_limited_traffic,
                                    pair_skew_matrix, server_matrix, skew_stats)
from stepbudget.a2a.timing import AllToAllTimes, alltoall_times
from stepbudget.enums import Activation
from stepbudget.inputs.model import MoE
from stepbudget.inputs.scenario import Scenario, ScenarioError
from stepbudget.plan.derive import derive

__all__ = ["MAX_EP_GPUS", "MAX_SKEW_EXPONENT", "LayerInputs", "MoEReport", "Skew", "dispatch_matrix", "layer_inputs",
           "load_matrix", "moe_report", "parse_skew"]

MAX_SKEW_EXPONENT = 16.0
"""Largest Zipf exponent a skew takes: at 16 the second rank weighs 2^-16 of the first, so one peer (or expert)
already takes all but 0.002 % of the traffic and a larger exponent draws the same matrix."""

CHAPTER_ROWS = (  # chapter 5.5 and formulas.md 9.4, at 989 TFLOP/s
    ("chapter: f = 14,336 on 400 GB/s NVLink", 14336, 400e9, 8, 9.9),
    ("chapter: f = 14,336 on a 50 GB/s NIC", 14336, 50e9, 8, 1.2),
    ("chapter: DeepSeekMoE f = 1,408 on NVLink", 1408, 400e9, 8, 1.0),
)


@dataclass(frozen=True)
class Skew:
    """How the traffic matrix is drawn: "uniform", "experts" (Zipf popularity) or "pairs" (FAST's benchmark)."""

    kind: str
    exponent: float = 0.0


def parse_skew(text: str) -> Skew:
    """'uniform', 'zipf:S' (pairs, FAST's benchmark) or 'experts:S' (hot experts), 0 <= S <= MAX_SKEW_EXPONENT."""
    t = text.strip().lower()
    if t in ("uniform", "balanced", "0"):
        return Skew("uniform")
    kind, colon, value = t.partition(":")
    if kind not in ("zipf", "pairs", "experts") or not colon:
        raise OptionError("skew", f"{text[:40]!r} is not uniform, zipf:S or experts:S; e.g. zipf:0.8")
    if not value.strip():
        raise OptionError("skew", f"{text[:40]!r} has no exponent after the colon; e.g. {kind}:0.8")
    try:
        s = float(value)
    except ValueError:
        raise OptionError("skew", f"exponent {value[:40]!r} is not a number; e.g. {kind}:0.8") from None
    if not 0 <= s <= MAX_SKEW_EXPONENT:  # NaN fails both comparisons
        raise OptionError("skew", f"the Zipf exponent {value.strip()[:40]!r} is not in [0, {MAX_SKEW_EXPONENT:g}] "
                            f"(0 is balanced, past {MAX_SKEW_EXPONENT:g} one peer takes everything); e.g. {kind}:0.8")
    return Skew("experts" if kind == "experts" else "pairs", s + 0.0)  # + 0.0: -0 is 0


@dataclass(frozen=True)
class MoEReport:
    scenario: Scenario
    ratio: dict[str, dict[str, float]]
    """{"nvlink" | "nic": {"exact", "approx", "bandwidth_Bps"}}."""
    chapter: list[tuple[str, float, float]]
    """(label, R exact for n = 8, R the chapter prints)."""
    layer: dict[str, MoELayerTimes]
    """One MoE layer, forward, one micro-batch: times on NVLink and on the NIC."""
    servers: int
    gpus_per_server: int
    tokens_per_gpu: int
    skew: Skew
    matrix: np.ndarray
    """Dispatch bytes (S*G, S*G) of one MoE layer for one micro-batch."""
    stats: SkewStats
    times: AllToAllTimes
    forwarded_nic_bytes: float | None = None
    """Bytes crossing NICs when a token crosses once per target server and NVLink forwards it (under the
    node limit if any): what ``ep_kind: deepep`` sends, what plain all-to-all could save; None on one
    server or with a pair-skewed or given matrix."""
    plain_nic_bytes: float = 0.0
    """Bytes of ``matrix`` that cross NICs: every copy to another server."""
    forwards: bool = False
    """Whether the scenario forwards (``ep_kind: deepep`` or a node limit) rather than sending every copy."""


@dataclass(frozen=True)
class LayerInputs:
    """What one MoE layer's hiding ratio and times take from a scenario (formulas.md 7.1)."""

    expert_ffn: int
    hidden: int
    tokens_per_gpu: int
    """Tokens one GPU dispatches per micro-batch (the budget's figure, budget/traffic.py)."""
    top_k: int
    ep: int
    peak_flops: float
    """The GEMMs' peak (FP8 where precision.gemm says so)."""
    nvlink_Bps: float
    nic_Bps: float
    dispatch_bytes: float
    """Bytes per element of the dispatched tokens."""
    swiglu: bool
    ep_in_node: bool
    """Whether the EP group fits in one node, so the all-to-all stays on NVLink."""


def _moe_of(sc: Scenario) -> MoE:
    """The expert layers of ``sc``; a dense model is refused by name."""
    if sc.model.moe is None:
        raise ScenarioError(f"model.moe: {sc.name} is a dense model; add model.moe (experts, top_k) or pick an MoE preset")
    return sc.model.moe


def layer_inputs(sc: Scenario) -> LayerInputs:
    """One MoE layer of ``sc``: expert width, hidden size, tokens per GPU, top-k, EP, peak and link rates."""
    model, moe = sc.model, _moe_of(sc)
    plan = derive(sc)
    return LayerInputs(
        expert_ffn=moe.expert_ffn_size, hidden=model.hidden_size, tokens_per_gpu=int(plan.dispatch_tokens),
        top_k=moe.top_k, ep=sc.layout.ep, peak_flops=sc.peak_gemm_flops, nvlink_Bps=float(plan.nvlink_Bps),
        nic_Bps=float(plan.nic_Bps), dispatch_bytes=sc.precision.dispatch,
        swiglu=model.activation == Activation.SWIGLU, ep_in_node=int(np.asarray(plan.q["ep"])) >= sc.layout.ep)


def _check_split(moe: MoE, S: int, G: int) -> None:
    """Refuse a group the experts do not split over evenly (round-robin placement, as the budget assumes)."""
    if moe.num_experts % (S * G):
        raise OptionError(GROUP, f"{moe.num_experts} experts do not split over "
                            f"{S} x {G} = {S * G} GPUs; use a GPU count that divides {moe.num_experts}")


def _check_node_limit(moe: MoE, S: int, G: int) -> None:
    """Refuse a group whose servers hold too few experts for a token's top_k under the node limit."""
    per_server, reach = moe.num_experts // S, min(moe.node_limit or S, S)  # round-robin: E / S experts a server
    if reach * per_server < moe.top_k:
        raise OptionError(GROUP, f"{S} x {G} GPUs hold {per_server} expert"
                            f"{'s' * (per_server != 1)} a server, so a token's top_k = {moe.top_k} experts do not "
                            f"fit on the {reach} servers model.moe.node_limit lets it reach; put more GPUs in each "
                            "server or raise model.moe.node_limit")


def dispatch_matrix(sc: Scenario, skew: Skew, servers: int, gpus_per_server: int, seed: int = 0,
                    li: LayerInputs | None = None) -> np.ndarray:
    """One MoE layer call's dispatch bytes, source GPU by destination GPU, over ``servers`` x ``gpus_per_server``
    GPUs, drawn from the routing model with ``seed``: a fresh seed is the next call. The group is checked
    (check_ep_group) before anything is drawn."""
    S, G = check_ep_group(servers, gpus_per_server)
    li = li or layer_inputs(sc)
    moe, n = _moe_of(sc), S * G
    if skew.kind == "pairs":
        return pair_skew_matrix(n, li.tokens_per_gpu * moe.top_k * li.hidden * li.dispatch_bytes, skew.exponent,
                                rng=seed)
    _check_split(moe, S, G)
    placement = np.arange(moe.num_experts) % n  # round-robin, as the budget's skew factor assumes
    zipf = skew.exponent if skew.kind == "experts" else "uniform"
    return gpu_traffic_matrix(li.tokens_per_gpu, li.hidden, moe.num_experts, moe.top_k, n, skew=zipf,
                              bytes_per_elem=li.dispatch_bytes, rng=seed, expert_to_gpu=placement)


def _matrix_group(side: int, S: int | None, G: int | None, layout_G: int) -> tuple[int, int]:
    """Servers and GPUs per server of a given ``side`` x ``side`` matrix: those given, the rest from its side
    (GPUs per server from the layout when neither is given, all on one server when it has fewer); refused when
    they do not multiply to ``side``."""
    if S is None:
        if G is None:  # the layout's servers, or one server when the matrix is smaller than one
            G = side if side < layout_G else layout_G
        S = max(side // G, 1)
    elif G is None:
        G = max(side // S, 1)
    if S * G != side:
        raise OptionError("matrix", f"it is {side} x {side} but servers x gpus_per_server is {S:,} x {G:,} = "
                            f"{S * G:,} GPUs; give the servers and GPUs per server it was measured on "
                            f"(a product of {side})")
    return S, G


def _group(q: int, ep: int, servers: object, gpus_per_server: object, side: int | None) -> tuple[int, int]:
    """The EP group timed, checked before any matrix is built: ``servers`` x ``gpus_per_server`` as given, else
    from the layout (``q`` EP ranks in one node of the ``ep``), else from a given matrix's ``side``."""
    S = None if servers is None else group_count("servers", servers)
    G = None if gpus_per_server is None else group_count("gpus_per_server", gpus_per_server)
    layout_G = min(q, ep)
    if side is not None:
        S, G = _matrix_group(side, S, G, layout_G)
    G = layout_G if G is None else G
    S = max(ep // G, 1) if S is None else S
    return check_ep_group(S, G)


def _forwarded_nic_bytes(sc: Scenario, li: LayerInputs, skew: Skew, S: int, G: int, seed: int) -> float | None:
    """NIC bytes with one copy per target server (forwarded or not: the view says which); None on one server
    or with a pair-skewed matrix, which has no tokens to follow."""
    if S == 1 or skew.kind == "pairs":
        return None
    moe = _moe_of(sc)
    placement = np.arange(moe.num_experts) % (S * G)
    zipf = skew.exponent if skew.kind == "experts" else "uniform"
    nl = node_limited_traffic(li.tokens_per_gpu, li.hidden, moe.num_experts, moe.top_k, S, G, moe.node_limit or S,
                              skew=zipf, bytes_per_elem=li.dispatch_bytes, rng=seed, expert_to_gpu=placement)
    return nl.inter_server_bytes


def moe_report(sc: Scenario, skew: Skew = Skew("uniform"), servers: int | None = None,
               gpus_per_server: int | None = None, matrix: np.ndarray | str | os.PathLike | None = None, seed: int = 0,
               progress: Callable[[int, int], None] | None = None) -> MoEReport:
    """One MoE layer of ``sc``: hiding ratios, the dispatch matrix over ``servers`` x ``gpus_per_server`` GPUs (from
    the layout, or a given matrix's side, when None) under ``skew`` or the measured ``matrix`` (an array checked
    by ``checked_matrix``, or a file's path read by ``load_matrix``), and its all-to-all three ways;
    ``progress(finished, flows)`` follows the plain all-to-all's flows, the part that grows with the group.
    The group is at most MAX_EP_GPUS GPUs, checked before any matrix is built."""
    li = layer_inputs(sc)
    model, moe, cl = sc.model, _moe_of(sc), sc.cluster
    plan = derive(sc)
    given = (None if matrix is None else load_matrix(matrix) if isinstance(matrix, (str, os.PathLike))
             else checked_matrix(matrix))
    S, G = _group(int(np.asarray(plan.q["ep"])), li.ep, servers, gpus_per_server,
                  None if given is None else given.shape[0])
    peak, ep, f, nic, nvlink = li.peak_flops, li.ep, li.expert_ffn, li.nic_Bps, li.nvlink_Bps
    ratio = {name: {"exact": float(hiding_ratio(f, B, peak, ep)), "approx": float(hiding_ratio(f, B, peak)),
                    "bandwidth_Bps": B} for name, B in (("nvlink", nvlink), ("nic", nic))}
    chapter = [(label, float(hiding_ratio(ff, B, 989e12, n)), printed) for label, ff, B, n, printed in CHAPTER_ROWS]
    tokens, w = li.tokens_per_gpu, li.dispatch_bytes
    layer = {name: moe_layer_times(tokens, model.hidden_size, f, moe.top_k, ep, B, peak, w, li.swiglu)
             for name, B in (("nvlink", nvlink), ("nic", nic))}
    if given is not None:
        D, skew, nl_nic = given, Skew("measured"), None
    else:
        if skew.kind != "pairs":  # token routing: every check before the first matrix is drawn
            _check_split(moe, S, G)
            _check_node_limit(moe, S, G)
        D = dispatch_matrix(sc, skew, S, G, seed, li)
        nl_nic = _forwarded_nic_bytes(sc, li, skew, S, G, seed)
    times = alltoall_times(D, S, G, nic, nvlink, cl.nic_latency_s, progress=progress)
    return MoEReport(scenario=sc, ratio=ratio, chapter=chapter, layer=layer, servers=S, gpus_per_server=G,
                     tokens_per_gpu=tokens, skew=skew, matrix=D, stats=skew_stats(D), times=times,
                     forwarded_nic_bytes=nl_nic,
                     plain_nic_bytes=float(D.sum() - np.trace(server_matrix(D, S, G))),
                     forwards=sc.ep_forwards)
