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
    sets = (f"cluster.nic_Bps={values['rate']:.6g}",)
    fig = figs.drawn("anim-5.2", "en", None, sets, (("window_s", values["window"]),))
    assert "200 Gb/s" in fig["layout"]["title"]["text"] and fig["frames"][-1]["layout"]["xaxis"]["range"][1] == 30
    assert max(figs.drawn("5.8", "en", None, sets, ())["data"][0]["y"]) == 200e9


def test_a_step_too_big_for_the_page_says_so_and_gives_the_command():
    from stepbudget.chapter.panels import full_model
    from stepbudget.chapter.figures.timeline import TooLarge
    import pytest

    job = figs.of(full_model(405e9, 1024, 2**24, 128, 50e9, 400e12), max_tasks=figs.PAGE_TASKS)
    with pytest.raises(TooLarge) as e:
        figs.drawn("5.1", "en", job.ref, job.sets, tuple(job.options.items()))
    assert e.value.tasks > figs.PAGE_TASKS  # 256 micro-batches of 16 stages: about 130,000 tasks
