"""The proxy's event loop: uvloop when installed (or asked for), asyncio's own otherwise,
and the same behaviour on both (the whole proxy suite runs under FASTKWIRE_PROXY_LOOP=uvloop
too; conftest.py makes every loop of that run uvloop's)."""

import asyncio
import importlib.util
import socket
import subprocess
import sys
import time

import pytest

from fastkwire.proxy import BackgroundProxy
from fastkwire.proxy._loop import loop_factory, loop_name
from fastkwire.proxy._server import READ_SIZE

from test_proxy_cli import STOP_TIMEOUT, ProxyProcess, child_env

HAVE_UVLOOP = importlib.util.find_spec("uvloop") is not None
LOOPS = [
    "asyncio",
    pytest.param("uvloop", marks=pytest.mark.skipif(not HAVE_UVLOOP, reason="no uvloop")),
]
TIMEOUT = 10.0
UVLOOP_READ = 256 * 1024  # uvloop's read size


def _kind(factory):
    loop = factory()
    try:
        return loop_name(loop)
    finally:
        loop.close()


def test_asyncio_is_asyncio_and_auto_takes_uvloop_when_installed(monkeypatch):
    monkeypatch.delenv("FASTKWIRE_PROXY_LOOP", raising=False)
    assert _kind(loop_factory("asyncio")) == "asyncio"
    assert _kind(loop_factory("auto")) == ("uvloop" if HAVE_UVLOOP else "asyncio")
    assert _kind(loop_factory()) == ("uvloop" if HAVE_UVLOOP else "asyncio")


def test_without_uvloop_auto_is_asyncio_silently_and_uvloop_is_refused(monkeypatch, recwarn):
    monkeypatch.setitem(__import__("sys").modules, "uvloop", None)  # import uvloop fails
    assert _kind(loop_factory("auto")) == "asyncio"
    assert not recwarn.list
    with pytest.raises(ValueError, match=r"^loop: uvloop is not installed \(pip install"):
        loop_factory("uvloop")


def test_the_variable_sets_the_default_and_a_bad_one_is_named(monkeypatch):
    monkeypatch.setenv("FASTKWIRE_PROXY_LOOP", "asyncio")
    assert _kind(loop_factory()) == "asyncio"
    monkeypatch.setenv("FASTKWIRE_PROXY_LOOP", "trio")
    with pytest.raises(ValueError, match="^FASTKWIRE_PROXY_LOOP: 'trio' is not one of"):
        loop_factory()
    with pytest.raises(ValueError, match="^loop: 'trio' is not one of"):
        loop_factory("trio")


@pytest.mark.parametrize("kind", LOOPS)
def test_the_command_says_which_loop_it_runs_on(kind):
    proxy = ProxyProcess("--upstream", "127.0.0.1:9", "--loop", kind)
    try:
        assert f", on {kind}" in proxy.banner
    finally:
        code, _, err = proxy.stop()
    assert code == 0, err


# A proxy that inherited SIGINT as ignored (a background job, as CI may run the suite) and
# is sent it the moment it says "listening on": its handler must be in place by then.
SIGINT_AT_THE_BANNER = """
import os, signal, sys
from fastkwire.cli import main

signal.signal(signal.SIGINT, signal.SIG_IGN)


class Stderr:
    def __init__(self, stream):
        self.stream = stream

    def write(self, text):
        n = self.stream.write(text)
        if "listening on" in text:
            self.stream.flush()
            os.kill(os.getpid(), signal.SIGINT)
        return n

    def flush(self):
        self.stream.flush()


sys.stderr = Stderr(sys.stderr)
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("kind", LOOPS)
def test_a_sigint_right_after_the_banner_stops_the_proxy_even_if_inherited_as_ignored(kind):
    proc = subprocess.Popen(
        [sys.executable, "-c", SIGINT_AT_THE_BANNER, "proxy", "--listen", "127.0.0.1:0"]
        + ["--upstream", "127.0.0.1:9", "--loop", kind],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    try:
        out, err = proc.communicate(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the proxy went on after a SIGINT right after its banner: {err}")
    assert "listening on 127.0.0.1:" in err
    assert proc.returncode == 0, err


def unanswered_listener():
    """A listener whose backlog is full: a connection to it stays unconnected (SYN_SENT)."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(0)
    fillers = []
    for _ in range(4):  # Linux takes backlog + 1; the rest wait for their SYN's answer
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(lsock.getsockname())
        fillers.append(s)
    time.sleep(0.1)
    return lsock, fillers


@pytest.mark.parametrize("kind", LOOPS)
def test_a_client_is_not_read_before_its_upstream_is_connected(kind):
    """A client is held unread until its upstream connects. uvloop makes one read after
    connection_made whatever it asked (what hung a bare forwarder that wrote to an upstream
    not yet there): at most that read's 256 KiB is held, queued for the upstream."""
    lsock, fillers = unanswered_listener()
    try:
        with BackgroundProxy(lsock.getsockname(), loop=kind, connect_timeout=5) as proxy:
            assert proxy.call(lambda: loop_name(asyncio.get_running_loop())) == kind
            client = socket.create_connection(proxy.address, timeout=TIMEOUT)
            client.setblocking(False)
            frame = (4 * READ_SIZE - 4).to_bytes(4, "big") + bytes(4 * READ_SIZE - 4)
            sent = 0
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:
                try:
                    sent += client.send(frame[sent:] or frame[:1])
                except BlockingIOError:
                    time.sleep(0.01)
            held = proxy.call(
                lambda: [(c.cwriter.queued, len(c.cwriter.buf)) for c in proxy.proxy._conns]
            )
            client.close()
    finally:
        lsock.close()
        for s in fillers:
            s.close()
    assert len(held) == 1 and sent > UVLOOP_READ, (held, sent)
    assert sum(held[0]) <= (0 if kind == "asyncio" else UVLOOP_READ), (held, sent)
