"""The web app in a real browser: Debian's chromium driven by Playwright (pytest-playwright), against
`stepbudget serve` started once per session on a free port. Every browser test is watched: a request to any
host but the app's, an error in the browser console, or a traceback in the server's log fails it."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from playwright.sync_api import expect

from _web import stepbudget_command

expect.set_options(timeout=15_000)  # a loaded 2-core CI machine can take seconds for what takes 50 ms here

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
"""Debian's chromium, kept from calling out (this machine has no network; CI neither)."""


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    if not Path(CHROMIUM).exists():
        pytest.fail("the browser tests need Debian's chromium: apt-get install -y chromium (.ci/run does)")
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_ARGS}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, url: str, log: Path, process: subprocess.Popen):
        self.url, self.log, self.process = url, log, process

    def errors(self) -> str:
        """What the server logged that is not its start-up line: tracebacks and errors."""
        lines = self.log.read_text(errors="replace").splitlines()
        return "\n".join(line for line in lines if not line.startswith("stepbudget serve: "))


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    port = _free_port()
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with open(log, "w") as sink:
        process = subprocess.Popen([*stepbudget_command(), "serve", "--port", str(port)], stdout=sink, stderr=sink)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 90
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"stepbudget serve did not start: {log.read_text()}")
            time.sleep(0.3)
    yield Server(url, log, process)
    process.terminate()
    process.wait(timeout=20)


@pytest.fixture
def watched(page, server):
    """The test's page, with every request, console error and page error recorded, and checked after."""
    outside, console = [], []
    page.on("request", lambda r: None if r.url.startswith((server.url, "data:", "blob:")) else outside.append(r.url))
    page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: console.append(str(e)))
    page.set_default_timeout(20_000)
    before = server.errors()
    yield page
    assert outside == [], f"requests left the machine: {outside}"
    assert console == [], f"errors in the browser console: {console}"
    assert server.errors() == before, f"the server logged: {server.errors()[len(before):][-2000:]}"

