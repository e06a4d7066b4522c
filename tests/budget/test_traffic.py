"""Exchanges per parallel dimension (budget/traffic.py) against formulas.md 3 and its worked numbers."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, reject, settings
from hypothesis import strategies as st

import stepbudget as sb
from stepbudget.budget.traffic import (DIMENSIONS, cp_exchanges, dp_exchanges, ep_exchanges, exchanges, pp_exchanges,
                                       tp_exchanges)
from stepbudget.enums import Axis, Collective


def plan_of(name, *sets):
    return sb.derive(sb.load(name, list(sets)))


def total(xs, field="bytes_per_gpu", collective=None, what=None):
    """Sum of one field over the exchanges of one collective (and a ``what`` containing ``what``)."""
    return sum(float(getattr(x, field)) for x in xs
               if (collective is None or x.collective == collective) and (what is None or what in x.what))


def test_dp_ring_all_reduce_is_2_n_minus_1_over_n_of_the_gradient_formulas_9_1():
    # the chapter's pure-DP Llama 3 405B: 810 GB of BF16 gradients on a flat ring of 16,384 GPUs,
    # 1.62 TB sent per GPU, 32.4 s at 50 GB/s (formulas.md 9.1)
    plan = plan_of("llama3-405b-puredp")
    xs = dp_exchanges(plan)
    n, psi = 16384, float(plan.params_dense_per_gpu)
    assert total(xs) == pytest.approx(2 * (n - 1) / n * psi * 2, rel=1e-12)  # ring all-reduce: 2(n-1)/n
    assert total(xs, collective=Collective.ALL_REDUCE) == total(xs)  # DDP: nothing but the all-reduce
    assert total(xs) == pytest.approx(1.62e12, rel=5e-3)
    assert total(xs, "nic_bytes") == total(xs)  # flat ring: every neighbour on another node
    assert total(xs, "time_s") == pytest.approx(32.4, rel=5e-3)


@pytest.mark.parametrize("dp_kind, factor", [
    ("ddp", lambda n, wg, wp: 2 * (n - 1) / n * wg),  # ZeRO 7: 2 Psi
    ("zero1", lambda n, wg, wp: (n - 1) / n * (wg + wp)),  # reduce-scatter grads + all-gather params
    ("zero3", lambda n, wg, wp: (n - 1) / n * (wg + 2 * wp)),  # params gathered forward and backward: 3 Psi
])
def test_dp_kinds_move_the_zero_volumes_formulas_3_4(dp_kind, factor):
    plan = plan_of("megascale-175b", f"layout.dp_kind={dp_kind}")
    w, n, psi, m = plan.scenario.precision, 192, float(plan.params_dense_per_gpu), float(plan.microbatches)
    # ZeRO-3 shards the gradients and frees the parameters: every micro-batch repeats the round
    rounds = m if dp_kind == "zero3" else 1.0
    assert total(dp_exchanges(plan)) == pytest.approx(rounds * factor(n, w.grads, w.params) * psi, rel=1e-12)


def test_llama3_fsdp_reduce_scatters_fp32_grads_and_gathers_bf16_params_formulas_9_2():
    # TP 8 x PP 16, DP 128, FSDP without reshard: 127/128 * (4 + 2) * 3.164e9 = 18.84 GB per step
    plan = plan_of("llama3-405b")
    xs = dp_exchanges(plan)
    psi = float(plan.params_dense_per_gpu)
    assert total(xs, collective=Collective.REDUCE_SCATTER) == pytest.approx(127 / 128 * 4 * psi, rel=1e-12)
    assert total(xs, collective=Collective.ALL_GATHER) == pytest.approx(127 / 128 * 2 * psi, rel=1e-12)
    assert total(xs) == pytest.approx(18.84e9, rel=5e-3)


def test_tp_all_reduces_move_8_t_minus_1_over_t_bshw_per_layer_formulas_9_3():
    # HPN GPT-3 175B, t = 8, 2,048-token micro-batch, BF16, no SP: 352.3 MB per layer per micro-batch
    plan = plan_of("hpn-gpt3-175b")
    xs = tp_exchanges(plan)
    b, s, h, t, w = 1, 2048, 12288, 8, 2
    per_layer_mb = total(xs) / (float(plan.layers_per_gpu) * float(plan.microbatches))
    assert per_layer_mb == pytest.approx(8 * (t - 1) / t * b * s * h * w, rel=1e-12)
    assert per_layer_mb == pytest.approx(352.3e6, rel=1e-3)
    # sequence parallelism: a reduce-scatter and an all-gather for each all-reduce, the same bytes
    sp = tp_exchanges(plan_of("hpn-gpt3-175b", "layout.sequence_parallel=true"))
    assert total(sp, collective=Collective.ALL_REDUCE) == 0
    assert total(sp) == pytest.approx(total(xs), rel=1e-12)


def test_pp_sends_bsh_over_t_twice_per_micro_batch_formulas_9_3():
    # HPN: 2048 * 12288 * 2 B / 8 = 6.29 MB per boundary crossing, forward and backward per micro-batch
    plan = plan_of("hpn-gpt3-175b")
    (x,) = pp_exchanges(plan)
    assert float(x.message_bytes) == 2048 * 12288 * 2 / 8
    assert float(x.calls) == 2 * float(plan.microbatches) * float(plan.v)
    assert float(x.bytes_per_gpu) == float(x.calls) * float(x.message_bytes)  # send/recv: factor 1


def test_cp_ring_sends_three_times_the_all_gather_forward_formulas_3_2():
    # both move (c-1)/c * 2 b s d_kv w per layer pass forward, d_kv sharded over the t TP ranks' heads;
    # the ring repeats it twice backward (K,V and dK,dV circulate)
    dp = sb.load("llama3-405b").layout.dp // 2
    gather = cp_exchanges(plan_of("llama3-405b", "layout.cp=2", f"layout.dp={dp}", "layout.cp_kind=all-gather"))
    ring = cp_exchanges(plan_of("llama3-405b", "layout.cp=2", f"layout.dp={dp}", "layout.cp_kind=ring"))
    plan = plan_of("llama3-405b", "layout.cp=2", f"layout.dp={dp}")
    m = plan.scenario.model
    c, t, s = 2, 8, m.seq_len
    layer_passes = float(plan.layers_per_gpu) * float(plan.microbatches)
    forward = (c - 1) / c * 2 * 1 * s * m.kv_heads * m.head_width / t * 2 * layer_passes
    assert total(gather, collective=Collective.ALL_GATHER) == pytest.approx(forward, rel=1e-12)
    assert total(gather, collective=Collective.REDUCE_SCATTER) == pytest.approx(forward, rel=1e-12)
    assert total(ring, collective=Collective.SEND_RECV) == pytest.approx(3 * forward, rel=1e-12)
    assert total(ring, collective=Collective.ALL_GATHER) == 0 == total(gather, collective=Collective.SEND_RECV)


@pytest.mark.parametrize("preset", ["megascale-moe-352b", "deepseek-v3"])
def test_ep_all_to_all_moves_tokens_k_h_w_times_e_minus_1_over_e_formulas_3_5(preset):
    plan = plan_of(preset)
    moe, w, h = plan.scenario.model.moe, plan.scenario.precision, plan.scenario.model.hidden_size
    e = float(plan.ep)
    passes = float(plan.moe_layers_per_gpu) * float(plan.microbatches) * 2  # forward and backward, no recompute
    for what, wb in (("dispatch", w.dispatch), ("combine", w.combine)):
        want = passes * float(plan.dispatch_tokens) * moe.top_k * h * wb * (e - 1) / e
        assert total(ep_exchanges(plan), what=what) == pytest.approx(want, rel=1e-12)
    # node-limited forwarding (DeepSeek-V3) moves bytes from the NIC to NVLink, never adds or drops any
    for x in ep_exchanges(plan):
        assert float(x.nvlink_bytes + x.nic_bytes) == pytest.approx(float(x.bytes_per_gpu), rel=1e-12)


def test_ep_all_gather_sends_every_token_once_to_every_rank():
    # MegaScale-MoE 3.2: all-gather of the e ranks' tokens, reduce-scatter back: (e-1)/e * e T h w, not k copies
    plan = plan_of("megascale-moe-352b", "layout.ep_kind=all-gather")
    xs = ep_exchanges(plan)
    e, h = float(plan.ep), plan.scenario.model.hidden_size
    passes = float(plan.moe_layers_per_gpu) * float(plan.microbatches) * 2
    assert {x.collective for x in xs} == {Collective.ALL_GATHER, Collective.REDUCE_SCATTER}
    want = passes * (e - 1) / e * e * float(plan.dispatch_tokens) * h * 2
    assert total(xs, what="dispatch") == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("preset, sets, dimension", [
    ("llama3-405b-puredp", (), tp_exchanges),  # pure DP: TP, CP and PP of degree 1
    ("llama3-405b-puredp", (), cp_exchanges),
    ("llama3-405b-puredp", (), pp_exchanges),
    ("megascale-moe-352b", ("layout.ep=1",), ep_exchanges),  # experts on every rank, nothing routed away
])
def test_a_dimension_of_degree_1_moves_nothing(preset, sets, dimension):
    xs = dimension(plan_of(preset, *sets))
    assert xs  # the rows are there, with zero calls (views drop them)
    for x in xs:
        assert float(x.calls) == 0
        assert float(x.bytes_per_gpu) == 0 == float(x.time_s) == float(x.message_bytes)


def test_a_dense_model_has_no_ep_rows():
    assert ep_exchanges(plan_of("llama3-405b")) == []


@pytest.mark.parametrize("preset", sb.preset_names())
def test_the_dimensions_partition_the_exchanges(preset):
    plan = plan_of(preset)
    parts = [dimension(plan) for dimension in DIMENSIONS]
    for dim, part in zip(Axis, parts, strict=True):  # Axis lists TP, CP, PP, DP, EP in the budget's order
        assert all(x.dim == dim for x in part)
    all_rows = exchanges(plan)
    assert [(x.dim, x.collective, x.what) for x in all_rows] == [(x.dim, x.collective, x.what) for p in parts for x in p]
    per_dim = sb.estimate(plan).by_dim("bytes_per_gpu")
    assert sum(float(v) for v in per_dim.values()) == pytest.approx(total(all_rows), rel=1e-12)
    assert [float(per_dim[d.value]) for d in Axis] == pytest.approx([total(p) for p in parts], rel=1e-12)


@pytest.mark.parametrize("shape", [(), (2,), (2, 3)])
def test_arrays_match_the_scalar_path(shape):
    sc = sb.load("hpn-gpt3-175b")
    pp = np.resize(np.array([8, 4, 2, 8, 16, 4]), shape) if shape else np.array(4)
    tp = np.resize(np.array([8, 8, 4, 2, 1, 1]), shape) if shape else np.array(2)
    dp = 32768 // (pp * tp)
    many = exchanges(sb.derive(sc, {"pp": pp, "tp": tp, "dp": dp}))
    for i in np.ndindex(shape):
        one = exchanges(plan_of("hpn-gpt3-175b", f"layout.pp={pp[i]}", f"layout.tp={tp[i]}", f"layout.dp={dp[i]}"))
        assert [(x.dim, x.collective, x.what) for x in many] == [(x.dim, x.collective, x.what) for x in one]
        for x, y in zip(many, one):
            assert np.shape(x.bytes_per_gpu) == shape
            assert float(x.bytes_per_gpu[i]) == pytest.approx(float(y.bytes_per_gpu), rel=1e-12)
            assert float(x.time_s[i]) == pytest.approx(float(y.time_s), rel=1e-12)


LAYOUT_CHOICES = dict(
    preset=st.sampled_from(sb.preset_names()),
    dp_kind=st.sampled_from(["ddp", "zero1", "zero2", "zero3", "fsdp"]),
    recompute=st.sampled_from(["none", "selective", "full"]),
    sp=st.booleans(),
)


def drawn_plan(preset, dp_kind, recompute, sp):
    try:
        return plan_of(preset, f"layout.dp_kind={dp_kind}", f"layout.recompute={recompute}",
                       f"layout.sequence_parallel={str(sp).lower()}")
    except sb.ScenarioError:
        reject()  # a combination the scenario refuses (e.g. a layout its model cannot run)


@settings(max_examples=40, deadline=None)
@given(**LAYOUT_CHOICES)
def test_bytes_calls_and_times_are_never_negative(preset, dp_kind, recompute, sp):
    for x in exchanges(drawn_plan(preset, dp_kind, recompute, sp)):
        for field in ("message_bytes", "calls", "bytes_per_gpu", "nvlink_bytes", "nic_bytes", "time_s"):
            assert float(getattr(x, field)) >= 0, (x.dim, x.collective, x.what, field)


@settings(max_examples=40, deadline=None)
@given(**LAYOUT_CHOICES, link=st.sampled_from(["nic_Bps", "nvlink_Bps"]), factor=st.sampled_from([1.25, 2.0, 8.0]))
def test_more_bandwidth_is_never_slower(preset, dp_kind, recompute, sp, link, factor):
    plan = drawn_plan(preset, dp_kind, recompute, sp)
    faster = replace(plan, **{link: getattr(plan, link) * factor})
    slow, fast = exchanges(plan), exchanges(faster)
    for x, y in zip(slow, fast):
        assert float(y.time_s) <= float(x.time_s) * (1 + 1e-12), (x.dim, x.collective, x.what)
        assert float(y.bytes_per_gpu) == float(x.bytes_per_gpu)  # bandwidth changes time, not bytes
