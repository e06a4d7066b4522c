"""The conversion rules (validation/convert.py), each on a minimal run with the value it must set."""

import copy
import glob
import re
from operator import attrgetter

import pytest
import yaml

from stepbudget.plan.flops import model_counts
from stepbudget.validation.convert import NIC_BUSBW_SHARE, NVLINK_BUSBW_SHARE, RULES, to_case
from stepbudget.validation.runs import check_run, read_runs, shipped_runs_text

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
    assert (note in case.assumptions) if note else not any(n.startswith(("DP not", "SP")) for n in case.assumptions)


def test_the_batch_is_taken_in_sequences_and_a_named_model_brings_no_presets_job():
    sc = _scenario({"model.seq_len": 4096, "layout.global_batch_seqs": 128})
    assert (sc.model.seq_len, sc.batch.global_batch_seqs, sc.batch.global_batch_tokens) == (4096, 128, None)
    assert sc.global_batch_seqs * sc.model.seq_len == 524288
    # Llama 3 405B has a preset (16,777,216 tokens, Meta's pods, FSDP, [tp, cp, pp, dp]): none of it reaches a run
    case = _case({"model": {"name": "Llama 3 405B", "layers": 126, "hidden": 16384, "heads": 128, "vocab": 128256,
                            "seq_len": 8192}, "num_gpus": 1024, "layout.tp": 8, "layout.pp": 16,
                  "layout.global_batch_seqs": 1024, "layout.embedding_in_pipeline_split": True,
                  "layout.loss_in_pipeline_split": True})
    sc = case.scenario
    assert not any("preset" in a for a in case.assumptions)
    assert (sc.batch.global_batch_seqs, sc.batch.global_batch_tokens) == (1024, None)
    assert sc.model.num_kv_heads == 8 and sc.model.ffn_size == 53248  # what the run leaves out, from the catalog row
    assert sc.cluster.tiers == () and sc.layout.dp_kind == "zero1"  # not the preset's pods, nor its FSDP
    assert [a.value for a in sc.layout.order] == ["tp", "cp", "pp", "dp"]  # the scenario's default, stated nowhere
    assert sc.cluster.achieved_flops is None and sc.cluster.rate_scope == "kernel"  # never a measured rate


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
    ({"layout.framework": "Megatron-LM"}, "layout.order", ("tp", "cp", "ep", "dp", "pp")),
    # DeepSpeed's recipe: PipeModelDataParallelTopology(axes=['pipe', 'data', 'model']), pipe outermost
    ({"layout.framework": "Megatron-DeepSpeed"}, "layout.order", ("tp", "cp", "dp", "pp")),
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
    ({"layout.overlap": ["tp", "dp"]}, "overlap.pp", "auto"),  # not listed: the source is silent, the default holds
    ({"layout.overlap": ["tp"], "layout.framework": "Megatron-LM"}, "overlap.dp", 0.0),  # Megatron-LM's own default
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
    assert "FLOP convention of measured.tflops_per_gpu not stated: the causal count" in case.assumptions
    assert _case({"measured": {"mfu_pct": 50}}).measured_step_s == causal * 2048 / (0.5 * 989e12)
    titan = _case({"source": {"document": "torchtitan"}, "measured": {"mfu_pct": 40, "mfu_pct_noncausal": 45}})
    assert titan.scenario.flops.convention == "noncausal" and titan.measured_mfu == 0.45
    assert titan.measured_from == "mfu_pct with the noncausal count"
    assert not any("FLOP convention" in a for a in titan.assumptions)  # the source's convention is known
    none = _case({"measured": {"tokens_per_day_b": 272.8}})
    assert none.measured_step_s is None and none.reason.startswith("no step time, throughput, TFLOP/s or MFU")


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


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's reader where installed: the whole runs files in a tenth of a second."""


def test_every_field_a_rule_reads_is_one_the_runs_files_use():
    files = [shipped_runs_text()] + [open(p, encoding="utf-8").read() for p in glob.glob("examples/*.yaml")]
    used = {f"{key}.{name}" if isinstance(body, dict) else key
            for text in files for run in yaml.load(text, Loader=_LOADER)["runs"] for key, body in run.items()
            for name in (body if isinstance(body, dict) else [None])}
    # a field no shipped run needs yet is still one the schema documents (conventions.*_fields)
    conventions = yaml.load(files[0], Loader=_LOADER)["conventions"]
    documented = {f"{section}.{w}" for section in ("model", "layout", "measured")
                  for w in re.findall(r"[A-Za-z0-9_]+", conventions[f"{section}_fields"])}
    reads = {f for fields, _ in RULES for f in fields}
    assert reads - used - documented == set()
    assert {"layout.tp", "layout.dp", "model.moe", "measured.step_time_s"} <= used


# -- what sources print: throughputs, FLOP counts with recompute, local batches, JAX degrees -----------------------

TOKENS = 64 * 2048  # TINY's global batch: 64 sequences of 2,048 tokens on 64 GPUs


@pytest.mark.parametrize("measured, step, figure", [
    ({"tokens_per_s_per_gpu": 1000}, TOKENS / (1000 * 64), "tokens_per_s_per_gpu"),
    ({"tokens_per_s": 64000}, TOKENS / 64000, "tokens_per_s"),
    ({"samples_per_s": 16}, 64 / 16, "samples_per_s"),
    ({"step_time_s": 2.0, "tokens_per_s": 64000}, 2.0, "step_time_s"),  # the step as printed wins
    ({"tokens_per_s_per_gpu": 1000, "mfu_pct": 40}, TOKENS / (1000 * 64), "tokens_per_s_per_gpu"),
])
def test_a_printed_throughput_becomes_the_step_with_the_runs_own_batch(measured, step, figure):
    case = _case({"measured": measured})
    assert case.measured_step_s == pytest.approx(step, rel=1e-12)
    assert case.measured_from == figure and case.measured_figures[0] == (case.measured_step_s, figure)


def test_other_printed_figures_are_checked_against_the_step():
    agree = _case({"measured": {"step_time_s": 2.048, "tokens_per_s": 64000}})  # 131,072 / 64,000 = 2.048 s
    assert not any(a.startswith("measured:") for a in agree.assumptions)
    off = _case({"measured": {"step_time_s": 2.0, "tokens_per_s": 50000}})
    assert "measured: tokens_per_s gives a 2.621 s step, +31.1% from step_time_s" in off.assumptions


def test_a_tflops_figure_that_counts_the_recompute_pass_reads_narayanans_eq3():
    # Narayanan et al. 2021 Table 1, 1.7B on 32 GPUs: 137 TFLOP/s under Eq. 3, 96 B s l h^2 (1 + s/6h + V/16lh),
    # which counts full recompute's extra forward; the example file states the figure as the paper prints it
    run = next(r for r in read_runs("examples/megatron_a100_runs.yaml")[0] if r["id"] == "narayanan21_table1_1.7B_32gpu")
    assert run["measured"] == {"tflops_per_gpu": 137, "flops_convention": "noncausal", "flops_with_recompute": True}
    B, s, L, h, V = 512, 2048, 24, 2304, 51200
    eq3 = 96 * B * s * L * h**2 * (1 + s / (6 * h) + V / (16 * L * h))
    case = to_case(copy.deepcopy(run))
    assert case.measured_step_s == pytest.approx(eq3 / (32 * 137e12), rel=1e-9)
    assert case.measured_from == "tflops_per_gpu with the noncausal count and the full recompute pass"
    counts = model_counts(case.scenario.model, "noncausal")  # plan/flops.py: the pass is the layers' forward
    assert counts.recompute_flops_per_token["full"] == counts.layer_forward_flops_per_token


def test_an_mfu_is_read_against_the_peak_the_run_states():
    causal = model_counts(_scenario({}).model, "causal").flops_per_token
    case = _case({"measured": {"mfu_pct": 40, "peak_tflops": 1979, "flops_convention": "causal"}})
    assert case.measured_step_s == pytest.approx(causal * 2048 / (0.4 * 1979e12))
    assert case.measured_from == "mfu_pct with the causal count against 1979 TFLOP/s"
    assert case.measured_mfu == pytest.approx(0.4 * 1979 / 989)  # shown beside the tool's MFU, on the BF16 peak
    six_n = _case({"measured": {"tflops_per_gpu": 400, "flops_convention": "6N"}})
    assert six_n.measured_step_s == pytest.approx(model_counts(six_n.scenario.model, "6N").flops_per_token * 2048 / 400e12)


@pytest.mark.parametrize("zero", [0, "0", "none", "ZeRO-0", "DDP", "no sharding (NO_SHARD)"])
def test_zero_stage_0_is_no_sharding(zero):
    case = _case({"layout.zero_stage": zero})
    assert case.scenario.layout.dp_kind == "ddp"
    assert not any(a.startswith("DP sharding") for a in case.assumptions)  # read, not replaced by a default


@pytest.mark.parametrize("framework, kind, said", [
    ("Megatron-LM", "ddp", "layout.dp_kind not stated: ddp (Megatron-LM core_v0.13.0, megatron/training/arguments.py:"),
    ("NeMo 2", "zero1", "layout.dp_kind not stated: zero1 (NeMo 2 "),  # its recipes' distributed optimizer
    ("torchtitan (FSDP2)", "fsdp", "layout.dp_kind not stated: fsdp (torchtitan v0.2.2, "),
    ("Megatron-DeepSpeed", "ddp", "layout.dp_kind not stated: ddp (DeepSpeed v0.6.5, "),
    ("MaxText", "fsdp", "layout.dp_kind not stated: fsdp (MaxText "),
    ("llm-foundry (PyTorch FSDP)", "fsdp", "DP sharding not stated: fsdp (PyTorch FSDP's default"),  # no recipe
    (None, "zero1", "DP sharding not stated: zero1 (")])
def test_an_unstated_dp_sharding_is_the_frameworks_default_and_said(framework, kind, said):
    case = _case({"layout.framework": framework})
    assert case.scenario.layout.dp_kind == kind
    assert any(a.startswith(said) for a in case.assumptions), case.assumptions


@pytest.mark.parametrize("changes, dp, kind, replicas", [
    ({"layout.fsdp": 4, "layout.dp": 2}, 8, "fsdp", 2),  # fsdp beside dp: dp is the pure-DP part
    ({"layout.fsdp": 8, "layout.dp": None}, 8, "fsdp", 1),  # the rest of the GPUs
    ({"layout.ici_fsdp_parallelism": 4, "layout.dcn_fsdp_parallelism": 2, "layout.dp": None}, 8, "fsdp", 1),
    ({"layout.ici_fsdp_parallelism": 2, "layout.dcn_data_parallelism": 4, "layout.dp": None}, 8, "fsdp", 4),
    ({"layout.ici_data_parallelism": 8, "layout.dp": None}, 8, "ddp", 1),  # no FSDP axis: plain DP
])
def test_jax_fsdp_and_data_degrees_multiply_into_dp(changes, dp, kind, replicas):
    lay = _scenario(changes).layout
    assert (lay.dp, lay.dp_kind, lay.dp_replicas) == (dp, kind, replicas)


@pytest.mark.parametrize("layout, seqs, note", [
    ({"global_batch_tokens": 262144}, 128, "global batch 128 sequences from global_batch_tokens"),
    ({"batch_size_per_dp": 4}, 32, "global batch 32 sequences: batch_size_per_dp x DP 8"),
    ({"micro_batch": 2, "grad_accum": 4}, 64, "global batch 64 sequences: micro_batch x grad_accum x DP 8"),
    ({"batch_size_per_gpu": 2}, 16, "global batch 16 sequences: batch_size_per_gpu x grad_accum 1 x DP 8"),
    ({"batch_size_per_gpu": 2, "grad_accum": 3}, 48, "global batch 48 sequences: batch_size_per_gpu x grad_accum 3 x DP 8"),
    ({"global_batch_seqs": 16, "global_batch_tokens": 262144}, 16, None),  # printed sequences win
])
def test_the_global_batch_comes_from_what_the_source_prints(layout, seqs, note):
    case = _case({"layout.global_batch_seqs": None, **{f"layout.{k}": v for k, v in layout.items()}})
    assert case.scenario.global_batch_seqs == seqs
    assert (note in case.assumptions) if note else not any(a.startswith("global batch") for a in case.assumptions)


def test_a_batch_that_cannot_be_read_is_named():
    assert _case({"layout.global_batch_seqs": None}).reason == "not stated in the source: layout.global_batch_seqs"
    odd = _case({"layout.global_batch_seqs": None, "layout.global_batch_tokens": 1000})
    assert odd.reason == "layout.global_batch_tokens: 1,000 tokens is not a whole number of 2,048-token sequences"
    assert _case({"layout.global_batch_seqs": None, "layout.micro_batch": 2}).scenario is None  # no accumulation


@pytest.mark.parametrize("flags", [
    {"layout.embedding_in_pipeline_split": True, "layout.loss_in_pipeline_split": True},
    {"layout.account_for_embedding_in_pipeline_split": "true", "layout.account_for_loss_in_pipeline_split": "yes"},
])
def test_megatrons_embedding_and_loss_slots_let_126_layers_split_over_pp16_v4(flags):
    # Llama 3 405B's 126 layers + embedding + loss = 128 slots = 16 stages x 4 chunks x 2 layers
    base = {"model.layers": 126, "num_gpus": 128, "layout.tp": 8, "layout.pp": 16, "layout.dp": 1,
            "layout.global_batch_seqs": 64, "layout.virtual_pipeline_chunks_per_rank": 4}
    case = _case({**base, **flags})
    lay = case.scenario.layout
    assert (lay.embedding_in_pipeline_split, lay.loss_in_pipeline_split, lay.virtual_stages) == (True, True, 4)
    assert case.scenario.pipeline_slots == 128
    unstated = _case(base)  # nothing said: the slots that make the split whole are assumed, and said
    assert unstated.scenario.layout.embedding_in_pipeline_split
    assert "pipeline split not stated: 126 layers split over 64 stages once the embedding and the loss take a slot " \
           "each" in unstated.assumptions
    guessed = _case({**base, **flags, "layout.virtual_pipeline_chunks_per_rank": None, "layout.schedule": "interleaved"})
    assert guessed.scenario.layout.virtual_stages == 2  # 8 slots per rank: the shallowest interleaving is 2


@pytest.mark.parametrize("order, expected", [
    ("tp-cp-ep-dp-pp", ["tp", "cp", "ep", "dp", "pp"]),  # Megatron-Core's, EP carved from DP
    ("[TP, CP, PP, DP] (Llama 3 3.3.2)", ["tp", "cp", "pp", "dp"]),
    ("tp-cp-ep-dp-pp (the 64-way EP spans 8 nodes)", ["tp", "cp", "ep", "dp", "pp"]),  # prose after the order
])
def test_a_rank_order_may_name_ep(order, expected):
    case = _case({"layout.order": order})
    assert [a.value for a in case.scenario.layout.order] == expected
    assert not any("rank order not read" in a for a in case.assumptions)


def test_stated_precisions_set_their_bytes():
    sc = _scenario({"layout.dispatch_precision": "FP8 with 1x128 tile scales", "layout.combine_precision": "BF16",
                    "layout.saved_activations_precision": "fp8", "layout.optimizer_moments": "BF16 instead of FP32"})
    p = sc.precision
    assert (p.dispatch, p.combine, p.saved_activations, p.optimizer_bytes) == (1 + 4 / 128, 2.0, 1.0, 8.0)


def test_a_megatron_run_that_does_not_fit_takes_its_frameworks_options_in_order():
    # Llama 3 70B on 64 H100s as TP8 x DP8 at 8K tokens: DDP's 16 bytes per parameter do not fit in 80 GB
    run = {"id": "big", "model": {"name": "Llama 3 70B", "seq_len": 8192}, "hardware": {"gpu": "H100"},
           "num_gpus": 64, "layout": {"tp": 8, "pp": 2, "global_batch_seqs": 64, "framework": "Megatron-LM"},
           "measured": {"step_time_s": 10}}
    check_run(run, 0)
    case = to_case(run)
    assert case.scenario.layout.dp_kind == "zero1" and case.scenario.layout.recompute == "none"
    assert ("assumed: distributed optimizer (Megatron-LM arguments.py --use-distributed-optimizer; Megatron-LM runs "
            "that do not fit without it use it)") in case.assumptions
    tighter = copy.deepcopy(run)
    tighter["layout"]["pp"] = 1
    lay = to_case(tighter).scenario.layout
    assert (lay.dp_kind, lay.recompute) == ("zero1", "full")  # selective alone is not enough: full replaces it
    assert sum(a.startswith("assumed:") for a in to_case(tighter).assumptions) == 2
    stated = copy.deepcopy(tighter)
    stated["layout"].update(zero_stage=0, recompute="none")  # what the run states is never changed
    lay = to_case(stated).scenario.layout
    assert (lay.dp_kind, lay.recompute) == ("ddp", "none")


@pytest.mark.parametrize("layout, micro", [
    ({"pp": 1, "dp": 32, "batch_size_per_gpu": 4}, 4),  # no pipeline, no accumulation: the local batch is one pass
    ({"pp": 1, "dp": 32, "batch_size_per_gpu": 4, "grad_accum": 2}, 2),
    ({"pp": 1, "dp": 32, "batch_size_per_dp": 2}, 2),
    ({"pp": 4, "batch_size_per_dp": 4}, 1),  # a pipeline splits it into micro-batches the source does not print
    ({"pp": 1, "dp": 32, "batch_size_per_gpu": 4, "micro_batch": 1}, 1),  # a printed micro-batch wins
])
def test_an_unstated_micro_batch_is_the_local_batch_without_a_pipeline(layout, micro):
    lay = {k: v for k, v in TINY["layout"].items() if k != "global_batch_seqs"} | layout
    assert _scenario({"layout": lay}).layout.micro_batch == micro


def test_an_mfu_may_be_against_the_gpus_fp8_peak_by_name():
    causal = model_counts(_scenario({}).model, "causal").flops_per_token
    case = _case({"measured": {"mfu_pct": 25, "peak_tflops": "fp8", "flops_convention": "causal"}})
    assert case.measured_step_s == pytest.approx(causal * 2048 / (0.25 * 1979e12))
    assert case.measured_mfu == pytest.approx(0.25 * 1979 / 989)


@pytest.mark.parametrize("name, layers", [
    ("Llama 3.1 405B (proxy: 32 layers)", 32),  # the spelling: that model with 32 layers
    ("Llama 3.1 405B (recipe proxy, 8 of 126 layers)", 8),  # the DGX Cloud recipes' own wording
    ("Llama 3.1 405B", 126),  # no note: the catalog row's depth
])
def test_a_proxy_named_in_the_model_name_has_its_layers(name, layers):
    case = _case({"model": {"name": name, "seq_len": 8192}})
    assert case.scenario.model.num_layers == layers and case.scenario.model.hidden_size == 16384  # the row's width
    assert any(a.startswith("layers from the model's name") for a in case.assumptions) == (layers != 126)
