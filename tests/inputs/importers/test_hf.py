"""importers/hf.py: real Hugging Face config.json files read into the model block, each value checked against the
file's own line (tests/data/configs/hf/README.md says where each file comes from); what transformers fills in when
a key is absent; the families' odd spellings; and bad files turned into problems, never exceptions."""

import json
from pathlib import Path

import pytest

from stepbudget.inputs.importers import hf
from stepbudget.inputs.model import Model

DATA = Path(__file__).parents[2] / "data" / "configs"
HF = DATA / "hf"


def _read(name: str):
    return hf.read((HF / name).read_text(encoding="utf-8"), name)


def _values(imported) -> dict:
    return {".".join(path): value for path, value in imported.values.items()}


def _keys(imported) -> dict:
    return {".".join(path): key for path, key in imported.keys.items()}


def _doc(**keys) -> str:
    return json.dumps(keys)


# --- the real files: every value stated, as read from the file by hand -----------------------------------------

EXPECTED = {
    "llama31_70b_config.json": {  # Llama 3.1 70B
        "model.name": "LlamaForCausalLM",  # line 3
        "model.source": "Hugging Face config.json (model_type llama)",  # line 15
        "model.num_layers": 80,  # line 17
        "model.hidden_size": 8192,  # line 10
        "model.num_heads": 64,  # line 16
        "model.num_kv_heads": 8,  # line 18
        "model.ffn_size": 28672,  # line 12
        "model.vocab_size": 128256,  # line 34
        "model.activation": "swiglu",  # line 9: hidden_act silu in LlamaMLP (gate, up, down)
        "model.positions": "rotary",
        "model.tied_embeddings": False,  # line 30
        "model.dropout": False,  # line 6: attention_dropout 0.0
    },
    "mixtral_8x7b_config.json": {  # Mixtral 8x7B
        "model.name": "MixtralForCausalLM",  # line 3
        "model.source": "Hugging Face config.json (model_type mixtral)",  # line 13
        "model.num_layers": 32,  # line 16
        "model.hidden_size": 4096,  # line 9
        "model.num_heads": 32,  # line 14
        "model.num_kv_heads": 8,  # line 17
        "model.ffn_size": 14336,  # line 11: the expert width (no dense layer)
        "model.vocab_size": 32000,  # line 28
        "model.activation": "swiglu",  # line 8
        "model.positions": "rotary",
        "model.tied_embeddings": False,  # line 24
        "model.dropout": False,  # line 5
        "model.moe.num_experts": 8,  # line 18: num_local_experts
        "model.moe.top_k": 2,  # line 15
        "model.moe.expert_ffn_size": 14336,  # line 11
        "model.moe.balance": "aux-loss",  # line 22: router_aux_loss_coef 0.02
    },
    "deepseek_v2_lite_config.json": {  # DeepSeek-V2-Lite
        "model.name": "DeepseekV2ForCausalLM",  # line 3
        "model.source": "Hugging Face config.json (model_type deepseek_v2)",  # line 22
        "model.num_layers": 27,  # line 31
        "model.hidden_size": 2048,  # line 17
        "model.num_heads": 16,  # line 29
        "model.num_kv_heads": 16,  # line 32
        "model.head_dim": 128,  # line 57: v_head_dim
        "model.ffn_size": 10944,  # line 19: the first (dense) layer's width
        "model.vocab_size": 102400,  # line 58
        "model.activation": "swiglu",  # line 16
        "model.positions": "rotary",
        "model.tied_embeddings": False,  # line 51
        "model.dropout": False,  # line 6
        "model.moe.num_experts": 64,  # line 26: n_routed_experts
        "model.moe.top_k": 6,  # line 30
        "model.moe.expert_ffn_size": 1408,  # line 23: moe_intermediate_size
        "model.moe.shared_experts": 2,  # line 27
        "model.moe.first_dense_layers": 1,  # line 15: first_k_dense_replace
        "model.moe.balance": "aux-loss",  # line 53: topk_method greedy, line 12: aux_loss_alpha 0.001
        "model.mla.q_lora_rank": 0,  # line 34: null, a full-rank query projection
        "model.mla.kv_lora_rank": 512,  # line 20
        "model.mla.qk_nope_head_dim": 128,  # line 35
        "model.mla.qk_rope_head_dim": 64,  # line 36
        "model.mla.v_head_dim": 128,  # line 57
    },
    "gpt2_xl_config.json": {  # GPT-2 XL (1.5B)
        "model.name": "GPT2LMHeadModel",  # line 4
        "model.source": "Hugging Face config.json (model_type gpt2)",  # line 12
        "model.num_layers": 48,  # line 16: n_layer
        "model.hidden_size": 1600,  # line 14: n_embd
        "model.num_heads": 25,  # line 15: n_head
        "model.ffn_size": 6400,  # no n_inner: 4 x n_embd
        "model.vocab_size": 50257,  # line 31
        "model.activation": "gelu",  # line 2: gelu_new in a two-matrix MLP
        "model.positions": "learned",
        "model.tied_embeddings": True,  # no tie_word_embeddings: PretrainedConfig's True
        "model.dropout": True,  # lines 6 and 19: attn_pdrop 0.1, resid_pdrop 0.1
    },
    "qwen3_moe_debug_config.json": {  # torchtitan's Qwen3-MoE debug model
        "model.name": "Qwen3MoeForCausalLM",  # line 2
        "model.source": "Hugging Face config.json (model_type qwen3_moe)",  # line 16
        "model.num_layers": 8,  # line 22
        "model.hidden_size": 256,  # line 10
        "model.num_heads": 16,  # line 19
        "model.num_kv_heads": 8,  # line 23
        "model.head_dim": 128,  # line 8: explicit (16 x 128 != 256)
        "model.ffn_size": 768,  # line 12
        "model.vocab_size": 2048,  # line 35
        "model.activation": "swiglu",  # line 9
        "model.positions": "rotary",
        "model.tied_embeddings": False,  # line 30
        "model.dropout": False,  # line 4
        "model.moe.num_experts": 64,  # line 20
        "model.moe.top_k": 8,  # line 21
        "model.moe.expert_ffn_size": 768,  # line 17
        "model.moe.first_dense_layers": 0,  # lines 6 and 15: step 1, no mlp_only_layers
        "model.moe.balance": "aux-loss",  # line 28: router_aux_loss_coef 0.001
    },
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_file_states_what_it_says(name):
    imported = _read(name)
    assert _values(imported) == EXPECTED[name]
    assert imported.problems == ()
    assert imported.format == hf.FORMAT and imported.framework is None and not imported.base


def test_every_data_file_is_checked():
    assert sorted(p.name for p in HF.glob("*.json")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_file_is_a_valid_model(name):
    """The model block validates in the schema once the job gives its sequence length."""
    model: dict = {}
    for path, value in _read(name).values.items():
        node = model
        for part in path[1:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    assert Model.model_validate({**model, "seq_len": 4096}).num_layers == EXPECTED[name]["model.num_layers"]


def test_keys_say_where_each_value_comes_from():
    gpt2, mixtral, lite = _keys(_read("gpt2_xl_config.json")), _keys(_read("mixtral_8x7b_config.json")), \
        _keys(_read("deepseek_v2_lite_config.json"))
    assert gpt2["model.num_layers"] == "n_layer"
    assert "PretrainedConfig" in gpt2["model.tied_embeddings"] and "absent" in gpt2["model.tied_embeddings"]
    assert gpt2["model.ffn_size"] == "n_inner null (GPT-2: 4 x n_embd)"
    assert gpt2["model.activation"] == "activation_function gelu_new (two-matrix MLP)"
    assert mixtral["model.ffn_size"] == "intermediate_size (Mixtral: the expert width; no dense layers)"
    assert mixtral["model.activation"] == "hidden_act silu (gated MLP: three matrices)"
    assert lite["model.mla.q_lora_rank"] == "q_lora_rank null (full-rank query projection)"
    assert lite["model.moe.num_experts"] == "n_routed_experts"
    assert lite["model.moe.balance"] == "topk_method greedy + aux_loss_alpha 0.001"
    assert mixtral["model.moe.balance"] == "router_aux_loss_coef 0.02"


def test_unread_keys_are_listed_with_reasons():
    llama, lite = _read("llama31_70b_config.json"), _read("deepseek_v2_lite_config.json")
    assert any(i.startswith("max_position_embeddings (") and "model.seq_len" in i for i in llama.ignored)
    assert {"rope_theta", "rope_scaling", "sequence_parallel_enabled"} <= set(llama.ignored)
    assert any(i.startswith("n_group (") for i in lite.ignored)
    assert any(i.startswith("topk_group (") for i in lite.ignored)
    assert not any(i.startswith(("hidden_size", "num_hidden_layers", "kv_lora_rank")) for i in lite.ignored)


# --- detect: this importer's files and no one else's ------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_detects_its_files(name):
    assert hf.detect((HF / name).read_text(encoding="utf-8"), name)


def test_claims_no_other_format_file():
    others = [p for p in sorted(DATA.rglob("*")) if p.is_file() and p.relative_to(DATA).parts[0] != "hf"]
    assert others, "the other importers' files are under tests/data/configs"
    claimed = [str(p.relative_to(DATA)) for p in others
               if hf.detect(p.read_text(encoding="utf-8", errors="replace"), p.name)]
    assert claimed == []


@pytest.mark.parametrize("text", [
    _doc(model_type="llama", num_hidden_layers=2, train_batch_size=8),  # a DeepSpeed config naming a model
    _doc(model_type="llama", tokenizer_class="LlamaTokenizer"),  # no shape key: a tokenizer's config
    _doc(num_hidden_layers=2, hidden_size=64),  # no model_type nor architectures
    json.dumps([{"model_type": "llama", "num_hidden_layers": 2}]),
    "num_hidden_layers: 2\nmodel_type: llama\n",
])
def test_detect_refuses(text):
    assert not hf.detect(text, "config.json")


# --- families and defaults, on small documents ----------------------------------------------------------------

def test_gemma_gated_gelu_is_three_matrices_and_tied_by_default():
    imported = hf.read(_doc(architectures=["GemmaForCausalLM"], model_type="gemma", num_hidden_layers=28,
                            hidden_size=3072, num_attention_heads=16, num_key_value_heads=16, head_dim=256,
                            intermediate_size=24576, hidden_activation="gelu_pytorch_tanh", vocab_size=256000),
                       "config.json")
    values, keys = _values(imported), _keys(imported)
    assert values["model.activation"] == "swiglu" and values["model.head_dim"] == 256
    assert keys["model.activation"] == "hidden_activation gelu_pytorch_tanh (gated MLP: three matrices)"
    assert values["model.tied_embeddings"] is True
    assert keys["model.tied_embeddings"] == "tie_word_embeddings absent (GemmaConfig tie_word_embeddings=True)"


def test_llama_tie_default_is_untied():
    imported = hf.read(_doc(model_type="llama", num_hidden_layers=2, hidden_size=64, num_attention_heads=4),
                       "config.json")
    assert _values(imported)["model.tied_embeddings"] is False
    assert "LlamaConfig tie_word_embeddings=False" in _keys(imported)["model.tied_embeddings"]


@pytest.mark.parametrize("stated, parallel", [({}, True), ({"use_parallel_residual": False}, False)])
def test_gpt_neox_parallel_residual(stated, parallel):
    imported = hf.read(_doc(model_type="gpt_neox", num_hidden_layers=32, hidden_size=4096, num_attention_heads=32,
                            intermediate_size=16384, hidden_act="gelu", **stated), "config.json")
    values = _values(imported)
    assert values["model.parallel_block"] is parallel
    assert values["model.activation"] == "gelu" and values["model.positions"] == "rotary"
    assert values["model.tied_embeddings"] is False


def test_qwen2_moe_shared_expert_and_leading_dense_layers():
    imported = hf.read(_doc(model_type="qwen2_moe", num_hidden_layers=24, hidden_size=2048, num_attention_heads=16,
                            intermediate_size=5632, moe_intermediate_size=1408, num_experts=60,
                            num_experts_per_tok=4, shared_expert_intermediate_size=5632, decoder_sparse_step=1,
                            mlp_only_layers=[0, 1]), "config.json")
    values = _values(imported)
    assert (values["model.moe.num_experts"], values["model.moe.top_k"], values["model.moe.expert_ffn_size"]) \
        == (60, 4, 1408)
    assert (values["model.moe.shared_experts"], values["model.moe.shared_ffn_size"]) == (1, 5632)
    assert values["model.moe.first_dense_layers"] == 2 and values["model.ffn_size"] == 5632
    assert imported.problems == ()


def test_qwen2_moe_without_the_shared_width_takes_transformers_default():
    imported = hf.read(_doc(model_type="qwen2_moe", num_hidden_layers=24, hidden_size=2048, num_attention_heads=16,
                            moe_intermediate_size=1408, num_experts=60, num_experts_per_tok=4), "config.json")
    values = _values(imported)
    assert (values["model.moe.shared_experts"], values["model.moe.shared_ffn_size"]) == (1, 5632)
    assert "Qwen2MoeConfig default 5632" in _keys(imported)["model.moe.shared_ffn_size"]


@pytest.mark.parametrize("sparsity", [{"decoder_sparse_step": 2}, {"mlp_only_layers": [3]}])
def test_qwen_moe_layers_the_schema_cannot_hold_are_a_problem(sparsity):
    imported = hf.read(_doc(model_type="qwen3_moe", num_hidden_layers=8, hidden_size=256, num_attention_heads=4,
                            moe_intermediate_size=128, num_experts=8, num_experts_per_tok=2, **sparsity),
                       "config.json")
    assert "model.moe.first_dense_layers" not in _values(imported)
    assert len(imported.problems) == 1 and "first_dense_layers" in imported.problems[0]


def test_deepseek_v3_mtp_and_ranks():
    imported = hf.read(_doc(model_type="deepseek_v3", num_hidden_layers=61, hidden_size=7168, num_attention_heads=128,
                            intermediate_size=18432, moe_intermediate_size=2048, n_routed_experts=256,
                            n_shared_experts=1, num_experts_per_tok=8, first_k_dense_replace=3, q_lora_rank=1536,
                            kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                            num_nextn_predict_layers=1, n_group=8, topk_group=4, vocab_size=129280), "config.json")
    values = _values(imported)
    assert values["model.mtp_layers"] == 1 and values["model.mla.q_lora_rank"] == 1536
    assert values["model.moe.first_dense_layers"] == 3 and values["model.moe.shared_experts"] == 1
    assert "model.moe.node_limit" not in values


def _deepseek(**router) -> dict:
    return _doc(model_type="deepseek_v3", num_hidden_layers=4, hidden_size=256, num_attention_heads=4,
                moe_intermediate_size=64, n_routed_experts=8, num_experts_per_tok=2, **router)


def test_deepseek_v3_noaux_tc_is_loss_free():
    """DeepSeek-V3's config.json states topk_method noaux_tc (the expert bias) and no aux_loss_alpha."""
    imported = hf.read(_deepseek(topk_method="noaux_tc", scoring_func="sigmoid"), "config.json")
    assert _values(imported)["model.moe.balance"] == "loss-free"
    assert _keys(imported)["model.moe.balance"] == "topk_method noaux_tc"
    assert imported.problems == ()


def test_a_loss_beside_the_expert_bias_leaves_it_loss_free():
    """DeepSeek-V3 2.1.2 keeps a small sequence-wise loss beside the bias; a file may state its weight."""
    imported = hf.read(_deepseek(topk_method="noaux_tc", aux_loss_alpha=0.0001, seq_aux=True), "config.json")
    assert _values(imported)["model.moe.balance"] == "loss-free"
    assert any(i.startswith("aux_loss_alpha (0.0001: a loss beside the expert bias") for i in imported.ignored)


@pytest.mark.parametrize("router, ignored", [
    ({}, None),  # no key says how the router balances: left to the scenario's default
    ({"topk_method": "greedy"}, "topk_method (greedy without aux_loss_alpha > 0"),
    ({"topk_method": "group_limited_greedy", "aux_loss_alpha": 0.0}, "topk_method (group_limited_greedy without"),
    ({"topk_method": "gready"}, "topk_method ('gready': not greedy"),
    ({"router_aux_loss_coef": 0}, "router_aux_loss_coef (0: no balance loss"),
])
def test_balance_is_stated_only_where_a_key_says_so(router, ignored):
    imported = hf.read(_deepseek(**router), "config.json")
    assert "model.moe.balance" not in _values(imported) and imported.problems == ()
    assert ignored is None or any(i.startswith(ignored) for i in imported.ignored)


def test_group_limited_greedy_with_its_loss_is_aux_loss():
    imported = hf.read(_deepseek(topk_method="group_limited_greedy", aux_loss_alpha=0.003), "config.json")
    assert _values(imported)["model.moe.balance"] == "aux-loss"
    assert _keys(imported)["model.moe.balance"] == "topk_method group_limited_greedy + aux_loss_alpha 0.003"


def test_a_dense_model_states_no_balance():
    imported = hf.read(_doc(model_type="llama", num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                            router_aux_loss_coef=0.02), "config.json")
    assert "model.moe.balance" not in _values(imported) and "router_aux_loss_coef" in imported.ignored


def test_generation_top_k_is_no_moe_setting():
    imported = hf.read(_doc(model_type="llama", num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                            top_k=50, top_p=0.9, temperature=0.7, do_sample=True), "config.json")
    assert not any(path[:2] == ("model", "moe") for path in imported.values)
    assert {i.split(" ")[0] for i in imported.ignored} >= {"top_k", "top_p", "temperature", "do_sample"}


def test_name_or_path_names_the_model():
    imported = hf.read(_doc(_name_or_path="meta-llama/Llama-3.1-8B", architectures=["LlamaForCausalLM"],
                            model_type="llama", num_hidden_layers=32, hidden_size=4096, num_attention_heads=32),
                       "config.json")
    assert _values(imported)["model.name"] == "meta-llama/Llama-3.1-8B"


def test_unknown_family_reads_shapes_and_leaves_the_mlp_unstated():
    imported = hf.read(_doc(model_type="falcon", num_hidden_layers=60, hidden_size=8192, num_attention_heads=128,
                            vocab_size=65024, hidden_act="gelu", tie_word_embeddings=True), "config.json")
    values = _values(imported)
    assert values["model.num_layers"] == 60 and values["model.vocab_size"] == 65024
    assert values["model.tied_embeddings"] is True  # stated, so no family default is needed
    assert not {"model.activation", "model.positions"} & set(values)
    assert imported.problems == ()
    assert any(i.startswith("model_type ('falcon'") and "model.activation" in i for i in imported.ignored)


# --- bad input: problems, never exceptions -----------------------------------------------------------------------

def test_truncated_file_is_a_problem():
    text = (HF / "llama31_70b_config.json").read_text(encoding="utf-8")
    imported = hf.read(text[: len(text) // 2], "config.json")
    assert imported.values == {} and len(imported.problems) == 1 and "JSON" in imported.problems[0]


@pytest.mark.parametrize("text", ["\x00\xff garbage {", "[1, 2, 3]", "null", ""])
def test_garbage_is_a_problem(text):
    imported = hf.read(text, "config.json")
    assert imported.values == {} and len(imported.problems) == 1


def test_bad_values_are_problems_naming_the_key():
    imported = hf.read(_doc(model_type="llama", num_hidden_layers="eighty", hidden_size=-8, num_attention_heads=4.5,
                            tie_word_embeddings="yes", attention_dropout=2, num_local_experts=8,
                            num_experts_per_tok=None, router_aux_loss_coef="0.02"), "config.json")
    values, problems = _values(imported), " | ".join(imported.problems)
    for key in ("num_hidden_layers", "hidden_size", "num_attention_heads", "tie_word_embeddings",
                "attention_dropout", "num_experts_per_tok", "router_aux_loss_coef"):
        assert key in problems
    assert not {"model.num_layers", "model.hidden_size", "model.num_heads", "model.tied_embeddings",
                "model.dropout", "model.moe.top_k", "model.moe.balance"} & set(values)


@pytest.mark.parametrize("router, key", [({"topk_method": "greedy", "aux_loss_alpha": -1}, "aux_loss_alpha"),
                                         ({"topk_method": 3}, "topk_method")])
def test_bad_router_keys_are_problems_naming_the_key(router, key):
    imported = hf.read(_deepseek(**router), "config.json")
    assert [p.split(":")[0] for p in imported.problems] == [key] and "model.moe.balance" not in _values(imported)
