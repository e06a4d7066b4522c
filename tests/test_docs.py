"""The docs site builds, and every block of the README and the docs that can run, runs.

`$ stepbudget ...` blocks (a command and what it prints) are compared figure by figure in
test_readme_blocks.py and tests/validation/test_readme_figures.py. Here: the site builds with
`mkdocs build --strict`; the scenario reference holds every field `show` prints; every
``bash`` line that calls stepbudget exits 0; every ``python`` block runs and prints what the page shows
under it; every ``yaml`` block
loads as a scenario; every synopsis line names options its command has; every module the
architecture page lists exists; the Quick start's test command is what .ci/run runs.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

from _util import doc_pages, scratch_dir

from stepbudget import cli
from stepbudget.inputs.scenario import load
from stepbudget.views.reference import scenario_reference

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", flags=re.S | re.M)


def _blocks(lang: str) -> list[tuple[str, str]]:
    """(page, body) of every fenced block in ``lang`` ('' for a plain block) in the README and the docs."""
    return [(str(p.relative_to(ROOT)), m.group(2)) for p in doc_pages() for m in BLOCK.finditer(p.read_text())
            if m.group(1) == lang]


def _ids(blocks):
    return [f"{page}:{body.splitlines()[0][:50]}" for page, body in blocks]


def test_mkdocs_builds_strict(tmp_path):
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or shutil.which("mkdocs")
    if mkdocs is None:
        pytest.fail("mkdocs is not installed: pip install -e '.[test]' installs it")
    result = subprocess.run([mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")], cwd=ROOT,
                            capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    page = (tmp_path / "site" / "reference" / "scenario" / "index.html").read_text()
    assert "dp_bucket_params" in page and "<!-- scenario-fields -->" not in page  # the hook wrote the tables
    assert "estimate" in (tmp_path / "site" / "reference" / "api" / "index.html").read_text()


def _keys(node, path=""):
    if isinstance(node, dict):
        for key, value in node.items():
            yield path, key
            if isinstance(value, dict):
                yield from _keys(value, f"{path}.{key}" if path else key)


@pytest.mark.parametrize("preset", ["llama3-405b", "deepseek-v3", "megascale-175b"])
def test_the_scenario_reference_holds_every_field_show_prints(preset):
    # `show` is the resolved scenario as the loader sees it: an independent list of every field
    result = CliRunner().invoke(cli.app, ["show", preset])
    assert result.exit_code == 0, result.output
    shown = yaml.safe_load(result.output)
    reference = scenario_reference()
    tables: dict[str, str] = {}
    for part in ("\n" + reference).split("\n## ")[1:]:
        title, _, body = part.partition("\n")
        tables["" if title == "Top level" else title.strip("`")] = body
    missing = [f"{path}.{key}" if path else key for path, key in _keys(shown)
               if f"| `{key}` |" not in tables.get(path, "")]
    assert not missing, f"fields `show {preset}` prints that the reference lacks: {missing}"


BASH = [(page, line) for page, body in _blocks("bash") for line in body.splitlines() if line.startswith("stepbudget ")]


@pytest.mark.parametrize("page,line", BASH, ids=[f"{p}:{line[:60]}" for p, line in BASH])
def test_bash_lines_run(page, line, tmp_path, monkeypatch):
    command = line.split(" | ")[0].split("  #")[0]  # the stepbudget part; what it pipes into is not ours
    args = shlex.split(command)[1:]
    scratch_dir(tmp_path, monkeypatch)
    monkeypatch.setattr(cli, "console", Console(width=200))
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 0, f"{page}: {command!r} exited {result.exit_code}: {result.output[-500:]}"


CELLS = re.compile(r"^```python\n(.*?)^```\n(?:\n```text\n(.*?)^```)?", flags=re.S | re.M)
PYTHON_PAGES = [p for p in doc_pages() if "```python" in p.read_text()]


@pytest.mark.parametrize("path", PYTHON_PAGES, ids=[str(p.relative_to(ROOT)) for p in PYTHON_PAGES])
def test_python_blocks_run_and_print_what_the_page_shows(path, tmp_path, monkeypatch, capsys):
    # a page's python blocks are cells of one notebook: run in order in one namespace; a ```text block right
    # after a cell is what it prints
    scratch_dir(tmp_path, monkeypatch)
    namespace: dict = {"__name__": "__docs__"}
    cells = CELLS.findall(path.read_text())
    assert cells
    for i, (code, shown) in enumerate(cells):
        exec(compile(code, f"{path.name} cell {i + 1}", "exec"), namespace)  # the docs' own code, not input
        printed = capsys.readouterr().out
        assert printed.strip(), f"{path.name} cell {i + 1} prints nothing: it shows the reader nothing"
        if shown:
            want = [line.rstrip() for line in shown.strip().splitlines()]
            assert [line.rstrip() for line in printed.strip().splitlines()] == want, f"{path.name} cell {i + 1}"


YAML = _blocks("yaml")


@pytest.mark.parametrize("page,body", YAML, ids=_ids(YAML))
def test_yaml_blocks_load_as_scenarios(page, body, tmp_path):
    path = tmp_path / "scenario.yaml"
    path.write_text(body)
    if "axes" in yaml.safe_load(body):  # a sweep file: validated as `stepbudget sweep` does, every point resolved
        from stepbudget.sweep.grid import load_sweep, points

        resolved = points(load_sweep(path))
        assert resolved and all(p.error is None for p in resolved), page
        return
    scenario = load(str(path))
    for section, fields in yaml.safe_load(body).items():
        if isinstance(fields, dict):
            for key, value in fields.items():
                if isinstance(value, int) and not isinstance(value, bool):
                    assert getattr(getattr(scenario, section), key) == value, f"{page}: {section}.{key}"


SYNOPSIS = [(page, line.strip()) for page, body in _blocks("") for line in body.splitlines()
            if line.startswith("stepbudget ") and "--" in line]


@pytest.mark.parametrize("page,line", SYNOPSIS, ids=[f"{p}:{line[:50]}" for p, line in SYNOPSIS])
def test_synopsis_options_exist(page, line):
    command = line.split()[1]
    help_text = CliRunner().invoke(cli.app, [command, "--help"], terminal_width=200).output
    options = set(re.findall(r"--[a-z][a-z-]*", line))
    missing = sorted(o for o in options if not re.search(rf"{o}(?![a-z-])", help_text))
    assert not missing, f"{page}: `stepbudget {command}` has no {missing}"


def test_every_synopsis_line_is_checked():
    # each command of the tool appears in a synopsis with options (the Usage block), so the test above covers it
    commands = {line.split()[1] for _, line in SYNOPSIS}
    assert {"show", "import", "gpus", "budget", "memory", "search", "scale", "whatif", "validate", "simulate", "wire",
            "moe", "serve", "figure", "sweep", "sweep-report"} <= commands


def test_the_architecture_page_names_modules_that_exist():
    text = (ROOT / "docs" / "architecture.md").read_text()
    tree = next((m for m in BLOCK.finditer(text) if m.group(2).startswith("src/stepbudget/")), None)
    assert tree is not None, "docs/architecture.md has no module tree"
    named = set(re.findall(r"(?<![\w/])(?:[a-z_]+/)*[a-z_0-9]+\.py|(?<![\w/])[a-z_0-9]+/(?=\s)", tree.group(2)))
    assert len(named) > 30
    src = ROOT / "src" / "stepbudget"
    missing = [n for n in sorted(named) if not any(src.rglob(n.rstrip("/")))]
    assert not missing, f"docs/architecture.md names files that are not in src/stepbudget: {missing}"


def test_the_quick_start_test_command_is_what_ci_runs():
    readme = (ROOT / "README.md").read_text()
    quick = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    install, test = [body.strip() for lang, body in re.findall(r"```(\w*)\n(.*?)```", quick, flags=re.S)]
    assert install.endswith(".venv/bin/stepbudget")
    assert test in (ROOT / ".ci" / "run").read_text()


def test_the_quick_start_main_job_runs():
    # the first Quick start command ends in a bare `stepbudget`: the default scenario's budget
    result = CliRunner().invoke(cli.app, [])
    assert result.exit_code == 0 and "step time" in result.output


def _spellings(value: float) -> set[str]:
    """How a limit may be written on docs/limits.md: 1,024, 1024, 0.001, 1e12, 86,400."""
    out = {f"{value:g}", f"{value:,g}", f"{value:.0e}".replace("e+", "e").replace("e-0", "e-")}
    if float(value).is_integer():
        out |= {f"{int(value):,}", str(int(value))}
    return out


def test_the_limits_page_states_each_limit_as_its_constant_is():
    import importlib

    rows = [line.split("|")[1:-1] for line in (ROOT / "docs" / "limits.md").read_text().splitlines()
            if line.startswith("|") and re.search(r"`[\w.]+\.[A-Z_]+`", line.split("|")[-2])]
    assert len(rows) >= 25
    for cells in rows:
        limit, constants = cells[1], re.findall(r"`([\w.]+)\.([A-Z_]+)`", cells[-1])
        assert constants, cells
        for module, name in constants:
            value = getattr(importlib.import_module(f"stepbudget.{module}"), name)
            assert any(s in limit for s in _spellings(value)), f"{module}.{name} = {value!r}, the page says {limit!r}"
