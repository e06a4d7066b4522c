"""The pieces every panel is built from: sections, controls, tiles, tables, the full model's box, and the
callback plumbing that reads the controls, shows each bad one's message under it, and calls the panel.

A panel is a module with ``PID``, ``CONTROLS`` (Field and Choice specs), ``layout(lang, state)`` and
``compute(lang, values)``; ``register`` wires it: controls -> compute -> the panel's output (plain HTML
ending with the controls' values, which assets/stepbudget.js keeps in the page's URL).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from html import escape
from typing import Any, Callable, Iterable, TypedDict
from urllib.parse import urlencode

from dash import Input, Output, State, callback_context, dcc, html, no_update

from stepbudget.api import ScenarioError
from stepbudget.views import fmt
from stepbudget.web.fields import Choice, Field, FieldError
from stepbudget.views.i18n import t

Control = Field | Choice

Hyphenated = TypedDict("Hyphenated", {"data-copy": str, "data-query": str, "aria-label": str, "data-field": str,
                                      "data-spec": str}, total=False)
"""The hyphenated attributes the page sets, which dash takes as wildcard keyword arguments: a keyword can't
be written with a hyphen, and ``**`` of a plain dict could hold any of the component's typed arguments."""


class PanelProblem(ValueError):
    """Controls that can't go together: each (field, code, values) is shown under that field, as err.<code>."""

    def __init__(self, field: str = "", code: str = "", problems: list[tuple[str, str, dict]] | None = None, **values):
        super().__init__(code)
        self.problems = problems if problems is not None else [(field, code, values)]


def cid(pid: str, name: str) -> str:
    return f"{pid}-{name}"


def section(lang: str, pid: str, controls: list, out_children: list | None = None, extra: Iterable = (),
            figure: list | None = None, questions: tuple[Question, ...] = ()) -> html.Section:
    """A panel: its label and heading, caption, controls, the output, its figures beside them on a wide screen,
    and the chapter's questions for it."""
    return html.Section(id=pid, className="panel", children=[
        html.H3([html.Span(t(lang, "page.panel", number=t(lang, f"{pid}.number")), className="number"), " ",
                 t(lang, f"{pid}.heading")]),
        html.P(t(lang, f"{pid}.caption"), className="caption"),
        *extra,
        html.Div(className="panel-body", children=[
            html.Div(className="panel-main", children=[
                html.Div([*controls, html.P(t(lang, "page.hint"), className="hint")], className="controls"),
                dcc.Markdown(html_of(out_children or []), id=cid(pid, "out"), className="out",
                             dangerously_allow_html=True),
                *([html.Div([ask(lang, pid, q) for q in questions], className="questions")] if questions else []),
            ]),
            html.Div(figure or [], id=cid(pid, "figure"), className="figure-area"),
        ]),
    ])


@dataclass(frozen=True)
class Question:
    """One of the chapter's questions to the reader of a panel: ``key`` names its catalog texts (q.<pid>.<key>.ask
    and .answer); ``sets`` are the controls its "try it" button types, as a reader would."""

    key: str
    sets: tuple[tuple[str, str], ...]
    answer: Callable[[str], dict] = lambda lang: {}
    """The answer's values, in ``lang``: numbers the library computes for the setting."""


def ask(lang: str, pid: str, q: Question) -> html.Div:
    """The question, its "try it" button and its answer, hidden until the reader opens it."""
    return html.Div(className="question", id=cid(pid, f"q-{q.key}"), children=[
        html.P([html.Span(t(lang, "page.question"), className="label"), " ", t(lang, f"q.{pid}.{q.key}.ask")]),
        html.Button(t(lang, "page.try"), id=cid(pid, f"try-{q.key}"), className="try"),
        html.Details([html.Summary(t(lang, "page.answer")),
                      html.P(t(lang, f"q.{pid}.{q.key}.answer", **q.answer(lang)))]),
    ])


def register_questions(app, pid: str, questions: tuple[Question, ...], specs: tuple[Control, ...]) -> None:
    """The "try it" buttons: each types its setting into the panel's controls, the other text fields back at their
    defaults (so the answer's numbers hold), and the panel updates as for a reader."""
    names = [s.name for s in specs if isinstance(s, Field) or any(s.name in dict(q.sets) for q in questions)]
    defaults = {s.name: s.default for s in specs}

    @app.callback([Output(cid(pid, n), "value", allow_duplicate=True) for n in names],
                  [Input(cid(pid, f"try-{q.key}"), "n_clicks") for q in questions], prevent_initial_call=True)
    def _try(*_clicks: Any) -> list:
        chosen = next((q for q in questions if cid(pid, f"try-{q.key}") == callback_context.triggered_id), None)
        if chosen is None:
            return [no_update] * len(names)
        return [dict(chosen.sets).get(n, defaults[n]) for n in names]


def field(lang: str, pid: str, f: Field, value: str) -> html.Div:
    """A labelled text control, its slider where it has one, and the place its message goes."""
    ident = cid(pid, f.name)
    return html.Div(className="field", children=[
        html.Label(t(lang, f"{pid}.f.{f.name}"), htmlFor=ident),
        dcc.Input(id=ident, value=value, type="text", debounce=True, autoComplete="off", spellCheck=False),
        *([slider(ident, f, value)] if f.slider else []),
        html.Div(id=f"{ident}-error", className="field-error", role="alert"),
    ])


def slider(ident: str, f: Field, value: str) -> html.Div:
    """The slider under a text field, at the field's value (or its default, when the value does not read).

    The page's script (assets/stepbudget.js) keeps the two together without a callback, which would make every
    typed change wait for it: a moved slider writes the field in its default's spelling (throttled, so the panel
    follows while the reader drags), and a field that changed moves its slider once the panel has answered."""
    assert f.slider is not None
    low, high, step = f.slider.ends()
    try:
        at = f.slider.position(f.read(value))
    except FieldError:
        at = f.slider.position(f.read(f.default))
    return html.Div(dcc.Slider(id=f"{ident}-slider", min=low, max=high, step=step, value=min(max(at, low), high),
                               marks=None, included=False, updatemode="mouseup", allow_direct_input=False),
                    className="slider", **Hyphenated({"data-field": ident, "data-spec": json.dumps(
                        {**f.shown_as(), "scale_kind": f.slider.scale})}))


def choice(lang: str, pid: str, c: Choice, value) -> html.Div:
    """Radio buttons, or check boxes for a choice of many, labelled from the catalog."""
    ident = cid(pid, c.name)
    options = [{"label": t(lang, f"{pid}.o.{c.name}.{o}"), "value": o} for o in c.options]
    box = (dcc.Checklist(id=ident, options=options, value=list(value), inline=True) if c.many
           else dcc.RadioItems(id=ident, options=options, value=value, inline=True))
    return html.Div(className="field choice", children=[
        html.Label(t(lang, f"{pid}.f.{c.name}"), htmlFor=ident),
        box,
        html.Div(id=f"{ident}-error", className="field-error", role="alert"),
    ])


def controls(lang: str, pid: str, specs: Iterable[Control], state: dict) -> list[html.Div]:
    """Every control of a panel, at its value from the URL (``state``) or its default."""
    out = []
    for spec in specs:
        given = state.get(cid(pid, spec.name))
        if isinstance(spec, Field):
            out.append(field(lang, pid, spec, given if given is not None else spec.default))
        else:
            out.append(choice(lang, pid, spec, spec.read(given) if given is not None else spec.default))
    return out


def tile(ident: str, label: str, value: str, note: str = "", flag: str = "") -> html.Div:
    """One figure: label, value, a short note; ``flag`` (good, bad, changed) colours it."""
    return html.Div(id=ident, className=f"tile {flag}".strip(), children=[
        html.Div(label, className="label"), html.Div(value, className="value"),
        *([html.Div(note, className="note")] if note else []),
    ])


def table(ident: str, header: list[str], rows: list[list], classes: list[str] | None = None) -> html.Table:
    return html.Table(id=ident, className="grid", children=[
        html.Thead(html.Tr([html.Th(h) for h in header])),
        html.Tbody([html.Tr([html.Td(c) for c in row], className=(classes or [""] * len(rows))[i])
                    for i, row in enumerate(rows)]),
    ])


def command(lang: str, ident: str, text: str) -> html.Div:
    """The command line that prints the same numbers, with a copy button."""
    return html.Div(className="command", children=[
        html.Span(t(lang, "app.command"), className="label"),
        html.Code(text, id=ident),
        html.Button(t(lang, "app.copy"), className="copy", **Hyphenated({"data-copy": ident})),
    ])


def full_box(lang: str, pid: str, lines: list, cmd: str | None) -> html.Div:
    """"The full model says: ...", with the command that reproduces it."""
    return html.Div(id=cid(pid, "full"), className="full-model", children=[
        html.H3(t(lang, "app.full_model")), *lines, *([command(lang, cid(pid, "command"), cmd)] if cmd else []),
    ])


@dataclass(frozen=True)
class Out:
    """What a panel's compute returns when it has more than the output's children: what to keep for next time
    (``register(remember=True)``) and the figure area's figure (``register(figure=True)``)."""

    children: list
    memory: object = None
    figure: object = None


_ATTRIBUTES = {"id": "id", "className": "class", "title": "title", "role": "role", "colSpan": "colspan",
               "data-copy": "data-copy", "data-query": "data-query"}
_VOID = {"br", "hr"}
_BRACES = str.maketrans({"{": "&#123;", "}": "&#125;"})
"""The Markdown component drops a block with a bare brace in it (a command with --set 'model.moe={...}')."""


def _text(value: object, quote: bool) -> str:
    return escape(str(value), quote=quote).translate(_BRACES)


def html_of(node) -> str:
    """A tree of dash.html components as one line of HTML, every text and attribute escaped.

    Panels build their output from dash.html components, and the page shows it as one component (a Markdown
    of raw HTML): the renderer's cost per update grows with the number of components on the page, and a
    table of a hundred cells is a hundred components.
    """
    if node is None:
        return ""
    if isinstance(node, (str, int, float)):
        return _text(node, quote=False)
    if isinstance(node, (list, tuple)):
        return "".join(html_of(n) for n in node)
    if getattr(node, "_namespace", None) != "dash_html_components":
        raise TypeError(f"{type(node).__name__}: only dash.html components and text can be written as HTML")
    tag = type(node).__name__.lower()
    attrs = "".join(f' {name}="{_text(value, quote=True)}"' for prop, name in _ATTRIBUTES.items()
                    if (value := getattr(node, prop, None)) not in (None, ""))
    attrs += " hidden" if getattr(node, "hidden", None) else ""
    if tag in _VOID:
        return f"<{tag}{attrs}>"
    return f"<{tag}{attrs}>{html_of(getattr(node, 'children', None))}</{tag}>"


def bound(lang: str, kind: str, x: float) -> str:
    """A field's bound in its own unit, for the range messages."""
    return {"rate": fmt.rate, "flops": fmt.flops, "bytes": fmt.data, "fraction": fmt.percent}.get(
        kind, fmt.number)(x) if kind != "time" else fmt.time(lang, x)


def message(lang: str, label: str, kind: str, error: FieldError) -> str:
    values = dict(error.values)
    if "kind" in values:
        values["unit"] = t(lang, f"unit.kind.{values.pop('kind')}")
    for key in ("low", "high"):
        if key in values:
            values[key] = bound(lang, kind, values[key])
    return t(lang, f"err.{error.code}", field=label, **values)


def register(app, pid: str, specs: tuple[Control, ...], compute: Callable[..., list | Out], remember: bool = False,
             figure: str | None = None, buttons: tuple[str, ...] = ()) -> None:
    """Controls -> ``compute(lang, values)`` -> the panel's output; each bad control's message under it.

    ``compute`` returns the output's children, or raises PanelProblem naming controls; a scenario the full
    model refuses (ScenarioError) is shown as one line in the output. Nothing else is caught: a bug is a
    bug, and the tests look for it in the server's log. With ``remember``, compute also takes what it kept
    last time on this page and the ``buttons`` just pressed (``compute(lang, values, memory, pressed)``), and
    returns ``Out(children, memory=...)``; with ``figure`` (the id of a dcc.Graph), ``Out(children,
    figure=...)``. The output ends with the controls' values as a query (a hidden element that
    assets/stepbudget.js copies into the page's URL), so a reload or a shared link restores them.
    """
    kinds = {s.name: s.kind for s in specs if isinstance(s, Field)}  # the unit a message shows bounds in
    inputs = [Input(cid(pid, s.name), "value") for s in specs]
    errors_at = [f"{cid(pid, s.name)}-error" for s in specs]
    outputs = [Output(cid(pid, "out"), "children")] + [Output(e, "children") for e in errors_at]
    # the messages shown now: an unchanged one is not sent again, because the renderer's work per update
    # grows with the number of components it has ever updated, times the page's size
    states = [State("lang", "data")] + [State(e, "children") for e in errors_at]
    if remember:
        outputs.append(Output(cid(pid, "memory"), "data"))
        states.append(State(cid(pid, "memory"), "data"))
    if figure:
        outputs.append(Output(figure, "figure"))

    @app.callback(outputs, inputs + [Input(cid(pid, b), "n_clicks") for b in buttons], *states)
    def _update(*args: Any) -> list:  # the controls' values, the buttons' clicks, then the states
        n = len(specs) + len(buttons)
        raw, lang, shown = args[:len(specs)], args[n], args[n + 1:n + 1 + len(specs)]
        memory = args[n + 1 + len(specs)] if remember else None
        pressed = {b for b in buttons if cid(pid, b) == callback_context.triggered_id}
        errors = {s.name: "" for s in specs}
        values = {}
        for spec, value in zip(specs, raw):
            try:
                values[spec.name] = spec.read(value)
            except FieldError as e:
                # only a Field's read raises FieldError (a Choice falls back to its default)
                errors[spec.name] = message(lang, t(lang, f"{pid}.f.{spec.name}"), kinds[spec.name], e)
        result: list | Out = Out([html.P(t(lang, "app.fix_fields"), className="stale")], memory, no_update)
        if not any(errors.values()):
            try:
                result = compute(lang, values, memory, pressed) if remember else compute(lang, values)
            except PanelProblem as p:
                for name, code, problem in p.problems:
                    errors[name] = message(lang, t(lang, f"{pid}.f.{name}"), kinds.get(name, "count"),
                                           FieldError(code, **problem))
            except ScenarioError as e:
                result = Out([html.P(t(lang, "app.refused", why=str(e)), className="refused")], memory, no_update)
        out = result if isinstance(result, Out) else Out(result, memory)
        said = [no_update if (old or "") == new else new for old, new in zip(shown, errors.values())]
        state = html.Div(hidden=True, className="url-state", **Hyphenated({"data-query": urlencode(
            [(cid(pid, spec.name), ",".join(v) if isinstance(v, (list, tuple)) else "" if v is None else str(v))
             for spec, v in zip(specs, raw)])}))
        return [html_of([*out.children, state]), *said, *([out.memory] if remember else []),
                *([out.figure if out.figure is not None else no_update] if figure else [])]
