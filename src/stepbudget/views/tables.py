"""Budget -> JSON-ready dict and rich tables. Shared by the CLI, the report and the web panels.
No arithmetic here beyond formatting and sums the budget already defines."""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
from rich.console import JustifyMethod
from rich.table import Table
from rich.text import Text

from stepbudget.budget.memory import Memory
from stepbudget.budget.step import DIMS, Budget
from stepbudget.enums import EPKind, Schedule
from stepbudget.inputs.scenario import Scenario
from stepbudget.plan.operators import Op
from stepbudget.plan.routing import busiest_gpu_factors
from stepbudget.sweep.calibrate import changed_job
from stepbudget.units import fmt_bytes, fmt_count, fmt_flop, fmt_flops, fmt_rate, fmt_time


def _num(x) -> float | None:
    v = float(np.asarray(x))
    return v if math.isfinite(v) else None


def degrees_label(get: Callable[[str], int]) -> str:
    """"TP8 CP1 PP16 DP128", with EP when it is over 1; ``get`` reads a degree by name."""
    return " ".join(f"{a.upper()}{get(a)}" for a in ("tp", "cp", "pp", "dp", "ep") if a != "ep" or get("ep") > 1)


def schedule_label(schedule: str, virtual_stages: int) -> str:
    return schedule + (f" v{virtual_stages}" if virtual_stages > 1 else "")


def dp_label(dp_kind: str, reshard_after_forward: bool) -> str:
    return dp_kind + ("" if dp_kind != "fsdp" or reshard_after_forward else " no-reshard")


def layout_label(sc: Scenario) -> str:
    lay = sc.layout
    sched = schedule_label(lay.schedule.value, lay.virtual_stages)
    dp = dp_label(lay.dp_kind.value, lay.reshard_after_forward)
    if lay.dp_replicas > 1:
        dp += f" over {lay.dp_replicas} replicas"
    return f"{degrees_label(lambda a: getattr(lay, a))} · {sched} · {dp} · micro-batch {lay.micro_batch}"


def kernel_dict(kernel: Budget) -> dict:
    """A whole-step rate's kernel view: the same step at the kernel rate that reproduces it (``Budget.kernel``)."""
    return {"rate_flops": _num(kernel.plan.flops_rate), "compute_s": _num(kernel.compute_s),
            "bubble_s": _num(kernel.bubble_s), "exposed_comm_s": _num(kernel.exposed_comm_s),
            "step_s": _num(kernel.step_s)}


def carried_rate(budget: Budget) -> float | None:
    """The kernel rate a whole-step rate was carried at when the job differs from the one it was measured on."""
    return None if budget.kernel is None or not changed_job(budget.plan.scenario) else float(budget.kernel.plan.flops_rate)


def budget_dict(budget: Budget) -> dict:
    """The `budget --json` object (keys documented in docs/commands/budget.md). 0-d budgets only.

    Under a whole-step rate ``kernel_view`` is the same step at its kernel rate, and ``carried_rate_flops`` the
    kernel rate a job changed from the measured one runs at."""
    carried = carried_rate(budget)
    p, sc = budget.plan, budget.plan.scenario
    rows = []
    for x, exposed in zip(budget.exchanges, budget.exposed_s):
        if float(x.calls) <= 0:
            continue
        rows.append({
            "dim": x.dim.value, "collective": x.collective.value, "what": x.what,
            "group": int(x.group), "message_bytes": _num(x.message_bytes), "calls": _num(x.calls),
            "bytes_per_gpu": _num(x.bytes_per_gpu), "nic_bytes": _num(x.nic_bytes),
            "nvlink_bytes": _num(x.nvlink_bytes), "link": str(x.link), "critical_path": x.critical,
            "bandwidth_s": _num(x.bandwidth_s), "time_s": _num(x.time_s), "exposed_s": _num(exposed),
        })
    return {
        "scenario": sc.name,
        "gpus": sc.cluster.gpus,
        "layout": {k: getattr(sc.layout, k) for k in ("tp", "cp", "pp", "dp", "ep")}
        | {"virtual_stages": sc.layout.virtual_stages, "schedule": sc.layout.schedule.value,
           "dp_kind": sc.layout.dp_kind.value, "dp_replicas": sc.layout.dp_replicas, "micro_batch": sc.layout.micro_batch,
           "attention_kernel": sc.layout.attention_kernel.value},
        "tokens_per_step": p.tokens_per_step,
        "tokens_per_s": _num(p.tokens_per_step / budget.step_s),
        "tokens_per_s_per_gpu": _num(p.tokens_per_step / budget.step_s / sc.cluster.gpus),
        "microbatches": _num(p.microbatches),
        "flops_convention": sc.flops.convention,
        "rate_flops": _num(p.flops_rate),
        "rate_scope": p.rate_scope.value,
        "rate_source": p.rate_source,
        "optimizer_s": _num(p.optimizer_s),
        "flops_per_gpu": _num(budget.flops_per_gpu),
        "model_flops_per_gpu": _num(p.model_flops_per_gpu),
        "compute_s": _num(budget.compute_s),
        "bubble_s": _num(budget.bubble_s),
        "bubble_in_rate": budget.bubble_in_rate,
        "comm_s": _num(budget.comm_s),
        "exposed_comm_s": _num(budget.exposed_comm_s),
        "contention_s": _num(budget.contention_s),
        "comm_sm_share": float(budget.plan.comm_sm_share),
        "comm_sms_dedicated": bool(budget.sms_dedicated),
        "step_overhead_s": _num(budget.step_overhead_s),
        "step_s": _num(budget.step_s),
        "mfu": _num(budget.mfu),
        "hfu": _num(budget.hfu),
        "comm_share": _num(budget.comm_share),
        "exposed_share": _num(budget.exposed_share),
        "bytes": {k: _num(v) for k, v in budget.link_bytes().items()},
        "intensity": {k: _num(v) for k, v in budget.intensity.items()},
        "balance": {k: _num(v) for k, v in budget.balance.items()},
        "by_dim": {
            d.value: {f: _num(budget.by_dim(f)[d.value]) for f in ("bytes_per_gpu", "nic_bytes", "time_s", "exposed_s")}
            for d in DIMS
        },
        "exchanges": rows,
    } | ({"kernel_view": kernel_dict(budget.kernel)} if budget.kernel is not None else {}) | (
        {"carried_rate_flops": carried} if carried is not None else {})


def micro_batches(n: float) -> str:
    """"16 micro-batches", "1 micro-batch"."""
    return f"{n:g} micro-batch" + ("" if n == 1 else "es")


def _stages(sc: Scenario) -> str:
    return f"{sc.layout.pp} stage" + ("" if sc.layout.pp == 1 else "s")


def summary_table(budget: Budget, memory: Memory | None = None) -> Table:
    """The step's terms as one expression, MFU and throughput; with ``memory``, the job's bytes per GPU against
    HBM (every door that times a step says whether it fits)."""
    d = budget_dict(budget)
    sc, k = budget.plan.scenario, budget.kernel
    t = Table(title=f"{sc.name}: {sc.cluster.gpus:,} GPUs · {layout_label(sc)}", title_justify="left", show_header=False)
    t.add_column(style="bold")
    t.add_column(justify="right")
    t.add_column(style="dim")
    t.add_row("compute per GPU", fmt_flop(d["flops_per_gpu"]), f"{sc.flops.convention} count")
    if k is not None:
        t.add_row("compute time", fmt_time(d["compute_s"]), _in_rate(budget, k, d.get("carried_rate_flops") is None))
        t.add_row("pipeline bubble", fmt_time(d["bubble_s"]),
                  f"{sc.layout.schedule.value}, {_stages(sc)}, {micro_batches(d['microbatches'])}; inside the compute time")
    else:
        rate_note = ("stated kernel rate: bubble and exposed exchanges added" if budget.plan.rate_source == "stated"
                     else "operator model (per-operator roofline): bubble and exposed exchanges added")
        t.add_row("compute time", fmt_time(d["compute_s"]), f"at {fmt_flops(d['rate_flops'])} ({rate_note})")
        t.add_row("pipeline bubble", fmt_time(d["bubble_s"]), f"{sc.layout.schedule.value}, {_stages(sc)}, "
                  f"{micro_batches(d['microbatches'])}"
                  + _passes_note(budget))
    t.add_row("communication", fmt_time(d["comm_s"]), f"{d['comm_share']:.1%} of compute + communication if none were hidden")
    t.add_row("exposed communication", fmt_time(d["exposed_comm_s"]), f"{d['exposed_share']:.1%} of the step"
              + (": DP at the step's edges (the rest waits inside the compute time)" if k is not None else ""))
    if d["contention_s"]:
        t.add_row("SMs held by communication", fmt_time(d["contention_s"]),
                  f"{budget.plan.comm_sm_share:.0%} of the SMs " + ("set aside for the all-to-all for the whole of "
                  "each paired chunk (DualPipe)" if budget.sms_dedicated else "while hidden exchanges run"))
    if d["step_overhead_s"]:
        t.add_row("fixed cost per step", fmt_time(d["step_overhead_s"]),
                  "cluster.step_overhead_s and the profile's costs: host work, syncs")
    t.add_row(Text("step time", style="bold green"), Text(fmt_time(d["step_s"]), style="bold green"), "")
    t.add_row("MFU", f"{d['mfu']:.1%}", f"HFU {d['hfu']:.1%}, against the BF16 peak")
    t.add_row("throughput", f"{d['tokens_per_s']:,.0f} tokens/s", f"{d['tokens_per_s_per_gpu']:,.0f} per GPU")
    if memory is not None:
        fits = bool(memory.fits)
        t.add_row("memory per GPU", Text(fmt_bytes(float(memory.total)), style="" if fits else "bold red"),
                  f"of {fmt_bytes(memory.capacity)} HBM on its busiest pipeline rank: "
                  + ("fits" if fits else "does not fit"))
    notes = []
    if d.get("carried_rate_flops") is not None:
        notes.append(f"the job differs from {sc.rate_basis.name}'s, on which its {fmt_flops(d['rate_flops'])} "
                     f"whole-step rate was measured: its kernels run at the {fmt_flops(d['carried_rate_flops'])} kernel "
                     f"rate that reproduces that job's step ({d['carried_rate_flops'] / sc.peak_gemm_flops:.1%} of the "
                     "GEMM peak), as scale, search and whatif run it")
    if (budget.plan.rate_source == "operators" and sc.layout.pp > 1 and not d["step_overhead_s"]
            and sc.layout.schedule != Schedule.DUALPIPE and sc.framework not in NOT_MEGATRON):
        notes.append(step_cost_note(d["step_s"]))
    if notes:
        t.caption = "\n".join(notes)
        t.caption_justify = "left"
    return t


def critical_waits_s(budget: Budget, kernel: Budget) -> float:
    """What a whole-step rate's compute time holds besides the kernels and the bubble: the critical-path exchanges
    (and the SMs hidden exchanges take); 0 where that is rounding, not time."""
    f = lambda x: float(np.asarray(x))  # noqa: E731
    waits = f(budget.compute_s) - f(kernel.compute_s) - f(kernel.bubble_s)
    return waits if waits > 1e-9 * f(budget.step_s) else 0.0


def _in_rate(budget: Budget, kernel: Budget, as_measured: bool) -> str:
    """What a whole-step rate's compute time holds: the kernels at their rate, the bubble, the critical-path exchanges
    (``as_measured``: the job is the one the rate was measured on)."""
    f = lambda x: float(np.asarray(x))  # noqa: E731
    waits = critical_waits_s(budget, kernel)
    measured = (f"at the measured {fmt_flops(f(budget.plan.flops_rate))} whole-step rate" if as_measured
                else f"at {fmt_flops(f(budget.flops_per_gpu / budget.compute_s))} a step")
    return (f"{measured}: kernels {fmt_time(f(kernel.compute_s))} at {fmt_flops(f(kernel.plan.flops_rate))} + bubble "
            f"{fmt_time(f(kernel.bubble_s))} + critical-path exchanges {fmt_time(waits)}")


UNMODELLED_STEP_COST_S = (0.3, 0.9)
"""What measured Megatron-family pipeline steps carry beyond the operator model's budget: the fixed cost
per step of step = a + b m fits, less the model's (docs/validation.md, "Where the model misses": MLPerf's NeMo runs
0.61 s against 0.28-0.35 s; MegaScale 1.2 s against 0.3 s). Not added to the step by default (no source
breaks it down); a scenario adds its own with cluster.step_overhead_s."""


NOT_MEGATRON = ("torchtitan", "maxtext", "deepspeed")
"""Frameworks whose pipelines are not Megatron-LM's, which ``UNMODELLED_STEP_COST_S`` was measured on."""


def _passes_note(budget: Budget) -> str:
    """The pass times a zero-bubble or DualPipe bubble is worked from (budget/step.py): the busiest rank's forward,
    backward and weight-gradient chunk, as the operator model times them; empty for the other schedules."""
    p = budget.plan
    if p.rate_source != "operators" or p.scenario.layout.schedule not in (Schedule.ZB_H1, Schedule.DUALPIPE):
        return ""
    per_mb = float(np.asarray((budget.compute_s - p.optimizer_s) / p.microbatches))
    forward = per_mb / (1 + float(np.asarray(p.backward_ratio)))
    backward = per_mb - forward
    pair = (f", F&B {fmt_time(per_mb * float(np.asarray(budget.pair_slowdown)))} on the SMs the all-to-all leaves"
            if budget.sms_dedicated else "")
    return (f"; from F {fmt_time(forward)}, B {fmt_time(backward)}, "
            f"W {fmt_time(backward * float(np.asarray(p.w_frac)))} a chunk{pair}")


def step_cost_note(step_s: float) -> str:
    low, high = UNMODELLED_STEP_COST_S
    return (f"measured Megatron-family pipelines pay about {low:g}-{high:g} s a step more than this budget "
            f"(docs/validation.md), {low / step_s:.0%}-{high / step_s:.0%} of this step")


def operators_table(budget: Budget) -> Table:
    """The operator model's time per step by operator (forward + backward, all micro-batches and layers)."""
    p = budget.plan
    t = Table(title="Compute by operator (operator model; per GPU per step)", title_justify="left")
    for col in ("operator", "kind", "FLOP fwd / micro-batch", "HBM bytes fwd", "time / step", "share"):
        t.add_column(col, justify="left" if col in ("operator", "kind") else "right")
    layers = (p.scenario.model.num_layers + p.scenario.model.mtp_layers) / p.pp
    total = float(budget.compute_s)
    rows: list[tuple[Op | None, float]] = [  # time per step of each operator, then (None) the optimizer's
        (op, float(np.asarray((op.fwd_s + op.bwd_s) * p.microbatches * (1 / p.pp if op.output_layer else op.share * layers))))
        for op in p.operators]
    rows.append((None, float(p.optimizer_s)))
    for op, sec in sorted(rows, key=lambda r: -r[1]):
        if op is None:
            t.add_row("optimizer step", "memory", "-", "-", fmt_time(sec), f"{sec / total:.1%}")
            continue
        t.add_row(op.name, op.kind, fmt_flop(float(op.flops)), fmt_bytes(float(op.bytes)), fmt_time(sec),
                  f"{sec / total:.1%}")
    t.caption = ("shares are of the average stage's compute; the busiest stage and recompute set compute time, "
                 "so shares need not add to 100 %")
    moe = p.scenario.model.moe
    if moe is not None:
        busiest = float(np.max(busiest_gpu_factors(moe, p.ep)))
        if moe.popularity_skew > 0:
            load = f"experts' popularity Zipf({moe.popularity_skew:g})"
        elif moe.pad_to_capacity:
            load = f"every expert padded to {moe.busiest_expert_load:.2f}x the mean load"
        else:
            load = f"busiest expert at {moe.busiest_expert_load:.2f}x the mean load"
        counted = ("the router's top-k" if moe.pad_to_capacity or p.scenario.layout.ep_kind == EPKind.ALL_GATHER
                   else "the router's top-k and the token-count gather the host waits on")
        t.caption += (f"\nMoE: {load}, so the busiest GPU's experts run {busiest:.2f}x the mean tokens and the "
                      f"all-to-all waits for it; {counted} are counted. Not modelled: host launch gaps after each "
                      "wait for the host, and any per-kernel cost past the roofline; on the MoE runs validate "
                      "checks, most steps still come out short (docs/validation.md)")
    t.caption_justify = "left"
    return t


def exchanges_table(budget: Budget) -> Table:
    """The chapter's "Bytes per GPU, by dimension", one row per collective kind."""
    t = Table(title="Bytes per GPU per step, by dimension", title_justify="left")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("dim", "left"), ("collective", "left"), ("group", "right"), ("message", "right"), ("calls", "right"),
        ("bytes/GPU", "right"), ("on NIC", "right"), ("on NVLink", "right"), ("time", "right"), ("exposed", "right"))
    for col, just in columns:
        t.add_column(col, justify=just)
    for r in budget_dict(budget)["exchanges"]:
        t.add_row(
            r["dim"].upper(), f"{r['collective']} {r['what']}", f"{r['group']:,}", fmt_bytes(r["message_bytes"]),
            f"{r['calls']:,.4g}", fmt_bytes(r["bytes_per_gpu"]), fmt_bytes(r["nic_bytes"]),
            fmt_bytes(r["nvlink_bytes"]), fmt_time(r["time_s"]),
            Text(fmt_time(r["exposed_s"]), style="red" if r["exposed_s"] > 1e-3 * budget.step_s else ""),
        )
    return t


def dimensions_table(budget: Budget) -> Table:
    """Each dimension's collectives together: bytes, time (of it, the rings' and hops' latency), what stays
    exposed, and the time against the compute time (what Panels 5.2 to 5.4 compare with the chapter's formulas)."""
    t = Table(title="Per dimension, every collective together", title_justify="left")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("dim", "left"), ("bytes/GPU", "right"), ("on NIC", "right"), ("on NVLink", "right"), ("time", "right"),
        ("latency", "right"), ("exposed", "right"), ("time / compute", "right"))
    for col, just in columns:
        t.add_column(col, justify=just)
    f = lambda x: float(np.asarray(x))  # noqa: E731
    fields = {name: budget.by_dim(name) for name in ("bytes_per_gpu", "nic_bytes", "nvlink_bytes", "time_s",
                                                      "bandwidth_s", "exposed_s")}
    compute = f(budget.compute_s)
    for d in DIMS:
        row = {name: f(v[d.value]) for name, v in fields.items()}
        if row["bytes_per_gpu"] <= 0 and row["time_s"] <= 0:
            continue
        latency = max(row["time_s"] - row["bandwidth_s"], 0.0)
        t.add_row(d.value.upper(), fmt_bytes(row["bytes_per_gpu"]), fmt_bytes(row["nic_bytes"]),
                  fmt_bytes(row["nvlink_bytes"]), fmt_time(row["time_s"]), fmt_time(latency), fmt_time(row["exposed_s"]),
                  f"{row['time_s'] / compute:.1%}" if compute > 0 else "-")
    return t


def roofline_table(budget: Budget) -> Table:
    """Intensity (FLOP per byte moved) against each link's balance point."""
    d = budget_dict(budget)
    p = budget.plan
    rates = {"nic": p.nic_Bps, "nvlink": p.nvlink_Bps, "hbm": p.hbm_Bps}
    t = Table(title="Roofline: FLOP per byte against the balance point", title_justify="left")
    for col in ("link", "bandwidth/GPU", "bytes/step", "FLOP/B", "balance", "verdict"):
        t.add_column(col, justify="left" if col in ("link", "verdict") else "right")
    for k in ("nic", "nvlink", "hbm"):
        inten, bal = d["intensity"][k], d["balance"][k]
        if inten is None:
            t.add_row(k, fmt_rate(rates[k]), fmt_bytes(0), "-", f"{bal:,.0f}", "unused")
            continue
        ok = inten >= bal
        t.add_row(k, fmt_rate(rates[k]), fmt_bytes(d["bytes"][k]), f"{inten:,.0f}", f"{bal:,.0f}",
                  Text("compute-bound" if ok else f"link-bound ({bal / inten:.1f}x short)", style="green" if ok else "red"))
    return t


SECONDS_PER_DAY = 86_400.0


def train_dict(budget: Budget, tokens: float | None) -> dict:
    """Time to train on ``tokens`` at this step: ``{"train": {tokens, steps, time_s, gpu_hours}}``, empty without."""
    if tokens is None:
        return {}
    step, per_step, gpus = float(np.asarray(budget.step_s)), budget.plan.tokens_per_step, budget.plan.scenario.cluster.gpus
    time_s = tokens / per_step * step  # whole steps are not rounded: a token budget is rarely a multiple of the batch
    return {"train": {"tokens": tokens, "steps": tokens / per_step, "time_s": time_s, "gpu_hours": time_s * gpus / 3600}}


def train_lines(budget: Budget, tokens: float | None) -> list[str]:
    if tokens is None:
        return []
    t = train_dict(budget, tokens)["train"]
    return [f"[bold]Time to train[/bold] on {fmt_count(t['tokens'])} tokens: {t['steps']:,.0f} steps, "
            f"{t['time_s'] / SECONDS_PER_DAY:,.1f} days, {t['gpu_hours']:,.3g} GPU-hours"]


def budget_tables(budget: Budget, memory: Memory | None = None) -> list[Table]:
    """What `budget` prints: the summary (with ``memory``, whether the job fits), the exchanges, each dimension's
    together, the operators (operator model) and the roofline."""
    return [summary_table(budget, memory), exchanges_table(budget), dimensions_table(budget),
            *([operators_table(budget)] if budget.plan.operators else []), roofline_table(budget)]
