"""The chapter's first-order model: its worked numbers (formulas.md 9), shapes and directions."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from stepbudget.chapter import firstorder as fo
from stepbudget.enums import Axis

from _util import rows

LLAMA = dict(N=405e9, G=16384, B=2**24, F=400e12)  # chapter 5.3: Llama 3 405B, 16M tokens, 400 TFLOP/s
NIC = 50e9  # 400 Gb/s


def test_panel_5_1_pure_dp_is_link_bound():
    r = fo.roofline(**LLAMA, nic_Bps=NIC)
    assert round(float(r.bytes_per_gpu) / 1e12, 2) == 1.62  # "about 1.62 TB"
    assert round(float(r.comm_s)) == 32  # "about 32 seconds"
    assert round(float(r.compute_s), 1) == 6.2  # "about 6.2 seconds"
    assert round(float(r.comm_over_compute)) == 5  # "five times longer than computation"
    assert round(float(r.intensity), -2) == 1500  # "about 1,500 FLOP per byte"
    assert float(r.balance_nic) == 8000  # "the 8,000 balance point"
    assert round(float(r.balance_hbm)) == 119  # 400 TFLOP/s over H100's 3.35 TB/s
    assert bool(r.link_bound) and round(float(r.shortfall), 1) == 5.2


def test_panel_5_1_model_parallel_128_is_compute_bound():
    r = fo.roofline(**LLAMA, nic_Bps=NIC, M=128)
    assert round(float(r.bytes_per_gpu) / 1e9, 1) == 12.6
    assert not bool(r.link_bound) and float(r.intensity) > 8000


def test_panel_5_2_defaults_and_fp32_reduce_scatter():
    ar = fo.dp_exchange(405e9, 128, 128, "all-reduce", fo.BF16, fo.BF16, NIC, 6.2, 400e12)
    assert round(float(ar.params_per_gpu) / 1e9, 1) == 3.2  # "about 3.2 billion"
    assert round(float(ar.shard_bytes) / 1e9, 1) == 6.3  # "6.3 GB in BF16"
    assert round(float(ar.bytes_per_gpu) / 1e9, 1) == 12.6  # "about 12.6 GB per step"
    assert round(float(ar.comm_s), 2) == 0.25 and round(float(ar.share_of_compute), 2) == 0.04  # "0.25 s", "4%"
    rs = fo.dp_exchange(405e9, 128, 128, "fsdp", fo.FP32, fo.BF16, NIC, 6.2, 400e12)
    assert round(float(rs.bytes_per_gpu) / 1e9) == 19  # "about 19 GB"
    assert round(float(rs.comm_s), 2) == 0.38 and round(float(rs.share_of_compute), 2) == 0.06  # "0.38 s", "6%"
    assert round(float(rs.intensity), -4) == 130000  # "about 130,000 FLOP per byte"


def test_sharding_moves_the_same_bytes_and_reshard_one_more_share():
    # chapter 5.3: "Sharding changes where the bytes go, not how many there are"; reshard gathers twice
    D = np.array([2, 8, 128, 16384])
    ar = fo.dp_bytes_per_gpu(405e9, 128, D, "all-reduce")
    assert np.allclose(fo.dp_bytes_per_gpu(405e9, 128, D, "fsdp"), ar)
    assert np.allclose(fo.dp_bytes_per_gpu(405e9, 128, D, "fsdp-reshard"), 1.5 * ar)


def test_first_order_dp_bytes_are_the_full_models(budget_of):
    # the full model's Llama 3 405B has 405.85B parameters from its shapes: the bytes agree to that 0.2 %
    full = budget_of("llama3-405b", "layout.dp_kind=ddp", "precision.grads=bf16")
    N = float(full.plan.params_dense_per_gpu) * 128
    (x,) = rows(full, Axis.DP)
    assert float(fo.dp_bytes_per_gpu(N, 128, 128)) == pytest.approx(float(x.bytes_per_gpu), rel=1e-9)


def test_panel_5_4_exercises():
    s = lambda **kw: fo.strong_scaling(**{**LLAMA, "M": 128, "nic_Bps": NIC, "phi": 0.9, "peak_flops": 989e12, **kw})  # noqa: E731
    base, group_1 = s(), s(M=1)
    assert round(float(group_1.comm_s / group_1.compute_s)) == 5  # communication about five times compute
    assert float(group_1.mfu) < 0.1 < 0.4 < float(base.mfu)  # the MFU collapses
    half = s(nic_Bps=NIC / 2)
    assert float(base.mfu) - float(half.mfu) < 0.005  # barely moves: the exchange is small and hidden
    big = s(G=131072)
    assert float(big.dp_factor) > 0.99 and float(big.comm_s) == pytest.approx(float(base.comm_s), rel=0.01)
    assert round(float(big.compute_s), 2) == 0.78 and float(big.comm_share) > 6 * float(base.comm_share)


def test_panel_5_5_chapter_ratios():
    m = fo.moe_layer(14336, 4096, 1024, 3, 8, 989e12, 400e9)
    assert round(float(m.ratio), 1) == 9.9 and round(float(m.ratio_nic), 1) == 1.2  # chapter 5.5
    assert float(m.ratio_nvlink) == float(m.ratio) and bool(m.hides)
    assert float(m.compute_s) == pytest.approx(float(m.ratio) * float(m.nvlink_s))  # R is compute over comm
    small = fo.moe_layer(1408, 4096, 1024, 3, 8, 989e12, 400e9)  # DeepSeekMoE's small experts
    assert round(float(small.ratio), 1) == 1.0


def test_panel_5_6_burst_and_the_exercise():
    w = fo.wire_tiles(50e9, 0.2, burst_s=0.05)  # a 50 ms burst at 400 Gb/s
    assert float(w.excess_bytes) == pytest.approx(2.5e9)  # "a 50 ms burst at 400 Gb/s is 2.5 GB"
    assert float(w.duty_cycle) == pytest.approx(0.25) and not bool(w.absorbed)  # far above a 64 MB buffer
    a, b = fo.wire_tiles(50e9, 0.2, duty_cycle=0.25), fo.wire_tiles(25e9, 0.2, duty_cycle=0.5)
    assert float(a.average_Bps) == pytest.approx(float(b.average_Bps))  # the average does not change
    assert float(a.counter_Bps) == pytest.approx(float(b.counter_Bps))
    assert float(b.burst_s) == 2 * float(a.burst_s) and float(b.peak_to_average) == 2 == float(a.peak_to_average) / 2
    assert float(b.cv_training) < float(a.cv_training)


def test_training_flows_do_not_smooth_like_web_flows():
    w = fo.wire_tiles(50e9, 1.0, duty_cycle=np.array([0.05, 0.25, 0.9]), web_flows=1000)
    assert np.allclose(w.cv_web * np.sqrt(1000), w.cv_training)  # sqrt(n) smoothing needs independence


@pytest.mark.parametrize("shape", [(), (2,), (2, 3)])
def test_array_inputs_match_the_scalar_answer(shape):
    rng = np.random.default_rng(0)
    G = rng.choice([1024, 16384, 131072], size=shape)
    nic = rng.choice([25e9, 50e9, 100e9], size=shape)
    phi = rng.uniform(0, 1, size=shape)
    out = fo.strong_scaling(405e9, G, 2**24, 128, nic, 400e12, phi, 989e12)
    assert out.step_s.shape == shape
    for i in np.ndindex(shape):
        one = fo.strong_scaling(405e9, G[i], 2**24, 128, nic[i], 400e12, phi[i], 989e12)
        assert float(one.step_s) == out.step_s[i] and float(one.mfu) == out.mfu[i]
        assert float(fo.roofline(405e9, G[i], 2**24, 400e12, nic[i]).intensity) == \
            fo.roofline(405e9, G, 2**24, 400e12, nic).intensity[i]


positive = st.floats(1e-3, 1e3)


@given(N=st.floats(1e8, 1e13), G=st.sampled_from([8, 128, 4096, 131072]), M=st.sampled_from([1, 8, 128]),
       nic=st.floats(1e9, 1e12), more=st.floats(1.0, 100.0), phi=st.floats(0, 1))
def test_more_bandwidth_is_never_slower(N, G, M, nic, more, phi):
    if G < M:
        M = G
    slow = fo.strong_scaling(N, G, 2**24, M, nic, 400e12, phi, 989e12)
    fast = fo.strong_scaling(N, G, 2**24, M, nic * more, 400e12, phi, 989e12)
    assert float(fast.step_s) <= float(slow.step_s) * (1 + 1e-12)
    assert float(slow.compute_s) <= float(slow.step_s) <= float(slow.compute_s + slow.comm_s) * (1 + 1e-12)
    assert 0 <= float(slow.exposed_s) <= float(slow.comm_s) * (1 + 1e-12)


@given(G=st.sampled_from([256, 2048, 16384, 131072]), more=st.sampled_from([2, 4, 8]))
def test_dp_bytes_per_gpu_do_not_shrink_with_gpus(G, more):
    # strong scaling: more GPUs at a fixed model split never reduce the DP bytes per GPU
    assert fo.dp_bytes_per_gpu(405e9, 128, G * more / 128) >= fo.dp_bytes_per_gpu(405e9, 128, G / 128)


@given(rate=st.floats(1e9, 1e12), step=positive, duty=st.floats(0.001, 1), k=st.integers(1, 64))
def test_wire_bytes_conserve(rate, step, duty, k):
    w = fo.wire_tiles(rate, step, duty_cycle=duty, k_converging=k)
    assert float(w.bytes_per_burst) == pytest.approx(float(w.average_Bps) * step)  # one burst a step
    assert float(w.excess_bytes) == pytest.approx((k - 1) * float(w.bytes_per_burst))
    assert float(w.counter_min_Bps) <= float(w.average_Bps) * (1 + 1e-9)
    assert float(w.counter_max_Bps) >= float(w.average_Bps) * (1 - 1e-9)


def test_wire_tiles_needs_one_of_duty_or_burst():
    with pytest.raises(ValueError, match="exactly one"):
        fo.wire_tiles(50e9, 0.2)
    with pytest.raises(ValueError, match="exactly one"):
        fo.wire_tiles(50e9, 0.2, duty_cycle=0.2, burst_s=0.01)


@given(F=st.floats(1e12, 1e16), bw=st.floats(1e9, 1e13), lo=st.floats(1e-2, 1e7), hi=st.floats(1e-2, 1e7))
def test_the_roof_bends_at_the_balance_point_and_never_falls(F, bw, lo, hi):
    lo, hi = sorted((lo, hi))
    assert fo.attainable(lo, F, bw) <= fo.attainable(hi, F, bw)  # more FLOP per byte is never slower
    assert fo.attainable(fo.balance(F, bw), F, bw) == pytest.approx(F)
    assert fo.attainable(fo.balance(F, bw) / 2, F, bw) == pytest.approx(F / 2)  # the link's half of the roof
