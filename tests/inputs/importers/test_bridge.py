"""The NeMo 2 / Megatron-Bridge recipe importer against real recipes (tests/data/configs/bridge/README.md): each
expected value is the one read in the file by hand, with its line."""

from __future__ import annotations

from pathlib import Path

import pytest

from stepbudget.inputs.importers import bridge

CONFIGS = Path(__file__).resolve().parents[2] / "data" / "configs"
OURS = CONFIGS / "bridge"


def _read(name: str):
    return bridge.read((OURS / name).read_text(), name)


def _values(imported) -> dict[str, object]:
    return {".".join(k): v for k, v in imported.values.items()}


_NEMO2_70B = {  # pretrain_recipe (:146) -> trainer() defaults :62-69, its strategy and ddp :104-122
    "model.name": "Llama 3 70B",  # :58 run.Config(Llama3Config70B)
    "layout.tp": 4, "layout.pp": 4, "layout.virtual_stages": 5, "layout.cp": 2,  # :62, :63, :65, :66
    "layout.schedule": "interleaved-1f1b", "layout.sequence_parallel": True,  # :67
    "cluster.gpus_per_node": 8, "cluster.gpus": 8,  # pretrain_recipe's own defaults :149-150 (1 node) win over :68
    "model.seq_len": 8192, "batch.global_batch_seqs": 512, "layout.micro_batch": 1,  # :192 MockDataModule
    "precision.grads": "fp32", "overlap.dp": "auto",  # :118 grad_reduce_in_fp32, :119 overlap_grad_reduce
    "layout.dp_kind": "zero1",  # :194 distributed_fused_adam_with_cosine_annealing
}
EXPECTED = {
    "nemo2_llama3_70b.py": _NEMO2_70B,
    "nemo2_llama31_405b.py": {
        "model.name": "Llama 3.1 405B",  # :60 run.Config(Llama31Config405B)
        "model.seq_len": 8192,  # :61 conf.seq_length = 8192, and :199
        "layout.tp": 8, "layout.pp": 8, "layout.virtual_stages": 2, "layout.cp": 4,  # :66, :67, :69, :70
        "layout.sequence_parallel": True, "cluster.gpus": 8,  # :71; pretrain_recipe :157-158 (1 node x 8)
        "batch.global_batch_seqs": 512, "layout.micro_batch": 1,  # :199
        "precision.grads": "fp32", "overlap.dp": "auto", "layout.dp_kind": "zero1",  # :126, :127
    },
    "nemo2_mixtral_8x7b.py": {
        "model.name": "Mixtral 8x7B",  # :56 run.Config(MixtralConfig8x7B)
        "layout.tp": 1, "layout.pp": 4, "layout.virtual_stages": 8, "layout.cp": 1,  # :60, :61, :63, :64
        "layout.sequence_parallel": False, "layout.ep": 8,  # :65, :66
        "cluster.gpus": 64, "cluster.gpus_per_node": 8,  # pretrain_recipe :147-148 (8 nodes x 8)
        "model.seq_len": 4096, "batch.global_batch_seqs": 512, "layout.micro_batch": 1,  # :184
    },
    "nemo2_nemotron4_340b.py": {  # parameters :61-80 passed to the imported nemotron_trainer (:143-159)
        "model.name": "nemotron4_340b",  # :52 nemotron_model(version=NAME), :32 NAME = "nemotron4_340b"
        "layout.tp": 8, "layout.pp": 12, "layout.virtual_stages": 8, "layout.cp": 2,  # :61, :62, :64, :65
        "layout.sequence_parallel": True,  # :66
        "cluster.gpus": 768 * 8, "cluster.gpus_per_node": 8,  # :67, :68
        "batch.global_batch_seqs": 2304, "layout.micro_batch": 1, "model.seq_len": 4096,  # :78-80
        "layout.dp_kind": "zero1",  # :168 distributed_fused_adam_with_cosine_annealing
    },
    "bridge_llama3_70b.py": {  # pretrain_config (:69) defaults, through model_config() and ConfigContainer(...)
        "model.name": "Llama 3 70B",  # :59 Llama3ModelProvider70B
        "layout.tp": 4, "layout.pp": 4, "layout.virtual_stages": 5, "layout.cp": 2,  # :81-86
        "layout.sequence_parallel": True,
        "batch.global_batch_seqs": 512, "layout.micro_batch": 1, "model.seq_len": 8192,  # :90-92, :193
        "layout.dp_kind": "zero1", "precision.grads": "fp32", "overlap.dp": "auto",  # :181-185 DDP config
        "overlap.tp": 1.0,  # :220 `if cfg.comm_overlap is None:` (:99 default None) -> :222 tp_comm_overlap=True
    },
    "bridge_gpt3_175b.py": {
        "model.num_layers": 96, "model.hidden_size": 12288, "model.ffn_size": 49152,  # :34-41 GPTModelProvider
        "model.num_heads": 96, "model.seq_len": 2048, "model.dropout": False,
        "layout.tp": 4, "layout.pp": 8, "layout.virtual_stages": 6, "layout.cp": 1,  # :46-51
        "layout.sequence_parallel": True,
        "batch.global_batch_seqs": 2048, "layout.micro_batch": 2,  # :69-70
        "precision.grads": "bf16",  # :102 mixed_precision.grad_reduce_in_fp32 = False
        "overlap.tp": 1.0, "overlap.dp": "auto", "layout.dp_kind": "zero1",  # :116, :129, :132
        "cluster.gpus": 32, "cluster.gpu": "h100-sxm",  # :26 gpt3_175b_pretrain_32gpu_h100_bf16_config
    },
    "bridge_deepseek_v3.py": {  # the first recipe, :105 deepseek_v3_pretrain_1024gpu_h100_bf16_config
        "model.name": "DeepSeek-V3",  # :113 AutoBridge.from_hf_pretrained("deepseek-ai/DeepSeek-V3")
        "layout.tp": 2, "layout.pp": 16, "layout.cp": 1, "layout.ep": 64, "layout.expert_tp": 1,  # :125-132
        "layout.sequence_parallel": True, "model.seq_len": 4096, "model.mtp_layers": 1,  # :133, :134, :137
        "batch.global_batch_seqs": 4096, "layout.micro_batch": 1,  # :165, :166
        "precision.grads": "bf16", "overlap.tp": 0.0,  # :211 mixed_precision grad_reduce_in_fp32=False, :228
        "overlap.dp": "auto", "layout.dp_kind": "zero1",  # :242, :245
        "cluster.gpus": 1024, "cluster.gpu": "h100-sxm",
    },
}
FRAMEWORK = {"nemo2": [n for n in EXPECTED if n.startswith("nemo2_")],
             "megatron-bridge": [n for n in EXPECTED if n.startswith("bridge_")]}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_real_recipe_gives_the_fields_it_states(name):
    imported = _read(name)
    values = _values(imported)
    assert {k: values.get(k) for k in EXPECTED[name]} == EXPECTED[name]
    assert imported.problems == ()
    assert imported.framework == ("nemo2" if name in FRAMEWORK["nemo2"] else "megatron-bridge")


def test_only_the_default_path_is_followed():
    values = _values(_read("nemo2_llama3_70b.py"))
    # performance_mode=False (:151): MegatronCommOverlapCallback(tp_comm_overlap=True) (:230-232) is not applied,
    # so the job overlaps neither TP nor the pipeline and keeps Megatron-Core's buckets, not NeMo 2's performance
    # recipe (frameworks/nemo2.yaml), which fills what a file leaves unstated
    assert (values["overlap.tp"], values["overlap.pp"], values["layout.dp_bucket_params"]) == (0.0, 0.0, None)
    assert _read("nemo2_llama3_70b.py").keys[("overlap", "tp")].startswith("if performance_mode (False")
    bridge = _values(_read("bridge_llama3_70b.py"))
    assert bridge["overlap.tp"] == 1.0  # Megatron-Bridge has no performance_mode: its recipe states its overlap
    mixtral = _values(_read("nemo2_mixtral_8x7b.py"))
    assert mixtral["layout.tp"] == 1  # :233 tensor_model_parallel_size = 8 only in the performance branch
    deepseek = _read("bridge_deepseek_v3.py")
    assert any(i.startswith("deepseek_v3_pretrain_256gpu_h100_bf16_32nodes_config() (another recipe")
               for i in deepseek.ignored)
    assert any(i.startswith("if cfg.model.apply_rope_fusion (not a literal") for i in deepseek.ignored)


def test_none_and_non_literal_values_are_listed_not_stated():
    imported = _read("bridge_deepseek_v3.py")
    assert "layout.virtual_stages" not in _values(imported)  # :129 virtual_pipeline_model_parallel_size = None
    assert "cfg.model.virtual_pipeline_model_parallel_size (None: left to the framework)" in imported.ignored
    assert "cfg.model.recompute_granularity (None: no recompute unless the framework sets one)" in imported.ignored
    gpt = _read("bridge_gpt3_175b.py")
    assert "cfg.optimizer.lr" in gpt.ignored and "cfg.train.train_iters" in gpt.ignored


def test_literals_names_and_calls_resolve_as_the_code_says():
    text = '''from megatron.bridge.training.config import ConfigContainer
import os
TP = 8
def _model(tp=2, cp=1):
    return Provider(tensor_model_parallel_size=tp, context_parallel_size=cp, recompute_granularity="full")
def pretrain_config(seq: int = 4096, fp8: str = "hybrid", nodes=os.environ["NODES"]) -> ConfigContainer:
    cfg = ConfigContainer(model=_model(tp=TP), train=TrainingConfig(global_batch_size=nodes))
    cfg.model.seq_length = seq
    cfg.mixed_precision.fp8 = fp8
    if fp8 is None:
        cfg.model.pipeline_model_parallel_size = 99
    else:
        cfg.model.pipeline_model_parallel_size = 2
    cfg.ddp.use_megatron_fsdp = True
    cfg.model.expert_model_parallel_size = -4
    return cfg
'''
    assert bridge.detect(text, "r.py")
    imported = bridge.read(text, "r.py")
    values = _values(imported)
    assert values["layout.tp"] == 8 and values["layout.cp"] == 1 and values["layout.pp"] == 2
    assert values["layout.recompute"] == "full" and values["precision.gemm"] == "fp8"
    assert values["model.seq_len"] == 4096 and values["layout.dp_kind"] == "fsdp"
    assert "batch.global_batch_seqs" not in values
    assert any(i.startswith("cfg.train.global_batch_size (") for i in imported.ignored)
    assert any(p.startswith("cfg.model.expert_model_parallel_size:") for p in imported.problems)


def test_bad_files_become_problems():
    truncated = (OURS / "nemo2_llama3_70b.py").read_text()[:5000]
    assert bridge.read(truncated, "t.py").problems
    no_recipe = "from nemo.collections.llm import x\n\ndef helper():\n    return 1\n"
    assert bridge.read(no_recipe, "n.py").problems
    deep = "from megatron.bridge import A\ndef pretrain_config():\n    return f(" + "[" * 400 + "]" * 400 + ")\n"
    assert bridge.read(deep, "d.py").problems
    fanout = ("from megatron.bridge import A\ndef f():\n" + "    f()\n" * 50
              + "def pretrain_config():\n    f()\n    return A(tensor_model_parallel_size=2)\n")
    assert _values(bridge.read(fanout, "f.py")) == {"layout.tp": 2}  # 50 self-calls per level: the budget stops it


def test_detect_claims_its_files_and_no_other_format():
    for path in sorted(OURS.glob("*.py")):
        assert bridge.detect(path.read_text(), path.name), path
    others = [p for p in CONFIGS.glob("*/*") if p.parent != OURS and p.is_file()]
    assert others
    for path in others:
        assert not bridge.detect(path.read_text(errors="replace"), path.name), path
    assert not bridge.detect("def pretrain_config():\n    return {}\n", "plain.py")  # imports neither framework


_ROUTER = '''from megatron.bridge.models import DeepSeekModelProvider
def pretrain_config():
    cfg = ConfigContainer(model=DeepSeekModelProvider(num_moe_experts=256, moe_router_topk=8))
{lines}
    return cfg
'''


def _router(*lines: str):
    return bridge.read(_ROUTER.format(lines="\n".join(f"    cfg.model.{line}" for line in lines)), "r.py")


def _moe(imported) -> dict[str, object]:
    return {k: v for k, v in _values(imported).items()
            if k in ("model.moe.balance", "model.moe.capacity_factor", "model.moe.pad_to_capacity")}


def test_router_fields_a_recipe_sets():
    """No recipe under tests/data/configs/bridge sets them (bridge_deepseek_v3.py leaves them to the model provider):
    Megatron-Core's TransformerConfig names, set as a recipe would."""
    bias = _router("moe_router_enable_expert_bias = True", 'moe_router_load_balancing_type = "seq_aux_loss"',
                   "moe_aux_loss_coeff = 1e-4")
    assert _moe(bias) == {"model.moe.balance": "loss-free"} and bias.problems == ()
    # deepseek_v4_bridge.py:488-494: a type Megatron-Core has no name for, beside the bias that decides alone
    v4 = _router("moe_router_enable_expert_bias = True", 'moe_router_load_balancing_type = "noaux_tc"',
                 "moe_aux_loss_coeff = 0.0")
    assert _moe(v4) == {"model.moe.balance": "loss-free"} and v4.problems == ()
    assert bias.keys[("model", "moe", "balance")] == "cfg.model.moe_router_enable_expert_bias"
    aux = _router("moe_router_enable_expert_bias = False", 'moe_router_load_balancing_type = "aux_loss"',
                  "moe_aux_loss_coeff = 1e-2", "moe_expert_capacity_factor = 1.0",
                  "moe_pad_expert_input_to_capacity = True")
    assert _moe(aux) == {"model.moe.balance": "aux-loss", "model.moe.capacity_factor": 1.0,
                         "model.moe.pad_to_capacity": True}
    assert aux.keys[("model", "moe", "balance")] == \
        "cfg.model.moe_router_load_balancing_type aux_loss + cfg.model.moe_aux_loss_coeff 0.01"


def test_router_fields_the_recipe_leaves_to_the_model_class_are_not_defaulted():
    """An unset field is the model provider's (Megatron-Bridge's deepseek_v3_bridge.py:74 turns the expert bias on),
    not Megatron-Core's default: neither a balance nor a missing capacity is concluded from it."""
    loss = _router('moe_router_load_balancing_type = "seq_aux_loss"', "moe_aux_loss_coeff = 1e-4")
    assert _moe(loss) == {} and loss.problems == ()
    assert any(i.startswith("cfg.model.moe_aux_loss_coeff (the balance turns on "
                            "cfg.model.moe_router_enable_expert_bias too") for i in loss.ignored)
    pad = _router("moe_pad_expert_input_to_capacity = True")
    assert _moe(pad) == {} and pad.problems == ()
    assert any(i.startswith("cfg.model.moe_pad_expert_input_to_capacity (the capacity it pads to") for i in pad.ignored)


def test_padding_without_a_capacity_is_a_one_line_problem():
    imported = _router("moe_expert_capacity_factor = None", "moe_pad_expert_input_to_capacity = True")
    assert [p.split(":")[0] for p in imported.problems] == ["cfg.model.moe_pad_expert_input_to_capacity"]
    assert "cfg.model.moe_expert_capacity_factor" in imported.problems[0] and _moe(imported) == {}
    bad = _router('moe_expert_capacity_factor = "1.0"')
    assert [p.split(":")[0] for p in bad.problems] == ["cfg.model.moe_expert_capacity_factor"]
