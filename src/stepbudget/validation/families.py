"""What each framework family does where a run leaves a memory choice unstated.

A run that states neither its data-parallel sharding nor its activation recompute takes its framework's
defaults (``Family.dp_default``, no recompute). A published run ran, so where that scenario does not fit in HBM,
the conversion assumes what its framework offers for it, one step at a time in ``Family.steps`` order, until it
fits (convert.py ``_fitted``); each step taken is one line of the run's assumptions. A step changes only a choice
the run leaves unstated, and never to one that saves less memory than the scenario already has.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    """One choice a framework offers when memory runs short."""

    field: str
    """The layout field it sets: ``dp_kind`` or ``recompute``."""
    value: str
    """The value it sets."""
    what: str
    """What it is, in the framework's words (the row's note)."""
    source: str
    """Where the framework offers it."""


@dataclass(frozen=True)
class Family:
    """Frameworks that share their defaults and memory options."""

    name: str
    pattern: str
    """A regular expression on the run's ``layout.framework`` (lower case) that names the family."""
    dp_default: str
    """The DP sharding a run of the family takes when it states none."""
    dp_default_source: str
    steps: tuple[Step, ...]
    """What the family offers when a run does not fit, in the order it is assumed."""


MEGATRON = "Megatron-LM"
"""The family of the frameworks built on Megatron-LM (Megatron-Core, NeMo, Megatron-Bridge, MegaScale): ranks laid out
TP innermost, then CP, EP/DP, and PP outermost."""

_MEGATRON_DISTOPT = Step("dp_kind", "zero1", "distributed optimizer",
                         "Megatron-LM arguments.py --use-distributed-optimizer")
_ZERO1 = Step("dp_kind", "zero1", "ZeRO stage 1", "DeepSpeed zero_optimization.stage 1")

FAMILIES = (
    # checked in this order: Megatron-DeepSpeed is DeepSpeed's engine on Megatron's model code
    Family("DeepSpeed", r"deepspeed", "ddp",
           "DeepSpeed's default: zero_optimization.stage 0, deepspeed/runtime/zero/config.py",
           (_ZERO1, Step("recompute", "full", "full activation checkpointing",
                         "DeepSpeed activation_checkpointing, Megatron-DeepSpeed --checkpoint-activations"))),
    Family(MEGATRON, r"megatron|megascale|nemo", "ddp",
           "Megatron-LM's default: --use-distributed-optimizer is off, arguments.py",
           (_MEGATRON_DISTOPT,
            Step("recompute", "selective", "selective recompute", "Megatron-LM arguments.py --recompute-activations"),
            Step("recompute", "full", "full recompute", "Megatron-LM arguments.py --recompute-granularity full"))),
    Family("PyTorch FSDP", r"fsdp|torchtitan|composer|llm-foundry|olmo|kempnerforge|fms", "fsdp",
           "PyTorch FSDP's default: FullyShardedDataParallel(sharding_strategy=None) is FULL_SHARD",
           (Step("dp_kind", "fsdp", "full sharding", "PyTorch FSDP ShardingStrategy.FULL_SHARD"),
            Step("recompute", "full", "activation checkpointing of every block",
                 "torch.utils.checkpoint, torchtitan activation_checkpoint mode full"))),
    Family("JAX", r"maxtext|\bjax\b|\bpax|t5x", "fsdp",
           "MaxText's default: ici_fsdp_parallelism -1 shards over the node, MaxText/configs/base.yml",
           (Step("dp_kind", "fsdp", "FSDP", "MaxText/configs/base.yml ici_fsdp_parallelism"),
            Step("recompute", "full", "full rematerialization", "MaxText/configs/base.yml remat_policy full"))),
)
"""The framework families, each default and step with its source."""

OTHER = Family("framework not named", r"", "zero1",
               "the tool's default for a framework it does not know: optimizer state sharded over DP",
               (_ZERO1, Step("recompute", "full", "full activation recompute",
                             "what every framework offers (Chen et al. 2016, gradient checkpointing)")))
"""Any other framework, or none stated."""

SAVES = {"dp_kind": ("ddp", "zero1", "zero2", "zero3", "fsdp"), "recompute": ("none", "selective", "selective-op", "full")}
"""Each choice's values from the least memory saved to the most: a step never moves a run back down this order."""


def family_of(framework: str) -> Family:
    """The family a run's ``layout.framework`` names, ``OTHER`` where it names none of them."""
    fw = framework.lower()
    return next((f for f in FAMILIES if re.search(f.pattern, fw)), OTHER)
