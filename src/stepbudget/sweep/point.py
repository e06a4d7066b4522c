"""One sweep point's rows: its task run on its resolved scenario, or the one-line reason it failed.

``evaluate`` is what a worker runs. It never raises: a point whose layout does not fit, whose scenario
does not resolve, or whose simulation breaks is one row with ``status`` "failed" and its ``reason``, so a
failure never stops the others. The rows are plain values in ``COLUMNS``' order and kinds: the same on
every worker, so a sweep's results do not depend on where, or in what order, its points ran.
"""

from __future__ import annotations

import time

from stepbudget.budget.memory import memory_per_gpu
from stepbudget.budget.step import estimate
from stepbudget.enums import SCHEDULE_BY_CODE
from stepbudget.inputs.scenario import Scenario
from stepbudget.plan.derive import derive
from stepbudget.sweep.grid import Point

COLUMNS: dict[str, tuple[str, str]] = {
    "point_id": ("string", "the point's id: a hash of its resolved scenario, task and axis values (its file name)"),
    "point": ("int", "the point's place in the grid, from 0"),
    "status": ("string", "ok, or failed (then reason says why and the metrics are empty)"),
    "reason": ("string", "why the point failed, one line; empty when ok"),
    "base": ("string", "the base scenario (preset or file)"),
    "model": ("string", "the model's name"),
    "gpu": ("string", "the GPU's name"),
    "gpus": ("int", "GPUs in the job"),
    "nic_Bps": ("float", "NIC rate per GPU, bytes/s"),
    "global_batch_seqs": ("int", "sequences per step"),
    "rank": ("int", "1 for the point's best (or only) layout; 2.. for the next of a search's top"),
    "layout": ("string", "the layout in one line: tp cp pp dp ep, schedule, virtual stages, micro-batch, DP kind"),
    "tp": ("int", "tensor-parallel degree"),
    "cp": ("int", "context-parallel degree"),
    "pp": ("int", "pipeline stages"),
    "dp": ("int", "data-parallel degree"),
    "ep": ("int", "expert-parallel degree"),
    "schedule": ("string", "pipeline schedule"),
    "virtual_stages": ("int", "virtual stages per rank"),
    "micro_batch": ("int", "sequences per micro-batch"),
    "dp_kind": ("string", "DDP, ZeRO-1/2 or FSDP"),
    "step_s": ("float", "step time of the budget, s"),
    "compute_s": ("float", "compute on the critical path, s"),
    "bubble_s": ("float", "pipeline bubble, s"),
    "exposed_comm_s": ("float", "communication not hidden behind compute, s"),
    "comm_share": ("float", "all communication time over compute plus communication"),
    "exposed_share": ("float", "exposed communication over the step"),
    "mfu": ("float", "model FLOPs utilisation"),
    "memory_bytes": ("float", "memory per GPU, bytes"),
    "fits": ("bool", "whether it fits in HBM"),
    "evaluated": ("int", "layouts the search evaluated (search only)"),
    "feasible": ("int", "layouts that fit in HBM (search only)"),
    "sim_step_s": ("float", "one simulated step with link sharing, no jitter, s (simulate only)"),
    "p50_s": ("float", "median jittered step, s (simulate with jitter)"),
    "p90_s": ("float", "90th percentile jittered step, s"),
    "p99_s": ("float", "99th percentile jittered step, s"),
    "seed": ("int", "the Monte Carlo and routing seed, from the point id"),
    "a2a_lower_bound_s": ("float", "one MoE layer's all-to-all: no schedule beats this, s (moe only)"),
    "a2a_plain_s": ("float", "the plain all-to-all under max-min sharing, s"),
    "a2a_scheduled_s": ("float", "the FAST-style schedule, s"),
    "a2a_speedup": ("float", "plain over scheduled"),
}
"""Every column of a point's rows after the axis columns (one string column per axis, named as the axis):
its kind and what it holds. A column a task does not fill is empty (null)."""


def evaluate(point: Point) -> list[dict]:
    """The point's rows (``rank`` 1 first): its task's results, or one failed row with the reason."""
    try:
        if point.scenario is None:
            raise _Failed(point.error or "the scenario does not resolve")
        return _rows(point, point.scenario)
    except _Failed as e:
        return [failed_row(point, str(e))]
    except (ValueError, ArithmeticError) as e:  # a ScenarioError, a search that finds nothing, a bad skew
        return [failed_row(point, str(e).splitlines()[0] if str(e) else type(e).__name__)]
    except Exception as e:  # noqa: BLE001 - a bug at one point is recorded, and never stops the others
        return [failed_row(point, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'no message'}")]


class _Failed(Exception):
    pass


def timed(point: Point) -> tuple[list[dict], float]:
    """``evaluate`` and the seconds it took (for the manifest, never the results)."""
    start = time.perf_counter()
    rows = evaluate(point)
    return rows, time.perf_counter() - start


def _blank(point: Point) -> dict:
    row: dict[str, object] = dict.fromkeys(COLUMNS)
    row |= {"point_id": point.id, "point": point.index, "status": "ok", "base": point.base, "seed": point.seed}
    return {**point.values, **row}


def failed_row(point: Point, reason: str) -> dict:
    row = _blank(point) | {"status": "failed", "reason": reason[:500]}
    if point.scenario is not None:
        row |= _job(point.scenario, point.gpus)
    return row


def _job(sc: Scenario, gpus: int) -> dict:
    return {"model": sc.model.name, "gpu": sc.cluster.gpu.name, "gpus": gpus, "nic_Bps": float(sc.cluster.nic_Bps),
            "global_batch_seqs": int(sc.global_batch_seqs)}


def _rows(point: Point, sc: Scenario) -> list[dict]:
    task = point.task
    if task.search is not None:
        from stepbudget.sweep.search import scenario_for, search

        result = search(sc, gpus=point.gpus, top=task.search.top, uneven_stages=task.search.uneven_stages)
        found = {"evaluated": result.evaluated, "feasible": result.feasible}
        layouts = [scenario_for(result.scenario, r, result.gpus) for r in result.top]
    else:
        found, layouts = {}, [sc]
    rows = [_blank(point) | _job(s, s.cluster.gpus) | _budget(s) | found | {"rank": r} for r, s in enumerate(layouts, 1)]
    if task.simulate is not None:
        rows[0] |= _simulated(point, layouts[0])
    if task.moe is not None:
        rows[0] |= _moe(point, layouts[0])
    return rows


def _budget(sc: Scenario) -> dict:
    plan = derive(sc)
    b = estimate(plan)
    mem = memory_per_gpu(plan)
    lay = sc.layout
    f = float
    schedule = str(SCHEDULE_BY_CODE[int(plan.schedule)])
    return {"layout": f"tp{lay.tp} cp{lay.cp} pp{lay.pp} dp{lay.dp} ep{lay.ep} {schedule} v{int(plan.v)} "
                      f"mb{lay.micro_batch} {lay.dp_kind}",
            "tp": lay.tp, "cp": lay.cp, "pp": lay.pp, "dp": lay.dp, "ep": lay.ep, "schedule": schedule,
            "virtual_stages": int(plan.v), "micro_batch": lay.micro_batch, "dp_kind": str(lay.dp_kind),
            "step_s": f(b.step_s), "compute_s": f(b.compute_s), "bubble_s": f(b.bubble_s),
            "exposed_comm_s": f(b.exposed_comm_s), "comm_share": f(b.comm_share), "exposed_share": f(b.exposed_share),
            "mfu": f(b.mfu), "memory_bytes": f(mem.total), "fits": bool(mem.fits)}


def _simulated(point: Point, sc: Scenario) -> dict:
    from stepbudget.sim.step import monte_carlo, sim_budget, simulate_step

    t = point.task.simulate
    assert t is not None
    b = sim_budget(sc)
    one = simulate_step(b, link_rate=t.link_rate)
    out: dict[str, object] = {"sim_step_s": one.step_s}
    jit = t.jitter_of()
    if jit.any or t.steps > 1:
        mc = monte_carlo(b, jit, t.steps, replicas=t.replicas or int(b.plan.dp), seed=point.seed,
                         program=one.program, link_rate=t.link_rate, full=t.full)
        out |= {f"p{q}_s": mc.percentile(q) for q in (50, 90, 99)}
    return out


def _moe(point: Point, sc: Scenario) -> dict:
    from stepbudget.a2a.report import moe_report, parse_skew

    t = point.task.moe
    assert t is not None
    times = moe_report(sc, parse_skew(t.skew), t.servers, t.gpus_per_server, None, point.seed, None).times
    return {"a2a_lower_bound_s": times.lower_bound_s, "a2a_plain_s": times.plain_s,
            "a2a_scheduled_s": times.scheduled_s, "a2a_speedup": times.speedup}
