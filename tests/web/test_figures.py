"""The chapter's figures in the panels, server side: each panel's controls choose the figure's job."""

from __future__ import annotations

from stepbudget.chapter.panels import Unmapped
from stepbudget.chapter.figures import FIGURES
from stepbudget.web import figures as figs
from stepbudget.web.app import create_app
from stepbudget.web.panels import p52, p55, p56, p57

from _web import defaults


def test_every_figure_has_a_graph_and_a_callback_in_its_panel():
    app = create_app()
    outputs = {key.split(".")[0] for key in app.callback_map}
    assert {figs.graph_id(ident) for ident in FIGURES} <= outputs


def test_the_page_draws_a_figure_at_its_width_and_keeps_it():
    first = figs.drawn("5.3", "en", None, (), ())
    assert "width" not in first["layout"]  # plotly sizes it to the page
    assert figs.drawn("5.3", "en", None, (), ()) is first  # every reader opens the same defaults: drawn once


def test_panel_controls_choose_the_figures_job():
    job = p55._moe_job(defaults(p55, preset="deepseek-v3", nvlink="200 GB/s"))
    assert job.ref == "deepseek-v3" and "cluster.nvlink_Bps=2e+11" in job.sets
    assert p55._moe_job(defaults(p55)).ref == "megascale-moe-352b"  # the worked example is MegaScale-MoE's layer
    job = p57._long_job(defaults(p57, hbm="141", changes=["batch", "long"]))
    assert job.sets == ("batch.global_batch_tokens=33554432", "cluster.gpu.hbm_bytes=141GB")
    fig = figs.drawn("5.9", "en", job.ref, job.sets, ())
    assert fig["data"][0]["customdata"] == [8, 8]  # TP 8 in both columns
    assert isinstance(p52._full_model(defaults(p52, N="70B")), Unmapped)  # not Llama 3 405B: no job


def test_the_line_rate_of_panel_5_6_draws_the_nics_at_that_rate():
    values = defaults(p56, rate="200 Gb/s", window="30 s")
    job = p56._figure_job(values, window_s=values["window"])
    fig = figs.drawn("anim-5.2", "en", job.ref, job.sets, tuple(sorted(job.options.items())))
    assert "200 Gb/s" in fig["layout"]["title"]["text"] and fig["frames"][-1]["layout"]["xaxis"]["range"][1] == 30
    job = p56._figure_job(values)
    assert max(figs.drawn("5.8", "en", job.ref, job.sets, tuple(sorted(job.options.items())))["data"][0]["y"]) == 200e9


def _panel_56(figure: str, **controls) -> dict:
    values = defaults(p56, **controls)
    job = p56._figure_job(values, **({"window_s": values["window"]} if figure == "anim-5.2" else {}))
    assert job.ref == "llama3-405b"  # the full model's job, as the panel's tiles and its box
    return figs.drawn(figure, "en", job.ref, job.sets, tuple(sorted(job.options.items())))


def test_panel_5_6_figures_follow_its_duty_cycle_and_step():
    at_25, at_50 = _panel_56("5.8"), _panel_56("5.8", duty="50%")
    assert at_25["layout"]["meta"] == {"step_s": 0.2, "burst_s": 0.05}  # the tiles' 50 ms burst of a 200 ms step
    assert at_50["layout"]["meta"]["burst_s"] == 0.1 and at_25["data"][0]["x"] != at_50["data"][0]["x"]
    longer = _panel_56("5.8", by="burst", burst="80 ms", step="400 ms")["layout"]["meta"]
    assert longer == {"step_s": 0.4, "burst_s": 0.08}
    zoom = _panel_56("anim-5.2", duty="50%")
    assert zoom["layout"]["meta"]["burst_s"] == 0.1
    assert "a flat 200 Gb/s" in zoom["frames"][-1]["data"][1]["text"][0]  # 50 % of 400 Gb/s, averaged
    assert p56._figure_job(defaults(p56, by="burst", burst="1 s")) is None  # longer than the step: the panel says so


class _App:
    """Enough of a Dash app to run a panel's register() and keep what it registers."""

    def callback(self, *args, **kwargs):
        return lambda f: f

    def clientside_callback(self, *args, **kwargs):
        pass


def _jobs(panel, monkeypatch) -> dict:
    """The figure jobs a panel's register() gives web/figures.py, by figure."""
    got: dict = {}
    monkeypatch.setattr(figs, "register", lambda app, pid, specs, figures, unmapped: got.update(dict(figures)))
    panel.register(_App())
    return got


def test_animation_5_1_plays_the_job_of_figure_5_1(monkeypatch):
    from stepbudget.chapter.panels import full_model
    from stepbudget.web.panels import p54

    jobs = _jobs(p54, monkeypatch)
    for controls in ({}, {"M": "1"}, {"G": "131,072"}, {"nic": "200 Gb/s"}):
        v = defaults(p54, **controls)
        job = jobs["5.1"](v)
        assert jobs["anim-5.1"](v) == job  # the same job, bounded alike
        assert job == figs.of(full_model(v["N"], v["G"], v["B"], v["M"], v["nic"], v["F"]), max_tasks=figs.PAGE_TASKS)


def test_the_page_wraps_titles_and_notes_for_its_figure_boxes():
    columns = figs.TITLE[1]
    file = figs.build("5.4", "en", None, ())
    page = figs.drawn("5.4", "en", None, (), ())
    lines = page["layout"]["title"]["text"].split("<br>")
    assert len(lines) > len(file["layout"]["title"]["text"].split("<br>")) and max(map(len, lines)) <= columns
    assert page["layout"]["margin"]["t"] > file["layout"]["margin"]["t"]  # room for the lines it gained
    note = next(a for a in page["layout"]["annotations"] if a.get("name") == "note")
    assert max(len(x) for x in note["text"].split("<br>")) <= figs.NOTE[0]


def test_panel_5_5_small_experts_tile_says_what_its_value_says():
    from _web import compute, find, text, tile as value

    def said(**controls):
        out = compute(p55, **controls)
        return float(value(out, "p55-t-small")), text(find(out, "p55-t-small"))

    r, tile = said()
    assert r == 0.976 and "on NVLink: about 1" in tile  # the chapter's 1.0 on NVLink (5.5)
    r, tile = said(link="nic")
    assert r < 0.85 and "on the NIC: below 1" in tile
    r, tile = said(nvlink="900 GB/s")
    assert r > 1.15 and "above 1" in tile


def test_a_step_too_big_for_the_page_says_so_and_gives_the_command():
    from stepbudget.chapter.panels import full_model
    from stepbudget.chapter.figures.timeline import TooLarge
    import pytest

    job = figs.of(full_model(405e9, 1024, 2**24, 128, 50e9, 400e12), max_tasks=figs.PAGE_TASKS)
    with pytest.raises(TooLarge) as e:
        figs.drawn("5.1", "en", job.ref, job.sets, tuple(job.options.items()))
    assert e.value.tasks > figs.PAGE_TASKS  # 256 micro-batches of 16 stages: about 130,000 tasks
