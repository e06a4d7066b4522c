"""The chapter's figures in a real browser: in the panels, following their controls, and Animation 5.1 played,
in the app and as a file that opens offline."""

from __future__ import annotations

import re
import subprocess

from playwright.sync_api import expect

from stepbudget.chapter.figures import FIGURES
from stepbudget.views.i18n import t
from stepbudget.web.figures import graph_id

from _web import load, stepbudget_command, type_in

STATE = """(id) => { const gd = document.querySelector('#' + id + ' .js-plotly-plot');
  if (!gd || !gd.data) return null;
  const miss = gd.data.findIndex(d => d.marker && d.marker.symbol === 'x');
  return {title: gd.layout.title ? gd.layout.title.text : '', traces: gd.data.length,
          misses: miss < 0 ? 0 : (gd.data[miss].x || []).length, active: gd._fullLayout.sliders.length ?
          gd._fullLayout.sliders[0].active : null, meta: gd.layout.meta || null,
          range: gd._fullLayout.xaxis.range}; }"""


def state(page, ident: str) -> dict:
    return page.evaluate(STATE, graph_id(ident))


def drawn(page, ident: str) -> None:
    page.wait_for_selector(f"#{graph_id(ident)} .main-svg", timeout=60_000)
    page.wait_for_function(f"() => {{ const gd = document.querySelector('#{graph_id(ident)} .js-plotly-plot');"
                           " return gd && gd.data && gd.data.length > 0; }", timeout=60_000)


def play(page, ident: str, button: int, frames_to: int) -> dict:
    """Press the figure's ``button``-th play button and wait for the slider to reach frame ``frames_to``."""
    page.locator(f"#{graph_id(ident)} .updatemenu-button").nth(button).click()
    page.wait_for_function(f"() => document.querySelector('#{graph_id(ident)} .js-plotly-plot')"
                           f"._fullLayout.sliders[0].active === {frames_to}", timeout=30_000)
    return state(page, ident)


def test_every_figure_is_drawn_in_its_panel_in_both_languages(watched, server):
    page = watched
    for lang in ("en", "zh-Hant"):
        load(page, server, f"?lang={lang}")
        for ident in FIGURES:
            drawn(page, ident)
            title = state(page, ident)["title"]
            assert re.match(r"(Figure|Animation) 5\.\d · " if lang == "en" else r"(圖|動畫) 5\.\d · ", title), title
            expect(page.locator(f"#{graph_id(ident)}-box figcaption")).to_have_text(t(lang, f"fig.list.{ident}"))


def test_animation_5_1_plays_figure_5_1s_step_and_half_the_nic_finishes_later(watched, server):
    page = watched
    load(page, server)
    drawn(page, "anim-5.1")
    full = state(page, "anim-5.1")
    assert full["active"] == 39 and "full rate" in full["title"]  # it opens on the whole step at the full rate
    half = play(page, "anim-5.1", 1, 79)  # ▶ NIC at half rate: the same step replayed
    assert "half rate" in half["title"] and half["misses"] == half["meta"]["misses"]["half"]
    step = lambda s: float(re.search(r"of a ([\d.]+) s step", s["title"].replace("<br>", " ")).group(1))  # noqa: E731
    assert step(half) > step(full) == round(full["meta"]["steps_s"]["full"], 2)
    assert full["range"] == half["range"]  # one axis for both rates: the step's growth is seen


def test_figures_follow_their_panels_controls(watched, server):
    page = watched
    load(page, server)
    drawn(page, "5.8")
    drawn(page, "anim-5.2")
    assert "400 Gb/s" in state(page, "anim-5.2")["title"]
    type_in(page, "p56-rate", "200 Gb/s")  # the NIC's line rate: bursts at 200 Gb/s, twice as long
    page.wait_for_function(f"() => document.querySelector('#{graph_id('anim-5.2')} .js-plotly-plot')"
                           ".layout.title.text.includes('200 Gb/s')", timeout=30_000)
    type_in(page, "p56-window", "30 s")
    page.wait_for_function(f"() => document.querySelector('#{graph_id('anim-5.2')} .js-plotly-plot')"
                           ".data[1].name.includes('30 s')", timeout=30_000)
    first = page.evaluate(f"() => document.querySelector('#{graph_id('anim-5.2')} .js-plotly-plot')"
                          "._fullLayout.xaxis.range")
    assert first[1] - first[0] < 0.2  # one 50 ms burst of the panel's 200 ms step, at millisecond resolution
    page.locator(f"#{graph_id('anim-5.2')} .updatemenu-button").nth(0).click()
    # zoomed out, the plot spans the whole counter window, and what it says stays with it (a page keeps a frame's
    # data once the axis has moved, not its layout: the title stays the animation's own)
    page.wait_for_function(f"() => Math.abs(document.querySelector('#{graph_id('anim-5.2')} .js-plotly-plot')"
                           "._fullLayout.xaxis.range[1] - 30) < 1e-6", timeout=30_000)
    page.wait_for_timeout(500)
    said = page.evaluate(f"() => document.querySelector('#{graph_id('anim-5.2')} .js-plotly-plot')._fullData[3].text[0]")
    assert said.startswith("One 30 s counter window") and "200 Gb/s" in state(page, "anim-5.2")["title"]
    type_in(page, "p56-duty", "50%")  # the duty cycle: the figures draw the tiles' 100 ms burst
    page.wait_for_function(f"() => document.querySelector('#{graph_id('5.8')} .js-plotly-plot')"
                           ".layout.meta.burst_s === 0.1", timeout=30_000)
    expect(page.locator("#p56-burst")).to_have_value("100 ms")  # and the greyed burst length says so too


def test_a_figure_file_plays_offline(browser, tmp_path):
    out = tmp_path / "anim.html"
    subprocess.run([*stepbudget_command(), "figure", "anim-5.1", "--out", str(out)], check=True, capture_output=True)
    page = browser.new_page()
    outside = []
    page.on("request", lambda r: None if r.url.startswith(("file:", "data:", "blob:")) else outside.append(r.url))
    page.goto(out.as_uri())
    page.wait_for_selector(".js-plotly-plot .main-svg")
    page.locator(".updatemenu-button").nth(1).click()  # ▶ link at half rate
    page.wait_for_function("() => document.querySelector('.js-plotly-plot')._fullLayout.sliders[0].active === 79",
                           timeout=30_000)
    misses = page.evaluate("() => { const gd = document.querySelector('.js-plotly-plot');"
                           " return gd.data.find(d => d.marker && d.marker.symbol === 'x').x.length; }")
    assert misses > 0 and outside == []
    page.close()
