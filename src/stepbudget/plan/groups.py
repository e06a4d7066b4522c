"""Which links a collective group crosses, from the rank order and the node size.

A group of ``degree`` ranks whose members are ``stride`` ranks apart (stride = product of the
degrees inside it in the rank order) has ``q`` members per node of ``g`` GPUs: all of them when
the group fits inside a node, one when the stride is a whole node or more. Arrays broadcast.
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
