"""Helpers shared by the tests."""


def rows(budget, dim, what=None):
    """The exchanges of one dimension that run at least once per step."""
    return [x for x in budget.exchanges if x.dim == dim and float(x.calls) > 0 and (what is None or what in x.what)]


def doc_pages():
    """The README and every page of the docs site (docs/**/*.md), in a fixed order."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def doc_text():
    """The README and the docs pages as one text: their command blocks are run by the tests."""
    return "\n".join(p.read_text() for p in doc_pages())
