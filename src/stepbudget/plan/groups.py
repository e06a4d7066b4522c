"""Which links a collective group crosses, from the rank order and the node size.

A group of ``degree`` ranks whose members are ``stride`` ranks apart (stride = product of the
degrees inside it in the rank order) has ``q`` members per node of ``g`` GPUs: all of them when
the group fits inside a node, one when the stride is a whole node or more. Arrays broadcast.

The expert groups (EP, one expert's DP) are Megatron-Core's expert grid (parallel_state.py,
``RankGenerator`` with ``order="tp-cp-ep-dp-pp"``): one pipeline stage's TP x CP x DP ranks, in rank
order, refactored as expert TP, EP and expert DP in the places the order gives TP, EP and DP (CP folds
into expert DP). A stage's ranks lie in runs of ``run`` consecutive ranks (the degrees inside PP),
``run * pp`` apart; with PP outermost or of degree 1 they are one run.
"""

from __future__ import annotations

import numpy as np

from stepbudget.enums import Axis
from stepbudget.inputs.hardware import Tier


def strides(order: tuple[Axis, ...], degrees: dict[Axis, np.ndarray]) -> dict[Axis, np.ndarray]:
    """Rank distance between consecutive members of each axis's group."""
    out, acc = {}, np.ones_like(np.asarray(degrees[Axis.TP]))
    for axis in order:
        out[axis] = acc
        acc = acc * degrees[axis]
    return out


def members_per_node(degree, stride, g) -> np.ndarray:
    """q: members of one group that share a node (1 <= q <= degree)."""
    degree, stride, g = np.broadcast_arrays(*(np.asarray(x) for x in (degree, stride, g)))
    inside = np.maximum(g // np.maximum(stride, 1), 1)
    return np.where(stride < g, np.minimum(degree, inside), 1)


def with_ep(order: tuple[Axis, ...]) -> tuple[Axis, ...]:
    """The order with EP placed: where stated, else right inside DP, as in Megatron-Core's default order
    (parallel_state.py ``initialize_model_parallel(order="tp-cp-ep-dp-pp")``: EP is carved out of the DP ranks)."""
    if Axis.EP in order:
        return order
    at = order.index(Axis.DP)
    return order[:at] + (Axis.EP,) + order[at:]


def expert_strides(order: tuple[Axis, ...], tp, cp, dp, ep, expert_tp) -> dict[Axis, np.ndarray]:
    """Distance, counted in one pipeline stage's ranks, between consecutive members of an EP group (``Axis.EP``)
    and of one expert's DP group (``Axis.DP``): the expert grid expert TP, EP, expert DP in the order's places,
    CP folded into expert DP (Megatron-Core builds the expert grid with cp=1, parallel_state.py)."""
    ones = np.ones_like(np.asarray(tp))
    # parallel_state.py: expert_data_parallel_size = world_size // (expert_tp * ep * pp)
    expert_dp = np.asarray(tp) * cp * dp // (ep * expert_tp)
    degrees = {Axis.TP: expert_tp * ones, Axis.CP: ones, Axis.EP: ep * ones, Axis.DP: expert_dp}
    return strides(tuple(a for a in with_ep(order) if a != Axis.PP), degrees)


def _in_run(degree, stride, run) -> np.ndarray:
    """Members of a stage group that share one run of consecutive ranks (1 when the stride spans a run; a sweep's
    layouts with no whole group, degree 0, are masked later)."""
    return np.clip(np.asarray(run) // np.maximum(stride, 1), 1, np.maximum(degree, 1))


def stage_members_per_node(degree, stride, run, pp, g) -> np.ndarray:
    """q of a group whose members are ``stride`` apart among one pipeline stage's ranks, which lie in runs of
    ``run`` consecutive ranks ``run * pp`` apart: the members inside one run, times the runs in one node.

    Stage rank i is global rank (i mod run) + (i div run) * run * pp [derived from the mixed-radix order];
    exact where run and stride divide one another (degrees that are powers of two), an estimate otherwise."""
    inner = _in_run(degree, stride, run)
    return members_per_node(inner, stride, g) * members_per_node(degree // inner, inner * stride * pp, g)


def stage_stride(degree, stride, run, pp) -> np.ndarray:
    """Mean global rank distance between the members of that group: its span over its degree (for the tiers)."""
    return stride * np.where(degree > _in_run(degree, stride, run), pp, 1)


def tier_slowdown(degree, stride, tiers: tuple[Tier, ...], pattern: str) -> np.ndarray:
    """Factor >= 1 by which the network tiers above the leaf slow a group's NIC traffic.

    A group spanning ``D`` domains of a tier with oversubscription ``o``: a ring visits the
    domains in turn, so D of its ``degree`` hops cross the tier: factor o*D/degree; an
    all-to-all sends (1 - 1/D) of its bytes out of the domain: factor o*(1 - 1/D) [derived].
    """
    degree, stride = np.broadcast_arrays(np.asarray(degree, float), np.asarray(stride, float))
    factor = np.ones_like(degree)
    for tier in tiers:
        # a group cannot span more domains than it has members (far-apart members: one each)
        domains = np.clip(np.ceil(degree * stride / tier.domain_gpus), 1, np.maximum(degree, 1))
        crossing = domains / degree if pattern == "ring" else 1 - 1 / domains
        factor = np.maximum(factor, np.where(domains > 1, tier.oversubscription * crossing, 1.0))
    return factor
