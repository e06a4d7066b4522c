"""Framework recipes: each shipped default fills a job that names its framework, with its source line; a stated
field wins; a run's framework text finds its recipe."""

from __future__ import annotations

import re

import pytest

from stepbudget.enums import Origin
from stepbudget.inputs.errors import ScenarioError
from stepbudget.inputs.recipes import FIELDS, ORDER, recipe, recipe_for, recipes
from stepbudget.inputs.scenario import flow_yaml, load
from stepbudget.validation.runs import load_runs

JOB = "llama3-405b"
"""A preset that names no framework and leaves the overlaps, the DP sharding's bucket and the recompute unstated."""


def test_every_recipe_loads_in_its_order():
    assert tuple(recipes()) == ORDER


@pytest.mark.parametrize("key", ORDER)
def test_a_recipe_cites_a_line_at_a_commit_for_every_default(key):
    r = recipe(key)
    assert re.fullmatch(r"[0-9a-f]{40}", r.commit) and "/" in r.repository and r.version
    assert r.defaults, "a recipe with no default fills nothing"
    for d in r.defaults:
        assert d.field in FIELDS
        assert re.fullmatch(r"[\w./@+-]+:\d+", d.source), d.source  # path:line in the framework's repository
        assert d.native.strip()


@pytest.mark.parametrize("key", ORDER)
def test_a_job_naming_its_framework_takes_each_default_it_leaves_unstated(key):
    """Each field the job leaves unstated is the recipe's first row for it that holds for the job, from that row's
    source line, and resolves to what stating the same value gives."""
    sc = load(JOB, [f"framework={key}"])
    dump = sc.model_dump(mode="json")
    r = recipe(key)
    for field in dict.fromkeys(d.field for d in r.defaults):
        section, name = field.split(".")
        source = sc.sources[field]
        if source.origin == Origin.STATED:
            assert source.where == f"preset {JOB}"  # the preset states it: the statement wins
            continue
        row = next(d for d in r.defaults if d.field == field and d.holds(lambda f: dump[f.split(".")[0]][f.split(".")[1]]))
        assert source.origin == Origin.FRAMEWORK and source.where == r.where(row)
        stated = load(JOB, [f"{field}={flow_yaml(row.value)}"]).model_dump(mode="json")
        assert dump[section][name] == stated[section][name], field


def test_a_default_that_depends_on_the_schedule_follows_it():
    """Megatron-LM overlaps the pipeline's sends only with the interleaved schedule (arguments.py: overlap_p2p_comm
    is cleared without a virtual pipeline)."""
    interleaved = load(JOB, ["framework=megatron-lm"])
    plain = load(JOB, ["framework=megatron-lm", "layout.schedule=1f1b", "layout.virtual_stages=1",
                       "layout.first_stage_layers=null", "layout.last_stage_layers=null"])
    assert interleaved.layout.schedule == "interleaved-1f1b" and interleaved.overlap.pp == "auto"
    assert plain.overlap.pp == 0.0 and plain.sources["overlap.pp"].where.endswith(
        "arguments.py:576: args.overlap_p2p_comm = False without --num-layers-per-virtual-pipeline-stage "
        "(non-interleaved 1F1B batches blocking send/recv)")


def test_a_stated_field_wins_over_the_recipe():
    sc = load(JOB, ["framework=megatron-lm", "overlap.dp=0.5"])
    assert sc.overlap.dp == 0.5 and sc.sources["overlap.dp"].origin == Origin.STATED
    assert load(JOB, ["framework=megatron-lm"]).overlap.dp == 0.0  # Megatron-LM's --overlap-grad-reduce is off


def test_recipes_move_the_step_the_way_their_overlaps_say():
    """Megatron-LM's argparse overlaps nothing; NeMo 2's performance recipes overlap TP, DP and PP: the same job
    is slower under the first, and the tool's own defaults (DP and PP in the schedule's windows) sit between."""
    from stepbudget import api

    step = {fw: api.step_budget(JOB, sets=[f"framework={fw}"] if fw else []).to_dict()["step_s"]
            for fw in ("megatron-lm", "nemo2", None)}
    assert step["megatron-lm"] > step[None] > step["nemo2"]


def test_an_unknown_framework_is_one_line_naming_the_field():
    with pytest.raises(ScenarioError) as e:
        load(JOB, ["framework=megatron-xyz"])
    assert str(e.value).startswith("framework: unknown framework 'megatron-xyz'") and "\n" not in str(e.value)


@pytest.mark.parametrize("text, key", [
    ("Megatron-LM commit 285068c8", "megatron-lm"),
    ("Megatron-Core (Megatron-LM, Transformer Engine)", "megatron-lm"),
    ("NeMo 24.12 (NeMo 1 / Megatron-Core, Transformer Engine)", "nemo"),
    ("NeMo 25.02.01 (NeMo 2 / Megatron-Core, Transformer Engine)", "nemo2"),
    ("NeMo 2 (Megatron-Core, Transformer Engine), NVIDIA NeMo Framework 25.09 container, MLPerf v5.1 submission (Dell)",
     "nemo2"),
    ("Megatron-Bridge (Megatron-Core, Transformer Engine)", "megatron-bridge"),
    ("torchtitan (PyTorch FSDP2, DTensor TP/SP, torch.distributed.pipelining)", "torchtitan"),
    ("MaxText 25.01 (JAX/XLA, Transformer Engine cuDNN flash attention)", "maxtext"),
    ("DeepSpeed + Megatron-LM (2021)", "deepspeed"),
    ("Megatron-DeepSpeed (BigScience, 2022)", "deepspeed"),
    ("llm-foundry (Composer, PyTorch FSDP)", None),
    ("Meta internal, NCCLX", None),
])
def test_a_runs_framework_text_finds_its_recipe(text, key):
    found = recipe_for(text)
    assert (found.key if found else None) == key


def test_every_shipped_runs_framework_text_finds_at_most_the_recipe_it_names():
    """No recipe claims a run of another stack: a text that names none of a recipe's words finds none."""
    from importlib import resources

    path = resources.files("stepbudget.validation") / "published_runs.yaml"
    texts = {str(run["layout"].get("framework") or "") for run in load_runs(str(path))}
    for text in texts:
        found = recipe_for(text)
        if found is not None:
            words = {"megatron-lm": "megatron", "nemo": "nemo", "nemo2": "nemo", "megatron-bridge": "bridge",
                     "torchtitan": "torchtitan", "maxtext": "maxtext", "deepspeed": "deepspeed", "gpt-neox": "neox"}
            assert words[found.key] in text.lower() or found.key == "megatron-lm" and "mcore" in text.lower(), text
