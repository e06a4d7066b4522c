"""The commands' --plot figures: each is one plotly dict (read here against the result it draws), written as
HTML, PNG or SVG by the chapter's render.write; and the converter's parts these figures use."""

from __future__ import annotations

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
def moe():
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


# --- writing -----------------------------------------------------------------------------------------------


def _writers(step, wire, moe):
    return [(step_figure, step, step_plot(step)), (wire_figure, wire, wire_plot(wire)),
            (heatmap, moe, heatmap_plot(moe))]


@pytest.mark.parametrize("suffix", [".png", ".svg", ".html"])
def test_each_figure_is_written_whole_in_each_format(suffix, step, wire, moe, tmp_path):
    for write, result, fig in _writers(step, wire, moe):
        folder = tmp_path / write.__name__
        folder.mkdir()
        path = folder / f"plot{suffix}"
        write(result, path)
        assert [p.name for p in folder.iterdir()] == [path.name]  # no temporary file left beside it
        data = path.read_bytes()
        if suffix == ".png":
            assert data[:8] == b"\x89PNG\r\n\x1a\n"
            width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
            assert (width, height) == (fig["layout"]["width"], fig["layout"]["height"])  # 100 px an inch
        elif suffix == ".svg":
            assert b"<svg" in data[:1000] and data.rstrip().endswith(b"</svg>")
        else:
            title = fig["layout"]["title"]["text"]
            assert b"Plotly.newPlot" in data
            assert title.replace("/", "\\u002f").encode() in data  # plotly's JSON writes a / as \u002f


def test_a_missing_folder_is_a_one_line_error_naming_plot(step, wire, moe, tmp_path):
    for (write, result, _), suffix in zip(_writers(step, wire, moe), (".png", ".svg", ".html")):
        path = tmp_path / "no such folder" / f"plot{suffix}"
        with pytest.raises(ScenarioError) as e:
            write(result, path)
        message = str(e.value)
        assert message.startswith(f"--plot: cannot write {str(path)!r}") and "\n" not in message
        assert not path.parent.exists()


# --- the converter's parts these figures use ---------------------------------------------------------------


@pytest.mark.parametrize(("legend", "place"), [
    ({}, "best"), ({"orientation": "v"}, "best"),
    ({"x": 1, "y": 0, "xanchor": "right", "yanchor": "bottom"}, "lower right"),
    ({"xanchor": "left", "yanchor": "middle"}, "center left"), ({"xanchor": "center", "yanchor": "middle"}, "center"),
    ({"yanchor": "top"}, "upper left"), ({"xanchor": "center"}, "upper center"),
])
def test_a_legend_is_placed_by_its_anchors(legend, place):
    assert render._legend_place(legend) == place


def test_margins_in_pixels_place_the_plot_and_figures_without_keep_their_fractions():
    area = render._area({"width": 1000, "height": 500, "margin": {"l": 100, "r": 50, "t": 40, "b": 60}}, False, 0)
    assert (area.left, area.bottom) == (0.1, 0.12)
    assert (area.width, area.height) == pytest.approx((0.85, 0.8))
    assert render._area({}, False, 0) == render._Area(0.12, 0.1, 0.85, 0.76)
    assert render._area({}, True, 0.05) == render._Area(0.12, 0.25, 0.85, pytest.approx(0.58))
    partial = render._area({"height": 1000, "margin": {"t": 50}}, False, 0)
    assert (partial.left, partial.bottom, partial.bottom + partial.height) == (0.12, 0.1, 0.95)


def test_a_still_drops_the_margin_its_buttons_needed():
    anim = {"data": [{"type": "scatter", "x": [0], "y": [0]}],
            "layout": {"margin": {"t": 130}, "meta": {"still": "end"}, "title": {"text": "a"}},
            "frames": [{"name": "end", "data": [{"x": [1], "y": [2]}]}]}
    still = render._still(anim)
    assert "margin" not in still["layout"] and still["data"][0]["x"] == [1]
    assert render._still({"data": [], "layout": {"margin": {"t": 5}}})["layout"]["margin"] == {"t": 5}


def test_a_named_colour_scale_is_the_colour_map_of_that_name():
    assert render._colormap("Magma") == "magma"
    assert render._colormap("Viridis") == "viridis"
    assert render._colormap(None) == render._colormap([[0, "red"], [1, "blue"]]) == "viridis"
    assert render._colormap("NoSuchScale") == "viridis"


def test_a_heat_map_has_its_colour_bar_title_and_lies_over_the_grid():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    render._heatmap(ax, {"z": [[0, 1], [2, 3]], "colorscale": "Magma", "colorbar": {"title": {"text": "MB"}}})
    (image,) = ax.images
    assert image.get_cmap().name == "magma" and image.get_zorder() > 1.5  # gridlines are at 1.5
    assert fig.axes[1].get_ylabel() == "MB"
    plt.close(fig)


def test_only_bars_thinner_than_a_pixel_are_drawn_unsnapped():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 2), dpi=100)  # about 775 px for 10 s: a 1 ms bar is under a pixel
    bars = ax.barh([0, 0, 1], [0.001, 2.0, 0.5], 0.8, [1.0, 3.0, 6.0])
    ax.set_xlim(0, 10)
    render._unsnap_thin_bars(ax)
    assert [b.get_snap() for b in bars] == [False, None, None]
    plt.close(fig)


def test_a_matrix_whose_median_pair_is_zero_says_so_and_no_inf(moe):
    from stepbudget.a2a.report import moe_report
    from stepbudget.views.moe import alltoall_table, verdict

    one = np.zeros((16, 16))
    one[0, 9] = 1e6  # one pair sends, the median pair sends nothing
    r = moe_report(moe.scenario, matrix=one)
    assert _title(heatmap_plot(r)["layout"]).endswith("skew measured (median pair is 0)")
    shown = " ".join([*verdict(r), str(alltoall_table(r).title), *map(str, alltoall_table(r).columns[1]._cells)])
    assert "inf" not in shown and "1 one-to-one stage," in " ".join(map(str, alltoall_table(r).columns[2]._cells))
