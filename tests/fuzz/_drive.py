"""The fuzzer's driver: one command line through ``stepbudget.cli.run()`` in this process, and what a user may
expect of any command line, however odd, checked on what came out.

In-process because a subprocess costs ~1 s of imports per example, and the examples are many. What a real run
would show is kept: stdout and stderr are what ``print`` and rich's console write (the console looks up
``sys.stdout`` when it writes), and a warning Python would print on stderr is added to stderr. What a real run
could do to this process is bounded: a hard timer (a FIFO or a loop that never ends), a cap on address space
(an array of terabytes is a MemoryError here, a traceback in the report, not the kernel's OOM killer ending the
whole suite), the signal handlers ``run()`` installs put back, and the working folder a fresh one per example.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import resource
import shlex
import signal
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from hypothesis import HealthCheck, Phase, event, settings

# ---------------------------------------------------------------- how many examples, and how long each may take


LONG_EXAMPLES = 2_000
"""Examples per fuzz test at night (STEPBUDGET_FUZZ_EXAMPLES sets another count for the long profile)."""


@dataclass(frozen=True)
class FuzzProfile:
    """What a hypothesis profile means for the fuzz tests."""

    examples: Callable[[int], int]
    """A test's examples, from its weight (the examples it runs on ci)."""
    deadline_s: float
    """Hypothesis' deadline per example: a valid example takes at most ~3 s here (a figure, a search)."""
    hard_limit_s: float
    """The driver's timer: a command still running then has hung (a FIFO, a loop) and is stopped. Each shrink
    step of a hung example costs this much, which is why ci keeps it short."""
    derandomize: bool
    """ci tries the same examples each run (reproducible); long draws new ones each night."""
    explain: bool
    """Hypothesis' explain phase reruns a failure a dozen times to say which lines only failures ran: worth it at
    night, too slow for ci where a failure is mostly a hang."""


FUZZ_PROFILES = {
    "ci": FuzzProfile(lambda n: n, 15.0, 20.0, True, False),
    "smoke": FuzzProfile(lambda n: max(1, n // 5), 15.0, 20.0, True, False),
    "long": FuzzProfile(lambda n: int(os.environ.get("STEPBUDGET_FUZZ_EXAMPLES", LONG_EXAMPLES)), 30.0, 45.0, False,
                        True),
}
"""What each profile registered in tests/conftest.py means for the fuzz tests.

The profiles themselves are hypothesis' defaults for every test (conftest.py says why): the rest of the suite
sets its own counts and must not change with a profile. A fuzz test instead declares its weight, the examples
it runs on the ci profile (``@fuzz_settings(40)``), and takes the count, deadline and seeding of the profile
that was loaded (``--hypothesis-profile``, ``ci`` when none is given) from here when its module is imported:
the hypothesis plugin loads the profile in pytest_configure, before collection imports the test modules. An
unknown profile (one of the user's own) gets the ci values. long runs 2,000 examples per test: a night's run
of tests/fuzz on 2 cores, `pytest -m fuzz --hypothesis-profile=long` (STEPBUDGET_FUZZ_EXAMPLES=300 for a
shorter one)."""


def fuzz_profile() -> FuzzProfile:
    return FUZZ_PROFILES.get(settings.get_current_profile_name(), FUZZ_PROFILES["ci"])


def fuzz_settings(ci_examples: int) -> settings:
    """The settings of one fuzz test: ``ci_examples`` on the ci profile, scaled for the profile in use."""
    p = fuzz_profile()
    phases = [ph for ph in Phase if ph is not Phase.explain or p.explain]
    return settings(max_examples=p.examples(ci_examples), deadline=p.deadline_s * 1000, derandomize=p.derandomize,
                    database=None if p.derandomize else settings.default.database, phases=phases,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture, HealthCheck.large_base_example])


def hard_limit_s() -> float:
    return fuzz_profile().hard_limit_s


ADDRESS_SPACE_HEADROOM = 4 * 2**30
"""Address space one command may add to this process (4 GiB): a valid example needs tens of MB (a 64 x 64
matrix, a search over a few thousand layouts); an unbounded allocation fails here instead of in the kernel."""

# ---------------------------------------------------------------- one command line


class Hung(BaseException):
    """The hard timer fired: a BaseException so that no ``except Exception`` of the code under test eats it."""


@dataclass(frozen=True)
class Outcome:
    """What one command line gave: its exit code (None: it hung), its stdout and stderr, its time."""

    argv: tuple[str, ...]
    code: int | None
    stdout: str
    stderr: str
    seconds: float
    folder: Path

    @property
    def command(self) -> str:
        """The command line as a user would type it in bash (the failure report prints it)."""
        return "stepbudget " + " ".join(map(shell_word, self.argv))[:2000]


def shell_word(arg: str) -> str:
    r"""``arg`` quoted for bash: $'...' with \xHH escapes where it holds a byte that is not printable (a NUL, a
    newline, a byte that is not UTF-8, which argv carries as a surrogate escape)."""
    if arg.isprintable():
        return shlex.quote(arg)
    escaped = all(not 0xD800 <= ord(c) <= 0xDFFF or 0xDC80 <= ord(c) <= 0xDCFF for c in arg)
    raw = arg.encode("utf-8", "surrogateescape" if escaped else "surrogatepass")
    body = "".join(chr(b) if 32 <= b < 127 and chr(b) not in "'\\" else f"\\x{b:02x}" for b in raw)
    return f"$'{body}'"


_SHOWN_BY_DEFAULT = (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning)
"""Categories Python's default filters hide outside __main__; any other warning is a line a user sees."""


def _shown(caught: list[warnings.WarningMessage]) -> str:
    lines = {warnings.formatwarning(w.message, w.category, w.filename, w.lineno, None)
             for w in caught if not issubclass(w.category, _SHOWN_BY_DEFAULT)}
    return "".join(sorted(lines))


@contextlib.contextmanager
def _bounded(seconds: float):
    """A hard timer and an address-space cap around one command; both put back afterwards."""
    def expire(signum, frame):
        raise Hung()

    old_alarm = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = _address_space() + ADDRESS_SPACE_HEADROOM
    if hard == resource.RLIM_INFINITY or cap < hard:
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_alarm)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _address_space() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


_HUNG: dict[tuple, Outcome] = {}
"""Command lines that hung, by argv and the folder's contents: hypothesis replays a failing example (and its
shrinker retries some), and a second wait for the same hang teaches nothing."""


def _contents(folder: Path) -> tuple:
    """What a command could read in ``folder``: each entry's name, kind and, for a regular file, its bytes' hash."""
    import hashlib
    import stat

    seen = []
    for root, dirs, files in os.walk(folder):
        for name in sorted(dirs + files):
            path = os.path.join(root, name)
            try:
                info = os.lstat(path)
                digest = ""
                if stat.S_ISREG(info.st_mode) and info.st_size <= 16 * 2**20:
                    with open(path, "rb") as fh:
                        digest = hashlib.sha1(fh.read()).hexdigest()
                seen.append((os.path.relpath(path, folder), stat.S_IFMT(info.st_mode), info.st_size, digest))
            except OSError:
                seen.append((os.path.relpath(path, folder), "unreadable"))
    return tuple(seen)


def run_cli(argv: list[str] | tuple[str, ...], folder: Path | str, limit_s: float | None = None) -> Outcome:
    """Run ``stepbudget *argv`` in-process with ``folder`` as the working folder, and return what it gave."""
    argv, folder = tuple(argv), Path(folder)
    key = (argv, _contents(folder))
    if key in _HUNG:
        return Outcome(argv, None, "", "", _HUNG[key].seconds, folder)
    o = _run(argv, folder, limit_s)
    if o.code is None:
        _HUNG[key] = o
    return o


def _run(argv: tuple[str, ...], folder: Path, limit_s: float | None) -> Outcome:
    from stepbudget import cli

    out, err = io.StringIO(), io.StringIO()
    saved = sys.argv, os.getcwd(), signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    code: int | None = 0
    start = time.perf_counter()
    try:
        os.chdir(folder)
        sys.argv = ["stepbudget", *argv]
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(err):
            warnings.simplefilter("always")
            try:
                with _bounded(limit_s or hard_limit_s()):
                    cli.run()
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except Hung:
                code = None
            except KeyboardInterrupt:  # the person running the suite pressed Ctrl-C
                raise
            except BaseException:  # what Python would print before exiting 1 (MemoryError, RecursionError, ...)
                err.write(traceback.format_exc())
                code = 1
        err.write(_shown(caught))
    finally:
        sys.argv = saved[0]
        os.chdir(saved[1])
        signal.signal(signal.SIGTERM, saved[2])
        signal.signal(signal.SIGINT, saved[3])
    return Outcome(argv, code, out.getvalue(), err.getvalue(), time.perf_counter() - start, folder)


@contextlib.contextmanager
def example_folder(base: Path | str | None = None):
    """A fresh, empty working folder for one example, removed afterwards (made writable first: an example may
    have taken its permissions away)."""
    folder = Path(tempfile.mkdtemp(prefix="ex-", dir=base))
    try:
        yield folder
    finally:
        for root, dirs, _ in os.walk(folder):
            for d in dirs:
                with contextlib.suppress(OSError):
                    os.chmod(os.path.join(root, d), 0o700)
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


# ---------------------------------------------------------------- what any command line must give

ERROR_PREFIX = "stepbudget: error: "

TOP_WORDS = ("scenario", "name", "description", "source", "model", "cluster", "layout", "batch", "precision",
             "overlap", "flops", "override", "base", "figure", "runs file", "runs", "run", "matrix", "ID", "variant", "whatif",
             "sizes", "skew", "servers", "gpus_per_server", "gpus", "steps", "out", "plot", "trace")
"""Words an error may start with instead of an option: the scenario's sections and top-level fields, and the
inputs that are not one field (a --set item, a runs file and its runs, the matrix, a figure's ID, a variant)."""

_OPTION = re.compile(r"--[a-z][a-z0-9-]*")
_FIELD = re.compile(r"[a-z][a-z_]*(\.[A-Za-z0-9_]+)+")
_USAGE = re.compile(r"\(see stepbudget( [a-z-]+)? --help\)$")
_USAGE_NAMES = re.compile(r"--[a-z]|'[A-Z_]+'|No such command|extra argument")
_INTERNALS = re.compile(r"Traceback|NoneType|has no attribute|unsupported operand|Maximum allowed size|"
                        r"not subscriptable|unhashable|\[Errno \d+\]|object of type|<class '|0x[0-9a-f]{6,}")
"""What a message leaks when it is an exception's text passed through, not a line written for a user."""


_UNKNOWN = re.compile(r"\S[^:]*: unknown field")
"""A key no field has, named as the user wrote it ("nosuch: unknown field"); an empty name is no name."""


def typed_names(argv: tuple[str, ...]) -> tuple[str, ...]:
    """Names a message may start with because the user typed them: the keys of the --set items, and the files
    given ("m.yaml: not valid YAML ...")."""
    keys = tuple(item.partition("=")[0].strip() for flag, item in zip(argv, argv[1:]) if flag == "--set")
    return keys + tuple(a for a in argv if _PATHLIKE.search(a))


def naming_problem(message: str, typed: tuple[str, ...] = ()) -> str | None:
    """Why the text after "stepbudget: error: " does not name what is wrong, or None when it does.

    It must start with an option (``--steps ...``), a field path whose first part is a section
    (``layout.pp: ...``, ``cluster.gpu.kernels.gemm ...``) or one of TOP_WORDS followed by ``:``, a space, ``=``,
    ``[`` or ``'``; or be a usage error of the parser that ends "(see stepbudget CMD --help)" and names an option,
    an argument or the command; or start with a name the user ``typed`` (a --set key) or an unknown key
    ("nosuch: unknown field"). It must not be an exception's own text.
    """
    if not message.strip():
        return "the message is empty"
    if (leak := _INTERNALS.search(message)) is not None:
        return f"the message leaks {leak.group()!r}, an exception's text rather than a user's line"
    if _USAGE.search(message):
        return None if _USAGE_NAMES.search(message) else "a usage error that names no option or argument"
    if _OPTION.match(message):
        return None
    field = _FIELD.match(message)
    if field is not None and field.group().split(".")[0] in TOP_WORDS:
        return None
    if _UNKNOWN.match(message) or any(t and message.startswith((t + ":", t + " ")) for t in typed):
        return None
    head = message.partition(":")[0]
    if head.endswith("...") and len(head) > 3 and any(t.startswith(head[:-3]) for t in typed):
        return None  # a long key, shortened
    for word in TOP_WORDS:
        if message.startswith(word) and message[len(word):len(word) + 1] in (":", " ", "=", "[", "'"):
            return None
    return "it starts with neither an option (--xxx), a field (section.field) nor a known word (scenario, run ...)"


_NONFINITE = re.compile(r"(?<![\w.])\.?(nan|inf|infinity)(?!\w)", re.IGNORECASE)
"""nan, inf, Infinity, YAML's .nan and .inf, as whole words ("information", "infra" do not count)."""


def nonfinite_words(text: str, echo: tuple[str, ...] = ()) -> list[str]:
    """The nan/inf tokens of ``text``, after removing what the user typed that is echoed back (a scenario named
    "nan", a file named inf.png)."""
    for typed in sorted((e for e in echo if e), key=len, reverse=True):
        text = text.replace(typed, " ")
    return [m.group() for m in _NONFINITE.finditer(text)]


_PATHLIKE = re.compile(r"/|\.[A-Za-z]+$")
"""An argument that names a file: "wrote inf.png" echoes it, and is no non-finite number."""


def partial_files(folder: Path) -> list[str]:
    """Temporary files a write left behind (files.partial_name marks them partial)."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*partial*"))


def problems(o: Outcome, echo: tuple[str, ...] = ()) -> list[str]:
    """Everything wrong with one outcome; empty when it is what any command line may give."""
    found = []
    if o.code is None:
        return [f"still running after {o.seconds:.0f} s (the bounded-time check)"]
    if o.code not in (0, 2):
        found.append(f"exit code {o.code}, not 0 or 2")
    for stream, text in (("stdout", o.stdout), ("stderr", o.stderr)):
        if "Traceback" in text:
            found.append(f"a traceback on {stream}")
    lines = o.stderr.splitlines()
    if o.code == 2:  # one line per problem, every one naming what is wrong (a scenario's are all named at once)
        if not lines:
            found.append("no line on stderr")
        for line in lines:
            if not line.startswith(ERROR_PREFIX):
                found.append(f"a stderr line does not start {ERROR_PREFIX!r}")
            elif (why := naming_problem(line.removeprefix(ERROR_PREFIX), typed_names(o.argv))) is not None:
                found.append(why)
    elif o.code == 0 and any(not line.startswith("stepbudget") for line in lines):
        found.append("a line on stderr that is not stepbudget's own (a warning, a library's message)")
    # a --set value is echoed when it is text (--set name=NaN titles the tables "NaN"); a number field refuses it
    given = tuple(a.partition("=")[2] for a in o.argv if "=" in a and not a.startswith("-"))
    if words := nonfinite_words(o.stdout, echo + given + tuple(a for a in o.argv if _PATHLIKE.search(a))):
        found.append(f"non-finite numbers on stdout: {sorted(set(words))}")
    if left := partial_files(o.folder):
        found.append(f"files left half-written: {left[:3]}")
    return found


class FuzzFailure(AssertionError):
    """A command line gave what no command line may. Each cause gets its own subclass (failure_class), because
    hypothesis tells bugs apart by exception type and line: with one class, the first bug found would hide
    every other bug of the same test."""


_FAILURES: dict[str, type[FuzzFailure]] = {}

_SRC_FRAME = re.compile(r'File "[^"]*/stepbudget/([\w/]+)\.py", line \d+, in (\w+)')
_WARNED = re.compile(r"/stepbudget/([\w/]+)\.py:\d+: (\w+):")
_RAISED = re.compile(r"^(\w+(?:\.\w+)*(?:Error|Exception|Interrupt|Exit|Warning))\b", re.MULTILINE)


def failure_cause(o: Outcome, found: list[str]) -> str:
    """A short name for why ``o`` failed, the same for the same bug: the exception and the innermost frame of
    stepbudget for a traceback, the kind of problem and the command otherwise."""
    first = found[0]
    if "traceback" in " ".join(found):
        frames = _SRC_FRAME.findall(o.stderr)
        raised = _RAISED.findall(o.stderr)
        where = f"{frames[-1][0]}.{frames[-1][1]}" if frames else "outside stepbudget"
        return f"{raised[-1].rsplit('.', 1)[-1] if raised else 'exception'} in {where}"
    command = o.argv[0] if o.argv else ""
    if first.startswith("exit code"):
        return f"exit code {o.code} ({command})"
    if first.startswith("a line on stderr") and (warned := _WARNED.search(o.stderr)) is not None:
        return f"{warned.group(2)} in {warned.group(1).replace('/', '.')}"
    kind = " ".join(re.sub(r"(?<!\w)'[^']*'|\[[^\]]*\]|\([^)]*\)|[\d:,]+", " ", first).split()[:6])  # no values
    return f"{kind} ({command})"


def failure_class(cause: str) -> type[FuzzFailure]:
    if cause not in _FAILURES:
        name = "".join(w.capitalize() for w in re.findall(r"[A-Za-z0-9]+", cause))[:80] or "Failure"
        _FAILURES[cause] = type(name, (FuzzFailure,), {"__module__": __name__})
    return _FAILURES[cause]


def check(o: Outcome, echo: tuple[str, ...] = ()) -> Outcome:
    """Raise a FuzzFailure unless ``o`` is what any command line may give; it shows the command, what is wrong,
    and both streams."""
    found = problems(o, echo)
    if found:
        cause = failure_cause(o, found)
        raise failure_class(cause)(f"[{cause}] {o.command}\n  " + "\n  ".join(found)
                                   + f"\n--- stderr ---\n{o.stderr[-3000:]}\n--- stdout ---\n{o.stdout[-1500:]}")
    return o


def drive(argv: list[str] | tuple[str, ...], folder: Path | str, echo: tuple[str, ...] = ()) -> Outcome:
    """run_cli, then check: the one call every fuzz test makes per example (--hypothesis-show-statistics counts
    the exit codes, to show how many examples got past validation)."""
    o = run_cli(argv, folder)
    with contextlib.suppress(Exception):  # outside a hypothesis test (a regression test) there is nothing to count
        event(f"exit {o.code}")
    return check(o, echo)
