"""The layout space of a job: every valid way to split a model over N GPUs, in chunks of arrays.

A layout is a structure (TP, CP, PP, DP, EP, expert TP, schedule, virtual stages) times a
set of run choices (micro-batch, ZeRO stage / FSDP reshard, recompute, sequence
parallelism, CP kind). Structures are few (hundreds to thousands) and are listed with plain
loops; run choices are a fixed cross product. A flat index ``i`` in ``[0, structures x
choices)`` names one candidate; ``chunks`` turns ranges of it into column arrays, drops the
candidates that are not valid layouts (duplicates and schedule constraints) and hands
``derive`` the rest. Memory stays bounded by the chunk size whatever the space size.

Validity follows the scenario's own checks (inputs/scenario.py): TP divides the query and
KV heads, 2 CP divides the sequence, PP x v divides the layer slots (with ``uneven_stages``, or
the uneven split of plan/derive.py ``uneven_split`` places them), EP divides the experts
and the non-PP ranks, the batch divides into whole micro-batches, and each schedule's
conditions (budget/pipeline.py). Pruned by rule, not by cost: CP keeps at least
``MIN_TOKENS_PER_CP_RANK`` tokens of a sequence per rank, and micro-batches are powers of
two up to ``MAX_MICRO_BATCH``.

Sized before work: a GPU count past ``MAX_SEARCH_GPUS`` is refused before its divisors are
listed, and a space past ``MAX_CANDIDATES`` as soon as its listing passes that size, before
any layout is evaluated; only splits whose degrees multiply to a divisor of the GPU count
are visited.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Iterator

import numpy as np

from stepbudget.inputs.errors import OptionError
from stepbudget.budget.pipeline import schedule_valid
from stepbudget.enums import (CP_KIND_CODES, DP_KIND_CODES, RECOMPUTE_CODES, SCHEDULE_CODES, DataParallel, Recompute,
                              Schedule)
from stepbudget.inputs.layout import shard_groups_split
from stepbudget.inputs.scenario import Scenario, ScenarioError
from stepbudget.plan.derive import uneven_split

MIN_TOKENS_PER_CP_RANK = 1024
"""CP below 1K tokens per rank leaves attention blocks too small to hide their exchange (Llama 3 runs 8K per rank at 128K)."""
MAX_MICRO_BATCH = 32
"""Largest micro-batch tried (sequences); powers of two."""
MAX_SEARCH_GPUS = 1 << 24
"""Largest GPU count a search takes (16,777,216): 16 times the largest cluster built or announced (about 1 M GPUs).
Its divisors are found in sqrt(16.8 M) = 4,096 steps; a count past int64 would take hours."""
MAX_CANDIDATES = 1 << 22
"""Most candidate layouts (structures x run choices, 4,194,304) one search evaluates: about 1.7 M candidates (0.9 M
valid layouts) a second on one busy core (DeepSeek-V3's 3.3 M on 8,192 GPUs take 1.9 s on a shared 2-core machine),
so the largest allowed search ends in a few seconds. The largest shipped preset's space is
DeepSeek-V3's, 3.3 M, at 8,192 GPUs; a GPU count whose many divisors are shared by the heads, the sequence, the
layers and the batch (14,414,400 with 720,720 heads and layers) would list billions."""

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
        choices = {name: np.ascontiguousarray(self.choices[:, k]) for k, name in enumerate(CHOICE_COLUMNS)}
        for start in range(0, self.size, chunk):
            end = min(start + chunk, self.size)
            first, last = start // n_c, (end - 1) // n_c  # the structures the flat range [start, end) touches
            rows = self.structures[first:last + 1]
            keep, bad_schedule = self._valid(rows, start - first * n_c, end - last * n_c)
            cols = {name: np.repeat(rows[:, k], keep.sum(axis=1)) for k, name in enumerate(STRUCTURE_COLUMNS)}
            picked = np.nonzero(keep)[1]  # row-major: the flat order of the candidates
            cols |= {name: choices[name][picked] for name in CHOICE_COLUMNS}
            yield end - start, cols, bad_schedule

    def _valid(self, rows: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, int]:
        """(valid, schedule-invalid count) over the grid of structures ``rows`` x every choice, of the candidates
        from choice ``lo`` of the first row to choice ``hi`` (exclusive) of the last."""
        s = {name: rows[:, k, None] for k, name in enumerate(STRUCTURE_COLUMNS)}  # structures down, choices across
        c = {name: self.choices[None, :, k] for k, name in enumerate(CHOICE_COLUMNS)}
        in_range = np.ones((len(rows), len(self.choices)), dtype=bool)
        in_range[0, :lo] = False
        in_range[-1, hi:] = False
        # the batch and schedule rules see a choice through its micro-batch only: checked once per micro-batch
        mbs, mb_of = np.unique(self.choices[:, CHOICE_COLUMNS.index("micro_batch")], return_inverse=True)
        replicas = s["dp"] * mbs[None, :]
        whole = self.global_batch_seqs % replicas == 0
        m = self.global_batch_seqs // replicas
        sched_ok = schedule_valid(s["schedule"], s["pp"], np.maximum(m, 1), s["virtual_stages"])[:, mb_of]
        dp_group = s["dp"] * s["cp"]
        distinct = (
            ((s["tp"] > 1) | (c["sequence_parallel"] == 0))  # SP means nothing without TP
            & ((s["cp"] > 1) | (c["cp_kind"] == CP_KIND_CODES["all-gather"]))  # nor a CP kind without CP
            & ((dp_group > 1) | (c["dp_kind"] == _DDP))  # nor sharding over one rank
            & ((c["dp_kind"] == _FSDP) | (c["reshard_after_forward"] == 1))  # reshard is FSDP's switch
        )
        r = self.dp_replicas
        if r > 1:  # every DP group splits into shard groups of two or more, and DDP has nothing to replicate
            distinct &= shard_groups_split(r, s["tp"], s["cp"], s["dp"], s["ep"], s["expert_tp"], self.moe)
            distinct &= c["dp_kind"] != _DDP
        fits_batch = whole[:, mb_of] & distinct & in_range
        return fits_batch & sched_ok, int(np.count_nonzero(fits_batch & ~sched_ok))


def _pipelines(pp: int, slot_divisors: np.ndarray, uneven: bool = False) -> list[tuple[int, int]]:
    """(schedule code, v) pairs a pipeline of ``pp`` stages can run over the layer slots whose divisors are
    ``slot_divisors`` (ascending; the last is the slot count): v >= 2 chunks that divide the slots per stage,
    and with ``uneven`` also those the uneven split places (plan/derive.py ``uneven_split``)."""
    if pp == 1:
        return [(SCHEDULE_CODES[Schedule.ONE_F_ONE_B], 1)]
    out = [(SCHEDULE_CODES[s], 1) for s in (Schedule.GPIPE, Schedule.ONE_F_ONE_B, Schedule.ZB_H1, Schedule.ZB_H2)]
    if pp % 2 == 0:
        out.append((SCHEDULE_CODES[Schedule.DUALPIPE], 1))
    slots = int(slot_divisors[-1])
    even = (slots % (pp * slot_divisors) == 0) & (slot_divisors >= 2)
    if uneven:  # every rank holds whole chunks, so v divides the layers: v is among the slot divisors
        even |= uneven_split(slots, pp, slot_divisors)[3] & (slot_divisors >= 2)
    out += [(SCHEDULE_CODES[Schedule.INTERLEAVED_1F1B], v) for v in slot_divisors[even].tolist()]
    return out


def splits_unevenly(scenario: Scenario, uneven_stages: bool) -> bool:
    """Whether a search of ``scenario`` tries uneven splits: asked for, no embedding/loss slot (Megatron refuses
    uneven first/last stages beside them, transformer_block.py get_num_layers_to_build), and compute timed by
    the operator model: a stated rate times the FLOPs of an average rank, so the busiest rank's extra layers
    would cost nothing and every uneven split would look as fast as an even one."""
    lay, cl = scenario.layout, scenario.cluster
    stated_rate = bool(cl.achieved_flops or cl.achieved_fraction)
    return uneven_stages and not (lay.embedding_in_pipeline_split or lay.loss_in_pipeline_split or stated_rate)


def check_search_gpus(gpus: int | None, cluster_gpus: int) -> int:
    """The GPU count a search enumerates: ``gpus``, else the cluster's; ScenarioError past ``MAX_SEARCH_GPUS``.

    Checked before any divisor is listed: the divisors of a count take sqrt(count) steps to find.
    """
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, (int, np.integer)) or gpus < 1):
        raise OptionError("gpus", f"{gpus!r} is not a GPU count; give a positive integer")
    n = int(gpus) if gpus is not None else cluster_gpus
    name = "gpus" if gpus is not None else "cluster.gpus"
    if n > MAX_SEARCH_GPUS:
        raise OptionError(name, f"a search enumerates at most {MAX_SEARCH_GPUS:,} GPUs (16 times the largest "
                            f"cluster built), got {n:,}; search fewer GPUs")
    return n


def _choices(seqs: int) -> np.ndarray:
    """The run choices of every structure, in ``CHOICE_COLUMNS`` order."""
    mbs = [b for b in _powers_of_two(MAX_MICRO_BATCH) if b <= seqs]
    return np.array(
        [
            (mb, DP_KIND_CODES[kind], int(reshard), RECOMPUTE_CODES[rec], sp, cpk)
            for mb in mbs
            for kind, reshard in _DP_CHOICES
            for rec in (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL)  # selective-op: one framework's policy
            for sp in (1, 0)
            for cpk in CP_KIND_CODES.values()
        ],
        dtype=np.int64,
    ).reshape(-1, len(CHOICE_COLUMNS))


@dataclass
class _Enumerated:
    """What listing the structures found: the rows, and why splits were skipped."""

    rows: list[tuple[int, ...]]
    batch_misses: int = 0
    """Splits whose DP degree does not divide the batch."""
    smallest_dp: int | None = None
    """The smallest DP degree of any split (for the batch message)."""


def _splits(n: int, tps: list[int], cps: list[int], pps: np.ndarray) -> Iterator[tuple[int, int, int]]:
    """Every (tp, cp, pp) of the candidate degrees whose product divides ``n``: only those are visited."""
    for tp in tps:
        for cp in cps:
            if (n // tp) % cp:
                continue
            rest = n // (tp * cp)
            for pp in pps[rest % pps == 0].tolist():
                yield tp, cp, pp


def _structures(scenario: Scenario, n: int, tps: list[int], cps: list[int], pps: list[int], limit: int,
                uneven: bool = False) -> _Enumerated:
    """Structure rows of the space, at most ``limit`` + 1 of them (more means the space is too big to search)."""
    model, seqs, slots = scenario.model, scenario.global_batch_seqs, scenario.pipeline_slots
    experts = np.array(_divisors(model.moe.num_experts) if model.moe is not None else [1], dtype=np.int64)
    slot_divisors = np.array(_divisors(slots), dtype=np.int64)
    pipelines: dict[int, list[tuple[int, int]]] = {}
    found = _Enumerated(rows=[])
    for tp, cp, pp in _splits(n, tps, cps, np.array(pps, dtype=np.int64)):
        dp = n // (tp * cp * pp)
        found.smallest_dp = dp if found.smallest_dp is None else min(found.smallest_dp, dp)
        if seqs % dp:
            found.batch_misses += 1
            continue
        non_pp = tp * cp * dp
        eps = experts[non_pp % experts == 0].tolist() if len(experts) > 1 else [1]
        if pp not in pipelines:
            pipelines[pp] = _pipelines(pp, slot_divisors, uneven)
        for ep in eps:
            etp = 1 if ep > 1 else tp
            found.rows += [(tp, cp, pp, dp, ep, etp, sched, v) for sched, v in pipelines[pp]]
        if len(found.rows) > limit:
            break
    return found


def _empty_reason(scenario: Scenario, n: int, tps: list[int], found: _Enumerated) -> str | None:
    """Why the space has no structure, naming the constraint (None when it has some)."""
    model, seqs = scenario.model, scenario.global_batch_seqs
    if found.rows:
        return None
    if not tps:
        return f"no TP degree divides both {n} GPUs and the {model.num_heads} heads; use a GPU count with a common factor"
    if found.batch_misses:
        return (f"batch: no DP degree on {n} GPUs divides the {seqs} sequences per step (smallest DP is "
                f"{found.smallest_dp}); use a global batch that is a multiple of the DP degree or fewer GPUs")
    return (f"no split of {model.num_layers} layers and {model.num_heads} heads uses exactly {n} GPUs; "
            "try another GPU count")


def layout_space(scenario: Scenario, gpus: int | None = None, uneven_stages: bool = False) -> Space:
    """Every valid layout of ``scenario``'s model and batch on ``gpus`` GPUs (default: the cluster's);
    ``uneven_stages`` adds the pp and v that do not divide the layers, split by plan/derive.py ``uneven_split``
    (not beside the embedding/loss slots, which Megatron refuses with an uneven split).

    ScenarioError before any work when the GPU count is past ``MAX_SEARCH_GPUS``, and before any layout is
    evaluated when the space holds more than ``MAX_CANDIDATES``.
    """
    model = scenario.model
    n = check_search_gpus(gpus, scenario.cluster.gpus)
    seqs = scenario.global_batch_seqs
    slots = scenario.pipeline_slots
    choices = _choices(seqs)
    none = Space(gpus=n, global_batch_seqs=seqs, structures=np.empty((0, len(STRUCTURE_COLUMNS)), dtype=np.int64),
                 choices=choices, dp_replicas=scenario.layout.dp_replicas, moe=model.moe is not None)
    g = scenario.cluster.gpus_per_node
    if n > g and n % g:  # before listing anything: no layout can fill part of a node
        return replace(none, empty_reason=f"gpus: {n} GPUs do not fill whole nodes of {g}; use a multiple of {g}")
    divisors = _divisors(n)
    kv = model.num_heads if model.mla is not None else model.kv_heads
    tps = [t for t in divisors if model.num_heads % t == 0 and kv % t == 0]
    cps = [c for c in divisors if model.seq_len % (2 * c) == 0 and model.seq_len // c >= MIN_TOKENS_PER_CP_RANK] or [1]
    uneven = splits_unevenly(scenario, uneven_stages)
    # v >= 2 rounds the middle ranks' share up further and leaves the ends less: a pp v = 1 cannot split, no v can
    pps = [p for p in divisors if slots % p == 0 or (uneven and bool(uneven_split(slots, p, 1)[3]))]
    limit = MAX_CANDIDATES // len(choices)
    found = _structures(scenario, n, tps, cps, pps, limit, uneven)
    if len(found.rows) > limit:
        name = "gpus" if gpus is not None else "cluster.gpus"
        raise ScenarioError(
            f"{name}: {n:,} GPUs split {model.name}'s heads, sequence, layers{', experts' if model.moe else ''} and "
            f"batch into more than {MAX_CANDIDATES:,} candidate layouts, the most one search evaluates (about half a "
            "minute); search a GPU count with fewer divisors, e.g. a power of two"
        )
    structures = np.array(found.rows, dtype=np.int64).reshape(-1, len(STRUCTURE_COLUMNS))
    return replace(none, structures=structures, empty_reason=_empty_reason(scenario, n, tps, found))
