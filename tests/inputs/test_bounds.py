"""Every bounded number of a scenario is bounded where the budget stays finite: a value past a bound is one line
naming the field, and any value within the bounds (alone, or all at their extremes together) gives a finite budget."""

from __future__ import annotations

import math
import typing

import numpy as np
import pytest
from annotated_types import Ge, Gt, Le, Lt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic.fields import FieldInfo

from _util import one_line

import stepbudget as sb
from stepbudget.budget.memory import memory_per_gpu
from stepbudget.inputs._types import MAX_COUNT, MIN_EFFICIENCY
from stepbudget.inputs.hardware import GPU, MAX_OVERSUBSCRIPTION, Cluster, Kernels, Tier
from stepbudget.inputs.layout import MAX_OPTIMIZER_BYTES, Precision
from stepbudget.inputs.model import MoE
from stepbudget.inputs.scenario import ScenarioError


def _bounds(info: FieldInfo) -> tuple[float, float] | None:
    """(lowest, highest) a field's own metadata allows, looking inside ``X | None``; None when unbounded."""
    metadata = list(info.metadata)
    for arg in typing.get_args(info.annotation):
        metadata += [m for a in typing.get_args(arg) if isinstance(a, FieldInfo) for m in a.metadata]
    lo = next((float(m.ge) for m in metadata if isinstance(m, Ge)), None)
    lo = next((float(np.nextafter(m.gt, np.inf)) for m in metadata if isinstance(m, Gt)), lo)
    hi = next((float(m.le) for m in metadata if isinstance(m, Le)), None)
    hi = next((float(np.nextafter(m.lt, -np.inf)) for m in metadata if isinstance(m, Lt)), hi)
    return None if lo is None or hi is None else (lo, hi)


def _floats(model: type, prefix: str) -> dict[str, tuple[float, float]]:
    """Bounded float fields of ``model`` by dotted key (counts have their own bound, MAX_COUNT)."""
    out = {}
    for name, info in model.model_fields.items():
        if "float" in str(info.annotation):
            b = _bounds(info)
            if b is not None:
                out[f"{prefix}{name}"] = b
    return out


# the operator model (no stated rate) reads every kernel figure; megascale-175b runs it, llama3-405b a measured rate
KERNEL_FIELDS = _floats(Kernels, "cluster.gpu.kernels.")
GPU_FIELDS = _floats(GPU, "cluster.gpu.")
CLUSTER_FIELDS = _floats(Cluster, "cluster.")
PRECISION_FIELDS = _floats(Precision, "precision.")
OVERLAP_FIELDS = {f"overlap.{d}": (0.0, 1.0) for d in ("tp", "cp", "pp", "dp", "ep")} | {
    "overlap.comm_sm_share": (0.0, float(np.nextafter(1.0, 0.0)))}
BOUNDED = {**KERNEL_FIELDS, **GPU_FIELDS, **CLUSTER_FIELDS, **PRECISION_FIELDS, **OVERLAP_FIELDS,
           "layout.dp_bucket_params": (1.0, float(MAX_COUNT))}
MOE_FIELDS = {f"model.moe.{k}": v for k, v in _floats(MoE, "").items()}
TIER_BOUNDS = _bounds(Tier.model_fields["oversubscription"])


def preset_for(key: str) -> str:
    # the overhead per step is refused inside a measured whole-step rate: evaluate it on a kernel-scope preset
    return "deepseek-v3" if key.startswith("model.moe.") else "megascale-175b"


def finite_budget(name: str, sets: list[str]) -> None:
    """The budget and memory of ``name`` with ``sets``: every term a finite number (ratios too), and no step on
    the way overflowed (an MFU of 0 from an infinite step x peak is finite, and as wrong)."""
    with np.errstate(over="raise", invalid="raise"):
        b = sb.estimate(sb.derive(sb.load(name, sets)))
        mem = memory_per_gpu(b.plan)
        terms = {"step_s": b.step_s, "compute_s": b.compute_s, "bubble_s": b.bubble_s, "comm_s": b.comm_s,
                 "exposed_comm_s": b.exposed_comm_s, "contention_s": b.contention_s, "mfu": b.mfu, "hfu": b.hfu,
                 "comm_share": b.comm_share, "exposed_share": b.exposed_share, "memory": mem.total,
                 "hbm_bytes": b.hbm_bytes, **{f"exposed {x.dim} {x.what}": e for x, e in zip(b.exchanges, b.exposed_s)}}
        bad = {k: float(v) for k, v in terms.items() if not np.all(np.isfinite(v))}
    assert not bad, (sets, bad)
    assert float(b.step_s) > 0 and 0 <= float(b.mfu) < math.inf


def test_every_efficiency_of_the_cluster_has_the_lower_bound():
    shares = {k for k in {**KERNEL_FIELDS, **CLUSTER_FIELDS} if k.split(".")[-1] in (
        "gemm", "gemm_fp8", "attention_fwd", "attention_bwd", "flash2_fwd", "flash2_bwd", "hbm", "clock",
        "achieved_fraction", "nvlink_efficiency", "nic_efficiency")}
    assert len(shares) == 11
    assert all(BOUNDED[k] == (MIN_EFFICIENCY, 1.0) for k in shares)


# --- the regressions: values that printed nan or inf ---------------------------------------------------------


def test_a_denormal_nvlink_efficiency_is_one_line_not_nan():
    line = one_line("scale", "llama3-405b", "--set", "cluster.nvlink_efficiency=5e-324")
    assert line.startswith("stepbudget: error: cluster.nvlink_efficiency: ") and "0.001" in line


def test_a_huge_optimizer_state_is_one_line_not_inf():
    line = one_line("budget", "llama3-405b", "--set", "precision.optimizer_bytes=1.7e308")
    assert line.startswith("stepbudget: error: precision.optimizer_bytes: ") and "64" in line


@pytest.mark.parametrize("key, value, words", [
    ("cluster.gpu.kernels.gemm_half_dim", "1e308", ["65536"]),
    ("cluster.gpu.kernels.attention_half_seq", "1e308", ["1048576"]),
    ("cluster.tiers", "[{domain_gpus: 1024, oversubscription: 1e308}]", ["cluster.tiers.0.oversubscription", "1024"]),
    ("layout.dp_bucket_params", "5e-324", ["at least 1"]),
    ("layout.dp_bucket_params", "1e308", ["1099511627776"]),
    ("cluster.achieved_fraction", "1e-300", ["0.001"]),
    ("cluster.gpu.kernels.clock", "5e-324", ["0.001"]),
])
def test_other_extremes_that_overflowed_are_refused_by_name(key, value, words):
    line = one_line("budget", "megascale-175b", "--set", f"{key}={value}")
    assert line.startswith(f"stepbudget: error: {key.split('=')[0]}"), line
    assert all(w in line for w in words), line


@pytest.mark.parametrize("key", sorted(BOUNDED))
def test_a_value_just_past_either_bound_names_the_field(key):
    lo, hi = BOUNDED[key]
    for value in (lo / 2 if lo > 0 else -1e-9, hi * 2 if hi > 0 else 1.0, 5e-324 if lo > 0 else None, 1e308):
        if value is None or lo <= value <= hi:
            continue
        with pytest.raises(ScenarioError, match=rf"^{key.replace('.', r'[.]')}"):
            sb.load(preset_for(key), [f"{key}={value!r}"])


# --- the property: within the bounds, a finite budget --------------------------------------------------------


@pytest.mark.parametrize("key", sorted(BOUNDED) + sorted(MOE_FIELDS))
def test_either_bound_gives_a_finite_budget(key):
    lo, hi = (BOUNDED | MOE_FIELDS)[key]
    for value in (lo, hi):
        finite_budget(preset_for(key), [f"{key}={value!r}"])


@given(data=st.data())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_value_within_the_bounds_gives_a_finite_budget(data):
    key = data.draw(st.sampled_from(sorted(BOUNDED | MOE_FIELDS)))
    lo, hi = (BOUNDED | MOE_FIELDS)[key]
    value = data.draw(st.floats(lo, hi))
    finite_budget(preset_for(key), [f"{key}={value!r}"])


@given(data=st.data())
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_all_fields_at_their_extremes_together_give_a_finite_budget(data):
    # the worst case is every bound at once: the slowest kernels on the slowest links with the most bytes
    picks = {k: data.draw(st.sampled_from([lo, hi]) | st.floats(lo, hi), label=k) for k, (lo, hi) in BOUNDED.items()}
    if not data.draw(st.booleans(), label="stated rate"):  # else the operator model, which reads every kernel figure
        del picks["cluster.achieved_flops"], picks["cluster.achieved_fraction"]
    sets = [f"{k}={v!r}" for k, v in picks.items()]
    oversub = data.draw(st.floats(*TIER_BOUNDS))
    finite_budget("hpn-gpt3-175b", sets + [f"cluster.tiers=[{{domain_gpus: 1024, oversubscription: {oversub!r}}}]"])


def test_the_tier_and_optimizer_bounds_are_the_named_limits():
    assert TIER_BOUNDS == (1.0, MAX_OVERSUBSCRIPTION)
    assert PRECISION_FIELDS["precision.optimizer_bytes"] == (0.0, MAX_OPTIMIZER_BYTES)
