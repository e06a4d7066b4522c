"""Memory per GPU: model states and activations (formulas.md 5, recompute as in 2.5).

Every function is one formula over numpy arrays: the arguments broadcast against each
other once, at the door, and the result has the broadcast shape (0-d for scalar inputs).
Closed choices travel as integer codes (``enums.DP_KIND_CODES``, ``enums.RECOMPUTE_CODES``) so a sweep
can carry them as ``int`` arrays; a ``DataParallel`` / ``Recompute`` value or its string
is accepted wherever a code is. All results are in bytes (1 GB = 1e9 bytes).

Symbols (formulas.md 0 and 5):

| symbol | meaning | unit |
|---|---|---|
| ``psi`` (Psi) | parameters of one GPU's model shard, after TP/PP/EP sharding | params |
| ``d`` | data-parallel degree (ZeRO's N_d) | - |
| ``K`` | optimizer bytes per parameter (12 for mixed-precision Adam) | bytes/param |
| ``s`` | sequence length | tokens |
| ``b`` | micro-batch size | sequences |
| ``h`` | hidden size | elements |
| ``a`` | attention heads | - |
| ``t`` | tensor-parallel degree | - |
| ``p`` | pipeline-parallel degree | - |
| ``V`` | vocabulary size | tokens |
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from stepbudget.enums import DP_KIND_CODES, RECOMPUTE_CODES, DataParallel, Recompute, schedule_code

__all__ = [
    "parameter_copies",
    "MASTER_WEIGHT_BYTES",
    "ModelState",
    "dp_kind_code",
    "grads_sharded",
    "recompute_code",
    "model_state_bytes",
    "layer_activation_bytes",
    "activation_bytes_per_layer",
    "activation_bytes_first_stage",
    "embedding_activation_bytes",
    "logits_activation_bytes",
    "activation_bytes_extras",
]

_PARAMETER_COPIES = np.array([1, 1, 1, 1, 1, 2])  # DualPipe holds stage i and stage p-1-i, DSV3 Table 2


def parameter_copies(schedule) -> np.ndarray:
    """Copies of one stage's parameters each rank holds: 2 for DualPipe, else 1 (int array)."""
    return _PARAMETER_COPIES[schedule_code(schedule)]

MASTER_WEIGHT_BYTES = 4
"""FP32 master copy of a parameter inside ZeRO's K = 12 (master 4 + Adam momentum 4 + variance 4)."""

# What each data-parallel kind shards over the d ranks, indexed by DP_KIND_CODES [ZeRO] §5.
_SHARDS_OPTIMIZER = np.array([False, True, True, True, True])  # P_os: ZeRO-1 and up, FSDP
_SHARDS_GRADS = np.array([False, False, True, True, True])  # P_g: ZeRO-2 and up, FSDP
_SHARDS_PARAMS = np.array([False, False, False, True, True])  # P_p: ZeRO-3, FSDP


def _codes(value, enum: type[StrEnum], table: dict) -> np.ndarray:
    """Integer code array of ``value`` (an enum member, its string, an int code, or an array of these)."""

    def of_name(name: str) -> int:
        try:
            return table[enum(name)]
        except ValueError:
            raise ValueError(f"unknown {enum.__name__} {name!r}; use one of {[str(e) for e in enum]}") from None

    if isinstance(value, str):
        return np.asarray(of_name(value))
    codes = np.asarray(value)
    if codes.dtype.kind in "OUS":
        codes = np.vectorize(of_name, otypes=[np.int64])(codes)
    if codes.dtype.kind not in "iu" or np.any((codes < 0) | (codes >= len(table))):
        raise ValueError(f"{enum.__name__} codes must be integers in 0..{len(table) - 1}, got {value!r}")
    return codes


def dp_kind_code(dp_kind) -> np.ndarray:
    """Integer code array of a ``DataParallel`` value, its string, or an int code array."""
    return _codes(dp_kind, DataParallel, DP_KIND_CODES)


def grads_sharded(dp_kind, reshard) -> np.ndarray:
    """Whether each rank keeps only its 1/d shard of the gradients: ZeRO-2, ZeRO-3, and FSDP when it
    reshards after forward ([ZeRO] 5.2; without resharding FSDP keeps whole gradients, as Llama 3).
    Such gradients are reduce-scattered after every micro-batch. Shape: the arguments broadcast."""
    code = dp_kind_code(dp_kind)
    return _SHARDS_GRADS[code] & ~((code == DP_KIND_CODES[DataParallel.FSDP]) & ~np.asarray(reshard, bool))


def recompute_code(recompute) -> np.ndarray:
    """Integer code array of a ``Recompute`` value, its string, or an int code array."""
    return _codes(recompute, Recompute, RECOMPUTE_CODES)


# --- model states ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelState:
    """Model-state bytes per GPU; every field is an array of the broadcast input shape."""

    params: np.ndarray
    """Bytes of the parameters this GPU keeps between steps (a 1/d shard under ZeRO-3/FSDP)."""
    grads: np.ndarray
    """Bytes of the gradients (a 1/d shard under ZeRO-2/3/FSDP)."""
    optimizer: np.ndarray
    """Bytes of optimizer state, FP32 master copy included (a 1/d shard under ZeRO-1 and up)."""
    gathered: np.ndarray
    """Bytes of unsharded parameters of the layers being gathered (ZeRO-3/FSDP only, else 0)."""
    total: np.ndarray
    """Sum of the four fields."""


def model_state_bytes(
    psi,
    dp,
    dp_kind,
    grad_bytes=2,
    param_bytes=2,
    optimizer_bytes=12,
    master_weights=True,
    *,
    layer_params=0,
    gathered_layers=2,
    reshard=True,
) -> ModelState:
    """Parameters, gradients and optimizer state per GPU, in bytes (formulas.md 5.1).

    ``psi``: parameters of this GPU's shard after TP/PP/EP (params). ``dp``: data-parallel
    degree. ``dp_kind``: ``DataParallel`` value or code array. ``grad_bytes``,
    ``param_bytes``: bytes per element (Megatron and Llama 3 keep FP32 gradients: 4).
    ``optimizer_bytes``: ZeRO's K, bytes per parameter the optimizer keeps, with the FP32
    master copy when ``master_weights`` (12 = 4 master + 4 + 4 Adam moments; DeepSeek-V3's
    BF16 moments: 8). ``master_weights=False`` takes ``MASTER_WEIGHT_BYTES`` out of K, for
    parameters that are their own master (FP32 training). ``layer_params``: parameters of
    one layer of this GPU's shard, unsharded over DP; ``gathered_layers``: layers whose
    full parameters ZeRO-3/FSDP keep gathered at once (2 with prefetch; set it to the
    stage's layers for FSDP without reshard-after-forward, as in Llama 3); ``reshard=False``: FSDP then
    also keeps whole gradients through the step and reduce-scatters them once (budget/traffic.py).

    Ignores transient buffers: gradient buckets before their reduce-scatter, the
    all-gather of the optimizer step's output, allocator fragmentation.
    Shape: all arguments broadcast.
    """
    code = dp_kind_code(dp_kind)
    Psi, d, w_g, w_p, K, master, L_g, psi_layer = (
        np.asarray(x, dtype=float)
        for x in (psi, dp, grad_bytes, param_bytes, optimizer_bytes, master_weights, gathered_layers, layer_params)
    )
    K = K - (1 - master) * MASTER_WEIGHT_BYTES  # no master copy: the parameters are the master
    code, Psi, d, w_g, w_p, K, L_g, psi_layer = np.broadcast_arrays(code, Psi, d, w_g, w_p, K, L_g, psi_layer, master)[:8]
    shard_os, shard_g, shard_p = _SHARDS_OPTIMIZER[code], grads_sharded(code, reshard), _SHARDS_PARAMS[code]
    params = w_p * Psi / np.where(shard_p, d, 1)  # P_p: ZeRO-3 / FSDP, [ZeRO] §5.3
    grads = w_g * Psi / np.where(shard_g, d, 1)  # P_g: ZeRO-2 and up, [ZeRO] §5.2
    optimizer = K * Psi / np.where(shard_os, d, 1)  # P_os: ZeRO-1 and up, [ZeRO] §5.1
    gathered = np.where(shard_p, L_g * psi_layer * w_p, 0.0)  # all-gather output buffers, formulas.md 5.1
    return ModelState(params, grads, optimizer, gathered, params + grads + optimizer + gathered)


# --- activations ----------------------------------------------------------------------------


def layer_activation_bytes(
    s, b, t, sp, recompute=Recompute.NONE, flash=False, *,
    h, heads, qkv_width, attn_out_width, mlp_width, dropout=True, latent_width=0.0, s_kv=None, op_sac_width=0.0,
    compiled=False, mlp_pointwise_width=0.0,
) -> np.ndarray:
    """Activation bytes one transformer layer stores for one micro-batch, any layer shape.

    Korthikanti22 4.1 counted tensor by tensor, with the layer's widths as arguments so GQA,
    MLA, SwiGLU and MoE layers use the same count (BF16 activations, 1-byte dropout masks):

    - outside TP (replicated over ``t`` unless ``sp``): two LN inputs ``4h``, the QKV and MLP
      inputs ``2h + 2h``, MLA's latent vectors ``2 latent_width``, dropout masks ``2h`` if ``dropout``;
    - split over TP: Q, K, V ``2 qkv_width``, output-projection input ``2 attn_out_width``,
      MLP intermediates ``2 mlp_width`` (GeLU: input and output, ``2 d_ff``; SwiGLU: gate, up and
      their product, ``3 d_ff``; MoE: ``top_k`` dispatched copies of the input plus their
      expert intermediates, and the shared experts');
    - the s x s scores per query, kept only without recompute and without FlashAttention:
      ``5 heads s_kv`` with dropout (softmax 2, mask 1, dropout output 2), else ``2 heads s_kv``.

    ``s``: tokens of one sequence on this GPU (``seq_len / cp``); ``s_kv``: keys each query
    attends to (the full sequence: default ``s``). Full recompute keeps the layer input only,
    ``2sbh`` (/t with SP), Korthikanti22 Table 2. Per-op selective checkpointing (``selective-op``)
    keeps the layer input and the MLP's output (SwiGLU's w2 is a saved matmul; a two-matrix MLP's is
    recomputed, so there this overcounts 2h), ``4h`` outside TP, and the saved matmul and attention
    outputs, ``2 op_sac_width`` split over TP. ``compiled`` (torch.compile's min-cut partitioner) recomputes
    what pointwise ops make from saved tensors: the two norms' outputs (the QKV and MLP inputs, ``2h + 2h``) and
    the MLP's pointwise product (``mlp_pointwise_width``: SwiGLU's gate times up, GeLU's output). Shape: array
    arguments broadcast.
    """
    s_kv = s if s_kv is None else s_kv
    code, s, s_kv, b, t, sp, flash = np.broadcast_arrays(
        recompute_code(recompute), *(np.asarray(x, dtype=float) for x in (s, s_kv, b, t)), np.asarray(sp, bool),
        np.asarray(flash, bool),
    )
    tokens = s * b
    outside_tp = np.where(sp, 1 / t, 1.0)  # LN, dropout, inputs: replicated over TP unless SP, 4.2.2
    norm_outputs = 0.0 if compiled else 2 * h + 2 * h  # the QKV and MLP inputs: recomputed when compiled
    replicated = 4 * h + norm_outputs + 2 * latent_width + (2 * h if dropout else 0)  # bytes/token, 4.1
    mlp_saved = mlp_width - (mlp_pointwise_width if compiled else 0.0)
    split = 2 * qkv_width + 2 * attn_out_width + 2 * mlp_saved  # bytes/token of TP-split tensors, 4.1
    keeps_scores = (code == RECOMPUTE_CODES[Recompute.NONE]) & ~flash  # selective recompute / flash drop them
    scores = keeps_scores * (5 if dropout else 2) * heads * s_kv  # bytes per query token, 4.1
    stored = tokens * (replicated * outside_tp + (split + scores) / t)
    full = 2 * h * tokens * outside_tp  # full recompute: the layer's BF16 input only, Table 2
    op_sac = tokens * (4 * h * outside_tp + 2 * op_sac_width / t)  # what torchtitan's per-op policy saves
    return np.select([code == RECOMPUTE_CODES[Recompute.FULL], code == RECOMPUTE_CODES[Recompute.SELECTIVE_OP]],
                     [full, op_sac], stored)


def activation_bytes_per_layer(s, b, h, a, t, sp, recompute=Recompute.NONE, flash=False) -> np.ndarray:
    """Korthikanti22 Table 2 for a GPT layer (MHA, 4h GeLU MLP, dropout): ``sbh(10 + 24/t + 5as/(ht))``.

    The GPT case of ``layer_activation_bytes``: Q K V 6, projection input 2, GeLU input 8 and
    output 8 (= 24 split over TP), 10 outside TP. ``h`` and ``a`` are plain numbers here.
    """
    return layer_activation_bytes(
        s, b, t, sp, recompute, flash, h=h, heads=a, qkv_width=3 * h, attn_out_width=h, mlp_width=8 * h,
        op_sac_width=7 * h,  # Q, V, the attention output and the 4h GeLU input
    )


def activation_bytes_first_stage(per_layer, layers_per_stage, inflight) -> np.ndarray:
    """Activation bytes the first pipeline stage holds at its peak.

    ``per_layer``: bytes of one layer for one micro-batch (``activation_bytes_per_layer``);
    ``layers_per_stage``: ``L/p``; ``inflight``: micro-batches' worth in flight
    (``budget.pipeline.inflight_microbatches``). 1F1B with ``m >= p`` gives ``L`` layers'
    worth, Korthikanti22 Eq. 5. Shape: all arguments broadcast.
    """
    per_layer, layers, inflight = np.broadcast_arrays(
        *(np.asarray(x, dtype=float) for x in (per_layer, layers_per_stage, inflight))
    )
    return per_layer * layers * inflight


def embedding_activation_bytes(s, b, h, t, sp, inflight) -> np.ndarray:
    """Embedding-output dropout masks on the first stage: 1 byte x sbh (/t with SP) per in-flight micro-batch.

    Korthikanti22 §4.3 gives ``sbhp/t`` for 1F1B, whose first stage holds ``p`` micro-batches.
    Shape: all arguments broadcast.
    """
    s, b, h, t, inflight, sp = np.broadcast_arrays(
        *(np.asarray(x, dtype=float) for x in (s, b, h, t, inflight)), np.asarray(sp, bool)
    )
    return s * b * h * np.where(sp, 1 / t, 1.0) * inflight  # 1-byte mask, Korthikanti22 §4.3


def logits_activation_bytes(s, b, h, vocab_size, t, sp) -> np.ndarray:
    """Output-layer activations of one micro-batch on the last stage, in bytes.

    Final layer norm input and output-projection input, 2 bytes each (``4sbh``, /t with SP),
    and FP32 logits ``4sbV/t`` (vocabulary-parallel output layer), Korthikanti22 §4.3.
    Shape: all arguments broadcast.
    """
    s, b, h, V, t, sp = np.broadcast_arrays(
        *(np.asarray(x, dtype=float) for x in (s, b, h, vocab_size, t)), np.asarray(sp, bool)
    )
    return (
        4 * s * b * h * np.where(sp, 1 / t, 1.0)  # LN input + projection input, BF16
        + 4 * s * b * V / t  # FP32 logits split over the vocabulary-parallel ranks
    )


def activation_bytes_extras(s, b, h, vocab_size, t, p, sp, inflight, dropout=True) -> np.ndarray:
    """Activation bytes on the first stage outside the transformer layers.

    Embedding dropout masks for every in-flight micro-batch (only with ``dropout``), plus the
    output layer and FP32 logits when ``p = 1`` (the first stage is also the last):
    Korthikanti22 §4.3, ``sbhL/t (p/L + delta_{p=1} 4/L (1 + V/h))``. Shape: all arguments broadcast.
    """
    embedding = embedding_activation_bytes(s, b, h, t, sp, inflight) * bool(dropout)
    logits = logits_activation_bytes(s, b, h, vocab_size, t, sp)
    return embedding + np.where(np.asarray(p) == 1, logits, 0.0)
