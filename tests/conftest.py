import pytest
from hypothesis import settings

import stepbudget as sb

# Hypothesis profiles, registered here because the hypothesis plugin loads --hypothesis-profile in its
# pytest_configure, after this root conftest is imported and before any sub-folder conftest is.
#   ci     the default (loaded below; --hypothesis-profile overrides it): the fuzz tests of tests/fuzz run a few
#          minutes' worth of examples, derandomized so that every CI run tries the same ones
#   smoke  the fuzz tests at a fifth of that, to check the harness itself
#   long   the fuzz tests at 2,000 examples each, new ones each run: a night's run,
#          `pytest -m fuzz --hypothesis-profile=long` (STEPBUDGET_FUZZ_EXAMPLES=300 for a shorter one)
# Every profile is hypothesis' own defaults: the suite's other property tests set their counts with @settings
# or take the default of 100, and no profile may slow them or change what they draw. What a profile means for
# the fuzz tests (examples, deadline, seeding) is the table FUZZ_PROFILES in tests/fuzz/_drive.py, which each
# fuzz test reads by the name of the profile loaded when its module is imported.
for _profile in ("ci", "smoke", "long"):
    settings.register_profile(_profile)
settings.load_profile("ci")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "fuzz: hypothesis drives the command line with odd input (tests/fuzz); "
                   "pytest -m fuzz --hypothesis-profile=long for a night's run")
    if not hasattr(config, "workerinput"):  # xdist's controller, or a run without xdist: before any worker starts
        _compile_once()


def _compile_once() -> None:
    """Compile the numba kernels into their cache on disk once, before xdist's workers, the web server, Dask's
    workers and the command-line subprocesses start: on a fresh checkout each of them would otherwise compile
    them itself, about 35 s of CPU apiece."""
    from stepbudget.a2a import _compiled
    from stepbudget.sim.step import sim_budget, simulate_step

    if _compiled.AVAILABLE:  # without numba the kernels are plain Python: nothing to compile
        _compiled.warm()
        simulate_step(sim_budget(sb.load("hpn-gpt3-175b")))


@pytest.fixture(scope="session")
def budget_of():
    """budget_of(name, *overrides) -> Budget, cached per arguments."""
    cache = {}

    def get(name, *overrides):
        key = (name, overrides)
        if key not in cache:
            cache[key] = sb.estimate(sb.derive(sb.load(name, list(overrides))))
        return cache[key]

    return get
