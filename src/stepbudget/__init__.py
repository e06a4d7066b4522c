"""stepbudget: where the time of a distributed training step goes.

One function per command, each with the command's options as keywords (``stepbudget.api``):

    step_budget("llama3-405b", sets=["layout.pp=8", "layout.dp=256"])   # the step, term by term
    memory("llama3-405b")                                          # does it fit
    search("megascale-175b", gpus=1024, top=3)                     # every layout, ranked
    scale("llama3-405b", [8192, 16384, 32768])                     # strong scaling
    whatif("llama3-405b", {"half NIC": ["cluster.nic_Bps=200Gb/s"]})
    simulate("hpn-gpt3-175b", link_rate=0.5)                       # the same step, task by task
    nic("llama3-405b"); moe("deepseek-v3", skew="zipf:0.8"); validate()
    sweep("cluster-design.yaml", "results/", workers=2); sweep_report("results/")   # a grid on Dask

Each returns a result with ``to_dict()``, ``to_frame()`` and a table in Jupyter (``budget`` and ``wire`` are
``step_budget`` and ``nic`` here: the package's ``budget`` and ``wire`` modules hold those names). Underneath, the
model itself over arrays:

    scenario = load("llama3-405b", ["layout.pp=8"])
    plan = derive(scenario)            # per-GPU work, bytes and groups
    b = estimate(plan)                 # the analytical step (a Budget)
    mem = memory_per_gpu(plan)
"""

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy reads any TYPE_CHECKING as true)
if TYPE_CHECKING:  # what the names below are, for type checkers and the API reference; loaded on first use
    from stepbudget.api import (BudgetResult, MemoryResult, MoEResult, RankedLayouts, Result, ScaleResult, SimulationResult,
                                SweepReportResult, SweepRunResult, ValidationResult, WhatIfResult, WireResult, memory,
                                moe, nic, scale, search, simulate, step_budget, sweep, sweep_report, validate, whatif)
    from stepbudget.budget.memory import Memory, memory_per_gpu
    from stepbudget.budget.step import Budget, estimate
    from stepbudget.inputs.scenario import Scenario, ScenarioError, load, preset_names
    from stepbudget.plan.derive import Plan, derive

_WHERE = {name: module for module, names in {
    "stepbudget.api": ("BudgetResult", "MemoryResult", "MoEResult", "RankedLayouts", "Result", "ScaleResult",
                       "SimulationResult", "SweepReportResult", "SweepRunResult", "ValidationResult", "WhatIfResult",
                       "WireResult", "memory", "moe", "nic", "scale", "search", "simulate", "step_budget", "sweep",
                       "sweep_report", "validate", "whatif"),
    "stepbudget.budget.memory": ("Memory", "memory_per_gpu"),
    "stepbudget.budget.step": ("Budget", "estimate"),
    "stepbudget.inputs.scenario": ("Scenario", "ScenarioError", "load", "preset_names"),
    "stepbudget.plan.derive": ("Plan", "derive"),
}.items() for name in names}
"""The module each name of ``__all__`` comes from: ``import stepbudget`` loads none of them (the command line
starts fast, and Ctrl-C while it starts exits quietly), the first use of a name loads its module."""


def __getattr__(name: str) -> object:
    import importlib

    if name not in _WHERE:
        raise AttributeError(f"module 'stepbudget' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value  # looked up once
    return value


__all__ = ["Budget", "BudgetResult", "Memory", "MemoryResult", "MoEResult", "Plan", "RankedLayouts", "Result",
           "ScaleResult", "Scenario", "ScenarioError", "SimulationResult", "SweepReportResult", "SweepRunResult",
           "ValidationResult", "WhatIfResult", "WireResult", "derive", "estimate", "load", "memory", "memory_per_gpu", "moe",
           "nic", "preset_names", "scale", "search", "simulate", "step_budget", "sweep", "sweep_report", "validate",
           "whatif"]
__version__ = "0.1.0"
