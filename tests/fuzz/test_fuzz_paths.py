"""Paths a user gives for what stepbudget reads and writes: names too long for the file system, bytes that are
not UTF-8, missing folders, a folder, a FIFO, links to /dev/null and /dev/zero, a folder with mode 000. Each
gives a result or one line naming the option, in bounded time (a FIFO that is opened blocks forever: the
driver's hard timer turns that into a failure, not a hung suite), and never leaves a partial file."""

import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from fuzz._drive import drive, example_folder, fuzz_settings
from fuzz.strategies import odd_paths, preset_data, yaml_text

pytestmark = pytest.mark.fuzz

WRITERS = (
    # (argv before the path, the option, the suffix a sound path has)
    (["search", "hpn-gpt3-175b", "--top", "3"], "--out", ".parquet"),
    (["scale", "llama3-405b", "--gpus", "8192,16384"], "--plot", ".svg"),
    (["scale", "llama3-405b", "--gpus", "8192,16384"], "--plot", ".html"),
    (["simulate", "llama3-405b-puredp"], "--trace", ".json"),
    (["simulate", "llama3-405b-puredp"], "--plot", ".png"),
    (["wire", "llama3-405b"], "--plot", ".svg"),
    (["moe", "deepseek-v3", "--servers", "2", "--gpus-per-server", "2"], "--plot", ".html"),
    (["validate"], "--plot", ".svg"),
    (["figure", "5.3"], "--out", ".svg"),
    (["figure", "anim-5.2"], "--out", ".html"),
)


@fuzz_settings(75)
@given(st.sampled_from(WRITERS), st.data())
def test_an_output_path_is_written_whole_or_refused_by_its_option(writer, data):
    argv, option, suffix = writer
    path = data.draw(odd_paths(suffix))
    note(path.what)
    with example_folder() as folder:
        o = drive([*argv, option, path.make(folder)], folder)
        if o.code == 2:
            assert option in o.stderr or "--" in o.stderr, o.stderr


READERS = (
    # (argv before the path, the suffix, what a sound file holds, or None where the input is the first argument)
    (["budget"], ".yaml", "scenario"),
    (["memory"], ".toml", "scenario"),
    (["show"], ".yml", "scenario"),
    (["validate", "--runs"], ".yaml", "runs"),
    (["moe", "deepseek-v3", "--servers", "2", "--gpus-per-server", "2", "--matrix"], ".npy", "matrix"),
    (["moe", "deepseek-v3", "--servers", "2", "--gpus-per-server", "2", "--matrix"], ".csv", "matrix"),
)


def _sound(kind: str, suffix: str) -> str:
    if kind == "scenario":
        return yaml_text(preset_data("llama3-405b"), None) if suffix != ".toml" else 'base = "llama3-405b"\n'
    if kind == "runs":
        from stepbudget.validation.runs import shipped_runs_text

        return shipped_runs_text()
    return "0,1,1,1\n1,0,1,1\n1,1,0,1\n1,1,1,0\n"


@fuzz_settings(75)
@given(st.sampled_from(READERS), st.data())
def test_an_input_path_is_read_or_refused_by_name_and_never_hangs(reader, data):
    argv, suffix, kind = reader
    path = data.draw(odd_paths(suffix))
    note(path.what)
    with example_folder() as folder:
        name = path.make(folder)
        if path.what == "plain":
            (folder / name).write_text(_sound(kind, suffix))
        drive([*argv, name], folder)
