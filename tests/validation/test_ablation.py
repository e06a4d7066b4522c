"""MegaScale Table 3 (arXiv 2402.15627): the model's MFU gain of each overlap technique against the paper's."""

from __future__ import annotations

import pytest

from stepbudget.inputs.errors import ScenarioError
from stepbudget.validation.ablation import AblationRow, ablations

TABLE3 = "megascale_table3_175B_256gpu"


@pytest.fixture(scope="module")
def rows() -> dict[str, AblationRow]:
    return {r.step: r for r in ablations() if r.id == TABLE3}


def test_table3_rows_as_printed(rows):
    # Table 3: 47.7 % baseline, then 52.3, 53.3, 55.5, 58.0, 59.5, 61.2, 62.3, 65.3
    assert [round(r.measured_after_mfu * 100, 1) for r in rows.values()] == [52.3, 53.3, 55.5, 58.0, 59.5, 61.2, 62.3, 65.3]
    first = next(iter(rows.values()))
    assert first.measured_before_mfu == pytest.approx(0.477)
    assert "Table 3" in first.source


def test_steps_are_cumulative(rows):
    steps = list(rows.values())
    for before, after in zip(steps, steps[1:]):
        assert after.predicted_before_mfu == before.predicted_after_mfu
        assert after.measured_before_mfu == before.measured_after_mfu


def test_unmodelled_steps_gain_nothing(rows):
    # sliding-window attention (no window stated) and the data-pipeline fixes have no term in the model
    for step in ("(2) with SWA", "(7) with misc optimizations"):
        assert not rows[step].modelled
        assert rows[step].predicted_gain_pts == 0.0


@pytest.mark.parametrize("step", ["(3) with TP overlap", "(5) with DP overlap"])
def test_tp_and_dp_overlap_gain_within_one_point(rows, step):
    # MegaScale 3.2: TP collectives fused into the FFN GEMMs (+2.2), DP gather and reduce per model chunk (+1.5)
    assert rows[step].predicted_gain_pts == pytest.approx(rows[step].measured_gain_pts, abs=1.0)


def test_pp_overlap_gain_is_bounded_by_the_wire_time(rows):
    """The paper's PP overlap gains 2.5 points; the model 0.84, 1.66 short, and it cannot reach 1.5.

    In the model the baseline (overlap.pp = 0) already exposes every PP send: 768 sends of 6.3 MB (a
    [s/t, b, h] BF16 activation) per GPU per step, 0.216 s at the NIC's bus bandwidth; with overlap.pp = auto
    only the 2 (p - 1) v fill and drain hops wait (0.024 s). Hiding all 0.216 s of a 11.7 s step is about
    1.1 points. The paper's 2.5 points are 0.55 s of its 12.7 s step (47.7 % baseline, 2.206e15 FLOP per GPU
    per step at 312 TFLOP/s): 2.5 times the wire time. The rest is what Megatron-LM's blocking p2p costs beyond
    the wire (a batched send and receive that waits for both neighbours, then torch.cuda.synchronize();
    NVIDIA/Megatron-LM issues #167, #420), which has no term in the budget (docs/ablations.md).
    """
    pp = rows["(4) with PP overlap"]
    assert pp.measured_gain_pts == pytest.approx(2.5)
    assert pp.predicted_gain_pts == pytest.approx(0.84, abs=0.1)
    assert 0 < pp.predicted_gain_pts < pp.measured_gain_pts - 1.0


def test_overlap_gains_in_sum(rows):
    # 6.1: "3D parallel communication overlapping ... accelerates training by 6.2% MFU"
    steps = ("(3) with TP overlap", "(4) with PP overlap", "(5) with DP overlap")
    assert sum(rows[s].measured_gain_pts for s in steps) == pytest.approx(6.2)
    assert sum(rows[s].predicted_gain_pts for s in steps) == pytest.approx(5.5, abs=0.3)


def test_a_missing_base_run_is_named(tmp_path):
    f = tmp_path / "a.yaml"
    f.write_text("ablations:\n- id: x\n  base_run: nope\n  baseline_mfu_pct: 50\n  steps: []\n")
    with pytest.raises(ScenarioError, match=r"ablation x: base_run: no run 'nope'"):
        ablations(f)


def test_a_file_without_a_list_is_refused(tmp_path):
    f = tmp_path / "a.yaml"
    f.write_text("runs: []\n")
    with pytest.raises(ScenarioError, match="no 'ablations:' list"):
        ablations(f)
