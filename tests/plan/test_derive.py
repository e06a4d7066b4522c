"""Scenario -> Plan: degrees, batch, parameters and FLOPs per GPU on the shipped presets, and the
same formula over sweep arrays."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import stepbudget as sb
from stepbudget.enums import DP_KIND_CODES, DataParallel
from stepbudget.plan.derive import MCORE_BUCKET_PARAMS, MCORE_BUCKET_PARAMS_PER_RANK, OVERLAP_SM_SHARE

# (preset, dp, micro-batches per step): dp = GPUs / (tp cp pp), m = global batch / (dp x micro-batch)
WORKED = [
    ("llama3-405b", 16384 // (8 * 1 * 16), 2048 // 128),
    ("hpn-gpt3-175b", 32768 // (8 * 1 * 8), 8192 // 512),
    ("megascale-175b", 12288 // (8 * 1 * 8), 6144 // 192),
    ("megascale-moe-352b", 240 // (8 * 1 * 15), 720 // 2),
    ("deepseek-v3", 2048 // (1 * 1 * 16), 15360 // 128),
    ("llama3-405b-puredp", 16384, 1),
]
PRESETS = [name for name, _, _ in WORKED]


@functools.cache
def _plan(name: str, *sets: str) -> sb.Plan:
    return sb.derive(sb.load(name, list(sets)))


@pytest.mark.parametrize(("name", "dp", "microbatches"), WORKED)
def test_data_parallel_fills_the_cluster_and_sets_the_micro_batches(name, dp, microbatches):
    plan = _plan(name)
    sc, lay = plan.scenario, plan.scenario.layout
    assert int(plan.dp) == dp == sc.cluster.gpus // (lay.tp * lay.cp * lay.pp)
    assert float(plan.microbatches) == microbatches == sc.global_batch_seqs / (dp * lay.micro_batch)
    assert float(plan.layers_per_gpu) == sc.model.num_layers / lay.pp


@pytest.mark.parametrize("name", PRESETS)
def test_tokens_and_model_flops_are_conserved_over_the_gpus(name):
    plan = _plan(name)
    sc = plan.scenario
    gpus, s = sc.cluster.gpus, sc.model.seq_len
    # each DP rank runs m micro-batches of b sequences: together the global batch, once
    assert float(plan.dp * plan.microbatches * plan.micro_batch * s) == plan.tokens_per_step
    assert plan.tokens_per_step == sc.global_batch_seqs * s
    # a balanced split of the step's model FLOPs: no layout creates or loses work
    step_flops = plan.counts.flops_per_token * plan.tokens_per_step
    assert float(plan.model_flops_per_gpu) * gpus == pytest.approx(step_flops, rel=1e-12)
    assert float(plan.hardware_flops_per_gpu) >= float(plan.model_flops_per_gpu)


def test_llama3_405b_parameters_split_over_tensor_and_pipeline_ranks():
    # Llama 3 405B on tp 8 x pp 16: 405.85 B parameters over 128 ranks of a pipeline-and-tensor group
    plan = _plan("llama3-405b")
    c = plan.counts
    assert float(plan.params_dense_per_gpu) == c.params_total / (8 * 16)
    assert float(plan.params_dense_per_gpu) == pytest.approx(405.85e9 / 128, rel=1e-4)  # 3.17 B
    assert float(plan.params_expert_per_gpu) == 0.0
    # against the transformer layers alone, the surplus is the (sharded) embedding and head: about 1 %
    layers_only = (c.params_total - c.params_embedding) / (8 * 16)
    share = float(plan.params_dense_per_gpu) / layers_only - 1
    assert share == pytest.approx(c.params_embedding / (c.params_total - c.params_embedding))
    assert 0.009 < share < 0.011


def test_deepseek_v3_routed_experts_split_over_expert_and_pipeline_ranks():
    # 671 B parameters: the routed experts over ep 64 x pp 16, the rest over tp 1 x pp 16 (tech report 3.1)
    plan = _plan("deepseek-v3")
    c = plan.counts
    assert (int(plan.ep), int(plan.expert_tp), int(plan.pp), int(plan.tp)) == (64, 1, 16, 1)
    assert float(plan.params_expert_per_gpu) == c.params_routed_experts / (64 * 1 * 16)
    assert float(plan.params_dense_per_gpu) == (c.params_total - c.params_routed_experts) / 16
    whole = float(plan.params_dense_per_gpu) * 16 + float(plan.params_expert_per_gpu) * 64 * 16
    assert whole == pytest.approx(c.params_total, rel=1e-12)
    assert c.params_total == pytest.approx(671e9, rel=0.01)
    # the expert DP group is what is left of tp * cp * dp once EP has taken its ranks: 128 / 64
    assert float(plan.expert_dp_group) == 2.0 and int(plan.dp_group) == 128


@pytest.mark.parametrize("name", ["hpn-gpt3-175b", "megascale-175b", "llama3-405b"])
def test_model_flops_per_step_are_six_n_tokens_plus_the_attention_core(name):
    # formulas.md 2.1 and 2.4: 6N counts the input embedding, which does no matmul, and leaves out the
    # attention core; with tied embeddings (GPT-3) the embedding is the output head, so 6N counts it once
    plan = _plan(name, "flops.convention=causal")
    c, m = plan.counts, plan.scenario.model
    per_token = float(plan.model_flops_per_gpu) * plan.scenario.cluster.gpus / plan.tokens_per_step
    input_embedding = c.params_embedding - m.vocab_size * m.hidden_size  # 0 when tied
    assert per_token == pytest.approx(6 * c.params_active + c.attention_core_flops_per_token - 6 * input_embedding,
                                      rel=1e-12)
    # at s = 2048 the causal core is 1.4 % on top of 6N; at 8192 (Llama 3) 4 %, less the embedding's 0.2 %
    assert per_token / (6 * c.params_active) == pytest.approx(1.014 if m.seq_len == 2048 else 1.037, abs=0.005)
    six_n = _plan(name, "flops.convention=6N")
    assert float(six_n.model_flops_per_gpu) == pytest.approx(
        6 * c.params_active * plan.tokens_per_step / plan.scenario.cluster.gpus, rel=1e-12)


@pytest.mark.parametrize(("recompute", "again"), [("none", 0.0), ("selective", None), ("full", 1.0)])
def test_recompute_adds_its_forward_to_the_hardware_flops_only(recompute, again):
    plan = _plan("llama3-405b", "flops.convention=causal", f"layout.recompute={recompute}")
    c = plan.counts
    extra = float(plan.hardware_flops_per_gpu - plan.model_flops_per_gpu)
    layers = c.layer_forward_flops_per_token * plan.tokens_per_step / 16384
    if again is None:  # selective: the attention core's forward, L x 2 s (d_qk + d_v) / 2 per token
        m = plan.scenario.model
        core = m.num_layers * 2 * m.seq_len * 2 * m.num_heads * m.head_width / 2
        assert extra == pytest.approx(core * plan.tokens_per_step / 16384, rel=1e-12)
        assert 0 < extra < 0.1 * layers
    else:  # full: one more forward of every layer (Narayanan 5.1)
        assert extra == pytest.approx(again * layers, rel=1e-12)
    assert float(plan.model_flops_per_gpu) == float(_plan("llama3-405b", "flops.convention=causal").model_flops_per_gpu)


def test_a_stated_rate_is_used_as_given_and_skips_the_operator_model():
    stated = _plan("llama3-405b")  # Llama 3 Table 4: 400 TFLOP/s per GPU over the whole step
    assert (stated.rate_source, stated.flops_rate, stated.operators) == ("stated", 400e12, ())
    assert float(stated.optimizer_s) == 0.0 and stated.comm_sm_share == 0.0  # measured beside its own comms
    fraction = _plan("llama3-405b", "cluster.achieved_flops=null", "cluster.achieved_fraction=0.5")
    assert fraction.flops_rate == 0.5 * fraction.scenario.peak_gemm_flops == 494.5e12  # half the H100's 989
    operators = _plan("hpn-gpt3-175b")
    assert operators.rate_source == "operators" and operators.comm_sm_share == OVERLAP_SM_SHARE
    assert 0 < float(operators.flops_rate) < operators.scenario.peak_gemm_flops


def test_dp_units_are_megatron_buckets_for_ddp_and_one_layer_each_for_fsdp():
    ddp = _plan("hpn-gpt3-175b")  # DDP over 512 ranks: a bucket of max(40 M, 1 M x 512) = 512 M parameters
    bucket = max(MCORE_BUCKET_PARAMS, MCORE_BUCKET_PARAMS_PER_RANK * 512)
    assert float(ddp.dp_units) == math.ceil(float(ddp.params_dense_per_gpu) / bucket) == 6  # 2.73 B / 512 M
    fsdp = _plan("llama3-405b")  # FSDP: one unit per layer, 126 / 16 = 7.875 -> 8 whole layers
    assert int(fsdp.dp_kind) == DP_KIND_CODES[DataParallel.FSDP]
    assert float(fsdp.dp_units) == float(fsdp.layer_units) == 8


def test_parameters_are_freed_after_each_pass_under_zero3_and_by_fsdps_switch():
    kinds = np.array(["ddp", "zero1", "zero3", "zero3", "fsdp", "fsdp"])
    switch = np.array([True, True, False, True, True, False])
    plan = sb.derive(sb.load("llama3-405b"), {"dp_kind": kinds, "reshard_after_forward": switch})
    assert plan.reshard.tolist() == [False, False, True, True, True, False]
    assert plan.dp_kind.tolist() == [0, 1, 3, 3, 4, 4]


def test_expert_tp_follows_tp_only_where_one_rank_holds_every_expert():
    # with expert_tp unset, experts keep TP at ep 1 and drop it once EP spreads them (Megatron's default)
    sc = sb.load("megascale-moe-352b", ["layout.expert_tp=null"])
    plan = sb.derive(sc, {"ep": np.array([1, 8]), "tp": np.array([8, 8])})
    assert plan.expert_tp.tolist() == [8, 1]
    stated = sb.derive(sb.load("megascale-moe-352b"), {"ep": np.array([1, 8]), "tp": np.array([8, 8])})
    assert stated.expert_tp.tolist() == [1, 1]  # the preset's expert_tp: 1 holds in a sweep
    # either way the routed experts are split over 8 ranks of each stage
    assert plan.params_expert_per_gpu[0] == plan.params_expert_per_gpu[1]
    assert plan.params_expert_per_gpu[1] == plan.counts.params_routed_experts / (8 * 15)


@pytest.mark.parametrize("shape", [(), (3,), (2, 3)])
def test_sweep_arrays_give_each_element_its_own_scenarios_plan(shape):
    # the model is one formula over arrays: element i of a sweep is the plan of scenario i, bit for bit
    grid = np.array([(4, 8, 3), (8, 8, 6), (8, 16, 6)])  # (tp, pp, virtual_stages) on 12,288 GPUs
    pick = np.resize(np.arange(3), shape).astype(int)
    tp, pp, v = (grid[pick, k] for k in range(3))
    many = sb.derive(sb.load("megascale-175b"), {"tp": tp, "pp": pp, "dp": 12288 // (tp * pp), "virtual_stages": v})
    assert many.shape == shape
    fields = ("dp", "microbatches", "params_dense_per_gpu", "dp_group", "dp_units", "model_flops_per_gpu",
              "hardware_flops_per_gpu", "flops_rate", "optimizer_s")
    for index in np.ndindex(shape):
        t, p, vs = int(tp[index]), int(pp[index]), int(v[index])
        one = _plan("megascale-175b", f"layout.tp={t}", f"layout.pp={p}", f"layout.dp={12288 // (t * p)}",
                    f"layout.virtual_stages={vs}")
        for name in fields:
            assert np.asarray(getattr(many, name))[index] == getattr(one, name), name
        for geometry in ("q", "tier"):
            for group, value in getattr(one, geometry).items():
                assert getattr(many, geometry)[group][index] == value, (geometry, group)


def test_tensor_ranks_share_a_node_under_the_default_order():
    # order [tp, cp, pp, dp]: a TP group of up to 8 is one node; PP's neighbours share it only when tp * cp < 8
    tp, cp = np.meshgrid([1, 2, 4, 8], [1, 2], indexing="ij")
    plan = sb.derive(sb.load("llama3-405b"), {"tp": tp, "cp": cp, "dp": 16384 // (tp * cp * 16)})
    assert plan.scenario.cluster.gpus_per_node == 8
    assert (plan.q["tp"] == tp).all() and (plan.tier["tp"] == 1).all()
    assert (plan.q["cp"] == np.minimum(cp, 8 // tp)).all()
    assert (plan.q["pp"] == np.where(tp * cp < 8, 2, 1)).all()


@given(tp=st.sampled_from([1, 2, 4, 8]), cp=st.sampled_from([1, 2, 4]), pp=st.sampled_from([1, 2, 4, 8, 16]),
       micro_batch=st.sampled_from([1, 2, 4]))
@settings(max_examples=40, deadline=None)
def test_any_layout_moves_work_between_gpus_without_creating_it(tp, cp, pp, micro_batch):
    sc = sb.load("llama3-405b")
    dp = 16384 // (tp * cp * pp)
    plan = sb.derive(sc, {"tp": tp, "cp": cp, "pp": pp, "dp": dp, "micro_batch": micro_batch})
    c = plan.counts
    assert float(plan.dp * plan.microbatches * micro_batch) == sc.global_batch_seqs
    assert float(plan.params_dense_per_gpu) * tp * pp == pytest.approx(c.params_total, rel=1e-12)
    assert float(plan.model_flops_per_gpu) * tp * cp * pp * dp == pytest.approx(
        c.flops_per_token * plan.tokens_per_step, rel=1e-12)
    assert int(plan.dp_group) == dp * cp  # non-expert gradients reduce over the DP and CP ranks
    assert 1 <= int(plan.q["tp"]) <= min(tp, 8) and float(plan.tier["dp"]) >= 1.0
