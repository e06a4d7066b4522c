"""The command line as a user meets it: exit codes, one-line errors, JSON keys."""

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import stepbudget as sb
from stepbudget.cli import app
from stepbudget.inputs.scenario import preset_names

runner = CliRunner()
KEYS = {"flops_per_gpu", "compute_s", "bubble_s", "exposed_comm_s", "step_s", "mfu", "comm_share", "intensity", "balance",
        "exchanges"}
ROW_KEYS = {"dim", "collective", "group", "message_bytes", "calls", "bytes_per_gpu", "link", "time_s", "exposed_s"}


def invoke(*args):
    return runner.invoke(app, list(args))


@pytest.mark.parametrize("preset", preset_names())
def test_budget_json_has_the_documented_keys(preset):
    r = invoke("budget", preset, "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert KEYS <= d.keys()
    for k in ("intensity", "balance"):
        assert set(d[k]) == {"nic", "nvlink", "hbm"}
    assert d["exchanges"], "every preset exchanges something"
    for row in d["exchanges"]:
        assert ROW_KEYS <= row.keys()
        assert row["dim"] in {"tp", "cp", "pp", "dp", "ep"}
        assert row["link"] in {"nic", "nvlink"}
        assert 0 <= row["exposed_s"] <= row["time_s"] + 1e-12
    # the step is its terms, written once (budget/step.py)
    extra = 0.0 if d["bubble_in_rate"] else d["bubble_s"]
    assert d["step_s"] == pytest.approx(d["compute_s"] + extra + d["exposed_comm_s"] + d["contention_s"]
                                        + d["step_overhead_s"])


@pytest.mark.parametrize("preset", preset_names())
def test_budget_table_prints(preset):
    r = invoke("budget", preset)
    assert r.exit_code == 0, r.output
    assert "step time" in r.output and "Bytes per GPU" in r.output and "Roofline" in r.output


def test_an_moe_operator_table_says_what_it_leaves_out():
    # the MoE rows of every validation source run slower than the model (README "Out of sample on H100")
    moe = invoke("budget", "megascale-moe-352b")
    dense = invoke("budget", "megascale-175b")
    assert moe.exit_code == 0 and dense.exit_code == 0
    said = " ".join(moe.output.split())
    assert "busiest expert at 1.52x the mean load" in said and "Not modelled: host launch gaps" in said
    assert "Compute by operator" in dense.output and "MoE:" not in dense.output


def test_no_arguments_runs_the_default_scenario():
    r = invoke()
    assert r.exit_code == 0, r.output
    assert "llama3-405b" in r.output and "16,384 GPUs" in r.output


def test_presets_lists_each_with_a_line():
    r = invoke("presets")
    assert r.exit_code == 0
    for name in preset_names():
        assert name in r.output


def test_show_round_trips_through_a_file(tmp_path):
    r = invoke("show", "llama3-405b", "--set", "layout.pp=8", "--set", "layout.dp=256")
    assert r.exit_code == 0, r.output
    f = tmp_path / "mine.yaml"
    f.write_text(r.output)
    a = json.loads(invoke("budget", str(f), "--json").output)
    b = json.loads(invoke("budget", "llama3-405b", "--set", "layout.pp=8", "--set", "layout.dp=256", "--json").output)
    assert a["step_s"] == pytest.approx(b["step_s"])


def test_toml_scenario_with_base(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text('base = "llama3-405b"\n[layout]\npp = 8\ndp = 256\n')
    r = invoke("budget", str(f), "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["layout"]["pp"] == 8


def test_budget_json_says_which_attention_kernel_and_how_many_replicas():
    r = invoke("budget", "megascale-175b", "--json", "--set", "layout.dp_replicas=8", "--set",
               "layout.attention_kernel=flash-attention-2")
    assert r.exit_code == 0, r.output
    layout = json.loads(r.output)["layout"]
    assert layout["dp_replicas"] == 8 and layout["attention_kernel"] == "flash-attention-2"
    assert any(x["what"] == "grads across replicas" and x["group"] == 8 for x in json.loads(r.output)["exchanges"])


@pytest.mark.parametrize("argv, words", [
    (["budget", "--jsn"], ["--jsn", "stepbudget budget --help"]),
    (["wire", "--steps", "abc"], ["--steps"]),
    (["nosuchcmd"], ["nosuchcmd", "stepbudget --help"]),
    (["budget", "--set", "layout.dp=64"], ["layout.dp=128"]),
])
def test_the_entry_point_gives_usage_errors_one_line_too(argv, words):
    code = f"import sys; from stepbudget.cli import run; sys.argv = ['stepbudget', *{argv!r}]; run()"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    err = r.stderr.strip()
    assert r.returncode == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("stepbudget: error:") and all(w in err for w in words), err


def test_a_pipelined_operator_model_budget_says_what_measured_steps_add():
    # README: MLPerf's and MegaScale's step = a + b m fits carry 0.3-0.9 s a step beyond the model's budget
    r = invoke("budget", "megascale-175b", "--json")
    step = json.loads(r.output)["step_s"]
    shown = _words(invoke("budget", "megascale-175b").output)
    assert "0.3-0.9 s a step more than this budget" in shown
    assert f"{0.3 / step:.0%}-{0.9 / step:.0%} of this step" in shown
    assert "a step more than" not in _words(invoke("budget", "llama3-405b").output)  # a measured whole-step rate


def _words(text: str) -> str:
    """Printed text with rich's line wrapping undone (a caption wraps to the terminal's width)."""
    return " ".join(text.replace("│", " ").split())


@given(st.floats(0, 5), st.floats(0, 5))
@settings(max_examples=15, deadline=None)
def test_a_fixed_cost_per_step_adds_itself_and_more_is_never_faster(low, high):
    low, high = sorted((low, high))
    base = sb.estimate(sb.derive(sb.load("megascale-175b")))
    steps = [float(sb.estimate(sb.derive(sb.load("megascale-175b", [f"cluster.step_overhead_s={x!r}"]))).step_s)
             for x in (low, high)]
    assert steps[0] == pytest.approx(float(base.step_s) + low) and steps[0] <= steps[1]


def test_a_fixed_cost_per_step_is_shown_simulated_and_refused_inside_a_whole_step_rate():
    r = _words(invoke("budget", "megascale-175b", "--set", "cluster.step_overhead_s=600ms").output)
    assert "fixed cost per step" in r and "a step more than" not in r
    d = json.loads(invoke("budget", "megascale-175b", "--set", "cluster.step_overhead_s=600ms", "--json").output)
    assert d["step_overhead_s"] == pytest.approx(0.6)
    sim = json.loads(invoke("simulate", "megascale-175b", "--set", "cluster.step_overhead_s=600ms", "--json").output)
    plain = json.loads(invoke("simulate", "megascale-175b", "--json").output)
    assert sim["step_s"] - plain["step_s"] == pytest.approx(0.6) and sim["step_overhead_s"] == pytest.approx(0.6)
    # the links idle through it: their busy share is of the whole step
    busiest = max(plain["link_utilisation"].values())
    assert max(sim["link_utilisation"].values()) == pytest.approx(busiest * plain["step_s"] / sim["step_s"])
    refused = invoke("budget", "llama3-405b", "--set", "cluster.step_overhead_s=0.5")
    assert refused.exit_code == 2 and "cluster.step_overhead_s" in refused.output and "Traceback" not in refused.output
