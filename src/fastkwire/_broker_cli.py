"""`fastkwire broker`: a Kafka broker in memory, served until Ctrl-C or SIGTERM.

    fastkwire broker [--listen [PROTOCOL://]HOST:PORT[,PROTOCOL://HOST:PORT...] ...]
                     [--partitions N]
                     [--no-auto-create-topics] [--group-min-session-timeout-ms MS]
                     [--log-dir DIR]
                     [--sasl-user NAME:PASSWORD ...] [--sasl-mechanism M ...]
                     [--oauthbearer-principal-claim CLAIM] [--oauthbearer-required-scope S ...]
                     [--oauthbearer-clock-skew-ms MS] [--connections-max-reauth-ms MS]
                     [--tls-cert PEM --tls-key PEM] [--tls-client-ca PEM]
                     [--authorizer [--super-users User:A;User:B]
                      [--allow-everyone-if-no-acl-found]]
                     [--fault RULE ...] [--rules FILE] [--seed N]

Once it listens, it prints one line on stdout: `listening on HOST:PORT[,HOST:PORT...]`
(the bootstrap servers: each node's first listener; a port of 0 is a free one), after one
line `listener PROTOCOL on HOST:PORT[,...]` for each further listener a node has. Exit
codes: 0 stopped by Ctrl-C or SIGTERM, 2 bad usage, 3 it could not listen.
"""

import argparse
import sys

from ._cli_types import count as _count
from ._cli_types import add_fault_arguments, fault_rules
from ._printable import os_error_text, printable
from ._serve_cli import EXIT_CLOSED_PIPE, EXIT_FAILED, EXIT_OK, ended_by, serve_until_signal
from .broker import Authorizer, Broker, GroupConfig, UnsecuredValidator
from .broker._coordinator_state import CoordinatorStateError
from .broker._sasl import MECHANISMS
from .broker._security import PROTOCOLS, split_listener
from .proxy._faults import RuleError
from .proxy._loop import LOOPS, loop_factory, run
from .proxy._caps import parse_address

EXIT_USAGE = 2
DEFAULT_LISTEN = ("127.0.0.1", 9092)
# The library's parameter names, as the flags the user typed (errors name the flag).
FLAGS = {
    "listeners": "--listen",
    "security_protocol": "--listen",
    "users": "--sasl-user",
    "sasl_mechanisms": "--sasl-mechanism",
    "scram_iterations": "--scram-iterations",
    "connections_max_reauth_ms": "--connections-max-reauth-ms",
    "tls_cert": "--tls-cert",
    "tls_key": "--tls-key",
    "tls_cert/tls_key": "--tls-cert/--tls-key",
    "tls_client_cafile": "--tls-client-ca",
    "super_users": "--super-users",
}


def _listener(text):
    """A node's listeners: [PROTOCOL://]HOST:PORT, or several as Kafka's `listeners` value
    (PLAINTEXT://HOST:PORT,SSL://HOST:PORT), checked; the text as Broker takes it."""
    listeners = []
    for part in text.split(","):
        try:
            protocol, address = split_listener(part.strip())
            host, port = parse_address(address, "listeners")
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{part!r} is not [PROTOCOL://]HOST:PORT (PROTOCOL: {', '.join(PROTOCOLS)})"
            ) from None
        listeners.append(f"{protocol}://{host}:{port}" if protocol else (host, port))
    if len(listeners) == 1:
        return listeners[0]
    if any(isinstance(one, tuple) for one in listeners):
        raise argparse.ArgumentTypeError(
            f"{text!r}: a node's several listeners each name their protocol"
        )
    return ",".join(listeners)


def _user(text):
    name, sep, password = text.partition(":")
    if not sep or not name or not password:
        raise argparse.ArgumentTypeError("not NAME:PASSWORD (a user name, a colon, its password)")
    return name, password


OAUTHBEARER_FLAGS = (
    "--oauthbearer-principal-claim",
    "--oauthbearer-required-scope",
    "--oauthbearer-clock-skew-ms",
)


def _oauthbearer(args):
    """Kafka's unsecured OAUTHBEARER validation with the options the flags give."""
    options = {
        "principal_claim": args.oauthbearer_principal_claim,
        "required_scope": args.oauthbearer_required_scope,
        "allowable_clock_skew_ms": args.oauthbearer_clock_skew_ms,
    }
    try:
        return UnsecuredValidator(**{k: v for k, v in options.items() if v is not None})
    except ValueError as e:  # "oauthbearer principal_claim: ..."
        name = str(e).split(":", 1)[0].split(" ")[-1]
        flag = {
            "principal_claim": "--oauthbearer-principal-claim",
            "required_scope": "--oauthbearer-required-scope",
            "allowable_clock_skew_ms": "--oauthbearer-clock-skew-ms",
        }[name]
        raise ValueError(f"{flag}: {str(e).split(': ', 1)[1]}") from None


def _flagged(message):
    name, sep, rest = message.partition(": ")
    return f"{FLAGS[name]}: {rest}" if sep and name in FLAGS else message


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
        type=_listener,
        action="append",
        metavar="[PROTOCOL://]HOST:PORT",
        help="a node's listener (repeat for more nodes, ids 0, 1, ...; port 0: a free one; "
        "default 127.0.0.1:9092); PROTOCOL as Kafka's listeners: PLAINTEXT, SSL, "
        "SASL_PLAINTEXT or SASL_SSL (by default what --sasl-user and --tls-cert imply); "
        "several of different protocols on one node as Kafka's listeners value, "
        "PLAINTEXT://HOST:PORT,SSL://HOST:PORT, the same protocols for every node",
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
    security = parser.add_argument_group("security (docs/broker.md, Security)")
    security.add_argument(
        "--sasl-user",
        type=_user,
        action="append",
        default=[],
        metavar="NAME:PASSWORD",
        help="a user who may log in with SASL PLAIN and SCRAM (repeat for more; the password "
        "is visible to other local users in the process list: for tests)",
    )
    security.add_argument(
        "--sasl-mechanism",
        choices=MECHANISMS,
        action="append",
        default=None,
        help="a mechanism enabled (repeat; Kafka's sasl.enabled.mechanisms; default PLAIN "
        "and SCRAM with --sasl-user); OAUTHBEARER validates Kafka's unsecured JWS tokens "
        "(anyone can make one: for tests)",
    )
    security.add_argument(
        "--oauthbearer-principal-claim",
        metavar="CLAIM",
        help="with OAUTHBEARER: the claim naming the principal (Kafka's "
        "unsecuredValidatorPrincipalClaimName; default sub)",
    )
    security.add_argument(
        "--oauthbearer-required-scope",
        action="append",
        metavar="SCOPE",
        help="with OAUTHBEARER: a scope every token must hold (repeat; Kafka's "
        "unsecuredValidatorRequiredScope)",
    )
    security.add_argument(
        "--oauthbearer-clock-skew-ms",
        type=int,
        metavar="MS",
        help="with OAUTHBEARER: clock skew allowed checking exp and iat (Kafka's "
        "unsecuredValidatorAllowableClockSkewMs; default 0)",
    )
    security.add_argument(
        "--connections-max-reauth-ms",
        type=int,
        default=0,
        metavar="MS",
        help="a SASL session's longest life before the client re-authenticates (KIP-368, "
        "Kafka's connections.max.reauth.ms; default 0: off, an OAUTHBEARER token's expiry "
        "still ends its session)",
    )
    security.add_argument(
        "--scram-iterations",
        type=_count,
        default=4096,
        metavar="N",
        help="iterations of the users' SCRAM credentials (4096-16384; default 4096)",
    )
    security.add_argument(
        "--tls-cert", metavar="PEM", help="the listeners' TLS certificate (chain)"
    )
    security.add_argument("--tls-key", metavar="PEM", help="the --tls-cert certificate's key")
    security.add_argument(
        "--tls-key-password",
        metavar="PASSWORD",
        help="the --tls-key file's password, if it is encrypted",
    )
    security.add_argument(
        "--tls-client-ca",
        metavar="PEM",
        help="clients must present a certificate these CAs signed (ssl.client.auth=required)",
    )
    security.add_argument(
        "--authorizer",
        action="store_true",
        help="enforce the ACLs (CreateAcls) as Kafka's StandardAuthorizer does; the "
        "principal is User:<name> after a SASL login, else User:ANONYMOUS",
    )
    security.add_argument(
        "--super-users",
        metavar="PRINCIPALS",
        default=None,
        help="with --authorizer: principals allowed everything, ';'-separated "
        "(Kafka's super.users, e.g. 'User:admin;User:ops')",
    )
    security.add_argument(
        "--allow-everyone-if-no-acl-found",
        action="store_true",
        help="with --authorizer: a resource no ACL names is open to every client "
        "(Kafka's allow.everyone.if.no.acl.found; default: refused)",
    )
    faults = parser.add_argument_group("faults (the proxy's rules, applied by the broker)")
    add_fault_arguments(
        faults,
        "a fault rule as key=value pairs, as fastkwire proxy --fault takes them, e.g. "
        "api=Heartbeat,error=REBALANCE_IN_PROGRESS,times=2 or api=Fetch,delay_ms=500 or "
        "api=Produce,disconnect=after,times=1 (repeat for more)",
    )
    parser.add_argument(
        "--log-dir",
        metavar="DIR",
        default=None,
        help="also keep the logs in DIR, in Kafka's segment format (`<topic>-<partition>` "
        "folders of .log files), and serve what DIR holds at start (default: memory only)",
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
    except (KeyboardInterrupt, Exception) as exc:  # noqa: BLE001 - said, not a traceback
        return ended_by(args.prog, exc)


def run_broker(args, out=None, err=None):
    out, err = out or sys.stdout, err or sys.stderr
    try:
        loop_factory(args.loop)
        groups = GroupConfig()
        if args.group_min_session_timeout_ms is not None:
            groups.group_min_session_timeout_ms = args.group_min_session_timeout_ms
        rules, seed = fault_rules(args)
        users = dict(args.sasl_user) if args.sasl_user else None
        oauth = "OAUTHBEARER" in (args.sasl_mechanism or ())
        if args.sasl_mechanism and users is None and not oauth:
            raise ValueError("--sasl-mechanism: given without --sasl-user")
        oauthbearer = _oauthbearer(args) if oauth else None
        for flag in OAUTHBEARER_FLAGS:
            if not oauth and getattr(args, flag.lstrip("-").replace("-", "_")) is not None:
                raise ValueError(f"{flag}: given without --sasl-mechanism OAUTHBEARER")
        authorizer = None
        if args.authorizer:
            authorizer = Authorizer(
                super_users=args.super_users or (),
                allow_everyone_if_no_acl_found=args.allow_everyone_if_no_acl_found,
            )
        elif args.super_users is not None or args.allow_everyone_if_no_acl_found:
            flag = (
                "--super-users"
                if args.super_users is not None
                else "--allow-everyone-if-no-acl-found"
            )
            raise ValueError(f"{flag}: given without --authorizer")
        broker = Broker(
            args.listen or [DEFAULT_LISTEN],
            auto_create_topics=args.auto_create_topics,
            num_partitions=args.partitions,
            groups=groups,
            users=users,
            sasl_mechanisms=args.sasl_mechanism,
            scram_iterations=args.scram_iterations,
            oauthbearer=oauthbearer,
            connections_max_reauth_ms=args.connections_max_reauth_ms,
            tls_cert=args.tls_cert,
            tls_key=args.tls_key,
            tls_key_password=args.tls_key_password,
            tls_client_cafile=args.tls_client_ca,
            faults=rules,
            fault_seed=seed,
            log_dir=args.log_dir,
            authorizer=authorizer,
        )
    except (RuleError, ValueError) as e:
        print(f"{args.prog}: error: {printable(_flagged(str(e)))}", file=err)
        return EXIT_USAGE
    except OSError as e:  # the --rules file
        print(f"{args.prog}: error: --rules: {printable(str(e))}", file=err)
        return EXIT_USAGE
    try:
        return run(_serve(broker, args, out, err), args.loop)
    except KeyboardInterrupt:  # where the loop could not take the signal itself
        return EXIT_OK


async def _serve(broker, args, out, err):
    def start_failed(e):
        if isinstance(e, CoordinatorStateError):  # a record the directory holds
            print(f"{args.prog}: error: --log-dir {args.log_dir}: {printable(str(e))}", file=err)
            return EXIT_FAILED
        if not isinstance(e, OSError):
            return None
        if args.log_dir is not None and e.filename is not None:
            print(f"{args.prog}: error: --log-dir {args.log_dir}: {os_error_text(e)}", file=err)
            return EXIT_FAILED
        wanted = ",".join(f"{h}:{p}" for node in broker.node_listeners for h, p in node)
        print(f"{args.prog}: error: --listen {wanted}: {e.strerror or e}", file=err)
        return EXIT_FAILED

    def announce(loop):
        for protocol in broker.protocols[1:]:
            print(
                f"listener {protocol} on {broker.bootstrap_servers_for(protocol)}",
                file=out,
                flush=True,
            )
        print(f"listening on {broker.bootstrap_servers}", file=out, flush=True)
        rules = len(broker.faults.rules)
        print(
            f"{args.prog}: {len(broker.listeners)} node(s), {', '.join(broker.protocols)}"
            + (
                f" ({', '.join(broker.users.mechanisms)})"
                if any(p.startswith("SASL_") for p in broker.protocols)
                else ""
            )
            + (f", {rules} fault rule(s)" if rules else "")
            + (", ACLs enforced" if broker.authorizer is not None else "")
            + f", on {loop}; Ctrl-C or SIGTERM stops it",
            file=err,
            flush=True,
        )

    return await serve_until_signal(broker, announce, start_failed)
