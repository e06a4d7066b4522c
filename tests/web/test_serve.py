"""`stepbudget serve` on the command line: the address it binds, a port in use, a foreign host, Ctrl-C."""

import signal
import socket
import subprocess
import time
import urllib.request

from _web import stepbudget_command


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(*args):
    return subprocess.Popen([*stepbudget_command(), "serve", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def wait_until_up(process, url, seconds=60):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        try:
            return urllib.request.urlopen(url, timeout=2).read()
        except OSError:
            time.sleep(0.3)
    raise AssertionError(f"{url} did not answer")


def test_a_port_in_use_is_one_line_naming_port():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out, err = start("--port", str(port)).communicate(timeout=60)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "--port" in lines[0] and str(port) in lines[0] and "Traceback" not in err


def test_bad_options_are_one_line_each():
    for args, word in ((("--lang", "fr"), "--lang"), (("--port", "70000"), "--port")):
        p = start(*args)
        _, err = p.communicate(timeout=60)
        assert p.returncode == 2 and len(err.strip().splitlines()) == 1 and word in err


def test_it_binds_this_machine_by_default_and_stops_cleanly_on_ctrl_c():
    port = free_port()
    p = start("--port", str(port))
    page = wait_until_up(p, f"http://127.0.0.1:{port}/")
    assert b"stepbudget" in page and b"cdn." not in page  # the page names nothing to fetch from elsewhere
    with socket.socket() as s:  # bound to 127.0.0.1 alone: another address of this machine is refused
        assert s.connect_ex(("127.0.0.2", port)) != 0
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "stepbudget serve: stopped"


def test_another_host_is_warned_about():
    port = free_port()
    p = start("--host", "0.0.0.0", "--port", str(port))
    wait_until_up(p, f"http://127.0.0.1:{port}/")
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=30)
    assert "no authentication" in err.splitlines()[0] and p.returncode == 0, err
