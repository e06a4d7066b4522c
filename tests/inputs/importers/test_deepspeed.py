"""importers/deepspeed.py: real DeepSpeed configs read into the layout, batch, overlap and precision fields, each
value checked against the file's own line (tests/data/configs/deepspeed/README.md says where each file comes from);
"auto" left unstated and listed; what stage 0 and a missing fp16/bf16 block mean; bad files turned into problems,
never exceptions."""

import json
from pathlib import Path

import pytest

from stepbudget.inputs.importers import deepspeed

DATA = Path(__file__).parents[2] / "data" / "configs"
MINE = DATA / "deepspeed"


def _read(name: str):
    return deepspeed.read((MINE / name).read_text(encoding="utf-8"), name)


def _values(imported) -> dict:
    return {".".join(path): value for path, value in imported.values.items()}


def _doc(**keys) -> str:
    return json.dumps(keys)


# --- the real files: every value stated, as read from the file by hand -----------------------------------------

EXPECTED = {
    "imagenet_ds_fp16_z1_config.json": {
        "batch.global_batch_seqs": 256,  # line 2
        "layout.dp_kind": "zero1",  # line 20: "stage": 1
        "precision.params": "fp16",  # line 24: fp16 "enabled": true
        "precision.activations": "fp16",
        "precision.grads": "fp16",
    },
    "hf_autotp_ds_config.json": {
        "layout.dp_kind": "zero2",  # line 24
        "layout.tp": 4,  # line 28: "autotp_size": 4
    },
    "bf16_master_weight_bf16_full.json": {
        "layout.micro_batch": 4,  # line 2
        "layout.dp_kind": "zero3",  # line 23
        "overlap.dp": "auto",  # line 24: "overlap_comm": true
        "layout.dp_bucket_params": 5e7,  # line 26
        "precision.params": "bf16",  # line 17: bf16 "enabled": true
        "precision.activations": "bf16",
        "precision.grads": "bf16",
    },
    "transformers_ds_config_zero3.json": {
        "layout.dp_kind": "zero3",  # line 31
        "overlap.dp": "auto",  # line 40
    },
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_file_values(name):
    imported = _read(name)
    assert _values(imported) == EXPECTED[name]
    assert imported.problems == ()
    assert imported.format == "DeepSpeed JSON" and imported.framework == "deepspeed"


def test_auto_values_are_listed_not_stated():
    ignored = _read("transformers_ds_config_zero3.json").ignored
    for key in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                "zero_optimization.reduce_bucket_size", "fp16.enabled"):  # lines 55, 56, 51, 43, 3
        assert f"{key} (auto: the launcher sets it)" in ignored


def test_offload_is_listed_as_not_modelled():
    ignored = _read("transformers_ds_config_zero3.json").ignored  # lines 32-39: both to "cpu"
    for key in ("offload_optimizer", "offload_param"):
        assert f"zero_optimization.{key} (device cpu: not modelled: the step is costed as if on GPU)" in ignored


def test_accumulation_is_not_the_global_batch():
    # bf16_full.json lines 2-3: micro batch 4, accumulation 1, no train_batch_size: the global batch needs DP
    imported = _read("bf16_master_weight_bf16_full.json")
    assert "batch.global_batch_seqs" not in _values(imported)
    assert any(i.startswith("gradient_accumulation_steps (1: the global batch is micro batch x 1 x DP") for i in imported.ignored)


def test_unmapped_keys_are_listed_once_each():
    ignored = _read("imagenet_ds_fp16_z1_config.json").ignored
    for key in ("optimizer", "steps_per_print", "fp16.auto_cast", "gradient_clipping", "wall_clock_breakdown"):
        assert ignored.count(key) == 1


def test_detect_claims_its_own_files():
    for path in MINE.glob("*.json"):
        assert deepspeed.detect(path.read_text(encoding="utf-8"), path.name), path.name


def test_detect_claims_no_other_file():
    others = [p for p in DATA.glob("*/*") if p.is_file() and p.parent != MINE] + [MINE / "README.md"]
    assert len(others) > 10
    for path in others:
        assert not deepspeed.detect(path.read_text(encoding="utf-8", errors="replace"), path.name), path


# --- DeepSpeed's semantics on small documents ---------------------------------------------------------------------

def test_stage_0_all_reduces_after_backward():
    values = _values(deepspeed.read(_doc(zero_optimization={"stage": 0, "overlap_comm": True}), "ds.json"))
    assert values["layout.dp_kind"] == "ddp"
    assert values["overlap.dp"] == 0.0 and values["layout.dp_bucket_params"] == 5e8


def test_overlap_off_and_precision_keys():
    doc = _doc(train_micro_batch_size_per_gpu=2, zero_optimization={"stage": 2, "overlap_comm": False},
               bf16={"enabled": True}, communication_data_type="fp32", data_types={"grad_accum_dtype": "fp32"})
    values = _values(deepspeed.read(doc, "ds.json"))
    assert values["overlap.dp"] == 0.0 and values["layout.dp_kind"] == "zero2"
    assert values["precision.grads"] == "fp32" and values["precision.params"] == "bf16"
    assert values["precision.grad_buffer"] == "fp32"


def test_no_half_precision_block_trains_in_fp32():
    values = _values(deepspeed.read(_doc(train_batch_size=64, zero_optimization={"stage": 1}), "ds.json"))
    assert values["precision.params"] == values["precision.grads"] == values["precision.activations"] == "fp32"


def test_bad_values_are_problems():
    doc = _doc(train_batch_size=-3, zero_optimization={"stage": 5, "reduce_bucket_size": "big"},
               bf16={"enabled": True}, fp16={"enabled": True})
    problems = deepspeed.read(doc, "ds.json").problems
    assert [p.split(":")[0] for p in problems] == [
        "train_batch_size", "zero_optimization.stage", "zero_optimization.reduce_bucket_size", "fp16.enabled"]


@pytest.mark.parametrize("text", ['{"train_batch_size": 8, "zero_optimization": {"stage"', "[1, 2]", "",
                                  '{"fp16": {}, "fp16": {}}', '{"zero_optimization": 3, "fp16": {"enabled": "auto"}}'])
def test_broken_files_are_problems_not_exceptions(text):
    imported = deepspeed.read(text, "ds.json")
    assert imported.problems and imported.values == {}


def test_detect_refuses_neox_and_hf_json():
    assert not deepspeed.detect(_doc(num_layers=2, train_micro_batch_size_per_gpu=4), "x.json")
    assert not deepspeed.detect(_doc(model_type="llama", hidden_size=8), "config.json")
    assert deepspeed.detect(_doc(train_micro_batch_size_per_gpu=4), "x.json")


def test_every_file_here_is_checked():
    assert {p.name for p in MINE.iterdir() if p.name != "README.md"} == set(EXPECTED)


def test_stage_3_overlaps_unless_told_not_to():
    """zero/config.py overlap_comm_valid: an unset overlap_comm is on at stage 3 and off below it."""
    on = _values(deepspeed.read(_doc(zero_optimization={"stage": 3}), "ds.json"))
    off = _values(deepspeed.read(_doc(zero_optimization={"stage": 3, "overlap_comm": False}), "ds.json"))
    below = _values(deepspeed.read(_doc(zero_optimization={"stage": 2}), "ds.json"))
    assert (on["overlap.dp"], off["overlap.dp"], "overlap.dp" in below) == ("auto", 0.0, False)
