"""One job, one answer: the same job gives the same numbers through every door (the command line, the API with a
name and sets, the API with a loaded Scenario and a typed edit, the file `show` writes, and the web panel's
command), whatever the edit."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import stepbudget as sb
from stepbudget.cli import app
from stepbudget.inputs.scenario import format_sets
from stepbudget.chapter.panels import FullModel, full_model

KEYS = ("step_s", "compute_s", "bubble_s", "exposed_comm_s", "mfu", "fits", "memory_bytes")

LLAMA_SPLITS = ({"pp": 16, "dp": 128}, {"pp": 8, "dp": 256}, {"pp": 4, "dp": 512, "virtual_stages": 2})
"""Ways to split Llama 3 405B's 16,384 GPUs (TP 8): the layer slots divide each, the batch splits over each DP."""


@st.composite
def edits(draw):
    """A random edit of a preset: layout, DP kind, links, batch, GPU, rate."""
    name = draw(st.sampled_from(["llama3-405b", "hpn-gpt3-175b"]))
    layout, cluster, batch = {}, {}, {}
    if name == "llama3-405b":
        layout.update(draw(st.sampled_from(LLAMA_SPLITS)))
        if draw(st.booleans()):
            batch["global_batch_tokens"] = 2**25  # a doubled batch
        if draw(st.booleans()):
            cluster["achieved_flops"] = draw(st.sampled_from(["380TFLOP/s", "420TFLOP/s"]))  # another measurement
    layout["dp_kind"] = draw(st.sampled_from(["fsdp", "zero1", "ddp", "zero3"]))
    layout["micro_batch"] = draw(st.sampled_from([1, 2]))
    cluster["nic_Bps"] = draw(st.sampled_from(["200Gb/s", "400Gb/s", "800Gb/s"]))
    cluster["gpu"] = draw(st.sampled_from(["h100-sxm", "h200-sxm"]))
    changes = {"layout": layout, "cluster": cluster} | ({"batch": batch} if batch else {})
    return name, changes


def _cli(*args):
    r = CliRunner().invoke(app, list(args))
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def _same(a, b, keys=KEYS):
    for k in keys:
        assert a[k] == b[k], (k, a[k], b[k])


@settings(max_examples=12, deadline=None)
@given(edits())
def test_the_same_job_gives_the_same_numbers_through_every_door(tmp_path_factory, job):
    name, changes = job
    sets = format_sets(changes)
    cli = _cli("budget", name, *(a for s in sets for a in ("--set", s)), "--json")
    _same(cli, sb.step_budget(name, sets=sets).to_dict())
    _same(cli, sb.step_budget(sb.load(name).edit(changes)).to_dict())
    _same(cli, sb.step_budget(sb.load(name), sets=sets).to_dict())
    # the file `show` writes states the job as it runs: a changed job's kernel rate, carried from its measured one
    shown = CliRunner().invoke(app, ["show", name, *(a for s in sets for a in ("--set", s))])
    path = tmp_path_factory.mktemp("shown") / "job.yaml"
    path.write_text(shown.stdout)
    from_file = _cli("budget", str(path), "--json")
    _same(cli, from_file, ("step_s", "mfu", "fits", "memory_bytes"))
    split = cli.get("kernel_view", cli)  # under a whole-step rate, the file's kernel-rate split is budget's own
    for k in ("compute_s", "bubble_s", "exposed_comm_s"):
        assert from_file[k] == pytest.approx(split[k], rel=1e-12), k


@pytest.mark.parametrize("inputs", [
    dict(N=405e9, G=16384, B=2**24, M=128, nic_Bps=50e9, F=400e12),  # the chapter's job as the panel starts
    dict(N=405e9, G=131072, B=2**24, M=128, nic_Bps=50e9, F=400e12),  # 5.4's exercise: 131,072 GPUs
    dict(N=405e9, G=16384, B=2**24, M=128, nic_Bps=25e9, F=400e12),  # half the NIC
    dict(N=405e9, G=16384, B=2**24, M=64, nic_Bps=50e9, F=450e12),  # another split and rate
])
def test_the_panel_and_the_command_it_prints_agree(inputs):
    _panel_and_command(inputs)


@settings(max_examples=8, deadline=None)
@given(st.fixed_dictionaries({"N": st.just(405e9), "G": st.sampled_from([2048, 8192, 16384, 65536]),
                              "B": st.sampled_from([2**23, 2**24, 2**25]), "M": st.sampled_from([16, 32, 64, 128, 256]),
                              "nic_Bps": st.sampled_from([25e9, 50e9, 100e9]),
                              "F": st.sampled_from([300e12, 400e12, 500e12])}))
def test_any_panel_job_and_its_command_agree(inputs):
    _panel_and_command(inputs)


def _panel_and_command(inputs):
    """Panel 5.4's full model of ``inputs`` and the `budget` command it prints give the same numbers."""
    full = full_model(**inputs)
    if not isinstance(full, FullModel):
        return  # the panel says why these inputs name no job (tests/sweep/test_chapter.py)
    words = full.command.split()
    cli = _cli(*words[1:], "--json")
    b = full.budget
    assert cli["step_s"] == float(b.step_s) and cli["compute_s"] == float(b.compute_s)
    assert cli["bubble_s"] == float(b.bubble_s) and cli["mfu"] == float(b.mfu)


@pytest.mark.parametrize("sets", [
    (),  # the chapter's job as measured
    ("cluster.nic_Bps=200Gb/s",),  # Panel 5.4's half NIC
    ("cluster.gpus=131072", "layout.dp=1024"),  # Panel 5.4's 131,072 GPUs
])
def test_budget_scale_whatif_and_simulate_give_one_step(sets):
    """`budget`, `scale` at the job's own size, a `whatif` variant and `simulate` without jitter or contention give
    the job one step; `scale` and `whatif` split it at the kernel rate, as budget's kernel view does. Where the
    simulated step parts from it by more than 1 %, simulate says which term and why."""
    from stepbudget.views.simulation import SAME_STEP

    flags = [a for s in sets for a in ("--set", s)]
    budget = _cli("budget", "llama3-405b", *flags, "--json")
    gpus = str(budget["gpus"])
    point = _cli("scale", "llama3-405b", "--gpus", gpus, *flags, "--json")["points"][0]
    variant = _cli("whatif", "llama3-405b", "--vary", " ".join(sets) or f"cluster.gpus={gpus}", "--json")["variants"][-1]
    split = budget["kernel_view"]
    for k in ("step_s", "compute_s", "bubble_s", "exposed_comm_s"):
        assert point[k] == pytest.approx(split[k], rel=1e-9), ("scale", k)
        assert variant["budget"][k] == pytest.approx(split[k], rel=1e-9), ("whatif", k)
    assert point["mfu"] == pytest.approx(budget["mfu"], rel=1e-9)
    sim = _cli("simulate", "llama3-405b", *flags, "--no-contention", "--json")
    assert sim["analytical_step_s"] == pytest.approx(budget["step_s"], rel=1e-9)
    if abs(sim["difference"]) > SAME_STEP:  # the half NIC's DP buckets queue; 131,072 GPUs' m = 2 runs in closed form
        shown = " ".join(CliRunner().invoke(app, ["simulate", "llama3-405b", *flags, "--no-contention"]).stdout.split())
        assert f"{sim['difference']:+.2%} against the budget: " in shown and "exposed DP" in shown
    assert sim["bubble_s"] == pytest.approx(budget["bubble_s"], rel=0.2)  # task by task, or the closed form's
