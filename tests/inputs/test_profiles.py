"""Calibration profiles (inputs/profiles.py, plan/calibration.py): a written profile reads back as written, none is
the model as built, a profile's costs land on the step exactly, and a bad profile is one line naming
cluster.profile."""

import dataclasses

import pytest
import yaml

from stepbudget.budget.step import estimate
from stepbudget.inputs.errors import ScenarioError
from stepbudget.inputs.profiles import PARAMETERS, gpu_family, load_profile, parse_profile
from stepbudget.inputs.scenario import load, preset_names
from stepbudget.plan.derive import derive
from stepbudget.validation.compare import _runs, with_profile
from stepbudget.validation.convert import to_case
from stepbudget.validation.fit import fit_group, point_of
from stepbudget.validation.profile_files import write_profiles
from tests._util import one_line

OPERATOR_PRESETS = ["deepseek-v3", "megascale-175b"]
"""Presets on the operator model's rate (no achieved_flops or achieved_fraction): a profile applies to them."""
STATED_PRESET = "llama3-405b"
"""A preset that states its rate (achieved_flops): measured on its own stack, so a profile does not apply."""


def step(preset, *sets):
    return float(estimate(derive(load(preset, list(sets)))).step_s)


def write(tmp_path, doc, name="p.yaml"):
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def points():
    """Six H100 runs from the NeMo example file, two sources, measured as the model with a known profile."""
    runs, _ = _runs(["examples/nemo_h100_runs.yaml"])
    cases = [to_case(r) for r in runs]
    picked = cases[:3] + cases[6:9]
    assert len({c.source for c in picked}) == 2
    return [point_of(c) for c in picked]


TRUTH = {"gemm_scale:h100": 0.9, "step_s": 0.3, "microbatch_s": 0.01}


def synthetic(points):
    return [dataclasses.replace(p, case=dataclasses.replace(p.case, measured_step_s=p.exact_s(TRUTH))) for p in points]


def test_a_written_profile_reads_back_with_its_values_and_gives_the_fits_steps(points, tmp_path):
    fit = fit_group("all", synthetic(points), ["gemm_scale", "step_s", "microbatch_s"], rounds=0)
    out = tmp_path / "fitted.yaml"
    written, refused = write_profiles([fit], out, None, ["examples/nemo_h100_runs.yaml"], "stepbudget calibrate")
    assert refused is None and written == [str(out)]
    profile = parse_profile(out.read_text(encoding="utf-8"), str(out))
    assert profile.values == fit.values  # yaml writes floats by repr: exactly
    assert profile.name == "fitted"
    assert profile.cv_median_abs_error == fit.overall["cross_validated"].median_abs_error
    assert profile.document["fitted_on"]["runs"] == [p.case.id for p in points]
    # what calibrate reports (the fit's calibrated step) is what --profile gives on the same run
    for p, pred in zip(points, fit.predictions):
        b = estimate(derive(with_profile(p.case.scenario, str(out))))
        assert float(b.step_s) == pytest.approx(pred.calibrated_s, rel=1e-12)


@pytest.mark.parametrize("preset", preset_names())
def test_profile_none_is_the_model_as_built(preset):
    assert step(preset, "cluster.profile=none") == float(estimate(derive(load(preset))).step_s)
    assert derive(load(preset, ["cluster.profile=none"])).profile.empty


@pytest.mark.parametrize("preset", OPERATOR_PRESETS)
def test_a_step_cost_is_added_to_an_operator_model_step(preset, tmp_path):
    assert derive(load(preset)).rate_source == "operators"
    path = write(tmp_path, {"parameters": {"step_s": 0.5}})
    assert step(preset, f"cluster.profile={path}") == pytest.approx(step(preset) + 0.5, abs=1e-9)


def test_a_micro_batch_cost_is_paid_per_slot_on_the_critical_path(tmp_path):
    plan = derive(load("megascale-175b"))
    slots = plan.microbatches + plan.pp - 1  # Narayanan21 2.2.1: m + p - 1 passes
    path = write(tmp_path, {"parameters": {"microbatch_s": 0.002}})
    assert step("megascale-175b", f"cluster.profile={path}") == pytest.approx(
        step("megascale-175b") + 0.002 * float(slots), abs=1e-9)


def test_a_profile_does_not_touch_a_stated_rate(tmp_path):
    assert derive(load(STATED_PRESET)).rate_source == "stated"
    path = write(tmp_path, {"parameters": {"step_s": 0.5, "gemm_scale:h100": 0.7}})
    assert step(STATED_PRESET, f"cluster.profile={path}") == step(STATED_PRESET)


def test_a_scale_applies_to_its_own_family_only(tmp_path):
    gpu = load("megascale-175b").cluster.gpu.name
    other = "a100" if gpu_family(gpu) != "a100" else "h100"
    path = write(tmp_path, {"parameters": {f"gemm_scale:{other}": 0.6}})
    assert step("megascale-175b", f"cluster.profile={path}") == step("megascale-175b")
    faster = write(tmp_path, {"parameters": {f"gemm_scale:{gpu_family(gpu)}": 1.2}}, "faster.yaml")
    assert step("megascale-175b", f"cluster.profile={faster}") < step("megascale-175b")


def test_neutral_values_change_nothing(tmp_path):
    neutral = {"gemm_scale:h100": 1.0, **{k: p.neutral for k, p in PARAMETERS.items() if k != "gemm_scale"}}
    path = write(tmp_path, {"parameters": neutral})
    assert load_profile(path).empty
    for preset in OPERATOR_PRESETS:
        assert step(preset, f"cluster.profile={path}") == step(preset)


BAD = [
    ({"parameters": {"warp_s": 0.1}}, "parameters.warp_s: not a parameter"),
    ({"parameters": {"gemm_scale": 0.9}}, "parameters.gemm_scale: not a parameter"),  # a scale names its family
    ({"parameters": {"step_s": -0.1}}, "parameters.step_s: -0.1; give a number from 0 to 10 s"),
    ({"parameters": {"gemm_scale:h100": 2.0}}, "parameters.gemm_scale:h100: 2.0; give a number from 0.5 to 1.5"),
    ({"parameters": {"microbatch_s": True}}, "parameters.microbatch_s: True"),
    ({"parameters": {"step_s": {"value": "fast"}}}, "parameters.step_s: 'fast'"),
    ({"parameters": [0.1]}, "has no 'parameters:' mapping"),
    ([1, 2], "has no 'parameters:' mapping"),
    ({"schema_version": 2, "parameters": {}}, "schema_version 2"),
    ("parameters: {step_s: [0.1\n", "is not valid YAML"),
]


@pytest.mark.parametrize(("doc", "says"), BAD)
def test_a_bad_profile_is_one_line_naming_cluster_profile(doc, says, tmp_path):
    path = write(tmp_path, doc)
    with pytest.raises(ScenarioError) as e:
        load("megascale-175b", [f"cluster.profile={path}"])
    message = str(e.value)
    assert "\n" not in message and "cluster.profile" in message and says in message, message


@pytest.mark.parametrize("ref", ["/nonexistent/profile.yaml", "no-such-profile"])
def test_a_missing_profile_is_one_line_naming_cluster_profile(ref):
    with pytest.raises(ScenarioError) as e:
        load_profile(ref)
    assert "\n" not in str(e.value) and str(e.value).startswith("cluster.profile")


def test_the_shipped_profiles_read_and_stay_in_bounds():
    from stepbudget.inputs.profiles import kind_of, shipped_profiles

    assert "generic" in shipped_profiles()
    for name in shipped_profiles():
        p = load_profile(name)
        assert p.cv_median_abs_error is not None and 0 < p.cv_median_abs_error < 0.5, name
        for k, v in p.values.items():
            kind = kind_of(k)
            assert kind is not None and kind.low <= v <= kind.high, (name, k, v)


@pytest.mark.parametrize("args", [
    ["budget", "--profile", "/nonexistent.yaml"],
    ["budget", "megascale-175b", "--profile", "no-such-profile"],
    ["validate", "--profile", "/nonexistent.yaml"],
])
def test_the_cli_refuses_a_bad_profile_in_one_line(args):
    assert "cluster.profile" in one_line(*args)


def test_the_cli_refuses_an_out_of_bounds_profile_in_one_line(tmp_path):
    path = write(tmp_path, {"parameters": {"step_s": 99}})
    line = one_line("budget", "megascale-175b", "--profile", path)
    assert "cluster.profile" in line and "parameters.step_s: 99" in line


def test_validate_says_how_many_calibrated_errors_are_in_sample():
    import yaml
    from importlib import resources

    import stepbudget as sb

    doc = yaml.safe_load((resources.files("stepbudget.inputs") / "profiles" / "megatron-family.yaml").read_text())
    result = sb.validate(profile="megatron-family")
    calibrated = {r.case.id for r in result.value if r.calibrated_error is not None}
    in_fit = calibrated & set(doc["fitted_on"]["runs"])
    assert 0 < len(in_fit) < len(calibrated)  # Megatron-family runs were fitted on; DeepSeek's HAI-LLM was not
    assert result.to_dict()["calibrated_in_sample_runs"] == len(in_fit)
    assert f"{len(calibrated)} runs, {len(in_fit)} in-sample" in " ".join(result.text().split())
