"""The Chinese font the package ships ("stepbudget TC", web/assets/fonts/, built by scripts/build_cjk_font.py):
it holds every character the catalogs can show, and nothing else; it is package data with its licence; and on the
zh-Hant page, in a real browser on a machine with no CJK font of its own (this one, CI), the page's text and its
figures' text are drawn in it: characters, not the identical boxes a missing glyph draws, and laid out for them."""

from __future__ import annotations

import fnmatch
import re
import tomllib
from pathlib import Path

import pytest
from fontTools.ttLib import TTFont

from stepbudget.views.i18n import LANGS, catalog, t
from stepbudget.views.render import CJK_RANGES, FONT_DIR, FONT_FAMILY, unicode_range

from _web import load

ROOT = Path(__file__).resolve().parents[2]
FONTS = ("stepbudget-tc.woff2", "stepbudget-tc.otf")
"""The page's (and an SVG's) and fontconfig's: the same font, so both must hold every character."""


def _cjk(text: str) -> set[str]:
    return {ch for ch in text if any(lo <= ord(ch) <= hi for lo, hi in CJK_RANGES)}


def shown_characters() -> set[str]:
    """Every CJK character the app and the figures can show: the catalogs' values in every language, and the
    languages' own names (the switch)."""
    return _cjk("".join([*LANGS.values(), *(v for lang in LANGS for v in catalog(lang).values())]))


@pytest.mark.parametrize("name", FONTS)
def test_the_font_holds_every_character_the_catalogs_show_and_nothing_but_cjk(name):
    font = TTFont(FONT_DIR / name)
    cmap = font.getBestCmap()
    wanted = shown_characters()
    assert len(wanted) > 300 and "步" in wanted and "，" in wanted  # the catalog's Chinese, with its punctuation
    missing = "".join(sorted(ch for ch in wanted if ord(ch) not in cmap))
    assert not missing, (f"{name} has no glyph for {missing!r}, which a catalog now shows: rebuild it, "
                         "python scripts/build_cjk_font.py SOURCE (its docstring says where to get SOURCE)")
    # Latin, digits and symbols stay with the page's other fonts: a space or a digit of this one would replace them
    assert all(any(lo <= code <= hi for lo, hi in CJK_RANGES) for code in cmap)
    assert font["name"].getDebugName(1) == FONT_FAMILY and "Open Font License" in font["name"].getDebugName(13)


def test_the_font_and_its_licence_are_package_data():
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["stepbudget"]
    package = ROOT / "src" / "stepbudget"
    for name in (*FONTS, "OFL.txt"):
        path = FONT_DIR / name
        assert path.is_file()
        assert any(fnmatch.fnmatch(str(path.relative_to(package)), p) for p in patterns), f"{name} is not package data"
    licence = (FONT_DIR / "OFL.txt").read_text()
    assert "SIL OPEN FONT LICENSE Version 1.1" in licence and "Adobe" in licence and "TERMINATION" in licence


def test_the_page_declares_the_font_for_cjk_alone_and_puts_it_first():
    css = (ROOT / "src" / "stepbudget" / "web" / "assets" / "cjk.css").read_text()
    face = re.search(r"@font-face\s*{(.*?)}", css, re.S).group(1)
    assert f'font-family: "{FONT_FAMILY}";' in face and f"unicode-range: {unicode_range()};" in face
    source = re.search(r"url\(([^)]+)\)", face).group(1)
    assert (ROOT / "src" / "stepbudget" / "web" / "assets" / source).resolve() == FONT_DIR / "stepbudget-tc.woff2"
    style = (ROOT / "src" / "stepbudget" / "web" / "assets" / "style.css").read_text()
    assert re.search(rf'body {{[^}}]*font: 15px/1.5 "{FONT_FAMILY}",', style), "the page's font stack starts with it"


# --- in a browser -------------------------------------------------------------------------------------------

GLYPHS = """([selector, chars]) => {
    // each character drawn alone, in the font the page gives ``selector``, on a canvas of its own (the page is
    // left as it is): its pixels, as one string
    const family = getComputedStyle(document.querySelector(selector)).fontFamily;
    const canvas = document.createElement("canvas");
    canvas.width = canvas.height = 64;
    const ctx = canvas.getContext("2d");
    ctx.font = `48px ${family}`;
    return chars.map(ch => {
        ctx.clearRect(0, 0, 64, 64);
        ctx.fillText(ch, 8, 52);
        return Array.from(ctx.getImageData(0, 0, 64, 64).data.filter((_, i) => i % 4 === 3)).join(",");
    });
}"""
"""A missing glyph is drawn as the same box whatever the character: two different characters drawn alike are
two boxes."""


def test_the_chinese_page_and_its_figures_are_drawn_in_the_shipped_font(watched, server):
    page = watched
    load(page, server, "?lang=zh-Hant")
    page.wait_for_selector(".js-plotly-plot .legendtext")
    faces = page.evaluate("""async () => { await document.fonts.ready;
        return [...document.fonts].map(f => [f.family.replace(/"/g, ""), f.status, f.unicodeRange]); }""")
    assert [FONT_FAMILY, "loaded", unicode_range()] in faces  # the page's own Chinese made the browser load it
    title = t("zh-Hant", "app.title")
    assert page.evaluate("([font, text]) => document.fonts.check(font, text)", [f'15px "{FONT_FAMILY}"', title])
    chars = sorted(_cjk(title))[:2]
    for selector in ("h1", ".js-plotly-plot .main-svg text.gtitle", ".js-plotly-plot .main-svg text.legendtext"):
        first, second = page.evaluate(GLYPHS, [selector, chars])
        alike, blank = first == second, not (first.strip("0,") and second.strip("0,"))
        assert not alike, f"{selector}: {chars[0]} and {chars[1]} are drawn alike, as boxes"
        assert not blank, f"{selector}: nothing drawn"
    # plotly lays a legend out by measuring its text in a hidden copy (#js-plotly-tester): measured in the glyphs
    # drawn, no entry runs into the next
    entries = page.evaluate("""() => [...document.querySelector(".js-plotly-plot").querySelectorAll(".legend .traces")]
        .map(g => { const r = g.getBoundingClientRect(); return [g.textContent, r.top, r.left, r.right]; })""")
    assert any(_cjk(text) for text, *_ in entries)
    rows: dict[float, list] = {}
    for text, top, left, right in entries:
        rows.setdefault(round(top), []).append((left, right, text))
    for row in rows.values():
        for (_, right, text), (left, _, following) in zip(sorted(row), sorted(row)[1:]):
            assert right <= left + 0.5, f"legend entries {text!r} and {following!r} overlap"
