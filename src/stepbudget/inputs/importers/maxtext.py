"""MaxText's YAML configs read into the scenario's schema: ``configs/base.yml`` (the defaults every run starts from),
the model configs (``configs/models/<model_name>.yml``: shapes) and run configs (``base_config: base.yml`` plus the
run's settings).

MaxText lays its devices on one mesh of named axes, each of degree ``ici_<axis>_parallelism`` (inside a slice) times
``dcn_<axis>_parallelism`` (across slices); -1 fills what the other axes leave. The batch is sharded over data, fsdp,
fsdp_transpose and expert, the weights over fsdp, fsdp_transpose, context and expert (base.yml logical_axis_rules:
``activation_batch_attn``, ``embed``). So in the scenario's terms DP is data x fsdp x expert, sharded (FSDP) over all
but the data part, which replicates; EP's ranks are part of DP, as the schema has them. A run config that names an
axis on one tier only leaves the other tier at base.yml's value (``_BASE_FACTORS``).

Semantics cite AI-Hypercomputer/maxtext at e591f30 (Aug 2026): ``src/maxtext/configs/base.yml`` and ``types.py``, and
``layers/decoders.py`` for the remat policies. What the file does not say is left to base.yml and the maxtext recipe.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from stepbudget.inputs import catalog
from stepbudget.inputs.documents import read_yaml
from stepbudget.inputs.importers._reading import Imported, Reading, count, integer

FORMAT = "MaxText YAML"
FRAMEWORK = "maxtext"

_AXIS_KEY = re.compile(r"^(ici|dcn)_([a-z_]+)_parallelism$")
_MARKERS = ("base_emb_dim", "base_num_decoder_layers", "base_num_query_heads", "base_mlp_dim")
"""Keys only MaxText writes (types.py ModelArchitecture): one of them, or one ici_/dcn_ degree, marks a MaxText file."""
_RUN_KEYS = ("per_device_batch_size", "max_target_length", "remat_policy", "model_name", "decoder_block",
             "mlp_activations", "logits_via_embedding")
"""MaxText keys a run config without shapes or degrees carries; two of them mark one."""

_GROUPS = {
    "data": ("data",),
    "fsdp": ("fsdp", "fsdp_transpose"),
    "expert": ("expert",),
    "tp": ("tensor", "tensor_transpose", "tensor_sequence"),  # base.yml: heads over tensor and tensor_sequence
    "cp": ("context", "context_usp_ulysses", "sequence"),  # sequence: the context axis before 2025 (mesh_axes)
    "pp": ("pipeline",),  # mesh axis "stage"
}
_UNMODELED = ("diloco", "autoregressive", "context_autoregressive")
"""Axes with no place in the schema: DiLoCo's outer replicas, and two that serve decoding only."""
_BASE_FACTORS = {"dcn_data": -1, "ici_fsdp": -1}
"""base.yml's degrees that are not 1: "dcn_data_parallelism: -1 # recommended DCN axis to be auto-sharded",
"ici_fsdp_parallelism: -1 # recommended ICI axis to be auto-sharded"; every other tier of every axis is 1."""

_REMAT = {
    # layers/decoders.py get_remat_policy; nn.remat with no policy saves nothing
    "full": ("full", ""),
    "none": ("full", "no policy: nn.remat saves nothing, as full"),
    "minimal": ("selective", "saves every matmul output but the attention's: recomputes the attention core"),
    "minimal_with_quantization": ("selective", "as minimal"),
    "minimal_offloaded": ("selective", "as minimal, saved to host memory"),
    "minimal_with_context": ("none", "saves every matmul output and the attention's: recomputes elementwise ops only"),
    "minimal_flash": ("none", "as minimal_with_context"),
    "minimal_with_context_and_quantization": ("none", "as minimal_with_context"),
    "save_dot_except_mlpwi": ("selective-op", "nearest: recomputes the MLP's input matmuls and the attention core, "
                                              "about half a layer's matmuls"),
    "save_dot_except_mlp": ("full", "nearest: recomputes the MLP's matmuls, most of a layer's"),
    "save_dot_with_context_except_mlp": ("full", "nearest: recomputes the MLP's matmuls, most of a layer's"),
    "save_qkv_proj": ("full", "nearest: recomputes all but the QKV projections"),
    "qkv_proj_offloaded": ("full", "nearest: recomputes all but the QKV projections"),
    "save_out_proj": ("full", "nearest: recomputes all but the attention's output projection"),
}
_DTYPES = {"bfloat16": "bf16", "float32": "fp32", "float16": "fp16", "fp32": "fp32", "bf16": "bf16"}
_FP8 = {"fp8", "fp8_gpu", "fp8_full", "fp8_e4m3", "fp8_e5m2", "nanoo_fp8", "fp8_nanoo", "te_fp8_delayedscaling",
        "te_fp8_currentscaling", "te_mxfp8"}
"""types.py QuantizationType's FP8 schemes: GEMMs at the FP8 rate."""
_MODEL_KEYS = {"base_num_decoder_layers": "num_layers", "base_emb_dim": "hidden_size", "base_num_query_heads":
               "num_heads", "base_num_kv_heads": "num_kv_heads", "head_dim": "head_dim", "base_mlp_dim": "ffn_size",
               "vocab_size": "vocab_size", "max_target_length": "seq_len"}
_MOE_KEYS = {"num_experts_per_tok": "top_k", "base_moe_mlp_dim": "expert_ffn_size", "shared_experts":
             "shared_experts", "first_num_dense_layers": "first_dense_layers"}
_MLA_KEYS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


def _load(text: str) -> Any:
    try:
        return read_yaml(text)
    except (yaml.YAMLError, RecursionError):
        return None


def detect(text: str, name: str) -> bool:
    """A YAML mapping with one of MaxText's shape keys or ici_/dcn_ degrees at the top, a ``base_config`` naming a
    .yml, or two of the keys a MaxText run config carries."""
    if not re.search(r"^(base_|ici_|dcn_|per_device_batch_size|max_target_length|remat_policy|model_name)", text,
                     re.M):
        return False
    data = _load(text)
    if not isinstance(data, dict):
        return False
    keys = {k for k in data if isinstance(k, str)}
    if keys & set(_MARKERS) or any(_AXIS_KEY.match(k) for k in keys):
        return True
    if str(data.get("base_config", "")).endswith((".yml", ".yaml")):
        return True
    return len(keys & set(_RUN_KEYS)) >= 2




class _Mesh:
    """The file's mesh degrees by group: each group's product with base.yml's value for tiers the file leaves out,
    None where a factor is -1 (fills the rest) or bad; and whether the file names the group at all."""

    def __init__(self, r: Reading, data: dict):
        self.factors: dict[str, int | None] = {}
        self.named: dict[str, list[str]] = {g: [] for g in (*_GROUPS, *_UNMODELED)}
        self.keys: list[str] = []
        for key, value in data.items():
            m = _AXIS_KEY.match(str(key))
            if not m:
                continue
            self.keys.append(str(key))
            axis = m.group(2)
            group = next((g for g, axes in _GROUPS.items() if axis in axes), axis if axis in _UNMODELED else None)
            if group is None:
                r.problem(key, "an axis MaxText's mesh does not have; check the name")
                continue
            n = integer(value)
            if n == -1:
                r.ignore(f"{key} (-1: the devices left over by the other axes; not stated)")
                self.factors[f"{m.group(1)}_{axis}"] = None
            elif n is None or n < 1:
                r.problem(key, f"{value!r} is no degree; give a whole number >= 1, or -1")
                self.factors[f"{m.group(1)}_{axis}"] = None
            else:
                self.factors[f"{m.group(1)}_{axis}"] = n
                if group in _UNMODELED and n > 1:
                    r.problem(key, f"{n}: the {axis} axis has no place in stepbudget's layout; set it to 1")
                elif group in _UNMODELED:
                    r.ignore(key)
            self.named[group].append(str(key))

    def degree(self, group: str) -> int | None:
        """The group's degree, ici x dcn over its axes; None where a factor fills the rest."""
        out = 1
        for axis in _GROUPS[group]:
            for tier in ("ici", "dcn"):
                name = f"{tier}_{axis}"
                n = self.factors[name] if name in self.factors else _BASE_FACTORS.get(name, 1)
                if n is None or n < 1:
                    return None
                out *= n
        return out

    def key(self, *groups: str) -> str:
        return " x ".join(k for g in groups for k in self.named[g])


def _read_layout(r: Reading, data: dict, mesh: _Mesh) -> None:
    for group in ("tp", "cp", "pp"):
        if mesh.named[group] and (n := mesh.degree(group)) is not None:
            r.put(f"layout.{group}", n, mesh.key(group))
    if mesh.named["expert"] and (ep := mesh.degree("expert")) is not None:
        r.put("layout.ep", ep, mesh.key("expert"))
    if not (mesh.named["data"] or mesh.named["fsdp"] or mesh.named["expert"]):
        return
    data_part, fsdp, expert, cp = (mesh.degree(g) for g in ("data", "fsdp", "expert", "cp"))
    if data_part is not None and fsdp is not None and expert is not None:
        r.put("layout.dp", data_part * fsdp * expert, f"{mesh.key('data', 'fsdp', 'expert')} (the batch's axes)")
    shards = None if fsdp is None or expert is None or cp is None else fsdp * expert * cp
    where = mesh.key("fsdp", "expert") or mesh.key("data")
    if shards is None or shards > 1:  # the weights' "embed" axis is sharded over fsdp, context and expert
        r.put("layout.dp_kind", "fsdp", f"{where} (weights sharded over fsdp, context and expert)")
        if data_part is not None:
            r.put("layout.dp_replicas", data_part, mesh.key("data") or "dcn_data/ici_data (base.yml: 1 x -1)")
    elif data.get("shard_optimizer_over_data") is True:  # base.yml: "Enable ZeRO-1 optimizer sharding over data axis"
        mesh.keys.append("shard_optimizer_over_data")
        r.put("layout.dp_kind", "zero1", f"{where} (nothing sharded) + shard_optimizer_over_data")
    else:
        r.put("layout.dp_kind", "ddp", f"{where} (nothing sharded: weights replicated over data)")


def _read_micro_batch(r: Reading, data: dict, mesh: _Mesh) -> None:
    """per_device_batch_size is per device; the devices of one TP x CP group share their sequences, and a pipeline
    splits the batch into num_pipeline_microbatches (base.yml: -1, one per stage)."""
    value = data["per_device_batch_size"]
    tp, cp, pp = (mesh.degree(g) for g in ("tp", "cp", "pp"))
    nmb = integer(data.get("num_pipeline_microbatches", -1))
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        r.problem("per_device_batch_size", f"{value!r} is no batch size; give a positive number")
        return
    if tp is None or cp is None or pp is None:
        r.ignore(f"per_device_batch_size ({value}: tp, cp or pp fills the rest, so a group's share is not stated)")
        return
    split = pp if nmb is None or nmb < 1 else nmb
    b = value * tp * cp * pp / split
    if b < 1 or not float(b).is_integer():
        r.ignore(f"per_device_batch_size ({value} x tp {tp} x cp {cp} x pp {pp} / {split} micro-batches = {b:g} "
                 "sequences: not a whole micro-batch)")
        return
    key = f"per_device_batch_size x tp {tp} x cp {cp}" + (f" x pp {pp} / {split} micro-batches" if pp > 1 else "")
    r.put("layout.micro_batch", int(b), key)


def _read_model(r: Reading, data: dict, used: set[str]) -> None:
    for key, field in _MODEL_KEYS.items():
        if key in data:
            used.add(key)
            if (n := count(r, key, data[key])) is not None:
                r.put(f"model.{field}", n, key)
    if (scale := data.get("global_parameter_scale")) is not None:
        used.add("global_parameter_scale")
        if integer(scale) != 1:  # types.py get_individual_scales: each base_* dim times 2**scale
            r.problem("global_parameter_scale", f"{scale}: scales the base_* shapes; give the model's shapes and 1")
    if "logits_via_embedding" in data:  # types.py: the LM head reuses the embedding matrix
        used.add("logits_via_embedding")
        if isinstance(data["logits_via_embedding"], bool):
            r.put("model.tied_embeddings", data["logits_via_embedding"], "logits_via_embedding")
        else:
            r.problem("logits_via_embedding", f"{data['logits_via_embedding']!r}: give true or false")
    _read_block(r, data, used)
    _read_moe(r, data, used)
    mla = [k for k in _MLA_KEYS if k in data]
    used.update(mla)
    used.add("attention_type")
    if data.get("attention_type") == "mla":
        for key in mla:
            if (n := count(r, key, data[key], least=0)) is not None:
                r.put(f"model.mla.{key}", n, key)
    else:
        for key in mla:
            r.ignore(f"{key} (attention_type is {data.get('attention_type', 'not stated')!r}, not mla)")
        if "attention_type" in data:
            r.ignore("attention_type")


def _read_block(r: Reading, data: dict, used: set[str]) -> None:
    """The layer's MLP kind, positions and dropout."""
    if "mlp_activations" in data:
        used.add("mlp_activations")
        acts = data["mlp_activations"]
        if isinstance(acts, list) and len(acts) == 2 and acts[1] == "linear":  # a gated MLP: three matrices
            r.put("model.activation", "swiglu", f"mlp_activations {acts} (gated)")
        elif isinstance(acts, list) and len(acts) == 1:  # one activation: two matrices
            r.put("model.activation", "gelu", f"mlp_activations {acts} (not gated)")
        else:
            r.problem("mlp_activations", f"{acts!r}: give one activation or [activation, linear]")
    if (n := integer(data.get("trainable_position_size"))) is not None:
        used.add("trainable_position_size")
        if n > 0:  # types.py: "Enables GPT-3 style trainable positional embeddings if positive"
            r.put("model.positions", "learned", "trainable_position_size")
        else:
            r.ignore(f"trainable_position_size ({n}: no learned positions)")
    if data.get("enable_dropout") is False:
        used.add("enable_dropout")
        r.put("model.dropout", False, "enable_dropout")
    elif data.get("enable_dropout") is True and "dropout_rate" in data:  # types.py: dropout when rate > 0
        used.update(("enable_dropout", "dropout_rate"))
        r.put("model.dropout", float(data["dropout_rate"] or 0) > 0, "enable_dropout + dropout_rate")


def _read_moe(r: Reading, data: dict, used: set[str]) -> None:
    present = [k for k in ("num_experts", *_MOE_KEYS) if k in data]
    used.update(present)
    experts = integer(data.get("num_experts"))
    if experts is None or experts <= 1:
        for key in present:
            r.ignore(f"{key} ({'no num_experts' if experts is None else 'num_experts 1'}: a dense model)")
        return
    r.put("model.moe.num_experts", experts, "num_experts")
    for key, field in _MOE_KEYS.items():
        if key in data and (n := count(r, key, data[key], least=0 if field != "top_k" else 1)) is not None:
            if key == "base_moe_mlp_dim" and n < 1:
                r.problem(key, f"{data[key]}: MoE layers need a positive width; give the experts' width")
            else:
                r.put(f"model.moe.{field}", n, key)
    if "base_moe_mlp_dim" not in data and (n := integer(data.get("base_mlp_dim"))):
        # MaxText before base_moe_mlp_dim (2024) sized each expert by base_mlp_dim (layers/linears.py generate_kernels)
        r.put("model.moe.expert_ffn_size", n, "base_mlp_dim (base_moe_mlp_dim absent)")
    step = integer(data.get("interleave_moe_layer_step", 1))
    used.add("interleave_moe_layer_step")
    if step != 1:
        r.problem("interleave_moe_layer_step", f"{step}: MoE in every {step}th layer; stepbudget's MoE layers follow "
                                               "the first dense ones without gaps")


def _dtype(r: Reading, field: str, key: str, value: Any) -> None:
    if value in _DTYPES:
        r.put(field, _DTYPES[value], key)
    else:
        r.problem(key, f"{value!r} is no dtype stepbudget sizes; give bfloat16, float16 or float32")


def _read_run(r: Reading, data: dict, used: set[str]) -> None:
    if "remat_policy" in data:
        used.add("remat_policy")
        policy = data["remat_policy"]
        if policy in _REMAT:
            recompute, why = _REMAT[policy]
            r.put("layout.recompute", recompute, f"remat_policy {policy}" + (f" ({why})" if why else ""))
        elif policy == "custom":
            r.problem("remat_policy", "custom: each tensor's choice is its own key; set layout.recompute")
        else:
            r.problem("remat_policy", f"{policy!r} is no policy MaxText knows (layers/decoders.py); fix it")
    for key, field in (("dtype", "activations"), ("weight_dtype", "params"), ("grad_dtype", "grads")):
        if key in data:  # types.py: activations, weights as stored (and gathered), gradients
            used.add(key)
            _dtype(r, f"precision.{field}", key, data[key])
    if "quantization" in data:
        used.add("quantization")
        q = data["quantization"]
        if q in _FP8:
            r.put("precision.gemm", "fp8", f"quantization {q}")
        elif q in ("", None):  # base.yml: "defaults to null implying bf16"
            r.put("precision.gemm", "bf16", "quantization '' (none)")
        else:
            r.problem("quantization", f"{q!r}: stepbudget runs GEMMs at the BF16 or FP8 rate; set precision.gemm")
    if "model_name" in data:
        used.add("model_name")
        if data["model_name"] == "default":  # base.yml: "other than the override, nothing should use this"
            r.ignore("model_name ('default': names no model config)")
        else:
            named = str(data["model_name"])
            if catalog.lookup(named) is not None:  # pyconfig.py update_model_vars: configs/models/<name>.yml's shapes
                r.put("model.catalog", named, "model_name")
            else:
                r.ignore(f"model_name ({named!r}: the model config it names is another file, and the model catalog "
                         "has no row of that name; give the file too)")
    if "base_config" in data:
        used.add("base_config")
        r.ignore(f"base_config ({data['base_config']!r}: the defaults file; give it too)")


def read(text: str, name: str) -> Imported:
    """What a MaxText YAML states; base.yml is read as the defaults file (``base``) the others override."""
    r = Reading(FORMAT)
    try:
        data = read_yaml(text)
    except (yaml.YAMLError, RecursionError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        r.problem(name or "file", f"not valid YAML ({first}); fix the syntax")
        return r.done(FRAMEWORK)
    if not isinstance(data, dict):
        r.problem(name or "file", "expected a mapping of MaxText keys; check the file")
        return r.done(FRAMEWORK)
    used: set[str] = set()
    mesh = _Mesh(r, data)
    _read_layout(r, data, mesh)
    used.update(mesh.keys)
    if "per_device_batch_size" in data:
        used.add("per_device_batch_size")
        _read_micro_batch(r, data, mesh)
    if "num_pipeline_microbatches" in data and "per_device_batch_size" in data:
        used.add("num_pipeline_microbatches")
    _read_model(r, data, used)
    _read_run(r, data, used)
    for key in data:
        if str(key) not in used:
            r.ignore(str(key))
    # base.yml names no base_config and holds model_name "default" ("override config settings to match a specific
    # model"); a model config is no defaults file: it states the job's shapes
    defaults = "base_config" not in data and (name == "base.yml" or data.get("model_name") == "default")
    return r.done(FRAMEWORK, base=defaults)
