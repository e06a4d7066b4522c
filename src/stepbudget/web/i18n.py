"""The page's words, one catalog per language (catalogs/en.yaml, catalogs/zh-Hant.yaml).

Every string the app shows is ``t(lang, key, **values)``: the catalog's template for ``key`` in the
language, filled with already formatted values. Keys are dotted paths into the YAML (``p54.heading``).
A key missing from a catalog is an error, not a fallback to English: tests/web check that both
catalogs hold the same keys, none empty, and that no visible string bypasses them.
"""

from __future__ import annotations

import functools
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
    text = (resources.files("stepbudget.web") / "catalogs" / f"{lang}.yaml").read_text(encoding="utf-8")
    return _flatten(yaml.safe_load(text))


def t(lang: str, key: str, **values: object) -> str:
    """The string ``key`` in ``lang``, its {placeholders} filled from ``values``."""
    return catalog(lang)[key].format(**values)
