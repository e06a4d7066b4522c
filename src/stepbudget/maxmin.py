"""Max-min fair sharing of links among flows (progressive filling, vectorised).

A flow is a set of bytes moving over a tuple of link ids; every link it crosses
carries it at the same rate. Flows are given in CSR form (the layout scipy.sparse
uses): flow ``f`` crosses ``link_ids[indptr[f]:indptr[f + 1]]``.

What ``maxmin_rates_csr(indptr, link_ids, capacity_Bps) -> rates_Bps`` returns (the rates the
simulator's engine, ``sim/_core.py``, gives its flows by sequential water-filling; tests hold the two together):

* ``rates_Bps[f] >= 0`` for every flow (``inf`` for a flow that crosses no link);
* on every link, the sum of the rates of the flows that cross it is at most its
  capacity (a flow that lists a link twice counts twice);
* max-min fairness: every flow crosses a *bottleneck* link, one that is saturated
  and on which no other flow gets a higher rate. These three properties define the
  max-min fair allocation uniquely (Bertsekas & Gallager, Data Networks, 2nd ed.,
  "max-min flow control").

What it ignores: transport dynamics (slow start, congestion-control convergence,
PFC pauses); the rates are the fixed point those mechanisms aim at.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["FlowLinks", "flows_to_csr", "maxmin_rates", "maxmin_rates_csr", "maxmin_rates_unchecked"]


@dataclass(frozen=True, eq=False)
class FlowLinks:
    """The links each flow crosses, in CSR form."""

    indptr: np.ndarray
    """Shape ``(F + 1,)``, int64: flow ``f`` owns entries ``indptr[f]:indptr[f + 1]``."""
    link_ids: np.ndarray
    """Shape ``(E,)``, int64: the link id of each (flow, link) crossing."""


def flows_to_csr(flow_links: Sequence[Sequence[int]]) -> FlowLinks:
    """Pack a list of per-flow link tuples into CSR arrays (``E`` crossings in all)."""
    lengths = np.fromiter((len(links) for links in flow_links), dtype=np.int64)
    indptr = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    link_ids = np.fromiter(
        (link for links in flow_links for link in links), dtype=np.int64, count=int(indptr[-1])
    )
    return FlowLinks(indptr, link_ids)


def _check(indptr: np.ndarray, link_ids: np.ndarray, capacity_Bps: np.ndarray) -> None:
    if indptr.ndim != 1 or indptr.size < 1 or indptr[0] != 0 or np.any(np.diff(indptr) < 0):
        raise ValueError(
            f"indptr must be a non-decreasing 1-D array starting at 0, got {indptr!r}; "
            "build it with flows_to_csr(flow_links)"
        )
    if link_ids.ndim != 1 or link_ids.size != indptr[-1]:
        raise ValueError(
            f"link_ids has {link_ids.size} entries but indptr[-1] is {int(indptr[-1])}; "
            "they must describe the same flows"
        )
    if capacity_Bps.ndim != 1 or np.any(~(capacity_Bps >= 0)):
        raise ValueError(
            f"capacity_Bps must be a 1-D array of rates >= 0 in bytes/s, got {capacity_Bps!r}"
        )
    if link_ids.size and (link_ids.min() < 0 or link_ids.max() >= capacity_Bps.size):
        raise ValueError(
            f"link ids must lie in [0, {capacity_Bps.size}) (one capacity per link), "
            f"got ids from {int(link_ids.min())} to {int(link_ids.max())}; "
            "pass a capacity for every link"
        )


def maxmin_rates_csr(
    indptr: np.ndarray, link_ids: np.ndarray, capacity_Bps: np.ndarray
) -> np.ndarray:
    """Max-min fair rate of every flow, flows given in CSR form.

    Shapes: ``indptr (F + 1,)``, ``link_ids (E,)``, ``capacity_Bps (L,)`` -> ``(F,)`` B/s.

    Parallel progressive filling: in each round, every link with unfrozen flows
    offers them its fair share ``remaining / count``; a flow's offer is the least
    share on its path, and a link whose share is no larger than the offer of any of
    its flows is a bottleneck, so its flows are frozen at that share. Shares of the
    other links only rise when flows freeze below them, so this equals the
    sequential water-filling but freezes many bottleneck levels per round. Each
    round freezes at least the globally smallest share: at most ``L`` rounds of
    ``O(E + L)`` array work.
    """
    indptr = np.asarray(indptr, dtype=np.int64)
    link_ids = np.asarray(link_ids, dtype=np.int64)
    capacity_Bps = np.asarray(capacity_Bps, dtype=np.float64)
    _check(indptr, link_ids, capacity_Bps)
    return maxmin_rates_unchecked(indptr, link_ids, capacity_Bps)


def maxmin_rates_unchecked(indptr: np.ndarray, link_ids: np.ndarray, capacity_Bps: np.ndarray) -> np.ndarray:
    """``maxmin_rates_csr`` on int64/float64 arrays already checked, for callers that check their flows once and
    share them many times."""
    num_flows, num_links = indptr.size - 1, capacity_Bps.size
    lengths = np.diff(indptr)
    rates = np.where(lengths == 0, np.inf, 0.0)  # a flow over no link is unconstrained

    entry_flow = np.repeat(np.arange(num_flows, dtype=np.int64), lengths)
    entry_link = link_ids
    remaining = capacity_Bps.copy()
    count = np.bincount(entry_link, minlength=num_links).astype(np.float64)
    share = np.empty(num_links)
    while entry_flow.size:
        # fair share of each link among its unfrozen flows (inf where it has none)
        np.divide(remaining, count, out=share, where=count > 0)
        share[count == 0] = np.inf
        entry_share = share[entry_link]
        # entries stay grouped by flow, so each flow is one contiguous segment
        first = np.flatnonzero(np.r_[True, entry_flow[1:] != entry_flow[:-1]])
        seg_len = np.diff(np.r_[first, entry_flow.size])
        offer = np.minimum.reduceat(entry_share, first)  # least share on the flow's path
        entry_offer = np.repeat(offer, seg_len)
        least_offer = np.full(num_links, np.inf)
        np.minimum.at(least_offer, entry_link, entry_offer)
        bottleneck = share <= least_offer  # no flow of this link is offered less elsewhere
        frozen = np.logical_or.reduceat(bottleneck[entry_link], first)
        rates[entry_flow[first[frozen]]] = offer[frozen]
        frozen_entry = np.repeat(frozen, seg_len)
        used = entry_link[frozen_entry]
        remaining -= np.bincount(used, weights=entry_offer[frozen_entry], minlength=num_links)
        np.maximum(remaining, 0.0, out=remaining)  # rounding must not make a link negative
        count -= np.bincount(used, minlength=num_links)
        entry_flow, entry_link = entry_flow[~frozen_entry], entry_link[~frozen_entry]
    return rates


def maxmin_rates(
    flow_links: Sequence[Sequence[int]] | FlowLinks, capacity_Bps: np.ndarray
) -> np.ndarray:
    """Max-min fair rate of every flow (bytes/s), shape ``(F,)``.

    ``flow_links`` is either a sequence of link-id tuples, one per flow, or a
    ``FlowLinks`` in CSR form (from ``flows_to_csr`` or built from arrays).
    ``capacity_Bps`` has shape ``(L,)``, one capacity per link id. The contract is
    in the module docstring; a flow crossing several links runs at its bottleneck.
    """
    csr = flow_links if isinstance(flow_links, FlowLinks) else flows_to_csr(flow_links)
    return maxmin_rates_csr(csr.indptr, csr.link_ids, capacity_Bps)
