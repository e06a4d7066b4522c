"""Regression cases of the fuzzer (tests/fuzz) and of the hardening issue: each odd input gives one line on
stderr naming the field or option and exit code 2, or, where a case says so, the right result.

Through the in-process driver of tests/fuzz (the same checks as every fuzz example: exit 0 or 2, one line
naming what is wrong, no traceback, no nan or inf on stdout, no partial file), except the cases that could hang
or exhaust memory, or that are about the process itself (a closed stdout, a broken pipe, Ctrl-C): those run
the installed command in a subprocess, with a timeout and a 4 GiB cap on its address space, so that the suite
never hangs or gets killed whatever the code does.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from fuzz._drive import ERROR_PREFIX, Outcome, check, drive, problems, run_cli

STEPBUDGET = str(Path(sys.executable).with_name("stepbudget"))
"""The console script of this environment (pip install -e . puts it beside the interpreter)."""

ADDRESS_SPACE = 4 * 2**30
"""The subprocess's cap: a run that needs more is refusing too late (a valid one needs a few hundred MB)."""

HANG_S = 30
"""A refusal takes well under a second; a subprocess past this has hung (a FIFO read, an unbounded loop)."""

HUGE = "9" * 5000
"""An integer of 5,000 digits: past Python's 4,300-digit limit on str <-> int."""


def _cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def run_sub(argv: list[str], folder: Path, timeout: float = HANG_S, **popen) -> Outcome:
    """``stepbudget *argv`` in a subprocess in ``folder``: an Outcome whose code is None when it outlived
    ``timeout`` (it is killed)."""
    start = time.perf_counter()
    try:
        r = subprocess.run([STEPBUDGET, *argv], cwd=folder, capture_output=True, timeout=timeout,
                           preexec_fn=_cap_memory, **popen)
        code, out, err = r.returncode, r.stdout, r.stderr
    except subprocess.TimeoutExpired as e:
        code, out, err = None, e.stdout or b"", e.stderr or b""
    return Outcome(tuple(argv), code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"),
                   time.perf_counter() - start, folder)


def refused(o: Outcome, *names: str) -> Outcome:
    """``o`` passed the driver's checks, was refused (exit 2), and its one line names each of ``names``."""
    check(o)
    assert o.code == 2, f"{o.command}: exit {o.code}, not 2; stdout: {o.stdout[:300]}"
    for name in names:
        assert name in o.stderr, f"{o.command}: the line does not name {name!r}: {o.stderr}"
    return o


def cli(tmp_path, *argv: str) -> Outcome:
    return run_cli(list(argv), tmp_path)


# ---------------------------------------------------------------- YAML's types: dates, tags


def test_a_date_looking_source_is_text(tmp_path):
    # a source is text: "2001-02-30" (no such day) is read as the string typed, and show prints it back as one
    drive(["budget", "llama3-405b", "--set", "source=2001-02-30"], tmp_path)
    o = drive(["show", "llama3-405b", "--set", "source=2001-02-30"], tmp_path)
    assert o.code == 0 and yaml.safe_load(o.stdout)["source"] == "2001-02-30"


def test_a_date_looking_source_in_a_file_is_text(tmp_path):
    (tmp_path / "s.yaml").write_text("base: llama3-405b\nsource: 2001-02-30\n")
    drive(["budget", "s.yaml"], tmp_path)
    o = drive(["show", "s.yaml"], tmp_path)
    assert o.code == 0 and yaml.safe_load(o.stdout)["source"] == "2001-02-30"


def test_a_timestamp_tag_on_text_is_refused_by_name(tmp_path):
    refused(cli(tmp_path, "budget", "llama3-405b", "--set", "name=!!timestamp abc"), "name")


def test_a_timestamp_tag_on_text_in_a_file_is_refused(tmp_path):
    (tmp_path / "s.yaml").write_text("base: llama3-405b\nname: !!timestamp abc\n")
    refused(cli(tmp_path, "budget", "s.yaml"), "s.yaml")


# ---------------------------------------------------------------- depth and length


def test_brackets_135_deep_in_a_set_value_are_refused_by_name(tmp_path):
    refused(cli(tmp_path, "budget", "llama3-405b", "--set", "name=" + "[" * 135), "name")


def test_brackets_135_deep_in_a_file_are_refused(tmp_path):
    (tmp_path / "s.yaml").write_text("base: llama3-405b\nname: " + "[" * 135 + "]" * 135 + "\n")
    refused(cli(tmp_path, "budget", "s.yaml"), "s.yaml")


def test_a_5000_digit_integer_in_a_set_value_is_refused_by_field(tmp_path):
    refused(cli(tmp_path, "budget", "llama3-405b", "--set", f"layout.pp={HUGE}"), "layout.pp")


def test_a_5000_digit_integer_in_yaml_is_refused_by_field(tmp_path):
    (tmp_path / "s.yaml").write_text(f"base: llama3-405b\nlayout:\n  pp: {HUGE}\n")
    refused(cli(tmp_path, "budget", "s.yaml"), "pp")


def test_a_5000_digit_integer_in_toml_is_refused_by_field(tmp_path):
    (tmp_path / "s.toml").write_text(f'base = "llama3-405b"\n[layout]\npp = {HUGE}\n')
    refused(cli(tmp_path, "budget", "s.toml"), "pp")


def test_a_lone_surrogate_in_a_scenario_is_refused_by_field(tmp_path):
    (tmp_path / "s.yaml").write_text('base: llama3-405b\nname: "\\udc80x"\n')
    refused(cli(tmp_path, "budget", "s.yaml"), "name")


# ---------------------------------------------------------------- paths

LONG_NAME = "a" * 300
"""A 300-byte file name: past the 255 bytes of ext4, tmpfs and most file systems."""


@pytest.mark.parametrize("argv, option", [
    (["scale", "llama3-405b", "--plot", LONG_NAME + ".svg"], "--plot"),
    (["search", "hpn-gpt3-175b", "--top", "3", "--out", LONG_NAME + ".parquet"], "--out"),
    (["figure", "5.3", "--out", LONG_NAME + ".png"], "--out"),
    (["budget", LONG_NAME + ".yaml"], "scenario"),
], ids=["plot", "search-out", "figure-out", "scenario"])
def test_a_name_longer_than_the_file_system_takes_is_refused_by_option(tmp_path, argv, option):
    refused(cli(tmp_path, *argv), option)


def test_an_undecodable_byte_in_out_is_refused_by_option(tmp_path):
    refused(cli(tmp_path, "search", "hpn-gpt3-175b", "--top", "3", "--out", os.fsdecode(b"o\xff.parquet")), "--out")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a folder of mode 000 anyway")
def test_a_scenario_in_an_unreadable_folder_is_refused_by_name(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "s.yaml").write_text("base: llama3-405b\n")
    locked.chmod(0)
    try:
        refused(cli(tmp_path, "budget", "locked/s.yaml"), "scenario")
    finally:
        locked.chmod(0o700)


# ---------------------------------------------------------------- stdout that cannot be written


def test_a_closed_stdout_is_one_line_or_quiet(tmp_path):
    r = subprocess.run(f"exec {STEPBUDGET} budget >&-", shell=True, cwd=tmp_path, capture_output=True, text=True,
                       timeout=HANG_S)
    lines = r.stderr.splitlines()
    assert "Traceback" not in r.stderr, r.stderr
    if r.returncode == 2:
        assert len(lines) == 1 and lines[0].startswith(ERROR_PREFIX), r.stderr
    else:
        assert r.returncode == 0 and not lines, (r.returncode, r.stderr)


def test_a_broken_pipe_is_quiet(tmp_path):
    # `stepbudget budget | head -0`: the reader is gone before the first write
    p = subprocess.Popen([STEPBUDGET, "budget"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()
    try:
        err = p.stderr.read().decode()
        p.wait(timeout=HANG_S)
    finally:
        p.kill()
    # exit 1, quietly, as Click and rich exit on a broken pipe (docs/limits.md); 0 if all of it fit in the pipe
    assert p.returncode in (0, 1), (p.returncode, err)
    assert err == "", err


# ---------------------------------------------------------------- what is not a file


def test_runs_from_dev_zero_are_refused_by_option(tmp_path):
    refused(run_sub(["validate", "--runs", "/dev/zero"], tmp_path), "--runs")


def test_a_matrix_from_dev_zero_is_refused_by_option(tmp_path):
    refused(run_sub(["moe", "--matrix", "/dev/zero"], tmp_path), "--matrix")


@pytest.mark.parametrize("argv, option", [
    (["validate", "--runs", "fifo.yaml"], "--runs"),
    (["moe", "--matrix", "fifo.npy"], "--matrix"),
    (["budget", "fifo.yaml"], "fifo.yaml"),
], ids=["runs", "matrix", "scenario"])
def test_a_fifo_is_refused_by_name_before_it_is_opened(tmp_path, argv, option):
    os.mkfifo(tmp_path / argv[-1])  # opened, it would block until HANG_S: refused() fails on a hang
    refused(run_sub(argv, tmp_path), option)


# ---------------------------------------------------------------- sizes past any machine


@pytest.mark.parametrize("argv, option", [
    (["search", "megascale-175b", "--gpus", "9223372036854775808"], "--gpus"),
    (["scale", "llama3-405b", "--gpus", "99999999999999999999999999", "--research"], "--gpus"),
    (["moe", "deepseek-v3", "--servers", "100000"], "--servers"),
], ids=["search-gpus", "scale-research", "moe-servers"])
def test_a_size_past_any_machine_is_refused_by_option(tmp_path, argv, option):
    refused(run_sub(argv, tmp_path), option)


def test_servers_past_int64_name_the_option_and_the_limit(tmp_path):
    o = refused(run_sub(["moe", "--servers", "10000000000000000000000"], tmp_path), "--servers")
    assert "Maximum allowed size exceeded" not in o.stderr and any(c.isdigit() for c in o.stderr), o.stderr


@pytest.mark.parametrize("argv", [
    ["moe", "deepseek-v3", "--servers", "32", "--gpus-per-server", "8"],
    ["moe", "deepseek-v3", "--skew", "zipf:0.8", "--servers", "4096", "--gpus-per-server", "1"],
], ids=["256-gpus", "4096-servers-zipf"])
def test_a_large_ep_group_finishes_in_bounded_time_or_is_refused_by_its_limit(tmp_path, argv):
    o = run_sub(argv, tmp_path, timeout=90)
    check(o)
    if o.code == 2:
        assert "--servers" in o.stderr and any(c.isdigit() for c in o.stderr), o.stderr


def _npy_header_only(path: Path, shape: tuple[int, ...]) -> None:
    with open(path, "wb") as fh:
        np.lib.format.write_array_header_1_0(fh, {"descr": "<f8", "fortran_order": False, "shape": shape})
        fh.write(b"\0" * 64)


def test_an_npy_claiming_ten_billion_elements_is_refused_before_allocating(tmp_path):
    _npy_header_only(tmp_path / "m.npy", (10**5, 10**5))
    refused(run_sub(["moe", "--matrix", "m.npy"], tmp_path), "--matrix")


def test_a_truncated_npy_is_refused_by_option(tmp_path):
    buf = tmp_path / "full.npy"
    np.save(buf, np.ones((64, 64)))
    (tmp_path / "m.npy").write_bytes(buf.read_bytes()[:1000])
    refused(cli(tmp_path, "moe", "--matrix", "m.npy"), "--matrix")


def test_an_npz_is_refused_by_option(tmp_path):
    np.savez(tmp_path / "m.npz", D=np.ones((64, 64)))
    refused(cli(tmp_path, "moe", "--matrix", "m.npz"), "--matrix")


# ---------------------------------------------------------------- numbers at the edge of float64


def test_a_subnormal_nvlink_efficiency_gives_no_nan(tmp_path):
    drive(["scale", "llama3-405b", "--set", "cluster.nvlink_efficiency=5e-324"], tmp_path)


def test_a_huge_optimizer_state_gives_no_inf(tmp_path):
    drive(["budget", "llama3-405b", "--set", "precision.optimizer_bytes=1.7e308"], tmp_path)
    drive(["memory", "llama3-405b", "--set", "precision.optimizer_bytes=1.7e308", "--json"], tmp_path)


def test_a_subnormal_link_rate_is_one_line(tmp_path):
    o = drive(["simulate", "hpn-gpt3-175b", "--link-rate", "5e-324"], tmp_path)
    if o.code == 2:
        assert "--link-rate" in o.stderr, o.stderr


# ---------------------------------------------------------------- what the fuzzer found (tests/fuzz)


def test_a_subnormal_hbm_efficiency_is_refused_or_timed(tmp_path):
    # was a TypeError in units.fmt_time and a RuntimeWarning in budget.compute
    drive(["budget", "deepseek-v3", "--set", "cluster.gpu.kernels.hbm=5e-324"], tmp_path)
    drive(["budget", "deepseek-v3", "--json", "--set", "cluster.gpu.kernels.hbm=5e-324"], tmp_path)


def test_an_empty_npy_is_refused_by_option(tmp_path):
    # was exit 130 and nothing on stderr: numpy's EOFError read as Ctrl-C by Click
    (tmp_path / "m.npy").write_bytes(b"")
    refused(cli(tmp_path, "moe", "deepseek-v3", "--matrix", "m.npy"), "--matrix")


def test_a_too_long_matrix_name_says_so_in_words(tmp_path):
    # was "([Errno 36] File name too long: ...)" inside the line
    refused(cli(tmp_path, "moe", "deepseek-v3", "--servers", "2", "--gpus-per-server", "2", "--matrix",
                LONG_NAME + ".npy"), "--matrix")


def test_a_switch_buffer_of_nothing_gives_no_warning(tmp_path):
    # gave "RuntimeWarning: invalid value encountered in divide" (wire.py, 0 B / 0 B/s) on stderr
    o = drive(["wire", "deepseek-v3", "--converging", "1", "--switch-buffer", "0B"], tmp_path)
    if o.code == 2:
        assert "--switch-buffer" in o.stderr or "--converging" in o.stderr, o.stderr


def test_a_counter_window_too_short_to_draw_names_the_option(tmp_path):
    # said "counter window: a 0.001 s window gives 12,569 readings ..." without naming --window
    refused(cli(tmp_path, "figure", "anim-5.2", "--out", "f.svg", "--window", "1ms"), "--window")


# ---------------------------------------------------------------- keys


@pytest.mark.parametrize("item, key", [(".pp=1", ".pp"), (".=1", ".")])
def test_an_empty_name_in_a_key_is_named(tmp_path, item, key):
    o = refused(cli(tmp_path, "budget", "--set", item), "--set")
    assert repr(key) in o.stderr or f" {key}:" in o.stderr, o.stderr
    assert ": unknown field" not in o.stderr, o.stderr


# ---------------------------------------------------------------- Ctrl-C


@pytest.mark.parametrize("delay_s", [0.05, 0.1, 0.2, 0.3, 0.5, 0.8])
def test_ctrl_c_during_start_up_exits_130_without_a_traceback(tmp_path, delay_s):
    p = subprocess.Popen([STEPBUDGET, "budget"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(delay_s)
    finished = p.poll() is not None
    p.send_signal(signal.SIGINT)
    try:
        out, err = p.communicate(timeout=HANG_S)
    finally:
        p.kill()
    text = err.decode("utf-8", "replace")
    assert "Traceback" not in text, text
    # a budget that ended between the poll and the signal printed all of itself and exits 0: no race is a failure
    done = finished or (p.returncode == 0 and b"step time" in out)
    assert p.returncode in (130, -signal.SIGINT) or (done and p.returncode == 0), (p.returncode, text)


@pytest.mark.parametrize("delay_s", [1.0, 2.0, 3.5])
def test_ctrl_c_during_a_search_leaves_no_partial_file(tmp_path, delay_s):
    p = subprocess.Popen([STEPBUDGET, "search", "deepseek-v3", "--top", "3", "--out", "x.parquet"], cwd=tmp_path,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(delay_s)
    p.send_signal(signal.SIGINT)
    try:
        _, err = p.communicate(timeout=HANG_S * 2)
    finally:
        p.kill()
    text = err.decode("utf-8", "replace")
    left = sorted(str(x.name) for x in tmp_path.rglob("*partial*"))
    assert not left, f"left behind: {left}"
    assert "Traceback" not in text, text
    assert p.returncode in (0, 130, -signal.SIGINT), (p.returncode, text)
    if p.returncode != 0:
        assert not (tmp_path / "x.parquet").exists() or (tmp_path / "x.parquet").stat().st_size > 0


def test_the_driver_itself_sees_what_it_must(tmp_path):
    # the checks every case above relies on: a traceback, a line that is not an error line, a nan and a partial
    # file are each caught (one error line per problem is what a scenario with several problems gives)
    o = Outcome(("budget",), 2, "step nan s\n", "stepbudget: error: layout.pp: bad\nmore\n", 0.1, tmp_path)
    (tmp_path / ".x.parquet.partial-1.parquet").write_text("")
    found = " | ".join(problems(o))
    assert "does not start" in found and "non-finite" in found and "half-written" in found
    two = Outcome(("budget",), 2, "", "stepbudget: error: layout.pp: bad\nstepbudget: error: layout.tp: bad\n", 0.1,
                  tmp_path / "none")
    assert problems(two) == []
    assert problems(Outcome(("budget",), 1, "", "Traceback (most recent call last):\n", 0.1, tmp_path / "none"))


@pytest.mark.parametrize("key", ["", " ", "\t"])
def test_a_blank_field_name_is_refused_naming_its_section(tmp_path, key):
    # found by the long fuzz profile: a key renamed to "" gave ": unknown field", naming nothing
    (tmp_path / "s.yaml").write_text(f"base: llama3-405b\nmodel:\n  {key!r}: 2\n".replace("'", '"'))
    o = refused(cli(tmp_path, "budget", "s.yaml"), "model")
    assert o.stderr.startswith(f"stepbudget: error: model: a field named {key!r} is unknown; remove it")


def test_a_ctrl_c_python_could_not_raise_is_raised_again_in_the_main_thread():
    # a Ctrl-C inside pydantic's call back into a validator is "unraisable": Python printed it as a traceback
    # and ran on; the command's hook hands it back to the main thread, which exits 130 as on any other Ctrl-C
    from types import SimpleNamespace

    from stepbudget import cli

    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            cli._unraisable(SimpleNamespace(exc_value=KeyboardInterrupt()))
            for _ in range(1000):  # the interrupt lands at a bytecode boundary of the main thread
                time.sleep(0.001)
    finally:
        signal.signal(signal.SIGINT, before)
