"""Published runs: read a file in the schema of published_runs.yaml and check what a prediction needs.

The schema (``schema_version: 1``) is the one documented at the top of the shipped file: each
run has ``id``, ``source``, ``model``, ``hardware``, ``num_gpus``, ``layout`` and ``measured``,
values as printed by the source and ``null`` where the source is silent. A run the tool cannot
read raises ``RunError`` naming the run's id and the field.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml

from stepbudget.inputs.documents import plain, read_yaml
from stepbudget.inputs.files import read_text
from stepbudget.inputs.errors import OptionError
from stepbudget.inputs.scenario import ScenarioError
from stepbudget.validation.stated import CONVENTIONS, element_bytes_of, text_of

SHIPPED = "published_runs.yaml"

# model.* and layout.* fields a prediction cannot do without, each a positive integer where given: the model's
# catalog row may give the model's shape (never its seq_len); the global batch is read by rules.batch, from
# global_batch_seqs, global_batch_tokens or a local batch (BATCH_FIELDS)
REQUIRED = {
    "model": ("layers", "hidden", "heads", "vocab", "seq_len"),
    "layout": ("tp", "pp"),
}

BATCH_FIELDS = ("global_batch_seqs", "global_batch_tokens", "batch_size_per_dp", "batch_size_per_gpu", "micro_batch",
                "grad_accum")
"""The layout fields a run's global batch is read from (rules.batch), in the order they are tried."""

MEASURED_FIGURES = ("step_time_s", "tokens_per_s_per_gpu", "tokens_per_s", "samples_per_s", "tflops_per_gpu",
                    "mfu_pct")
"""What a run's ``measured`` section may print for one step, in the order preferred (validation/measured.py)."""

FSDP_FIELDS = ("fsdp", "ici_fsdp_parallelism", "dcn_fsdp_parallelism", "ici_data_parallelism",
               "dcn_data_parallelism")
"""JAX (MaxText) sharding degrees a run may state: FSDP over ici x dcn FSDP, pure DP over ici x dcn data."""

PRECISION_FIELDS = ("dispatch_precision", "combine_precision", "saved_activations_precision",
                    "optimizer_moments")
"""Optional layout fields naming a tensor's precision (fp32, bf16, fp16, fp8; or bytes per element)."""


# optional fields the conversion reads as numbers: (section, field, integer?)
_NUMBERS = (
    ("model", "kv_heads", True), ("model", "head_dim", True), ("model", "ffn_hidden", True),
    ("model", "mtp_depth", True), ("model", "dense_layers", True),
    ("hardware", "gpus_per_node", True), ("hardware", "nics_per_node", True),
    ("hardware", "nic_gbps_per_gpu", False), ("hardware", "nvlink_bw_gbps", False),
    ("hardware", "hbm_gb", False), ("hardware", "hbm_bw_tbps", False), ("layout", "dp_replicas", True),
    ("layout", "cp", True), ("layout", "ep", True), ("layout", "sp_attention", True),
    ("layout", "virtual_pipeline_chunks_per_rank", True), ("layout", "micro_batch", True),
    ("layout", "global_batch_seqs", True), ("layout", "batch_size_per_dp", True),
    ("layout", "batch_size_per_gpu", True), ("layout", "grad_accum", True),
    *(("layout", name, True) for name in FSDP_FIELDS),
    ("measured", "step_time_s", False), ("measured", "tflops_per_gpu", False),
    ("measured", "tokens_per_s_per_gpu", False), ("measured", "tokens_per_s", False),
    ("measured", "samples_per_s", False),
    ("measured", "tflops_per_gpu_causal", False), ("measured", "tflops_per_gpu_noncausal", False),
    ("measured", "mfu_pct", False), ("measured", "mfu_pct_causal", False), ("measured", "mfu_pct_noncausal", False),
)
PEAK_WORDS = ("bf16", "fp8")
"""``measured.peak_tflops`` may name a precision instead of a number: the GPU row's dense peak at it."""
_MOE_NUMBERS = ("num_experts", "top_k", "expert_ffn_hidden", "shared_experts", "node_limit")
_MAY_BE_ZERO = ("mtp_depth", "dense_layers", "shared_experts")


OVERLAP_DIMS = ("tp", "cp", "ep", "dp", "pp")
"""Dimensions a run's optional ``layout.overlap`` may list as overlapped by its framework."""


def overlap_dims(value: object) -> list[str]:
    """The dimensions ``layout.overlap`` lists (a list of names; ``[]`` or "none" for none); ValueError otherwise."""
    if isinstance(value, str) and value.strip().lower() in ("", "none"):
        return []
    if not isinstance(value, list) or not all(isinstance(d, str) and d.lower() in OVERLAP_DIMS for d in value):
        raise ValueError(value)
    return [d.lower() for d in value]


class RunError(ScenarioError):
    """A run in a runs file is malformed: the message names its id and the field."""


class RunsFileError(OptionError, RunError):
    """The runs file itself cannot be read: its option's problem."""

    def __init__(self, problem: str):
        super().__init__("runs file", problem)


def shipped_runs_text() -> str:
    return (resources.files("stepbudget.validation") / SHIPPED).read_text(encoding="utf-8")


@dataclass(frozen=True)
class Malformed:
    """A run of a runs file that cannot be read: listed as not predicted, with what to fix."""

    id: str
    """The run's id, or ``runs[i]`` when it has none."""
    message: str
    """One line naming the field and the fix (``RunError``'s message)."""


def load_runs(path: str | Path | None = None) -> list[dict]:
    """The runs of ``path`` (default: the shipped file), each checked for the fields a prediction needs;
    RunError on the first malformed run (``--strict``)."""
    runs, bad = read_runs(path)
    if bad:
        raise RunError(bad[0].message)
    return runs


def read_runs(path: str | Path | None = None) -> tuple[list[dict], list[Malformed]]:
    """The well-formed runs of ``path`` and the malformed ones, each with its one-line reason: one bad run
    does not hide the others. RunError when the file itself cannot be read."""
    where = str(path) if path else SHIPPED
    try:
        text = read_text(path, "runs file") if path else shipped_runs_text()
    except OptionError as e:  # the file's own problem, named by the option that gave it
        raise RunsFileError(e.problem) from None
    try:
        data = read_yaml(text)
    except yaml.YAMLError as e:
        raise RunsFileError(f"{where} is not valid YAML ({str(e).splitlines()[0]}); fix the syntax") from None
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
        try:
            plain(data, "runs")
        except ScenarioError as e:
            raise RunsFileError(str(e)) from None
        raise RunsFileError(f"{where} has no 'runs:' list; use the schema of the shipped {SHIPPED}")
    runs, bad = [], []
    seen: set[str] = set()
    for i, run in enumerate(data["runs"]):
        try:
            plain(run, f"runs[{i}]")
            check_run(run, i)
            if run["id"] in seen:
                raise RunError(f"run {run['id']}: id: appears twice; give each run its own id")
        except ScenarioError as e:
            rid = run.get("id") if isinstance(run, dict) and isinstance(run.get("id"), str) and run["id"] else None
            bad.append(Malformed(rid or f"runs[{i}]", str(e)))
            continue
        seen.add(run["id"])
        runs.append(run)
    return runs, bad


def check_run(run: object, index: int) -> None:
    """RunError unless ``run`` has an id, a positive GPU count, and model and layout numbers that are
    positive integers where given (``null``, not stated, is allowed: such a run is listed as
    unpredictable with the field named)."""
    if not isinstance(run, dict):
        raise RunError(f"runs[{index}]: expected a mapping with id, model, hardware, num_gpus, layout, measured")
    rid = _run_id(run, index)
    for check in _CHECKS:
        check(run, rid)


def _run_id(run: dict, index: int) -> str:
    rid = run.get("id")
    if not isinstance(rid, str) or not rid:
        got = "missing" if rid is None or rid == "" else f"{rid!r} is not text"
        raise RunError(f"runs[{index}]: id: {got}; give every run a unique string id")
    return rid


def _check_gpus(run: dict, rid: str) -> None:
    gpus = run.get("num_gpus")
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 1:
        raise RunError(f"run {rid}: num_gpus: {gpus!r} is not a positive integer; give the GPU count")


def _check_required(run: dict, rid: str) -> None:
    for section, fields in REQUIRED.items():
        body = run.get(section)
        if not isinstance(body, dict):
            raise RunError(f"run {rid}: {section}: missing; add the {section} section")
        for name in fields:
            value = body.get(name)
            if value is None:  # not stated: the model's catalog row may fill it, else the run is unpredictable
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise RunError(f"run {rid}: {section}.{name}: {value!r} is not a positive integer; give the number")


def _check_sections(run: dict, rid: str) -> None:
    if not isinstance(run.get("hardware"), dict) or not isinstance(run["hardware"].get("gpu"), str):
        raise RunError(f"run {rid}: hardware.gpu: missing; name the GPU (e.g. 'NVIDIA H100 SXM')")
    if not isinstance(run.get("measured"), dict):
        raise RunError(f"run {rid}: measured: missing; give one of {', '.join(MEASURED_FIGURES)}")
    if run.get("source") is not None and not isinstance(run["source"], dict):
        raise RunError(f"run {rid}: source: expected a mapping (document, locator), got {run['source']!r}")


def _check_numbers(run: dict, rid: str) -> None:
    for section, name, integer in _NUMBERS:  # _check_required and _check_sections saw every section is a mapping
        _number(rid, f"{section}.{name}", run[section].get(name), integer)
    moe = run["model"].get("moe")
    if moe is not None:
        if not isinstance(moe, dict):
            raise RunError(f"run {rid}: model.moe: expected a mapping (num_experts, top_k, ...), got {moe!r}")
        for name in _MOE_NUMBERS:
            _number(rid, f"model.moe.{name}", moe.get(name), True)
    peak = run["measured"].get("peak_tflops")
    if peak not in PEAK_WORDS:  # a number, or the GPU row's peak of a precision by name
        _number(rid, "measured.peak_tflops", peak, False)
    dp = run["layout"].get("dp")
    if not isinstance(dp, str):  # a number, or text the conversion reads
        _number(rid, "layout.dp", dp, True)
    tokens = run["layout"].get("global_batch_tokens")
    if not isinstance(tokens, str):  # a number, or text as a table prints it ("16M (table)"), which is not read
        _number(rid, "layout.global_batch_tokens", tokens, True)


def _check_words(run: dict, rid: str) -> None:
    """Fields read as one of a few words: the FLOP convention, yes/no flags, precisions."""
    meas, lay = run["measured"], run["layout"]
    convention = meas.get("flops_convention")
    if convention is not None and str(convention).strip().lower() not in {c.lower() for c in CONVENTIONS}:
        raise RunError(f"run {rid}: measured.flops_convention: {convention!r} is not a FLOP count the tool knows; "
                       f"give one of {', '.join(CONVENTIONS)}")
    for section, name in _FLAGS:
        value = run[section].get(name)
        if value is not None and not isinstance(value, bool) and not re.match(_YES_NO, text_of(value)):
            raise RunError(f"run {rid}: {section}.{name}: {value!r} is not yes or no; give true or false")
    for name in PRECISION_FIELDS:
        if lay.get(name) is not None and element_bytes_of(lay[name]) is None:
            raise RunError(f"run {rid}: layout.{name}: {lay[name]!r} names no precision; give fp32, bf16, fp16 or "
                           "fp8 (or bytes per element)")


_YES_NO = r"\s*(true|false|yes|no|1|0)(?![a-z0-9])"
"""A yes/no field: the word first, where the source says it after it ("true (3.3.2: ...)")."""
_FLAGS = (("measured", "flops_with_recompute"), ("layout", "embedding_in_pipeline_split"),
          ("layout", "loss_in_pipeline_split"), ("layout", "account_for_embedding_in_pipeline_split"),
          ("layout", "account_for_loss_in_pipeline_split"))


def _check_overlap(run: dict, rid: str) -> None:
    if run["layout"].get("overlap") is not None:
        try:
            overlap_dims(run["layout"]["overlap"])
        except ValueError:
            raise RunError(f"run {rid}: layout.overlap: list the dimensions the framework overlaps, among "
                           f"{', '.join(OVERLAP_DIMS)} ([] for none)") from None


_CHECKS: tuple[Callable[[dict, str], None], ...] = (
    _check_gpus, _check_required, _check_sections, _check_numbers, _check_words, _check_overlap)
"""What ``check_run`` checks once the run has an id, in order: each raises RunError naming the field. The
sections are mappings once ``_check_required`` and ``_check_sections`` pass, so the later checks index them."""


def _number(rid: str, field: str, value: object, integer: bool) -> None:
    """RunError unless ``value`` is None (not stated) or a positive number (an integer where one is needed)."""
    if value is None:
        return
    kind = int if integer else (int, float)
    zero_ok = field.rsplit(".", 1)[-1] in _MAY_BE_ZERO
    if (isinstance(value, bool) or not isinstance(value, kind) or not math.isfinite(value)
            or not (value >= 0 if zero_ok else value > 0)):
        what = ("a non-negative" if zero_ok else "a positive") + (" integer" if integer else " number")
        raise RunError(f"run {rid}: {field}: {value!r} is not {what}; give the number (units in the schema) or null")
