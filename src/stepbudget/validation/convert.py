"""A published run -> a scenario the model can predict, plus the step time the source measured.

The conversion is the table ``RULES``: each rule (``rules.py``) reads a few fields of the run (``stated.py``:
the stated-run record and the tables of what sources leave unsaid) and sets a few fields of the raw scenario,
and ``to_case`` applies them in order, builds the scenario, makes it fit in HBM as its framework would
(``_fitted``), then reads the measured step (``measured.py``).
The rules, the same for every run (no per-run constants):

- **Model.** A run's model name finds its row in the model catalog only (``inputs/catalog.py``: any case or
  punctuation, a parenthetical note or an appended size left out: "Llama 3.1 405B (recipe proxy, 8 of 126
  layers)", "Grok-1 314B"); no preset is ever read, so no preset's cluster, layout or precision reaches a run.
  The row fills every model field the run leaves unstated (activation, FFN width, KV heads, head width,
  vocabulary, tied embeddings, positions, the MoE and MLA blocks, MTP), also when the run states its shape;
  a field the run states always wins. A row never gives the training sequence length: the run states its
  ``seq_len``. Without a row, an unstated FFN is 4h and an unstated activation a two-matrix GeLU, each noted.
  The rate is always the operator model's (``rate_scope`` kernel).
- **Hardware.** Collectives run at the bus bandwidth NCCL's maintainers measure, not at line rate
  (``NVLINK_BUSBW_SHARE``, ``NIC_BUSBW_SHARE``). The GPU is read from its name (A100, H100, H800, H200, B200; "Ampere" without a
  SKU is taken as A100 SXM, whose 312 TFLOP/s peak the MegaScale MFU arithmetic uses). NVLink
  figures in the file are datasheet totals and are halved to get per-direction rates; an unstated node size,
  NVLink or NIC is the GPU's node's (inputs/gpus.yaml: a DGX A100's 200 Gb/s HDR, a DGX H100's 400 Gb/s),
  noted with that node's source.
- **Layout.** DP, when not stated, is the GPU count over TP x CP x PP. A JAX run's FSDP and data degrees
  (``fsdp`` beside ``dp``, or MaxText's ``ici/dcn_fsdp_parallelism`` and ``ici/dcn_data_parallelism``) make DP
  their product, sharded FSDP-style over the FSDP part and replicated over the data part (``dp_replicas``).
  An uneven pipeline split (``first_stage_layers``/``last_stage_layers``, Megatron's
  ``decoder_first/last_pipeline_num_layers``, or a per-stage ``stage_layers`` list) sets the scenario's fields of
  those names; Megatron's ``--account-for-embedding/loss-in-pipeline-split`` (either name) give the embedding
  and the loss a layer slot each, and an unstated interleaving depth is the shallowest the slots divide into.
  The global batch is ``global_batch_seqs``, else ``global_batch_tokens`` over ``seq_len``, else the local batch
  (``batch_size_per_dp``, ``batch_size_per_gpu`` x ``grad_accum`` where stated, or ``micro_batch`` x
  ``grad_accum``) times DP. A rank order may name ``ep`` (EP's
  ranks come from DP's). Other fields the source leaves out take documented defaults: micro-batch 1, sequence
  parallelism with TP, no recompute, experts sharded by TP when EP is not stated, and the DP sharding its
  framework family starts from (``families.py``: Megatron-LM and DeepSpeed DDP, PyTorch FSDP and JAX full
  sharding); ``zero_stage: 0`` (or "none") is DDP. MegaScale-MoE's "SP attention" degree is a context-parallel
  degree over the same ranks as EP.
- **Memory.** A published run ran, so it fitted: where the scenario does not fit in HBM and the run leaves its
  DP sharding or recompute unstated, the conversion assumes its framework's options one at a time
  (``families.py``: Megatron family distributed optimizer, then selective, then full recompute; DeepSpeed ZeRO-1,
  then activation checkpointing; PyTorch FSDP full sharding, then activation checkpointing) until it fits, and
  notes each ("assumed: ...").
- **Framework.** A run whose ``layout.framework`` names a framework with a recipe (``inputs/recipes.py``: Megatron-LM,
  NeMo 1, NeMo 2, Megatron-Bridge, torchtitan, MaxText, DeepSpeed, GPT-NeoX; the recipe's ``matches`` finds it)
  names it in its scenario, and every field the run leaves unstated that the recipe holds takes the framework's
  documented default, listed under the run with its source line: which exchanges overlap, the gradient
  reduction's precision and buffer, the DP sharding, the rank order, the default recompute. Megatron-LM's argparse
  overlaps none of TP, CP, EP, PP and DP and reduces BF16 gradients in FP32; NeMo 2's and Megatron-Bridge's
  performance recipes overlap TP, DP and PP and reduce in BF16. Where a run states its DP sharding or gradient
  reduction (``layout.grad_reduce``, e.g. NeMo's ``grad_sync_dtype: bf16``), that wins. MegaScale and
  MegaScale-MoE are stacks of their own on Megatron-LM whose papers state what they change, so no recipe
  describes them: MegaScale fuses TP/SP communication into the GEMMs (§3.2); MegaScale-MoE overlaps SP and EP
  collectives with compute (§4.1-4.2) and exchanges tokens by all-gather and reduce-scatter (§3.2, Fig. 9);
  a Megatron-family run without a recipe overlaps none of TP, CP, EP, PP and DP (the baseline of MegaScale's
  Table 3), unless the run's notes say it used MegaScale's DP/PP overlap. MegaScale's
  Megatron-LM baseline runs FlashAttention-1 (FlashAttention-2 is one of MegaScale's own operators,
  §3.3), at half FlashAttention-2's rate (Dao 2023: about 2x on A100). MegaScale's own rows use
  its parallel transformer block (§3.1); their sliding-window attention is not modelled (the window
  is not stated). A run may list what its framework overlaps in ``layout.overlap`` (e.g. ``[tp, dp,
  pp]``, from its recipe): listed TP, CP and EP collectives are hidden whole, listed DP and PP in
  the windows the schedule leaves, unlisted ones as the framework's recipe says (none without a recipe); on
  Megatron-based frameworks a listed EP is hidden by pairing one micro-batch's forward with another's backward
  (``overlap.ep_paired``). Runs on Megatron-based frameworks that state no rank order take Megatron-Core's
  (``tp-cp-ep-dp-pp``), and their context
  parallelism is Megatron-Core's ring, whose sends hide behind the attention of the block in hand.
  A run whose ``layout.dispatcher`` names DeepEP or HybridEP sends each token over the NIC once per
  target node and forwards it on NVLink (``ep_kind: deepep``). Precisions a run states for the MoE dispatch and
  combine, the saved activations and the optimizer's moments set those bytes.
- **Measured step.** ``measured.py``: ``step_time_s``, else tokens/s (per GPU or whole job), sequences/s,
  TFLOP/s or MFU turned into seconds with the run's global batch and its FLOP convention; the row's
  ``measured_from`` says which, and a printed figure that disagrees by more than 5 % is noted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from stepbudget.inputs.recipes import defaults_taken
from stepbudget.inputs.scenario import Scenario, ScenarioError, build, flow_yaml
from stepbudget.validation import rules
from stepbudget.validation.families import SAVES
from stepbudget.validation.measured import measured_step, measured_steps, stated_peak
from stepbudget.validation.memory_fit import scenario_fit
from stepbudget.validation.runs import BATCH_FIELDS, FSDP_FIELDS, PRECISION_FIELDS, REQUIRED
from stepbudget.validation.stated import (MFU_CONVENTION, NIC_BUSBW_SHARE, NVLINK_BUSBW_SHARE, StatedRun, Unpredictable,
                                          grad_reduce_precision, source_of)

__all__ = ["Case", "RULES", "Rule", "to_case",
           # the tables and readers this module held before stated.py did
           "MFU_CONVENTION", "NIC_BUSBW_SHARE", "NVLINK_BUSBW_SHARE", "grad_reduce_precision", "source_of"]


@dataclass(frozen=True)
class Case:
    """One run made ready for prediction, or the reason it cannot be."""

    id: str
    source: str
    gpus: int
    framework: str
    scenario: Scenario | None
    reason: str | None
    measured_step_s: float | None
    measured_from: str
    """"step_time_s", or how the step was derived from throughput, TFLOP/s or MFU."""
    measured_mfu: float | None
    assumptions: list[str] = field(default_factory=list)
    measured_figures: tuple[tuple[float, str], ...] = ()
    """Every step the run's printed figures give, with the figure each came from, the one taken first
    (validation/measured.py)."""


Rule = Callable[[StatedRun, dict, list[str]], None]
"""A conversion rule ``rule(run, scenario, notes)``: reads a few fields of ``run``, sets a few fields of the raw
``scenario`` mapping (``build``'s input), and appends to ``notes`` each default it takes. It raises
``Unpredictable`` when the run cannot be predicted. Rules run in ``RULES`` order; a later one may read what an
earlier one set."""

_MODEL_READS = tuple(f"model.{name}" for name in rules.MODEL_FIELDS)

RULES: tuple[tuple[tuple[str, ...], Rule], ...] = (
    (("model.name", *(f"{sec}.{name}" for sec, names in REQUIRED.items() for name in names),
      *(f"layout.{name}" for name in BATCH_FIELDS), "source.document"), rules.required),
    (("model.name", *_MODEL_READS), rules.catalog_model),
    (("model.name", "model.layers", "model.hidden", "model.heads", "model.vocab", "model.seq_len",
      "model.kv_heads", "model.head_dim"), rules.model_shape),
    (("model.ffn_hidden", "model.hidden", "model.activation"), rules.ffn),
    (("model.moe", "model.dense_layers"), rules.moe),
    (("model.mtp_depth",), rules.mtp),
    (("model.tied_embeddings", "model.position_embedding"), rules.embeddings),
    (("hardware.gpu", "hardware.hbm_gb", "hardware.hbm_bw_tbps", "num_gpus"), rules.gpu_part),
    (("hardware.gpus_per_node", "hardware.nics_per_node", "hardware.nvlink_bw_gbps", "hardware.nic_gbps_per_gpu",
      "hardware.gpu"), rules.node),
    (("layout.tp", "layout.cp", "layout.pp", "layout.dp", "layout.ep", "layout.sp_attention", "model.moe",
      "num_gpus", *(f"layout.{name}" for name in FSDP_FIELDS)), rules.degrees),
    (("layout.sp_attention", "layout.framework"), rules.cp_and_expert_kinds),
    (("layout.first_stage_layers", "layout.last_stage_layers", "layout.decoder_first_pipeline_num_layers",
      "layout.decoder_last_pipeline_num_layers", "layout.stage_layers"), rules.stage_layers),
    (("layout.pp", "layout.virtual_pipeline_chunks_per_rank", "layout.schedule", "model.layers", "model.mtp_depth",
      *(f"layout.{name}" for names in rules.SPLIT_NAMES.items() for name in names)), rules.pipeline_split),
    (("layout.schedule", "layout.virtual_pipeline_chunks_per_rank", "model.layers", "layout.pp"), rules.schedule),
    (("layout.micro_batch", "layout.batch_size_per_gpu", "layout.batch_size_per_dp", "layout.grad_accum", "layout.pp"),
     rules.micro_batch),
    (("layout.sequence_parallel", "layout.tp", "layout.flash_attention"), rules.sequence_parallel),
    (("layout.recompute",), rules.recompute),
    (("layout.compile", "layout.framework"), rules.compiled),
    (("layout.zero_stage", "layout.dp_type", "layout.dp_replicas", "layout.framework",
      *(f"layout.{name}" for name in FSDP_FIELDS)), rules.dp_kind),
    (("layout.order", "layout.framework"), rules.rank_order),
    (tuple(f"layout.{name}" for name in BATCH_FIELDS), rules.batch),
    (("layout.precision",), rules.gemm_precision),
    (tuple(f"layout.{name}" for name in PRECISION_FIELDS), rules.tensor_precisions),
    (("layout.grad_reduce", "layout.framework"), rules.grad_reduce),
    (("layout.framework",), rules.framework_recipe),
    (("layout.framework", "notes"), rules.framework_overlap),
    (("layout.overlap", "layout.framework"), rules.stated_overlap),
    (("layout.dispatcher",), rules.dispatcher),
    ((), rules.ring_overlap),
    (("layout.attention_kernel", "layout.framework", "source.document"), rules.attention),
    (("layout.comm",), rules.comm_sms),
    (("measured.flops_convention", "source.document"), rules.flops_convention),
)
"""The conversion, in order: (the run's fields a rule reads, the rule). A new field of the runs schema is read
by a new rule here, or by the rule whose fields it joins; a new rule is written in ``rules.py``, in the section
for what it sets."""


def to_case(run: dict) -> Case:
    """The scenario and measured step of one run (``reason`` set when it cannot be predicted)."""
    r = StatedRun(run, source_of(run), str(run["layout"].get("framework") or ""))
    data: dict = {}
    notes: list[str] = []
    try:
        for _reads, rule in RULES:
            rule(r, data, notes)
    except Unpredictable as e:
        return _case(r, reason=str(e))
    mfu = _measured_mfu(r.measured, r.convention)
    try:
        scenario = _fitted(r, data, build(data), notes)
    except ScenarioError as e:
        return _case(r, reason=str(e), mfu=mfu, notes=notes)
    notes += recipe_lines(scenario)
    if mfu is not None:  # the tool's MFU is against the dense BF16 peak
        mfu *= stated_peak(scenario, r.measured) / scenario.cluster.gpu.peak_bf16_flops
    figures = measured_steps(scenario, r)
    step, how = measured_step(figures, r, notes)
    if step is None:
        return _case(r, scenario=scenario, reason=how, mfu=mfu, notes=notes)
    return _case(r, scenario=scenario, step=step, how=how, mfu=mfu, notes=notes, figures=tuple(figures))


def _fitted(r: StatedRun, data: dict, scenario: Scenario, notes: list[str]) -> Scenario:
    """``scenario``, or where it does not fit in HBM the first one that does of the memory options the run's
    framework offers for the choices the run leaves unstated (families.py), taken one at a time; each choice the
    result keeps is noted (a full recompute taken after a selective one replaces its note)."""
    unstated = {"dp_kind": rules.stated_dp_kind(r.layout) is None, "recompute": r.layout.get("recompute") is None}
    family, taken = r.family, {}
    for step in family.steps:
        if scenario_fit(scenario).fits:
            break
        order, now = SAVES[step.field], str(getattr(scenario.layout, step.field))  # stated, or its recipe's
        if not unstated[step.field] or (now in order and order.index(now) >= order.index(step.value)):
            continue  # stated by the run, or the scenario already saves as much
        trial = {**data, "layout": {**data["layout"], step.field: step.value}}
        try:
            scenario = build(trial)
        except ScenarioError:
            continue  # the layout cannot take it (e.g. too few ranks to shard over): the next option
        data["layout"] = trial["layout"]
        taken[step.field] = (f"assumed: {step.what} ({step.source}; {family.name} runs that do not fit without it "
                             "use it)")
    notes += taken.values()
    return scenario


def recipe_lines(sc: Scenario) -> list[str]:
    """A note for each field the run's framework recipe gave: the value as the recipe gives it, and its source."""
    return [f"{d.field} not stated: {flow_yaml(d.value)} ({r.where(d)})" for r, d in defaults_taken(sc.framework, sc.sources)]


def _case(r: StatedRun, *, scenario: Scenario | None = None, reason: str | None = None, step: float | None = None,
          how: str = "", mfu: float | None = None, notes: list[str] | None = None,
          figures: tuple[tuple[float, str], ...] = ()) -> Case:
    return Case(id=r.whole["id"], source=r.source, gpus=r.whole["num_gpus"], framework=r.framework,
                scenario=scenario, reason=reason, measured_step_s=step, measured_from=how, measured_mfu=mfu,
                assumptions=[] if notes is None else notes, measured_figures=figures)


def _measured_mfu(meas: dict, convention: str) -> float | None:
    """The MFU the source states under its own convention's name, else its plain ``mfu_pct``, as a fraction of the
    peak it states (``to_case`` puts one stated against another peak on the BF16 one, as the tool's MFU is)."""
    mfu = meas.get("mfu_pct_noncausal" if convention == "noncausal" else "mfu_pct_causal") or meas.get("mfu_pct")
    return float(mfu) / 100 if mfu else None
