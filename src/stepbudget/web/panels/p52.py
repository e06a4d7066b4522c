"""Panel 5.2 - the DP exchange for any split, group size and precision of each leg."""

from __future__ import annotations

from dash import html

from stepbudget.api import firstorder as fo
from stepbudget.api import FullModel, dp_differs, dp_totals, full_model
from stepbudget.web import components as ui
from stepbudget.web import figures as figs
from stepbudget.views import fmt
from stepbudget.web.fields import Choice, Field, Slider
from stepbudget.views.i18n import t
from stepbudget.web.panels import common

PID = "p52"
PRECISIONS = {"bf16": fo.BF16, "fp32": fo.FP32}
CONTROLS = (
    common.N,
    Field("M", "count", "128", low=1, low_open=False, example="128", slider=common.M),
    Field("D", "count", "128", low=1, low_open=False, example="128", slider=Slider(2, 2**17, "powers")),
    Choice("kind", tuple(k.value for k in fo.DPKind), fo.DPKind.ALL_REDUCE.value),
    Choice("grads", tuple(PRECISIONS), "bf16"),
    Choice("params", tuple(PRECISIONS), "bf16"),
    common.NIC,
    Field("compute", "time", "6.2 s", low=0, high=1e7, example="6.2 s", slider=Slider(0.1, 100)),
    common.F,
)


def layout(lang: str, state: dict) -> html.Section:
    return ui.section(lang, PID, ui.controls(lang, PID, CONTROLS, state), figure=figs.graphs(lang, ("5.3",)))


def compute(lang: str, v: dict) -> list:
    wg, wp = PRECISIONS[v["grads"]], PRECISIONS[v["params"]]
    x = fo.dp_exchange(v["N"], v["M"], v["D"], v["kind"], wg, wp, v["nic"], v["compute"], v["F"])
    tiles = [
        ui.tile("p52-t-params", t(lang, "p52.t.params"), fmt.count_words(lang, float(x.params_per_gpu))),
        ui.tile("p52-t-shard", t(lang, "p52.t.shard"), fmt.data(float(x.shard_bytes)),
                t(lang, "p52.n.shard", precision=t(lang, f"p52.o.params.{v['params']}"))),
        ui.tile("p52-t-bytes", t(lang, "p52.t.bytes"), fmt.data(float(x.bytes_per_gpu)),
                t(lang, f"p52.n.bytes.{v['kind']}")),
        ui.tile("p52-t-time", t(lang, "p52.t.time"), fmt.time(lang, float(x.comm_s))),
        ui.tile("p52-t-share", t(lang, "p52.t.share"), fmt.percent(float(x.share_of_compute)),
                t(lang, "p52.n.share", compute=fmt.time(lang, v["compute"]))),
        ui.tile("p52-t-intensity", t(lang, "p52.t.intensity"), fmt.number(float(x.intensity)),
                t(lang, "p52.n.intensity", balance=fmt.number(float(x.balance))),
                flag="good" if float(x.intensity) >= float(x.balance) else "bad"),
    ]
    return [html.Div(tiles, className="tiles"), _full(lang, _full_model(v), float(x.bytes_per_gpu))]


def _full_model(v: dict):
    """The Llama 3 405B job of the panel's group and replicas, with its DP and precisions (2^24 tokens a step)."""
    return full_model(v["N"], v["M"] * v["D"], 2**24, v["M"], v["nic"], v["F"], v["kind"], PRECISIONS[v["grads"]],
                      PRECISIONS[v["params"]])


def _full(lang: str, full, first_bytes: float) -> html.Div:
    if not isinstance(full, FullModel):
        return ui.full_box(lang, PID, [common.unmapped(lang, full)], None)
    dp = dp_totals(full.budget)
    line = t(lang, "p52.full", bytes=fmt.data(dp.bytes_per_gpu), time=fmt.time(lang, dp.time_s),
             share=fmt.percent(dp.share_of_compute), compute=fmt.time(lang, dp.compute_s),
             gpus=fmt.gpus(lang, full.scenario.cluster.gpus))
    lines = [*common.no_fit(lang, PID, full), html.P(line)]
    lines += [html.P(common.reason(lang, code, values), className="differs") for code, values in dp_differs(full, first_bytes)]
    return ui.full_box(lang, PID, lines, full.command)


def register(app) -> None:
    ui.register(app, PID, CONTROLS, compute)
    figs.register(app, PID, CONTROLS, (("5.3", lambda v: figs.of(_full_model(v))),), common.unmapped_text)
