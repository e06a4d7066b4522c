import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stepbudget import units
from stepbudget.units import UnitError, fmt_bytes, parse


@pytest.mark.parametrize(
    "text, kind, expected",
    [
        ("400Gb/s", "rate", 50e9),
        ("400Gbps", "rate", 50e9),
        ("50GB/s", "rate", 50e9),
        ("3.35TB/s", "rate", 3.35e12),
        ("141GB", "bytes", 141e9),
        ("25MiB", "bytes", 25 * 2**20),
        ("989TFLOP/s", "flops", 989e12),
        ("989 TFLOPS", "flops", 989e12),
        ("2PFLOP", "flop", 2e15),
        ("15s", "time", 15.0),
        ("2ms", "time", 2e-3),
        ("16M", "count", 16e6),
        (1e9, "bytes", 1e9),
    ],
)
def test_parse_reads_human_units(text, kind, expected):
    assert parse(text, kind) == pytest.approx(expected)


@pytest.mark.parametrize("text, kind", [("400Gbx", "rate"), ("fast", "rate"), ("141GB", "rate"), ("1e999", "bytes"),
                                        (True, "bytes")])
def test_parse_rejects_with_the_expected_spelling(text, kind):
    with pytest.raises(UnitError, match="e.g.|like|finite"):
        parse(text, kind)


@given(st.floats(min_value=1e-3, max_value=1e6), st.sampled_from(["k", "M", "G", "T"]))
def test_bits_are_an_eighth_of_bytes(x, prefix):
    assert parse(f"{x}{prefix}b/s", "rate") * 8 == pytest.approx(parse(f"{x}{prefix}B/s", "rate"))


def test_fmt_bytes_uses_decimal_prefixes():
    assert fmt_bytes(1.62e12) == "1.62 TB"
    assert fmt_bytes(6.33e9) == "6.33 GB"
    assert math.isclose(parse(fmt_bytes(12.6e9).replace(" ", ""), "bytes"), 12.6e9)


def test_rounding_never_prints_a_thousand_of_a_unit():
    from stepbudget.units import fmt_time
    assert fmt_time(0.99997) == "1 s"
    assert fmt_time(0.0009999) == "1 ms"
    assert fmt_bytes(999.96e9) == "1 TB"
    assert fmt_time(2e-12) == "0.002 ns"


@given(st.integers(min_value=-(10**4000), max_value=10**4000))
def test_digits_counts_like_str_without_its_limit(n):
    assert units.digits(n) == len(str(abs(n)))


def test_a_huge_or_long_value_is_one_short_line():
    with pytest.raises(units.UnitError, match="^an integer of 5,001 digits is not a finite number$"):
        units.parse(10**5000, "bytes")
    with pytest.raises(units.UnitError) as e:
        units.parse("x" * 5000, "bytes")
    assert len(str(e.value)) < 120


def test_a_count_takes_the_suffixes_the_web_app_s_fields_take():
    # one unit parser for the command line, scenario files and the web app's fields (web/fields.py)
    assert [parse(t, "count") for t in ("16Mi", "405B", "16k", "16K", "1.5M", "2Gi")] == \
        [2**24, 405e9, 16e3, 16e3, 1.5e6, 2 * 2**30]
    with pytest.raises(UnitError, match="not a count unit"):
        parse("16MiB", "count")
