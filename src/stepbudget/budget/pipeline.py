"""Pipeline schedules: bubble time, activations in flight, layout validity (formulas.md 4).

Every function is one formula over numpy arrays: the arguments broadcast against each
other once, at the door, and the result has the broadcast shape (0-d for scalar inputs).
The schedule travels as an integer code (``SCHEDULE_CODES``) so that a sweep over
millions of layouts can carry it as an ``int`` array; a ``Schedule`` value or its string
is accepted wherever a code is.

Symbols (formulas.md 0 and 4):

| symbol | meaning | unit |
|---|---|---|
| ``p`` | pipeline stages (pipeline-parallel degree) | - |
| ``m`` | micro-batches per step per pipeline | - |
| ``v`` | model chunks per pipeline rank (interleaving); 1 for every other schedule | - |
| ``t_f`` | forward time of one micro-batch on one stage (all ``v`` chunks of a rank) | s |
| ``t_b`` | full backward time of the same (input gradient + weight gradient) | s |
| ``t_w`` | weight-gradient part of ``t_b`` (the ZB papers' ``T_W``, DeepSeek's ``W``) | s |
| ``t_fb`` | DualPipe's overlapped forward-and-backward chunk (DeepSeek's ``F&B``) | s |

Notation bridge: the zero-bubble paper's ``T_F, T_B, T_W`` are ``t_f, t_b - t_w, t_w``;
DeepSeek-V3's ``F, B, W`` are ``t_f, t_b, t_w``.

Defaults taken where a time is not given (state them in any report that uses them):
``t_b = 2 t_f`` (Narayanan21 §2.2) and ``t_w = t_b / 2`` (T_B = T_W, the zero-bubble
paper's ``T_F = T_B = T_W`` setting), and ``F&B = F + B`` for DualPipe (the overlap
hides all-to-all communication, not compute, so the pair costs the sum of its parts).
"""

from __future__ import annotations

import numpy as np

from stepbudget.enums import DUALPIPE_CODE, SCHEDULE_BY_CODE, SCHEDULE_CODES, Schedule, schedule_code
from stepbudget.plan.operators import BACKWARD_RATIO, W_FRAC

__all__ = [
    "SCHEDULE_REASONS",
    "BACKWARD_RATIO",
    "W_FRAC",
    "bubble_s",
    "bubble_fraction",
    "step_compute_s",
    "inflight_microbatches",
    "dualpipe_unpaired",
    "unpaired_share",
    "schedule_reason",
    "schedule_valid",
    "check_schedule",
]

_GPIPE = SCHEDULE_CODES[Schedule.GPIPE]
_1F1B = SCHEDULE_CODES[Schedule.ONE_F_ONE_B]
_INTERLEAVED = SCHEDULE_CODES[Schedule.INTERLEAVED_1F1B]
_ZB_H1 = SCHEDULE_CODES[Schedule.ZB_H1]
_ZB_H2 = SCHEDULE_CODES[Schedule.ZB_H2]


# --- bubble -------------------------------------------------------------------------------


def bubble_s(schedule, p, m, v, t_f, t_b, t_w=None, *, t_fb=None) -> np.ndarray:
    """Idle time of one pipeline rank per step, in seconds; shape: all arguments broadcast.

    ``t_f``, ``t_b``: forward and full-backward seconds of one micro-batch on one stage.
    ``t_w``: weight-gradient seconds inside ``t_b`` (default ``W_FRAC * t_b``).
    ``t_fb``: DualPipe's overlapped forward+backward chunk seconds (default ``t_f + t_b``).
    ``m`` does not enter the closed forms; it broadcasts into the shape.
    """
    if t_w is None:
        t_w = W_FRAC * np.asarray(t_b, dtype=float)
    if t_fb is None:
        t_fb = np.asarray(t_f, dtype=float) + np.asarray(t_b, dtype=float)
    code, p, m, v, F, B, W, FB = np.broadcast_arrays(
        schedule_code(schedule), *(np.asarray(x, dtype=float) for x in (p, m, v, t_f, t_b, t_w, t_fb))
    )
    T_F, T_B, T_W = F, B - W, W  # zero-bubble paper's split of the backward
    zero = np.zeros_like(F)
    return np.select(
        [code == _GPIPE, code == _1F1B, code == _INTERLEAVED, code == _ZB_H1, code == _ZB_H2],
        [
            (p - 1) * (F + B),  # GPipe: fill + drain, Narayanan21 §2.2.1
            (p - 1) * (F + B),  # 1F1B: same bubble, fewer in flight, Narayanan21 §2.2.1
            (p - 1) * (F + B) / v,  # interleaved: each chunk takes (t_f+t_b)/v, Narayanan21 §2.2.2
            np.maximum((p - 1) * (T_F + T_B - T_W), 0.0),  # ZB-H1, ZB §2.1 (= DSV3's ZB1P (PP-1)(F+B-2W))
            zero,  # ZB-H2: W passes fill the drain, ~0, ZB §2.2
        ],
        np.maximum((p / 2 - 1) * (FB + B - 3 * W), 0.0),  # DualPipe, DSV3 Table 2
    )


def dualpipe_unpaired(p, m) -> np.ndarray:
    """Share of a DualPipe rank's m forward (and m backward) chunks that run without a chunk of the
    other direction to overlap with, on the busiest rank (the one holding the first and last stages).

    DeepSeek's DualPipe schedule (deepseek-ai/DualPipe, dualpipe.py: steps 1-3 and 5-8 around the
    main F0B1F1B0 step) leaves 2(n-1) + 2 + (n-1) = 3n - 1 forwards and as many backwards of rank 0
    unpaired, n = p/2: 23 of 120 for DeepSeek-V3's p = 16, m = 120 (its ISCA'25 Table 4 times 1.13 s
    of unpaired forwards, 23 of its 0.049 s forward chunks).
    """
    p, m = np.asarray(p, dtype=float), np.asarray(m, dtype=float)
    return np.clip((1.5 * p - 1) / np.maximum(m, 1), 0.0, 1.0)


def unpaired_share(schedule, p, m, v) -> np.ndarray:
    """Share of the busiest rank's forward (and backward) chunks that have no chunk of the other
    direction to pair with, for an overlap that pairs them; shape: all arguments broadcast.

    DualPipe: ``dualpipe_unpaired``. 1F1B: rank 0's p - 1 warm-up forwards (Narayanan21 2.2.1).
    Interleaved: Megatron-Core's warm-up of (p - 1) * 2 + (v - 1) * p chunk forwards on rank 0
    (schedules.py, get_pp_rank_microbatches), of its m v chunks. ZB-H1 and ZB-H2 as 1F1B; GPipe runs
    every forward before any backward, so nothing pairs.
    """
    code, p, m, v = np.broadcast_arrays(schedule_code(schedule), *(np.asarray(x, dtype=float) for x in (p, m, v)))
    m = np.maximum(m, 1)
    share = np.select(
        [code == _GPIPE, code == _INTERLEAVED, code == DUALPIPE_CODE],
        [np.ones_like(m), (2 * (p - 1) + (v - 1) * p) / (m * v), dualpipe_unpaired(p, m)],
        (p - 1) / m,
    )
    return np.clip(share, 0.0, 1.0)


def bubble_fraction(schedule, p, m, v, *, w_frac=W_FRAC, backward_ratio=BACKWARD_RATIO, pair_slowdown=1.0
                    ) -> np.ndarray:
    """Bubble time over ideal compute ``m (t_f + t_b)``, dimensionless; shape: broadcast.

    Times are taken relative to ``t_f = 1`` with ``t_b = backward_ratio`` and
    ``t_w = w_frac * t_b``; DualPipe's ``F&B = pair_slowdown (F + B)``: above 1 where a pair's compute
    runs on the SMs its all-to-all leaves (budget/step.py). With the defaults:
    GPipe, 1F1B ``(p-1)/m``; interleaved ``(p-1)/(v m)``; ZB-H1 ``(p-1)/(3m)``;
    ZB-H2 0; DualPipe ``(p-2)/(3m)``.
    """
    t_f = np.ones_like(np.asarray(backward_ratio, dtype=float))
    t_b = np.asarray(backward_ratio, dtype=float)
    bubble = bubble_s(schedule, p, m, v, t_f, t_b, w_frac * t_b, t_fb=pair_slowdown * (t_f + t_b))
    return bubble / (np.asarray(m, dtype=float) * (t_f + t_b))


def step_compute_s(schedule, p, m, v, t_f, t_b, t_w=None, *, t_fb=None) -> np.ndarray:
    """Pipeline compute time of one step, in seconds: ``m (t_f + t_b) + bubble_s``.

    Same arguments and shape as ``bubble_s``; no communication is included.
    """
    compute_s = np.asarray(m, dtype=float) * (np.asarray(t_f, dtype=float) + np.asarray(t_b, dtype=float))
    return compute_s + bubble_s(schedule, p, m, v, t_f, t_b, t_w, t_fb=t_fb)


# --- memory factors -------------------------------------------------------------------------


def inflight_microbatches(schedule, p, m, v) -> np.ndarray:
    """Activations the first stage holds at its peak, in micro-batches' worth of one stage's layers.

    Multiply by the activation bytes of one micro-batch over ``L/p`` layers to get bytes.
    Each schedule's peak is capped at ``m``: a stage cannot hold more micro-batches than
    the step has. Shape: all arguments broadcast; float (interleaving gives fractions).
    """
    code, p, m, v = np.broadcast_arrays(schedule_code(schedule), *(np.asarray(x, dtype=float) for x in (p, m, v)))
    peak = np.select(
        [code == _GPIPE, code == _1F1B, code == _INTERLEAVED, code == _ZB_H1, code == _ZB_H2],
        [
            m,  # GPipe: all forwards before any backward, Narayanan21 §2.2.1
            p,  # 1F1B: p warm-up forwards on stage 0, Narayanan21 §2.2.1
            p * (1 + (p - 1) / (p * v)),  # interleaved: Korthikanti22 §4.2.3; Megatron warm-up (v-1)p+2p-1 chunks
            p,  # ZB-H1: same as 1F1B, ZB §2.1
            2 * p - 1,  # ZB-H2: (2p-1) micro-batches, ZB §2.2
        ],
        p + 1,  # DualPipe: PP+1, DSV3 Table 2
    )
    return np.minimum(peak, m)


# --- validity -------------------------------------------------------------------------------

SCHEDULE_REASONS: tuple[str | None, ...] = (
    None,
    "{schedule} needs positive p, m and v (got p={p}, m={m}, v={v})",
    "{schedule} runs one model chunk per rank (got v={v}); set v=1 or use interleaved-1f1b",
    "interleaved-1f1b needs v >= 2 model chunks per rank (got v={v}); set v to 2 or more or use 1f1b",
    "interleaved-1f1b needs m a multiple of p in Megatron (got m={m}, p={p}); "
    "set m to a multiple of {p}",
    "dualpipe needs an even number of stages (got p={p}); set p to an even number",
    "dualpipe needs an even number of micro-batches (got m={m}); set m to an even number",
    "{schedule} needs at least p = {p} micro-batches to fill the pipeline (got m={m}); raise the batch or lower p",
    "zb-h2 needs at least 2p-1 = {need} micro-batches in flight for its zero bubble (got m={m}); "
    "raise the batch, lower p or use zb-h1",
)
"""Message of each reason code from ``schedule_reason``; code 0 (``None``) is a valid layout."""


def schedule_reason(schedule, p, m, v) -> np.ndarray:
    """Reason code (index into ``SCHEDULE_REASONS``) why a layout cannot use the schedule; 0 if it can.

    Checks, first failing wins: positive ``p, m, v``; ``v = 1`` unless interleaved;
    interleaved ``v >= 2`` and ``m % p == 0`` (Megatron's condition; Llama 3's flexible
    interleaving relaxes it); DualPipe ``p`` and ``m`` even (DSV3 §3.2.1).
    Shape: all arguments broadcast; int.
    """
    code, p, m, v = np.broadcast_arrays(schedule_code(schedule), *(np.asarray(x) for x in (p, m, v)))
    interleaved, dualpipe = code == _INTERLEAVED, code == DUALPIPE_CODE
    needs_full = (code == _ZB_H1) | dualpipe
    positive = (p >= 1) & (m >= 1) & (v >= 1)
    return np.select(
        [
            ~positive,
            ~interleaved & (v != 1),
            interleaved & (v < 2),
            interleaved & (np.mod(m, np.where(positive, p, 1)) != 0),
            dualpipe & (np.mod(p, 2) != 0),
            dualpipe & (np.mod(m, 2) != 0),
            needs_full & (m < p),
            (code == _ZB_H2) & (m < 2 * p - 1),
        ],
        [1, 2, 3, 4, 5, 6, 7, 8],
        0,
    )


def schedule_valid(schedule, p, m, v) -> np.ndarray:
    """Boolean mask: True where the layout can run the schedule. Shape: all arguments broadcast."""
    return schedule_reason(schedule, p, m, v) == 0


def check_schedule(schedule, p, m, v) -> str | None:
    """One-line message why a single layout cannot use ``schedule``, or ``None`` if it can.

    Scalar arguments only; for sweeps use ``schedule_reason`` / ``schedule_valid``.
    """
    template = SCHEDULE_REASONS[int(schedule_reason(schedule, p, m, v))]
    if template is None:  # reason 0: the schedule fits
        return None
    name = SCHEDULE_BY_CODE[int(schedule_code(schedule))]
    return template.format(schedule=name, p=p, m=m, v=v, need=2 * p - 1)
