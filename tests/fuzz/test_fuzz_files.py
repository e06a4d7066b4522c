"""Files a user hands stepbudget: scenario files (YAML, TOML) mutated from the presets, runs files mutated from
the shipped one, traffic matrices as CSV and .npy. Each gives a result or one line naming the file's field."""

import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from fuzz._drive import drive, example_folder, fuzz_settings
from fuzz.strategies import matrix_files, runs_files, scenario_files, shipped_run_ids

pytestmark = pytest.mark.fuzz

SCENARIO_COMMANDS = (("budget",), ("budget",), ("budget", "--json"), ("memory",), ("show",), ("wire",),
                     ("simulate",))


@fuzz_settings(150)
@given(scenario_files(), st.sampled_from(SCENARIO_COMMANDS))
def test_a_scenario_file_gives_a_result_or_one_line_naming_the_field(scenario, command):
    note(scenario.what)
    note(scenario.text[:3000])
    with example_folder() as folder:
        path = scenario.write(folder)
        drive([command[0], path.name, *command[1:]], folder, scenario.echo + (scenario.name,))


@fuzz_settings(50)
@given(runs_files(), st.sampled_from(((), ("--json",), ("--explain", "first"), ("--explain", "nosuch"))))
def test_a_runs_file_gives_a_result_or_one_line_naming_the_run(runs, options):
    text, what, echo = runs
    note(what)
    if options[:1] == ("--explain",) and options[1] == "first":
        options = ("--explain", shipped_run_ids()[0])
    with example_folder() as folder:
        (folder / "runs.yaml").write_text(text, encoding="utf-8", errors="surrogatepass")
        drive(["validate", "--runs", "runs.yaml", *options], folder, echo + ("runs.yaml",))


@fuzz_settings(150)
@given(matrix_files(), st.sampled_from(("deepseek-v3", "megascale-moe-352b")),
       st.sampled_from(((), ("--json",), ("--skew", "zipf:0.8"))), st.booleans())
def test_a_matrix_gives_a_result_or_one_line_naming_it(matrix, preset, options, sized):
    name, data, (servers, gpus), what = matrix
    note(f"{name}: {what}, {len(data)} bytes")
    size = ["--servers", str(servers), "--gpus-per-server", str(gpus)] if sized else []
    with example_folder() as folder:
        (folder / name).write_bytes(data)
        drive(["moe", preset, "--matrix", name, *size, *options], folder)
