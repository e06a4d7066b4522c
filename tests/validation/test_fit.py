"""The calibration fit (validation/fit.py): it recovers parameters it generated, it does not invent costs from
noise, and its leave-one-source-out folds never train on the source they predict.

The runs are the example files' NeMo H100 and Megatron-LM A100 runs, every one predictable: their measured step
is replaced by the model's own step with known parameters, so what the fit must return is known exactly.
"""

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stepbudget.inputs.errors import ScenarioError
from stepbudget.validation.compare import _runs
from stepbudget.validation.convert import to_case
from stepbudget.validation.fit import (SCALE_GRID, bootstrap, calibrate, check_params, fit_group, fit_values, folds,
                                       framework_group, parameter_names, point_of)

FILES = ["examples/nemo_h100_runs.yaml", "examples/megatron_a100_runs.yaml"]
SIGMA = 0.03
"""The lognormal noise of the noise tests: 3 %, median 1."""


@pytest.fixture(scope="module")
def points():
    """Ten runs of each file (two sources in each): 20 points on two GPU families."""
    runs, bad = _runs(FILES)
    assert not bad
    cases = [to_case(r) for r in runs]
    usable = [c for c in cases if c.scenario is not None and c.reason is None and c.measured_step_s]
    h100 = [c for c in usable if "H100" in c.scenario.cluster.gpu.name]
    a100 = [c for c in usable if "A100" in c.scenario.cluster.gpu.name]
    picked = h100[:10] + a100[::2][:10]  # every other A100 run: Narayanan et al. and Korthikanti et al. both
    assert len(picked) == 20 and len({c.source for c in picked}) >= 4
    return [point_of(c) for c in picked]


def measured_as(points, step_of):
    """``points`` with each run's measured step replaced by ``step_of(point)``."""
    return [dataclasses.replace(p, case=dataclasses.replace(p.case, measured_step_s=step_of(p))) for p in points]


def test_the_fits_fast_step_is_the_full_models_at_every_grid_scale(points):
    # the fit interpolates the budget on SCALE_GRID: at its nodes that is the full model with the profile applied
    for p in points[::4]:
        for s in SCALE_GRID[::8]:
            values = {f"gemm_scale:{p.family}": float(s), "step_s": 0.7, "microbatch_s": 0.02}
            assert p.step_s(values) == pytest.approx(p.exact_s(values), rel=1e-9)
        assert p.exact_s({}) == pytest.approx(p.base_s[np.argmin(abs(SCALE_GRID - 1.0))] + p.fixed_s, rel=1e-12)


@pytest.mark.parametrize("truth", [
    {"gemm_scale:h100": 0.9, "step_s": 0.3, "microbatch_s": 0.01},  # A100 at 1: the model as built
    {"gemm_scale:h100": 1.13, "gemm_scale:a100": 0.87, "step_s": 1.2, "microbatch_s": 0.004},  # off the grid
])
def test_parameters_are_recovered_from_steps_they_generated(points, truth):
    synthetic = measured_as(points, lambda p: p.exact_s(truth))
    names = parameter_names(synthetic, ["gemm_scale", "step_s", "microbatch_s"])
    assert names == ["gemm_scale:a100", "gemm_scale:h100", "step_s", "microbatch_s"]  # no MoE run: no routed cost
    fitted = fit_values(synthetic, names)
    for name in names:
        expected = truth.get(name, 1.0 if name.startswith("gemm_scale") else 0.0)
        if name.startswith("gemm_scale"):
            assert fitted[name] == pytest.approx(expected, rel=0.02), name
        else:
            assert fitted[name] == pytest.approx(expected, abs=0.01), name
    # and the recovered profile gives back every run's step (the in-sample error is the interpolation's alone)
    for p in synthetic:
        assert p.exact_s(fitted) == pytest.approx(p.measured_s, rel=0.005)


def test_recovery_holds_through_fit_group_and_its_cross_validation(points):
    truth = {"gemm_scale:h100": 0.9, "step_s": 0.3, "microbatch_s": 0.01}
    synthetic = measured_as(points, lambda p: p.exact_s(truth))
    fit = fit_group("all", synthetic, ["gemm_scale", "step_s", "microbatch_s"], rounds=0)
    assert fit.values["gemm_scale:h100"] == pytest.approx(0.9, rel=1e-3)
    assert fit.intervals == {n: (v, v) for n, v in fit.values.items()}  # no bootstrap: the point itself
    for p, pred in zip(synthetic, fit.predictions):
        assert pred.uncalibrated_s == p.exact_s({})
        assert pred.calibrated_s == pytest.approx(pred.case.measured_step_s, rel=1e-3)
    # every source is held out once; the families stay identified without it, so the held-out fit recovers too
    cv = fit.overall["cross_validated"]
    assert cv.n == len(synthetic) and cv.median_abs_error < 0.01
    assert fit.overall["uncalibrated"].median_abs_error > 0.05  # a 10 % slower h100 and 0.3 s a step: visible
    assert not fit.worse_than_uncalibrated


def noisy(points, seed):
    rng = np.random.default_rng(seed)
    noise = rng.lognormal(0.0, SIGMA, len(points))
    return measured_as(points, lambda p: p.exact_s({}) * float(noise[points.index(p)]))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_on_noise_alone_the_scale_interval_holds_one(points, seed):
    # A 90 % interval misses the truth one draw in ten by construction, so the check allows one standard error
    # of the noise's mean beside it: sigma/sqrt(n) for n runs of a family (10 here, about 1 %).
    runs = noisy(points, seed)
    names = parameter_names(runs, ["gemm_scale"])
    intervals = bootstrap(runs, names, rounds=30, seed=seed)
    for name, (lo, hi) in intervals.items():
        n = sum(p.family == name.partition(":")[2] for p in runs)
        se = SIGMA / np.sqrt(n)
        assert lo - se <= 1.0 <= hi + se, (name, lo, hi)
        assert 0 < hi - lo < 4 * 1.645 * se  # about 2 x 1.645 standard errors wide: the noise's, not more


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_on_noise_alone_the_costs_stay_within_the_noise(points, seed):
    runs = noisy(points, seed)
    names = parameter_names(runs, ["gemm_scale", "step_s", "microbatch_s"])
    values = fit_values(runs, names)
    intervals = bootstrap(runs, names, rounds=30, seed=seed)
    # what the lower end of each cost's interval adds to a run is less than the noise: zero is within the noise
    for p in runs:
        added = intervals["step_s"][0] + intervals["microbatch_s"][0] * p.slots
        assert added < SIGMA * p.exact_s({}), p.case.id
    # and the fitted profile moves the median run by less than the noise's sigma
    moved = np.median([abs(p.exact_s(values) / p.exact_s({}) - 1) for p in runs])
    assert moved < SIGMA


def fake_points(sources):
    """The least a fold needs of a point: its run's source."""
    return [SimpleNamespace(case=SimpleNamespace(source=s)) for s in sources]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from("abcdefg"), min_size=1, max_size=40))
def test_folds_never_train_on_the_source_they_hold_out(sources):
    pts = fake_points(sources)
    fs = folds(pts)
    assert [f.held_out for f in fs] == list(dict.fromkeys(sources))  # one fold per source, in order of first run
    held = [i for f in fs for i in f.test]
    assert sorted(held) == list(range(len(sources)))  # every run held out exactly once
    for f in fs:
        assert all(sources[i] != f.held_out for i in f.train)
        assert all(sources[i] == f.held_out for i in f.test)
        assert sorted(f.train + f.test) == list(range(len(sources)))  # and every other run trained on


def test_one_source_is_not_cross_validated(points):
    one = [p for p in points if p.case.source == points[0].case.source]
    fit = fit_group("all", one, ["step_s"], rounds=0)
    assert all(pred.cross_validated_s is None for pred in fit.predictions)
    assert fit.overall["cross_validated"].median_abs_error is None
    assert fit.worse_than_uncalibrated  # not measured: never written


def test_unknown_params_and_groups_are_one_line_errors():
    with pytest.raises(ScenarioError, match=r"^params: 'gemm' is not a parameter"):
        check_params(["gemm"])
    with pytest.raises(ScenarioError, match=r"^params: none given"):
        check_params([" ", ""])
    assert check_params(["step_s", " step_s", "gemm_scale"]) == ["step_s", "gemm_scale"]
    with pytest.raises(ScenarioError, match=r"^group_by: 'model'"):
        calibrate([], by="model")
    with pytest.raises(ScenarioError, match=r"^runs file: no run can be predicted"):
        calibrate([])


@pytest.mark.parametrize(("framework", "group"), [
    ("NeMo (Megatron-Core, Transformer Engine)", "megatron-family"),
    ("Megatron-LM (2021)", "megatron-family"),
    ("Megatron-DeepSpeed", "deepspeed"),  # DeepSpeed's runtime, though the name holds Megatron
    ("torchtitan (FSDP2)", "torchtitan-fsdp2"),
    ("OLMo-core", "torchtitan-fsdp2"),
    ("LLM Foundry (Composer)", "composer-fsdp"),
    ("MaxText", "other"),
])
def test_framework_groups(framework, group):
    assert framework_group(framework) == group


@pytest.fixture
def two_source_runs(tmp_path):
    """Three runs from each of the NeMo file's two sources and two from each of the A100 file's: 10 runs."""
    import yaml

    nemo = yaml.safe_load(open(FILES[0], encoding="utf-8"))["runs"]
    a100 = yaml.safe_load(open(FILES[1], encoding="utf-8"))["runs"]
    korthikanti = [r for r in a100 if r["id"].startswith("korthikanti")]
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"schema_version": 1, "runs": nemo[:3] + nemo[6:9] + a100[:2] + korthikanti[:2]}),
                    encoding="utf-8")
    return str(path)


def _invoke(*args):
    from typer.testing import CliRunner

    from stepbudget.cli import app

    return CliRunner().invoke(app, list(args))


def test_cli_calibrate_writes_its_profile_or_says_not_written(two_source_runs, tmp_path):
    out = tmp_path / "p.yaml"
    r = _invoke("calibrate", "--runs", two_source_runs, "--bootstrap", "0", "--out", str(out))
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    if r.exit_code == 0:
        from stepbudget.inputs.profiles import load_profile

        assert out.exists() and "wrote" in r.stdout
        assert load_profile(str(out)).document["fitted_on"]["runs"]  # it reads back as a profile
    else:
        assert r.exit_code == 1 and "not written" in r.stdout and not out.exists(), r.output
    assert not list(tmp_path.glob("*.tmp*"))  # the atomic write leaves no temporary file


def test_cli_calibrate_by_gpu_writes_stem_group_names(two_source_runs, tmp_path):
    out = tmp_path / "p.yaml"
    r = _invoke("calibrate", "--runs", two_source_runs, "--bootstrap", "0", "--group-by", "gpu", "--out", str(out),
                "--json")
    import json

    doc = json.loads(r.stdout)
    assert [g["group"] for g in doc["groups"]] == ["a100", "h100"]
    refused = doc["refused"] or ""
    expected = {str(tmp_path / f"p-{g}.yaml") for g in ("a100", "h100") if not refused.startswith(f"{g}:")
                and f"; {g}:" not in refused}
    assert set(doc["written"]) == expected
    assert {str(p) for p in tmp_path.glob("*.yaml") if p.name != "runs.yaml"} == expected
    assert r.exit_code == (1 if refused else 0)
