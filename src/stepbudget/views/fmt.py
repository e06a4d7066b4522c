"""Numbers for the page and the figures, in their language: the CLI's formatting (units.py), with the words translated.

Digits, decimal points and thousands separators are the same in English and Traditional Chinese;
what changes is the words: a time unit (6.22 s, 6.22 秒), a count in words (3.16 billion, 31.6 億),
the sign of a ratio. Bytes, rates and FLOP keep their SI symbols in both, as the chapter writes them.
"""

from __future__ import annotations

import math

from stepbudget import units
from stepbudget.views.i18n import t

_TIME_KEYS = {"s": "s", "ms": "ms", "µs": "us", "ns": "ns"}


def time(lang: str, x: float) -> str:
    """6.22 s / 6.22 秒, 251 ms / 251 毫秒."""
    number, _, unit = units.fmt_time(x).partition(" ")
    return t(lang, "unit.time", number=number, unit=t(lang, f"unit.{_TIME_KEYS[unit]}"))


def data(x: float) -> str:
    """Decimal bytes: 1.62 TB."""
    return units.fmt_bytes(x)


def rate(x: float) -> str:
    """Bytes per second: 50 GB/s."""
    return units.fmt_rate(x)


def line_rate(x: float) -> str:
    """A line rate as vendors quote it, in bits per second, with the bytes: 400 Gb/s (50 GB/s)."""
    return f"{units.fmt_bits_rate(x)} ({units.fmt_rate(x)})"


def flops(x: float) -> str:
    return units.fmt_flops(x)


def flop(x: float) -> str:
    return units.fmt_flop(x)


def number(x: float) -> str:
    """Whole numbers from 100 up with separators (1,536; 197,494), three significant digits below (9.94)."""
    if not math.isfinite(x):
        return "∞"
    if abs(x) >= 100 or x == 0:
        return f"{x:,.0f}"
    return f"{x:.3g}"


def percent(x: float) -> str:
    """40.1%."""
    return f"{x:.1%}" if math.isfinite(x) else "∞"


def times(lang: str, x: float) -> str:
    """A ratio: 5.2× / 5.2 倍."""
    shown = "∞" if not math.isfinite(x) else f"{x:.2g}" if x < 100 else number(x)
    return t(lang, "unit.times", number=shown)


_WORDS = {"en": (("trillion", 1e12), ("billion", 1e9), ("million", 1e6)),
          "zh-Hant": (("zhao", 1e12), ("yi", 1e8), ("wan", 1e4))}
"""Large counts in words: English groups by thousands, Chinese by ten thousands (萬) and hundred millions (億)."""


def count_words(lang: str, x: float) -> str:
    """3.16 billion / 31.6 億."""
    for word, scale in _WORDS.get(lang, _WORDS["en"]):
        if abs(x) >= scale:
            return t(lang, "unit.count", number=f"{x / scale:.3g}", unit=t(lang, f"unit.{word}"))
    return number(x)


def gpus(lang: str, n: float) -> str:
    """16,384 GPUs / 16,384 顆 GPU; 1 GPU."""
    return t(lang, "unit.gpu" if n == 1 else "unit.gpus", number=number(n))
