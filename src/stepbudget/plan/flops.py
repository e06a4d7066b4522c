"""Parameters and FLOPs of the model, per token. The model's shapes are fixed in a sweep, so
these are plain floats; the layout-dependent arithmetic lives in plan/derive.py.

Symbols: L layers, h hidden, q = a * d_head query width, kv = a_kv * d_head, d_ff MLP width,
V vocabulary, s sequence, k top-k, d_e expert width.
"""

from __future__ import annotations

from dataclasses import dataclass

from stepbudget.enums import Activation, Recompute
from stepbudget.inputs.model import Model


@dataclass(frozen=True)
class ModelCounts:
    """Parameter and per-token FLOP counts of one model (FLOP per token are training: fwd + bwd)."""

    params_total: float
    """All parameters, embeddings and every expert included."""
    params_active: float
    """Parameters one token touches: routed experts counted k of E (the N of 6N for MoE)."""
    params_embedding: float
    """Input embedding plus LM head (one matrix if tied)."""
    params_routed_experts: float
    """All routed-expert parameters (sharded over EP)."""
    params_attention_layer: float
    """Attention projections of one layer."""
    params_moe_layer_routed: float
    """Routed experts of one MoE layer."""
    flops_per_token: float
    """Model FLOPs per token under the chosen convention (the numerator of MFU)."""
    flops_per_token_6n: float
    """6 N_active per token (Kaplan)."""
    attention_core_flops_per_token: float
    """The sequence-dependent attention term included in flops_per_token."""
    recompute_flops_per_token: dict[str, float]
    """Extra forward FLOPs per token by recompute mode (hardware FLOPs = model + this)."""
    layer_forward_flops_per_token: float
    """Forward FLOPs per token of all transformer layers (what full recompute repeats)."""


def _mlp_matrices(model: Model) -> int:
    # SwiGLU: gate, up, down; GeLU: up, down (formulas.md 2.4)
    return 3 if model.activation == Activation.SWIGLU else 2


def attention_params(model: Model) -> float:
    """Attention projection parameters of one layer (biases and norms ignored)."""
    h = model.hidden_size
    if model.mla is not None:
        # DeepSeek-V2/V3 MLA: down/up projections for Q and joint KV, then the output projection
        ml, a = model.mla, model.num_heads
        q_head = ml.qk_nope_head_dim + ml.qk_rope_head_dim
        q_proj = h * ml.q_lora_rank + ml.q_lora_rank * a * q_head if ml.q_lora_rank else h * a * q_head
        kv_down = h * (ml.kv_lora_rank + ml.qk_rope_head_dim)
        kv_up = ml.kv_lora_rank * a * (ml.qk_nope_head_dim + ml.v_head_dim)
        out = a * ml.v_head_dim * h
        return float(q_proj + kv_down + kv_up + out)
    q = model.num_heads * model.head_width
    kv = model.kv_heads * model.head_width
    return float(h * (q + 2 * kv) + q * h)  # Q, K, V then output: Megatron transformer_flops


def attention_widths(model: Model) -> tuple[float, float]:
    """(d_qk, d_v): total query-key and value widths the score and AV products run over."""
    if model.mla is not None:
        ml, a = model.mla, model.num_heads
        return float(a * (ml.qk_nope_head_dim + ml.qk_rope_head_dim)), float(a * ml.v_head_dim)
    q = float(model.num_heads * model.head_width)
    return q, q


def op_sac_params(model: Model) -> float:
    """Weights per layer whose matmul per-op selective checkpointing runs again: the even ones of wq, wk, wv,
    wo, w1, w3, w2 (SwiGLU) or wq, wk, wv, wo, w1, w2 (two-matrix MLP), counted in execution order
    (torchtitan activation_checkpoint.py: every matmul's output is saved "except every second mm")."""
    h, d = model.hidden_size, model.head_width
    wk, wo, w = h * model.kv_heads * d, model.num_heads * d * h, h * model.ffn_size
    return wk + wo + w  # wk, wo and w3 (SwiGLU) or w2 (two matrices): each h x f


@dataclass(frozen=True)
class _MoeLayerParams:
    """Parameters of one MoE layer besides attention (all 0.0 for a dense model)."""

    shared: float
    """Shared experts."""
    router: float
    routed: float
    """All routed experts."""
    active_routed: float
    """The k routed experts one token runs through."""


def _moe_layer_params(model: Model) -> _MoeLayerParams:
    moe, h, n_mat = model.moe, model.hidden_size, _mlp_matrices(model)
    if moe is None:
        return _MoeLayerParams(0.0, 0.0, 0.0, 0.0)
    expert = n_mat * h * moe.expert_ffn_size
    return _MoeLayerParams(shared=moe.shared_experts * n_mat * h * moe.shared_width, router=h * moe.num_experts,
                           routed=moe.num_experts * expert, active_routed=moe.top_k * expert)


def _forward_flops(model: Model, convention: str, attn: float, dense_mlp: float,
                   moe: _MoeLayerParams) -> tuple[float, float]:
    """(attention core, all layers) forward FLOPs per token: 2 per multiply-accumulate."""
    h, L, s, mtp = model.hidden_size, model.num_layers, model.seq_len, model.mtp_layers
    L_moe = model.moe_layers
    L_dense = L - L_moe
    d_qk, d_v = attention_widths(model)
    core_fwd_noncausal = 2 * s * (d_qk + d_v)  # QK^T and AV over the full s x s matrix (PaLM 12LHQT / 3)
    core_fwd = core_fwd_noncausal / 2 if convention == "causal" else core_fwd_noncausal
    attn_fwd = 2 * attn
    mlp_fwd = 2 * dense_mlp
    moe_fwd = 2 * (moe.active_routed + moe.shared)  # routers not counted (Megatron transformer_flops)
    last_fwd = attn_fwd + core_fwd + (moe_fwd if L_moe else mlp_fwd)
    layers_fwd = L_dense * (attn_fwd + core_fwd + mlp_fwd) + L_moe * (attn_fwd + core_fwd + moe_fwd)
    layers_fwd += mtp * (last_fwd + 2 * 2 * h * h)  # MTP: one more layer of the last kind + its 2h x h projection
    return core_fwd, layers_fwd


def _recompute_flops(model: Model, core_fwd: float, layers_fwd: float) -> dict[str, float]:
    """Extra forward FLOPs per token of each recompute mode."""
    L = model.num_layers
    return {
        Recompute.NONE.value: 0.0,
        Recompute.SELECTIVE.value: L * core_fwd,  # attention core forward again (Korthikanti 5)
        Recompute.FULL.value: layers_fwd,  # one more forward of every layer; logits not recomputed (Narayanan 5.1)
        Recompute.SELECTIVE_OP.value: L * 2 * op_sac_params(model),  # torchtitan's per-op policy: every second matmul
    }


def model_counts(model: Model, convention: str = "causal") -> ModelCounts:
    """Parameter and FLOP counts. ``convention``: "6N", "causal" or "noncausal" (formulas.md 2.1-2.4)."""
    h, L, V = model.hidden_size, model.num_layers, model.vocab_size
    L_moe = model.moe_layers
    L_dense = L - L_moe

    attn = attention_params(model)
    dense_mlp = _mlp_matrices(model) * h * model.ffn_size
    moe = _moe_layer_params(model)
    embedding = V * h * (1 if model.tied_embeddings else 2)
    params_routed = L_moe * moe.routed
    params_total = L * attn + L_dense * dense_mlp + L_moe * (moe.shared + moe.router + moe.routed) + embedding
    params_active = params_total - L_moe * (moe.routed - moe.active_routed)

    # training = 3x forward (Korthikanti App. A)
    core_fwd, layers_fwd = _forward_flops(model, convention, attn, dense_mlp, moe)
    logits_fwd = 2 * h * V * (1 + model.mtp_layers)
    per_token = 3 * (layers_fwd + logits_fwd)  # formulas.md 2.4
    six_n = 6 * params_active  # formulas.md 2.1 (Kaplan), activated parameters for MoE
    core_term = 3 * L * core_fwd
    if convention == "6N":
        per_token, core_term = six_n, 0.0
    return ModelCounts(
        params_total=float(params_total),
        params_active=float(params_active),
        params_embedding=float(embedding),
        params_routed_experts=float(params_routed),
        params_attention_layer=attn,
        params_moe_layer_routed=float(moe.routed),
        flops_per_token=float(per_token),
        flops_per_token_6n=float(six_n),
        attention_core_flops_per_token=float(core_term),
        recompute_flops_per_token=_recompute_flops(model, core_fwd, layers_fwd),
        layer_forward_flops_per_token=float(layers_fwd),
    )
