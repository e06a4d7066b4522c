import pytest

import stepbudget as sb


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
