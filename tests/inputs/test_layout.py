"""inputs/layout.py: degrees, schedules, batch, precision and overlap, each rule refused by the field it names."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import stepbudget as sb
from stepbudget.enums import Axis, Schedule
from stepbudget.inputs.layout import Batch, Layout, OverlapSettings, Precision, shard_groups_split


@pytest.mark.parametrize("make, message", [
    (lambda: Layout(virtual_stages=2), "layout.virtual_stages: 2 chunks per rank need schedule interleaved-1f1b"),
    (lambda: Layout(schedule="interleaved-1f1b"), "layout.virtual_stages: interleaved-1f1b needs virtual_stages >= 2"),
    (lambda: Layout(schedule="dualpipe", pp=3), "layout.pp: DualPipe needs an even number of stages, got pp = 3"),
    (lambda: Layout(order=["tp", "tp", "pp", "dp"]), "layout.order: list tp, cp, pp and dp once each"),
    (lambda: Layout(tp=0), "tp\n  Input should be greater than or equal to 1"),
    (lambda: Layout(dp_bucket_params=0), "dp_bucket_params\n  Input should be greater than 0"),
    (lambda: Layout(schedule="zigzag"), "schedule\n  Input should be 'gpipe', '1f1b'"),
    (lambda: Batch(), "batch: give exactly one of global_batch_seqs or global_batch_tokens"),
    (lambda: Batch(global_batch_seqs=8, global_batch_tokens=8192), "batch: give exactly one of"),
    (lambda: Precision(grads="int4"), "unknown precision 'int4'; use one of ['bf16', 'fp16', 'fp32', 'fp8', 'tf32']"),
    (lambda: Precision(dispatch=16), "dispatch\n  Input should be less than or equal to 8"),
    (lambda: OverlapSettings(tp=1.5), "overlap.tp: a fraction within [0, 1] or 'auto', got 1.5"),
    (lambda: OverlapSettings(comm_sm_share=1.0), "overlap.comm_sm_share: a share within [0, 1) or 'auto', got 1.0"),
])
def test_each_layout_rule_refuses_by_the_field_it_names(make, message):
    with pytest.raises(ValueError) as e:
        make()
    assert message in str(e.value)


def test_precision_reads_names_and_numbers_as_bytes_per_element():
    p = Precision(params="BF16", grads=" fp32 ", activations="fp8", dispatch=1.03125, combine="tf32")
    assert (p.params, p.grads, p.activations, p.dispatch, p.combine) == (2.0, 4.0, 1.0, 1.03125, 4.0)
    assert p.grad_buffer_bytes == 4.0 and Precision(grad_buffer="fp32").grad_buffer_bytes == 4.0
    assert (Precision().grad_buffer_bytes, Precision().optimizer_bytes) == (2.0, 12.0)  # ZeRO's K = 4 + 4 + 4
    assert Layout().order == (Axis.TP, Axis.CP, Axis.PP, Axis.DP)  # Llama 3's rank order, innermost first


def test_expert_tp_and_hsdp_shard_groups():
    assert (Layout(tp=8, ep=8).expert_tp_degree, Layout(tp=8).expert_tp_degree) == (1, 8)
    assert Layout(tp=8, ep=8, expert_tp=2).expert_tp_degree == 2
    # dp*cp = 8: replicas 2 and 4 leave shard groups of 4 and 2 ranks; 8 would leave groups of 1; 3 does not divide
    replicas = np.array([1, 2, 3, 4, 8])
    assert shard_groups_split(replicas, tp=8, cp=1, dp=8).tolist() == [True, True, False, True, False]
    # MoE: an expert's DP group is tp*cp*dp/(ep*expert_tp) = 64/32 = 2 ranks, too few for 2 replicas
    assert shard_groups_split(replicas, 8, 1, 8, ep=32, moe=True).tolist() == [True, False, False, False, False]
    assert shard_groups_split(2, np.array([8, 16]), 1, np.array([4, 1]), ep=8, moe=True).tolist() == [True, False]


@given(schedule=st.sampled_from(list(Schedule)), v=st.integers(1, 8), pp=st.integers(1, 16))
def test_a_layout_is_accepted_exactly_when_its_schedule_fits(schedule, v, pp):
    interleaved = schedule == Schedule.INTERLEAVED_1F1B
    fits = (v > 1) == interleaved and not (schedule == Schedule.DUALPIPE and pp % 2)
    try:
        lay = Layout(schedule=schedule, virtual_stages=v, pp=pp)
    except ValueError as e:
        assert not fits
        field = "layout.pp" if schedule == Schedule.DUALPIPE and (v > 1) == interleaved else "layout.virtual_stages"
        assert field in str(e)
    else:
        assert fits and (lay.schedule, lay.virtual_stages, lay.pp) == (schedule, v, pp)


@pytest.mark.parametrize("order", [["tp", "cp", "ep", "dp", "pp"], ["tp", "cp", "ep", "pp", "dp"],
                                   ["tp", "cp", "pp", "dp", "ep"], ["dp", "ep", "tp", "cp", "pp"]])
def test_order_takes_ep_next_to_dp(order):
    # Megatron-Core's default tp-cp-ep-dp-pp and its tp-cp-ep-pp-dp (pp between ep and dp), or ep outside dp
    assert Layout(order=order).order == tuple(Axis(a) for a in order)


@pytest.mark.parametrize("order, message", [
    ("[tp, ep, cp, dp, pp]", "layout.order: [tp, ep, cp, dp, pp] puts ep away from dp; put ep next to dp, whose "
                             "ranks it is carved from, e.g. [tp, cp, ep, dp, pp]"),
    ("[ep, tp, cp, pp, dp]", "layout.order: [ep, tp, cp, pp, dp] puts ep away from dp"),
    ("[tp, cp, ep, dp, pp, ep]", "layout.order: list tp, cp, pp and dp once each and ep at most once, innermost "
                                 "first, e.g. [tp, cp, pp, dp] or [tp, cp, ep, dp, pp]; got [tp, cp, ep, dp, pp, ep]"),
    ("[tp, cp, ep, dp]", "layout.order: list tp, cp, pp and dp once each and ep at most once"),
])
def test_a_bad_order_is_refused_in_one_line_naming_the_field_and_the_fix(order, message):
    with pytest.raises(sb.ScenarioError) as e:
        sb.load("megascale-moe-352b", [f"layout.order={order}"])
    assert "\n" not in str(e.value) and str(e.value).startswith(message)
