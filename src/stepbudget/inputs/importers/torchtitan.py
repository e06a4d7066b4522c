"""torchtitan's TOML job configs (``torchtitan/models/*/train_configs/*.toml``) read into the scenario's schema.

A torchtitan TOML names its model (``[model] name``, ``flavor``) but holds none of its shapes: the flavor's shapes live
in Python (``torchtitan/models/<name>/__init__.py``). So the model is stated by name only, a catalog row's name where
the flavor is that released model (``_CATALOG_NAMES``), and the catalog or a config.json supplies the shapes.

Semantics cite torchtitan at 238fa99 (``torchtitan/config/job_config.py``, the last commit with TOML configs, Feb 2026)
and, for the older key places (``[training] batch_size``, ``compile``, ``[experimental]`` degrees, ``[float8]``), at
6b03ffa (``torchtitan/config_manager.py``, Dec 2024). What the file does not say is left to the torchtitan recipe.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from typing import Any

from stepbudget.inputs.importers._reading import Imported, Reading, count, integer

FORMAT = "torchtitan TOML"
FRAMEWORK = "torchtitan"

_SECTIONS = frozenset({"job", "profiling", "metrics", "model", "optimizer", "lr_scheduler", "training", "parallelism",
                       "checkpoint", "activation_checkpoint", "compile", "quantize", "float8", "experimental", "comm",
                       "memory_estimation", "fault_tolerance", "validation", "debug"})
"""JobConfig's sections (job_config.py JobConfig; float8 and experimental: config_manager.py of Dec 2024)."""

_CATALOG_NAMES = {
    # torchtitan/models/llama3/__init__.py llama3_args: 8B/70B/405B are Llama 3.1's shapes (hf_assets_path Llama-3.1-*);
    # the _flex and _varlen flavors change only the attention kernel
    ("llama3", "8B"): "Llama 3.1 8B",
    ("llama3", "70B"): "Llama 3.1 70B",
    ("llama3", "405B"): "Llama 3.1 405B",
    # torchtitan/models/deepseek_v3/__init__.py "671B": DeepSeek-V3's shapes (61 layers, 7168, 256 experts, MLA)
    ("deepseek_v3", "671B"): "DeepSeek-V3",
}
"""(model.name, flavor) -> the catalog row's name, only where the flavor is that released model's shape."""

_NO_MTP = {"deepseek_v3"}
"""Models whose torchtitan implementation builds no multi-token-prediction module (deepseek_v3/model/: none)."""

_SCHEDULES = {
    # torch.distributed.pipelining schedules.py get_schedule_class: names matched case-insensitively
    "1f1b": "1f1b",
    "interleaved1f1b": "interleaved-1f1b",
    "gpipe": "gpipe",
}
_SCHEDULE_NEAREST = {
    "zbvzerobubble": "zb-h2 (zero bubble; ZB-V holds two stages per rank in a V)",
    "interleavedzerobubble": "zb-h2 (zero bubble; this one interleaves several stages per rank)",
    "dualpipev": "dualpipe (DualPipeV is DualPipe cut in half: its bubble on p ranks is DualPipe's on 2p)",
    "loopedbfs": "interleaved-1f1b (LoopedBFS runs every micro-batch through one stage before the next)",
}
_MULTI_STAGE = {"interleaved1f1b", "loopedbfs", "interleavedzerobubble", "zbvzerobubble", "dualpipev"}
"""PipelineScheduleMulti subclasses: more than one stage per rank."""

_DTYPES = {"bfloat16": "bf16", "float32": "fp32"}
_FLOAT8_LINEAR = {"float8", "quantize.linear.float8"}  # "float8": the converter's name before torchtitan #1701 (2025)
_MX_LINEAR = {"mx", "quantize.linear.mx"}


def _leaves(table: dict, prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in table.items():
        if isinstance(value, dict):
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _load(text: str) -> dict | None:
    try:
        return tomllib.loads(text)
    except (tomllib.TOMLDecodeError, ValueError, RecursionError):
        return None


def detect(text: str, name: str) -> bool:
    """A TOML document with torchtitan's job, training or parallelism section and either the model's flavor or
    three of JobConfig's sections (a stepbudget scenario TOML has none of job, training, parallelism)."""
    if "[" not in text:
        return False
    data = _load(text)
    if data is None:
        return False
    tables = {key for key, value in data.items() if isinstance(value, dict)}
    if not tables & {"job", "training", "parallelism"}:
        return False
    model = data.get("model")
    return (isinstance(model, dict) and "flavor" in model) or len(tables & _SECTIONS) >= 3


class _Keys:
    """The file's leaves by dotted key; ``take`` hands out each once, ``rest`` is what nothing took."""

    def __init__(self, data: dict):
        self.flat = dict(_leaves(data))
        self.taken: set[str] = set()

    def take(self, *keys: str) -> tuple[str, Any]:
        """The first of ``keys`` the file holds and its value (all of them marked read), or ("", None)."""
        self.taken.update(keys)
        return next(((k, self.flat[k]) for k in keys if k in self.flat), ("", None))

    def rest(self) -> list[str]:
        return [k for k in self.flat if k not in self.taken]


def _degree(r: Reading, key: str, value: Any, fill_ok: bool = False) -> int | None:
    """A parallel degree >= 1, or None: -1 where it means "the rest" (``fill_ok``) is listed as ignored."""
    n = integer(value)
    if fill_ok and n is not None and n < 0:
        r.ignore(f"{key} ({value}: the ranks left over after the other degrees; not stated)")
        return None
    if n is None or n < 1:
        r.problem(key, f"{value!r} is no degree; give a whole number >= 1")
        return None
    return n




def _read_model(r: Reading, k: _Keys) -> None:
    name_key, name = k.take("model.name")
    flavor_key, flavor = k.take("model.flavor")
    if isinstance(name, str) and isinstance(flavor, str):
        row = _CATALOG_NAMES.get((name, flavor.split("_")[0]))
        if row:  # the flavor is the released model: its catalog row gives the shapes torchtitan's flavor table holds
            r.put("model.catalog", row, "model.name + model.flavor")
        else:
            r.put("model.name", f"{name} {flavor}", "model.name + model.flavor")
        if name in _NO_MTP:
            r.put("model.mtp_layers", 0, "model.name (torchtitan's deepseek_v3 builds no MTP module)")
    else:
        for key, value in ((name_key, name), (flavor_key, flavor)):
            if key:
                r.ignore(f"{key} ({value!r}: the model is named by model.name and model.flavor together)")


def _read_degrees(r: Reading, k: _Keys) -> dict[str, int | None]:
    """The parallel degrees the file states; parallelism.* (2025 on) or training./experimental.* (2024)."""
    got: dict[str, int | None] = {}
    places = {
        "tp": ("parallelism.tensor_parallel_degree", "training.tensor_parallel_degree"),
        "pp": ("parallelism.pipeline_parallel_degree", "experimental.pipeline_parallel_degree"),
        "cp": ("parallelism.context_parallel_degree", "experimental.context_parallel_degree"),
        "ep": ("parallelism.expert_parallel_degree",),
    }
    for axis, keys in places.items():
        key, value = k.take(*keys)
        got[axis] = _degree(r, key, value) if key else None
        if got[axis] is not None:
            r.put(f"layout.{axis}", got[axis], key)
    key, value = k.take("parallelism.expert_tensor_parallel_degree")
    if key and (etp := _degree(r, key, value)) is not None:
        if (got["ep"] or 1) > 1:  # job_config.py: "No effect for non-MoE models, or when ep = 1"
            r.put("layout.expert_tp", etp, key)
        else:
            r.ignore(f"{key} (no effect without expert parallelism)")
    # job_config.py Parallelism: dp_shard -1 = the ranks left over; dp = dp_replicate * dp_shard (parallel_dims.py)
    shard_key, shard = k.take("parallelism.data_parallel_shard_degree", "training.data_parallel_shard_degree",
                              "training.data_parallel_degree")
    rep_key, rep = k.take("parallelism.data_parallel_replicate_degree", "training.data_parallel_replicate_degree")
    got["shard"] = _degree(r, shard_key, shard, fill_ok=True) if shard_key else None
    got["replicate"] = _degree(r, rep_key, rep) if rep_key else None
    sharded = bool(shard_key) and integer(shard) != 1  # -1 or > 1: FSDP (HSDP with replicas), parallel_dims.py
    if got["shard"] is not None:
        got["dp"] = got["shard"] * (got["replicate"] or 1)
        r.put("layout.dp", got["dp"], f"{shard_key} x {rep_key or 'replicate 1 (absent)'}")
    if sharded:
        r.put("layout.dp_kind", "fsdp", shard_key)
        if got["replicate"] is not None:
            r.put("layout.dp_replicas", got["replicate"], rep_key)
    elif got["shard"] == 1 and (got["replicate"] or 1) > 1:  # "Otherwise, the parallelism method used is DDP"
        r.put("layout.dp_kind", "ddp", f"{shard_key} 1, {rep_key} > 1")
    return got


def _read_pipeline(r: Reading, k: _Keys, pp: int | None) -> None:
    key, value = k.take("parallelism.pipeline_parallel_schedule", "experimental.pipeline_parallel_schedule")
    lps_key, lps = k.take("parallelism.pipeline_parallel_layers_per_stage")
    if not key or pp is None or pp == 1:
        if key:
            r.ignore(f"{key} ({value!r}: no pipeline, pipeline_parallel_degree is {pp or 'not stated'})")
        if lps_key:
            r.ignore(f"{lps_key} (no pipeline stated)")
        return
    name = str(value).lower()
    if name in _SCHEDULES:
        r.put("layout.schedule", _SCHEDULES[name], key)
    elif name in _SCHEDULE_NEAREST:
        r.problem(key, f"{value!r} has no schedule of its own in stepbudget; set layout.schedule to the nearest, "
                       f"{_SCHEDULE_NEAREST[name]}")
    else:
        r.problem(key, f"{value!r} is no pipeline schedule stepbudget knows; set layout.schedule "
                       "(1f1b, interleaved-1f1b, gpipe, zb-h1, zb-h2, dualpipe)")
    multi = name in _MULTI_STAGE
    if lps_key:  # pipeline_parallel.py: stages = ceil((layers + first_less + last_less) / layers_per_stage)
        if multi:
            r.problem(lps_key, f"{lps} layers per stage: the stages per rank follow from the model's layers, which "
                               "this file does not hold; set layout.virtual_stages")
        else:
            r.ignore(f"{lps_key} (a single-stage schedule holds one stage per rank)")
    elif multi and name in _SCHEDULES:  # pipeline_parallel.py: "stages_per_rank = 1 if is_single_stage_schedule else 2"
        r.put("layout.virtual_stages", 2, f"{key} (torchtitan's looped schedules build 2 stages per rank)")
    # pipeline_parallel.py input_weight/output_weight: the embedding and the output count as this many layers
    for edge, field in (("first", "embedding_in_pipeline_split"), ("last", "loss_in_pipeline_split")):
        key, value = k.take(f"parallelism.pipeline_parallel_{edge}_stage_less_layers")
        if key:
            n = integer(value)
            if n in (0, 1):
                r.put(f"layout.{field}", n == 1, key)
            else:
                r.problem(key, f"{value!r}: stepbudget counts the {'embedding' if edge == 'first' else 'output'} "
                               "as 0 or 1 layer; set layout.stage_layers for another split")


def _read_batch(r: Reading, k: _Keys, got: dict[str, int | None]) -> None:
    key, value = k.take("training.local_batch_size", "training.batch_size")
    local = count(r, key, value) if key else None
    mbs_key, mbs = k.take("parallelism.pipeline_parallel_microbatch_size")
    nmb_key, nmb = k.take("parallelism.pipeline_parallel_microbatches", "experimental.pipeline_parallel_microbatches")
    pipelined = (got.get("pp") or 1) > 1
    if local is not None and not pipelined:  # job_config.py: "Local batch size (i.e., per-device batch size)"
        r.put("layout.micro_batch", local, key)
    elif local is not None:  # pipeline_parallel.py: n_microbatches = local_batch_size // microbatch_size
        r.ignore(f"{key} ({local}: a DP rank's batch per step, split into pipeline micro-batches)")
    if not pipelined:
        for k_, v in ((mbs_key, mbs), (nmb_key, nmb)):
            if k_:
                r.ignore(f"{k_} ({v!r}: no pipeline stated)")
    elif mbs_key:
        if (size := count(r, mbs_key, mbs)) is not None:
            r.put("layout.micro_batch", size, mbs_key)
    elif nmb_key:  # config_manager.py (Dec 2024): the number of micro-batches the local batch is split into
        n = count(r, nmb_key, nmb)
        if n is not None and local is not None and local % n == 0:
            r.put("layout.micro_batch", local // n, f"{key} / {nmb_key}")
        elif n is not None and local is not None:
            r.problem(nmb_key, f"{n} micro-batches do not split a local batch of {local}; give a divisor of it")
    gkey, gvalue = k.take("training.global_batch_size")
    g = integer(gvalue)
    if gkey and g is not None and g > 0:
        r.put("batch.global_batch_seqs", g, gkey)
    elif gkey and g is not None and g < 0 and local is not None and (dp := got.get("dp")):
        # train.py: "global_batch_size = job_config.training.local_batch_size * batch_degree" (dp)
        r.put("batch.global_batch_seqs", local * dp, f"{key} x layout.dp ({gkey} {gvalue})")
    elif gkey and g is not None and g < 0:
        r.ignore(f"{gkey} ({gvalue}: local batch x DP degree, which this file does not state)")
    elif gkey:
        r.problem(gkey, f"{gvalue!r} is no batch size; give a whole number of sequences, or -1")


def _read_recompute(r: Reading, k: _Keys) -> None:
    key, mode = k.take("activation_checkpoint.mode")
    opt_key, opt = k.take("activation_checkpoint.selective_ac_option")
    if not key:
        return
    if mode in ("none", "full"):
        r.put("layout.recompute", mode, key)
    elif mode == "selective" and str(opt) == "op":  # activation_checkpoint.py _apply_op_sac: the per-op policy
        r.put("layout.recompute", "selective-op", f"{key} + {opt_key}")
    elif mode == "selective" and str(opt).isdigit():  # _apply_layer_sac: full AC on every ac_freq-th block
        if int(str(opt)) == 1:
            r.put("layout.recompute", "full", f"{key} + {opt_key} (every block)")
        else:
            r.problem(opt_key, f"{opt}: full recompute of every {opt}th block; stepbudget recomputes all blocks or "
                               "none; set layout.recompute to full (an upper bound) or none")
    elif mode == "selective":
        r.ignore(f"{key} (selective, with selective_ac_option {'absent' if not opt_key else repr(opt)}: the kind of "
                 "selective recompute is not stated)")
    elif mode == "memory_budget":
        r.problem(key, "memory_budget lets the compiler's partitioner choose what to recompute; set layout.recompute")
    else:
        r.problem(key, f"{mode!r} is no mode torchtitan knows (none, selective, full, memory_budget); fix it")


def _read_compile(r: Reading, k: _Keys) -> bool | None:
    key, enable = k.take("compile.enable", "training.compile")
    comp_key, components = k.take("compile.components")
    if not key:
        return None
    if not isinstance(enable, bool):
        r.problem(key, f"{enable!r}: give true or false")
        return None
    # llama3/infra/parallelize.py: model_compile_enabled = compile.enable and "model" in compile.components
    on = enable and (not comp_key or "model" in (components or []))
    r.put("layout.compiled", on, f"{key} + {comp_key}" if comp_key else key)
    return on


def _read_precision(r: Reading, k: _Keys) -> None:
    conv_key, converters = k.take("model.converters")
    converters = set(converters) if isinstance(converters, list) else set()
    old_key, old_fp8 = k.take("float8.enable_float8_linear")  # config_manager.py (Dec 2024): [float8] section
    fp8 = bool(converters & _FLOAT8_LINEAR) or old_fp8 is True
    fp8_key = f"{conv_key} float8" if converters & _FLOAT8_LINEAR else old_key
    if fp8:
        r.put("precision.gemm", "fp8", fp8_key)
    elif converters & _MX_LINEAR:  # MXFP8: FP8 elements with per-32 block scales, at the FP8 rate
        r.put("precision.gemm", "fp8", f"{conv_key} mx (MXFP8)")
    elif old_key:
        r.put("precision.gemm", "bf16", old_key)
    elif conv_key and "quantize.grouped_mm.float8" not in converters:
        r.ignore(f"{conv_key} ({sorted(converters)}: no FP8 or MX linears)")
    if "quantize.grouped_mm.float8" in converters and not fp8:
        r.problem(conv_key, "FP8 for the experts' grouped GEMMs only; precision.gemm is one setting for all GEMMs: "
                            "set it to fp8 if the experts' GEMMs dominate")
    ag_key, ag = k.take("quantize.linear.float8.enable_fsdp_float8_all_gather", "float8.enable_fsdp_float8_all_gather")
    param_key, param = k.take("training.mixed_precision_param")
    if fp8 and ag is True:  # float8.py: FSDP all-gathers the Float8Linear weights in FP8
        r.put("precision.params", "fp8", ag_key)
        if param_key:
            r.ignore(f"{param_key} (FP8 all-gather of the linears' weights stated by {ag_key})")
    elif param_key:
        _dtype(r, "precision.params", param_key, param)
    if ag_key and not (fp8 and ag is True):
        r.ignore(f"{ag_key} ({ag!r}{'' if fp8 else ': float8 is not among model.converters'})")
    reduce_key, reduce = k.take("training.mixed_precision_reduce")
    if reduce_key:  # job_config.py: dtype of FSDP's reductions
        _dtype(r, "precision.grads", reduce_key, reduce)


def _dtype(r: Reading, field: str, key: str, value: Any) -> None:
    if value in _DTYPES:
        r.put(field, _DTYPES[value], key)
    else:
        r.problem(key, f"{value!r} is no dtype torchtitan takes; give bfloat16 or float32")


def _read_overlap(r: Reading, k: _Keys, compiled: bool | None, pp: int | None) -> None:
    key, value = k.take("parallelism.enable_async_tensor_parallel", "experimental.enable_async_tensor_parallel")
    if key and value is True and compiled is False:  # tensor_parallel.py: "Async TP requires 'model' in compile"
        r.problem(key, "async TP needs the model compiled (compile.enable with 'model' in compile.components); "
                       "set compile.enable or drop async TP")
    elif key and isinstance(value, bool):  # micro-pipelined TP: the sweep's "async TP" hides TP in the GEMMs
        r.put("overlap.tp", 1.0 if value else 0.0, key)
    elif key:
        r.problem(key, f"{value!r}: give true or false")
    key, value = k.take("parallelism.fsdp_reshard_after_forward")
    if key:  # llama3/infra/parallelize.py apply_fsdp: "default" -> reshard_after_forward = not pp_enabled
        if value in ("always", "never"):
            r.put("layout.reshard_after_forward", value == "always", key)
        elif value == "default" and pp is not None:
            r.put("layout.reshard_after_forward", pp == 1, f"{key} default (resharded unless pipelined)")
        elif value == "default":
            r.ignore(f"{key} (default: follows the pipeline degree, which this file does not state)")
        else:
            r.problem(key, f"{value!r}: give default, always or never")
    key, value = k.take("parallelism.context_parallel_rotate_method", "experimental.context_parallel_rotate_method")
    if key:  # job_config.py: allgather gathers every K,V shard; alltoall passes the shards round the ring
        kinds = {"allgather": "all-gather", "alltoall": "ring"}
        if value in kinds:
            r.put("layout.cp_kind", kinds[value], key)
        else:
            r.problem(key, f"{value!r}: give allgather or alltoall")
    key, value = k.take("parallelism.expert_parallel_comm_backend")
    if key:  # job_config.py: "standard" PyTorch all-to-all, or DeepEP's kernels
        kinds = {"standard": "all-to-all", "deepep": "deepep"}
        if value in kinds:
            r.put("layout.ep_kind", kinds[value], key)
        else:
            r.problem(key, f"{value!r}: give standard or deepep")


def read(text: str, name: str) -> Imported:
    """What a torchtitan TOML states; keys it does not use are listed as ignored, bad values as problems."""
    r = Reading(FORMAT)
    try:
        data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, ValueError, RecursionError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        r.problem(name or "file", f"not valid TOML ({first}); fix the syntax")
        return r.done(FRAMEWORK)
    k = _Keys(data)
    _read_model(r, k)
    key, value = k.take("training.seq_len")
    if key and (s := count(r, key, value)) is not None:
        r.put("model.seq_len", s, key)
    got = _read_degrees(r, k)
    _read_pipeline(r, k, got.get("pp"))
    _read_batch(r, k, got)
    _read_recompute(r, k)
    compiled = _read_compile(r, k)
    _read_precision(r, k)
    _read_overlap(r, k, compiled, got.get("pp"))
    for key in k.rest():
        r.ignore(key)
    return r.done(FRAMEWORK)
