"""The step budget: compute, bubble, exchanges, what overlap hides, and what is left exposed.

    step_s = compute_s + bubble_s + sum(exposed_s) + contention_s + step_overhead_s   (rate_scope = kernel)
    step_s = compute_s + exposed_s[dp]                                   (rate_scope = step)

Overlap (formulas.md 6.1): an exchange of time T with overlap fraction phi hides
min(phi * T, W) behind the compute window W = compute_s; all hidden time together never
exceeds compute_s. "auto" fractions (formulas.md 6.3-6.4, MegaScale 3.2): TP, CP all-gather
and EP sit on the critical path (phi = 0); PP hides all but the pipeline fill and drain
(2 (p - 1) v transfers); DP hides behind one micro-batch pass per round of buckets (spread over
the warm-up or cool-down when interleaved), and one bucket's (at least one layer's) gather and
reduce at the edges stay exposed. sim/program.py runs the same step task by task and agrees
within 1 % without contention.

A measured whole-step rate (Llama 3's 400 TFLOP/s, ``rate_scope: step``) tells one story with the kernel
budget: the job runs at the kernel rate that reproduces the step of the job the rate was measured on
(``kernel_rate``: that job with its bubble and exposed exchanges added takes the step measured), and
``compute_s`` is what the measured rate covers: the kernels, the bubble and the critical-path exchanges,
everything but DP's exposed edges. ``bubble_s`` is the same bubble ``scale``, ``search`` and ``whatif`` show.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np

from stepbudget import _html
from stepbudget.budget import pipeline
from stepbudget.budget.compute import compute_s as _compute_s
from stepbudget.budget.compute import hbm_bytes as step_hbm_bytes
from stepbudget.budget.traffic import Exchange, exchanges
from stepbudget.enums import Axis, RateScope
from stepbudget.inputs.scenario import Scenario
from stepbudget.plan.derive import Plan, derive

DIMS = (Axis.TP, Axis.CP, Axis.PP, Axis.DP, Axis.EP)


@dataclass(frozen=True, repr=False)
class Budget:
    """One step on one GPU. Arrays share the plan's shape; ``exposed_s`` aligns with ``exchanges``."""

    plan: Plan
    exchanges: list[Exchange]
    exposed_s: list[np.ndarray]
    compute_s: np.ndarray
    bubble_s: np.ndarray
    bubble_in_rate: bool
    """True when the achieved rate is a whole-step average that already contains the bubble."""
    step_s: np.ndarray
    contention_s: np.ndarray
    """Compute time lost to the SMs that overlapped communication kernels hold (plan.comm_sm_share)."""
    step_overhead_s: np.ndarray
    """Costs per step beyond the terms above: cluster.step_overhead_s and the calibration profile's
    (plan/calibration.py); 0 inside a whole-step rate."""
    flops_per_gpu: np.ndarray
    mfu: np.ndarray
    hfu: np.ndarray
    kernel: "Budget | None" = None
    """Under a measured whole-step rate: the same step at the kernel rate that reproduces it (compute, bubble and
    every exposed exchange apart), which ``compute_s`` adds up; None under a kernel rate."""

    @functools.cached_property
    def hbm_bytes(self) -> np.ndarray:
        """HBM bytes per step per GPU (budget/compute.py): worked out when read, which a search never does."""
        return step_hbm_bytes(self.plan)

    @property
    def _zero(self) -> np.ndarray:
        """The start of every sum over exchanges: 0.0 + x is x, bit for bit, and an empty sum has the plan's shape."""
        return np.zeros(self.plan.shape)

    @property
    def sms_dedicated(self) -> np.ndarray:
        """Where the communication SMs are set aside for whole paired chunks (DualPipe with an all-to-all), not only
        while hidden exchanges run: how ``contention_s`` was worked out."""
        return _sms_dedicated(self.plan, self.exchanges, self.exposed_s)[0]

    @property
    def pair_slowdown(self) -> np.ndarray:
        """A paired chunk's time over its compute alone (DualPipe's F&B over F + B): 1 / (1 - share) where the SMs
        are set aside (``sms_dedicated``), else 1."""
        return _pair_slowdown(self.plan, self.sms_dedicated)

    @property
    def comm_s(self) -> np.ndarray:
        """All exchange time, hidden or not."""
        return sum((x.time_s for x in self.exchanges), self._zero)

    @property
    def exposed_comm_s(self) -> np.ndarray:
        return sum(self.exposed_s, self._zero)

    @property
    def comm_share(self) -> np.ndarray:
        """T_comm / (T_comp + T_comm): the step's share of communication if nothing were hidden."""
        return self.comm_s / (self.compute_s + self.comm_s)

    @property
    def exposed_share(self) -> np.ndarray:
        return self.exposed_comm_s / self.step_s

    def by_dim(self, field: str) -> dict[str, np.ndarray]:
        """Sum of an exchange field (or "exposed_s") per dimension."""
        out = {}
        for d in DIMS:
            rows = [i for i, x in enumerate(self.exchanges) if x.dim == d]
            vals = [self.exposed_s[i] if field == "exposed_s" else getattr(self.exchanges[i], field) for i in rows]
            out[d.value] = sum(vals, self._zero)
        return out

    def link_bytes(self) -> dict[str, np.ndarray]:
        return {
            "nic": sum((x.nic_bytes for x in self.exchanges), self._zero),
            "nvlink": sum((x.nvlink_bytes for x in self.exchanges), self._zero),
            "hbm": self.hbm_bytes,
        }

    @property
    def intensity(self) -> dict[str, np.ndarray]:
        """FLOP per byte on each link: the x-axis of the network and memory rooflines."""
        with np.errstate(divide="ignore"):
            return {k: np.where(v > 0, self.flops_per_gpu / np.where(v > 0, v, 1), np.inf)
                    for k, v in self.link_bytes().items()}

    def __repr__(self) -> str:
        return _html.short_repr("Budget", self.plan.scenario.name, step_s=self.step_s, mfu=self.mfu)

    def _repr_html_(self) -> str:
        """The summary and the exchanges as tables, for Jupyter."""
        f = _html.figure
        sc = self.plan.scenario
        summary = [[name, f(key, getattr(self, key))] for name, key in (
            ("compute", "compute_s"), ("pipeline bubble", "bubble_s"), ("communication", "comm_s"),
            ("exposed communication", "exposed_comm_s"), ("step", "step_s"))]
        summary.append(["MFU", f("mfu", self.mfu)])
        rows = [[x.dim.value.upper(), f"{x.collective.value} {x.what}", f("group", x.group), f("message_bytes", x.message_bytes),
                 f("calls", x.calls), f("bytes_per_gpu", x.bytes_per_gpu), f("nic_bytes", x.nic_bytes),
                 f("nvlink_bytes", x.nvlink_bytes), f("time_s", x.time_s), f("exposed_s", e)]
                for x, e in zip(self.exchanges, self.exposed_s) if np.any(x.calls > 0)]
        header = ["dim", "collective", "group", "message", "calls", "bytes/GPU", "on NIC", "on NVLink", "time", "exposed"]
        return (_html.table(f"{sc.name}: {sc.cluster.gpus:,} GPUs", ["term", "value"], summary)
                + _html.table("Bytes per GPU per step, by dimension", header, rows))

    @property
    def balance(self) -> dict[str, float | np.ndarray]:
        """FLOP per byte at which each link's time equals compute time: rate / bandwidth."""
        p = self.plan
        return {"nic": p.flops_rate / p.nic_Bps, "nvlink": p.flops_rate / p.nvlink_Bps, "hbm": p.flops_rate / p.hbm_Bps}


def _phi(setting, default) -> np.ndarray:
    return np.asarray(default if setting == "auto" else float(setting), dtype=float)


def _exposed(plan: Plan, xs: list[Exchange], compute_s: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """Exposed time of each exchange, and the total time hidden behind compute."""
    ov = plan.scenario.overlap
    phi_ep = _phi(ov.ep, 0.0)
    if np.any(phi_ep > 0):
        # a paired overlap (DualPipe, Megatron-Core's) hides a chunk's all-to-all behind a chunk of
        # the other direction; the warm-up forwards and cool-down backwards run unpaired
        pairs = ov.ep_paired | (plan.schedule == pipeline.DUALPIPE_CODE)
        unpaired = pipeline.unpaired_share(plan.schedule, plan.pp, plan.microbatches, plan.v)
        phi_ep = phi_ep * (1 - np.where(pairs, unpaired, 0.0))
    hidden = []
    for x in xs:
        T = x.time_s
        setting = getattr(ov, x.dim.value)
        if x.dim == Axis.PP and setting == "auto":
            # the fill and the drain wait for each hop: p - 1 of them per chunk round, v rounds when
            # interleaved (Narayanan21 2.2.2: interleaving multiplies the pipeline's communication)
            want = T - np.minimum(T, 2 * (plan.pp - 1) * plan.v * x.call_s)
        elif x.dim == Axis.DP and setting == "auto":
            # gradients are complete only in the last micro-batch's backward, and parameters are needed
            # by the first one's forward (MegaScale 3.2): each round of calls hides behind one micro-batch
            # pass, and one unit's gather and reduce at the edges stay exposed: a bucket's, but never less
            # than a layer's (the first layer's gradients are the last to be ready, whatever the buckets)
            rounds = x.calls / x.units
            per_mb = compute_s / np.maximum(plan.microbatches, 1)
            gather = x.collective.value == "all-gather"
            # interleaving spreads a rank's chunks over the warm-up and cool-down: chunk c's last
            # backward (first forward) is c p chunk passes from the step's end (start), so a step's
            # buckets have 1 + (v-1) p / v micro-batch passes to hide in (sim/program.py agrees)
            spread = np.where(rounds > 1, 1.0, 1 + (plan.v - 1) * plan.pp / plan.v)
            window = spread * rounds * per_mb * np.where(gather, np.where(rounds > plan.microbatches, 0.5, 1 / 3), 2 / 3)
            want = np.minimum(T * (1 - 1 / np.minimum(x.units, plan.layer_units)), window)
        elif x.dim == Axis.CP and x.collective.value == "send/recv" and setting == "auto":
            want = T  # ring attention overlaps each block with the next block's attention
        elif x.dim == Axis.EP:
            want = phi_ep * T
        else:
            want = _phi(setting, 0.0) * T
        hidden.append(np.minimum(want, compute_s))
    total = sum(hidden) if hidden else np.zeros(plan.shape)
    # one window for all; the divisor is the total only where it exceeds the window, so a denormal total (an
    # overlap of 5e-324) divides nothing by itself
    scale = np.where(total > compute_s, compute_s / np.where(total > compute_s, total, 1.0), 1.0)
    return [x.time_s - hid * scale for x, hid in zip(xs, hidden)], total * scale


def _pair_slowdown(plan: Plan, dedicated: np.ndarray) -> np.ndarray:
    return np.where(dedicated, 1 / (1 - plan.comm_sm_share), 1.0)


def _sms_dedicated(plan: Plan, xs: list[Exchange], exposed: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(where DualPipe sets SMs aside for a hidden all-to-all, EP's hidden seconds): a dense model has none to
    set them aside for."""
    ep_hidden = sum((x.time_s - e for x, e in zip(xs, exposed) if x.dim == Axis.EP), np.zeros(plan.shape))
    return (plan.schedule == pipeline.DUALPIPE_CODE) & (ep_hidden > 0), ep_hidden


def estimate(plan: Plan) -> Budget:
    """The analytical step budget of a plan (any array shape); under a measured whole-step rate, the kernel budget
    told at that rate (this module's docstring)."""
    return _within_step_rate(plan) if plan.rate_scope == RateScope.STEP else _kernel_budget(plan)


def _exchanged(plan: Plan) -> tuple[list[Exchange], np.ndarray, list[np.ndarray], np.ndarray]:
    """The plan's exchanges, its compute time, and what of each exchange stays exposed and what hides: exchanges
    hide behind the micro-batches' compute, not behind the optimizer step that waits for them."""
    xs = exchanges(plan)
    comp = _compute_s(plan)
    exposed, hidden = _exposed(plan, xs, comp - plan.optimizer_s)
    return xs, comp, exposed, hidden


def _kernel_budget(plan: Plan) -> Budget:
    xs, comp, exposed, hidden = _exchanged(plan)
    passes_s = comp - plan.optimizer_s
    # the bubble idles a stage for (p-1)/(v m) of everything on its micro-batches' critical path:
    # their compute and the exchanges they wait for (TP, CP all-gathers, EP); not the optimizer step
    per_microbatch = passes_s + sum(e for x, e in zip(xs, exposed) if x.critical)
    # communication kernels that run beside compute hold a share of the SMs for as long as they run
    # (DeepSeek-V3 3.2.2: 20 of 132 SMs), so the compute they hide behind loses that share meanwhile.
    # DualPipe's are set aside by hand (DeepSeek-V3 3.2.1): the paired chunks' compute runs on the other
    # 1 - s throughout, so they are held for the pairs' wall time, paired / (1 - s), not only the all-to-all's
    dedicated, ep_hidden = _sms_dedicated(plan, xs, exposed)
    pair_slowdown = _pair_slowdown(plan, dedicated)
    beyond = np.zeros(plan.shape)
    if np.any(dedicated):  # a search with no DualPipe layout skips the pairs' arithmetic
        paired = passes_s * (1 - pipeline.dualpipe_unpaired(plan.pp, plan.microbatches))
        beyond = np.where(dedicated, np.maximum(paired * pair_slowdown - ep_hidden, 0.0), 0.0)
    # with the passes' own backward and weight-gradient shares, and the pairs' own time (DualPipe's F&B): the
    # zero-bubble and DualPipe bubbles depend on them
    bubble = pipeline.bubble_fraction(plan.schedule, plan.pp, plan.microbatches, plan.v, w_frac=plan.w_frac,
                                      backward_ratio=plan.backward_ratio, pair_slowdown=pair_slowdown) * per_microbatch
    contention = plan.comm_sm_share * (hidden + beyond)
    overhead = plan.overhead_s * np.ones(plan.shape)
    step = comp + bubble + sum(exposed) + contention + overhead
    mfu = plan.model_flops_per_gpu / (step * plan.peak_flops)  # PaLM App. B, against the BF16 peak
    hfu = plan.hardware_flops_per_gpu / (step * plan.peak_flops)
    return Budget(
        plan=plan, exchanges=xs, exposed_s=exposed, compute_s=comp, bubble_s=bubble, bubble_in_rate=False,
        step_s=step, contention_s=contention, step_overhead_s=overhead, flops_per_gpu=plan.hardware_flops_per_gpu,
        mfu=mfu, hfu=hfu,
    )


# ---- a measured whole-step rate ------------------------------------------------------------------------------

def _within_step_rate(plan: Plan) -> Budget:
    """The kernel budget at ``kernel_rate``, told as the measured rate sees it: compute is the step less the DP
    exchange left exposed at its edges (the measured rate holds the bubble and the critical-path exchanges)."""
    kernel = _kernel_budget(dataclasses.replace(plan, flops_rate=kernel_rate(plan.scenario), rate_scope=RateScope.KERNEL))
    exposed = [e if x.dim == Axis.DP else np.zeros_like(e) for x, e in zip(kernel.exchanges, kernel.exposed_s)]
    zero = np.zeros(plan.shape)
    return dataclasses.replace(kernel, plan=plan, exposed_s=exposed, compute_s=kernel.step_s - sum(exposed, zero),
                               bubble_in_rate=True, contention_s=zero, step_overhead_s=zero, kernel=kernel)


def _measured_step_s(plan: Plan) -> float:
    """The step a whole-step rate measures on the plan's own job: every FLOP at that rate, plus the DP exchange
    left exposed at the step's edges, which no rate averaged over the step's compute holds."""
    xs, comp, exposed, _ = _exchanged(plan)
    return float(comp + sum(e for x, e in zip(xs, exposed) if x.dim == Axis.DP))


def kernel_rate(sc: Scenario) -> float:
    """The kernel FLOP/s of a job whose rate is a measured whole-step rate: the rate at which the job it was
    measured on (``sc.rate_basis``) takes the step measured with its bubble and exposed exchanges added, as a share
    of the GEMM peak carried to this job's GPU and precision."""
    basis = sc.rate_basis
    rate = _basis_kernel_rate(basis)
    return rate if sc.peak_gemm_flops == basis.peak_gemm_flops else rate / basis.peak_gemm_flops * sc.peak_gemm_flops


@functools.lru_cache(maxsize=256)
def _basis_kernel_rate(basis: Scenario) -> float:
    plan = derive(basis)
    measured, step_rate = _measured_step_s(plan), float(plan.flops_rate)

    def step_at(rate: float) -> float:  # only the rate and its scope change: the plan is derived once
        return float(_kernel_budget(dataclasses.replace(plan, flops_rate=rate, rate_scope=RateScope.KERNEL)).step_s)

    lo, hi = step_rate, step_rate
    while step_at(hi) > measured:  # kernel rate >= step rate
        hi *= 2
        if hi > 1e3 * step_rate:  # exposed time alone exceeds the measurement: keep the step rate
            return step_rate
    for _ in range(60):  # bisection on a step time that falls as the rate rises
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if step_at(mid) > measured else (lo, mid)
    return 0.5 * (lo + hi)
