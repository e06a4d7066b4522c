"""Panel 5.5 - one MoE layer on one axis: expert compute, its all-to-all on NVLink and on the NIC, and R."""

from __future__ import annotations

from dash import Input, Output, dcc, html
from dash.development.base_component import Component

from stepbudget.api import firstorder as fo
from stepbudget.api import layer_inputs
from stepbudget.api import load
from stepbudget.web import components as ui
from stepbudget.web import figures as figs
from stepbudget.web.panels import common
from stepbudget.views import fmt
from stepbudget.web.fields import Choice, Field, Slider
from stepbudget.views.i18n import t

PID = "p55"
PRESETS = ("chapter", "deepseek-v3", "megascale-moe-352b")
"""The chapter's worked example (MegaScale-MoE 7: f = 14,336 on an H800, EP 8, 400 GB/s NVLink) and two presets."""
LINKS = ("nvlink", "nic", "custom")
CHAPTER = {"expert_ffn": "14336", "hidden": "4096", "tokens": "1024", "top_k": "3", "ep": "8",
           "peak": "989 TFLOP/s", "nvlink": "400 GB/s", "nic": "50 GB/s", "link": "nvlink"}
"""The worked example: MegaScale-MoE's Internal-352B layer (hidden 4,096, top-3, 1,024 tokens a GPU) on an H800."""
CONTROLS = (
    Choice("preset", PRESETS, "chapter"),
    Field("expert_ffn", "integer", CHAPTER["expert_ffn"], low=1, low_open=False, high=2**20, example="14336",
          slider=Slider(256, 65536)),
    Field("hidden", "integer", CHAPTER["hidden"], low=1, low_open=False, high=2**20, example="4096",
          slider=Slider(512, 32768, "powers")),
    Field("tokens", "count", CHAPTER["tokens"], low=1, low_open=False, high=2**30, example="1024",
          slider=Slider(64, 65536, "powers")),
    Field("top_k", "integer", CHAPTER["top_k"], low=1, low_open=False, high=1024, example="3", slider=Slider(1, 16, "linear")),
    Field("ep", "integer", CHAPTER["ep"], low=1, low_open=False, high=2**20, example="8", slider=Slider(1, 256, "powers")),
    Field("peak", "flops", CHAPTER["peak"], low=1e9, high=1e18, example="989 TFLOP/s", slider=Slider(100e12, 10e15)),
    Field("nvlink", "rate", CHAPTER["nvlink"], low=1e6, high=1e15, example="400 GB/s", slider=Slider(10e9, 2e12)),
    Field("nic", "rate", CHAPTER["nic"], low=1e6, high=1e15, example="50 GB/s", slider=Slider(3e9, 200e9)),
    Choice("link", LINKS, CHAPTER["link"]),
    Field("custom", "rate", "100 GB/s", low=1e6, high=1e15, example="100 GB/s", slider=Slider(3e9, 2e12)),
)
SMALL_EXPERT = 1408
"""DeepSeekMoE 16B's expert width, the chapter's 'small experts' (R about 1.0 on NVLink; formulas.md 9.4)."""
CHAPTER_JOB = ("megascale-moe-352b", {"nvlink": "cluster.nvlink_Bps=400GB/s"})
"""The worked example's command: MegaScale-MoE's layer on the chapter's 400 GB/s NVLink."""
AXIS = "p55-axis"
"""The figure area's graph: the layer's compute and its all-to-all on one time axis."""
PRESET_FIELDS = ("expert_ffn", "hidden", "tokens", "top_k", "ep", "peak", "nvlink", "nic", "link")


def layout(lang: str, state: dict) -> html.Section:
    return ui.section(lang, PID, ui.controls(lang, PID, CONTROLS, state),
                      figure=[dcc.Graph(id=AXIS, config=_GRAPH), *figs.graphs(lang, ("5.6", "5.7"))])


def _moe_job(v: dict) -> figs.Job:
    """Figures 5.6 and 5.7 draw a whole MoE job: the preset chosen (MegaScale-MoE's for the worked example) with
    the panel's expert width, top-k and link rates; its tokens, hidden size, EP and peak stay the preset's."""
    ref = v["preset"] if v["preset"] != "chapter" else "megascale-moe-352b"
    return figs.Job(ref, (f"model.moe.expert_ffn_size={v['expert_ffn']}", f"model.moe.top_k={v['top_k']}",
                          f"cluster.nvlink_Bps={v['nvlink']:.6g}", f"cluster.nic_Bps={v['nic']:.6g}"))


def preset_values(name: str) -> dict[str, str]:
    """The controls for a preset's MoE layer: its expert width, hidden size, tokens a GPU, top-k, EP, peak, links."""
    if name not in PRESETS[1:]:
        return dict(CHAPTER)
    li = layer_inputs(load(name))
    return {"expert_ffn": str(li.expert_ffn), "hidden": str(li.hidden), "tokens": str(li.tokens_per_gpu),
            "top_k": str(li.top_k), "ep": str(li.ep), "peak": fmt.flops(li.peak_flops), "nvlink": fmt.rate(li.nvlink_Bps),
            "nic": fmt.rate(li.nic_Bps), "link": "nvlink" if li.ep_in_node else "nic"}


def _same(spec, value, text: str) -> bool:
    """Whether a control still holds the preset's value (then the moe command prints the same layer)."""
    return value == (spec.read(text) if isinstance(spec, Field) else text)


def compute(lang: str, v: dict) -> ui.Out:
    link = {"nvlink": v["nvlink"], "nic": v["nic"], "custom": v["custom"]}[v["link"]]
    m = fo.moe_layer(v["expert_ffn"], v["hidden"], v["tokens"], v["top_k"], v["ep"], v["peak"], link, v["nvlink"], v["nic"])
    time = lambda x: fmt.time(lang, float(x))  # noqa: E731
    ratio = float(m.ratio)
    verdict = t(lang, "p55.hides" if bool(m.hides) else "p55.exposed")
    small = fo.moe_layer(SMALL_EXPERT, v["hidden"], v["tokens"], v["top_k"], v["ep"], v["peak"], link)
    others = [(name, value) for name, value in (("nvlink", m.ratio_nvlink), ("nic", m.ratio_nic)) if name != v["link"]]
    tiles = [
        ui.tile("p55-t-ratio", t(lang, "p55.t.ratio", link=t(lang, f"p55.o.link.{v['link']}")), fmt.number(ratio), verdict,
                flag="good" if bool(m.hides) else "bad"),
        ui.tile("p55-t-approx", t(lang, "p55.t.approx"), fmt.number(float(m.ratio_approx)), t(lang, "p55.n.approx")),
        *[ui.tile(f"p55-t-ratio-{name}", t(lang, f"p55.t.ratio_{name}"), fmt.number(float(value))) for name, value in others],
        ui.tile("p55-t-small", t(lang, "p55.t.small"), fmt.number(float(small.ratio)), _small(lang, float(small.ratio), v)),
        ui.tile("p55-t-compute", t(lang, "p55.t.compute"), time(m.compute_s)),
        ui.tile("p55-t-nvlink", t(lang, "p55.t.nvlink"), time(m.nvlink_s)),
        ui.tile("p55-t-nic", t(lang, "p55.t.nic"), time(m.nic_s)),
    ]
    notes: list[Component] = ([html.P(t(lang, f"p55.note.{v['preset']}"), className="assumed")]
                              if v["preset"] != "chapter" else [])
    command = _command(v)
    if command is not None:  # the moe command prints this layer's R, compute and all-to-all times, and more
        notes.append(ui.command(lang, "p55-command", command))
    return ui.Out([html.Div(tiles, className="tiles"), *notes], figure=_axis(lang, m))


ABOUT_ONE = (0.85, 1.15)
"""R counted as "about 1": the all-to-all and the expert GEMMs take about as long (the chapter's 1.0 for
DeepSeekMoE's small experts on NVLink is 0.976 by the exact form)."""


def _small(lang: str, ratio: float, v: dict) -> str:
    """What R says for the small experts on the panel's link, from its value: about 1 (they barely hide, if at
    all), below (they cannot) or above (they can)."""
    low, high = ABOUT_ONE
    verdict = "about" if low <= ratio <= high else "below" if ratio < low else "above"
    return t(lang, "p55.n.small", ffn=fmt.number(SMALL_EXPERT), link=t(lang, f"p55.n.small_link.{v['link']}"),
             verdict=t(lang, f"p55.n.small_{verdict}"))


SETS = {"expert_ffn": lambda x: f"model.moe.expert_ffn_size={x:.0f}", "top_k": lambda x: f"model.moe.top_k={x:.0f}",
        "nvlink": lambda x: f"cluster.nvlink_Bps={x / 1e9:.6g}GB/s", "nic": lambda x: f"cluster.nic_Bps={x / 1e9:.6g}GB/s"}
"""The controls a preset's scenario takes one field for; the others (hidden size, tokens a GPU, EP, peak, a custom
link) reshape the whole job, so a layer changed there has no `moe` command."""


def _command(v: dict) -> str | None:
    """The `moe` command that prints the panel's layer: its preset (MegaScale-MoE's on the chapter's 400 GB/s NVLink
    for the worked example) with a --set for each control changed from it; None where a change has no field."""
    base = preset_values(v["preset"])
    changed = [spec.name for spec in CONTROLS if spec.name in PRESET_FIELDS and spec.name != "link"
               and not _same(spec, v[spec.name], base[spec.name])]
    if v["link"] == "custom" or any(name not in SETS for name in changed):
        return None
    ref, sets = CHAPTER_JOB if v["preset"] == "chapter" else (v["preset"], {})
    sets = sets | {name: SETS[name](v[name]) for name in changed}
    return " ".join([f"stepbudget moe {ref}", *(f"--set {s}" for s in sets.values())])


_GRAPH: dcc.Graph.Config = {"displayModeBar": False, "responsive": True}


def _axis(lang: str, m: fo.MoELayer) -> dict:
    """The layer's compute and its all-to-all on NVLink and on the NIC, as bars on one time axis (a plotly
    figure as a plain dict: building one through plotly.graph_objects costs more than the whole panel)."""
    seconds = [float(m.compute_s), float(m.nvlink_s), float(m.nic_s)]
    bars = {"type": "bar", "orientation": "h", "x": seconds, "hoverinfo": "skip", "textposition": "auto",
            "y": [t(lang, "p55.bar.compute"), t(lang, "p55.bar.nvlink"), t(lang, "p55.bar.nic")],
            "text": [fmt.time(lang, x) for x in seconds], "marker": {"color": ["#3b6ea8", "#5aa469", "#d1603d"]}}
    layout = {"height": 190, "margin": {"l": 10, "r": 20, "t": 10, "b": 40}, "plot_bgcolor": "#fafafa",
              "font": {"size": 13}, "yaxis": {"autorange": "reversed", "automargin": True},
              "xaxis": {"title": {"text": t(lang, "p55.axis")}, "tickformat": "~s", "ticksuffix": t(lang, "unit.si_second")}}
    return {"data": [bars], "layout": layout}


def register(app) -> None:
    ui.register(app, PID, CONTROLS, compute, figure=AXIS)
    figs.register(app, PID, CONTROLS, (("5.6", _moe_job), ("5.7", _moe_job)), common.unmapped_text)

    @app.callback([Output(ui.cid(PID, name), "value") for name in PRESET_FIELDS], Input(ui.cid(PID, "preset"), "value"),
                  prevent_initial_call=True)
    def _preset(name):  # a preset resets the layer's controls to what the preset states
        values = preset_values(name)
        return [values[f] for f in PRESET_FIELDS]
