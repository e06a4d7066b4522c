"""Panel 5.3 - bytes per GPU, by dimension, for a preset with the panel's degrees; HPN's Table 3 re-read."""

from __future__ import annotations

from dash import Input, Output, html

from stepbudget.api import dimensions as dims
from stepbudget.web import components as ui
from stepbudget.views import fmt
from stepbudget.web.fields import Choice, Field, Slider
from stepbudget.views.i18n import t

PID = "p53"
DEGREES = ("tp", "cp", "pp", "dp", "ep", "experts", "top_k", "micro_batch", "seq_len")
ORDERS = ("tp,cp,pp,dp", "tp,cp,dp,pp", "dp,tp,cp,pp", "tp,dp,cp,pp")
"""Rank orders, innermost first: Llama 3's and Megatron's, DeepSeek-V3's (DP inside a pipeline stage), DP inside
the node (HPN's exercise), and TP then DP."""
DEFAULT = "hpn-gpt3-175b"
SLIDERS = {"tp": Slider(1, 64, "powers"), "cp": Slider(1, 64, "powers"), "pp": Slider(1, 128, "powers"),
           "dp": Slider(1, 2**16, "powers"), "ep": Slider(1, 256, "powers"), "experts": Slider(1, 512, "powers"),
           "top_k": Slider(1, 16, "linear"), "micro_batch": Slider(1, 64, "powers"),
           "seq_len": Slider(512, 2**20, "powers")}
CONTROLS: tuple[ui.Control, ...] = (
    Choice("preset", dims.PANEL_PRESETS, DEFAULT),
    *(Field(name, "integer", str(getattr(dims.preset_degrees(DEFAULT), name)), low=1, low_open=False, high=2**20,
            example=str(getattr(dims.preset_degrees(DEFAULT), name)), slider=SLIDERS[name]) for name in DEGREES),
    Choice("order", ORDERS, ORDERS[0]),
)
QUESTIONS = (  # the chapter's exercise on HPN's preset: EP 64 with top-2 (64 experts, one per EP rank)
    ui.Question("hpn_ep", (("ep", "64"), ("experts", "64"), ("top_k", "2"))),
)


def layout(lang: str, state: dict) -> html.Section:
    return ui.section(lang, PID, ui.controls(lang, PID, CONTROLS, state), questions=QUESTIONS)


def _degrees(v: dict) -> dims.Degrees:
    return dims.Degrees(**{name: int(v[name]) for name in DEGREES}, order=tuple(v["order"].split(",")))


def compute(lang: str, v: dict) -> list:
    ref, d = v["preset"], _degrees(v)
    problems = dims.check(ref, d)
    if problems:
        raise ui.PanelProblem(problems=[(p.field, p.code, _values(p.values)) for p in problems])
    view = dims.dimension_view(ref, d)
    return [
        html.P(_summary(lang, view), id="p53-summary", className="summary"),
        *[html.P(_assumed(lang, code, values), className="assumed") for code, values in view.assumed],
        html.Div(_totals(lang, view), className="tiles"),
        _table(lang, view),
        *([_hpn(lang, view)] if view.hpn else [html.P(t(lang, "p53.hpn_other"), className="assumed")]
          if ref == "hpn-gpt3-175b" else []),
        ui.command(lang, "p53-command", view.command),
    ]


def _values(values: dict) -> dict:
    return {k: fmt.number(x) if isinstance(x, (int, float)) else x for k, x in values.items()}


def _summary(lang: str, view: dims.DimensionView) -> str:
    sc, mem = view.scenario, view.memory
    fits = bool(mem.fits)
    return t(lang, "p53.summary", model=sc.model.name, gpus=fmt.gpus(lang, sc.cluster.gpus),
             memory=fmt.data(float(mem.total)), hbm=fmt.data(mem.capacity),
             fits=t(lang, "p53.fits" if fits else "p53.does_not_fit"),
             step=fmt.time(lang, float(view.budget.step_s)))


def _assumed(lang: str, code: str, v: dict) -> str:
    if code == "moe_block":
        return t(lang, "p53.assumed.moe_block", experts=fmt.number(v["experts"]), top_k=fmt.number(v["top_k"]),
                 expert_ffn=fmt.number(v["expert_ffn"]), dense_ffn=fmt.number(v["dense_ffn"]),
                 load=fmt.number(v["load"]))
    if code == "moe_against_dp":
        return t(lang, "p53.assumed.moe_against_dp", ep=fmt.data(v["ep"]), dp=fmt.data(v["dp"]))
    if code == "schedule":
        return t(lang, "p53.assumed.schedule", pp=fmt.number(v["pp"]), v=fmt.number(v["v"]), was=fmt.number(v["was"]))
    return t(lang, "p53.assumed.kernel_rate", measured=fmt.flops(v["measured"]), kernel=fmt.flops(v["kernel"]))


def _totals(lang: str, view: dims.DimensionView) -> list:
    b = view.budget
    total, nic = b.by_dim("bytes_per_gpu"), b.by_dim("nic_bytes")
    return [ui.tile(f"p53-t-total-{d}", t(lang, f"dim.{d}"), fmt.data(float(total[d])),
                    t(lang, "p53.on_nic", bytes=fmt.data(float(nic[d]))))
            for d in ("tp", "cp", "pp", "dp", "ep") if float(total[d]) > 0]


def _table(lang: str, view: dims.DimensionView) -> html.Table:
    header = [t(lang, f"p53.col.{c}") for c in ("dim", "collective", "group", "message", "calls", "bytes", "nic",
                                                   "nvlink", "time", "exposed", "path", "per_layer")]
    rows, classes = [], []
    for r in view.rows:
        path = t(lang, f"p53.path.{'critical' if r.critical else 'overlappable'}.{r.status}")
        rows.append([t(lang, f"dim.{r.dim}"), f"{t(lang, 'coll.' + r.collective)} {t(lang, 'what.' + r.what)}",
                     fmt.number(r.group), fmt.data(r.message_bytes), fmt.number(r.calls), fmt.data(r.bytes_per_gpu),
                     fmt.data(r.nic_bytes), fmt.data(r.nvlink_bytes), fmt.time(lang, r.time_s), fmt.time(lang, r.exposed_s), path,
                     fmt.data(r.per_layer_bytes) if r.per_layer_bytes is not None else "–"])
        classes.append(f"dim-{r.dim} {r.status}")
    return ui.table("p53-table", header, rows, classes)


def _hpn(lang: str, view: dims.DimensionView) -> html.Div:
    header = [t(lang, f"p53.hpn.col.{c}") for c in ("dim", "measured", "ours", "match")]
    rows = [[t(lang, f"dim.{r.dim}"), fmt.data(r.measured_bytes), t(lang, f"p53.hpn.ours.{r.dim}", bytes=fmt.data(r.ours_bytes)),
             t(lang, f"p53.hpn.match.{r.dim}.{r.match}")] for r in view.hpn]
    return html.Div(className="reread", children=[html.H3(t(lang, "p53.hpn.heading")),
                                                  html.P(t(lang, "p53.hpn.caption")),
                                                  ui.table("p53-hpn", header, rows)])


def register(app) -> None:
    ui.register(app, PID, CONTROLS, compute)
    ui.register_questions(app, PID, QUESTIONS, CONTROLS)

    @app.callback([Output(ui.cid(PID, name), "value") for name in DEGREES] + [Output(ui.cid(PID, "order"), "value")],
                  Input(ui.cid(PID, "preset"), "value"), prevent_initial_call=True)
    def _preset(ref):  # a preset button resets the controls to what the preset states
        d = dims.preset_degrees(ref if ref in dims.PANEL_PRESETS else DEFAULT)
        order = ",".join(d.order)
        return [str(getattr(d, name)) for name in DEGREES] + [order if order in ORDERS else ORDERS[0]]
