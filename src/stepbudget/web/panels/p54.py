"""Panel 5.4 - the communication share grows with the cluster: first-order step, and the full model beside it."""

from __future__ import annotations

from dash import html
from dash.development.base_component import Component

from stepbudget.api import firstorder as fo
from stepbudget.api import FullModel, compare, full_model
from stepbudget.web import components as ui
from stepbudget.web import figures as figs
from stepbudget.views import fmt
from stepbudget.web.fields import Field, Slider
from stepbudget.views.i18n import t
from stepbudget.web.panels import common

PID = "p54"
CONTROLS = (
    common.N, common.G, common.B,
    Field("M", "count", "128", low=1, low_open=False, example="128", slider=common.M),
    common.NIC, common.F,
    Field("phi", "fraction", "0.9", low=0, high=1, low_open=False, example="0.9", slider=Slider(0, 1, "linear", 0.05)),
    common.PEAK,
)


def _first(**changes: str) -> fo.StrongScaling:
    """The first-order step at the panel's defaults with ``changes`` typed in."""
    v = {c.name: c.read(changes.get(c.name, c.default)) for c in CONTROLS}
    return fo.strong_scaling(v["N"], v["G"], v["B"], v["M"], v["nic"], v["F"], v["phi"], v["peak"])


def _answer_m1(lang: str) -> dict:
    base, one = _first(), _first(M="1")
    return {"share": fmt.percent(float(one.comm_share)), "comm": fmt.time(lang, float(one.comm_s)),
            "mfu": fmt.percent(float(one.mfu)), "mfu_base": fmt.percent(float(base.mfu))}


def _answer_half(lang: str) -> dict:
    base, half = _first(), _first(nic="200 Gb/s")
    return {"comm": fmt.time(lang, float(half.comm_s)), "exposed": fmt.time(lang, float(half.exposed_s)),
            "mfu": fmt.percent(float(half.mfu)), "mfu_base": fmt.percent(float(base.mfu))}


def _answer_big(lang: str) -> dict:
    big = _first(G="131,072")
    return {"compute": fmt.time(lang, float(big.compute_s)), "comm": fmt.time(lang, float(big.comm_s)),
            "share": fmt.percent(float(big.comm_share)), "mfu": fmt.percent(float(big.mfu))}


QUESTIONS = (  # the chapter's exercise for Panel 5.4, in three steps
    ui.Question("m1", (("M", "1"),), _answer_m1),
    ui.Question("half_nic", (("nic", "200 Gb/s"),), _answer_half),
    ui.Question("big", (("G", "131,072"),), _answer_big),
)


def layout(lang: str, state: dict) -> html.Section:
    return ui.section(lang, PID, ui.controls(lang, PID, CONTROLS, state), figure=figs.graphs(lang, FIGURES[1:]),
                      questions=QUESTIONS)


def compute(lang: str, v: dict) -> list:
    common.check_split(v["G"], v["M"])
    s = fo.strong_scaling(v["N"], v["G"], v["B"], v["M"], v["nic"], v["F"], v["phi"], v["peak"])
    time = lambda x: fmt.time(lang, float(x))  # noqa: E731
    tiles = [
        ui.tile("p54-t-compute", t(lang, "p54.t.compute"), time(s.compute_s)),
        ui.tile("p54-t-comm", t(lang, "p54.t.comm"), time(s.comm_s),
                t(lang, "p54.n.comm", bytes=fmt.data(float(s.bytes_per_gpu)))),
        ui.tile("p54-t-factor", t(lang, "p54.t.factor"), f"{float(s.dp_factor):.4f}",
                t(lang, "p54.n.factor", D=fmt.number(float(s.dp)))),
        ui.tile("p54-t-share", t(lang, "p54.t.share"), fmt.percent(float(s.comm_share)),
                flag="bad" if float(s.comm_s) > float(s.compute_s) else ""),
        ui.tile("p54-t-exposed", t(lang, "p54.t.exposed"), time(s.exposed_s), t(lang, "p54.n.exposed", hidden=time(s.hidden_s))),
        ui.tile("p54-t-step", t(lang, "p54.t.step"), time(s.step_s)),
        ui.tile("p54-t-mfu", t(lang, "p54.t.mfu"), fmt.percent(float(s.mfu)), t(lang, "p54.n.mfu")),
    ]
    full = full_model(v["N"], v["G"], v["B"], v["M"], v["nic"], v["F"])
    return [html.Div(tiles, className="tiles"), _full(lang, s, full)]


def _full(lang: str, first: fo.StrongScaling, full) -> html.Div:
    """The full model's terms as `stepbudget budget` prints them, beside the first-order ones, and why they differ."""
    if not isinstance(full, FullModel):
        return ui.full_box(lang, PID, [common.unmapped(lang, full)], None)
    c = compare(first, full)
    show = lambda name, x: fmt.percent(x) if name == "mfu" else fmt.time(lang, x)  # noqa: E731
    rows = [[_term(lang, term.name, c.in_rate), show(term.name, term.first), show(term.name, term.full)]
            for term in c.terms]
    header = [t(lang, "p54.col.term"), t(lang, "p54.col.first"), t(lang, "p54.col.full")]
    lines: list[Component] = [*common.no_fit(lang, PID, full),
                              ui.table("p54-terms", header, rows, [f"term-{term.name}" for term in c.terms])]
    if c.differs:
        lines.append(html.P(t(lang, "p54.differs"), className="lead"))
        lines.append(html.Ul([html.Li(common.reason(lang, code, values), className=f"why-{code}")
                              for code, values in c.differs], id="p54-why"))
    return ui.full_box(lang, PID, lines, full.command)


def _term(lang: str, name: str, in_rate: bool) -> str:
    """A term's label: an exchange by its dimension; under a whole-step rate the bubble is inside the compute and
    the exposed time is DP's at the step's edges, as the command says."""
    if name in ("tp", "cp", "pp", "ep"):
        return t(lang, "p54.term.dim", dim=t(lang, f"dim.{name}"))
    if in_rate and name in ("bubble", "exposed"):
        return t(lang, f"p54.term.{'bubble_inside' if name == 'bubble' else 'exposed_edges'}")
    return t(lang, f"p54.term.{name}")


FIGURES = ("5.1", "5.4", "anim-5.1", "5.5")
"""The figures Panel 5.4's controls draw: Figure 5.1 stands in section 5.1 (web/app.py), the rest beside the panel."""


def _job(v: dict):
    return figs.of(full_model(v["N"], v["G"], v["B"], v["M"], v["nic"], v["F"]))


def register(app) -> None:
    ui.register(app, PID, CONTROLS, compute)
    ui.register_questions(app, PID, QUESTIONS, CONTROLS)
    step = lambda v: figs.of(full_model(v["N"], v["G"], v["B"], v["M"], v["nic"], v["F"]),  # noqa: E731
                             max_tasks=figs.PAGE_TASKS)  # Figure 5.1 and Animation 5.1 play the same job
    figs.register(app, PID, CONTROLS, (("5.1", step), ("5.4", _job), ("anim-5.1", step), ("5.5", lambda v: figs.Job())),
                  common.unmapped_text)
