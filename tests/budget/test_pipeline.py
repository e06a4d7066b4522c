"""Pipeline bubbles, in-flight activations and schedule validity (formulas.md 4)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from stepbudget.budget.pipeline import (
    bubble_fraction,
    bubble_s,
    check_schedule,
    inflight_microbatches,
    schedule_reason,
    schedule_valid,
    step_compute_s,
)
from stepbudget.enums import SCHEDULE_CODES, Schedule, schedule_code
from stepbudget.plan.memory import parameter_copies

GPIPE, ONE_F_ONE_B, INTERLEAVED, ZB_H1, ZB_H2, DUALPIPE = (
    Schedule.GPIPE,
    Schedule.ONE_F_ONE_B,
    Schedule.INTERLEAVED_1F1B,
    Schedule.ZB_H1,
    Schedule.ZB_H2,
    Schedule.DUALPIPE,
)
SHAPES = [(), (2,), (2, 3)]


# --- worked points ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "schedule, v, expected",
    [
        (GPIPE, 1, 7 / 32),  # (p-1)/m, Narayanan21 §2.2.1
        (ONE_F_ONE_B, 1, 7 / 32),  # (p-1)/m
        (INTERLEAVED, 2, 7 / 64),  # (p-1)/(v m), Narayanan21 §2.2.2
        (ZB_H1, 1, 7 / 96),  # (p-1)/(3m) with T_F = T_B = T_W, ZB §2.1
        (ZB_H2, 1, 0.0),  # ~0, ZB §2.2
        (DUALPIPE, 1, 3 * (3 + 2 - 3) / 96),  # (p/2-1)(F&B + B - 3W) / (m(F+B)), F=W=1, B=2, F&B=F+B
    ],
)
def test_bubble_fraction_worked_point(schedule, v, expected):
    """p = 8 stages, m = 32 micro-batches, default t_b = 2 t_f, t_w = t_b / 2."""
    assert bubble_fraction(schedule, 8, 32, v) == pytest.approx(expected)


def test_llama3_interleaved_bubble_ratio():
    """Llama 3 §3.3.2: 'Overall pipeline bubble ratio is (PP-1)/(V*M)'; PP 16, V 2 (assumed), M 32."""
    assert bubble_fraction(INTERLEAVED, 16, 32, 2) == pytest.approx(15 / (2 * 32))


def test_interleaving_divides_1f1b_bubble_by_v():
    p, m, v = 8, np.array([8, 16, 64]), np.array([[2], [3], [4]])
    t_f, t_b = 0.1, 0.2
    assert np.allclose(bubble_s(INTERLEAVED, p, m, v, t_f, t_b), bubble_s(ONE_F_ONE_B, p, m, 1, t_f, t_b) / v)


def test_zb_h1_is_a_third_of_1f1b_when_passes_are_equal():
    p, m = np.arange(2, 10), 24
    assert np.allclose(bubble_fraction(ZB_H1, p, m, 1), (p - 1) / (3 * m))
    assert np.allclose(bubble_fraction(ZB_H1, p, m, 1), bubble_fraction(ONE_F_ONE_B, p, m, 1) / 3)


def test_zb_h1_general_form():
    """(p-1)(T_F + T_B - T_W) with T_B = t_b - t_w: t_f = 1, t_b = 3, t_w = 1 -> (p-1) * 2."""
    assert bubble_s(ZB_H1, 5, 16, 1, 1.0, 3.0, 1.0) == pytest.approx(4 * 2.0)


@given(
    p=st.integers(1, 32).map(lambda k: 2 * k),
    F=st.floats(0.01, 10),
    B=st.floats(0.01, 10),
    w_share=st.floats(0, 1),
    overlap=st.floats(0.3, 1),
)
def test_deepseek_v3_table2_relations(p, F, B, w_share, overlap):
    """DSV3 Table 2: 1F1B (PP-1)(F+B), ZB1P (PP-1)(F+B-2W), DualPipe (PP/2-1)(F&B+B-3W)."""
    W = w_share * B
    FB = overlap * (F + B)
    assert bubble_s(ONE_F_ONE_B, p, 2 * p, 1, F, B, W) == pytest.approx((p - 1) * (F + B))
    assert bubble_s(ZB_H1, p, 2 * p, 1, F, B, W) == pytest.approx(max((p - 1) * (F + B - 2 * W), 0))
    assert bubble_s(DUALPIPE, p, 2 * p, 1, F, B, W, t_fb=FB) == pytest.approx(max((p / 2 - 1) * (FB + B - 3 * W), 0))
    # the ZB paper's and DeepSeek's notations agree: T_F + T_B + T_W = F + B
    T_F, T_B, T_W = F, B - W, W
    assert (p - 1) * (T_F + T_B + T_W) == pytest.approx((p - 1) * (F + B))
    # with F&B = F + B (no overlap gain) DualPipe never idles longer than 1F1B
    assert bubble_s(DUALPIPE, p, 2 * p, 1, F, B, W) <= bubble_s(ONE_F_ONE_B, p, 2 * p, 1, F, B, W) + 1e-12


def test_step_compute_is_narayanan_fig8():
    """1F1B: T_step = (m + p - 1)(t_f + t_b), Narayanan21 Fig. 8."""
    p, m, t_f, t_b = 8, np.array([8, 32, 128]), 0.05, 0.1
    assert np.allclose(step_compute_s(ONE_F_ONE_B, p, m, 1, t_f, t_b), (m + p - 1) * (t_f + t_b))
    assert np.allclose(step_compute_s(ZB_H2, p, m, 1, t_f, t_b), m * (t_f + t_b))


def test_single_stage_has_no_bubble():
    codes = np.array(list(SCHEDULE_CODES.values()))
    assert np.all(bubble_fraction(codes, 1, 4, 1) == 0)


# --- in-flight activations and parameter copies ------------------------------------------------


@pytest.mark.parametrize(
    "schedule, m, v, expected",
    [
        (GPIPE, 32, 1, 32),
        (ONE_F_ONE_B, 32, 1, 8),
        (ONE_F_ONE_B, 4, 1, 4),  # min(p, m)
        (INTERLEAVED, 32, 2, 8 * (1 + 7 / 16)),  # Korthikanti22 §4.2.3
        (INTERLEAVED, 8, 2, 8),  # m = p: Megatron runs all m v forwards first, p stages' worth
        (ZB_H1, 32, 1, 8),
        (ZB_H2, 32, 1, 15),  # 2p - 1
        (DUALPIPE, 32, 1, 9),  # PP + 1
    ],
)
def test_inflight_microbatches(schedule, m, v, expected):
    assert inflight_microbatches(schedule, 8, m, v) == pytest.approx(expected)


def test_parameter_copies():
    assert parameter_copies(DUALPIPE) == 2
    assert parameter_copies(ONE_F_ONE_B) == 1
    codes = np.array(list(SCHEDULE_CODES.values()))
    assert parameter_copies(codes).tolist() == [1, 1, 1, 1, 1, 2]


# --- schedule codes and validity ---------------------------------------------------------------


def test_schedule_code_accepts_enum_string_and_arrays():
    assert schedule_code(Schedule.DUALPIPE) == SCHEDULE_CODES[Schedule.DUALPIPE]
    assert schedule_code("zb-h1") == SCHEDULE_CODES[Schedule.ZB_H1]
    assert schedule_code(np.array(["1f1b", "gpipe"])).tolist() == [1, 0]
    assert sorted(SCHEDULE_CODES.values()) == list(range(len(Schedule)))
    with pytest.raises(ValueError, match="unknown schedule"):
        schedule_code("2f2b")
    with pytest.raises(ValueError, match="unknown schedule code"):
        schedule_code(np.array([0, 9]))


@pytest.mark.parametrize(
    "schedule, p, m, v, fragment",
    [
        (ONE_F_ONE_B, 8, 32, 1, None),
        (INTERLEAVED, 8, 32, 2, None),
        (DUALPIPE, 8, 32, 1, None),
        (ONE_F_ONE_B, 8, 32, 2, "v=2"),
        (INTERLEAVED, 8, 32, 1, "v >= 2"),
        (INTERLEAVED, 8, 20, 2, "multiple of 8"),
        (DUALPIPE, 7, 32, 1, "p=7"),
        (DUALPIPE, 8, 31, 1, "m=31"),
        (GPIPE, 0, 4, 1, "positive"),
    ],
)
def test_check_schedule(schedule, p, m, v, fragment):
    message = check_schedule(schedule, p, m, v)
    if fragment is None:
        assert message is None
    else:
        assert fragment in message


def test_schedule_valid_mask_matches_scalar_messages():
    code = np.arange(6)[:, None, None, None]
    p, m, v = np.arange(1, 5)[:, None, None], np.arange(1, 9)[:, None], np.arange(1, 4)
    mask = schedule_valid(code, p, m, v)
    assert mask.shape == (6, 4, 8, 3)
    for i in np.ndindex(mask.shape):
        c, pi, mi, vi = int(code[i[0], 0, 0, 0]), int(p[i[1], 0, 0]), int(m[i[2], 0]), int(v[i[3]])
        assert mask[i] == (check_schedule(c, pi, mi, vi) is None)
    assert schedule_reason(code, p, m, v).dtype.kind == "i"


# --- shapes: each element equals the 0-d answer -------------------------------------------------


def _layout(rng, shape):
    return dict(
        schedule=rng.integers(0, 6, shape),
        p=rng.choice([1, 2, 4, 8], shape),
        m=rng.choice([8, 16, 48], shape),
        v=rng.integers(1, 4, shape),
    )


@pytest.mark.parametrize("shape", SHAPES)
def test_shapes_match_scalar_answers(shape):
    rng = np.random.default_rng(0)
    lay = _layout(rng, shape)
    times = dict(t_f=rng.uniform(0.1, 1, shape), t_b=rng.uniform(0.2, 2, shape), t_w=rng.uniform(0, 0.5, shape))
    cases = [
        (bubble_fraction, lay),
        (bubble_s, {**lay, **times}),
        (step_compute_s, {**lay, **times}),
        (inflight_microbatches, lay),
        (schedule_reason, lay),
        (parameter_copies, dict(schedule=lay["schedule"])),
    ]
    for fn, args in cases:
        out = fn(**args)
        assert out.shape == shape, fn.__name__
        for i in np.ndindex(shape):
            scalar = fn(**{k: a[i] for k, a in args.items()})
            assert np.shape(scalar) == ()
            assert out[i] == pytest.approx(scalar), fn.__name__


def test_broadcast_across_arguments():
    out = bubble_fraction(np.array([1, 2]), np.array([[4], [8], [16]]), 32, 2)
    assert out.shape == (3, 2)
    assert out[2, 1] == pytest.approx(15 / 64)


# --- properties ----------------------------------------------------------------------------------

schedules = st.sampled_from(list(Schedule))


@given(
    schedule=schedules,
    p=st.integers(1, 64),
    m=st.integers(1, 512),
    dm=st.integers(0, 512),
    v=st.integers(1, 8),
    dv=st.integers(0, 8),
    w_frac=st.floats(0, 1),
    backward_ratio=st.floats(0.5, 4),
)
def test_bubble_fraction_non_increasing_in_m_and_v(schedule, p, m, dm, v, dv, w_frac, backward_ratio):
    frac = lambda m, v: float(bubble_fraction(schedule, p, m, v, w_frac=w_frac, backward_ratio=backward_ratio))  # noqa: E731
    assert frac(m + dm, v) <= frac(m, v) + 1e-12
    assert frac(m, v + dv) <= frac(m, v) + 1e-12
    assert frac(m, v) >= 0


@given(schedule=schedules, p=st.integers(1, 64), m=st.integers(1, 512), v=st.integers(1, 8))
def test_inflight_at_most_m(schedule, p, m, v):
    inflight = inflight_microbatches(schedule, p, m, v)
    assert 1 <= inflight <= m


def test_dualpipe_leaves_3n_minus_1_chunks_unpaired_on_its_busiest_rank():
    import stepbudget as sb
    from stepbudget.budget import pipeline
    # deepseek-ai/DualPipe dualpipe.py, rank 0 of p = 16 (n = 8): steps 1-3 give 2(n-1) + 2 + (n-1) forwards
    assert float(pipeline.dualpipe_unpaired(16, 120)) == pytest.approx(23 / 120)
    assert float(pipeline.dualpipe_unpaired(2, 2)) == pytest.approx(1.0)  # n = 1: nothing to pair with
    b = sb.estimate(sb.derive(sb.load("deepseek-v3", ["cluster.rate_scope=kernel"])))
    ep = [(x, e) for x, e in zip(b.exchanges, b.exposed_s) if x.dim.value == "ep"]
    total, exposed = sum(float(x.time_s) for x, _ in ep), sum(float(e) for _, e in ep)
    unpaired = float(pipeline.dualpipe_unpaired(b.plan.pp, b.plan.microbatches))
    assert exposed == pytest.approx(total * unpaired)  # the preset hides all of a paired chunk's all-to-all


def test_dualpipe_ranks_reduce_the_gradients_of_two_stages():
    import stepbudget as sb
    # DSV3 Table 2: DualPipe keeps two copies of the parameters; each is reduced over the 2 d ranks that hold it
    def grads(schedule):
        b = sb.estimate(sb.derive(sb.load("deepseek-v3", [f"layout.schedule={schedule}"])))
        x = next(x for x in b.exchanges if x.dim.value == "dp" and x.what == "grads" and float(x.calls) > 0)
        return float(x.bytes_per_gpu), int(x.group)
    (dual, g2), (single, g1) = grads("dualpipe"), grads("zb-h1")
    assert g2 == 2 * g1
    assert dual / single == pytest.approx(2 * ((g2 - 1) / g2) / ((g1 - 1) / g1))


def test_a_paired_ep_overlap_leaves_the_warm_up_and_cool_down_chunks_exposed():
    import stepbudget as sb
    from stepbudget.budget import pipeline
    # Megatron-Core schedules.py get_pp_rank_microbatches: rank 0 warms up with (p-1)*2 + (v-1)*p chunk
    # forwards of its m*v; without interleaving, p-1 of m; GPipe pairs nothing
    assert float(pipeline.unpaired_share("interleaved-1f1b", 8, 128, 4)) == pytest.approx(38 / 512)
    assert float(pipeline.unpaired_share("1f1b", 8, 32, 1)) == pytest.approx(7 / 32)
    assert float(pipeline.unpaired_share("gpipe", 8, 32, 1)) == 1.0
    assert float(pipeline.unpaired_share("dualpipe", 16, 120, 1)) == float(pipeline.dualpipe_unpaired(16, 120))
    assert float(pipeline.unpaired_share("1f1b", 8, 4, 1)) == 1.0  # fewer micro-batches than warm-up steps
    sets = ["layout.tp=1", "layout.ep=8", "layout.pp=15", "layout.dp=16", "overlap.ep=1"]

    def ep(*more):
        b = sb.estimate(sb.derive(sb.load("megascale-moe-352b", sets + list(more))))
        pairs = [(float(x.time_s), float(e)) for x, e in zip(b.exchanges, b.exposed_s) if x.dim.value == "ep"]
        return sum(t for t, _ in pairs), sum(e for _, e in pairs), b
    total, within, b = ep()
    assert within == 0.0  # overlap inside the chunk reaches every chunk
    total, paired, b = ep("overlap.ep_paired=true")
    share = float(pipeline.unpaired_share(b.plan.schedule, b.plan.pp, b.plan.microbatches, b.plan.v))
    assert 0 < share < 1 and paired == pytest.approx(total * share)
