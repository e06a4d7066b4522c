"""The step simulator follows the busiest stage of an uneven split as the budget does.

Tolerance: tests/sim/test_step.py's budget-vs-simulator agreement without jitter or contention (1 %).
"""

import pytest

import stepbudget as sb
from stepbudget.sim.step import sim_budget, simulate_step

AGREE = 0.01  # tests/sim/test_step.py test_without_jitter_or_contention_the_simulation_is_the_budget

# Llama 3 405B over 16 stages with no embedding/loss slot, timed by the operator model
LLAMA_PP16 = ["layout.embedding_in_pipeline_split=false", "layout.loss_in_pipeline_split=false",
              "cluster.achieved_flops=null", "cluster.rate_scope=kernel", "layout.virtual_stages=1",
              "layout.schedule=1f1b"]
CASES = {
    "llama3-405b 7/8x14/7 (Megatron's rule)": ("llama3-405b", [*LLAMA_PP16, "layout.first_stage_layers=7",
                                                               "layout.last_stage_layers=7"]),
    "llama3-405b 6/8x14/8": ("llama3-405b", [*LLAMA_PP16, "layout.first_stage_layers=6",
                                             "layout.last_stage_layers=8"]),
    "megascale-175b 18/12x6/6, v6": ("megascale-175b", ["layout.first_stage_layers=18",
                                                        "layout.last_stage_layers=6"]),
}


@pytest.fixture(scope="module", params=list(CASES))
def uneven(request):
    name, sets = CASES[request.param]
    b = sim_budget(sb.load(name, sets))
    return b, simulate_step(b, contention=False)


def test_the_simulation_of_an_uneven_split_is_the_budget(uneven):
    b, r = uneven
    assert b.plan.scenario.layout.uneven_split
    assert r.step_s == pytest.approx(float(b.step_s), rel=AGREE)


def test_a_heavier_first_stage_slows_both_alike():
    # megascale-175b's even 12 layers a rank against 18 on the first: the busiest rank sets both paces
    even = sim_budget(sb.load("megascale-175b"))
    heavy = sim_budget(sb.load(*CASES["megascale-175b 18/12x6/6, v6"]))
    even_sim, heavy_sim = simulate_step(even, contention=False), simulate_step(heavy, contention=False)
    assert float(heavy.step_s) > 1.3 * float(even.step_s)
    assert heavy_sim.step_s / even_sim.step_s == pytest.approx(float(heavy.step_s) / float(even.step_s), rel=AGREE)
