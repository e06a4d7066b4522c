"""The chapter's figures and animations as plotly figure dicts, in either language: one builder per ID.

``build(ident, lang, ref, sets)`` returns the figure for a scenario (the chapter's by default); ``render.write``
writes it as HTML, PNG or SVG. The web panels show the same dicts. Every text comes from the catalogs
(views/catalogs, keys ``fig.*``), every number from the library, except the published measurements
Figure 5.6 draws, which cite their source where they are kept (measured.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from stepbudget.inputs.scenario import ScenarioError
from stepbudget.chapter.figures import analytic, measured, timeline, traffic
from stepbudget.views.i18n import t


@dataclass(frozen=True)
class Figure:
    ident: str
    default: str | None
    """The scenario the chapter's figure shows; None for a figure of published runs, which takes none."""
    build: Callable[..., dict]

    def describe(self, lang: str = "en") -> str:
        return t(lang, f"fig.list.{self.ident}")

    def job(self, lang: str = "en") -> str:
        """What it is drawn for when no scenario is named: a preset, or the runs."""
        return t(lang, "fig.job.runs") if self.default is None else self.default


FIGURES = {f.ident: f for f in (
    Figure("5.1", "llama3-405b", timeline.one_step),
    Figure("5.2", "llama3-405b", analytic.roofline),
    Figure("5.3", "llama3-405b", analytic.ring),
    Figure("5.4", "llama3-405b", measured.strong_scaling),
    Figure("5.5", None, measured.measured_points),
    Figure("5.6", "megascale-moe-352b", measured.fused_kernels),
    Figure("5.7", "megascale-moe-352b", traffic.skew_in_one_call),
    Figure("5.8", "hpn-gpt3-175b", analytic.host_nics),
    Figure("5.9", "llama3-405b", analytic.context),
    Figure("anim-5.1", "llama3-405b", timeline.bucket_deadlines),
    Figure("anim-5.2", "llama3-405b", traffic.counter_window),
)}
"""The figures there are, by the chapter's number."""


def build(ident: str, lang: str = "en", ref: str | None = None, sets: list[str] | tuple[str, ...] = (),
          **options) -> dict:
    """Figure ``ident`` of scenario ``ref`` (the chapter's own when None) with ``sets`` applied, in ``lang``;
    ``options`` go to the builder (Animation 5.2's ``window_s``, a panel's ``max_tasks`` or burst shape)."""
    figure = FIGURES[ident]
    if figure.default is None and (ref or any(s.partition("=")[0].strip() != "cluster.profile" for s in sets)):
        raise ScenarioError(f"figure {ident}: it draws the published runs and takes no scenario or --set (only "
                            "--profile); stepbudget validate --runs FILE --plot FIG.png draws other runs")
    drawn = figure.build(lang, ref or figure.default, list(sets), **options)
    _wrap_titles(drawn)
    return drawn


def _wrap_titles(figure: dict) -> None:
    """Break long titles into lines (plotly does not): about 9 px a Latin letter of its 17 px title font."""
    from stepbudget.views.render import wrap

    columns = int(figure["layout"].get("width", 1000) / 9)
    for holder in [figure["layout"], *(f.get("layout", {}) for f in figure.get("frames", []))]:
        title = holder.get("title")
        if isinstance(title, dict) and "text" in title:
            title["text"] = wrap(title["text"], columns).replace("\n", "<br>")
