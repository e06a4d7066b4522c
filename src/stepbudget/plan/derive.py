"""Scenario -> Plan: everything the budget needs, as arrays.

A single scenario is the 0-d case. A sweep passes arrays of layout values (``layouts``) and
gets the same Plan with arrays of that shape: the budget code never knows the difference.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from stepbudget.enums import (ALGORITHM_CODES, CP_KIND_CODES, DP_KIND_CODES, DUALPIPE_CODE, RECOMPUTE_CODES,
                              SCHEDULE_CODES, Axis, DataParallel, EPKind, RateScope, Recompute)
from stepbudget.inputs.model import Model
from stepbudget.inputs.scenario import Scenario
from stepbudget.plan.flops import ModelCounts, model_counts
from stepbudget.plan.groups import (expert_strides, members_per_node, stage_members_per_node, stage_stride,
                                    strides, tier_slowdown)
from stepbudget.inputs.profiles import NO_PROFILE, Profile
from stepbudget.plan.calibration import profile_of
from stepbudget.plan.memory import parameter_copies
from stepbudget.plan.operators import (BACKWARD_RATIO, W_FRAC, Op, attention_kernels, head_ops, layer_ops,
                                       layer_times, layer_wgrad_s, op_sac_again, optimizer_s)


# layout fields a sweep may vary, with how to read each from a scenario
LAYOUT_FIELDS = (
    "tp", "cp", "pp", "dp", "ep", "expert_tp", "virtual_stages", "micro_batch",
    "schedule", "dp_kind", "reshard_after_forward", "sequence_parallel", "recompute", "cp_kind",
)


@dataclass(frozen=True)
class LayoutArrays:
    """The layout's degrees and choices, broadcast to one shape (0-d for one scenario); closed
    choices as their integer codes (enums.py). A Plan has these fields, and what follows from them."""

    tp: np.ndarray
    cp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    ep: np.ndarray
    expert_tp: np.ndarray
    v: np.ndarray
    micro_batch: np.ndarray
    schedule: np.ndarray
    dp_kind: np.ndarray
    reshard: np.ndarray
    """Parameters freed after each pass and gathered again (ZeRO-3, FSDP with reshard_after_forward)."""
    sequence_parallel: np.ndarray
    recompute: np.ndarray
    cp_kind: np.ndarray


@dataclass(frozen=True)
class Plan(LayoutArrays):
    """Per-GPU quantities of one step: the layout's degrees and choices (LayoutArrays, whose fields it has), then
    what follows from them. Array fields share one broadcast shape."""

    scenario: Scenario
    counts: ModelCounts
    # batch and work per GPU
    microbatches: np.ndarray
    """m: micro-batches each pipeline runs per step."""
    tokens_per_step: float
    layers_per_gpu: np.ndarray
    """Transformer layers one GPU holds (L / pp), all chunks together."""
    moe_layers_per_gpu: np.ndarray
    params_dense_per_gpu: np.ndarray
    """Non-expert parameters on one GPU (sharded by TP and PP)."""
    params_expert_per_gpu: np.ndarray
    """Routed-expert parameters on one GPU (sharded by EP, expert TP and PP)."""
    dp_group: np.ndarray
    """Ranks the non-expert model state is sharded over and its gradients reduce-scattered in:
    dp * cp, over ``dp_replicas``."""
    expert_dp_group: np.ndarray
    """The same for one expert's: tp * cp * dp / (ep * expert_tp), over ``dp_replicas``."""
    dp_replicas: int
    """Groups the sharded state is replicated over (HSDP): each shard's gradients are all-reduced across them."""
    dp_units: np.ndarray
    """Calls one round of the non-expert gradients (and parameters) is split into: a bucket each
    (DDP, ZeRO-1) or a layer each (FSDP unit; ZeRO-2 and -3)."""
    expert_dp_units: np.ndarray
    """The same for the routed experts' gradients."""
    model_flops_per_gpu: np.ndarray
    hardware_flops_per_gpu: np.ndarray
    # the machine, per GPU
    flops_rate: float | np.ndarray
    """Hardware FLOP/s the compute runs at: stated in the scenario, or hardware FLOPs over the operator model's time."""
    peak_flops: float
    rate_scope: RateScope
    nvlink_Bps: float
    nic_Bps: float
    hbm_Bps: float
    # geometry: members per node and tier slow-down of each group
    q: dict[str, np.ndarray] = field(default_factory=dict)
    tier: dict[str, np.ndarray] = field(default_factory=dict)
    dp_algorithm: np.ndarray = field(default_factory=lambda: np.asarray(0))
    rate_source: str = "stated"
    """"stated" (cluster.achieved_flops / achieved_fraction) or "operators" (plan/operators.py)."""
    operators: tuple[Op, ...] = ()
    """The operator model's operators of one average layer, then the output layer (empty when stated)."""
    optimizer_s: np.ndarray = field(default_factory=lambda: np.asarray(0.0))
    """Optimizer step time inside the compute time (operator model only)."""
    comm_sm_share: float = 0.0
    """Share of the SMs overlapped communication kernels hold (overlap.comm_sm_share, "auto" resolved)."""
    backward_ratio: np.ndarray | float = BACKWARD_RATIO
    """A layer's backward (recompute included) over its forward, which the zero-bubble and DualPipe bubbles
    depend on: the operator model's, else Narayanan21's 2."""
    w_frac: np.ndarray | float = W_FRAC
    """The weight-gradient share of that backward: the operator model's, else the zero-bubble paper's 1/2."""
    profile: Profile = NO_PROFILE
    """The calibration profile the operator model's rate and costs carry (none for a stated rate): set by
    ``with_profile``."""

    @property
    def shape(self) -> tuple[int, ...]:
        return np.shape(self.tp)

    @property
    def microbatch_slots(self) -> np.ndarray:
        """Micro-batch passes on the pipeline's critical path: m, plus the p - 1 of the fill (Narayanan21 2.2.1)."""
        return np.asarray(self.microbatches, dtype=float) + self.pp - 1

    @property
    def routed_token_layers(self) -> np.ndarray:
        """Tokens one GPU routes to experts per step, summed over the MoE layers it holds: m b s/(c t) k L_moe/p."""
        moe = self.scenario.model.moe
        return self.microbatches * self.dispatch_tokens * (moe.top_k if moe else 0) * self.moe_layers_per_gpu

    @property
    def overhead_s(self) -> np.ndarray:
        """Costs a step pays beyond the budget's terms: cluster.step_overhead_s, and the profile's per step, per
        micro-batch slot and per routed token-layer (inputs/profiles.py)."""
        p = self.profile
        return (self.scenario.cluster.step_overhead_s + p.cost("step_s") + p.cost("microbatch_s") * self.microbatch_slots
                + p.cost("routed_token_s") * self.routed_token_layers)

    def with_profile(self, profile: Profile) -> "Plan":
        """This uncalibrated plan run with ``profile``: the operator model's rate (the optimizer's too) times its
        GPU family's ``gemm_scale``, and its costs in ``overhead_s``."""
        scale = profile.gemm_scale(self.scenario.cluster.gpu.name)  # the stack's sustained rate against the model's
        return dataclasses.replace(self, flops_rate=self.flops_rate * scale, optimizer_s=self.optimizer_s / scale,
                                   profile=profile)

    @property
    def layer_units(self) -> np.ndarray:
        """Layers one GPU holds, whole (at least 1): the FSDP units, and the fewest DP calls whose last
        one still waits for the first layer's gradients."""
        return whole_layers(self.layers_per_gpu)

    @property
    def dispatch_tokens(self) -> np.ndarray:
        """Tokens one GPU routes to its experts per micro-batch and MoE layer: b*s/(c*t). Sequence
        parallelism shards them over TP; with expert TP, Megatron's all-to-all dispatcher gathers them
        over the TP group after the exchange (token_dispatcher.py)."""
        return self.micro_batch * self.scenario.model.seq_len / (self.cp * self.tp)


def _code(value: object, table: Mapping[Any, int]) -> np.ndarray:
    # ``table`` is keyed by StrEnum members, which hash and compare as their strings
    if isinstance(value, str):  # one scenario: a plain look-up
        return np.asarray(table[value])
    arr = np.asarray(value)
    if arr.dtype.kind in "iu":
        return arr
    return np.vectorize(lambda x: table[str(x)], otypes=[np.int64])(arr)


def layout_arrays(scenario: Scenario, layouts: Mapping[str, object] | None = None) -> LayoutArrays:
    """The scenario's layout with ``layouts`` replacing fields by arrays, broadcast together."""
    lay = scenario.layout
    base = {name: getattr(lay, name) for name in LAYOUT_FIELDS}
    base["expert_tp"] = lay.expert_tp_degree
    vals = {**base, **(layouts or {})}
    if layouts and "expert_tp" not in layouts and ("ep" in layouts or "tp" in layouts) and lay.expert_tp is None:
        vals["expert_tp"] = np.where(np.asarray(vals["ep"]) > 1, 1, vals["tp"])
    arrays = np.broadcast_arrays(
        *(np.asarray(vals[k]) for k in ("tp", "cp", "pp", "dp", "ep", "expert_tp", "virtual_stages", "micro_batch")),
        _code(vals["schedule"], SCHEDULE_CODES),
        _code(vals["dp_kind"], DP_KIND_CODES),
        np.asarray(vals["reshard_after_forward"], bool),
        np.asarray(vals["sequence_parallel"], bool),
        _code(vals["recompute"], RECOMPUTE_CODES),
        _code(vals["cp_kind"], CP_KIND_CODES),
    )
    tp, cp, pp, dp, ep, etp, v, mb, sched, dpk, reshard, sp, rec, cpk = arrays
    # parameters freed after each pass and gathered again: always under ZeRO-3, by FSDP's switch
    reshard = (dpk == DP_KIND_CODES[DataParallel.ZERO3]) | ((dpk == DP_KIND_CODES[DataParallel.FSDP]) & reshard)
    return LayoutArrays(tp=tp, cp=cp, pp=pp, dp=dp, ep=ep, expert_tp=etp, v=v, micro_batch=mb, schedule=sched,
                        dp_kind=dpk, reshard=reshard, sequence_parallel=sp, recompute=rec, cp_kind=cpk)


@dataclass(frozen=True)
class _Work:
    """Batch, parameters and FLOPs of one step on one GPU."""

    tokens_per_step: float
    microbatches: np.ndarray
    params_dense_per_gpu: np.ndarray
    params_expert_per_gpu: np.ndarray
    dp_group: np.ndarray
    expert_dp_group: np.ndarray
    model_flops_per_gpu: np.ndarray
    hardware_flops_per_gpu: np.ndarray


def _work(scenario: Scenario, counts: ModelCounts, lay: LayoutArrays) -> _Work:
    tp, cp, pp, dp, ep, etp = lay.tp, lay.cp, lay.pp, lay.dp, lay.ep, lay.expert_tp
    seqs = scenario.global_batch_seqs
    tokens = float(seqs * scenario.model.seq_len)
    gpus = tp * cp * pp * dp
    replicas = scenario.layout.dp_replicas  # HSDP: the state is sharded inside each group and replicated across them
    recompute_extra = np.choose(
        lay.recompute, [counts.recompute_flops_per_token[k] for k in ("none", "selective", "full", "selective-op")]
    )
    return _Work(
        tokens_per_step=tokens,
        microbatches=seqs / (dp * lay.micro_batch),
        params_dense_per_gpu=(counts.params_total - counts.params_routed_experts) / (tp * pp),
        params_expert_per_gpu=counts.params_routed_experts / (ep * etp * pp),
        dp_group=dp * cp // replicas,  # scenario checks the replicas split both groups
        expert_dp_group=tp * cp * dp / (ep * etp) / replicas,
        model_flops_per_gpu=counts.flops_per_token * tokens / gpus,  # balanced split of the step's FLOPs
        hardware_flops_per_gpu=(counts.flops_per_token + recompute_extra) * tokens / gpus,
    )


@dataclass(frozen=True)
class _Rate:
    """The compute rate and, when the operator model sets it, the operators and the optimizer's time."""

    flops_rate: float | np.ndarray
    source: str
    operators: tuple[Op, ...] = ()
    optimizer_s: np.ndarray = field(default_factory=lambda: np.asarray(0.0))
    backward_ratio: np.ndarray | float = BACKWARD_RATIO
    w_frac: np.ndarray | float = W_FRAC


def _stated_rate(scenario: Scenario) -> float | None:
    """FLOP/s the scenario states: achieved_flops, else achieved_fraction of the GEMM peak; None when neither."""
    cl = scenario.cluster
    if cl.achieved_flops:
        return cl.achieved_flops
    if cl.achieved_fraction:
        return cl.achieved_fraction * scenario.peak_gemm_flops
    return None


def _rate(scenario: Scenario, lay: LayoutArrays, work: _Work) -> _Rate:
    stated = _stated_rate(scenario)
    if stated is not None:
        return _Rate(float(stated), "stated")
    sharded = lay.dp_kind != DP_KIND_CODES[DataParallel.DDP]  # ZeRO-1 and up: each rank updates its 1/d shard
    updated = (work.params_dense_per_gpu / np.where(sharded, work.dp_group, 1)
               + work.params_expert_per_gpu / np.where(sharded, work.expert_dp_group, 1))
    ops, compute, opt_s, passes = _operator_compute(scenario, lay, work.microbatches, updated)
    fwd, bwd, wgrad = passes
    return _Rate(work.hardware_flops_per_gpu / compute, "operators", ops, opt_s, bwd / fwd, wgrad / bwd)


def derive(scenario: Scenario, layouts: Mapping[str, object] | None = None) -> Plan:
    """The per-GPU plan of ``scenario``; ``layouts`` replaces layout fields with arrays (sweeps)."""
    lay, counts, work = _layout_work(scenario, layouts)
    rate = _rate(scenario, lay, work)
    q, tier = _geometry(scenario, lay, work.dp_group, work.expert_dp_group)
    layers_per_gpu = scenario.model.num_layers / lay.pp
    copies = parameter_copies(lay.schedule)  # DualPipe ranks hold two stages' parameters (budget/traffic.py)
    units = (dp_units(scenario, lay.dp_kind, layers_per_gpu, work.params_dense_per_gpu * copies, work.dp_group),
             dp_units(scenario, lay.dp_kind, layers_per_gpu, work.params_expert_per_gpu * copies, work.dp_group))
    return _plan(scenario, counts, lay, work, rate, q, tier, units).with_profile(profile_of(scenario, rate.source))


def state_plan(scenario: Scenario, layouts: Mapping[str, object] | None = None) -> Plan:
    """``derive``'s plan without what times the step (rate NaN, no group placement, no DP calls): the layout,
    batch and shards budget/memory.py reads, so that a search measures every layout's memory and times only
    those that fit (sweep/search.py)."""
    lay, counts, work = _layout_work(scenario, layouts)
    untimed = np.full(np.shape(lay.tp), np.nan)
    return _plan(scenario, counts, lay, work, _Rate(np.nan, "stated"), {}, {}, (untimed, untimed))


def _layout_work(scenario: Scenario, layouts: Mapping[str, object] | None) -> tuple[LayoutArrays, ModelCounts, _Work]:
    lay = layout_arrays(scenario, layouts)
    counts = model_counts(scenario.model, scenario.flops.convention)
    return lay, counts, _work(scenario, counts, lay)


def _plan(scenario: Scenario, counts: ModelCounts, lay: LayoutArrays, work: _Work, rate: _Rate,
          q: dict[str, np.ndarray], tier: dict[str, np.ndarray], units: tuple[np.ndarray, np.ndarray]) -> Plan:
    model, cl = scenario.model, scenario.cluster
    return Plan(
        scenario=scenario,
        counts=counts,
        **vars(lay),  # the layout's fields, as they are
        microbatches=work.microbatches,
        tokens_per_step=work.tokens_per_step,
        layers_per_gpu=model.num_layers / lay.pp,
        moe_layers_per_gpu=model.moe_layers / lay.pp,
        params_dense_per_gpu=work.params_dense_per_gpu,
        params_expert_per_gpu=work.params_expert_per_gpu,
        dp_group=work.dp_group,
        expert_dp_group=work.expert_dp_group,
        dp_replicas=scenario.layout.dp_replicas,
        dp_units=units[0],
        expert_dp_units=units[1],
        model_flops_per_gpu=work.model_flops_per_gpu,
        hardware_flops_per_gpu=work.hardware_flops_per_gpu,
        flops_rate=rate.flops_rate,
        peak_flops=float(cl.gpu.peak_bf16_flops),
        rate_scope=cl.rate_scope,
        nvlink_Bps=cl.nvlink_Bps * cl.nvlink_efficiency,
        nic_Bps=cl.nic_Bps_per_gpu * cl.nic_efficiency,
        hbm_Bps=cl.gpu.hbm_Bps,
        q=q,
        tier=tier,
        dp_algorithm=np.asarray(ALGORITHM_CODES[scenario.layout.dp_ring]),
        rate_source=rate.source,
        comm_sm_share=_sm_share(scenario.overlap.comm_sm_share, rate.source),
        operators=rate.operators,
        optimizer_s=rate.optimizer_s,
        backward_ratio=rate.backward_ratio,
        w_frac=rate.w_frac,
    )


def _geometry(scenario: Scenario, lay: LayoutArrays, dp_group: np.ndarray,
              expert_dp_group: np.ndarray) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(members per node, tier slow-down) of each group, from the rank order and the node size."""
    order, g = scenario.layout.order, scenario.cluster.gpus_per_node
    degrees = {Axis.TP: lay.tp, Axis.CP: lay.cp, Axis.PP: lay.pp, Axis.DP: lay.dp}
    dense = tuple(a for a in order if a != Axis.EP)  # EP refactors the dense ranks; it adds none
    stride = strides(dense, degrees)
    # the expert groups live in one pipeline stage's ranks: runs of the degrees inside PP, run * pp apart
    # (plan/groups.py; with pp = 1 or PP outermost one run, as Megatron-Core's tp-cp-ep-dp-pp)
    expert = _ExpertGroups(expert_strides(order, lay.tp, lay.cp, lay.dp, lay.ep, lay.expert_tp),
                           stride[Axis.PP], lay.pp)
    q = _members_per_node(lay, stride, g, expert, dp_group, expert_dp_group)
    return q, _tiers(scenario, lay, stride, dp_group, expert)


@dataclass(frozen=True)
class _ExpertGroups:
    """Where the expert groups sit: their strides among one stage's ranks, and the stage's runs of ranks."""

    stride: dict[Axis, np.ndarray]
    """EP's and one expert's DP's member distance, counted in one stage's ranks (groups.expert_strides)."""
    run: np.ndarray
    """Consecutive ranks of one stage: the product of the degrees inside PP."""
    pp: np.ndarray
    """Pipeline degree: a stage's runs are run * pp ranks apart."""


def _members_per_node(lay: LayoutArrays, stride: dict[Axis, np.ndarray], g: int, expert: _ExpertGroups,
                      dp_group: np.ndarray, expert_dp_group: np.ndarray) -> dict[str, np.ndarray]:
    tp, cp, dp, ep, etp = lay.tp, lay.cp, lay.dp, lay.ep, lay.expert_tp
    # gradients reduce over dp * cp ranks: the CP members and the DP members of a node multiply; a shard
    # group takes the innermost of them, so its replicas share a node only when it is smaller than one
    q_dp = np.minimum(members_per_node(cp, stride[Axis.CP], g) * members_per_node(dp, stride[Axis.DP], g), g)
    # one expert's replicas: tp*cp*dp / (ep*expert_tp) ranks of one stage (Megatron-Core's expert grid)
    q_expert_dp = stage_members_per_node(tp * cp * dp // (ep * etp), expert.stride[Axis.DP], expert.run,
                                         expert.pp, g)
    q = {
        "tp": members_per_node(tp, stride[Axis.TP], g),
        "cp": members_per_node(cp, stride[Axis.CP], g),
        "pp": np.where(stride[Axis.PP] < g, 2, 1),
        "ep": stage_members_per_node(ep, expert.stride[Axis.EP], expert.run, expert.pp, g),
    }
    q["dp"], q["dp_replicas"] = _shard_and_replicas(q_dp, dp_group)
    q["expert_dp"], q["expert_dp_replicas"] = _shard_and_replicas(q_expert_dp, expert_dp_group)
    return q


def _tiers(scenario: Scenario, lay: LayoutArrays, stride: dict[Axis, np.ndarray], dp_group: np.ndarray,
           expert: _ExpertGroups) -> dict[str, np.ndarray]:
    tiers, replicas = scenario.cluster.tiers, scenario.layout.dp_replicas
    tp, cp, pp, ep = lay.tp, lay.cp, lay.pp, lay.ep
    return {
        "tp": tier_slowdown(tp, stride[Axis.TP], tiers, "ring"),
        "cp": tier_slowdown(cp, stride[Axis.CP], tiers, "ring"),
        "pp": tier_slowdown(pp, stride[Axis.PP], tiers, "ring"),
        # gradients reduce over the dp * cp ranks: one ring over the span of the DP group, whose CP
        # neighbours sit close together, so only its DP hops cross the tiers
        "dp": tier_slowdown(dp_group, stride[Axis.DP] / cp, tiers, "ring"),
        "dp_replicas": tier_slowdown(np.full_like(dp_group, replicas), stride[Axis.DP] / cp * dp_group, tiers, "ring"),
        "ep": tier_slowdown(ep, stage_stride(ep, expert.stride[Axis.EP], expert.run, expert.pp), tiers, "all-to-all"),
    }


def _shard_and_replicas(q, group) -> tuple[np.ndarray, np.ndarray]:
    """Members per node of an HSDP shard group of ``group`` ranks, the innermost of a DP group with ``q``
    members per node, and of its replica group (members ``group`` ranks apart)."""
    return np.minimum(q, group), np.maximum(q // group, 1)


MCORE_BUCKET_PARAMS, MCORE_BUCKET_PARAMS_PER_RANK = 40e6, 1e6
"""Megatron-Core's default gradient bucket: max(40 M, 1 M x DP ranks) parameters, "larger DP sizes need
larger buckets to ensure collectives do not become latency-bound" (distributed_data_parallel_config.py)."""


def whole_layers(layers_per_gpu) -> np.ndarray:
    return np.maximum(np.ceil(layers_per_gpu), 1)


def dp_units(scenario: Scenario, dp_kind, layers_per_gpu, params, dp_group) -> np.ndarray:
    """Collective calls per round of DP exchange of ``params``: Megatron-Core's buckets for DDP and
    ZeRO-1 (one bucket when DP is not overlapped: it "disables bucketing"), one FSDP unit per layer
    otherwise (ZeRO-2 and -3 reduce a layer as its backward ends)."""
    layers = whole_layers(layers_per_gpu)
    bucket = scenario.layout.dp_bucket_params or np.maximum(MCORE_BUCKET_PARAMS, MCORE_BUCKET_PARAMS_PER_RANK * dp_group)
    overlapped = scenario.overlap.dp == "auto" or float(scenario.overlap.dp) > 0
    buckets = np.maximum(np.ceil(params / bucket), 1) if overlapped else np.ones_like(layers)
    whole = (dp_kind == DP_KIND_CODES[DataParallel.DDP]) | (dp_kind == DP_KIND_CODES[DataParallel.ZERO1])
    return np.where(whole, buckets, layers) * np.ones_like(np.asarray(dp_group, dtype=float))


OVERLAP_SM_SHARE = 0.189 / 1.189
"""Share of the SMs that overlapped communication costs compute: Lee et al. 2025 (arXiv 2507.03114)
measure compute beside collectives 18.9 % slower on average (A100, H100; GPT and LLaMA layers),
and a kernel left 1 - s of the SMs runs 1 / (1 - s) as long: s = 0.189 / 1.189 (about 17 of 108 SMs)."""


def _sm_share(setting, source: str) -> float:
    # a stated rate was measured in the job itself, beside its own communication; the operator
    # model's kernel figures were measured alone
    if setting == "auto":
        return OVERLAP_SM_SHARE if source == "operators" else 0.0
    return float(setting)


def _operator_compute(sc: Scenario, lay: LayoutArrays, microbatches: np.ndarray, updated_params: np.ndarray
                      ) -> tuple[tuple[Op, ...], np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(operators, compute seconds per step, optimizer seconds, (forward, backward, weight-gradient) seconds of one
    average layer) from the operator model: layers x micro-batches, the output layer, and the optimizer step over
    ``updated_params`` (this rank's share). The backward holds what recompute runs again before it."""
    model, cl, pr = sc.model, sc.cluster, sc.precision
    k = attention_kernels(cl.gpu.kernels, sc.layout.attention_kernel)
    fp8 = pr.gemm == "fp8"
    peak_gemm = sc.peak_gemm_flops * k.clock  # power-capped sustained clock
    peak_bf16 = cl.gpu.peak_bf16_flops * k.clock
    # the operators see six columns: worked out once per distinct combination of them, then spread to the rows
    rows = _Distinct.of(lay.micro_batch, lay.cp, lay.tp, lay.sequence_parallel, lay.ep, lay.expert_tp)
    mb, cp, tp, sp, ep, etp = (rows.pick(x) for x in (lay.micro_batch, lay.cp, lay.tp, lay.sequence_parallel,
                                                       lay.ep, lay.expert_tp))
    T = mb * model.seq_len / cp  # query tokens of one micro-batch on this GPU
    layer = layer_ops(model, T, model.seq_len, tp, sp, ep, etp,
                      peak_bf16=peak_bf16, flash=sc.layout.flash_attention,
                      ep_gather=sc.layout.ep_kind == EPKind.ALL_GATHER, mb=mb, kernels=k,
                      peak_gemm=peak_gemm, gemm_eff=k.gemm_fp8 if fp8 else k.gemm, hbm_Bps=cl.gpu.hbm_Bps,
                      grad_bytes=pr.grad_buffer_bytes, fp8=fp8)
    head = head_ops(model, T, tp, k, peak_bf16, cl.gpu.hbm_Bps, pr.grad_buffer_bytes)
    layer, head = [rows.spread_op(op) for op in layer], [rows.spread_op(op) for op in head]
    head_fwd, head_bwd = layer_times(head)
    fwd, bwd = _layer_passes(model, layer, lay.recompute)
    per_microbatch = _busiest_stage_s(sc, lay, fwd + bwd, head_fwd, head_bwd)
    opt = optimizer_s(updated_params, pr.optimizer_bytes, pr.grad_buffer_bytes, pr.params, k, cl.gpu.hbm_Bps)
    return tuple(layer + head), microbatches * per_microbatch + opt, opt, (fwd, bwd, layer_wgrad_s(layer))


MIN_DISTINCT_ROWS = 64
"""Fewer layouts than this are evaluated row by row: finding the distinct ones would cost more than it saves."""


@dataclass(frozen=True)
class _Distinct:
    """The distinct combinations of a few small non-negative integer columns: one row of each (``first``) and
    each row's combination (``of_row``); None for both where there are too few rows to gain (one scenario)."""

    first: np.ndarray | None
    of_row: np.ndarray | None

    @staticmethod
    def of(*columns: np.ndarray) -> "_Distinct":
        n = int(np.size(columns[0]))
        if np.ndim(columns[0]) != 1 or n < MIN_DISTINCT_ROWS:
            return _Distinct(None, None)
        code, size = np.zeros(n, dtype=np.int64), 1
        for col in columns:  # each column ranked among its own values (no sort), then mixed-radix
            col = np.asarray(col, dtype=np.int64)
            seen = np.zeros(int(col.max()) + 1, dtype=bool)
            seen[col] = True
            rank = np.cumsum(seen) - 1
            code = code * int(rank[-1] + 1) + rank[col]
            size *= int(rank[-1] + 1)
        if size > 4 * n:  # many combinations: sort them instead of a table as large as their product
            _, first, of_row = np.unique(code, return_index=True, return_inverse=True)
            return _Distinct(first, of_row)
        present = np.zeros(size, dtype=bool)
        present[code] = True
        of_row = (np.cumsum(present) - 1)[code]
        first = np.empty(int(present.sum()), dtype=np.int64)
        first[of_row] = np.arange(n)  # any row of a combination stands for it: they share every input
        return _Distinct(first, of_row)

    def pick(self, x: np.ndarray) -> np.ndarray:
        """``x`` at one row per combination."""
        return x if self.first is None else x[self.first]

    def spread(self, x):
        """Values per combination back to every row (0-d values stay as they are)."""
        return x if self.of_row is None or np.ndim(x) == 0 else np.asarray(x)[self.of_row]

    def spread_op(self, op: Op) -> Op:
        return dataclasses.replace(op, flops=self.spread(op.flops), bytes=self.spread(op.bytes),
                                   fwd_s=self.spread(op.fwd_s), bwd_s=self.spread(op.bwd_s),
                                   wgrad_s=self.spread(op.wgrad_s))


def _layer_passes(model: Model, layer: list[Op], recompute: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds of one average layer for one micro-batch, the backward with what recompute runs
    again before it."""
    fwd, bwd = layer_times(layer)
    core = next(op for op in layer if op.kind == "attention")
    # per-op checkpointing is modelled for dense standard blocks only: ask for it only where a layout uses it
    op_sac = op_sac_again(model, layer) if np.any(recompute == RECOMPUTE_CODES[Recompute.SELECTIVE_OP]) else 0.0
    # none, selective, full, selective-op
    again = np.choose(recompute, [np.zeros_like(fwd), core.fwd_s * np.ones_like(fwd), fwd, op_sac * np.ones_like(fwd)])
    return fwd, bwd + again


def _busiest_stage_s(sc: Scenario, lay: LayoutArrays, layer_s: np.ndarray, head_fwd: np.ndarray,
                     head_bwd: np.ndarray) -> np.ndarray:
    """Seconds per micro-batch of the busiest pipeline stage, which sets the pipeline's pace."""
    model, pp = sc.model, lay.pp
    # the last stage carries the output layer unless the loss takes a layer slot (Megatron's flags;
    # Llama 3 3.3.2 removes a layer for it)
    e, l_ = int(sc.layout.embedding_in_pipeline_split), int(sc.layout.loss_in_pipeline_split)
    per_stage = sc.pipeline_slots / pp
    full, first = per_stage * layer_s, (per_stage - e) * layer_s
    others = np.where(pp >= 3, full, first)  # with two stages, the other one is the first
    last = (per_stage - l_) * layer_s + head_fwd + head_bwd
    single = (model.num_layers + model.mtp_layers) * layer_s + head_fwd + head_bwd
    # DualPipe: rank i holds stages i and p-1-i and runs each micro-batch on one of them (DSV3 Table 2),
    # so rank 0 averages the first stage and the last: half its micro-batches carry the output layer
    dualpipe = lay.schedule == DUALPIPE_CODE
    rank0 = (first + last) / 2
    middle = np.where(pp >= 4, full, 0.0)  # ranks 1 .. p/2-1 hold two middle stages
    busiest = np.where(dualpipe, np.maximum(middle, rank0), np.maximum(others, last))
    even = np.where(pp == 1, single, busiest)
    if not (e or l_):  # Megatron splits unevenly only without the embedding/loss slots
        first_n, middle_n, last_n, ruled = ruled_split(sc.pipeline_slots, pp, lay.v)
        if np.any(ruled):  # a search without uneven stages has none: skip a dozen passes over its chunk
            rule = _stage_split_s(first_n, middle_n, last_n, pp, layer_s, head_fwd + head_bwd, dualpipe)
            even = np.where(ruled, rule, even)  # dividing layouts as before
    if not sc.layout.uneven_split:
        return even
    # a stated split holds for the scenario's own pp; a sweep's other pp values keep the split above
    stated = _stated_split_s(sc.rank_layers, layer_s, head_fwd + head_bwd, dualpipe)
    return np.where(pp == sc.layout.pp, stated, even)


def uneven_split(layers, pp, v) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(first, middle, last, valid): layers of the first rank, of each middle rank and of the last rank (all
    chunks together) of the uneven split tried where ``pp * v`` does not divide ``layers``; arrays broadcast.

    The rule: each middle rank takes the even share rounded up to whole chunks, v*ceil(L/(p*v)), the fewest
    whole chunks the busiest rank can hold; the first and last ranks split what is left, the first the larger half
    (the last also runs the output layer). Valid where Megatron-LM builds it (transformer_config.py, uneven
    PP: decoder_first/last_pipeline_num_layers > 0 and multiples of v, the middle ranks' share a multiple of
    v): L a multiple of v, pp >= 2 and the last rank left at least one chunk. A split that divides evenly
    comes out even (L/p on every rank)."""
    L, p, v = np.asarray(layers), np.asarray(pp), np.asarray(v)
    middle = v * -(-L // (p * v))  # v * ceil(L / (p v))
    rest = L - np.maximum(p - 2, 0) * middle
    first = v * -(-rest // (2 * v))  # the larger half, in whole chunks
    last = rest - first
    return first, middle, last, (p >= 2) & (L % v == 0) & (last >= v)


def ruled_split(layers, pp, v) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``uneven_split``, and where it applies: pp x v does not divide the layers and Megatron builds the split."""
    first, middle, last, ok = uneven_split(layers, pp, v)
    return first, middle, last, (np.asarray(layers) % (np.asarray(pp) * v) != 0) & ok


def _stage_split_s(first: np.ndarray, middle: np.ndarray, last: np.ndarray, pp: np.ndarray, layer_s: np.ndarray,
                   head_s: np.ndarray, dualpipe: np.ndarray) -> np.ndarray:
    """Busiest rank of a first/middle/last split, element by element: the last rank adds the output layer;
    under DualPipe rank 0 averages the first and last stages and the middle ranks two middle ones (DSV3 Table 2)."""
    f, m, l_ = first * layer_s, np.where(pp >= 3, middle * layer_s, 0.0), last * layer_s + head_s
    paired = np.maximum(np.where(pp >= 4, m, 0.0), (f + l_) / 2)
    return np.where(dualpipe, paired, np.maximum(np.maximum(f, m), l_))


def _stated_split_s(rank_layers: tuple[int, ...], layer_s: np.ndarray, head_s: np.ndarray,
                    dualpipe: np.ndarray) -> np.ndarray:
    """Busiest rank of a stated split: each rank's layers, and the output layer on the last; under DualPipe
    rank i runs stages i and p-1-i by turns, so it averages them (DSV3 Table 2)."""
    p = len(rank_layers)
    stage = [n * layer_s + (head_s if r == p - 1 else 0.0) for r, n in enumerate(rank_layers)]
    paired = [(stage[i] + stage[p - 1 - i]) / 2 for i in range((p + 1) // 2)]
    return np.where(dualpipe, functools.reduce(np.maximum, paired), functools.reduce(np.maximum, stage))
