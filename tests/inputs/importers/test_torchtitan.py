"""importers/torchtitan.py: real torchtitan TOML job configs read into the scenario's schema, each value checked
against the file's own line (tests/data/configs/torchtitan/README.md says where each file comes from); the format's
semantics on small documents (pipelines, explicit DP degrees, schedules, recompute options); and bad files turned into
problems, never exceptions."""

from pathlib import Path

import pytest

from stepbudget.inputs.importers import torchtitan

DATA = Path(__file__).parents[2] / "data" / "configs"
OURS = DATA / "torchtitan"


def _read(name: str):
    return torchtitan.read((OURS / name).read_text(encoding="utf-8"), name)


def _values(imported) -> dict:
    return {".".join(path): value for path, value in imported.values.items()}


def _keys(imported) -> dict:
    return {".".join(path): key for path, key in imported.keys.items()}


def _doc(text: str):
    return torchtitan.read(text, "job.toml")


# --- the real files: every value stated, as read from the file by hand -----------------------------------------

EXPECTED = {
    "llama3_8b.toml": {
        "model.catalog": "Llama 3.1 8B",  # lines 18-19: llama3 8B (Llama 3.1's shapes)
        "model.seq_len": 8192,  # line 33
        "layout.micro_batch": 1,  # line 32: local_batch_size, no pipeline
        "layout.dp_kind": "fsdp",  # line 40: data_parallel_shard_degree -1, sharded over the rest
        "layout.dp_replicas": 1,  # line 39
        "layout.tp": 1,  # line 41
        "layout.pp": 1,  # line 42
        "layout.cp": 1,  # line 43
        "layout.compiled": False,  # line 54
        "layout.recompute": "selective-op",  # lines 58-59: selective, option "op"
    },
    "llama3_70b.toml": {
        "model.catalog": "Llama 3.1 70B",  # lines 18-19
        "model.seq_len": 8192,  # line 33
        "layout.micro_batch": 8,  # line 32
        "layout.dp_kind": "fsdp",  # line 40
        "layout.dp_replicas": 1,  # line 39
        "layout.tp": 8,  # line 41
        "layout.pp": 1,  # line 42
        "layout.cp": 1,  # line 43
        "layout.recompute": "full",  # line 54
        "layout.compiled": False,  # line 57
    },
    "llama3_405b.toml": {
        "model.catalog": "Llama 3.1 405B",  # lines 18-19
        "model.seq_len": 8192,  # line 33
        "layout.micro_batch": 2,  # line 32
        "layout.dp_kind": "fsdp",  # line 40
        "layout.dp_replicas": 1,  # line 39
        "layout.tp": 8,  # line 41
        "overlap.tp": 1.0,  # line 42: async TP, with the model compiled (lines 58-59)
        "layout.pp": 1,  # line 43
        "layout.cp": 1,  # line 44
        "layout.recompute": "full",  # line 55
        "layout.compiled": True,  # lines 58-59: enable, "model" among the components
        "precision.gemm": "fp8",  # line 21: converters ["float8"]
        "precision.params": "fp8",  # line 62: enable_fsdp_float8_all_gather
    },
    "deepseek_v3_671b.toml": {
        "model.catalog": "DeepSeek-V3",  # lines 21-22: deepseek_v3 671B
        "model.mtp_layers": 0,  # torchtitan's deepseek_v3 has no MTP module
        "model.seq_len": 4096,  # line 39
        "layout.micro_batch": 4,  # line 38
        "layout.dp_kind": "fsdp",  # line 46
        "layout.dp_replicas": 1,  # line 45
        "layout.reshard_after_forward": True,  # line 47: "default", and no pipeline (line 50)
        "layout.tp": 1,  # line 48
        "overlap.tp": 0.0,  # line 49
        "layout.pp": 1,  # line 50 (the schedule on line 51 has no pipeline to run)
        "layout.ep": 1,  # line 52 (expert TP on line 53: no effect without EP)
        "layout.recompute": "selective-op",  # lines 64-65
        "layout.compiled": False,  # lines 68-69: only the loss is compiled
    },
    "llama3_405b_2024-12.toml": {
        "model.catalog": "Llama 3.1 405B",  # lines 19-20
        "model.seq_len": 8192,  # line 30
        "layout.micro_batch": 2,  # line 29: training.batch_size
        "layout.dp_kind": "fsdp",  # line 35
        "layout.dp_replicas": 1,  # line 34
        "layout.tp": 8,  # line 36
        "layout.compiled": True,  # line 37: training.compile
        "layout.cp": 1,  # line 41: experimental.context_parallel_degree
        "layout.pp": 1,  # line 42
        "overlap.tp": 1.0,  # line 43: experimental.enable_async_tensor_parallel
        "layout.recompute": "full",  # line 55
        "precision.gemm": "fp8",  # line 58: [float8] enable_float8_linear
        "precision.params": "fp8",  # line 59
    },
}


def test_the_folder_holds_the_listed_files():
    assert sorted(p.name for p in OURS.iterdir() if p.name != "README.md") == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_real_file_states_what_it_holds(name):
    got = _read(name)
    assert got.format == "torchtitan TOML" and got.framework == "torchtitan" and not got.base
    assert _values(got) == EXPECTED[name]
    assert got.problems == ()


def test_the_keys_name_the_files_own_spelling():
    keys = _keys(_read("llama3_405b_2024-12.toml"))
    assert keys["layout.micro_batch"] == "training.batch_size"
    assert keys["layout.compiled"] == "training.compile"
    assert keys["precision.gemm"] == "float8.enable_float8_linear"
    keys = _keys(_read("deepseek_v3_671b.toml"))
    assert keys["layout.recompute"] == "activation_checkpoint.mode + activation_checkpoint.selective_ac_option"
    assert keys["model.catalog"] == "model.name + model.flavor"


def test_the_rest_is_ignored_and_the_fill_degree_says_why():
    got = _read("llama3_70b.toml")
    assert "optimizer.lr" in got.ignored and "job.dump_folder" in got.ignored and "training.steps" in got.ignored
    assert any(i.startswith("parallelism.data_parallel_shard_degree (-1: the ranks left over") for i in got.ignored)
    # the float8 flags mean nothing while no float8 converter is listed (line 21 is a comment)
    assert any(i.startswith("quantize.linear.float8.enable_fsdp_float8_all_gather (False: float8 is not among")
               for i in got.ignored)
    deepseek = _read("deepseek_v3_671b.toml")
    assert any(i.startswith("parallelism.pipeline_parallel_schedule ('Interleaved1F1B': no pipeline")
               for i in deepseek.ignored)


# --- detection ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_detect_claims_its_files(name):
    assert torchtitan.detect((OURS / name).read_text(encoding="utf-8"), name)


def test_detect_claims_no_other_file():
    others = [p for p in sorted(DATA.glob("*/*")) if p.is_file() and p.name not in EXPECTED]
    assert others  # the other formats' files and every README
    for path in others:
        assert not torchtitan.detect(path.read_text(encoding="utf-8", errors="replace"), path.name), path


def test_detect_leaves_a_scenario_toml_alone():
    assert not torchtitan.detect('[model]\nname = "llama3"\n[layout]\ntp = 8\n[batch]\nglobal_batch_seqs = 64\n', "s.toml")
    assert torchtitan.detect('[model]\nname = "llama3"\nflavor = "8B"\n[training]\nseq_len = 8192\n', "x.toml")


# --- the format's semantics on small documents -------------------------------------------------------------------


def test_an_explicit_shard_degree_states_dp_and_the_global_batch():
    got = _values(_doc("[training]\nlocal_batch_size = 2\nglobal_batch_size = -1\n[parallelism]\n"
                       "data_parallel_shard_degree = 8\ndata_parallel_replicate_degree = 4\n"))
    # parallel_dims.py: dp = replicate x shard, HSDP; train.py: global = local x dp when -1
    assert got["layout.dp"] == 32 and got["layout.dp_kind"] == "fsdp" and got["layout.dp_replicas"] == 4
    assert got["batch.global_batch_seqs"] == 64


def test_a_given_global_batch_is_stated_and_one_shard_with_replicas_is_ddp():
    got = _values(_doc("[training]\nglobal_batch_size = 512\n[parallelism]\n"
                       "data_parallel_shard_degree = 1\ndata_parallel_replicate_degree = 8\n"))
    assert got == {"batch.global_batch_seqs": 512, "layout.dp": 8, "layout.dp_kind": "ddp"}


def test_under_a_pipeline_the_micro_batch_is_the_pipeline_micro_batch():
    got = _doc('[training]\nlocal_batch_size = 16\n[parallelism]\npipeline_parallel_degree = 4\n'
               'pipeline_parallel_microbatch_size = 2\npipeline_parallel_schedule = "Interleaved1F1B"\n'
               'fsdp_reshard_after_forward = "default"\n')
    values = _values(got)
    assert values["layout.micro_batch"] == 2 and values["layout.pp"] == 4
    assert values["layout.schedule"] == "interleaved-1f1b" and values["layout.virtual_stages"] == 2
    assert values["layout.reshard_after_forward"] is False  # "default": not resharded under a pipeline
    assert any(i.startswith("training.local_batch_size (16: a DP rank's batch") for i in got.ignored)
    # the 2024 spelling: a count of micro-batches the local batch is split into
    old = _values(_doc("[training]\nbatch_size = 16\n[experimental]\npipeline_parallel_degree = 4\n"
                       'pipeline_parallel_microbatches = 8\npipeline_parallel_schedule = "1f1b"\n'))
    assert old["layout.micro_batch"] == 2 and old["layout.schedule"] == "1f1b" and "layout.virtual_stages" not in old


@pytest.mark.parametrize("schedule", ["ZBVZeroBubble", "InterleavedZeroBubble", "DualPipeV", "Nonsense"])
def test_a_schedule_without_its_own_kind_is_a_problem(schedule):
    got = _doc(f'[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_schedule = "{schedule}"\n')
    assert "layout.schedule" not in _values(got)
    assert len(got.problems) == 1 and got.problems[0].startswith("parallelism.pipeline_parallel_schedule:")


def test_layer_level_selective_ac():
    every = _values(_doc('[activation_checkpoint]\nmode = "selective"\nselective_ac_option = "1"\n'))
    assert every == {"layout.recompute": "full"}
    second = _doc('[activation_checkpoint]\nmode = "selective"\nselective_ac_option = "2"\n')
    assert "layout.recompute" not in _values(second)
    assert second.problems[0].startswith("activation_checkpoint.selective_ac_option: 2: full recompute of every 2th")
    budget = _doc('[activation_checkpoint]\nmode = "memory_budget"\n')
    assert budget.problems[0].startswith("activation_checkpoint.mode: memory_budget")


def test_async_tp_without_compile_is_a_problem_and_mixed_precision_is_stated():
    got = _doc("[parallelism]\nenable_async_tensor_parallel = true\n[compile]\nenable = false\n[training]\n"
               'mixed_precision_param = "bfloat16"\nmixed_precision_reduce = "float32"\n')
    values = _values(got)
    assert "overlap.tp" not in values and values["layout.compiled"] is False
    assert values["precision.params"] == "bf16" and values["precision.grads"] == "fp32"
    assert got.problems[0].startswith("parallelism.enable_async_tensor_parallel: async TP needs the model compiled")


def test_an_unknown_flavor_keeps_its_own_name():
    assert _values(_doc('[model]\nname = "llama4"\nflavor = "17bx128e"\n[job]\n'))["model.name"] == "llama4 17bx128e"


# --- bad files ---------------------------------------------------------------------------------------------------


def test_truncated_and_garbage_files_are_problems_not_exceptions():
    text = (OURS / "llama3_70b.toml").read_text(encoding="utf-8")
    cut = _doc(text[: text.index("seq_len") + 9])  # "seq_len =" with no value
    assert cut.values == {} and cut.problems[0].startswith("job.toml: not valid TOML")
    for bad in ("\x00\xff[[[", "[training]\nseq_len = 1" + "0" * 5000):
        assert _doc(bad).problems
    wrong = _doc('[training]\nseq_len = "long"\nlocal_batch_size = 0\n[parallelism]\ntensor_parallel_degree = -2\n'
                 '[compile]\nenable = "yes"\n')
    assert wrong.values == {} and len(wrong.problems) == 4


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_real_files_layout_is_a_valid_layout(name):
    from stepbudget.inputs.layout import Layout

    layout = {path[1]: value for path, value in _read(name).values.items() if path[0] == "layout"}
    assert Layout(**layout).tp == layout["tp"]
