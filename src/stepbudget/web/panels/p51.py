"""Panel 5.1 - the network roofline of one step: FLOP and bytes per GPU, intensity against the balance points."""

from __future__ import annotations

from dash import html

from stepbudget.api import firstorder as fo
from stepbudget.api import FullModel, full_model
from stepbudget.web import components as ui
from stepbudget.web import figures as figs
from stepbudget.views import fmt
from stepbudget.web.fields import Field, Slider
from stepbudget.views.i18n import t
from stepbudget.web.panels import common

PID = "p51"
CONTROLS = (
    common.N, common.G, common.B, common.F, common.NIC,
    Field("M", "count", "1", low=1, low_open=False, example="128", slider=common.M),
    Field("hbm", "rate", "3.35 TB/s", low=1e6, high=1e15, example="3.35 TB/s", slider=Slider(0.5e12, 20e12)),
)


def layout(lang: str, state: dict) -> html.Section:
    return ui.section(lang, PID, ui.controls(lang, PID, CONTROLS, state), figure=figs.graphs(lang, ("5.2",)))


def compute(lang: str, v: dict) -> list:
    common.check_split(v["G"], v["M"])
    r = fo.roofline(v["N"], v["G"], v["B"], v["F"], v["nic"], v["M"], v["hbm"])
    bound, shortfall = bool(r.link_bound), float(r.shortfall)
    verdict = (t(lang, "p51.link_bound", times=fmt.times(lang, shortfall)) if bound
               else t(lang, "p51.no_traffic") if shortfall == 0  # a DP group of one sends nothing
               else t(lang, "p51.compute_bound", times=fmt.times(lang, 1 / shortfall)))
    tiles = [
        ui.tile("p51-t-flops", t(lang, "p51.t.flops"), fmt.flop(float(r.flops_per_gpu))),
        ui.tile("p51-t-bytes", t(lang, "p51.t.bytes"), fmt.data(float(r.bytes_per_gpu)), t(lang, "p51.n.bytes")),
        ui.tile("p51-t-compute", t(lang, "p51.t.compute"), fmt.time(lang, float(r.compute_s))),
        ui.tile("p51-t-comm", t(lang, "p51.t.comm"), fmt.time(lang, float(r.comm_s)),
                t(lang, "p51.n.comm", times=fmt.times(lang, float(r.comm_over_compute)))),
        ui.tile("p51-t-intensity", t(lang, "p51.t.intensity"), fmt.number(float(r.intensity)), t(lang, "unit.flop_per_byte")),
        ui.tile("p51-t-balance-nic", t(lang, "p51.t.balance_nic"), fmt.number(float(r.balance_nic)),
                t(lang, "unit.flop_per_byte")),
        ui.tile("p51-t-balance-hbm", t(lang, "p51.t.balance_hbm"), fmt.number(float(r.balance_hbm)),
                t(lang, "p51.n.balance_hbm")),
        ui.tile("p51-t-verdict", t(lang, "p51.t.verdict"), verdict, flag="bad" if bound else "good"),
    ]
    return [html.Div(tiles, className="tiles"), _full(lang, full_model(v["N"], v["G"], v["B"], v["M"], v["nic"], v["F"]))]


def _full(lang: str, full) -> html.Div:
    if not isinstance(full, FullModel):
        return ui.full_box(lang, PID, [common.unmapped(lang, full)], None)
    b = full.budget
    inten = {k: float(x) for k, x in b.intensity.items()}
    bal = b.balance
    line = t(lang, "p51.full", nic=fmt.number(inten["nic"]), nic_balance=fmt.number(float(bal["nic"])),
             hbm=fmt.number(inten["hbm"]), hbm_balance=fmt.number(float(bal["hbm"])),
             nic_bytes=fmt.data(float(b.link_bytes()["nic"])), step=fmt.time(lang, float(b.step_s)),
             mfu=fmt.percent(float(b.mfu)))
    return ui.full_box(lang, PID, [*common.no_fit(lang, PID, full), html.P(line)], full.command)


def register(app) -> None:
    ui.register(app, PID, CONTROLS, compute)
    job = lambda v: figs.of(full_model(v["N"], v["G"], v["B"], v["M"], v["nic"], v["F"]))  # noqa: E731
    figs.register(app, PID, CONTROLS, (("5.2", job),), common.unmapped_text)
