"""`--set` items over every field of the scenario schema, with values of every type and YAML's oddities: each
command line gives a result (exit 0) or one line naming the field or the option (exit 2), in bounded time."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzz._drive import drive, example_folder, fuzz_settings
from fuzz.strategies import FAST_PRESETS, MOE_PRESETS, PRESETS, schema_fields, set_items

pytestmark = pytest.mark.fuzz

CHEAP = ("budget", "budget --json", "show", "memory", "memory --json", "wire", "scale")
"""Commands that take tens of milliseconds on any preset."""


@st.composite
def set_command(draw):
    """A command that reads a scenario, on a preset where it is fast, with 1-3 --set items."""
    kind = draw(st.sampled_from(("cheap",) * 8 + ("simulate", "moe", "search", "whatif")))
    preset = draw(st.sampled_from({"cheap": PRESETS, "moe": MOE_PRESETS}.get(kind, FAST_PRESETS)))
    items = draw(st.lists(set_items(preset), min_size=1, max_size=3))
    if kind == "cheap":
        argv = [*(words := draw(st.sampled_from(CHEAP)).split())[:1], preset, *words[1:]]
    elif kind == "simulate":
        argv = ["simulate", preset]
    elif kind == "moe":
        argv = ["moe", preset, "--servers", "2", "--gpus-per-server", "2"]
    elif kind == "search":
        argv = ["search", preset, "--top", "3"]
    else:
        argv = ["whatif", preset, "--vary", items[0][0]]
    sets = [w for item, _ in items for w in ("--set", item)]
    return argv + sets, tuple(e for _, echo in items for e in echo)


@fuzz_settings(200)
@given(set_command())
def test_a_set_item_gives_a_result_or_one_line_naming_the_field(command):
    argv, echo = command
    with example_folder() as folder:
        drive(argv, folder, echo)


WHOLE_SCENARIO_CHECKS = ("layout", "batch", "cluster", "model")
"""The sections Scenario's own validators name (inputs/scenario.py, Scenario._consistent)."""


@fuzz_settings(75)
@given(st.sampled_from([f for f in schema_fields() if f.kind != "section"]), st.sampled_from(PRESETS),
       st.sampled_from(("2001-02-30", "!!timestamp abc", "[" * 135, "9" * 5000, "5e-324", "1.7e308", "nan", ".inf",
                        "-0.0", "\udc80", "a\x00b", "{a: *b}", "!!python/object:os.system", "!!binary @@@", "[]",
                        "null", "true", str(2**63))))
def test_every_field_takes_the_odd_values_by_name(field, preset, value):
    # each field meets the catalogue's worst values once: a refusal names that field
    with example_folder() as folder:
        o = drive(["show", preset, "--set", f"{field.path}={value}"], folder, echo=(value,))
    if o.code == 2:
        top = field.path.split(".")[0]
        # a value the field takes (-0.0 is 0 MTP layers) may still break a whole-scenario check, which names
        # the field it checks (layout.pp: 63 layer slots are not divisible by ...)
        checked = o.stderr.removeprefix("stepbudget: error: ").split(":")[0].split(".")[0] in WHOLE_SCENARIO_CHECKS
        assert field.path in o.stderr or top in o.stderr or "--set" in o.stderr or checked, o.stderr
