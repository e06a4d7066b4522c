"""A job's own config files -> one scenario: through `import`, through any command's SCENARIO (files joined by +),
and through the Python API, one answer; contradictions, unreadable files and layouts that do not fit the GPUs
are named, never fixed silently."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stepbudget import api
from stepbudget.cli import app
from stepbudget.enums import Origin
from stepbudget.inputs.catalog import resolve
from stepbudget.inputs.errors import ScenarioError
from stepbudget.inputs.scenario import load

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "configs"
MIXTRAL_HF = CONFIGS / "hf" / "mixtral_8x7b_config.json"
"""mistralai's Mixtral-8x7B config.json (tests/data/configs/hf/README.md)."""
MIXTRAL_MEGATRON = CONFIGS / "megatron" / "train_mixtral_8x7b_distributed.sh"
"""Megatron-LM's examples/mixtral launch script: one node by default (NNODES=${SLURM_NNODES:-"1"}), PP4 x EP8."""
LLAMA_HF = CONFIGS / "hf" / "llama31_70b_config.json"
NODES = ["cluster.gpus=64"]
"""The script's node count comes from the Slurm job; eight nodes give its PP4 x EP8 layout room."""
JOINED = f"{MIXTRAL_HF}+{MIXTRAL_MEGATRON}+h100-sxm"

runner = CliRunner()


def test_a_config_json_a_launch_script_and_a_gpu_give_a_budget_in_one_command():
    result = runner.invoke(app, ["budget", JOINED, "--set", *NODES, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    sc = load(JOINED, NODES)
    assert (sc.model.num_layers, sc.model.hidden_size, sc.model.moe.num_experts, sc.model.moe.top_k) == (32, 4096, 8, 2)
    assert (sc.layout.tp, sc.layout.pp, sc.layout.ep, sc.layout.dp) == (1, 4, 8, 16)  # DP: the GPUs left
    assert sc.model.vocab_size == 32000  # only the config.json says it: Megatron reads it from the tokenizer
    assert doc["step_s"] == pytest.approx(api.step_budget(sc).to_dict()["step_s"], rel=1e-12)


def test_the_same_job_gives_one_answer_through_every_door(tmp_path):
    out = tmp_path / "mixtral.yaml"
    result = runner.invoke(app, ["import", str(MIXTRAL_HF), str(MIXTRAL_MEGATRON), "--cluster", "h100-sxm",
                                 "--set", *NODES, "--out", str(out)])
    assert result.exit_code == 0, result.output
    written = load(str(out)).model_dump(mode="json")
    joined = load(JOINED, NODES).model_dump(mode="json")
    via_api = api.import_configs([MIXTRAL_HF, MIXTRAL_MEGATRON], cluster="h100-sxm", sets=NODES).value
    assert written == joined == via_api.model_dump(mode="json")
    text = out.read_text()
    assert "num_layers: 32" in text and "# mixtral_8x7b_config.json num_hidden_layers" in text
    assert "framework: megatron-lm" in text and "Megatron-LM arguments" in text
    step = {api.step_budget(ref, sets=sets).to_dict()["step_s"] for ref, sets in ((str(out), []), (JOINED, NODES))}
    assert len(step) == 1


def test_show_names_each_framework_default_and_its_source_line():
    result = runner.invoke(app, ["show", JOINED, "--set", *NODES])
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if "arguments.py:576" in x)
    assert line.lstrip().startswith("pp: 0.0") and "# framework recipe (Megatron-LM core_v0.13.0, " in line
    sc = load(JOINED, NODES)
    framework = {name for name, s in sc.sources.items() if s.origin == Origin.FRAMEWORK}
    assert {"overlap.tp", "overlap.pp", "precision.grads", "layout.order"} <= framework
    assert "overlap.dp" not in framework  # the script passes --overlap-grad-reduce: stated
    assert sc.sources["overlap.dp"].where.endswith("--overlap-grad-reduce + --overlap-param-gather")


def test_import_prints_the_recipe_defaults_it_assumed_and_the_keys_it_ignored():
    result = runner.invoke(app, ["import", str(MIXTRAL_HF), str(MIXTRAL_MEGATRON), "--cluster", "h100-sxm",
                                 "--set", *NODES], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "Assumed from the framework's recipe" in result.output and "(Megatron-LM core_v0.13.0, " in result.output
    assert "Read past in mixtral_8x7b_config.json" in result.output
    doc = json.loads(runner.invoke(app, ["import", str(MIXTRAL_HF), str(MIXTRAL_MEGATRON), "--cluster", "h100-sxm",
                                         "--set", *NODES, "--json"]).output)
    hf, megatron = (f["ignored"] for f in doc["files"])
    assert "rope_theta" in hf and "--init-method-std" in megatron and "--lr" in megatron
    assert len(megatron) == len(set(megatron))  # each key listed once


def test_files_that_disagree_are_named_and_neither_is_picked():
    result = runner.invoke(app, ["budget", f"{LLAMA_HF}+{MIXTRAL_MEGATRON}+h100-sxm"])
    assert result.exit_code == 2
    lines = result.output.splitlines()
    layers = next(x for x in lines if "model.num_layers" in x)
    assert "llama31_70b_config.json num_hidden_layers gives 80" in layers
    assert "train_mixtral_8x7b_distributed.sh --num-layers gives 32" in layers and layers.endswith("agree")
    assert all(x.startswith("stepbudget: error: ") for x in lines) and "Traceback" not in result.output


def test_a_layout_that_does_not_fit_the_gpus_the_script_launches_is_reported():
    """The script launches one node (8 GPUs); PP4 leaves DP 2, too few ranks for EP 8: refused, not resized."""
    with pytest.raises(ScenarioError) as e:
        load(f"{MIXTRAL_HF}+{MIXTRAL_MEGATRON}+h100-sxm")
    assert "layout.ep: ep*expert_tp = 8*1 must divide tp*cp*dp = 2" in str(e.value)
    with pytest.raises(ScenarioError) as e:
        load(f"{MIXTRAL_HF}+{MIXTRAL_MEGATRON}+h100-sxm", ["cluster.gpus=60"])  # 60 GPUs: PP4 leaves 15
    assert "layout.ep" in str(e.value) or "layout" in str(e.value)


def test_a_file_no_importer_reads_is_one_line(tmp_path):
    odd = tmp_path / "notes.txt"
    odd.write_text("a shopping list\n")
    result = runner.invoke(app, ["import", str(odd)])
    assert result.exit_code == 2
    assert result.output.startswith("stepbudget: error: FILE: ") and "is no format stepbudget reads" in result.output
    assert result.output.count("\n") == 1


def test_an_incomplete_job_writes_nothing(tmp_path):
    out = tmp_path / "job.yaml"
    result = runner.invoke(app, ["import", str(MIXTRAL_HF), "--out", str(out)])  # no layout, cluster or batch
    assert result.exit_code == 2 and not out.exists() and not list(tmp_path.iterdir())
    assert "cluster: required field is missing" in result.output


def test_a_cluster_from_a_preset_takes_only_its_cluster():
    sc = api.import_configs([MIXTRAL_HF, MIXTRAL_MEGATRON], cluster="llama3-405b", sets=NODES).value
    preset = load("llama3-405b")
    assert sc.cluster.nic_Bps == preset.cluster.nic_Bps and sc.cluster.tiers == preset.cluster.tiers
    assert sc.cluster.gpus == 64  # --set wins; the preset's 16,384 GPUs are not the job's
    assert sc.model.num_layers == 32 and sc.layout.pp == 4
    # the preset's measured whole-step rate is its own job's, not this one's: the hardware is taken, not the rate
    assert preset.cluster.rate_scope == "step" and preset.cluster.achieved_flops == 400e12
    assert sc.cluster.rate_scope == "kernel" and sc.cluster.achieved_flops is None
    joined = load(f"{MIXTRAL_HF}+{MIXTRAL_MEGATRON}+llama3-405b", NODES)
    assert joined.model_dump(mode="json") == sc.model_dump(mode="json")  # the same cluster through `+`


def test_a_named_model_replaces_the_model_of_a_file_of_defaults():
    """MaxText's base.yml holds a small default model; a run config's model_name loads the named model over it
    (pyconfig.py update_model_vars): the run's shapes are the catalog row's, its sequence length the run's own."""
    maxtext = CONFIGS / "maxtext"
    sc = load(f"{maxtext / 'base.yml'}+{maxtext / 'gpu_llama3_70b.yml'}+h100-sxm",
              ["cluster.gpus=64", "batch.global_batch_seqs=256"])
    row = resolve("llama3-70b")
    assert (sc.model.num_layers, sc.model.hidden_size, sc.model.vocab_size) == \
        (row["num_layers"], row["hidden_size"], row["vocab_size"]) == (80, 8192, 128256)
    assert sc.model.seq_len == 8192 and sc.sources["model.num_layers"].origin == Origin.CATALOG
    alone = load(f"{maxtext / 'base.yml'}+h100-sxm", ["cluster.gpus=8", "batch.global_batch_seqs=96"])
    assert alone.model.hidden_size == 2048  # base.yml's own model, with no run naming another


def test_a_cluster_file_joins_the_configs_with_its_own_sources(tmp_path):
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("cluster:\n  gpu: h100-sxm\n  gpus: 64\n  nic_Bps: 200Gb/s\n")
    sc = load(f"{LLAMA_HF}+{CONFIGS / 'nemo' / 'llama3_70b.yaml'}+{cluster}")
    assert sc.cluster.nic_Bps == 25e9 and sc.sources["cluster.nic_Bps"].where == f"file {cluster}"
    assert sc.cluster.gpus == 1024  # trainer.num_nodes x devices is the job's: a cluster file gives the hardware
    with pytest.raises(ScenarioError, match="empty part"):
        load(f"{MIXTRAL_HF}++h100-sxm")


def test_files_of_a_wrapping_framework_make_its_job(tmp_path):
    """A Megatron-LM script with a DeepSpeed config is Megatron-DeepSpeed: DeepSpeed's engine runs it, so its
    recipe fills the rest; two frameworks neither of which wraps the other are named, not picked."""
    ds = tmp_path / "ds_config.json"
    ds.write_text('{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 1}, "bf16": {"enabled": true}}')
    sc = api.import_configs([MIXTRAL_HF, MIXTRAL_MEGATRON, ds], cluster="h100-sxm", sets=NODES).value
    assert sc.framework == "deepspeed" and sc.sources["framework"].where.endswith("(DeepSpeed JSON)")
    titan = CONFIGS / "torchtitan" / "llama3_8b.toml"
    with pytest.raises(ScenarioError, match="framework: the files name frameworks that do not run on each other"):
        load(f"{titan}+{MIXTRAL_MEGATRON}+h100-sxm")


def test_a_run_file_agreeing_with_its_file_of_defaults_is_named_as_the_source():
    maxtext = CONFIGS / "maxtext"
    sc = load(f"{maxtext / 'base.yml'}+{maxtext / 'gpu_llama3_70b.yml'}+h100-sxm",
              ["cluster.gpus=64", "batch.global_batch_seqs=256"])
    # both say remat_policy 'full' (base.yml's default, the run config's line 26): the run's own file is named
    assert sc.sources["layout.recompute"].where == "file gpu_llama3_70b.yml remat_policy full"


def test_a_misspelt_scenario_is_named_as_a_scenario_and_a_joined_base_loop_as_a_loop(tmp_path):
    typo = tmp_path / "typo.yaml"
    typo.write_text("name: typo\nlayuot: {tp: 2}\nmodel: llama3-8b\n")
    with pytest.raises(ScenarioError, match="layuot: unknown field; remove it or check its spelling"):
        load(str(typo))
    loop = tmp_path / "loop.yaml"
    loop.write_text(f"base: {loop}+h100-sxm\n")
    with pytest.raises(ScenarioError, match="base: presets refer to each other in a loop"):
        load(str(loop))
