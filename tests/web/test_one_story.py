"""One story between the page and the command line: every number a panel's full model shows, the command under it
prints.

For each of the seven panels, at its defaults and after one change of a control, the test reads in a real browser
what the panel's full model shows (the "full model says" box; Panel 5.3's table, which is all full model; Panel
5.7's what-if table; Panel 5.5's tiles, the chapter's formulas that `moe` prints beside its full layer), runs the
command the page shows under it, as shown, and checks that each figure (a number with its unit, formatted by the
same functions on both sides) is in what the command printed. A box may also quote the first-order side it is
compared with (Panel 5.4's first column, a tile's "12.6 GB instead of ..."): those figures must be the panel's own
first-order figures. Not compared: Panel 5.3's per-layer column and its HPN re-read (the paper's measured sizes),
and the words.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor

from playwright.sync_api import expect

from _web import load, pick, type_in

FIGURE = re.compile(
    r"(?<![\w.\-/=])\d[\d,]*(?:\.\d+)?"
    r"(?: ?(?:%|×)| (?:[kMGTP]?FLOP/s|[kMGTP]?B/s|[kMGT]b/s|[kMGTP]?B|ms|µs|ns|s)(?![\w/]))?(?![\w/])(?!\.\d)")
"""A figure as the page and the command line format it: 1,536; 6.23 s; 40.1%; 400 Gb/s; 562 TFLOP/s; 5.2×. Digits
inside a word (TP8, FP32) or a flag (cluster.gpus=32768) are not figures."""
NAMES = re.compile(r"Llama 3(?: 405B)?|GPT-3 175B")
"""Names with digits in them, which the page writes out and the command line spells as a preset (llama3-405b)."""
BOX = str.maketrans({c: " " for c in "│┃┡━╇┩└┘┌┐─┼┬┴╭╮╰╯║┏┓┗┛╋┳┻┣┫"})


def figures(text: str) -> set[str]:
    """The figures of a text; a table's box lines and wrapped cells are read as the words they hold."""
    return set(FIGURE.findall(" ".join(NAMES.sub(" ", text).translate(BOX).split())))


CHANGES = {  # one change of a control per panel: (how, control, value)
    "p51": (type_in, "p51-M", "128"),
    "p52": (pick, "p52-kind", "fsdp"),
    "p53": (type_in, "p53-ep", "64"),
    "p54": (type_in, "p54-G", "32,768"),
    "p55": (type_in, "p55-expert_ffn", "1408"),
    "p56": (type_in, "p56-rate", "200 Gb/s"),
    "p57": (pick, "p57-hbm", "141"),
}

SHOWN = """(pid) => {
  const text = (nodes) => Array.from(nodes, (n) => n.innerText).join('\\n');
  const q = (s) => document.querySelectorAll(s);
  const box = document.getElementById(pid + '-full');
  const full = {
    p53: () => text(q('#p53-summary, #p53-out .tiles .tile, #p53-table td:not(:nth-child(12))')),
    p55: () => text(q('#p55-out .tiles .value')),
    p57: () => text(q('#p57-table tbody td')),
    p54: () => text(q('#p54-full > :not(.command):not(table), #p54-terms td:nth-child(1), #p54-terms td:nth-child(3)')),
  }[pid] || (() => text(Array.from(box.children).filter((c) => !c.classList.contains('command'))));
  const first = pid === 'p54' ? q('#' + pid + '-out .tiles, #p54-terms td:nth-child(2)') : q('#' + pid + '-out .tiles');
  return {full: full(), first: ['p51', 'p52', 'p54'].includes(pid) ? text(first) : '',
          command: document.getElementById(pid + '-command').innerText};
}"""
"""What panel ``pid`` shows: its full model's text, the first-order text it may quote, and its command."""


DRIVER = """
import contextlib, io, json, shlex, sys
from stepbudget import cli
printed = {}
for command in json.loads(sys.stdin.read()):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.app(shlex.split(command)[1:], prog_name="stepbudget", standalone_mode=False)
    printed[command] = [code or 0, out.getvalue()]
json.dump(printed, sys.stdout)
"""
"""The commands, each as the installed `stepbudget` runs it (cli.app), one after another in one process: a process
a command would import the package a dozen times over."""


def _run(commands: list[str]) -> dict[str, str]:
    """What each command prints, run as a subprocess of this interpreter."""
    assert all(shlex.split(c)[0] == "stepbudget" for c in commands), commands
    done = subprocess.run([sys.executable, "-c", DRIVER], input=json.dumps(commands), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = json.loads(done.stdout)
    failed = {c: code for c, (code, _) in printed.items() if code}
    assert not failed, f"commands that exit non-zero: {failed}"
    return {c: out for c, (_, out) in printed.items()}


# One page load for all seven panels, twice seven readings, and the commands in two processes (the defaults', then
# the changes') beside the browser: about 10 s on a 2-core machine, over the 5 s a test should take, and still
# less than seven tests that each load the page (3 s apiece) and run their commands.
def test_every_panel_shows_what_its_command_prints(watched, server):
    page = watched
    load(page, server)
    shown: dict[tuple[str, str], dict] = {}
    read = lambda pid: page.evaluate(SHOWN, pid)  # noqa: E731
    with ThreadPoolExecutor(max_workers=2) as pool:
        for pid in CHANGES:
            shown[(pid, "defaults")] = read(pid)
        defaults: Future = pool.submit(_run, sorted({s["command"] for s in shown.values()}))
        for pid, (how, ident, value) in CHANGES.items():
            how(page, ident, value)
        for pid, (_, ident, value) in CHANGES.items():  # the command follows the change: the panel has computed it
            expect(page.locator(f"#{pid}-command")).not_to_have_text(shown[(pid, "defaults")]["command"])
            shown[(pid, f"{ident} = {value}")] = read(pid)
        changed = {s["command"] for s in shown.values()} - {s["command"] for (_, w), s in shown.items() if w == "defaults"}
        printed = {c: figures(out) for c, out in (*defaults.result().items(), *_run(sorted(changed)).items())}
    wrong = []
    for (pid, when), seen in shown.items():
        on_page = figures(seen["full"])
        assert len(on_page) >= 3, f"{pid} at {when}: too few figures to compare ({seen['full']!r})"
        missing = sorted(on_page - printed[seen["command"]] - figures(seen["first"]))
        if missing:
            wrong.append(f"{pid} at {when}: {missing} are not in what `{seen['command']}` prints")
    assert not wrong, "\n".join(wrong)
