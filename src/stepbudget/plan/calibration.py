"""A calibration profile applied to a plan: the operator model's rate scaled, the stack's costs added.

What each parameter means is in inputs/profiles.py. A profile calibrates the operator model only: a
scenario that states its rate (``achieved_flops``, ``achieved_fraction``) measured it on its own stack,
which already holds what a profile adds.
"""

from __future__ import annotations

import numpy as np

from stepbudget.inputs.profiles import NO_PROFILE, Profile, load_profile
from stepbudget.inputs.scenario import Scenario


def profile_of(scenario: Scenario, rate_source: str) -> Profile:
    """The profile the plan of ``scenario`` runs with: its ``cluster.profile`` on the operator model, else none."""
    return load_profile(scenario.cluster.profile) if rate_source == "operators" else NO_PROFILE


def microbatch_slots(microbatches, pp) -> np.ndarray:
    """Micro-batch passes on the pipeline's critical path: m, plus the p - 1 of the fill (Narayanan21 2.2.1)."""
    return np.asarray(microbatches, dtype=float) + np.asarray(pp, dtype=float) - 1


def routed_token_layers(scenario: Scenario, microbatches, dispatch_tokens, moe_layers_per_gpu) -> np.ndarray:
    """Tokens one GPU routes to experts per step, summed over the MoE layers it holds: m b s/(c t) k L_moe/p."""
    moe = scenario.model.moe
    top_k = moe.top_k if moe is not None else 0
    return np.asarray(microbatches, dtype=float) * dispatch_tokens * top_k * moe_layers_per_gpu


def overhead_s(scenario: Scenario, profile: Profile, slots, routed) -> np.ndarray:
    """The step's costs beyond the budget's terms: the scenario's fixed cost plus the profile's per step, per
    micro-batch slot and per routed token-layer."""
    fixed = scenario.cluster.step_overhead_s + profile.cost("step_s")
    return fixed + profile.cost("microbatch_s") * np.asarray(slots) + profile.cost("routed_token_s") * np.asarray(routed)


def profile_label(scenario: Scenario) -> str:
    """What every output says of the profile a scenario ran with: "generic (CV median 7.8 %)", "none", or the
    profile with why it was not applied."""
    p = load_profile(scenario.cluster.profile)
    if p.name == NO_PROFILE.name:
        return NO_PROFILE.name
    if scenario.cluster.achieved_flops or scenario.cluster.achieved_fraction:
        return f"{p.label}, not applied: the scenario states its rate"
    return p.label
