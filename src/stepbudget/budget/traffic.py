"""Exchanges per parallel dimension for one step, per GPU (formulas.md 3).

Each Exchange is one kind of collective call: its group, message, calls per step, bytes per
GPU per step (the chapter's count and the split over NVLink and the NIC) and time on the link.
Degrees of 1 give zero calls; views drop those rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

import numpy as np
import numpy.typing as npt

from stepbudget.budget.collectives import call_cost
from stepbudget.enums import (CP_KIND_CODES, DP_KIND_CODES, HIERARCHICAL, RECOMPUTE_CODES, Axis, Collective, CPKind,
                              DataParallel, EPKind, Recompute)
from stepbudget.plan.derive import Plan
from stepbudget.plan.memory import grads_sharded, parameter_copies
from stepbudget.plan.routing import busiest_gpu_factors, exchanged_share, remote_nodes_per_token

DDP = DP_KIND_CODES[DataParallel.DDP]
FULL = RECOMPUTE_CODES[Recompute.FULL]
SELECTIVE_OP = RECOMPUTE_CODES[Recompute.SELECTIVE_OP]


COUNT_BYTES = 8
"""One token count per expert, int64 (Megatron-Core's routing_map.sum(dim=0).long())."""


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


def _exchange(plan: Plan, dim: Axis, coll: Collective, what: str, critical: bool, *, group: npt.ArrayLike,
              S: npt.ArrayLike, calls: npt.ArrayLike, q: npt.ArrayLike, tier: np.ndarray,
              algorithm: npt.ArrayLike = HIERARCHICAL) -> Exchange:
    """One collective kind: ``calls`` per step of a message ``S`` over ``group`` ranks, ``q`` per node."""
    calls = np.where(np.asarray(group) > 1, calls, 0.0)
    if not np.any(calls):  # the dimension is off everywhere: skip the arithmetic, same result
        zero = np.zeros(np.broadcast_shapes(np.shape(calls), plan.shape))
        return Exchange(dim, coll, what, critical, np.asarray(group), zero, zero, zero, zero, zero, zero, zero, zero)
    c = plan.scenario.cluster
    cost = call_cost(coll, S, group, q, algorithm, plan.nvlink_Bps, plan.nic_Bps / tier,
                     c.nvlink_latency_s, c.nic_latency_s)
    call_s = cost.time_s  # a sum, worked out once
    return Exchange(
        dim=dim, collective=coll, what=what, critical=critical,
        group=np.asarray(group), message_bytes=np.asarray(S, dtype=float) * (calls > 0), calls=calls,
        bytes_per_gpu=calls * cost.bytes_per_gpu, nvlink_bytes=calls * cost.nvlink_bytes,
        nic_bytes=calls * cost.nic_bytes, time_s=calls * call_s, bandwidth_s=calls * cost.bandwidth_s,
        call_s=call_s,
    )


def tp_exchanges(plan: Plan) -> list[Exchange]:
    """TP: one all-reduce forward and one backward around attention and around the MLP, of
    b*(s/c)*h elements (formulas.md 3.1); with SP each is a reduce-scatter + all-gather (same
    bytes); full recompute repeats the forward ones, per-op selective checkpointing the forward
    all-gathers (wk and w3 need their gathered inputs again; torchtitan saves reduce-scatter outputs)
    or, without SP, the forward all-reduces. Experts without expert TP skip the MLP pair, and a
    parallel block has one pair for both."""
    m, w = plan.scenario.model, plan.scenario.precision
    h, s = m.hidden_size, m.seq_len
    b, t, c, mbs = plan.micro_batch, plan.tp, plan.cp, plan.microbatches
    full, op_sac = plan.recompute == FULL, plan.recompute == SELECTIVE_OP
    S_tp = b * (s / c) * h * w.activations
    tp_mlp_layers = plan.layers_per_gpu - plan.moe_layers_per_gpu * (plan.expert_tp == 1)
    if m.parallel_block:
        tp_mlp_layers = 0 * tp_mlp_layers  # attention and MLP share one pair around the block
    pairs = mbs * (plan.layers_per_gpu + tp_mlp_layers)
    ar_calls = (2 + full) * pairs
    sp = plan.sequence_parallel
    tp = partial(_exchange, plan, Axis.TP, what="activations", critical=True, group=t, S=S_tp,
                 q=plan.q["tp"], tier=plan.tier["tp"])
    return [
        tp(Collective.ALL_REDUCE, calls=np.where(sp, 0, ar_calls + op_sac * pairs)),
        tp(Collective.REDUCE_SCATTER, calls=np.where(sp, ar_calls, 0)),
        tp(Collective.ALL_GATHER, calls=np.where(sp, ar_calls + op_sac * pairs, 0)),
    ]


def cp_exchanges(plan: Plan) -> list[Exchange]:
    """CP: all-gather K,V forward, reduce-scatter dK,dV backward (Llama 3 3.3.2), K,V sharded by TP
    heads; ring: c-1 K,V blocks forward, twice that backward (formulas.md 3.2)."""
    m, w = plan.scenario.model, plan.scenario.precision
    b, s, t, c = plan.micro_batch, m.seq_len, plan.tp, plan.cp
    layer_mb = plan.layers_per_gpu * plan.microbatches  # layer passes per GPU per step
    full = plan.recompute == FULL
    if m.mla is not None:
        kv_width = m.mla.kv_lora_rank + m.mla.qk_rope_head_dim  # the latent is what is gathered
        kv_per_rank = kv_width * np.ones_like(t)
    else:
        kv_per_rank = m.kv_heads * m.head_width / t
    S_cp = 2 * b * s * kv_per_rank * w.activations
    ring = plan.cp_kind == CP_KIND_CODES[CPKind.RING]
    cp = partial(_exchange, plan, Axis.CP, group=c, q=plan.q["cp"], tier=plan.tier["cp"])
    return [
        cp(Collective.ALL_GATHER, "K,V", True, S=S_cp, calls=np.where(ring, 0, (1 + full) * layer_mb)),
        cp(Collective.REDUCE_SCATTER, "dK,dV", True, S=S_cp, calls=np.where(ring, 0, layer_mb)),
        # ring attention as c-1 sends of one block per layer pass: 3 passes (fwd + 2x bwd)
        _exchange(plan, Axis.CP, Collective.SEND_RECV, "K,V blocks", False, group=c, S=S_cp / c,
                  q=np.minimum(plan.q["cp"], 2), tier=plan.tier["cp"],
                  calls=np.where(ring, (3 + full) * (c - 1) * layer_mb, 0)),
    ]


def pp_exchanges(plan: Plan) -> list[Exchange]:
    """PP: each micro-batch crosses each of the GPU's v stage boundaries forward and backward,
    b*s*h/t per rank with scatter/gather or SP (Narayanan 4.1; formulas.md 3.3)."""
    m, w = plan.scenario.model, plan.scenario.precision
    h, s = m.hidden_size, m.seq_len
    b, t, c, p, v = plan.micro_batch, plan.tp, plan.cp, plan.pp, plan.v
    S_pp = b * (s / c) * h * w.activations / t
    return [_exchange(plan, Axis.PP, Collective.SEND_RECV, "activations", False, group=np.where(p > 1, 2, 1),
                      S=S_pp, calls=2 * plan.microbatches * v, q=plan.q["pp"], tier=plan.tier["pp"])]


def _dp_state(plan: Plan, label: str, psi: np.ndarray, group: np.ndarray, q: np.ndarray, q_replicas: np.ndarray,
              units: np.ndarray) -> list[Exchange]:
    """The DP exchanges of ``psi`` parameters per GPU (the dense ones, or the routed experts'), sharded
    over ``group`` ranks and exchanged in ``units`` calls per round; none if no GPU holds any."""
    if not np.any(psi > 0):
        return []
    w, mbs, alg = plan.scenario.precision, plan.microbatches, plan.dp_algorithm
    ddp = plan.dp_kind == DDP
    per_microbatch = grads_sharded(plan.dp_kind, plan.reshard)
    dp = partial(_exchange, plan, Axis.DP, critical=False, group=group, q=q, tier=plan.tier["dp"], algorithm=alg)
    rs_calls = np.where(ddp, 0, units * np.where(per_microbatch, mbs, 1))
    ag_calls = np.where(ddp, 0, units * np.where(plan.reshard, 2 * mbs, 1))
    out = [
        dp(Collective.ALL_REDUCE, label + "grads", S=psi * w.grads / units, calls=np.where(ddp, units, 0)),
        dp(Collective.REDUCE_SCATTER, label + "grads", S=psi * w.grads / units, calls=rs_calls),
        dp(Collective.ALL_GATHER, label + "params", S=psi * w.params / units, calls=ag_calls),
    ]
    R = plan.dp_replicas
    if R > 1:  # HSDP: each rank's gradient shard summed across the replicas, once per step
        out.append(_exchange(plan, Axis.DP, Collective.ALL_REDUCE, label + "grads across replicas", False,
                             group=np.full_like(group, R), S=psi * w.grads / group / units, calls=units,
                             q=q_replicas, tier=plan.tier["dp_replicas"], algorithm=alg))
    return [replace(x, units=units) for x in out]


def dp_exchanges(plan: Plan) -> list[Exchange]:
    """DP: gradients reduced, parameters gathered, per formulas.md 3.4; one call per bucket (DDP,
    ZeRO-1) or FSDP unit (plan.dp_units). Sharded gradients (ZeRO-2, ZeRO-3, FSDP with reshard)
    cannot wait for the end of the step, so they reduce-scatter after every micro-batch; resharded
    parameters are gathered again for every micro-batch's forward and backward. DDP, ZeRO-1 and
    FSDP without reshard (Llama 3) keep whole gradients (and parameters) through the step and
    exchange once per step."""
    # DualPipe ranks hold two stages (i and p-1-i, DSV3 Table 2): twice the parameters, each reduced
    # over the twice as many ranks that hold it
    copies = parameter_copies(plan.schedule)
    q = plan.q
    return (_dp_state(plan, "", plan.params_dense_per_gpu * copies, plan.dp_group * copies, q["dp"],
                      q["dp_replicas"], plan.dp_units)
            + _dp_state(plan, "expert ", plan.params_expert_per_gpu * copies, plan.expert_dp_group * copies,
                        q["expert_dp"], q["expert_dp_replicas"], plan.expert_dp_units))


def _retimed(x: Exchange, bw: np.ndarray) -> Exchange:
    """``x`` with a new bandwidth time, its latency kept."""
    lat = x.time_s - x.bandwidth_s
    return replace(x, time_s=bw + lat, bandwidth_s=bw, call_s=(bw + lat) / np.maximum(x.calls, 1))


def _skewed(x: Exchange, factor: npt.ArrayLike) -> Exchange:
    """An all-to-all ends when its busiest receiver does: its bandwidth time scales by ``factor``."""
    if np.all(np.asarray(factor) == 1.0):
        return x
    return _retimed(x, x.bandwidth_s * factor)


def _node_forwarded(plan: Plan, x: Exchange, cap: np.ndarray) -> Exchange:
    """DeepEP / DeepSeek-V3: a token crosses the NIC once per other server its experts sit on (at most
    ``node_limit`` servers), then NVLink forwards it to the expert GPUs there: at most ``cap`` NIC bytes."""
    nic = np.minimum(x.nic_bytes, cap)
    moved = x.nic_bytes - nic
    nvlink = x.nvlink_bytes + moved  # copies that share a node after one NIC hop are forwarded on NVLink
    bw = np.maximum(nvlink / plan.nvlink_Bps, nic * plan.tier["ep"] / plan.nic_Bps)
    return replace(_retimed(x, bw), nvlink_bytes=nvlink, nic_bytes=nic)


def ep_exchanges(plan: Plan) -> list[Exchange]:
    """EP: dispatch and combine all-to-all per MoE layer pass, forward and backward (formulas.md 3.5);
    each GPU routes its b*s/(c*t) tokens (SP shards them over TP) to k experts. None for a dense model."""
    sc = plan.scenario
    m, w, e = sc.model, sc.precision, plan.ep
    if m.moe is None:
        return []
    moe, h, tokens = m.moe, m.hidden_size, plan.dispatch_tokens
    passes = plan.moe_layers_per_gpu * plan.microbatches * (2 + (plan.recompute == FULL))
    ep = partial(_exchange, plan, Axis.EP, critical=True, group=e, calls=passes, q=plan.q["ep"], tier=plan.tier["ep"])
    if sc.layout.ep_kind == EPKind.ALL_GATHER:
        # MegaScale-MoE 3.2 (Fig. 9): gather the EP group's tokens, pick the local experts' rows; the
        # outputs are reduce-scattered back: every token once to every rank, not k copies to some
        return [ep(Collective.ALL_GATHER, "tokens (dispatch)", S=e * tokens * h * w.dispatch),
                ep(Collective.REDUCE_SCATTER, "tokens (combine)", S=e * tokens * h * w.combine)]
    # every GPU sends its share of the tokens (the capacity, padded or capped below the mean); the busiest
    # receiver's tokens over that share set the pace
    share = exchanged_share(moe)
    busiest = busiest_gpu_factors(moe, plan.ep) / share
    # NIC copies per token: the other servers its experts sit on (formulas.md 3.5, 7.2)
    remote = (remote_nodes_per_token(moe.num_experts, moe.top_k, e / plan.q["ep"], moe.node_limit)
              if sc.ep_forwards else None)
    out = []
    if not moe.pad_to_capacity:
        # each dispatch first gathers every rank's token count per expert (over TP x EP; the EP group here), and the
        # host waits for it to size the all-to-all (Megatron-Core core_v0.13.0 moe/token_dispatcher.py:494 and :519;
        # DeepEP's normal dispatch busy-waits for the same counts, csrc/deep_ep.cpp v1.2.1:816): a latency on the
        # critical path, once per MoE layer's forward and recompute (the backward reuses the splits)
        counts = plan.moe_layers_per_gpu * plan.microbatches * (1 + (plan.recompute == FULL))
        out.append(ep(Collective.ALL_GATHER, "token counts", S=e * moe.num_experts * COUNT_BYTES, calls=counts))
    for what, wb in (("tokens (dispatch)", w.dispatch), ("tokens (combine)", w.combine)):
        x = ep(Collective.ALL_TO_ALL, what, S=tokens * moe.top_k * h * wb * share)
        if remote is not None:
            x = _node_forwarded(plan, x, tokens * h * wb * passes * remote * share)
        out.append(_skewed(x, busiest))
    return out


DIMENSIONS: tuple[Callable[[Plan], list[Exchange]], ...] = (
    tp_exchanges, cp_exchanges, pp_exchanges, dp_exchanges, ep_exchanges)
"""One function per parallel dimension, in the order the budget lists them; a new dimension adds one here."""


def exchanges(plan: Plan) -> list[Exchange]:
    """Every exchange of one step (formulas.md 3.1-3.5), dimension by dimension."""
    return [x for dimension in DIMENSIONS for x in dimension(plan)]
