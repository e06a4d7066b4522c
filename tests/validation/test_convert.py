"""The conversion rules (validation/convert.py), each on a minimal run with the value it must set."""

import copy
import glob
import re
from operator import attrgetter

import pytest
import yaml

from stepbudget.plan.flops import model_counts
from stepbudget.validation.convert import NIC_BUSBW_SHARE, NVLINK_BUSBW_SHARE, RULES, to_case
from stepbudget.validation.runs import check_run, shipped_runs_text

TINY = {  # 64 H100s as TP2 x CP1 x PP4 x DP8; a model no preset carries
    "id": "tiny",
    "model": {"name": "tiny", "layers": 8, "hidden": 1024, "heads": 16, "vocab": 32000, "seq_len": 2048},
    "hardware": {"gpu": "NVIDIA H100 SXM"},
    "num_gpus": 64,
    "layout": {"tp": 2, "pp": 4, "cp": 1, "dp": 8, "global_batch_seqs": 64},
    "measured": {"step_time_s": 1.5},
}


def _run(changes: dict) -> dict:
    """TINY with ``{"layout.dp": None, ...}`` applied (a section's dict is replaced whole)."""
    run = copy.deepcopy(TINY)
    for dotted, value in changes.items():
        section, _, name = dotted.partition(".")
        if name:
            run.setdefault(section, {})[name] = value
        else:
            run[section] = value
    return run


def _case(changes: dict):
    run = _run(changes)
    check_run(run, 0)
    return to_case(run)


def _scenario(changes: dict):
    case = _case(changes)
    assert case.reason is None, case.reason
    return case.scenario


@pytest.mark.parametrize("changes, degrees, note", [
    ({}, (2, 1, 4, 8), None),
    ({"layout.cp": 2, "layout.dp": None}, (2, 2, 4, 4), "DP not a number in the source: 4 from the GPU count"),
    ({"layout.dp": "ZeRO-1 over the rest"}, (2, 1, 4, 8), "DP not a number in the source: 8 from the GPU count"),
    # MegaScale-MoE's SP attention is CP over the EP ranks: 64 / (2 * 4 * 4) = 2
    ({"layout.sp_attention": 4, "layout.dp": None}, (2, 4, 4, 2), "SP attention 4 as CP 4"),
])
def test_dp_is_the_gpu_count_over_tp_cp_pp_when_the_source_gives_no_number(changes, degrees, note):
    case = _case(changes)
    lay = case.scenario.layout
    assert (lay.tp, lay.cp, lay.pp, lay.dp) == degrees
    assert lay.tp * lay.cp * lay.pp * lay.dp == case.gpus == 64
    assert (note in case.assumptions) if note else not any(n.startswith(("DP", "SP")) for n in case.assumptions)


def test_the_batch_is_taken_in_sequences_even_over_a_presets_tokens():
    sc = _scenario({"model.seq_len": 4096, "layout.global_batch_seqs": 128})
    assert (sc.model.seq_len, sc.batch.global_batch_seqs, sc.batch.global_batch_tokens) == (4096, 128, None)
    assert sc.global_batch_seqs * sc.model.seq_len == 524288
    # the llama3-405b preset states 16,777,216 tokens; the run's 1,024 sequences of 8,192 replace them
    case = _case({"model": {"name": "Llama 3 405B", "layers": 126, "hidden": 16384, "heads": 128, "vocab": 128256,
                            "seq_len": 8192}, "num_gpus": 1024, "layout.tp": 8, "layout.pp": 16,
                  "layout.global_batch_seqs": 1024})
    sc = case.scenario
    assert "unstated fields from preset llama3-405b" in case.assumptions
    assert (sc.batch.global_batch_seqs, sc.batch.global_batch_tokens) == (1024, None)
    assert sc.model.num_kv_heads == 8 and sc.model.ffn_size == 53248  # what the run leaves out, from the preset
    assert sc.cluster.achieved_flops is None and sc.cluster.rate_scope == "kernel"  # never the preset's rate


@pytest.mark.parametrize("changes, field, expected", [
    ({}, "model.ffn_size", 4096),  # 4h
    ({"model.ffn_hidden": 2816, "model.activation": "SwiGLU"}, "model.ffn_size", 2816),
    ({"model.activation": "SwiGLU"}, "model.activation", "swiglu"),
    ({"model.activation": "GeGLU (tanh)"}, "model.activation", "swiglu"),
    ({"model.activation": "GELU"}, "model.activation", "gelu"),
    ({"model.kv_heads": 4}, "model.num_kv_heads", 4),
    ({"model.head_dim": 128}, "model.head_dim", 128),
    ({"model.position_embedding": "ALiBi"}, "model.positions", "alibi"),
    ({"model.position_embedding": "learned absolute"}, "model.positions", "learned"),
    ({"model.tied_embeddings": "yes"}, "model.tied_embeddings", True),
    ({"model.mtp_depth": 1, "layout.pp": 1, "layout.dp": 32}, "model.mtp_layers", 1),  # one more layer slot
])
def test_model_rules(changes, field, expected):
    assert attrgetter(field)(_scenario(changes)) == expected


@pytest.mark.parametrize("changes, field, expected", [
    ({}, "cluster.gpu.peak_bf16_flops", 989e12),
    ({"hardware.gpu": "NVIDIA A100 40GB"}, "cluster.gpu.hbm_bytes", 40e9),
    ({"hardware.gpu": "NVIDIA Ampere GPUs"}, "cluster.gpu.hbm_bytes", 80e9),  # A100 SXM 80GB
    ({"hardware.hbm_gb": 96}, "cluster.gpu.hbm_bytes", 96e9),  # more than 5 % off the datasheet: the run's
    ({"hardware.hbm_gb": 81}, "cluster.gpu.hbm_bytes", 80e9),  # rounding: the datasheet's
    ({}, "cluster.nvlink_Bps", 450e9),  # H100: 900 GB/s total, per direction
    ({"hardware.nvlink_bw_gbps": 600}, "cluster.nvlink_Bps", 300e9),
    ({}, "cluster.nic_Bps", 50e9),  # 400 Gb/s when not stated
    ({"hardware.nic_gbps_per_gpu": 200}, "cluster.nic_Bps", 25e9),
    ({"hardware.gpus_per_node": 4, "layout.tp": 1, "layout.dp": 16}, "cluster.nics_per_node", 4),
    ({}, "cluster.nvlink_efficiency", NVLINK_BUSBW_SHARE),
    ({}, "cluster.nic_efficiency", NIC_BUSBW_SHARE),
])
def test_cluster_rules(changes, field, expected):
    assert attrgetter(field)(_scenario(changes)) == expected


@pytest.mark.parametrize("changes, field, expected", [
    ({}, "layout.schedule", "1f1b"),
    ({"layout.schedule": "interleaved 1F1B"}, "layout.virtual_stages", 2),  # 8 layers / PP4: 2 per stage
    ({"model.layers": 12, "layout.schedule": "interleaved"}, "layout.virtual_stages", 3),  # 3 per stage: v = 3
    ({"layout.virtual_pipeline_chunks_per_rank": 2}, "layout.schedule", "interleaved-1f1b"),
    ({"layout.schedule": "DualPipe"}, "layout.schedule", "dualpipe"),
    ({"model.layers": 7, "layout.embedding_in_pipeline_split": "true"}, "layout.embedding_in_pipeline_split", True),
    ({}, "layout.micro_batch", 1),
    ({"layout.micro_batch": 2}, "layout.micro_batch", 2),
    ({}, "layout.sequence_parallel", True),  # on with TP
    ({"layout.tp": 1, "layout.dp": 16}, "layout.sequence_parallel", False),
    ({"layout.recompute": "selective (per-op)"}, "layout.recompute", "selective-op"),
    ({"layout.recompute": "full activation checkpointing"}, "layout.recompute", "full"),
    ({"layout.zero_stage": "ZeRO stage 3"}, "layout.dp_kind", "zero3"),
    ({"layout.zero_stage": "FSDP, not resharded after forward"}, "layout.reshard_after_forward", False),
    ({"layout.order": "TP, CP, PP, DP"}, "layout.order", ("tp", "cp", "pp", "dp")),
    ({"layout.framework": "Megatron-LM"}, "layout.order", ("tp", "cp", "dp", "pp")),
    ({"layout.framework": "Megatron-DeepSpeed"}, "layout.order", ("tp", "cp", "pp", "dp")),  # the model's default
    ({"layout.cp": 2, "layout.dp": 4, "layout.framework": "Megatron-Core"}, "layout.cp_kind", "ring"),
    ({"layout.attention_kernel": "FlashAttention-2"}, "layout.attention_kernel", "flash-attention-2"),
])
def test_layout_rules(changes, field, expected):
    assert attrgetter(field)(_scenario(changes)) == expected


@pytest.mark.parametrize("changes, grads_bytes, gemm", [
    ({}, 2.0, "bf16"),
    ({"layout.framework": "Megatron-LM"}, 4.0, "bf16"),  # Megatron-LM reduces BF16 training's gradients in FP32
    ({"layout.framework": "NeMo", "layout.grad_reduce": "bf16 (grad_sync_dtype)"}, 2.0, "bf16"),
    ({"layout.grad_reduce": "reduce_dtype float32"}, 4.0, "bf16"),
    ({"layout.framework": "Megatron-LM", "layout.grad_reduce": "grad_reduce_in_fp32=False"}, 2.0, "bf16"),
    ({"layout.precision": "FP8 (Transformer Engine)"}, 2.0, "fp8"),
])
def test_precision_names_map_to_bytes(changes, grads_bytes, gemm):
    sc = _scenario(changes)
    assert (sc.precision.grads, sc.precision.gemm) == (grads_bytes, gemm)
    assert sc.peak_gemm_flops == (1979e12 if gemm == "fp8" else 989e12)


def test_moe_fields_and_the_expert_degree():
    moe = {"num_experts": 64, "top_k": 8, "expert_ffn_hidden": 512, "shared_experts": 2, "node_limit": 4}
    case = _case({"model.moe": moe, "model.dense_layers": 1, "layout.ep": 8})
    m, lay = case.scenario.model.moe, case.scenario.layout
    assert (m.num_experts, m.top_k, m.expert_ffn_size, m.shared_experts, m.node_limit) == (64, 8, 512, 2, 4)
    assert m.first_dense_layers == 1
    assert (lay.ep, lay.expert_tp) == (8, 1)
    unstated = _case({"model.moe": moe})  # no EP: the experts are split as the dense layers are, by TP
    assert unstated.scenario.layout.ep == 1 and unstated.scenario.layout.expert_tp is None
    assert "EP not stated: experts sharded by TP" in unstated.assumptions


@pytest.mark.parametrize("changes, field, expected", [
    ({"layout.framework": "MegaScale"}, "overlap.tp", 1.0),
    ({"layout.framework": "MegaScale"}, "model.parallel_block", True),
    ({"layout.framework": "MegaScale-MoE"}, "layout.ep_kind", "all-gather"),
    ({"layout.framework": "Megatron-LM"}, "overlap.dp", 0.0),
    ({"layout.framework": "Megatron-LM", "notes": "with MegaScale's DP/PP overlap"}, "overlap.dp", "auto"),
    ({"layout.overlap": ["tp", "dp"]}, "overlap.tp", 1.0),
    ({"layout.overlap": ["tp", "dp"]}, "overlap.dp", "auto"),
    ({"layout.overlap": ["tp", "dp"]}, "overlap.pp", 0.0),
    ({"layout.cp": 2, "layout.dp": 4, "layout.framework": "Megatron-Core"}, "overlap.cp", "auto"),  # the ring
    ({"layout.dispatcher": "DeepEP"}, "layout.ep_kind", "deepep"),
    ({"layout.comm": "24 of 132 SMs for NCCL"}, "overlap.comm_sm_share", 24 / 132),
    ({"layout.comm": "0 of 132 SMs"}, "overlap.comm_sm_share", "auto"),  # not a share
])
def test_what_the_framework_overlaps(changes, field, expected):
    assert attrgetter(field)(_scenario(changes)) == expected


def test_the_measured_step_comes_from_the_sources_own_flop_count():
    # 64 sequences of 2,048 on 64 GPUs: 2,048 tokens per GPU per step
    causal = model_counts(_scenario({}).model, "causal").flops_per_token
    case = _case({"measured": {"tflops_per_gpu": 400}})
    assert case.measured_step_s == causal * 2048 / 400e12
    assert case.measured_from == "tflops_per_gpu with the causal count"
    assert _case({"measured": {"mfu_pct": 50}}).measured_step_s == causal * 2048 / (0.5 * 989e12)
    titan = _case({"source": {"document": "torchtitan"}, "measured": {"mfu_pct": 40, "mfu_pct_noncausal": 45}})
    assert titan.scenario.flops.convention == "noncausal" and titan.measured_mfu == 0.45
    assert titan.measured_from == "mfu_pct with the noncausal count"
    none = _case({"measured": {"tokens_per_s": 1e6}})
    assert none.measured_step_s is None and none.reason.startswith("no step time, throughput or MFU")


@pytest.mark.parametrize("changes, reason", [
    ({"layout.tp": None, "model.vocab": None}, "not stated in the source: model.vocab, layout.tp"),
    ({"hardware.gpu": "Google TPU v5p"}, "hardware.gpu: 'Google TPU v5p' is not a GPU the tool knows"),
    ({"layout.dp": 4}, "layout: tp*cp*pp*dp = 2*1*4*4 = 32 but cluster.gpus = 64; set layout.dp=8 or set "
                       "cluster.gpus=32"),
])
def test_a_run_that_cannot_be_predicted_says_why(changes, reason):
    case = _case({**changes, "measured.mfu_pct": 40})
    assert (case.scenario, case.reason, case.measured_step_s) == (None, reason, None)
    assert case.measured_mfu == (0.4 if reason.startswith("layout") else None)  # read once the run is converted


def test_every_field_a_rule_reads_is_one_the_runs_files_use():
    files = [shipped_runs_text()] + [open(p, encoding="utf-8").read() for p in glob.glob("examples/*.yaml")]
    used = {f"{key}.{name}" if isinstance(body, dict) else key
            for text in files for run in yaml.safe_load(text)["runs"] for key, body in run.items()
            for name in (body if isinstance(body, dict) else [None])}
    # a field no shipped run needs yet is still one the schema documents (conventions.layout_fields)
    documented = {f"layout.{w}" for w in re.findall(r"[a-z_]+", yaml.safe_load(files[0])["conventions"]["layout_fields"])}
    reads = {f for fields, _ in RULES for f in fields}
    assert reads - used - documented == set()
    assert {"layout.tp", "layout.dp", "model.moe", "measured.step_time_s"} <= used
