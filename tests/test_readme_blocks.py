"""The README's printed command blocks are what the tool prints today.

Each ```$ stepbudget ...``` block other than `validate` (tests/validation/test_readme_figures.py
checks those row by row) is run, and every figure the README shows in it - a number with its
unit, a percentage, a ratio, a count - must appear in what the command prints. Blocks may leave
rows out; they may not show a figure the tool no longer gives. Figures that time the tool itself
(layouts per second, a schedule's host time) vary with the machine and are not compared.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from _util import doc_text, scratch_dir

from stepbudget import cli

ROOT = Path(__file__).resolve().parents[1]
README = doc_text()
"""The README and the docs pages (docs/**/*.md): every command block in either is run."""
BLOCKS = [b for b in re.findall(r"```\n(\$ stepbudget .*?)```", README, flags=re.S)
          if not b.startswith("$ stepbudget validate")]
FIGURE = re.compile(r"(?<![\w.])[+-]?\d[\d,]*(?:\.\d+)?(?: ?(?:%|x|ms|us|µs|s|GB/s|TB/s|GB|MB|kB|TB|B|bits))?(?![\w.])")
MACHINE_TIMED = re.compile(r"evaluated in [\d.]+ \w+ \([\d,]+ layouts/s\)|computed in [\d.]+ \w+")
FILE_OPTIONS = ("--plot", "--trace", "--out")  # files the block writes; they print nothing to compare


def figures(text: str) -> set[str]:
    return set(FIGURE.findall(re.sub(r"\s+", " ", MACHINE_TIMED.sub("", text))))


def test_the_readme_has_command_blocks():
    commands = {b.split()[2] for b in BLOCKS}
    assert {"budget", "memory", "search", "scale", "whatif", "simulate", "wire", "moe"} <= commands


@pytest.mark.parametrize("block", BLOCKS, ids=[b.splitlines()[0][2:70] for b in BLOCKS])
def test_printed_block_figures_are_the_tools(block, monkeypatch, tmp_path):
    command, *output = block.splitlines()
    args = shlex.split(command)[2:]
    for option in FILE_OPTIONS:
        while option in args:
            i = args.index(option)
            del args[i:i + 2]
    scratch_dir(tmp_path, monkeypatch)
    monkeypatch.setattr(cli, "console", Console(width=400))
    result = CliRunner().invoke(cli.app, args)
    printed = figures(result.output)
    shown = figures("\n".join(line for line in output if not line.startswith("wrote ")))
    assert shown, f"no figures in the README block of {command!r}"
    missing = sorted(shown - printed)
    assert not missing, f"{command!r}: the README shows {missing}, which the tool no longer prints"
    rows: dict[str, tuple[set[str], int]] = {}
    for line in result.output.splitlines():  # the tool's rows by their label, the words before the first figure
        seen, width = rows.get(_label(line), (set(), 0))
        rows[_label(line)] = (seen | figures(line), max(width, len(line.rstrip())))
    for line in output:
        label = _label(line)
        # a row the tool prints under the same label shows the same figures; a note the tool wraps onto more
        # lines than the README does (longer here than there) is checked against the whole output above
        if label and label in rows and len(line.rstrip()) <= rows[label][1] + 10:
            wrong = sorted(figures(line) - rows[label][0])
            assert not wrong, f"{command!r}: the README's row {label!r} shows {wrong}, not what the tool prints there"


_BOX = str.maketrans({c: " " for c in "│┃┡━╇┩└┘┌┐─┼┬┴╭╮╰╯║┏┓┗┛╋┳┻┣┫"})


def _label(line: str) -> str:
    """A row's label: its words before the first figure, or the first figure where the row starts with one (a
    table's GPU count), box characters and spacing aside."""
    text = re.sub(r"\s+", " ", MACHINE_TIMED.sub("", line.translate(_BOX))).strip()
    first = FIGURE.search(text)
    if first is None:
        return ""
    return text[:first.start()].strip() or first.group(0)
