"""A published run -> a scenario the model can predict, plus the step time the source measured.

The conversion is the table ``RULES``: each rule reads a few fields of the run and sets a few fields of the
raw scenario, and ``to_case`` applies them in order, then builds the scenario and reads the measured step.
The rules, the same for every run (no per-run constants):

- **Model and cluster.** A run whose model name matches a preset's model starts from that preset
  (it carries what the file leaves out: Llama 3's rank order, DeepSeek-V3's MLA shapes). The
  run's own numbers then override it. The rate is always the operator model's:
  ``achieved_flops`` and ``achieved_fraction`` are dropped, and ``rate_scope`` is kernel.
- **Hardware.** Collectives run at the bus bandwidth NCCL's maintainers measure, not at line rate
  (``NVLINK_BUSBW_SHARE``, ``NIC_BUSBW_SHARE``). The GPU is read from its name (A100, H100, H800, H200, B200; "Ampere" without a
  SKU is taken as A100 SXM, whose 312 TFLOP/s peak the MegaScale MFU arithmetic uses). NVLink
  figures in the file are datasheet totals and are halved to get per-direction rates.
- **Layout.** Fields the source leaves out take documented defaults: micro-batch 1, sequence
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

import copy
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from stepbudget.inputs.hardware import named_gpu
from stepbudget.inputs.scenario import Scenario, ScenarioError, build, preset_names, raw_scenario
from stepbudget.plan.flops import model_counts
from stepbudget.units import parse
from stepbudget.validation.runs import OVERLAP_DIMS, REQUIRED, overlap_dims

MFU_CONVENTION = {
    "MegaScale": "noncausal",  # MegaScale §6: Megatron's 72BLsh^2(1 + s/6h + V/12hL): full score matrix, logits
    "Llama 3": "causal",  # Llama 3 Table 4 BF16 MFU; the causal count makes 128K's 380 TFLOP/s plausible (formulas.md 2.4)
    "DeepSeek-V3": "noncausal",  # ISCA'25 Table 4 quotes 43.73 % non-causal (38.94 % causal)
    "MegaScale-MoE": "causal",  # not stated in the source; Megatron's current counter is causal
    "Korthikanti et al.": "noncausal",  # Eq. 7: 72 B L s h^2 (1 + s/6h + v/12hL), the full score matrix
    "Nemotron-4 15B": "noncausal",  # 6N + 6hV + 12Lsh per token reproduces Table 2's MFU (examples/nvidia_reports_runs.yaml)
    "Nemotron-4 340B": "noncausal",  # the 15B report's count reproduces its Table 2 MFU the same way
    "MT-NLG": "noncausal",  # PaLM App. B: MT-NLG's 30.2 % MFU counts self-attention in full
    "MosaicML llm-foundry": "noncausal",  # benchmarking README: attn_flops_per_seq = n_layers * 2 * 2 * d_model * seq_len^2
    "torchtitan": "noncausal",  # train.py: 6 N + 12 L h s per token, the full score matrix
    "GLM-130B": "noncausal",  # GLM-130B 2.3: PaLM's MFU, 6N + 12 L h s per token
    # Narayanan et al. 2021 is left out on purpose: its Eq. 3 (96 B s l h^2 ...) also counts the recompute
    # pass, which no convention here does; a run from it states its step (examples/megatron_a100_runs.yaml)
}
"""FLOP convention of each source's MFU and TFLOP/s figures."""

MEGATRON_FAMILY = ("megatron", "megascale", "nemo")
"""Frameworks built on Megatron-LM: ranks are laid out TP innermost, then CP, EP/DP, and PP outermost."""

NVLINK_BUSBW_SHARE = 370 / 450
"""Share of NVLink's line rate NCCL collectives reach (nccl-tests issue 212, NCCL maintainer: H100 ~370 of 450 GB/s)."""
NIC_BUSBW_SHARE = 47 / 50
"""Share of a 400 Gb/s NIC's line rate NCCL reaches (NCCL maintainers: 46-48 GB/s busbw per NIC)."""

RECOMPUTE_MODES = (
    (r"^(none|no)\b", "none"),
    (r"\b(per|selective)[\s_-]?op\b|\bop[\s_-]?sac\b|\bsac[\s_-]?op\b|selective_ac_option\W*op\b", "selective-op"),
    (r"\bfull\b", "full"),
    (r"selective|remateriali", "selective"),
)
"""A runs file's ``recompute`` text -> the model's mode: the first pattern that matches, else none."""

DP_KINDS = (
    (r"shard.?grad.?op", "zero2"),  # PyTorch FSDP's ZeRO-2: gradients and optimizer state sharded
    (r"fsdp|full.?shard", "fsdp"),
    (r"\b(none|ddp)\b", "ddp"),  # every DP rank keeps whole optimizer state: gradients all-reduced
    (r"zero.?(stage.?)?3|^3\b", "zero3"),
    (r"distributed.?optimizer|zero.?(stage.?)?1|^1\b", "zero1"),
    (r"zero.?(stage.?)?2|^2\b", "zero2"),
)
"""A runs file's ``zero_stage`` (and ``dp_type``) text -> the model's dp_kind: the first pattern that matches."""

NVLINK_PER_DIRECTION = {  # datasheet totals / 2
    "a100-sxm-80gb": "300GB/s", "a100-sxm-40gb": "300GB/s", "h100-sxm": "450GB/s", "h800-sxm": "200GB/s",
    "h200-sxm": "450GB/s", "b200": "900GB/s",
}

_GPU_NAMES = (("h100", "h100-sxm"), ("h800", "h800-sxm"), ("h200", "h200-sxm"), ("b200", "b200"),
              ("a100", "a100-sxm-80gb"), ("ampere", "a100-sxm-80gb"))


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


_SOURCES = ((r"mlperf training v(\d+(?:\.\d+)*)", r"MLPerf Training v\1"),  # a round's Llama runs are the round's
            ("torchtitan", "torchtitan"), ("llm-foundry", "MosaicML llm-foundry"),
            ("megatron-bridge", "Megatron-Bridge"), ("megascale-moe", "MegaScale-MoE"),
            ("megascale_moe", "MegaScale-MoE"), ("megascale", "MegaScale"), ("llama", "Llama 3"),
            ("deepseek", "DeepSeek-V3"), ("nemotron-4 15b", "Nemotron-4 15B"),
            ("nemotron-4 340b", "Nemotron-4 340B"), ("mt-nlg", "MT-NLG"), ("tr11-176b", "BLOOM"),
            ("glm-130b", "GLM-130B"), ("bloomberggpt", "BloombergGPT"))
"""Patterns in a run's document (else its id) -> the source its summary row is grouped under (a match's
groups fill the name); the first that matches wins."""


POSITIONS = {"alibi": "alibi", "learned": "learned", "absolute": "learned", "rotary": "rotary", "rope": "rotary"}
"""Words of a run's ``model.position_embedding`` -> the model's positions; the word the text names first wins
("learned absolute (... does not set alibi)" is learned)."""


def positions_of(value) -> str | None:
    """The positions a run's ``model.position_embedding`` names first, None when it names none."""
    found = re.search(r"(?<![a-z])(" + "|".join(POSITIONS) + r")(?![a-z])", _text(value).replace("_", " "))
    return POSITIONS[found.group(1)] if found else None


def source_of(run: dict) -> str:
    """The source a run's summary row groups it under: named by its document, else by its id."""
    def known(text: str) -> str | None:
        found = ((re.search(pattern, text.lower()), name) for pattern, name in _SOURCES)
        return next((match.expand(name) for match, name in found if match), None)

    doc = str((run.get("source") or {}).get("document", "")).strip()
    if doc:
        return known(doc) or doc.split(",")[0].strip()
    return known(run["id"]) or "other"


@functools.cache
def _preset_models() -> dict[str, str]:
    """Lower-case model name -> the first preset with that model (presets are read once)."""
    out: dict[str, str] = {}
    for preset in preset_names():
        name = str(raw_scenario(preset).get("model", {}).get("name", "")).lower()
        if name:
            out.setdefault(name, preset)
    return out


def _preset_for(model_name: str) -> str | None:
    name = model_name.lower().replace(" moe", "")
    if name in ("gpt 175b", "gpt-3 175b"):
        return _preset_models().get(name, "megascale-175b")
    return _preset_models().get(name)


def _gpu(text: str) -> str | None:
    low = text.lower()
    return next((key for word, key in _GPU_NAMES if word in low), None)


_BEST_ATTENTION = r"flash.?(?:attn|attention)\W{0,3}(?:v|version|==|-)?\s*3(?![0-9])|\bfa-?3\b|cudnn"
_ATTENTION_VERSION = r"flash.?(?:attn|attention)\W{0,3}(?:v|version|==|-)?\s*([12])(?![0-9])|\bfa-?([12])\b"


def _stated_memory(gpu: str, hw: dict, notes: list[str]) -> str | dict:
    """The named GPU, or a copy with the HBM size and bandwidth the run states where they differ from its
    datasheet by more than 5 % (a variant part, as Grand Teton's 96 GB HBM2e H100s; closer is rounding)."""
    spec = named_gpu(gpu)
    if spec is None:  # no datasheet to compare with (every name _gpu gives has one)
        return gpu
    changed = {}
    for key, attr, unit, scale, kind in (("hbm_gb", "hbm_bytes", "GB", 1e9, "bytes"),
                                         ("hbm_bw_tbps", "hbm_Bps", "TB/s", 1e12, "rate")):
        stated, datasheet = hw.get(key), parse(spec[attr], kind)
        if stated is not None and abs(stated * scale / datasheet - 1) > 0.05:  # a positive number (runs.py)
            changed[attr] = f"{stated}{unit}"
    if not changed:
        return gpu
    spec.update(changed, name=f"{spec['name']} ({', '.join(changed.values())} as the run states)")
    notes.append(f"HBM as the run states: {', '.join(changed.values())}")
    return spec


def _attention_kernel(text) -> tuple[str | None, bool]:
    """A run's ``layout.attention_kernel`` as the model's choice (FlashAttention-1 or -2 by version, PyTorch
    SDPA's flash backend as FlashAttention-2, None for the GPU's best: FlashAttention-3, cuDNN, unstated),
    and whether the text said which kernel ran."""
    t = _text(text)
    if re.search(_BEST_ATTENTION, t):
        return None, True
    version = re.search(_ATTENTION_VERSION, t)
    if version:
        return f"flash-attention-{version.group(1) or version.group(2)}", True
    if "sdpa" in t and "flash" in t:
        return "flash-attention-2", True  # PyTorch SDPA's flash backend is FlashAttention-2
    return None, not re.search(r"flash|sdpa", t)


def _text(value) -> str:
    return "" if value is None else str(value).lower()


_PRECISION_WORDS = {"fp32": "fp32", "float32": "fp32", "bf16": "bf16", "bfloat16": "bf16"}


def grad_reduce_precision(value) -> str | None:
    """The precision a run's ``layout.grad_reduce`` names: "fp32" or "bf16" (float32 and bfloat16 too; a flag
    such as ``grad_reduce_in_fp32=False`` read as what it sets), None when it names neither or both."""
    text = _text(value)
    flag = re.search(r"in_(fp32|bf16)\W{0,3}(true|false|yes|no|1|0)(?![a-z0-9])", text)
    if flag:
        said = flag.group(1)
        return said if flag.group(2) in ("true", "yes", "1") else {"fp32": "bf16", "bf16": "fp32"}[said]
    words = re.findall(r"(?<![a-z0-9])(fp32|float32|bf16|bfloat16)(?![a-z0-9])", text.replace("_", " "))
    named = {_PRECISION_WORDS[w] for w in words}
    return named.pop() if len(named) == 1 else None


def _flag(value) -> bool:
    """A yes/no field as a runs file may write it (true, "false", 0)."""
    return value if isinstance(value, bool) else _text(value) in ("true", "yes", "1")


class _Unpredictable(Exception):
    """Raised by a rule when the run cannot become a scenario; the message is the row's reason."""


@dataclass(frozen=True)
class StatedRun:
    """A run that passed ``check_run``, as the conversion rules read it."""

    whole: dict
    """The run's mapping as the runs file gives it."""
    source: str
    """The source its summary row is grouped under (``source_of``)."""
    framework: str
    """``layout.framework`` as written, "" when not stated."""

    @property
    def model(self) -> dict:
        return self.whole["model"]

    @property
    def hardware(self) -> dict:
        return self.whole["hardware"]

    @property
    def layout(self) -> dict:
        return self.whole["layout"]

    @property
    def measured(self) -> dict:
        return self.whole["measured"]

    @property
    def megatron(self) -> bool:
        """Built on Megatron-LM (``MEGATRON_FAMILY``); Megatron-DeepSpeed keeps DeepSpeed's own layout."""
        fw = self.framework.lower()
        return any(k in fw for k in MEGATRON_FAMILY) and "deepspeed" not in fw

    @property
    def convention(self) -> str:
        """The FLOP count the source's MFU and TFLOP/s figures use (``MFU_CONVENTION``)."""
        return MFU_CONVENTION.get(self.source, "causal")


Rule = Callable[[StatedRun, dict, list[str]], None]
"""A conversion rule ``rule(run, scenario, notes)``: reads a few fields of ``run``, sets a few fields of the raw
``scenario`` mapping (``build``'s input), and appends to ``notes`` each default it takes. It raises
``_Unpredictable`` when the run cannot be predicted. Rules run in ``RULES`` order; a later one may read what an
earlier one set."""


# -- what every prediction needs, and the preset a model's name picks ------------------------------------------

def _required(r: StatedRun, sc: dict, notes: list[str]) -> None:
    missing = [f"{sec}.{name}" for sec, names in REQUIRED.items() for name in names if r.whole[sec].get(name) is None]
    if missing:
        raise _Unpredictable(f"not stated in the source: {', '.join(missing)}")


def _preset(r: StatedRun, sc: dict, notes: list[str]) -> None:
    name = str(r.model.get("name", ""))
    preset = _preset_for(name)
    if preset:  # it carries what the file leaves out (module doc); the rules below override it
        sc.update(copy.deepcopy(raw_scenario(preset)))
        notes.append(f"unstated fields from preset {preset}")
    sc.update(name=r.whole["id"], description=name, source=str((r.whole.get("source") or {}).get("document", "")))


# -- model -----------------------------------------------------------------------------------------------------

def _model_shape(r: StatedRun, sc: dict, notes: list[str]) -> None:
    m, model = r.model, sc.setdefault("model", {})
    model.update(name=str(m.get("name", "model")), num_layers=m["layers"], hidden_size=m["hidden"],
                 num_heads=m["heads"], vocab_size=m["vocab"], seq_len=m["seq_len"])
    if m.get("kv_heads"):
        model["num_kv_heads"] = m["kv_heads"]
    if m.get("head_dim"):
        model["head_dim"] = m["head_dim"]


def _ffn(r: StatedRun, sc: dict, notes: list[str]) -> None:
    m, model = r.model, sc.setdefault("model", {})
    if m.get("ffn_hidden"):
        model["ffn_size"] = m["ffn_hidden"]
    elif "ffn_size" not in model:
        model["ffn_size"] = 4 * m["hidden"]
        notes.append("FFN width 4h (GPT) assumed")
    if re.search(r"swiglu|geglu", _text(m.get("activation"))):
        model["activation"] = "swiglu"  # GeGLU: the same three matrices and FLOPs, another gate function
    elif "activation" not in model:
        model["activation"] = "gelu"


def _moe(r: StatedRun, sc: dict, notes: list[str]) -> None:
    m = r.model
    if not isinstance(m.get("moe"), dict):
        return
    mo = m["moe"]
    moe = sc.setdefault("model", {}).setdefault("moe", {})
    moe.update({k: v for k, v in (("num_experts", mo.get("num_experts")), ("top_k", mo.get("top_k")),
                                  ("expert_ffn_size", mo.get("expert_ffn_hidden")),
                                  ("shared_experts", mo.get("shared_experts")),
                                  ("node_limit", mo.get("node_limit"))) if v is not None})
    if m.get("dense_layers") is not None:
        moe["first_dense_layers"] = m["dense_layers"]


def _mtp(r: StatedRun, sc: dict, notes: list[str]) -> None:
    if r.model.get("mtp_depth") is not None:
        sc.setdefault("model", {})["mtp_layers"] = r.model["mtp_depth"]


def _embeddings(r: StatedRun, sc: dict, notes: list[str]) -> None:
    m, model = r.model, sc.setdefault("model", {})
    if m.get("tied_embeddings") is not None:
        model["tied_embeddings"] = _flag(m["tied_embeddings"])
    positions = positions_of(m.get("position_embedding"))
    if positions:
        model["positions"] = positions
    elif m.get("position_embedding"):
        notes.append(f"position embedding {m['position_embedding']!r} not read: rotary assumed")


# -- cluster ---------------------------------------------------------------------------------------------------

def _gpu_of(hw: dict) -> str:
    """The shipped GPU ``hardware.gpu`` names (an A100 stated as 40 GB is the 40 GB part); _Unpredictable if none."""
    gpu = _gpu(str(hw.get("gpu", "")))
    if gpu is None:
        raise _Unpredictable(f"hardware.gpu: {hw.get('gpu')!r} is not a GPU the tool knows")
    if gpu == "a100-sxm-80gb" and (hw.get("hbm_gb") == 40 or re.search(r"40\s*gb", _text(hw.get("gpu")))):
        return "a100-sxm-40gb"
    return gpu


def _gpu_part(r: StatedRun, sc: dict, notes: list[str]) -> None:
    hw = r.hardware
    gpu = _gpu_of(hw)
    if "ampere" in _text(hw.get("gpu")) and "a100" not in _text(hw.get("gpu")):
        notes.append("Ampere SKU not stated: A100 SXM 80GB")
    # the operator model's rate, never the preset's measured one (module doc)
    sc.setdefault("cluster", {}).update(
        gpu=_stated_memory(gpu, hw, notes), gpus=r.whole["num_gpus"], achieved_flops=None, achieved_fraction=None,
        rate_scope="kernel", nvlink_efficiency=NVLINK_BUSBW_SHARE, nic_efficiency=NIC_BUSBW_SHARE)


def _node(r: StatedRun, sc: dict, notes: list[str]) -> None:
    hw, cl = r.hardware, sc.setdefault("cluster", {})
    cl["gpus_per_node"] = hw.get("gpus_per_node") or cl.get("gpus_per_node") or 8
    if hw.get("nvlink_bw_gbps"):
        cl["nvlink_Bps"] = f"{hw['nvlink_bw_gbps'] / 2}GB/s"  # the file's figure is the datasheet total
    elif "nvlink_Bps" not in cl:
        cl["nvlink_Bps"] = NVLINK_PER_DIRECTION[_gpu_of(hw)]


def _nic(r: StatedRun, sc: dict, notes: list[str]) -> None:
    hw, cl = r.hardware, sc.setdefault("cluster", {})
    g = cl["gpus_per_node"]  # one NIC per GPU
    if hw.get("nic_gbps_per_gpu"):
        cl.update(nics_per_node=g, nic_Bps=f"{hw['nic_gbps_per_gpu']}Gb/s")
    elif "nic_Bps" not in cl:
        cl.update(nics_per_node=g, nic_Bps="400Gb/s")
        notes.append("NIC not stated: 400 Gb/s per GPU")


# -- layout ----------------------------------------------------------------------------------------------------

def _degrees(r: StatedRun, sc: dict, notes: list[str]) -> None:
    lay = r.layout
    tp, pp = lay["tp"], lay["pp"]
    cp = lay.get("cp") or 1
    if lay.get("sp_attention"):
        cp = lay["sp_attention"]  # MegaScale-MoE: attention split over the sequence on the EP ranks
        notes.append(f"SP attention {cp} as CP {cp}")
    dp = lay.get("dp")
    if not isinstance(dp, int):
        dp = r.whole["num_gpus"] // (tp * cp * pp)
        notes.append(f"DP not a number in the source: {dp} from the GPU count")
    ep = lay.get("ep") or 1
    if r.model.get("moe") and not lay.get("ep"):
        notes.append("EP not stated: experts sharded by TP")
    sc.setdefault("layout", {}).update(tp=tp, cp=cp, pp=pp, dp=dp, ep=ep)


def _cp_and_expert_kinds(r: StatedRun, sc: dict, notes: list[str]) -> None:
    sp_attention, out = r.layout.get("sp_attention"), sc.setdefault("layout", {})
    if out["cp"] > 1 and not sp_attention and r.megatron:
        out["cp_kind"] = "ring"  # Megatron-Core context parallelism: K,V blocks passed around a ring (P2P)
    out.pop("expert_tp", None)  # a preset's expert TP belongs to its own layout
    if out["ep"] > 1 and not sp_attention:
        out["expert_tp"] = 1


def _schedule(r: StatedRun, sc: dict, notes: list[str]) -> None:
    lay, out = r.layout, sc.setdefault("layout", {})
    schedule = _text(lay.get("schedule"))
    v = lay.get("virtual_pipeline_chunks_per_rank")
    if "dualpipe" in schedule:
        out.update(schedule="dualpipe", virtual_stages=1)
    elif (v or 1) > 1 or "interleaved" in schedule:
        # unstated depth: the preset's, else the shallowest interleaving (v >= 2) the stage's layers divide into
        layers, pp = r.model["layers"], lay["pp"]
        per_stage = layers // pp if layers % pp == 0 else 0
        shallowest = next((k for k in range(2, per_stage + 1) if per_stage % k == 0), 2)
        out.update(schedule="interleaved-1f1b", virtual_stages=v or out.get("virtual_stages", shallowest))
        if not v:
            notes.append(f"interleaving depth not stated: v = {out['virtual_stages']}")
    else:
        out.update(schedule="1f1b", virtual_stages=1)


def _pipeline_split(r: StatedRun, sc: dict, notes: list[str]) -> None:
    out = sc.setdefault("layout", {})
    for split in ("embedding_in_pipeline_split", "loss_in_pipeline_split"):
        if r.layout.get(split) is not None:
            out[split] = _flag(r.layout[split])


def _micro_batch(r: StatedRun, sc: dict, notes: list[str]) -> None:
    lay, out = r.layout, sc.setdefault("layout", {})
    if lay.get("micro_batch"):
        out["micro_batch"] = lay["micro_batch"]
    elif "micro_batch" not in out:
        out["micro_batch"] = 1
        notes.append("micro-batch not stated: 1")


def _sequence_parallel(r: StatedRun, sc: dict, notes: list[str]) -> None:
    lay, out = r.layout, sc.setdefault("layout", {})
    if lay.get("sequence_parallel") is not None:
        out["sequence_parallel"] = _flag(lay["sequence_parallel"])
    else:
        out["sequence_parallel"] = lay["tp"] > 1  # unstated: on with TP (module doc)
    if lay.get("flash_attention") is not None:
        out["flash_attention"] = _flag(lay["flash_attention"])


def _recompute(r: StatedRun, sc: dict, notes: list[str]) -> None:
    recompute = _text(r.layout.get("recompute")).strip()
    sc.setdefault("layout", {})["recompute"] = next(
        (mode for pattern, mode in RECOMPUTE_MODES if re.search(pattern, recompute)), "none")


def _dp_kind(r: StatedRun, sc: dict, notes: list[str]) -> None:
    lay, out = r.layout, sc.setdefault("layout", {})
    zero = _text(lay.get("zero_stage")) + " " + _text(lay.get("dp_type"))
    kind = next((k for pattern, k in DP_KINDS if re.search(pattern, zero.strip())), None)
    if kind:
        out["dp_kind"] = kind
    elif zero.strip():
        notes.append(f"zero_stage not read ({zero.strip()[:40]!r}): {out.get('dp_kind', 'zero1')}")
    if kind == "fsdp":
        out["reshard_after_forward"] = "not resharded" not in zero
    if lay.get("dp_replicas") is not None:
        out["dp_replicas"] = lay["dp_replicas"]  # HSDP: sharded inside each group, replicated across them


def _rank_order(r: StatedRun, sc: dict, notes: list[str]) -> None:
    out = sc.setdefault("layout", {})
    stated = r.layout.get("order")
    order = re.findall(r"\b(tp|cp|pp|dp)\b", _text(stated))
    if sorted(order) == ["cp", "dp", "pp", "tp"]:
        out["order"] = order
        return
    if stated:
        notes.append("rank order not read: name tp, cp, pp and dp once each")
    if r.megatron:  # the framework's layout, not the preset's cluster
        out["order"] = ["tp", "cp", "dp", "pp"]  # Megatron-Core parallel_state: order="tp-cp-ep-dp-pp"


def _batch(r: StatedRun, sc: dict, notes: list[str]) -> None:
    sc["batch"] = {"global_batch_seqs": r.layout["global_batch_seqs"]}  # replaces a preset's, in tokens or not


def _gemm_precision(r: StatedRun, sc: dict, notes: list[str]) -> None:
    if "fp8" in _text(r.layout.get("precision")):
        sc.setdefault("precision", {})["gemm"] = "fp8"


# -- what the framework overlaps and how it sends (module doc) ------------------------------------------------

def _grad_reduce(r: StatedRun, sc: dict, notes: list[str]) -> None:
    stated = r.layout.get("grad_reduce")
    reduce = grad_reduce_precision(stated)
    if reduce is None and stated:
        notes.append(f"gradient reduction {stated!r} not read: the framework's default kept")
    if reduce == "fp32" or (r.megatron and reduce is None):
        # Megatron-LM arguments.py: "bfloat16 requires gradient accumulation and all-reduce to be done in fp32";
        # other frameworks say so in layout.grad_reduce (PyTorch FSDP's reduce_dtype), and a Megatron-family run
        # whose optimizer reduces in BF16 says that (NeMo's distributed_fused_adam, grad_sync_dtype: bf16)
        sc.setdefault("precision", {})["grads"] = "fp32"
    elif reduce == "bf16":  # stated: whatever a preset's framework reduced in
        sc.setdefault("precision", {})["grads"] = "bf16"


def _framework_overlap(r: StatedRun, sc: dict, notes: list[str]) -> None:
    fw, ov = r.framework.lower(), sc.setdefault("overlap", {})
    if "megascale-moe" in fw:
        ov.update(tp=1.0, cp=1.0, ep=1.0)
        out = sc.setdefault("layout", {})
        out["ep_kind"] = "all-gather"  # §3.2, Fig. 9: AG + scatter + GroupedGEMM, GroupedGEMM + gather + RS
    elif "megascale" in fw:
        ov.update(tp=1.0)
        model = sc.setdefault("model", {})
        model["parallel_block"] = True  # MegaScale 3.1: parallel transformer block (its window for SWA is not stated)
    elif r.megatron:
        ov.update(tp=0.0, cp=0.0, ep=0.0)
        if "dp/pp overlap" not in _text(r.whole.get("notes")):
            ov.update(pp=0.0, dp=0.0)


def _stated_overlap(r: StatedRun, sc: dict, notes: list[str]) -> None:
    if r.layout.get("overlap") is None:
        return
    # what the run's recipe overlaps, and nothing else: model-parallel collectives fused or hidden
    # whole, DP and PP hidden in the windows the schedule leaves them (the model's own default)
    listed = set(overlap_dims(r.layout["overlap"]))
    ov = sc.setdefault("overlap", {})
    ov.update({d: (1.0 if d in ("tp", "cp", "ep") else "auto") if d in listed else 0.0 for d in OVERLAP_DIMS})
    if r.megatron and "ep" in listed:
        ov["ep_paired"] = True  # Megatron-Core overlaps the all-to-all by pairing forward and backward chunks


def _dispatcher(r: StatedRun, sc: dict, notes: list[str]) -> None:
    if re.search(r"deepep|hybrid-?ep", _text(r.layout.get("dispatcher"))):
        out = sc.setdefault("layout", {})
        out["ep_kind"] = "deepep"  # one NIC copy per target node, NVLink forwards it (DeepEP; DeepSeek-V3 3.2.2)


def _ring_overlap(r: StatedRun, sc: dict, notes: list[str]) -> None:
    if sc.setdefault("layout", {}).get("cp_kind") == "ring":
        ov = sc.setdefault("overlap", {})
        ov["cp"] = "auto"  # the ring sends the next block while the current one is attended to (by design)


def _attention(r: StatedRun, sc: dict, notes: list[str]) -> None:
    stated, fw, out = r.layout.get("attention_kernel"), r.framework.lower(), sc.setdefault("layout", {})
    kernel, read = _attention_kernel(stated)
    if kernel:
        out["attention_kernel"] = kernel
    elif not read:
        notes.append(f"attention kernel not read ({_text(stated)[:40]!r}): the GPU's best")
    elif r.source == "MegaScale" and "megatron" in fw and "megascale" not in fw:
        # MegaScale 3.3: "for the attention part, we adopt FlashAttention-2" as its own efficient operator;
        # the baseline runs FlashAttention-1
        out["attention_kernel"] = "flash-attention-1"
        notes.append("FlashAttention-1 (MegaScale's baseline): half FlashAttention-2's attention rate")


def _comm_sms(r: StatedRun, sc: dict, notes: list[str]) -> None:
    sms = re.search(r"(\d+)\s+of\s+(\d+)\s+SMs", str(r.layout.get("comm") or ""))
    if sms and 0 < int(sms.group(1)) <= int(sms.group(2)):  # else not a share: the default stands
        sc.setdefault("overlap", {})["comm_sm_share"] = int(sms.group(1)) / int(sms.group(2))


def _flops_convention(r: StatedRun, sc: dict, notes: list[str]) -> None:
    sc["flops"] = {"convention": r.convention}  # the source's own count turns its MFU or TFLOP/s into a step


RULES: tuple[tuple[tuple[str, ...], Rule], ...] = (
    (tuple(f"{sec}.{name}" for sec, names in REQUIRED.items() for name in names), _required),
    (("model.name", "source.document"), _preset),
    (("model.name", "model.layers", "model.hidden", "model.heads", "model.vocab", "model.seq_len",
      "model.kv_heads", "model.head_dim"), _model_shape),
    (("model.ffn_hidden", "model.hidden", "model.activation"), _ffn),
    (("model.moe", "model.dense_layers"), _moe),
    (("model.mtp_depth",), _mtp),
    (("model.tied_embeddings", "model.position_embedding"), _embeddings),
    (("hardware.gpu", "hardware.hbm_gb", "hardware.hbm_bw_tbps", "num_gpus"), _gpu_part),
    (("hardware.gpus_per_node", "hardware.nvlink_bw_gbps", "hardware.gpu"), _node),
    (("hardware.nic_gbps_per_gpu",), _nic),
    (("layout.tp", "layout.cp", "layout.pp", "layout.dp", "layout.ep", "layout.sp_attention", "model.moe",
      "num_gpus"), _degrees),
    (("layout.sp_attention", "layout.framework"), _cp_and_expert_kinds),
    (("layout.schedule", "layout.virtual_pipeline_chunks_per_rank", "model.layers", "layout.pp"), _schedule),
    (("layout.embedding_in_pipeline_split", "layout.loss_in_pipeline_split"), _pipeline_split),
    (("layout.micro_batch",), _micro_batch),
    (("layout.sequence_parallel", "layout.tp", "layout.flash_attention"), _sequence_parallel),
    (("layout.recompute",), _recompute),
    (("layout.zero_stage", "layout.dp_type", "layout.dp_replicas"), _dp_kind),
    (("layout.order", "layout.framework"), _rank_order),
    (("layout.global_batch_seqs",), _batch),
    (("layout.precision",), _gemm_precision),
    (("layout.grad_reduce", "layout.framework"), _grad_reduce),
    (("layout.framework", "notes"), _framework_overlap),
    (("layout.overlap", "layout.framework"), _stated_overlap),
    (("layout.dispatcher",), _dispatcher),
    ((), _ring_overlap),
    (("layout.attention_kernel", "layout.framework", "source.document"), _attention),
    (("layout.comm",), _comm_sms),
    (("source.document",), _flops_convention),
)
"""The conversion, in order: (the run's fields a rule reads, the rule). A new field of the runs schema is read
by a new rule here, or by the rule whose fields it joins."""


def to_case(run: dict) -> Case:
    """The scenario and measured step of one run (``reason`` set when it cannot be predicted)."""
    r = StatedRun(run, source_of(run), str(run["layout"].get("framework") or ""))
    data: dict = {}
    notes: list[str] = []
    try:
        for _reads, rule in RULES:
            rule(r, data, notes)
    except _Unpredictable as e:
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
