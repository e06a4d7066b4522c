"""The page's words: both catalogs hold the same keys and placeholders, every string shown comes from them,
and the Chinese uses the chapter's own terms."""

import re
import string

import pytest

from stepbudget.web import components as ui
from stepbudget.views import i18n
from stepbudget.web.app import page
from stepbudget.web.fields import Field, FieldError
from stepbudget.web.panels import PANELS, p53, p55, p56, p57

from _web import compute, shown

CHAPTER_TERMS = ("強擴展", "大象流", "低熵", "突發性", "工作週期", "平衡點", "管線平行", "前向", "反向", "梯度桶")
"""Chapter 5's Chinese terms (its glossary and text)."""
ENGLISH_FOR_CHINESE = re.compile(r"\b(pass|passes|bucket|buckets)\b")
"""English words the chapter writes in Chinese (前向/反向, 梯度桶)."""
HALF_WIDTH_IN_PROSE = re.compile(r"(?<![0-9])[,;:?!](?![0-9])|\((?=[\u3400-\u9fff])|(?<=[\u3400-\u9fff])\)")
"""Half-width punctuation where Chinese typesets full-width (，；：？！（）); digits' 1,024 and 1:1 stay."""


def placeholders(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def test_both_catalogs_have_the_same_keys_none_empty_and_the_same_placeholders():
    en, zh = i18n.catalog("en"), i18n.catalog("zh-Hant")
    assert set(en) == set(zh), sorted(set(en) ^ set(zh))
    for key in en:
        assert en[key].strip() and zh[key].strip(), key
        assert placeholders(en[key]) == placeholders(zh[key]), key


def test_the_chinese_uses_the_chapters_terms():
    words = " ".join(i18n.catalog("zh-Hant").values())
    assert [term for term in CHAPTER_TERMS if term not in words] == []
    assert ENGLISH_FOR_CHINESE.findall(re.sub(r"\{[^}]*\}", "", words)) == []


def test_the_chinese_punctuation_is_full_width_in_prose():
    han = re.compile(r"[\u3400-\u9fff]")
    half = {key: text for key, text in i18n.catalog("zh-Hant").items()
            if han.search(text) and HALF_WIDTH_IN_PROSE.search(re.sub(r"\{[^}]*\}", "", text))}
    assert half == {}


def settings():
    """Enough settings of every panel to show every kind of output."""
    for panel in PANELS:
        yield panel, {}
    for preset in p53.dims.PANEL_PRESETS:
        d = p53.dims.preset_degrees(preset)
        yield p53, {"preset": preset, **{n: str(getattr(d, n)) for n in p53.DEGREES}, "order": ",".join(d.order)}
    yield p53, {"ep": "64"}
    yield p53, {"pp": "16"}
    for name in p55.PRESETS:
        yield p55, {"preset": name, **p55.preset_values(name)}
    for link in p55.LINKS:
        yield p55, {"link": link, "expert_ffn": "1408"}
    yield p56, {"by": "duty", "window": "200 ms"}
    yield p56, {"buffer": "20 GB"}
    for hbm in p57.HBM:
        yield p57, {"hbm": hbm, "changes": ("batch", "moe", "long")}
    from stepbudget.web.panels import p51, p52, p54
    yield p51, {"M": "128", "N": "70B"}
    yield p52, {"kind": "fsdp-reshard", "grads": "fp32", "params": "fp32"}
    yield p54, {"G": "131,072"}
    yield p54, {"M": "24", "G": "16,392"}
    yield p54, {"G": "1,024", "M": "1"}


def rendered(lang: str) -> list:
    return [page(lang, {})] + [compute(panel, lang, **changes) for panel, changes in settings()]


@pytest.mark.parametrize("lang", list(i18n.LANGS))
def test_every_setting_renders_in_both_languages(lang):
    assert rendered(lang)  # a key missing from the catalog would raise here


# what may show outside the catalog: numbers with SI units, layouts as the CLI labels them, model names
ALLOWED = re.compile(r"""
    [-+]?[\d,.]+(e[-+]?\d+)?\s*(?:[kMGTPE]?(?:B/s|b/s|FLOP/s|FLOP|B)(?![\w/]))?  # 1.62 TB, 50 GB/s, 400 Gb/s
  | \b(?:TP|CP|PP|DP|EP)\d+\b                                         # TP8 PP16 DP128
  | [×%∞–·()/:,.;\s]                                                  # signs between them
""", re.X)


def test_no_string_on_the_page_bypasses_the_catalog(monkeypatch):
    marked = {key: f"⟦{key}⟧" for key in i18n.catalog("en")}
    monkeypatch.setattr(i18n, "catalog", lambda lang: marked)
    names = {"GPT-3 175B", "Llama 3 405B", "DeepSeek-V3", "Internal-352B", *i18n.LANGS.values()}  # data, not words
    leaks = set()
    for node in rendered("en"):
        for s in shown(node):
            rest = ALLOWED.sub("", re.sub(r"⟦[^⟧]*⟧", "", s))
            for name in names:
                rest = rest.replace(name, "")
            if rest.strip():
                leaks.add((s, rest))
    assert not leaks, sorted(leaks)[:10]


def test_every_field_message_is_in_both_languages():
    bad = {"count": ["", "abc", "-3", "1.5", "1e400"], "integer": ["2k", "x"], "fraction": ["lots", "150%"],
           "rate": ["400", "400 parsecs"], "flops": ["989"], "time": ["6.2 furlongs"], "bytes": ["64"]}
    for panel in PANELS:
        for spec in panel.CONTROLS:
            if not isinstance(spec, Field):
                continue
            for value in bad.get(spec.kind, []) + ["1e30"]:
                try:
                    spec.read(value)
                except FieldError as e:
                    for lang in i18n.LANGS:
                        said = ui.message(lang, i18n.t(lang, f"{panel.PID}.f.{spec.name}"), spec.kind, e)
                        assert i18n.t(lang, f"{panel.PID}.f.{spec.name}") in said and "{" not in said
