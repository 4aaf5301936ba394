"""What the serving commands (`fastkwire proxy`, `fastkwire broker`) and the command line
share, in a light module: serving until a signal, and the exit codes of a command that an
interruption or an unexpected error ended."""

import asyncio
import os
import signal
import sys

from ._printable import printable
from .proxy._loop import loop_name

EXIT_OK = 0
EXIT_FAILED = 3
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports a process SIGINT ended
EXIT_CLOSED_PIPE = 141  # the output's reader went away, as a shell reports SIGPIPE's end


async def serve_until_signal(server, announce, start_failed):
    """Start `server` (its `start()` and `close()` coroutines), call announce(the loop's name),
    serve until SIGINT or SIGTERM, close it; returns the exit code. start_failed(exception
    its start raised): the exit code, once it said why; None raises it again."""
    # The handlers go in before anything is announced: a process that inherited SIGINT as
    # ignored (a background job) and is sent it right after "listening on" must stop.
    # add_signal_handler replaces whatever disposition was inherited, SIG_IGN included.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError, ValueError):  # Windows, or not the main thread
            pass
    try:
        await server.start()
    except Exception as e:
        code = start_failed(e)
        if code is None:
            raise
        return code
    announce(loop_name(loop))
    try:
        await stop.wait()
    finally:
        await server.close()
    return EXIT_OK


def ended_by(prog, exc):
    """The exit code of command `prog` that `exc` ended, said on stderr: a KeyboardInterrupt
    is "interrupted", another exception an unexpected error (a command line prints errors,
    not tracebacks; FASTKWIRE_DEBUG=1 raises it again, for the traceback)."""
    if isinstance(exc, KeyboardInterrupt):
        print(f"{prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    if os.environ.get("FASTKWIRE_DEBUG"):
        raise exc
    print(
        f"{prog}: unexpected error: {type(exc).__name__}: {printable(exc)} "
        "(set FASTKWIRE_DEBUG=1 for the traceback)",
        file=sys.stderr,
    )
    return EXIT_FAILED
