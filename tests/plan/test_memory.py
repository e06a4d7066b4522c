"""Model-state and activation memory per GPU (formulas.md 5)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from stepbudget.budget.pipeline import inflight_microbatches
from stepbudget.enums import DP_KIND_CODES, DataParallel, Recompute
from stepbudget.plan.memory import (
    ModelState,
    activation_bytes_extras,
    activation_bytes_first_stage,
    activation_bytes_per_layer,
    dp_kind_code,
    logits_activation_bytes,
    model_state_bytes,
    recompute_code,
)
from stepbudget.units import GB, MB

SHAPES = [(), (2,), (2, 3)]

# GPT-3 175B (Korthikanti22 §4): a = 96, s = 2048, h = 12288, one sequence
GPT3 = dict(s=2048, b=1, h=12288, a=96)
# Llama 3 405B (Llama3 Table 3): h = 16384, 128 heads, 126 layers, s = 8192
LLAMA3 = dict(s=8192, b=1, h=16384, a=128)


# --- model states -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind, recomputed, paper",
    [
        (DataParallel.DDP, 120.0, 120),
        (DataParallel.ZERO1, 31.40625, 31.4),
        (DataParallel.ZERO2, 16.640625, 16.6),
        (DataParallel.ZERO3, 1.875, 1.9),
    ],
)
def test_zero_figure_1(kind, recomputed, paper):
    """ZeRO Fig. 1: Psi = 7.5e9, N_d = 64, K = 12, 2-byte params and grads."""
    total = model_state_bytes(7.5e9, 64, kind).total / GB
    assert total == pytest.approx(recomputed)
    assert round(float(total), 1) == pytest.approx(paper, abs=0.051)


def test_megatron_distributed_optimizer_table():
    """Megatron dist_optimizer.md: bytes/param without vs with the distributed optimizer (ZeRO-1)."""
    psi, d = 1e9, np.array([1, 8, 64])
    rows = [  # (param_bytes, grad_bytes, K, master_weights, plain, distributed)
        (2, 4, 12, True, 18, 6 + 12 / d),  # bf16 params, fp32 grads
        (2, 2, 16, True, 20, 4 + 16 / d),  # fp16 params and grads (+ fp32 grad copy in K)
        (4, 4, 12, False, 16, 8 + 8 / d),  # fp32: the params are the master
    ]
    for w_p, w_g, K, master, plain, distributed in rows:
        ddp = model_state_bytes(psi, d, DataParallel.DDP, w_g, w_p, K, master).total / psi
        zero1 = model_state_bytes(psi, d, DataParallel.ZERO1, w_g, w_p, K, master).total / psi
        assert np.allclose(ddp, plain)
        assert np.allclose(zero1, distributed)


def test_model_state_fields():
    state = model_state_bytes(1e9, 8, "zero2", grad_bytes=4)
    assert isinstance(state, ModelState)
    assert state.params == pytest.approx(2e9)
    assert state.grads == pytest.approx(4e9 / 8)
    assert state.optimizer == pytest.approx(12e9 / 8)
    assert state.gathered == 0
    assert state.total == pytest.approx(state.params + state.grads + state.optimizer)


def test_fsdp_and_zero3_hold_gathered_layers():
    psi, layer_params = 3.2e9, 0.2e9
    fsdp = model_state_bytes(psi, 128, "fsdp", layer_params=layer_params)
    zero3 = model_state_bytes(psi, 128, "zero3", layer_params=layer_params)
    assert fsdp.gathered == pytest.approx(2 * layer_params * 2)  # 2 layers, BF16
    assert fsdp.total == pytest.approx(zero3.total)
    assert fsdp.total == pytest.approx(16 * psi / 128 + 2 * layer_params * 2)
    # Llama 3: no reshard after forward keeps the whole stage gathered
    stage = model_state_bytes(psi, 128, "fsdp", layer_params=layer_params, gathered_layers=16)
    assert stage.gathered == pytest.approx(16 * layer_params * 2)
    # only ZeRO-3 / FSDP gather
    for kind in ("ddp", "zero1", "zero2"):
        assert model_state_bytes(psi, 128, kind, layer_params=layer_params).gathered == 0


def test_dp_kind_codes():
    assert dp_kind_code(DataParallel.FSDP) == DP_KIND_CODES[DataParallel.FSDP]
    assert dp_kind_code(np.array(["ddp", "zero3"])).tolist() == [0, 3]
    with pytest.raises(ValueError, match="unknown DataParallel"):
        dp_kind_code("zero4")
    with pytest.raises(ValueError):
        recompute_code(7)


@given(
    psi=st.floats(1e6, 1e12),
    d=st.integers(1, 4096),
    more=st.integers(0, 4096),
    kind=st.sampled_from(list(DataParallel)),
    grad_bytes=st.sampled_from([2, 4]),
    layer_params=st.floats(0, 1e10),
)
def test_more_dp_never_increases_model_state(psi, d, more, kind, grad_bytes, layer_params):
    small = model_state_bytes(psi, d, kind, grad_bytes, layer_params=layer_params)
    large = model_state_bytes(psi, d + more, kind, grad_bytes, layer_params=layer_params)
    for field in ("params", "grads", "optimizer", "gathered", "total"):
        assert getattr(large, field) <= getattr(small, field) * (1 + 1e-12)


# --- activations: Korthikanti22 worked numbers ---------------------------------------------------


def test_gpt3_attention_term_and_selective_saving():
    """5as/h = 80 and selective recompute saves 80/114 = 70% (Korthikanti22 §5)."""
    s, b, h, a = GPT3.values()
    sbh = s * b * h
    none = activation_bytes_per_layer(**GPT3, t=1, sp=False)
    selective = activation_bytes_per_layer(**GPT3, t=1, sp=False, recompute=Recompute.SELECTIVE)
    assert (none - selective) / sbh == pytest.approx(80)
    assert 1 - selective / none == pytest.approx(80 / 114)
    assert round(float(1 - selective / none), 2) == 0.70


def test_gpt3_per_layer_per_sequence():
    assert activation_bytes_per_layer(**GPT3, t=1, sp=False) / GB == pytest.approx(2.87, abs=0.005)
    assert activation_bytes_per_layer(**GPT3, t=8, sp=True) / MB == pytest.approx(359, abs=0.5)
    assert activation_bytes_per_layer(**GPT3, t=8, sp=True, recompute="selective") / MB == pytest.approx(107, abs=0.5)


def test_table2_rows():
    """Korthikanti22 Table 2, GPT-3 with t = 8."""
    s, b, h, a = GPT3.values()
    sbh, t = s * b * h, 8
    rows = [  # (sp, recompute, bytes / sbh)
        (False, "none", 10 + 24 / t + 5 * a * s / (h * t)),
        (True, "none", 34 / t + 5 * a * s / (h * t)),
        (False, "selective", 10 + 24 / t),
        (True, "selective", 34 / t),
        (False, "full", 2),
    ]
    for sp, recompute, per_sbh in rows:
        assert activation_bytes_per_layer(**GPT3, t=t, sp=sp, recompute=recompute) == pytest.approx(per_sbh * sbh)
    # full recompute with SP keeps the sequence-sharded layer input
    assert activation_bytes_per_layer(**GPT3, t=t, sp=True, recompute="full") == pytest.approx(2 * sbh / t)


def test_flash_attention_drops_the_score_term():
    flash = activation_bytes_per_layer(**GPT3, t=8, sp=True, flash=True)
    selective = activation_bytes_per_layer(**GPT3, t=8, sp=True, recompute="selective")
    assert flash == pytest.approx(selective)


def test_llama3_405b_first_stage():
    """s = 8192, b = 1, t = 8, TP+SP+selective: 570 MB per layer, 71.9 GB over 126 layers (PP 16, 1F1B)."""
    per_layer = activation_bytes_per_layer(**LLAMA3, t=8, sp=True, recompute=Recompute.SELECTIVE)
    assert per_layer / MB == pytest.approx(570, abs=0.5)
    p, L, m = 16, 126, 64
    first_stage = activation_bytes_first_stage(per_layer, L / p, inflight_microbatches("1f1b", p, m, 1))
    assert first_stage / GB == pytest.approx(71.9, abs=0.05)


def test_interleaved_first_stage_is_korthikanti_eq5_times_factor():
    """Interleaved: s b h L/t (34 + 5as/h)(1 + (p-1)/(p v)), Korthikanti22 §4.2.3."""
    s, b, h, a = GPT3.values()
    t, p, v, L = 8, 8, 3, 96
    per_layer = activation_bytes_per_layer(**GPT3, t=t, sp=True)
    first = activation_bytes_first_stage(per_layer, L / p, inflight_microbatches("interleaved-1f1b", p, 64, v))
    assert first == pytest.approx(s * b * h * L / t * (34 + 5 * a * s / h) * (1 + (p - 1) / (p * v)))


def test_extras_match_korthikanti_section_4_3():
    """s b h L/t (p/L + delta_{p=1} 4/L (1 + V/h)) with TP+SP and p micro-batches in flight."""
    s, b, h, _ = GPT3.values()
    t, L, V = 8, 96, 51200
    for p in (1, 8):
        expected = s * b * h * L / t * (p / L + (p == 1) * 4 / L * (1 + V / h))
        assert activation_bytes_extras(s, b, h, V, t, p, True, p) == pytest.approx(expected)
    assert logits_activation_bytes(s, b, h, V, t, True) >= 4 * s * b * V / t  # FP32 logits


# --- shapes: each element equals the 0-d answer -------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
def test_shapes_match_scalar_answers(shape):
    rng = np.random.default_rng(1)
    state_args = dict(
        psi=rng.uniform(1e8, 1e10, shape),
        dp=rng.integers(1, 256, shape),
        dp_kind=rng.integers(0, 5, shape),
        grad_bytes=rng.choice([2, 4], shape),
        master_weights=rng.choice([True, False], shape),
        layer_params=rng.uniform(0, 1e8, shape),
    )
    act_args = dict(
        s=rng.choice([2048, 8192], shape),
        b=rng.integers(1, 4, shape),
        h=rng.choice([4096, 12288], shape),
        a=rng.choice([32, 96], shape),
        t=rng.choice([1, 2, 8], shape),
        sp=rng.choice([True, False], shape),
        recompute=rng.integers(0, 3, shape),
        flash=rng.choice([True, False], shape),
    )
    extras_args = dict(
        s=act_args["s"], b=act_args["b"], h=act_args["h"], vocab_size=rng.choice([32000, 128256], shape),
        t=act_args["t"], p=rng.choice([1, 4], shape), sp=act_args["sp"], inflight=rng.uniform(1, 8, shape),
    )
    first_args = dict(
        per_layer=rng.uniform(1e6, 1e9, shape), layers_per_stage=rng.integers(1, 16, shape),
        inflight=rng.uniform(1, 8, shape),
    )
    cases = [
        (lambda **k: model_state_bytes(**k).total, state_args),
        (lambda **k: model_state_bytes(**k).gathered, state_args),
        (activation_bytes_per_layer, act_args),
        (activation_bytes_extras, extras_args),
        (activation_bytes_first_stage, first_args),
    ]
    for fn, args in cases:
        out = fn(**args)
        assert out.shape == shape
        for i in np.ndindex(shape):
            scalar = fn(**{k: x[i] for k, x in args.items()})
            assert np.shape(scalar) == ()
            assert out[i] == pytest.approx(scalar)


def test_broadcast_across_arguments():
    state = model_state_bytes(7.5e9, np.array([[1], [8], [64]]), np.array([0, 1, 2, 3]))
    assert state.total.shape == (3, 4)
    assert state.total[2, 3] == pytest.approx(1.875e9)
