"""The chapter as a web app: one page, sections 5.1-5.7, each with its panel (``stepbudget serve``).

The page is rendered on the server from the URL's query string: the language (``lang``) and every
control's value. Each panel's output carries its controls' values, which assets/stepbudget.js writes into
the query in place, so a reload or a shared link comes back to the same state; the language switch
reloads the page in the other language.
Everything the page loads is served from the package (Dash's bundles, assets/): no request leaves the
machine.
"""

from __future__ import annotations

import logging
import threading
from importlib import resources
from urllib.parse import parse_qsl

from dash import ClientsideFunction, Dash, Input, Output, State, dcc, html

from stepbudget.views.i18n import DEFAULT_LANG, LANGS, t
from stepbudget.web import figures
from stepbudget.web.components import Hyphenated
from stepbudget.web.panels import PANELS, p51, p52, p53, p54, p55, p56, p57

SWITCH = {"en": "to-en", "zh-Hant": "to-zh"}


def _state(search: str | None) -> dict[str, str]:
    return dict(parse_qsl((search or "").lstrip("?"), keep_blank_values=True))


SECTIONS: tuple[tuple[str, tuple[str, ...], tuple], ...] = (
    ("5.1", ("5.1",), ()),
    ("5.2", (), (p51,)),
    ("5.3", (), (p52, p53)),
    ("5.4", (), (p54,)),
    ("5.5", (), (p55,)),
    ("5.6", (), (p56,)),
    ("5.7", (), (p57,)),
)
"""The chapter's sections, in its order: each with the figures it shows on its own (Figure 5.1, which has no
panel: it follows Panel 5.4's job) and its panels, which show their figures beside their controls."""


def section_id(number: str) -> str:
    return "s" + number.replace(".", "-")


def page(lang: str, state: dict[str, str]) -> list:
    """The whole page in ``lang``, every control at its value in ``state`` (the URL query) or its default."""
    switch = [html.Button(name, id=SWITCH[code], className="lang" + (" current" if code == lang else ""),
                          lang=code, disabled=code == lang) for code, name in LANGS.items()]
    nav = [html.A([html.Span(n, className="number"), " ", t(lang, f"section.{n}.short")], href=f"#{section_id(n)}")
           for n, _, _ in SECTIONS]
    sections = [html.Section(id=section_id(n), className="chapter-section", children=[
        html.H2([html.Span(n, className="number"), " ", t(lang, f"section.{n}.title")]),
        html.P(t(lang, f"section.{n}.lede"), className="lede"),
        *figures.graphs(lang, idents),
        *[p.layout(lang, state) for p in panels],
    ]) for n, idents, panels in SECTIONS]
    return [
        dcc.Store(id="lang", data=lang),
        html.Header([
            html.Div([html.H1(t(lang, "app.title")), html.P(t(lang, "app.subtitle"), className="subtitle")]),
            html.Div(switch, className="switch", role="group", **Hyphenated({"aria-label": t(lang, "app.language")})),
        ]),
        html.Nav(nav),
        html.Main(sections),
        html.Footer(html.P(t(lang, "app.footer"))),
        dcc.Store(id="switched"),
        dcc.Store(id="title", data=t(lang, "app.title")),
        dcc.Store(id="titled"),
    ]


def create_app(lang: str = DEFAULT_LANG) -> Dash:
    """The Dash app; ``lang`` is the language of a URL that does not name one."""
    if lang not in LANGS:
        raise ValueError(f"--lang: {lang!r} is not one of {', '.join(LANGS)}")
    # the page's controls exist only once _render has drawn it; tests/web check every callback's ids against it
    app = Dash(__name__, assets_folder=str(resources.files("stepbudget.web") / "assets"), serve_locally=True,
               title=t(lang, "app.title"), update_title="", suppress_callback_exceptions=True)  # "": no "Updating..."
    app.index_string = app.index_string.replace("<html>", f'<html lang="{lang}">', 1)  # before the script sets it
    app.layout = html.Div([dcc.Location(id="url", refresh=False), html.Div(id="page", lang=lang)])

    @app.callback(Output("page", "children"), Output("page", "lang"), Input("url", "search"))
    def _render(search):
        state = _state(search)
        chosen = state.get("lang") if state.get("lang") in LANGS else lang
        return page(chosen, state), chosen

    # the tab's title and the document's language (which picks the CJK glyphs) follow the page's
    app.clientside_callback(ClientsideFunction("stepbudget", "title"), Output("titled", "data"), Input("title", "data"),
                            State("lang", "data"))
    app.clientside_callback(ClientsideFunction("stepbudget", "switch"), Output("switched", "data"),
                            Input(SWITCH["en"], "n_clicks"), Input(SWITCH["zh-Hant"], "n_clicks"),
                            prevent_initial_call=True)
    for panel in PANELS:
        panel.register(app)
    return app


def warm() -> None:
    """Fill the library's caches (calibrated rates, Panel 5.7's variants) so the first reader does not wait."""
    from stepbudget.api import HBM_CHOICES, panel_whatif

    for hbm in HBM_CHOICES:
        for flags in range(8):
            panel_whatif(hbm, bool(flags & 1), bool(flags & 2), bool(flags & 4))


def serve(host: str = "127.0.0.1", port: int = 8050, lang: str = DEFAULT_LANG, open_browser: bool = False,
          ready=None) -> None:
    """Serve the app until Ctrl-C. Raises OSError when the address can't be bound (the CLI says which option)."""
    import socket

    from werkzeug.serving import make_server, select_address_family

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request; errors still show
    app = create_app(lang)
    # bound here, so that a port in use is an OSError to report, not werkzeug's own message and exit
    listening = socket.socket(select_address_family(host, port), socket.SOCK_STREAM)
    try:
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listening.bind(socket.getaddrinfo(host, port, listening.family, socket.SOCK_STREAM)[0][4])
        listening.listen(128)
    except OSError:
        listening.close()
        raise
    server = make_server(host, port, app.server, threaded=True, fd=listening.fileno())
    threading.Thread(target=warm, daemon=True).start()
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{listening.getsockname()[1]}/"
    if ready is not None:
        ready(url)
    if open_browser:
        import webbrowser

        threading.Timer(0.5, webbrowser.open, args=(url,)).start()
    server.serve_forever()  # werkzeug's: returns on KeyboardInterrupt after closing the socket
