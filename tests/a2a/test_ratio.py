"""MegaScale-MoE hiding ratio: worked numbers of formulas.md 9.4, shapes, validation."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from stepbudget.a2a.ratio import hiding_ratio, moe_layer_times

P_H800 = 989e12  # FLOP/s, formulas.md 9.4
NVLINK = 400e9  # bytes/s
NIC = 50e9  # bytes/s


@pytest.mark.parametrize(
    ("f", "B", "ep", "expected"),
    [
        (14336, NVLINK, 8, 9.94),  # book ~9.9, exact form
        (14336, NIC, 8, 1.24),  # book ~1.2
        (1408, NVLINK, 8, 0.98),  # book ~1.0, DeepSeekMoE 16B
        (16384, NVLINK, None, 9.94),  # approximate form needs f = 16,384
        (16384, NIC, None, 1.24),
        (1408, NVLINK, None, 0.85),
        (1536, NVLINK, None, 0.93),  # DeepSeek-V2
        (1536, NVLINK, 8, 1.06),  # 1.0650; formulas.md 9.4 prints 1.07 (rounding slip there)
        (2048, NVLINK, None, 1.24),  # DeepSeek-V3
        (2048, NVLINK, 8, 1.42),
    ],
)
def test_worked_numbers_formulas_9_4(f, B, ep, expected):
    assert round(float(hiding_ratio(f, B, P_H800, ep=ep)), 2) == expected


def test_book_rounding():
    assert round(float(hiding_ratio(14336, NVLINK, P_H800, ep=8)), 1) == 9.9
    assert round(float(hiding_ratio(14336, NIC, P_H800, ep=8)), 1) == 1.2
    assert round(float(hiding_ratio(1408, NVLINK, P_H800, ep=8)), 1) == 1.0


@pytest.mark.parametrize("shape", [(), (2,), (2, 3)])
def test_shapes_match_scalar_answers(shape):
    rng = np.random.default_rng(0)
    f = rng.integers(512, 20000, size=shape)
    B = rng.uniform(10e9, 900e9, size=shape)
    n = rng.integers(2, 64, size=shape)
    R = hiding_ratio(f, B, P_H800, ep=n)
    assert R.shape == shape
    for idx in np.ndindex(shape):
        oracle = 1.5 * f[idx] * n[idx] / (n[idx] - 1) * B[idx] / P_H800
        assert R[idx] == pytest.approx(float(hiding_ratio(f[idx], B[idx], P_H800, ep=n[idx])))
        assert R[idx] == pytest.approx(oracle)


def test_broadcast_sweep():
    R = hiding_ratio(np.array([1408, 14336])[:, None], np.array([NIC, NVLINK]), P_H800, ep=8)
    assert R.shape == (2, 2)
    assert R[1, 1] == pytest.approx(9.9398, abs=1e-3)


@given(
    f=st.floats(100, 1e5),
    B=st.floats(1e9, 1e12),
    n=st.integers(2, 1024),
    scale=st.floats(0.1, 10),
)
def test_exact_over_approx_is_n_over_n_minus_1_and_linear_in_bandwidth(f, B, n, scale):
    exact = float(hiding_ratio(f, B, P_H800, ep=n))
    approx = float(hiding_ratio(f, B, P_H800))
    assert exact / approx == pytest.approx(n / (n - 1))
    assert float(hiding_ratio(f, B * scale, P_H800, ep=n)) == pytest.approx(exact * scale)


def test_layer_times_ratio_equals_exact_form():
    t = moe_layer_times(4096, 7168, 14336, 8, 8, NVLINK, P_H800)
    assert float(t.ratio) == pytest.approx(float(hiding_ratio(14336, NVLINK, P_H800, ep=8)))
    copies = 4096 * 8
    assert float(t.compute_s) == pytest.approx(6 * 7168 * 14336 * copies / P_H800)
    assert float(t.comm_s) == pytest.approx(2 * copies * 7168 * 2 * 7 / 8 / NVLINK)


def test_layer_times_ratio_independent_of_tokens_topk_hidden():
    t = moe_layer_times(np.array([512, 4096]), np.array([[2048], [8192]]), 1408, np.array([2, 8]), 16, NIC, P_H800)
    assert t.ratio.shape == (2, 2)
    assert np.allclose(t.ratio, t.ratio.flat[0])


def test_layer_times_variants():
    glu = moe_layer_times(1024, 4096, 8192, 2, 8, NIC, P_H800)
    plain = moe_layer_times(1024, 4096, 8192, 2, 8, NIC, P_H800, swiglu=False)
    fp8 = moe_layer_times(1024, 4096, 8192, 2, 8, NIC, P_H800, bytes_per_elem=1.03125)
    assert float(plain.compute_s) == pytest.approx(float(glu.compute_s) * 2 / 3)
    assert float(fp8.comm_s) == pytest.approx(float(glu.comm_s) * 1.03125 / 2)


def test_ep_one_sends_nothing():
    t = moe_layer_times(1024, 4096, 8192, 2, 1, NIC, P_H800)
    assert float(t.comm_s) == 0.0
    assert np.isinf(t.ratio)
    assert np.isinf(hiding_ratio(8192, NIC, P_H800, ep=1))


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        (dict(expert_ffn=-1, bandwidth_Bps=NIC, peak_flops=P_H800), "expert_ffn"),
        (dict(expert_ffn=1408, bandwidth_Bps=0, peak_flops=P_H800), "bandwidth_Bps"),
        (dict(expert_ffn=1408, bandwidth_Bps=NIC, peak_flops=np.nan), "peak_flops"),
        (dict(expert_ffn=1408, bandwidth_Bps=NIC, peak_flops=P_H800, ep=0), "ep"),
    ],
)
def test_bad_inputs_name_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        hiding_ratio(**kwargs)


def test_layer_times_bad_input():
    with pytest.raises(ValueError, match="top_k"):
        moe_layer_times(1024, 4096, 8192, 0, 8, NIC, P_H800)
    with pytest.raises(ValueError, match="ep"):
        moe_layer_times(1024, 4096, 8192, 2, 0.5, NIC, P_H800)
