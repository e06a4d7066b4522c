"""Reading YAML and TOML documents within bounds: what comes out is plain data, or one line says why not.

PyYAML's safe loader constructs no Python objects, but it still turns some text into other types before
validation sees it (``2001-02-30`` into a date, raising on the day) and recurses as deep as the text
nests. Here timestamps stay text, an explicit tag whose text it cannot read is a syntax error, nesting,
the expanded size of anchors and aliases, and integer length are bounded before anything is built, and
``plain`` walks a loaded mapping to refuse what no field takes (bytes, sets, dates, lone surrogates).
"""

from __future__ import annotations

import re
import tomllib
from typing import Any

import yaml

from stepbudget.inputs.errors import ScenarioError
from stepbudget.units import digits

MAX_DEPTH = 32
"""Deepest nesting read: a scenario nests four levels (cluster.gpu.kernels.flash2_fwd); 32 is far past any."""
MAX_NODES = 200_000
"""Most values a document may expand to, anchors and aliases counted each time they are used: the largest
shipped file (published_runs.yaml) has a few thousand; an alias bomb has billions."""
MAX_INT_DIGITS = 30
"""Longest integer read: 10^30 is past any count, size or rate of a job, and far from Python's 4,300-digit
limit on converting text to int."""

_TIMESTAMP = "tag:yaml.org,2002:timestamp"


class LimitError(yaml.YAMLError):
    """A document past one of the bounds above: refused by name, never read as text instead."""


class LongInteger(int):
    """An integer of more digits than MAX_INT_DIGITS, as read: its digit count, not its value (converting it
    would be slow, or past Python's limit), so that plain() can name the field it was given for."""

    def __new__(cls, digits: int) -> "LongInteger":
        return super().__new__(cls, digits)


class BoundedLoader(yaml.SafeLoader):
    """YAML's safe loader, with a key given twice in one mapping an error, timestamps kept as text,
    and nesting, expanded size and integer length bounded."""

    # implicit timestamps ("2001-02-03") stay strings: no field takes a date, and a bad one raised ValueError
    yaml_implicit_resolvers = {first: [(tag, regexp) for tag, regexp in resolvers if tag != _TIMESTAMP]
                               for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise LimitError(f"nested more than {MAX_DEPTH} levels deep; flatten it")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def get_single_node(self):
        node = super().get_single_node()
        if node is not None:
            _expanded_size(node, {}, set())
        return node

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:  # the keys as written, before merges ("<<") are expanded
            if isinstance(key_node, yaml.ScalarNode):
                if (key_node.tag, key_node.value) in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {key_node.value!r} given twice; keep one", key_node.start_mark)
                seen.add((key_node.tag, key_node.value))
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node):
        count = sum(c.isdigit() for c in str(node.value))
        if count > MAX_INT_DIGITS:  # not converted: plain() refuses it by the field it sits in
            return LongInteger(count)
        return super().construct_yaml_int(node)

    def construct_yaml_timestamp(self, node):
        raise LimitError(f"a !!timestamp tag on {str(node.value)[:40]!r}: no field takes a date; remove the tag")


BoundedLoader.add_constructor("tag:yaml.org,2002:int", BoundedLoader.construct_yaml_int)
BoundedLoader.add_constructor(_TIMESTAMP, BoundedLoader.construct_yaml_timestamp)

def _expanded_size(node, sizes: dict[int, int], open_: set[int]) -> int:
    """How many values ``node`` stands for with every alias expanded; LimitError past MAX_NODES or on a
    node that contains itself (``&a [*a]``), which no field can take."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_:
        raise LimitError("an anchor refers to itself (a value that contains itself); remove the alias")
    open_.add(key)
    children = node.value if isinstance(node, yaml.SequenceNode) else \
        [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else []
    size = 1 + sum(_expanded_size(child, sizes, open_) for child in children)
    open_.discard(key)
    if size > MAX_NODES:
        raise LimitError(f"expands to more than {MAX_NODES:,} values (anchors and aliases counted where used); "
                         "write the values out")
    sizes[key] = size
    return size


def read_yaml(text: str):
    """One YAML document within the bounds above, as plain Python data; yaml.YAMLError when it cannot be read
    (LimitError when it is past a bound)."""
    try:
        return yaml.load(text, Loader=BoundedLoader)  # noqa: S506 - a SafeLoader subclass
    except RecursionError:
        raise LimitError("nested too deeply to read; flatten it") from None
    except (ValueError, TypeError, AttributeError, LookupError, OverflowError) as e:  # an explicit tag on text it cannot read
        raise yaml.YAMLError(f"a value cannot be read: {str(e).splitlines()[0] if str(e) else type(e).__name__}") \
            from None


def read_document(text: str, suffix: str, where: str,
                  expected: str = "a mapping of sections (model, cluster, layout, batch)") -> dict[str, Any]:
    """A YAML or TOML file's mapping (by ``suffix``), or a ScenarioError naming ``where`` (and, for a document
    that is not a mapping, what was ``expected``)."""
    kind = "TOML" if suffix == ".toml" else "YAML"
    try:
        data = tomllib.loads(text) if suffix == ".toml" else read_yaml(text)
    except LimitError as e:  # readable, but past a bound: the message says which and the fix
        raise ScenarioError(f"{where}: {e}") from None
    except (yaml.YAMLError, tomllib.TOMLDecodeError) as e:
        raise ScenarioError(f"{where}: not valid {kind} ({str(e).strip().splitlines()[0]}); fix the syntax") from None
    except RecursionError:  # TOML's parser recurses as deep as the text nests
        raise ScenarioError(f"{where}: not valid {kind} (nested too deeply to read); flatten it") from None
    except ValueError:  # tomllib reads an integer past Python's 4,300-digit limit this way
        raise ScenarioError(f"{where}: {_long_number(text)}; at most {MAX_INT_DIGITS} digits") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{where}: expected {expected}")
    return data


def _long_number(text: str) -> str:
    """Where in a TOML text its first over-long number is: the line, and the key that line sets."""
    for n, line in enumerate(text.splitlines(), start=1):
        if run := re.search(r"\d[\d_]{%d,}" % MAX_INT_DIGITS, line):
            key = line.partition("=")[0].strip() if "=" in line[:run.start()] else "a value"
            return f"line {n}: {key[:40]}: a number of {sum(c.isdigit() for c in run.group()):,} digits"
    return "a number too long to read"


_PLAIN = (str, int, float, bool, type(None), list, dict)


def plain(data: object, field: str = "") -> None:
    """ScenarioError naming the field unless ``data`` is mappings, lists, text and numbers within bounds: the
    only things a field takes (a TOML date, YAML's !!binary or !!set, a lone surrogate are refused here)."""
    where = field or "scenario"
    if field.count(".") + field.count("[") > MAX_DEPTH:
        raise ScenarioError(f"{where[:80]}...: nested more than {MAX_DEPTH} levels deep; flatten it")
    if not isinstance(data, _PLAIN):
        raise ScenarioError(f"{where}: a {type(data).__name__} value; give text, a number, a list or a mapping")
    if isinstance(data, LongInteger):
        raise ScenarioError(f"{where}: an integer of {int(data):,} digits; at most {MAX_INT_DIGITS}")
    if isinstance(data, int) and not isinstance(data, bool) and abs(data) >= 10**MAX_INT_DIGITS:
        raise ScenarioError(f"{where}: an integer of {digits(data):,} digits; at most {MAX_INT_DIGITS}")
    if isinstance(data, str):
        try:
            data.encode("utf-8")
        except UnicodeEncodeError:
            raise ScenarioError(f"{where}: {data[:40]!r} has a character that is not Unicode text (a lone surrogate); "
                                "remove it") from None
    if isinstance(data, dict):
        for key, value in data.items():
            name = key if isinstance(key, str) else repr(key)
            plain(name, where)  # a key is text that messages print too
            plain(value, f"{field}.{name}" if field else name)
    elif isinstance(data, list):
        for i, value in enumerate(data):
            plain(value, f"{where}[{i}]")
