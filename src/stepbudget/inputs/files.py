"""Every file the tool reads or writes goes through here: OS errors become one line naming the option.

Reading refuses, before it opens anything, what is not a regular file (a FIFO would block forever, a device
such as /dev/zero never ends) and what is larger than any input of ours can be; it decodes text as UTF-8.
Writing checks the name (length, encoding, folder) before any work and replaces the target atomically
through a temporary file beside it, so that a failure or Ctrl-C never leaves half a file where a good one was.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
from pathlib import Path
from typing import Callable

from stepbudget.inputs.errors import OptionError

MAX_INPUT_BYTES = 8 * 2**20
"""Largest file read (8 MiB): a scenario or runs file is a few kB, a 256 x 256 matrix of float64 0.5 MiB."""

NAME_MAX, PATH_MAX = 255, 4096
"""POSIX's usual limits on one name and on a whole path, in bytes, where the file system does not say."""

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (a named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _reason(e: OSError) -> str:
    return e.strerror or e.__class__.__name__


def _encoded(path: str, what: str) -> bytes:
    """The path as UTF-8 bytes: a name with an undecodable byte (argv's surrogate escapes) is refused."""
    try:
        return path.encode("utf-8")
    except UnicodeEncodeError:
        raise OptionError(what, f"{path!r} has a byte that is not UTF-8 in its name; rename it") from None


def _check_lengths(path: str, what: str, folder: Path | None = None, spare: int = 0) -> None:
    """Refuse a path, or one of its names, longer than the file system takes (``spare`` bytes kept for a suffix)."""
    raw = _encoded(path, what)
    limit = NAME_MAX
    with contextlib.suppress(OSError, ValueError):
        limit = os.pathconf(folder or ".", "PC_NAME_MAX")
    longest = max((len(part) for part in raw.split(b"/")), default=0)
    if longest + spare > limit:
        raise OptionError(what, f"a name in {path[:40]!r}... is {longest} bytes; at most {limit - spare} here, "
                            "shorten it")
    if len(raw) > PATH_MAX:
        raise OptionError(what, f"the path is {len(raw):,} bytes; at most {PATH_MAX:,}, shorten it")


def _regular(path: str, what: str, limit: int) -> None:
    """Refuse, before opening it, what is missing, not a regular file or larger than ``limit`` bytes."""
    _check_lengths(path, what)
    try:
        info = os.stat(path)
    except OSError as e:
        fix = "check the path" if e.errno == errno.ENOENT else "check the file and its folders"
        raise OptionError(what, f"cannot read {path!r} ({_reason(e)}); {fix}") from None
    kind = next((name for test, name in _KINDS if test(info.st_mode)), None)
    if kind is not None:
        raise OptionError(what, f"{path!r} is {kind}, not a file; give a file")
    if info.st_size > limit:
        raise OptionError(what, f"{path!r} is {info.st_size:,} bytes; at most {limit:,} bytes are read, "
                            "give a smaller file")


def read_bytes(path: str | os.PathLike, what: str, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, or a ScenarioError naming ``what``."""
    path = os.fspath(path)
    _regular(path, what, limit)
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)  # a file that grew since stat is still bounded
    except OSError as e:
        raise OptionError(what, f"cannot read {path!r} ({_reason(e)}); check the file") from None
    if len(data) > limit:
        raise OptionError(what, f"{path!r} is over {limit:,} bytes; give a smaller file")
    return data


def read_text(path: str | os.PathLike, what: str, limit: int = MAX_INPUT_BYTES) -> str:
    """A regular file's text, read as UTF-8, or a ScenarioError naming ``what``."""
    data = read_bytes(path, what, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise OptionError(what, f"{os.fspath(path)!r} is not UTF-8 text (byte {e.start:,}); save it as UTF-8") from None


def partial_name(path: Path) -> Path:
    """The temporary file beside ``path`` that a write goes to first: hidden, marked partial, same suffix."""
    name = f".{path.name}.partial-{os.getpid()}{path.suffix}"
    if len(name.encode("utf-8", "surrogateescape")) > NAME_MAX:  # a long target name: a short, still unique one
        name = f".partial-{os.getpid()}-{hashlib.sha1(path.name.encode('utf-8', 'surrogateescape')).hexdigest()[:12]}" \
               f"{path.suffix}"
    return path.with_name(name)


def check_writable(path: str, what: str) -> None:
    """Refuse, before any work, a target that cannot be written: a bad name, a missing or read-only folder,
    a folder where the file should be."""
    if not path.strip():
        raise OptionError(what, "an empty path; give a file name")
    _check_lengths(path, what)
    target = Path(path)
    try:
        folder = target.absolute().parent
        if not folder.is_dir():
            raise OptionError(what, f"folder {str(folder)!r} does not exist; create it or choose another path")
        if target.is_dir():
            raise OptionError(what, f"{path!r} is a folder; give a file name")
        if target.exists() and not target.is_file():
            raise OptionError(what, f"{path!r} exists and is not a file; give a file name")
    except OSError as e:
        raise OptionError(what, f"cannot use {path!r} ({_reason(e)}); choose another path") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OptionError(what, f"cannot write in {str(folder)!r}; choose a writable folder")


def atomic_write(path: str | os.PathLike, write: Callable[[Path], object], what: str) -> None:
    """Write ``path`` through a temporary file beside it (``write(tmp)``), then rename it over the target.

    A failure never leaves half a file: the temporary file is removed whatever happened, and its removal
    never raises over the first error. An OS error is a ScenarioError naming ``what``.
    """
    path = Path(path)
    tmp = partial_name(path)
    try:
        write(tmp)
        os.replace(tmp, path)
    except OSError as e:
        raise OptionError(what, f"cannot write {str(path)!r} ({_reason(e)}); choose a writable path") from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
