"""A scenario is model + cluster + layout + batch: loaded from a preset or a file, overridden
with --set, and checked as a whole. Every error names the field and the fix."""

from __future__ import annotations

import copy
import functools
import os
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, cast

import yaml
from pydantic import PrivateAttr, ValidationError, model_validator

from stepbudget.enums import AttentionKernel, DataParallel, EPKind, Origin, RateScope, Recompute, Schedule
from stepbudget.inputs._types import Frozen
from stepbudget.inputs.complete import Path as FieldPath
from stepbudget.inputs.complete import Source, Stated, complete, provenance
from stepbudget.inputs.documents import LimitError, plain, read_document, read_yaml
from stepbudget.inputs.errors import OptionError, ScenarioError
from stepbudget.inputs.files import read_text
from stepbudget.inputs.hardware import Cluster, gpu_presets, named_gpu
from stepbudget.inputs.importers import importer_of
from stepbudget.inputs.importers.merge import Merged, merge, read_files
from stepbudget.inputs.layout import (Batch, FlopsConvention, Layout, OverlapSettings, Precision, shard_groups_split,
                                      stated_rank_layers)
from stepbudget.inputs.model import Model

DEFAULT_SCENARIO = "llama3-405b"


class Scenario(Frozen):
    """One training job."""

    name: str = "scenario"
    """The scenario's name in every output (a preset's file name)."""
    description: str = ""
    """One line on what the job is (`stepbudget presets` prints it)."""
    source: str = ""
    """Where the numbers come from."""
    framework: str | None = None
    """The framework the job runs on (a key of inputs/frameworks: megatron-lm, nemo, nemo2, megatron-bridge,
    torchtitan, maxtext, deepspeed, gpt-neox): its documented defaults fill what the job leaves unstated. null:
    the tool's defaults."""
    model: Model
    cluster: Cluster
    layout: Layout
    batch: Batch
    precision: Precision = Precision()
    overlap: OverlapSettings = OverlapSettings()
    flops: FlopsConvention = FlopsConvention()

    _stated: Stated | None = PrivateAttr(default=None)
    _sources: dict[str, Source] | None = PrivateAttr(default=None)
    _rate_basis: "Scenario | None" = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _consistent(self) -> "Scenario":
        """The sections agree: the degrees fill the GPUs and divide the heads, sequence, layers, experts and batch.
        Every check runs, and every one that fails is a line of the error."""
        problems = self.consistency_problems(set(SECTION_CHECKS))
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def consistency_problems(self, checks: set[str]) -> list[str]:
        """The problems the named checks (``SECTION_CHECKS``) find, one line each."""
        lay, problems = self.layout, []
        skip = {"_check_attention_kernel": lay.attention_kernel == AttentionKernel.BEST,
                "_check_selective_op": lay.recompute != Recompute.SELECTIVE_OP, "_check_replicas": lay.dp_replicas <= 1}
        for name in SECTION_CHECKS:
            if name in checks and not skip.get(name, False):
                try:
                    getattr(self, name)()
                except (ValueError, ZeroDivisionError) as e:
                    problems.append(str(e))
        return problems

    # ---- what the job states, where each value came from, and edits --------------------------------------

    @property
    def stated(self) -> Stated:
        """What the job states, before completion (inputs/complete.py); a scenario built from a whole mapping
        states all of it."""
        return self._stated or Stated.of(self.model_dump(mode="json"), "given")

    @property
    def sources(self) -> dict[str, Source]:
        """Where each field's value came from (dotted field -> Source), in the order ``show`` prints them; a scenario
        built from a whole mapping states every field (``given``)."""
        if self._sources is None:
            given = self.stated
            return provenance(self.model_dump(mode="json"), {k: Source(Origin.STATED, w) for k, w in given.where.items()})
        return self._sources

    @property
    def rate_basis(self) -> "Scenario":
        """The job a whole-step rate (``cluster.rate_scope: step``) was measured on: this scenario as loaded, before
        any edit changed its job. The budget runs an edited job at the kernel rate that reproduces the basis's step
        (budget/rate.py)."""
        return self._rate_basis or self

    def edit(self, changes: Mapping[str, Any] | None = None, /, *, where: str = "edit", **sections: Any) -> "Scenario":
        """This job with ``changes`` laid over what it states, as a new Scenario: ``sc.edit(layout={"pp": 8,
        "dp": 256})``. A mapping merges field by field; ``model="NAME"`` swaps the model for a catalog row (the
        sequence length stays the job's). Completion runs again, so unstated fields follow the new statements, and
        the edited fields' source is ``where``."""
        merged = {**(changes or {}), **sections}
        return self._restated(self.stated.over(merged, where), _rate_fields(merged), where)

    def assign(self, pairs: Sequence[tuple[FieldPath, Any]], where: str = "--set") -> "Scenario":
        """This job with each ``(path, value)`` set, in order (``parse_sets`` reads ``--set`` text into them); a
        mapping value replaces its section whole."""
        rate = {path[-1]: value for path, value in pairs if len(path) == 2 and path[0] == "cluster"
                and path[1] in RATE_FIELDS}
        return self._restated(self.stated.assign(pairs, where), rate, where)

    def _restated(self, stated: Stated, rate: Mapping[str, Any], where: str) -> "Scenario":
        new = build_stated(stated)
        if new.cluster.rate_scope == RateScope.STEP:
            # a rate the edit states describes the job it was measured on: the job before this edit
            basis = self.rate_basis
            new._rate_basis = basis._restated(basis.stated.over({"cluster": rate}, where), {}, where) if rate else basis
        return new

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> "Scenario":
        """Pydantic's copy; with ``update`` the copy states its whole self (what it stated before no longer
        describes it). Prefer ``edit``, which completes and validates again."""
        copied = super().model_copy(update=update, deep=deep)
        if update:
            copied._stated = copied._sources = None
        return copied

    def _check_gpu_count(self) -> None:
        lay, gpus = self.layout, self.cluster.gpus
        product = lay.tp * lay.cp * lay.pp * lay.dp
        if product != gpus:
            want_dp = gpus / (lay.tp * lay.cp * lay.pp)
            fix = f"set layout.dp={int(want_dp)}" if want_dp.is_integer() else "change the degrees"
            raise ValueError(
                f"layout: tp*cp*pp*dp = {lay.tp}*{lay.cp}*{lay.pp}*{lay.dp} = {product} but cluster.gpus = {gpus}; "
                f"{fix} or set cluster.gpus={product}"
            )

    def _check_model_split(self) -> None:
        """TP divides the heads, CP the sequence (in 2*cp chunks), PP x virtual stages the layer slots."""
        m, lay, problems = self.model, self.layout, []
        if m.num_heads % lay.tp:
            problems.append(f"layout.tp: {m.num_heads} attention heads are not divisible by tp = {lay.tp}; use a divisor")
        elif m.mla is None and m.kv_heads % lay.tp:
            problems.append(f"layout.tp: {m.kv_heads} KV heads are not divisible by tp = {lay.tp}; "
                            f"use a divisor of {m.kv_heads}")
        if lay.cp > 1 and m.seq_len % (2 * lay.cp):
            problems.append(
                f"layout.cp: seq_len {m.seq_len} must split into 2*cp = {2 * lay.cp} equal chunks for causal balance; "
                "choose cp so that seq_len is divisible by 2*cp"
            )
        try:
            self._check_stage_split()
        except ValueError as e:
            problems.append(str(e))
        if problems:
            raise ValueError("\n".join(problems))

    def _check_stage_split(self) -> None:
        lay = self.layout
        if lay.stage_layers is not None:
            self._check_stage_list()
        elif lay.uneven_split:
            self._check_first_last()
        elif self.pipeline_slots % (lay.pp * lay.virtual_stages):
            raise ValueError(
                f"layout.pp: {self.pipeline_slots} layer slots are not divisible by pp*virtual_stages = "
                f"{lay.pp}*{lay.virtual_stages}; choose degrees that divide the layers, count embedding/loss in the "
                "pipeline split, or give layout.first_stage_layers/last_stage_layers or layout.stage_layers"
            )

    def _check_stage_list(self) -> None:
        """An explicit split names every stage (or every rank) and places every layer."""
        lay, layers = self.layout, self.model.num_layers + self.model.mtp_layers
        stages = cast(tuple[int, ...], lay.stage_layers)
        chunks = lay.pp * lay.virtual_stages
        if len(stages) not in (chunks, lay.pp):
            raise ValueError(f"layout.stage_layers: {len(stages)} entries for pp*virtual_stages = {lay.pp}*"
                             f"{lay.virtual_stages}; give {chunks} (one per virtual stage) or {lay.pp} (one per rank)")
        if sum(stages) != layers:
            raise ValueError(f"layout.stage_layers: the entries add up to {sum(stages)}, but the model has {layers} "
                             "layers (transformer and MTP); make them add up to that")

    def _check_first_last(self) -> None:
        """Megatron's uneven split: the stated first/last ranks, the other ranks evenly, every rank's layers a
        multiple of the chunks (transformer_block.py get_num_layers_to_build)."""
        lay, layers = self.layout, self.model.num_layers + self.model.mtp_layers
        named = "first_stage_layers" if lay.first_stage_layers is not None else "last_stage_layers"
        if lay.pp == 1:
            raise ValueError(f"layout.{named}: an uneven split needs pp >= 2; unset it or raise layout.pp")
        stated = [n for n in (lay.first_stage_layers, lay.last_stage_layers) if n is not None]
        rest, ranks = layers - sum(stated), lay.pp - len(stated)
        if rest < 0 or (ranks == 0 and rest) or (ranks and rest % ranks):
            raise ValueError(f"layout.{named}: the other {ranks} ranks cannot split the {rest} layers left of {layers} "
                             f"evenly; choose first/last stage layers that leave a multiple of {max(ranks, 1)}")
        v = lay.virtual_stages
        if v > 1 and any(n % v for n in self.rank_layers):
            raise ValueError(f"layout.{named}: with virtual_stages = {v} each rank's layers must be a multiple of {v} "
                             f"(Megatron), got {list(self.rank_layers)}; choose other counts or give layout.stage_layers")

    def _check_selective_op(self) -> None:
        m, lay = self.model, self.layout
        why = next((w for w, bad in (("an MoE model", m.moe), ("MLA", m.mla), ("a parallel block", m.parallel_block),
                                      ("attention without FlashAttention", not lay.flash_attention)) if bad), None)
        if why:
            raise ValueError(f"layout.recompute: selective-op (torchtitan's per-op checkpointing) is modelled for "
                             f"dense standard blocks with FlashAttention, not {why}; use selective or full")

    def _check_experts(self) -> None:
        """EP needs experts, divides them, and takes its ranks (with expert TP) from the TP x CP x DP ranks."""
        moe, lay = self.model.moe, self.layout
        if moe is None:
            if lay.ep > 1:
                raise ValueError(f"layout.ep: ep = {lay.ep} needs an MoE model; set ep=1 or add model.moe")
            return
        if lay.ep > moe.num_experts or moe.num_experts % lay.ep:
            raise ValueError(
                f"layout.ep: ep = {lay.ep} must divide the {moe.num_experts} experts; use a divisor of num_experts"
            )
        etp = lay.expert_tp_degree
        if (lay.tp * lay.cp * lay.dp) % (lay.ep * etp):
            raise ValueError(
                f"layout.ep: ep*expert_tp = {lay.ep}*{etp} must divide tp*cp*dp = {lay.tp * lay.cp * lay.dp}; "
                "expert ranks are taken from those"
            )

    def _check_batch(self) -> None:
        lay = self.layout
        seqs = self.global_batch_seqs
        if seqs % (lay.dp * lay.micro_batch):
            raise ValueError(
                f"batch: {seqs} sequences per step are not divisible by dp*micro_batch = {lay.dp}*{lay.micro_batch}; "
                "change the global batch, dp or layout.micro_batch"
            )
        if lay.schedule == Schedule.DUALPIPE and (seqs // (lay.dp * lay.micro_batch)) % 2:
            raise ValueError("layout.schedule: DualPipe needs an even number of micro-batches per pipeline")

    def _check_attention_kernel(self) -> None:
        lay, c, k = self.layout, self.cluster, self.cluster.gpu.kernels
        if not lay.flash_attention:
            raise ValueError(f"layout.attention_kernel: {lay.attention_kernel} is a fused kernel, but flash_attention "
                             "is false; set attention_kernel=best or flash_attention=true")
        stated = c.achieved_flops is not None or c.achieved_fraction is not None  # the operator model does not run
        if not stated and (k.flash2_fwd is None or k.flash2_bwd is None):
            raise ValueError(
                f"layout.attention_kernel: no published {lay.attention_kernel} figure for {c.gpu.name}; "
                "use attention_kernel=best or give cluster.gpu.kernels.flash2_fwd and flash2_bwd"
            )

    def _check_replicas(self) -> None:
        lay, r, moe = self.layout, self.layout.dp_replicas, self.model.moe is not None
        if lay.dp_kind == DataParallel.DDP:
            raise ValueError("layout.dp_replicas: ddp shards nothing to replicate; set dp_replicas=1 or a sharded "
                             "dp_kind (zero1, zero2, zero3, fsdp)")
        if not shard_groups_split(r, lay.tp, lay.cp, lay.dp):
            raise ValueError(f"layout.dp_replicas: {r} replicas must split dp*cp = {lay.dp * lay.cp} into shard groups "
                             f"of 2 or more ranks; use a divisor of {lay.dp * lay.cp} no larger than half of it")
        if not shard_groups_split(r, lay.tp, lay.cp, lay.dp, lay.ep, lay.expert_tp_degree, moe):
            experts = lay.tp * lay.cp * lay.dp // (lay.ep * lay.expert_tp_degree)
            raise ValueError(f"layout.dp_replicas: HSDP needs an expert DP group (tp*cp*dp/(ep*expert_tp) = {experts}) "
                             f"of 2*dp_replicas = {2 * r} ranks or more that dp_replicas divides; lower layout.ep or "
                             "set dp_replicas=1")

    @property
    def pipeline_slots(self) -> int:
        """Layer slots the pipeline splits: transformer and MTP layers, plus embedding and loss where they take one."""
        lay = self.layout
        return self.model.num_layers + self.model.mtp_layers + lay.embedding_in_pipeline_split + lay.loss_in_pipeline_split

    @property
    def rank_layers(self) -> tuple[int, ...]:
        """Transformer and MTP layers of each pipeline rank, all its chunks together, first rank first.

        Even split: ``pipeline_slots / pp`` each, less the embedding's slot on the first rank and the loss's
        on the last. ``first_stage_layers``/``last_stage_layers``: those ranks as stated, the others evenly.
        ``stage_layers``: virtual stage j on rank j mod pp (Megatron's interleaving order)."""
        lay, layers = self.layout, self.model.num_layers + self.model.mtp_layers
        pp = lay.pp
        if pp == 1 and lay.stage_layers is None:
            return (layers,)
        if lay.uneven_split:
            return stated_rank_layers(layers, pp, lay.first_stage_layers, lay.last_stage_layers, lay.stage_layers)
        per = self.pipeline_slots // pp
        e, l_ = int(lay.embedding_in_pipeline_split), int(lay.loss_in_pipeline_split)
        return (per - e,) + (per,) * (pp - 2) + (per - l_,)

    @property
    def ep_forwards(self) -> bool:
        """Whether a token crosses the NIC once per target node and NVLink forwards it to the experts there:
        ``ep_kind: deepep``, or node-limited routing, which exists to cap NIC crossings (DeepSeek-V3 3.2.2)."""
        moe = self.model.moe
        return moe is not None and (self.layout.ep_kind == EPKind.DEEPEP or moe.node_limit is not None)

    @property
    def peak_gemm_flops(self) -> float:
        """Dense peak of the GEMMs' precision: FP8 when precision.gemm says so, else BF16."""
        return self.cluster.peak_fp8 if self.precision.gemm == "fp8" else self.cluster.gpu.peak_bf16_flops

    @property
    def global_batch_seqs(self) -> int:
        b = self.batch
        if b.global_batch_seqs is not None:
            return b.global_batch_seqs
        tokens = cast(int, b.global_batch_tokens)  # Batch._one_of: exactly one of the two is set
        seqs, rest = divmod(tokens, self.model.seq_len)
        if rest:
            raise ScenarioError(
                f"batch.global_batch_tokens: {tokens} tokens is not a whole number of "
                f"{self.model.seq_len}-token sequences; use a multiple of seq_len"
            )
        return seqs


SECTION_CHECKS: dict[str, tuple[str, ...]] = {
    "_check_gpu_count": ("layout", "cluster"),
    "_check_model_split": ("model", "layout"),
    "_check_experts": ("model", "layout"),
    "_check_batch": ("model", "layout", "batch"),
    "_check_attention_kernel": ("layout", "cluster"),
    "_check_selective_op": ("model", "layout"),
    "_check_replicas": ("model", "layout"),
}
"""Scenario's checks across sections, in the order they run, with the sections each reads: when another section
fails validation, the checks whose sections are valid still run, so every problem is named at once."""


def _checks_beside(data: Mapping[str, Any], e: ValidationError) -> list[str]:
    """The cross-section problems of the sections of ``data`` that validate on their own, when others do not."""
    failed = {str(x["loc"][0]) for x in e.errors() if x["loc"]}
    if not failed:
        return []  # every section validated: the checks ran and said what they found
    sections: dict[str, Any] = {}
    for name, info in Scenario.model_fields.items():
        if name in failed or name not in data or not isinstance(info.annotation, type):
            continue
        if issubclass(info.annotation, Frozen):
            try:
                sections[name] = info.annotation.model_validate(data[name])
            except ValidationError:
                continue
    checks = {name for name, needs in SECTION_CHECKS.items() if all(n in sections for n in needs)}
    if not checks:
        return []
    defaults = {name: info.default for name, info in Scenario.model_fields.items() if isinstance(info.default, Frozen)}
    found = Scenario.model_construct(**{**defaults, **sections}).consistency_problems(checks)
    return [line for problem in found for line in problem.splitlines()]


# ---- loading ---------------------------------------------------------------------------

_PRESETS = resources.files("stepbudget.inputs") / "presets"

RATE_FIELDS = ("achieved_flops", "achieved_fraction", "rate_scope")
MEASURED_JOB = (*RATE_FIELDS, "step_overhead_s", "profile")
"""A cluster's fields that describe the job measured on it rather than its hardware: what another job run on that
cluster does not take."""
"""Cluster fields that state a measured rate: they describe the measurement, not a change to the job."""


def _rate_fields(changes: Mapping[str, Any]) -> dict[str, Any]:
    cluster = changes.get("cluster")
    return {k: v for k, v in cluster.items() if k in RATE_FIELDS} if isinstance(cluster, Mapping) else {}


def preset_names() -> list[str]:
    """The shipped presets' names (a fresh list)."""
    return list(_preset_names())


@functools.cache
def _preset_names() -> tuple[str, ...]:
    # package data: listed once, as every scenario reference and every part of a `+` join asks
    return tuple(sorted(p.name.removesuffix(".yaml") for p in _PRESETS.iterdir() if p.name.endswith(".yaml")))


def _exists(path: str) -> bool:
    """Whether anything may be at ``path``: what it is, and why it cannot be read, files.read_text says."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return False
    except (ValueError, OSError):  # a NUL byte, a name too long, a folder that cannot be searched
        pass
    return True


MAX_BASE_DEPTH = 32
"""Longest chain of scenario files each naming the next as its base."""


JOIN = "+"
"""Joins the parts of one job given as several references: ``config.json+pretrain_llama.sh+h100-sxm``."""
SCENARIO_KEYS = frozenset(Scenario.model_fields) | {"base"}
"""The top-level keys of a scenario document: a YAML or TOML file with any other key is a framework's config."""
CONFIG_SUFFIXES = (".yaml", ".yml", ".toml")
SECTIONS_OF_A_JOB = frozenset({"base", "model", "cluster", "layout", "batch"})


def stated_scenario(ref: str, _seen: tuple[str, ...] = ()) -> Stated:
    """What the preset name, the YAML/TOML scenario path or the framework config ``ref`` states (the files a
    scenario's ``base:`` names first), each value with the preset, file or config key that states it. Several
    references joined by ``+`` make one job: the config files laid together (importers/merge.py) on the cluster the
    GPU names, presets and scenario files among them give (``cluster_statement``)."""
    if JOIN in ref and not _exists(ref):
        return _joined(ref, _seen)
    if ref in _seen:
        raise ScenarioError(f"base: presets refer to each other in a loop ({' -> '.join(_seen + (ref,))})")
    if len(_seen) >= MAX_BASE_DEPTH:
        raise ScenarioError(f"base: more than {MAX_BASE_DEPTH} files each based on the next ({_seen[0]} -> ...); "
                            "merge some of them")
    path = Path(ref)
    if ref in preset_names():
        data, where = copy.deepcopy(_preset_data(ref)), f"preset {ref}"
    elif not _exists(ref):
        if path.suffix in CONFIG_SUFFIXES:
            raise ScenarioError(f"scenario: file {ref!r} not found; give a preset name ({', '.join(preset_names())}) "
                                "or a path")
        if not path.suffix:
            raise ScenarioError(f"scenario: unknown preset {ref!r}; choose one of {', '.join(preset_names())} "
                                "or give a .yaml/.toml path or a framework's config")
        raise ScenarioError(f"scenario: file {ref!r} not found; check the path")
    else:
        document = _scenario_document(ref)
        if document is None:
            return imported([ref]).stated
        data, where = document, f"file {ref}"
    plain(data)
    base = data.pop("base", None) if isinstance(data, dict) else None
    if base is None:
        return Stated.of(data, where)
    base = str(base)
    beside = path.parent / base  # a base file is found beside the file that names it, as an include is
    if path.suffix in CONFIG_SUFFIXES and not Path(base).is_absolute() and _exists(str(beside)):
        base = str(beside)
    return stated_scenario(base, _seen + (ref,)).over(data, where)


def imported(paths: Sequence[str | os.PathLike], under: Stated | None = None, what: str = "scenario") -> Merged:
    """The job the config files at ``paths`` state together, over ``under``; a ScenarioError lists every
    contradiction and every key a file states badly (a file no importer reads names ``what``)."""
    merged = merge(read_files(paths, what), under)
    if merged.problems:
        raise ScenarioError("\n".join(merged.problems))
    return merged


def _joined(ref: str, _seen: tuple[str, ...] = ()) -> Stated:
    """``a+b+c``: the config files among the parts, merged, on the cluster the other parts give, laid in order."""
    parts = [p.strip() for p in ref.split(JOIN)]
    if "" in parts:
        raise ScenarioError(f"scenario: {ref[:80]!r} has an empty part; join presets, files and GPU names with +")
    under, configs = Stated(), []
    for part in parts:
        cluster = _cluster_of(part, _seen + (ref,))
        if cluster is None:
            configs.append(part)
        else:
            under = under.then(cluster)
    return imported(configs, under).stated if configs else under


def cluster_statement(ref: str) -> Stated:
    """The cluster ``import --cluster`` names (``_cluster_of``); an OptionError naming ``cluster`` where ``ref`` is
    no GPU, preset or scenario file with a cluster section."""
    cluster = _cluster_of(ref)
    if cluster is None or "cluster" not in cluster.data:
        raise OptionError("cluster", f"{ref[:80]!r} is no GPU ({', '.join(gpu_presets())}), preset or scenario file "
                                     "with a cluster section; give one of them")
    return cluster


def _cluster_of(ref: str, _seen: tuple[str, ...] = ()) -> Stated | None:
    """The cluster a job's configs run on, from a GPU row (the node it ships in fills the links) or from the
    hardware of a preset's or scenario file's cluster, without what was measured of that file's own job
    (``MEASURED_JOB``); None where ``ref`` is none of them (a framework's config)."""
    if named_gpu(ref) is not None and not _exists(ref):
        return Stated().assign([(("cluster", "gpu"), ref)], f"GPU {ref}")
    if ref not in preset_names() and _scenario_document(ref) is None:
        return None
    whole = stated_scenario(ref, _seen)
    if not isinstance(whole.data.get("cluster"), dict):
        return Stated()
    cluster = {k: copy.deepcopy(v) for k, v in whole.data["cluster"].items() if k not in MEASURED_JOB}
    where = {k: w for k, w in whole.where.items() if k.split(".")[:1] == ["cluster"] and k.split(".")[1] in cluster}
    return Stated({"cluster": cluster}, where)


def _scenario_document(ref: str) -> dict[str, Any] | None:
    """The mapping of the YAML/TOML scenario file ``ref``: a document of scenario keys, or one that has a scenario's
    sections and that no importer reads (a misspelt key is then named by the scenario's validation, not taken for a
    config); None for any other file."""
    if Path(ref).suffix not in CONFIG_SUFFIXES or not _exists(ref):
        return None
    text = read_text(ref, "scenario")
    data = read_document(text, Path(ref).suffix, ref)
    if set(data) <= SCENARIO_KEYS or set(data) & SECTIONS_OF_A_JOB and importer_of(text, Path(ref).name) is None:
        return data
    return None


def raw_scenario(ref: str) -> dict[str, Any]:
    """The unvalidated mapping a preset name or a YAML/TOML path states, with ``base:`` resolved (a catalog model
    or a named GPU as ``{catalog: NAME, ...}``)."""
    return copy.deepcopy(dict(stated_scenario(ref).data))


@functools.cache
def _preset_data(ref: str) -> dict[str, Any]:
    """A preset's mapping as read, once: presets are package data (callers get a copy to change)."""
    return read_document((_PRESETS / f"{ref}.yaml").read_text(encoding="utf-8"), ".yaml", ref)


def parse_sets(overrides: Sequence[str]) -> list[tuple[FieldPath, Any]]:
    """``key.path=value`` overrides as (path, value) pairs, values read as YAML scalars or lists (within read_yaml's
    bounds); every malformed one is a line of the error."""
    pairs, problems = [], []
    for item in overrides:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            problems.append(f"{item[:60]!r}: write section.field=value, e.g. layout.pp=8")
            continue
        if "" in (parts := tuple(p.strip() for p in key.split("."))):
            problems.append(f"{key[:60]!r}: a name between the dots is empty; write section.field=value, "
                            "e.g. layout.pp=8")
            continue
        try:
            value = read_yaml(text)
        except LimitError as e:
            problems.append(f"{key[:60]}: {e}")
            continue
        except yaml.YAMLError:
            value = text
        if value is None and text.strip() not in ("null", "~"):
            value = text  # YAML reads tags like "!" as null: keep the text so validation names it
        pairs.append((parts, value))
    if problems:  # each line "override KEY: ...", which --set gave
        raise OptionError("override", "\n".join(problems), sep=" ")
    return pairs


def format_sets(changes: Mapping[str, Any], prefix: FieldPath = ()) -> list[str]:
    """A typed edit as ``--set`` text, one ``section.field=value`` per field it states (the inverse of
    ``parse_sets`` for what ``Scenario.edit`` takes): the command line that makes the same job."""
    out = []
    for key, value in changes.items():
        path = (*prefix, str(key))
        if isinstance(value, Mapping) and value:
            out += format_sets(value, path)
        elif isinstance(value, (list, tuple)) and all(isinstance(v, (str, int)) for v in value):
            out.append(f"{'.'.join(path)}=[{','.join(str(v) for v in value)}]")  # a shell word: [tp,cp,pp,dp]
        else:
            out.append(f"{'.'.join(path)}={flow_yaml(value)}")
    return out


def flow_yaml(value: Any) -> str:
    """One value as YAML on one line (flow style), as a ``--set`` or a YAML file reads it back."""
    return yaml.safe_dump(value, default_flow_style=True, width=1_000_000, allow_unicode=True).strip().removesuffix(
        "...").strip()


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """``data`` with ``key.path=value`` overrides set (``parse_sets``), as an unvalidated mapping."""
    return dict(Stated.of(data, "given").assign(parse_sets(overrides), "--set").data)


_SECTIONS = ("model", "cluster", "layout", "batch", "precision", "overlap", "flops", "scenario", "framework")


_UNION_BRANCHES = ("float", "int", "str", "bool")


def _field(x: Mapping[str, Any]) -> str:
    """An error's field: a union's branch shows up in the location ("overlap.tp.float"); drop it."""
    return ".".join(str(p) for p in x["loc"] if str(p) not in _UNION_BRANCHES and not str(p).startswith("literal["))


def _lines(e: ValidationError) -> list[str]:
    """One line per field that failed validation, each naming the field and the fix."""
    errors, lines, seen = e.errors(), [], set()
    for err in errors:
        loc = _field(err)
        if loc in seen and loc:
            continue  # the other branches of a union that failed as a whole
        seen.add(loc)
        lines.extend(_line(err, loc, [x for x in errors if _field(x) == loc]))
    return lines


def _line(err: Any, loc: str, same_field: list) -> list[str]:
    msg = err["msg"].removeprefix("Value error, ")
    if any("literal['auto']" in map(str, x["loc"]) for x in same_field):
        msg = "give a number or 'auto'"  # every branch of this number-or-"auto" field failed
    if err["type"] == "extra_forbidden":
        *parents, name = [str(p) for p in err["loc"]] or [""]
        if not name.strip() or not name.isprintable():  # an empty or blank key would leave the line naming nothing
            return [f"{'.'.join(parents) or 'scenario'}: a field named {name!r} is unknown; remove it"]
        return [f"{loc}: unknown field; remove it or check its spelling (see `stepbudget show llama3-405b`)"]
    if err["type"] == "missing":
        return [f"{loc}: required field is missing; add it"]
    if msg.startswith(_SECTIONS):
        return msg.splitlines()  # our own validators already name the field and the fix, one line each
    value = err.get("input")
    repeated = "got " in msg or (isinstance(value, str) and repr(value) in msg)
    shown = f" (got {value!r})" if isinstance(value, (int, float, str)) and not repeated else ""
    return [f"{loc or 'scenario'}: {msg}{shown}"]


def build_stated(stated: Stated) -> Scenario:
    """Complete and validate what a job states into a Scenario, each field with its source; ScenarioError with one
    line per problem, all of them at once."""
    plain(stated.data)
    done = complete(stated)
    problems = list(done.problems)
    named = tuple(p.split(":", 1)[0] + end for p in problems for end in (":", "."))  # a row not read: its section

    try:
        scenario = Scenario.model_validate(done.data)
        scenario.global_batch_seqs  # noqa: B018 - checks tokens divide into sequences
    except ValidationError as e:
        problems += [line for line in _lines(e) if not line.startswith(named)]  # is short of what the row has
        problems += _checks_beside(done.data, e)
    except ScenarioError as e:
        problems += str(e).splitlines()
    if problems:
        raise ScenarioError("\n".join(dict.fromkeys(problems)))
    scenario._stated = stated
    scenario._sources = provenance(scenario.model_dump(mode="json"), done.sources)
    return scenario


def build(data: dict[str, Any]) -> Scenario:
    """Validate a raw mapping into a Scenario, or raise ScenarioError with one line per problem."""
    return build_stated(Stated.of(data, "given") if isinstance(data, dict) else Stated(data))


@functools.lru_cache(maxsize=64)
def _preset(ref: str) -> Scenario:
    # presets are package data: each is completed and validated once
    return build_stated(stated_scenario(ref))


def load(ref: str = DEFAULT_SCENARIO, overrides: list[str] | tuple[str, ...] = ()) -> Scenario:
    """Load a preset or file, apply ``--set`` overrides (parsed once, here, into typed edits), validate."""
    if ref in preset_names() or not overrides:
        base = _preset(ref) if ref in preset_names() else build_stated(stated_scenario(ref))
        return base.assign(parse_sets(overrides)) if overrides else base
    stated, pairs = stated_scenario(ref), parse_sets(overrides)
    try:
        base = build_stated(stated)
    except ScenarioError:  # a job its files leave incomplete or inconsistent, which the --set completes
        return build_stated(stated.assign(pairs, "--set"))
    return base.assign(pairs)
