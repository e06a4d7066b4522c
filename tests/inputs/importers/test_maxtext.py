"""importers/maxtext.py: real MaxText YAML configs (the defaults file, model configs, run configs) read into the
scenario's schema, each value checked against the file's own line (tests/data/configs/maxtext/README.md says where
each file comes from); the mesh's ici x dcn degrees on small documents; and bad files turned into problems, never
exceptions."""

from pathlib import Path

import pytest

from stepbudget.inputs.importers import maxtext

DATA = Path(__file__).parents[2] / "data" / "configs"
OURS = DATA / "maxtext"


def _read(name: str):
    return maxtext.read((OURS / name).read_text(encoding="utf-8"), name)


def _values(imported) -> dict:
    return {".".join(path): value for path, value in imported.values.items()}


def _keys(imported) -> dict:
    return {".".join(path): key for path, key in imported.keys.items()}


def _doc(text: str):
    return maxtext.read(text, "run.yml")


LLAMA2_70B = {
    "model.num_layers": 80,  # line 21
    "model.hidden_size": 8192,  # line 17
    "model.num_heads": 64,  # line 18
    "model.num_kv_heads": 8,  # line 19
    "model.head_dim": 128,  # line 22
    "model.ffn_size": 28672,  # line 20
    "model.activation": "swiglu",  # line 23: ["silu","linear"], gated
    "model.vocab_size": 32000,  # line 24
    "model.tied_embeddings": False,  # line 25
}

EXPECTED = {
    "base.yml": {
        "model.num_layers": 16,  # line 181
        "model.hidden_size": 2048,  # line 176
        "model.num_heads": 16,  # line 177
        "model.num_kv_heads": 16,  # line 178
        "model.head_dim": 128,  # line 182
        "model.ffn_size": 7168,  # line 179
        "model.activation": "swiglu",  # line 187
        "model.tied_embeddings": False,  # line 190
        "model.vocab_size": 32000,  # line 712
        "model.seq_len": 2048,  # line 880
        "model.dropout": False,  # line 935 enable_dropout true, line 189 dropout_rate 0.0
        "layout.recompute": "full",  # line 358
        "precision.grads": "fp32",  # line 111
        "precision.activations": "bf16",  # line 114
        "precision.params": "fp32",  # line 174
        "precision.gemm": "bf16",  # line 122: quantization ""
        # lines 659-684: every tier 1 but dcn_data (-1) and ici_fsdp (-1)
        "layout.tp": 1, "layout.cp": 1, "layout.pp": 1, "layout.ep": 1,
        "layout.dp_kind": "fsdp",  # ici_fsdp -1 fills the rest: the weights are sharded
        "layout.micro_batch": 12,  # line 731: 12.0 per device, TP x CP 1
    },
    "llama2-70b.yml": LLAMA2_70B,
    "mixtral-8x7b.yml": {
        "model.num_layers": 32,  # line 23
        "model.hidden_size": 4096,  # line 18
        "model.num_heads": 32,  # line 19
        "model.num_kv_heads": 8,  # line 20
        "model.head_dim": 128,  # line 24
        "model.ffn_size": 14336,  # line 21
        "model.activation": "swiglu",  # line 25
        "model.vocab_size": 32000,  # line 26
        "model.dropout": False,  # line 27
        "model.tied_embeddings": False,  # line 28
        "model.moe.num_experts": 8,  # line 30
        "model.moe.top_k": 2,  # line 31
        "model.moe.expert_ffn_size": 14336,  # line 22
    },
    "deepseek3-671b.yml": {
        "model.hidden_size": 7168,  # line 20
        "model.num_heads": 128,  # line 21
        "model.num_kv_heads": 128,  # line 22
        "model.ffn_size": 18432,  # line 23
        "model.num_layers": 61,  # line 25
        "model.activation": "swiglu",  # line 27
        "model.vocab_size": 129280,  # line 28
        "model.dropout": False,  # line 29
        "model.tied_embeddings": False,  # line 30
        "model.moe.expert_ffn_size": 2048,  # line 24
        "model.moe.first_dense_layers": 3,  # line 26
        "model.moe.num_experts": 256,  # line 32
        "model.moe.top_k": 8,  # line 33
        "model.moe.shared_experts": 1,  # line 34
        "model.mla.q_lora_rank": 1536,  # line 41 (attention_type "mla", line 40)
        "model.mla.kv_lora_rank": 512,  # line 42
        "model.mla.qk_nope_head_dim": 128,  # line 43
        "model.mla.qk_rope_head_dim": 64,  # line 44
        "model.mla.v_head_dim": 128,  # line 45
    },
    "gpt3-175b.yml": {
        "model.hidden_size": 12288,  # line 17
        "model.num_heads": 96,  # line 18
        "model.num_kv_heads": 96,  # line 19
        "model.ffn_size": 49152,  # line 20
        "model.num_layers": 96,  # line 21
        "model.head_dim": 128,  # line 22
        "model.positions": "learned",  # line 23: trainable_position_size 16384
        "model.activation": "gelu",  # line 24: ["gelu"], not gated
        "model.vocab_size": 50304,  # line 25
        "model.dropout": False,  # line 26
        "model.tied_embeddings": True,  # line 27: logits_via_embedding
    },
    "gpu_llama3_70b.yml": {
        "model.catalog": "llama3-70b",  # line 18: model_name, the catalog row of configs/models/llama3-70b.yml
        "layout.micro_batch": 4,  # line 23 (TP and CP: base.yml's 1)
        "model.seq_len": 8192,  # line 24
        "layout.recompute": "full",  # line 26
    },
    "gpu_mixtral_8x7b_2024-12.yml": {
        "model.hidden_size": 4096,  # line 17
        "model.num_heads": 32,  # line 18
        "model.num_kv_heads": 8,  # line 19
        "model.ffn_size": 14336,  # line 20
        "model.moe.expert_ffn_size": 14336,  # line 20: no base_moe_mlp_dim, experts took base_mlp_dim
        "model.num_layers": 32,  # line 21
        "model.head_dim": 128,  # line 22
        "model.activation": "swiglu",  # line 23
        "model.vocab_size": 32000,  # line 24
        "model.dropout": False,  # line 25
        "model.tied_embeddings": False,  # line 26
        "model.moe.num_experts": 8,  # line 28
        "model.moe.top_k": 2,  # line 29
        "layout.tp": 1,  # line 33 (dcn_tensor: base.yml's 1)
        "layout.dp_kind": "fsdp",  # line 34: ici_expert -1 fills the rest and shards the weights
        "layout.micro_batch": 8,  # line 41: 8.0 per device, TP x CP 1
        "model.seq_len": 4096,  # line 42
        "layout.recompute": "selective",  # line 44: minimal recomputes the attention core
    },
}


def test_the_folder_holds_the_listed_files():
    assert sorted(p.name for p in OURS.iterdir() if p.name != "README.md") == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_real_file_states_what_it_holds(name):
    got = _read(name)
    assert got.format == "MaxText YAML" and got.framework == "maxtext"
    assert got.base == (name == "base.yml")
    assert _values(got) == EXPECTED[name]
    assert got.problems == ()


def test_the_keys_name_the_files_own_spelling():
    keys = _keys(_read("gpu_mixtral_8x7b_2024-12.yml"))
    assert keys["layout.tp"] == "ici_tensor_parallelism"
    assert keys["layout.micro_batch"] == "per_device_batch_size x tp 1 x cp 1"
    assert keys["model.moe.expert_ffn_size"] == "base_mlp_dim (base_moe_mlp_dim absent)"
    assert keys["layout.recompute"].startswith("remat_policy minimal (")


def test_the_rest_is_ignored_with_reasons_where_a_value_means_something():
    run = _read("gpu_mixtral_8x7b_2024-12.yml")
    assert {"hardware", "steps", "attention", "megablox", "rope_max_timescale"} <= set(run.ignored)
    assert any(i.startswith("ici_expert_parallelism (-1: the devices left over") for i in run.ignored)
    assert any(i.startswith("dcn_data_parallelism (-1: the devices left over") for i in run.ignored)
    base = _read("base.yml")
    assert "q_lora_rank (attention_type is 'global', not mla)" in base.ignored
    assert "num_experts (num_experts 1: a dense model)" in base.ignored
    assert len(base.ignored) > 600  # every other key of the defaults file, once each


# --- detection ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_detect_claims_its_files(name):
    assert maxtext.detect((OURS / name).read_text(encoding="utf-8"), name)


def test_detect_claims_no_other_file():
    others = [p for p in sorted(DATA.glob("*/*")) if p.is_file() and p.parent != OURS or p.name == "README.md"]
    assert any(p.parent.name == "nemo" for p in others)  # NeMo's YAML is the nearest other format
    for path in others:
        assert not maxtext.detect(path.read_text(encoding="utf-8", errors="replace"), path.name), path


def test_detect_leaves_a_scenario_yaml_alone():
    assert not maxtext.detect("model:\n  catalog: llama3-70b\n  seq_len: 8192\nlayout:\n  tp: 8\n", "s.yaml")
    assert maxtext.detect("base_config: base.yml\nsteps: 10\n", "r.yml")


# --- the mesh and the run's settings on small documents ----------------------------------------------------------


def test_dp_is_the_batch_axes_sharded_over_all_but_data():
    got = _doc("ici_fsdp_parallelism: 4\nici_tensor_parallelism: 2\nici_expert_parallelism: 2\n"
               "dcn_data_parallelism: 8\nper_device_batch_size: 0.5\n")
    assert _values(got) == {"layout.tp": 2, "layout.ep": 2, "layout.dp": 64, "layout.dp_kind": "fsdp",
                            "layout.dp_replicas": 8,
                            "layout.micro_batch": 1}  # 0.5 per device x TP 2: one sequence per TP group
    assert _keys(got)["layout.dp"].startswith("dcn_data_parallelism x ici_fsdp_parallelism x ici_expert")


def test_replicated_data_alone_is_ddp_or_zero1():
    plain = _values(_doc("ici_fsdp_parallelism: 1\nici_data_parallelism: 8\ndcn_data_parallelism: 2\n"))
    assert plain == {"layout.dp": 16, "layout.dp_kind": "ddp"}
    zero1 = _values(_doc("ici_fsdp_parallelism: 1\nici_data_parallelism: 8\nshard_optimizer_over_data: true\n"))
    assert zero1["layout.dp_kind"] == "zero1" and "layout.dp" not in zero1  # dcn_data: base.yml's -1


def test_a_pipeline_splits_the_batch_into_its_micro_batches():
    got = _values(_doc("ici_pipeline_parallelism: 4\nper_device_batch_size: 2\nnum_pipeline_microbatches: 8\n"))
    assert got == {"layout.pp": 4, "layout.micro_batch": 1}  # a DP rank's 2 x 4 sequences over 8 micro-batches
    default = _values(_doc("ici_pipeline_parallelism: 4\nper_device_batch_size: 2\n"))
    assert default["layout.micro_batch"] == 2  # base.yml: one micro-batch per stage


def test_a_fraction_of_a_sequence_is_no_micro_batch():
    got = _doc("per_device_batch_size: 0.25\n")
    assert "layout.micro_batch" not in _values(got)
    assert any(i.startswith("per_device_batch_size (0.25 x tp 1") for i in got.ignored)


@pytest.mark.parametrize(("policy", "recompute"), [("full", "full"), ("none", "full"), ("minimal", "selective"),
                                                    ("minimal_with_context", "none"),
                                                    ("save_dot_except_mlpwi", "selective-op"),
                                                    ("save_qkv_proj", "full")])
def test_remat_policies(policy, recompute):
    assert _values(_doc(f"remat_policy: {policy}\n"))["layout.recompute"] == recompute


def test_fp8_quantization_and_unmodeled_axes():
    got = _doc('quantization: "fp8"\nici_diloco_parallelism: 2\nremat_policy: custom\n')
    assert _values(got) == {"precision.gemm": "fp8"}
    assert [p.split(":")[0] for p in got.problems] == ["ici_diloco_parallelism", "remat_policy"]
    assert _doc('quantization: "int8"\n').problems[0].startswith("quantization: 'int8'")


# --- bad files ---------------------------------------------------------------------------------------------------


def test_truncated_and_garbage_files_are_problems_not_exceptions():
    text = (OURS / "deepseek3-671b.yml").read_text(encoding="utf-8")
    cut = _doc(text[: text.index('mlp_activations: ["silu"') + 20])  # an unclosed flow sequence
    assert cut.values == {} and cut.problems[0].startswith("run.yml: not valid YAML")
    assert _doc("- just\n- a list\n").problems == ("run.yml: expected a mapping of MaxText keys; check the file",)
    assert _doc("a: &a [*a]\n").problems
    wrong = _doc("base_emb_dim: wide\nici_tensor_parallelism: 0\nper_device_batch_size: -1\nmlp_activations: 3\n"
                 "num_experts: 8\nbase_moe_mlp_dim: -1\nmax_target_length: 1.5\n")
    assert len(wrong.problems) == 6 and set(_values(wrong)) == {"model.moe.num_experts"}


@pytest.mark.parametrize("name", ["llama2-70b.yml", "deepseek3-671b.yml", "gpt3-175b.yml", "mixtral-8x7b.yml"])
def test_a_model_config_is_a_valid_model_with_a_sequence_length(name):
    from stepbudget.inputs.model import Model

    stated = _values(_read(name))
    tree: dict = {"seq_len": 4096}
    for dotted, value in stated.items():
        *parents, leaf = dotted.split(".")[1:]
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    if "mla" in tree:
        tree["head_dim"] = 128  # base.yml line 182: the file leaves it to the defaults
    assert Model(**tree).num_layers == stated["model.num_layers"]
