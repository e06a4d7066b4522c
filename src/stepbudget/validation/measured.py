"""The step a published run measured, from whichever figure its source prints.

Sources print a step time, a throughput (tokens/s per GPU or for the whole job, sequences/s) or a rate (TFLOP/s
per GPU under a FLOP count they name, MFU against a peak). Each becomes seconds per optimizer step with the
run's own global batch B (sequences of s tokens) on G GPUs:

    step_time_s                    as printed
    tokens_per_s_per_gpu  T_g      B s / (T_g G)
    tokens_per_s          T        B s / T
    samples_per_s         S        B / S
    tflops_per_gpu        R        F B s / (G R)
    mfu_pct               u        F B s / (G u P)

F is the FLOP count per token of the run's convention (``measured.flops_convention``, else its source's:
stated.py ``MFU_CONVENTION``; plan/flops.py ``model_counts``), plus the recompute pass's forward FLOPs
(``recompute_flops_per_token`` of the run's recompute mode) where the figure counts it (``flops_with_recompute``:
Narayanan et al. 2021 Eq. 3, 96 B s l h^2 (1 + s/6h + V/16lh), and Megatron-LM's printed TFLOP/s with activation
recompute). P is the peak the MFU is against: ``measured.peak_tflops``, else the GPU's dense BF16 datasheet peak.
Where a run prints several figures the first in that order is the step, and the others are checked against it.
"""

from __future__ import annotations

from stepbudget.inputs.scenario import Scenario
from stepbudget.plan.flops import model_counts
from stepbudget.validation.stated import StatedRun, flag_of

AGREEMENT = 0.05
"""How far another printed figure may put the step from the preferred one before the row notes it (a table's
rounding and a throughput averaged over other steps stay inside 5 %)."""


def measured_steps(sc: Scenario, r: StatedRun) -> list[tuple[float, str]]:
    """Every step the run's printed figures give, with the figure each came from, preferred first."""
    m, gpus = r.measured, sc.cluster.gpus
    seqs = sc.global_batch_seqs
    tokens = seqs * sc.model.seq_len
    steps: list[tuple[float, str]] = []
    if m.get("step_time_s"):
        steps.append((float(m["step_time_s"]), "step_time_s"))
    if m.get("tokens_per_s_per_gpu"):
        steps.append((tokens / (float(m["tokens_per_s_per_gpu"]) * gpus), "tokens_per_s_per_gpu"))
    if m.get("tokens_per_s"):
        steps.append((tokens / float(m["tokens_per_s"]), "tokens_per_s"))
    if m.get("samples_per_s"):
        steps.append((seqs / float(m["samples_per_s"]), "samples_per_s"))
    steps += _from_flops(sc, r, tokens / gpus)
    return steps


def _from_flops(sc: Scenario, r: StatedRun, tokens_per_gpu: float) -> list[tuple[float, str]]:
    m, conv = r.measured, r.convention
    counts = model_counts(sc.model, conv)
    per_token = counts.flops_per_token
    count = f"the {conv} count"
    if flag_of(m.get("flops_with_recompute")):
        mode = sc.layout.recompute.value
        per_token += counts.recompute_flops_per_token[mode]  # the recompute pass's forward (plan/flops.py)
        count += f" and the {mode} recompute pass"
    flops = per_token * tokens_per_gpu  # per GPU per step
    steps = []
    rate = m.get(f"tflops_per_gpu_{conv}") or m.get("tflops_per_gpu")
    if rate:
        steps.append((flops / (float(rate) * 1e12), f"tflops_per_gpu with {count}"))
    mfu = m.get(f"mfu_pct_{conv}") or m.get("mfu_pct")
    if mfu:
        against = f" against {m['peak_tflops']} TFLOP/s" if m.get("peak_tflops") else ""
        steps.append((flops / (float(mfu) / 100 * stated_peak(sc, m)), f"mfu_pct with {count}{against}"))
    return steps


def stated_peak(sc: Scenario, measured: dict) -> float:
    """The peak a run's MFU is against: ``peak_tflops`` as a number, or the GPU row's dense peak of the precision it
    names (``fp8``: Float8 rows printed against the FP8 peak), else the GPU's dense BF16 datasheet peak."""
    peak = measured.get("peak_tflops")
    if peak == "fp8":
        return sc.cluster.peak_fp8
    return float(peak) * 1e12 if peak and peak != "bf16" else sc.cluster.gpu.peak_bf16_flops


def measured_step(steps: list[tuple[float, str]], r: StatedRun, notes: list[str]) -> tuple[float | None, str]:
    """The step the run measured and the figure it came from (the first of ``measured_steps``), each other
    printed figure that puts the step more than ``AGREEMENT`` away noted; (None, why) where the run prints none."""
    if not steps:
        return None, ("no step time, throughput, TFLOP/s or MFU of one run in 'measured' (an ablation breakdown "
                      "or a figure the tool does not read)")
    step, how = steps[0]
    if how.startswith(("tflops", "mfu")) and not r.convention_stated:
        notes.append(f"FLOP convention of measured.{how.split()[0]} not stated: the {r.convention} count")
    for other, figure in steps[1:]:
        if abs(other / step - 1) > AGREEMENT:
            notes.append(f"measured: {figure} gives a {other:.4g} s step, {other / step - 1:+.1%} from {how.split()[0]}")
    return step, how
