"""Imports run one way: inputs -> plan -> budget -> its analyses (a2a, sim, wire) -> sweep and validation ->
views -> the chapter's own layer -> the Python API (api.py) -> cli and web. A module may import its own layer and
the layers below, never above."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "stepbudget"

LAYERS = (
    {"units", "enums", "_html", "maxmin"},
    {"inputs"},
    {"plan"},
    {"budget"},
    {"a2a", "sim", "wire"},
    {"validation", "sweep"},
    {"views"},
    {"chapter"},
    {"api"},
    {"cli", "web", "__main__"},
)
"""Each module's first name under stepbudget, by layer, lowest first."""
APART = {("sim", "a2a")}
"""Same-layer pairs that stay apart: a2a times its plain all-to-all on sim's engine (one timing path), so sim,
the lower of the two, never imports a2a."""
LAYER = {name: i for i, names in enumerate(LAYERS) for name in names}


def _part(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0].removesuffix(".py")


def _imports(path: Path) -> set[str]:
    """The stepbudget modules ``path`` imports (``from stepbudget import units`` is stepbudget.units)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "stepbudget":
                out |= {f"stepbudget.{a.name}" for a in node.names}
            elif node.module.startswith("stepbudget."):
                out.add(node.module)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("stepbudget")}
    return out


MODULES = sorted(p for p in SRC.rglob("*.py") if p.name != "__init__.py" or p.parent != SRC)


def test_every_module_has_a_layer():
    assert {_part(p) for p in MODULES} <= set(LAYER)


@pytest.mark.parametrize("path", MODULES, ids=[str(p.relative_to(SRC)) for p in MODULES])
def test_a_module_imports_only_its_layer_and_below(path):
    mine = _part(path)
    for module in _imports(path):
        theirs = module.split(".")[1] if module.count(".") else ""
        assert theirs in LAYER, f"{module}: the package's public API (stepbudget/__init__) is for users, not modules"
        assert LAYER[theirs] <= LAYER[mine], f"{mine} imports {module}, a layer above it"
        assert (mine, theirs) not in APART, f"{mine} imports {module}"


DOORS = sorted([SRC / "cli.py", *(SRC / "web").rglob("*.py")])
THROUGH_THE_DOOR = ("stepbudget.api", "stepbudget.views", "stepbudget.web")
"""What the command line and the web app may import of the package: the one door (api.py), the views that format
what it returns (not the chapter's layer: that is behind the door), and the web app's own modules."""


@pytest.mark.parametrize("path", DOORS, ids=[str(p.relative_to(SRC)) for p in DOORS])
def test_the_cli_and_the_web_app_reach_the_library_only_through_api(path):
    for module in _imports(path):
        assert module.startswith(THROUGH_THE_DOOR), f"{path.relative_to(SRC)} imports {module}, not through api.py"
