"""Helpers for the web app's tests: the panels' default values, and what a component tree shows."""

from __future__ import annotations


def defaults(panel, **changes) -> dict:
    """A panel's control values as its callback reads them: the defaults, with ``changes`` (as typed) applied."""
    return {spec.name: spec.read(changes.get(spec.name, spec.default)) for spec in panel.CONTROLS}


def _children(node) -> list:
    kids = getattr(node, "children", None)
    if kids is None:
        return []
    return kids if isinstance(kids, (list, tuple)) else [kids]


def walk(node):
    """Every component and string under ``node``, depth first."""
    if isinstance(node, (list, tuple)):
        for item in node:
            yield from walk(item)
        return
    yield node
    for kid in _children(node):
        yield from walk(kid)


def shown(node) -> list[str]:
    """The strings a reader sees under ``node``: text children, option labels, titles; not code or figures."""
    if isinstance(node, str):
        return [node]
    if isinstance(node, (list, tuple)):
        return [s for item in node for s in shown(item)]
    if type(node).__name__ in ("Code", "Graph", "Store") or node is None:
        return []
    out = [option["label"] for option in getattr(node, "options", None) or []]
    out += [v for v in (getattr(node, p, None) for p in ("title", "placeholder", "aria-label")) if isinstance(v, str)]
    return out + [s for kid in _children(node) for s in shown(kid)]


def text(node) -> str:
    return " ".join(shown(node))


def find(node, ident: str):
    """The component with id ``ident`` under ``node``."""
    for item in walk(node):
        if getattr(item, "id", None) == ident:
            return item
    raise KeyError(ident)


def tile(node, ident: str) -> str:
    """The value line of tile ``ident``."""
    return text(find(node, ident).children[1])


def ids(node) -> list[str]:
    return [item.id for item in walk(node) if isinstance(getattr(item, "id", None), str)]


def compute(panel, lang: str = "en", **changes):
    """A panel's output children for its defaults with ``changes``, as its callback computes them."""
    from stepbudget.web.components import Out

    values = defaults(panel, **changes)
    result = panel.compute(lang, values, None, set()) if panel.PID == "p56" else panel.compute(lang, values)
    return result.children if isinstance(result, Out) else result


def stepbudget_command() -> list[str]:
    """The installed command, or the same entry point through this Python."""
    import sys
    from pathlib import Path

    script = Path(sys.executable).with_name("stepbudget")
    return [str(script)] if script.exists() else [sys.executable, "-c", "from stepbudget.cli import run; run()"]


# --- in a browser -------------------------------------------------------------------------------------

READY = ("#p51-t-bytes", "#p52-t-bytes", "#p53-table", "#p54-terms", "#p55-t-ratio", "#p56-t-bytes", "#p57-table")
"""One element of each panel's output: when all are there, the page has computed every panel."""


def load(page, server, query: str = "") -> None:
    """Open the page (with a query string) and wait until every panel has computed."""
    page.goto(server.url + query)
    for selector in READY:
        page.wait_for_selector(selector)


def type_in(page, ident: str, text: str) -> None:
    """Type into a text control and commit it, as a reader does (Enter)."""
    page.fill(f"#{ident}", text)
    page.press(f"#{ident}", "Enter")


def pick(page, ident: str, value: str) -> None:
    """Click the radio button or check box of ``value`` in control ``ident``."""
    page.click(f"#{ident} input[value='{value}']")


def shows(page, ident: str) -> str:
    """The value line of tile ``ident`` as the page shows it."""
    return page.inner_text(f"#{ident} .value")
