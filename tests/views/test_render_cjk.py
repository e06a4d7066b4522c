"""Chinese in PNG and SVG figures (render.write): drawn in the package's font on a machine without a CJK font of
its own (this one, CI), whose browser finds it through render's fontconfig file; an SVG with Chinese carries the
font inside; a figure without Chinese is written as before. The images come from the process's one browser."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from stepbudget.views import render
from stepbudget.views.render import FONT_DIR, FONT_FAMILY

SVG = "{http://www.w3.org/2000/svg}"


def _figure(*texts: str) -> dict:
    """Each text large, centred in its own 120 px column of a figure that has nothing else: the same glyph draws
    the same pixels in each column."""
    n = len(texts)
    notes = [{"text": text, "x": (i + 0.5) / n, "y": 0.5, "xref": "paper", "yref": "paper", "xanchor": "center",
              "showarrow": False, "font": {"size": 64}} for i, text in enumerate(texts)]
    return {"data": [], "layout": {"width": 120 * n, "height": 120, "margin": {"l": 0, "r": 0, "t": 0, "b": 0},
                                   "xaxis": {"visible": False}, "yaxis": {"visible": False}, "annotations": notes}}


def test_a_png_draws_two_chinese_characters_as_two_glyphs_not_two_boxes(tmp_path):
    import matplotlib.image

    # a missing glyph is one box whatever the character: two characters drawn alike are two boxes
    render.write(_figure("步", "驟"), tmp_path / "f.png")
    pixels = matplotlib.image.imread(tmp_path / "f.png")[..., :3]
    first, second = pixels[:, :120], pixels[:, 120:]
    assert (first < 0.5).any() and (second < 0.5).any(), "nothing drawn"
    assert not np.array_equal(first, second), "步 and 驟 are drawn alike, as boxes"


def test_an_svg_with_chinese_names_the_font_first_and_carries_it(tmp_path):
    render.write(_figure("步驟", "GPU"), tmp_path / "f.svg")
    svg = (tmp_path / "f.svg").read_bytes()
    root = ET.fromstring(svg)
    style = root[0]  # the root's first child: declared before any text
    assert style.tag == SVG + "style"
    face = re.fullmatch(r'@font-face \{ font-family: "(.+)"; src: url\(data:font/woff2;base64,([A-Za-z0-9+/=]+)\) '
                        r'format\("woff2"\); unicode-range: (.+); \}', style.text)
    assert face and face.group(1) == FONT_FAMILY and face.group(3) == render.unicode_range()
    assert base64.b64decode(face.group(2)) == (FONT_DIR / "stepbudget-tc.woff2").read_bytes()
    families = {el.get("style").split("font-family: ")[1].split(";")[0] for el in root.iter(SVG + "text")}
    assert families == {f"'{FONT_FAMILY}', 'Open Sans', verdana, arial, sans-serif"}  # then plotly's own, for Latin


def test_a_figure_without_chinese_is_written_as_before(tmp_path):
    render.write(_figure("GPU", "5.4"), tmp_path / "f.svg")
    svg = (tmp_path / "f.svg").read_bytes()
    assert b"<style" not in svg and FONT_FAMILY.encode() not in svg
    assert b"font-family: 'Open Sans', verdana, arial, sans-serif;" in svg


@pytest.mark.parametrize("node,chinese", [
    ("Step time", False), ("每步時間", True), ("（", True), ({"a": [1.0, 2.0, {"b": ("x", "秒")}]}, True),
    (np.array(["GPU", "步驟"]), True), (np.array([[1.0, 2.0]]), False), (np.array(["a", None], dtype=object), False),
])
def test_has_cjk_finds_chinese_anywhere_in_a_figure(node, chinese):
    assert render.has_cjk(node) is chinese


def test_the_fontconfig_file_adds_the_otf_to_the_machines_own_fonts(tmp_path):
    conf = tmp_path / "fonts.conf"
    conf.write_text(render._fontconfig(None))
    text = conf.read_text()
    assert "<include ignore_missing=\"yes\">fonts.conf</include>" in text and f"<dir>{FONT_DIR}</dir>" in text
    assert '<include ignore_missing="yes">/my/fonts.conf</include>' in render._fontconfig("/my/fonts.conf")
    if shutil.which("fc-list") is None:  # fontconfig's own tools: where they are, read the file as the browser does
        return
    env = {"FONTCONFIG_FILE": str(conf), "PATH": "/usr/bin:/bin"}
    listed = subprocess.run(["fc-list", "--format", "%{family}|%{file}\n"], env=env, capture_output=True, text=True,
                            timeout=60).stdout.splitlines()
    ours = [line for line in listed if line.startswith(FONT_FAMILY + "|")]
    assert ours == [f"{FONT_FAMILY}|{FONT_DIR / 'stepbudget-tc.otf'}"]  # the OpenType file alone, not the WOFF2
    assert len(listed) > len(ours)  # and the machine's own fonts still
