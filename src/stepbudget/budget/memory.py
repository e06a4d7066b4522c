"""Memory per GPU of a plan: model states and activations on the busiest pipeline rank.

The first pipeline rank is the one that runs out first: it holds the most micro-batches in
flight (formulas.md 4, 5.2) and, with ``embedding_in_pipeline_split``, one layer fewer to
make room for the embedding. Everything is over the plan's arrays, so a search gets the
memory of a million layouts with the same code as one scenario.

Layer composition on that rank is the model average (an MoE model's dense first layers are
spread evenly), and the routed experts are assumed balanced over the EP ranks.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np

from stepbudget import _html
from stepbudget.budget.pipeline import inflight_microbatches
from stepbudget.enums import SCHEDULE_CODES, Schedule
from stepbudget.inputs.model import Model
from stepbudget.plan.derive import Plan
from stepbudget.plan.flops import attention_widths
from stepbudget.plan.memory import (
    activation_bytes_extras,
    activation_bytes_first_stage,
    layer_activation_bytes,
    logits_activation_bytes,
    model_state_bytes,
    parameter_copies,
)

COMPONENTS = ("params", "grads", "optimizer", "gathered", "activations", "extras")
"""Fields of ``Memory`` that add up to ``total``, in the order the views print them."""


@dataclass(frozen=True, repr=False)
class Memory:
    """Bytes per GPU on the busiest pipeline rank (``rank``); arrays share the plan's shape."""

    plan: Plan
    params: np.ndarray
    """Parameters kept between steps (a 1/d shard under ZeRO-3/FSDP), DualPipe's two stages included."""
    grads: np.ndarray
    """Gradient accumulation buffer (a 1/d shard under ZeRO-2, ZeRO-3 and FSDP with reshard)."""
    optimizer: np.ndarray
    """Optimizer state with the FP32 master copy (a 1/d shard under ZeRO-1 and up)."""
    gathered: np.ndarray
    """Unsharded parameters of the layers being gathered (ZeRO-3/FSDP)."""
    activations: np.ndarray
    """Stored activations of the rank's layers for every micro-batch in flight."""
    extras: np.ndarray
    """Embedding dropout masks (with ``model.dropout``), and the output layer with FP32 logits when pp = 1."""
    layers: np.ndarray
    """Transformer layers on this rank."""
    inflight: np.ndarray
    """Micro-batches' worth of activations in flight at the peak (formulas.md 4)."""
    capacity: float
    """HBM per GPU, bytes."""
    rank: np.ndarray = dataclasses.field(default_factory=lambda: np.asarray(0))
    """The pipeline rank these figures are of: the one whose total is largest (0 for an even split)."""

    def __repr__(self) -> str:
        return _html.short_repr("Memory", self.plan.scenario.name, total_bytes=self.total, capacity_bytes=self.capacity)

    def _repr_html_(self) -> str:
        """The components, the total and whether it fits, as a table for Jupyter."""
        rows = [[name, _html.figure("bytes", getattr(self, name))] for name in COMPONENTS]
        rows += [["total", _html.figure("bytes", self.total)], ["HBM", _html.figure("bytes", self.capacity)],
                 ["fits", _html.figure("fits", self.fits)]]
        return _html.table(f"{self.plan.scenario.name}: memory per GPU on the first pipeline rank", ["", "bytes"], rows)

    @property
    def model_state(self) -> np.ndarray:
        return self.params + self.grads + self.optimizer + self.gathered

    @property
    def total(self) -> np.ndarray:
        return self.model_state + self.activations + self.extras

    @property
    def fits(self) -> np.ndarray:
        return self.total <= self.capacity

    @property
    def headroom(self) -> np.ndarray:
        """Capacity left (negative: short by that much)."""
        return self.capacity - self.total


def layer_widths(model: Model) -> dict[str, float]:
    """Per-token widths ``layer_activation_bytes`` needs, for this model's average layer."""
    h, a, per_ff = model.hidden_size, model.num_heads, model.mlp_intermediates  # stored intermediates per d_ff
    d_qk, attn_out = attention_widths(model)
    qkv: float
    latent: float
    if model.mla is not None:  # DeepSeek MLA: Q and K of nope+rope width, V of v_head_dim; latents outside TP
        ml = model.mla
        qkv, latent = 2 * d_qk + attn_out, ml.q_lora_rank + ml.kv_lora_rank + ml.qk_rope_head_dim
    else:
        qkv, latent = d_qk + 2 * model.kv_heads * model.head_width, 0.0  # GQA: K and V have kv_heads heads
    mlp: float = per_ff * model.ffn_size
    pointwise: float = model.ffn_size  # one d_ff a pointwise op makes: SwiGLU's gate x up, GeLU's output
    if model.moe is not None:
        moe = model.moe
        routed = moe.top_k * (h + per_ff * moe.expert_ffn_size)  # dispatched copy + intermediates
        shared = moe.shared_experts * per_ff * moe.shared_width
        share = model.moe_layers / model.num_layers
        mlp = (1 - share) * mlp + share * (routed + shared)
        pointwise = (1 - share) * pointwise + share * (moe.top_k * moe.expert_ffn_size + moe.shared_experts * moe.shared_width)
    # per-op selective checkpointing saves Q (wq), V (wv), the attention output and the first MLP matmul's
    # output (w1); wk, wo and w3 (or a two-matrix MLP's w2) run again (plan/flops.op_sac_params)
    op_sac = d_qk + model.kv_heads * model.head_width + attn_out + model.ffn_size
    return {"h": h, "heads": a, "qkv_width": qkv, "attn_out_width": attn_out, "mlp_width": mlp,
            "latent_width": latent, "dropout": model.dropout, "op_sac_width": op_sac, "mlp_pointwise_width": pointwise}


def first_rank_layers(plan: Plan) -> np.ndarray:
    """Transformer layers on pipeline rank 0: its share of the layer slots, less the embedding's slot."""
    sc = plan.scenario
    lay, L = sc.layout, sc.model.num_layers
    embed = int(lay.embedding_in_pipeline_split)
    per_rank = np.ceil(sc.pipeline_slots / plan.pp)  # all v chunks of the rank together
    return np.where(plan.pp == 1, L, np.clip(per_rank - embed, 1, L))


def memory_per_gpu(plan: Plan) -> Memory:
    """Memory of the busiest pipeline rank (formulas.md 5): model states plus activations.

    Even split: the first rank, which holds the most micro-batches in flight. A stated split
    (``layout.first_stage_layers``/``last_stage_layers``/``stage_layers``): every rank with its own
    layers and in-flight micro-batches, the first with the embedding, the last with the output layer
    and one micro-batch's logits; the peak is the largest."""
    sc = plan.scenario
    first = _rank_memory(plan, first_rank_layers(plan), inflight_microbatches(plan.schedule, plan.pp,
                                                                              plan.microbatches, plan.v), 0)
    if not sc.layout.uneven_split:
        return first
    peak = functools.reduce(_larger, [_rank_memory(plan, n, rank_inflight(plan, r), r)
                                      for r, n in enumerate(sc.rank_layers)])
    # a stated split holds for the scenario's own pp; a sweep's other pp values keep the even split
    return _select(plan.pp == sc.layout.pp, peak, first)


_RANK_DROP = {Schedule.GPIPE: 0.0, Schedule.ONE_F_ONE_B: 1.0, Schedule.INTERLEAVED_1F1B: 2.0, Schedule.ZB_H1: 1.0,
              Schedule.ZB_H2: 2.0, Schedule.DUALPIPE: 0.0}
"""In-flight micro-batches rank r holds fewer than rank 0, per rank of distance: 1F1B and ZB-H1 warm up p-r-1
forwards (Narayanan21 §2.2.1); interleaved 2(p-r-1) + (v-1)p chunks, 2/v micro-batches less per rank (Megatron
schedules.py num_warmup_microbatches); ZB-H2 2(p-r)-1 (ZB §2.2); GPipe all m and DualPipe p+1 on every rank
(DSV3 Table 2)."""


def rank_inflight(plan: Plan, rank: int) -> np.ndarray:
    """Micro-batches' worth of the rank's layers in flight at its peak, capped at m; rank 0 is
    ``inflight_microbatches``."""
    peak = inflight_microbatches(plan.schedule, plan.pp, np.inf, plan.v)
    drop = np.choose(plan.schedule, [_RANK_DROP[s] for s in sorted(SCHEDULE_CODES, key=SCHEDULE_CODES.__getitem__)])
    per_rank = np.where(plan.schedule == SCHEDULE_CODES[Schedule.INTERLEAVED_1F1B], drop / plan.v, drop)
    return np.minimum(np.maximum(peak - per_rank * rank, 1.0), plan.microbatches)


def _larger(a: Memory, b: Memory) -> Memory:
    return _select(b.total > a.total, b, a)


def _select(take, b: Memory, a: Memory) -> Memory:
    """Element by element, ``b``'s figures where ``take``, else ``a``'s."""
    return dataclasses.replace(a, **{f: np.where(take, getattr(b, f), getattr(a, f))
                                     for f in (*COMPONENTS, "layers", "inflight", "rank")})


def _rank_memory(plan: Plan, layers, inflight, rank: int) -> Memory:
    """Model states and activations of pipeline rank ``rank`` holding ``layers`` transformer layers with
    ``inflight`` micro-batches' worth of them in flight."""
    sc = plan.scenario
    model, pr, lay, counts = sc.model, sc.precision, sc.layout, plan.counts
    L, h, V = model.num_layers, model.hidden_size, model.vocab_size
    copies = parameter_copies(plan.schedule)  # DualPipe holds stage i and stage p-1-i, DSV3 Table 2
    is_first, is_last = rank == 0, rank == sc.layout.pp - 1 and rank > 0

    # parameters of one layer: attention, dense/shared MLP and router averaged over layers; routed experts apart
    layer_dense = (counts.params_total - counts.params_embedding - counts.params_routed_experts) / L
    moe_share = model.moe_layers / L
    layer_expert = moe_share * counts.params_moe_layer_routed
    head = np.where((plan.pp == 1) | (copies == 2), 0 if model.tied_embeddings else V * h, 0)  # last stage's LM head
    # the first rank holds the embedding (and the head where it is also the last); a later last rank the head,
    # a copy of the embedding when tied (Megatron keeps both ends' word embeddings)
    ends = (V * h + head) if is_first else (V * h if is_last else 0.0)
    psi_dense = copies * layers * layer_dense / plan.tp + ends / plan.tp  # embedding and head are vocab-parallel
    psi_expert = copies * layers * layer_expert / (plan.ep * plan.expert_tp)
    gathered_layers = np.where(plan.reshard, 2, layers)  # prefetch keeps 2; without reshard all stay gathered
    state = {
        key: model_state_bytes(
            psi, group, plan.dp_kind,
            grad_bytes=pr.grad_buffer_bytes, param_bytes=pr.params,
            optimizer_bytes=pr.optimizer_bytes, master_weights=pr.master_weights,
            layer_params=per_layer, gathered_layers=gathered_layers, reshard=plan.reshard,
        )
        # DualPipe's two copies of a stage live on twice the ranks, which share its sharded state
        for key, psi, group, per_layer in (
            ("dense", psi_dense, plan.dp_group * copies, layer_dense / plan.tp),
            ("expert", psi_expert, plan.expert_dp_group * copies, layer_expert / (plan.ep * plan.expert_tp)),
        )
    }
    s = model.seq_len / plan.cp
    per_layer = layer_activation_bytes(
        s, plan.micro_batch, plan.tp, plan.sequence_parallel, plan.recompute, lay.flash_attention,
        s_kv=model.seq_len, compiled=lay.compiled, **layer_widths(model),
    )
    if is_first:
        extras = activation_bytes_extras(s, plan.micro_batch, h, V, plan.tp, plan.pp, plan.sequence_parallel,
                                         inflight, dropout=model.dropout)
    else:  # only the last rank holds the output layer: one micro-batch's logits, then its backward starts
        extras = np.where(is_last, logits_activation_bytes(s, plan.micro_batch, h, V, plan.tp,
                                                           plan.sequence_parallel), 0.0)
    d, e = state["dense"], state["expert"]
    return Memory(
        plan=plan,
        params=d.params + e.params, grads=d.grads + e.grads, optimizer=d.optimizer + e.optimizer,
        gathered=d.gathered + e.gathered,
        # the per-layer counts assume BF16 activations
        activations=activation_bytes_first_stage(per_layer, layers, inflight) * pr.saved_activations / 2,
        extras=extras * np.ones_like(per_layer),
        layers=np.asarray(layers) * np.ones_like(plan.pp), inflight=inflight,
        capacity=float(sc.cluster.gpu.hbm_bytes),
        rank=np.full(np.shape(plan.pp), rank),
    )
