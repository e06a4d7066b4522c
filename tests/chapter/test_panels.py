"""The chapter's panels against the full model (chapter/panels.py, chapter/dimensions.py, chapter/whatif.py)."""

import dataclasses

import pytest

import stepbudget as sb
from stepbudget.chapter import firstorder as fo
from stepbudget.chapter import dimensions as dims
from stepbudget.chapter.panels import Unmapped, compare, dp_differs, dp_totals, full_model
from stepbudget.chapter.whatif import panel_whatif

LLAMA = dict(N=405e9, G=16384, B=2**24, M=128, nic_Bps=50e9, F=400e12)


def first(**kw):
    a = {**LLAMA, **kw}
    return fo.strong_scaling(a["N"], a["G"], a["B"], a["M"], a["nic_Bps"], a["F"], 0.9, 989e12)


def test_the_defaults_are_the_presets_as_written():
    assert full_model(**LLAMA).command == "stepbudget budget llama3-405b"
    assert full_model(**{**LLAMA, "M": 1}).command == "stepbudget budget llama3-405b-puredp"
    measured = sb.estimate(sb.derive(sb.load("llama3-405b")))
    assert float(full_model(**LLAMA).budget.step_s) == pytest.approx(float(measured.step_s))


def test_the_measured_rate_holds_the_bubble_and_the_full_model_says_so():
    c = compare(first(), full_model(**LLAMA))
    reasons = dict(c.differs)
    inside, full = reasons["rate_inside"], {t.name: t.full for t in c.terms}
    assert c.in_rate and inside["kernel"] > 400e12 and inside["step"] == pytest.approx(full["step"], rel=1e-12)
    # the compute the measured rate gives holds the kernels, the bubble and the critical-path exchanges; DP's
    # exposed edges make up the rest of the step
    assert inside["kernels"] + inside["bubble"] + inside["waits"] == pytest.approx(full["compute"], rel=1e-12)
    assert full["compute"] + full["exposed"] == pytest.approx(full["step"], rel=1e-12)
    assert full["compute"] == pytest.approx({t.name: t.first for t in c.terms}["compute"], rel=0.01)  # 6.23 vs 6.22 s
    assert reasons["dp_bytes"]["full"] > reasons["dp_bytes"]["first"]  # FP32 reduce-scatter + BF16 gather


@pytest.mark.parametrize("inputs", [{}, {"G": 32768}, {"G": 131072}, {"M": 64, "nic_Bps": 25e9}, {"F": 450e12}])
def test_the_full_models_terms_are_what_budget_prints(inputs):
    import json

    from typer.testing import CliRunner

    from stepbudget.cli import app

    full = full_model(**{**LLAMA, **inputs})
    c = compare(first(**inputs), full)
    result = CliRunner().invoke(app, [*full.command.split()[1:], "--json"])
    assert result.exit_code == 0, result.output
    d = json.loads(result.stdout)
    expected = {"compute": d["compute_s"], "bubble": d["bubble_s"], "exposed": d["exposed_comm_s"], "step": d["step_s"],
                "mfu": d["mfu"], **{dim: v["time_s"] for dim, v in d["by_dim"].items() if v["time_s"]}}
    assert {t.name: t.full for t in c.terms} == pytest.approx(expected, rel=1e-12)
    split = {code: v for code, v in c.differs}.get("rate_scope") or dict(c.differs)["rate_inside"]
    assert split["kernels"] == pytest.approx(d["kernel_view"]["compute_s"], rel=1e-12)
    assert ("rate_scope" in dict(c.differs)) == ("carried_rate_flops" in d)  # the page says so when budget does


def test_at_131072_gpus_the_bubble_is_why_the_full_model_is_slower():
    full = full_model(**{**LLAMA, "G": 131072})
    c = compare(first(G=131072), full)
    codes = [code for code, _ in c.differs]
    assert "rate_scope" in codes and "bubble" in codes
    mfu = {t.name: t for t in c.terms}["mfu"]
    assert mfu.full < 0.5 * mfu.first
    assert full.command.endswith("--set cluster.gpus=131072 --set layout.dp=1024")


@pytest.mark.parametrize("M, G, tp, pp", [(8, 16384, 8, 1), (16, 16384, 8, 2), (64, 16384, 8, 8),
                                          (256, 16384, 8, 32), (2, 4096, 2, 1)])
def test_a_model_parallel_group_splits_tp_first(M, G, tp, pp):
    full = full_model(**{**LLAMA, "M": M, "G": G})
    lay = full.scenario.layout
    assert (lay.tp, lay.pp, lay.dp) == (tp, pp, G // M)


@pytest.mark.parametrize("inputs, reason", [
    (dict(N=70e9), "model"), (dict(M=24), "split"), (dict(M=128, G=1000), "split"), (dict(M=1, G=131072), "batch"),
])
def test_inputs_without_a_scenario_say_why(inputs, reason):
    out = full_model(**{**LLAMA, **inputs})
    assert isinstance(out, Unmapped) and out.reason == reason


def test_resharded_fsdp_gathers_for_every_micro_batch():
    full = full_model(**LLAMA, dp_kind="fsdp-reshard", grad_bytes=2, param_bytes=2)
    first_bytes = float(fo.dp_bytes_per_gpu(405e9, 128, 128, "fsdp-reshard"))
    (code, values), *_ = dp_differs(full, first_bytes)
    assert code == "dp_bytes" and values["reshard"] and values["microbatches"] == 16
    assert dp_totals(full.budget).bytes_per_gpu > 10 * first_bytes


def test_hpn_reread_and_the_ep_exercise():
    d = dims.preset_degrees("hpn-gpt3-175b")
    view = dims.dimension_view("hpn-gpt3-175b", d)
    reread = {r.dim: r for r in view.hpn}
    assert round(reread["tp"].ours_bytes / 1e6) == 352 and reread["tp"].match == "order"
    assert reread["dp"].match == reread["pp"].match == "exact"
    moe = dims.dimension_view("hpn-gpt3-175b", dataclasses.replace(d, ep=64))
    assert moe.assumed[0][0] == "moe_block" and moe.assumed[0][1]["expert_ffn"] == 49152 // 2
    ep = sum(r.bytes_per_gpu for r in moe.rows if r.dim == "ep")
    dense_dp = sum(r.bytes_per_gpu for r in view.rows if r.dim == "dp")
    assert 0.7 < ep / dense_dp < 1.0  # near the DP bytes
    assert all(r.critical and r.link == "nic" for r in moe.rows if r.dim == "ep")  # critical path, between servers


def test_dimension_rules_name_their_control():
    d = dims.preset_degrees("hpn-gpt3-175b")
    bad = dataclasses.replace(d, tp=7, pp=5, dp=100, ep=3, cp=3)
    assert {p.field for p in dims.check("hpn-gpt3-175b", bad)} == {"tp", "pp", "dp", "ep", "cp"}
    assert dims.check("hpn-gpt3-175b", d) == []
    # an order may name ep (beside dp) or leave it right inside dp: the same axes to the panel
    moe = dims.preset_degrees("megascale-moe-352b")
    assert dims.check("megascale-moe-352b", dataclasses.replace(moe, order=("tp", "cp", "pp", "ep", "dp"))) == []
    assert [p.field for p in dims.check("megascale-moe-352b", dataclasses.replace(moe, order=("tp", "cp", "pp")))] == [
        "order"]


def test_panel_whatif_halves_pp_when_hbm_allows_and_keeps_it_when_not():
    base, hbm = panel_whatif(141e9)
    assert hbm.scenario.layout.pp == 8 and bool(hbm.memory.fits)
    assert hbm.traffic_matrix()["tp"]["total"] == pytest.approx(2 * base.traffic_matrix()["tp"]["total"])
    assert hbm.bubble_fraction == pytest.approx(base.bubble_fraction / 2, rel=0.1)  # "half the bubble"
    *_, together = panel_whatif(141e9, moe=True)
    assert together.scenario.layout.pp == 16 and not bool(together.memory.fits)  # PP 8 does not fit with MoE
    assert [v.name for v in panel_whatif(80e9, True, True, True)] == ["base", "batch", "moe", "long", "all"]


def test_panel_whatif_prints_as_the_whatif_command():
    import shlex

    from typer.testing import CliRunner

    from stepbudget.cli import app
    from stepbudget.chapter.whatif import whatif_command

    variants = panel_whatif(141e9, moe=True)
    args = shlex.split(whatif_command("llama3-405b", variants))[1:]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    import json

    steps = [v["budget"]["step_s"] for v in json.loads(result.output)["variants"]]
    assert steps == pytest.approx([float(v.budget.step_s) for v in variants], rel=1e-9)
