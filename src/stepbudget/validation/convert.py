"""A published run -> a scenario the model can predict, plus the step time the source measured.

The conversion is the table ``RULES``: each rule (``rules.py``) reads a few fields of the run (``stated.py``:
the stated-run record and the tables of what sources leave unsaid) and sets a few fields of the raw scenario,
and ``to_case`` applies them in order, then builds the scenario and reads the measured step.
The rules, the same for every run (no per-run constants):

- **Model and cluster.** A run whose model name matches a preset's model starts from that preset
  (it carries what the file leaves out: Llama 3's rank order, DeepSeek-V3's MLA shapes). The
  run's own numbers then override it. A name no preset carries but the model catalog
  (``inputs/catalog.py``) knows, in any case or punctuation, starts the model from that row instead when the run leaves
  part of the shape (layers, hidden, heads, vocab, seq_len) unstated, so a run may state the name alone;
  a model field is missing only when neither the run nor the row has it. A run that states its whole shape
  is read as stated.
  The rate is always the operator model's:
  ``achieved_flops`` and ``achieved_fraction`` are dropped, and ``rate_scope`` is kernel.
- **Hardware.** Collectives run at the bus bandwidth NCCL's maintainers measure, not at line rate
  (``NVLINK_BUSBW_SHARE``, ``NIC_BUSBW_SHARE``). The GPU is read from its name (A100, H100, H800, H200, B200; "Ampere" without a
  SKU is taken as A100 SXM, whose 312 TFLOP/s peak the MegaScale MFU arithmetic uses). NVLink
  figures in the file are datasheet totals and are halved to get per-direction rates.
- **Layout.** DP, when not stated, is the GPU count over TP x CP x PP. An uneven pipeline split
  (``first_stage_layers``/``last_stage_layers``, Megatron's ``decoder_first/last_pipeline_num_layers``,
  or a per-stage ``stage_layers`` list) sets the scenario's fields of those names. Other fields the source
  leaves out take documented defaults: micro-batch 1, sequence
  parallelism with TP, no recompute, ZeRO-1 for "distributed optimizer", and experts sharded by
  TP when EP is not stated. MegaScale-MoE's "SP attention" degree is a context-parallel degree
  over the same ranks as EP.
- **Framework.** Megatron-LM and the systems built on it reduce BF16 training's gradients in FP32
  (Megatron-LM ``arguments.py`` forces it), unless the run's ``layout.grad_reduce`` says BF16 (NeMo's
  ``distributed_fused_adam`` with ``grad_sync_dtype: bf16``). What each framework overlaps, as its
  paper states it: MegaScale fuses TP/SP communication into the GEMMs (§3.2); MegaScale-MoE
  overlaps SP and EP collectives with compute (§4.1-4.2) and exchanges tokens by all-gather and
  reduce-scatter (§3.2, Fig. 9);
  Megatron-LM as MegaScale's baseline overlaps none of TP, CP, EP, PP and DP
  (the baseline of Table 3), unless the run's notes say it used MegaScale's DP/PP overlap; a
  preset's overlap for its own framework never carries over to the baseline. MegaScale's
  Megatron-LM baseline runs FlashAttention-1 (FlashAttention-2 is one of MegaScale's own operators,
  §3.3), at half FlashAttention-2's rate (Dao 2023: about 2x on A100). MegaScale's own rows use
  its parallel transformer block (§3.1); their sliding-window attention is not modelled (the window
  is not stated). A run may list what its framework overlaps in ``layout.overlap`` (e.g. ``[tp, dp,
  pp]``, from its recipe): listed TP, CP and EP collectives are hidden whole, listed DP and PP in
  the windows the schedule leaves, unlisted ones not at all; on Megatron-based frameworks a listed
  EP is hidden by pairing one micro-batch's forward with another's backward (``overlap.ep_paired``).
  Runs on Megatron-based frameworks that state no rank order take Megatron-Core's
  (``tp-cp-ep-dp-pp``), and their context
  parallelism is Megatron-Core's ring, whose sends hide behind the attention of the block in hand.
  A run whose ``layout.dispatcher`` names DeepEP or HybridEP sends each token over the NIC once per
  target node and forwards it on NVLink (``ep_kind: deepep``).
- **Measured step.** ``step_time_s`` if given. Otherwise it comes from ``tflops_per_gpu`` or
  ``mfu_pct`` and the FLOP count of the source's convention (``MFU_CONVENTION``), and the row
  says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from stepbudget.inputs.scenario import Scenario, ScenarioError, build
from stepbudget.plan.flops import model_counts
from stepbudget.validation import rules
from stepbudget.validation.runs import REQUIRED
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
    """"step_time_s", or how the step was derived from throughput or MFU."""
    measured_mfu: float | None
    assumptions: list[str] = field(default_factory=list)


Rule = Callable[[StatedRun, dict, list[str]], None]
"""A conversion rule ``rule(run, scenario, notes)``: reads a few fields of ``run``, sets a few fields of the raw
``scenario`` mapping (``build``'s input), and appends to ``notes`` each default it takes. It raises
``Unpredictable`` when the run cannot be predicted. Rules run in ``RULES`` order; a later one may read what an
earlier one set."""


RULES: tuple[tuple[tuple[str, ...], Rule], ...] = (
    (("model.name", *(f"{sec}.{name}" for sec, names in REQUIRED.items() for name in names)), rules.required),
    (("model.name", "source.document"), rules.preset),
    (("model.name",), rules.catalog_model),
    (("model.name", "model.layers", "model.hidden", "model.heads", "model.vocab", "model.seq_len",
      "model.kv_heads", "model.head_dim"), rules.model_shape),
    (("model.ffn_hidden", "model.hidden", "model.activation"), rules.ffn),
    (("model.moe", "model.dense_layers"), rules.moe),
    (("model.mtp_depth",), rules.mtp),
    (("model.tied_embeddings", "model.position_embedding"), rules.embeddings),
    (("hardware.gpu", "hardware.hbm_gb", "hardware.hbm_bw_tbps", "num_gpus"), rules.gpu_part),
    (("hardware.gpus_per_node", "hardware.nvlink_bw_gbps", "hardware.gpu"), rules.node),
    (("hardware.nic_gbps_per_gpu",), rules.nic),
    (("layout.tp", "layout.cp", "layout.pp", "layout.dp", "layout.ep", "layout.sp_attention", "model.moe",
      "num_gpus"), rules.degrees),
    (("layout.sp_attention", "layout.framework"), rules.cp_and_expert_kinds),
    (("layout.schedule", "layout.virtual_pipeline_chunks_per_rank", "model.layers", "layout.pp"), rules.schedule),
    (("layout.first_stage_layers", "layout.last_stage_layers", "layout.decoder_first_pipeline_num_layers",
      "layout.decoder_last_pipeline_num_layers", "layout.stage_layers"), rules.stage_layers),
    (("layout.embedding_in_pipeline_split", "layout.loss_in_pipeline_split"), rules.pipeline_split),
    (("layout.micro_batch",), rules.micro_batch),
    (("layout.sequence_parallel", "layout.tp", "layout.flash_attention"), rules.sequence_parallel),
    (("layout.recompute",), rules.recompute),
    (("layout.compile", "layout.framework"), rules.compiled),
    (("layout.zero_stage", "layout.dp_type", "layout.dp_replicas"), rules.dp_kind),
    (("layout.order", "layout.framework"), rules.rank_order),
    (("layout.global_batch_seqs",), rules.batch),
    (("layout.precision",), rules.gemm_precision),
    (("layout.grad_reduce", "layout.framework"), rules.grad_reduce),
    (("layout.framework", "notes"), rules.framework_overlap),
    (("layout.overlap", "layout.framework"), rules.stated_overlap),
    (("layout.dispatcher",), rules.dispatcher),
    ((), rules.ring_overlap),
    (("layout.attention_kernel", "layout.framework", "source.document"), rules.attention),
    (("layout.comm",), rules.comm_sms),
    (("source.document",), rules.flops_convention),
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
        scenario = build(data)
    except ScenarioError as e:
        return _case(r, reason=str(e), mfu=mfu, notes=notes)
    step, how = _measured_step(scenario, r.measured, r.convention)
    if step is None:
        return _case(r, scenario=scenario, reason=how, mfu=mfu, notes=notes)
    return _case(r, scenario=scenario, step=step, how=how, mfu=mfu, notes=notes)


def _case(r: StatedRun, *, scenario: Scenario | None = None, reason: str | None = None, step: float | None = None,
          how: str = "", mfu: float | None = None, notes: list[str] | None = None) -> Case:
    return Case(id=r.whole["id"], source=r.source, gpus=r.whole["num_gpus"], framework=r.framework,
                scenario=scenario, reason=reason, measured_step_s=step, measured_from=how, measured_mfu=mfu,
                assumptions=[] if notes is None else notes)


def _measured_mfu(meas: dict, convention: str) -> float | None:
    """The MFU the source states under its own convention's name, else its plain ``mfu_pct``, as a fraction."""
    mfu = meas.get("mfu_pct_noncausal" if convention == "noncausal" else "mfu_pct_causal") or meas.get("mfu_pct")
    return float(mfu) / 100 if mfu else None


def _measured_step(sc: Scenario, meas: dict, convention: str) -> tuple[float | None, str]:
    if meas.get("step_time_s"):
        return float(meas["step_time_s"]), "step_time_s"
    tokens = sc.global_batch_seqs * sc.model.seq_len
    flops = model_counts(sc.model, convention).flops_per_token * tokens / sc.cluster.gpus  # per GPU per step
    rate = meas.get(f"tflops_per_gpu_{convention}") or meas.get("tflops_per_gpu")
    if rate:
        return flops / (float(rate) * 1e12), f"tflops_per_gpu with the {convention} count"
    if meas.get("mfu_pct"):
        peak = sc.cluster.gpu.peak_bf16_flops
        return flops / (float(meas["mfu_pct"]) / 100 * peak), f"mfu_pct with the {convention} count"
    return None, "no step time, throughput or MFU of one run in 'measured' (an ablation breakdown)"
