"""stepbudget: where the time of a distributed training step goes.

    scenario = load("llama3-405b", ["layout.pp=8"])
    plan = derive(scenario)
    budget = estimate(plan)
"""

from stepbudget.budget.step import Budget, estimate
from stepbudget.inputs.scenario import Scenario, ScenarioError, load, preset_names
from stepbudget.plan.derive import Plan, derive

__all__ = ["Budget", "Plan", "Scenario", "ScenarioError", "derive", "estimate", "load", "preset_names"]
__version__ = "0.1.0"
