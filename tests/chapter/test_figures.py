"""The chapter's figures: each writes HTML, PNG and SVG; their content read from the figure object."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import stepbudget as sb
from stepbudget.cli import app
from stepbudget.chapter.firstorder import balance
from stepbudget.plan.derive import derive
from stepbudget.chapter.figures import FIGURES, build
from stepbudget.views.i18n import t
from stepbudget.units import BITS_PER_BYTE

_cache: dict[tuple[str, str], dict] = {}


def figure(ident: str, lang: str = "en") -> dict:
    if (ident, lang) not in _cache:
        _cache[(ident, lang)] = build(ident, lang)
    return _cache[(ident, lang)]


def _png(path: Path) -> tuple[int, int, np.ndarray]:
    """Width, height and grey levels (0-255) of a PNG."""
    from matplotlib.image import imread

    pixels = imread(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return pixels.shape[1], pixels.shape[0], pixels[:, :, :3].mean(axis=2) * 255


@pytest.mark.parametrize("ident", list(FIGURES))
def test_every_figure_writes_html_png_and_svg(ident, tmp_path):
    for suffix in (".html", ".png", ".svg"):
        out = tmp_path / f"fig{suffix}"
        result = CliRunner().invoke(app, ["figure", ident, "--out", str(out)])
        assert result.exit_code == 0, result.output
        assert out.stat().st_size > 5_000
        assert not list(tmp_path.glob(".*partial*"))  # written through a temporary file, nothing left over
    html = (tmp_path / "fig.html").read_text()
    assert "Plotly.newPlot" in html
    # self-contained: no script, stylesheet or image fetched from anywhere (plotly.js is inlined)
    assert not re.search(r"""<(script|link|img)[^>]+(src|href)=["']?(https?:)?//""", html)
    svg = (tmp_path / "fig.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg


@pytest.mark.parametrize("ident", list(FIGURES))
def test_a_png_is_the_figure_size_and_not_blank(ident, tmp_path):
    out = tmp_path / "fig.png"
    assert CliRunner().invoke(app, ["figure", ident, "--out", str(out)]).exit_code == 0
    width, height, grey = _png(out)
    layout = figure(ident)["layout"]
    assert (width, height) == (layout["width"], layout["height"])
    assert grey.std() > 10  # drawn: a blank or single-colour image has none
    assert (grey < 128).mean() > 0.005  # ink, not only a light background (5.8's thin NIC lines: 0.8 %)


def test_ring_figure_draws_every_send_and_each_chunk_goes_round():
    n = 4
    fig = figure("5.3")
    bars = [d for d in fig["data"] if d["type"] == "bar"]
    assert len(bars) == n and sum(len(d["x"]) for d in bars) == 2 * (n - 1) * n
    gpu = [t("en", "fig.5.3.gpu", rank=i) for i in range(n)]
    for c, chunk in enumerate(bars):
        order = np.argsort(chunk["base"])
        senders = [gpu.index(chunk["y"][i]) for i in order]
        receivers = [int(chunk["text"][i].rsplit(" ", 1)[1]) for i in order]
        assert len(senders) == 2 * (n - 1)  # 2 (N - 1) sends of each chunk
        assert receivers == [(s + 1) % n for s in senders]  # each to the next GPU of the ring
        assert senders[1:] == receivers[:-1]  # and passed on by the GPU that got it, all the way round
        assert len(set(senders)) == n  # every GPU passes it on, in one phase or the other
    assert "1.5 × S" in fig["layout"]["title"]["text"]


def test_roofline_balance_points_are_rate_over_bandwidth():
    fig = figure("5.2")
    plan = derive(sb.load("llama3-405b"))
    marks = [s for s in fig["layout"]["shapes"] if s["type"] == "line"]
    expected = [float(balance(plan.flops_rate, bw)) for bw in (plan.hbm_Bps, plan.nvlink_Bps, plan.nic_Bps)]
    assert [m["x0"] for m in marks] == pytest.approx(expected)
    chapter = float(balance(400e12, 50e9))
    assert chapter == pytest.approx(8000)  # the chapter's 400 TFLOP/s on 50 GB/s
    roofs = fig["data"][:3]
    for roof, bw in zip(roofs, (plan.hbm_Bps, plan.nvlink_Bps, plan.nic_Bps)):
        x, y = np.array(roof["x"]), np.array(roof["y"])
        assert np.allclose(y, np.minimum(plan.flops_rate, x * bw))
    points = [d for d in fig["data"] if d.get("mode") == "markers+text"]
    assert len(points) == 2  # pure DP and the default TP8 x PP16


def test_eight_nics_burst_at_line_rate_and_idle_between():
    fig = figure("5.8")
    sc = sb.load("hpn-gpt3-175b")
    assert len(fig["data"]) == sc.cluster.nics_per_node == 8
    line = sc.cluster.nic_Bps * BITS_PER_BYTE
    first = np.array(fig["data"][0]["y"])
    for trace in fig["data"]:
        y = np.array(trace["y"])
        assert set(np.round(y / line, 9).tolist()) == {0.0, 1.0}  # line rate or nothing
        assert np.array_equal(y, first)  # in lockstep
    assert (first == 0).sum() >= 2  # idle between the two bursts


def test_context_parallelism_takes_its_gpus_from_data_parallelism():
    fig = figure("5.9")
    degrees = [d for d in fig["data"] if d.get("orientation") == "h"]
    gpus = sb.load("llama3-405b").cluster.gpus
    for case in range(2):
        product = np.prod([d["customdata"][case] for d in degrees])
        assert product == gpus == 16384
    cp = next(d for d in degrees if d["name"] == "CP")
    dp = next(d for d in degrees if d["name"] == "DP")
    assert cp["customdata"] == [1, 16] and dp["customdata"] == [128, 8]
    exchange = [d for d in fig["data"] if d.get("xaxis") == "x2"][0]
    assert all(v > 0 for v in exchange["y"])


def test_skew_heat_map_starts_at_zero_and_marks_the_hot_pairs():
    fig = figure("5.7")
    heat, hot, strip = fig["data"]
    z = np.array(heat["z"])
    assert heat["zmin"] == 0 and z.shape == (32, 32)
    off = ~np.eye(32, dtype=bool)
    median = np.median(z[off])
    marked = set(zip(hot["y"], hot["x"]))
    assert marked and marked == {(i, j) for i, j in zip(*np.nonzero((z > 12 * median) & off))}
    assert max(strip["y"]) / min(strip["y"]) > 10  # one pair moves by an order of magnitude between calls
    boundaries = [s for s in fig["layout"]["shapes"] if s["type"] == "line"]
    assert len(boundaries) == 2 * 3  # 4 servers of 8: 3 boundaries each way


def _bars(fig: dict) -> dict[str, dict]:
    """Figure 5.1's bar traces by legend entry."""
    return {d["name"]: d for d in fig["data"] if d["type"] == "bar"}


def test_one_step_labels_every_exchange():
    fig = figure("5.1")
    bars = _bars(fig)
    for key in ("tp", "pp", "reduce", "gather", "fwd", "bwd"):
        assert t("en", f"fig.5.1.kind.{key}") in bars
    tp, fwd = bars[t("en", "fig.5.1.kind.tp")], bars[t("en", "fig.5.1.kind.fwd")]
    # an all-reduce in the middle of each shown layer's forward, and one at its end
    first_layer = min(fwd["base"])
    halves = sorted(b for b in fwd["base"] if b < first_layer + 1e-9 + 2 * max(fwd["x"]))[:2]
    assert any(halves[0] < b < halves[1] for b in tp["base"])
    assert "⋯" in fig["layout"]["annotations"][0]["text"]  # the middle of the step elided
    # PP sends and DP buckets share the NIC's row, each in its own half, so that neither hides the other
    pp, gather = bars[t("en", "fig.5.1.kind.pp")], bars[t("en", "fig.5.1.kind.gather")]
    assert pp["offset"] == 0 and gather["offset"] == -0.4 and pp["width"] == gather["width"] == 0.4


_SIMULATED: dict[tuple, dict] = {}


def _panel_step(ident: str, **controls) -> dict:
    """Figure 5.1 or Animation 5.1 for Panel 5.4's controls (its defaults, with ``controls`` as typed), through the
    job its figures are drawn for (web/panels/p54.py) and the API's door; drawn once per test module."""
    from stepbudget.api import build_figure
    from stepbudget.chapter.panels import full_model
    from stepbudget.web.panels import p54

    from _web import defaults

    v = defaults(p54, **controls)
    job = full_model(v["N"], v["G"], v["B"], v["M"], v["nic"], v["F"])
    key = (ident, job.ref, job.sets)
    if key not in _SIMULATED:
        _SIMULATED[key] = build_figure(ident, "en", job.ref, job.sets)
    return _SIMULATED[key]


def _axis_end(fig: dict) -> tuple[float, str]:
    """The time the x axis ends at, as its last tick says, and where that tick is."""
    axis = fig["layout"]["xaxis"]
    return axis["tickvals"][-1], axis["ticktext"][-1]


@pytest.mark.parametrize("controls", [{}, {"M": "1"}, {"G": "131,072"}], ids=["defaults", "M=1", "G=131072"])
def test_figure_5_1_spans_its_stated_step_at_every_panel_input(controls):
    from stepbudget.views import fmt

    fig = _panel_step("5.1", **controls)
    step = fig["layout"]["meta"]["step_s"]
    x, text = _axis_end(fig)
    assert text == fmt.time("en", step) and f"{fmt.time('en', step)}" in fig["layout"]["title"]["text"]
    assert fig["layout"]["xaxis"]["range"] == [0.0, pytest.approx(x)]  # the axis ends at the step's last tick
    head, tail, end, gap = fig["layout"]["meta"]["axis"]
    assert end == pytest.approx(step)
    drawn_end = max(b + w for d in fig["data"] if d["type"] == "bar" for b, w in zip(d["base"], d["x"]))
    assert drawn_end == pytest.approx(x, rel=1e-6)  # the last bar ends where the axis says the step ends
    shift = tail - head - gap if tail > head else 0.0
    assert drawn_end + shift == pytest.approx(step, rel=1e-6)  # that is the step, in the step's own time
    # no bar drawn inside the elided band or past the axis: only the middle is left out, never the end
    for d in fig["data"]:
        if d["type"] == "bar":
            for b, w in zip(d["base"], d["x"]):
                assert b >= -1e-12 and b + w <= x * (1 + 1e-9)
                assert tail <= head or not (head + 1e-9 < b < head + gap - 1e-9)


def test_figure_5_1_shows_pure_dp_whole_and_the_bubble_of_a_short_pipeline():
    pure = _panel_step("5.1", M="1")
    assert "start to end" in pure["layout"]["title"]["text"] and "shapes" not in pure["layout"]  # nothing elided
    assert t("en", "fig.5.1.kind.allreduce") in _bars(pure)  # DDP: each bucket all-reduced whole
    big = _panel_step("5.1", G="131,072")  # 2 micro-batches on 16 stages: the bubble is most of the step
    bubble = _bars(big)[t("en", "fig.5.1.kind.bubble_sends")]
    assert sum(bubble["x"]) > 0.5 * big["layout"]["meta"]["step_s"]


def _scaling(**controls) -> dict:
    """Figure 5.4 for Panel 5.4's controls, through the job its figure is drawn for."""
    from stepbudget.web.panels import p54

    from _web import defaults

    job = p54._job(defaults(p54, **controls))
    return build("5.4", "en", job.ref, job.sets)


def _trace(fig: dict, key: str, **values) -> dict:
    return next(d for d in fig["data"] if d["name"] == t("en", key, **values))


def test_strong_scaling_draws_the_chapters_formulas_and_their_share_rises_with_the_gpus():
    from stepbudget.chapter import firstorder as fo

    fig = figure("5.4")  # the chapter's job: Panel 5.4's defaults (405B, 16,384 GPUs, 2^24 tokens, M 128, 400G)
    sizes = [8192, 16384, 32768, 65536, 131072]
    compute, comm = _trace(fig, "fig.5.4.formula.compute"), _trace(fig, "fig.5.4.formula.comm")
    assert compute["x"] == comm["x"] == sizes
    plan = derive(sb.load("llama3-405b"))
    first = fo.strong_scaling(plan.counts.params_active, np.array(sizes, float), 2**24, 128, 50e9, 400e12, 0.9, 989e12)
    assert compute["y"] == pytest.approx(first.compute_s.tolist()) and comm["y"] == pytest.approx(first.comm_s.tolist())
    # the chapter's worked numbers (5.3, 5.4): 6.2 s of compute and 0.25 s of exchange at 16,384 GPUs
    assert compute["y"][1] == pytest.approx(6.2, abs=0.05) and comm["y"][1] == pytest.approx(0.25, abs=0.005)
    assert compute["y"][-1] == pytest.approx(compute["y"][0] / 16)  # compute falls as 1/G
    assert max(comm["y"]) / min(comm["y"]) < 1.02  # the exchange stays flat
    for key in ("fig.5.4.formula.share", "fig.5.4.part.comm_share"):  # the communication share shown rises with G
        share = _trace(fig, key)["y"]
        assert all(a < b for a, b in zip(share, share[1:])), key
    assert fig["layout"]["meta"]["gpus"] == 16384 and {s["x0"] for s in fig["layout"]["shapes"]} == {16384}


def test_strong_scaling_says_why_the_full_models_exposed_share_falls():
    fig = figure("5.4")
    exposed = _trace(fig, "fig.5.4.part.exposed_share")["y"]
    assert exposed[-1] < exposed[0]  # the full model's exposed share falls: the note must say why
    note = next(a["text"] for a in fig["layout"]["annotations"] if a.get("name") == "note").replace("<br>", " ")
    bubble = _trace(fig, "fig.5.4.part.bubble_s")["y"]
    assert max(bubble) / min(bubble) < 1.01  # a constant bubble ...
    assert "pipeline bubble stays" in note and "critical path" in note and "latency" in note
    assert "1.17 s" in note  # ... of 1.17 s, named with its value


def test_strong_scaling_titles_the_rate_it_uses():
    fig = figure("5.4")
    title = fig["layout"]["title"]["text"].replace("<br>", " ")
    assert "Llama 3 405B" in title and "llama3-405b" not in title
    assert "400 TFLOP/s" in title and "kernel rate 562 TFLOP/s carried from the measured step" in title
    half = _scaling(nic="200 Gb/s")["layout"]["title"]["text"].replace("<br>", " ")
    assert "989" not in half and "kernel rate 562 TFLOP/s" in half  # the rate used, not the peak


def test_strong_scaling_at_one_gpu_a_group_keeps_five_sizes_and_labels_every_value():
    fig = _scaling(M="1")
    assert _trace(fig, "fig.5.4.formula.compute")["x"] == [8192, 16384, 32768, 65536, 131072]
    assert _trace(fig, "fig.5.4.part.step_s")["x"] == [8192, 16384]  # one 1,024-token sequence a GPU at most
    assert any("no layout at 32,768" in a["text"] for a in fig["layout"]["annotations"])
    y = fig["layout"]["yaxis"]
    values = [v for d in fig["data"] if d.get("yaxis") == "y" for v in d["y"] if v > 0]  # no bubble: none to draw
    assert 10 ** y["range"][1] >= max(values) >= 30  # the pure-DP exchange, about 32 s, under the top tick
    assert max(y["tickvals"]) >= max(values) and min(y["tickvals"]) <= min(values)
    assert any(tick.endswith(" ms") for tick in y["ticktext"]) or min(values) >= 1


def test_measured_points_have_one_legend_entry_per_system():
    fig = figure("5.5")
    shown = [d["name"] for d in fig["data"] if d.get("showlegend", True)]
    systems = [s for s in shown if s not in (t("en", "fig.5.5.measured_key"), t("en", "fig.5.5.predicted_key"))]
    assert sorted(systems) == ["Llama 3", "MegaScale", "Megatron-LM"]
    lines = [d for d in fig["data"] if d["x"] != [None]]
    assert len(lines) > len(systems)  # several series per system, grouped under its entry


def test_fused_kernels_pairs_are_the_layers_times_and_the_model_stays_below_2x():
    from stepbudget.a2a.ratio import moe_layer_times
    from stepbudget.a2a.report import layer_inputs

    fig = figure("5.6")
    table = next(d for d in fig["data"] if d["name"] == t("en", "fig.5.6.table5"))
    assert table["y"] == [1.00, 1.13, 1.22, 1.28]  # MegaScale-MoE Table 5 as published
    li = layer_inputs(sb.load("megascale-moe-352b"))
    lt = moe_layer_times(li.tokens_per_gpu, li.hidden, li.expert_ffn, li.top_k, li.ep, li.nvlink_Bps, li.peak_flops,
                         li.dispatch_bytes, li.swiglu)
    serial, fused = fig["data"][0]["y"], fig["data"][1]["y"]
    # forward and backward: each of the two all-to-alls (half the layer's bytes) beside its GEMM
    assert sum(serial) == pytest.approx(2 * float(lt.comm_s) + 3 * float(lt.compute_s))
    assert all(1 < s / f <= 2 for s, f in zip(serial, fused))  # overlap alone: at most the sum over the max
    base, off = sb.estimate(derive(sb.load("megascale-moe-352b"))), sb.estimate(
        derive(sb.load("megascale-moe-352b", ["overlap.ep=0"])))
    model = next(d for d in fig["data"] if d.get("marker", {}).get("color") == fig["data"][3]["marker"]["color"])
    assert model["y"][1] == pytest.approx(1.13 * float(off.step_s) / float(base.step_s))


def test_animation_5_1_plays_figure_5_1s_job_with_only_the_nic_halved():
    fig, step = figure("anim-5.1"), figure("5.1")
    meta = fig["layout"]["meta"]
    assert meta["steps_s"]["full"] == pytest.approx(step["layout"]["meta"]["step_s"])  # the same job, the same step
    assert meta["nic_bits"] == {"full": 400e9, "half": 200e9}  # the NIC halved ...
    assert meta["nvlink_bits"]["half"] == meta["nvlink_bits"]["full"]  # ... and NVLink not
    # at half the NIC's rate the buckets end later past their deadlines, and the step grows by that
    assert meta["steps_s"]["half"] > meta["steps_s"]["full"]
    assert meta["late_s"]["half"] > 2 * meta["late_s"]["full"] > 0
    assert meta["misses"]["half"] >= meta["misses"]["full"]
    groups = {f["group"] for f in fig["frames"]}
    assert groups == {"full", "half"}
    miss = next(i for i, d in enumerate(fig["data"]) if d.get("name") == t("en", "fig.anim-5.1.miss"))
    last = {g: [f for f in fig["frames"] if f["group"] == g][-1] for g in groups}
    assert len(last["half"]["data"][miss]["x"]) == meta["misses"]["half"]
    labels = [b["label"] for b in fig["layout"]["updatemenus"][0]["buttons"]]
    assert t("en", "fig.anim-5.1.play_half") in labels
    # the slider's labels are empty and it sits between the axis title and the legend
    assert all(s["label"] == "" for s in fig["layout"]["sliders"][0]["steps"])
    assert fig["layout"]["legend"]["y"] < fig["layout"]["sliders"][0]["y"] < 0


def test_animation_5_1_follows_figure_5_1_at_panel_5_4s_inputs():
    big = _panel_step("anim-5.1", G="131,072")
    assert big["layout"]["meta"]["steps_s"]["full"] == pytest.approx(_panel_step("5.1", G="131,072")["layout"]["meta"]["step_s"])


def test_the_counter_window_of_animation_5_2_is_an_option(tmp_path):
    out = tmp_path / "zoom.html"
    result = CliRunner().invoke(app, ["figure", "anim-5.2", "--window", "40s", "--out", str(out)])
    assert result.exit_code == 0, result.output
    html = out.read_text().replace(" ", "")
    assert re.search(r'"range":\[0(\.0)?,40(\.0)?\]', html)  # the last frame spans the 40 s window


def test_animation_5_2_zooms_from_one_burst_out_to_the_whole_counter_window():
    fig = build("anim-5.2", "en", None, (), window_s=20.0)
    meta = fig["layout"]["meta"]
    burst, step = meta["burst_s"], meta["step_s"]
    b = sb.estimate(derive(sb.load("llama3-405b")))
    assert step == pytest.approx(float(b.step_s)) and 0 < burst < 0.2 * step
    ranges = [f["layout"]["xaxis"]["range"] for f in fig["frames"]]
    widths = [r[1] - r[0] for r in ranges]
    assert widths == sorted(widths)  # only ever zooming out
    first_burst = (step - burst, step)  # the first step's burst ends it
    assert widths[0] <= 3 * burst * (1 + 1e-9)  # one burst at millisecond resolution ...
    assert ranges[0][0] <= first_burst[0] and first_burst[1] <= ranges[0][1]  # ... the whole of it in view
    assert [0.0, pytest.approx(2 * step)] in ranges  # then two steps ...
    assert ranges[-1] == [0.0, pytest.approx(20.0)]  # ... then the whole counter window
    counter = fig["data"][1]
    nic = np.array(fig["data"][0]["y"])
    assert 0 < counter["y"][0] < nic.max()  # the flat average is far below the bursts
    said = [f["data"][1]["text"][0] for f in fig["frames"]]
    assert said[0].startswith("One burst") and said[-1].startswith("One 20 s counter window")
    titles = {f.get("layout", {}).get("title", {}).get("text") for f in fig["frames"]}
    assert titles == {None}  # the frames keep the title: what each shows is data, which a page keeps


def test_figure_5_8_and_animation_5_2_draw_a_given_step_and_burst():
    fig = build("5.8", "en", "llama3-405b", (), step_s=0.2, burst_s=0.05)
    y = np.array(fig["data"][0]["y"])
    x = np.array(fig["data"][0]["x"])
    on = np.diff(x)[y[:-1] > 0]
    assert on.tolist() == pytest.approx([0.05, 0.05]) and x[-1] == pytest.approx(0.4)  # two 200 ms steps, 50 ms bursts
    assert "25.0% duty cycle" in fig["layout"]["title"]["text"].replace("<br>", " ")
    anim = build("anim-5.2", "en", "llama3-405b", (), window_s=15.0, step_s=0.2, burst_s=0.1)
    first = anim["frames"][0]["layout"]["xaxis"]["range"]
    assert first[1] - first[0] <= 3 * 0.1 + 1e-9  # a burst's length either side of the first one
    assert "a flat 200 Gb/s" in anim["frames"][-1]["data"][1]["text"][0]  # 50 % of 400 Gb/s, read as an average


def test_figures_name_jobs_in_words_not_preset_ids():
    for ident in ("5.1", "5.2", "5.4", "5.6", "5.7", "5.8", "anim-5.2"):
        fig = figure(ident)
        said = [fig["layout"]["title"]["text"], *(d.get("name") or "" for d in fig["data"])]
        assert not any(re.search(r"llama3-|hpn-|megascale-|deepseek-v", x) for x in said), (ident, said)
    points = build("5.2", "en", "llama3-405b-puredp", ["cluster.nic_Bps=200Gb/s"])
    assert any(d["name"].startswith("Llama 3 405B on 16,384 GPUs, DP 16,384") for d in points["data"])


def test_measured_points_read_their_gpu_counts_as_numbers():
    ticks = figure("5.5")["layout"]["xaxis"]
    assert ticks["ticktext"][:3] == ["256", "512", "1,024"] and ticks["ticktext"][-1] == "16,384"
    assert ticks["tickvals"] == [2 ** k for k in range(8, 15)]


def test_context_rows_keep_their_labels_whole():
    assert figure("5.9")["layout"]["yaxis"]["automargin"] is True


@pytest.mark.parametrize("ident", list(FIGURES))
def test_traditional_chinese_changes_the_title_and_axes(ident):
    en, zh = figure(ident), figure(ident, "zh-Hant")
    assert en["layout"]["title"]["text"] != zh["layout"]["title"]["text"]
    assert re.search(r"[\u4e00-\u9fff]", zh["layout"]["title"]["text"])
    pairs = list(zip(_texts(en), _texts(zh)))
    assert len(_texts(en)) == len(_texts(zh)) and pairs
    for (where, a), (_, b) in pairs:  # every text a reader sees: titles, axes, legend, hover, notes, buttons
        if re.search(r"\b[a-z]{4,}\b", _words(a)):  # English words, not only names, units and numbers
            assert a != b, f"{ident} {where}: {a!r} is the same in Traditional Chinese"


_NAMES = re.compile(r"%\{[^}]*\}|<[^>]+>|\b(all-reduce|reduce-scatter|all-gather|all-to-all|dispatch|combine|kernel|token|"
                    r"bucket|micro-batch|chunk|roofline|pass|megascale[\w.-]*|llama[\w.-]*|hpn[\w.-]*|deepseek[\w.-]*|"
                    r"internal[\w-]*|grad|tokens)\b", re.I)


def _words(text: str) -> str:
    """A text without what stays as it is in both languages: plotly's %{...}, tags, names of things."""
    return _NAMES.sub("", text)


def _texts(fig: dict) -> list[tuple[str, str]]:
    """(where, text) of every text of a figure a reader sees, in a fixed order."""
    out = []
    layout = fig["layout"]
    frames = fig.get("frames", [])
    for key, value in sorted(layout.items()):
        if key.startswith(("xaxis", "yaxis")) and value.get("title"):
            out.append((key, value["title"]["text"]))
    out += [(f"note {i}", a["text"]) for i, a in enumerate(layout.get("annotations", []))]
    out += [(f"button {i}", b["label"]) for m in layout.get("updatemenus", []) for i, b in enumerate(m["buttons"])]
    for i, d in enumerate(fig["data"]):
        out += [(f"trace {i} {k}", d[k]) for k in ("name", "hovertemplate") if isinstance(d.get(k), str)]
        out += [(f"trace {i} text", x) for x in d.get("text") or [] if isinstance(x, str)]
        out += [(f"trace {i} hover", x) for x in _flat(d.get("customdata")) if isinstance(x, str)]
    out += [(f"frame {f['name']} title", f["layout"]["title"]["text"]) for f in frames if "title" in f.get("layout", {})]
    for f in frames[-1:]:
        for i, d in enumerate(f["data"]):
            out += [(f"last frame trace {i} hover", x) for x in _flat(d.get("customdata")) if isinstance(x, str)]
    return out


def _flat(value) -> list:
    if isinstance(value, (list, tuple)):
        return [y for x in value for y in _flat(x)]
    return [] if value is None else [value]


def test_figure_list_names_every_figure_once():
    result = CliRunner().invoke(app, ["figure", "--list"])
    assert result.exit_code == 0
    lines = result.output.strip().splitlines()
    assert [line.split()[0] for line in lines] == list(FIGURES)


@pytest.mark.parametrize("args, names", [
    (["5.10", "--out", "x.png"], "ID"),
    (["5.3", "--out", "x.pdf"], "--out"),
    (["5.3"], "--out"),
    (["5.6", "llama3-405b", "--out", "x.png"], "model.moe"),
    (["5.3", "--lang", "fr", "--out", "x.png"], "--lang"),
    (["5.3", "--set", "cluster.nic_Bps=fast", "--out", "x.png"], "cluster.nic_Bps"),
    (["5.3", "--window", "15s", "--out", "x.png"], "--window"),
    (["anim-5.2", "--window", "-3s", "--out", "x.png"], "--window"),
    (["anim-5.2", "--window", "soon", "--out", "x.png"], "--window"),
])
def test_bad_figure_requests_are_one_line_and_exit_2(args, names, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["figure", *args])
    assert result.exit_code == 2
    err = result.stderr.strip()
    assert len(err.splitlines()) == 1 and names in err and "Traceback" not in result.output
    assert not list(tmp_path.iterdir())
