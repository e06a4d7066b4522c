"""Uneven pipeline splits in the layout search (sweep/space.py, search.py; plan/derive.py uneven_split).

Oracles: Megatron-LM's uneven-PP checks (transformer_config.py), the scenario's own stated-split path
(derive and memory of a scenario with first/last_stage_layers), and the search as it ranks without the option.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import stepbudget as sb
from stepbudget.budget.memory import memory_per_gpu
from stepbudget.budget.rate import kernel_scenario
from stepbudget.plan.derive import uneven_split
from stepbudget.enums import CP_KIND_CODES, DP_KIND_CODES, RECOMPUTE_CODES, SCHEDULE_CODES
from stepbudget.sweep.search import _metrics, scenario_for, search, split_columns
from stepbudget.sweep.space import COLUMNS, layout_space, splits_unevenly

# Llama 3 405B's 126 layers (2 x 3^2 x 7) divide only pp 1 and 2 once the embedding and loss take no slot;
# timed by the operator model, where the busiest stage sets the pace
LLAMA_UNEVEN = ["layout.pp=2", "layout.virtual_stages=1", "layout.schedule=1f1b", "layout.dp=1024",
                "layout.embedding_in_pipeline_split=false", "layout.loss_in_pipeline_split=false",
                "cluster.achieved_flops=null", "cluster.rate_scope=kernel"]
TOL = 1e-12
CODES = {"dp_kind": DP_KIND_CODES, "recompute": RECOMPUTE_CODES, "cp_kind": CP_KIND_CODES}


def key(row):
    return tuple(row[k] for k in COLUMNS)


# --- the split rule ---------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 200), st.integers(2, 64), st.integers(1, 8))
def test_a_valid_split_places_every_layer_in_whole_chunks_as_megatron_checks(layers, pp, v):
    first, middle, last, ok = (int(x) for x in uneven_split(layers, pp, v))
    if not ok:
        return
    assert first + (pp - 2) * middle + last == layers
    assert first >= v and last >= v  # Megatron: first/last stage layers > 0
    assert first % v == middle % v == last % v == 0  # and multiples of the virtual pipeline degree
    assert last <= first <= middle or pp == 2  # the ends are the lighter ranks
    assert middle == v * -(-layers // (pp * v))  # the busiest rank: the even share rounded up to whole chunks
    if layers % (pp * v) == 0:
        assert first == middle == last == layers // pp  # dividing splits come out even


def test_the_split_is_one_a_scenario_accepts_and_reads_back():
    first, middle, last, ok = (int(x) for x in uneven_split(126, 16, 1))
    assert (first, middle, last, bool(ok)) == (7, 8, 7, True)  # Llama 3's own 7 + 14 x 8 + 7
    sc = sb.load("llama3-405b", [*LLAMA_UNEVEN, "layout.pp=16", "layout.dp=128",
                                 f"layout.first_stage_layers={first}", f"layout.last_stage_layers={last}"])
    assert sc.rank_layers == (7,) + (8,) * 14 + (7,)


@pytest.mark.parametrize("pp, v, valid", [(5, 1, True), (64, 1, True), (126, 1, True), (2, 9, True),
                                         (127, 1, False), (98, 1, False), (4, 4, False)])
def test_splits_megatron_refuses_are_not_valid(pp, v, valid):
    # 127 ranks of 1 leave the last rank none, 98 ranks of 2 leave the ends nothing; 126 is no multiple of 4
    assert bool(uneven_split(126, pp, v)[3]) == valid


@pytest.mark.parametrize("pp, v, schedule", [(16, 1, "1f1b"), (32, 1, "zb-h2"), (8, 3, "interleaved-1f1b"),
                                            (4, 1, "dualpipe"), (64, 1, "dualpipe"), (4, 3, "interleaved-1f1b")])
def test_the_array_path_times_and_sizes_the_split_as_the_stated_split_does(pp, v, schedule):
    base = sb.load("llama3-405b", LLAMA_UNEVEN)  # 16,384 GPUs at TP 8
    first, _, last, ok = (int(x) for x in uneven_split(126, pp, v))
    assert ok
    dp = 16384 // (8 * pp)
    stated = sb.load("llama3-405b", [*LLAMA_UNEVEN, f"layout.pp={pp}", f"layout.dp={dp}",
                                     f"layout.virtual_stages={v}", f"layout.schedule={schedule}",
                                     f"layout.first_stage_layers={first}", f"layout.last_stage_layers={last}"])
    n = 3  # the same layout three times over: every element is the 0-d answer
    cols = {k: np.full(n, getattr(stated.layout, k)) for k in COLUMNS if k not in ("schedule", "expert_tp")}
    cols |= {"schedule": np.full(n, SCHEDULE_CODES[stated.layout.schedule]), "expert_tp": np.full(n, 8)}
    cols |= {k: np.full(n, CODES[k][getattr(stated.layout, k)]) for k in CODES}
    cols |= split_columns(base, cols)
    assert cols["first_stage_layers"].tolist() == [first] * n
    got = _metrics(base, cols)
    plan = sb.derive(stated)
    want, mem = sb.estimate(plan), memory_per_gpu(plan)
    np.testing.assert_allclose(got["compute_s"], float(want.compute_s), rtol=TOL)
    np.testing.assert_allclose(got["step_s"], float(want.step_s), rtol=TOL)
    np.testing.assert_allclose(got["memory_bytes"], float(mem.total), rtol=TOL)
    np.testing.assert_allclose(got["model_state_bytes"], float(mem.model_state), rtol=TOL)


@pytest.fixture(scope="module")
def llama_uneven():
    base = sb.load("llama3-405b", LLAMA_UNEVEN)
    return search(base, gpus=1024, top=10), search(base, gpus=1024, top=10, uneven_stages=True)


def test_uneven_rows_match_the_scalar_path(llama_uneven):
    _, on = llama_uneven
    uneven = [r for r in on.top if r["first_stage_layers"] is not None]
    assert uneven
    for row in uneven:
        sc = scenario_for(on.scenario, row, on.gpus)  # validates the split as a user's scenario
        plan = sb.derive(sc)
        assert sc.layout.uneven_split
        assert float(sb.estimate(plan).step_s) == pytest.approx(row["step_s"], rel=1e-9)
        mem = memory_per_gpu(plan)
        assert float(mem.total) == pytest.approx(row["memory_bytes"], rel=1e-9)
        assert float(mem.model_state) == pytest.approx(row["model_state_bytes"], rel=1e-9)


def test_a_model_whose_layers_do_not_divide_finds_a_faster_pipeline(llama_uneven):
    off, on = llama_uneven
    assert all(r["pp"] in (1, 2) for r in off.top)  # 126 layers: only pp 1 and 2 divide
    assert on.top[0]["pp"] > 2 and on.top[0]["first_stage_layers"] is not None
    assert on.top[0]["step_s"] < 0.9 * off.top[0]["step_s"]
    assert on.evaluated > off.evaluated
    # every layout the search without the option ranks keeps its numbers exactly
    found = {key(r): r for r in on.best_by["pp"].values()} | {key(r): r for r in on.top}
    for row in off.top:
        if key(row) in found:
            assert found[key(row)]["step_s"] == pytest.approx(row["step_s"], rel=TOL)


# --- presets: rankings unchanged --------------------------------------------------------------------------


@pytest.mark.parametrize("name", sb.preset_names())
def test_preset_rankings_are_the_same_with_uneven_splits(name):
    sc = sb.load(name)
    if not splits_unevenly(kernel_scenario(sc)[0], True):
        # embedding/loss slots or a stated rate: the option changes nothing, not even the space
        a, b = layout_space(sc), layout_space(sc, uneven_stages=True)
        assert np.array_equal(a.structures, b.structures)
        return
    off, on = search(sc, top=10), search(sc, top=10, uneven_stages=True)
    assert [key(r) for r in on.top] == [key(r) for r in off.top]
    for a, b in zip(off.top, on.top):
        assert b["step_s"] == pytest.approx(a["step_s"], rel=TOL, abs=0)
        assert b["memory_bytes"] == pytest.approx(a["memory_bytes"], rel=TOL, abs=0)
        assert b["first_stage_layers"] is None


def test_the_command_line_tries_uneven_stages_only_when_asked():
    import json

    from typer.testing import CliRunner

    from stepbudget import cli

    args = ["search", "llama3-405b", "--gpus", "1024", "--top", "3", "--json",
            *(x for s in ("layout.embedding_in_pipeline_split=false", "layout.loss_in_pipeline_split=false",
                          "layout.pp=2", "layout.virtual_stages=63", "layout.dp=1024", "cluster.achieved_flops=null",
                          "cluster.rate_scope=kernel") for x in ("--set", s))]
    even = json.loads(CliRunner().invoke(cli.app, args).output)
    uneven = json.loads(CliRunner().invoke(cli.app, [*args, "--uneven-stages"]).output)
    assert all(126 % (t["layout"]["pp"] * t["layout"]["virtual_stages"]) == 0 for t in even["top"])
    split = [t for t in uneven["top"] if t["layout"].get("first_stage_layers") is not None]
    assert split and uneven["top"][0]["budget"]["step_s"] < even["top"][0]["budget"]["step_s"]
