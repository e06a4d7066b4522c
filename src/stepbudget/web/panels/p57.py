"""Panel 5.7 - what changes if: Llama 3 405B with more HBM, twice the batch, MoE, a 128K sequence."""

from __future__ import annotations

from dash import html
from dash.development.base_component import Component

from stepbudget.api import HBM_CHOICES, PANEL_CHANGES, panel_whatif, whatif_command
from stepbudget.views.tables import degrees_label
from stepbudget.web import components as ui
from stepbudget.web import figures as figs
from stepbudget.web.panels import common
from stepbudget.views import fmt
from stepbudget.web.fields import Choice
from stepbudget.views.i18n import t

PID = "p57"
HBM = {f"{x / 1e9:.0f}": x for x in HBM_CHOICES}
CONTROLS = (
    Choice("hbm", tuple(HBM), "80"),
    Choice("changes", ("batch", "moe", "long"), (), many=True),
)
DIMS = ("tp", "cp", "pp", "dp", "ep")


def layout(lang: str, state: dict) -> html.Section:
    return ui.section(lang, PID, ui.controls(lang, PID, CONTROLS, state), figure=figs.graphs(lang, ("5.9",)))


def compute(lang: str, v: dict) -> list:
    on = set(v["changes"])
    variants = panel_whatif(HBM[v["hbm"]], "batch" in on, "moe" in on, "long" in on)
    time = lambda x: fmt.time(lang, float(x))  # noqa: E731
    header = [""] + [t(lang, f"p57.col.{x.name}", hbm=v["hbm"]) for x in variants]
    rows: list[list] = [
        [t(lang, "p57.row.gpus")] + [fmt.gpus(lang, x.scenario.cluster.gpus) for x in variants],
        [t(lang, "p57.row.layout")] + [_layout(x.scenario) for x in variants],
    ]
    rows += [[t(lang, "p57.row.bytes", dim=t(lang, f"dim.{d}"))] + [fmt.data(x.traffic_matrix()[d]["total"]) for x in variants]
             for d in DIMS]
    rows += [
        [t(lang, "p57.row.bubble")] + [time(x.budget.bubble_s) for x in variants],
        [t(lang, "p57.row.bubble_share")] + [fmt.percent(x.bubble_fraction) for x in variants],
        [t(lang, "p57.row.exposed")] + [time(x.budget.exposed_comm_s) for x in variants],
        [t(lang, "p57.row.step")] + [time(x.budget.step_s) for x in variants],
        [t(lang, "p57.row.mfu")] + [fmt.percent(float(x.budget.mfu)) for x in variants],
        [t(lang, "p57.row.memory")] + [_memory(lang, x) for x in variants],
    ]
    classes = ["", ""] + [f"bytes-{d}" for d in DIMS] + ["bubble", "bubble-share", "exposed", "step", "mfu", "memory"]
    kept = [x for x in variants[1:] if v["hbm"] != "80" and "layout.pp=8" not in x.changes]
    notes = [html.P(t(lang, "p57.pp_kept", hbm=v["hbm"], column=t(lang, f"p57.col.{x.name}", hbm=v["hbm"])),
                    className="assumed") for x in kept]
    return [*notes, ui.table("p57-table", header, rows, classes), html.P(t(lang, "p57.rate"), className="assumed"),
            ui.command(lang, "p57-command", _command(variants))]


def _command(variants) -> str:
    """The `whatif` command whose table has the panel's columns: its own variants, or (the base alone) the
    chapter's cases, whose first column is the base."""
    return whatif_command("llama3-405b", variants) if len(variants) > 1 else "stepbudget whatif llama3-405b --chapter"


def _layout(sc) -> str:
    return degrees_label(lambda a: getattr(sc.layout, a))


def _memory(lang: str, x) -> html.Span:
    fits = bool(x.memory.fits)
    text = t(lang, "p57.memory", used=fmt.data(float(x.memory.total)), hbm=fmt.data(x.memory.capacity))
    shown: list[str | Component] = [text] if fits else [text, " ", html.Strong(t(lang, "p57.no_fit"))]
    return html.Span(shown, className="fits" if fits else "no-fit")


def _long_job(v: dict) -> figs.Job:
    """Figure 5.9 is the 128K column: the other changes ticked, and the HBM chosen, come with it."""
    sets = [s for name in v["changes"] if name != "long" for s in PANEL_CHANGES[name]]
    if v["hbm"] != "80":
        sets.append(f"cluster.gpu.hbm_bytes={v['hbm']}GB")
    return figs.Job("llama3-405b", tuple(sets))


def register(app) -> None:
    ui.register(app, PID, CONTROLS, compute)
    figs.register(app, PID, CONTROLS, (("5.9", _long_job),), common.unmapped_text)
