"""What the plan needs of MoE routing: how popular each expert is, how hot the busiest GPU gets, and how many
other servers a token reaches (the routing model of a2a/routing.py, whose traffic matrices build on these).

Routing model: expert ``e`` has a popularity weight ``rank(e)^-s`` (Zipf exponent ``s``; ``'uniform'`` is
``s = 0``); each token picks ``k`` distinct experts, expert ``e`` with probability ``pi_e = min(1, c rank(e)^-s)``,
``c`` set so that ``sum(pi) = k``.
"""

from __future__ import annotations

import numpy as np

from stepbudget.inputs.errors import OptionError

__all__ = ["busiest_gpu_factor", "busiest_gpu_factors", "exchanged_share", "expert_popularity",
           "remote_nodes_per_token"]


def _rng(rng) -> np.random.Generator:
    return rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)


def _count(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or int(value) != value or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _zipf_exponent(skew) -> float:
    if isinstance(skew, str):
        if skew != "uniform":
            raise OptionError("skew", f"must be 'uniform' or a Zipf exponent >= 0, got {skew!r}; pass e.g. skew=0.8")
        return 0.0
    s = float(skew)
    if not np.isfinite(s) or s < 0:
        raise OptionError("skew", f"must be 'uniform' or a Zipf exponent >= 0, got {skew!r}; pass e.g. skew=0.8")
    return s


def _experts_and_k(num_experts, top_k) -> tuple[int, int]:
    E = _count("num_experts", num_experts)
    k = _count("top_k", top_k)
    if k > E:
        raise ValueError(
            f"top_k={k} exceeds num_experts={E}: a token's experts are distinct; lower top_k or add experts"
        )
    return E, k


def expert_popularity(num_experts, top_k, skew="uniform", rng=None) -> np.ndarray:
    """Probability that one token routes to each expert, shape ``(E,)``, sums to ``top_k``.

    Zipf weights ``rank^-s`` capped at 1 by water-filling (distinct experts per token). With
    ``rng=None`` expert 0 is the most popular (rank = index + 1); with a Generator or seed the
    ranks are a random permutation, so the hot experts change from call to call.
    """
    E, k = _experts_and_k(num_experts, top_k)
    s = _zipf_exponent(skew)
    weight = np.arange(1, E + 1, dtype=np.float64) ** -s  # Zipf: popularity ∝ 1/rank^s, sorted descending
    tail = np.cumsum(weight[::-1])[::-1]  # tail[m] = sum of weights of ranks m+1..E
    capped = np.arange(k)  # m experts capped at probability 1, the rest share k - m
    scale = (k - capped) / tail[capped]  # water level c for each candidate m
    m = int(np.argmax(weight[capped] * scale <= 1.0 + 1e-12))  # fewest capped experts that keep pi <= 1
    pi = np.minimum(1.0, weight * scale[m])
    pi[:m] = 1.0
    if rng is not None:
        pi = pi[_rng(rng).permutation(E)]
    return pi


def remote_nodes_per_token(num_experts, top_k, nodes, max_nodes=None) -> np.ndarray:
    """Mean number of other servers a token's ``top_k`` experts sit on: its NIC copies when it
    crosses once per target server and NVLink forwards it there (DeepEP; formulas.md 7.2).

    Experts spread evenly over ``nodes`` servers (``E / nodes`` each) and are picked uniformly
    without replacement; under a node limit ``M`` the token first picks ``M`` servers, then its
    experts among theirs (DeepSeek-V3 2.1.2). Servers reached: ``M (1 - C(E_n (M-1), k) / C(E_n M, k))``
    with ``E_n = E / nodes`` (the chance a given chosen server gets none of the k); each is another
    server with probability ``(nodes - 1) / nodes``. Shape: ``nodes`` (and ``max_nodes``) broadcast.
    """
    E, k = _experts_and_k(num_experts, top_k)
    N = np.asarray(nodes, dtype=float)
    M = N if max_nodes is None else np.minimum(N, np.asarray(max_nodes, dtype=float))
    per_node = E / N
    pool, others = per_node * M, per_node * (M - 1)
    none = np.ones_like(pool)
    for i in range(k):  # C(others, k) / C(pool, k) as a product of k ratios
        none = none * np.clip(others - i, 0.0, None) / np.maximum(pool - i, 1.0)
    return M * (1.0 - none) * (N - 1) / N


def busiest_gpu_factor(num_experts, top_k, ep, skew) -> float:
    """Tokens the busiest of ``ep`` GPUs receives over the mean, for Zipf(``skew``) expert popularity.

    Experts are placed round-robin (expert ``e`` on GPU ``e mod ep``), so the hottest GPU holds the
    hottest expert and every ``ep``-th one after it; 1.0 when balanced or ``ep = 1``.
    """
    E, k = _experts_and_k(num_experts, top_k)
    n = _count("ep", ep)
    if E % n:
        raise ValueError(f"ep={n} must divide num_experts={E}: each GPU holds E / ep experts")
    if n == 1 or float(skew) == 0:
        return 1.0
    pi = expert_popularity(E, k, float(skew))
    per_gpu = np.bincount(np.arange(E) % n, weights=pi, minlength=n)  # round-robin placement
    return float(per_gpu.max() * n / k)  # busiest GPU's copies over the mean k / ep


def exchanged_share(moe) -> float:
    """Tokens each GPU computes and exchanges over the dropless mean, where every GPU does alike: the capacity when
    experts are padded to it, or when it is below the mean load (every expert drops down to it); else 1."""
    cf = moe.capacity_factor
    return cf if cf is not None and (moe.pad_to_capacity or cf < 1) else 1.0


def busiest_gpu_factors(moe, ep) -> np.ndarray:
    """Tokens the busiest of ``ep`` GPUs computes over the dropless mean, for an MoE config; shape of ``ep``.

    A stated ``popularity_skew`` gives ``busiest_gpu_factor`` (capped by the capacity). Otherwise the busiest
    expert runs at ``busiest_expert_load`` times the mean and the rest of the tokens spread evenly over the other
    E - 1 experts, E / ep to a GPU: ``1 + (load - 1)(ep - 1)/(E - 1)``, 1 with every expert on one GPU and the
    load itself with one expert a GPU. Padded to capacity, or capped below the mean, every GPU computes
    ``exchanged_share``."""
    ep, share = np.asarray(ep), exchanged_share(moe)
    if share != 1.0:  # padded, or every expert capped below the mean: every GPU alike
        return np.full(ep.shape, share)
    if float(moe.popularity_skew) == 0:
        return 1 + (moe.busiest_expert_load - 1) * (ep - 1) / max(moe.num_experts - 1, 1)
    degrees, where = np.unique(ep, return_inverse=True)
    values = np.array([busiest_gpu_factor(moe.num_experts, moe.top_k, int(d), moe.popularity_skew) for d in degrees])
    if moe.capacity_factor is not None:
        values = np.minimum(values, moe.capacity_factor)
    return values[where].reshape(ep.shape)
