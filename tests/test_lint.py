"""ruff over the source, the tests, the benchmarks and the scripts, and mypy over src/ (their settings are in pyproject.toml):
lint and types run with the tests, so .ci/run checks them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.fail("ruff is not installed: pip install -e '.[test]' installs it")
    result = subprocess.run([ruff, "check", "--no-cache", "src", "tests", "benchmarks", "scripts"], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: pip install -e '.[test]' installs it")
    return found


def test_mypy_finds_nothing():
    result = subprocess.run([_tool("mypy"), "--no-incremental"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_pre_commit_config_is_valid_and_runs_the_same_checks():
    import yaml

    result = subprocess.run([_tool("pre-commit"), "validate-config", ".pre-commit-config.yaml"], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    hooks = {h["id"]: h["entry"] for repo in yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())["repos"]
             for h in repo["hooks"]}
    assert hooks["ruff"].startswith("ruff check") and hooks["mypy"] == "mypy" and "test_imports.py" in hooks["imports"]
