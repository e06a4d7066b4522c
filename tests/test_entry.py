"""The entry point: ``python -m stepbudget`` and the console script, with stdout closed, full or cut short."""

import subprocess
import sys

import pytest

import stepbudget

ENTRY = [sys.executable, "-m", "stepbudget"]


def test_import_stepbudget_loads_no_module_until_a_name_is_used():
    code = "import sys, stepbudget; print(len([m for m in sys.modules if m.startswith('stepbudget.')])); stepbudget.load"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "0\n"
    assert set(stepbudget.__all__) == set(stepbudget._WHERE)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        stepbudget.nothing  # noqa: B018


def test_a_closed_stdout_is_one_line_and_exit_2():
    done = subprocess.run([*ENTRY, "budget"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          preexec_fn=lambda: __import__("os").close(1))
    assert done.returncode == 2 and done.stderr.splitlines() == [
        "stepbudget: error: stdout: it is closed; run with stdout open (e.g. > out.txt)"]


def test_a_full_disk_under_stdout_is_one_line_and_exit_2():
    with open("/dev/full", "w") as full:
        done = subprocess.run([*ENTRY, "search", "megascale-175b", "--top", "200"], stdout=full, stderr=subprocess.PIPE,
                              text=True)
    assert done.returncode == 2 and done.stderr.splitlines() == [
        "stepbudget: error: stdout: cannot write the output (No space left on device); free space or write elsewhere"]


@pytest.mark.parametrize("args", [["budget", "--json"], ["search", "megascale-175b", "--top", "500"]])
def test_a_reader_that_stops_reading_gets_a_quiet_exit(args):
    done = subprocess.run(f"{' '.join(ENTRY)} {' '.join(args)} | head -c 10 >/dev/null; echo ${{PIPESTATUS[0]}}",
                          shell=True, executable="/bin/bash", capture_output=True, text=True)
    assert done.stderr == "" and done.stdout.strip() in ("0", "1")  # 0 when all of it fit in the pipe first


@pytest.mark.parametrize("args, says", [
    (["wire", "--window", "1e300s"], "--window: '1e300s' is not a counter window"),
    (["wire", "--window", "5e-324s"], "--window: '5e-324s' is not a counter window"),
    (["figure", "anim-5.2", "--out", "x.html", "--window", "5e-324s"], "--window: '5e-324s' is not a counter window"),
    (["wire", "--converging", "100000"], "--converging: 100000 bursts cannot converge on one switch port; give 1 to 1,024"),
    (["wire", "--switch-buffer", "1e30B"], "--switch-buffer: '1e30B' is not a switch buffer"),
])
def test_wire_options_past_any_switch_or_counter_are_refused(args, says, tmp_path):
    done = subprocess.run([*ENTRY, *args], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1 and says in done.stderr

