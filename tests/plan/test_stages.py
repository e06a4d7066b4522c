"""Uneven pipeline stages: Megatron's first/last stage layers and explicit per-stage lists."""

import numpy as np
import pytest

from stepbudget.budget.step import estimate
from stepbudget.inputs.errors import ScenarioError
from stepbudget.inputs.scenario import load, preset_names
from stepbudget.plan.derive import derive
from stepbudget.plan.operators import layer_times
from tests._util import one_line

NO_SLOTS = ["layout.embedding_in_pipeline_split=false", "layout.loss_in_pipeline_split=false"]
PP8 = [*NO_SLOTS, "layout.pp=8", "layout.dp=256", "layout.virtual_stages=2"]  # Llama 3 405B: 126 layers


def stages(*counts: int) -> str:
    return "layout.stage_layers=[" + ",".join(map(str, counts)) + "]"


def test_megatron_first_last_places_the_rest_evenly():
    sc = load("llama3-405b", [*PP8, "layout.first_stage_layers=14", "layout.last_stage_layers=16"])
    assert sc.rank_layers == (14, 16, 16, 16, 16, 16, 16, 16)


def test_126_layers_on_pp8_vp8_go_as_a_list_of_virtual_stages():
    # Megatron's own 405B split: one layer fewer on the first and the last virtual stage (64 of them)
    sc = load("llama3-405b", [*PP8, "layout.virtual_stages=8", stages(1, *[2] * 62, 1)])
    assert sc.rank_layers == (15, 16, 16, 16, 16, 16, 16, 15) and sum(sc.rank_layers) == 126


def test_an_even_split_gives_the_flags_counts():
    assert load("llama3-405b").rank_layers == (7, *[8] * 14, 7)  # 128 slots on 16 ranks, less embedding and loss


@pytest.mark.parametrize("sets, field", [
    ([*PP8, "layout.virtual_stages=8", "layout.first_stage_layers=15", "layout.last_stage_layers=15"],
     "layout.first_stage_layers"),  # Megatron: each rank's layers a multiple of vp
    ([*PP8, "layout.first_stage_layers=13"], "layout.first_stage_layers"),  # 113 left over 7 ranks
    ([*PP8, stages(1, 2)], "layout.stage_layers"),  # length
    ([*PP8, stages(*[16] * 8)], "layout.stage_layers"),  # 128 != 126
    ([*PP8, "layout.first_stage_layers=14", stages(*[16] * 8)], "layout.stage_layers"),  # both kinds
    (["layout.first_stage_layers=14"], "layout.first_stage_layers"),  # beside Megatron's slot flags
    ([*PP8, "layout.last_stage_layers=200"], "layout.last_stage_layers"),  # more than the model has
])
def test_a_bad_split_is_one_line_naming_the_field(sets, field):
    with pytest.raises(ScenarioError) as e:
        load("llama3-405b", sets)
    assert field in str(e.value) and "\n" not in str(e.value)
    args = [a for s in sets for a in ("--set", s)]
    assert field in one_line("budget", "llama3-405b", *args)


def _layer_and_head_s(plan):
    layer = [op for op in plan.operators if not op.output_layer]
    head = [op for op in plan.operators if op.output_layer]
    return sum(layer_times(layer)), sum(layer_times(head))


OPERATORS = ["cluster.achieved_flops=null", "cluster.rate_scope=kernel"]  # the operator model sets the rate


def _compute(sets):
    plan = derive(load("llama3-405b", [*OPERATORS, *sets]))
    return plan, float(plan.hardware_flops_per_gpu / plan.flops_rate)


def test_the_busiest_stage_sets_the_pace_of_an_uneven_split():
    pp1 = [*PP8, "layout.virtual_stages=1", "layout.schedule=1f1b"]
    plan, heavy_first = _compute([*pp1, stages(20, 15, 15, 15, 15, 15, 16, 15)])
    _, heavy_last = _compute([*pp1, stages(15, 15, 15, 15, 15, 15, 16, 20)])
    layer_s, head_s = (float(x) for x in _layer_and_head_s(plan))
    assert plan.rate_source == "operators"
    # busiest rank: 20 layers on the first; 20 layers and the output layer on the last
    expected = float(plan.microbatches) * ((20 * layer_s + head_s) - 20 * layer_s)
    assert heavy_last - heavy_first == pytest.approx(expected, rel=1e-9)


def test_a_list_that_repeats_the_even_split_gives_the_same_step():
    even = [*OPERATORS, *NO_SLOTS, "layout.pp=2", "layout.dp=1024", "layout.virtual_stages=1", "layout.schedule=1f1b"]
    a = estimate(derive(load("llama3-405b", even)))
    b = estimate(derive(load("llama3-405b", [*even, stages(63, 63)])))
    assert float(b.step_s) == pytest.approx(float(a.step_s), rel=1e-12)


@pytest.mark.parametrize("name", preset_names())
def test_presets_keep_their_step(name):
    # the presets split evenly: the stated-split path does not run, and rank_layers adds up to the model
    sc = load(name)
    assert not sc.layout.uneven_split
    assert sum(sc.rank_layers) == sc.model.num_layers + sc.model.mtp_layers
    assert np.isfinite(float(estimate(derive(sc)).step_s))
