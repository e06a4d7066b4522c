"""importers/neox.py: real GPT-NeoX configs read into the model, layout and precision fields, each value checked
against the file's own line (tests/data/configs/neox/README.md says where each file comes from); NeoX's MLP width
rule and defaults; DeepSpeed turning overlap off under a pipeline; bad files turned into problems, never
exceptions."""

import json
from pathlib import Path

import pytest

from stepbudget.inputs.importers import neox

DATA = Path(__file__).parents[2] / "data" / "configs"
MINE = DATA / "neox"


def _read(name: str):
    return neox.read((MINE / name).read_text(encoding="utf-8"), name)


def _values(imported) -> dict:
    return {".".join(path): value for path, value in imported.values.items()}


def _keys(imported) -> dict:
    return {".".join(path): key for path, key in imported.keys.items()}


FP16 = {"precision.params": "fp16", "precision.activations": "fp16", "precision.grads": "fp16"}

# --- the real files: every value stated, as read from the file by hand -----------------------------------------

EXPECTED = {
    "20B.yml": {
        "layout.pp": 4,  # line 16
        "layout.tp": 2,  # line 17
        "model.source": "GPT-NeoX YAML (20B.yml)",
        "model.num_layers": 44,  # line 20
        "model.hidden_size": 6144,  # line 21
        "model.num_heads": 64,  # line 22
        "model.seq_len": 2048,  # line 23
        "model.activation": "gelu",  # no "activation": NeoX's default gelu
        "model.ffn_size": 4 * 6144,  # no "intermediate_size": 4h
        "model.positions": "rotary",  # line 26
        "model.tied_embeddings": False,  # line 28: "no_weight_tying": true
        "model.parallel_block": True,  # line 29: "gpt_j_residual": true
        "layout.flash_attention": False,  # no "attention_config": every layer global
        "model.dropout": False,  # lines 78-79: 0 and 0
        "layout.recompute": "full",  # line 70
        "layout.micro_batch": 4,  # line 64
        "layout.dp_kind": "zero1",  # line 54
        "overlap.dp": 0.0,  # line 57 "overlap_comm": True, but line 16's pipeline turns it off
        "layout.dp_bucket_params": 1260000000.0,  # line 59
        **FP16,  # line 84: fp16 "enabled": true
    },
    "pythia_6-9B.yml": {
        "layout.pp": 1,  # line 2
        "layout.tp": 2,  # line 3
        "model.source": "GPT-NeoX YAML (pythia_6-9B.yml)",
        "model.num_layers": 32,  # line 5
        "model.hidden_size": 4096,  # line 6
        "model.num_heads": 32,  # line 7
        "model.seq_len": 2048,  # line 8
        "model.activation": "gelu",
        "model.ffn_size": 16384,
        "model.positions": "rotary",  # line 11
        "model.tied_embeddings": False,  # line 13
        "model.parallel_block": True,  # line 14
        "layout.flash_attention": True,  # line 17: [[["flash"], 32]]
        "layout.attention_kernel": "flash-attention-2",
        "model.dropout": False,  # lines 56-57
        "layout.recompute": "full",  # line 49
        "layout.micro_batch": 8,  # line 45
        "layout.dp_kind": "zero1",  # line 35
        "overlap.dp": 0.0,  # line 38 true; line 2's pipe_parallel_size 1 still builds a PipelineModule
        "layout.dp_bucket_params": 1260000000.0,  # line 40
        **FP16,  # line 61
    },
    "llama_7B.yml": {
        "layout.pp": 1,  # line 2
        "layout.tp": 1,  # line 3
        "model.source": "GPT-NeoX YAML (llama_7B.yml)",
        "model.num_layers": 32,  # line 7
        "model.hidden_size": 4096,  # line 8
        "model.num_heads": 32,  # line 10
        "model.seq_len": 2048,  # line 11
        "model.activation": "swiglu",  # line 26
        "model.ffn_size": 11008,  # line 9 32768 x 2/3 / 2 rounded up to line 27's 256: LLaMA-7B's width
        "model.positions": "rotary",  # line 13
        "model.tied_embeddings": False,  # line 15
        "model.parallel_block": False,  # line 16
        "layout.flash_attention": False,  # no "attention_config"
    },
    "llama_train_config.yml": {  # the training half of llama/: no model, so no model defaults
        "layout.recompute": "full",  # line 37
        "model.dropout": False,  # lines 45-46
        "layout.micro_batch": 4,  # line 33
        "layout.dp_kind": "zero1",  # line 23
        "overlap.dp": "auto",  # line 26: no pipe_parallel_size in this file
        "layout.dp_bucket_params": 500000000.0,  # line 28
        **FP16,  # line 51
    },
    "mistral_7B.yml": {  # line 9's intermediate_size is a problem: no ffn_size
        "layout.pp": 1,  # line 2
        "layout.tp": 1,  # line 3
        "model.source": "GPT-NeoX YAML (mistral_7B.yml)",
        "model.num_layers": 32,  # line 7
        "model.hidden_size": 4096,  # line 8
        "model.num_heads": 32,  # line 10
        "model.num_kv_heads": 8,  # line 11
        "model.seq_len": 8192,  # line 14
        "model.activation": "swiglu",  # line 36
        "model.positions": "rotary",  # line 17
        "model.tied_embeddings": False,  # line 20
        "model.parallel_block": False,  # line 21
        "layout.flash_attention": True,  # line 30
        "layout.attention_kernel": "flash-attention-2",
    },
    "125M-json.yml": {
        "layout.pp": 1,  # line 2
        "layout.tp": 1,  # line 3
        "model.source": "GPT-NeoX YAML (125M-json.yml)",
        "model.num_layers": 12,  # line 5
        "model.hidden_size": 768,  # line 6
        "model.num_heads": 12,  # line 7
        "model.seq_len": 2048,  # line 8
        "model.activation": "gelu",
        "model.ffn_size": 3072,
        "model.positions": "rotary",  # line 11
        "model.tied_embeddings": False,  # line 12
        "model.parallel_block": False,  # line 13
        "layout.flash_attention": False,  # no "attention_config"
        "model.dropout": False,  # lines 54-55
        "layout.recompute": "full",  # line 47
        "layout.micro_batch": 4,  # line 44
        "layout.dp_kind": "zero1",  # line 35
        "overlap.dp": 0.0,  # line 38, off under line 2's pipeline
        "layout.dp_bucket_params": 500000000.0,  # line 40
        **FP16,  # line 58
    },
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_file_values(name):
    imported = _read(name)
    assert _values(imported) == EXPECTED[name]
    assert imported.format == "GPT-NeoX YAML" and imported.framework == "gpt-neox"
    assert imported.problems == () or name == "mistral_7B.yml"


def test_mistral_width_cannot_be_built():
    # line 9: 14336 x 2/3 = 9557 -> up projection 9558 (a multiple of 2), down projection 9557 // 2 = 4778
    (problem,) = _read("mistral_7B.yml").problems
    assert problem.startswith("intermediate_size: 14336 with swiglu and mlp_multiple_of 1 builds a 9558-wide up "
                              "projection and a 4778-wide down projection")


def test_keys_name_absent_defaults_and_accumulation():
    imported = _read("20B.yml")
    keys = _keys(imported)
    assert keys["model.activation"] == "activation absent (NeoX default gelu)"
    assert keys["model.ffn_size"] == "intermediate_size absent (4 x hidden_size)"
    assert "batch.global_batch_seqs" not in _values(imported)  # lines 64-65: 4 x 32 x DP, and DP is not in the file
    assert any(i.startswith("gradient_accumulation_steps (32: the global batch is micro batch x 32 x DP")
               for i in imported.ignored)
    assert "tensorboard-dir" in imported.ignored  # line 110: the file's own spelling


def test_detect_claims_its_own_files():
    for path in MINE.glob("*.yml"):
        assert neox.detect(path.read_text(encoding="utf-8"), path.name), path.name


def test_detect_claims_no_other_file():
    others = [p for p in DATA.glob("*/*") if p.is_file() and p.parent != MINE] + [MINE / "README.md"]
    assert len(others) > 10
    for path in others:
        assert not neox.detect(path.read_text(encoding="utf-8", errors="replace"), path.name), path


# --- NeoX's semantics on small documents --------------------------------------------------------------------------

def test_dashes_read_as_underscores_and_no_pipeline():
    text = "{\n  'pipe-parallel-size': 0,\n  'model-parallel-size': 4,\n  'num-layers': 2,\n  'hidden-size': 64,\n}\n"
    imported = neox.read(text, "x.yml")
    values, keys = _values(imported), _keys(imported)
    assert values["layout.pp"] == 1 and keys["layout.pp"] == "pipe-parallel-size (0: no pipeline)"
    assert values["layout.tp"] == 4 and values["model.num_layers"] == 2 and values["model.ffn_size"] == 256


def test_gated_width_and_precision_and_global_attention():
    doc = {"num_layers": 2, "hidden_size": 4096, "activation": "geglu", "attention_config": [[["global"], 2]],
           "precision": "bfloat16", "pos_emb": "sinusoidal", "sequence_parallel": True, "global_num_gpus": 64}
    values = _values(neox.read(json.dumps(doc), "x.yml"))
    # 4h = 16384 -> x 2/3 = 10922 -> halved 5461 (multiple_of 1); the up projection 10922 = 2 x 5461
    assert values["model.activation"] == "swiglu" and values["model.ffn_size"] == 5461
    assert values["layout.flash_attention"] is False and values["model.positions"] == "learned"
    assert values["precision.params"] == "bf16" and values["layout.sequence_parallel"] is True
    assert values["cluster.gpus"] == 64 and values["model.tied_embeddings"] is True


@pytest.mark.parametrize("text", ["{'num_layers': 2, 'hidden_size': [", "- 1\n- 2\n", "",
                                  "{num_layers: 2, num_layers: 3}"])
def test_broken_files_are_problems_not_exceptions(text):
    imported = neox.read(text, "x.yml")
    assert imported.problems and imported.values == {}


def test_bad_values_are_problems():
    doc = {"num_layers": "many", "hidden_size": 64, "activation": "tanh", "pos_emb": "spiral",
           "checkpoint_activations": "yes", "zero_optimization": {"stage": 7}}
    problems = neox.read(json.dumps(doc), "x.yml").problems
    assert [p.split(":")[0] for p in problems] == ["checkpoint_activations", "num_layers", "activation", "pos_emb",
                                                  "zero_optimization.stage"]


def test_every_file_here_is_checked():
    assert {p.name for p in MINE.iterdir() if p.name != "README.md"} == set(EXPECTED)
