"""The words of the web app and the chapter's figures, one catalog per language (catalogs/en.yaml, catalogs/zh-Hant.yaml).

Every string the app shows is ``t(lang, key, **values)``: the catalog's template for ``key`` in the
language, filled with already formatted values. Keys are dotted paths into the YAML (``p54.heading``).
A key missing from a catalog is an error, not a fallback to English: tests/web check that both
catalogs hold the same keys, none empty, and that no visible string bypasses them.
"""

from __future__ import annotations

import functools
import re
from importlib import resources

import yaml

LANGS = {"en": "English", "zh-Hant": "繁體中文"}
"""Languages, each named in itself (what the switch shows)."""
DEFAULT_LANG = "en"


def _flatten(tree: dict, prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, path + "."))
        else:
            out[path] = str(value)
    return out


@functools.cache
def catalog(lang: str) -> dict[str, str]:
    """Every key of ``lang``'s catalog and its template."""
    if lang not in LANGS:
        raise ValueError(f"lang: {lang!r} is not one of {', '.join(LANGS)}")
    text = (resources.files("stepbudget.views") / "catalogs" / f"{lang}.yaml").read_text(encoding="utf-8")
    return _flatten(yaml.safe_load(text))


_HAN = "\u3400-\u9fff"
_CJK = _HAN + "\u3000-\u303f\uff00-\uffef"  # with the ideographic punctuation (、。) and full-width forms
_BETWEEN_CJK = re.compile(rf"(?<=[{_CJK}]) +(?=[{_CJK}])")
_CJK_THEN_LATIN = re.compile(rf"(?<=[{_HAN}])(?=[A-Za-z0-9(])")
_LATIN_THEN_CJK = re.compile(rf"(?<=[A-Za-z0-9%)])(?=[{_HAN}])")


def _spaced(text: str) -> str:
    """Chinese text with filled-in values, spaced as it is typeset: a space between Chinese and Latin letters or
    digits (因為 Llama 3, 約 6.2 秒), none between two Chinese characters (毫秒是, not 毫秒 是)."""
    text = _BETWEEN_CJK.sub("", text)
    return _LATIN_THEN_CJK.sub(" ", _CJK_THEN_LATIN.sub(" ", text))


def t(lang: str, key: str, **values: object) -> str:
    """The string ``key`` in ``lang``, its {placeholders} filled from ``values``."""
    text = catalog(lang)[key].format(**values)
    return _spaced(text) if lang == "zh-Hant" else text
