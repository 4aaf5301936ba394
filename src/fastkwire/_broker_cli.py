"""`fastkwire broker`: a Kafka broker in memory, served until Ctrl-C or SIGTERM.

    fastkwire broker [--listen HOST:PORT ...] [--partitions N] [--no-auto-create-topics]
                     [--group-min-session-timeout-ms MS]

Once it listens, it prints one line on stdout: `listening on HOST:PORT[,HOST:PORT...]`
(the bootstrap servers; a port of 0 is a free one). Exit codes: 0 stopped by Ctrl-C or
SIGTERM, 2 bad usage, 3 it could not listen.
"""

import argparse
import asyncio
import os
import signal
import sys

from ._printable import printable
from ._cli_types import address as _address, count as _count
from .broker import Broker, GroupConfig
from .proxy._loop import LOOPS, loop_factory, loop_name, run

EXIT_OK, EXIT_USAGE, EXIT_FAILED = 0, 2, 3
EXIT_INTERRUPTED, EXIT_CLOSED_PIPE = 130, 141  # as fastkwire.cli's
DEFAULT_LISTEN = ("127.0.0.1", 9092)


def add_broker(subparsers):
    parser = subparsers.add_parser(
        "broker",
        allow_abbrev=False,
        help="a Kafka broker in memory, for tests and development",
        description="Serve Kafka clients from memory: topics, produce, fetch, offsets "
        "(docs/broker.md says what is served). Prints `listening on HOST:PORT` once ready.",
    )
    parser.add_argument(
        "--listen",
        type=_address,
        action="append",
        metavar="HOST:PORT",
        help="a node's listener (repeat for more nodes, ids 0, 1, ...; port 0: a free one; "
        "default 127.0.0.1:9092)",
    )
    parser.add_argument(
        "--partitions",
        type=_count,
        default=1,
        metavar="N",
        help="partitions of a topic created on first use (Kafka's num.partitions; default 1)",
    )
    parser.add_argument(
        "--no-auto-create-topics",
        dest="auto_create_topics",
        action="store_false",
        help="unknown topics are not created on first use (auto.create.topics.enable=false)",
    )
    parser.add_argument(
        "--group-min-session-timeout-ms",
        type=_count,
        default=None,
        metavar="MS",
        help="the shortest session timeout a group member may ask for (Kafka's "
        "group.min.session.timeout.ms; default 6000)",
    )
    parser.add_argument(
        "--loop",
        choices=LOOPS,
        default=None,
        help="the event loop (default: auto, uvloop if installed)",
    )
    parser.set_defaults(run=run_broker)
    return parser


class _NotHere(Exception):
    """A command line this quick path leaves to fastkwire.cli (help, a usage error)."""


class _QuickParser(argparse.ArgumentParser):
    def error(self, message):
        raise _NotHere(message)

    def print_help(self, file=None):
        raise _NotHere("help")


def quick_main(argv):
    """`fastkwire broker ARGS` (argv: ARGS) run without the rest of the command line, so
    that it listens sooner; None when fastkwire.cli must run it instead (help, a usage
    error: its parser says them, secrets hidden)."""
    parser = _QuickParser(prog="fastkwire", add_help=False)
    add_broker(parser.add_subparsers(dest="command"))
    try:
        args = parser.parse_args(["broker", *argv])
    except _NotHere:
        return None
    args.prog = "fastkwire broker"
    try:
        return args.run(args)
    except BrokenPipeError:  # the reader of the address line went away, as cli says it
        return EXIT_CLOSED_PIPE
    except KeyboardInterrupt:
        print(f"{args.prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - a command line prints errors, not tracebacks
        if os.environ.get("FASTKWIRE_DEBUG"):
            raise
        print(
            f"{args.prog}: unexpected error: {type(exc).__name__}: {printable(exc)} "
            "(set FASTKWIRE_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return EXIT_FAILED


def run_broker(args, out=None, err=None):
    out, err = out or sys.stdout, err or sys.stderr
    try:
        loop_factory(args.loop)
        groups = GroupConfig()
        if args.group_min_session_timeout_ms is not None:
            groups.group_min_session_timeout_ms = args.group_min_session_timeout_ms
        broker = Broker(
            args.listen or [DEFAULT_LISTEN],
            auto_create_topics=args.auto_create_topics,
            num_partitions=args.partitions,
            groups=groups,
        )
    except ValueError as e:
        print(f"{args.prog}: error: {printable(str(e))}", file=err)
        return EXIT_USAGE
    try:
        return run(_serve(broker, args, out, err), args.loop)
    except KeyboardInterrupt:  # where the loop could not take the signal itself
        return EXIT_OK


async def _serve(broker, args, out, err):
    try:
        await broker.start()
    except OSError as e:
        wanted = ",".join(f"{h}:{p}" for h, p in broker.listeners)
        print(f"{args.prog}: error: --listen {wanted}: {e.strerror or e}", file=err)
        return EXIT_FAILED
    print(f"listening on {broker.bootstrap_servers}", file=out, flush=True)
    print(
        f"{args.prog}: {len(broker.listeners)} node(s), on "
        f"{loop_name(asyncio.get_running_loop())}; Ctrl-C or SIGTERM stops it",
        file=err,
        flush=True,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError, ValueError):  # Windows, or not the main thread
            pass
    try:
        await stop.wait()
    finally:
        await broker.close()
    return EXIT_OK
