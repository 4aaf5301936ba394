"""The `fastkwire` command line.

    fastkwire remove-members --bootstrap-server HOST:PORT --group G --instance-id ID [...]
    kafka-invoke-consumer-rebalance --bootstrap-server HOST:PORT --group G --instance-id ID

Exit codes: 0 every member removed; 1 the request went through but some member was not
removed; 2 bad usage; 3 the request failed as a whole (connection, timeout, old broker,
authorization, group state).
"""
import argparse
import importlib
import json
import os
import sys

from ._printable import printable
from .admin import MAX_TIMEOUT_MS, AdminClient, AdminError, check_removal

EXIT_OK = 0
EXIT_MEMBERS_FAILED = 1
EXIT_USAGE = 2
EXIT_FAILED = 3

DEFAULT_TIMEOUT = 30.0
MIN_TIMEOUT = 0.001  # the client counts in milliseconds
MAX_TIMEOUT = MAX_TIMEOUT_MS / 1000


# ---------------------------------------------------------------- remove-members


def _remove_members_arguments(parser):
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                        help="a broker to start from (several may be given, comma-separated)")
    parser.add_argument("--group", required=True, metavar="G", help="the consumer group id")
    parser.add_argument("--instance-id", required=True, action="append", metavar="ID", dest="instance_ids",
                        help="group.instance.id of a static member to remove (repeat for more)")
    parser.add_argument("--reason", metavar="TEXT",
                        help="why the members leave; brokers with LeaveGroup v5+ log it")
    parser.add_argument("--timeout", type=_timeout, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                        help=f"give up after this long, retries included (default {DEFAULT_TIMEOUT:g}, "
                             f"at most {MAX_TIMEOUT:g}: a day)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(run=run_remove_members)
    return parser


def add_remove_members(subparsers):
    parser = subparsers.add_parser(
        "remove-members", help="remove static members by group.instance.id (rebalances at once)",
        description="Remove static members from a consumer group by group.instance.id, so that the "
                    "group rebalances now instead of after the session timeout (KIP-345).")
    return _remove_members_arguments(parser)


def _timeout(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not MIN_TIMEOUT <= value <= MAX_TIMEOUT:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(
            f"{text!r} is not between {MIN_TIMEOUT:g} and {MAX_TIMEOUT:g} seconds (a day)")
    return value


def run_remove_members(args, out=None, err=None):
    out = out or sys.stdout
    err = err or sys.stderr
    # Argument errors are told apart before any I/O: whatever fails later is the broker's
    # or the network's doing (exit 3), never "bad usage".
    try:
        client = AdminClient(args.bootstrap_server, request_timeout_ms=args.timeout * 1000)
        check_removal(args.group, args.instance_ids, args.reason)
    except ValueError as exc:
        return _fail(args, exc, EXIT_USAGE, out, err)
    try:
        result = client.remove_members_from_group(args.group, args.instance_ids, reason=args.reason)
    except AdminError as exc:
        return _fail(args, exc, EXIT_FAILED, out, err)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2), file=out)
    else:
        _print_table(result, out)
    return EXIT_OK if not result.failed else EXIT_MEMBERS_FAILED


def _fail(args, exc, code, out, err):
    """Report a failed request: JSON on stdout if asked, and one line on stderr."""
    if args.json:
        error = getattr(exc, "error", None)
        print(json.dumps({"group_id": args.group, "error": {
            "type": type(exc).__name__, "message": str(exc),
            "error_code": error.code if error else None, "error_name": error.name if error else None,
        }}, indent=2), file=out)
    print(f"{args.prog}: error: {printable(exc)}", file=err)
    return code


def _print_table(result, out):
    # Everything a broker or an argument put in these strings is escaped: one line per row.
    c = result.coordinator
    print(f"Group {result.group_id!r}: coordinator {printable(c.address)} (node {c.node_id}), "
          f"LeaveGroup v{result.leave_group_version}", file=out)
    rows = [("INSTANCE ID", "RESULT", "ERROR")]
    for m in result.members:
        rows.append((printable(m.group_instance_id), "removed" if m.ok else "FAILED",
                     "" if m.ok else printable(f"{m.error_name} ({m.error_code}): {m.describe()}")))
    widths = [max(len(r[i]) for r in rows) for i in range(2)]
    for r in rows:
        print(f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]}".rstrip(), file=out)
    print(f"{len(result.removed)} of {len(result.members)} members removed.", file=out)


# ---------------------------------------------------------------- dispatch

def add_explain(subparsers):
    from .explain import add_parser, run
    add_parser(subparsers).set_defaults(run=run)


# Subcommand name -> how to add it: a function(subparsers) that adds its parser and sets
# `run` (a function(args) -> exit code) with parser.set_defaults(run=...), or the name of
# a module whose add_parser(subparsers) does that.
SUBCOMMANDS = {
    "explain": add_explain,
    "remove-members": add_remove_members,
}


def build_parser(prog="fastkwire"):
    parser = argparse.ArgumentParser(prog=prog, description="fastkwire: Kafka wire-protocol tools")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in SUBCOMMANDS.values():
        if isinstance(add, str):
            add = importlib.import_module(add).add_parser
        add(subparsers)
    return parser


def _run(parser, argv):
    args = parser.parse_args(argv)
    run = getattr(args, "run", None)
    if run is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    args.prog = parser.prog + (f" {args.command}" if getattr(args, "command", None) else "")
    try:
        return run(args)
    except KeyboardInterrupt:
        print(f"{args.prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, as other command-line tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    except Exception as exc:  # noqa: BLE001 - a command line prints errors, not tracebacks
        if os.environ.get("FASTKWIRE_DEBUG"):
            raise
        print(f"{args.prog}: unexpected error: {type(exc).__name__}: {printable(exc)} "
              "(set FASTKWIRE_DEBUG=1 for the traceback)", file=sys.stderr)
        return EXIT_FAILED


def main(argv=None):
    """Entry point of the `fastkwire` console script; returns the exit code."""
    return _run(build_parser(), argv)


def invoke_consumer_rebalance(argv=None):
    """`kafka-invoke-consumer-rebalance`: the KIP's script name for `fastkwire remove-members`."""
    parser = argparse.ArgumentParser(
        prog="kafka-invoke-consumer-rebalance",
        description="Remove static members from a consumer group by group.instance.id so that it "
                    "rebalances at once (the same as `fastkwire remove-members`).")
    _remove_members_arguments(parser)
    return _run(parser, argv)


if __name__ == "__main__":
    sys.exit(main())
