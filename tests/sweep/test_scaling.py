"""Strong and weak scaling (chapter 5.4, Figure 5.4, Panel 5.4)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import stepbudget as sb
from stepbudget.cli import app
from stepbudget.inputs.scenario import ScenarioError
from stepbudget.sweep.scaling import parse_gpus, scale

FIGURE_5_4 = [8192, 16384, 32768, 65536, 131072]
# no tiers, no latency: the DP exchange is the chapter's bandwidth-only ring count
BARE = ["cluster.tiers=[]", "cluster.nic_latency_s=0", "cluster.nvlink_latency_s=0"]


@pytest.fixture(scope="module")
def figure_5_4():
    return scale(sb.load("llama3-405b"), FIGURE_5_4)


def test_own_size_keeps_the_measured_step(figure_5_4):
    # the kernel rate is calibrated so that Llama 3's own 16,384-GPU layout takes its measured step
    measured = float(sb.estimate(sb.derive(sb.load("llama3-405b"))).step_s)
    point = figure_5_4.points[FIGURE_5_4.index(16384)]
    assert point.step_s == pytest.approx(measured, rel=1e-6)
    assert figure_5_4.calibrated_rate > 400e12  # the kernels run faster than the whole-step average


def test_strong_scaling_compute_falls_as_one_over_g(figure_5_4):
    gpu_seconds = [p.compute_s * p.gpus for p in figure_5_4.points]
    assert gpu_seconds == pytest.approx([gpu_seconds[0]] * len(gpu_seconds), rel=1e-12)
    assert all(p.global_batch_seqs == 2048 for p in figure_5_4.points)


def test_strong_scaling_dp_exchange_stays_put():
    # chapter 5.4: T_comm = 2 (D-1)/D x bytes / B: the factor is already above 0.87 at D = 8
    curve = scale(sb.load("llama3-405b", BARE), FIGURE_5_4)
    dp = np.array([p.layout["dp"] for p in curve.points])
    t = np.array([p.dp_s for p in curve.points])
    assert t / t[0] == pytest.approx(((dp - 1) / dp) / ((dp[0] - 1) / dp[0]), rel=1e-9)


def test_communication_share_rises_and_mfu_falls(figure_5_4):
    shares = [p.comm_share for p in figure_5_4.points]
    mfus = [p.mfu for p in figure_5_4.points]
    assert all(a < b for a, b in zip(shares, shares[1:]))
    assert all(a > b for a, b in zip(mfus, mfus[1:]))


def test_panel_5_4_at_131072_the_exchange_term_wins(figure_5_4):
    small, big = figure_5_4.points[1], figure_5_4.points[-1]
    assert small.compute_s > 4 * small.dp_s  # 16,384 GPUs: compute dominates
    assert big.dp_s > big.compute_s  # 131,072 GPUs: the DP exchange alone outlasts compute
    assert big.comm_s > big.compute_s


def test_panel_5_4_model_parallel_group_one_is_dominated_by_communication(budget_of):
    # pure DP: 1.62 TB per GPU at 50 GB/s = 32.4 s against 6.2 s of compute (formulas.md 9.1)
    b = budget_of("llama3-405b-puredp")
    assert float(b.comm_share) == pytest.approx(32.4 / (32.4 + 6.22), abs=0.01)
    assert float(b.mfu) < 0.25 * float(budget_of("llama3-405b").mfu)


def test_weak_scaling_keeps_compute_and_grows_the_batch():
    curve = scale(sb.load("llama3-405b"), [8192, 16384, 32768], weak=True)
    assert [p.global_batch_seqs for p in curve.points] == [1024, 2048, 4096]
    assert [p.compute_s for p in curve.points] == pytest.approx([curve.points[0].compute_s] * 3, rel=1e-12)
    assert [p.microbatches for p in curve.points] == [16, 16, 16]


def test_the_bubble_time_barely_moves_with_the_gpu_count(figure_5_4):
    # chapter 5.7: "with the GPU count fixed instead, the bubble barely moves" - and at a fixed batch,
    # the bubble (p-1)/(v m) x compute keeps its seconds while m and compute both halve
    bubbles = [p.bubble_s for p in figure_5_4.points]
    assert bubbles == pytest.approx([bubbles[0]] * len(bubbles), rel=1e-9)


def test_research_is_never_slower_than_the_fixed_layout():
    sc = sb.load("megascale-175b", ["cluster.gpus=512", "layout.dp=8"])
    fixed = scale(sc, [256, 512])
    best = scale(sc, [256, 512], research=True)
    for f, b in zip(fixed.points, best.points):
        assert b.fits and b.note is None
        if f.fits and f.note is None:
            assert b.step_s <= f.step_s * (1 + 1e-9)
        assert np.prod([b.layout[k] for k in ("tp", "cp", "pp", "dp")]) == b.gpus


@given(st.lists(st.integers(1, 64).map(lambda k: 128 * k), min_size=1, max_size=4, unique=True))
@settings(max_examples=25, deadline=None)
def test_more_nic_bandwidth_is_never_slower(sizes):
    sizes = [n for n in sizes if 2048 % (n // 128) == 0] or [16384]
    slow = scale(sb.load("llama3-405b", ["cluster.rate_scope=kernel"]), sizes)
    fast = scale(sb.load("llama3-405b", ["cluster.rate_scope=kernel", "cluster.nic_Bps=800Gb/s"]), sizes)
    for s, f in zip(slow.points, fast.points):
        assert f.step_s <= s.step_s * (1 + 1e-12)


@pytest.mark.parametrize("sizes, fragment", [
    ([1000], "multiples of 128"),
    ([384], "do not divide the 2048 sequences"),
])
def test_sizes_that_cannot_hold_the_layout(sizes, fragment):
    with pytest.raises(ScenarioError, match=fragment):
        scale(sb.load("llama3-405b"), sizes)


@pytest.mark.parametrize("text", ["", "a,b", "1024,-8", "0"])
def test_parse_gpus_rejects(text):
    with pytest.raises(ScenarioError, match="sizes"):
        parse_gpus(text)


def test_parse_gpus_reads_lists():
    assert parse_gpus("1024, 2_048,4096") == [1024, 2048, 4096]


@pytest.mark.parametrize("suffix, magic", [(".png", b"\x89PNG"), (".svg", b"<svg"), (".html", b"plotly")])
def test_cli_plot_writes_the_figure(tmp_path, suffix, magic):
    out = tmp_path / f"fig{suffix}"
    result = CliRunner().invoke(app, ["scale", "llama3-405b", "--gpus", "8192,16384,131072", "--plot", str(out)])
    assert result.exit_code == 0, result.output
    assert magic in out.read_bytes()[:4000] if suffix != ".html" else magic in out.read_bytes()
    assert [p.name for p in tmp_path.iterdir()] == [out.name]  # no partial file left beside it


@pytest.mark.parametrize("args, fragment", [
    (["--gpus", "16384", "--plot", "fig.pdf"], "--plot"),
    (["--gpus", "16384", "--plot", "no/such/folder/fig.png"], "does not exist"),
    (["--gpus", "1000"], "multiples of 128"),
    (["--gpus", "x"], "--gpus"),
    (["--gpus", "128,1024", "--set", "layout.dp_replicas=2"], "layout.dp_replicas = 2 shard groups"),
])
def test_cli_bad_input_is_one_line(args, fragment):
    result = CliRunner().invoke(app, ["scale", "llama3-405b", *args])
    assert result.exit_code == 2
    assert fragment in result.output and "Traceback" not in result.output


def test_cli_json_has_the_points():
    import json

    result = CliRunner().invoke(app, ["scale", "llama3-405b", "--gpus", "16384,32768", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [p["gpus"] for p in data["points"]] == [16384, 32768]
    assert {"compute_s", "dp_s", "comm_share", "exposed_share", "mfu", "step_s", "fits"} <= set(data["points"][0])


def _json(*args):
    import json

    r = CliRunner().invoke(app, list(args))
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_budget_and_scale_agree_at_another_size():
    # a changed job carries its measured whole-step rate as scale does: the same kernels, bubble, step and MFU;
    # budget's compute is what the whole-step rate covers (the kernels, the bubble and the critical-path waits)
    b = _json("budget", "llama3-405b", "--set", "cluster.gpus=131072", "--set", "layout.dp=1024", "--json")
    (p,) = _json("scale", "llama3-405b", "--gpus", "131072", "--json")["points"]
    for key in ("bubble_s", "step_s", "mfu"):
        assert b[key] == pytest.approx(p[key], rel=1e-9), key
    for key in ("compute_s", "bubble_s", "step_s"):
        assert b["kernel_view"][key] == pytest.approx(p[key], rel=1e-9), key
    dp_exposed = b["by_dim"]["dp"]["exposed_s"]
    assert b["compute_s"] == pytest.approx(b["step_s"] - dp_exposed, rel=1e-12)
    assert b["carried_rate_flops"] == pytest.approx(_json("scale", "llama3-405b", "--gpus", "131072",
                                                          "--json")["kernel_rate_flops"], rel=1e-9)
    assert p["bubble_s"] < p["step_s"]  # a bubble inside a step, not longer than it


def test_budget_and_scale_split_the_measured_step_the_same_way_at_its_own_size():
    b = _json("budget", "llama3-405b", "--json")
    s = _json("scale", "llama3-405b", "--gpus", "16384", "--json")
    (p,) = s["points"]
    assert b["step_s"] == pytest.approx(p["step_s"], rel=1e-6) == s["as_measured"]["step_s"]
    kernel = b["kernel_view"]  # budget's own line on how scale reads its rate
    for key in ("compute_s", "bubble_s", "step_s"):
        assert kernel[key] == pytest.approx(p[key], rel=1e-9), key
    assert (s["as_measured"]["compute_s"], s["as_measured"]["bubble_s"]) == (b["compute_s"], b["bubble_s"])
    text = CliRunner().invoke(app, ["scale", "llama3-405b", "--gpus", "16384"]).output
    assert "the same 6.28 s step as budget" in " ".join(text.split())


def test_rate_and_name_overrides_keep_a_measured_rate():
    from stepbudget.sweep.calibrate import carried

    kept, rate = carried(sb.load("llama3-405b", ["cluster.achieved_flops=380TFLOP/s", "name=mine"]))
    assert rate is None and kept.cluster.achieved_flops == 380e12 and kept.cluster.rate_scope == "step"
    moved, rate = carried(sb.load("llama3-405b", ["cluster.achieved_flops=380TFLOP/s", "layout.pp=8", "layout.dp=256"]))
    assert moved.cluster.rate_scope == "kernel" and rate > 380e12 and moved.cluster.achieved_flops == rate
    # the stated 380 TFLOP/s is what was measured on the preset's layout: its kernel rate reproduces that step
    measured = sb.estimate(sb.derive(sb.load("llama3-405b", ["cluster.achieved_flops=380TFLOP/s"])))
    same_layout = sb.load("llama3-405b", ["cluster.rate_scope=kernel", f"cluster.achieved_flops={rate}"])
    assert float(sb.estimate(sb.derive(same_layout)).step_s) == pytest.approx(float(measured.step_s), rel=1e-6)


def test_budget_set_and_whatif_vary_agree():
    b = _json("budget", "llama3-405b", "--set", "cluster.nic_Bps=200Gb/s", "--json")
    w = _json("whatif", "llama3-405b", "--vary", "cluster.nic_Bps=200Gb/s", "--json")
    assert b["step_s"] == pytest.approx(w["variants"][1]["budget"]["step_s"], rel=1e-9)


def test_a_research_reports_progress_size_by_size():
    from stepbudget.sweep.scaling import scale

    calls = []
    curve = scale(sb.load("hpn-gpt3-175b"), [1024, 2048], research=True,
                  progress=lambda done, total: calls.append((done, total)))
    assert calls == [(1, 2), (2, 2)] and [p.gpus for p in curve.points] == [1024, 2048]
