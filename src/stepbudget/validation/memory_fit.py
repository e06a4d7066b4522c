"""Memory against what ran: a published run's layout ran, so its busiest GPU fitted in HBM.

``memory_fit(case)`` predicts the peak with the same model as ``stepbudget memory``
(budget/memory.py) and compares it with what the GPU offers to a program. GPU datasheets
say "80GB" for 81,559 MiB (H100): the marketed figures are about 7 % below the bytes
nvidia-smi reports (NVML's memory.total), so the check takes NVML's figure where it is
published (``USABLE_HBM_BYTES``) and the catalog's ``hbm_bytes`` otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from stepbudget.budget.memory import memory_per_gpu
from stepbudget.inputs.scenario import Scenario
from stepbudget.plan.derive import derive

if TYPE_CHECKING:  # convert.py asks scenario_fit before it makes a Case
    from stepbudget.validation.convert import Case

__all__ = ["Fit", "USABLE_HBM_BYTES", "memory_fit", "scenario_fit", "usable_hbm_bytes"]

MIB = 2**20

USABLE_HBM_BYTES: dict[str, float] = {
    # memory.total as nvidia-smi (NVML) reports it, Modal "Why does an NVIDIA H100 80GB card offer 85.52 GB?"
    # (thundergolfer.com/blog/nvidia-gpu-memory-capacity, table of NVML figures)
    "A100 SXM 80GB": 81_920 * MIB,
    "A100 SXM 40GB": 40_960 * MIB,
    "H100 SXM 80GB": 81_559 * MIB,
    "H800 SXM 80GB": 81_559 * MIB,  # the H100's die and HBM3 stacks with a cut NVLink (NVIDIA H800 datasheet)
    "H200 SXM 141GB": 143_771 * MIB,
    # HGX B200 as nvidia-smi reports it: "179 GB" (GiB) of HBM3e, docs.vultr.com inference cookbook hardware overview
    "B200 180GB": 179 * 2**30,
}
"""Bytes of HBM the driver gives a program, per GPU name of the catalog (NVML memory.total)."""


def usable_hbm_bytes(gpu_name: str, hbm_bytes: float) -> float:
    """NVML's memory.total of ``gpu_name`` where published, else the catalog's ``hbm_bytes``."""
    return USABLE_HBM_BYTES.get(gpu_name, float(hbm_bytes))


@dataclass(frozen=True)
class Fit:
    """The predicted peak of a run's busiest GPU against its HBM."""

    predicted_peak_bytes: float
    """Model states and activations of the busiest pipeline rank (budget/memory.py)."""
    hbm_bytes: float
    """HBM the driver gives a program (``usable_hbm_bytes``)."""
    rank: int
    """The pipeline rank of the peak."""

    @property
    def headroom(self) -> float:
        """Share of the HBM left at the peak (negative: short by that share)."""
        return 1 - self.predicted_peak_bytes / self.hbm_bytes

    @property
    def fits(self) -> bool:
        return self.predicted_peak_bytes <= self.hbm_bytes


def scenario_fit(sc: Scenario) -> Fit:
    """The memory of the busiest GPU of ``sc`` against its HBM."""
    mem = memory_per_gpu(derive(sc))
    gpu = sc.cluster.gpu
    return Fit(float(mem.total), usable_hbm_bytes(gpu.name, gpu.hbm_bytes), int(mem.rank))


def memory_fit(case: Case) -> Fit | None:
    """The memory of ``case``'s scenario against its GPU's HBM; None when the run has no scenario."""
    return None if case.scenario is None else scenario_fit(case.scenario)
