"""The converter's parts the commands' --plot figures use: margins, legend places, colour scales and colour
bars, thin bars, an animation's still."""

from __future__ import annotations

import pytest

from stepbudget.views.chapter import render


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
