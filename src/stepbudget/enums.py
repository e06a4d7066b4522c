"""Closed choices, each a StrEnum so YAML, CLI and JSON spell them the same way.

Naming rules used across the package:
- a *degree* is the size of a parallel axis (``tp = 8``);
- a *group* is the set of ranks that take part in one collective (a DP group has ``dp`` ranks);
- a *message* is the collective's size ``S`` in the nccl-tests convention (formulas.md 1.2);
- *bytes per GPU* are the bytes one GPU sends on the wire for that collective.
"""

from __future__ import annotations

from enum import StrEnum

import numpy as np


class Axis(StrEnum):
    """Parallel dimensions, in the default rank order (innermost first)."""

    TP = "tp"
    CP = "cp"
    PP = "pp"
    DP = "dp"
    EP = "ep"


class Collective(StrEnum):
    """Collective operations; the bytes each sends per GPU are in budget/collectives.py."""

    ALL_REDUCE = "all-reduce"
    REDUCE_SCATTER = "reduce-scatter"
    ALL_GATHER = "all-gather"
    ALL_TO_ALL = "all-to-all"
    SEND_RECV = "send/recv"
    BROADCAST = "broadcast"


class Algorithm(StrEnum):
    """How a collective is carried out (formulas.md 1.1-1.5)."""

    RING = "ring"
    TREE = "tree"
    HIERARCHICAL = "hierarchical"
    IN_NETWORK = "in-network"


class Link(StrEnum):
    """Link tiers a byte can cross, fastest first."""

    NVLINK = "nvlink"
    NIC = "nic"


class Schedule(StrEnum):
    """Pipeline schedules (formulas.md 4)."""

    GPIPE = "gpipe"
    ONE_F_ONE_B = "1f1b"
    INTERLEAVED_1F1B = "interleaved-1f1b"
    ZB_H1 = "zb-h1"
    ZB_H2 = "zb-h2"
    DUALPIPE = "dualpipe"


class Recompute(StrEnum):
    """Activation recomputation modes (Korthikanti et al. 2022)."""

    NONE = "none"
    SELECTIVE = "selective"
    FULL = "full"
    SELECTIVE_OP = "selective-op"
    """PyTorch's per-op selective checkpointing as torchtitan applies it: every second matmul of a block
    (in execution order: wq, wk, wv, wo, then the MLP's) and every memory-bound operator run again;
    the attention output and the other matmuls are saved."""


class Balance(StrEnum):
    """How an MoE router keeps its experts' loads even, which sets how hot the busiest expert runs."""

    AUX_LOSS = "aux-loss"
    """An auxiliary balance loss (GShard, Switch Transformer; Megatron-Core's ``aux_loss``)."""
    LOSS_FREE = "loss-free"
    """A per-expert bias on the routing scores, updated each step (DeepSeek-V3 2.1.2, Wang et al. 2024)."""


class AttentionKernel(StrEnum):
    """Which fused attention kernel runs: the GPU's best (FlashAttention-2 on A100, FlashAttention-3 or
    cuDNN on Hopper, cuDNN on Blackwell: the figures in gpus.yaml) or an older one."""

    BEST = "best"
    FLASH2 = "flash-attention-2"
    FLASH1 = "flash-attention-1"


class DataParallel(StrEnum):
    """How the data-parallel group shares model state (formulas.md 3.4, 5.1).

    ``zero1``..``zero3`` follow ZeRO; ``fsdp`` is ZeRO-3-style sharding whose
    reshard-after-forward behaviour is set separately.
    """

    DDP = "ddp"
    ZERO1 = "zero1"
    ZERO2 = "zero2"
    ZERO3 = "zero3"
    FSDP = "fsdp"


class Activation(StrEnum):
    """MLP activation: SwiGLU has three h x d_ff matrices, GeLU two."""

    SWIGLU = "swiglu"
    GELU = "gelu"


class Positions(StrEnum):
    """How a model encodes positions: only rotary embeddings cost a memory-bound pass in every layer."""

    ROTARY = "rotary"
    """RoPE on Q and K in every layer (Llama, GLM-130B, Nemotron, DeepSeek's decoupled part)."""
    LEARNED = "learned"
    """Absolute positions added once to the input embedding (GPT-2/3; Megatron-LM's learned_absolute)."""
    ALIBI = "alibi"
    """A distance bias the attention kernel adds to its scores (BLOOM, BloombergGPT)."""


class CPKind(StrEnum):
    """Context-parallel exchange (formulas.md 3.2)."""

    ALL_GATHER = "all-gather"
    RING = "ring"


class EPKind(StrEnum):
    """Expert-parallel token exchange: all-to-all of every copy (NCCL, Megatron's alltoall
    dispatcher); all-to-all that crosses the NIC once per target node and forwards on NVLink
    (DeepEP's internode kernels, DeepSeek-V3 3.2.2; Megatron-Core's flex dispatcher); or all-gather
    of the EP group's tokens and reduce-scatter of the outputs (MegaScale-MoE 3.2, Fig. 9)."""

    ALL_TO_ALL = "all-to-all"
    DEEPEP = "deepep"
    ALL_GATHER = "all-gather"


class RateScope(StrEnum):
    """What an achieved FLOP/s figure covers.

    ``kernel``: the rate of the compute kernels; the budget adds the bubble and every
    exposed exchange on top. ``step``: a measured whole-step average (Llama 3 Table 4's
    TFLOPs/GPU); the bubble and critical-path exchanges are already inside it, so the
    budget adds only the data-parallel exchange left exposed at the step edges.
    """

    KERNEL = "kernel"
    STEP = "step"


class Origin(StrEnum):
    """Where a resolved scenario field's value came from, in the order completion tries them
    (inputs/complete.py): what the job states, the model catalog's row, its framework's recipe, the GPU's
    hardware row, the tool's default. A stated field always wins; a later origin only fills what the earlier ones leave unset."""

    STATED = "stated"
    """Written in the preset, the scenario file, a base it names, a ``--set`` or a typed edit."""
    CATALOG = "model catalog"
    """From the row of the model catalog the job names (inputs/catalog.yaml)."""
    FRAMEWORK = "framework recipe"
    """From the recipe of the framework the job names (inputs/frameworks/NAME.yaml): its documented default,
    with the file and line that set it."""
    HARDWARE = "hardware"
    """From the row of the GPU the job names (inputs/gpus.yaml): its datasheet and its node's links."""
    DEFAULT = "tool default"
    """The field's documented default: nothing the job names says otherwise."""


# --- integer codes -------------------------------------------------------------------------------
# Sweeps carry closed choices as int arrays (one entry per candidate layout); these tables are the only
# place a code is given a meaning.

SCHEDULE_CODES: dict[Schedule, int] = {
    Schedule.GPIPE: 0,
    Schedule.ONE_F_ONE_B: 1,
    Schedule.INTERLEAVED_1F1B: 2,
    Schedule.ZB_H1: 3,
    Schedule.ZB_H2: 4,
    Schedule.DUALPIPE: 5,
}
"""Integer code of each schedule."""
SCHEDULE_BY_CODE: dict[int, Schedule] = {code: schedule for schedule, code in SCHEDULE_CODES.items()}
DUALPIPE_CODE = SCHEDULE_CODES[Schedule.DUALPIPE]

DP_KIND_CODES: dict[DataParallel, int] = {
    DataParallel.DDP: 0,
    DataParallel.ZERO1: 1,
    DataParallel.ZERO2: 2,
    DataParallel.ZERO3: 3,
    DataParallel.FSDP: 4,
}
"""Integer code of each data-parallel kind."""

RECOMPUTE_CODES: dict[Recompute, int] = {
    Recompute.NONE: 0,
    Recompute.SELECTIVE: 1,
    Recompute.FULL: 2,
    Recompute.SELECTIVE_OP: 3,
}
"""Integer code of each recompute mode."""

CP_KIND_CODES = {CPKind.ALL_GATHER.value: 0, CPKind.RING.value: 1}
"""Integer code of each context-parallel kind."""

HIERARCHICAL, FLAT, TREE, IN_NETWORK = 0, 1, 2, 3
ALGORITHM_CODES = {"hierarchical": HIERARCHICAL, "flat": FLAT, "tree": TREE, "in-network": IN_NETWORK}
"""Integer code of each DP all-reduce algorithm (``layout.dp_ring``; one per scenario, a sweep never mixes them)."""


def schedule_code(schedule) -> np.ndarray:
    """Integer code array of ``schedule``.

    Accepts a ``Schedule``, its string (``"1f1b"``), an int code, or an array of any of
    these. Raises ``ValueError`` for a name or code that is not a schedule.
    """
    if isinstance(schedule, str):
        return np.asarray(_code_of_name(schedule))
    codes = np.asarray(schedule)
    if codes.dtype.kind in "OUS":
        codes = np.vectorize(_code_of_name, otypes=[np.int64])(codes)
    if codes.dtype.kind not in "iu":
        raise ValueError(f"schedule codes must be integers, got dtype {codes.dtype}")
    bad = (codes < 0) | (codes >= len(SCHEDULE_CODES))
    if np.any(bad):
        raise ValueError(
            f"unknown schedule code(s) {np.unique(codes[bad]).tolist()}; "
            f"use one of {dict((str(s), c) for s, c in SCHEDULE_CODES.items())}"
        )
    return codes


def _code_of_name(name: str) -> int:
    try:
        return SCHEDULE_CODES[Schedule(name)]
    except ValueError:
        raise ValueError(f"unknown schedule {name!r}; use one of {[str(s) for s in Schedule]}") from None
