"""The chapter's first-order panels against the full model: the same inputs as a scenario, term by term.

Panels 5.1, 5.2 and 5.4 compute with the chapter's first-order formulas (``firstorder.py``). The
full model (``budget/step.py``) adds what those leave out: TP and PP traffic, the pipeline bubble,
latency, the DP algorithm and what its overlap hides, and it reads the achieved rate as Llama 3
measured it, a whole-step average. ``full_model`` maps the panel inputs onto the Llama 3 405B
presets, the one model whose shapes the panels' ``N`` stands for; ``compare`` lines the two up
term by term and says which terms differ and why, with the values a reader needs to see it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from stepbudget.chapter import firstorder as fo
from stepbudget.budget.memory import Memory, memory_per_gpu
from stepbudget.budget.pipeline import check_schedule
from stepbudget.budget.step import Budget, estimate
from stepbudget.enums import SCHEDULE_BY_CODE, Axis
from stepbudget.inputs.scenario import Scenario, ScenarioError, format_sets, load
from stepbudget.plan.derive import derive
from stepbudget.views.tables import carried_rate, critical_waits_s
from stepbudget.wire import Wire, wire_of

LLAMA3_N = 405e9
"""Llama 3 405B's parameters as the chapter counts them (the presets' shapes give 405.85B)."""
MEASURED_RATE = 400e12
"""The presets' achieved rate: Llama 3 Table 4's 400 TFLOP/s per GPU, a whole-step average."""
SEQ_LEN = {"llama3-405b": 8192, "llama3-405b-puredp": 1024}
"""Sequence length of each preset: pure DP splits the batch into 1,024-token sequences (one per GPU)."""
TP_MAX = 8
"""GPUs of one NVLink domain: TP fills it before PP takes the rest of a model-parallel group."""
SLOTS = 128
"""Llama 3's pipeline slots: 126 layers, the embedding and the loss (llama3-405b preset)."""

DP_LAYOUT: dict[fo.DPKind, dict[str, object]] = {
    fo.DPKind.ALL_REDUCE: {"dp_kind": "ddp"},
    fo.DPKind.FSDP: {"dp_kind": "fsdp", "reshard_after_forward": False},
    fo.DPKind.FSDP_RESHARD: {"dp_kind": "fsdp", "reshard_after_forward": True},
}
PRECISION = {fo.BF16: "bf16", fo.FP32: "fp32"}


@dataclass(frozen=True)
class FullModel:
    """The full model's budget of the panel's inputs, and the command that prints it."""

    ref: str
    sets: tuple[str, ...]
    scenario: Scenario
    budget: Budget
    measured_rate: float
    """The achieved rate the panel gave, read as the whole-step rate measured on the preset's own job."""
    carried_rate: float | None
    """The kernel rate that measured rate was carried at when the job differs from the measured one (when
    `stepbudget budget` says so)."""
    memory: Memory | None = None
    """The job's memory per GPU: a panel says when it does not fit, as every command does."""

    @property
    def command(self) -> str:
        return " ".join(["stepbudget budget", self.ref, *(f"--set {s}" for s in self.sets)])


@dataclass(frozen=True)
class Unmapped:
    """Why the panel's inputs have no full-model scenario: ``reason`` is one of "model", "split", "batch",
    "scenario"; ``values`` fill its message; ``detail`` is the validator's own line for "scenario"."""

    reason: str
    values: dict = field(default_factory=dict)
    detail: str = ""


def _rate(x: float) -> str:
    return f"{x / 1e12:.6g}TFLOP/s"


def _link(x: float) -> str:
    return f"{x * 8 / 1e9:.6g}Gb/s"


def _split(M: int) -> tuple[int, int] | None:
    """(tp, pp) of a model-parallel group of M GPUs: TP fills the node first, PP the rest."""
    tp = min(M, TP_MAX)
    if M < 1 or TP_MAX % tp or M % tp or SLOTS % (M // tp):
        return None
    return tp, M // tp


def full_model(N, G, B, M, nic_Bps, F, dp_kind: str | None = None, grad_bytes=None, param_bytes=None
               ) -> FullModel | Unmapped:
    """The Llama 3 405B preset for model-parallel group ``M`` on ``G`` GPUs with ``B`` tokens a step, a NIC of
    ``nic_Bps`` and ``F`` achieved (whole-step, as measured); ``dp_kind`` and the leg precisions replace the
    preset's DP (Llama 3's FSDP with an FP32 reduce-scatter) when given. ``Unmapped`` says why not."""
    N, G, B, M, nic, F = (float(np.asarray(x)) for x in (N, G, B, M, nic_Bps, F))
    if abs(N / LLAMA3_N - 1) > 0.01:
        return Unmapped("model", {"N": N, "llama": LLAMA3_N})
    split = _split(int(M)) if M.is_integer() else None
    if split is None or not (G / M).is_integer():
        return Unmapped("split", {"M": M, "G": G, "tp_max": TP_MAX, "slots": SLOTS})
    tp, pp = split
    ref = "llama3-405b-puredp" if M == 1 else "llama3-405b"
    seqs, dp = B / SEQ_LEN[ref], int(G / M)
    if not seqs.is_integer() or seqs % dp:
        return Unmapped("batch", {"B": B, "seq_len": SEQ_LEN[ref], "dp": dp})
    cluster: dict = {"achieved_flops": _rate(F)} if F != MEASURED_RATE else {}
    layout: dict = {}
    if G != 16384:  # both presets' size; then DP takes the rest of the GPUs
        cluster["gpus"], layout["dp"] = int(G), dp
    elif M not in (1, 128):
        layout["dp"] = dp
    if M > 1 and (tp, pp) != (8, 16):
        v = min(4, SLOTS // pp)  # the preset's 2 layers a chunk, fewer chunks where the stage is short
        layout.update(tp=tp, pp=pp, virtual_stages=v)
        if pp == 1 or v == 1:
            layout.update(schedule="1f1b", virtual_stages=1)
    if nic != 50e9:
        cluster["nic_Bps"] = _link(nic)
    if dp_kind is not None:
        layout.update(DP_LAYOUT[fo.DPKind(dp_kind)])
    changes = {k: v for k, v in (("cluster", cluster), ("layout", layout)) if v}
    if B != 2**24:
        changes["batch"] = {"global_batch_tokens": int(B)}
    if dp_kind is not None:
        changes["precision"] = {"grads": PRECISION[int(grad_bytes)], "params": PRECISION[int(param_bytes)]}
    try:
        b = estimate(derive(load(ref).edit(changes, where="panel 5.4")))
    except ScenarioError as e:
        return Unmapped("scenario", detail=str(e))
    return FullModel(ref, tuple(format_sets(changes)), b.plan.scenario, b, F, carried_rate(b), memory_per_gpu(b.plan))


@dataclass(frozen=True)
class Term:
    """One term of the step: the first-order value and the full model's (seconds, or a share for MFU)."""

    name: str
    """compute, dp, tp, cp, pp, ep (an exchange), bubble, exposed, step or mfu."""
    first: float
    full: float


@dataclass(frozen=True)
class Comparison:
    """Panel 5.4's first-order step against the full model's, and the terms that tell them apart."""

    first: fo.StrongScaling
    full: FullModel
    terms: list[Term]
    differs: list[tuple[str, dict]]
    """(reason, values) for each term that differs: "rate_scope" (carried as a kernel rate), "rate_inside"
    (the measured rate holds the bubble and critical-path exchanges), "bubble", "schedule" (one Megatron
    refuses), "dp_bytes", "latency", "other_dims", "overlap"."""
    in_rate: bool = False
    """Whether the full model's rate is a whole-step rate, so that its compute holds the bubble and the
    critical-path exchanges and its exposed time is DP's at the step's edges (as `stepbudget budget` prints it)."""


def schedule_problem(b: Budget) -> str | None:
    """What Megatron would refuse in the budget's pipeline schedule (it is evaluated anyway), or None."""
    p = b.plan
    return check_schedule(SCHEDULE_BY_CODE[int(p.schedule)], int(p.pp), float(np.asarray(p.microbatches)), int(p.v))


def _dp(b: Budget, what: str) -> float:
    return float(np.asarray(b.by_dim(what)[Axis.DP.value]))


@dataclass(frozen=True)
class DPTotals:
    """A budget's DP exchange, all collectives together, per GPU per step."""

    bytes_per_gpu: float
    time_s: float
    compute_s: float
    share_of_compute: float


def dp_totals(b: Budget) -> DPTotals:
    time, compute = _dp(b, "time_s"), float(np.asarray(b.compute_s))
    return DPTotals(_dp(b, "bytes_per_gpu"), time, compute, time / compute)


def dp_differs(full: FullModel, first_bytes: float) -> list[tuple[str, dict]]:
    """How the full model's DP exchange differs from the first-order count: its bytes (the preset's DP kind
    and precision, or a resharded gather for every micro-batch) and its latency."""
    b, sc = full.budget, full.scenario
    out: list[tuple[str, dict]] = []
    full_bytes = _dp(b, "bytes_per_gpu")
    if abs(full_bytes - first_bytes) > 0.05 * max(full_bytes, first_bytes):  # both 0 with a DP group of one
        out.append(("dp_bytes", {"first": first_bytes, "full": full_bytes, "dp_kind": sc.layout.dp_kind.value,
                                 "grads": sc.precision.grads, "reshard": sc.layout.reshard_after_forward,
                                 "microbatches": float(np.asarray(b.plan.microbatches))}))
    latency = _dp(b, "time_s") - _dp(b, "bandwidth_s")
    if latency > 0.05 * _dp(b, "time_s"):
        out.append(("latency", {"latency": latency, "dp": int(np.asarray(b.plan.dp))}))
    return out


def _scalar(x) -> float:
    return float(np.asarray(x))


def _rate_split(b: Budget, k: Budget) -> dict:
    """What a whole-step rate's compute holds, as `stepbudget budget` prints it: the kernels at the kernel rate, the
    bubble and the critical-path exchanges (``kernel``, ``kernels``, ``bubble``, ``waits``), from ``k``, the same
    step at its kernel rate (``b.kernel``)."""
    return {"kernel": float(k.plan.flops_rate), "kernels": _scalar(k.compute_s), "bubble": _scalar(k.bubble_s),
            "waits": critical_waits_s(b, k)}


def compare(first: fo.StrongScaling, full: FullModel) -> Comparison:
    """Term by term, as `stepbudget budget` prints the full model's job: compute, the DP exchange and each other
    dimension's, the bubble, exposed time, step and MFU.

    Under a measured whole-step rate the full model's compute is what that rate covers, the kernels, the bubble
    and the critical-path exchanges, as the first-order compute at the same rate is; its bubble is inside that
    compute and its exposed time is DP's at the step's edges. The reasons give the split the command prints."""
    b = full.budget
    split = None if b.kernel is None else _rate_split(b, b.kernel)
    times = {d: _scalar(x) for d, x in b.by_dim("time_s").items()}
    step = _scalar(b.step_s)
    others = [d for d in ("tp", "cp", "pp", "ep") if times[d] > 0]
    terms = [Term("compute", _scalar(first.compute_s), _scalar(b.compute_s)),
             Term("dp", _scalar(first.comm_s), times["dp"]),
             *(Term(d, 0.0, times[d]) for d in others),
             Term("bubble", 0.0, _scalar(b.bubble_s)),
             Term("exposed", _scalar(first.exposed_s), _scalar(b.exposed_comm_s)),
             Term("step", _scalar(first.step_s), step),
             Term("mfu", _scalar(first.mfu), _scalar(b.mfu))]
    differs: list[tuple[str, dict]] = []
    rate = {"measured": full.measured_rate, "compute": _scalar(b.compute_s),
            "per_step": _scalar(b.flops_per_gpu / b.compute_s), "exposed": _scalar(b.exposed_comm_s), "step": step}
    if split is not None and full.carried_rate is not None:
        differs.append(("rate_scope", rate | split))
    elif split is not None and abs(split["kernel"] / full.measured_rate - 1) > 0.01:
        differs.append(("rate_inside", rate | split))
    if _scalar(b.bubble_s) > 0.01 * step:
        differs.append(("bubble", {"bubble": _scalar(b.bubble_s), "microbatches": _scalar(b.plan.microbatches),
                                   "pp": int(b.plan.pp)}))
    if schedule_problem(b):
        differs.append(("schedule", {"microbatches": _scalar(b.plan.microbatches), "pp": int(b.plan.pp)}))
    differs += dp_differs(full, _scalar(first.bytes_per_gpu))
    if sum(times[d] for d in others) > 0.01 * step:
        waits = split["waits"] if split is not None else sum(
            _scalar(e) for x, e in zip(b.exchanges, b.exposed_s) if x.dim != Axis.DP)
        differs.append(("other_dims", {"dims": [d.upper() for d in others], "exposed": waits}))
    if abs(_scalar(b.exposed_comm_s) - _scalar(first.exposed_s)) > 0.05 * step:
        differs.append(("overlap", {"first": _scalar(first.exposed_s), "full": _scalar(b.exposed_comm_s)}))
    return Comparison(first, full, terms, differs, split is not None)


@dataclass(frozen=True)
class JobWire:
    """Panel 5.6's full model: what one NIC of the Llama 3 405B job sees at the panel's line rate."""

    wire: Wire
    command: str


@functools.lru_cache(maxsize=256)
def job_wire(nic_Bps: float, window_s: float, k: int, buffer_bytes: float) -> JobWire | Unmapped:
    """``stepbudget wire llama3-405b`` at ``nic_Bps``, the panel's counter window, bursts and buffer (cached: the
    panel's other controls change without touching it)."""
    changes = {} if nic_Bps == 50e9 else {"cluster": {"nic_Bps": _link(nic_Bps)}}
    sets = format_sets(changes)
    try:
        sc = load("llama3-405b").edit(changes, where="panel 5.6")
        w = wire_of(estimate(derive(sc)), window_s=window_s, k=k, switch_buffer_bytes=buffer_bytes)
    except (ScenarioError, ValueError) as e:
        return Unmapped("scenario", detail=str(e).splitlines()[0])
    options = [f"--set {s}" for s in sets]
    for flag, value, default, unit in (("--window", window_s, 15.0, "s"), ("--converging", k, 2, ""),
                                       ("--switch-buffer", buffer_bytes, 64e6, "B")):
        if value != default:  # the wire command's defaults are the panel's
            options.append(f"{flag} {value:.6g}{unit}")
    return JobWire(w, " ".join(["stepbudget wire llama3-405b", *options]))
