"""Bytes and alpha-beta time of one collective call, over arrays.

``S`` is the message in the nccl-tests convention (formulas.md 1.2): the per-rank buffer for
all-reduce, the whole array for all-gather and reduce-scatter, the send buffer for all-to-all.
A group of ``n`` ranks has ``q`` members per node and ``n/q`` nodes. Returned bytes are per GPU
per call: ``bytes_per_gpu`` as the chapter counts them (a ring's wire bytes, all links), and the
split between the GPU's NVLink and its NIC.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepbudget.enums import FLAT, IN_NETWORK, TREE, Collective



@dataclass(frozen=True)
class CallCost:
    """Per GPU, per call. Arrays of the broadcast shape of the inputs."""

    bytes_per_gpu: np.ndarray
    nvlink_bytes: np.ndarray
    nic_bytes: np.ndarray
    bandwidth_s: np.ndarray
    latency_s: np.ndarray

    @property
    def time_s(self) -> np.ndarray:
        return self.bandwidth_s + self.latency_s


def ring_factor(collective: Collective, n) -> np.ndarray:
    """Wire bytes per rank over S for the ring/pairwise algorithm (nccl-tests busbw factors)."""
    n = np.asarray(n, dtype=float)
    if collective == Collective.ALL_REDUCE:
        return 2 * (n - 1) / n  # ring all-reduce: 2(n-1)/n, nccl-tests PERFORMANCE.md
    if collective in (Collective.REDUCE_SCATTER, Collective.ALL_GATHER, Collective.ALL_TO_ALL):
        return (n - 1) / n  # (n-1)/n, nccl-tests PERFORMANCE.md; MPICH pairwise all-to-all
    return np.ones_like(n)  # send/recv and pipelined broadcast: 1, nccl-tests


def ring_steps(collective: Collective, n) -> np.ndarray:
    """Sequential steps, each paying one latency (NCCL tuning.cc nsteps)."""
    n = np.asarray(n, dtype=float)
    if collective == Collective.ALL_REDUCE:
        return 2 * (n - 1)
    if collective in (Collective.REDUCE_SCATTER, Collective.ALL_GATHER, Collective.BROADCAST):
        return n - 1
    return np.ones_like(n)  # send/recv; all-to-all posts every pair at once (NCCL grouped send/recv)


_SPLIT_BY_NODE = (Collective.ALL_REDUCE, Collective.REDUCE_SCATTER, Collective.ALL_GATHER, Collective.ALL_TO_ALL)
"""Collectives whose bytes split into a part inside the node and a part across it."""


def _link_bytes(collective: Collective, algorithm: int, S, n, q, nodes, spans, total):
    """(NVLink bytes, NIC bytes) one GPU sends per call under ``algorithm`` (before masking single-node groups)."""
    if algorithm == FLAT or collective not in _SPLIT_BY_NODE:
        # flat ring: every neighbour on another node (the chapter's case); send/recv, broadcast: one tier
        return np.where(spans, 0.0, total), np.where(spans, total, 0.0)
    if collective == Collective.ALL_REDUCE:
        if algorithm == TREE:  # double binary tree: 2S sent per rank; a node's q NICs share it (formulas.md 1.3)
            return 2 * S * (q - 1) / np.maximum(q, 1), 2 * S / q
        if algorithm == IN_NETWORK:  # NVLS in the node, SHARP across nodes: S/q per NIC each way (formulas.md 1.5)
            return (q + 1) / q * S, S / q
        # hierarchical: RS in node, all-reduce of S/q across nodes, AG in node (formulas.md 1.4)
        return 2 * (q - 1) / q * S, 2 * (nodes - 1) / nodes * S / q
    if collective in (Collective.REDUCE_SCATTER, Collective.ALL_GATHER):
        # tree/NVLS do not apply (NCCL issue #1506): the hierarchical split
        return (q - 1) / q * S, (nodes - 1) / nodes * S / q
    # all-to-all
    return (q - 1) / n * S, (n - q) / n * S  # peers in the node; peers elsewhere through this GPU's NIC


def call_cost(
    collective: Collective,
    S,
    n,
    q,
    algorithm,
    nvlink_Bps,
    nic_Bps,
    nvlink_latency_s,
    nic_latency_s,
) -> CallCost:
    """Bytes per GPU on each link and the time of one call.

    Links run concurrently (NCCL pipelines chunks over channels), so the bandwidth term is the
    slower of the NVLink and NIC terms (formulas.md 1.4, fully pipelined); latency follows
    NCCL's ring model: intra-node steps at the NVLink latency, 2(N-1) (all-reduce) or N-1 steps
    at the network latency (formulas.md 1.6).
    """
    S, n, q = (np.asarray(x, dtype=float) for x in (S, n, q))
    algorithm = int(algorithm)
    nodes = n / q
    spans = nodes > 1
    total = ring_factor(collective, n) * S
    is_ar = collective == Collective.ALL_REDUCE
    nvlink, nic = _link_bytes(collective, algorithm, S, n, q, nodes, spans, total)
    is_tree, is_innet = algorithm == TREE, algorithm == IN_NETWORK
    nic = np.where(spans, nic, 0.0)
    bytes_per_gpu = 2 * S * np.ones_like(total) if is_tree and is_ar else total

    bandwidth_s = np.maximum(nvlink / nvlink_Bps, nic / nic_Bps)

    steps = ring_steps(collective, n)
    inter = np.where(spans, (2 if is_ar else 1) * (nodes - 1), 0.0)
    inter = np.minimum(inter, steps)
    ring_lat = (steps - inter) * nvlink_latency_s + inter * nic_latency_s
    if is_ar and is_tree:
        latency_s = 2 * ((q - 1) * nvlink_latency_s + np.log2(np.maximum(nodes, 1)) * nic_latency_s)
    elif is_ar and is_innet:
        latency_s = nvlink_latency_s + np.where(spans, nic_latency_s, 0.0)
    else:
        latency_s = ring_lat
    return CallCost(bytes_per_gpu, nvlink, nic, bandwidth_s, latency_s)
