"""The cluster: GPUs, the scale-up domain, NICs and the tiers above them."""

from __future__ import annotations

import copy
import functools
from importlib import resources

import yaml
from pydantic import Field, field_validator, model_validator

from stepbudget.enums import RateScope
from stepbudget.inputs._types import MAX_COUNT, Bytes, Efficiency, Flops, Frozen, Rate, Seconds


MAX_HALF_DIM = 65_536.0
"""Largest GEMM dimension at which the shape factor may halve the efficiency: measured GPUs halve at 48-160
(gpus.yaml), a tile or two; one that needed 64 K would be no GEMM engine. Past it three such factors make a
GEMM's rate underflow to 0 FLOP/s."""
MAX_HALF_SEQ = float(1 << 20)
"""Largest key count at which attention's efficiency may halve: measured kernels halve at 256-2,300 keys
(gpus.yaml); 1 M keys is past any context trained."""
MAX_OVERSUBSCRIPTION = 1024.0
"""Largest downlink-to-uplink ratio of a tier: built fabrics run 1:1 to 1:7 (Llama 3's aggregation) and rarely
past 1:16; a ratio past a switch's radix (512 ports, with room) leaves no uplink at all."""


class Kernels(Frozen):
    """How close one GPU's kernels come to its datasheet: the operator model's efficiency curves.

    A GEMM of shape (M, N, K) reaches ``gemm x f(M) f(N) f(K)`` of the peak, with
    ``f(x) = x / (x + gemm_half_dim)``: large GEMMs approach ``gemm``, a small dimension costs
    what it costs in tiles and waves. FlashAttention reaches ``attention_fwd`` / ``attention_bwd``
    of the BF16 peak on long sequences, ``f(s) = s / (s + attention_half_seq)`` on short ones.
    Memory-bound kernels (norms, activations, the optimizer) move bytes at ``hbm`` of the HBM
    bandwidth, and every kernel costs ``kernel_overhead_s`` on top. Each GPU in gpus.yaml carries
    its own figures with their sources; the defaults here are a Hopper-like guess for a GPU given
    by its figures alone.
    """

    source: str = ""
    """Where these numbers come from (datasheet, paper, measurement)."""
    gemm: Efficiency = 0.78
    """Share of the dense BF16 peak a large BF16 GEMM reaches."""
    gemm_fp8: Efficiency = 0.70
    """Share of the dense FP8 peak a large FP8 GEMM reaches (block-scaled, DeepGEMM-style)."""
    gemm_half_dim: float = Field(default=64.0, ge=1, le=MAX_HALF_DIM)
    """GEMM dimension at which the shape factor f halves the efficiency."""
    attention_fwd: Efficiency = 0.62
    """Share of the BF16 peak FlashAttention's forward reaches at long sequences."""
    attention_bwd: Efficiency = 0.50
    """Share of the BF16 peak FlashAttention's backward reaches at long sequences."""
    attention_half_seq: float = Field(default=256.0, ge=1, le=MAX_HALF_SEQ)
    """Sequence length (keys) at which attention efficiency halves."""
    flash2_fwd: Efficiency | None = None
    """FlashAttention-2's forward speed as a share of ``attention_fwd``, this GPU's best kernel: 1 where
    FlashAttention-2 is the best (A100), None where no figure is published."""
    flash2_bwd: Efficiency | None = None
    """FlashAttention-2's backward speed as a share of ``attention_bwd`` (as ``flash2_fwd``)."""
    hbm: Efficiency = 0.85
    """Share of the HBM bandwidth memory-bound kernels reach."""
    kernel_overhead_s: Seconds = 5e-6
    """Fixed time of one kernel (launch, ramp and tail): what a tiny GEMM costs whatever its size."""
    clock: Efficiency = 1.0
    """Share of the datasheet peak's clock the GPU holds under sustained training load (power cap);
    multiplies every compute-bound rate."""
    epilogue_overlap: bool = True
    """Whether a GEMM's epilogue (writing, or accumulating into, its output) overlaps the next tile's
    mainloop. Hopper and later: warp-specialized persistent kernels do (CUTLASS 3 "ping-pong": one
    warp group's epilogue runs beside the other's MMAs); Ampere's multistage kernels (CUTLASS 2,
    cuBLAS sm80) run it after each tile's mainloop, so its HBM traffic adds to the compute time."""


class GPU(Frozen):
    """One accelerator's datasheet figures (dense, no sparsity)."""

    name: str = "gpu"
    """The GPU's name in outputs (gpus.yaml's key when named there)."""
    source: str = ""
    """Where these numbers come from (datasheet, paper, measurement)."""
    peak_bf16_flops: Flops
    """Dense BF16 peak, FLOP/s (H100 SXM: 989 TFLOP/s)."""
    peak_fp8_flops: Flops | None = None
    """Dense FP8 peak, FLOP/s; defaults to twice the BF16 peak."""
    hbm_bytes: Bytes
    """HBM capacity in bytes (80 GB)."""
    hbm_Bps: Rate
    """HBM bandwidth, bytes/s (3.35 TB/s)."""
    kernels: Kernels = Kernels()
    """Efficiency curves of this GPU's kernels (operator model)."""


class Tier(Frozen):
    """A network tier above the NICs: GPUs under one domain see full bisection; traffic
    leaving the domain shares uplinks oversubscribed by ``oversubscription``."""

    name: str = "tier"
    """The tier's name in outputs (e.g. "rail", "spine")."""
    domain_gpus: int = Field(gt=0, le=MAX_COUNT)
    """GPUs under one domain of this tier (Llama 3: a 3,072-GPU pod)."""
    oversubscription: float = Field(default=1.0, ge=1.0, le=MAX_OVERSUBSCRIPTION)
    """Downlink to uplink ratio at this tier's boundary (Llama 3 aggregation: 7)."""


class Cluster(Frozen):
    """GPUs and links. Bandwidths are per direction."""

    name: str = "cluster"
    """The cluster's name in outputs."""
    source: str = ""
    """Where these numbers come from (datasheet, paper, measurement)."""
    gpus: int = Field(gt=0, le=MAX_COUNT)
    """GPUs in the job."""
    gpu: GPU
    achieved_flops: Flops | None = None
    """Achieved FLOP/s per GPU; overrides achieved_fraction."""
    achieved_fraction: Efficiency | None = None
    """Achieved share of the peak used for compute time when achieved_flops is unset."""
    rate_scope: RateScope = RateScope.KERNEL
    """kernel: the bubble and exposed exchanges are added on top of the rate; step: the
    rate is a measured whole-step average that already contains them (except DP at the edges)."""
    gpus_per_node: int = Field(default=8, gt=0, le=MAX_COUNT)
    """Scale-up domain size g (NVLink domain: 8 for HGX, 72 for NVL72)."""
    nvlink_Bps: Rate
    """Scale-up bandwidth per GPU per direction, bytes/s (H100: 450 GB/s)."""
    nics_per_node: int = Field(default=8, gt=0, le=MAX_COUNT)
    """Scale-out NICs per node."""
    nic_Bps: Rate
    """Line rate of one NIC per direction, bytes/s (400 Gb/s = 50 GB/s)."""
    nvlink_efficiency: Efficiency = 1.0
    """Share of the NVLink rate a collective achieves."""
    nic_efficiency: Efficiency = 1.0
    """Share of the NIC line rate a collective achieves."""
    nvlink_latency_s: Seconds = 3.4e-6
    """Latency per collective step on NVLink (NCCL tuning.cc, Ring/Simple NVLink hw latency)."""
    nic_latency_s: Seconds = 14e-6
    """Latency per collective step over the network (NCCL tuning.cc, Ring/Simple NET hw latency)."""
    tiers: tuple[Tier, ...] = ()
    """Tiers above the leaf switches, innermost first."""
    profile: str = "none"
    """The calibration profile the operator model runs with: ``none`` (the default: the model as built), a
    shipped profile's name (``stepbudget calibrate`` docs list them) or a profile file's path."""
    step_overhead_s: Seconds = 0.0
    """Time every step pays beyond the budget's terms (host work and synchronisation at the step's
    edges), added to a kernel-scope step. 0 by default: no source breaks it down. Measured
    Megatron-family pipelines pay about 0.3-0.9 s (docs/validation.md, "Where the model misses": the fixed cost of
    step = a + b m fits of MLPerf's and MegaScale's runs, less the model's); set your stack's."""

    @field_validator("profile")
    @classmethod
    def _known_profile(cls, v: str) -> str:
        from stepbudget.inputs.profiles import load_profile

        load_profile(v)  # refused here, by name, rather than when the plan is derived
        return v.strip() or "none"

    @model_validator(mode="after")
    def _shape(self) -> "Cluster":
        if self.step_overhead_s and self.rate_scope == RateScope.STEP:
            raise ValueError("cluster.step_overhead_s: a measured whole-step rate (rate_scope: step) already contains "
                             "it; set it to 0, or set cluster.rate_scope=kernel with it")
        if self.gpus % self.gpus_per_node and self.gpus > self.gpus_per_node:
            raise ValueError(
                f"cluster.gpus: {self.gpus} GPUs do not fill whole nodes of {self.gpus_per_node}; "
                f"use a multiple of gpus_per_node"
            )
        return self

    @property
    def peak_fp8(self) -> float:
        return self.gpu.peak_fp8_flops or 2 * self.gpu.peak_bf16_flops

    @property
    def nic_Bps_per_gpu(self) -> float:
        """Scale-out bandwidth one GPU gets when every GPU of its node sends at once."""
        return self.nic_Bps * self.nics_per_node / self.gpus_per_node


def named_gpu(name: object) -> dict | None:
    """A fresh copy of the shipped figures of GPU ``name``, or None if ``name`` is not one."""
    known = _gpu_presets()
    return copy.deepcopy(known[name]) if isinstance(name, str) and name in known else None


def gpu_node(name: str) -> dict | None:
    """A fresh copy of the node GPU ``name`` ships in (gpus.yaml ``node``: its scale-up domain, NVLink rate and
    scale-out NICs, with their source), or None if ``name`` is not a shipped GPU."""
    node = _gpu_rows().get(name, {}).get(NODE)
    return copy.deepcopy(node) if isinstance(node, dict) else None


def gpu_presets() -> dict[str, dict]:
    """GPU datasheets shipped with the package (inputs/gpus.yaml), by name: a fresh copy callers may edit."""
    return copy.deepcopy(_gpu_presets())


NODE = "node"
"""A gpus.yaml row's key for the node the GPU ships in: not a figure of the GPU itself."""


@functools.cache
def _gpu_rows() -> dict[str, dict]:
    text = (resources.files("stepbudget.inputs") / "gpus.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


@functools.cache
def _gpu_presets() -> dict[str, dict]:
    return {name: {k: v for k, v in row.items() if k != NODE} for name, row in _gpu_rows().items()}
