"""stepbudget: where the time of a distributed training step goes.

    scenario = load("llama3-405b", ["layout.pp=8"])
    plan = derive(scenario)
    budget = estimate(plan)            # the analytical step
    memory = memory_per_gpu(plan)      # does it fit
    result = search(scenario)          # every layout, ranked
    step = simulate(scenario)          # the same step, task by task
"""

from stepbudget.budget.memory import Memory, memory_per_gpu
from stepbudget.budget.step import Budget, estimate
from stepbudget.inputs.scenario import Scenario, ScenarioError, load, preset_names
from stepbudget.plan.derive import Plan, derive


def search(scenario: Scenario, **options):
    """Every valid layout of ``scenario``, ranked (sweep/search.py; options: gpus, top, out, chunk, progress)."""
    from stepbudget.sweep.search import search as _search

    return _search(scenario, **options)


def simulate(scenario: Scenario, **options):
    """One step of ``scenario`` simulated task by task (sim/step.py; options: contention, link_rate, jitter, rng)."""
    from stepbudget.sim.step import sim_budget, simulate_step

    return simulate_step(sim_budget(scenario), **options)


__all__ = ["Budget", "Memory", "Plan", "Scenario", "ScenarioError", "derive", "estimate", "load", "memory_per_gpu",
           "preset_names", "search", "simulate"]
__version__ = "0.1.0"
