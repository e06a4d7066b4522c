"""The assumptions that move a step most: each field a job leaves to the tool's default, tried at the value a
framework or a measurement commonly gives it instead, ranked by how far that moves the step.

A default is a choice the tool made for the job; an engineer should see which of them decide the answer. Each
alternative below cites why it is a value real jobs run with. Only fields whose source is the tool default are
tried (inputs/complete.py), and only alternatives that make a valid job of this one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from stepbudget.budget.step import estimate
from stepbudget.enums import Origin
from stepbudget.inputs.complete import Path, dotted
from stepbudget.inputs.scenario import Scenario, ScenarioError
from stepbudget.plan.derive import derive
from stepbudget.units import UnitError
from stepbudget.validation.stated import NIC_BUSBW_SHARE, NVLINK_BUSBW_SHARE

ALTERNATIVES: tuple[tuple[Path, Any, str], ...] = (
    (("layout", "dp_kind"), "ddp", "Megatron-LM without --use-distributed-optimizer: every DP rank keeps all state"),
    (("layout", "recompute"), "selective", "Megatron-LM's --recompute-activations (Korthikanti et al. 2022)"),
    (("layout", "micro_batch"), 2, "a micro-batch of two sequences, as many recipes run"),
    (("layout", "sequence_parallel"), False, "Megatron-LM without --sequence-parallel"),
    (("overlap", "tp"), 1.0, "TP communication hidden in the GEMMs (Megatron's --tp-comm-overlap, async TP)"),
    (("overlap", "dp"), 0.0, "no DP overlap (Megatron-LM without --overlap-grad-reduce/--overlap-param-gather)"),
    (("overlap", "pp"), 0.0, "pipeline sends on the critical path (no P2P overlap)"),
    (("overlap", "ep"), 1.0, "the all-to-all hidden by pairing chunks (Megatron's --overlap-moe-expert-parallel-comm)"),
    (("model", "moe", "expert_load"), 1.0, "every expert at the mean load, as benchmarks force it (Megatron's "
                                           "--moe-router-force-load-balancing)"),
    (("cluster", "nvlink_efficiency"), NVLINK_BUSBW_SHARE, "NCCL's measured bus bandwidth on NVLink (~370 of 450 GB/s)"),
    (("cluster", "nic_efficiency"), NIC_BUSBW_SHARE, "NCCL's measured bus bandwidth per 400 Gb/s NIC (~47 of 50 GB/s)"),
    (("cluster", "step_overhead_s"), 0.5, "host work and syncs measured Megatron-family pipelines pay (0.3-0.9 s, "
                                          "docs/validation.md)"),
    (("layout", "attention_kernel"), "flash-attention-2", "FlashAttention-2 (PyTorch SDPA's flash backend) instead "
                                                          "of the GPU's best kernel"),
)
"""(field, value instead of the default, why a job runs with it), tried in this order."""

SHOWN = 5
"""Assumptions ``budget`` lists: those that move the step most."""
NOTICED = 0.005
"""A change of the step below this share is not listed: no decision turns on it."""


@dataclass(frozen=True)
class Assumption:
    """A field the job leaves to the tool's default, and what another common value does to the step."""

    field: str
    value: Any
    """The default taken."""
    instead: Any
    why: str
    step_s: float
    """The step with ``instead``."""
    change: float
    """``step_s`` over the job's step, less 1."""


def _value(sc: Scenario, path: Path) -> Any:
    """The field's value as its JSON dump gives it (an enum as its name)."""
    node: Any = sc.model_dump(mode="json")
    for part in path:
        node = node[part]
    return node


def assumptions(sc: Scenario, step_s: float, top: int = SHOWN) -> list[Assumption]:
    """The tool defaults of ``sc`` that move its step (``step_s``) most, largest change first."""
    sources, out = sc.sources, []
    for path, instead, why in ALTERNATIVES:
        name = dotted(path)
        source = sources.get(name)
        if source is None or source.origin != Origin.DEFAULT or _value(sc, path) == instead:
            continue
        if path[0] == "overlap" and path[1] == "ep" and sc.model.moe is None:
            continue
        edit: Any = instead
        for part in reversed(path):  # {"model": {"moe": {"expert_load": 1.0}}}
            edit = {part: edit}
        try:
            other = float(np.asarray(estimate(derive(sc.edit(edit, where="assumption"))).step_s))
        except (ScenarioError, UnitError, ValueError):
            continue  # not a valid job with that value: no alternative to weigh
        change = other / step_s - 1
        if abs(change) >= NOTICED:
            out.append(Assumption(name, _value(sc, path), instead, why, other, change))
    return sorted(out, key=lambda a: -abs(a.change))[:top]
