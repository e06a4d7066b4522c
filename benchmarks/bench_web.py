"""How fast the web app answers a control, per panel: in a real browser and on the server.

Run: python benchmarks/bench_web.py [CHANGES]   (prints figures; not a test; needs Debian's chromium)

Starts `stepbudget serve` on a free port, opens the page in headless chromium (Playwright) and, per panel,
commits CHANGES control changes (default 60: a value typed and Enter, or a radio button clicked). Each is
timed in the page, from the key or click event to the first change of the panel's output (numbers) and to the
last change in the panel's figure area before it goes quiet (figures), by MutationObservers, so Playwright's own
round trips are not counted. The first complete page is timed from navigation to every panel's output and every
figure drawn. The server's time per callback is the panel's compute and its HTML, timed in-process over the
same changes.
"""

from __future__ import annotations

import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _web import READY, defaults, stepbudget_command  # noqa: E402

from stepbudget.web import components as ui  # noqa: E402
from stepbudget.web.panels import p51, p52, p53, p54, p55, p56, p57  # noqa: E402

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
CHANGES = {  # the control each panel's changes move, and its i-th value. Values the full model can take (its
    # batch must split over DP: powers of two here), each different from the one before; nothing caches a
    # panel's answer but Panel 5.7's 24 settings and 5.6's job at an unchanged line rate, as in real use
    p51: ("G", lambda i: f"{2 ** (8 + i % 6):,}"),
    p52: ("D", lambda i: str(2 ** (3 + i % 5))),
    p53: ("dp", lambda i: str(2 ** (6 + i % 7))),
    p54: ("G", lambda i: f"{128 * 2 ** (3 + i % 8):,}"),
    p55: ("expert_ffn", lambda i: str(14336 + 128 * (i + 1))),
    p56: ("step", lambda i: f"{210 + 10 * i} ms"),
    p57: ("hbm", lambda i: ("141", "192", "80")[i % 3]),
}
OBSERVE = """pid => {
  window.__t0 = 0; window.__lat = []; window.__fig = []; window.__start = 0; window.__last = 0;
  const start = () => { window.__t0 = window.__start = performance.now(); window.__last = 0; };
  document.addEventListener('keydown', e => { if (e.key === 'Enter') start(); }, true);
  document.addEventListener('click', e => { if (e.target.closest('#' + pid)) start(); }, true);
  new MutationObserver(() => { if (window.__t0) { window.__lat.push(performance.now() - window.__t0); window.__t0 = 0; } })
    .observe(document.getElementById(pid + '-out'), {childList: true, subtree: true, characterData: true});
  new MutationObserver(() => { if (window.__start) { window.__last = performance.now(); } })
    .observe(document.getElementById(pid + '-figure'), {childList: true, subtree: true, characterData: true,
                                                         attributes: true});
}"""
QUIET_S = 1.5
"""A figure area is settled when nothing in it changed for this long after a change (its last change counts)."""
COMPLETE = """() => {
  const ready = %s.every(s => document.querySelector(s));
  const graphs = [...document.querySelectorAll('.js-plotly-plot, .dash-graph')];
  return ready && graphs.length > 0 && graphs.every(g => g.querySelector('.main-svg'));
}"""


def percentiles(xs: list[float]) -> str:
    xs = sorted(xs)
    return f"p50 {statistics.median(xs):6.1f} ms   p95 {xs[max(0, round(0.95 * len(xs)) - 1)]:6.1f} ms"


def first_page(url: str, loads: int = 5) -> list[float]:
    """Seconds from navigation to every panel computed and every figure drawn, each load in a fresh page."""
    times = []
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        for _ in range(loads):
            page = b.new_page(viewport={"width": 1280, "height": 900})
            t0 = time.perf_counter()
            page.goto(url)
            page.wait_for_function(COMPLETE % list(READY), polling=50, timeout=120_000)
            times.append(time.perf_counter() - t0)
            page.close()
        b.close()
    return times


figures: dict[str, list[float]] = {}
"""Per panel, ms from each change to the last change of its figure area (filled by ``browser``)."""


def browser(url: str, n: int) -> dict:
    out = {}
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        page = b.new_page(viewport={"width": 1280, "height": 900})
        page.goto(url)
        for selector in READY:
            page.wait_for_selector(selector)
        time.sleep(2)  # the server warms its caches in the background
        for panel, (name, value_of) in CHANGES.items():
            page.goto(url)  # each panel from a fresh page, so one panel's changes do not slow the next
            for selector in READY:
                page.wait_for_selector(selector)
            page.evaluate(OBSERVE, panel.PID)
            ident = f"{panel.PID}-{name}"
            for i in range(n):
                value = value_of(i)
                if name == "hbm":
                    page.click(f"#{ident} input[value='{value}']")
                else:
                    page.fill(f"#{ident}", value)
                    page.press(f"#{ident}", "Enter")
                try:
                    page.wait_for_function("window.__t0 === 0", polling="raf", timeout=10_000)
                except Exception:
                    raise SystemExit(f"{ident} = {value!r}: the output did not change") from None
                if page.evaluate(f"document.getElementById('{panel.PID}-figure').children.length"):
                    page.wait_for_function(f"window.__last && performance.now() - window.__last > {QUIET_S * 1e3}",
                                           polling=100, timeout=60_000)
                    figures.setdefault(panel.PID, []).append(page.evaluate("window.__last - window.__start"))
            out[panel.PID] = page.evaluate("window.__lat")
        b.close()
    return out


def server_side(n: int) -> dict:
    out = {}
    for panel, (name, value_of) in CHANGES.items():
        times = []
        for i in range(n):
            v = defaults(panel, **{name: value_of(i + n)})  # values the browser run did not cache
            t0 = time.perf_counter()
            result = panel.compute("en", v, None, set()) if panel is p56 else panel.compute("en", v)
            ui.html_of(result.children if isinstance(result, ui.Out) else result)
            times.append((time.perf_counter() - t0) * 1e3)
        out[panel.PID] = times
    return out


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([*stepbudget_command(), "serve", "--port", str(port)], stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(url, timeout=2)
                break
            except OSError:
                time.sleep(0.2)
        seen = browser(url, n)
        loads = first_page(url)
    finally:
        server.terminate()
        server.wait()
    computed = server_side(n)
    print(f"control change -> updated output, in headless chromium, {n} changes per panel (2-core machine):")
    for panel, (name, _) in CHANGES.items():
        print(f"  {panel.PID} ({name:<10}) browser {percentiles(seen[panel.PID])}   "
              f"server compute {percentiles(computed[panel.PID])}")
    everything = [x for xs in seen.values() for x in xs]
    print(f"  all panels: browser {percentiles(everything)}")
    print("control change -> figures settled (last change in the panel's figure area):")
    for pid, xs in figures.items():
        print(f"  {pid} figures {percentiles(xs)}")
    print(f"first complete page (every panel and figure drawn), {len(loads)} fresh loads: "
          f"median {statistics.median(loads):.2f} s, worst {max(loads):.2f} s")


if __name__ == "__main__":
    main()
