"""inputs/model.py: each preset's shapes as its YAML writes them, their size as the paper states it, and
each shape rule refused by the field it names."""

from importlib import resources

import pytest
import yaml

from stepbudget.inputs.model import Model
from stepbudget.inputs.scenario import load, preset_names

PRESETS = resources.files("stepbudget.inputs") / "presets"


def _model_section(name: str) -> dict:
    """The preset's model section as written, over its base's (read with plain yaml, not the package's loader)."""
    data = yaml.safe_load((PRESETS / f"{name}.yaml").read_text(encoding="utf-8"))
    base = _model_section(data["base"]) if "base" in data else {}
    return {**base, **data.get("model", {})}


@pytest.mark.parametrize("name", preset_names())
def test_each_preset_model_holds_the_shapes_its_yaml_writes(name):
    model = load(name).model
    section = _model_section(name)
    assert section, f"{name} has no model section"
    for key, value in section.items():
        if isinstance(value, dict):  # mla, moe
            for sub, v in value.items():
                assert getattr(getattr(model, key), sub) == v, (name, key, sub)
        else:
            assert getattr(model, key) == value, (name, key)


def _hand_count(m: Model) -> tuple[float, float]:
    """(total, active) parameters from the shapes: projections, MLPs, experts, routers and embeddings;
    norms and biases ignored (under 0.01 % of any preset). An independent oracle for plan/flops.py."""
    h, L, V = m.hidden_size, m.num_layers, m.vocab_size
    n_mat = 3 if m.activation == "swiglu" else 2  # SwiGLU gate, up, down; GeLU up, down
    if m.mla is not None:  # DeepSeek-V3 2.1.1: W^DQ, W^UQ/W^QR, W^DKV + W^KR, W^UK/W^UV, W^O
        a, ml = m.num_heads, m.mla
        attn = (h * ml.q_lora_rank + ml.q_lora_rank * a * (ml.qk_nope_head_dim + ml.qk_rope_head_dim)
                + h * (ml.kv_lora_rank + ml.qk_rope_head_dim)
                + ml.kv_lora_rank * a * (ml.qk_nope_head_dim + ml.v_head_dim) + a * ml.v_head_dim * h)
    else:
        d = m.head_dim or h // m.num_heads
        q, kv = m.num_heads * d, (m.num_kv_heads or m.num_heads) * d
        attn = h * q + 2 * h * kv + q * h  # W_Q, W_K, W_V, W_O
    embed = V * h * (1 if m.tied_embeddings else 2)
    if m.moe is None:
        total = L * (attn + n_mat * h * m.ffn_size) + embed
        return total, total
    e = m.moe
    L_moe = L - e.first_dense_layers
    expert = n_mat * h * e.expert_ffn_size
    shared = e.shared_experts * n_mat * h * (e.shared_ffn_size or e.expert_ffn_size)
    total = (L * attn + e.first_dense_layers * n_mat * h * m.ffn_size
             + L_moe * (e.num_experts * expert + shared + h * e.num_experts) + embed)
    return total, total - L_moe * (e.num_experts - e.top_k) * expert


@pytest.mark.parametrize("name, cited_total, cited_active", [
    ("llama3-405b", 405e9, None),  # Llama 3 Table 3: 405B
    ("hpn-gpt3-175b", 175e9, None),  # GPT-3 Table 2.1: 175.0B
    ("megascale-175b", 175e9, None),  # MegaScale Table 1: 175B
    ("megascale-moe-352b", 352e9, None),  # MegaScale-MoE Table 2: Internal-352B
    ("deepseek-v3", 671e9, 37e9),  # DeepSeek-V3 abstract: 671B total, 37B activated per token
])
def test_preset_shapes_give_the_size_their_source_cites(name, cited_total, cited_active):
    total, active = _hand_count(load(name).model)
    assert total == pytest.approx(cited_total, rel=0.005)  # the papers round to the billion; norms ignored
    if cited_active is not None:
        assert active == pytest.approx(cited_active, rel=0.02)  # "37B": 37.55B by the shapes


DENSE = dict(num_layers=4, hidden_size=512, num_heads=8, ffn_size=2048, vocab_size=1000, seq_len=1024)
MLA = dict(kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32)
MOE = dict(num_experts=8, top_k=2, expert_ffn_size=256)


@pytest.mark.parametrize("update, message", [
    (dict(num_kv_heads=3), "model.num_kv_heads: 8 query heads cannot be grouped over 3 KV heads"),
    (dict(num_heads=6), "model.head_dim: hidden_size 512 is not divisible by num_heads 6"),
    (dict(mla=MLA, positions="learned"), "model.positions: latent attention carries its own rotary part"),
    (dict(moe=MOE, parallel_block=True), "model.parallel_block: a parallel block needs a dense MLP"),
    (dict(moe={**MOE, "first_dense_layers": 5}), "model.moe.first_dense_layers: 5 exceeds num_layers 4"),
    (dict(moe={**MOE, "top_k": 9}), "model.moe.top_k: top_k = 9 exceeds num_experts = 8; set top_k <= 8"),
    (dict(num_layers=True), "num_layers: True is not a number"),  # YAML's yes/true is not 1
    (dict(hidden_size=0), "hidden_size\n  Input should be greater than 0"),
])
def test_each_shape_rule_refuses_by_the_field_it_names(update, message):
    with pytest.raises(ValueError) as e:
        Model(**{**DENSE, **update})
    assert message in str(e.value)


def test_defaults_and_units_of_a_model_given_by_its_shapes():
    m = Model(**{**DENSE, "seq_len": "4K", "num_kv_heads": 2})
    assert m.seq_len == 4000  # counts take decimal prefixes: "4K" is 4,000 (units.py)
    assert (m.kv_heads, m.head_width, m.mlp_intermediates, m.moe_layers) == (2, 64, 3, 0)
    assert Model(**{**DENSE, "head_dim": 96}).head_width == 96  # an explicit head width wins
    moe = Model(**{**DENSE, "moe": {**MOE, "first_dense_layers": 1}}).moe
    ds = load("deepseek-v3").model
    assert (moe.shared_width, ds.moe_layers, ds.head_width) == (256, 58, 128)  # 61 layers, 3 dense (V3 4.2)
