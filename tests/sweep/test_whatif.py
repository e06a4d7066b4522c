"""What-if variants: the chapter's four cases (5.7), Panel 5.4's halved NIC, and the rules they run by."""

import json

import pytest

import stepbudget as sb
from typer.testing import CliRunner

from stepbudget.cli import app
from stepbudget.enums import Axis
from stepbudget.inputs.errors import OptionError
from stepbudget.chapter.whatif import CHAPTER_CASES
from stepbudget.sweep.whatif import parse_vary, whatif

from _util import rows


@pytest.fixture(scope="module")
def chapter():
    return {v.name: v for v in whatif("llama3-405b", [], list(CHAPTER_CASES["llama3-405b"].items()))}


def _frac(v):
    return float(v.budget.bubble_s / v.budget.compute_s)


def _bytes(v, dim):
    return v.traffic_matrix()[dim]["total"]


def test_more_hbm_lets_pp_drop_from_16_to_8(chapter):
    base = chapter["base"]
    on80, on141, on180 = (chapter[f"PP 8 on {x}"] for x in ("80 GB H100", "141 GB H200", "180 GB B200"))
    assert bool(base.memory.fits) and not bool(on80.memory.fits)
    assert bool(on141.memory.fits) and bool(on180.memory.fits)
    for v in (on80, on141):
        assert v.scenario.layout.dp == base.scenario.layout.dp == 128  # DP and the batch per replica fixed
        assert _bytes(v, "tp") == pytest.approx(2 * _bytes(base, "tp"))  # twice the layers per GPU
        assert v.traffic_matrix()["tp"]["nic"] == 0  # still on NVLink
        # bubble (p-1)/(v m): 7/64 against 15/64 - "half the bubble"
        assert _frac(v) == pytest.approx(_frac(base) * 7 / 15)


def test_batch_doubles(chapter):
    base, big = chapter["base"], chapter["batch x 2"]
    assert _bytes(big, "dp") == pytest.approx(_bytes(base, "dp"))  # DP bytes per step unchanged
    for dim in ("tp", "pp"):
        assert _bytes(big, dim) == pytest.approx(2 * _bytes(base, dim))
    assert _frac(big) == pytest.approx(_frac(base) / 2)


def test_dense_to_moe_adds_an_all_to_all_in_every_moe_layer(chapter):
    base, moe = chapter["base"], chapter["dense -> MoE (16 experts, top-2, EP 8)"]
    assert _bytes(base, "ep") == 0 and _bytes(moe, "ep") > 0
    plan = moe.budget.plan
    for x in (x for x in rows(moe.budget, Axis.EP) if x.what.startswith("tokens")):
        # dispatch and combine, forward and backward, in every MoE layer pass of every micro-batch
        assert float(x.calls) == pytest.approx(2 * 126 / 16 * float(plan.microbatches))
    assert moe.traffic_matrix()["ep"]["nic"] == 0  # EP 8 inside the node: NVLink does the copying
    # same active FLOPs, but for the router's h x E parameters per layer (6N counts them)
    router = 6 * 126 * 16384 * 16 / (6 * 405e9)
    assert float(moe.budget.compute_s) == pytest.approx(float(base.budget.compute_s) * (1 + router), rel=2e-4)


def test_sequence_128k_takes_cp_from_dp_and_exposes_all_gathers(chapter):
    base, long = chapter["base"], chapter["sequence 128K (CP 16 from DP)"]
    assert long.scenario.cluster.gpus == base.scenario.cluster.gpus
    assert (long.scenario.layout.cp, long.scenario.layout.dp) == (16, 8)
    assert _bytes(base, "cp") == 0 and _bytes(long, "cp") > 0
    gathers = rows(long.budget, Axis.CP, "K,V")
    assert gathers and all(x.critical for x in gathers)
    # one all-gather per attention layer pass of every micro-batch
    assert float(gathers[0].calls) == pytest.approx(float(long.budget.plan.layers_per_gpu * long.budget.plan.microbatches))
    exposed = long.budget.by_dim("exposed_s")["cp"]
    assert float(exposed) > 0


def test_panel_5_4_halving_the_nic_barely_moves_mfu(chapter):
    base, half = chapter["base"], chapter["NIC 200 Gb/s"]
    dp = lambda v: float(v.budget.by_dim("bandwidth_s")["dp"])  # noqa: E731
    assert dp(half) == pytest.approx(2 * dp(base), rel=1e-9)  # the exchange takes twice as long ...
    # ... yet MFU loses under a tenth of itself: the DP exchange is a few percent of the step (chapter:
    # 3.9 % -> 7.5 % of it with the two formulas, MFU 38.9 % -> 37.4 %)
    assert 0 < 1 - float(half.budget.mfu) / float(base.budget.mfu) < 0.1


def test_gpu_generation_uses_the_new_peak_at_the_same_efficiency(chapter):
    base, b200 = chapter["base"], chapter["GPU generation: B200"]
    assert float(b200.budget.compute_s) == pytest.approx(float(base.budget.compute_s) * 989 / 2250)


@pytest.mark.parametrize("preset", ["llama3-405b", "megascale-175b"])  # a stated rate; the operator model
def test_a_change_to_the_same_value_changes_nothing(preset):
    base, same = whatif(preset, [], [("same", ("layout.micro_batch=1",))])
    assert float(same.budget.step_s) == pytest.approx(float(base.budget.step_s), rel=1e-12)
    assert same.budget.plan.comm_sm_share == base.budget.plan.comm_sm_share


def test_operator_model_variants_are_timed_by_their_own_operators():
    base, stored = whatif("megascale-175b", [], [("scores", ("layout.flash_attention=false",))])
    assert stored.budget.plan.rate_source == "operators"
    assert float(stored.budget.compute_s) > float(base.budget.compute_s) * 1.05  # the s x s scores cost time


def test_a_variant_that_sets_its_rate_is_that_rate_measured_on_its_job():
    # a stated whole-step rate is what was measured on the job: the variant takes the step it says, split at the
    # kernel rate that reproduces it, as budget does
    _, v = whatif("llama3-405b", [], [("rate", ("cluster.achieved_flops=300TFLOP/s",))])
    measured = sb.estimate(sb.derive(sb.load("llama3-405b", ["cluster.achieved_flops=300TFLOP/s"])))
    assert float(v.budget.step_s) == pytest.approx(float(measured.step_s), rel=1e-9)
    assert float(v.budget.plan.flops_rate) == pytest.approx(float(measured.kernel.plan.flops_rate), rel=1e-12)
    assert float(v.budget.plan.flops_rate) > 300e12  # the kernels ran faster than the step's average


@pytest.mark.parametrize("text, want", [
    ("layout.pp=8 cluster.gpus=8192", ("layout.pp=8", "cluster.gpus=8192")),
    ("layout.pp=8;cluster.gpus=8192", ("layout.pp=8", "cluster.gpus=8192")),
    ("model.moe='{num_experts: 16, top_k: 2, expert_ffn_size: 26624}'",
     ("model.moe={num_experts: 16, top_k: 2, expert_ffn_size: 26624}",)),
])
def test_parse_vary(text, want):
    assert parse_vary(text) == want


@pytest.mark.parametrize("text", ["", "junk", "=3", "layout.pp='8"])
def test_parse_vary_rejects(text):
    with pytest.raises(OptionError, match="^vary: ") as refused:  # named by its option, whichever door gave it
        parse_vary(text)
    assert refused.value.option == "vary"


@pytest.mark.parametrize("args, fragment", [
    ([], "--vary"),
    (["--vary", "layout.pp=7"], "variant 'layout.pp=7': layout"),
    (["--vary", "layout.nope=1"], "unknown field"),
    (["--vary", "cluster.nic_Bps=fast"], "nic_Bps"),
])
def test_cli_bad_input_is_one_line(args, fragment):
    result = CliRunner().invoke(app, ["whatif", "llama3-405b", *args])
    assert result.exit_code == 2, result.output
    assert fragment in result.output and "Traceback" not in result.output
    lines = result.output.strip().splitlines()  # one line per problem, each naming where it is
    assert all(line.startswith(lines[0][:lines[0].index(":", 20) + 1]) for line in lines)
    assert len(lines) == (2 if "pp=7" in " ".join(args) else 1)  # 7 stages break the GPU count and the slots


def test_cli_chapter_needs_its_preset():
    result = CliRunner().invoke(app, ["whatif", "hpn-gpt3-175b", "--chapter"])
    assert result.exit_code == 2 and "--chapter" in result.output


def test_cli_json():
    result = CliRunner().invoke(app, ["whatif", "llama3-405b", "--vary", "cluster.nic_Bps=200Gb/s", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    names = [v["name"] for v in data["variants"]]
    assert names == ["base", "cluster.nic_Bps=200Gb/s"]
    v = data["variants"][1]
    assert {"budget", "memory", "traffic_matrix", "bubble_fraction", "changes"} <= set(v)
    assert set(v["traffic_matrix"]) == {"tp", "cp", "pp", "dp", "ep"}
    assert v["budget"]["step_s"] > data["variants"][0]["budget"]["step_s"]
