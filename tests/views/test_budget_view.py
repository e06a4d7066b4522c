"""What `budget`, `show` and `memory` tell an engineer about their own job: one story of a measured rate, whether
it fits, throughput and time to train, where each value came from, and the defaults that decide the step."""

import json

import pytest
from typer.testing import CliRunner

import stepbudget as sb
from stepbudget.cli import app


def _run(*args, code=0):
    r = CliRunner().invoke(app, list(args))
    assert r.exit_code == code, r.output
    return r


def test_budget_tells_one_story_of_a_measured_whole_step_rate():
    text = " ".join(_run("budget", "llama3-405b").stdout.replace("│", " ").split())
    d = sb.step_budget("llama3-405b").to_dict()
    k = d["kernel_view"]
    # one compute, one bubble: compute at the measured rate holds the kernels, the bubble and the waits
    assert d["bubble_s"] == k["bubble_s"]
    assert d["compute_s"] == pytest.approx(d["step_s"] - d["by_dim"]["dp"]["exposed_s"], rel=1e-12)
    assert d["step_s"] == pytest.approx(k["step_s"], rel=1e-12)
    assert "compute time 6.23 s at the measured 400 TFLOP/s whole-step rate: kernels 4.43 s at 562 TFLOP/s + bubble " \
           "1.17 s" in text
    assert "pipeline bubble 1.17 s" in text and "1.59 s" not in text
    assert "scale, search and whatif read" not in text  # no second story


def test_a_job_that_does_not_fit_says_so_first():
    r = _run("budget", "llama3-405b", "--set", "layout.pp=8", "--set", "layout.dp=256")
    first = r.stdout.splitlines()[0]
    assert first.startswith("does not fit: llama3-405b needs 101 GB per GPU") and "80 GB of HBM" in first
    d = json.loads(_run("budget", "llama3-405b", "--set", "layout.pp=8", "--set", "layout.dp=256", "--json").stdout)
    assert d["fits"] is False and d["memory_bytes"] > d["hbm_bytes"] == 80e9
    assert list(d)[:3] == ["fits", "memory_bytes", "hbm_bytes"]
    fits = json.loads(_run("budget", "llama3-405b", "--json").stdout)
    assert fits["fits"] is True and fits["memory_bytes"] < fits["hbm_bytes"]
    assert not _run("budget", "llama3-405b").stdout.startswith("does not fit")


def test_memory_check_exits_1_when_the_job_does_not_fit():
    _run("memory", "llama3-405b", "--check")
    r = _run("memory", "llama3-405b-puredp", "--check", code=1)
    assert "does not fit" in r.stdout
    _run("memory", "llama3-405b-puredp")  # without --check the table is the answer, exit 0


def test_throughput_and_time_to_train():
    d = json.loads(_run("budget", "llama3-405b", "--tokens", "15T", "--json").stdout)
    assert d["tokens_per_s"] == pytest.approx(2**24 / d["step_s"], rel=1e-12)
    assert d["tokens_per_s_per_gpu"] == pytest.approx(d["tokens_per_s"] / 16384, rel=1e-12)
    train = d["train"]
    assert train["tokens"] == 15e12 and train["steps"] == pytest.approx(15e12 / 2**24)
    assert train["time_s"] == pytest.approx(15e12 / d["tokens_per_s"], rel=1e-12)
    assert train["gpu_hours"] == pytest.approx(train["time_s"] * 16384 / 3600, rel=1e-12)
    assert "Time to train on 15T tokens: 894,070 steps, 65.0 days" in _run("budget", "--tokens", "15T").stdout
    assert sb.step_budget("llama3-405b", tokens=300e9).to_dict()["train"]["tokens"] == 300e9
    assert json.loads(_run("budget", "llama3-405b", "--tokens", "300B", "--json").stdout)["train"]["tokens"] == 300e9


@pytest.mark.parametrize("tokens", ["lots", "0", "-5T", "15X"])
def test_a_bad_token_count_is_one_line(tokens):
    r = _run("budget", "llama3-405b", "--tokens", tokens, code=2)
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("stepbudget: error: --tokens")


def test_show_says_where_every_value_came_from():
    text = _run("show", "llama3-405b", "--set", "layout.micro_batch=2").stdout
    lines = {line.split(":")[0].strip(): line for line in text.splitlines() if ":" in line}
    assert lines["micro_batch"].endswith("# stated (--set)")
    assert lines["num_layers"].endswith("# stated (preset llama3-405b)")
    assert lines["peak_bf16_flops"].endswith("# hardware (h100-sxm)")
    assert lines["recompute"].endswith("# tool default")
    d = json.loads(_run("show", "llama3-405b", "--json").stdout)
    assert d["provenance"]["cluster.gpu.hbm_bytes"] == {"origin": "hardware", "where": "h100-sxm"}
    assert d["provenance"]["layout.tp"] == {"origin": "stated", "where": "preset llama3-405b"}
    assert set(d["provenance"]) >= {"model.activation", "overlap.dp", "cluster.nic_efficiency"}


def test_budget_lists_the_defaults_that_move_its_step_most():
    d = sb.step_budget("llama3-405b").to_dict()
    fields = [a["field"] for a in d["assumptions"]]
    assert fields and all(d["provenance"][f]["origin"] == "tool default" for f in fields)
    changes = [abs(a["change"]) for a in d["assumptions"]]
    assert changes == sorted(changes, reverse=True) and min(changes) >= 0.005
    tp = next(a for a in d["assumptions"] if a["field"] == "overlap.tp")  # hiding TP in the GEMMs saves its waits
    other = sb.step_budget("llama3-405b", sets=["overlap.tp=1"]).to_dict()["step_s"]
    assert tp["step_s"] == pytest.approx(other, rel=1e-12) and tp["step_s"] < d["step_s"]
    assert "Assumed, not stated" in _run("budget", "llama3-405b").stdout


def test_an_moe_job_sees_what_its_default_expert_load_costs():
    # megascale-moe-352b states no balance: the busiest expert at 1.52x the mean, against a benchmark's even routing
    d = sb.step_budget("megascale-moe-352b").to_dict()
    load = next(a for a in d["assumptions"] if a["field"] == "model.moe.expert_load")
    assert (load["value"], load["instead"]) == (1.52, 1.0)
    even = sb.step_budget("megascale-moe-352b", sets=["model.moe.expert_load=1"]).to_dict()["step_s"]
    assert load["step_s"] == pytest.approx(even, rel=1e-12) and load["step_s"] < d["step_s"]


@pytest.mark.parametrize("args, first", [
    (("scale", "llama3-405b", "--gpus", "8192,16384"), "does not fit in HBM: 8,192 GPUs (92.1 GB per GPU of 80 GB)"),
    (("whatif", "llama3-405b", "--vary", "layout.pp=8 layout.dp=256"), "does not fit in HBM: layout.pp=8 layout.dp=256"),
    (("simulate", "llama3-405b", "--set", "layout.pp=8", "--set", "layout.dp=256"), "does not fit: llama3-405b needs"),
    (("wire", "llama3-405b-puredp"), "does not fit: llama3-405b-puredp needs 6.56 TB per GPU"),
])
def test_every_command_that_times_a_step_says_first_when_it_does_not_fit(args, first):
    assert _run(*args).stdout.startswith(first)
    d = json.loads(_run(*args, "--json").stdout)
    assert d["fits"] is False


def test_search_never_ranks_a_layout_that_does_not_fit():
    d = sb.search("llama3-405b", gpus=8192, top=5).to_dict()
    assert d["top"] and all(t["memory"]["fits"] and t["memory"]["total_bytes"] <= 80e9 for t in d["top"])


def test_a_dualpipe_bubble_says_which_pass_times_it_is_worked_from():
    out = " ".join(_run("budget", "deepseek-v3").stdout.split())
    b = sb.estimate(sb.derive(sb.load("deepseek-v3")))
    p = b.plan
    per_mb = float((b.compute_s - p.optimizer_s) / p.microbatches)
    forward = per_mb / (1 + float(p.backward_ratio))
    from stepbudget.units import fmt_time
    assert f"from F {fmt_time(forward)}, B {fmt_time(per_mb - forward)}" in out
    assert "from F" not in " ".join(_run("budget", "megascale-175b").stdout.split())  # interleaved: no W in its bubble
