"""Helpers shared by the tests."""


def rows(budget, dim, what=None):
    """The exchanges of one dimension that run at least once per step."""
    return [x for x in budget.exchanges if x.dim == dim and float(x.calls) > 0 and (what is None or what in x.what)]
