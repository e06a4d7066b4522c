"""Which calibration profile a plan runs with, and how outputs name it (``Plan.with_profile`` applies it).

What each parameter means is in inputs/profiles.py. A profile calibrates the operator model only: a
scenario that states its rate (``achieved_flops``, ``achieved_fraction``) measured it on its own stack,
which already holds what a profile adds.
"""

from __future__ import annotations

from stepbudget.inputs.profiles import NO_PROFILE, Profile, load_profile
from stepbudget.inputs.scenario import Scenario


def profile_of(scenario: Scenario, rate_source: str) -> Profile:
    """The profile the plan of ``scenario`` runs with: its ``cluster.profile`` on the operator model, else none."""
    return load_profile(scenario.cluster.profile) if rate_source == "operators" else NO_PROFILE


def profile_label(scenario: Scenario) -> str:
    """What every output says of the profile a scenario ran with: "generic (CV median 7.8 %)", "none", or the
    profile with why it was not applied."""
    p = load_profile(scenario.cluster.profile)
    if p.name == NO_PROFILE.name:
        return NO_PROFILE.name
    if scenario.cluster.achieved_flops or scenario.cluster.achieved_fraction:
        return f"{p.label}, not applied: the scenario states its rate"
    return p.label
