"""The Python API (stepbudget.api): one function per command, the command's numbers, results a notebook can show."""

from __future__ import annotations

import inspect
import json

import numpy as np
import pytest
from typer.testing import CliRunner

import stepbudget as sb
from stepbudget import api, cli

CASES = {  # function, its arguments, and the command line that prints the same job
    "budget": (sb.step_budget, ("llama3-405b",), {"sets": ["layout.pp=8", "layout.dp=256"]},
               ["budget", "llama3-405b", "--set", "layout.pp=8", "--set", "layout.dp=256"]),
    "memory": (sb.memory, ("deepseek-v3",), {}, ["memory", "deepseek-v3"]),
    "scale": (sb.scale, ("llama3-405b", [8192, 16384]), {}, ["scale", "llama3-405b", "--gpus", "8192,16384"]),
    "whatif": (sb.whatif, ("llama3-405b", {"cluster.nic_Bps=200Gb/s": ["cluster.nic_Bps=200Gb/s"]}), {},
               ["whatif", "llama3-405b", "--vary", "cluster.nic_Bps=200Gb/s"]),
    "wire": (sb.nic, ("hpn-gpt3-175b",), {"window_s": 1.0}, ["wire", "hpn-gpt3-175b", "--window", "1s"]),
    "simulate": (sb.simulate, ("megascale-175b",), {"link_rate": 0.5}, ["simulate", "megascale-175b", "--link-rate", "0.5"]),
    "moe": (sb.moe, ("megascale-moe-352b",), {"skew": "zipf:0.8"}, ["moe", "megascale-moe-352b", "--skew", "zipf:0.8"]),
}


@pytest.fixture(scope="module")
def results():
    return {name: f(*args, **kwargs) for name, (f, args, kwargs, _) in CASES.items()}


@pytest.mark.parametrize("name", CASES)
def test_a_result_is_the_commands_json(name, results):
    *_, argv = CASES[name]
    printed = CliRunner().invoke(cli.app, [*argv, "--json"])
    assert printed.exit_code == 0, printed.output
    expected = json.loads(printed.output)
    got = json.loads(json.dumps(results[name].to_dict()))
    for timed in ("schedule_seconds",):  # the host's time for a FAST schedule varies run to run
        expected.get("alltoall", {}).pop(timed, None)
        got.get("alltoall", {}).pop(timed, None)
    assert got == expected


@pytest.mark.parametrize("name", CASES)
def test_a_result_shows_short_and_as_html(name, results):
    r = results[name]
    assert len(repr(r)) < 160 and repr(r).startswith(f"<{type(r).__name__} ")
    html = r._repr_html_()
    assert "<pre" in html and r.text().splitlines()[0].split()[0] in html  # the command's own first line


@pytest.mark.parametrize("name", CASES)
def test_rows_are_flat_and_frames_follow_them(name, results):
    rows = results[name].rows()
    assert rows and all(not isinstance(v, dict) for row in rows for v in row.values())
    pandas = pytest.importorskip("pandas")
    frame = results[name].to_frame()
    assert isinstance(frame, pandas.DataFrame) and len(frame) == len(rows)


def test_attributes_read_through_to_the_library_result(results):
    b = results["budget"]
    assert isinstance(b.value, sb.Budget)
    assert float(b.step_s) == pytest.approx(b.to_dict()["step_s"])
    s = results["simulate"]
    assert len(s.deadline_misses) == s.to_dict()["deadline_misses"] and s.monte_carlo is None
    with pytest.raises(AttributeError):
        s.not_a_field


def test_search_keeps_its_top_and_ranks_them(results):
    best = sb.search("megascale-175b", gpus=1024, top=3)
    steps = [row["step_s"] for row in best.rows()]
    assert len(steps) == 3 and steps == sorted(steps)
    assert best.value.feasible == best.to_dict()["feasible"] > 0


def test_validate_reports_progress_and_every_run():
    calls = []
    v = sb.validate(progress=lambda done, total: calls.append((done, total)))
    total = len(v.value)
    assert calls[-1] == (total, total) and [c[0] for c in calls] == list(range(1, total + 1))
    assert v.to_dict()["summary"]["n"] == sum(r["skipped"] is None for r in v.rows())


def test_a_simulation_with_jitter_has_its_tail():
    r = sb.simulate("llama3-405b-puredp", compute_cv=0.05, steps=40, replicas=8)  # one stage: a small graph
    d = r.to_dict()
    assert d["p50_s"] <= d["p90_s"] <= d["p99_s"] and r.monte_carlo.replicas == 8


def test_the_library_refuses_what_the_cli_refuses():
    with pytest.raises(ValueError, match="compute_cv"):
        sb.simulate("megascale-175b", compute_cv=-1)
    with pytest.raises(ValueError, match="link_rate"):
        sb.simulate("megascale-175b", link_rate=0)
    with pytest.raises(ValueError, match="variants"):
        sb.whatif("llama3-405b")
    with pytest.raises(ValueError, match="layout: tp\\*cp\\*pp\\*dp"):
        sb.step_budget(sb.load("llama3-405b"), sets=["layout.pp=8"])  # a Scenario takes sets as a typed edit


def test_every_function_takes_keywords_with_names_and_defaults():
    # a notebook user gets completion: no **options anywhere in the public functions
    for name in ("step_budget", "memory", "search", "scale", "whatif", "validate", "simulate", "nic", "moe"):
        params = inspect.signature(getattr(sb, name)).parameters.values()
        assert all(p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) for p in params), name
        assert getattr(sb, name).__doc__


def test_library_objects_have_short_reprs():
    sc = sb.load("llama3-405b")
    plan = sb.derive(sc)
    assert len(repr(sb.estimate(plan))) < 120 and "6.28 s" in repr(sb.estimate(plan))
    assert len(repr(sb.memory_per_gpu(plan))) < 120
    many = sb.estimate(sb.derive(sc, {"pp": np.array([8, 16]), "dp": np.array([256, 128])}))
    assert "shape (2,)" in repr(many)


def test_a_budget_renders_as_an_html_table():
    html = sb.estimate(sb.derive(sb.load("llama3-405b")))._repr_html_()
    assert html.startswith("<table>") and "<td>step</td>" in html and "6.28 s" in html


def test_json_ready_values():
    assert api.finite({"a": [np.float64(np.inf), np.int64(3)], "b": float("nan")}) == {"a": [None, 3], "b": None}


def test_a_public_name_means_one_thing_across_the_packages():
    # the same name for two different things (sim.simulate and stepbudget.simulate, a2a's and the
    # simulator's maxmin_rates, a2a's and the pipeline's Schedule) sent a notebook user to the wrong one
    import importlib

    seen: dict[str, tuple[str, object]] = {}
    for module in ("stepbudget", "stepbudget.sim", "stepbudget.a2a", "stepbudget.enums", "stepbudget.chapter.firstorder",
                   "stepbudget.api"):
        mod = importlib.import_module(module)
        for name in getattr(mod, "__all__", [n for n in vars(mod) if not n.startswith("_")]):
            obj = getattr(mod, name)
            if inspect.ismodule(obj) or name in ("annotations",):
                continue
            where, first = seen.setdefault(name, (module, obj))
            assert first is obj, f"{name} is one thing in {where} and another in {module}"


def test_every_name_of_the_chapters_layer_behind_the_door_loads_in_a_fresh_process():
    # a fresh interpreter: in this one, the modules behind the names are imported already
    import subprocess
    import sys

    code = ("from stepbudget import api\n"
            "for name in api._CHAPTER: print(name, type(getattr(api, name)).__name__)\n"
            "from stepbudget.api import firstorder, dimensions\n"
            "print(firstorder.__name__, dimensions.__name__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == len(api._CHAPTER) + 1 and lines[-1] == "stepbudget.chapter.firstorder stepbudget.chapter.dimensions"
    with pytest.raises(AttributeError, match="no attribute 'nonesuch'"):
        api.nonesuch  # noqa: B018
