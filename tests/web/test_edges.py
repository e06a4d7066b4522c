"""Every panel at the edges of its controls' ranges: any value a field accepts gives an output or an inline
message, never an exception (a server error would leave the panel showing stale numbers)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from stepbudget.inputs.scenario import ScenarioError
from stepbudget.web import components as ui
from stepbudget.web.fields import Choice, Field, FieldError
from stepbudget.web.panels import PANELS

from _web import compute


def _edges(spec: Field) -> list[str]:
    low = spec.low if not spec.low_open else spec.low + 1 if spec.kind in ("count", "integer") else spec.low * 1.01 or 1e-3
    values = [low, spec.high, spec.read(spec.default)]
    if spec.kind in ("count", "integer"):
        return [str(int(v)) for v in values] + ["1", "2", "3", "7"]
    units = {"rate": "B/s", "flops": "FLOP/s", "bytes": "B", "time": "s"}
    return [f"{v:.12g} {units[spec.kind]}" if spec.kind in units else f"{v:.12g}" for v in values]


def _accepted(spec: Field, value: str) -> bool:
    try:
        spec.read(value)
        return True
    except FieldError:
        return False


CASES = [(panel, spec.name, value) for panel in PANELS for spec in panel.CONTROLS if isinstance(spec, Field)
         for value in _edges(spec) if _accepted(spec, value)]
CHOICES = [(panel, spec.name, option) for panel in PANELS for spec in panel.CONTROLS if isinstance(spec, Choice)
           for option in spec.options]


def run(panel, **changes):
    try:
        compute(panel, **changes)
    except (ui.PanelProblem, ScenarioError):
        pass  # an inline message, or the full model's one line


def test_every_field_at_its_bounds_alone():
    for panel, name, value in CASES:
        run(panel, **{name: value})


@settings(max_examples=300, deadline=None)
@given(picks=st.lists(st.sampled_from(CASES + CHOICES), min_size=2, max_size=5), lang=st.sampled_from(["en", "zh-Hant"]))
def test_edges_together(picks, lang):
    panel = picks[0][0]
    changes = {name: value for p, name, value in picks if p is panel}
    try:
        compute(panel, lang, **changes)
    except (ui.PanelProblem, ScenarioError):
        pass
