"""Token -> expert routing and the GPU-level traffic matrix of one MoE dispatch.

Routing model. Expert ``e`` has a popularity weight ``rank(e)^-s`` (Zipf exponent ``s``;
``'uniform'`` is ``s = 0``). Each token picks ``k`` *distinct* experts and expert ``e`` is among
them with probability ``pi_e = min(1, c * rank(e)^-s)``, ``c`` set so that ``sum(pi) = k`` (the
cap at 1 is what distinctness forces: an expert cannot receive a token twice). Tokens are drawn
by systematic probability-proportional-to-size sampling over a random expert order (one order per
source GPU), which gives exactly ``k`` distinct experts per token and exactly the inclusion
probabilities ``pi``. The tokens of one GPU then fall into at most ``E`` distinct expert sets
("cells"), so a call costs ``O(n_gpus * E * k)`` whatever the token count; token counts per cell
are one multinomial draw from the caller's ``numpy.random.Generator``.

Traffic convention: ``D[src, dst]`` is the dispatch bytes from GPU ``src`` to GPU ``dst``, one copy
per (token, expert) pair (Megatron's all-to-all dispatcher; formulas.md 3.5), diagonal = copies
whose expert is on the sending GPU (no wire traffic). GPU ``g`` sits on server ``g // G`` with
local index ``g % G``. Combine is the transpose. Units: bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepbudget.plan.routing import (_count, _experts_and_k, _rng, _zipf_exponent, busiest_gpu_factor,
                                     busiest_gpu_factors, expert_popularity, remote_nodes_per_token)

__all__ = [
    "NodeLimitedTraffic",
    "SkewStats",
    "busiest_gpu_factor",
    "busiest_gpu_factors",
    "check_traffic_matrix",
    "expert_loads",
    "expert_placement",
    "expert_popularity",
    "gpu_traffic_matrix",
    "node_limited_traffic",
    "remote_nodes_per_token",
    "server_matrix",
    "skew_stats",
]

_Q = 1 << 40  # integer grid of one token's probability mass: exact cell arithmetic in int64


# ---------------------------------------------------------------- validation


def check_traffic_matrix(D, servers=None, gpus_per_server=None, name: str = "D") -> np.ndarray:
    """Validate a traffic matrix and return it as float64 (n, n) bytes.

    Raises ValueError naming ``name`` if it is not square, has a negative, NaN or infinite entry,
    or (when ``servers`` and ``gpus_per_server`` are given) if ``n != servers * gpus_per_server``.
    """
    D = np.asarray(D, dtype=np.float64)
    if D.ndim != 2 or D.shape[0] != D.shape[1]:
        raise ValueError(f"{name} must be a square (n_gpus, n_gpus) matrix D[src, dst], got shape {D.shape}")
    if D.size and not (D.min() >= 0 and D.max() < np.inf):
        raise ValueError(f"{name} must hold finite bytes >= 0; found a negative, NaN or infinite entry: clean it first")
    if servers is not None or gpus_per_server is not None:
        S = _count("servers", servers)
        G = _count("gpus_per_server", gpus_per_server)
        if D.shape[0] != S * G:
            raise ValueError(
                f"{name} has {D.shape[0]} rows but servers*gpus_per_server = {S}*{G} = {S * G}; "
                "pass the servers and gpus_per_server the matrix was built for"
            )
    return D


# ---------------------------------------------------------------- popularity and sampling


def _integer_mass(pi: np.ndarray, k: int) -> np.ndarray:
    """``pi`` on an integer grid of ``_Q`` per token: each <= _Q, sum exactly ``k*_Q``."""
    scaled = pi * _Q
    mass = np.floor(scaled).astype(np.int64)
    short = k * _Q - int(mass.sum())
    room = np.flatnonzero(mass < _Q)
    bump = room[np.argsort(-(scaled - mass)[room], kind="stable")[:short]]
    mass[bump] += 1
    return mass


@dataclass(frozen=True)
class _Cells:
    """Systematic sampling cells of each source GPU (shapes: n_src sources, E cells, k)."""

    tokens: np.ndarray  # (n_src, E) tokens that fell into each cell
    experts: np.ndarray  # (n_src, E, k) the k distinct experts chosen by a token of that cell


def _sample_cells(pi: np.ndarray, k: int, tokens: int, n_src: int, rng: np.random.Generator) -> _Cells:
    E = pi.size
    mass = _integer_mass(pi, k)
    order = rng.permuted(np.broadcast_to(np.arange(E), (n_src, E)), axis=1)  # expert order per source
    start = np.cumsum(mass[order], axis=1) - mass[order]  # arc of expert order[m]: [start, start+mass)
    left = np.sort(start % _Q, axis=1)  # cell c = [left_c, left_{c+1}) of the unit circle (in _Q units)
    width = np.diff(np.concatenate([left, np.full((n_src, 1), _Q)], axis=1), axis=1)
    cell_tokens = rng.multinomial(tokens, width / _Q)  # systematic PPS: u ~ U[0,1) per token
    bounds = np.concatenate([start, np.full((n_src, 1), k * _Q)], axis=1)
    offset = np.arange(n_src, dtype=np.int64)[:, None] * (k * _Q + 1)  # flatten rows for one searchsorted
    points = left[:, :, None] + _Q * np.arange(k) + offset[:, :, None]  # u + t for t = 0..k-1
    pos = np.searchsorted((bounds + offset).ravel(), points.ravel(), side="right").reshape(n_src, E, k)
    pos -= np.arange(n_src)[:, None, None] * (E + 1) + 1
    experts = np.take_along_axis(order[:, :, None], pos, axis=1)
    return _Cells(tokens=cell_tokens, experts=experts)


def _copies_per_expert(cells: _Cells, E: int) -> np.ndarray:
    """(n_src, E) token copies each source sends to each expert."""
    n_src = cells.tokens.shape[0]
    flat = cells.experts + (np.arange(n_src) * E)[:, None, None]
    weights = np.broadcast_to(cells.tokens[:, :, None], flat.shape)
    return np.bincount(flat.ravel(), weights.ravel(), minlength=n_src * E).reshape(n_src, E).astype(np.int64)


def _capacity_clip(copies: np.ndarray, tokens: int, k: int, E: int, capacity_factor) -> np.ndarray:
    if capacity_factor is None:
        return copies
    cf = float(capacity_factor)
    if not np.isfinite(cf) or cf <= 0:
        raise ValueError(f"capacity_factor must be > 0 or None, got {capacity_factor!r}; pass e.g. 1.25")
    capacity = int(np.ceil(cf * tokens * k / E))  # Megatron get_capacity: ceil(tokens*k/E * factor), per source GPU
    return np.minimum(copies, capacity)  # drop the copies above capacity


def expert_loads(num_experts, top_k, tokens, skew="uniform", rng=None, capacity_factor=None) -> np.ndarray:
    """Token copies routed to each expert from one batch of ``tokens`` tokens, shape ``(E,)``.

    Sums to ``tokens * top_k`` without a capacity; with ``capacity_factor`` each expert keeps at
    most ``ceil(capacity_factor * tokens * top_k / E)`` copies and drops the rest.
    """
    E, k = _experts_and_k(num_experts, top_k)
    T = _count("tokens", tokens, 0)
    gen = _rng(rng)
    pi = expert_popularity(E, k, skew, gen)
    copies = _copies_per_expert(_sample_cells(pi, k, T, 1, gen), E)[0]
    return _capacity_clip(copies, T, k, E, capacity_factor)


# ---------------------------------------------------------------- placement and matrices


def expert_placement(num_experts, n_gpus, order=None) -> np.ndarray:
    """GPU of each expert, shape ``(E,)``: ``E / n_gpus`` experts per GPU, contiguous.

    ``order`` (a permutation of ``range(E)``) lays the experts out in that order instead:
    GPU ``g`` holds ``order[g*epg:(g+1)*epg]``.
    """
    E = _count("num_experts", num_experts)
    n = _count("n_gpus", n_gpus)
    if E % n:
        raise ValueError(
            f"num_experts={E} is not a multiple of n_gpus={n}; pass expert_to_gpu explicitly or change either"
        )
    gpu = np.arange(E) // (E // n)
    if order is None:
        return gpu
    order = np.asarray(order)
    if order.shape != (E,) or not np.array_equal(np.sort(order), np.arange(E)):
        raise ValueError(
            f"order must be a permutation of range({E}), got shape {order.shape}; pass rng.permutation({E})"
        )
    placed = np.empty(E, dtype=np.int64)
    placed[order] = gpu
    return placed


def _expert_to_gpu(expert_to_gpu, E: int, n: int) -> np.ndarray:
    if expert_to_gpu is None:
        return expert_placement(E, n)
    e2g = np.asarray(expert_to_gpu)
    if e2g.shape != (E,) or not np.issubdtype(e2g.dtype, np.integer) or e2g.min() < 0 or e2g.max() >= n:
        raise ValueError(f"expert_to_gpu must be {E} integers in [0, {n}), got {expert_to_gpu!r}; see expert_placement")
    return e2g.astype(np.int64)


def _bytes_per_copy(hidden, bytes_per_elem) -> float:
    h = _count("hidden", hidden)
    w = float(bytes_per_elem)
    if not np.isfinite(w) or w <= 0:
        raise ValueError(
            f"bytes_per_elem must be > 0, got {bytes_per_elem!r}; e.g. 2 for BF16, 1.03125 for FP8 with scales"
        )
    return h * w  # one token copy: h elements x w bytes (formulas.md 3.5)


def gpu_traffic_matrix(
    tokens_per_gpu,
    hidden,
    num_experts,
    top_k,
    n_gpus,
    *,
    skew="uniform",
    bytes_per_elem=2,
    rng=None,
    capacity_factor=None,
    expert_to_gpu=None,
) -> np.ndarray:
    """Dispatch bytes ``D[src, dst]`` of one MoE layer, shape ``(n_gpus, n_gpus)``, float64.

    Every GPU routes ``tokens_per_gpu`` tokens to ``top_k`` distinct experts (popularity from
    ``skew``, one draw from ``rng`` per call); each copy is ``hidden * bytes_per_elem`` bytes to
    the GPU hosting the expert (``expert_to_gpu``, default contiguous :func:`expert_placement`).
    """
    E, k = _experts_and_k(num_experts, top_k)
    n = _count("n_gpus", n_gpus)
    T = _count("tokens_per_gpu", tokens_per_gpu, 0)
    copy_bytes = _bytes_per_copy(hidden, bytes_per_elem)
    e2g = _expert_to_gpu(expert_to_gpu, E, n)
    gen = _rng(rng)
    pi = expert_popularity(E, k, skew, gen)
    copies = _capacity_clip(_copies_per_expert(_sample_cells(pi, k, T, n, gen), E), T, k, E, capacity_factor)
    D = np.zeros((n, n))
    np.add.at(D.T, e2g, copies.T.astype(np.float64))  # sum the experts of each destination GPU
    return D * copy_bytes


@dataclass(frozen=True)
class NodeLimitedTraffic:
    """Dispatch bytes under node-limited routing (DeepSeek-V3), all ``(n_gpus, n_gpus)`` float64."""

    copies: np.ndarray
    """One copy per (token, expert) to the expert's GPU: what a flat all-to-all would send."""
    nic: np.ndarray
    """Scale-out bytes: one copy per token per remote target server, GPU (u,i) -> GPU (v,i)."""
    nvlink: np.ndarray
    """Scale-up bytes: copies to experts on the own server, and forwarding (v,i) -> (v,j) on targets."""
    nodes_per_token: float
    """Mean number of distinct servers a token is sent to (own server included)."""

    @property
    def inter_server_bytes(self) -> float:
        """Bytes that cross the scale-out network (NICs) under the node limit."""
        return float(self.nic.sum())


def _check_node_limit(e2s: np.ndarray, S: int, Mn: int, k: int) -> None:
    """Refuse a node limit under which a token's ``k`` experts cannot all be found."""
    per_server = np.bincount(e2s, minlength=S)
    if np.sort(per_server)[::-1][: min(Mn, S)].sum() < k:
        raise ValueError(
            f"a token's top_k={k} experts do not fit on the max_nodes={Mn} servers it may reach "
            f"({per_server.max()} experts per server at most); raise the node limit (model.moe.node_limit) "
            "or put more GPUs in each server"
        )


def _route_source(src: int, experts: np.ndarray, tok: np.ndarray, e2g: np.ndarray, S: int, G: int,
                  copies: np.ndarray, nic: np.ndarray, nvlink: np.ndarray) -> float:
    """Add GPU ``src``'s dispatch to ``copies``, ``nic`` and ``nvlink`` (in place); return its node visits.

    ``experts`` (cells, k) are each cell's experts after the node limit, ``tok`` (cells,) its tokens.
    """
    e2s = e2g // G
    u, i = divmod(src, G)
    gpu = e2g[experts]
    np.add.at(copies[src], gpu, np.broadcast_to(tok[:, None], gpu.shape))
    targets = np.zeros((experts.shape[0], S), dtype=bool)
    np.put_along_axis(targets, e2s[experts], True, axis=1)
    visits = float(tok @ targets.sum(axis=1))
    remote = targets.copy()
    remote[:, u] = False
    nic[src, np.arange(S) * G + i] += tok @ remote  # one IB crossing per token per remote server (formulas.md 7.2)
    relay = np.where(e2s[experts] == u, src, e2s[experts] * G + i)  # GPU that holds the copy before NVLink
    np.add.at(nvlink, (relay.ravel(), gpu.ravel()), np.broadcast_to(tok[:, None], gpu.shape).ravel())
    return visits


def node_limited_traffic(
    tokens_per_gpu,
    hidden,
    num_experts,
    top_k,
    servers,
    gpus_per_server,
    max_nodes,
    *,
    skew="uniform",
    bytes_per_elem=2,
    rng=None,
    expert_to_gpu=None,
) -> NodeLimitedTraffic:
    """Dispatch traffic when each token may reach at most ``max_nodes`` servers (formulas.md 7.2).

    A token whose sampled experts span more servers keeps the ``max_nodes`` servers holding most of
    its experts (ties: larger popularity) and refills its ``top_k`` with the most popular experts of
    those servers (DeepSeek-V3 picks top-k experts within the chosen nodes). It then crosses the NIC
    once per remote target server, to the GPU with its own local index, and is forwarded over NVLink
    to each expert GPU there. Capacity limits are not modelled here.
    """
    E, k = _experts_and_k(num_experts, top_k)
    S = _count("servers", servers)
    G = _count("gpus_per_server", gpus_per_server)
    Mn = _count("max_nodes", max_nodes)
    n = S * G
    T = _count("tokens_per_gpu", tokens_per_gpu, 0)
    copy_bytes = _bytes_per_copy(hidden, bytes_per_elem)
    e2g = _expert_to_gpu(expert_to_gpu, E, n)
    e2s = e2g // G
    _check_node_limit(e2s, S, Mn, k)
    gen = _rng(rng)
    pi = expert_popularity(E, k, skew, gen)
    cells = _sample_cells(pi, k, T, n, gen)
    copies, nic, nvlink = np.zeros((n, n)), np.zeros((n, n)), np.zeros((n, n))
    node_visits = 0.0
    popular = _popular_on_servers(pi, e2s, S, k)
    for src in range(n):
        experts = _limit_nodes(cells.experts[src], pi, e2s, S, Mn, k, popular)  # (E cells, k)
        node_visits += _route_source(src, experts, cells.tokens[src].astype(np.float64), e2g, S, G, copies, nic, nvlink)
    np.fill_diagonal(nvlink, 0.0)  # the relay GPU is the expert's GPU: no hop
    return NodeLimitedTraffic(
        copies=copies * copy_bytes,
        nic=nic * copy_bytes,
        nvlink=nvlink * copy_bytes,
        nodes_per_token=node_visits / max(n * T, 1),
    )


def _limit_nodes(experts, pi, e2s, S: int, Mn: int, k: int, popular: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Repair each cell's expert set (rows) to span at most ``Mn`` servers; shape kept.

    Each cell keeps the ``Mn`` servers holding most of its experts (ties: larger popularity, then lower server),
    and its experts are the first ``k`` of a stable sort of ``-priority``: its chosen experts on kept servers
    (priority ``pi + 2 >= 2``, as ``pi <= 1``; popularities closer than 2's rounding, 4e-16, would tie), then
    the other experts on kept servers (``pi``), popularity ties by index, then the rest (-1) by index.
    ``popular``: ``_popular_on_servers(pi, e2s, S, k)``.
    """
    cells = experts.shape[0]
    at = (np.arange(cells)[:, None] * S + e2s[experts]).ravel()  # bincount adds in order, as np.add.at does
    hits = np.bincount(at, (1.0 + pi[experts] / (k + 1)).ravel(), minlength=cells * S).reshape(cells, S)
    if Mn >= S or ((hits > 0).sum(axis=1) <= Mn).all():
        return experts
    keep_rank = np.argsort(-hits, axis=1, kind="stable")[:, :Mn]  # servers with most chosen experts
    per_server = np.bincount(e2s, minlength=S)
    if (per_server[keep_rank].sum(axis=1) < k).any():  # a refill short of allowed experts: the rest by index
        kept = np.zeros_like(hits, dtype=bool)
        np.put_along_axis(kept, keep_rank, True, axis=1)
        allowed = kept[:, e2s]  # (cells, E): expert on a kept server
        chosen = np.zeros_like(allowed)
        np.put_along_axis(chosen, experts, True, axis=1)
        priority = np.where(allowed, pi + 2.0 * chosen, -1.0)  # keep chosen experts, refill by popularity
        return np.argsort(-priority, axis=1, kind="stable")[:, :k]
    return _refill(experts, keep_rank, e2s, *popular, k)


def _popular_on_servers(pi: np.ndarray, e2s: np.ndarray, S: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each expert's place in the popularity order (ties by index), and each server's ``2k`` most popular experts
    (S, w), -1 padded: the refill's candidates (at most k of them are a cell's own)."""
    by_popularity = np.argsort(-pi, kind="stable")
    position = np.empty(pi.size, dtype=np.int64)
    position[by_popularity] = np.arange(pi.size)
    per_server = np.bincount(e2s, minlength=S)
    on_server = np.full((S, int(min(2 * k, per_server.max()))), -1, dtype=np.int64)
    for server in range(S):
        mine = by_popularity[e2s[by_popularity] == server][: on_server.shape[1]]
        on_server[server, : mine.size] = mine
    return position, on_server


def _refill(experts, keep_rank, e2s, position, on_server, k: int) -> np.ndarray:
    """``_limit_nodes``' first k from a few candidates a cell, not all E experts: its own experts on kept
    servers, then the kept servers' most popular experts it did not choose."""
    E, cells = position.size, experts.shape[0]
    rows = np.arange(cells)[:, None]
    candidates = on_server[keep_rank].reshape(cells, -1)  # (cells, Mn * w), -1 padded
    kept = np.zeros((cells, on_server.shape[0]), dtype=bool)
    kept[rows, keep_rank] = True
    kept_own = kept[rows, e2s[experts]]  # (cells, k): a chosen expert on a kept server
    chosen = np.zeros((cells, E), dtype=bool)
    chosen[rows, experts] = True
    own = chosen[rows, candidates.clip(0)]  # a candidate the cell chose already
    key = np.concatenate([np.where(kept_own, position[experts], 3 * E),
                          np.where((candidates >= 0) & ~own, E + position[candidates.clip(0)], 3 * E)], axis=1)
    pick = np.argsort(key, axis=1, kind="stable")[:, :k]  # keys of the picked are distinct
    return np.take_along_axis(np.concatenate([experts, candidates], axis=1), pick, axis=1)


# ---------------------------------------------------------------- summaries


def pair_skew_matrix(n_gpus, bytes_per_gpu, skew, rng=None) -> np.ndarray:
    """A GPU traffic matrix with Zipf(``skew``) pair sizes, as FAST's synthetic benchmark skews them.

    Each source sends ``bytes_per_gpu`` split over the other GPUs in proportion to ``rank^-skew``,
    ranks in a fresh random order per source: rows are equal, pairs differ by up to ~10x the
    median at skew 0.8, and columns stay balanced on average (no hot expert). Shape (n, n).
    """
    n = _count("n_gpus", n_gpus, 2)
    s = _zipf_exponent(skew)
    gen = _rng(rng)
    # Python's pow, not numpy's: numpy picks a vectorized pow by CPU (AVX-512 or not) whose last bits differ, and
    # a matrix must be the same bytes on every machine (tests/fixtures/speed holds digests of these)
    weight = np.array([float(rank) ** -s for rank in range(1, n)])
    weight /= weight.sum()
    D = np.zeros((n, n))
    for i in range(n):
        peers = np.delete(np.arange(n), i)
        D[i, peers] = float(bytes_per_gpu) * weight[gen.permutation(n - 1)]  # Zipf over peers, random order
    return D


def server_matrix(D, servers, gpus_per_server) -> np.ndarray:
    """Server-level bytes ``(S, S)``: the sum of each ``G x G`` tile of ``D`` (diagonal = intra-server)."""
    D = check_traffic_matrix(D, servers, gpus_per_server)
    S, G = int(servers), int(gpus_per_server)
    return D.reshape(S, G, S, G).sum(axis=(1, 3))


@dataclass(frozen=True)
class SkewStats:
    """How uneven one traffic matrix is (FAST §2 profile figures)."""

    pair_max_over_median: float
    """Largest off-diagonal pair over the median off-diagonal pair (inf if the median is 0)."""
    busiest_row_bytes: float
    """Largest bytes sent by one GPU (row sum, diagonal excluded)."""
    busiest_col_bytes: float
    """Largest bytes received by one GPU (column sum, diagonal excluded)."""


def skew_stats(D) -> SkewStats:
    """Skew figures of a traffic matrix ``D`` (n, n) bytes; the diagonal is ignored."""
    D = check_traffic_matrix(D)
    n = D.shape[0]
    if n < 2:
        raise ValueError(f"D must have at least 2 GPUs for pair statistics, got shape {D.shape}")
    off = D[~np.eye(n, dtype=bool)]
    median = float(np.median(off))
    top = float(off.max())
    ratio = top / median if median > 0 else (np.inf if top > 0 else 1.0)
    body = D - np.diag(np.diag(D))
    return SkewStats(
        pair_max_over_median=ratio,
        busiest_row_bytes=float(body.sum(axis=1).max()),
        busiest_col_bytes=float(body.sum(axis=0).max()),
    )
