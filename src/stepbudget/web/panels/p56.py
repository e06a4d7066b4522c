"""Panel 5.6 - what the traffic looks like on the wire: bursts, buffers, counters, and what changed."""

from __future__ import annotations

from dash import Input, Output, State, callback_context, dcc, html, no_update
from dash.development.base_component import Component

from stepbudget.api import firstorder as fo
from stepbudget.api import JobWire, job_wire, parse
from stepbudget.web import components as ui
from stepbudget.web import figures as figs
from stepbudget.views import fmt
from stepbudget.web.fields import Choice, Field, FieldError, Slider
from stepbudget.views.i18n import t
from stepbudget.web.panels import common

PID = "p56"
CONTROLS = (
    Field("rate", "rate", "400 Gb/s", low=1e6, high=1e15, example="400 Gb/s", slider=Slider(10e9 / 8, 1.6e12 / 8)),
    Choice("by", ("duty", "burst"), "duty"),
    Field("duty", "fraction", "25%", low=0, high=1, example="25%", slider=Slider(0.01, 1, "linear", 0.01)),
    Field("burst", "time", "50 ms", low=0, high=1e6, example="50 ms", slider=Slider(1e-3, 10)),
    Field("step", "time", "200 ms", low=0, high=1e6, example="200 ms", slider=Slider(10e-3, 60)),
    Field("k", "integer", "2", low=1, low_open=False, high=100_000, example="2", slider=Slider(1, 64, "linear")),
    Field("buffer", "bytes", "64 MB", low=0, low_open=False, high=1e15, example="64 MB", slider=Slider(1e6, 10e9)),
    Field("window", "time", "15 s", low=0, high=1e6, example="15 s", slider=Slider(0.1, 60)),
    Field("flows", "count", "1,000", low=1, low_open=False, high=1e9, example="1,000", slider=Slider(1, 1e6)),
)


def _answer(lang: str) -> dict:
    """The chapter's pair of settings, 25 % at 400 Gb/s and 50 % at 200 Gb/s, at the panel's other defaults."""
    v = {c.name: c.read(c.default) for c in CONTROLS if isinstance(c, Field)}
    a, b = (fo.wire_tiles(parse(rate, "rate"), v["step"], duty_cycle=duty, k_converging=v["k"],
                          buffer_bytes=v["buffer"], window_s=v["window"], web_flows=v["flows"])
            for rate, duty in (("400 Gb/s", 0.25), ("200 Gb/s", 0.5)))
    time = lambda x: fmt.time(lang, float(x))  # noqa: E731
    return {"average": fmt.line_rate(float(a.average_Bps)), "burst_a": time(a.burst_s), "burst_b": time(b.burst_s),
            "peak_a": fmt.times(lang, float(a.peak_to_average)), "peak_b": fmt.times(lang, float(b.peak_to_average)),
            "excess": fmt.data(float(a.excess_bytes)), "drain_a": time(a.drain_s), "drain_b": time(b.drain_s),
            "counter": fmt.line_rate(float(a.counter_Bps))}


QUESTIONS = (  # the chapter's exercise: the same average load, reached two ways
    ui.Question("at_400", (("by", "duty"), ("rate", "400 Gb/s"), ("duty", "25%"))),
    ui.Question("at_200", (("by", "duty"), ("rate", "200 Gb/s"), ("duty", "50%")), _answer),
)
TILES = ("average", "peak", "burst", "duty", "bytes", "excess", "absorbed", "drain", "counter", "cv")
"""The tiles, in the order the panel shows them; "average" and "counter" are what averages can see."""


def layout(lang: str, state: dict) -> html.Section:
    pin = html.Button(t(lang, "p56.pin"), id=ui.cid(PID, "pin"), className="pin")
    return ui.section(lang, PID, [*ui.controls(lang, PID, CONTROLS, state), pin],
                      extra=[dcc.Store(id=ui.cid(PID, "memory"))], figure=figs.graphs(lang, ("5.8", "anim-5.2")),
                      questions=QUESTIONS)


def compute(lang: str, v: dict, reference: dict | None, pressed: set[str]) -> ui.Out:
    """The tiles, marked where they differ from the reference setting: the first one shown, or the one pinned."""
    if v["by"] == "burst" and v["burst"] > v["step"]:
        raise ui.PanelProblem("burst", "burst_step", step=fmt.time(lang, v["step"]))
    given = {"burst_s": v["burst"]} if v["by"] == "burst" else {"duty_cycle": v["duty"]}
    w = fo.wire_tiles(v["rate"], v["step"], **given, k_converging=v["k"], buffer_bytes=v["buffer"],
                      window_s=v["window"], web_flows=v["flows"])
    time = lambda x: fmt.time(lang, float(x))  # noqa: E731
    absorbed = bool(w.absorbed)
    values = {
        "average": (fmt.line_rate(float(w.average_Bps)), t(lang, "p56.n.average")),
        "peak": (fmt.times(lang, float(w.peak_to_average)), t(lang, "p56.n.peak")),
        "burst": (time(w.burst_s), t(lang, "p56.n.burst", rate=fmt.line_rate(float(w.line_rate_Bps)))),
        "duty": (fmt.percent(float(w.duty_cycle)), t(lang, "p56.n.duty", step=time(w.step_s))),
        "bytes": (fmt.data(float(w.bytes_per_burst)), t(lang, "p56.n.bytes")),
        "excess": (fmt.data(float(w.excess_bytes)), t(lang, "p56.n.excess", k=fmt.number(float(w.k_converging)))),
        "absorbed": (t(lang, "p56.absorbed_yes" if absorbed else "p56.absorbed_no"),
                     t(lang, "p56.n.absorbed", buffer=fmt.data(float(w.buffer_bytes)), longest=time(w.max_burst_absorbed_s))
                     if float(w.k_converging) > 1 else t(lang, "p56.n.absorbed_lone")),
        "drain": (time(w.drain_s), t(lang, "p56.n.drain")),
        "counter": (fmt.line_rate(float(w.counter_Bps)), _counter(lang, w)),
        "cv": (t(lang, "p56.cv", training=fmt.number(float(w.cv_training)), web=fmt.number(float(w.cv_web))),
               t(lang, "p56.n.cv", flows=fmt.number(float(w.web_flows)))),
    }
    shown = {name: value for name, (value, _) in values.items()}
    if reference is None or "pin" in pressed:
        reference = {"tiles": shown, "setting": _setting(lang, v)}
    changed = [n for n in TILES if reference["tiles"].get(n) != shown[n]]
    flags = {"absorbed": "good" if absorbed else "bad"}
    tiles = [ui.tile(f"p56-t-{n}", t(lang, f"p56.t.{n}"), values[n][0], values[n][1],
                     flag=" ".join(f for f in (flags.get(n, ""), "changed" if n in changed else "") if f)) for n in TILES]
    out: list[Component] = [html.Div(tiles, className="tiles"), _job(lang, v)]
    if changed:
        kept = [n for n in TILES if n not in changed]
        names = lambda items: t(lang, "app.list_sep").join(t(lang, f"p56.t.{n}") for n in items)  # noqa: E731
        out.insert(0, html.P(t(lang, "p56.compared", setting=reference["setting"], changed=names(changed),
                               kept=names(kept) or "–"), id="p56-changes", className="changes"))
    return ui.Out(out, memory=reference)


def _job(lang: str, v: dict) -> html.Div:
    """The full model: one NIC of the Llama 3 405B job at this line rate."""
    job = job_wire(v["rate"], v["window"], int(v["k"]), v["buffer"])
    if not isinstance(job, JobWire):
        return ui.full_box(lang, PID, [common.unmapped(lang, job)], None)
    view = job.wire.view
    line = t(lang, "p56.full", rate=fmt.line_rate(v["rate"]), bytes=fmt.data(float(view.bytes_per_step)),
             burst=fmt.time(lang, float(view.burst_s)), step=fmt.time(lang, float(view.step_s)),
             duty=fmt.percent(float(view.duty_cycle)), k=fmt.number(v["k"]), excess=fmt.data(float(view.buffer_bytes)))
    return ui.full_box(lang, PID, [html.P(line)], job.command)


def _counter(lang: str, w: fo.WireTiles) -> str:
    """When the counter polls: over whole steps it always reads the average; otherwise a range, by phase."""
    low, high = fmt.line_rate(float(w.counter_min_Bps)), fmt.line_rate(float(w.counter_max_Bps))
    window = fmt.time(lang, float(w.window_s))
    return t(lang, "p56.n.counter_steady", window=window) if low == high else t(
        lang, "p56.n.counter", window=window, low=low, high=high)


def _setting(lang: str, v: dict) -> str:
    """The setting a comparison starts from, in a few words: 25% at 400 Gb/s, a 200 ms step."""
    shape = fmt.percent(v["duty"]) if v["by"] == "duty" else fmt.time(lang, v["burst"])
    return t(lang, f"p56.setting.{v['by']}", shape=shape, rate=fmt.line_rate(v["rate"]), step=fmt.time(lang, v["step"]))


def _bursts(v: dict) -> dict | None:
    """The burst train the panel's tiles describe, as the figures take it (None where the burst outlasts the step:
    the panel says so)."""
    burst = v["burst"] if v["by"] == "burst" else v["duty"] * v["step"]
    return {"step_s": v["step"], "burst_s": burst} if 0 < burst <= v["step"] else None


JOB = "llama3-405b"
"""The job whose host the figures draw (its NICs a host, the line rate as the panel sets it): the full model's."""


def _figure_job(v: dict, **options) -> figs.Job | None:
    """Figure 5.8's and Animation 5.2's job: the panel's line rate, step and burst, on a host of the full model's."""
    shape = _bursts(v)
    return None if shape is None else figs.Job(JOB, (f"cluster.nic_Bps={v['rate']:.6g}",), shape | options)


def _echo(spec: Field, value: float) -> float:
    """How near a greyed field's value may be to what it shows and still be its own, not a reader's typing: half
    its slider's step (the slider writes back a value it snapped), and 1 % at least."""
    slider = spec.slider
    half = 0.0
    if slider is not None:
        step = slider.ends()[2] / 2
        half = step if slider.scale == "linear" else value * (10 ** step - 1) if slider.scale == "log" else 0.0
    return max(half, 0.01 * value)


def _derived(value: float, kind: str) -> str:
    """A derived field's text, as a reader would type it: 25%, 100 ms."""
    return f"{value * 100:.4g}%" if kind == "fraction" else fmt.time("en", value)  # typed units are English


def register(app) -> None:
    ui.register(app, PID, CONTROLS, compute, remember=True, buttons=("pin",))
    ui.register_questions(app, PID, QUESTIONS, CONTROLS)
    figs.register(app, PID, CONTROLS, (("5.8", _figure_job),
                                       ("anim-5.2", lambda v: _figure_job(v, window_s=v["window"]))),
                  common.unmapped_text)
    fields = {spec.name: spec for spec in CONTROLS}

    @app.callback(Output(ui.cid(PID, "by"), "value"), Output(ui.cid(PID, "duty"), "value"),
                  Output(ui.cid(PID, "burst"), "value"), Input(ui.cid(PID, "duty"), "value"),
                  Input(ui.cid(PID, "burst"), "value"), Input(ui.cid(PID, "step"), "value"),
                  State(ui.cid(PID, "by"), "value"))
    def _typed(duty, burst, step, by):
        """The field a reader types in sets the burst; the other one, greyed, shows what that makes it. A value
        in the greyed field that is already what it shows (written here, or moved there by its slider) is not a
        reader's typing and changes nothing."""
        text = {"duty": duty, "burst": burst}
        try:
            v = {name: fields[name].read(value) for name, value in (*text.items(), ("step", step))}
        except FieldError:
            return no_update, no_update, no_update  # the panel says which field
        made = {"duty": v["burst"] / v["step"], "burst": v["duty"] * v["step"]}  # each as the other makes it
        typed = {ui.cid(PID, "duty"): "duty", ui.cid(PID, "burst"): "burst"}.get(callback_context.triggered_id, by)
        if typed != by and abs(v[typed] - made[typed]) <= _echo(fields[typed], v[typed]):
            typed = by
        other = "burst" if typed == "duty" else "duty"
        written = _derived(made[other], fields[other].kind)
        out = {"duty": no_update, "burst": no_update}
        try:  # a burst longer than the step makes no duty cycle: the panel says so, and the greyed field stays
            if abs(fields[other].read(written) - v[other]) > 1e-9 * v[other]:
                out[other] = written
        except FieldError:
            pass
        return no_update if typed == by else typed, out["duty"], out["burst"]

    @app.callback(Output(ui.cid(PID, "duty"), "className"), Output(ui.cid(PID, "burst"), "className"),
                  Input(ui.cid(PID, "by"), "value"))
    def _live(by):  # the other one is greyed: the panel derives it
        return ("", "derived") if by == "duty" else ("derived", "")
