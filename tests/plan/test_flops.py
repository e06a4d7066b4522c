import pytest

from stepbudget.inputs.model import Model
from stepbudget.inputs.scenario import load
from stepbudget.plan.flops import model_counts


def test_llama3_405b_flops_per_token():
    # formulas.md 2.4: 2.524e12 FLOP/token at s = 8192, causal core 4.0 %, 6N = 2.435e12, 405.85B params
    m = load("llama3-405b").model
    c = model_counts(m, "causal")
    assert c.flops_per_token == pytest.approx(2.524e12, rel=1e-3)
    assert c.attention_core_flops_per_token / c.flops_per_token == pytest.approx(0.040, abs=0.0005)
    assert c.flops_per_token_6n == pytest.approx(2.435e12, rel=1e-3)
    assert c.params_total == pytest.approx(405.85e9, rel=1e-4)
    assert model_counts(m, "6N").flops_per_token == c.flops_per_token_6n


def test_palm_540b_mfu():
    # formulas.md 2.5: PaLM 540B, 238.3k tokens/s on 6,144 TPU v4 at 275 TFLOP/s -> 46.2 % MFU
    palm = Model(num_layers=118, hidden_size=18432, num_heads=48, num_kv_heads=1, head_dim=256, ffn_size=73728,
                 activation="swiglu", vocab_size=256000, seq_len=2048, tied_embeddings=True)
    c = model_counts(palm, "noncausal")
    assert c.params_total == pytest.approx(540.35e9, rel=2e-3)
    assert c.flops_per_token == pytest.approx(3.278e12, rel=2e-3)
    mfu = 238.3e3 * c.flops_per_token / (6144 * 275e12)
    assert round(mfu, 3) == 0.462


def test_deepseek_v3_total_and_active():
    # DeepSeek-V3: 671B total, 37B activated (tech report abstract)
    c = model_counts(load("deepseek-v3").model, "causal")
    assert c.params_total == pytest.approx(671e9, rel=0.01)
    assert c.params_active == pytest.approx(37e9, rel=0.03)


def test_noncausal_core_is_twice_causal():
    m = load("llama3-405b").model
    assert model_counts(m, "noncausal").attention_core_flops_per_token == pytest.approx(
        2 * model_counts(m, "causal").attention_core_flops_per_token)


def test_full_recompute_adds_one_forward_of_the_layers():
    # Narayanan 5.1: F_full / F_model -> 4/3 on the transformer layers
    c = model_counts(load("hpn-gpt3-175b").model, "noncausal")
    layers_train = c.flops_per_token - 3 * 2 * 12288 * 51200
    assert (layers_train + c.recompute_flops_per_token["full"]) / layers_train == pytest.approx(4 / 3)


def test_per_op_selective_checkpointing_recomputes_every_second_matmul():
    # torchtitan: every matmul's output saved "except every second mm" in wq, wk, wv, wo, w1, w3, w2 order:
    # wk, wo and w3 run again. Llama 3.1 8B: 4,096 x 1,024 + 4,096 x 4,096 + 4,096 x 14,336 per layer
    m = Model(name="8B", num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8, ffn_size=14336,
              activation="swiglu", vocab_size=128256, seq_len=8192)
    again = model_counts(m).recompute_flops_per_token["selective-op"]
    assert again == 32 * 2 * (4096 * 1024 + 4096 * 4096 + 4096 * 14336)
    linear = 32 * 2 * (4096 * (4096 + 2 * 1024) + 4096 * 4096 + 3 * 4096 * 14336)
    assert again / linear == pytest.approx(0.365, abs=0.002)  # about 37 % of the layers' linear forward
    # a two-matrix MLP recomputes its down projection instead
    gelu = m.model_copy(update={"activation": "gelu"})
    assert model_counts(gelu).recompute_flops_per_token["selective-op"] == again
