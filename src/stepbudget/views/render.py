"""A chapter figure, a plain plotly figure dict, written as a file: HTML through plotly (its script inlined, so the
file opens offline and keeps its interactivity), PNG or SVG through plotly's own static export (kaleido), which
draws the figure in a headless Chrome or Chromium just as the HTML shows it.

Nothing is fetched from outside: plotly.js comes from the installed plotly package and MathJax is off (no figure
uses LaTeX). One browser serves every image a process writes: started at the first PNG or SVG, driven from an
event loop in a thread of its own (so a caller's running loop, as in Jupyter, is no matter) and closed at exit;
``start`` launches it ahead of the figure. Without Chrome or Chromium a PNG or SVG is one ScenarioError naming the
option and the fix. An animation is written at its still.

Chinese is drawn in the package's own font wherever the figure has any (FONT_FAMILY, web/assets/fonts/, a subset of
Noto Sans CJK TC built by scripts/build_cjk_font.py), so that a machine without a CJK font draws no boxes: the
figure names it first in its font family, the browser finds it through a fontconfig file of its own (Linux; macOS
and Windows draw with their own CJK fonts), and an SVG carries it inside, as a WOFF2 data URL, since the SVG's
text is drawn again by whatever opens it. A figure without Chinese is written as it was.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import concurrent.futures
import contextlib
import functools
import logging
import os
import re
import threading
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

from stepbudget.inputs.errors import OptionError
from stepbudget.inputs.files import atomic_write

COLORS = ["#3b6ea8", "#d1603d", "#5aa469", "#8e6bb8", "#c49a2c", "#4aa3a1", "#b8527a", "#7a7a7a"]
"""The figures' palette, one colour a series in order (chapter figures, the commands' --plot)."""
FORMATS = (".html", ".png", ".svg")
TIMEOUT_S = 60.0
"""Longest the browser may take to start, or to draw one image (a simulated step's 8,432 bars take under 2 s)."""
_SIZE = (1000, 520)
"""Width and height in pixels of a figure whose layout gives none (the chapter's usual size)."""
_XML = b'<?xml version="1.0" encoding="UTF-8" standalone="no"?>\n'
"""plotly's SVG is an element for a page; a file of its own opens with the XML declaration."""
FONT_FAMILY = "stepbudget TC"
"""The Chinese font the package ships, by its family name (the web page's @font-face names it too)."""
FONT_DIR = Path(__file__).resolve().parents[1] / "web" / "assets" / "fonts"
"""Where it is: stepbudget-tc.woff2 (the page's, and the one an SVG carries), stepbudget-tc.otf (fontconfig's)."""
CJK_RANGES = ((0x2E80, 0x33FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0xFE30, 0xFE4F),
              (0xFF00, 0xFFEF), (0x20000, 0x3FFFF))
"""Code points drawn in FONT_FAMILY, first to last: radicals, CJK punctuation (、。「」), kana, bopomofo and
compatibility forms; extension A; the unified ideographs; compatibility ideographs; vertical forms; full-width
forms (，：（）); the supplementary ideographic planes. Latin stays with the figure's other fonts."""
_PLOTLY_FONT = '"Open Sans", verdana, arial, sans-serif'
"""plotly.js's own default layout.font.family, which a figure's template may replace."""


def write(figure: dict, path: str | os.PathLike, option: str = "--out") -> None:
    """Write ``figure`` to ``path`` (.html, .png or .svg) through a temporary file beside it; a PNG or SVG needs
    Chrome or Chromium, and its absence is a ScenarioError naming ``option``."""
    path = Path(path)
    try:
        import plotly.graph_objects as go
        import plotly.io as pio
    except ImportError:
        raise OptionError(option, f"writing {path.suffix} needs plotly, which is not installed; pip install "
                            "'stepbudget[plot]' (or '.[plot]' from the repository)") from None
    if path.suffix == ".html":
        atomic_write(path, lambda tmp: pio.write_html(figure, tmp, include_plotlyjs=True, full_html=True,
                                                 auto_play=False), option)
        return
    still = _still(figure)
    layout = still.get("layout", {})
    opts = {"format": path.suffix[1:], "width": layout.get("width", _SIZE[0]),
            "height": layout.get("height", _SIZE[1]), "scale": 1}

    def drawn(tmp: Path) -> None:
        with open(tmp, "wb") as out:  # opened first: a path that cannot be written fails before the drawing
            # validated as the HTML is: a template named by a string ("plotly_white") becomes the template itself
            full = go.Figure(still).to_dict()
            chinese = has_cjk(full)
            image = _BROWSER.draw(_in_cjk_font(full) if chinese else full, opts, option)
            if path.suffix == ".svg":
                image = _XML + (_carrying_font(image) if chinese else image)
            out.write(image)

    atomic_write(path, drawn, option)


def _still(figure: dict) -> dict:
    """The frame an animation is written at as a still: ``layout.meta.still`` (its last state, where the story
    ends), applied over the first, without the play buttons, the slider and the margin made for them; a figure
    without frames is itself."""
    if not figure.get("frames"):
        return figure
    data = [dict(trace) for trace in figure["data"]]
    layout = {k: v for k, v in figure["layout"].items() if k not in ("margin", "updatemenus", "sliders")}
    name = (layout.get("meta") or {}).get("still")
    frame: dict = next((f for f in figure["frames"] if f.get("name") == name), {"data": []})
    for index, update in zip(frame.get("traces", range(len(frame["data"]))), frame["data"]):
        data[index].update({k: v for k, v in update.items() if k != "type"})
    for key, value in frame.get("layout", {}).items():
        layout[key] = {**layout.get(key, {}), **value} if isinstance(value, dict) else value
    return {"data": data, "layout": layout}


def wrap(text: str, columns: int) -> str:
    """Break a title into lines of at most ``columns`` Latin letters' width, a CJK character counting two,
    at a space where there is one."""
    import unicodedata

    lines, line, width = [], "", 0
    for ch in text:
        w = 2 if unicodedata.east_asian_width(ch) in "WF" else 1
        if width + w > columns:
            cut = line.rfind(" ")
            head, line = (line[:cut], line[cut + 1:]) if cut > 0 else (line, "")
            lines.append(head)
            width = sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in line)
        line += ch
        width += w
    return "\n".join([*lines, line])


# --- Chinese in the package's font -------------------------------------------------------------------------------

_CJK = re.compile("[" + "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in CJK_RANGES) + "]")


def unicode_range() -> str:
    """CJK_RANGES as CSS writes them (the @font-face's unicode-range)."""
    return ", ".join(f"U+{lo:X}-{hi:X}" for lo, hi in CJK_RANGES)


def has_cjk(node: Any) -> bool:
    """Whether any string in ``node`` (a figure dict: dicts, lists, numpy arrays of text) has a character of
    CJK_RANGES."""
    if isinstance(node, str):
        return _CJK.search(node) is not None
    if isinstance(node, dict):
        return any(has_cjk(value) for value in node.values())
    if isinstance(node, (list, tuple)):
        return any(has_cjk(item) for item in node)
    if getattr(getattr(node, "dtype", None), "kind", "") in ("U", "O"):  # numpy text, as in a trace's text array
        return any(has_cjk(item) for item in node.ravel().tolist())
    return False


def _in_cjk_font(figure: dict) -> dict:
    """``figure`` (validated: its template a dict) with FONT_FAMILY first in its font family. The font holds CJK
    characters alone, so Latin falls through to the fonts after it, as before."""
    layout = figure.get("layout", {})
    font = layout.get("font", {})
    family = font.get("family") or layout.get("template", {}).get("layout", {}).get("font", {}).get("family")
    return {**figure, "layout": {**layout, "font": {**font, "family": f'"{FONT_FAMILY}", {family or _PLOTLY_FONT}'}}}


@functools.cache
def _font_face() -> bytes:
    """An SVG <style> declaring FONT_FAMILY from the WOFF2 itself, a data URL (140 kB): an SVG that opens in any
    browser, on any machine, draws its Chinese. Other SVG readers (Inkscape, librsvg) skip @font-face and take
    a CJK font of their machine's, as they do for any SVG."""
    woff2 = base64.b64encode((FONT_DIR / "stepbudget-tc.woff2").read_bytes()).decode("ascii")
    return (f'<style>@font-face {{ font-family: "{FONT_FAMILY}"; src: url(data:font/woff2;base64,{woff2}) '
            f'format("woff2"); unicode-range: {unicode_range()}; }}</style>').encode("ascii")


def _carrying_font(svg: bytes) -> bytes:
    """plotly's ``svg`` with _font_face() as the first child of its root element."""
    start = svg.index(b">", svg.index(b"<svg")) + 1
    return svg[:start] + _font_face() + svg[start:]


def _fontconfig(base: str | None) -> str:
    """A fontconfig file that reads ``base`` (the FONTCONFIG_FILE the process was given), or else the machine's own
    fonts.conf, and adds FONT_DIR's OpenType font (its WOFF2, the same font, is the web page's)."""
    include = escape(base or "fonts.conf")  # a bare name is looked for where fontconfig keeps its default
    folder = escape(str(FONT_DIR))
    return ('<?xml version="1.0"?>\n<!DOCTYPE fontconfig SYSTEM "urn:fontconfig:fonts.dtd">\n<fontconfig>\n'
            f'  <include ignore_missing="yes">{include}</include>\n  <dir>{folder}</dir>\n'
            f'  <selectfont><rejectfont><glob>{folder}/*.woff2</glob></rejectfont></selectfont>\n</fontconfig>\n')


@functools.cache
def _chromium_with_font() -> type:
    """choreographer's Chromium, launched with FONTCONFIG_FILE naming a _fontconfig() file in its own temporary
    folder (made before the launch, removed with it). Where the browser does not read fontconfig (macOS,
    Windows), the variable is ignored and the machine's CJK fonts draw."""
    from choreographer.browsers import Chromium

    class ChromiumWithFont(Chromium):
        def get_env(self):
            env = super().get_env()
            conf = Path(self.tmp_dir.path) / "fonts.conf"
            conf.write_text(_fontconfig(env.get("FONTCONFIG_FILE")), encoding="utf-8")
            return {**env, "FONTCONFIG_FILE": str(conf)}

    return ChromiumWithFont


class _Browser:
    """The process's one headless Chrome or Chromium, driven by kaleido from an event loop in a daemon thread.

    kaleido's own shared server (``kaleido.start_sync_server``) is not used: when the browser cannot start, its
    thread dies and every later call waits forever on a queue nobody serves. Here each call waits on a future
    with a timeout, and any failure reaches the caller.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._kaleido: Any = None
        self._opened: concurrent.futures.Future | None = None
        self._pid = 0

    def start(self, option: str) -> None:
        """Launch the browser, unless it runs or is starting, without waiting for it; none to be found is a
        ScenarioError naming ``option``, at once."""
        with self._lock:
            self._start(option)

    def _start(self, option: str) -> None:
        if self._pid != os.getpid():  # the first start, or the first in a forked child (the parent's loop thread
            if self._pid == 0:        # and browser are not its own; the parent's closing at exit is inherited)
                atexit.register(self.close)
            self._loop, self._thread, self._kaleido, self._opened, self._pid = None, None, None, None, os.getpid()
        if self._running():
            return
        self._close()  # what is left of one that failed or died
        try:
            import kaleido
            import plotly
        except ImportError:
            raise OptionError(option, "writing PNG or SVG needs kaleido, which is not installed; pip install "
                                "'stepbudget[plot]' (or '.[plot]' from the repository), or write .html") from None
        from choreographer.errors import ChromeNotFoundError

        for name in ("choreographer", "kaleido"):  # their warnings as a library's: shown only where logging is set up
            logging.getLogger(name).addHandler(logging.NullHandler())
        plotly_js = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"  # never kaleido's CDN default
        if not plotly_js.is_file():
            raise OptionError(option, f"plotly's own plotly.js is missing ({plotly_js}); reinstall plotly "
                                "(pip install --force-reinstall plotly)")
        self._loop = loop = asyncio.new_event_loop()
        # the browser's helper threads are started from this one, so they are daemons too: none holds up exit
        self._thread = threading.Thread(target=loop.run_forever, name="stepbudget-kaleido", daemon=True)
        self._thread.start()

        async def make() -> Any:  # on the loop: kaleido's queues belong to it
            return kaleido.Kaleido(n=1, timeout=TIMEOUT_S, plotlyjs=plotly_js, mathjax=False,
                                   browser_cls=_chromium_with_font())

        try:
            self._kaleido = asyncio.run_coroutine_threadsafe(make(), loop).result(TIMEOUT_S)
        except ChromeNotFoundError:
            self._close()
            raise OptionError(option, "PNG and SVG are drawn by Chrome or Chromium, and none was found; install "
                                "chromium (e.g. apt install chromium) or point BROWSER_PATH at one, or write .html") \
                from None
        self._opened = asyncio.run_coroutine_threadsafe(self._kaleido.open(), loop)

    def _running(self) -> bool:
        """A browser is starting, or has started and still runs."""
        if self._opened is None:
            return False
        process = getattr(self._kaleido, "subprocess", None)
        return not self._opened.done() or (process is not None and process.poll() is None)

    def draw(self, figure: dict, opts: dict, option: str) -> bytes:
        """The image of ``figure`` (a validated plotly dict) as kaleido's ``opts`` say; browser trouble is a
        ScenarioError naming ``option``."""
        from choreographer.errors import BrowserClosedError, BrowserFailedError, ChannelClosedError

        with self._lock:
            self._start(option)
            if self._opened is None or self._loop is None:
                raise RuntimeError("the browser did not start, and start raised nothing")
            try:
                self._opened.result(TIMEOUT_S)
                drawn = asyncio.run_coroutine_threadsafe(self._kaleido.calc_fig(figure, opts), self._loop)
                return drawn.result(TIMEOUT_S + 5)  # kaleido times the drawing out itself, after TIMEOUT_S
            except (BrowserClosedError, BrowserFailedError, ChannelClosedError, TimeoutError) as e:
                path = getattr(getattr(self._kaleido, "_browser_impl", None), "path", None) or "the browser"
                self._close()  # the next figure starts a fresh one
                reason = f"did not answer within {TIMEOUT_S:.0f} s" if isinstance(e, TimeoutError) else \
                    "did not start or closed while drawing"
                raise OptionError(option, f"{path} {reason}, so the {opts['format'].upper()} was not written; "
                                    "try again, point BROWSER_PATH at another Chrome or Chromium, or write .html") \
                    from None

    def _close(self) -> None:
        """Close the browser, end what still runs on its loop and stop it, whatever state they are in; never
        raises."""
        loop, thread, browser = self._loop, self._thread, self._kaleido
        self._loop, self._thread, self._kaleido, self._opened = None, None, None, None
        if loop is None or thread is None:
            return

        async def shutdown() -> None:
            if browser is not None:
                with contextlib.suppress(Exception):
                    await browser.close()
            rest = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in rest:  # the browser's watchdog, a drawing cut off by a timeout
                task.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(shutdown(), loop).result(15)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        if not thread.is_alive():
            loop.close()

    def close(self) -> None:
        """Close the browser (at exit; a later image starts a new one)."""
        with self._lock:
            if self._pid == os.getpid():
                self._close()


_BROWSER = _Browser()


def start(option: str = "--out") -> None:
    """Start the browser that draws PNG and SVG now, in the background, so that it is ready when the figure is:
    a command that writes one calls this before its work, and learns at once (a ScenarioError naming ``option``)
    when no Chrome or Chromium is to be found."""
    _BROWSER.start(option)
