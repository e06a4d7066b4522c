"""Operator-level compute model: each operator's FLOPs and bytes at a worked shape, and its roofline."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import stepbudget as sb
from stepbudget.enums import AttentionKernel
from stepbudget.inputs.hardware import Kernels, gpu_presets
from stepbudget.plan.operators import (ATTENTION_BWD_RATIO, attention_kernels, gemm, head_ops, layer_ops, layer_times,
                                       optimizer_s)

K = Kernels(gemm=0.8, gemm_fp8=0.7, gemm_half_dim=64, attention_fwd=0.6, attention_bwd=0.5, attention_half_seq=256,
            hbm=0.9, kernel_overhead_s=5e-6)
PEAK, HBM = 989e12, 3.35e12


BALANCED = "model.moe.expert_load=1"
"""Every expert at the mean load: the routing these tests count by hand."""

def _ops(name, *sets, T=8192, t=8, sp=True):
    m = sb.load(name, list(sets)).model
    return {op.name: op for op in layer_ops(m, T, m.seq_len, t, sp, 1, t, K, PEAK, PEAK, K.gemm, HBM)}, m


def test_gemm_flops_bytes_and_roofline_at_a_worked_shape():
    # Llama 3 405B QKV with TP 8 on one 8K micro-batch: M = 8192, K = h = 16384, N = (128 + 16) x 128 / 8 = 2304
    op = gemm("qkv", 8192, 2304, 16384, 1, PEAK, K, HBM, K.gemm)
    assert float(op.flops) == 2 * 8192 * 2304 * 16384
    assert float(op.bytes) == 2 * (8192 * 16384 + 16384 * 2304 + 8192 * 2304)
    f = lambda x: x / (x + 64)  # noqa: E731
    eff = 0.8 * f(8192) * f(2304) * f(16384)
    assert float(op.fwd_s) == pytest.approx(op.flops / (PEAK * eff) + 5e-6)
    assert float(op.bwd_s) == pytest.approx(2 * float(op.fwd_s))  # dgrad + wgrad


def test_wgrad_accumulation_is_a_serial_epilogue_only_where_kernels_do_not_overlap_it():
    # GPT-3 175B QKV with TP 8 on a 2K micro-batch, wgrad into Megatron's FP32 main_grad (4 bytes, read + write)
    M, N, Kd = 2048, 4608, 12288
    A100 = K.model_copy(update=dict(epilogue_overlap=False))
    serial = gemm("qkv", M, N, Kd, 1, 312e12, A100, 2.039e12, A100.gemm, grad_bytes=4)
    hidden = gemm("qkv", M, N, Kd, 1, 312e12, K, 2.039e12, K.gemm, grad_bytes=4)
    f = lambda x: x / (x + 64)  # noqa: E731
    math = serial.flops / (312e12 * 0.8 * f(M) * f(N) * f(Kd))
    hbm = 2.039e12 * 0.9
    acc = 2 * 4 * Kd * N / hbm  # 453 MB of FP32 gradient read and written
    assert float(serial.fwd_s) == pytest.approx(math + 2 * M * N / hbm + 5e-6)
    assert float(serial.bwd_s) == pytest.approx(2 * math + 2 * M * Kd / hbm + acc + 2 * 5e-6)
    assert float(hidden.bwd_s) == pytest.approx(2 * (math + 5e-6))  # compute-bound: the epilogue hides
    assert 0.25 < acc / math < 0.35  # a short K = 2048 mainloop: the epilogue adds about 30 % to the wgrad


def test_fp8_gemms_pay_a_quantization_pass_over_their_activations():
    # DeepSeek-V3 3.5.2: activations read as BF16, written as FP8 (3 B/element); re-quantized transposed for wgrad (2 B)
    M, N, Kd = 4096, 4096, 7168
    bf = gemm("x", M, N, Kd, 2, 1979e12, K, HBM, K.gemm_fp8)
    q = gemm("x", M, N, Kd, 2, 1979e12, K, HBM, K.gemm_fp8, fp8=True)
    hbm = HBM * 0.9
    # two GEMMs (count = 2) share one quantization kernel per pass
    assert float(q.fwd_s - bf.fwd_s) == pytest.approx(2 * 3 * M * Kd / hbm + 5e-6)
    assert float(q.bwd_s - bf.bwd_s) == pytest.approx(2 * (3 * M * N + 2 * (M * Kd + M * N)) / hbm + 3 * 5e-6)
    assert float(q.flops) == float(bf.flops) and float(q.bytes) == float(bf.bytes)


def test_a_skinny_gemm_is_memory_bound():
    op = gemm("skinny", 1, 16384, 16384, 1, PEAK, K, HBM, K.gemm)
    assert float(op.fwd_s) == pytest.approx(float(op.bytes) / (HBM * 0.9) + 5e-6)


def test_llama3_layer_operators_at_8k():
    ops, m = _ops("llama3-405b")
    T, h, t, f = 8192, 16384, 8, 53248
    assert float(ops["qkv"].flops) == 2 * T * h * (128 + 2 * 8) * 128 / t
    assert float(ops["attention out"].flops) == 2 * T * h * h / t
    assert float(ops["mlp up"].flops) == 2 * T * h * 2 * f / t  # SwiGLU: gate and up
    assert float(ops["mlp down"].flops) == 2 * T * f / t * h
    # causal core: QK^T and PV over half the s x s matrix, heads split by TP (formulas.md 2.2)
    assert float(ops["attention core"].flops) == pytest.approx(2 * T * 8192 * (128 / t) * 256 * 0.5)
    core = ops["attention core"]
    assert float(core.bwd_s - 5e-6) == pytest.approx(ATTENTION_BWD_RATIO * float(core.fwd_s - 5e-6) * 0.6 / 0.5)
    # memory-bound: norms + residuals on T/t tokens with SP, SwiGLU reads 2 and writes 1 of T f / t
    assert float(ops["norms + residuals"].bytes) == 2 * (T / t) * h * 10
    assert float(ops["mlp activation"].bytes) == 2 * T * f / t * 3
    # the layer's GEMM FLOPs x 3 (fwd + bwd) equal formulas.md 2.4's projections + MLP per token
    gemm_flops = sum(float(op.flops) for op in ops.values() if op.kind == "gemm")
    per_token = 6 * (h * (128 * 128 + 2 * 8 * 128) + 128 * 128 * h + 3 * h * f)
    assert 3 * gemm_flops * t / T == pytest.approx(per_token)


def test_moe_experts_run_at_their_token_counts():
    m = sb.load("megascale-moe-352b", [BALANCED]).model  # 32 experts, top-3, expert FFN 14,336, SwiGLU
    T, ep = 8192, 8
    ops = {op.name: op for op in layer_ops(m, T, m.seq_len, 1, False, ep, 1, K, PEAK, PEAK, K.gemm, HBM)}
    per_expert = T * ep * 3 / 32  # balanced routing: tokens of the EP group x top-k / experts
    up = ops["experts up"]
    assert float(up.flops) == pytest.approx(2 * per_expert * 2 * 14336 * 4096 * (32 / ep))
    assert up.share == 1.0  # every layer of this model is MoE
    # the routed GEMM FLOPs equal k x the dense-equivalent expert FFN for this GPU's tokens
    routed = float(up.flops + ops["experts down"].flops)
    assert routed == pytest.approx(2 * T * 3 * 3 * 4096 * 14336)


def test_skewed_routing_runs_the_experts_at_the_busiest_gpus_token_count():
    # the EP group's all-to-all waits for the GPU that receives the most copies: its experts set the pace
    from stepbudget.a2a.routing import busiest_gpu_factor
    m = sb.load("megascale-moe-352b", ["model.moe.popularity_skew=0.8"]).model
    T, ep = 8192, 8
    skewed = {op.name: op for op in layer_ops(m, T, m.seq_len, 1, False, ep, 1, K, PEAK, PEAK, K.gemm, HBM)}
    flat = {op.name: op for op in layer_ops(sb.load("megascale-moe-352b", [BALANCED]).model, T, m.seq_len, 1, False,
                                            ep, 1, K, PEAK, PEAK, K.gemm, HBM)}
    factor = busiest_gpu_factor(32, 3, ep, 0.8)
    assert factor > 1.2
    for name, what in (("experts up", "flops"), ("experts down", "flops"), ("experts activation + permute", "bytes")):
        assert float(getattr(skewed[name], what)) == pytest.approx(factor * float(getattr(flat[name], what)))
        assert float(skewed[name].fwd_s) > float(flat[name].fwd_s)
    assert float(skewed["qkv"].fwd_s) == float(flat["qkv"].fwd_s)  # attention does not see the routing


@pytest.mark.parametrize(("sets", "factor"), [
    # aux-loss: the busiest expert at 1.52x the mean (Wang et al. 2024 Table 2); the rest of the tokens spread over
    # the other 31 experts, 3 of them beside it: (1.52 + 3 (32 - 1.52) / 31) / 4 = 1 + 0.52 x 7 / 31
    ([], (1.52 + 3 * (32 - 1.52) / 31) / 4),
    (["model.moe.balance=loss-free"], 1 + 0.04 * 7 / 31),
    (["model.moe.expert_load=2"], 1 + 1 * 7 / 31),
    (["model.moe.expert_load=2", "model.moe.capacity_factor=1.25"], 1 + 0.25 * 7 / 31),  # drops above the capacity
    (["model.moe.capacity_factor=1.25", "model.moe.pad_to_capacity=true"], 1.25),  # every expert padded to it
    (["model.moe.capacity_factor=0.8"], 0.8),  # every expert drops down to 0.8x the mean
])
def test_the_busiest_expert_sets_the_experts_token_count(sets, factor):
    T, ep = 8192, 8
    flat = {op.name: op for op in layer_ops(sb.load("megascale-moe-352b", [BALANCED]).model, T, 4096, 1, False, ep, 1,
                                            K, PEAK, PEAK, K.gemm, HBM)}
    loaded = {op.name: op for op in layer_ops(sb.load("megascale-moe-352b", sets).model, T, 4096, 1, False, ep, 1, K,
                                              PEAK, PEAK, K.gemm, HBM)}
    for name in ("experts up", "experts down"):
        assert float(loaded[name].flops) == pytest.approx(factor * float(flat[name].flops))
    assert float(loaded["router"].flops) == float(flat["router"].flops)  # every token is scored, however it routes


def test_mla_projections():
    ops, m = _ops("deepseek-v3", T=4096, t=1, sp=False)
    ml = m.mla
    assert float(ops["q down"].flops) == 2 * 4096 * 7168 * ml.q_lora_rank
    assert float(ops["kv up"].flops) == 2 * 4096 * ml.kv_lora_rank * 128 * (128 + 128)


def test_head_and_optimizer():
    m = sb.load("llama3-405b").model
    logits, loss = head_ops(m, 8192, 8, K, PEAK, HBM)
    assert float(logits.flops) == 2 * 8192 * m.vocab_size / 8 * 16384
    assert float(loss.bytes) == 4 * 8192 * m.vocab_size / 8 * 3
    # Adam: read and write K = 12 bytes of state, read a 4-byte gradient, write a 2-byte parameter
    assert float(optimizer_s(1e9, 12, 4, 2, K, HBM)) == pytest.approx(1e9 * 30 / (HBM * 0.9))


def test_layer_times_weight_dense_and_moe_shares():
    m = sb.load("deepseek-v3").model
    ops = layer_ops(m, 4096, 4096, 1, False, 64, 1, K, PEAK, PEAK, K.gemm, HBM)
    fwd, _ = layer_times(ops)
    dense = sum(op.fwd_s for op in ops if op.name.startswith("mlp"))
    assert all(op.share == pytest.approx(3 / 61) for op in ops if op.name.startswith("mlp"))
    assert float(fwd) == pytest.approx(float(sum(op.share * op.fwd_s for op in ops)))
    assert float(dense) > 0


@given(st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4]), st.sampled_from(["llama3-405b", "hpn-gpt3-175b"]))
@settings(max_examples=25, deadline=None)
def test_a_faster_gpu_is_never_slower(t, b, name):
    sc = sb.load(name)
    m = sc.model
    T = b * m.seq_len
    slow = layer_times(layer_ops(m, T, m.seq_len, t, True, 1, t, K, PEAK, PEAK, K.gemm, HBM))
    fast = layer_times(layer_ops(m, T, m.seq_len, t, True, 1, t, K, 2 * PEAK, 2 * PEAK, K.gemm, 2 * HBM))
    assert float(fast[0]) <= float(slow[0]) and float(fast[1]) <= float(slow[1])


def test_stated_rate_is_honoured_and_the_operator_model_otherwise():
    stated = sb.derive(sb.load("llama3-405b"))
    assert stated.rate_source == "stated" and stated.flops_rate == 400e12
    ops = sb.derive(sb.load("llama3-405b", ["cluster.achieved_flops=null", "cluster.rate_scope=kernel"]))
    assert ops.rate_source == "operators" and ops.operators
    b = sb.estimate(ops)
    # compute time is the operator model's: hardware FLOPs / rate by construction
    assert float(b.compute_s) == pytest.approx(float(ops.hardware_flops_per_gpu / ops.flops_rate))


def test_fp8_gemms_use_the_fp8_peak():
    bf16 = sb.derive(sb.load("deepseek-v3", ["precision.gemm=bf16"]))
    fp8 = sb.derive(sb.load("deepseek-v3"))
    assert float(fp8.flops_rate) > float(bf16.flops_rate)


def test_fp8_keeps_the_output_head_and_gating_in_bf16():
    # DeepSeek-V3 3.3.1: embedding, output head, gating, normalization and attention stay in higher precision
    bf16 = {op.name: op for op in sb.derive(sb.load("deepseek-v3", ["precision.gemm=bf16"])).operators}
    fp8 = {op.name: op for op in sb.derive(sb.load("deepseek-v3")).operators}
    for name in ("logits", "router"):
        assert float(fp8[name].fwd_s) == pytest.approx(float(bf16[name].fwd_s))
    assert float(fp8["experts up"].fwd_s) < float(bf16["experts up"].fwd_s)


def test_dualpipe_rank_zero_runs_half_its_micro_batches_through_the_output_layer():
    sc = sb.load("deepseek-v3")  # DualPipe, p = 16; embedding and loss each take a layer slot
    plan = sb.derive(sc)
    ops = plan.operators
    head = [op for op in ops if op.name in ("logits", "softmax + loss")]
    layer = [op for op in ops if op not in head]
    f, b = layer_times(layer)
    hf, hb = layer_times(head)
    assert sc.layout.recompute == "none"
    layer_s = float(f + b)
    slots = (sc.model.num_layers + sc.model.mtp_layers + 2) / 16
    rank0 = ((slots - 1) * layer_s + (slots - 1) * layer_s + float(hf + hb)) / 2  # stage 0 and stage 15, alternately
    per_mb = max(slots * layer_s, rank0)
    assert float(plan.optimizer_s) < 0.01
    assert float(sb.estimate(plan).compute_s) == pytest.approx(float(plan.microbatches) * per_mb + float(plan.optimizer_s))
    one_f_one_b = sb.derive(sb.load("deepseek-v3", ["layout.schedule=1f1b"]))
    assert float(sb.estimate(one_f_one_b).compute_s) > float(sb.estimate(plan).compute_s)  # its last stage carries every head


def test_attention_that_stores_its_scores_computes_the_whole_matrix_and_moves_it():
    # Korthikanti 4.1: QK^T and PV over the full s x s (masked after), softmax reading and writing the scores
    sc = "megascale-175b"
    flash = {op.name: op for op in sb.derive(sb.load(sc)).operators}["attention core"]
    plan = sb.derive(sb.load(sc, ["layout.flash_attention=false"]))
    core = {op.name: op for op in plan.operators}["attention core"]
    m = plan.scenario.model
    T, heads, d = m.seq_len, m.num_heads / 8, m.head_width
    assert float(core.flops) == pytest.approx(2 * float(flash.flops))  # no causal half
    assert float(core.flops) == pytest.approx(2 * 2 * T * T * d * heads)
    assert float(core.bytes) > 2 * 2 * T * T * heads  # the scores are written, read, written and read again
    assert float(core.fwd_s) > float(flash.fwd_s)
    sel = sb.estimate(sb.derive(sb.load(sc, ["layout.flash_attention=false", "layout.recompute=selective"])))
    none = sb.estimate(plan)
    layers = plan.layers_per_gpu * plan.microbatches  # selective recompute runs the whole core forward again
    assert float(sel.compute_s - none.compute_s) == pytest.approx(float(layers * core.fwd_s), rel=0.02)


def test_a_parallel_block_fuses_the_projections_and_halves_the_tp_pairs():
    # GPT-J / PaLM 2 / MegaScale 3.1: attention and MLP share the normalized input and one residual add
    std = sb.derive(sb.load("megascale-175b"))
    par = sb.derive(sb.load("megascale-175b", ["model.parallel_block=true"]))
    a, b = {o.name: o for o in std.operators}, {o.name: o for o in par.operators}
    assert float(b["qkv + mlp up"].flops) == pytest.approx(float(a["qkv"].flops + a["mlp up"].flops))
    assert float(b["attention out + mlp down"].flops) == pytest.approx(float(a["attention out"].flops + a["mlp down"].flops))
    assert float(b["norms + residuals"].bytes) == pytest.approx(float(a["norms + residuals"].bytes) * 5 / 10)
    tp = lambda plan: sum(float(x.calls) for x in sb.estimate(plan).exchanges if x.dim.value == "tp")  # noqa: E731
    assert tp(par) == pytest.approx(tp(std) / 2)
    assert float(sb.estimate(par).compute_s) < float(sb.estimate(std).compute_s)  # same FLOPs, wider GEMMs, fewer passes


def test_stored_scores_attention_is_one_batched_kernel_per_pass_over_every_sequence():
    one = {o.name: o for o in sb.derive(sb.load("megascale-175b", ["layout.flash_attention=false"])).operators}
    two = {o.name: o for o in sb.derive(sb.load("megascale-175b", ["layout.flash_attention=false",
                                                                 "layout.micro_batch=2"])).operators}
    a, b = one["attention core"], two["attention core"]
    assert float(b.flops) == pytest.approx(2 * float(a.flops))  # two sequences of s x s, not one of 2s x s
    # two batched GEMMs and a softmax, one launch each, forward; compute scales with the sequences
    assert float(b.fwd_s - 3 * 5e-6) == pytest.approx(2 * float(a.fwd_s - 3 * 5e-6), rel=0.01)


def test_recompute_adds_forward_operators():
    base = ["cluster.achieved_flops=null", "cluster.rate_scope=kernel"]
    t = {r: float(sb.estimate(sb.derive(sb.load("llama3-405b", base + [f"layout.recompute={r}"]))).compute_s)
         for r in ("none", "selective", "full", "selective-op")}
    assert t["none"] < t["selective"] < t["selective-op"] < t["full"]
    assert t["full"] / t["none"] == pytest.approx(4 / 3, abs=0.06)  # one more forward of 3 passes
    # per-op checkpointing runs about 37 % of the linear forward again and every memory-bound operator
    assert 0.30 < (t["selective-op"] - t["none"]) / (t["full"] - t["none"]) < 0.5
    plan = sb.derive(sb.load("llama3-405b", base + ["layout.recompute=selective-op"]))
    assert float(plan.hardware_flops_per_gpu) > float(plan.model_flops_per_gpu)


@pytest.mark.parametrize(("preset", "sets"), [("deepseek-v3", []), ("megascale-175b", ["model.parallel_block=true"]),
                                              ("llama3-405b", ["layout.flash_attention=false"])])
def test_per_op_checkpointing_is_modelled_for_dense_standard_blocks_only(preset, sets):
    # MoE, MLA and parallel blocks order their matmuls otherwise; stored scores have no saved attention output
    with pytest.raises(sb.ScenarioError, match="layout.recompute: selective-op"):
        sb.load(preset, [*sets, "layout.recompute=selective-op"])


def test_operator_model_over_arrays_matches_the_scalar_path():
    sc = sb.load("megascale-175b")
    tp, pp = np.array([4, 8]), np.array([8, 16])
    many = sb.estimate(sb.derive(sc, {"tp": tp, "pp": pp, "dp": 12288 // (tp * pp), "virtual_stages": np.array([3, 6])}))
    for i in range(2):
        one = sb.estimate(sb.derive(sb.load("megascale-175b", [f"layout.tp={tp[i]}", f"layout.pp={pp[i]}",
                                                               f"layout.dp={12288 // (tp[i] * pp[i])}",
                                                               f"layout.virtual_stages={[3, 6][i]}"])))
        assert float(many.step_s[i]) == pytest.approx(float(one.step_s), rel=1e-12)


@pytest.mark.parametrize(("gpu", "measured"), [("b200", 834 / 2250), ("h200-sxm", 447 / 989)])
def test_gpu_attention_figures_meet_an_in_step_measurement(gpu, measured):
    """ml-engineering's upgrade study times Llama 3 8B's causal attention at 8K inside a training step
    (same software on both): 834 TFLOP/s on B200, 447 on H200. The kernel figures, at the sustained
    clock, give forward plus backward within 5 % of that share of the peak."""
    k = Kernels(**gpu_presets()[gpu]["kernels"])
    m = sb.load("llama3-405b").model.model_copy(update={"num_heads": 32, "kv_heads": 8, "hidden_size": 4096})
    peak = 2250e12 if gpu == "b200" else 989e12
    core = {op.name: op for op in layer_ops(m, 8192, 8192, 1, False, 1, 1, k, peak * k.clock, peak * k.clock,
                                            k.gemm, HBM)}["attention core"]
    achieved = (1 + ATTENTION_BWD_RATIO) * float(core.flops) / float(core.fwd_s + core.bwd_s)
    assert achieved / peak == pytest.approx(measured, rel=0.05)


def _attention_core(gpu, kernel):
    """Llama 3 8B's causal attention core at 8K on one GPU, with ``kernel``'s rates."""
    spec = sb.load("llama3-405b", [f"cluster.gpu={gpu}"]).cluster.gpu
    k = attention_kernels(spec.kernels, AttentionKernel(kernel))
    m = sb.load("llama3-405b").model.model_copy(update={"num_heads": 32, "kv_heads": 8, "hidden_size": 4096})
    peak = spec.peak_bf16_flops * k.clock
    ops = layer_ops(m, 8192, 8192, 1, False, 1, 1, k, peak, peak, k.gemm, spec.hbm_Bps)
    return next(op for op in ops if op.kind == "attention")


def test_flash_attention_2_on_hopper_runs_at_its_published_share_of_flash_attention_3():
    # FlashAttention-3 4.1: FA3 is 1.5-2.0x faster forward and 1.5-1.75x backward than FA2 on H100;
    # its introduction: FA2 reaches only about 35 % of the H100's peak
    best, fa2 = _attention_core("h100-sxm", "best"), _attention_core("h100-sxm", "flash-attention-2")
    assert 1.5 <= float(fa2.fwd_s / best.fwd_s) <= 2.0 and 1.5 <= float(fa2.bwd_s / best.bwd_s) <= 1.75
    k = attention_kernels(Kernels(**gpu_presets()["h100-sxm"]["kernels"]), AttentionKernel.FLASH2)
    long_seq = (1 + ATTENTION_BWD_RATIO) / (1 / k.attention_fwd + ATTENTION_BWD_RATIO / k.attention_bwd)
    assert long_seq == pytest.approx(0.35, abs=0.01)  # forward and backward together, at long sequences
    assert float(fa2.flops) == float(best.flops)  # same FLOPs, slower kernel


def test_flash_attention_1_is_half_flash_attention_2_and_a100s_best_is_flash_attention_2():
    best, fa2, fa1 = (_attention_core("a100-sxm-80gb", k) for k in ("best", "flash-attention-2", "flash-attention-1"))
    assert float(fa2.fwd_s) == float(best.fwd_s)
    overhead = sb.load("llama3-405b", ["cluster.gpu=a100-sxm-80gb"]).cluster.gpu.kernels.kernel_overhead_s  # does not halve
    assert float(fa1.fwd_s - overhead) == pytest.approx(2 * float(fa2.fwd_s - overhead))
    assert float(fa1.bwd_s - overhead) == pytest.approx(2 * float(fa2.bwd_s - overhead))


def test_an_older_attention_kernel_is_never_faster_and_needs_a_published_figure():
    steps = [float(sb.estimate(sb.derive(sb.load("llama3-405b", ["cluster.achieved_flops=null", "cluster.rate_scope=kernel",
                                                                   f"layout.attention_kernel={k}"]))).step_s)
             for k in ("best", "flash-attention-2", "flash-attention-1")]
    assert steps[0] < steps[1] < steps[2]
    operators = ["cluster.achieved_flops=null", "cluster.rate_scope=kernel"]
    with pytest.raises(sb.ScenarioError, match="layout.attention_kernel: no published flash-attention-2 figure"):
        sb.load("llama3-405b", [*operators, "cluster.gpu=b200", "layout.attention_kernel=flash-attention-2"])
    with pytest.raises(sb.ScenarioError, match="layout.attention_kernel: flash-attention-1 is a fused kernel"):
        sb.load("llama3-405b", ["layout.flash_attention=false", "layout.attention_kernel=flash-attention-1"])
    # a GPU given by its figures alone has no FlashAttention-2 share until one is stated
    with pytest.raises(sb.ScenarioError, match="give cluster.gpu.kernels.flash2_fwd"):
        sb.load("llama3-405b", [*operators, "cluster.gpu.kernels.flash2_fwd=null", "layout.attention_kernel=flash-attention-2"])


def test_an_older_attention_kernel_without_a_published_share_is_refused_by_name():
    # the Scenario check, held in the library too: Kernels given by their figures alone have no FA2 share
    assert K.flash2_fwd is None
    with pytest.raises(ValueError, match="flash-attention-2: no published figure"):
        attention_kernels(K, AttentionKernel.FLASH2)
    fa1 = attention_kernels(K.model_copy(update=dict(flash2_fwd=0.5, flash2_bwd=0.4)), AttentionKernel.FLASH1)
    assert (fa1.attention_fwd, fa1.attention_bwd) == pytest.approx((0.6 * 0.5 * 0.5, 0.5 * 0.4 * 0.5))


def test_a_hot_expert_costs_nothing_when_every_expert_shares_a_gpu():
    from stepbudget.plan.routing import busiest_gpu_factors
    moe = sb.load("megascale-moe-352b", ["model.moe.expert_load=1.6"]).model.moe  # 32 experts
    # EP 1: the GPU holds all 32 and computes every token whatever the split; EP 32: the hot expert is a GPU alone
    assert busiest_gpu_factors(moe, np.array([1, 32])).tolist() == pytest.approx([1.0, 1.6])
    assert np.all(np.diff(busiest_gpu_factors(moe, np.array([1, 2, 4, 8, 16, 32]))) > 0)
