"""What the `moe` command takes in: the EP group's size, and a traffic matrix given as an array or a file.

Each check runs before anything that grows with its input: the GPU count is checked in Python ints before
a matrix is built, a .npy file's header before its array is loaded, a CSV file's row and column counts
before its numbers are parsed. Bad input is one ScenarioError line that starts with the library's name
for it (``servers x gpus_per_server``, ``matrix``), says what is wrong and the fix.
"""

from __future__ import annotations

import io
import itertools
import math
import os
import re
from numbers import Integral

import numpy as np

from stepbudget.inputs.errors import OptionError, ScenarioError
from stepbudget.inputs.files import read_bytes
from stepbudget.sim import _core

MAX_EP_GPUS = 1024
"""Most GPUs in the EP group one `moe` run times (servers x gpus_per_server, or a given matrix's side).

The whole `moe` report, measured on 2 cores (DeepSeek-V3, one expert per GPU past its 256): 32 x 8 GPUs take
2 s, 64 x 8 5-6 s, 128 x 8 24 s, uniform or zipf:0.8; the plain all-to-all's dense path (sim/flows.py) is most
of it, its flows growing as GPUs^2 and its re-sharings with them."""

GROUP = "servers x gpus_per_server"
"""The option an EP group's problems name (the API's keywords; the CLI's --servers x --gpus-per-server)."""

MAX_GPUS_WITHOUT_NUMBA = 64
"""Most GPUs one all-to-all is timed for where numba (the `fast` extra) is missing, a group or a given matrix: the
plain all-to-all then runs the engine's loop as plain Python, where 8 x 8 GPUs take 3-13 s (uniform to zipf:0.8,
measured on 2 cores; compiled, 0.1 s)."""

MAX_MATRIX_GPUS = 128
"""Most GPUs a given matrix may be for. Its values, not only its size, set how many re-sharings the plain
all-to-all takes: measured on 2 cores, 128 GPUs of random bytes take 1.4 s, of bytes spread over 12 orders of
magnitude 6 s; 256 GPUs 9 s and 47 s (a generated matrix's even rows take far fewer)."""

MAX_PAIR_BYTES = 1e12
"""Most bytes one GPU pair may send in one layer call of a given matrix (1 TB).

One DeepSeek-V3 dispatch sends about 0.2 GB per GPU in all, so 1 TB a pair is a unit mistake (bits, a whole
run); below it the FAST schedule's whole-byte sums stay far inside int64 (256^2 pairs x 1e12 < 9.2e18)."""

_SECONDS_AT_LIMIT, _GROWTH = 25.0, 2.2
"""Time to time a 1,024-GPU all-to-all on 2 cores, and the power of the GPU count it grows as (measured from 512
to 1,024 GPUs)."""

_NPY_MAGIC, _ZIP_MAGIC = b"\x93NUMPY", b"PK\x03\x04"
_NPY_HEADERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
_REAL_KINDS = "iuf"
"""dtype kinds that hold a number of bytes: signed and unsigned integers, floats."""


# ---------------------------------------------------------------- the EP group


def _count_words(x: int) -> str:
    """A count as digits with commas, or as a power of ten past a quadrillion."""
    return f"{x:,}" if x < 10**15 else f"~10^{round(math.log10(x))}"


def _bytes_words(b: int) -> str:
    """Bytes in binary prefixes (the unit memory is sold in), or a power of ten past yobibytes."""
    units = ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB")
    power = min(int(math.log2(max(b, 1)) // 10), len(units) - 1)
    if b >= 1024 ** len(units):
        return f"~10^{round(math.log10(b))} bytes"
    return f"{b:,} bytes" if power == 0 else f"{b / 1024**power:.1f} {units[power]}"


def _log10_timing_s(gpus: int) -> float:
    """log10 of the seconds timing an all-to-all over ``gpus`` GPUs takes, extrapolated from the measured limit."""
    return math.log10(_SECONDS_AT_LIMIT) + _GROWTH * (math.log10(gpus) - math.log10(MAX_EP_GPUS))


def _duration_words(log_s: float) -> str:
    """A duration given as log10 of seconds, in the largest unit it has two of."""
    for unit, seconds in (("years", 3.15e7), ("days", 86400), ("hours", 3600), ("min", 60)):
        if log_s >= math.log10(2 * seconds):
            value = log_s - math.log10(seconds)
            return f"~{10**value:,.0f} {unit}" if value < 15 else f"~10^{round(value)} {unit}"
    return f"~{10**log_s:.0f} s"


_LONG_S = 600
"""Past this estimate (10 min) the message says how long the timing would take; below it, how it grows."""


def _too_many(option: str, what: str, gpus: int) -> OptionError:
    """The refusal of ``option`` when ``what`` (the group or the matrix) has over MAX_EP_GPUS GPUs: the reason and
    the fix."""
    log_s = _log10_timing_s(gpus)
    if log_s < math.log10(_LONG_S):
        return OptionError(option, f"{what}: over the {MAX_EP_GPUS:,} one all-to-all is timed for (the timing grows as "
                f"GPUs^{_GROWTH:g}, {_duration_words(log_s)} at {_count_words(gpus)}); give at most {MAX_EP_GPUS:,} "
                "(e.g. 128 x 8)")
    side = _count_words(gpus)
    return OptionError(option, f"{what}: its {side} x {side} traffic matrix needs {_bytes_words(gpus * gpus * 8)} and "
                               f"timing its all-to-all {_duration_words(log_s)}; at most {MAX_EP_GPUS:,} GPUs (e.g. 128 x 8)")


def group_count(name: str, value: object) -> int:
    """``value`` as an int >= 1; a float, a bool or a count below 1 is refused by the group's name."""
    if isinstance(value, bool) or not isinstance(value, Integral) or int(value) < 1:
        raise OptionError(GROUP, f"{name} is {value!r}; give a whole number >= 1")
    return int(value)


def check_ep_group(servers: object, gpus_per_server: object) -> tuple[int, int]:
    """``(servers, gpus_per_server)`` as ints, refused in Python ints before any matrix is built: each a whole
    number >= 1, together at least 2 GPUs (an all-to-all) and at most MAX_EP_GPUS."""
    S, G = group_count("servers", servers), group_count("gpus_per_server", gpus_per_server)
    n = S * G
    option, group = GROUP, f"{_count_words(S)} x {_count_words(G)} = {_count_words(n)} GPU{'s' * (n > 1)}"
    if n < 2:
        raise OptionError(option, f"{group}: an all-to-all needs at least 2 GPUs; give more servers or GPUs per server")
    if n > MAX_EP_GPUS:
        raise _too_many(option, group, n)
    _check_compiled(option, group, n)
    return S, G


def _check_compiled(option: str, what: str, gpus: int) -> None:
    """Refuse more than MAX_GPUS_WITHOUT_NUMBA GPUs where the plain all-to-all would run as plain Python."""
    if gpus > MAX_GPUS_WITHOUT_NUMBA and not _core.AVAILABLE:
        raise OptionError(option, f"{what}: without numba one all-to-all is timed for at most {MAX_GPUS_WITHOUT_NUMBA} GPUs "
                            "(8 x 8 take up to 13 s as plain Python); pip install 'stepbudget[fast]' (or '.[fast]' "
                            f"from the repository) to time up to {MAX_EP_GPUS:,}")


# ---------------------------------------------------------------- a matrix's shape, type and values


def _check_layout(shape: tuple, dtype: np.dtype, where: str) -> int:
    """The side of a square matrix of real numbers with ``shape`` and ``dtype``; refused before it is loaded."""
    if len(shape) != 2:
        raise OptionError("matrix", f"{where} has {len(shape)} dimension{'s' * (len(shape) != 1)} {tuple(shape)}; "
                            "give one square 2-d matrix D[src, dst] of bytes")
    rows, cols = (int(x) for x in shape)
    if rows != cols:
        raise OptionError("matrix", f"{where} is {_count_words(rows)} x {_count_words(cols)}, not square; "
                            "give one row and one column per GPU, D[src, dst]")
    if rows < 2:
        raise OptionError("matrix", f"{where} is {rows} x {cols}; an all-to-all needs at least 2 GPUs, give a larger one")
    if rows > MAX_MATRIX_GPUS and _log10_timing_s(rows) >= math.log10(_LONG_S):  # say what it would need
        raise _too_many("matrix", f"{where} is for {_count_words(rows)} GPUs", rows)
    if rows > MAX_MATRIX_GPUS:
        raise OptionError("matrix", f"{where} is for {_count_words(rows)} GPUs; a given matrix is timed for at most "
                            f"{MAX_MATRIX_GPUS} (its values set the time: 256 GPUs of bytes spread wide take a minute), give a "
                            "smaller EP group's matrix")
    _check_compiled("matrix", f"{where} is for {_count_words(rows)} GPUs", rows)
    if dtype.hasobject or dtype.kind not in _REAL_KINDS:
        raise OptionError("matrix", f"{where} holds {dtype} values, not real numbers of bytes; "
                            "save integers or floats")
    return rows


def _check_values(D: np.ndarray, where: str) -> None:
    """Refuse the first entry of the float64 matrix ``D`` that is NaN, infinite, negative or over MAX_PAIR_BYTES."""
    for bad, what, fix in ((~np.isfinite(D), "", "bytes are finite numbers, fix that entry"),
                           (D < 0, "", "bytes are >= 0, fix that entry"),
                           (D > MAX_PAIR_BYTES, " bytes", f"one pair sends at most {MAX_PAIR_BYTES:.0e} bytes in a "
                                                          "layer call; give bytes of one call")):
        if bad.any():
            i, j = (int(x) for x in np.argwhere(bad)[0])
            v = float(D[i, j])
            shown = "NaN" if math.isnan(v) else "an infinity" if math.isinf(v) else f"{v:g}{what}"
            raise OptionError("matrix", f"{where} has {shown} at row {i + 1}, column {j + 1} "
                                f"(counting from 1); {fix}")


def checked_matrix(matrix: object, where: str = "the matrix") -> np.ndarray:
    """A given traffic matrix (an array or nested lists) as float64 (n, n) bytes, 2 <= n <= MAX_EP_GPUS,
    every entry finite, >= 0 and at most MAX_PAIR_BYTES; refused by one line naming ``where``."""
    try:
        array = np.asarray(matrix)
    except (ValueError, TypeError) as e:  # ragged nested lists
        raise OptionError("matrix", f"{where} is not one rectangular array ({str(e).splitlines()[0][:80]}); "
                            "give a square matrix of bytes") from None
    _check_layout(array.shape, array.dtype, where)
    with np.errstate(over="ignore"):  # a long double past float64's range becomes inf, refused just below
        D = array.astype(np.float64)
    _check_values(D, where)
    return D


# ---------------------------------------------------------------- files


def _npy_header(data: bytes, where: str) -> tuple[tuple, bool, np.dtype, int]:
    """(shape, fortran_order, dtype, offset of the array) of a .npy file's bytes, read without its array."""
    fh = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(fh)
        read = _NPY_HEADERS.get(version)
        if read is None:
            raise OptionError("matrix", f"{where} is .npy version {version[0]}.{version[1]}; save it with "
                                "numpy.save as a plain array (version 1.0 or 2.0)")
        shape, fortran_order, dtype = read(fh)
    except ScenarioError:
        raise
    except Exception as e:  # noqa: BLE001 - any failure to parse an untrusted header is the same bad file
        reason = (str(e).splitlines() or [type(e).__name__])[0][:80]
        raise OptionError("matrix", f"{where} has no valid .npy header ({reason}); save it again with numpy.save") \
            from None
    return shape, fortran_order, dtype, fh.tell()


def _npy_matrix(data: bytes, where: str) -> np.ndarray:
    """A .npy file's matrix: its header checked (shape, dtype, size against the bytes there) before loading."""
    shape, _, dtype, offset = _npy_header(data, where)
    side = _check_layout(shape, dtype, where)
    need, have = side * side * dtype.itemsize, len(data) - offset
    if have != need:
        state = "is truncated" if have < need else "has bytes after its array"
        raise OptionError("matrix", f"{where} {state}: its header says {side} x {side} {dtype} ({need:,} bytes) "
                            f"but {have:,} follow; save it again with numpy.save")
    array = np.load(io.BytesIO(data), allow_pickle=False)  # the header said what it holds and the size fits
    return checked_matrix(array, where)


def _separator(text: str) -> str | None:
    """The field separator: a comma, else a semicolon (spreadsheets in locales with a decimal comma), else
    whitespace (None)."""
    return next((sep for sep in ",;" if sep in text), None)


def _field_count(line: str, sep: str | None) -> int:
    """How many fields ``line`` has, counted without splitting it (a line may be megabytes of fields)."""
    if sep is not None:
        return line.count(sep) + 1
    return sum(1 for _ in itertools.islice(re.finditer(r"\S+", line), MAX_MATRIX_GPUS + 1))


def _csv_rows(text: str, where: str) -> list[list[str]]:
    """A CSV text's non-blank, non-comment rows split into fields, their counts bounded before any is split."""
    sep = _separator(text)
    lines: list[str] = []
    for r, raw in enumerate(io.StringIO(text.removeprefix("\ufeff"), newline=None), start=1):
        line = raw.strip()
        if sep is not None and line.endswith(sep):  # some spreadsheets end every row with the separator
            line = line[:-1].rstrip()
        if not line or line.startswith("#"):
            continue
        if len(lines) == MAX_MATRIX_GPUS:
            raise OptionError("matrix", f"{where} has over {MAX_MATRIX_GPUS} rows (one per source GPU); a given matrix "
                                f"is timed for at most {MAX_MATRIX_GPUS} GPUs, give a smaller EP group's matrix")
        if _field_count(line, sep) > MAX_MATRIX_GPUS:
            raise OptionError("matrix", f"{where} has over {MAX_MATRIX_GPUS} values in line {r} (one per destination "
                                f"GPU); a given matrix is timed for at most {MAX_MATRIX_GPUS} GPUs, give a smaller one")
        lines.append(line)
    if not lines:
        raise OptionError("matrix", f"{where} is empty; give one row of bytes per source GPU")
    rows = [[field.strip() for field in line.split(sep)] if sep else line.split() for line in lines]
    for r, row in enumerate(rows, start=1):
        if len(row) != len(rows[0]):
            raise OptionError("matrix", f"{where} has {len(row)} value{'s' * (len(row) != 1)} in row {r} but "
                                f"{len(rows[0])} in row 1; "
                                "give every row one value per GPU")
    return rows


def _number(field: str, r: int, c: int, where: str) -> float:
    try:
        return float(field)
    except ValueError:
        shown = repr(field[:20]) if field else "an empty field"
        raise OptionError("matrix", f"{where} has {shown} at row {r}, column {c} (counting from 1), not a number; "
                            "give bytes as plain numbers") from None


def _csv_matrix(text: str, where: str) -> np.ndarray:
    """A CSV text's matrix (comma-, semicolon- or whitespace-separated, '#' comments): its shape checked before
    its numbers."""
    rows = _csv_rows(text, where)
    _check_layout((len(rows), len(rows[0])), np.dtype(np.float64), where)
    values = [[_number(field, r, c, where) for c, field in enumerate(row, start=1)] for r, row in enumerate(rows, start=1)]
    return checked_matrix(np.array(values, dtype=np.float64), where)


def load_matrix(path: str | os.PathLike) -> np.ndarray:
    """A measured dispatch matrix in bytes from a .npy file or a CSV file (comma-, semicolon- or whitespace-
    separated).

    Refused in one line naming the file: an .npz archive, what is not a regular file or is over the input
    limit (inputs/files.py), a .npy whose header is not a square 2-d matrix of real numbers of at most
    MAX_EP_GPUS a side or does not match its bytes, a CSV that is empty, ragged, not numbers or not square,
    and any entry that is NaN, infinite, negative or over MAX_PAIR_BYTES. Pickles are never loaded.
    """
    name = os.fspath(path)
    where = repr(name)
    if name.lower().endswith(".npz"):
        raise OptionError("matrix", f"{where} is an .npz archive; save one array with numpy.save as .npy, or as CSV")
    data = read_bytes(name, "matrix")
    if data.startswith(_ZIP_MAGIC):
        raise OptionError("matrix", f"{where} is a zip archive (an .npz?); save one array with numpy.save as .npy, "
                            "or as CSV")
    if data.startswith(_NPY_MAGIC):
        return _npy_matrix(data, where)
    if name.lower().endswith(".npy"):
        raise OptionError("matrix", f"{where} does not start as a .npy file does; save it with numpy.save, or give "
                            "a CSV file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise OptionError("matrix", f"{where} is neither .npy nor UTF-8 text (byte {e.start:,}); give a .npy or CSV "
                            "file") from None
    return _csv_matrix(text, where)
