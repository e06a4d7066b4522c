"""Runs that name their model (the catalog row fills what they leave out, never a preset), omit DP, or split the
pipeline unevenly."""

import copy
import glob
from pathlib import Path

import pytest
import yaml

from stepbudget.inputs import catalog
from stepbudget.validation.compare import predict
from stepbudget.validation.convert import to_case
from stepbudget.validation.runs import check_run, shipped_runs_text

NAMED = {  # 256 H100s as TP8 x PP4 x DP8; the model stated by its name and the sequence length it trained at
    "id": "named",
    "model": {"name": "Llama 3.1 70B", "seq_len": 8192},
    "hardware": {"gpu": "NVIDIA H100 SXM"},
    "num_gpus": 256,
    "layout": {"tp": 8, "pp": 4, "dp": 8, "global_batch_seqs": 128, "framework": "Megatron-LM"},
    "measured": {"step_time_s": 10.0},
}


def _case(model: dict | None = None, layout: dict | None = None, drop: tuple[str, ...] = ()):
    run = copy.deepcopy(NAMED)
    run["model"].update(model or {})
    run["layout"].update(layout or {})
    for name in drop:
        del run["layout"][name]
    check_run(run, 0)
    return to_case(run)


def _predicted(case) -> float:
    assert case.reason is None, case.reason
    step = predict(case).predicted_step_s
    assert step is not None and step > 0
    return step


@pytest.mark.parametrize("name", ["Llama 3.1 70B", "LLaMA-3.1-70B", "llama3.1-70b", "meta-llama/Llama-3.1-70B"])
def test_a_run_that_names_its_model_takes_the_catalog_row(name):
    case = _case({"name": name})
    _predicted(case)
    m = case.scenario.model
    # meta-llama/Llama-3.1-70B config.json, the catalog's row
    assert (m.num_layers, m.hidden_size, m.num_heads, m.num_kv_heads, m.ffn_size, m.vocab_size, m.seq_len) == (
        80, 8192, 64, 8, 28672, 128256, 8192)
    assert m.activation == "swiglu"
    assert ("model fields the run leaves unstated from the catalog row llama3.1-70b: activation, ffn_size, "
            "hidden_size, num_heads, num_kv_heads, num_layers, vocab_size") in case.assumptions
    assert "FFN width 4h (GPT) assumed" not in case.assumptions  # the row's width, not the GPT default


def test_a_catalog_row_never_gives_the_training_sequence_length():
    case = _case({"seq_len": None})
    assert case.scenario is None and case.reason == "not stated in the source: model.seq_len"
    assert "seq_len" not in catalog.lookup("Llama 3.1 70B").model and catalog.lookup("mixtral-8x7b").context_len == 32768


def test_the_runs_own_numbers_override_the_catalog():
    stated = _case({"seq_len": 4096, "kv_heads": 16, "layers": 40})
    short = _predicted(stated)
    m = stated.scenario.model
    assert (m.seq_len, m.num_kv_heads, m.num_layers, m.hidden_size) == (4096, 16, 40, 8192)
    assert short < _predicted(_case())  # half the layers and half the context: less work per step


def test_an_unknown_name_with_missing_fields_stays_unpredictable_naming_them():
    case = _case({"name": "Frobnitz 9B", "layers": 32})
    assert case.scenario is None
    assert case.reason == "not stated in the source: model.hidden, model.heads, model.vocab"
    assert catalog.lookup("Frobnitz 9B") is None


def test_the_catalog_fills_no_layout_field():
    case = _case(drop=("tp",))
    assert case.reason == "not stated in the source: layout.tp"


LLAMA_SHAPE = {"layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8, "ffn_hidden": 28672, "vocab": 128256}


def test_a_run_that_states_its_shape_but_not_its_activation_gets_the_rows_swiglu():
    # Llama 3.1 70B's MLP is SwiGLU (its config.json): three h x d_ff matrices, not GPT's two
    stated = _case(LLAMA_SHAPE)
    assert stated.scenario.model.activation == "swiglu"
    assert ("model fields the run leaves unstated from the catalog row llama3.1-70b: activation" in stated.assumptions)
    gelu = _case({**LLAMA_SHAPE, "activation": "GELU"})  # a field the run states wins over the row
    assert gelu.scenario.model.activation == "gelu"
    assert _predicted(gelu) < 0.85 * _predicted(stated)  # a third of the MLP's weights and FLOPs gone
    unknown = _case({**LLAMA_SHAPE, "name": "Frobnitz 70B"})  # no row: the GPT default, said
    assert unknown.scenario.model.activation == "gelu"
    assert "activation not stated: a two-matrix GeLU MLP" in unknown.assumptions


def test_an_omitted_dp_is_the_gpu_count_over_the_other_degrees():
    case = _case(drop=("dp",))
    _predicted(case)
    assert case.scenario.layout.dp == 256 // (8 * 1 * 4) == 8
    assert "DP not stated: 8 from the GPU count" in case.assumptions
    assert _predicted(case) == _predicted(_case())  # the same layout as DP 8 stated


@pytest.mark.parametrize("first, last", [("first_stage_layers", "last_stage_layers"),
                                         ("decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers")])
def test_uneven_first_and_last_stages_reach_the_scenario(first, last):
    case = _case(layout={first: 19, last: 21})
    uneven = _predicted(case)
    lay = case.scenario.layout
    assert (lay.first_stage_layers, lay.last_stage_layers, lay.stage_layers) == (19, 21, None)
    assert lay.uneven_split
    assert uneven > _predicted(_case())  # the last rank's 21 layers against 20 everywhere: the slowest stage


def test_a_per_stage_list_reaches_the_scenario():
    case = _case(layout={"stage_layers": [19, 20, 20, 21]})
    _predicted(case)
    assert case.scenario.layout.stage_layers == (19, 20, 20, 21)
    assert case.scenario.layout.first_stage_layers is None


def test_interleaving_depth_guess_reads_uneven_stages():
    # 18 + 20 + 20 + 22 layers: 2 chunks divide every rank (the even split's 20 alone would allow 2 too)
    case = _case(layout={"schedule": "interleaved 1F1B", "first_stage_layers": 18, "last_stage_layers": 22})
    _predicted(case)
    assert (case.scenario.layout.schedule, case.scenario.layout.virtual_stages) == ("interleaved-1f1b", 2)
    assert "interleaving depth not stated: v = 2" in case.assumptions
    # 15 + 25 + 20 + 20: only 5 divides all, where the even split (20 per rank) would take 2
    odd = _case(layout={"schedule": "interleaved 1F1B", "first_stage_layers": 15, "last_stage_layers": 25})
    _predicted(odd)
    assert odd.scenario.layout.virtual_stages == 5
    # a per-stage list of pp*v entries says v itself
    listed = _case(layout={"schedule": "interleaved 1F1B", "stage_layers": [10] * 8})
    _predicted(listed)
    assert listed.scenario.layout.virtual_stages == 2


@pytest.mark.parametrize("name, key, layers", [
    ("Grok-1 314B", "grok-1", 64), ("Grok-1 314B (recipe proxy, 16 of 64 layers)", "grok-1", 16),
    ("Llama 3.1 405B (proxy: 32 layers)", "llama3.1-405b", 32), ("GPT-3 175B (MLPerf, NeMo)", "gpt3-175b", 96),
    ("internal-352b MOE", "megascale-moe-352b", 60),
])
def test_a_name_with_a_size_or_a_note_finds_its_row_and_the_runs_layers_win(name, key, layers):
    assert catalog.lookup(name).key == key
    case = _case({"name": name, "layers": None if layers == catalog.lookup(key).model["num_layers"] else layers},
                 layout={"tp": 8, "pp": 1, "dp": 32})
    _predicted(case)
    assert case.scenario.model.num_layers == layers
    assert f"catalog row {key}" in case.assumptions[0]
    assert catalog.lookup("Grok-1 999B") is None  # a size that is not the row's is another model


def test_a_gpt3_run_gets_the_catalog_row_and_no_presets_layout():
    # GPT-3 175B used to start from the hpn-gpt3-175b preset: plain DDP, H800 NVLink, no sequence parallelism
    case = _case({"name": "GPT-3 175B", "seq_len": 2048}, layout={"tp": 8, "pp": 8, "dp": 4, "global_batch_seqs": 256})
    sc = case.scenario
    assert not any("preset" in a for a in case.assumptions)
    assert (sc.model.num_layers, sc.model.hidden_size, sc.model.vocab_size, sc.model.positions) == (96, 12288, 51200,
                                                                                                   "learned")
    assert sc.model.tied_embeddings and sc.model.activation == "gelu"  # Brown et al. 2020, the catalog row
    assert sc.cluster.nvlink_Bps == 450e9 and sc.cluster.tiers == ()  # the run's H100, not HPN's H800 and its core
    assert sc.layout.sequence_parallel  # on with TP (convert.py), not the preset's off
    assert predict(case).memory.fits


def test_every_shipped_and_example_run_names_a_model_the_catalog_knows():
    texts = [shipped_runs_text(), *(Path(p).read_text() for p in sorted(glob.glob("examples/*_runs.yaml")))]
    for text in texts:  # libyaml's reader: the names alone, fast
        for run in yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))["runs"]:
            assert catalog.lookup(run["model"]["name"]) is not None, (run["id"], run["model"]["name"])
