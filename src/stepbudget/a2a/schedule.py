"""FAST-style all-to-all schedule: balance over scale-up, pad, Birkhoff-von Neumann stages.

Steps 1-5 of formulas.md 7.3 ([FAST], [FAST-code]). ``D`` is the GPU-level dispatch matrix
``(S*G, S*G)`` in bytes (GPU ``g`` = server ``g // G``, local index ``g % G``); the server matrix
``M`` is ``(S, S)`` in per-GPU bytes; stages are one-to-one server permutations with a weight.

Exactness: the decomposition works in whole units (``unit_bytes``, default 1 byte) on int64, so
``sum_k w_k * P_k`` rebuilds the padded matrix exactly. Greedy BvN with *any* perfect matching uses
at most ``e - 2n + c + 1 <= (n-1)^2 + 1`` stages (``e`` positive entries, ``c`` connected components
of the support): every stage but the last removes at least one edge more than it adds components (a
component that splits into ``q`` pieces loses at least ``q`` edges, since the cut edges all carry the
stage weight and form a connected Eulerian graph on the pieces)
[derived for this module; the bound is Farahat-Mirsky's, formulas.md 7.3].

Matchings (``Matching``): ``HEAVY`` minimises the sum of ``1/M[i, j]`` over the support (a Jonker-Volgenant
assignment each stage), a smooth stand-in for the max-min matching; ``BOTTLENECK`` the exact max-min matching
(largest stage weight; augmenting paths with a rising threshold); ``ANY`` the first perfect matching Kuhn's
augmenting paths find, as FAST-code's ``hungarian``. HEAVY is the default: on Zipf-0.8 loads it needs as few
stages as BOTTLENECK (within a few %) and 2-6x fewer than ANY from 16 servers up; at 4 servers all three give
the same stage counts.

The loops (row sums, padding, every matching) are written once, in _compiled.py: ``fast_schedule`` is one call
of them, compiled by numba, or run as plain Python where numba is not installed (the same stages, slower).
Row sums of entries that are not whole bytes below 2^52 are numpy's, whose summation order sets their last bit.
Figures: benchmarks/bench_schedule.py; references: tests/oracles/matching.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property, lru_cache

from types import ModuleType

import numpy as np

from .routing import check_traffic_matrix

__all__ = [
    "Balanced",
    "Matching",
    "FastSchedule",
    "balance_intra_server",
    "bvn_decompose",
    "fast_schedule",
    "min_stages",
    "pad_to_equal_line_sums",
]


class Matching(StrEnum):
    """How each BvN stage picks its perfect matching on the support of the remaining matrix."""

    HEAVY = "heavy"
    """Min sum of 1/weight on the support (a minimum-cost assignment): few stages. Default."""
    BOTTLENECK = "bottleneck"
    """Max-min matching: the largest possible stage weight each time."""
    ANY = "any"
    """Any perfect matching (Kuhn augmenting paths, warm-started), as in FAST-code."""


# ---------------------------------------------------------------- step 1-2: balance


@lru_cache(maxsize=64)
def _ones(G: int) -> np.ndarray:
    ones = np.ones(G)
    ones.flags.writeable = False
    return ones


@lru_cache(maxsize=64)
def _off_diagonal(S: int) -> np.ndarray:
    mask = ~np.eye(S, dtype=bool)
    mask.flags.writeable = False
    return mask


@dataclass(frozen=True)
class Balanced:
    """Result of intra-server balancing (formulas.md 7.3 steps 1-2)."""

    server_matrix: np.ndarray
    """(S, S) int64 per-GPU bytes ``tau_uv`` each GPU of server u holds for server v; diagonal 0."""
    row_bytes: np.ndarray
    """(S, G, S) int64 bytes GPU i of server u sends to server v before balancing; 0 for v = u."""

    @cached_property
    def _gap(self) -> np.ndarray:
        return self.row_bytes - self.server_matrix[:, None, :]

    @cached_property
    def moved_bytes(self) -> np.ndarray:
        """(S, G, S) int64 bytes GPU i of server u hands to peers for server v (its excess over tau)."""
        return np.maximum(self._gap, 0)

    @cached_property
    def received_bytes(self) -> np.ndarray:
        """(S, G, S) int64 bytes GPU i of server u takes from peers for server v.

        Deficits are filled in local-index order, as FAST-code ``balance_one_server`` walks them.
        """
        deficit = np.maximum(-self._gap, 0) * _off_diagonal(self.server_matrix.shape[0])[:, None, :]
        before = np.cumsum(deficit, axis=1) - deficit  # deficits of lower local indices, filled first
        return np.clip(self.moved_bytes.sum(axis=1, keepdims=True) - before, 0, deficit)

    @property
    def scale_up_send_bytes(self) -> np.ndarray:
        """(S*G,) int64 bytes each GPU sends over scale-up to balance."""
        return self.moved_bytes.sum(axis=2).ravel()

    @property
    def scale_up_recv_bytes(self) -> np.ndarray:
        """(S*G,) int64 bytes each GPU receives over scale-up to balance."""
        return self.received_bytes.sum(axis=2).ravel()


_loaded: list[ModuleType] = []  # _compiled, once imported


def _kernels() -> ModuleType:
    """The loops, imported on the first schedule: numba loads only when one is computed."""
    if not _loaded:
        from . import _compiled

        _loaded.append(_compiled)
    return _loaded[0]


def _checked(D, servers, gpus_per_server) -> tuple[np.ndarray, int, int]:
    """``D`` as float64 with its shape checked (its values are checked by whoever reads them)."""
    A = np.asarray(D, dtype=np.float64)
    S, G = servers, gpus_per_server
    if type(S) is int and type(G) is int and S >= 1 and G >= 1 and A.ndim == 2 and A.shape == (S * G, S * G):
        return A, S, G
    check_traffic_matrix(A, S, G)  # raises, naming the argument, unless the shape was fine after all
    return A, int(S), int(G)


def _rows_numpy(A: np.ndarray, S: int, G: int) -> np.ndarray:
    """Row bytes (see :class:`Balanced`) where the loops' sums would not be exact: entries not whole or 2^52 and up."""
    check_traffic_matrix(A, S, G)  # raises on a negative, NaN or infinite entry
    r = np.ceil(A.reshape(-1, G) @ _ones(G)).astype(np.int64).reshape(S, G, S)  # matvec: 6x faster than .sum(axis)
    r *= _off_diagonal(S)[:, None, :]  # u == v is the intrinsic (intra-server) all-to-all
    return r


def balance_intra_server(D, servers, gpus_per_server) -> Balanced:
    """Even out, over scale-up, the bytes each GPU of a server sends to each other server.

    For each ordered pair ``u != v`` the target is ``tau_uv = ceil(sum_i r_i / G)`` (``r_i`` the
    bytes GPU i of u has for v, rounded up to whole bytes); GPUs above it hand the excess to GPUs
    below it, keeping each byte's final destination (FAST-code ``balance_one_server``).
    Shapes: ``D`` (S*G, S*G) bytes; see :class:`Balanced` for the results.
    """
    A, S, G = _checked(D, servers, gpus_per_server)
    kernels = _kernels()
    status, r, tau = kernels.balance(A, G)
    if status != kernels.OK:
        r = _rows_numpy(A, S, G)
        tau = kernels.server_units(r, 1)[0]
    return Balanced(server_matrix=tau, row_bytes=r)


# ---------------------------------------------------------------- step 3: padding


def _whole_square(M, name: str) -> np.ndarray:
    A = np.asarray(M)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"{name} must be a square (n, n) matrix, got shape {A.shape}")
    if A.dtype.kind not in "iu":
        if A.dtype.kind not in "fb" or (A.size and not (np.isfinite(A).all() and (A == np.round(A)).all())):
            raise ValueError(f"{name} must hold whole units (integers); ceil it or pick a coarser unit_bytes")
    if A.size and A.min() < 0:
        raise ValueError(f"{name} must be >= 0, got min {A.min()}; pass bytes or units, not differences")
    return A.astype(np.int64, copy=False)


def pad_to_equal_line_sums(M) -> np.ndarray:
    """Pad a non-negative integer (n, n) matrix so every row and column sums to ``Lambda``.

    ``Lambda`` is the largest line sum. Walking deficit rows ``i`` and deficit columns ``j`` in
    index order, add ``min(row deficit, column deficit)`` to ``M[i, j]``; padded units are idle
    time, not traffic. Returns a new int64 matrix.
    """
    padded = _whole_square(M, "M").copy()
    if padded.size:
        _kernels().pad(padded)
    return padded


def min_stages(P) -> int:
    """Lower bound on the stages of any BvN decomposition of ``P``: most positive entries in a line."""
    support = _whole_square(P, "P") > 0
    return int(max(support.sum(axis=0).max(initial=0), support.sum(axis=1).max(initial=0)))


# ---------------------------------------------------------------- step 4: BvN decomposition


def _matching(value) -> Matching:
    if value.__class__ is Matching:
        return value
    try:
        return Matching(value)
    except ValueError:
        raise ValueError(f"matching must be one of {[m.value for m in Matching]}, got {value!r}") from None


def _stages(padded: np.ndarray, lam: int, how: Matching) -> tuple[np.ndarray, np.ndarray]:
    """``(perms (K, n), weights (K,))`` of the padded int64 matrix (consumed), line sums ``lam``."""
    kernels = _kernels()
    if how is Matching.HEAVY:
        return kernels.heavy_stages(padded, lam)
    return kernels.kuhn_stages(padded, lam, how is Matching.BOTTLENECK)


def bvn_decompose(P, matching: Matching | str = Matching.HEAVY) -> list[tuple[np.ndarray, int]]:
    """Birkhoff-von Neumann stages of an integer matrix with equal line sums.

    Returns ``[(perm, w), ...]``: ``perm`` an int64 array of length n (row i -> column perm[i]),
    ``w`` a positive int; ``sum_k w_k * P_k == P`` exactly, ``sum_k w_k == Lambda``, at most
    ``(n-1)^2 + 1`` stages. Pad first with :func:`pad_to_equal_line_sums`.
    """
    A = _whole_square(P, "P")
    how = _matching(matching)
    if A.size == 0:
        return []
    rows, cols = A.sum(axis=1), A.sum(axis=0)
    if (rows != rows[0]).any() or (cols != rows[0]).any():
        raise ValueError(
            f"P must have equal line sums, got rows {rows.tolist()} and columns {cols.tolist()}; "
            "pad it first with pad_to_equal_line_sums(P)"
        )
    perms, weights = _stages(A.copy(), int(rows[0]), how)
    return list(zip(perms, weights.tolist()))


# ---------------------------------------------------------------- the schedule


@dataclass(frozen=True)
class FastSchedule:
    """A FAST-style schedule of one all-to-all (formulas.md 7.3 steps 1-5)."""

    balanced: Balanced
    """Server matrix tau (per-GPU bytes) and scale-up bytes moved per GPU to get it."""
    unit_bytes: int
    """Bytes per unit of ``padded`` and ``weights``."""
    padded: np.ndarray
    """(S, S) int64 ``ceil(tau / unit_bytes)`` padded to equal line sums ``line_sum`` (units)."""
    perms: np.ndarray
    """(K, S) int64: in stage k every GPU i of server u sends to GPU i of server perms[k, u]."""
    weights: np.ndarray
    """(K,) int64 units each GPU sends in each stage; sums to ``line_sum``."""

    @property
    def line_sum(self) -> int:
        """Lambda in units: scale-out units each busiest GPU sends (formulas.md 7.3 step 3)."""
        return int(self.weights.sum())

    @property
    def stages(self) -> int:
        """Number of one-to-one stages K."""
        return int(self.weights.size)


def fast_schedule(
    D,
    servers,
    gpus_per_server,
    *,
    matching: Matching | str = Matching.HEAVY,
    unit_bytes: int = 1,
) -> FastSchedule:
    """Schedule one all-to-all of ``D`` (S*G, S*G) bytes on S servers of G GPUs (formulas.md 7.3).

    Balance each server's GPUs over scale-up, build the per-GPU server matrix, round it up to whole
    ``unit_bytes`` (a coarser unit cuts stages when latency dominates; formulas.md 7.3 step 7), pad
    it to equal line sums and decompose it into one-to-one stages.
    """
    unit = int(unit_bytes)
    if unit != unit_bytes or unit < 1:
        raise ValueError(f"unit_bytes must be a whole number of bytes >= 1, got {unit_bytes!r}")
    how = _matching(matching)
    A, S, G = _checked(D, servers, gpus_per_server)
    kernels = _kernels()
    unit_cap = min(unit, _UNIT_CAP)  # int64: where every tau is one unit anyway
    if how is Matching.HEAVY:  # one call: row sums, server matrix, units, padding, every stage
        status, r, tau, padded, perms, weights = kernels.heavy_schedule(A, G, unit_cap)
    else:
        status, r, tau, padded, perms, weights = kernels.kuhn_schedule(A, G, unit_cap, how is Matching.BOTTLENECK)
    if status != kernels.OK:  # numpy's row sums, then the same loops
        r = _rows_numpy(A, S, G)
        tau, padded = kernels.server_units(r, unit_cap)  # ceil to whole units (FAST-code Matrix::scale)
        lam = kernels.pad(padded)
        perms, weights = _stages(padded.copy(), lam, how)
    return FastSchedule(balanced=Balanced(tau, r), unit_bytes=unit, padded=padded, perms=perms, weights=weights)


_UNIT_CAP = 1 << 62  # tau < 2^53: a unit this large or larger makes each positive tau one unit
