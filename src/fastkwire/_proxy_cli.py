"""The command lines over fastkwire.proxy: `fastkwire proxy`, `fastkwire stats FILE` and
`fastkwire explain --capture FILE` (cli adds them to its parser).

Exit codes: 0 done (the proxy: stopped by Ctrl-C or SIGTERM), 1 a capture with frames that
do not decode (explain), 2 bad usage (a flag, a rules file, a capture that cannot be read),
3 the proxy could not listen.
"""

import argparse
import json
import sys

from ._explain_text import DOC_WIDTH, JSON_ENCODER, message_value, render_lines
from ._cli_types import address as _address
from ._cli_types import count as _count
from ._cli_types import add_fault_arguments, fault_rules
from ._printable import os_error_text, printable
from ._serve_cli import serve_until_signal
from .connection import make_tls_context
from .connection_errors import OptionError
from .errors import DecodeError
from .proxy._compiled import ENV as FORWARD_ENV, FORWARDS, forward_kind
from .proxy._loop import ENV as LOOP_ENV, LOOPS, loop_factory, run

# pcap files (dpkt) and frame explanations load on first use: `fastkwire broker` and the
# proxy without them start sooner
from . import proxy as proxy_lib
from .proxy import (
    DEFAULT_FRAME_TIMEOUT,
    CaptureError,
    CaptureWriter,
    DEFAULT_BROKER_PORT_HOLD,
    DEFAULT_MAX_BROKERS,
    DEFAULT_MAX_BUFFERED_BYTES,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_MAX_PENDING_BYTES,
    Proxy,
    ProxyEvent,
    QueuedSink,
    RuleError,
    Summary,
    event_json,
    event_line,
    exchange_dict,
    exchange_json,
    exchange_line,
)

EXIT_OK, EXIT_UNDECODED, EXIT_USAGE, EXIT_FAILED = 0, 1, 2, 3
LINE_ENCODER = json.JSONEncoder(
    ensure_ascii=True, default=JSON_ENCODER.default
)  # explain's, on one line
CLOSE_TIMEOUT = 30.0  # seconds the output may take to write what is queued at the end
TERMINAL_QUEUE_BYTES = 16 * 1024 * 1024
CAPTURE_QUEUE_BYTES = 128 * 1024 * 1024
# Library parameter -> flag, for errors the library raises about its parameters.
PROXY_FLAGS = {
    "loop": "--loop",
    "forward": "--forward",
    "upstream": "--upstream",
    "listen": "--listen",
    "advertised": "--advertise",
    "max_frame_bytes": "--max-frame-bytes",
    "max_pending_bytes": "--max-pending-bytes",
    "frame_timeout": "--frame-timeout",
    "max_connections": "--max-connections",
    "max_buffered_bytes": "--max-buffered-bytes",
    "broker_ports": "--broker-ports",
    "broker_map": "--map",
    "max_brokers": "--max-brokers",
    "broker_port_hold": "--broker-port-hold",
    "rewrite_advertised": "--rewrite-advertised",
    "rules": "--fault/--rules",
    "tls": "--tls-cert",
    "upstream_tls": "--upstream-tls",
}


def _flagged(message):
    """A library error with its parameter name replaced by the flag the user typed."""
    name, sep, rest = message.partition(": ")
    return f"{PROXY_FLAGS[name]}: {rest}" if sep and name in PROXY_FLAGS else message


def _python_path(proxy):
    """The banner's words when FASTKWIRE_PROXY_FORWARD=compiled (a preference: --forward
    compiled itself is refused with such flags) cannot carry what the other flags need:
    the asyncio path runs, and the banner says so and why."""
    if proxy.forward != "compiled" or not proxy.needs_python:
        return ""
    flags = dict(PROXY_FLAGS, rules="--fault", tls="--tls-cert", upstream_tls="--upstream-tls")
    why = ", ".join(dict.fromkeys(flags[name] for name in proxy.needs_python))
    return f", Python forwarding (FASTKWIRE_PROXY_FORWARD=compiled cannot carry {why})"


def _broker(text):
    """One broker by --bootstrap-server's rule: HOST:PORT, HOST (port 9092), [IPV6]:PORT."""
    from .admin import parse_servers

    try:
        servers = parse_servers(text)
    except ValueError:
        servers = []
    if len(servers) != 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not one broker: HOST:PORT, or HOST for port 9092"
        )
    return servers[0]


def _port(text):
    if not (text.isascii() and text.isdigit()) or not 0 < int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"not a TCP port (1-65535): {text!r}")
    return int(text)


def _warner(prog, err):
    def warn(text):
        err.write(f"{prog}: warning: {printable(text)}\n")

    return warn


def _seconds(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value <= 86400:
        raise argparse.ArgumentTypeError(f"{text!r} is not between 0 and 86400 seconds")
    return value


def _mapping(text):
    broker, sep, local = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"{text!r} is not BROKER-HOST:PORT=LOCAL-HOST:PORT")
    return _address(broker), _address(local)


# ---------------------------------------------------------------- fastkwire proxy


def add_proxy(subparsers):
    parser = subparsers.add_parser(
        "proxy",
        allow_abbrev=False,
        help="a Kafka proxy that shows, records and perturbs each exchange",
        description="Forward Kafka connections to one broker byte for byte, printing one line per "
        "request/response exchange; Ctrl-C prints a summary per API.",
    )
    parser.add_argument(
        "--listen",
        type=_address,
        default=("127.0.0.1", 19092),
        metavar="HOST:PORT",
        help="where clients connect (default 127.0.0.1:19092)",
    )
    parser.add_argument(
        "--upstream",
        type=_broker,
        required=True,
        metavar="HOST:PORT",
        help="the broker to forward to (HOST alone: port 9092, as --bootstrap-server)",
    )
    out = parser.add_argument_group("output")
    out.add_argument(
        "--json", action="store_true", help="one JSON object per exchange (and per event)"
    )
    out.add_argument(
        "--explain",
        action="store_true",
        help="print the full tree of each request and response frame",
    )
    out.add_argument(
        "--api",
        action="append",
        default=[],
        metavar="NAME",
        help="show only this API (repeat for more; a name such as Metadata, or a key)",
    )
    out.add_argument(
        "--client-id",
        action="append",
        default=[],
        metavar="ID",
        help="show only requests of this client id (repeat for more)",
    )
    parser.add_argument(
        "--loop",
        choices=LOOPS,
        default=None,
        help="the event loop: uvloop (faster; pip install 'fastkwire[proxy]'), asyncio's own, "
        f"or auto: uvloop when installed (default: ${LOOP_ENV}, else auto)",
    )
    parser.add_argument(
        "--forward",
        choices=FORWARDS,
        default=None,
        help="how bytes move: compiled (a C thread; Linux; no fault rules, address rewriting, "
        "broker mapping or TLS), python (the event loop), or auto: compiled where it can "
        f"carry the connections and no line per exchange is shown (default: ${FORWARD_ENV}, "
        "else auto)",
    )
    out.add_argument(
        "--quiet", action="store_true", help="no line per exchange: errors and the summary only"
    )
    out.add_argument(
        "--connections", action="store_true", help="also a line per connection opened and closed"
    )
    out.add_argument(
        "--record", metavar="FILE", help="write every exchange, both frames as hex, as JSON lines"
    )
    out.add_argument(
        "--pcap", metavar="FILE", help="write the traffic as a pcap file (Wireshark reads it)"
    )
    change = parser.add_argument_group("changing the traffic")
    change.add_argument(
        "--rewrite-advertised",
        action="store_true",
        help="put the proxy's address into Metadata and FindCoordinator answers, so that "
        "clients stay on the proxy",
    )
    change.add_argument(
        "--advertise",
        type=_address,
        metavar="HOST:PORT",
        help="the address --rewrite-advertised puts in (default: --listen)",
    )
    change.add_argument(
        "--broker-ports",
        metavar="START-END",
        help="a listener per broker the cluster names (Metadata, FindCoordinator, "
        "DescribeCluster), on the next free port of this range, and its address put into "
        "the answers: clients of a cluster reach every broker through the proxy",
    )
    change.add_argument(
        "--map",
        type=_mapping,
        action="append",
        default=[],
        metavar="BROKER-HOST:PORT=LOCAL-HOST:PORT",
        help="this broker's listener at a fixed address (repeat for more; with or without "
        "--broker-ports)",
    )
    change.add_argument(
        "--broker-port-hold",
        type=_seconds,
        default=DEFAULT_BROKER_PORT_HOLD,
        metavar="SECONDS",
        help="how long a broker that left the cluster keeps its --broker-ports port before "
        f"another broker may have it (default {DEFAULT_BROKER_PORT_HOLD:g})",
    )
    add_fault_arguments(
        change,
        "a fault rule as key=value pairs, e.g. api=Heartbeat,error=REBALANCE_IN_PROGRESS,"
        "times=2 or api=Fetch,delay_ms=500,probability=0.1 or "
        "api=Produce,disconnect=before (repeat for more)",
    )
    tls = parser.add_argument_group(
        "TLS (each side on its own; SASL passes through untouched either way)"
    )
    tls.add_argument("--tls-cert", metavar="PEM", help="clients connect to the proxy over TLS")
    tls.add_argument("--tls-key", metavar="PEM", help="the --tls-cert certificate's key")
    tls.add_argument(
        "--upstream-tls", action="store_true", help="the proxy connects to brokers over TLS"
    )
    tls.add_argument(
        "--ssl-cafile",
        metavar="PEM",
        help="with --upstream-tls: CA certificates to trust the brokers with",
    )
    tls.add_argument(
        "--ssl-certfile",
        metavar="PEM",
        help="with --upstream-tls: client certificate (for brokers that ask)",
    )
    tls.add_argument(
        "--ssl-keyfile", metavar="PEM", help="with --upstream-tls: the client certificate's key"
    )
    tls.add_argument(
        "--ssl-password",
        metavar="TEXT",
        help="the key's password (better: FASTKWIRE_SSL_PASSWORD in the environment)",
    )
    tls.add_argument(
        "--no-ssl-check-hostname",
        action="store_true",
        help="with --upstream-tls: do not check a broker's host name against its certificate",
    )
    limits = parser.add_argument_group("limits")
    limits.add_argument(
        "--max-frame-bytes",
        type=_count,
        default=DEFAULT_MAX_FRAME_BYTES,
        metavar="N",
        help=f"a larger size prefix ends the connection (default {DEFAULT_MAX_FRAME_BYTES})",
    )
    limits.add_argument(
        "--max-pending-bytes",
        type=_count,
        default=DEFAULT_MAX_PENDING_BYTES,
        metavar="N",
        help="bytes of requests awaiting answers before the client is not read "
        f"(default {DEFAULT_MAX_PENDING_BYTES})",
    )
    limits.add_argument(
        "--frame-timeout",
        type=_seconds,
        default=DEFAULT_FRAME_TIMEOUT,
        metavar="SECONDS",
        help="a frame that has not arrived whole this long after it began ends the connection "
        f"(default {DEFAULT_FRAME_TIMEOUT:g})",
    )
    limits.add_argument(
        "--max-connections",
        type=_count,
        default=DEFAULT_MAX_CONNECTIONS,
        metavar="N",
        help=f"client connections open at once; one more is refused (default {DEFAULT_MAX_CONNECTIONS})",
    )
    limits.add_argument(
        "--max-brokers",
        type=_count,
        default=DEFAULT_MAX_BROKERS,
        metavar="N",
        help="brokers given a listener (or a port kept for them) at once; one more is told an "
        f"address where nothing listens, with a warning (default {DEFAULT_MAX_BROKERS})",
    )
    limits.add_argument(
        "--max-buffered-bytes",
        type=_count,
        default=DEFAULT_MAX_BUFFERED_BYTES,
        metavar="N",
        help="bytes of frames held for all connections together; past it, clients are not "
        "read until answers drain (a frame under way may finish; one that takes the total "
        f"past twice this ends its connection) (default {DEFAULT_MAX_BUFFERED_BYTES})",
    )
    parser.set_defaults(run=run_proxy)
    return parser


class _Output:
    """Shows exchanges and events, and hands them to the capture writers. The event loop only
    queues them (`exchange`, `event`); a thread per sink (the terminal's, the capture
    files') formats and writes, so a stdout nobody reads never holds forwarding back.
    What a full queue cannot take is dropped and counted (`report`)."""

    def __init__(self, args, out, err, writers=()):
        self.args, self.out, self.err = args, out, err
        self.apis = {_api_key_or_fail(a) for a in args.api}
        self.client_ids = set(args.client_id)
        self.writers = list(writers)
        # What waits for the terminal holds its frames (for their error codes): a stuck
        # terminal drops lines past 16 MiB of them; capture files may fall further behind.
        self.terminal = QueuedSink(
            self._show, self._flush_terminal, max_bytes=TERMINAL_QUEUE_BYTES, name="output"
        )
        self.capture = (
            QueuedSink(
                self._record, self._flush_capture, max_bytes=CAPTURE_QUEUE_BYTES, name="capture"
            )
            if self.writers
            else None
        )

    def shown(self, ex):
        return (not self.apis or ex.api_key in self.apis) and (
            not self.client_ids or ex.client_id in self.client_ids
        )

    # ---- on the event loop: queue only

    def exchange(self, ex):
        capture, quiet = self.capture, self.args.quiet
        if capture is not None or not quiet:
            response = ex.response
            size = len(ex.request) + (0 if response is None else len(response))
            if capture is not None:
                capture.offer(ex, size)
            if not quiet and self.shown(ex):
                self.terminal.offer(ex, size)

    def event(self, event):
        if self.capture is not None and event.frame is not None:
            self.capture.offer(event, len(event.frame))
        if event.kind == ProxyEvent.ERROR or self.args.connections:
            self.terminal.offer(event, 0 if event.frame is None else len(event.frame))

    # ---- on the sinks' threads

    def _show(self, item):
        if isinstance(item, ProxyEvent):
            if self.args.json:
                self.out.write(event_json(item) + "\n")
            else:
                self.err.write(event_line(item) + "\n")
            return
        self.out.write((exchange_json(item) if self.args.json else exchange_line(item)) + "\n")
        if self.args.explain:
            _explain_exchange(item, self.out, self.err)

    def _flush_terminal(self):
        self.out.flush()
        self.err.flush()

    def _record(self, item):
        for w in self.writers:
            if isinstance(item, ProxyEvent):
                w.write_unpaired(item)
            else:
                w.write(item)

    def _flush_capture(self):
        for w in self.writers:
            w.flush()

    def close(self, timeout=CLOSE_TIMEOUT):
        """Writes what is queued, then lines on stderr for what was dropped or not written."""
        # The files first: a terminal that never drains must not keep them waiting.
        sinks = ([("capture", self.capture)] if self.capture else []) + [("output", self.terminal)]
        unwritten = {name: not sink.close(timeout) for name, sink in sinks}
        for w in self.writers:
            w.close()
        lost = self.terminal.dropped + (self.terminal.pending if unwritten["output"] else 0)
        if lost:
            self.err.write(
                f"fastkwire proxy: {lost} lines not shown: the output did not keep up (a "
                "paused terminal, or a pipe nobody reads)\n"
            )
        lost = 0 if self.capture is None else self.capture.dropped
        if self.capture is not None and unwritten["capture"]:
            lost += self.capture.pending
        if lost:
            self.err.write(
                f"fastkwire proxy: {lost} exchanges not recorded: the capture files did not "
                "keep up\n"
            )
        for _, sink in sinks:
            for e in sink.errors[:3]:
                self.err.write(f"fastkwire proxy: writing failed: {printable(e)}\n")


def _api_key_or_fail(text):
    from ._explain_apis import api_names

    if text.isdigit() and int(text) in api_names():
        return int(text)
    wanted = text.replace("-", "").replace("_", "").lower()
    for key, name in api_names().items():
        if name.lower() == wanted:
            return key
    raise ValueError(f"--api: unknown API {text!r}")


def run_proxy(args, out=None, err=None):
    out, err = out or sys.stdout, err or sys.stderr
    try:
        rules, seed = fault_rules(args)
        for a in args.api:
            _api_key_or_fail(a)
        tls, upstream_tls = _tls_contexts(args)
        loop_factory(args.loop)  # uvloop asked for and not installed: a usage error
        forward = forward_kind(args.forward)
        if forward == "auto" and not args.quiet:
            forward = "python"  # a line per exchange: Python's work per exchange anyway
        elif args.forward is None:
            forward = None  # FASTKWIRE_PROXY_FORWARD's: a preference the proxy applies
        writers = []
        if args.record:
            writers.append(CaptureWriter(args.record))
        if args.pcap:
            writers.append(proxy_lib.PcapWriter(args.pcap, upstream=args.upstream))
    except OptionError as e:
        print(f"{args.prog}: error: {printable(e.render(TLS_FLAGS))}", file=err)
        return EXIT_USAGE
    except (RuleError, ValueError, OSError) as e:
        print(
            f"{args.prog}: error: {os_error_text(e) if isinstance(e, OSError) else printable(_flagged(str(e)))}",
            file=err,
        )
        return EXIT_USAGE

    output = _Output(args, out, err, writers)
    try:
        proxy = Proxy(
            args.upstream,
            args.listen,
            on_exchange=output.exchange,
            on_event=output.event,
            rules=rules,
            seed=seed,
            rewrite_advertised=args.rewrite_advertised,
            advertised=args.advertise,
            max_frame_bytes=args.max_frame_bytes,
            max_pending_bytes=args.max_pending_bytes,
            frame_timeout=args.frame_timeout,
            max_connections=args.max_connections,
            max_buffered_bytes=args.max_buffered_bytes,
            broker_ports=args.broker_ports,
            broker_map=dict(args.map),
            max_brokers=args.max_brokers,
            broker_port_hold=args.broker_port_hold,
            tls=tls,
            upstream_tls=upstream_tls,
            forward=forward,
        )
    except ValueError as e:
        output.close()
        text = e.render(PROXY_FLAGS) if isinstance(e, OptionError) else _flagged(str(e))
        print(f"{args.prog}: error: {text}", file=err)
        return EXIT_USAGE
    try:
        code = run(_serve(proxy, args, err), args.loop)
    except KeyboardInterrupt:  # where the loop could not take the signal itself
        code = EXIT_OK
    finally:
        output.close()
    if code == EXIT_OK:
        _print_summary(proxy.summary, args.json, out)
    out.flush()
    return code


async def _serve(proxy, args, err):
    def start_failed(e):
        if isinstance(e, OSError):
            print(
                f"{args.prog}: error: --listen {args.listen[0]}:{args.listen[1]}: {e.strerror or e}",
                file=err,
            )
            return EXIT_FAILED
        if isinstance(e, ValueError):  # an address of the proxy's own, or the broker's, given to it
            print(f"{args.prog}: error: {printable(_flagged(str(e)))}", file=err)
            return EXIT_USAGE
        return None

    return await serve_until_signal(
        proxy, lambda loop: _announce(proxy, args, loop, err), start_failed
    )


def _announce(proxy, args, loop, err):
    host, port = proxy.address
    print(
        f"{args.prog}: listening on {host}:{port}, forwarding to {args.upstream[0]}:{args.upstream[1]}"
        + (f", advertising {proxy.advertised[0]}:{proxy.advertised[1]}" if proxy.rewrite else "")
        + (
            f", a listener per broker ({', '.join(f'{b[0]}:{b[1]}' for b in proxy.broker_map)}"
            + (" fixed; " if proxy.broker_map and proxy.broker_ports else "")
            + (
                f"ports {proxy.broker_ports[0]}-{proxy.broker_ports[1]}"
                if proxy.broker_ports
                else ""
            )
            + ")"
            if proxy.mapped
            else ""
        )
        + f", on {loop}"
        + (", compiled forwarding" if proxy.compiled else _python_path(proxy))
        + (", TLS for clients" if proxy.tls else "")
        + (", TLS to brokers" if proxy.upstream_tls else "")
        + (f", {len(proxy.faults.rules)} fault rule(s)" if proxy.faults else ""),
        file=err,
        flush=True,
    )


TLS_FLAGS = {
    "ssl_cafile": "--ssl-cafile",
    "ssl_certfile": "--ssl-certfile",
    "ssl_keyfile": "--ssl-keyfile",
    "ssl_password": "--ssl-password",
}


def _tls_contexts(args):
    """(server context for clients, client context for brokers), each None without TLS on
    that side. The upstream one is the admin commands' (the same files, the same errors)."""
    import os
    import ssl

    server = None
    if bool(args.tls_cert) != bool(args.tls_key):
        raise ValueError("--tls-cert and --tls-key go together")
    if args.tls_cert:
        server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            server.load_cert_chain(args.tls_cert, args.tls_key)
        except (ssl.SSLError, OSError) as e:
            reason = getattr(e, "reason", None) or e.strerror or type(e).__name__
            raise ValueError(
                f"--tls-cert/--tls-key: cannot load {args.tls_cert!r} and {args.tls_key!r}: "
                f"{reason} (PEM files expected)"
            ) from None
    given = [
        flag
        for flag, value in (
            ("--ssl-cafile", args.ssl_cafile),
            ("--ssl-certfile", args.ssl_certfile),
            ("--ssl-keyfile", args.ssl_keyfile),
            ("--ssl-password", args.ssl_password),
            ("--no-ssl-check-hostname", args.no_ssl_check_hostname),
        )
        if value
    ]
    if not args.upstream_tls:
        if given:
            raise ValueError(f"{', '.join(given)} without --upstream-tls")
        return server, None
    password = args.ssl_password or os.environ.get("FASTKWIRE_SSL_PASSWORD")
    upstream = make_tls_context(
        args.ssl_cafile,
        args.ssl_certfile,
        args.ssl_keyfile,
        password,
        not args.no_ssl_check_hostname,
    )
    return server, upstream


def _print_summary(summary, as_json, out):
    if as_json:
        out.write(json.dumps({"summary": summary.to_dict()}) + "\n")
    else:
        out.write("\n".join(summary.table()) + "\n")


def _explain_exchange(ex, out, err, doc_width=DOC_WIDTH):
    """The trees of both frames; a frame that does not decode shows its partial tree and error."""
    frames = [("request", ex.request, None, None)]
    if ex.response is not None:
        frames.append(("response", ex.response, ex.api_key, ex.api_version))
    failed = 0
    for what, frame, key, version in frames:
        out.write(f"--- {what} ({len(frame)} bytes)\n")
        try:
            root = proxy_lib.explain_frame(frame, key, version, trailing="keep")
        except DecodeError as e:
            failed += 1
            if e.partial_tree is not None:
                out.write("\n".join(render_lines(frame, e.partial_tree, doc_width, 64)) + "\n")
            out.write(f"!! {what} does not decode: {e} (offset {e.offset}); forwarded unchanged\n")
        except ValueError as e:
            failed += 1
            out.write(f"!! {what} cannot be explained: {e}\n")
        else:
            out.write("\n".join(render_lines(frame, root, doc_width, 64)) + "\n")
    return failed


def _exchange_values(ex):
    """An exchange as JSON values with both messages decoded (explain --capture --json), and
    how many of its frames did not decode."""
    d, failed = exchange_dict(ex), 0
    frames = [("request", ex.request, None, None)]
    if ex.response is not None:
        frames.append(("response", ex.response, ex.api_key, ex.api_version))
    for what, frame, key, version in frames:
        try:
            d[f"{what}_message"] = message_value(
                frame, proxy_lib.explain_frame(frame, key, version, trailing="keep")
            )
        except (DecodeError, ValueError) as e:
            failed += 1
            d[f"{what}_message"] = None
            d[f"{what}_error"] = str(e)
    return d, failed


# ---------------------------------------------------------------- fastkwire stats


def add_stats(subparsers):
    parser = subparsers.add_parser(
        "stats",
        allow_abbrev=False,
        help="per-API summary of a capture (ours, or pcap/pcapng)",
        description="Count, bytes each way, latency p50/p99/max and error codes per API, from a "
        "capture written by `fastkwire proxy --record` or a pcap/pcapng file.",
    )
    parser.add_argument("capture", metavar="FILE")
    parser.add_argument(
        "--port",
        type=_port,
        help="for a pcap: the broker's TCP port (default: every stream that speaks Kafka, "
        "the broker's end told by the handshake)",
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.set_defaults(run=run_stats)
    return parser


def run_stats(args, out=None, err=None):
    out, err = out or sys.stdout, err or sys.stderr
    summary = Summary()
    try:
        for ex in proxy_lib.read_capture(args.capture, args.port, _warner(args.prog, err)):
            summary.add_exchange(ex)
    except (CaptureError, OSError, ImportError) as e:
        print(
            f"{args.prog}: error: {os_error_text(e) if isinstance(e, OSError) else printable(e)}",
            file=err,
        )
        return EXIT_USAGE
    _print_summary(summary, args.json, out)
    return EXIT_OK


# ---------------------------------------------------------------- fastkwire explain --capture


def add_capture_arguments(parser):
    """explain's flags for captures (cli's explain parser calls this)."""
    parser.add_argument(
        "--capture",
        metavar="FILE",
        help="explain every exchange of a capture (`fastkwire proxy --record`, or a pcap/pcapng "
        "from tcpdump); responses are paired with their requests, so no --api/--version; "
        "--api then shows that API only",
    )
    parser.add_argument(
        "--port",
        type=_port,
        help="with --capture of a pcap: the broker's TCP port (default: every stream that "
        "speaks Kafka)",
    )
    parser.add_argument(
        "--client-id",
        action="append",
        default=[],
        metavar="ID",
        help="with --capture: only the requests of this client id",
    )


def _api_name(key):
    from ._explain_apis import api_names

    return None if key is None else api_names().get(key, key)


def run_explain_capture(args, out, err):
    """0 when every frame decoded, 1 when some did not (shown with their errors), 2 for a
    capture that cannot be read."""
    if args.hex or args.file or args.example:
        print("fastkwire explain: --capture takes no frame, --file or --example", file=err)
        return EXIT_USAGE
    failed = count = 0
    held = {}  # "API vN" -> exchanges, of what the filters left out
    try:
        for ex in proxy_lib.read_capture(
            args.capture, args.port, _warner("fastkwire explain", err)
        ):
            held[f"{ex.api} v{ex.api_version}"] = held.get(f"{ex.api} v{ex.api_version}", 0) + 1
            if args.api is not None and ex.api_key != args.api:
                continue
            if args.version is not None and ex.api_version != args.version:
                continue
            if args.client_id and ex.client_id not in args.client_id:
                continue
            count += 1
            if args.json:
                d, bad = _exchange_values(ex)
                failed += bad
                out.write(LINE_ENCODER.encode(d) + "\n")
            else:
                out.write(f"=== {exchange_line(ex)}\n")
                failed += _explain_exchange(ex, out, err, None if args.full else DOC_WIDTH)
    except (CaptureError, OSError, ImportError) as e:
        print(
            f"fastkwire explain: {os_error_text(e) if isinstance(e, OSError) else printable(e)}",
            file=err,
        )
        return EXIT_USAGE
    print(
        f"{count} exchange{'s' if count != 1 else ''}"
        + (f", {failed} frame{'s' if failed != 1 else ''} that do not decode" if failed else ""),
        file=err,
    )
    if not count and held:
        given = [
            f"{flag} {value}"
            for flag, value in (("--api", _api_name(args.api)), ("--version", args.version))
            if value is not None
        ] + [f"--client-id {c!r}" for c in args.client_id]
        shown = ", ".join(f"{k} ({n})" for k, n in sorted(held.items())[:10])
        more = f" and {len(held) - 10} more" if len(held) > 10 else ""
        print(
            f"fastkwire explain: warning: none of the capture's {sum(held.values())} exchanges "
            f"matched {' '.join(given)}; it holds {printable(shown)}{more}",
            file=err,
        )
    return EXIT_UNDECODED if failed else EXIT_OK
