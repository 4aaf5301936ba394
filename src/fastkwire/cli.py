# PYTHON_ARGCOMPLETE_OK (argcomplete: this entry point completes)
"""The `fastkwire` command line.

    fastkwire explain HEX | --file FILE | --example NAME [--api API --api-version V] [--json]
    fastkwire explain --capture FILE [--port P] [--api API] [--client-id ID]
    fastkwire explain --list-examples [API]
    fastkwire proxy --listen HOST:PORT --upstream HOST:PORT [--json] [--record FILE] [...]
    fastkwire stats FILE [--json]
    fastkwire broker [--listen HOST:PORT ...] [--partitions N]
    fastkwire dump --bootstrap-server HOST:PORT --topic T | --segments PATH --to FILE [...]
    fastkwire describe-group --bootstrap-server HOST:PORT --group G [--json]
    fastkwire remove-members --bootstrap-server HOST:PORT --group G --instance-id ID [...]
    fastkwire remove-members ... --member-id ID | --all [--dry-run]
    kafka-invoke-consumer-rebalance --bootstrap-server HOST:PORT --group G --instance-id ID

Connection options (TLS, SASL) come from flags, the environment (FASTKWIRE_SASL_PASSWORD,
FASTKWIRE_SSL_PASSWORD) and `--command-config FILE` (Java client properties), flags first.

Exit codes: 0 done (every member removed; a dry run that could list what it would do);
1 the request went through but some member was not removed; 2 bad usage; 3 the request
failed as a whole (connection, TLS, SASL, timeout, old broker, authorization, group state).
`fastkwire explain`: 0 shown, 1 a malformed frame, 2 bad usage. Every command: 130
interrupted, 141 the output's reader went away (a closed pipe). EXIT_CODES has each
subcommand's, for its --help.
"""

import argparse
import json
import os
import re
import sys
import textwrap
from itertools import chain

from ._broker_cli import add_broker
from ._dump_cli import add_dump as _add_dump
from ._explain_apis import api_names
from ._explain_examples import example, example_names
from ._explain_text import DOC_WIDTH, HEX_ROWS, JSON_ENCODER, message_value, render_lines
from ._printable import os_error_text, printable
from ._proxy_cli import add_capture_arguments, add_proxy, add_stats, run_explain_capture
from ._serve_cli import EXIT_CLOSED_PIPE, EXIT_INTERRUPTED, ended_by
from .admin import (
    DEFAULT_MAX_GROUP_MEMBERS,
    MAX_TIMEOUT_MS,
    AdminClient,
    AdminError,
    check_group,
    check_members,
    check_reason,
)
from .client_config import OPTION_KEYS, read_properties, security_options
from .connection import SECURITY_PROTOCOLS
from .connection_errors import OptionError
from .errors import DecodeError
from .explain import MAX_ITEMS, explain, reading_names
from .sasl import MECHANISMS

EXIT_OK = 0
EXIT_MEMBERS_FAILED = 1
EXIT_USAGE = 2
EXIT_FAILED = 3

DEFAULT_TIMEOUT = 30.0
MIN_TIMEOUT = 0.001  # the client counts in milliseconds
MAX_TIMEOUT = MAX_TIMEOUT_MS / 1000
SECRET_OPTIONS = ("--sasl-password", "--ssl-password")
PASSWORD_ENV = {
    "sasl_plain_password": "FASTKWIRE_SASL_PASSWORD",
    "ssl_password": "FASTKWIRE_SSL_PASSWORD",
}
TOKEN_ENV = "FASTKWIRE_SASL_OAUTH_TOKEN"  # a bearer token is never taken as a flag
# The flag of each library parameter: errors name what the user typed (OptionError.render),
# the library keeps its parameter names.
FLAGS = {
    "group_id": "--group",
    "group_instance_ids": "--instance-id",
    "member_ids": "--member-id",
    "remove_all": "--all",
    "reason": "--reason",
    "security_protocol": "--security-protocol",
    "ssl_cafile": "--ssl-cafile",
    "ssl_certfile": "--ssl-certfile",
    "ssl_keyfile": "--ssl-keyfile",
    "ssl_password": "--ssl-password",
    "ssl_check_hostname": "--no-ssl-check-hostname",
    "ssl_strict_x509": "--no-ssl-strict-x509",
    "sasl_mechanism": "--sasl-mechanism",
    "sasl_plain_username": "--sasl-username",
    "sasl_plain_password": "--sasl-password",
    "sasl_oauth_token_provider": TOKEN_ENV,
}
FILE_OPTIONS = ("ssl_cafile", "ssl_certfile", "ssl_keyfile")


class _Parser(argparse.ArgumentParser):
    """argparse that never repeats a secret from the command line in its errors."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._secrets = []

    def parse_known_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        self._secrets = _secrets_in(args)
        return super().parse_known_args(args, namespace)

    def error(self, message):
        if message.startswith("unrecognized arguments: "):
            # A misspelt secret option is unrecognized, and so is its value: show names only.
            names = [
                a.split("=", 1)[0]
                for a in message[len("unrecognized arguments: ") :].split()
                if a[:1] == "-"
            ]
            message = f"unrecognized arguments: {' '.join(names) or '(values not shown)'}"
        for secret in self._secrets:
            message = message.replace(secret, "***")
        super().error(message)


def _secrets_in(args):
    found = []
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name in SECRET_OPTIONS or "pass" in name.lower() and name.startswith("--"):
            value = value if eq else (args[i + 1] if i + 1 < len(args) else "")
            if value:
                found.append(value)
    return found


# ---------------------------------------------------------------- shared options


def _connection_arguments(parser):
    parser.add_argument(
        "--bootstrap-server",
        required=True,
        metavar="HOST:PORT",
        help="brokers to start from, comma-separated; the next is tried when one fails",
    )
    parser.add_argument("--group", required=True, metavar="G", help="the consumer group id")
    parser.add_argument(
        "--timeout",
        type=_timeout,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help=f"give up after this long, retries included (default {DEFAULT_TIMEOUT:g}, "
        f"at most {MAX_TIMEOUT:g}: a day)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument(
        "--max-members",
        type=_positive,
        default=DEFAULT_MAX_GROUP_MEMBERS,
        metavar="N",
        help="refuse a group description listing more members than this, before decoding it "
        f"(default {DEFAULT_MAX_GROUP_MEMBERS})",
    )
    _security_arguments(parser)


def _security_arguments(parser):
    security = parser.add_argument_group(
        "security (flags win over the environment and --command-config)"
    )
    security.add_argument(
        "--command-config",
        metavar="FILE",
        help="Java client properties: security.protocol, sasl.mechanism, sasl.jaas.config, "
        "ssl.truststore.location (PEM), ssl.keystore.location (PEM), ...",
    )
    security.add_argument("--security-protocol", choices=SECURITY_PROTOCOLS, type=str.upper)
    security.add_argument(
        "--ssl-cafile", metavar="PEM", help="CA certificates to trust the brokers with"
    )
    security.add_argument(
        "--ssl-certfile", metavar="PEM", help="client certificate (for brokers that ask)"
    )
    security.add_argument("--ssl-keyfile", metavar="PEM", help="the client certificate's key")
    security.add_argument(
        "--ssl-password",
        metavar="TEXT",
        help="the key's password (better: FASTKWIRE_SSL_PASSWORD in the environment)",
    )
    security.add_argument(
        "--no-ssl-check-hostname",
        action="store_true",
        help="do not check the broker's host name against its certificate",
    )
    security.add_argument(
        "--no-ssl-strict-x509",
        action="store_true",
        help="accept certificates that lack what RFC 5280 requires (key identifiers, a "
        "critical basicConstraints), which Python 3.13 and later refuse by default",
    )
    security.add_argument(
        "--sasl-mechanism",
        choices=MECHANISMS,
        type=str.upper,
        help=f"OAUTHBEARER takes its token from {TOKEN_ENV} in the environment",
    )
    security.add_argument("--sasl-username", metavar="USER")
    security.add_argument(
        "--sasl-password",
        metavar="TEXT",
        help="(better: FASTKWIRE_SASL_PASSWORD in the environment, or --command-config)",
    )


def _security(args, warn):
    """Security options from --command-config, then the environment, then the flags; what
    works but exposes a secret goes to `warn(message)`."""
    # args.option_names: where each option came from, for OptionError.render (see _fail). A
    # value from the file is never shown (a trailing backslash can join a secret to it); a
    # path from a flag is: the user typed it there.
    names = args.option_names
    options = (
        security_options(read_properties(args.command_config), warn) if args.command_config else {}
    )
    names.update(
        {o: f"{OPTION_KEYS[o]} in {args.command_config}" for o in options if o in OPTION_KEYS}
    )
    for option, variable in PASSWORD_ENV.items():
        if os.environ.get(variable):
            options[option] = os.environ[variable]
            names[option] = variable
    flags = {
        "security_protocol": args.security_protocol,
        "ssl_cafile": args.ssl_cafile,
        "ssl_certfile": args.ssl_certfile,
        "ssl_keyfile": args.ssl_keyfile,
        "ssl_password": args.ssl_password,
        "sasl_mechanism": args.sasl_mechanism,
        "sasl_plain_username": args.sasl_username,
        "sasl_plain_password": args.sasl_password,
    }
    for option, value in flags.items():
        if value is not None:
            options[option] = value
            names[option] = (
                f"{FLAGS[option]} {value!r}" if option in FILE_OPTIONS else FLAGS[option]
            )
    if args.no_ssl_check_hostname:
        options["ssl_check_hostname"] = False
        names["ssl_check_hostname"] = FLAGS["ssl_check_hostname"]
    if args.no_ssl_strict_x509:
        options["ssl_strict_x509"] = False
        names["ssl_strict_x509"] = FLAGS["ssl_strict_x509"]
    if options.get("sasl_mechanism") == "OAUTHBEARER":
        token = os.environ.get(TOKEN_ENV)
        if not token:
            raise ValueError(
                f"sasl mechanism OAUTHBEARER takes its token from {TOKEN_ENV}, which is not set"
            )
        options["sasl_oauth_token_provider"] = lambda: token
    sasl_given = [
        k
        for k in ("sasl_mechanism", "sasl_plain_username", "sasl_plain_password")
        if options.get(k)
    ]
    protocol = options.get("security_protocol", "PLAINTEXT")
    # An unknown protocol is Security's to refuse; it may be a secret that a stray trailing
    # backslash in the file joined to it, so it is never quoted. TLS options without TLS are
    # refused by Security too.
    if sasl_given and protocol in SECURITY_PROTOCOLS and not protocol.startswith("SASL_"):
        raise ValueError(
            f"SASL options are given, but security protocol {protocol} uses no SASL: "
            "add --security-protocol SASL_SSL (or SASL_PLAINTEXT)"
        )
    exposed = {
        "--sasl-password": (args.sasl_password, PASSWORD_ENV["sasl_plain_password"]),
        "--ssl-password": (args.ssl_password, PASSWORD_ENV["ssl_password"]),
    }
    for flag, (value, variable) in exposed.items():
        if value is not None:
            warn(
                f"{flag} on the command line is visible to other users of this machine (ps): prefer "
                f"{variable} in the environment, or --command-config"
            )
    mechanism = options.get("sasl_mechanism", "PLAIN")
    if protocol == "SASL_PLAINTEXT" and mechanism in ("PLAIN", "OAUTHBEARER"):
        what = "the password" if mechanism == "PLAIN" else "the token"
        warn(
            f"SASL {mechanism} over SASL_PLAINTEXT sends {what} unencrypted: anyone on the network path can "
            "read it (use SASL_SSL)"
        )
    return options


def _client(args, err):
    def warn(message):
        print(f"{args.prog}: warning: {message}", file=err)

    args.option_names = dict(FLAGS)

    return AdminClient(
        args.bootstrap_server,
        request_timeout_ms=args.timeout * 1000,
        max_group_members=args.max_members,
        **_security(args, warn),
    )


def _positive(text):
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a positive count: {text!r}")
    return int(text)


def _timeout(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not MIN_TIMEOUT <= value <= MAX_TIMEOUT:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(
            f"{text!r} is not between {MIN_TIMEOUT:g} and {MAX_TIMEOUT:g} seconds (a day)"
        )
    return value


# ---------------------------------------------------------------- describe-group


def add_describe_group(subparsers):
    parser = subparsers.add_parser(
        "describe-group",
        allow_abbrev=False,
        help="show a consumer group: state, members, their partitions",
        description="Describe a consumer group: its state and protocol, and each member's id, "
        "group.instance.id, client id, host and assigned partitions.",
    )
    _connection_arguments(parser)
    parser.set_defaults(run=run_describe_group)
    return parser


def run_describe_group(args, out=None, err=None):
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        client = _client(args, err)
        check_group(args.group)
    except ValueError as exc:
        return _fail(args, exc, EXIT_USAGE, out, err)
    try:
        group = client.describe_group(args.group)
    except AdminError as exc:
        return _fail(args, exc, EXIT_FAILED, out, err)
    if args.json:
        print(json.dumps(group.to_dict(), indent=2), file=out)
    else:
        _print_group(group, out)
    return EXIT_OK


def _members(n):
    return f"{n} member" if n == 1 else f"{n} members"


def _assignment_text(member):
    if member.assignment_error:
        return f"(unreadable: {member.assignment_error})"
    return " ".join(
        f"{t}:{','.join(str(p) for p in parts)}" for t, parts in sorted(member.assignment.items())
    )


def _print_group(group, out):
    c = group.coordinator
    protocol = "/".join(x for x in (group.protocol_type, group.protocol) if x) or "-"
    print(
        f"Group {printable(repr(group.group_id))}: state {printable(group.state or '-')}, protocol "
        f"{printable(protocol)}, coordinator {printable(c.address)} (node {c.node_id}), "
        f"{_members(len(group.members))} ({group.api})",
        file=out,
    )
    if group.exists is False:
        print("The group does not exist (or has no members and no offsets).", file=out)
    elif group.exists is None:
        print(
            "The group has no members. The broker's answer (state Empty) does not tell an empty group from "
            "one that does not exist.",
            file=out,
        )
    if not group.members:
        return
    rows = [("MEMBER ID", "INSTANCE ID", "CLIENT ID", "HOST", "ASSIGNMENT")]
    for m in group.members:
        rows.append(
            tuple(
                printable(x)
                for x in (
                    m.member_id,
                    "-" if m.group_instance_id is None else m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    _assignment_text(m) or "-",
                )
            )
        )
    _print_rows(rows, out)


def _print_rows(rows, out):
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        print("  ".join(f"{cell:<{w}}" for cell, w in zip(r, widths)) + "  " + r[-1], file=out)


# ---------------------------------------------------------------- remove-members


def _remove_members_arguments(parser):
    _connection_arguments(parser)
    which = parser.add_argument_group("members (at least one, or --all)")
    which.add_argument(
        "--instance-id",
        action="append",
        metavar="ID",
        dest="instance_ids",
        default=[],
        help="group.instance.id of a static member to remove (repeat for more)",
    )
    which.add_argument(
        "--member-id",
        action="append",
        metavar="ID",
        dest="member_ids",
        default=[],
        help="member id of a member to remove, e.g. a dynamic one (repeat for more)",
    )
    which.add_argument(
        "--all",
        action="store_true",
        dest="remove_all",
        help="describe the group, then remove every member",
    )
    parser.add_argument(
        "--reason", metavar="TEXT", help="why the members leave; brokers with LeaveGroup v5+ log it"
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="find the coordinator and describe the group, print what would be removed and "
        "which named members are not in the group; send nothing",
    )
    parser.set_defaults(run=run_remove_members)
    return parser


def add_remove_members(subparsers):
    parser = subparsers.add_parser(
        "remove-members",
        allow_abbrev=False,
        help="remove members from a consumer group (rebalances at once)",
        description="Remove members from a consumer group, by group.instance.id (static members, KIP-345), "
        "by member id, or all of them, so that the group rebalances now instead of after "
        "the session timeout.",
    )
    return _remove_members_arguments(parser)


def run_remove_members(args, out=None, err=None):
    out = out or sys.stdout
    err = err or sys.stderr
    # Argument errors are told apart before any I/O: whatever fails later is the broker's
    # or the network's doing (exit 3), never "bad usage".
    try:
        client = _client(args, err)
        check_group(args.group)
        check_members(args.instance_ids, args.member_ids, args.remove_all)
        check_reason(args.reason)
    except ValueError as exc:
        return _fail(args, exc, EXIT_USAGE, out, err)
    try:
        if args.dry_run:
            plan = client.plan_removal(
                args.group, args.instance_ids, args.member_ids, args.remove_all
            )
        else:
            result = client.remove_members(
                args.group, args.instance_ids, args.member_ids, args.remove_all, reason=args.reason
            )
    except AdminError as exc:
        return _fail(args, exc, EXIT_FAILED, out, err)
    if args.dry_run:
        if args.json:
            print(json.dumps(plan.to_dict(), indent=2), file=out)
        else:
            _print_plan(plan, out)
        return EXIT_OK
    if args.json:
        print(json.dumps(result.to_dict(), indent=2), file=out)
    else:
        _print_table(result, out)
    return EXIT_OK if not result.failed else EXIT_MEMBERS_FAILED


def _fail(args, exc, code, out, err):
    """Report a failed request: JSON on stdout if asked, and one line on stderr. An option's
    error names the flag, variable or properties key the user gave it with."""
    message = (
        exc.render(getattr(args, "option_names", FLAGS))
        if isinstance(exc, OptionError)
        else _advice_in_flags(str(exc))
    )
    if args.json:
        error = getattr(exc, "error", None)
        print(
            json.dumps(
                {
                    "group_id": args.group,
                    "error": {
                        "type": type(exc).__name__,
                        "message": message,
                        "error_code": error.code if error else None,
                        "error_name": error.name if error else None,
                    },
                },
                indent=2,
            ),
            file=out,
        )
    print(f"{args.prog}: error: {printable(message)}", file=err)
    return code


# The library's advice names its parameters ("use security_protocol SSL or SASL_SSL");
# the command line's names the flags.
_ADVICE = re.compile(r"\buse (" + "|".join(o for o in FLAGS if "_" in o) + r")\b")


def _advice_in_flags(message):
    return _ADVICE.sub(lambda m: f"use {FLAGS[m.group(1)]}", message)


def _print_table(result, out):
    # Everything a broker or an argument put in these strings is escaped: one line per row.
    c = result.coordinator
    if not result.members:
        print(
            f"Group {result.group_id!r}: coordinator {printable(c.address)} (node {c.node_id}): the group has "
            "no members, nothing was removed.",
            file=out,
        )
        return
    print(
        f"Group {result.group_id!r}: coordinator {printable(c.address)} (node {c.node_id}), "
        f"LeaveGroup v{result.leave_group_version}",
        file=out,
    )
    # The columns of the ids the members were named by: instance ids, member ids, or both.
    by_member = {m.by_member_id for m in result.members}
    if by_member == {False}:
        heads, ids = ("INSTANCE ID",), lambda m: (m.group_instance_id,)
    elif by_member == {True}:
        heads, ids = ("MEMBER ID",), lambda m: (m.member_id,)
    else:
        heads, ids = (
            ("MEMBER ID", "INSTANCE ID"),
            lambda m: (m.member_id or "-", "-" if m.by_member_id else m.group_instance_id),
        )
    rows = [(*heads, "RESULT", "ERROR")]
    for m in result.members:
        rows.append(
            (
                *(printable(i) for i in ids(m)),
                "removed" if m.ok else "FAILED",
                "" if m.ok else printable(f"{m.error_name} ({m.error_code}): {m.describe()}"),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        print(
            "  ".join(f"{cell:<{w}}" for cell, w in zip(r, widths)) + f"  {r[-1]}".rstrip(),
            file=out,
        )
    print(f"{len(result.removed)} of {len(result.members)} members removed.", file=out)
    unknown = [
        m for m in result.members if not m.by_member_id and m.error_name == "UNKNOWN_MEMBER_ID"
    ]
    if unknown and len(unknown) == len(result.members):
        print(
            "The broker knows none of these group.instance.ids: `fastkwire describe-group` "
            "lists the ones it holds (a broker without static membership, KIP-345, lists "
            "none).",
            file=out,
        )


def _print_plan(plan, out):
    g = plan.group
    c = g.coordinator
    print(
        f"Group {g.group_id!r}: coordinator {printable(c.address)} (node {c.node_id}), state "
        f"{printable(g.state or '-')}, {_members(len(g.members))}. Dry run: nothing was sent.",
        file=out,
    )
    if plan.members:
        rows = [("WOULD REMOVE MEMBER ID", "INSTANCE ID")]
        by_instance = {m.group_instance_id: m.member_id for m in g.members}
        for member_id, instance_id in plan.members:
            rows.append(
                (
                    printable(member_id or by_instance.get(instance_id, "")),
                    "-" if instance_id is None else printable(instance_id),
                )
            )
        _print_rows(rows, out)
    else:
        print("No member would be removed.", file=out)
    for instance_id in plan.missing_instance_ids:
        print(f"Not in the group: group.instance.id {printable(repr(instance_id))}", file=out)
    for member_id in plan.missing_member_ids:
        print(f"Not in the group: member id {printable(repr(member_id))}", file=out)
    if (
        plan.missing_instance_ids
        and g.members
        and all(m.group_instance_id is None for m in g.members)
    ):
        print(_NO_STATIC_MEMBERS.format(n=_members(len(g.members))), file=out)


# A broker that does not keep KIP-345 static membership (Tansu 0.6 among them) describes
# every member without its group.instance.id, and answers a removal by one with
# UNKNOWN_MEMBER_ID, whatever the consumers were started with.
_NO_STATIC_MEMBERS = (
    "The broker reports no group.instance.id for any of the group's {n}: if the consumers "
    "were started with one (group.instance.id, group_instance_id), this broker does not keep "
    "static membership (KIP-345) and cannot remove members by it. Remove them by member id "
    "(--member-id), or use a broker that keeps it (Apache Kafka 2.4+, `fastkwire broker`)."
)


# ---------------------------------------------------------------- explain


def _api_key(text: str) -> int:
    if text.isdigit():
        return int(text)
    wanted = re.sub(r"[-_ ]", "", text).lower()
    for key, name in api_names().items():
        if name.lower() == wanted:
            return key
    raise argparse.ArgumentTypeError(
        f"unknown API {text!r} (known: {', '.join(sorted(api_names().values()))})"
    )


def _hex_digits(text: str) -> str:
    """Hex text without the whitespace, colons and 0x prefixes it may have."""
    return re.sub(r"0x|[\s:]", "", text)


def _from_hex(text: str) -> bytes | None:
    """Hex text (whitespace, colons and 0x prefixes allowed) as bytes, else None."""
    cleaned = _hex_digits(text)
    if cleaned and re.fullmatch(r"[0-9a-fA-F]+", cleaned) and len(cleaned) % 2 == 0:
        return bytes.fromhex(cleaned)
    return None


def _not_hex(text: str) -> str:
    """Why text that should be hex is not."""
    cleaned = _hex_digits(text)
    if not cleaned:
        return "no hex digits"
    bad = re.search(r"[^0-9a-fA-F]", cleaned)
    if bad:
        return f"not hex: {printable(repr(bad.group()))} is not a hex digit"
    return f"odd number of hex digits ({len(cleaned)}): each byte is two"


def _parse_input(raw: bytes, name: str) -> bytes:
    """A file's or stdin's content: hex text if it reads as such, else the raw bytes.
    Hex digits alone but an odd number of them is a mistake, not binary."""
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        return raw
    parsed = _from_hex(text)
    if parsed is not None:
        return parsed
    cleaned = _hex_digits(text)
    if cleaned and re.fullmatch(r"[0-9a-fA-F]+", cleaned):
        raise ValueError(f"{name} holds hex text with an {_not_hex(text)}")
    return raw


def _limit(text: str) -> int | None:
    if text == "all":
        return None
    if text.isdigit():
        return int(text)
    raise argparse.ArgumentTypeError(f"not a count: {text!r} (a number, or all)")


def configure_explain(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.description = (
        "Show a Kafka frame byte by byte: hex layout and an object tree "
        "with every field's offset, size, value and meaning."
    )
    parser.add_argument(
        "hex", nargs="*", help="the frame as hex, size prefix included (spaces allowed)"
    )
    parser.add_argument(
        "-f", "--file", help="read the frame from a file (hex text or raw binary; - for stdin)"
    )
    parser.add_argument(
        "--api", type=_api_key, help="for a response: its API, by name (LeaveGroup) or key (13)"
    )
    parser.add_argument(
        "--api-version",
        "--version",
        dest="version",
        type=int,
        nargs="?",
        action=_ApiVersion,
        metavar="N",
        help="for a response: its API version (--version alone prints fastkwire's release, "
        "as `fastkwire --version` does)",
    )
    parser.add_argument(
        "--example",
        metavar="NAME",
        help="explain a built-in example instead (the smallest message of an API version): "
        "leave-group-v5, leave-group-v5-response; --list-examples lists them all",
    )
    parser.add_argument(
        "--list-examples",
        nargs="?",
        const="",
        metavar="API",
        help="list the built-in examples and exit: without API, one line per API with its "
        "versions; with API (a name such as LeaveGroup or leave-group, part of one such as "
        "group, or a key), every example's name",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the decoded message as JSON instead of the layout",
    )
    parser.add_argument(
        "--full", action="store_true", help="do not shorten long field descriptions"
    )
    parser.add_argument(
        "--max-items",
        type=_limit,
        default=MAX_ITEMS,
        metavar="N",
        help=f"show at most N elements of each array (default {MAX_ITEMS}; 'all' "
        "for every one); the rest are checked and summed up in one line",
    )
    parser.add_argument(
        "--hex-rows",
        type=_limit,
        default=HEX_ROWS,
        metavar="N",
        help=f"print at most N rows of the hex layout (default {HEX_ROWS}; 'all')",
    )
    add_capture_arguments(parser)
    return parser


def _squash(name: str) -> str:
    return re.sub(r"[-_ ]", "", name).lower()


def _example_list(api: str) -> list[str]:
    """--list-examples: one line per API with its versions, or, for the APIs `api` names
    (exactly, else every one whose name contains it), each example's name."""
    by_api: dict[str, list[str]] = {}
    for name in example_names():
        base = re.sub(r"-v\d+(-response)?$", "", name)
        by_api.setdefault(base, []).append(name)
    if api:
        wanted = _squash(api)
        if wanted.isdigit():
            key = int(wanted)
            if key not in api_names():
                raise ValueError(f"--list-examples: no API has key {key}")
            wanted = _squash(api_names()[key])
        chosen = [b for b in by_api if _squash(b) == wanted] or [
            b for b in by_api if wanted in _squash(b)
        ]
        if not chosen:
            raise ValueError(
                f"--list-examples: no API is called {printable(repr(api))} or has it in its "
                "name (--list-examples alone lists them)"
            )
        return [name for b in chosen for name in by_api[b]]
    width = max(map(len, by_api))
    lines = [f"{'API':<{width}}  REQUESTS  RESPONSES"]
    for base, names in sorted(by_api.items()):
        ranges = []
        for responses in (False, True):
            v = [
                int(re.search(r"-v(\d+)", n).group(1))
                for n in names
                if n.endswith("-response") == responses
            ]
            ranges.append(
                ("-" if not v else f"v{min(v)}" if min(v) == max(v) else f"v{min(v)}-v{max(v)}")
            )
        lines.append(f"{base:<{width}}  {ranges[0]:<8}  {ranges[1]}")
    lines.append(
        f"{len(by_api)} APIs, {sum(map(len, by_api.values()))} examples: --example NAME explains "
        "one, e.g. --example leave-group-v5 or leave-group-v5-response; --list-examples API "
        "lists one API's names"
    )
    return lines


def _read_frame(args, stdin) -> bytes:
    if args.hex and args.file:
        raise ValueError("give the frame once: as hex or with --file, not both")
    if args.hex:
        text = " ".join(args.hex)
        frame = _from_hex(text)
        if frame is None:
            raise ValueError(
                f"the frame on the command line: {_not_hex(text)} (use --file for binary)"
            )
        return frame
    if args.file and args.file != "-":
        try:
            with open(args.file, "rb") as fh:
                raw = fh.read()
        except OSError as e:
            raise ValueError(f"--file {os_error_text(e)}") from None
        return _parse_input(raw, f"--file {args.file!r}")
    if args.file == "-" or not stdin.isatty():
        raw = stdin.buffer.read() if hasattr(stdin, "buffer") else stdin.read()
        return _parse_input(raw, "stdin")
    raise ValueError("give the frame as hex, with --file, or on stdin")


def _write(stream, text: str):
    """Writes text that the stream may not be able to encode (an ASCII terminal): what
    it cannot encode goes out as backslash escapes instead of failing."""
    encoding = getattr(stream, "encoding", None)
    if encoding and not text.isascii():
        text = text.encode(encoding, "backslashreplace").decode(encoding)
    stream.write(text)


def _write_lines(stream, lines, batch=1 << 16):
    """Writes lines in pieces of about `batch` characters: big outputs are not built whole."""
    chunk, size = [], 0
    for line in lines:
        chunk.append(line)
        size += len(line) + 1
        if size >= batch:
            _write(stream, "\n".join(chunk) + "\n")
            chunk, size = [], 0
    if chunk:
        _write(stream, "\n".join(chunk) + "\n")


def _write_json(stream, value, batch=1 << 16):
    chunk, size = [], 0
    for piece in chain(JSON_ENCODER.iterencode(value), ["\n"]):
        chunk.append(piece)
        size += len(piece)
        if size >= batch:
            stream.write("".join(chunk))
            chunk, size = [], 0
    stream.write("".join(chunk))


def _response_hint(err) -> str:
    """What to do when a frame given without --api read as no request: empty when the
    response readings were not tried."""
    readings = getattr(err, "response_readings", None)
    if readings is None:
        return ""
    if not readings:
        return (
            "fastkwire explain: if this is a response, give --api and --api-version: a response "
            "header does not say which API it answers (and no response of any API and "
            "version reads these bytes exactly)\n"
        )
    return (
        f"fastkwire explain: if this is a response, it reads exactly as "
        f"{reading_names(readings)}: give --api and --api-version to say which\n"
    )


def run_explain(args, stdout=None, stderr=None, stdin=None) -> int:
    """Runs `fastkwire explain`; 0 on success, 1 for a malformed frame, 2 for bad usage."""
    stdout, stderr, stdin = stdout or sys.stdout, stderr or sys.stderr, stdin or sys.stdin
    doc_width = None if args.full else DOC_WIDTH
    if getattr(args, "list_examples", None) is not None:
        try:
            _write_lines(stdout, _example_list(args.list_examples))
        except ValueError as err:
            _write(stderr, f"fastkwire explain: {err}\n")
            return 2
        return 0
    if getattr(args, "capture", None):
        return run_explain_capture(args, stdout, stderr)
    try:
        if args.example:
            if args.hex or args.file:
                raise ValueError("--example takes no frame")
            frame, api_key, version = example(args.example)
        else:
            if (args.api is None) != (args.version is None):
                raise ValueError("a response needs both --api and --api-version")
            frame, api_key, version = _read_frame(args, stdin), args.api, args.version
        root = explain(
            frame,
            api_key,
            version,
            max_items=args.max_items,
            try_responses=not args.example and api_key is None,
        )
    except DecodeError as err:
        if not args.json:
            _write_lines(stdout, render_lines(frame, err.partial_tree, doc_width, args.hex_rows))
        _write(stderr, f"DecodeError: {err}\n{_response_hint(err)}")
        return 1
    except (ValueError, OSError) as err:
        _write(stderr, f"fastkwire explain: {err}\n{_response_hint(err)}")
        return 2
    if "reading" in root.value:
        _write(
            stderr,
            "fastkwire explain: read as a response (its reading: line says why); "
            "--api and --api-version choose another reading\n",
        )
    if args.json:
        _write_json(stdout, message_value(frame, root))
    else:
        _write_lines(stdout, render_lines(frame, root, doc_width, args.hex_rows))
    return 0


def add_explain(subparsers):
    parser = subparsers.add_parser("explain", help="annotated byte layout of a Kafka frame")
    configure_explain(parser).set_defaults(run=run_explain)
    return parser


def explain_main(argv=None):
    """`python -m fastkwire.explain`: the same as `fastkwire explain`."""
    return run_explain(
        configure_explain(argparse.ArgumentParser(prog="fastkwire explain")).parse_args(argv)
    )


# ---------------------------------------------------------------- dump


def add_dump(subparsers):
    """`fastkwire dump` (_dump_cli.py), with the admin commands' security flags."""
    _security_arguments(_add_dump(subparsers, security=_security, flags=FLAGS))


# ---------------------------------------------------------------- dispatch

# Subcommand name -> how to add it: a function(subparsers) that adds its parser and sets
# `run` (a function(args) -> exit code) with parser.set_defaults(run=...).
SUBCOMMANDS = {
    "explain": add_explain,
    "describe-group": add_describe_group,
    "remove-members": add_remove_members,
    "proxy": add_proxy,
    "stats": add_stats,
    "dump": add_dump,
    "broker": add_broker,
}


class _Version(argparse._VersionAction):
    """--version printed on one line as it is (argparse's own wraps it to the terminal)."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(self.version)
        parser.exit()


class _ApiVersion(argparse.Action):
    """explain's --api-version N; a bare --version prints the release, as the top level's."""

    def __call__(self, parser, namespace, values, option_string=None):
        if values is None:
            if option_string != "--version":
                parser.error(f"argument {option_string}: expected a version number")
            print(_release())
            parser.exit()
        setattr(namespace, self.dest, values)


_ANY_COMMAND = (
    f"  {EXIT_INTERRUPTED}  interrupted (Ctrl-C)\n"
    f"  {EXIT_CLOSED_PIPE}  the output's reader went away (a closed pipe: `| head`)"
)
_GROUP_CODES = (
    "  2  bad usage: a flag, a value, a file named by a flag\n"
    "  3  the request failed as a whole: connection, TLS, SASL, timeout, old broker, "
    "authorization, group state\n"
)
EXIT_CODES = {
    "explain": "  0  shown\n"
    "  1  a malformed frame (shown up to the error), or a capture with frames that do not "
    "decode\n"
    "  2  bad usage: a flag, a frame that is not hex, a file or capture that cannot be read\n",
    "describe-group": "  0  described\n" + _GROUP_CODES,
    "remove-members": "  0  every member removed; or, with --dry-run, the plan printed\n"
    "  1  the request went through but some member was not removed\n" + _GROUP_CODES,
    "proxy": "  0  stopped by Ctrl-C or SIGTERM (the summary is printed)\n"
    "  2  bad usage: a flag, a rule, a rules file, an output file that cannot be written\n"
    "  3  the proxy could not listen\n",
    "stats": "  0  summed up\n  2  bad usage, or a capture that cannot be read\n",
    "broker": "  0  stopped by Ctrl-C or SIGTERM\n"
    "  2  bad usage: a flag\n"
    "  3  the broker could not listen\n",
    "dump": "  0  written (the output file appears only then)\n"
    "  2  bad usage: a flag, a range, a value that --bytes text cannot write, a --to folder "
    "that is not there, a missing extra\n"
    "  3  the read failed: a broker, a connection, a corrupt batch or segment\n",
}


class _Formatter(argparse.HelpFormatter):
    """Wraps an epilog's "CODE  meaning" lines each on its own, under their meaning."""

    def _fill_text(self, text, width, indent):
        lines = []
        for line in text.splitlines():
            m = re.fullmatch(r"\s+(\d+)\s+(.*)", line)
            if m is None:
                lines.append(textwrap.fill(line, width, initial_indent=indent))
            else:
                lines.append(
                    textwrap.fill(
                        m.group(2),
                        width,
                        initial_indent=f"{indent}  {m.group(1):<5}",
                        subsequent_indent=indent + " " * 7,
                    )
                )
        return "\n".join(lines)


def _exit_codes(parser, command):
    parser.formatter_class = _Formatter
    parser.epilog = "exit codes:\n" + EXIT_CODES[command] + _ANY_COMMAND


def _release() -> str:
    from . import __version__, _why, implementation

    core = "compiled core" if implementation == "cython" else f"pure-Python core: {_why}"
    return f"fastkwire {__version__} ({core})"


def build_parser(prog="fastkwire"):
    parser = _Parser(prog=prog, description="fastkwire: Kafka wire-protocol tools")
    parser.add_argument(
        "--version",
        action=_Version,
        version=_release(),
        help="print the release and which implementation runs (compiled or pure Python), then exit",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in SUBCOMMANDS.values():
        add(subparsers)
    for command, sub in subparsers.choices.items():
        if command in EXIT_CODES:
            _exit_codes(sub, command)
    return parser


class _ClosedPipe(Exception):
    """The reader of the output went away. Not an OSError: a command's own `except
    OSError` (for a file it cannot read) must not take it for a usage error."""


class _PipeGuard:
    """sys.stdout or sys.stderr, turning a closed pipe into _ClosedPipe for _run."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text):
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise _ClosedPipe from None

    def flush(self):
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise _ClosedPipe from None

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _quiet_after_closed_pipe():
    # What is still buffered would fail again at exit: send it nowhere instead.
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
        except (OSError, ValueError):  # not a file descriptor (an embedding, a test)
            pass


def _run(parser, argv):
    args = parser.parse_args(argv)
    run = getattr(args, "run", None)
    if run is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    args.prog = parser.prog + (f" {args.command}" if getattr(args, "command", None) else "")
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _PipeGuard(out), _PipeGuard(err)
    try:
        return run(args)
    except (_ClosedPipe, BrokenPipeError):
        # The reader went away (`| head`): stop at once and quietly, as Unix tools do.
        sys.stdout, sys.stderr = out, err
        _quiet_after_closed_pipe()
        return EXIT_CLOSED_PIPE
    except (KeyboardInterrupt, Exception) as exc:  # noqa: BLE001 - said, not a traceback
        return ended_by(args.prog, exc)
    finally:
        sys.stdout, sys.stderr = out, err


def _complete(parser):
    """Shell completion, when the shell asks (argcomplete sets _ARGCOMPLETE) and the
    optional argcomplete is installed: `eval "$(register-python-argcomplete fastkwire)"`."""
    if "_ARGCOMPLETE" not in os.environ:
        return
    try:
        import argcomplete
    except ImportError:
        return
    argcomplete.autocomplete(parser)  # prints the completions and exits


def main(argv=None):
    """Entry point of the `fastkwire` console script; returns the exit code."""
    parser = build_parser()
    _complete(parser)
    return _run(parser, argv)


def invoke_consumer_rebalance(argv=None):
    """`kafka-invoke-consumer-rebalance`: the KIP's script name for `fastkwire remove-members`."""
    parser = _Parser(
        prog="kafka-invoke-consumer-rebalance",
        allow_abbrev=False,
        description="Remove static members from a consumer group by group.instance.id so that it "
        "rebalances at once (the same as `fastkwire remove-members`).",
    )
    _remove_members_arguments(parser)
    _exit_codes(parser, "remove-members")
    _complete(parser)
    return _run(parser, argv)


if __name__ == "__main__":
    sys.exit(main())
