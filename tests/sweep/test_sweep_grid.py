"""Sweep files: validation (one line naming the axis and the point), the grid, ids, and each point's rows."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import stepbudget as sb
from stepbudget import cli
from stepbudget.inputs.scenario import ScenarioError
from stepbudget.sweep.grid import load_sweep, points
from stepbudget.sweep.point import COLUMNS, evaluate
from stepbudget.sweep.search import scenario_for, search

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sweeps"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sweeps" / "cluster-design.yaml"


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(text)
    return path


def test_the_example_makes_its_grid_less_what_it_leaves_out():
    sweep = load_sweep(EXAMPLE)
    ps = points(sweep)
    assert len(ps) == 2 * 3 * 3 - 2
    assert not any(p.values["cluster.gpu"] == "b200" and p.values["cluster.nic_Bps"] == "200Gb/s"
                   and p.values["cluster.gpus"] != "16384" for p in ps)
    assert all(p.scenario is not None and p.error is None for p in ps)
    # ids are stable (a second read gives the same), distinct, and seed each point's Monte Carlo
    again = points(load_sweep(EXAMPLE))
    assert [p.id for p in ps] == [p.id for p in again]
    assert len({p.id for p in ps}) == len(ps)
    assert len({p.seed for p in ps}) == len(ps)


def test_a_budget_point_at_another_size_keeps_the_layout_and_gives_dp_the_rest():
    ps = points(load_sweep(FIXTURES / "budget.yaml"))
    p = next(p for p in ps if p.values == {"cluster.nic_Bps": "200Gb/s", "cluster.gpus": "8192"})
    (row,) = evaluate(p)
    # what `stepbudget budget` gives for the same job, DP halved with the GPUs (the batch kept: strong scaling)
    want = sb.step_budget("llama3-405b", sets=["cluster.nic_Bps=200Gb/s", "layout.dp=64", "cluster.gpus=8192"])
    assert row["status"] == "ok" and row["dp"] == 64 and row["gpus"] == 8192
    assert row["step_s"] == pytest.approx(want.step_s, rel=1e-12) and row["mfu"] == pytest.approx(want.mfu, rel=1e-12)
    assert row["layout"].startswith("tp8 cp1 pp16 dp64")
    assert set(row) == {"cluster.nic_Bps", "cluster.gpus", *COLUMNS}


def test_a_search_point_keeps_the_searchs_top_layouts_and_simulates_the_best():
    sweep = load_sweep(FIXTURES / "small.yaml")
    p = next(p for p in points(sweep) if p.values == {"cluster.nic_Bps": "400Gb/s", "cluster.gpus": "128"})
    rows = evaluate(p)
    assert p.scenario is not None
    found = search(p.scenario, gpus=128, top=2)
    assert [r["rank"] for r in rows] == [1, 2]
    assert [r["step_s"] for r in rows] == pytest.approx([t["step_s"] for t in found.top], rel=1e-9)
    assert rows[0]["evaluated"] == found.evaluated and rows[0]["feasible"] == found.feasible
    # the best layout's own budget, and its simulated tail: p50 <= p90 <= p99, a jittered step no faster than none
    best = scenario_for(found.scenario, found.top[0], 128)
    assert rows[0]["tp"] == best.layout.tp and rows[0]["pp"] == best.layout.pp and rows[0]["dp"] == best.layout.dp
    assert rows[0]["p50_s"] <= rows[0]["p90_s"] <= rows[0]["p99_s"]
    assert rows[0]["p50_s"] == pytest.approx(rows[0]["sim_step_s"], rel=0.1)
    assert rows[1]["p99_s"] is None  # the tail is the best layout's only
    # the seed comes from the point: the same rows again
    assert evaluate(p) == rows


def test_a_point_that_cannot_hold_the_job_is_a_failed_row_with_its_reason():
    ps = points(load_sweep(FIXTURES / "small.yaml"))
    bad = [p for p in ps if p.values["cluster.gpus"] == "100"]
    assert len(bad) == 3
    for p in bad:
        (row,) = evaluate(p)
        assert row["status"] == "failed" and "100 GPUs" in row["reason"] and row["step_s"] is None
        assert row["gpus"] == 100 and row["model"] == "GPT 175B (MegaScale)"


@pytest.mark.parametrize("text,message", [
    ("base: llama3-405b\naxes:\n  cluster.gpu: [h100-sxm, h900]\n",
     "sweep: axes.cluster.gpu = 'h900' (point 1 and others): cluster.gpu"),
    ("base: llama3-405b\naxes:\n  cluster.nic_Bps: [400Gb/s, 400Gbit]\n",
     "sweep: axes.cluster.nic_Bps = '400Gbit' (point 1 and others):"),
    ("base: llama3-405b\naxes:\n  cluster.gpus: [16384, 1000]\n",
     "sweep: axes.cluster.gpus = '1000' (point 1 and others): cluster.gpus: 1,000 GPUs do not hold whole model replicas"),
    ("base: llama3-405b\naxes:\n  cluster.nosuch: [1]\n", "sweep: axes.cluster.nosuch = '1' (point 0 and others):"),
    ("base: llama3-405b\naxes:\n  cluster.gpu: [h100-sxm, h100-sxm]\n", "sweep: axes.cluster.gpu: 'h100-sxm' is given twice"),
    ("base: llama3-405b\naxes:\n  cluster.gpu: []\n", "sweep: axes.cluster.gpu: no values"),
    ("base: nosuch\n", "sweep: base 'nosuch' with set: scenario: unknown preset 'nosuch'"),
    ("base: llama3-405b\ntaks: {}\n", "sweep: taks: unknown field"),
    ("axes: {}\n", "sweep: base: required field is missing"),
    ("base: llama3-405b\ntask: {search: {top: 0}}\n", "sweep: task.search.top:"),
    ("base: llama3-405b\ntask: {simulate: {jitter: -1}}\n", "sweep: task.simulate.compute_cv: -1"),
    ("base: llama3-405b\ntask: {moe: {skew: nosuch}}\n", "sweep: task.moe.skew: 'nosuch' is not uniform"),
    ("base: llama3-405b\ncombine: zip\naxes:\n  cluster.gpu: [h100-sxm, b200]\n  cluster.gpus: [16384]\n",
     "sweep: combine: zip needs axes of one length; got cluster.gpu: 2, cluster.gpus: 1"),
    ("base: llama3-405b\naxes:\n  cluster.gpu: [h100-sxm]\nexclude:\n  - {cluster.gpux: b200}\n",
     "sweep: exclude[0]: 'cluster.gpux' is not an axis; use one of cluster.gpu"),
    ("base: llama3-405b\naxes:\n  cluster.gpu: [h100-sxm]\nexclude:\n  - {cluster.gpu: h100-sxm}\n",
     "sweep: exclude: leaves no point"),
    ("- just\n- a list\n", "sweep: expected a mapping of base:, axes: and task:"),
])
def test_a_bad_sweep_file_is_one_line_naming_the_field_and_exit_2(tmp_path, text, message):
    path = _file(tmp_path, text)
    with pytest.raises(ScenarioError) as e:
        load_sweep(path)
    assert str(e.value).startswith(message), str(e.value)
    result = CliRunner().invoke(cli.app, ["sweep", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and result.output.startswith("stepbudget: error: sweep:"), result.output
    assert not (tmp_path / "out").exists()  # refused before any folder is made


def test_zip_pairs_the_axes_and_a_named_axis_sets_several_fields(tmp_path):
    path = _file(tmp_path, "base: llama3-405b\ncombine: zip\naxes:\n"
                           "  hardware:\n    - {label: H100 at 400G, cluster.gpu: h100-sxm, cluster.nic_Bps: 400Gb/s}\n"
                           "    - {cluster.gpu: b200, cluster.nic_Bps: 800Gb/s}\n"
                           "  cluster.gpus: [8192, 16384]\n")
    ps = points(load_sweep(path))
    assert [p.values for p in ps] == [
        {"hardware": "H100 at 400G", "cluster.gpus": "8192"},
        {"hardware": "cluster.gpu=b200 cluster.nic_Bps=800Gb/s", "cluster.gpus": "16384"}]
    assert ps[1].scenario is not None and ps[1].scenario.cluster.gpu.name.startswith("B200")
    assert ps[1].scenario.cluster.nic_Bps == 100e9 and ps[1].scenario.layout.dp == 128


def test_the_base_axis_varies_the_scenario_itself(tmp_path):
    path = _file(tmp_path, "base: llama3-405b\naxes:\n  base: [llama3-405b, megascale-175b]\n")
    ps = points(load_sweep(path))
    assert [p.scenario.name for p in ps if p.scenario is not None] == ["llama3-405b", "megascale-175b"]
    assert [evaluate(p)[0]["step_s"] for p in ps] == pytest.approx(
        [sb.step_budget(n).step_s for n in ("llama3-405b", "megascale-175b")], rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(value=st.one_of(st.text(max_size=12), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                       st.booleans(), st.none(), st.lists(st.integers(), max_size=3)),
       field=st.sampled_from(["cluster.gpu", "cluster.nic_Bps", "cluster.gpus", "layout.pp", "batch.global_batch_seqs"]))
def test_any_axis_value_loads_or_is_one_line_naming_the_axis(tmp_path_factory, value, field):
    import yaml

    path = tmp_path_factory.mktemp("sweep") / "s.yaml"
    path.write_text(yaml.safe_dump({"base": "llama3-405b", "axes": {field: [value]}}))
    try:
        ps = points(load_sweep(path))
    except ScenarioError as e:  # one line per problem, every one naming the axis (a value too big to read
        # names where it sits inside the axis: sweep.axes.cluster.gpu[0][0])
        assert all(line.startswith((f"sweep: axes.{field} = ", f"sweep.axes.{field}")) for line in str(e).splitlines()), str(e)
    else:
        assert len(ps) == 1
