"""plan/groups.py: where the expert groups sit. A brute force that numbers every rank checks the formula
element by element over arrays, Megatron-Core's own expert grid checks the brute force where it builds one,
and the user's MoE jobs (EP 8 with PP 1) keep their all-to-all on NVLink in the budget and the simulator."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import stepbudget as sb
from stepbudget.enums import Axis
from stepbudget.plan.groups import expert_strides, stage_members_per_node, stage_stride, strides, with_ep
from stepbudget.sim.program import step_program
from stepbudget.sim.step import sim_budget, simulate_step
from tests._util import moe_job

G = 8  # GPUs per node
ORDERS = [("tp", "cp", "pp", "dp"), ("tp", "cp", "dp", "pp"), ("tp", "cp", "ep", "dp", "pp"),
          ("tp", "cp", "dp", "ep", "pp"), ("tp", "cp", "ep", "pp", "dp"), ("dp", "tp", "cp", "pp"),
          ("pp", "tp", "cp", "dp"), ("dp", "ep", "tp", "cp", "pp")]


def _layouts() -> np.ndarray:
    """(tp, cp, pp, dp, ep, expert_tp) rows on 8 to 512 GPUs whose expert grid divides the TP x CP x DP ranks."""
    rows = [(t, c, p, d, e, et) for t, c, p, d, e in itertools.product([1, 2, 8], [1, 2], [1, 2, 4], [1, 4, 16],
                                                                      [1, 2, 8])
            for et in sorted({1, t}) if (t * c * d) % (e * et) == 0 and t * c * p * d >= G]
    return np.array(rows)


def _groups(sizes: list[int], names: list[str], axis: str) -> np.ndarray:
    """Rows of the groups along ``axis`` of a mixed-radix grid, ``names`` innermost first (Megatron-Core's
    RankGenerator numbering: rank = sum of coordinate x product of the sizes inside it)."""
    grid = np.arange(int(np.prod(sizes))).reshape(sizes[::-1])
    at = len(names) - 1 - names.index(axis)
    return np.moveaxis(grid, at, -1).reshape(-1, sizes[names.index(axis)])


def _expert_order(order: tuple[str, ...]) -> list[str]:
    """The order with ep placed: where given, else right before dp (written here, not taken from groups.py)."""
    if "ep" in order:
        return list(order)
    at = order.index("dp")
    return [*order[:at], "ep", *order[at:]]


def _brute_q(order, tp, cp, pp, dp, ep, etp) -> dict[str, int]:
    """Most members of one EP group, and of one expert's DP group, in one node: number every rank by the order,
    take each pipeline stage's ranks in rank order and cut them into expert TP, EP, expert DP in the order's places."""
    dense = [a for a in order if a != "ep"]
    size = {"tp": tp, "cp": cp, "pp": pp, "dp": dp}
    names = [a for a in _expert_order(order) if a != "pp"]
    expert = {"tp": etp, "cp": 1, "ep": ep, "dp": tp * cp * dp // (ep * etp)}
    q = {"ep": 0, "dp": 0}
    for stage in _groups([size[a] for a in dense], dense, "pp").T:  # a PP group holds a rank of each stage
        ranks = np.sort(stage)
        for axis in q:
            for group in _groups([expert[a] for a in names], names, axis):
                q[axis] = max(q[axis], int(np.bincount(ranks[group] // G).max()))
    return q


@pytest.mark.parametrize("order", ORDERS, ids=["-".join(o) for o in ORDERS])
def test_expert_groups_per_node_match_a_rank_by_rank_count(order):
    rows = _layouts()
    tp, cp, pp, dp, ep, etp = rows.T
    axes = tuple(Axis(a) for a in order)
    run = strides(tuple(a for a in axes if a != Axis.EP), {Axis.TP: tp, Axis.CP: cp, Axis.PP: pp, Axis.DP: dp})[Axis.PP]
    stride = expert_strides(axes, tp, cp, dp, ep, etp)
    q_ep = stage_members_per_node(ep, stride[Axis.EP], run, pp, G)  # every layout at once: one formula over arrays
    q_edp = stage_members_per_node(tp * cp * dp // (ep * etp), stride[Axis.DP], run, pp, G)
    for i, row in enumerate(rows):
        want = _brute_q(order, *row)
        assert (int(q_ep[i]), int(q_edp[i])) == (want["ep"], want["dp"]), row


def test_the_brute_force_is_megatron_cores_expert_grid_where_megatron_builds_one():
    # parallel_state.py: the expert RankGenerator numbers the whole order (expert TP, cp=1, EP, expert DP, PP) and
    # asserts its PP groups are the dense grid's; wherever they are, its EP groups are the brute force's
    checked = 0
    for order, row in itertools.product(ORDERS[2:5], _layouts()):
        tp, cp, pp, dp, ep, etp = (int(x) for x in row)
        names = _expert_order(order)
        dense = [a for a in names if a != "ep"]
        size = {"tp": etp, "cp": 1, "ep": ep, "dp": tp * cp * dp // (ep * etp), "pp": pp}
        grid = [size[a] for a in names]
        same_pp = {tuple(g) for g in _groups(grid, names, "pp")} == {
            tuple(g) for g in _groups([{"tp": tp, "cp": cp, "pp": pp, "dp": dp}[a] for a in dense], dense, "pp")}
        if not same_pp:
            continue
        megatron = {a: max(int(np.bincount(g // G).max()) for g in _groups(grid, names, a)) for a in ("ep", "dp")}
        assert megatron == _brute_q(order, tp, cp, pp, dp, ep, etp), (order, row)
        checked += 1
    assert checked > 300


def test_an_order_without_ep_puts_it_right_inside_dp():
    assert with_ep((Axis.TP, Axis.CP, Axis.PP, Axis.DP)) == (Axis.TP, Axis.CP, Axis.PP, Axis.EP, Axis.DP)
    assert with_ep((Axis.TP, Axis.CP, Axis.DP, Axis.PP)) == (Axis.TP, Axis.CP, Axis.EP, Axis.DP, Axis.PP)
    stated = (Axis.TP, Axis.CP, Axis.DP, Axis.EP, Axis.PP)
    assert with_ep(stated) == stated


def test_the_tier_stride_of_a_group_split_over_pipeline_runs_counts_the_stages_between():
    # EP 8 drawn from DP under [tp, cp, pp, dp] with PP 2: members 2 ranks apart (4 in a node of 8)
    assert int(stage_stride(8, 1, 1, 2)) == 2 and int(stage_members_per_node(8, 1, 1, 2, G)) == 4
    # inside one run of TP 8 the stages do not come between: 1 apart, the whole group in the node
    assert int(stage_stride(8, 1, 8, 15)) == 1 and int(stage_members_per_node(8, 1, 8, 15, G)) == 8


# --- the user's jobs: a catalog MoE at 4K on 64 H100, EP 8, TP 1, PP 1, DP 64 ------------------------------------

EP_OUTSIDE = ["tp", "cp", "dp", "ep", "pp"]
"""EP outermost but for PP: its members are an expert's 8 DP ranks apart, a whole node."""


@pytest.mark.parametrize(("model", "inside_s", "outside_s"), [("mixtral-8x7b", 3.5703, 4.3302),
                                                                ("qwen3-30b-a3b", 1.3653, 2.9611)])
def test_ep_8_with_pp_1_runs_on_nvlink_under_the_default_order(model, inside_s, outside_s):
    inside, outside = sb.estimate(sb.derive(moe_job(model))), sb.estimate(sb.derive(moe_job(model, EP_OUTSIDE)))
    assert (int(inside.plan.q["ep"]), int(outside.plan.q["ep"])) == (8, 1)
    for x in (x for x in inside.exchanges if x.dim == Axis.EP):  # dispatch and combine: every byte on NVLink
        assert str(x.link) == "nvlink" and float(x.nic_bytes) == 0 and float(x.nvlink_bytes) > 0
    for x in (x for x in outside.exchanges if x.dim == Axis.EP):  # a node per member: every byte on the NIC
        assert str(x.link) == "nic" and float(x.nvlink_bytes) == 0 and float(x.nic_bytes) > 0
    # before this placement the default costed EP on the NIC (and an expert's DP too, which no order does: 3.08 s
    # and 2.95 s at the mean expert load); with EP on NVLink the step falls below the order that puts it outside the node
    assert float(inside.step_s) < float(outside.step_s)
    assert (float(inside.step_s), float(outside.step_s)) == pytest.approx((inside_s, outside_s), abs=1e-4)
    # Megatron-Core's own default order places the experts as the default does when pp = 1
    megatron = sb.estimate(sb.derive(moe_job(model, ["tp", "cp", "ep", "dp", "pp"])))
    assert float(megatron.step_s) == float(inside.step_s)


def test_the_simulator_runs_the_all_to_all_where_the_budget_puts_it():
    for order, link in ((None, "stage 0 EP (NVLink)"), (EP_OUTSIDE, "stage 0 EP (NIC)")):
        b = sim_budget(moe_job("qwen3-30b-a3b", order))
        prog = step_program(b, contention=False)  # a link of its own per dimension, named by its tier
        graph = prog.graph
        ep = np.flatnonzero((prog.dim == "ep") & (np.diff(graph.link_indptr) > 0))
        used = {prog.link_names[k] for i in ep for k in graph.link_ids[graph.link_indptr[i]:graph.link_indptr[i + 1]]}
        assert used == {link}
        assert simulate_step(b, contention=False).step_s == pytest.approx(float(b.step_s), rel=0.01)


def test_with_pp_2_llamas_order_puts_the_stages_between_the_expert_ranks():
    # [tp, cp, pp, dp]: one stage's ranks are every second rank, so EP 8 spans two nodes, 4 in each; Megatron-Core's
    # [tp, cp, ep, dp, pp], an EP job's default, keeps PP outermost and the EP group in one node (a sweep over pp)
    for order, q in ((["tp", "cp", "pp", "dp"], 4), (None, 8), (["tp", "cp", "ep", "dp", "pp"], 8)):
        plan = sb.derive(moe_job("mixtral-8x7b", order), {"pp": np.array([1, 2]), "dp": np.array([64, 32])})
        assert plan.q["ep"].tolist() == [8, q], order
