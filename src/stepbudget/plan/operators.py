"""Operator-level compute time: a roofline per operator of one transformer layer.

Each operator of one layer's forward pass, on one GPU, for one micro-batch, is either a GEMM
(time = max(FLOPs / (peak x efficiency(M, N, K)), bytes / HBM)), the attention core
(FlashAttention: FLOPs at its own efficiency) or a memory-bound kernel (bytes / HBM). The
backward pass costs twice a GEMM's forward (input and weight gradients, Korthikanti App. A),
2.5 times the attention core's (FlashAttention-2 §3.2: five matmuls against two) and twice a
memory-bound kernel's bytes. Recompute adds forward operators again. Efficiency curves come
from the GPU's ``kernels`` (inputs/hardware.py, gpus.yaml).

Every quantity is a numpy array over the layouts of a sweep (0-d for one scenario). Symbols:
``T`` tokens of one micro-batch on this GPU (b s / cp), ``t`` TP degree, ``h`` hidden size,
``f`` FFN width, ``a``/``kv`` query/KV heads, ``d`` head dim, ``E``/``k`` experts and top-k.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from stepbudget.enums import Activation, AttentionKernel, Balance, Positions
from stepbudget.inputs.hardware import Kernels
from stepbudget.inputs.model import Model
from stepbudget.plan.routing import busiest_gpu_factors

ATTENTION_BWD_RATIO = 2.5
"""FlashAttention backward FLOPs over forward: 5 matmuls against 2 (FlashAttention-2 §3.2)."""
BACKWARD_RATIO = 2.0
"""Default ``t_b / t_f`` where no operator model times the passes: backward is twice forward (two matmuls per
forward matmul), Narayanan21 §2.2."""
W_FRAC = 0.5
"""Default ``t_w / t_b`` where no operator model times the passes: the weight gradient is half the backward (the
zero-bubble paper's T_B = T_W)."""
ELEMENT_BYTES = 2
"""BF16 activations and weights as the GEMMs read them."""
FP32_BYTES = 4
"""FP32 router scores, logits and loss."""
FLASH1_OVER_FLASH2 = 0.5
"""FlashAttention-1's speed over FlashAttention-2's: Dao 2023, abstract ("around 2x speedup compared to
FlashAttention") and Fig. 4."""


@dataclass(frozen=True)
class Op:
    """One operator of one layer: forward FLOPs and bytes, and times, per micro-batch on one GPU."""

    name: str
    kind: str
    """"gemm", "attention" or "memory"."""
    share: float
    """Share of the layers that have this operator (MoE operators: the MoE layers' share)."""
    flops: np.ndarray
    bytes: np.ndarray
    fwd_s: np.ndarray
    bwd_s: np.ndarray
    output_layer: bool = False
    """Part of the output layer, which runs once per model (on the last stage), not once per layer."""
    wgrad_s: np.ndarray | float = 0.0
    """The weight-gradient part of ``bwd_s`` (a GEMM's wgrad; the zero-bubble papers' W): what ZB and DualPipe
    schedules defer into the pipeline's bubble."""


def attention_kernels(kernels: Kernels, which: AttentionKernel) -> Kernels:
    """``kernels`` with the attention rates of ``which`` kernel: the GPU's best as given, FlashAttention-2
    at its published share of them (``flash2_fwd``/``flash2_bwd``), FlashAttention-1 at half that."""
    if which == AttentionKernel.BEST:
        return kernels
    if kernels.flash2_fwd is None or kernels.flash2_bwd is None:  # Scenario refuses this when it loads
        raise ValueError(f"attention kernel {which}: no published figure for these kernels; use "
                         "attention_kernel=best or give kernels.flash2_fwd and flash2_bwd")
    scale = FLASH1_OVER_FLASH2 if which == AttentionKernel.FLASH1 else 1.0
    return kernels.model_copy(update=dict(attention_fwd=kernels.attention_fwd * kernels.flash2_fwd * scale,
                                          attention_bwd=kernels.attention_bwd * kernels.flash2_bwd * scale))


def _shape_factor(x, half: float) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    return x / (x + half)  # tiles and waves: a small dimension leaves the GPU partly idle


def gemm(name, M, N, K, count, peak, kernels: Kernels, hbm_Bps, gemm_eff, grad_bytes=ELEMENT_BYTES, fp8=False,
         share=1.0, launches=None) -> Op:
    """``count`` GEMMs of (M x K) @ (K x N) with a K x N weight: 2MNK FLOPs each, operands read and the
    result written once. The backward runs the same FLOPs twice (Korthikanti App. A): dgrad writes an
    M x K result, wgrad accumulates into the weight's gradient buffer (``grad_bytes`` per element, read
    and written: Megatron's gradient-accumulation fusion adds into the FP32 main_grad). Where the GPU's
    kernels do not overlap the epilogue with the next tile (``kernels.epilogue_overlap``), writing the
    result costs HBM time after the mainloop instead of hiding under it. An ``fp8`` GEMM first quantizes
    its activation operands in a pass of their own (DeepSeek-V3 3.5.2: BF16 activations are read from
    HBM, quantized and written back; for the backward they are read again, transposed and
    re-quantized): X and dY read as BF16 and written as FP8 (3 bytes an element), then X and dY
    re-quantized transposed for the wgrad (2 bytes). ``launches``: kernels per pass (default one per
    GEMM; a batched GEMM is one)."""
    M, N, K, count = (np.asarray(x, dtype=float) for x in (M, N, K, count))
    flops = 2 * M * N * K * count
    eff = gemm_eff * _shape_factor(M, kernels.gemm_half_dim) * _shape_factor(N, kernels.gemm_half_dim) \
        * _shape_factor(K, kernels.gemm_half_dim)
    math = flops / (peak * eff)
    hbm = hbm_Bps * kernels.hbm
    launch = kernels.kernel_overhead_s * (count if launches is None else launches)

    def timed(reads, writes):  # roofline, Williams et al. 2009; a serial epilogue adds its writes
        if kernels.epilogue_overlap:
            return np.maximum(math, (reads + writes) / hbm) + launch
        return np.maximum(math, reads / hbm) + writes / hbm + launch

    E = ELEMENT_BYTES * count
    fwd = timed(E * (M * K + K * N), E * M * N)
    dgrad = timed(E * (M * N + K * N), E * M * K)
    wgrad = timed(E * (M * K + M * N), 2 * grad_bytes * count * K * N)
    if fp8:  # one quantization kernel per pass, over all ``count`` GEMMs' rows
        q = kernels.kernel_overhead_s
        fwd = fwd + 3 * count * M * K / hbm + q
        dgrad = dgrad + 3 * count * M * N / hbm + q
        wgrad = wgrad + 2 * count * (M * K + M * N) / hbm + 2 * q
    return Op(name, "gemm", share, flops, E * (M * K + K * N + M * N), fwd, dgrad + wgrad, wgrad_s=wgrad)


def memory_op(name, nbytes, kernels: Kernels, hbm_Bps, share=1.0) -> Op:
    nbytes = np.asarray(nbytes, dtype=float)
    fwd = nbytes / (hbm_Bps * kernels.hbm) + kernels.kernel_overhead_s
    return Op(name, "memory", share, np.zeros_like(nbytes), nbytes, fwd, 2 * fwd)  # backward reads and writes twice


@dataclass(frozen=True)
class _Rates:
    """What one layer's GEMMs and memory-bound kernels run at: the arguments ``gemm`` and ``memory_op``
    share."""

    peak: float
    kernels: Kernels
    hbm_Bps: float
    gemm_eff: float
    grad_bytes: float = ELEMENT_BYTES
    fp8: bool = False
    launches: int | None = None
    """Kernels per pass of each GEMM (None: one per GEMM of its ``count``)."""

    def gemm(self, name: str, M, N, K, count, share: float = 1.0) -> Op:
        return gemm(name, M, N, K, count, self.peak, self.kernels, self.hbm_Bps, self.gemm_eff,
                    grad_bytes=self.grad_bytes, fp8=self.fp8, share=share, launches=self.launches)

    def memory(self, name: str, nbytes, share: float = 1.0) -> Op:
        return memory_op(name, nbytes, self.kernels, self.hbm_Bps, share=share)


def layer_ops(model: Model, T, s_kv, t, sp, ep, etp, kernels: Kernels, peak_bf16: float, peak_gemm: float,
              gemm_eff: float, hbm_Bps: float, grad_bytes: float = ELEMENT_BYTES, fp8: bool = False,
              flash: bool = True, ep_gather: bool = False, mb=1) -> list[Op]:
    """The operators of one average layer (dense and MoE parts weighted by ``share``)."""
    T, s_kv, t, ep, etp = (np.asarray(x, dtype=float) for x in (T, s_kv, t, ep, etp))
    r = _Rates(peak_gemm, kernels, hbm_Bps, gemm_eff, grad_bytes, fp8)
    d_qk, d_v = _head_dims(model)
    if flash:
        core = _flash_core(T, s_kv, model.num_heads / t, d_qk, d_v, kernels, peak_bf16)
    else:
        core = _unfused_core(model, T, s_kv, model.num_heads / t, d_qk, d_v, kernels, peak_bf16, hbm_Bps, mb)
    return [*_attention_projections(model, T, t, r), core, *_mlp_ops(model, T, t, d_qk, d_v, r),
            *_moe_ops(model, T, t, ep, etp, r, peak_bf16, ep_gather),
            *_elementwise_ops(model, T, t, np.asarray(sp, bool), d_qk, r)]


def _head_dims(model: Model) -> tuple[int, int]:
    """(d_qk, d_v): query-key and value width of one head (MLA: DeepSeek-V2 §2.1)."""
    if model.mla is not None:
        ml = model.mla
        return ml.qk_nope_head_dim + ml.qk_rope_head_dim, ml.v_head_dim
    return model.head_width, model.head_width


def _attention_projections(model: Model, T, t, r: _Rates) -> list[Op]:
    """Q, K, V and output projections (formulas.md 2.4; MLA as in DeepSeek-V2 §2.1); a parallel block
    fuses the standard ones with the MLP's (``_mlp_ops``)."""
    h, a, fused = model.hidden_size, model.num_heads, model.parallel_block
    d_qk, d_v = _head_dims(model)
    ops: list[Op] = []
    if model.mla is not None:
        ml = model.mla
        if ml.q_lora_rank:
            ops.append(r.gemm("q down", T, ml.q_lora_rank, h, 1))
            ops.append(r.gemm("q up", T, a * d_qk / t, ml.q_lora_rank, 1))
        else:
            ops.append(r.gemm("q", T, a * d_qk / t, h, 1))
        ops.append(r.gemm("kv down", T, ml.kv_lora_rank + ml.qk_rope_head_dim, h, 1))
        ops.append(r.gemm("kv up", T, a * (ml.qk_nope_head_dim + d_v) / t, ml.kv_lora_rank, 1))
    elif not fused:
        ops.append(r.gemm("qkv", T, (a + 2 * model.kv_heads) * d_qk / t, h, 1))
    if not fused:
        ops.append(r.gemm("attention out", T, a * d_v / t, h, 1))
    return ops


def _flash_core(T, s_kv, heads, d_qk, d_v, kernels: Kernels, peak_bf16: float) -> Op:
    """The attention core as FlashAttention runs it: causal, so about half the s x s blocks."""
    core = 2 * T * s_kv * heads * (d_qk + d_v) * 0.5  # QK^T and PV, Korthikanti App. A; causal half
    eff_len = _shape_factor(s_kv, kernels.attention_half_seq)
    fwd = core / (peak_bf16 * kernels.attention_fwd * eff_len) + kernels.kernel_overhead_s
    bwd = ATTENTION_BWD_RATIO * core / (peak_bf16 * kernels.attention_bwd * eff_len) + kernels.kernel_overhead_s
    return Op("attention core", "attention", 1.0, core, np.zeros_like(core), fwd, bwd)


def _dense_share(model: Model) -> float:
    """Share of the layers with a dense MLP."""
    return 1.0 - (model.moe_layers / model.num_layers if model.moe is not None else 0.0)


def _up_matrices(model: Model) -> int:
    return 2 if model.activation == Activation.SWIGLU else 1  # SwiGLU's up GEMM holds gate and up


def _mlp_ops(model: Model, T, t, d_qk, d_v, r: _Rates) -> list[Op]:
    """The dense layers' MLP; a parallel block's one GEMM for QKV and MLP-up on the shared input, and one
    for both outputs into the residual."""
    h, a, f = model.hidden_size, model.num_heads, model.ffn_size
    up_mult, dense_share = _up_matrices(model), _dense_share(model)
    ops: list[Op] = []
    if model.parallel_block:
        ops.append(r.gemm("qkv + mlp up", T, ((a + 2 * model.kv_heads) * d_qk + up_mult * f) / t, h, 1))
        ops.append(r.gemm("attention out + mlp down", T, h, (a * d_v + f) / t, 1))
    elif dense_share > 0:
        ops.append(r.gemm("mlp up", T, up_mult * f / t, h, 1, share=dense_share))
        ops.append(r.gemm("mlp down", T, h, f / t, 1, share=dense_share))
    if dense_share > 0:  # a parallel block is dense: its share is 1
        ops.append(r.memory("mlp activation", ELEMENT_BYTES * T * f / t * model.mlp_intermediates,
                            share=dense_share))
    return ops


def _moe_ops(model: Model, T, t, ep, etp, r: _Rates, peak_bf16: float, ep_gather: bool) -> list[Op]:
    """The MoE layers' router, routed experts on the busiest GPU, and shared experts."""
    moe = model.moe
    if moe is None:
        return []
    h, up_mult, share = model.hidden_size, _up_matrices(model), 1.0 - _dense_share(model)
    E, k, fe = moe.num_experts, moe.top_k, moe.expert_ffn_size
    T_moe = T * etp / t  # tokens entering the MoE on this GPU: split over TP unless experts keep TP
    # rows per expert on the busiest GPU: the EP group's all-to-all waits for it (formulas.md 7;
    # balanced routing gives the mean, T_moe * ep * k / E)
    busiest = busiest_gpu_factors(moe, ep)
    per_expert = T_moe * ep * k / E * busiest
    experts = E / ep
    gating = dataclasses.replace(r, peak=peak_bf16, gemm_eff=r.kernels.gemm, fp8=False)  # BF16 (DeepSeek-V3 3.3.1)
    ops = [gating.gemm("router", T_moe, E, h, 1, share=share),
           # scoring and top-k over the T x E FP32 scores: softmax (read, write), top-k (read), the probabilities
           # and routing map scattered (write), and under an auxiliary loss its own softmax (read, write)
           # (Megatron-Core core_v0.13.0 moe/router.py aux_loss_load_balancing, compute_routing_scores_for_aux_loss)
           r.memory("router top-k", FP32_BYTES * T_moe * E * (4 + 2 * (moe.balance == Balance.AUX_LOSS)),
                    share=share),
           r.gemm("experts up", per_expert, up_mult * fe / etp, h, experts, share=share),
           r.gemm("experts down", per_expert, h, fe / etp, experts, share=share)]
    # all-gather EP also reads the gathered tokens to pick its rows and writes the reduce-scatter's input
    gathered = np.where(ep > 1, 2 * ELEMENT_BYTES * T_moe * ep * h, 0.0) if ep_gather else 0.0
    rows = T_moe * k * busiest  # token copies the busiest GPU activates and permutes
    ops.append(r.memory("experts activation + permute",
                        ELEMENT_BYTES * rows * (model.mlp_intermediates * fe / etp + 4 * h) + gathered, share=share))
    if moe.shared_experts:
        fs = moe.shared_experts * moe.shared_width
        ops.append(r.gemm("shared up", T, up_mult * fs / t, h, 1, share=share))
        ops.append(r.gemm("shared down", T, h, fs / t, 1, share=share))
    return ops


def _elementwise_ops(model: Model, T, t, sp, d_qk, r: _Rates) -> list[Op]:
    """Memory-bound kernels: two norms (read, write), two residual adds (read 2, write 1), rotary on Q and
    K (learned positions are added once at the input, ALiBi inside the attention kernel); a parallel
    block has one of each (its fused output GEMM already sums attention and MLP); with SP the norms and
    residuals see T / t tokens (Korthikanti §4.2.2)."""
    h, fused = model.hidden_size, model.parallel_block
    T_sp = np.where(sp, T / t, T)
    passes = 2 + 3 if fused else 2 * 2 + 2 * 3
    ops = [r.memory("norms + residuals", ELEMENT_BYTES * T_sp * h * passes)]
    if model.positions == Positions.ROTARY:
        ops.append(r.memory("rotary", ELEMENT_BYTES * T * _rope_width(model, t, d_qk) * 2))
    if model.dropout:
        ops.append(r.memory("dropout", T_sp * h * (1 if fused else 2) * (2 * ELEMENT_BYTES + 1)))
    return ops


def _rope_width(model: Model, t, d_qk) -> np.ndarray:
    """Width of Q and K one token rotates on this GPU (MLA: the decoupled rope heads, K's shared by all)."""
    if model.mla is not None:
        rope = model.mla.qk_rope_head_dim
        return model.num_heads * rope / t + rope
    return (model.num_heads + model.kv_heads) * d_qk / t


def _unfused_core(model: Model, T, s_kv, heads, d_qk, d_v, kernels: Kernels, peak_bf16: float, hbm_Bps: float,
                  mb=1) -> Op:
    """Attention that stores its scores (Megatron before FlashAttention, Korthikanti 4.1): QK^T and PV as
    batched BF16 GEMMs over the whole s x s matrix (the causal mask is applied to computed scores), a
    fused scale-mask-softmax over the scores, and dropout on them when the model has it; one operator,
    so that selective recompute runs all of it again."""
    # both operands are activations: the "weight" gradients (dK, dV) are written once, not accumulated
    # one batched GEMM over the heads and sequences of the micro-batch
    r = _Rates(peak_bf16, kernels, hbm_Bps, kernels.gemm, grad_bytes=1.0, launches=1)
    q = T / mb  # queries of one sequence on this GPU
    parts = [r.gemm("scores", q, s_kv, d_qk, heads * mb),
             r.memory("softmax", ELEMENT_BYTES * T * s_kv * heads * 2),  # read scores, write probs
             r.gemm("values", q, d_v, s_kv, heads * mb)]
    if model.dropout:
        parts.append(r.memory("attention dropout", T * s_kv * heads * (2 * ELEMENT_BYTES + 1)))
    flops, nbytes, fwd, bwd = (sum(getattr(op, f) for op in parts) for f in ("flops", "bytes", "fwd_s", "bwd_s"))
    return Op("attention core", "attention", 1.0, flops, nbytes, fwd, bwd)


def head_ops(model: Model, T, t, kernels: Kernels, peak_bf16: float, hbm_Bps: float,
             grad_bytes: float = ELEMENT_BYTES) -> list[Op]:
    """Output layer of one micro-batch on the last stage: the logits GEMM and the FP32 softmax/loss. In
    BF16 even in FP8 training (DeepSeek-V3 3.3.1: embedding, output head, gating, normalization and
    attention stay in higher precision)."""
    V = model.vocab_size
    T, t = np.asarray(T, dtype=float), np.asarray(t, dtype=float)
    r = _Rates(peak_bf16, kernels, hbm_Bps, kernels.gemm, grad_bytes)
    heads = 1 + model.mtp_layers
    ops = [
        r.gemm("logits", T, V / t, model.hidden_size, heads),
        r.memory("softmax + loss", FP32_BYTES * T * V / t * 3 * heads),  # FP32 logits written, read, grad
    ]
    return [dataclasses.replace(op, output_layer=True) for op in ops]


def optimizer_s(params_updated, optimizer_bytes: float, grad_bytes: float, param_bytes: float, kernels: Kernels,
                hbm_Bps: float) -> np.ndarray:
    """One optimizer step: read and write the optimizer state, read the gradient, write the parameter."""
    nbytes = np.asarray(params_updated, dtype=float) * (2 * optimizer_bytes + grad_bytes + param_bytes)
    return nbytes / (hbm_Bps * kernels.hbm)


def op_sac_again(model: Model, ops: list[Op]) -> np.ndarray:
    """Forward seconds of one layer that per-op selective checkpointing runs again (torchtitan's policy,
    ``Recompute.SELECTIVE_OP``): wk of the QKV GEMM, the attention output, w3 of a SwiGLU MLP's up GEMM or
    a two-matrix MLP's down GEMM, and every memory-bound operator; attention is saved."""
    a, kv = model.num_heads, model.kv_heads
    gated = model.activation == Activation.SWIGLU
    again = {"qkv": kv / (a + 2 * kv), "attention out": 1.0, "mlp up": 0.5 if gated else 0.0,
             "mlp down": 0.0 if gated else 1.0}
    other = sorted({op.name for op in ops if op.kind == "gemm"} - set(again))
    if other:  # MoE, MLA, a parallel block: their matmuls run in another order
        raise ValueError(f"selective-op is modelled for dense standard blocks; this layer also has {', '.join(other)}")
    return sum((op.share * op.fwd_s * (again.get(op.name, 0.0) if op.kind == "gemm" else float(op.kind == "memory"))
                for op in ops), np.zeros(()))


def layer_times(ops: list[Op]) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds of one average layer for one micro-batch."""
    fwd = sum((op.share * op.fwd_s for op in ops), np.zeros(()))
    bwd = sum((op.share * op.bwd_s for op in ops), np.zeros(()))
    return fwd, bwd


def layer_wgrad_s(ops: list[Op]) -> np.ndarray:
    """Weight-gradient seconds of one average layer for one micro-batch: the part of its backward a zero-bubble
    schedule defers."""
    return sum((op.share * np.asarray(op.wgrad_s) for op in ops), np.zeros(()))
