"""What `moe` takes in: the EP group's size, the skew, a matrix as an array or a .npy/CSV file.

Every bad input ends in one ScenarioError line naming the parameter (the CLI: the option, exit 2), before
anything that grows with the input is built; every accepted matrix is finite bytes of a bounded size.
"""

import io
import json
import os
import re
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from typer.testing import CliRunner

import stepbudget as sb
from stepbudget.a2a import report
from stepbudget.a2a.matrix_input import MAX_EP_GPUS, MAX_MATRIX_GPUS, MAX_PAIR_BYTES, check_ep_group, checked_matrix, load_matrix
from stepbudget.a2a.report import Skew, moe_report, parse_skew
from stepbudget.cli import app
from stepbudget.inputs.scenario import ScenarioError

DEEPSEEK = sb.load("deepseek-v3")


def _one_line(excinfo) -> str:
    message = str(excinfo.value)
    assert "\n" not in message, message
    return message


def _cli(*args):
    r = CliRunner().invoke(app, ["moe", *args])
    return r.exit_code, r.stdout, r.stderr.strip()


def _refused(*args) -> str:
    """The one stderr line of a refused `moe` run (exit 2, nothing on stdout, no traceback)."""
    code, out, err = _cli(*args)
    assert code == 2 and out == "" and len(err.splitlines()) == 1 and "Traceback" not in err, (code, out, err)
    assert err.startswith("stepbudget: error: --"), err
    return err


def _npy(header: object, body: bytes = b"", version: bytes = b"\x01\x00") -> bytes:
    """A .npy file's bytes with any header text (``header`` is repr'd unless it is already a str)."""
    text = (header if isinstance(header, str) else repr(header)).encode("latin1", "replace") + b"\n"
    size = len(text).to_bytes(2 if version == b"\x01\x00" else 4, "little")
    return b"\x93NUMPY" + version + size + text + body


# ---------------------------------------------------------------- the EP group


@pytest.mark.parametrize("S, G, fragments", [
    (100_000, 8, ["100,000 x 8 = 800,000 GPUs", "800,000 x 800,000 traffic matrix needs 4.7 TiB", "days",
                  "at most 1,024 GPUs (e.g. 128 x 8)"]),
    (16384, 1, ["16,384 x 1 = 16,384 GPUs", "2.0 GiB", "hours", "at most 1,024"]),
    (4096, 1, ["4,096 x 1 = 4,096 GPUs: over the 1,024", "~9 min at 4,096", "give at most 1,024"]),
    (10**22, 8, ["~10^22 x 8 = ~10^23 GPUs", "~10^47 bytes", "at most 1,024"]),
    (10**400, 10**400, ["~10^400 x ~10^400", "at most 1,024"]),  # past a float: the words stay in ints and logs
    (129, 8, ["129 x 8 = 1,032 GPUs: over the 1,024 one all-to-all is timed for", "give at most 1,024"]),
    (1, 1, ["1 x 1 = 1 GPU: an all-to-all needs at least 2 GPUs"]),
    (0, 8, ["servers is 0; give a whole number >= 1"]),
    (8, -1, ["gpus_per_server is -1"]),
    (2.5, 8, ["servers is 2.5"]),
    (True, 8, ["servers is True"]),
])
def test_the_group_is_refused_by_name_in_one_line(S, G, fragments):
    with pytest.raises(ScenarioError, match=r"^servers x gpus_per_server: ") as e:
        check_ep_group(S, G)
    message = _one_line(e)
    assert all(f in message for f in fragments), message


@pytest.mark.parametrize("S, G", [(32, 8), (128, 8), (16, 16), (1024, 1), (1, 1024), (1, 2), (np.int64(4), 8)])
def test_groups_up_to_the_limit_pass_as_ints(S, G):
    assert check_ep_group(S, G) == (int(S), int(G)) and MAX_EP_GPUS == 1024


def test_without_numba_a_group_past_64_gpus_names_the_extra(monkeypatch):
    monkeypatch.setattr("stepbudget.sim._core.AVAILABLE", False)
    assert check_ep_group(8, 8) == (8, 8)
    with pytest.raises(ScenarioError, match=r"^servers x gpus_per_server: 16 x 8 = 128 GPUs: without numba .* at "
                                            r"most 64 GPUs .*pip install 'stepbudget\[fast\]'") as e:
        check_ep_group(16, 8)
    _one_line(e)
    with pytest.raises(ScenarioError, match=r"^matrix: the matrix is for 65 GPUs: without numba"):
        moe_report(DEEPSEEK, matrix=np.ones((65, 65)))


@pytest.fixture
def no_matrix(monkeypatch):
    """Fail the test if moe_report builds any matrix: the group must be refused before."""
    def boom(*args, **kwargs):
        raise AssertionError("a matrix was built before the group was checked")
    for name in ("pair_skew_matrix", "gpu_traffic_matrix", "node_limited_traffic", "alltoall_times"):
        monkeypatch.setattr(report, name, boom)


@pytest.mark.parametrize("skew, S, G", [(Skew("uniform"), 100_000, 8), (Skew("pairs", 0.8), 4096, 1),
                                        (Skew("experts", 1.2), 256, 8), (Skew("pairs", 0.8), 10**22, 8)])
def test_moe_report_refuses_a_big_group_before_any_matrix(no_matrix, skew, S, G):
    started = time.perf_counter()
    with pytest.raises(ScenarioError, match=r"^servers x gpus_per_server: .* at most 1,024") as e:
        moe_report(DEEPSEEK, skew, S, G)
    _one_line(e)
    assert time.perf_counter() - started < 5


def test_a_group_half_from_the_layout_is_bounded_too(no_matrix):
    with pytest.raises(ScenarioError, match=r"^servers x gpus_per_server: 256 x 8 = 2,048 GPUs"):  # 8 a node: the
        moe_report(DEEPSEEK, servers=256)  # layout's
    with pytest.raises(ScenarioError, match=r"^servers x gpus_per_server: 1 x 1 = 1 GPU: an all-to-all needs"):
        moe_report(DEEPSEEK, servers=1, gpus_per_server=1)


def test_a_given_matrix_wider_than_the_limit_is_refused_before_timing(no_matrix):
    with pytest.raises(ScenarioError, match=rf"^matrix: the matrix is for 300 GPUs; .*at most {MAX_MATRIX_GPUS}") as e:
        moe_report(DEEPSEEK, matrix=np.zeros((300, 300)))
    _one_line(e)


def test_a_node_limit_no_group_can_meet_is_refused_by_the_group(no_matrix):
    # 256 x 1: one expert a server; a token may reach node_limit = 4 servers, but needs top_k = 8 experts
    with pytest.raises(ScenarioError, match=r"^servers x gpus_per_server: 256 x 1 GPUs hold 1 expert a server, so "
                                            r"a token's top_k = 8 experts do not fit on the 4 servers") as e:
        moe_report(DEEPSEEK, Skew("uniform"), 256, 1)
    _one_line(e)


def test_experts_that_do_not_split_name_the_gpu_count(no_matrix):
    with pytest.raises(ScenarioError, match=r"^servers x gpus_per_server: 256 experts do not split over "
                                            r"3 x 8 = 24 GPUs; use a GPU count that divides 256"):
        moe_report(DEEPSEEK, Skew("experts", 1.0), 3, 8)


# ---------------------------------------------------------------- the skew


@pytest.mark.parametrize("text, fragment", [
    ("zipf:1e308", "the Zipf exponent '1e308' is not in [0, 16]"),
    ("zipf:nan", "the Zipf exponent 'nan' is not in [0, 16]"),
    ("zipf:-1", "the Zipf exponent '-1' is not in [0, 16]"),
    ("experts:inf", "the Zipf exponent 'inf' is not in [0, 16]"),
    ("experts:16.01", "'16.01' is not in [0, 16]"),
    ("zipf:", "'zipf:' has no exponent after the colon; e.g. zipf:0.8"),
    ("zipf: ", "has no exponent after the colon"),
    ("foo:1", "'foo:1' is not uniform, zipf:S or experts:S"),
    ("zipf", "'zipf' is not uniform, zipf:S or experts:S"),
    ("zipf:0.8:1", "exponent '0.8:1' is not a number"),
    ("x" * 10_000, "is not uniform"),
])
def test_a_bad_skew_is_one_line(text, fragment):
    with pytest.raises(ScenarioError, match=r"^skew: ") as e:
        parse_skew(text)
    message = _one_line(e)
    assert fragment in message and len(message) < 200, message


@pytest.mark.parametrize("text, skew", [("zipf:16", Skew("pairs", 16.0)), ("experts:-0", Skew("experts", 0.0)),
                                        ("ZIPF:0.8", Skew("pairs", 0.8)), (" balanced ", Skew("uniform"))])
def test_the_skew_bounds_are_inclusive(text, skew):
    parsed = parse_skew(text)
    assert parsed == skew and str(parsed.exponent) != "-0.0"


# ---------------------------------------------------------------- .npy files


def _write(tmp_path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def _saved(tmp_path, name: str, array) -> str:
    buf = io.BytesIO()
    np.save(buf, array)
    return _write(tmp_path, name, buf.getvalue())


@pytest.mark.parametrize("name, data, fragment", [
    ("huge.npy", _npy({"descr": "<f8", "fortran_order": False, "shape": (100_000, 100_000)}),
     "is for 100,000 GPUs: its 100,000 x 100,000 traffic matrix needs 74.5 GiB"),
    ("wide.npy", _npy({"descr": "<f8", "fortran_order": False, "shape": (257, 257)}), "is for 257 GPUs"),
    ("3d.npy", _npy({"descr": "<f8", "fortran_order": False, "shape": (4, 4, 4)}), "has 3 dimensions (4, 4, 4)"),
    ("flat.npy", _npy({"descr": "<f8", "fortran_order": False, "shape": (16,)}), "has 1 dimension (16,)"),
    ("rect.npy", _npy({"descr": "<f8", "fortran_order": False, "shape": (2, 3)}), "is 2 x 3, not square"),
    ("one.npy", _npy({"descr": "<f8", "fortran_order": False, "shape": (1, 1)}, b"\0" * 8), "needs at least 2 GPUs"),
    ("neg.npy", _npy({"descr": "<f8", "fortran_order": False, "shape": (-4, -4)}), "needs at least 2 GPUs"),
    ("obj.npy", _npy({"descr": "|O", "fortran_order": False, "shape": (2, 2)}, b"\x80\x04N." * 8),
     "holds object values, not real numbers of bytes"),
    ("str.npy", _npy({"descr": "<U3", "fortran_order": False, "shape": (2, 2)}, b"\0" * 48), "holds <U3 values"),
    ("rec.npy", _npy({"descr": [("a", "<f8")], "fortran_order": False, "shape": (2, 2)}, b"\0" * 32), "values, not real"),
    ("sub.npy", _npy({"descr": ("<f8", (2,)), "fortran_order": False, "shape": (2, 2)}, b"\0" * 64), "not real"),
    ("time.npy", _npy({"descr": "<M8[s]", "fortran_order": False, "shape": (2, 2)}, b"\0" * 32), "datetime64"),
    ("short.npy", _npy({"descr": "<f8", "fortran_order": False, "shape": (4, 4)}, b"\0" * 100),
     "is truncated: its header says 4 x 4 float64 (128 bytes) but 100 follow"),
    ("long.npy", _npy({"descr": "<f8", "fortran_order": False, "shape": (2, 2)}, b"\0" * 40),
     "has bytes after its array: its header says 2 x 2 float64 (32 bytes) but 40 follow"),
    ("keys.npy", _npy({"descr": "<f8"}), "has no valid .npy header (Header does not contain the correct keys"),
    ("text.npy", _npy("not a dict at all"), "has no valid .npy header"),
    ("order.npy", _npy({"descr": "<f8", "fortran_order": 1, "shape": (2, 2)}, b"\0" * 32), "fortran_order"),
    ("dtype.npy", _npy({"descr": "<q9", "fortran_order": False, "shape": (2, 2)}), "has no valid .npy header"),
    ("nested.npy", _npy("[" * 3000 + "]" * 3000), "has no valid .npy header"),
    ("v3.npy", _npy({"descr": "<f8", "fortran_order": False, "shape": (2, 2)}, b"\0" * 32, b"\x03\x00"),
     "is .npy version 3.0"),
    ("v9.npy", b"\x93NUMPY\x09\x00" + b"\0" * 20, "is .npy version 9.0"),
    ("stub.npy", b"\x93NUMPY", "has no valid .npy header"),
    ("junk.npy", b"hello world", "does not start as a .npy file does"),
    ("zip.npy", b"PK\x03\x04" + b"\0" * 40, "is a zip archive (an .npz?)"),
    ("a.npz", b"PK\x03\x04" + b"\0" * 40, "is an .npz archive; save one array with numpy.save as .npy, or as CSV"),
    ("A.NPZ", b"", "is an .npz archive"),
])
def test_a_bad_npy_is_refused_from_its_header(tmp_path, name, data, fragment):
    path = _write(tmp_path, name, data)
    with pytest.raises(ScenarioError, match=r"^matrix: ") as e:
        load_matrix(path)
    message = _one_line(e)
    assert repr(path) in message and fragment in message and len(message) < 400, message


def test_a_real_npz_is_refused_by_name(tmp_path):
    np.savez(tmp_path / "m.npz", D=np.ones((4, 4)))
    with pytest.raises(ScenarioError, match=r"^matrix: .*m\.npz' is an \.npz archive; save one array with numpy\.save"):
        load_matrix(tmp_path / "m.npz")


@pytest.mark.parametrize("array", [
    np.arange(16.0).reshape(4, 4), np.asfortranarray(np.arange(16.0).reshape(4, 4)),
    np.arange(16, dtype=">i4").reshape(4, 4), np.ones((2, 2), np.float16), np.full((3, 3), 255, np.uint8),
    np.full((MAX_MATRIX_GPUS, MAX_MATRIX_GPUS), MAX_PAIR_BYTES),
])
def test_a_good_npy_loads_as_float64_bytes(tmp_path, array):
    D = load_matrix(_saved(tmp_path, "m.npy", array))
    assert D.dtype == np.float64 and np.array_equal(D, array.astype(np.float64))


@pytest.mark.parametrize("array, fragment", [
    (np.array([[0, np.nan], [1, 0]]), "has NaN at row 1, column 2 (counting from 1)"),
    (np.array([[0, 1], [-np.inf, 0]]), "has an infinity at row 2, column 1"),
    (np.array([[0, 1], [-3, 0]]), "has -3 at row 2, column 1 (counting from 1); bytes are >= 0"),
    (np.array([[0, 1e308], [1, 0]]), "has 1e+308 bytes at row 1, column 2"),
    (np.array([[0, 2e12], [1, 0]]), "one pair sends at most 1e+12 bytes in a layer call"),
    (np.ones((2, 2), bool), "holds bool values"), (np.ones((2, 2), complex), "holds complex128 values"),
    (np.full((2, 2), 10, np.longdouble) ** 400, "has an infinity"),
])
def test_a_npy_of_bad_values_names_the_entry(tmp_path, array, fragment):
    with pytest.raises(ScenarioError, match=r"^matrix: ") as e:
        load_matrix(_saved(tmp_path, "m.npy", array))
    assert fragment in _one_line(e)


@pytest.mark.parametrize("make, fragment", [
    (lambda p: os.mkfifo(p), "is a FIFO (a named pipe), not a file"),
    (lambda p: os.mkdir(p), "is a folder, not a file"),
    (lambda p: None, "cannot read"),
    (lambda p: os.truncate(open(p, "wb").name, 9 * 2**20), "bytes; at most 8,388,608 bytes are read"),
])
def test_what_is_not_a_small_regular_file_is_refused_before_reading(tmp_path, make, fragment):
    path = str(tmp_path / "m.csv")
    make(path)
    with pytest.raises(ScenarioError, match=r"^matrix: ") as e:
        load_matrix(path)
    assert fragment in _one_line(e)


def test_a_device_is_refused_without_reading_it():
    with pytest.raises(ScenarioError, match=r"^matrix: '/dev/zero' is a character device, not a file"):
        load_matrix("/dev/zero")


# ---------------------------------------------------------------- CSV files


@pytest.mark.parametrize("text, fragment", [
    ("1,2\n3\n", "has 1 value in row 2 but 2 in row 1"),
    ("1,x\n3,4\n", "has 'x' at row 1, column 2 (counting from 1), not a number"),
    ("1,,2\n3,4,5\n6,7,8\n", "has an empty field at row 1, column 2"),
    ("0;1,5\n1;0\n", "has 1 value in row 2 but 2 in row 1"),  # a comma anywhere: commas separate
    ("", "is empty"), ("  \n\n# only a comment\n", "is empty"),
    ("0,nan\n1,0\n", "has NaN at row 1, column 2"), ("0,inf\n1,0\n", "has an infinity at row 1, column 2"),
    ("0,-1\n1,0\n", "has -1 at row 1, column 2"), ("0,1e308\n1e308,0\n", "has 1e+308 bytes at row 1, column 2"),
    ("1,2,3\n4,5,6\n", "is 2 x 3, not square"), ("5\n", "is 1 x 1; an all-to-all needs at least 2 GPUs"),
    ("0\n" * 300, f"has over {MAX_MATRIX_GPUS} rows (one per source GPU)"),
    (",".join(["0"] * 300) + "\n", f"has over {MAX_MATRIX_GPUS} values in line 1"),
    (" ".join(["0"] * 300) + "\n", f"has over {MAX_MATRIX_GPUS} values in line 1"),
])
def test_a_bad_csv_names_the_file_and_what_is_wrong(tmp_path, text, fragment):
    path = _write(tmp_path, "m.csv", text.encode())
    with pytest.raises(ScenarioError, match=r"^matrix: ") as e:
        load_matrix(path)
    message = _one_line(e)
    assert repr(path) in message and fragment in message, message


def test_a_csv_that_is_not_utf8_is_refused(tmp_path):
    with pytest.raises(ScenarioError, match=r"^matrix: .* is neither \.npy nor UTF-8 text \(byte 3\)"):
        load_matrix(_write(tmp_path, "m.csv", b"0,1\xe9\n1,0\n"))


@pytest.mark.parametrize("text", ["0,1\n2,0\n", "0 1\n2 0\n", "0;1\n2;0\n", "0,1\r2,0\r", "0\t1\r\n2\t0\r\n",
                                  "\ufeff# bytes\n0, 1,\n2, 0,\n", "0,1e0\n2.0,0\n"])
def test_a_good_csv_loads(tmp_path, text):
    assert np.array_equal(load_matrix(_write(tmp_path, "m.csv", text.encode())), [[0, 1], [2, 0]])


def test_a_csv_of_megabytes_of_one_line_is_refused_fast(tmp_path):
    path = _write(tmp_path, "m.csv", b"0," * (4 * 2**20 - 1) + b"0\n")  # 8 MiB, 4 Mi fields on one line
    started = time.perf_counter()
    with pytest.raises(ScenarioError, match=f"has over {MAX_MATRIX_GPUS} values in line 1"):
        load_matrix(path)
    assert time.perf_counter() - started < 2


# ---------------------------------------------------------------- arrays given to the library


@pytest.mark.parametrize("matrix, fragment", [
    ([[0, 1], [2]], "is not one rectangular array"), (np.zeros((2, 3)), "is 2 x 3, not square"),
    (np.array([["a", "b"], ["c", "d"]]), "holds <U1 values"), (5.0, "has 0 dimensions ()"),
    ([[0, float("nan")], [1, 0]], "has NaN at row 1, column 2"),
])
def test_a_bad_array_is_refused_by_the_library(matrix, fragment):
    with pytest.raises(ScenarioError, match=r"^matrix: the matrix ") as e:
        checked_matrix(matrix)
    assert fragment in _one_line(e)


@pytest.mark.parametrize("side, servers, gpus_per_server, group", [
    (16, None, None, (2, 8)), (2, None, None, (1, 2)), (16, 4, None, (4, 4)), (16, None, 2, (8, 2)), (16, 2, 8, (2, 8)),
])
def test_a_given_matrix_sets_the_group_left_out(monkeypatch, side, servers, gpus_per_server, group):
    monkeypatch.setattr(report, "alltoall_times", lambda *a, **k: _Times())  # timing is tested elsewhere
    r = moe_report(DEEPSEEK, servers=servers, gpus_per_server=gpus_per_server, matrix=np.ones((side, side)))
    assert (r.servers, r.gpus_per_server) == group


class _Times:
    lower_bound_s = plain_s = scheduled_s = staged_s = speedup = schedule_seconds = 0.0
    stages = 0
    sent_plain = True


@pytest.mark.parametrize("side, servers, gpus_per_server", [(12, None, None), (16, 3, None), (16, 4, 8)])
def test_a_group_the_matrix_does_not_fit_is_refused(no_matrix, side, servers, gpus_per_server):
    with pytest.raises(ScenarioError, match=rf"^matrix: it is {side} x {side} but servers x gpus_per_server is .*"
                                            rf"give the servers and GPUs per server it was measured on "
                                            rf"\(a product of {side}\)"):
        moe_report(DEEPSEEK, servers=servers, gpus_per_server=gpus_per_server, matrix=np.ones((side, side)))


# ---------------------------------------------------------------- through the command line


@pytest.mark.parametrize("args, start, fragments", [
    (["--servers", "100000"], "--servers x --gpus-per-server: 100,000 x 8 = 800,000 GPUs",
     ["4.7 TiB", "at most 1,024"]),
    (["--servers", "4096", "--gpus-per-server", "1", "--skew", "zipf:0.8"], "--servers x --gpus-per-server: 4,096",
     ["at most 1,024"]),
    (["--servers", "10000000000000000000000"], "--servers x --gpus-per-server: ~10^22 x 8", ["at most 1,024"]),
    (["--skew", "zipf:nan"], "--skew: the Zipf exponent 'nan'", ["[0, 16]"]),
    (["--skew", "foo:1"], "--skew: 'foo:1' is not uniform", []),
    (["--matrix", "/dev/zero"], "--matrix: '/dev/zero' is a character device", []),
])
def test_the_cli_refuses_in_one_line_naming_the_option(args, start, fragments):
    err = _refused("deepseek-v3", *args)
    assert err.startswith(f"stepbudget: error: {start}") and all(f in err for f in fragments), err


def test_the_cli_refuses_an_npz_and_a_fifo(tmp_path):
    np.savez(tmp_path / "m.npz", D=np.ones((4, 4)))
    assert "--matrix: " in _refused("deepseek-v3", "--matrix", str(tmp_path / "m.npz"))
    os.mkfifo(tmp_path / "pipe.csv")
    assert "is a FIFO" in _refused("deepseek-v3", "--matrix", str(tmp_path / "pipe.csv"))


_NOT_FINITE = re.compile(r"\b(nan|inf|NaN|Infinity|-inf)\b")


@pytest.mark.parametrize("fill", [0.0, MAX_PAIR_BYTES])
def test_an_all_zero_or_largest_matrix_prints_finite_numbers(tmp_path, fill):
    path = tmp_path / "m.csv"
    np.savetxt(path, np.full((16, 16), fill), delimiter=",")
    code, out, err = _cli("deepseek-v3", "--matrix", str(path), "--json")
    assert code == 0, err
    d = json.loads(out)
    assert (d["servers"], d["gpus_per_server"]) == (2, 8)
    t = d["alltoall"]
    if fill == 0:
        assert t["plain_s"] == t["scheduled_s"] == t["lower_bound_s"] == 0 and t["speedup"] == 1.0
        assert d["skew"]["pair_max_over_median"] == 1.0
    else:  # 14 peers a GPU over 8 remote ones at 50 GB/s: 8 x 1 TB / 50 GB/s = 160 s at least
        assert t["lower_bound_s"] == pytest.approx(8 * fill / 50e9) and t["plain_s"] >= t["lower_bound_s"]
    code, shown, err = _cli("deepseek-v3", "--matrix", str(path))
    assert code == 0 and not _NOT_FINITE.search(shown), shown


# ---------------------------------------------------------------- any header, any text


def _loads_or_one_line(path: str) -> np.ndarray | None:
    """load_matrix's contract: a valid matrix, or one ScenarioError line that starts with 'matrix: '."""
    try:
        D = load_matrix(path)
    except ScenarioError as e:
        message = str(e)
        assert message.startswith("matrix: ") and "\n" not in message and len(message) < 500, message
        return None
    assert D.dtype == np.float64 and D.ndim == 2 and D.shape[0] == D.shape[1] and 2 <= D.shape[0] <= MAX_MATRIX_GPUS
    assert np.isfinite(D).all() and (D >= 0).all() and (D <= MAX_PAIR_BYTES).all()
    return D


DESCRS = st.sampled_from(["<f8", ">f8", "<f4", "<f2", "<i8", "<i2", "|u1", "<u8", "|b1", "<c16", "|O", "<U3", "|S2",
                          "|V8", "<M8[s]", "<m8[s]", "<g", "x", "", None, 5, [("a", "<f8")], ("<f8", (2,))])
SHAPES = st.lists(st.one_of(st.integers(-3, 300), st.integers(-10**30, 10**30), st.booleans()), max_size=3).map(tuple)
HEADERS = st.one_of(
    st.fixed_dictionaries({"descr": DESCRS, "fortran_order": st.one_of(st.booleans(), st.integers(0, 2)),
                           "shape": st.one_of(SHAPES, st.integers(0, 4), st.none())}),
    st.dictionaries(st.sampled_from(["descr", "shape", "fortran_order", "x"]), st.integers(), max_size=4),
    st.text(max_size=60),
)


@given(header=HEADERS, body=st.binary(max_size=600), version=st.sampled_from([b"\x01\x00", b"\x02\x00", b"\x03\x00"]),
       cut=st.integers(0, 40))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_npy_header_gives_a_matrix_or_one_line(tmp_path, header, body, version, cut):
    data = _npy(header, body, version)
    _loads_or_one_line(_write(tmp_path, "h.npy", data[: len(data) - cut] if cut < 20 else data))


@given(array=hnp.arrays(st.sampled_from([np.float64, np.float32, np.int64, np.uint8, np.float16, np.bool_]),
                        st.tuples(st.integers(0, 6), st.integers(0, 6))), fortran=st.booleans(),
       cut=st.integers(-1, 200))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_saved_array_loads_exactly_or_gives_one_line(tmp_path, array, fortran, cut):
    buf = io.BytesIO()
    np.save(buf, np.asfortranarray(array) if fortran else array)
    data = buf.getvalue()
    D = _loads_or_one_line(_write(tmp_path, "a.npy", data if cut <= 0 else data[: max(len(data) - cut, 0)]))
    if cut <= 0 and D is not None:
        assert np.array_equal(D, array.astype(np.float64))  # a file saved whole loads what was saved
    as_bytes = array.astype(np.float64)
    full_ok = (cut <= 0 and array.shape[0] == array.shape[1] >= 2 and array.dtype != np.bool_
               and np.isfinite(as_bytes).all() and (as_bytes >= 0).all() and (as_bytes <= MAX_PAIR_BYTES).all())
    assert (D is not None) == full_ok


FIELDS = st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr), st.integers(-5, 10**14).map(str),
                   st.sampled_from(["", " ", "x", "1e308", "-0", "0x10", "1_0", "nan", "NaN", "+inf", "#"]),
                   st.text(max_size=3))


@given(rows=st.lists(st.lists(FIELDS, min_size=1, max_size=5), max_size=5), sep=st.sampled_from([",", " ", "\t", ";"]),
       end=st.sampled_from(["\n", "\r\n"]))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_csv_text_gives_a_matrix_or_one_line(tmp_path, rows, sep, end):
    text = end.join(sep.join(row) for row in rows)
    _loads_or_one_line(_write(tmp_path, "m.csv", text.encode("utf-8", "surrogatepass")))


@given(text=st.text(max_size=200))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_text_gives_a_matrix_or_one_line(tmp_path, text):
    _loads_or_one_line(_write(tmp_path, "t.csv", text.encode("utf-8", "surrogatepass")))


def test_a_path_given_to_the_library_is_read_as_a_file(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "alltoall_times", lambda *a, **k: _Times())
    np.save(tmp_path / "m.npy", np.ones((16, 16)))
    r = moe_report(DEEPSEEK, matrix=tmp_path / "m.npy")
    assert (r.servers, r.gpus_per_server) == (2, 8) and r.skew.kind == "measured" and r.matrix.sum() == 256
    with pytest.raises(ScenarioError, match=r"^matrix: .*m\.npz' is an \.npz archive"):
        moe_report(DEEPSEEK, matrix=str(tmp_path / "m.npz"))
