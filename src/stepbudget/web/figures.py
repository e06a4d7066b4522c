"""The chapter's figures in the panels: each panel names its figures and how its controls choose their job.

A panel lists ``(figure ID, job)`` pairs, where ``job(values)`` turns the panel's read controls into what
``chapter.figures.build`` takes: a scenario (None for the figure's own), overrides and options, an
``Unmapped`` (chapter/panels.py) when the controls name no job, or None when the panel refuses them itself (and
says why). Each figure has its own callback, so that the panel's numbers do not wait for a simulated step; a field
that does not read, or a job of None, leaves the figure as it was.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable

from dash import Input, Output, State, dcc, html, no_update

from stepbudget.api import FIGURES, FullModel, ScenarioError, TooLarge, UnitError, Unmapped
from stepbudget.api import build_figure as build
from stepbudget.views import fmt
from stepbudget.views.i18n import t
from stepbudget.web.fields import FieldError


@dataclass(frozen=True)
class Job:
    """What a figure is drawn for: ``build(ident, lang, ref, sets, **options)``."""

    ref: str | None = None
    sets: tuple[str, ...] = ()
    options: dict = field(default_factory=dict)


def of(full: FullModel | Unmapped, **options) -> Job | Unmapped:
    """The job of a panel's full model (the scenario its 'full model says' box budgets)."""
    return Job(full.ref, full.sets, options) if isinstance(full, FullModel) else full


PAGE_TASKS = 20_000
"""Most tasks a panel simulates for Figure 5.1 (about 2 s on one core; the chapter's job is 8,433)."""


CONFIG: dcc.Graph.Config = {"displaylogo": False, "responsive": True, "modeBarButtonsToRemove": ["toImage"]}


def graph_id(ident: str) -> str:
    return "fig-" + ident.replace(".", "-")


def graphs(lang: str, idents: tuple[str, ...]) -> list:
    """The figure area's children: each figure under its heading (what it shows, from the catalog)."""
    return [html.Figure([dcc.Loading(dcc.Graph(id=graph_id(i), config=CONFIG), type="dot"),
                         html.Figcaption(t(lang, f"fig.list.{i}"))], className="chapter-figure", id=f"{graph_id(i)}-box")
            for i in idents]


def notice(lang: str, text: str) -> dict:
    """A figure that says why it cannot be drawn for these controls."""
    return {"data": [], "layout": {"height": 120, "xaxis": {"visible": False}, "yaxis": {"visible": False},
                                   "annotations": [{"text": text, "showarrow": False, "xref": "paper", "yref": "paper",
                                                    "x": 0.5, "y": 0.5}]}}


@functools.lru_cache(maxsize=128)
def drawn(ident: str, lang: str, ref: str | None, sets: tuple[str, ...], options: tuple) -> dict:
    """A figure as the page shows it, at the page's width; kept, since every reader opens the same defaults
    (Dash only reads the dict it is given)."""
    figure = build(ident, lang, ref, sets, **dict(options))
    figure["layout"].pop("width", None)  # plotly sizes it to its box
    _fit_texts(figure)
    return figure


TITLE = (14, 80, 18)
"""A figure's title on the page: its font size, the letters a line holds in a box of about 650 pixels (a panel's
figure area), and the pixels a line takes. Plotly breaks no line: a title wrapped for the file's 1,000 pixels
would run past the box."""
NOTE = (100, 15)
"""A note under a title (an annotation named "note"): letters a line and pixels a line, at its 12-pixel font."""


def _fit_texts(figure: dict) -> None:
    """Titles and notes wrapped again for the page's narrower figure boxes, the top margin grown by the lines
    they gain, so that the title, a note and an animation's buttons under it keep clear of one another."""
    from stepbudget.views.render import wrap

    size, columns, line = TITLE
    layout = figure["layout"]
    titles = [h["title"] for h in [layout, *(f.get("layout", {}) for f in figure.get("frames", []))]
              if isinstance(h.get("title"), dict) and "text" in h["title"]]
    before = max((x["text"].count("<br>") for x in titles), default=0)
    for title in titles:
        title["text"] = wrap(title["text"].replace("<br>", " "), columns).replace("\n", "<br>")
        title.setdefault("font", {})["size"] = size
    extra = (max((x["text"].count("<br>") for x in titles), default=0) - before) * line
    notes = [a for a in layout.get("annotations", []) if a.get("name") == "note"]
    for note in notes:
        lines = note["text"].count("<br>")
        note["text"] = wrap(note["text"].replace("<br>", " "), NOTE[0]).replace("\n", "<br>")
        extra += (note["text"].count("<br>") - lines) * NOTE[1]
    if extra > 0:
        margin = layout.setdefault("margin", {})
        margin["t"] = margin.get("t", 100) + extra


def register(app, pid: str, specs: tuple, figures: tuple[tuple[str, Callable[[dict], Job | Unmapped | None]], ...],
             unmapped: Callable[[str, Unmapped], str]) -> None:
    """One callback per figure: the panel's controls -> its job -> the figure, in the page's language."""
    inputs = [Input(f"{pid}-{s.name}", "value") for s in specs]
    for ident, job_of in figures:
        def _draw(*raw, _job_of=job_of, _ident=ident):
            lang = raw[-1]
            try:
                values = {s.name: s.read(v) for s, v in zip(specs, raw[:-1])}
            except FieldError:
                return no_update  # the panel says which field; the figure keeps what it showed
            job = _job_of(values)
            if job is None:
                return no_update  # the panel says what is wrong with its controls
            if isinstance(job, Unmapped):
                return notice(lang, unmapped(lang, job))
            try:
                return drawn(_ident, lang, job.ref, job.sets, tuple(sorted(job.options.items())))
            except TooLarge as e:  # the page answers in about a second; the command line draws any step
                command = " ".join(["stepbudget figure", _ident, *([job.ref] if job.ref else []),
                                    *(f"--set {x}" for x in job.sets), "--out step.html"])
                return notice(lang, t(lang, "fig.too_large", tasks=fmt.number(e.tasks), limit=fmt.number(e.limit),
                                      command=command))
            except (ScenarioError, UnitError) as e:
                return notice(lang, t(lang, "app.refused", why=str(e)))

        app.callback(Output(graph_id(ident), "figure"), *inputs, State("lang", "data"))(_draw)
    assert all(ident in FIGURES for ident, _ in figures)
