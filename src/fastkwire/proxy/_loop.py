"""The proxy's event loop: uvloop (libuv) when it is installed, else asyncio's own.

uvloop costs about half as much CPU per forwarded frame as asyncio's selector loop. It has no
wheel for some platforms (Windows, free-threaded CPython): there, "auto" quietly takes
asyncio's loop. The default kind comes from FASTKWIRE_PROXY_LOOP when it is set (how the
test suite runs everything under each loop).
"""

import asyncio
import os
import sys
import threading

LOOPS = ("auto", "asyncio", "uvloop")
ENV = "FASTKWIRE_PROXY_LOOP"


def default_loop():
    """The loop kind asked for by FASTKWIRE_PROXY_LOOP, or "auto"."""
    kind = os.environ.get(ENV, "").strip().lower() or "auto"
    if kind not in LOOPS:
        raise ValueError(f"{ENV}: {kind!r} is not one of {', '.join(LOOPS)}")
    return kind


def _uvloop(required):
    try:
        import uvloop
    except ImportError:
        if required:
            raise ValueError(
                "loop: uvloop is not installed (pip install 'fastkwire[proxy]'; "
                "it has no build for every platform)"
            ) from None
        return None
    return uvloop


def loop_factory(kind=None):
    """A function making a new event loop of `kind` ("auto", "asyncio" or "uvloop"; None: the
    default); ValueError naming `loop` when that kind cannot be had."""
    kind = default_loop() if kind is None else kind
    if kind not in LOOPS:
        raise ValueError(f"loop: {kind!r} is not one of {', '.join(LOOPS)}")
    uvloop = None if kind == "asyncio" else _uvloop(kind == "uvloop")
    if uvloop is not None:
        return uvloop.new_event_loop
    # asyncio's own loop, whatever event loop policy is installed
    return asyncio.ProactorEventLoop if sys.platform == "win32" else asyncio.SelectorEventLoop


def loop_name(loop):
    """The kind of `loop` ("uvloop" or "asyncio"), for the listening line."""
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"


def run(coro, kind=None):
    """asyncio.run(coro) on a new loop of `kind`."""
    loop = loop_factory(kind)()
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(coro)
    finally:
        try:
            _cancel_all(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()


def _cancel_all(loop):
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for t in tasks:
        t.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))


class ServerThread:
    """`self.server` (an object with `start()` and `close()` coroutines) served on its own
    event loop in a thread, for blocking code and test suites: `start`, `stop`, `with`, and
    `call` to run a function on that thread. The proxy's BackgroundProxy and the broker's
    testing.Broker."""

    def __init__(self, server, loop=None, *, name):
        self.server = server
        self._name = name
        self._new_loop = loop_factory(loop)
        self._loop = None
        self._thread = None
        self._ready = threading.Event()
        self._failure = None

    def start(self, timeout=10.0):
        if self._thread is not None:
            raise RuntimeError(f"this {type(self).__name__} was started already")
        self._thread = threading.Thread(
            target=self._run, name=f"fastkwire-{self._name}", daemon=True
        )
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError(f"the {self._name} did not start within {timeout} s")
        if self._failure is not None:
            raise self._failure
        return self

    def _run(self):
        loop = self._loop = self._new_loop()
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self.server.start())
        except BaseException as e:  # noqa: BLE001 - handed to the thread that called start
            self._failure = e
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(self.server.close())
            loop.close()

    def stop(self, timeout=10.0):
        """Close the server and end the thread."""
        if self._loop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def call(self, fn, *args, timeout=10.0):
        """fn(*args) run on the server's thread (where its state may be read or changed);
        returns what it returns."""

        async def run():
            return fn(*args)

        return self._await(run(), timeout)

    def _await(self, coro, timeout):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)
