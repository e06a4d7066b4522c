"""The commands' --plot figures: each is one plotly dict (read here against the result it draws), written as
HTML, PNG or SVG by render.write, the images by plotly's own static export in a headless Chromium (one browser for
the whole test process, as for a command); what the images show is read back from the written SVG."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from stepbudget import api
from stepbudget.inputs.scenario import ScenarioError
from stepbudget.sim.graph import TaskKind
from stepbudget.views import render
from stepbudget.views.moe import heatmap, heatmap_plot
from stepbudget.views.simulation import _COLORS, step_figure, step_plot
from stepbudget.views.wire import wire_dict, wire_figure, wire_plot


@pytest.fixture(scope="module")
def step():
    return api.simulate("llama3-405b", link_rate=0.5).value  # the README's `simulate --plot` example


@pytest.fixture(scope="module")
def wire():
    return api.nic("llama3-405b").value


@pytest.fixture(scope="module")
def moe():  # the slowest setup here (about 20 s on the 2-core box): computed once, for the figure and its files
    return api.moe("deepseek-v3", skew="zipf:0.8", servers=4, gpus_per_server=8).value


def _title(axis: dict) -> str:
    return axis["title"]["text"]


# --- the simulated step ------------------------------------------------------------------------------------


def test_the_step_draws_every_compute_and_transfer_task_once_from_start_to_end(step):
    g, tl = step.program.graph, step.timeline
    drawn = [t for t in range(g.num_tasks) if g.kind[t] in (TaskKind.COMPUTE, TaskKind.TRANSFER)]
    fig = step_plot(step)
    bars = sorted((b, x) for tr in fig["data"] for b, x in zip(tr["base"], tr["x"]))
    expected = sorted((float(tl.start_s[t]), float(tl.end_s[t] - tl.start_s[t])) for t in drawn)
    assert len(bars) == len(drawn) == 8432
    assert bars == expected
    assert max(b + x for b, x in bars) <= step.step_s  # the fixed cost per step follows the drawn timeline


def test_the_step_has_one_trace_per_role_or_dimension_in_its_colour(step):
    fig = step_plot(step)
    names = [tr["name"] for tr in fig["data"]]
    assert names == ["fwd", "bwd", "optimizer", "tp", "pp", "dp"]  # _COLORS' order; no CP, EP or bubble here
    assert all(tr["marker"]["color"] == _COLORS[tr["name"]] for tr in fig["data"])
    assert all(tr["type"] == "bar" and tr["orientation"] == "h" for tr in fig["data"])
    counts = {tr["name"]: len(tr["x"]) for tr in fig["data"]}
    assert counts["fwd"] == counts["bwd"] == counts["tp"]  # every pass on 16 stages, a TP exchange after each
    assert counts["optimizer"] == 16  # one optimizer step per pipeline stage


def test_the_step_rows_are_the_stages_compute_then_their_links_top_down(step):
    fig = step_plot(step)
    rows = fig["layout"]["yaxis"]["categoryarray"]
    assert rows[:16] == [f"stage {s} compute" for s in range(16)]
    assert rows[16:18] == ["stage 0 NIC", "stage 0 TP (NVLink)"]
    assert len(rows) == 48 and len(set(rows)) == 48
    assert {y for tr in fig["data"] for y in tr["y"]} == set(rows)  # no empty row, no bar off the rows
    assert fig["layout"]["yaxis"]["autorange"] == "reversed"  # stage 0 at the top
    assert fig["layout"]["height"] == 28 * 48 + 150


def test_the_step_title_gives_the_step_the_budget_and_the_misses(step):
    fig = step_plot(step)
    assert _title(fig["layout"]) == (f"llama3-405b: one simulated step, {step.step_s:.3f} s (budget "
                                     f"{step.analytical_step_s:.3f} s), {len(step.deadline_misses)} deadline misses")
    assert _title(fig["layout"]["xaxis"]) == "seconds"


# --- the wire ---------------------------------------------------------------------------------------------


def test_the_wire_series_is_the_json_series_in_gigabits(wire):
    fig = wire_plot(wire)
    rate = fig["data"][0]
    series = wire_dict(wire)["series"]
    assert rate["x"] == series["t_s"]
    assert rate["y"] == pytest.approx([r * 8 / 1e9 for r in series["rate_Bps"]], rel=1e-15)
    assert rate["line"]["shape"] == "hv"  # the rate holds until the next point: bursts, then idle


def test_the_wire_lines_are_the_counter_and_the_line_rate_the_bursts_reach(wire):
    fig = wire_plot(wire)
    rate, counter, line = fig["data"]
    end = float(wire.t[-1])
    assert counter["x"] == line["x"] == [0.0, end] == fig["layout"]["xaxis"]["range"]
    assert counter["y"] == [float(wire.view.counter_Bps) * 8 / 1e9] * 2
    assert line["y"] == [400.0, 400.0] == [max(rate["y"])] * 2  # 400 Gb/s NICs, each burst at line rate
    x, y = np.array(rate["x"]), np.array(rate["y"])
    # the area under the bursts over the time is the average rate, which a long counter window reads
    assert np.sum(y[:-1] * np.diff(x)) / end == pytest.approx(counter["y"][0], rel=1e-12)
    assert counter["name"] == "what a 15 s counter reads"
    assert _title(fig["layout"]) == f"llama3-405b: one NIC, duty cycle {float(wire.view.duty_cycle):.1%}"
    assert (_title(fig["layout"]["xaxis"]), _title(fig["layout"]["yaxis"])) == ("seconds", "Gb/s")


# --- the MoE heat map --------------------------------------------------------------------------------------


def test_the_heat_map_is_the_reports_matrix_in_megabytes(moe):
    fig = heatmap_plot(moe)
    (cells,) = fig["data"]
    z = np.array(cells["z"])
    assert z.shape == (32, 32) == moe.matrix.shape
    assert np.array_equal(z, moe.matrix / 1e6)
    assert cells["colorscale"] == "Magma" and cells["colorbar"]["title"]["text"] == "MB per layer call"
    assert fig["layout"]["yaxis"]["autorange"] == "reversed"  # source GPU 0 in the top row
    assert (_title(fig["layout"]["xaxis"]), _title(fig["layout"]["yaxis"])) == ("destination GPU", "source GPU")
    skew = f"{moe.skew.kind} {moe.skew.exponent:g}"
    assert _title(fig["layout"]).startswith(f"deepseek-v3: dispatch, skew {skew} (pair max / median ")


def test_the_heat_map_draws_a_line_between_each_two_servers_both_ways(moe):
    shapes = heatmap_plot(moe)["layout"]["shapes"]
    across = sorted(s["x0"] for s in shapes if s["xref"] == "x")
    down = sorted(s["y0"] for s in shapes if s["yref"] == "y")
    assert across == down == [7.5, 15.5, 23.5]  # 4 servers of 8 GPUs: between cells 7|8, 15|16, 23|24
    assert all(s["type"] == "line" and s["line"]["color"] == "white" for s in shapes)


# --- writing ------------------------------------------------------------------------------------------------
# The first PNG or SVG of the test process starts its browser (about 3 s); every later one reuses it.


def _writers(step, wire, moe):
    return [(step_figure, step, step_plot(step)), (wire_figure, wire, wire_plot(wire)),
            (heatmap, moe, heatmap_plot(moe))]


def _png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's header (its IHDR chunk)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def _texts(svg: bytes, kind: str) -> list[str]:
    """The text of each SVG element of class ``kind`` (plotly's: gtitle, xtitle, ytitle, xtick, ytick, legendtext,
    cbtitle), its lines joined."""
    return ["".join(el.itertext()) for el in ET.fromstring(svg).iter() if kind in (el.get("class") or "").split()]


@pytest.mark.parametrize("suffix", [".png", ".svg", ".html"])
def test_each_figure_is_written_whole_in_each_format(suffix, step, wire, moe, tmp_path):
    # up to 5 s for the first format of a process: its browser starts (3 s), then a step's 8,432 bars (1.5 s)
    for write, result, fig in _writers(step, wire, moe):
        folder = tmp_path / write.__name__
        folder.mkdir()
        path = folder / f"plot{suffix}"
        write(result, path)
        assert [p.name for p in folder.iterdir()] == [path.name]  # no temporary file left beside it
        data = path.read_bytes()
        size = (fig["layout"]["width"], fig["layout"]["height"])
        title = fig["layout"]["title"]["text"]
        if suffix == ".png":
            assert _png_size(data) == size  # one image pixel a layout pixel
        elif suffix == ".svg":
            assert data.startswith(b'<?xml version="1.0" encoding="UTF-8"') and data.rstrip().endswith(b"</svg>")
            root = ET.fromstring(data)  # well-formed, a file of its own
            assert (int(root.get("width")), int(root.get("height"))) == size
            assert _texts(data, "gtitle") == [title.replace("<br>", "")]  # a <br> breaks the title into lines
        else:
            assert b"Plotly.newPlot" in data
            assert title.replace("/", "\\u002f").encode() in data  # plotly's JSON writes a / as \u002f


def test_an_image_shows_the_axis_titles_legend_and_colour_bar_of_its_figure(step, wire, moe, tmp_path):
    # about 3 s, most of it the step's 8,432 bars; 3 s more where it is the process's first image
    drawn = {}
    for write, result, fig in _writers(step, wire, moe):
        write(result, tmp_path / f"{write.__name__}.svg")
        drawn[write.__name__] = (tmp_path / f"{write.__name__}.svg").read_bytes()
    assert _texts(drawn["step_figure"], "legendtext") == ["fwd", "bwd", "optimizer", "tp", "pp", "dp"]
    assert _texts(drawn["step_figure"], "xtitle") == ["seconds"]
    assert "stage 0 compute" in _texts(drawn["step_figure"], "ytick")  # the rows' names on their axis
    wire_fig = wire_plot(wire)
    assert _texts(drawn["wire_figure"], "legendtext") == [tr["name"] for tr in wire_fig["data"]]
    assert (_texts(drawn["wire_figure"], "xtitle"), _texts(drawn["wire_figure"], "ytitle")) == (["seconds"], ["Gb/s"])
    assert _texts(drawn["heatmap"], "cbtitle") == ["MB per layer call"]  # the colour bar, with its title
    assert (_texts(drawn["heatmap"], "xtitle"), _texts(drawn["heatmap"], "ytitle")) == (["destination GPU"],
                                                                                         ["source GPU"])
    assert b'class="hm"' in drawn["heatmap"]  # the matrix drawn as a heat map image


def test_a_missing_folder_is_a_one_line_error_naming_plot(step, wire, moe, tmp_path):
    for (write, result, _), suffix in zip(_writers(step, wire, moe), (".png", ".svg", ".html")):
        path = tmp_path / "no such folder" / f"plot{suffix}"
        with pytest.raises(ScenarioError) as e:
            write(result, path)
        message = str(e.value)
        assert message.startswith(f"--plot: cannot write {str(path)!r}") and "\n" not in message
        assert not path.parent.exists()


def _animation() -> dict:
    """Two frames, play buttons and a slider with the margin made for them; the still is the frame "end"."""
    frames = [{"name": name, "data": [{"x": [x], "y": [y]}], "layout": {"title": {"text": name}}}
              for name, x, y in (("start", 0, 0), ("end", 1, 2))]
    steps = [{"method": "animate", "label": f["name"], "args": [[f["name"]]]} for f in frames]
    return {"data": [{"type": "scatter", "x": [0], "y": [0], "mode": "markers", "name": "point"}],
            "layout": {"title": {"text": "start"}, "width": 600, "height": 400, "margin": {"t": 130},
                       "meta": {"still": "end"}, "sliders": [{"steps": steps}],
                       "updatemenus": [{"type": "buttons", "buttons": [{"label": "Play", "method": "animate",
                                                                        "args": [None]}]}]},
            "frames": frames}


def test_an_animation_is_written_at_its_still_without_its_buttons(tmp_path):
    # under a second, or 3-6 s more where it is the process's first image (the shared browser starts)
    anim = _animation()
    render.write(anim, tmp_path / "a.svg")
    render.write(anim, tmp_path / "a.png")
    svg = (tmp_path / "a.svg").read_bytes()
    assert _texts(svg, "gtitle") == ["end"]  # the still's frame, applied over the first
    assert b"updatemenu-button" not in svg and b"slider-container" not in svg  # a still has nothing to play
    assert _texts(svg, "ytick") == ["1", "1.5", "2", "2.5", "3"]  # about the still's point (1, 2), not (0, 0)
    plot = next(el for el in ET.fromstring(svg).iter() if el.get("class") == "bg")
    assert float(plot.get("y")) < 130  # the plot's top: it takes the room the buttons had
    assert _png_size((tmp_path / "a.png").read_bytes()) == (600, 400)
    assert anim["layout"]["title"]["text"] == "start" and "margin" in anim["layout"]  # the figure is untouched


# --- the browser ------------------------------------------------------------------------------------------


@pytest.fixture
def fresh_browser(monkeypatch):
    """A browser of this test's own in place of the process's shared one, so that its start can be watched."""
    browser = render._Browser()
    monkeypatch.setattr(render, "_BROWSER", browser)
    yield browser
    browser.close()


def test_without_a_browser_a_png_or_svg_is_one_line_naming_the_option_and_nothing_changes(fresh_browser, monkeypatch,
                                                                                         tmp_path):
    monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "no-chromium"))  # choreographer looks here first
    with pytest.raises(ScenarioError) as early:
        render.start("--plot")  # a command learns it before its work
    for suffix in (".png", ".svg"):
        path = tmp_path / f"plot{suffix}"
        path.write_bytes(b"a good file")
        with pytest.raises(ScenarioError) as e:
            render.write(_animation(), path, "--plot")
        message = str(e.value)
        assert message == str(early.value) and "\n" not in message
        assert message.startswith("--plot: PNG and SVG are drawn by Chrome or Chromium, and none was found")
        assert "install chromium" in message and "write .html" in message
        assert path.read_bytes() == b"a good file"  # written whole or not at all
    render.write(_animation(), tmp_path / "plot.html", "--plot")  # HTML needs no browser
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plot.html", "plot.png", "plot.svg"]


def test_without_kaleido_a_png_or_svg_says_what_to_install(fresh_browser, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "kaleido", None)  # as when it was never installed
    with pytest.raises(ScenarioError) as e:
        render.write(_animation(), tmp_path / "plot.svg", "--plot")
    assert str(e.value).startswith("--plot: writing PNG or SVG needs kaleido, which is not installed; pip install "
                                   "'stepbudget[plot]'")
    assert not list(tmp_path.iterdir())


def test_the_command_without_a_browser_exits_2_with_one_line_and_no_traceback(fresh_browser, monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from stepbudget.cli import app

    monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "no-chromium"))
    out = tmp_path / "roofline.png"
    r = CliRunner().invoke(app, ["figure", "5.2", "--out", str(out)])
    assert r.exit_code == 2, r.output
    assert r.output.startswith("stepbudget: error: --out: PNG and SVG are drawn by Chrome or Chromium")
    assert r.output.count("\n") == 1 and "Traceback" not in r.output
    assert not list(tmp_path.iterdir())


def test_one_browser_draws_every_image_with_nothing_fetched(fresh_browser, monkeypatch, tmp_path):
    # 3-6 s: a browser of its own starts, to be watched, and draws three images
    import kaleido
    import plotly

    made = []

    class Watched(kaleido.Kaleido):
        def __init__(self, **options):
            made.append(options)
            super().__init__(**options)

    monkeypatch.setattr(kaleido, "Kaleido", Watched)
    # every http(s) request of the browser goes to a closed port: a script fetched from a CDN would fail
    monkeypatch.setenv("CHOREO_PROXY_SERVER", "http://127.0.0.1:9")
    figure = {"data": [{"type": "scatter", "x": [0, 1], "y": [0, 1]}],
              "layout": {"title": {"text": "$E = mc^2$"}, "width": 400, "height": 300}}
    render.start()
    for suffix in (".svg", ".png", ".svg"):
        render.write(figure, tmp_path / f"f{suffix}")
    assert len(made) == 1  # one browser for all three, started ahead of them
    assert made[0]["mathjax"] is False  # no MathJax from its CDN: LaTeX stays text
    assert _texts((tmp_path / "f.svg").read_bytes(), "gtitle") == ["$E = mc^2$"]
    assert made[0]["plotlyjs"] == Path(plotly.__file__).parent / "package_data" / "plotly.min.js"  # not the CDN's
    assert made[0]["plotlyjs"].is_file()


# --- the MoE heat map's edge case --------------------------------------------------------------------------


def test_a_matrix_whose_median_pair_is_zero_says_so_and_no_inf(moe):
    from stepbudget.a2a.report import moe_report
    from stepbudget.views.moe import alltoall_table, verdict

    one = np.zeros((16, 16))
    one[0, 9] = 1e6  # one pair sends, the median pair sends nothing
    r = moe_report(moe.scenario, matrix=one)
    assert _title(heatmap_plot(r)["layout"]).endswith("skew measured (median pair is 0)")
    shown = " ".join([*verdict(r), str(alltoall_table(r).title), *map(str, alltoall_table(r).columns[1]._cells)])
    assert "inf" not in shown and "1 one-to-one stage," in " ".join(map(str, alltoall_table(r).columns[2]._cells))
