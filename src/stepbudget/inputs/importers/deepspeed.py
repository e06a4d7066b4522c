"""DeepSpeed's JSON config (``ds_config.json``): the ZeRO stage, the batch, the gradient bucket and overlap, and the
precision its engine reduces gradients in.

A DeepSpeed config says nothing of the model, and nothing of the number of GPUs: its batch keys are per GPU or
global (``train_batch_size`` = micro batch x accumulation x DP), so accumulation alone never gives the global
batch. ``"auto"`` values are left for a launcher (Hugging Face's Trainer) to fill: none is stated.

GPT-NeoX hands its DeepSpeed keys to the same engine, so neox.py reads them with the functions here.
Semantics from DeepSpeed (github.com/deepspeedai/DeepSpeed, commit edaa7221267243c7be7fb49c5d5f5c4fb97b4641):
deepspeed/runtime/config.py, zero/config.py, constants.py, precision_config.py, engine.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from stepbudget.inputs.importers._reading import Imported, Reading, integer, json_object

FORMAT = "DeepSpeed JSON"

MARKERS = ("zero_optimization", "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
           "bf16", "fp16")
"""Top-level keys only a DeepSpeed config holds (runtime/constants.py)."""
OTHERS = ("model_type", "architectures", "num_layers", "num-layers", "hidden_size", "hidden-size",
          "pipe_parallel_size", "pipe-parallel-size", "model_parallel_size", "model-parallel-size")
"""Keys that make a JSON object another format's: a Hugging Face config.json, a GPT-NeoX config written as JSON
(which carries DeepSpeed's keys beside the model's)."""

AUTO = "auto: the launcher sets it"


class Taken:
    """A config's top-level mapping that remembers the keys read, so that every other key is listed as ignored;
    ``spelled`` maps a normalized key back to the file's own spelling for messages."""

    def __init__(self, data: Mapping[str, Any], spelled: Mapping[str, str] | None = None) -> None:
        self.data = data
        self.spelled = dict(spelled or {})
        self.taken: set[str] = set()

    def __contains__(self, key: str) -> bool:
        return key in self.data

    def get(self, key: str, default: Any = None) -> Any:
        self.taken.add(key)
        return self.data.get(key, default)

    def name(self, key: str) -> str:
        return self.spelled.get(key, key)

    def rest(self) -> list[str]:
        return [self.name(k) for k in self.data if k not in self.taken]




def detect(text: str, name: str) -> bool:
    data = json_object(text)
    return data is not None and any(k in data for k in MARKERS) and not any(k in data for k in OTHERS)


def _no_key_twice(pairs: list[tuple[str, Any]]) -> dict:
    # DeepSpeed config.py loads with dict_raise_error_on_duplicate_keys: a key given twice is an error there too
    data = dict(pairs)
    if len(data) < len(pairs):
        twice = next(k for i, (k, _) in enumerate(pairs) if k in {p[0] for p in pairs[:i]})
        raise ValueError(f"key {twice!r} given twice; keep one")
    return data


def count(value: Any, key: str, field: str, r: Reading) -> None:
    """State ``field`` as the whole number ``value`` of ``key``; "auto" is listed, anything else a problem."""
    n = integer(value)
    if value == "auto":
        r.ignore(f"{key} ({AUTO})")
    elif n is None or n < 1:
        r.problem(key, f"{value!r} is not a positive whole number; give one, e.g. 8")
    else:
        r.put(field, n, key)


def read_batch(s: Taken, r: Reading) -> None:
    """The batch keys; DeepSpeed derives the missing one from train_batch = micro x accumulation x DP."""
    # runtime/config.py _set_batch_related_parameters: train_batch_size = micro x gradient_accumulation_steps x DP
    if "train_batch_size" in s:
        count(s.get("train_batch_size"), s.name("train_batch_size"), "batch.global_batch_seqs", r)
    if "train_micro_batch_size_per_gpu" in s:
        count(s.get("train_micro_batch_size_per_gpu"), s.name("train_micro_batch_size_per_gpu"), "layout.micro_batch", r)
    if "gradient_accumulation_steps" in s:
        key, steps = s.name("gradient_accumulation_steps"), s.get("gradient_accumulation_steps")
        if steps == "auto":
            r.ignore(f"{key} ({AUTO})")
        elif r.has("batch.global_batch_seqs"):
            r.ignore(f"{key} ({steps}: the global batch is train_batch_size; accumulation follows from it and DP)")
        else:
            r.ignore(f"{key} ({steps}: the global batch is micro batch x {steps} x DP, and the file states no DP; "
                     "state batch.global_batch_seqs)")


def _stage(value: Any, key: str, r: Reading) -> None:
    # zero/config.py: stage 0, 1, 2, 3 "refer to disabled, optimizer state partitioning, and optimizer+gradient
    # state partitioning, and optimizer+gradient+parameter partitioning"
    kinds = {0: "ddp", 1: "zero1", 2: "zero2", 3: "zero3"}
    stage = integer(value)
    if value == "auto":
        r.ignore(f"{key} ({AUTO})")
    elif stage not in kinds:
        r.problem(key, f"{value!r} is no ZeRO stage; give 0, 1, 2 or 3")
    else:
        r.put("layout.dp_kind", kinds[stage], key)


def _overlap(value: Any, key: str, r: Reading) -> None:
    # zero/config.py overlap_comm: "overlap the reduction of the gradients with backward computation"
    # (unset: on for stage 3 only, overlap_comm_valid; left to the framework recipe)
    if value == "auto":
        r.ignore(f"{key} ({AUTO})")
    elif isinstance(value, bool):
        r.put("overlap.dp", "auto" if value else 0.0, key)
    else:
        r.problem(key, f"{value!r} is not true or false; give one")


def _bucket(value: Any, key: str, r: Reading) -> None:
    # zero/config.py reduce_bucket_size: "Number of elements reduced/allreduced at a time" (elements = parameters)
    size = _number(value)
    if value == "auto":
        r.ignore(f"{key} ({AUTO})")
    elif size is not None and size >= 1:
        r.put("layout.dp_bucket_params", size, key)
    else:
        r.problem(key, f"{value!r} is not a number of elements; give one, e.g. 5e8")


def _number(value: Any) -> float | None:
    """A number as JSON or YAML states it (5e8, 500000000, and "5e8", which YAML 1.1 reads as text), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _offload(value: Any, key: str, r: Reading) -> None:
    # zero/offload_config.py: device "none", "cpu" or "nvme"; the tool costs no host or NVMe traffic
    device = value.get("device", "none") if isinstance(value, dict) else ("cpu" if value is True else "none")
    if device in ("none", None, False):
        r.ignore(f"{key} (no offload)")
    else:
        r.ignore(f"{key} (device {device}: not modelled: the step is costed as if on GPU)")


ZERO_KEYS: dict[str, Callable[[Any, str, Reading], None]] = {
    "stage": _stage, "overlap_comm": _overlap, "reduce_bucket_size": _bucket,
    "offload_optimizer": _offload, "offload_param": _offload,
    "cpu_offload": _offload, "cpu_offload_param": _offload,  # zero/config.py: deprecated spellings of the two
}


def read_zero(s: Taken, r: Reading) -> None:
    """The ``zero_optimization`` block: stage, gradient overlap and bucket; every other key listed as ignored."""
    if "zero_optimization" not in s:
        return
    name, block = s.name("zero_optimization"), s.get("zero_optimization")
    if not isinstance(block, dict):
        r.problem(name, f"{block!r} is not a block of ZeRO settings; give e.g. {{\"stage\": 1}}")
        return
    for key, value in block.items():
        ZERO_KEYS.get(key, lambda v, k, r: r.ignore(k))(value, f"{name}.{key}", r)
    if integer(block.get("stage")) == 0:
        # engine.py _backward_epilogue -> allreduce_gradients: without ZeRO the gradients are all-reduced after the
        # backward pass, in buffers of MEMORY_OPT_ALLREDUCE_SIZE = 500000000 elements; overlap_comm and
        # reduce_bucket_size are ZeRO's and go unused
        for key in ("overlap_comm", "reduce_bucket_size"):
            if key in block:
                r.ignore(f"{name}.{key} (ZeRO's; stage 0 does not use it)")
        r.put("overlap.dp", 0.0, f"{name}.stage 0 (all-reduce after the backward pass)")
        r.put("layout.dp_bucket_params", 500_000_000, f"{name}.stage 0 (engine.py MEMORY_OPT_ALLREDUCE_SIZE)")
    elif integer(block.get("stage")) == 3 and "overlap_comm" not in block:
        # zero/config.py overlap_comm_valid: unset, overlap_comm is True at stage 3 (the recipe's off is stages 0-2's)
        r.put("overlap.dp", "auto", f"{name}.stage 3 (overlap_comm unset: on at stage 3)")


def _dtype(value: Any) -> str | None:
    """A DeepSpeed data-type name as an element size: "bf16", "fp16", "fp32" (config.py DtypeEnum's spellings)."""
    names = {"bf16": "bf16", "bfloat16": "bf16", "torch.bfloat16": "bf16", "fp16": "fp16", "float16": "fp16",
             "torch.float16": "fp16", "half": "fp16", "fp32": "fp32", "float32": "fp32", "torch.float32": "fp32",
             "float": "fp32"}
    return names.get(value.strip().lower()) if isinstance(value, str) else None


HALF_NOTES = {key: "not modelled: state precision.grad_buffer and precision.optimizer_bytes" for key in
              ("bf16_master_weights_and_grads", "bf16_optimizer_states", "fp16_master_weights_and_grads")}
"""precision_config.py: master weights, gradients and optimizer states kept in 16 bits, which the tool takes only
as stated element sizes."""


def half_precision(s: Taken, r: Reading) -> tuple[str, str]:
    """What the fp16/bf16 blocks train in, and the key that says so: ("bf16", "bf16.enabled"); ("auto", key) where
    one is left to the launcher; ("off", "") where none is enabled; ("", "") where they contradict."""
    found: list[tuple[str, str]] = []
    # precision_config.py get_bfloat16_config: "bf16", else the old spelling "bfloat16"; enabled defaults to False
    for block, dtype in (("bf16", "bf16"), ("bfloat16", "bf16"), ("fp16", "fp16")):
        if block not in s:
            continue
        settings, name = s.get(block), s.name(block)
        if not isinstance(settings, dict):
            r.problem(name, f"{settings!r} is not a block; give e.g. {{\"enabled\": true}}")
            continue
        for key in settings:
            if key != "enabled":
                r.ignore(f"{name}.{key}" + (f" ({HALF_NOTES[key]})" if key in HALF_NOTES else ""))
        enabled = settings.get("enabled", False)
        if enabled == "auto":
            r.ignore(f"{name}.enabled ({AUTO})")
            found.append(("auto", f"{name}.enabled"))
        elif enabled is True:
            found.append((dtype, f"{name}.enabled"))
    on = [f for f in found if f[0] != "auto"]
    if len(on) > 1:  # config.py: 'bfloat16 and fp16 modes cannot be simultaneously enabled'
        r.problem(on[1][1], f"both {on[0][1]} and {on[1][1]} are true; DeepSpeed refuses that; enable one")
        return "", ""
    return (on or found or [("off", "")])[0]


def read_precision(s: Taken, r: Reading, absent_is_fp32: bool) -> None:
    """Element sizes from the fp16/bf16 blocks, ``communication_data_type`` and ``data_types``. Neither block on
    (``absent_is_fp32``, a DeepSpeed config read alone): the engine trains in FP32."""
    half, key = half_precision(s, r)
    autocast = s.get("torch_autocast")
    if "torch_autocast" in s:
        r.ignore(f"{s.name('torch_autocast')} (torch.autocast casts per operator: precision follows the bf16/fp16 "
                 "blocks)")
    if half == "off" and absent_is_fp32 and not (isinstance(autocast, dict) and autocast.get("enabled") is True):
        half, key = "fp32", "fp16, bf16 not enabled (DeepSpeed trains in FP32)"
    if half in ("bf16", "fp16", "fp32"):
        for field in ("precision.params", "precision.activations", "precision.grads"):
            r.put(field, half, key)
    # engine.py communication_data_type: the stated type, else fp16 / bf16 when enabled, else fp32
    if "communication_data_type" in s:
        name, value = s.name("communication_data_type"), s.get("communication_data_type")
        # config.py get_communication_data_type: value.lower(); "Supported data types: ['fp16', 'bf16', 'fp32']"
        if isinstance(value, str) and value.lower() in ("fp16", "bf16", "fp32"):
            r.put("precision.grads", value.lower(), name)
        elif value is not None:
            r.problem(name, f"{value!r} is no data type DeepSpeed reduces in; give fp16, bf16 or fp32")
    if "data_types" in s:
        _data_types(s.get("data_types"), s.name("data_types"), r)


def _data_types(block: Any, name: str, r: Reading) -> None:
    # constants.py: data_types.grad_accum_dtype "bf16" | "fp16" | "fp32": the buffer gradients accumulate in
    if not isinstance(block, dict):
        r.problem(name, f"{block!r} is not a block; give e.g. {{\"grad_accum_dtype\": \"fp32\"}}")
        return
    for key, value in block.items():
        if key == "grad_accum_dtype" and _dtype(value) is not None:
            r.put("precision.grad_buffer", _dtype(value), f"{name}.{key}")
        elif key == "grad_accum_dtype" and value is not None:
            r.problem(f"{name}.{key}", f"{value!r} is no data type; give fp16, bf16 or fp32")
        else:
            r.ignore(f"{name}.{key}")


def _tensor_parallel(s: Taken, r: Reading) -> None:
    # tensor_parallel/config.py TPTrainingConfig.autotp_size: AutoTP's degree, "When set to 0 ... disabled"
    name, block = s.name("tensor_parallel"), s.get("tensor_parallel")
    if not isinstance(block, dict):
        r.problem(name, f"{block!r} is not a block; give e.g. {{\"autotp_size\": 4}}")
        return
    for key, value in block.items():
        if key == "autotp_size" and integer(value) == 0:
            r.put("layout.tp", 1, f"{name}.{key} (0: AutoTP off)")
        elif key == "autotp_size":
            count(value, f"{name}.{key}", "layout.tp", r)
        else:
            r.ignore(f"{name}.{key}")


NOTES = {
    "activation_checkpointing": "configures deepspeed.checkpointing for a model that calls it; which layers "
                                "recompute is the model's code: state layout.recompute",
    "sequence_parallel_size": "Ulysses sequence parallelism is not modelled",
    "pipeline": "the pipeline's stages are set in the model's code (PipelineModule): state layout.pp",
}
"""Keys read past with the reason they change nothing computed here."""


def read(text: str, name: str) -> Imported:
    r = Reading(FORMAT)
    try:
        data = json.loads(text, object_pairs_hook=_no_key_twice)
    except ValueError as e:
        r.problem(name or "file", f"not valid JSON ({str(e).splitlines()[0] if str(e) else 'unreadable'}); "
                                  "fix the syntax")
        return r.done(framework="deepspeed")
    if not isinstance(data, dict):
        r.problem(name or "file", "a DeepSpeed config is a JSON object ({...}); give one")
        return r.done(framework="deepspeed")
    s = Taken(data)
    read_batch(s, r)
    read_zero(s, r)
    read_precision(s, r, absent_is_fp32=True)
    if "tensor_parallel" in s:
        _tensor_parallel(s, r)
    for key, why in NOTES.items():
        if key in s:
            s.get(key)
            r.ignore(f"{key} ({why})")
    for key in s.rest():
        r.ignore(key)
    return r.done(framework="deepspeed")
