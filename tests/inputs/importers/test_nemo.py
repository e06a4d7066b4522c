"""The NeMo 1 YAML importer against real NeMo and NeMo-Framework-Launcher configs (tests/data/configs/nemo/README.md):
each expected value is the one read in the file by hand, with its line."""

from __future__ import annotations

from pathlib import Path

import pytest

from stepbudget.inputs.importers import nemo

CONFIGS = Path(__file__).resolve().parents[2] / "data" / "configs"
OURS = CONFIGS / "nemo"


def _read(name: str):
    return nemo.read((OURS / name).read_text(), name)


def _values(imported) -> dict[str, object]:
    return {".".join(k): v for k, v in imported.values.items()}


EXPECTED = {
    "gpt3_175b.yaml": {
        "cluster.gpus": 1024,  # :16 num_nodes 128, :17 devices 8
        "cluster.gpus_per_node": 8,
        "model.num_layers": 96, "model.hidden_size": 12288, "model.num_heads": 96,  # :69, :70, :72
        "model.ffn_size": 4 * 12288,  # :71 ${multiply:4, ${.hidden_size}}
        "model.num_kv_heads": 96,  # :110 num_query_groups null: multi-head attention
        "model.seq_len": 2048,  # :67
        "model.dropout": True,  # :74 hidden_dropout 0.1
        "layout.tp": 4, "layout.pp": 8, "layout.cp": 1,  # :62, :63, :61
        "layout.virtual_stages": 6, "layout.schedule": "interleaved-1f1b",  # :64
        "layout.micro_batch": 1, "batch.global_batch_seqs": 2048,  # :58, :59
        "layout.sequence_parallel": True,  # :106
        "layout.dp_kind": "zero1",  # :169 mcore_distributed_optim
        "overlap.dp": "auto", "overlap.tp": 0.0, "overlap.pp": "auto",  # :171, :149, :108
    },
    "llama3_70b.yaml": {
        "cluster.gpus": 1024, "cluster.gpus_per_node": 8,  # :15 num_nodes 128, :16 devices 8
        "model.num_layers": 80, "model.hidden_size": 8192, "model.ffn_size": 28672,  # :66-68
        "model.num_heads": 64, "model.num_kv_heads": 8, "model.seq_len": 8192,  # :69, :70, :64
        "model.activation": "swiglu", "model.positions": "rotary",  # :86 fast-swiglu, :91 rope
        "model.tied_embeddings": False, "model.dropout": False,  # :95, :73-74
        "layout.tp": 4, "layout.pp": 4, "layout.cp": 2, "layout.virtual_stages": 5,  # :60-63
        "layout.schedule": "interleaved-1f1b",
        "layout.micro_batch": 1, "batch.global_batch_seqs": 2048, "layout.sequence_parallel": True,  # :57, :58, :125
        "layout.dp_kind": "zero1", "overlap.dp": "auto",  # :152, :159
        "overlap.tp": 1.0, "overlap.pp": "auto",  # :139 ub_tp_comm_overlap true, :141 overlap_p2p_comm true
    },
    "mixtral_8x7b.yaml": {
        "cluster.gpus": 64, "cluster.gpus_per_node": 8,  # :7 num_nodes 8, :8 devices 8
        "model.num_layers": 32, "model.hidden_size": 4096, "model.ffn_size": 14336, "model.num_heads": 32,  # :63-66
        "model.num_kv_heads": 8, "model.seq_len": 4096,  # :98, :61
        "model.moe.num_experts": 8, "model.moe.top_k": 2,  # :92, :91
        "model.moe.expert_ffn_size": 14336,  # no moe_ffn_hidden_size: Megatron-Core uses ffn_hidden_size
        "model.moe.balance": "aux-loss",  # :53 moe_aux_loss_coeff 0.01 on Megatron-Core's default aux_loss
        "model.moe.capacity_factor": 1.0, "model.moe.pad_to_capacity": True,  # :52, :51
        "layout.tp": 1, "layout.pp": 4, "layout.ep": 8, "layout.virtual_stages": 8,  # :57-60
        "layout.micro_batch": 1, "batch.global_batch_seqs": 256,  # :54, :55
        "precision.grads": "bf16",  # :153 grad_sync_dtype bf16
        "overlap.tp": 0.0, "overlap.dp": "auto",  # :139, :151
    },
    "megatron_gpt_config.yaml": {
        "cluster.gpus": 1, "cluster.gpus_per_node": 1,  # :8-9
        "model.num_layers": 12, "model.hidden_size": 768, "model.ffn_size": 3072, "model.num_heads": 12,  # :92-95
        "model.seq_len": 512, "model.activation": "gelu", "model.positions": "learned",  # :90, :111, :116
        "model.tied_embeddings": True, "model.dropout": True,  # :119, :98
        "layout.tp": 1, "layout.pp": 1, "layout.ep": 1, "layout.micro_batch": 4,  # :84, :85, :87, :81
        "batch.global_batch_seqs": 8,  # :82
        "layout.dp_kind": "ddp",  # :306 fused_adam: not a distributed optimizer
    },
    "megatron_llama_config.yaml": {
        "cluster.gpus": 1,  # :3-4
        "model.num_layers": 32, "model.hidden_size": 4096, "model.ffn_size": 11008, "model.num_heads": 32,  # :58-61
        "model.num_kv_heads": 32, "model.seq_len": 4096, "model.activation": "swiglu",  # :88, :56, :77
        "model.positions": "rotary", "model.tied_embeddings": False, "model.dropout": False,  # :82, :85, :64
    },
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_real_file_gives_the_fields_it_states(name):
    imported = _read(name)
    values = _values(imported)
    assert {k: values.get(k) for k in EXPECTED[name]} == EXPECTED[name]
    assert imported.problems == ()
    assert imported.framework == "nemo" and imported.format == nemo.FORMAT


def test_unset_and_null_keys_are_left_to_the_recipe_and_listed():
    imported = _read("megatron_gpt_config.yaml")
    values = _values(imported)
    for unstated in ("layout.virtual_stages", "layout.recompute", "layout.cp", "precision.gemm", "overlap.dp"):
        assert unstated not in values
    assert "model.virtual_pipeline_model_parallel_size (null: left to NeMo)" in imported.ignored
    assert "model.optim.lr" in imported.ignored and "exp_manager.name" in imported.ignored
    assert any(i.startswith("trainer.precision (bf16") for i in imported.ignored)


def test_fp32_trainer_precision_is_listed_not_stated():
    imported = _read("megatron_llama_config.yaml")  # :6 precision: 32
    assert any(i.startswith("trainer.precision (32") for i in imported.ignored)
    assert "precision.gemm" not in _values(imported)


def test_launcher_interpolations_under_training_resolve_and_outside_ones_are_ignored():
    text = ("trainer: {devices: 8, num_nodes: 2}\n"
            "model:\n  num_layers: 4\n  encoder_seq_length: ${training.model.max}\n  max: 4096\n"
            "  hidden_size: ${data_dir}\n  global_batch_size: ${multiply:${trainer.devices}, ${.micro_batch_size}}\n"
            "  micro_batch_size: 2\n  ffn_hidden_size: ${divide_floor:${..model.max}, 3}\n"
            "  fp8: true\n  activations_checkpoint_granularity: selective\n")
    imported = nemo.read(text, "x.yaml")
    values = _values(imported)
    assert values["model.seq_len"] == 4096 and values["batch.global_batch_seqs"] == 16
    assert values["model.ffn_size"] == 1365 and values["precision.gemm"] == "fp8"
    assert values["layout.recompute"] == "selective" and values["cluster.gpus"] == 16
    assert "model.hidden_size" not in values
    assert any(i.startswith("model.hidden_size ('${data_dir}': data_dir is not in this file") for i in imported.ignored)


def test_bad_values_and_bad_files_become_problems():
    bad = nemo.read("trainer: {devices: -1}\nmodel:\n  num_layers: many\n  activation: squared-relu\n"
                    "  loop: ${.loop}\n  hidden_size: ${.loop}\n", "x.yaml")
    assert any(p.startswith("model.num_layers:") for p in bad.problems)
    assert any(p.startswith("model.activation:") for p in bad.problems)
    assert any(i.startswith("model.hidden_size ('${.loop}': interpolations loop or nest past 16 levels")
               for i in bad.ignored)
    assert any(i.startswith("trainer.devices (-1") for i in bad.ignored) and "cluster.gpus_per_node" not in _values(bad)
    chain = "\n".join(["trainer: {devices: 1}", "model:", "  l0: x"]
                      + [f"  l{i}: ${{.l{i - 1}}}${{.l{i - 1}}}${{.l{i - 1}}}" for i in range(1, 40)]
                      + ["  hidden_size: ${.l39}"])
    assert "model.hidden_size" not in _values(nemo.read(chain, "c.yaml"))  # 3**39 copies: stopped at 16 levels
    truncated = (OURS / "llama3_70b.yaml").read_text()[:1500] + "\n  - [unclosed"
    assert nemo.read(truncated, "t.yaml").problems
    assert nemo.read("- just\n- a list\n", "l.yaml").problems


def test_detect_claims_its_files_and_no_other_format():
    for path in sorted(OURS.glob("*.yaml")):
        assert nemo.detect(path.read_text(), path.name), path
    others = [p for p in CONFIGS.glob("*/*") if p.parent != OURS and p.is_file()]
    assert others
    for path in others:
        assert not nemo.detect(path.read_text(errors="replace"), path.name), path
    assert not nemo.detect("model: {num_layers: 4}\n", "scenario.yaml")  # a scenario has no trainer section


def test_pipeline_overlap_needs_the_interleaved_schedule():
    """overlap_p2p_comm overlaps the sends of an interleaved pipeline only (Megatron-Core schedules.py)."""
    doc = ("trainer: {devices: 8, num_nodes: 1}\nmodel:\n  num_layers: 8\n  hidden_size: 1024\n"
           "  pipeline_model_parallel_size: 2\n  overlap_p2p_comm: true\n  virtual_pipeline_model_parallel_size: VP\n")
    plain = {".".join(k): v for k, v in nemo.read(doc.replace("VP", "null"), "a.yaml").values.items()}
    interleaved = {".".join(k): v for k, v in nemo.read(doc.replace("VP", "2"), "a.yaml").values.items()}
    assert (plain["overlap.pp"], interleaved["overlap.pp"]) == (0.0, "auto")


def test_router_keys_say_where_balance_and_capacity_come_from():
    keys = {".".join(k): v for k, v in _read("mixtral_8x7b.yaml").keys.items()}
    assert keys["model.moe.balance"] == "model.moe_aux_loss_coeff 0.01 (load-balancing type absent: aux_loss, " \
                                        "Megatron-Core's default)"
    assert keys["model.moe.capacity_factor"] == "model.moe_expert_capacity_factor"
    assert keys["model.moe.pad_to_capacity"] == "model.moe_pad_expert_input_to_capacity"


_MOE = "trainer: {devices: 8, num_nodes: 1}\nmodel:\n  num_layers: 4\n  hidden_size: 64\n  num_moe_experts: 8\n"


def test_expert_bias_is_loss_free():
    """A DeepSeek-V3-style router: the expert bias beside a small sequence-wise loss (names as TransformerConfig's)."""
    imported = nemo.read(_MOE + "  moe_router_enable_expert_bias: true\n  moe_router_score_function: sigmoid\n"
                                "  moe_router_load_balancing_type: seq_aux_loss\n  moe_aux_loss_coeff: 1.0e-4\n",
                         "x.yaml")
    assert _values(imported)["model.moe.balance"] == "loss-free" and imported.problems == ()
    assert any(i.startswith("model.moe_router_load_balancing_type seq_aux_loss + model.moe_aux_loss_coeff 0.0001 "
                            "(beside the expert bias") for i in imported.ignored)


@pytest.mark.parametrize("router, problem", [
    ("  moe_pad_expert_input_to_capacity: true\n", "model.moe_pad_expert_input_to_capacity: padding needs a capacity"),
    ("  moe_pad_expert_input_to_capacity: true\n  moe_expert_capacity_factor: null\n",
     "model.moe_pad_expert_input_to_capacity: padding needs a capacity"),
    ("  moe_expert_capacity_factor: ample\n", "model.moe_expert_capacity_factor: 'ample' is not a number"),
    ("  moe_router_enable_expert_bias: 1\n", "model.moe_router_enable_expert_bias: 1 is not true or false"),
])
def test_router_values_the_tool_cannot_take_are_one_line_problems(router, problem):
    imported = nemo.read(_MOE + router, "x.yaml")
    assert len(imported.problems) == 1 and imported.problems[0].startswith(problem)
    assert not {"model.moe.pad_to_capacity", "model.moe.capacity_factor", "model.moe.balance"} & set(_values(imported))


def test_a_dense_model_reads_no_router_key():
    imported = nemo.read("trainer: {devices: 1}\nmodel:\n  num_layers: 4\n  moe_aux_loss_coeff: 0.01\n", "x.yaml")
    assert "model.moe.balance" not in _values(imported) and "model.moe_aux_loss_coeff" in imported.ignored
