"""A published run as the conversion rules read it: the stated-run record, the tables and the text readers.

``StatedRun`` wraps one checked run of a runs file. The tables say what the sources leave unsaid: each
source's FLOP convention (where a run does not state its own), the frameworks built on Megatron-LM, the share
of line rate NCCL reaches, the NVLink rate per GPU, and the words a runs file uses for recompute, ZeRO stages,
positions and precisions. A model's name finds its row in the model catalog only (``catalog_row``): no preset's
cluster, layout or precisions ever reach a run. The readers
turn a field's free text into the model's choice (``grad_reduce_precision``, ``positions_of``) and raise
``Unpredictable`` where a run names what the tool does not know. Nothing here writes a scenario; the rules
(``rules.py``) do.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from stepbudget.inputs.complete import CATALOG_KEY
from stepbudget.inputs import catalog
from stepbudget.inputs.hardware import named_gpu
from stepbudget.inputs.recipes import Recipe, recipe_for
from stepbudget.units import parse
from stepbudget.validation.families import MEGATRON, Family, family_of

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
    # NeMo 24.x's printed model TFLOP/s count the full score matrix: with it they agree with the same tables'
    # tokens/s within 0.2 %, with the causal count 7-49 % off (examples/nemo_h100_runs.yaml)
    "NVIDIA NeMo 24.07 pre-training table": "noncausal",
    "NVIDIA NeMo 24.03.01 long-sequence table": "noncausal",
    # Narayanan et al. 2021 is left out on purpose: its Eq. 3 (96 B s l h^2 ...) also counts the recompute
    # pass; a run from it states measured.flops_convention: noncausal with flops_with_recompute: true
}
"""FLOP convention of each source's MFU and TFLOP/s figures, where a run does not state ``flops_convention``."""

CONVENTIONS = ("6N", "causal", "noncausal")
"""The FLOP counts a run's ``measured.flops_convention`` may name (plan/flops.py ``model_counts``)."""

NVLINK_BUSBW_SHARE = 370 / 450
"""Share of NVLink's line rate NCCL collectives reach (nccl-tests issue 212, NCCL maintainer: H100 ~370 of 450 GB/s)."""
NIC_BUSBW_SHARE = 47 / 50
"""Share of a 400 Gb/s NIC's line rate NCCL reaches (NCCL maintainers: 46-48 GB/s busbw per NIC)."""

RECOMPUTE_MODES = (
    (r"^(none|no)\b", "none"),
    # DeepSeek-V3 3.2.3 recomputes only RMSNorm and the MLA up-projections: memory-bound kernels and two small
    # GEMMs, nearer no recompute than the attention core the tool's selective mode runs again
    (r"rmsnorm.*up-?projection", "none"),
    (r"\b(per|selective)[\s_-]?op\b|\bop[\s_-]?sac\b|\bsac[\s_-]?op\b|selective_ac_option\W*op\b", "selective-op"),
    (r"\bfull\b", "full"),
    (r"selective|remateriali", "selective"),
)
"""A runs file's ``recompute`` text -> the model's mode: the first pattern that matches, else none."""

DP_KINDS = (
    (r"no.?shard", "ddp"),  # PyTorch FSDP's NO_SHARD strategy is DDP
    (r"shard.?grad.?op", "zero2"),  # PyTorch FSDP's ZeRO-2: gradients and optimizer state sharded
    (r"fsdp|full.?shard", "fsdp"),
    (r"\b(none|ddp)\b|^0\b|zero.?(stage.?)?0\b", "ddp"),  # whole optimizer state on every DP rank (ZeRO stage 0)
    (r"zero.?(stage.?)?3|^3\b", "zero3"),
    (r"distributed.?optimizer|zero.?(stage.?)?1|^1\b", "zero1"),
    (r"zero.?(stage.?)?2|^2\b", "zero2"),
)
"""A runs file's ``zero_stage`` (and ``dp_type``) text -> the model's dp_kind: the first pattern that matches."""

_GPU_NAMES = (("h100", "h100-sxm"), ("h800", "h800-sxm"), ("h200", "h200-sxm"), ("b200", "b200"),
              ("a100", "a100-sxm-80gb"), ("ampere", "a100-sxm-80gb"))

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


def text_of(value) -> str:
    """A field as lower-case text, "" when the run leaves it out."""
    return "" if value is None else str(value).lower()


def flag_of(value) -> bool:
    """A yes/no field as a runs file may write it (true, "false", 0), or text that opens with the word and says
    where the source states it ("true (3.3.2: ...)")."""
    return value if isinstance(value, bool) else bool(re.match(r"\s*(true|yes|1)(?![a-z0-9])", text_of(value)))


class Unpredictable(Exception):
    """Raised by a rule when the run cannot become a scenario; the message is the row's reason."""


OWN_STACKS = re.compile(r"megascale")
"""Stacks built on a recipe's framework whose papers state their own defaults and their baselines' instead: a run's
framework text or source that names one."""
BEFORE_RECIPES = re.compile(r"\b20(?:19|20|21|22)\b|\bcommit [0-9a-f]{7,40}\b")
"""Framework texts of releases older than the recipes' (2022 at the earliest, DeepSpeed v0.6.5; the Megatron family's
are of 2024-25), or of a bare commit: the Megatron-LM of 2021 had no pipeline-send overlap to default to, so such a
run takes its framework family's defaults (families.py) instead."""


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
        """Built on Megatron-LM (its family in families.py); Megatron-DeepSpeed is DeepSpeed's and keeps its layout."""
        return self.family.name == MEGATRON

    @functools.cached_property
    def recipe(self) -> Recipe | None:
        """The framework recipe the run's framework text names (inputs/recipes.py), which fills what the run leaves
        unstated; None for MegaScale and MegaScale-MoE, stacks of their own on Megatron-LM whose papers state what
        they change and what their Megatron-LM baselines overlap (rules.framework_overlap), for a framework of a
        year before the recipes' versions or at a bare commit, and for frameworks without a recipe."""
        text = self.framework.lower()
        if OWN_STACKS.search(text) or OWN_STACKS.search(self.source.lower()) or BEFORE_RECIPES.search(text):
            return None
        return recipe_for(self.framework)

    def recipe_holds(self, field: str) -> bool:
        """Whether the run's recipe gives ``field`` ("overlap.dp"): a rule then leaves it to the recipe."""
        return self.recipe is not None and self.recipe.default(field) is not None

    @property
    def family(self) -> Family:
        """The framework family whose defaults and memory options the run takes (validation/families.py)."""
        return family_of(self.framework)

    @property
    def convention(self) -> str:
        """The FLOP count the run's MFU and TFLOP/s figures use: its ``measured.flops_convention``, else its
        source's (``MFU_CONVENTION``), else the causal count."""
        stated = self.measured.get("flops_convention")
        if stated is not None:  # one of CONVENTIONS in any case (runs.py checked it)
            return next(c for c in CONVENTIONS if c.lower() == str(stated).strip().lower())
        return MFU_CONVENTION.get(self.source, "causal")

    @property
    def convention_stated(self) -> bool:
        """Whether the run or its source (``MFU_CONVENTION``) says which FLOP count its figures use."""
        return self.measured.get("flops_convention") is not None or self.source in MFU_CONVENTION


def positions_of(value) -> str | None:
    """The positions a run's ``model.position_embedding`` names first, None when it names none."""
    found = re.search(r"(?<![a-z])(" + "|".join(POSITIONS) + r")(?![a-z])", text_of(value).replace("_", " "))
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


def catalog_row(model_name: str) -> catalog.Entry | None:
    """The catalog row a run's model name finds (``catalog.lookup``: any case or punctuation, a parenthetical note
    or an appended size left out), else None. The row is the one place a name's knowledge comes from."""
    return catalog.lookup(model_name) if model_name.strip() else None


def _gpu(text: str) -> str | None:
    low = text.lower()
    return next((key for word, key in _GPU_NAMES if word in low), None)


def gpu_of(hw: dict) -> str:
    """The shipped GPU ``hardware.gpu`` names (an A100 stated as 40 GB is the 40 GB part); Unpredictable if none."""
    gpu = _gpu(str(hw.get("gpu", "")))
    if gpu is None:
        raise Unpredictable(f"hardware.gpu: {hw.get('gpu')!r} is not a GPU the tool knows")
    if gpu == "a100-sxm-80gb" and (hw.get("hbm_gb") == 40 or re.search(r"40\s*gb", text_of(hw.get("gpu")))):
        return "a100-sxm-40gb"
    return gpu


def stated_memory(gpu: str, hw: dict, notes: list[str]) -> str | dict:
    """The named GPU, or that row with the HBM size and bandwidth the run states where they differ from its
    datasheet by more than 5 % (a variant part, as Grand Teton's 96 GB HBM2e H100s; closer is rounding): the row
    still fills the rest, its node included (inputs/complete.py)."""
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
    notes.append(f"HBM as the run states: {', '.join(changed.values())}")
    return {CATALOG_KEY: gpu, **changed, "name": f"{spec['name']} ({', '.join(changed.values())} as the run states)"}


_BEST_ATTENTION = r"flash.?(?:attn|attention)\W{0,3}(?:v|version|==|-)?\s*3(?![0-9])|\bfa-?3\b|cudnn"
_ATTENTION_VERSION = r"flash.?(?:attn|attention)\W{0,3}(?:v|version|==|-)?\s*([12])(?![0-9])|\bfa-?([12])\b"


def attention_kernel_of(text) -> tuple[str | None, bool]:
    """A run's ``layout.attention_kernel`` as the model's choice (FlashAttention-1 or -2 by version, PyTorch
    SDPA's flash backend as FlashAttention-2, None for the GPU's best: FlashAttention-3, cuDNN, unstated),
    and whether the text said which kernel ran."""
    t = text_of(text)
    if re.search(_BEST_ATTENTION, t):
        return None, True
    version = re.search(_ATTENTION_VERSION, t)
    if version:
        return f"flash-attention-{version.group(1) or version.group(2)}", True
    if "sdpa" in t and "flash" in t:
        return "flash-attention-2", True  # PyTorch SDPA's flash backend is FlashAttention-2
    return None, not re.search(r"flash|sdpa", t)


_PRECISION_WORDS = {"fp32": "fp32", "float32": "fp32", "bf16": "bf16", "bfloat16": "bf16"}


def grad_reduce_precision(value) -> str | None:
    """The precision a run's ``layout.grad_reduce`` names: "fp32" or "bf16" (float32 and bfloat16 too; a flag
    such as ``grad_reduce_in_fp32=False`` read as what it sets), None when it names neither or both."""
    text = text_of(value)
    flag = re.search(r"in_(fp32|bf16)\W{0,3}(true|false|yes|no|1|0)(?![a-z0-9])", text)
    if flag:
        said = flag.group(1)
        return said if flag.group(2) in ("true", "yes", "1") else {"fp32": "bf16", "bf16": "fp32"}[said]
    words = re.findall(r"(?<![a-z0-9])(fp32|float32|bf16|bfloat16)(?![a-z0-9])", text.replace("_", " "))
    named = {_PRECISION_WORDS[w] for w in words}
    return named.pop() if len(named) == 1 else None


_PRECISION_BYTES = ((r"fp32|float32", 4.0), (r"bf16|bfloat16|fp16|float16", 2.0), (r"fp8|e4m3|e5m2", 1.0))
"""Words of a precision field -> bytes per element (inputs/_types.py's names, with their spellings)."""
_TILE_SCALE = r"1\s*x\s*(\d+)"
"""A tile of fine-grained scaling, "1x128": one FP32 scale per 128 elements (DeepSeek-V3 3.3.2)."""


def element_bytes_of(value) -> float | None:
    """Bytes per element of the precision a precision field names first (a number is taken as bytes): 4 for FP32,
    2 for BF16 or FP16, 1 for FP8, plus 4/N for one FP32 scale per N elements where the text names its tiles
    ("fp8 with 1x128 scales"); None when it names none."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    text = text_of(value)
    found = [(m.start(), size) for pattern, size in _PRECISION_BYTES
             for m in [re.search(rf"(?<![a-z0-9])({pattern})(?![a-z0-9])", text)] if m]
    if not found:
        return None
    tile = re.search(_TILE_SCALE, text) if "scal" in text else None
    return min(found)[1] + (4 / int(tile.group(1)) if tile and int(tile.group(1)) > 0 else 0.0)
