"""Whole command lines for every command, options drawn from sound values and from the odd ones (0, negatives,
2**63, a 5,000-digit number, nan, inf, text where a number goes): each gives a result or one line naming the
option, in bounded time. Sound values are kept small (fast presets, --top 3, a few steps, EP groups of 4
GPUs), so that a valid example takes well under a few seconds."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzz._drive import drive, example_folder, fuzz_settings
from fuzz.strategies import (FAST_PRESETS, HUGE_DIGITS, MOE_PRESETS, PRESETS, float_option, int_option, set_items,
                             shipped_run_ids)

pytestmark = pytest.mark.fuzz


def _maybe(option: str, values: st.SearchStrategy[str]) -> st.SearchStrategy[list[str]]:
    """``[option, value]`` or nothing."""
    return st.one_of(st.just([]), values.map(lambda v: [option, v]))


def _flag(option: str) -> st.SearchStrategy[list[str]]:
    return st.sampled_from(([], [option]))


@st.composite
def _options(draw, *parts: st.SearchStrategy[list[str]]) -> list[str]:
    """The options of ``parts`` in a drawn order (Click takes them in any order)."""
    chosen = [draw(p) for p in parts]
    order = draw(st.permutations(range(len(chosen))))
    return [w for i in order for w in chosen[i]]


def _scenario(presets: tuple[str, ...]) -> st.SearchStrategy[str]:
    return st.sampled_from(presets) | st.sampled_from(("nosuch", "", "-", "x.yaml", "llama3-405b.yaml", "LLAMA3-405B"))


GPU_LISTS = ("8192,16384", "1024,2048", "16384", "1,2", "0", "-5", "a,b", "", ",", "1_024", "99999999999999999999",
             "1e3", "8192,8192", "1," * 200, str(2**63), " 8192 , 16384 ", "nan", HUGE_DIGITS)
STRAGGLERS = ("0", "0.01x1.5", "1x100", "x", "0.5x", "nan", "infxinf", "-1x2", "2x1", "0.1x0", "0.1x-1", "0x", "1e-300x1e300",
              "0.01x1.5x2", "")
SKEWS = ("uniform", "balanced", "0", "zipf:0.8", "experts:1.2", "pairs:0", "zipf:", "zipf:nan", "zipf:inf", "zipf:17",
         "experts:-1", "abc", "zipf:1e-400", "ZIPF:0.8", "zipf:0.8:1", "")
TIMES = ("15s", "1ms", "1 s", "0s", "-1s", "nan s", "inf", "1e-300s", "abc", "1e9s", "", "15", "86400s", "86401s")
SIZES = ("64MB", "0B", "-1GB", "nan", "1e30TB", "abc", "", "1", "1e400B")
FIGURE_IDS = ("5.1", "5.2", "5.3", "5.4", "5.5", "5.6", "5.7", "5.8", "5.9", "anim-5.1", "anim-5.2", "5.10", "", "5",
              "anim-5.3", "../5.3")
RUN_IDS = ("nosuch", "", " ", HUGE_DIGITS[:100])


@st.composite
def _sets(draw, preset: str) -> list[str]:
    items = draw(st.lists(set_items(preset), max_size=1))
    return [w for item, _ in items for w in ("--set", item)]


@st.composite
def budget_like(draw):
    command = draw(st.sampled_from(("budget", "memory", "show")))
    preset = draw(st.sampled_from(PRESETS))
    return [command, draw(_scenario((preset,))), *draw(_options(_sets(preset), _flag("--json") if command != "show"
                                                                else st.just([])))]


@st.composite
def search(draw):
    preset = draw(st.sampled_from(FAST_PRESETS))
    gpus = int_option((8, 64, 512, 1024, 2048, 16384)) | st.sampled_from((str(2**63), "9223372036854775808"))
    return ["search", draw(_scenario((preset,))), *draw(_options(
        st.just(["--top", "3"]) | _maybe("--top", int_option((1, 3, 10, 1000, 1001))), _maybe("--gpus", gpus),
        _flag("--json"), _sets(preset)))]


@st.composite
def scale(draw):
    preset = draw(st.sampled_from(FAST_PRESETS))
    research = draw(_flag("--research"))
    gpus = st.sampled_from(GPU_LISTS[:4]) if research else st.sampled_from(GPU_LISTS)
    return ["scale", draw(_scenario((preset,))), *research, *draw(_options(
        _maybe("--gpus", gpus), _flag("--weak"), _flag("--json"), _sets(preset)))]


@st.composite
def whatif(draw):
    preset = draw(st.sampled_from(FAST_PRESETS))
    variants = st.lists(set_items(preset), min_size=1, max_size=3).map(lambda items: " ".join(i for i, _ in items))
    vary = variants | st.sampled_from(("'", "a=b c", "=", ";;;", "layout.pp=8 layout.dp=256", "", "'layout.pp=8",
                                       "layout.pp=8;cluster.gpus=8192"))
    return ["whatif", draw(st.sampled_from((preset, "llama3-405b"))), *draw(_options(
        st.lists(vary, max_size=2).map(lambda vs: [w for v in vs for w in ("--vary", v)]),
        _flag("--chapter"), _flag("--json")))]


@st.composite
def simulate(draw):
    preset = draw(st.sampled_from(("hpn-gpt3-175b", "llama3-405b-puredp", "llama3-405b")))
    return ["simulate", draw(_scenario((preset,))), *draw(_options(
        _maybe("--steps", int_option((1, 2, 3, 100_001))), _maybe("--jitter", float_option((0.0, 0.1, 0.5, 2.0))),
        _maybe("--link-jitter", float_option((0.0, 0.1, 0.99))), _maybe("--straggler", st.sampled_from(STRAGGLERS)),
        _maybe("--replicas", int_option((0, 1, 4, 64, 1_000_001))),
        _maybe("--link-rate", float_option((1.0, 0.5, 2.0, 1e-3))), _flag("--no-contention"),
        _maybe("--seed", int_option((0, 1, 7, 2**64))), _flag("--json")))]


@st.composite
def wire(draw):
    preset = draw(st.sampled_from(PRESETS))
    return ["wire", draw(_scenario((preset,))), *draw(_options(
        _maybe("--steps", int_option((1, 4, 8, 10**9))), _maybe("--window", st.sampled_from(TIMES)),
        _maybe("--converging", int_option((1, 2, 8, 10**9))), _maybe("--switch-buffer", st.sampled_from(SIZES)),
        _flag("--json"), _sets(preset)))]


@st.composite
def moe(draw):
    preset = draw(st.sampled_from(MOE_PRESETS + ("llama3-405b",)))
    small = st.sampled_from(("1", "2", "4"))
    odd = int_option((8,)) | st.sampled_from(("100000", "10000000000000000000000", str(2**63), "4096"))
    sized = draw(st.sampled_from(("both", "both", "both", "servers", "gpus")))
    servers = draw(small if draw(st.integers(0, 3)) else odd)
    gpus = draw(small if draw(st.integers(0, 3)) else odd)
    size = {"both": ["--servers", servers, "--gpus-per-server", gpus], "servers": ["--servers", servers],
            "gpus": ["--gpus-per-server", gpus]}[sized]
    if sized == "servers" and servers not in ("1", "2"):
        size = ["--servers", servers, "--gpus-per-server", "1"]  # the default of 8 per server: 8x larger groups
    return ["moe", draw(_scenario((preset,))), *size, *draw(_options(
        _maybe("--skew", st.sampled_from(SKEWS)), _maybe("--seed", int_option((0, 1, 2**32))), _flag("--json")))]


@st.composite
def validate(draw):
    explain = st.sampled_from(shipped_run_ids()[:3] + RUN_IDS)
    return ["validate", *draw(_options(_maybe("--explain", explain), _flag("--json"),
                                       _maybe("--runs", st.sampled_from(("", " ", "nosuch.yaml"))), ))]


@st.composite
def figure(draw):
    ident = draw(st.sampled_from(FIGURE_IDS))
    scenario = draw(st.sampled_from(([], ["llama3-405b"], ["megascale-175b"], ["nosuch"], ["deepseek-v3"])))
    out = draw(st.sampled_from(("f.svg", "f.html", "f.png", "f.pdf", "f", "f.SVG", "")))
    window = _maybe("--window", st.sampled_from(TIMES))
    lang = _maybe("--lang", st.sampled_from(("en", "zh-Hant", "zh", "", "EN")))
    if draw(st.integers(0, 9)) == 0:
        return ["figure", *draw(_options(_flag("--list"), lang))]
    return ["figure", ident, *scenario, *draw(_options(st.just(["--out", out]) | st.just([]), window, lang))]


@st.composite
def misc(draw):
    """The parser's own edge: an unknown command or option, a missing value, --help, a refused serve."""
    return draw(st.sampled_from((
        ["presets"], ["nosuch"], ["budget", "--nosuch"], ["budget", "--set"], ["budget", "--json", "--json"],
        ["--help"], ["budget", "--help"], ["search", "--top"], ["search", "--top", "x"], ["budget", "a", "b"],
        ["serve", "--port", "0"], ["serve", "--port", "70000"], ["serve", "--port", "-1"], ["serve", "--lang", "xx"],
        ["serve", "--port", HUGE_DIGITS], ["simulate", "--seed", "-1"], ["moe", "--seed", "-1"], ["-x"], ["--"],
        ["budget", "--", "--json"], [""], ["budget", ""], ["show"], ["figure"], ["figure", "5.3"], ["whatif"],
        ["whatif", "--chapter", "megascale-175b"], ["budget", "llama3-405b", "--set", "layout.pp=8", "--set"],
    )))


COMMANDS = {  # the strategy of each command's lines, and its examples on ci (a validate takes 0.5 s, a wire 20 ms)
    "budget": (budget_like, 60), "search": (search, 30), "scale": (scale, 50), "whatif": (whatif, 60),
    "simulate": (simulate, 50), "wire": (wire, 75), "moe": (moe, 60), "validate": (validate, 20),
    "figure": (figure, 40), "misc": (misc, 20)}
"""One test per command: each gets its own examples, so that a slow command does not starve the others, and
its own failures."""


def _command_test(command: str):
    strategy, weight = COMMANDS[command]

    def test(argv):
        with example_folder() as folder:
            drive(argv, folder)

    test.__name__ = test.__qualname__ = f"test_{command}_gives_a_result_or_one_line_naming_the_option"
    return fuzz_settings(weight)(given(argv=strategy())(test))  # named first: hypothesis reports the name


for _command in COMMANDS:
    globals()[f"test_{_command}_gives_a_result_or_one_line_naming_the_option"] = _command_test(_command)
