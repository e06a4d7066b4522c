"""Checking a published run (validation/runs.py): what is refused, in words a user can act on."""

import copy
import glob
import math
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stepbudget.validation.convert import to_case
from stepbudget.validation.runs import RunError, check_run, load_runs, overlap_dims

RUN = {
    "id": "tiny",
    "model": {"name": "tiny", "layers": 8, "hidden": 1024, "heads": 16, "vocab": 32000, "seq_len": 2048},
    "hardware": {"gpu": "NVIDIA H100 SXM"},
    "num_gpus": 64,
    "layout": {"tp": 2, "pp": 4, "dp": 8, "global_batch_seqs": 64},
    "measured": {"step_time_s": 1.5},
}

_DROP = object()
_NUMBER = "give the number (units in the schema) or null"


def _with(changes: dict) -> dict:
    run = copy.deepcopy(RUN)
    for dotted, value in changes.items():
        *parents, name = dotted.split(".")
        node = run
        for p in parents:
            node = node[p]
        if value is _DROP:
            node.pop(name)
        else:
            node[name] = value
    return run



@pytest.mark.parametrize("changes, message", [
    ({"id": _DROP}, "runs[3]: id: missing; give every run a unique string id"),
    ({"id": 7}, "runs[3]: id: 7 is not text; give every run a unique string id"),
    ({"num_gpus": True}, "run tiny: num_gpus: True is not a positive integer; give the GPU count"),
    ({"num_gpus": 0, "layout.tp": 0}, "run tiny: num_gpus: 0 is not a positive integer; give the GPU count"),
    ({"layout": _DROP}, "run tiny: layout: missing; add the layout section"),
    ({"layout.pp": 0}, "run tiny: layout.pp: 0 is not a positive integer; give the number"),
    ({"model.seq_len": "2k"}, "run tiny: model.seq_len: '2k' is not a positive integer; give the number"),
    ({"hardware.gpu": None}, "run tiny: hardware.gpu: missing; name the GPU (e.g. 'NVIDIA H100 SXM')"),
    ({"measured": [1.5]}, "run tiny: measured: missing; give one of step_time_s, tokens_per_s_per_gpu, tokens_per_s, "
                          "samples_per_s, tflops_per_gpu, mfu_pct"),
    ({"measured.flops_convention": "PaLM"},
     "run tiny: measured.flops_convention: 'PaLM' is not a FLOP count the tool knows; give one of 6N, causal, noncausal"),
    ({"measured.flops_with_recompute": "sometimes"},
     "run tiny: measured.flops_with_recompute: 'sometimes' is not yes or no; give true or false"),
    ({"measured.tokens_per_s_per_gpu": "fast"},
     f"run tiny: measured.tokens_per_s_per_gpu: 'fast' is not a positive number; {_NUMBER}"),
    ({"layout.dcn_fsdp_parallelism": -1},
     f"run tiny: layout.dcn_fsdp_parallelism: -1 is not a positive integer; {_NUMBER}"),
    ({"layout.global_batch_tokens": 1.5e6},
     f"run tiny: layout.global_batch_tokens: 1500000.0 is not a positive integer; {_NUMBER}"),
    ({"layout.dispatch_precision": "mostly small"},
     "run tiny: layout.dispatch_precision: 'mostly small' names no precision; give fp32, bf16, fp16 or fp8 (or bytes "
     "per element)"),
    ({"source": "a paper"}, "run tiny: source: expected a mapping (document, locator), got 'a paper'"),
    ({"hardware.nic_gbps_per_gpu": "400G"}, f"run tiny: hardware.nic_gbps_per_gpu: '400G' is not a positive number; {_NUMBER}"),
    ({"measured.step_time_s": math.inf}, f"run tiny: measured.step_time_s: inf is not a positive number; {_NUMBER}"),
    ({"model.mtp_depth": -1}, f"run tiny: model.mtp_depth: -1 is not a non-negative integer; {_NUMBER}"),
    ({"model.moe": "64 experts"}, "run tiny: model.moe: expected a mapping (num_experts, top_k, ...), got '64 experts'"),
    ({"model.moe": {"top_k": 1.5}}, f"run tiny: model.moe.top_k: 1.5 is not a positive integer; {_NUMBER}"),
    ({"layout.dp": 2.0}, f"run tiny: layout.dp: 2.0 is not a positive integer; {_NUMBER}"),
    ({"layout.overlap": ["tp", "fsdp"]},
     "run tiny: layout.overlap: list the dimensions the framework overlaps, among tp, cp, ep, dp, pp ([] for none)"),
])
def test_a_bad_run_is_refused_with_the_field_and_the_fix(changes, message):
    with pytest.raises(RunError) as refused:
        check_run(_with(changes), 3)
    assert str(refused.value) == message


def test_a_run_that_is_not_a_mapping_is_refused_by_its_index():
    with pytest.raises(RunError) as refused:
        check_run(["tiny"], 0)
    assert str(refused.value) == "runs[0]: expected a mapping with id, model, hardware, num_gpus, layout, measured"


def test_what_the_source_leaves_out_or_states_as_text_or_zero_is_allowed():
    run = _with({"layout.tp": None, "layout.dp": "the rest", "model.mtp_depth": 0, "model.dense_layers": 0,
                 "model.moe": {"num_experts": 8, "top_k": 2, "shared_experts": 0}, "layout.overlap": "none"})
    check_run(run, 0)
    assert to_case(run).reason == "not stated in the source: layout.tp"
    assert overlap_dims(["TP", "dp"]) == ["tp", "dp"] and overlap_dims([]) == overlap_dims(" None ") == []
    with pytest.raises(ValueError):
        overlap_dims("tp, dp")  # a list, not text


# every run the project ships, mutated one field at a time
_RUNS = load_runs() + [r for p in sorted(glob.glob("examples/*.yaml")) for r in load_runs(p)]
_BAD = (None, 0, -1, 2.5, True, "", "x", [], {}, ["tp"], math.nan, 10**6)
_FIELD = re.compile(r"^(?:runs\[0\]|run \S+): ([a-z_0-9]+(?:\.[a-z_0-9]+)*): ")


def _paths(node: dict, prefix: str = "") -> list[str]:
    out = []
    for key, value in node.items():
        out.append(prefix + key)
        if isinstance(value, dict):
            out += _paths(value, prefix + key + ".")
    return out


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_mutated_run_becomes_a_case_or_a_value_error_naming_a_field(data):
    run = copy.deepcopy(data.draw(st.sampled_from(_RUNS), label="run"))
    path = data.draw(st.sampled_from(_paths(run)), label="field")
    *parents, name = path.split(".")
    node = run
    for p in parents:
        node = node[p]
    value = data.draw(st.sampled_from(("drop",) + _BAD), label="value")
    if value == "drop":
        del node[name]
    else:
        node[name] = copy.deepcopy(value)
    try:
        check_run(run, 0)
        case = to_case(run)
    except ValueError as e:
        named = _FIELD.match(str(e))
        assert named, str(e)
        field = named.group(1)
        assert field.startswith(path) or path.startswith(field), (path, str(e))  # the field, or its section
        return
    assert case.id == run["id"] and case.gpus == run["num_gpus"]
    assert case.reason is None or case.measured_step_s is None
    assert case.scenario is not None or case.reason  # no scenario without a reason

