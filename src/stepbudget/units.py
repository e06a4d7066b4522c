"""SI units inside, human units at the edges.

Inside the package every quantity is in base units: bytes, seconds, FLOP, bytes/s,
FLOP/s. 1 GB = 1e9 B (decimal, as NCCL and vendors quote bandwidth); GiB = 2**30 B.
``parse`` reads "400Gb/s", "141GB", "989TFLOP/s", "25MiB", "1.5ms"; ``fmt_*`` choose
display prefixes.
"""

from __future__ import annotations

import math
import re

KB, MB, GB, TB = 1e3, 1e6, 1e9, 1e12
KiB, MiB, GiB, TiB = 2.0**10, 2.0**20, 2.0**30, 2.0**40
BITS_PER_BYTE = 8

_PREFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_BINARY = {"Ki": KiB, "Mi": MiB, "Gi": GiB, "Ti": TiB}
_TIME = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, "min": 60.0, "h": 3600.0}

# kind -> accepted unit spellings after the prefix
KINDS = ("bytes", "rate", "flops", "flop", "time", "count")

_NUM = r"([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"
_QTY = re.compile(rf"^\s*{_NUM}\s*([A-Za-zµ/]*(?:/s)?)\s*$")


class UnitError(ValueError):
    """A quantity could not be read; the message says what was expected."""


def _unit_scale(unit: str, kind: str) -> float | None:
    """Scale of ``unit`` in base units of ``kind``, or None if it does not belong to it."""
    if kind == "time":
        return _TIME.get(unit)
    if kind == "count":
        # "300B tokens": B is a billion where counts are quoted; "16Mi tokens" is 2^24
        return 1e9 if unit == "B" else _PREFIX.get(unit, _BINARY.get(unit))
    if kind == "bytes":
        for p, s in _BINARY.items():
            if unit in (p + "B", p + "b"):
                return s
        if unit.endswith("B") and unit[:-1] in _PREFIX:
            return _PREFIX[unit[:-1]]
        return None
    if kind == "rate":
        if unit.endswith("/s") or unit.endswith("ps"):
            core = unit[:-2]
            if core.endswith("B") and core[:-1] in _PREFIX:  # bytes per second
                return _PREFIX[core[:-1]]
            if core.endswith("b") and core[:-1] in _PREFIX:  # bits per second
                return _PREFIX[core[:-1]] / BITS_PER_BYTE
        return None
    if kind in ("flops", "flop"):
        spellings = ("FLOP/s", "FLOPS", "FLOPs/s") if kind == "flops" else ("FLOP", "FLOPs")
        for spelled in spellings:
            if unit.endswith(spelled) and unit[: -len(spelled)] in _PREFIX:
                return _PREFIX[unit[: -len(spelled)]]
        return None
    raise ValueError(f"unknown unit kind {kind!r}; expected one of {KINDS}")


_EXAMPLES = {
    "bytes": '"141GB", "25MiB"',
    "rate": '"400Gb/s", "50GB/s"',
    "flops": '"989TFLOP/s"',
    "flop": '"2.5PFLOP"',
    "time": '"15s", "2ms"',
    "count": '"16M", "4096", "16Mi"',
}


def parse(value: object, kind: str) -> float:
    """Read a number or a string with a unit into base units of ``kind``.

    A bare number is taken as already in base units (bytes, bytes/s, FLOP/s, s).
    Raises UnitError naming the expected spelling when the text does not parse.
    """
    if isinstance(value, bool):
        raise UnitError(f"expected a number or a quantity like {_EXAMPLES[kind]}, got {value!r}")
    if isinstance(value, (int, float)):
        try:
            x = float(value)
        except OverflowError:  # an int past float's range (about 1.8e308)
            raise UnitError(f"{_shown(value)} is not a finite number") from None
    elif isinstance(value, str):
        m = _QTY.match(value.replace(",", "").replace("_", ""))
        if not m:
            raise UnitError(f"cannot read {_shown(value)}; write a quantity like {_EXAMPLES[kind]}")
        number, unit = float(m.group(1)), m.group(2)
        scale = 1.0 if unit == "" else _unit_scale(unit, kind)
        if scale is None:
            raise UnitError(f"unit {unit!r} in {_shown(value)} is not a {kind} unit; write e.g. {_EXAMPLES[kind]}")
        x = number * scale
    else:
        raise UnitError(f"expected a number or a quantity like {_EXAMPLES[kind]}, got {_shown(value)}")
    if not math.isfinite(x):
        raise UnitError(f"{_shown(value)} is not a finite number")
    return x


def digits(n: int) -> int:
    """How many decimal digits ``n`` has, without str(), which refuses past 4,300 digits."""
    size = max(1, int(abs(n).bit_length() * 0.30102999566398120))  # log10(2) digits per bit, one low at most
    return size + (abs(n) >= 10**size)


def _shown(value: object) -> str:
    """A value as a message quotes it: its repr, cut to 60 characters (a message stays one short line)."""
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**50 else f"an integer of {digits(value):,} digits"
    return text if len(text) <= 60 else text[:57] + "..."


def _fmt(x: float, unit: str, prefixes: str = "kMGTPE", digits: int = 3) -> str:
    if x == 0 or not math.isfinite(x):
        return f"{x:g} {unit}"
    exp = min(max(int(math.floor(math.log10(abs(x)) / 3)), 0), len(prefixes))
    if exp < len(prefixes) and abs(float(f"{x / 1000.0**exp:.{digits}g}")) >= 1000:
        exp += 1  # 999.96 rounds to 1000: say 1 k, not 1e+03
    scaled = x / 1000.0**exp
    prefix = "" if exp == 0 else prefixes[exp - 1]
    return f"{scaled:.{digits}g} {prefix}{unit}"


def fmt_bytes(x: float) -> str:
    """Decimal bytes: 1.62 TB, 6.33 GB."""
    return _fmt(x, "B")


def fmt_rate(x: float) -> str:
    """Bytes per second: 50 GB/s."""
    return _fmt(x, "B/s")


def fmt_bits_rate(x: float) -> str:
    """Bytes per second as bits per second, as line rates are quoted: 50e9 -> 400 Gb/s."""
    return _fmt(x * BITS_PER_BYTE, "b/s")


def fmt_flops(x: float) -> str:
    """FLOP/s: 400 TFLOP/s."""
    return _fmt(x, "FLOP/s")


def fmt_flop(x: float) -> str:
    return _fmt(x, "FLOP")


def fmt_count(x: float) -> str:
    """A count as token budgets are quoted: 1.5e13 -> 15T, 3e11 -> 300B (B: billion)."""
    return _fmt(x, "", prefixes="kMBT").replace(" ", "")


def fmt_time(x: float) -> str:
    """Seconds with a readable prefix: 6.22 s, 3.4 ms, 12 µs."""
    if x == 0 or not math.isfinite(x):
        return f"{x:g} s"
    if abs(x) >= 1000:
        return f"{x:,.0f} s"  # 30,400 s, not 3.04e+04 s
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if abs(float(f"{x / scale:.3g}")) >= 1:
            return f"{x / scale:.3g} {unit}"
    return f"{x / 1e-9:.3g} ns"
