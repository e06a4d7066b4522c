"""Hypothesis strategies over what a user hands stepbudget: `--set` items for every field of the scenario schema,
scenario files (YAML and TOML) mutated from the presets, runs files mutated from the shipped one, traffic
matrices (CSV and .npy, sound and broken), paths, and whole command lines for every command.

Values come in two forms: text (a `--set` value, a fragment of YAML or TOML written into a file as is) and
Python data (dumped by yaml.safe_dump or the small TOML writer here). Each list below is a catalogue of the odd
cases one user or another has typed; the generated strategies around them fill the space between.
"""

from __future__ import annotations

import copy
import functools
import io
import json
import math
import os
import typing
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Callable

import numpy as np
import yaml
from hypothesis import strategies as st
from pydantic import BaseModel

from stepbudget.inputs.scenario import Scenario, preset_names, raw_scenario

# ---------------------------------------------------------------- the scenario schema, introspected


@dataclass(frozen=True)
class Field:
    """One field of the schema: its dotted path (as `--set` writes it) and what it takes."""

    path: str
    annotation: object
    kind: str
    """'section' (a nested model), 'list' (a tuple of values or models), 'str', 'bool', 'int', 'float',
    'choice' (an enum or a literal) or 'other'."""
    choices: tuple[str, ...] = ()


def _models_in(annotation: object) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in typing.get_args(annotation) for m in _models_in(a)]


def _choices(annotation: object) -> tuple[str, ...]:
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return tuple(str(m.value) for m in annotation)
    if typing.get_origin(annotation) is typing.Literal:
        return tuple(str(a) for a in typing.get_args(annotation))
    return tuple(c for a in typing.get_args(annotation) for c in _choices(a))


def _kind(annotation: object) -> str:
    origin = typing.get_origin(annotation)
    if origin is tuple or origin is list:
        return "list"
    if _choices(annotation):
        return "choice"
    flat = [annotation, *typing.get_args(annotation)]
    for name, types in (("bool", (bool,)), ("float", (float,)), ("int", (int,)), ("str", (str,))):
        if any(a in types for a in flat) or any(a in types for f in flat for a in typing.get_args(f)):
            return name
    return "other"


def _walk(model: type[BaseModel], prefix: str = "") -> list[Field]:
    fields = []
    for name, info in model.model_fields.items():
        path = prefix + name
        nested = _models_in(info.annotation)
        kind = "list" if typing.get_origin(info.annotation) is tuple else ("section" if nested else _kind(info.annotation))
        fields.append(Field(path, info.annotation, kind, _choices(info.annotation)))
        if kind == "section":
            fields.extend(_walk(nested[0], path + "."))
    return fields


@functools.cache
def schema_fields() -> tuple[Field, ...]:
    """Every field of Scenario and of its nested sections, depth first (cluster.gpu.kernels.gemm included)."""
    return tuple(_walk(Scenario))


@functools.cache
def text_field_paths() -> frozenset[str]:
    """Fields whose value is free text: what is echoed back as typed (a scenario named "nan" prints nan)."""
    return frozenset(f.path for f in schema_fields() if f.kind == "str")


PRESETS = tuple(preset_names())
FAST_PRESETS = ("hpn-gpt3-175b", "llama3-405b", "llama3-405b-puredp", "megascale-175b")
"""Presets each command runs on in well under a second (search and simulate of deepseek-v3 and the MoE preset
take seconds)."""
MOE_PRESETS = ("deepseek-v3", "megascale-moe-352b")

# ---------------------------------------------------------------- values as text (--set, YAML and TOML fragments)

HUGE_DIGITS = "9" * 5000
"""An integer of 5,000 digits: past Python's 4,300-digit limit on str <-> int."""

INT_TEXTS = ("0", "-1", "1", "8", "-9999999", str(2**31), str(2**40 + 1), str(2**63), str(2**64), "1" + "0" * 30,
             HUGE_DIGITS, "-" + HUGE_DIGITS, "0x10", "0o17", "0b101", "1_000", "+5", "007", "1:20:30", "１２")
FLOAT_TEXTS = ("5e-324", "-5e-324", "2.2250738585072014e-308", "1e308", "1.7e308", "-1e308", "1e400", "nan", ".nan",
               ".NaN", "NaN", "inf", ".inf", "-.inf", "+.inf", "Infinity", "-0.0", "0.0", "1e-9", "0.5", "2.0", "1e5",
               "1.0e+5", "0.1515", "1e-400")
UNIT_TEXTS = ("400Gb/s", "1e99 TB", "141GB", "80GiB", "989TFLOP/s", "1e30 FLOP/s", "15s", "1 ms", "-5GB", "nan GB",
              "inf Gb/s", "1e400 B", "0 B/s", "5e-324 s", "3 parsecs", "GB", "400 Gb/s/s", "1.5.5GB", "１２GB",
              "400Gbps", "400 gb/s", "0.5x", "100%", "1e-30 s", "1e7 s", "1e8 s", "12:30:00")
YAML_TEXTS = ("2001-02-30", "2001-02-03", "2001-02-03T04:05:06Z", "!!timestamp abc", "!!timestamp 2001-02-03",
              "!!python/object:os.system", "!!python/object/apply:os.system ['true']", "!!python/name:os.system",
              "!!binary aGVsbG8=", "!!binary @@@", "!!int abc", "!!float x", "!!str 5", "!!set {a, b}",
              "!!omap [a: 1]", "!!pairs [a: 1]", "!!null", "!!bool maybe", "!", "!foo bar", "!<tag:x> 1",
              "[" * 200, "[[[[" * 50, "[" * 135 + "]" * 135, "{a: " * 40 + "1" + "}" * 40, "{a: *b}", "&a [*a]",
              "&a 5", "*a", "? complex key", "? [a]\n: b", "{? [1]: 2}", "[1, 2", "{", "}", "'", '"',
              '"\\udc80"', "\udc80", "x\udc80y", "a\x00b", "\x00", "\x1b[31m", "a\nb", "<<: {a: 1}", "{<<: *x}",
              "- a", "a: b", "---", "...", "--- |\n  x", "%YAML 1.1", "#", "|", ">", "@", "`", "yes", "no", "on",
              "off", "y", "n", "True", "false", "~", "null", "Null", "", " ", "[]", "{}", "[1, 2, 3]", "[a, b]",
              "{a: 1}", "[tp, dp, pp, cp]", "[[1]]", "1:2", "\ufeff1", "\u202e8", "é", "💥", "a" * 300)
CHOICE_TEXTS = ("1f1b", "interleaved-1f1b", "dualpipe", "zero1", "zero3", "fsdp", "full", "selective",
                "selective-op", "auto", "best", "bf16", "fp8", "fp32", "6N", "causal", "noncausal", "h100-sxm",
                "h800-sxm", "b200", "H100", "swiglu", "gelu", "rope", "deepep", "ring", "hierarchical", "flat",
                "in-network", "tree", "flash-attention-2", "node", "cluster", "ulysses", "none")

UNITS = ("", "B", "KB", "MB", "GB", "TB", "GiB", "b/s", "Gb/s", "GB/s", "TB/s", "TFLOP/s", "PFLOP/s", "s", "ms", "us",
         "ns", "Hz", "%")
_UNITY = st.builds(lambda number, space, unit: number + space + unit,
                   st.floats(-1e6, 1e25).map(lambda x: f"{x:g}") | st.integers(-10, 10**6).map(str),
                   st.sampled_from(("", " ")), st.sampled_from(UNITS))
"""A number and a unit, e.g. "400 Gb/s" or "-3e+20ms"."""

set_value_texts = st.one_of(
    st.sampled_from(INT_TEXTS), st.sampled_from(FLOAT_TEXTS), st.sampled_from(UNIT_TEXTS),
    st.sampled_from(YAML_TEXTS), st.sampled_from(CHOICE_TEXTS),
    st.integers(-(2**70), 2**70).map(str), st.floats().map(repr), _UNITY,
    st.text(max_size=12),
)
"""The text after '=' in a --set item: every type, and the oddities of YAML, units and Unicode."""


def _valid_ish(field: Field) -> st.SearchStrategy[str]:
    """Values of the field's own type, so that examples reach past the type checks into the model."""
    if field.kind == "int":
        return st.integers(-2, 2**20).map(str) | st.sampled_from(INT_TEXTS)
    if field.kind == "float":
        return st.floats(-1, 1e4, allow_nan=False).map(repr) | st.sampled_from(FLOAT_TEXTS + UNIT_TEXTS)
    if field.kind == "bool":
        return st.sampled_from(("true", "false", "yes", "no", "1", "0", "maybe"))
    if field.kind == "choice":
        return st.sampled_from(field.choices + CHOICE_TEXTS)
    if field.kind == "list":
        return st.sampled_from(("[]", "[tp, cp, pp, dp]", "[dp, dp]", "[{name: core, domain_gpus: 8, oversubscription: 2}]",
                                "[{name: x}]", "[1, 2]", "{}"))
    if field.kind == "section":
        return st.sampled_from(("{}", "null", "5", "[]", "h100-sxm", "{num_experts: 16, top_k: 2, expert_ffn_size: 1024}"))
    return st.text(max_size=30)


BROKEN_KEYS = (".pp", ".", "..", "layout..pp", "layout.", " ", "", "layout.pp.x", "nosuch", "model.moe.nosuch",
               "cluster.tiers.0.name", "cluster.gpu.name.x", "base", "__class__", "layout.__dict__", "lay out.pp",
               "LAYOUT.PP", "layout.pp ", "layout.\udc80", "layout.p\tp", "é.ü", "a" * 300, ".".join("a" * 200))
BROKEN_ITEMS = ("=1", "=", "layout.pp", "", "==", "layout.pp==8", "layout.pp=8=9", "=" * 50, ".pp=1", ".=1",
                "layout..pp=1")


@functools.cache
def resolved(preset: str) -> dict:
    """A preset's fields as `stepbudget show` prints them (units in SI): the values a tweak starts from."""
    from stepbudget.inputs.scenario import load

    return load(preset).model_dump(mode="json")


def current_value(preset: str, path: str) -> Any:
    node: Any = resolved(preset)
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


FACTORS = (1, 2, 0.5, 4, 0.25, 10, 0.1, 3, 1.5, 1e-3, 1e3)
"""What a tweak multiplies a preset's number by: near values that often stay valid, and some far ones."""


def tweaked(value: Any) -> st.SearchStrategy[Any]:
    """Numbers near ``value`` (an int stays an int): examples that pass validation and reach the model."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return st.just(value)
    if isinstance(value, int):
        return st.sampled_from(FACTORS).map(lambda f: max(int(value * f), 0)) | st.integers(value - 2, value + 2)
    return st.sampled_from(FACTORS).map(lambda f: value * f)


@st.composite
def set_items(draw, preset: str | None = None) -> tuple[str, tuple[str, ...]]:
    """One --set item, and what of it output may echo back as text (the value of a free-text field). Given the
    ``preset`` the item goes to, a third of the items are numbers near the preset's own."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from(BROKEN_ITEMS) | st.sampled_from(BROKEN_KEYS).map(lambda k: k + "=1")), ()
    field = draw(st.sampled_from(schema_fields()))
    how = draw(st.sampled_from(("near", "typed", "any")))
    current = current_value(preset, field.path) if preset is not None else None
    if how == "near" and isinstance(current, (int, float)) and not isinstance(current, bool):
        value = repr(draw(tweaked(current)))
    else:
        value = draw(_valid_ish(field) if how != "any" else set_value_texts)
    value = value.replace("\x00", "")  # execve takes C strings: no shell can pass a NUL byte in an argument
    echo = (value, *value.split()) if field.path in text_field_paths() else ()
    return f"{field.path}={value}", echo


# ---------------------------------------------------------------- values as data (dumped into a file)

PY_VALUES = (0, -1, 1, 2**31, 2**63, 2**64, 10**30, 10**100, 5e-324, 1e308, -1e308, -0.0, 0.5, math.nan, math.inf,
             -math.inf, True, False, None, "", " ", "abc", "400Gb/s", "1e99 TB", "nan", "inf", [], {}, [1, [2, [3]]],
             {"a": 1}, [None], ["tp", "tp"], b"\x00\xff", {1, 2}, "\x00", "x" * 5000)


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


py_values = st.one_of(
    st.sampled_from(PY_VALUES), st.integers(), st.floats(), st.text(max_size=10), st.booleans(),
    st.sampled_from((_nested(35), _nested(135), [[[[[[]]]]]])),
    st.lists(st.integers(-3, 3) | st.text(max_size=3), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(-3, 3), max_size=2),
)
"""A value put where a field was: every type YAML and TOML can hold, and a few they cannot."""

RAW_TOML = (HUGE_DIGITS, "-" + HUGE_DIGITS, "nan", "inf", "-inf", '"\\udc80x"', '"\\u0000"', "1979-05-27",
            "07:32:00", "1979-05-27T07:32:00Z", "0xDEADBEEF", "1e400", "{ a = 1 }", "[1, 'a']", "[" * 135 + "]" * 135,
            "[" * 30 + "]" * 30, "'''x'''", '"2001-02-30"', "true", "[]", "{}", "1_000", "+inf", "0o17", "[", "=")
"""TOML fragments: what TOML reads natively that YAML does not (dates, times), and what it refuses."""

# ---------------------------------------------------------------- mutating a mapping


def leaf_paths(data: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path into nested dicts and lists: ('cluster', 'tiers', 0, 'name') and its parents."""
    paths = [prefix] if prefix else []
    if isinstance(data, dict):
        for k, v in data.items():
            paths += leaf_paths(v, prefix + (k,))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            paths += leaf_paths(v, prefix + (i,))
    return paths


def _parent(data: Any, path: tuple) -> Any:
    for p in path[:-1]:
        data = data[p]
    return data


RAW = "__fuzz_raw_value__"
"""Placeholder written by the dumper and then replaced by a raw YAML or TOML fragment."""


@dataclass
class Mutation:
    """What was done to a mapping, for the failure report."""

    what: str
    raw: str | None = None
    """A fragment written as is in place of RAW."""
    echo: tuple[str, ...] = ()


@st.composite
def mutate(draw, data: dict, raw_texts: tuple[str, ...], text_paths: frozenset[str] = frozenset()) -> Mutation:
    """Change ``data`` in place one way: delete, rename, replace a value by data or by a raw fragment, nest.

    A drawn value is copied before it goes in: a strategy may hand out one shared list or dict, and a later
    mutation of this file changing it in place would change what the next example draws (hypothesis then
    reports the strategy as flaky)."""
    paths = leaf_paths(data)
    path = draw(st.sampled_from(paths))
    parent, key = _parent(data, path), path[-1]
    op = draw(st.sampled_from(("tweak", "tweak", "tweak", "delete", "rename", "value", "value", "raw", "raw", "nest",
                               "add")))
    dotted = ".".join(str(p) for p in path)
    echo = ()
    if op == "tweak":
        parent[key] = copy.deepcopy(draw(tweaked(parent[key])))
    elif op == "delete":
        del parent[key]
    elif op == "rename" and isinstance(parent, dict):
        new = draw(st.sampled_from((str(key) + "x", str(key).upper(), "", " ", str(key) + " ", "\udc80", "1")))
        parent[new] = parent.pop(key)
    elif op == "value" or (op == "rename"):
        parent[key] = copy.deepcopy(draw(py_values))
        if isinstance(parent[key], str) and dotted.replace(".0.", ".") in text_paths:
            echo = (parent[key], *parent[key].split())
    elif op == "raw":
        parent[key] = RAW
        raw = draw(st.sampled_from(raw_texts))
        return Mutation(f"{dotted} = raw {raw[:60]!r}", raw, echo=(raw, *raw.split()))
    elif op == "nest":
        parent[key] = _nested(draw(st.sampled_from((2, 31, 33, 135))))
    else:
        node = parent if isinstance(parent, dict) else data
        node[draw(st.sampled_from(("nosuch", "base", "model", "x" * 300)))] = copy.deepcopy(draw(py_values))
    return Mutation(f"{op} {dotted}", echo=echo)


# ---------------------------------------------------------------- writing YAML and TOML


def yaml_text(data: Any, raw: str | None) -> str:
    """``data`` as YAML, with the placeholder replaced by ``raw`` (written on one line, or as a block)."""
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=10**6)
    if raw is None:
        return text
    return text.replace(RAW, raw.replace("\n", " ") if "\n" in raw else raw)


def _toml_key(k: object) -> str:
    k = str(k)
    return k if k and all(c.isalnum() or c in "-_" for c in k) and k.isascii() else json.dumps(k)


def _toml_value(v: Any) -> str:
    if v is True or v is False:
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v) if abs(v) < 10**4000 else HUGE_DIGITS
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, (list, tuple, set)):
        return "[" + ", ".join(_toml_value(x) for x in v if x is not None) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(x)}" for k, x in v.items() if x is not None) + "}"
    if isinstance(v, bytes):
        return json.dumps(v.decode("latin-1"))
    return json.dumps(str(v))  # JSON's escapes are TOML's basic-string escapes (\udc80 included, which TOML refuses)


def toml_text(data: dict, raw: str | None) -> str:
    """``data`` as TOML: scalars first, then one table per nested mapping (TOML has no null: None is left out)."""
    lines: list[str] = []

    def table(d: dict, name: str) -> None:
        subs = [(k, v) for k, v in d.items() if isinstance(v, dict) and v]
        if name:
            lines.append(f"[{name}]")
        for k, v in d.items():
            if v is not None and not (isinstance(v, dict) and v):
                lines.append(f"{_toml_key(k)} = {_toml_value(v)}")
        for k, v in subs:
            table(v, f"{name}.{_toml_key(k)}" if name else _toml_key(k))

    table(data, "")
    text = "\n".join(lines) + "\n"
    return text if raw is None else text.replace(json.dumps(RAW), raw)


@functools.cache
def _preset(name: str) -> dict:
    return raw_scenario(name)


def preset_data(name: str) -> dict:
    """A fresh copy of a preset's mapping as read (base resolved), to mutate."""
    return json.loads(json.dumps(_preset(name)))


@dataclass
class ScenarioFile:
    """A scenario file an example writes: its name, its bytes, what was done to it."""

    name: str
    text: str
    what: str
    echo: tuple[str, ...] = ()
    also: tuple[tuple[str, str], ...] = ()
    """Other files to write beside it (a base chain)."""

    def write(self, folder: Path) -> Path:
        for name, text in self.also:
            (folder / name).write_text(text, encoding="utf-8", errors="surrogatepass")
        path = folder / self.name
        path.write_text(self.text, encoding="utf-8", errors="surrogatepass")
        return path


BASES = ("self", "loop", "chain", "preset", "missing", "empty", "number", "list")


def _base_files(kind: str, name: str, suffix: str, preset: str) -> tuple[Any, tuple[tuple[str, str], ...]]:
    """The value of ``base:`` and the files it needs: itself, a two-file loop, a chain past any depth."""
    if kind == "self":
        return name, ()
    if kind == "loop":
        return f"other{suffix}", ((f"other{suffix}", f"base: {name}\n" if suffix != ".toml" else f'base = "{name}"\n'),)
    if kind == "chain":
        files = tuple((f"c{i}.yaml", f"base: c{i + 1}.yaml\n") for i in range(40)) + (("c40.yaml", f"base: {preset}\n"),)
        return "c0.yaml", files
    return {"preset": preset, "missing": "nowhere.yaml", "empty": "", "number": 5, "list": [preset]}[kind], ()


@st.composite
def scenario_files(draw) -> ScenarioFile:
    """A preset's data written as YAML or TOML, changed by one to three mutations (or a base: of some kind)."""
    preset = draw(st.sampled_from(PRESETS))
    data = preset_data(preset)
    suffix = draw(st.sampled_from((".yaml", ".yaml", ".yml", ".toml")))
    name = "scenario" + suffix
    raws = RAW_TOML if suffix == ".toml" else YAML_TEXTS + (HUGE_DIGITS, "-" + HUGE_DIGITS, '"\\udc80x"')
    done, raw, echo, also = [], None, (), ()
    for _ in range(draw(st.integers(1, 3))):
        m = draw(mutate(data, raws, text_field_paths()))
        done.append(m.what)
        echo += m.echo
        if m.raw is not None:
            raw = m.raw
            break  # one placeholder per file
    if draw(st.integers(0, 5)) == 0:
        kind = draw(st.sampled_from(BASES))
        data["base"], also = _base_files(kind, name, suffix, preset)
        done.append(f"base: {kind}")
    text = toml_text(data, raw) if suffix == ".toml" else yaml_text(data, raw)
    return ScenarioFile(name, text, f"{preset} {suffix}: " + "; ".join(done), echo, also)


# ---------------------------------------------------------------- runs files


@functools.cache
def _shipped_runs() -> dict:
    from stepbudget.validation.runs import shipped_runs_text

    return yaml.safe_load(shipped_runs_text())


def shipped_run_ids() -> tuple[str, ...]:
    return tuple(r["id"] for r in _shipped_runs()["runs"])


RUN_RAWS = YAML_TEXTS + (HUGE_DIGITS, '"\\udc80x"', "2001-02-30", "-5", "0", "1e400", ".nan")


@st.composite
def runs_files(draw) -> tuple[str, str, tuple[str, ...]]:
    """(text, what was done, echo): a few of the shipped runs, changed, as a runs file."""
    doc = json.loads(json.dumps(_shipped_runs(), default=str))
    doc["runs"] = draw(st.lists(st.sampled_from(doc["runs"]), min_size=1, max_size=3))
    doc["runs"] = json.loads(json.dumps(doc["runs"]))
    shape = draw(st.integers(0, 19))
    if shape == 0:  # the document itself is wrong
        whole = draw(st.sampled_from(("", "runs: 5", "runs:", "- a", "[" * 135, "runs: [5]", "runs: [{}]", "5",
                                      "runs: [{id: a}, {id: a}]", HUGE_DIGITS, "\udc80", "runs: {a: 1}")))
        return whole, f"document {whole[:40]!r}", ()
    raw, done, echo = None, [], ()
    for _ in range(draw(st.integers(1, 3))):
        run = draw(st.sampled_from(doc["runs"]))
        m = draw(mutate(run, RUN_RAWS))
        done.append(f"{run.get('id', '?')}: {m.what}")
        echo += m.echo + (str(run.get("id")),)
        if m.raw is not None:
            raw = m.raw
            break
    if shape == 1 and len(doc["runs"]) > 1:
        doc["runs"][1]["id"] = doc["runs"][0].get("id")
        done.append("an id twice")
    echo += tuple(str(r.get("id")) for r in doc["runs"] if isinstance(r, dict))
    return yaml_text(doc, raw), "; ".join(done), echo


# ---------------------------------------------------------------- traffic matrices

MOE_GROUPS = ((1, 2), (2, 1), (2, 2), (1, 4), (4, 1), (2, 4), (4, 2))
"""(servers, gpus_per_server) small enough that a valid matrix is timed in milliseconds."""

CSV_CELLS = ("0", "1", "1e6", "1.5e9", "-1", "-0", "nan", "NaN", "inf", "-inf", "1e308", "1e400", "5e-324", "abc", "",
             " ", "0x10", "1,000", "1e6B", "١", "\udc80", "'1'", "1_000", "True", "#")


@st.composite
def csv_matrices(draw, n: int) -> str:
    """CSV (or whitespace-separated) text: mostly n x n of numbers, sometimes ragged, empty, or not numbers."""
    rows = draw(st.sampled_from((n, n, n, 0, 1, n + 1, 3)))
    cols = draw(st.sampled_from((n, n, n, 0, 1, n - 1 if n > 1 else 2)))
    sep = draw(st.sampled_from((",", ",", " ", "\t", ";", ", ")))
    cell = st.sampled_from(CSV_CELLS) | st.floats(0, 1e12).map(repr) | st.integers(0, 10**9).map(str)
    sound = st.floats(0, 1e9, allow_nan=False).map(lambda x: f"{x:.6g}")
    lines = []
    for r in range(rows):
        width = cols if not draw(st.integers(0, 15)) == 0 else draw(st.integers(0, cols + 2))
        cells = [draw(cell if draw(st.integers(0, 7)) == 0 else sound) for _ in range(width)]
        lines.append(sep.join(cells))
    head = draw(st.sampled_from(("", "", "", "\ufeff", "# bytes\n", "src,dst\n", "\n\n")))
    return head + "\n".join(lines) + draw(st.sampled_from(("", "\n", "\n\n", "\r\n")))


NPY_DTYPES = (np.float64, np.float32, np.float16, np.int8, np.int64, np.uint64, np.bool_, np.complex64, "U3",
              "datetime64[s]", [("a", "f4")], object)


@st.composite
def npy_bytes(draw, n: int) -> tuple[bytes, str]:
    """(.npy bytes, what they are): odd shapes and dtypes, a header that claims more than the file holds, a
    truncated file, a zip (an .npz) under the .npy name, a pickle."""
    kind = draw(st.sampled_from(("sound", "sound", "shape", "dtype", "values", "huge-header", "truncated", "npz",
                                 "text", "empty")))
    buf = io.BytesIO()
    if kind == "huge-header":
        shape = draw(st.sampled_from(((10**5, 10**5), (10**10,), (2**31, 2**31), (2**62, 2))))
        header = {"descr": "<f8", "fortran_order": False, "shape": shape}
        np.lib.format.write_array_header_1_0(buf, header)
        buf.write(b"\x00" * 64)
        return buf.getvalue(), f"header claims {shape}"
    if kind == "text":
        return b"1,2\n3,4\n", "CSV text in a .npy"
    if kind == "empty":
        return b"", "empty"
    shape = (n, n)
    dtype: Any = np.float64
    if kind == "shape":
        shape = draw(st.sampled_from(((), (n,), (n, n, 1), (n, n + 1), (0, 0), (1, 1), (n * n,))))
    if kind == "dtype":
        dtype = draw(st.sampled_from(NPY_DTYPES))
    rng = np.random.default_rng(draw(st.integers(0, 99)))
    a = np.array(rng.random(shape) * 1e6)
    if a.ndim == 2:
        np.fill_diagonal(a, 0)
    if kind == "values" and a.size:
        a.flat[draw(st.integers(0, a.size - 1))] = draw(st.sampled_from(
            (math.nan, math.inf, -math.inf, -1.0, 1e308, 5e-324, -0.0)))
    if dtype is object:
        arr = np.empty(shape, dtype=object)
        arr[...] = 1.0
        np.save(buf, arr, allow_pickle=True)
    elif isinstance(dtype, str) or isinstance(dtype, list):  # text, dates, records: no cast from float
        np.save(buf, np.zeros(shape, dtype=dtype))
    else:
        with np.errstate(over="ignore", invalid="ignore"):  # 1e300 cast to float16 or int8 is the point
            np.save(buf, a.astype(dtype))
    data = buf.getvalue()
    if kind == "truncated":
        data = data[:draw(st.integers(0, len(data) - 1))]
    if kind == "npz":
        zbuf = io.BytesIO()
        np.savez(zbuf, D=a)
        data = zbuf.getvalue()
    return data, f"{kind} {shape} {np.dtype(dtype) if not isinstance(dtype, list) else dtype}"


@st.composite
def matrix_files(draw) -> tuple[str, bytes, tuple[int, int], str]:
    """(file name, bytes, (servers, gpus_per_server), what): a matrix to give `moe --matrix`."""
    servers, gpus = draw(st.sampled_from(MOE_GROUPS))
    n = servers * gpus
    if draw(st.booleans()):
        text = draw(csv_matrices(n))
        name = draw(st.sampled_from(("m.csv", "m.csv", "m.txt", "m", "m.CSV", "m.npy")))
        return name, text.encode("utf-8", "surrogateescape"), (servers, gpus), "csv"
    data, what = draw(npy_bytes(n))
    name = draw(st.sampled_from(("m.npy", "m.npy", "m.npy", "m.npz", "m.NPY", "m.csv")))
    return name, data, (servers, gpus), what


# ---------------------------------------------------------------- paths


def _prepare_fifo(folder: Path, name: str) -> None:
    os.mkfifo(folder / name)


def _prepare_folder(folder: Path, name: str) -> None:
    (folder / name).mkdir()


def _prepare_link(target: str) -> Callable[[Path, str], None]:
    def make(folder: Path, name: str) -> None:
        os.symlink(target, folder / name)
    return make


def _prepare_unreadable(folder: Path, name: str) -> None:
    (folder / "locked").mkdir(exist_ok=True)
    (folder / "locked" / Path(name).name).write_text("name: x\n")
    os.chmod(folder / "locked", 0)


def _prepare_file(text: str) -> Callable[[Path, str], None]:
    def make(folder: Path, name: str) -> None:
        (folder / name).write_text(text)
    return make


@dataclass(frozen=True)
class OddPath:
    """A path relative to the example's folder, and how to make what it names before the command runs.

    Only names inside the example's folder: the suite runs as root on CI, where a write to /dev/x.png would
    succeed, and replacing /dev/null by a file would break the machine; /dev/null and /dev/zero are reached
    through symbolic links in the folder."""

    name: str
    prepare: Callable[[Path, str], None] | None = None
    what: str = ""

    def make(self, folder: Path) -> str:
        if self.prepare is not None:
            self.prepare(folder, self.name)
        return self.name


def odd_paths(suffix: str) -> st.SearchStrategy[OddPath]:
    """Paths ending in ``suffix`` (or not) that a file system refuses in one way or another. No NUL byte: a
    command line cannot carry one (execve takes C strings), so only the library's API can meet it."""
    return st.sampled_from((
        OddPath("x" + suffix, None, "plain"),
        OddPath("a" * 300 + suffix, None, "a 300-byte name"),
        OddPath("/".join(["b" * 200] * 25) + suffix, None, "a 5,000-byte path"),
        OddPath(os.fsdecode(b"o\xff" + suffix.encode()), None, "an undecodable byte"),
        OddPath("o\udc80x" + suffix, None, "a lone surrogate"),
        OddPath("a\nb" + suffix, None, "a newline"),
        OddPath("nope/x" + suffix, None, "a missing folder"),
        OddPath("d" + suffix, _prepare_folder, "a folder"),
        OddPath("fifo" + suffix, _prepare_fifo, "a FIFO"),
        OddPath("null" + suffix, _prepare_link("/dev/null"), "a link to /dev/null"),
        OddPath("zero" + suffix, _prepare_link("/dev/zero"), "a link to /dev/zero"),
        OddPath("loop" + suffix, _prepare_link("loop" + suffix), "a link to itself"),
        OddPath("dangling" + suffix, _prepare_link("nowhere/x" + suffix), "a dangling link"),
        OddPath("locked/x" + suffix, _prepare_unreadable, "in a folder with mode 000"),
        OddPath("x" + suffix + ".bak", None, "the wrong suffix"),
        OddPath("x", None, "no suffix"),
        OddPath(suffix, None, "only the suffix"),
        OddPath("", None, "empty"),
        OddPath(" ", None, "a space"),
        OddPath("-x" + suffix, None, "a leading dash"),
        OddPath("exists" + suffix, _prepare_file("old"), "an existing file"),
        OddPath("big" + suffix, lambda f, n: os.truncate(_touch(f / n), 9 * 2**20), "a 9 MiB sparse file"),
    ))


def _touch(path: Path) -> Path:
    path.touch()
    return path


# ---------------------------------------------------------------- option values

INT_OPTION_TEXTS = ("0", "-1", "1", "2", "3", str(2**31), str(2**63), "99999999999999999999999999", "abc", "", "1e3",
                    "nan", " 2", "0x10", "1_000", HUGE_DIGITS)
FLOAT_OPTION_TEXTS = ("0", "0.0", "0.1", "0.5", "1", "-1", "nan", "inf", "-inf", "5e-324", "1e308", "1e-300", "abc",
                      "", "1e400", "-0.0")


def int_option(valid: tuple[int, ...]) -> st.SearchStrategy[str]:
    return st.sampled_from(tuple(map(str, valid))) | st.sampled_from(INT_OPTION_TEXTS)


def float_option(valid: tuple[float, ...]) -> st.SearchStrategy[str]:
    return st.sampled_from(tuple(map(repr, valid))) | st.sampled_from(FLOAT_OPTION_TEXTS)
