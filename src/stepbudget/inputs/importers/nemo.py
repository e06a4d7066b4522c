"""NeMo 1 YAML: the Hydra/OmegaConf file NeMo's ``megatron_gpt_pretraining.py`` and the NeMo-Framework-Launcher
train from (``trainer:`` and ``model:`` sections).

OmegaConf interpolations that point inside the file (``${model.encoder_seq_length}``, ``${.hidden_size}``,
``${multiply:4, ${.hidden_size}}``) are resolved here; one that points outside it (``${data_dir}``, a Hydra
choice) leaves its key unstated and listed as ignored with why. The Launcher mounts a training file under
``training:`` (launcher_scripts/conf/config.yaml ``- training: gpt3/5b``), so ``${training.model.x}`` is read as
``${model.x}``. Semantics cited from NeMo at commit 8cfedd7203462cb251a914e700e5605444277561.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from typing import Any

import yaml

from stepbudget.inputs.documents import read_yaml
from stepbudget.inputs.importers._reading import Imported, Reading, integer
from stepbudget.inputs.importers.megatron import ROUTER_FIELDS, Stated, router

FORMAT = "NeMo 1 YAML"

_NEMO_MODEL_KEYS = ("num_layers", "hidden_size", "tensor_model_parallel_size", "num_attention_heads",
                    "encoder_seq_length", "pipeline_model_parallel_size", "micro_batch_size")
"""Keys of ``model:`` that only a NeMo (Megatron) model config holds together with a ``trainer:`` section."""


def detect(text: str, name: str) -> bool:
    """A YAML mapping with ``trainer`` and ``model`` sections whose model holds NeMo's Megatron keys."""
    if "trainer" not in text or "model" not in text:
        return False
    try:
        doc = read_yaml(text)
    except (yaml.YAMLError, RecursionError):
        return False
    return (isinstance(doc, dict) and isinstance(doc.get("trainer"), dict) and isinstance(doc.get("model"), dict)
            and any(k in doc["model"] for k in _NEMO_MODEL_KEYS))


# --- OmegaConf interpolations -------------------------------------------------------------------------------------

class _Unresolved(Exception):
    """An interpolation the file alone cannot give a value to; the message says why."""


_RESOLVERS: dict[str, Callable[[Any, Any], Any]] = {
    "multiply": lambda x, y: x * y,  # NeMo nemo/core/config/hydra_runner.py: register_new_resolver("multiply", x * y)
    "sum": lambda x, y: x + y,  # NeMo nemo/core/config/hydra_runner.py: register_new_resolver("sum", x + y)
    "divide_ceil": lambda x, y: int(math.ceil(x / y)),  # NeMo-Framework-Launcher launcher_scripts/main.py
    "divide_floor": lambda x, y: int(math.floor(x / y)),  # NeMo-Framework-Launcher launcher_scripts/main.py
}
_MAX_DEPTH = 16
"""Interpolations followed through this many others at most (a loop stops here)."""


def _spans(s: str) -> Iterator[tuple[int, int]]:
    """(start, end) of each outermost ``${...}`` in ``s``, nested braces balanced."""
    i = 0
    while (start := s.find("${", i)) >= 0:
        depth, j = 0, start + 1
        while j < len(s):
            depth += {"{": 1, "}": -1}.get(s[j], 0)
            if depth == 0:
                break
            j += 1
        if depth:
            raise _Unresolved(f"unbalanced braces in {s!r}")
        yield start, j + 1
        i = j + 1


def _scalar(text: str) -> Any:
    """A resolver's argument as OmegaConf reads it: a number where it is one, else the text."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


class _Document:
    """The file's mapping with OmegaConf's in-file interpolations resolved on demand."""

    def __init__(self, root: dict) -> None:
        self.root = root
        self.memo: dict[tuple[str, ...], Any] = {}  # each key resolved once: `${a}${a}` chains stay linear

    def lookup(self, path: tuple[str, ...], depth: int = 0) -> Any:
        node: Any = self.root
        if path and path[0] not in self.root and path[0] == "training":
            path = path[1:]  # the Launcher's config.yaml mounts this file as `training`
        if path in self.memo:
            return self.memo[path]
        for part in path:
            if not isinstance(node, dict) or part not in node:
                raise _Unresolved(f"{'.'.join(path)} is not in this file")
            node = node[part]
        self.memo[path] = value = self.resolve(node, path, depth + 1)
        return value

    def resolve(self, value: Any, where: tuple[str, ...], depth: int = 0) -> Any:
        """``value`` (found at ``where``) with its interpolations replaced; _Unresolved when one points outside."""
        if not isinstance(value, str):
            return value
        if value.strip() == "???":  # OmegaConf: a mandatory value left for the command line
            raise _Unresolved("??? (a value the command line must give)")
        if "${" not in value:
            return value
        if depth > _MAX_DEPTH:
            raise _Unresolved("interpolations loop or nest past 16 levels")
        spans = list(_spans(value))
        if len(spans) == 1 and spans[0] == (0, len(value)):  # the whole value: its type survives
            return self._evaluate(value[2:-1], where, depth)
        out, last = [], 0
        for start, end in spans:
            out += [value[last:start], str(self._evaluate(value[start + 2:end - 1], where, depth))]
            last = end
        return "".join(out + [value[last:]])

    def _evaluate(self, inner: str, where: tuple[str, ...], depth: int) -> Any:
        inner = str(self.resolve(inner, where, depth + 1)) if "${" in inner else inner
        head, colon, rest = inner.partition(":")
        if colon and re.fullmatch(r"[A-Za-z_][\w.]*", head.strip()):
            name = head.strip()
            if name not in _RESOLVERS:
                raise _Unresolved(f"resolver {name!r} is not one stepbudget evaluates")
            args = [_scalar(a.strip()) for a in rest.split(",")]
            if len(args) != 2 or not all(isinstance(a, (int, float)) for a in args):
                raise _Unresolved(f"{name} needs two numbers, got {rest.strip()!r}")
            try:
                return _RESOLVERS[name](*args)
            except ZeroDivisionError:
                raise _Unresolved(f"{name} divides by zero") from None
        dots = len(inner) - len(inner.lstrip("."))
        parts = tuple(p for p in inner.lstrip(".").split(".") if p)
        if dots:  # relative: `.x` is a sibling of the key, `..x` its parent's sibling (OmegaConf)
            parent = where[:-1]
            base = parent[:len(parent) - (dots - 1)] if dots - 1 <= len(parent) else None
            if base is None:
                raise _Unresolved(f"${{{inner}}} climbs above the file's root")
            parts = base + parts
        return self.lookup(parts, depth)


# --- the mapping ----------------------------------------------------------------------------------------------------

def _leaves(node: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    if isinstance(node, dict) and node:
        for k, v in node.items():
            yield from _leaves(v, path + (str(k),))
    else:
        yield path, node


_ACTIVATIONS = {"swiglu": "swiglu", "fast-swiglu": "swiglu",  # NeMo utils_funcs.py activation_to_func: F.silu, gated
                "gelu": "gelu", "fast-gelu": "gelu", "approx-gelu": "gelu"}  # F.gelu / approx GELU, no gate
_POSITIONS = {"rope": "rotary", "learned_absolute": "learned", "alibi": "alibi"}  # megatron_gpt_model.py:507
_DTYPES = {"bf16": "bf16", "bfloat16": "bf16", "fp32": "fp32", "float32": "fp32", "32": "fp32",
           "fp16": 2, "float16": 2, "16": 2}  # NeMo core/optim/distributed_adam.py: str_to_dtype(grad_sync_dtype)
_DISTRIBUTED_OPTIMIZERS = ("distributed_fused_adam", "mcore_distributed_optim")
# NeMo megatron_base_model.py:151-152: with_distributed_adam = name in (distributed_fused_adam, mcore_distributed_optim)
_HALF_PRECISIONS = ("bf16", "bf16-mixed", "16", "16-mixed", "bf16-true")


class _Reader:
    """Maps one NeMo 1 file's keys onto the scenario; every key it neither maps nor ignores is listed ignored."""

    def __init__(self, doc: _Document, r: Reading) -> None:
        self.doc, self.r = doc, r
        self.used: set[str] = set()

    def get(self, key: str) -> tuple[bool, Any]:
        """(found, value) of dotted ``key`` with interpolations resolved; an unresolved one is ignored with why."""
        self.used.add(key)
        path = tuple(key.split("."))
        node: Any = self.doc.root
        for part in path:
            if not isinstance(node, dict) or part not in node:
                return False, None
            node = node[part]
        try:
            return True, self.doc.resolve(node, path)
        except _Unresolved as e:
            self.r.ignore(f"{key} ({node!r}: {e}; stepbudget resolves only interpolations inside the file)")
            return False, None

    def count(self, key: str, field: str, minimum: int = 1) -> int | None:
        found, value = self.get(key)
        if not found:
            return None
        if value is None:
            self.r.ignore(f"{key} (null: left to NeMo)")
            return None
        n = integer(value)
        if n is None or n < minimum:
            self.r.problem(key, f"{value!r} is not a whole number >= {minimum}; give one")
            return None
        self.r.put(field, n, key)
        return n

    def flag(self, key: str) -> bool | None:
        found, value = self.get(key)
        if not found:
            return None
        if not isinstance(value, bool):
            self.r.problem(key, f"{value!r} is not true or false; give one")
            return None
        return value


def _model(m: _Reader) -> None:
    r = m.r
    for key, field in (("num_layers", "model.num_layers"), ("hidden_size", "model.hidden_size"),
                       ("num_attention_heads", "model.num_heads"), ("ffn_hidden_size", "model.ffn_size"),
                       ("kv_channels", "model.head_dim"), ("encoder_seq_length", "model.seq_len")):
        m.count(f"model.{key}", field)
    found, groups = m.get("model.num_query_groups")
    if found and groups is None and r.has("model.num_heads"):
        # NeMo megatron_gpt_config.yaml: num_query_groups "If None, normal attention is used" (one KV head per head)
        r.put("model.num_kv_heads", r.values[("model", "num_heads")], "model.num_query_groups (null: multi-head)")
    elif found:
        m.count("model.num_query_groups", "model.num_kv_heads")
    found, act = m.get("model.activation")
    if found and act in _ACTIVATIONS:
        r.put("model.activation", _ACTIVATIONS[act], "model.activation")
    elif found:
        r.problem("model.activation", f"{act!r} is no activation stepbudget models (swiglu, gelu); set model.activation")
    found, pos = m.get("model.position_embedding_type")
    if found and pos in _POSITIONS:
        r.put("model.positions", _POSITIONS[pos], "model.position_embedding_type")
    elif found:
        r.problem("model.position_embedding_type", f"{pos!r} is not rope, learned_absolute or alibi; set model.positions")
    tied = m.flag("model.share_embeddings_and_output_weights")
    if tied is not None:
        r.put("model.tied_embeddings", tied, "model.share_embeddings_and_output_weights")
    rates = [(k, v) for k in ("model.hidden_dropout", "model.attention_dropout") for found, v in [m.get(k)] if found]
    if rates and all(isinstance(v, (int, float)) and not isinstance(v, bool) for _, v in rates):
        r.put("model.dropout", any(v > 0 for _, v in rates), "/".join(k for k, _ in rates))
    elif rates:
        r.problem("model.hidden_dropout", f"dropout {[v for _, v in rates]} is not a number; give a probability")
    experts = m.count("model.num_moe_experts", "model.moe.num_experts")
    m.count("model.moe_router_topk", "model.moe.top_k")
    if m.count("model.moe_ffn_hidden_size", "model.moe.expert_ffn_size") is None and experts \
            and r.has("model.ffn_size"):
        # Megatron-LM core/transformer/transformer_config.py __post_init__: moe_ffn_hidden_size = ffn_hidden_size
        r.put("model.moe.expert_ffn_size", r.values[("model", "ffn_size")],
              "model.ffn_hidden_size (moe_ffn_hidden_size absent)")
    if experts:
        _router(m)


def _router(m: _Reader) -> None:
    """Balance and capacity: NeMo 1 copies each ``model:`` key named as a Megatron-Core TransformerConfig field into
    it (NeMo megatron_base_model.py:603-608), so these are read as Megatron-LM's are."""
    given: Stated = {}
    unknown: set[str] = set()
    for name in ROUTER_FIELDS:
        found, value = m.get(f"model.{name}")
        if found:
            given[name] = (value, f"model.{name}")
        elif name in m.doc.root["model"]:  # stated, but with an interpolation that points outside the file
            unknown.add(name)
    router(m.r, given, lambda name: f"model.{name}", frozenset(unknown))


def _layout(m: _Reader) -> None:
    r = m.r
    for key, field in (("tensor_model_parallel_size", "layout.tp"), ("pipeline_model_parallel_size", "layout.pp"),
                       ("context_parallel_size", "layout.cp"), ("expert_model_parallel_size", "layout.ep"),
                       ("micro_batch_size", "layout.micro_batch"), ("global_batch_size", "batch.global_batch_seqs")):
        m.count(f"model.{key}", field)
    vp = m.count("model.virtual_pipeline_model_parallel_size", "layout.virtual_stages")
    if vp is not None and vp > 1:  # megatron_base_model.py:1058: vp_size > 1 runs the interleaved schedule
        r.put("layout.schedule", "interleaved-1f1b", "model.virtual_pipeline_model_parallel_size")
    sp = m.flag("model.sequence_parallel")
    if sp is not None:
        r.put("layout.sequence_parallel", sp, "model.sequence_parallel")
    found, gran = m.get("model.activations_checkpoint_granularity")
    if found and gran in ("selective", "full"):  # megatron_base_model.py:557 -> TransformerConfig.recompute_granularity
        r.put("layout.recompute", gran, "model.activations_checkpoint_granularity")
    elif found and gran is None:
        r.ignore("model.activations_checkpoint_granularity (null: left to NeMo)")
    elif found:
        r.problem("model.activations_checkpoint_granularity", f"{gran!r} is not selective, full or null; give one")
    if m.get("model.activations_checkpoint_method")[0]:
        r.ignore("model.activations_checkpoint_method (how full recompute groups layers; not modeled)")
    if m.flag("model.fsdp"):  # megatron_gpt_config.yaml: fsdp "Enable training with torch FSDP"
        r.put("layout.dp_kind", "fsdp", "model.fsdp")
    else:
        found, opt = m.get("model.optim.name")
        if found and isinstance(opt, str):
            # megatron_base_model.py:152: only these two names shard the optimizer state over DP (ZeRO-1)
            r.put("layout.dp_kind", "zero1" if opt in _DISTRIBUTED_OPTIMIZERS else "ddp", f"model.optim.name ({opt})")


def _overlap_and_precision(m: _Reader) -> None:
    r = m.r
    for key, field, on in (("model.optim.overlap_grad_sync", "overlap.dp", "auto"),  # megatron_base_model.py:731
                           ("model.ub_tp_comm_overlap", "overlap.tp", 1.0),  # :1240 -> ModelParallelConfig.tp_comm_overlap
                           ("model.overlap_p2p_comm", "overlap.pp", "auto")):  # :1246 copied to ModelParallelConfig
        value = m.flag(key)
        interleaved = r.values.get(("layout", "schedule")) == "interleaved-1f1b"
        if value is not None and field == "overlap.pp" and value and not interleaved:
            # Megatron-Core overlaps a pipeline's sends only in the interleaved schedule (schedules.py): without a
            # virtual pipeline the flag changes nothing
            r.put(field, 0.0, f"{key} (no virtual pipeline: the sends are not overlapped)")
        elif value is not None:
            r.put(field, on if value else 0.0, key)
    found, dtype = m.get("model.optim.grad_sync_dtype")
    if found and str(dtype) in _DTYPES:
        r.put("precision.grads", _DTYPES[str(dtype)], "model.optim.grad_sync_dtype")
    elif found:
        r.problem("model.optim.grad_sync_dtype", f"{dtype!r} is not bf16, fp16 or fp32; give one")
    if m.flag("model.fp8"):  # megatron_base_model.py:211 use_fp8=cfg.fp8: Transformer Engine FP8 GEMMs
        r.put("precision.gemm", "fp8", "model.fp8")
    found, precision = m.get("trainer.precision")
    if found and str(precision) in _HALF_PRECISIONS:
        r.ignore(f"trainer.precision ({precision}: half-precision GEMMs, what stepbudget assumes)")
    elif found:
        r.ignore(f"trainer.precision ({precision}: not a half precision; stepbudget times bf16 or fp8 GEMMs)")


def _cluster(m: _Reader) -> None:
    r = m.r
    found_d, devices = m.get("trainer.devices")
    found_n, nodes = m.get("trainer.num_nodes")
    per_node, n = integer(devices), integer(nodes)
    if found_d and (per_node is None or per_node < 1):
        r.ignore(f"trainer.devices ({devices}: set by the launcher, not the file)")
        per_node = None
    if found_n and (n is None or n < 1):
        r.ignore(f"trainer.num_nodes ({nodes}: set by the launcher, not the file)")
        n = None
    if per_node is not None:  # Lightning Trainer: devices = GPUs per node, num_nodes = nodes
        r.put("cluster.gpus_per_node", per_node, "trainer.devices")
        if n is not None:
            r.put("cluster.gpus", per_node * n, "trainer.devices * trainer.num_nodes")


def read(text: str, name: str) -> Imported:
    r = Reading(FORMAT)
    try:
        root = read_yaml(text)
    except (yaml.YAMLError, RecursionError) as e:
        r.problem(name, f"not valid YAML ({str(e).strip().splitlines()[0] if str(e).strip() else 'unreadable'}); "
                        "fix the syntax")
        return r.done(framework="nemo")
    if not isinstance(root, dict) or not isinstance(root.get("model"), dict):
        r.problem(name, "no `model:` mapping; a NeMo 1 config has trainer: and model: sections")
        return r.done(framework="nemo")
    m = _Reader(_Document(root), r)
    for part in (_model, _layout, _overlap_and_precision, _cluster):
        part(m)
    for path, _ in _leaves(root):
        key = ".".join(path)
        if key not in m.used:
            r.ignore(key)
    return r.done(framework="nemo")
