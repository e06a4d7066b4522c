"""Across the formats: every real file under tests/data/configs is claimed by its own importer and no other, and a
truncated copy of any of them is read into problems or fewer fields, never an exception."""

from __future__ import annotations

from pathlib import Path

import pytest

from stepbudget.inputs.importers import IMPORTERS, importer_of, importers, read_config

CONFIGS = Path(__file__).resolve().parents[2] / "data" / "configs"
FILES = sorted(p for p in CONFIGS.glob("*/*") if p.name != "README.md")
"""Each folder is named after the importer module that reads its files."""


def test_every_format_has_real_files_and_every_folder_an_importer():
    folders = {p.parent.name for p in FILES}
    assert folders == set(IMPORTERS)
    assert all(sum(p.parent.name == name for p in FILES) >= 3 for name in IMPORTERS)


@pytest.mark.parametrize("path", FILES, ids=[f"{p.parent.name}/{p.name}" for p in FILES])
def test_a_real_file_is_its_own_importers_alone(path):
    text = path.read_text(encoding="utf-8")
    claims = [m.__name__.rsplit(".", 1)[1] for m in importers() if m.detect(text, path.name)]
    assert claims == [path.parent.name]
    assert importer_of(text, path.name).__name__.endswith(path.parent.name)
    imported = read_config(path)
    assert imported.values and imported.format == importer_of(text, path.name).FORMAT


@pytest.mark.parametrize("path", FILES, ids=[f"{p.parent.name}/{p.name}" for p in FILES])
def test_a_truncated_file_is_read_without_an_exception(path):
    text = path.read_text(encoding="utf-8")
    module = next(m for m in importers() if m.__name__.endswith("." + path.parent.name))
    for cut in (len(text) // 7, len(text) // 3, len(text) // 2, 2 * len(text) // 3, len(text) - 2):
        got = module.read(text[:cut], path.name)
        assert isinstance(got.problems, tuple) and isinstance(dict(got.values), dict)
