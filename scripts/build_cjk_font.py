"""Build the Chinese font stepbudget ships: a subset of Noto Sans CJK TC Regular to the CJK characters the web
app and the chapter's figures can show, renamed "stepbudget TC", so that Traditional Chinese renders on a
machine with no CJK font (a fresh Debian, CI) instead of as boxes.

Where to get the source font (SIL Open Font License 1.1; any of these, the Regular weight):
  - Debian's or Ubuntu's fonts-noto-cjk package, unpacked without installing it:
        apt-get download fonts-noto-cjk
        dpkg -x fonts-noto-cjk_*.deb /tmp/noto
        python scripts/build_cjk_font.py /tmp/noto/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc
    (a collection: the face named "Noto Sans CJK TC" is taken from it);
  - googlefonts/noto-cjk on GitHub: Sans/OTF/TraditionalChinese/NotoSansCJKtc-Regular.otf, or
    Sans/SubsetOTF/TC/NotoSansTC-Regular.otf;
  - adobe-fonts/source-han-sans on GitHub: SourceHanSansTC-Regular.otf (same glyphs, Adobe's name).

What it keeps: every CJK character (ideographs, CJK punctuation such as 、。「」, full-width forms such as ，：（）)
of every catalog value in every language (views/catalogs/) and of the languages' own names (i18n.LANGS): all the
app and the figures show, since every visible string comes from a catalog (tests/web/test_i18n.py holds the code
to that). Latin letters, digits and symbols are left to the page's other fonts. It writes, into --out (the package's
web/assets/fonts/):
  - stepbudget-tc.woff2: the web page's @font-face (web/assets/cjk.css), and the font an SVG figure with Chinese
    carries inside it (views/render.py);
  - stepbudget-tc.otf: the same font for fontconfig, which the headless Chromium that draws PNG and SVG figures
    reads (views/render.py points it here); an OpenType file is what every FreeType reads, where WOFF2 needs one
    built with brotli.
The licence, OFL.txt beside them, is kept by hand: the source's copyright and licence also stay in the fonts'
name tables. The build is reproducible: the same source and characters give the same bytes.

Needs fontTools and brotli (pip install -e '.[font]'), at build time only: the package never imports them.
Run it again whenever a catalog gains a character; tests/web/test_cjk_font.py fails until then.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fontTools import subset
from fontTools.ttLib import TTCollection, TTFont

from stepbudget.views.i18n import LANGS, catalog
from stepbudget.views.render import CJK_RANGES, FONT_FAMILY

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "stepbudget" / "web" / "assets" / "fonts"
NAME = "stepbudget-tc"
"""The files' name, before .woff2 and .otf."""
POSTSCRIPT = FONT_FAMILY.replace(" ", "") + "-Regular"
SOURCE_FACES = ("Noto Sans CJK TC", "Noto Sans TC", "Source Han Sans TC")
"""Family names of the faces taken from a collection (.ttc): the Traditional Chinese (Taiwan) glyphs."""
DROPPED = ["vhea", "vmtx", "VORG"]
"""Vertical metrics: nothing here is set vertically."""
FEATURES = ["ccmp", "calt", "liga", "kern", "mark"]
"""The OpenType features kept: those of the source a browser applies to horizontal text by default. Not locl,
whose Japanese, Korean and Simplified forms would double the glyphs for text that is Traditional Chinese
throughout, nor vert and its kin."""
KEPT_NAMES = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14]
"""Name-table records kept: the copyright (0), trademark (7), makers (8, 9, 11, 12) and licence (13, 14) with the
names (1-6), which are rewritten."""


def is_cjk(ch: str) -> bool:
    return any(lo <= ord(ch) <= hi for lo, hi in CJK_RANGES)


def characters() -> str:
    """Every CJK character the app and the figures can show, sorted."""
    texts = [*LANGS.values(), *(value for lang in LANGS for value in catalog(lang).values())]
    return "".join(sorted({ch for text in texts for ch in text if is_cjk(ch)}))


def open_source(path: Path) -> TTFont:
    """The Regular Traditional Chinese face of ``path``: the file itself, or the right face of a collection."""
    if path.suffix.lower() in (".ttc", ".otc"):
        faces = TTCollection(path).fonts
        for face in faces:
            if face["name"].getDebugName(1) in SOURCE_FACES:
                face.recalcTimestamp = False
                return face
        names = ", ".join(str(face["name"].getDebugName(1)) for face in faces)
        raise SystemExit(f"{path}: no face named {' or '.join(SOURCE_FACES)} in this collection (it holds {names}); "
                         "pass NotoSansCJK-Regular.ttc or a TC .otf")
    return TTFont(path, recalcTimestamp=False)


def check(font: TTFont, path: Path, text: str) -> None:
    """``font`` may be shipped (the OFL), is the Regular weight and has a glyph for every character of ``text``."""
    licence = font["name"].getDebugName(13) or ""
    if "Open Font License" not in licence:
        raise SystemExit(f"{path}: its licence (name record 13) is {licence[:80]!r}, not the SIL Open Font License; "
                         "take Noto Sans CJK TC or Source Han Sans TC (see this script's docstring)")
    weight = font["OS/2"].usWeightClass
    if weight != 400 or "fvar" in font:
        raise SystemExit(f"{path}: its weight is {weight}{' (a variable font)' if 'fvar' in font else ''}; "
                         "take the Regular one, 400 (the -Regular.otf or NotoSansCJK-Regular.ttc)")
    cmap = font.getBestCmap()
    missing = "".join(ch for ch in text if ord(ch) not in cmap)
    if missing:
        raise SystemExit(f"{path} has no glyph for {missing!r}; take a Traditional Chinese font (Noto Sans CJK TC, "
                         "Source Han Sans TC)")


def subset_font(font: TTFont, text: str) -> None:
    """Keep only the glyphs of ``text`` (and what their OpenType features reach), in place."""
    options = subset.Options()
    options.drop_tables += DROPPED
    options.layout_features = FEATURES
    options.name_IDs = KEPT_NAMES
    options.desubroutinize = True  # larger before compression, smaller after (WOFF2's brotli)
    subsetter = subset.Subsetter(options)
    subsetter.populate(text=text)
    subsetter.subset(font)


def rename(font: TTFont) -> None:
    """Name the subset "stepbudget TC": a Modified Version may not bear the licence's Reserved Font Names (Adobe
    reserves "Source" for these glyphs), and a subset still named "Noto Sans CJK TC" would stand in for a full copy
    installed on the machine, whose other characters would then go missing."""
    table = font["name"]
    version = table.getDebugName(5) or ""
    names = {1: FONT_FAMILY, 2: "Regular", 3: f"{POSTSCRIPT};{version}", 4: f"{FONT_FAMILY} Regular", 6: POSTSCRIPT}
    table.names = [record for record in table.names if record.nameID not in names]
    for name_id, value in names.items():
        table.setName(value, name_id, 3, 1, 0x409)  # Windows, Unicode BMP, English (US): what every reader reads
    if "CFF " in font:
        cff = font["CFF "].cff
        cff.fontNames = [POSTSCRIPT]
        top = cff.topDictIndex[0]
        for key, value in (("FullName", names[4]), ("FamilyName", FONT_FAMILY)):
            if hasattr(top, key):
                setattr(top, key, value)


def build(source: Path, out: Path) -> dict[str, int]:
    """Write the WOFF2 and the OpenType subset of ``source`` into ``out``; their sizes in bytes, by file name."""
    text = characters()
    sizes = {}
    for flavor, suffix in ((None, ".otf"), ("woff2", ".woff2")):
        font = open_source(source)  # afresh for each: subsetting works in place
        check(font, source, text)
        subset_font(font, text)
        rename(font)
        font.flavor = flavor
        path = out / (NAME + suffix)
        font.save(path)
        sizes[path.name] = path.stat().st_size
    return sizes


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", type=Path, help="NotoSansCJK-Regular.ttc, NotoSansCJKtc-Regular.otf, "
                        "NotoSansTC-Regular.otf or SourceHanSansTC-Regular.otf")
    parser.add_argument("--out", type=Path, default=OUT, help=f"folder to write into (default: {OUT.relative_to(ROOT)})")
    args = parser.parse_args(argv)
    if not args.source.is_file():
        raise SystemExit(f"{args.source}: no such file; see `python {Path(__file__).name} --help` for where to get it")
    sizes = build(args.source, args.out)
    print(f"{len(characters())} characters from {args.source.name}:",
          ", ".join(f"{name} {size / 1e3:.0f} kB" for name, size in sizes.items()), file=sys.stderr)


if __name__ == "__main__":
    main()
