"""GPT-NeoX's YAML configs (``configs/20B.yml``): the model's shapes, the pipeline and tensor degrees, activation
checkpointing, and the DeepSpeed keys NeoX hands to DeepSpeed's engine (read as deepspeed.py reads them).

NeoX merges several YAML files into one job (a model file and a training file: ``llama/7B.yml`` with
``llama/train_config.yml``), so an absent key is read as NeoX's default only where that default shapes the model
(activation, MLP width, positions, tied embeddings, GPT-J residual, attention kind) and the file is the model's
(it states ``num_layers``); every other absence is left to the other files and the framework recipe.

Semantics from GPT-NeoX (github.com/EleutherAI/gpt-neox, commit ea7aefd8f8e183256992d9fede4d7c71a46d67a5):
megatron/neox_arguments/neox_args.py, arguments.py, megatron/model/transformer.py, activations.py.
"""

from __future__ import annotations

from typing import Any

import yaml

from stepbudget.inputs.documents import read_yaml
from stepbudget.inputs.importers import deepspeed
from stepbudget.inputs.importers._reading import Imported, Reading, integer, number
from stepbudget.inputs.importers.deepspeed import Taken, count

FORMAT = "GPT-NeoX YAML"

MARKERS = frozenset({"pipe_parallel_size", "model_parallel_size", "num_layers", "checkpoint_activations",
                     "synchronize_each_layer", "data_impl", "lr_decay_style", "checkpoint_factor"})
"""Top-level keys (dashes read as underscores) that only NeoX's arguments hold (neox_args.py)."""
OTHERS = frozenset({"model_type", "architectures", "trainer", "model"})
"""Keys of other formats' mappings: a Hugging Face config.json, a NeMo YAML (trainer: and model: sections)."""


def _settings(text: str) -> Taken | None:
    """The file's top-level mapping with every key's dashes read as underscores, or None (no mapping)."""
    data = read_yaml(text)
    if not isinstance(data, dict):
        return None
    # arguments.py from_ymls: conf_key.replace("-", "_"), the later of two spellings winning
    spelled = {k.replace("-", "_"): k for k in data if isinstance(k, str)}
    return Taken({k.replace("-", "_"): v for k, v in data.items() if isinstance(k, str)}, spelled)


def detect(text: str, name: str) -> bool:
    try:
        s = _settings(text)
    except yaml.YAMLError:
        return False
    return s is not None and bool(MARKERS & s.data.keys()) and not OTHERS & s.data.keys()


def _parallel(s: Taken, r: Reading) -> None:
    if "pipe_parallel_size" in s:
        name, value = s.name("pipe_parallel_size"), s.get("pipe_parallel_size")
        if integer(value) == 0:  # neox_args.py pipe_parallel_size: "Number of pipeline parallel stages. Disable with 0."
            r.put("layout.pp", 1, f"{name} (0: no pipeline)")
        else:
            count(value, name, "layout.pp", r)
    if "model_parallel_size" in s:  # neox_args.py model_parallel_size: the tensor-parallel degree
        count(s.get("model_parallel_size"), s.name("model_parallel_size"), "layout.tp", r)
    for key, field in (("sequence_parallel", "layout.sequence_parallel"), ("checkpoint_activations", "layout.recompute")):
        if key in s:
            value = s.get(key)
            if not isinstance(value, bool):
                r.problem(s.name(key), f"{value!r} is not true or false; give one")
            elif key == "sequence_parallel":
                r.put(field, value, s.name(key))
            else:  # transformer.py: checkpoint_activations recomputes whole layers, checkpoint_num_layers at a time
                r.put(field, "full" if value else "none", s.name(key))


def _shapes(s: Taken, r: Reading) -> None:
    for key, field in (("num_layers", "model.num_layers"), ("hidden_size", "model.hidden_size"),
                       ("num_attention_heads", "model.num_heads"), ("num_kv_heads", "model.num_kv_heads"),
                       ("seq_length", "model.seq_len")):
        if key in s:
            count(s.get(key), s.name(key), field, r)


GATED = frozenset({"swiglu", "geglu", "reglu", "bilinear", "glu"})
"""activations.py get_activation: is_gated = True for these (three h x d_ff matrices: the tool's swiglu)."""
PLAIN = frozenset({"gelu", "relu", "softsign", "swish", "mish", "silu"})


def _mlp(s: Taken, r: Reading) -> None:
    """Activation and MLP width as transformer.py ParallelMLP builds them from intermediate_size (or
    expansion_factor x h, or 4h), scaled by 2/3 and halved for a gated activation, then rounded to mlp_multiple_of."""
    act_key = s.name("activation") if "activation" in s else "activation absent (NeoX default gelu)"
    activation = s.get("activation", "gelu")  # neox_args.py activation: ... = "gelu"
    if not isinstance(activation, str) or activation not in GATED | PLAIN:
        r.problem(act_key, f"{activation!r} is no NeoX activation; give e.g. gelu or swiglu")
        return
    gated = activation in GATED
    r.put("model.activation", "swiglu" if gated else "gelu", act_key)
    h = integer(s.data.get("hidden_size"))
    width, multiple = s.get("intermediate_size"), s.get("mlp_multiple_of", 1)  # neox_args.py mlp_multiple_of: int = 1
    factor = s.get("expansion_factor")
    base = (integer(width), s.name("intermediate_size")) if width is not None else \
        (int(factor * h), s.name("expansion_factor")) if isinstance(factor, (int, float)) and 0 < factor < 1e6 and h else \
        (4 * h, "intermediate_size absent (4 x hidden_size)") if h else (None, "")
    m = integer(multiple)
    if base[0] is None or base[0] < 1 or m is None or m < 1:
        if width is not None or factor is not None or multiple != 1:
            r.problem(base[1] or s.name("mlp_multiple_of"), "not a positive whole number; give one")
        return
    up = int(base[0] * 2 / 3) if gated else base[0]   # transformer.py: "auto scale so gated activations has equal parameters"
    down = up // 2 if gated else up
    up, down = 2 * m * -(-up // (2 * m)), m * -(-down // m)  # rounded up to 2 x multiple_of and multiple_of
    if up != (2 * down if gated else down):
        r.problem(base[1], f"{base[0]} with {activation} and mlp_multiple_of {m} builds a {up}-wide up projection "
                           f"and a {down}-wide down projection, which NeoX cannot multiply; NeoX reads intermediate_size "
                           "for a gated MLP as 3 x its width (Llama-2-7B's 11008: 32768 with mlp_multiple_of 256)")
        return
    key = base[1] + (f", mlp_multiple_of {m}" if m > 1 else "") + (f" ({activation}: x 2/3, halved)" if gated else "")
    r.put("model.ffn_size", down, key)


POSITIONS = {"rotary": "rotary", "learned": "learned", "alibi": "alibi",
             "sinusoidal": "learned", "none": "learned", "rpe": "alibi"}
"""neox_args.py pos_emb, as the tool costs it: sinusoidal and none add nothing per layer (as learned); rpe (T5's
relative bias) is a bias inside the attention kernel (as alibi)."""


def _model_defaults(s: Taken, r: Reading) -> None:
    """Positions, tied embeddings and the GPT-J residual, NeoX's defaults where absent (neox_args.py)."""
    key = s.name("pos_emb") if "pos_emb" in s else "pos_emb absent (NeoX default learned)"
    pos = s.get("pos_emb", "learned")  # neox_args.py pos_emb: ... = "learned"
    if isinstance(pos, str) and pos in POSITIONS:
        r.put("model.positions", POSITIONS[pos], key if POSITIONS[pos] == pos else f"{key} ({pos})")
    else:
        r.problem(key, f"{pos!r} is no NeoX position embedding; give rotary, learned or alibi")
    for name, field, invert in (("no_weight_tying", "model.tied_embeddings", True),
                                ("gpt_j_residual", "model.parallel_block", False)):
        # neox_args.py: no_weight_tying: bool = False; gpt_j_residual: bool = False (x = x + attn(ln1(x)) + mlp(ln2(x)))
        value = s.get(name, False)
        key = s.name(name) if name in s else f"{name} absent (NeoX default false)"
        if isinstance(value, bool):
            r.put(field, value != invert, key)
        else:
            r.problem(key, f"{value!r} is not true or false; give one")


def _attention(s: Taken, r: Reading) -> None:
    """attention_config's types: all "flash" is flash-attn 2 (transformer.py), all "global" stores the scores; absent
    from the model's file, every layer is global (arguments.py: [[["global"], num_layers]])."""
    if "attention_config" not in s and "num_layers" in s:
        r.put("layout.flash_attention", False, "attention_config absent (NeoX default global: stored scores)")
    if "attention_config" in s:
        name, value = s.name("attention_config"), s.get("attention_config")
        kinds = set(_strings(value)) - {"all"}  # utils.py expand_attention_types: [[types], "all"] repeats them
        if kinds == {"flash"}:
            r.put("layout.flash_attention", True, name)
            r.put("layout.attention_kernel", "flash-attention-2", f"{name} (flash: flash_attn_func, flash-attn 2)")
        elif kinds == {"global"}:
            r.put("layout.flash_attention", False, f"{name} (global: softmax over stored scores)")
        else:
            r.ignore(f"{name} ({', '.join(sorted(kinds)) or value!r}: not modelled; attention is costed as "
                     "flash or global only)")
    for key in ("hidden_dropout", "attention_dropout"):
        value = s.get(key)
        if key in s and not (number(value) and 0 <= value < 1):
            r.problem(s.name(key), f"{value!r} is no dropout probability; give one in [0, 1)")
            return
    stated = [k for k in ("hidden_dropout", "attention_dropout") if k in s]
    if stated:  # neox_args.py: hidden_dropout, attention_dropout: float = 0.0
        r.put("model.dropout", any(s.data[k] > 0 for k in stated), ", ".join(s.name(k) for k in stated))


def _strings(value: Any) -> list[str]:
    """Every string in a nested list ([[["flash"], 32]] -> ["flash"])."""
    if isinstance(value, str):
        return [value]
    return [t for v in value for t in _strings(v)] if isinstance(value, list) else []


def _pipeline_overlap(s: Taken, r: Reading) -> None:
    """DeepSpeed's ZeRO 1 and 2 turn overlap_comm off under a PipelineModule (engine.py: "Pipeline parallelism does
    not support overlapped communication, will be disabled"), which NeoX builds for any pipe_parallel_size >= 1
    (arguments.py is_pipe_parallel; training.py runs to_sequential() only below 1)."""
    pp = integer(s.data.get("pipe_parallel_size"))
    dp = ("overlap", "dp")
    if r.values.get(dp) == "auto" and pp is not None and pp >= 1 and r.values.get(("layout", "dp_kind")) in ("zero1", "zero2"):
        r.put("overlap.dp", 0.0, f"{r.keys[dp]} true, off under {s.name('pipe_parallel_size')} {pp} (PipelineModule)")


def _precision(s: Taken, r: Reading) -> None:
    # arguments.py calculate_derived: precision from "precision", else fp16.enabled, else bf16.enabled (else fp32,
    # which a model file that leaves it to the training file must not state)
    if "precision" in s:
        name, value = s.name("precision"), s.get("precision")
        dtype = {"fp16": "fp16", "bfloat16": "bf16", "fp32": "fp32"}.get(value) if isinstance(value, str) else None
        if dtype is None:
            r.problem(name, f"{value!r} is no NeoX precision; give fp16, bfloat16 or fp32")
        else:
            for field in ("precision.params", "precision.activations", "precision.grads"):
                r.put(field, dtype, name)
    deepspeed.read_precision(s, r, absent_is_fp32=False)
    if "fp32_allreduce" in s and s.get("fp32_allreduce") is True:  # deepspeed_args.py fp32_allreduce: bool = False
        r.put("precision.grads", "fp32", s.name("fp32_allreduce"))


def _cluster(s: Taken, r: Reading) -> None:
    # arguments.py calculate_derived: global_num_gpus, else num_gpus (per node) x the hostfile's first num_nodes
    if "global_num_gpus" in s:
        count(s.get("global_num_gpus"), s.name("global_num_gpus"), "cluster.gpus", r)
    per_node, nodes = integer(s.get("num_gpus")), integer(s.get("num_nodes"))
    if not r.has("cluster.gpus") and per_node and nodes and per_node > 0 and nodes > 0:
        r.put("cluster.gpus", per_node * nodes, f"{s.name('num_gpus')} x {s.name('num_nodes')}")
    for key in ("num_gpus", "num_nodes"):
        if key in s and not r.has("cluster.gpus"):
            r.ignore(f"{s.name(key)} ({s.data[key]}: the GPUs come from the hostfile)")


NOTES = {
    "partition_activations": "splits checkpointed activations over the tensor-parallel ranks: memory only",
    "checkpoint_num_layers": "layers per checkpoint: the same recompute",
    "max_position_embeddings": "the position table's size, not the trained sequence",
    "sliding_window_width": "not modelled: attention is costed over the whole sequence",
    "moe_num_experts": "MoE layers (more than 1 expert) are not read from NeoX files: state model.moe",
}
"""Keys read past with the reason they change nothing computed here."""


def read(text: str, name: str) -> Imported:
    r = Reading(FORMAT)
    try:
        s = _settings(text)
    except yaml.YAMLError as e:
        r.problem(name or "file", f"not valid YAML ({str(e).strip().splitlines()[0] if str(e).strip() else 'unreadable'})"
                                  "; fix the syntax")
        return r.done(framework="gpt-neox")
    if s is None:
        r.problem(name or "file", "a GPT-NeoX config is a mapping of arguments ({\"num_layers\": 32, ...}); give one")
        return r.done(framework="gpt-neox")
    _parallel(s, r)
    _shapes(s, r)
    if "num_layers" in s:  # the model's file: NeoX's defaults shape the model where it is silent
        r.put("model.source", f"GPT-NeoX YAML ({name})" if name else "GPT-NeoX YAML", s.name("num_layers"))
        _mlp(s, r)
        _model_defaults(s, r)
    _attention(s, r)
    deepspeed.read_batch(s, r)
    deepspeed.read_zero(s, r)
    _pipeline_overlap(s, r)
    _precision(s, r)
    _cluster(s, r)
    for key, why in NOTES.items():
        if key in s:
            r.ignore(f"{s.name(key)} ({s.get(key)}: {why})")
    for key in s.rest():
        r.ignore(key)
    return r.done(framework="gpt-neox")
