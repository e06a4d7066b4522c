"""Runs that name their model (the catalog fills the shape), omit DP, or split the pipeline unevenly."""

import copy
import glob

import pytest

from stepbudget.inputs import catalog
from stepbudget.validation.compare import predict
from stepbudget.validation.convert import to_case
from stepbudget.validation.runs import check_run, read_runs

NAMED = {  # 256 H100s as TP8 x PP4 x DP8; the model stated by its name alone
    "id": "named",
    "model": {"name": "Llama 3.1 70B"},
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
    assert "model fields from the catalog row llama3.1-70b" in case.assumptions
    assert "FFN width 4h (GPT) assumed" not in case.assumptions  # the row's width, not the GPT default


def test_the_runs_own_numbers_override_the_catalog():
    stated = _case({"seq_len": 4096, "kv_heads": 16, "layers": 40})
    short = _predicted(stated)
    m = stated.scenario.model
    assert (m.seq_len, m.num_kv_heads, m.num_layers, m.hidden_size) == (4096, 16, 40, 8192)
    assert short < _predicted(_case())  # half the layers and half the context: less work per step


def test_an_unknown_name_with_missing_fields_stays_unpredictable_naming_them():
    case = _case({"name": "Frobnitz 9B", "layers": 32})
    assert case.scenario is None
    assert case.reason == "not stated in the source: model.hidden, model.heads, model.vocab, model.seq_len"
    assert catalog.lookup("Frobnitz 9B") is None


def test_the_catalog_fills_no_layout_field():
    case = _case(drop=("tp",))
    assert case.reason == "not stated in the source: layout.tp"


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


def _predictions(path: str | None) -> dict[str, float | None]:
    runs, _ = read_runs(path)
    return {run["id"]: predict(to_case(run)).predicted_step_s for run in runs}


@pytest.mark.parametrize("path", [None, "examples/bloom_runs.yaml", "examples/dgx_cloud_nemo2_runs.yaml"])
def test_the_catalog_changes_no_prediction_a_run_made_without_it(path, monkeypatch):
    # the shipped file, and files whose model names the catalog knows (BLOOM's row would tie its embeddings)
    with_catalog = _predictions(path)
    monkeypatch.setattr(catalog, "lookup", lambda name: None)
    without = _predictions(path)
    made = {rid: step for rid, step in without.items() if step is not None}
    assert made and {rid: with_catalog[rid] for rid in made} == made


def test_every_runs_file_names_known_models_or_states_their_shape():
    # the invariant above holds for every file: a run that names a catalog model but states its whole shape
    # is read as stated (no catalog note)
    for path in [None, *sorted(glob.glob("examples/*.yaml"))]:
        for run in read_runs(path)[0]:
            case = to_case(run)
            if all(run["model"].get(k) is not None for k in ("layers", "hidden", "heads", "vocab", "seq_len")):
                assert not any(a.startswith("model fields from the catalog") for a in case.assumptions), run["id"]
