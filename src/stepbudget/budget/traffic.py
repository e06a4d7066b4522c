"""Exchanges per parallel dimension for one step, per GPU (formulas.md 3).

Each Exchange is one kind of collective call: its group, message, calls per step, bytes per
GPU per step (the chapter's count and the split over NVLink and the NIC) and time on the link.
Degrees of 1 give zero calls; views drop those rows.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from stepbudget.budget.collectives import call_cost
from stepbudget.enums import (CP_KIND_CODES, DP_KIND_CODES, HIERARCHICAL, RECOMPUTE_CODES, Axis, Collective, CPKind,
                              EPKind)
from stepbudget.plan.derive import Plan
from stepbudget.plan.memory import grads_sharded, parameter_copies
from stepbudget.plan.routing import busiest_gpu_factors, remote_nodes_per_token

DDP = DP_KIND_CODES["ddp"]
FULL = RECOMPUTE_CODES["full"]


@dataclass(frozen=True)
class Exchange:
    """One collective kind of one dimension. Arrays are per GPU, per step (``call_s`` per call)."""

    dim: Axis
    collective: Collective
    what: str
    """What travels: "activations", "grads", "params", "K,V", "tokens"."""
    critical: bool
    """On the critical path unless overlapped (TP, CP all-gather, EP); else overlappable."""
    group: np.ndarray
    message_bytes: np.ndarray
    calls: np.ndarray
    bytes_per_gpu: np.ndarray
    nvlink_bytes: np.ndarray
    nic_bytes: np.ndarray
    time_s: np.ndarray
    bandwidth_s: np.ndarray
    call_s: np.ndarray
    units: np.ndarray | float = 1.0
    """DP: the calls one round (the whole gradient or parameter buffer once) is split into."""

    @property
    def link(self) -> np.ndarray:
        """The link tier that carries the exchange's time: "nic" if any byte crosses it."""
        return np.where(self.nic_bytes > 0, "nic", "nvlink")


def _exchange(plan: Plan, dim: Axis, coll: Collective, what: str, critical: bool, group, S, calls, q, tier,
              algorithm=HIERARCHICAL) -> Exchange:
    calls = np.where(np.asarray(group) > 1, calls, 0.0)
    if not np.any(calls):  # the dimension is off everywhere: skip the arithmetic, same result
        zero = np.zeros(np.broadcast_shapes(np.shape(calls), plan.shape))
        return Exchange(dim, coll, what, critical, np.asarray(group), zero, zero, zero, zero, zero, zero, zero, zero)
    c = plan.scenario.cluster
    cost = call_cost(coll, S, group, q, algorithm, plan.nvlink_Bps, plan.nic_Bps / tier,
                     c.nvlink_latency_s, c.nic_latency_s)
    return Exchange(
        dim=dim, collective=coll, what=what, critical=critical,
        group=np.asarray(group), message_bytes=np.asarray(S, dtype=float) * (calls > 0), calls=calls,
        bytes_per_gpu=calls * cost.bytes_per_gpu, nvlink_bytes=calls * cost.nvlink_bytes,
        nic_bytes=calls * cost.nic_bytes, time_s=calls * cost.time_s, bandwidth_s=calls * cost.bandwidth_s,
        call_s=cost.time_s,
    )


def exchanges(plan: Plan) -> list[Exchange]:
    """Every exchange of one step (formulas.md 3.1-3.5)."""
    sc = plan.scenario
    m, w = sc.model, sc.precision
    h, s = m.hidden_size, m.seq_len
    b, t, c, p, e, v = plan.micro_batch, plan.tp, plan.cp, plan.pp, plan.ep, plan.v
    mbs = plan.microbatches
    layer_mb = plan.layers_per_gpu * mbs  # layer passes per GPU per step
    full = plan.recompute == FULL
    op_sac = plan.recompute == RECOMPUTE_CODES["selective-op"]
    out: list[Exchange] = []

    # TP: one all-reduce forward and one backward around attention and around the MLP, of
    # b*(s/c)*h elements (formulas.md 3.1); with SP each is a reduce-scatter + all-gather (same
    # bytes); full recompute repeats the forward ones, per-op selective checkpointing the forward
    # all-gathers (wk and w3 need their gathered inputs again; torchtitan saves reduce-scatter outputs)
    # or, without SP, the forward all-reduces. Experts without expert TP skip the MLP pair, and a
    # parallel block has one pair for both.
    S_tp = b * (s / c) * h * w.activations
    tp_mlp_layers = plan.layers_per_gpu - plan.moe_layers_per_gpu * (plan.expert_tp == 1)
    if m.parallel_block:
        tp_mlp_layers = 0 * tp_mlp_layers  # attention and MLP share one pair around the block
    pairs = mbs * (plan.layers_per_gpu + tp_mlp_layers)
    ar_calls = (2 + full) * pairs
    sp = plan.sequence_parallel
    tp_args = dict(group=t, S=S_tp, q=plan.q["tp"], tier=plan.tier["tp"])
    out.append(_exchange(plan, Axis.TP, Collective.ALL_REDUCE, "activations", True,
                         calls=np.where(sp, 0, ar_calls + op_sac * pairs), **tp_args))
    for coll, again in ((Collective.REDUCE_SCATTER, 0), (Collective.ALL_GATHER, op_sac)):
        out.append(_exchange(plan, Axis.TP, coll, "activations", True,
                             calls=np.where(sp, ar_calls + again * pairs, 0), **tp_args))

    # CP: all-gather K,V forward, reduce-scatter dK,dV backward (Llama 3 3.3.2), K,V sharded by TP
    # heads; ring: c-1 K,V blocks forward, twice that backward (formulas.md 3.2)
    if m.mla is not None:
        kv_width = m.mla.kv_lora_rank + m.mla.qk_rope_head_dim  # the latent is what is gathered
        kv_per_rank = kv_width * np.ones_like(t)
    else:
        kv_per_rank = m.kv_heads * m.head_width / t
    S_cp = 2 * b * s * kv_per_rank * w.activations
    ring = plan.cp_kind == CP_KIND_CODES[CPKind.RING]
    cp_args = dict(group=c, S=S_cp, q=plan.q["cp"], tier=plan.tier["cp"])
    out.append(_exchange(plan, Axis.CP, Collective.ALL_GATHER, "K,V", True,
                         calls=np.where(ring, 0, (1 + full) * layer_mb), **cp_args))
    out.append(_exchange(plan, Axis.CP, Collective.REDUCE_SCATTER, "dK,dV", True,
                         calls=np.where(ring, 0, layer_mb), **cp_args))
    # ring attention as c-1 sends of one block per layer pass: 3 passes (fwd + 2x bwd)
    out.append(_exchange(plan, Axis.CP, Collective.SEND_RECV, "K,V blocks", False,
                         group=c, S=S_cp / c, q=np.minimum(plan.q["cp"], 2), tier=plan.tier["cp"],
                         calls=np.where(ring, (3 + full) * (c - 1) * layer_mb, 0)))

    # PP: each micro-batch crosses each of the GPU's v stage boundaries forward and backward,
    # b*s*h/t per rank with scatter/gather or SP (Narayanan 4.1; formulas.md 3.3)
    S_pp = b * (s / c) * h * w.activations / t
    out.append(_exchange(plan, Axis.PP, Collective.SEND_RECV, "activations", False,
                         group=np.where(p > 1, 2, 1), S=S_pp, calls=2 * mbs * v, q=plan.q["pp"], tier=plan.tier["pp"]))

    # DP: gradients reduced, parameters gathered, per formulas.md 3.4; one call per bucket (DDP,
    # ZeRO-1) or FSDP unit (plan.dp_units). Sharded gradients (ZeRO-2, ZeRO-3, FSDP with reshard)
    # cannot wait for the end of the step, so they reduce-scatter after every micro-batch; resharded
    # parameters are gathered again for every micro-batch's forward and backward. DDP, ZeRO-1 and
    # FSDP without reshard (Llama 3) keep whole gradients (and parameters) through the step and
    # exchange once per step.
    alg = plan.dp_algorithm
    ddp = plan.dp_kind == DDP
    per_microbatch = grads_sharded(plan.dp_kind, plan.reshard)
    # DualPipe ranks hold two stages (i and p-1-i, DSV3 Table 2): twice the parameters, each reduced
    # over the twice as many ranks that hold it
    copies = parameter_copies(plan.schedule)
    R = plan.dp_replicas
    for label, psi, group, q, q_replicas, units in (
        ("", plan.params_dense_per_gpu * copies, plan.dp_group * copies, plan.q["dp"], plan.q["dp_replicas"],
         plan.dp_units),
        ("expert ", plan.params_expert_per_gpu * copies, plan.expert_dp_group * copies, plan.q["expert_dp"],
         plan.q["expert_dp_replicas"], plan.expert_dp_units),
    ):
        if not np.any(psi > 0):
            continue
        common = dict(group=group, q=q, tier=plan.tier["dp"], algorithm=alg)
        rs_calls = np.where(ddp, 0, units * np.where(per_microbatch, mbs, 1))
        ag_calls = np.where(ddp, 0, units * np.where(plan.reshard, 2 * mbs, 1))
        for coll, what, width, calls in (
            (Collective.ALL_REDUCE, "grads", w.grads, np.where(ddp, units, 0)),
            (Collective.REDUCE_SCATTER, "grads", w.grads, rs_calls),
            (Collective.ALL_GATHER, "params", w.params, ag_calls),
        ):
            x = _exchange(plan, Axis.DP, coll, label + what, False, S=psi * width / units, calls=calls, **common)
            out.append(replace(x, units=units))
        if R > 1:  # HSDP: each rank's gradient shard summed across the replicas, once per step
            x = _exchange(plan, Axis.DP, Collective.ALL_REDUCE, label + "grads across replicas", False,
                          group=np.full_like(group, R), S=psi * w.grads / group / units, calls=units,
                          q=q_replicas, tier=plan.tier["dp_replicas"], algorithm=alg)
            out.append(replace(x, units=units))

    # EP: dispatch and combine all-to-all per MoE layer pass, forward and backward (formulas.md 3.5);
    # each GPU routes its b*s/(c*t) tokens (SP shards them over TP) to k experts
    if m.moe is None:
        return out
    tokens = plan.dispatch_tokens
    passes = plan.moe_layers_per_gpu * mbs * (2 + full)
    ep_args = dict(group=e, calls=passes, q=plan.q["ep"], tier=plan.tier["ep"])
    if sc.layout.ep_kind == EPKind.ALL_GATHER:
        # MegaScale-MoE 3.2 (Fig. 9): gather the EP group's tokens, pick the local experts' rows; the
        # outputs are reduce-scattered back: every token once to every rank, not k copies to some
        for coll, what, wb in ((Collective.ALL_GATHER, "tokens (dispatch)", w.dispatch),
                               (Collective.REDUCE_SCATTER, "tokens (combine)", w.combine)):
            out.append(_exchange(plan, Axis.EP, coll, what, True, S=e * tokens * h * wb, **ep_args))
        return out
    busiest = busiest_gpu_factors(m.moe, plan.ep)
    forwarded = sc.ep_forwards
    if forwarded:  # NIC copies per token: the other servers its experts sit on (formulas.md 3.5, 7.2)
        remote = remote_nodes_per_token(m.moe.num_experts, m.moe.top_k, e / plan.q["ep"], m.moe.node_limit)
    for what, wb in (("tokens (dispatch)", w.dispatch), ("tokens (combine)", w.combine)):
        x = _exchange(plan, Axis.EP, Collective.ALL_TO_ALL, what, True, S=tokens * m.moe.top_k * h * wb, **ep_args)
        if forwarded:
            x = _node_forwarded(plan, x, tokens * h * wb * passes * remote)
        out.append(_skewed(x, busiest))
    return out


def _retimed(x: Exchange, bw, **changes) -> Exchange:
    """``x`` with a new bandwidth time (its latency kept) and any other fields changed."""
    lat = x.time_s - x.bandwidth_s
    return replace(x, time_s=bw + lat, bandwidth_s=bw, call_s=(bw + lat) / np.maximum(x.calls, 1), **changes)


def _skewed(x: Exchange, factor) -> Exchange:
    """An all-to-all ends when its busiest receiver does: its bandwidth time scales by ``factor``."""
    if np.all(np.asarray(factor) == 1.0):
        return x
    return _retimed(x, x.bandwidth_s * factor)


def _node_forwarded(plan: Plan, x: Exchange, cap) -> Exchange:
    """DeepEP / DeepSeek-V3: a token crosses the NIC once per other server its experts sit on (at most
    ``node_limit`` servers), then NVLink forwards it to the expert GPUs there: at most ``cap`` NIC bytes."""
    nic = np.minimum(x.nic_bytes, cap)
    moved = x.nic_bytes - nic
    nvlink = x.nvlink_bytes + moved  # copies that share a node after one NIC hop are forwarded on NVLink
    bw = np.maximum(nvlink / plan.nvlink_Bps, nic * plan.tier["ep"] / plan.nic_Bps)
    return _retimed(x, bw, nvlink_bytes=nvlink, nic_bytes=nic)
