"""The layout space of a job: every valid way to split a model over N GPUs, in chunks of arrays.

A layout is a structure (TP, CP, PP, DP, EP, expert TP, schedule, virtual stages) times a
set of run choices (micro-batch, ZeRO stage / FSDP reshard, recompute, sequence
parallelism, CP kind). Structures are few (hundreds to thousands) and are listed with plain
loops; run choices are a fixed cross product. A flat index ``i`` in ``[0, structures x
choices)`` names one candidate; ``chunks`` turns ranges of it into column arrays, drops the
candidates that are not valid layouts (duplicates and schedule constraints) and hands
``derive`` the rest. Memory stays bounded by the chunk size whatever the space size.

Validity follows the scenario's own checks (inputs/scenario.py): TP divides the query and
KV heads, 2 CP divides the sequence, PP x v divides the layer slots, EP divides the experts
and the non-PP ranks, the batch divides into whole micro-batches, and each schedule's
conditions (budget/pipeline.py). Pruned by rule, not by cost: CP keeps at least
``MIN_TOKENS_PER_CP_RANK`` tokens of a sequence per rank, and micro-batches are powers of
two up to ``MAX_MICRO_BATCH``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from stepbudget.budget.pipeline import schedule_valid
from stepbudget.enums import (CP_KIND_CODES, DP_KIND_CODES, RECOMPUTE_CODES, SCHEDULE_CODES, DataParallel, Recompute,
                              Schedule)
from stepbudget.inputs.layout import shard_groups_split
from stepbudget.inputs.scenario import Scenario

MIN_TOKENS_PER_CP_RANK = 1024
"""CP below 1K tokens per rank leaves attention blocks too small to hide their exchange (Llama 3 runs 8K per rank at 128K)."""
MAX_MICRO_BATCH = 32
"""Largest micro-batch tried (sequences); powers of two."""

STRUCTURE_COLUMNS = ("tp", "cp", "pp", "dp", "ep", "expert_tp", "schedule", "virtual_stages")
CHOICE_COLUMNS = ("micro_batch", "dp_kind", "reshard_after_forward", "recompute", "sequence_parallel", "cp_kind")
COLUMNS = STRUCTURE_COLUMNS + CHOICE_COLUMNS

# ZeRO-3 and FSDP with reshard move the same bytes and keep the same state here: list FSDP only
_DP_CHOICES = (
    (DataParallel.DDP, True), (DataParallel.ZERO1, True), (DataParallel.ZERO2, True),
    (DataParallel.FSDP, True), (DataParallel.FSDP, False),
)
_DDP, _FSDP = DP_KIND_CODES[DataParallel.DDP], DP_KIND_CODES[DataParallel.FSDP]


def _divisors(n: int) -> list[int]:
    """Every divisor of ``n``, ascending: pairs (d, n/d) found up to sqrt(n)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _powers_of_two(limit: int) -> list[int]:
    return [1 << k for k in range(limit.bit_length()) if 1 << k <= limit]


@dataclass(frozen=True)
class Space:
    """The candidates of one search: structures x choices, indexed flat."""

    gpus: int
    global_batch_seqs: int
    structures: np.ndarray
    """Int array (n_structures, 8) in ``STRUCTURE_COLUMNS`` order."""
    choices: np.ndarray
    """Int array (n_choices, 6) in ``CHOICE_COLUMNS`` order (bools as 0/1)."""
    empty_reason: str | None = None
    """Why there are no structures, naming the constraint (None when there are some)."""
    dp_replicas: int = 1
    """The scenario's HSDP replicas: a layout must split its DP groups into shard groups of 2 or more."""
    moe: bool = False

    @property
    def size(self) -> int:
        """Candidates before the validity filter (the flat index range)."""
        return len(self.structures) * len(self.choices)

    def chunks(self, chunk: int = 1 << 17) -> Iterator[tuple[int, dict[str, np.ndarray], int]]:
        """Yield ``(candidates covered, valid layout columns, schedule-invalid count)`` per chunk."""
        n_c = len(self.choices)
        for start in range(0, self.size, chunk):
            i = np.arange(start, min(start + chunk, self.size), dtype=np.int64)
            s, c = self.structures[i // n_c], self.choices[i % n_c]
            cols = {name: s[:, k] for k, name in enumerate(STRUCTURE_COLUMNS)}
            cols |= {name: c[:, k] for k, name in enumerate(CHOICE_COLUMNS)}
            keep, bad_schedule = self._valid(cols)
            yield len(i), {k: v[keep] for k, v in cols.items()}, int(bad_schedule)

    def _valid(self, c: dict[str, np.ndarray]) -> tuple[np.ndarray, int]:
        replicas = c["dp"] * c["micro_batch"]
        whole = self.global_batch_seqs % replicas == 0
        m = self.global_batch_seqs // replicas
        dp_group = c["dp"] * c["cp"]
        distinct = (
            ((c["tp"] > 1) | (c["sequence_parallel"] == 0))  # SP means nothing without TP
            & ((c["cp"] > 1) | (c["cp_kind"] == CP_KIND_CODES["all-gather"]))  # nor a CP kind without CP
            & ((dp_group > 1) | (c["dp_kind"] == _DDP))  # nor sharding over one rank
            & ((c["dp_kind"] == _FSDP) | (c["reshard_after_forward"] == 1))  # reshard is FSDP's switch
        )
        r = self.dp_replicas
        if r > 1:  # every DP group splits into shard groups of two or more, and DDP has nothing to replicate
            distinct &= shard_groups_split(r, c["tp"], c["cp"], c["dp"], c["ep"], c["expert_tp"], self.moe)
            distinct &= c["dp_kind"] != _DDP
        fits_batch = whole & distinct
        sched_ok = schedule_valid(c["schedule"], c["pp"], np.maximum(m, 1), c["virtual_stages"])
        return fits_batch & sched_ok, int(np.count_nonzero(fits_batch & ~sched_ok))


def _pipelines(pp: int, slots: int) -> list[tuple[int, int]]:
    """(schedule code, v) pairs a pipeline of ``pp`` stages can run over ``slots`` layer slots."""
    if pp == 1:
        return [(SCHEDULE_CODES[Schedule.ONE_F_ONE_B], 1)]
    out = [(SCHEDULE_CODES[s], 1) for s in (Schedule.GPIPE, Schedule.ONE_F_ONE_B, Schedule.ZB_H1, Schedule.ZB_H2)]
    if pp % 2 == 0:
        out.append((SCHEDULE_CODES[Schedule.DUALPIPE], 1))
    out += [(SCHEDULE_CODES[Schedule.INTERLEAVED_1F1B], v) for v in _divisors(slots // pp) if v >= 2]
    return out


def layout_space(scenario: Scenario, gpus: int | None = None) -> Space:
    """Every valid layout of ``scenario``'s model and batch on ``gpus`` GPUs (default: the cluster's)."""
    model = scenario.model
    n = gpus or scenario.cluster.gpus
    seqs = scenario.global_batch_seqs
    slots = scenario.pipeline_slots
    kv = model.num_heads if model.mla is not None else model.kv_heads
    tps = [t for t in _divisors(n) if model.num_heads % t == 0 and kv % t == 0]
    cps = [c for c in _divisors(n) if model.seq_len % (2 * c) == 0 and model.seq_len // c >= MIN_TOKENS_PER_CP_RANK] or [1]
    pps = [p for p in _divisors(n) if slots % p == 0]
    experts = model.moe.num_experts if model.moe is not None else 1
    rows, reasons = [], {"batch": 0}
    for tp in tps:
        for cp in cps:
            for pp in pps:
                if n % (tp * cp * pp):
                    continue
                dp = n // (tp * cp * pp)
                if seqs % dp:
                    reasons["batch"] += 1
                    continue
                non_pp = tp * cp * dp
                eps = [e for e in _divisors(experts) if non_pp % e == 0] if experts > 1 else [1]
                for ep in eps:
                    etp = 1 if ep > 1 else tp
                    for sched, v in _pipelines(pp, slots):
                        rows.append((tp, cp, pp, dp, ep, etp, sched, v))
    structures = np.array(rows, dtype=np.int64).reshape(-1, len(STRUCTURE_COLUMNS))
    empty = None
    g = scenario.cluster.gpus_per_node
    if n > g and n % g:
        empty = f"gpus: {n} GPUs do not fill whole nodes of {g}; use a multiple of {g}"
    elif not rows:
        if not tps:
            empty = f"no TP degree divides both {n} GPUs and the {model.num_heads} heads; use a GPU count with a common factor"
        elif reasons["batch"]:
            smallest = min(n // (t * c * p) for t in tps for c in cps for p in pps if n % (t * c * p) == 0)
            empty = (f"batch: no DP degree on {n} GPUs divides the {seqs} sequences per step (smallest DP is "
                     f"{smallest}); use a global batch that is a multiple of the DP degree or fewer GPUs")
        else:
            empty = (f"no split of {model.num_layers} layers and {model.num_heads} heads uses exactly {n} GPUs; "
                     "try another GPU count")
    mbs = [b for b in _powers_of_two(MAX_MICRO_BATCH) if b <= seqs]
    choices = np.array(
        [
            (mb, DP_KIND_CODES[kind], int(reshard), RECOMPUTE_CODES[rec], sp, cpk)
            for mb in mbs
            for kind, reshard in _DP_CHOICES
            for rec in (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL)  # selective-op: one framework's policy
            for sp in (1, 0)
            for cpk in CP_KIND_CODES.values()
        ],
        dtype=np.int64,
    )
    return Space(gpus=n, global_batch_seqs=seqs, structures=structures, choices=choices, empty_reason=empty,
                 dp_replicas=scenario.layout.dp_replicas, moe=scenario.model.moe is not None)
