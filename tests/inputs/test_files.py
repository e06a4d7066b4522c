"""Reading and writing files: what would hang, exhaust memory or half-write is refused by name first."""

import os

import pytest

from stepbudget.inputs.files import MAX_INPUT_BYTES, atomic_write, check_writable, partial_name, read_bytes, read_text
from stepbudget.inputs.scenario import ScenarioError


def test_special_files_are_refused_before_they_are_opened(tmp_path):
    os.mkfifo(tmp_path / "fifo")  # opening it would block until a writer came
    for path, kind in ((tmp_path / "fifo", "a FIFO"), ("/dev/zero", "a character device"), (tmp_path, "a folder")):
        with pytest.raises(ScenarioError, match=f"^--runs: '{path}' is {kind}.*, not a file"):
            read_bytes(path, "--runs")


def test_size_and_encoding_are_checked(tmp_path):
    big, latin = tmp_path / "big.yaml", tmp_path / "latin.yaml"
    big.write_bytes(b"#" * (MAX_INPUT_BYTES + 1))
    latin.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(ScenarioError, match=f"at most {MAX_INPUT_BYTES:,} bytes"):
        read_text(big, "scenario")
    with pytest.raises(ScenarioError, match=r"is not UTF-8 text \(byte 9\)"):
        read_text(latin, "scenario")
    assert read_bytes(latin, "scenario") == b"name: caf\xe9\n"  # bytes, for a matrix, are not decoded


def test_missing_and_long_names_say_which(tmp_path):
    with pytest.raises(ScenarioError, match="No such file"):
        read_text(tmp_path / "none.yaml", "scenario")
    with pytest.raises(ScenarioError, match="is 300 bytes; at most 255"):
        read_text(tmp_path / ("a" * 295 + ".yaml"), "scenario")
    with pytest.raises(ScenarioError, match="bytes; at most 4,096"):
        check_writable("/".join(["b" * 200] * 30) + ".png", "--plot")


def test_a_name_that_is_not_utf8_is_refused(tmp_path):
    name = os.fsdecode(b"o\xff.parquet")  # what argv gives for an undecodable byte
    with pytest.raises(ScenarioError, match="^--out: 'o\\\\udcff.parquet' has a byte that is not UTF-8"):
        check_writable(name, "--out")


def test_check_writable_names_the_folder_or_the_target(tmp_path):
    with pytest.raises(ScenarioError, match="does not exist"):
        check_writable(str(tmp_path / "no" / "x.png"), "--plot")
    with pytest.raises(ScenarioError, match="is a folder"):
        check_writable(str(tmp_path), "--plot")
    with pytest.raises(ScenarioError, match="is not a file"):
        check_writable("/dev/null", "--plot")
    check_writable(str(tmp_path / "x.png"), "--plot")


def test_the_temporary_name_fits_beside_a_long_target(tmp_path):
    target = tmp_path / ("a" * 250 + ".png")
    tmp = partial_name(target)
    assert len(tmp.name) <= 255 and tmp.suffix == ".png" and "partial" in tmp.name and tmp.parent == tmp_path
    atomic_write(target, lambda p: p.write_bytes(b"ok"), "--plot")
    assert target.read_bytes() == b"ok" and os.listdir(tmp_path) == [target.name]


def test_a_failed_write_keeps_the_old_file_and_leaves_nothing(tmp_path, monkeypatch):
    target = tmp_path / "x.png"
    target.write_bytes(b"old")

    def no_space(path):
        path.write_bytes(b"half")
        raise OSError(28, "No space left on device")

    with pytest.raises(ScenarioError, match=r"^--plot: cannot write .*\(No space left on device\)"):
        atomic_write(target, no_space, "--plot")
    assert target.read_bytes() == b"old" and os.listdir(tmp_path) == ["x.png"]


def test_cleanup_never_raises_over_the_first_error(tmp_path, monkeypatch):
    from pathlib import Path

    def unlink(self, missing_ok=False):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "unlink", unlink)
    with pytest.raises(ScenarioError, match="Read-only file system"):
        atomic_write(tmp_path / "x.png", lambda p: (_ for _ in ()).throw(OSError(30, "Read-only file system")), "--plot")


def test_interrupted_write_leaves_nothing(tmp_path):
    def interrupted(path):
        path.write_bytes(b"half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(tmp_path / "x.svg", interrupted, "--plot")
    assert os.listdir(tmp_path) == []
