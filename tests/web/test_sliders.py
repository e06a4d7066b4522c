"""The sliders beside the text fields and the chapter's "try it" questions, in a real browser.

The page reads a field's text in JavaScript only to place its slider; the server reads it with ``units.parse``.
The two must agree on every spelling a reader may type, and a dragged value must be written so that the server
reads back what the slider shows. Expected panel values come from the library's first-order functions.
"""

from __future__ import annotations

import itertools

import pytest
from playwright.sync_api import expect

from stepbudget.api import firstorder as fo
from stepbudget.views import fmt
from stepbudget.web.fields import Field, FieldError, _read
from stepbudget.web.panels import PANELS, p54

from _web import load, shows, type_in

NUMBERS = ("0.5", "1", "3", "16", "400", "989", "3.35", "1e3", "16,384", "2.5e-2", "1_000")
UNITS = {
    "count": ("", "k", "M", "G", "T", "B", "Ki", "Mi", "Gi", "x", "KB"),
    "integer": ("",),
    "rate": ("Gb/s", "GB/s", "TB/s", "Mbps", "kB/s", "Tb/s", "GiB/s", "", "GFLOP/s", "ms"),
    "flops": ("TFLOP/s", "PFLOPS", "GFLOPs/s", "FLOP/s", "", "TB/s"),
    "time": ("s", "ms", "us", "µs", "ns", "min", "h", "", "sec"),
    "bytes": ("B", "MB", "GB", "KiB", "MiB", "GiB", "Mb", "", "MB/s"),
    "fraction": ("", "%"),
}
"""Spellings a reader may type, each kind's valid units and a few that its parser refuses."""


def python_reads(kind: str, text: str) -> float | None:
    try:
        return _read(kind, text, "")
    except FieldError:
        return None


def cases():
    for kind, units in UNITS.items():
        for number, unit, space in itertools.product(NUMBERS, units, ("", " ")):
            yield kind, f"{number}{space}{unit}"
    yield from (("count", "1,5"), ("rate", "-4 Gb/s"), ("time", "fast"), ("count", " "), ("fraction", "25 %"))


def test_the_page_reads_a_fields_text_as_the_server_does(watched, server):
    page = watched
    load(page, server)
    texts = list(cases())
    read_here = page.evaluate("xs => xs.map(([k, s]) => window.dash_clientside.stepbudget.read(s, k))", texts)
    disagree = []
    for (kind, text), js in zip(texts, read_here):
        py = python_reads(kind, text)
        if py is None and kind in ("count", "integer") and js is not None and js != int(js):
            continue  # a count that is not whole: the server says so; the slider may still sit near it
        if (py is None) != (js is None) or (py is not None and abs(py - js) > 1e-9 * abs(py)):
            disagree.append((kind, text, py, js))
    assert len(texts) > 500 and disagree == [], disagree


def test_a_dragged_value_is_written_as_the_field_writes_its_default(watched, server):
    """For every field with a slider: the page writes its default's value back in the default's own spelling."""
    page = watched
    load(page, server)
    fields = [(f"{panel.PID}-{spec.name}", spec) for panel in PANELS for spec in panel.CONTROLS
              if isinstance(spec, Field) and spec.slider]
    specs = [{**spec.shown_as(), "id": ident} for ident, spec in fields]
    values = [spec.read(spec.default) for _, spec in fields]
    written = page.evaluate("([s, v]) => s.map((spec, i) => window.dash_clientside.stepbudget.shown(spec, v[i]))",
                            [specs, values])
    assert len(fields) >= 30
    assert {ident: w for (ident, spec), w in zip(fields, written) if w != spec.default} == {}


def first_order(**typed: str) -> fo.StrongScaling:
    """Panel 5.4's first-order step at its defaults with ``typed`` in its fields."""
    v = {c.name: c.read(typed.get(c.name, c.default)) for c in p54.CONTROLS}
    return fo.strong_scaling(v["N"], v["G"], v["B"], v["M"], v["nic"], v["F"], v["phi"], v["peak"])


def test_the_slider_moves_the_panel_and_typing_moves_the_slider(watched, server):
    page = watched
    load(page, server)
    thumb = page.locator("#p54-G-slider [role=slider]")
    expect(thumb).to_have_attribute("aria-valuenow", "14")  # 16,384 GPUs: 2^14 on a powers-of-two slider
    thumb.focus()
    page.keyboard.press("ArrowRight")
    expect(page.locator("#p54-G")).to_have_value("32,768")
    expect(page.locator("#p54-t-compute .value")).to_have_text(fmt.time("en", float(first_order(G="32,768").compute_s)))
    type_in(page, "p54-G", "8192")
    expect(thumb).to_have_attribute("aria-valuenow", "13")
    expect(page.locator("#p54-t-compute .value")).to_have_text(fmt.time("en", float(first_order(G="8192").compute_s)))


@pytest.mark.parametrize("key, field, typed", [("m1", "M", "1"), ("big", "G", "131,072")])
def test_try_it_sets_the_controls_and_the_answer_matches_the_panel(watched, server, key, field, typed):
    page = watched
    load(page, server)
    type_in(page, "p54-N", "70B")  # a reader's own change: the question starts from the chapter's numbers again
    page.click(f"#p54-try-{key}")
    expect(page.locator(f"#p54-{field}")).to_have_value(typed)
    expect(page.locator("#p54-N")).to_have_value("405B")
    step = first_order(**{field: typed})
    expect(page.locator("#p54-t-share .value")).to_have_text(fmt.percent(float(step.comm_share)))
    answer = {"m1": p54._answer_m1, "big": p54._answer_big}[key]("en")
    assert answer["share"] == shows(page, "p54-t-share")
    page.click(f"#p54-q-{key} summary")
    expect(page.locator(f"#p54-q-{key} details p")).to_contain_text(answer["share"])
