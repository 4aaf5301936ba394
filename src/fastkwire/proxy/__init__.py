"""fastkwire.proxy: see, record and perturb what Kafka clients and brokers say to each other.

    async with Proxy("broker:9092", ("127.0.0.1", 19092), on_exchange=print_it) as proxy:
        await proxy.serve_forever()

    with BackgroundProxy("127.0.0.1:9092", rules=[Rule(api="Heartbeat",
                         error="REBALANCE_IN_PROGRESS", times=1)]) as proxy:
        run_client(proxy.bootstrap)        # blocking code, a test suite
        proxy.exchanges()

Frames are forwarded byte for byte, whether they decode or not (only `rewrite_advertised`
changes Metadata and FindCoordinator answers, and fault rules act on what they match).
Each `Exchange` pairs a request with its response by correlation id; decoding it
(`error_codes()`, `decode_error()`) is for display and happens after forwarding.
Captures: `CaptureWriter` (JSON lines), `PcapWriter` (needs dpkt, the pcap extra), and
`read_capture(path, port)` for either, or a pcap/pcapng from tcpdump. `fastkwire proxy` is
the command line over this library; docs/proxy.md has the details.
"""

import importlib

# Each name's submodule, imported on first use (PEP 562): the broker takes the proxy's caps
# and frame reading without its captures, pcap files and explanations.
_SUBMODULES = {
    "CaptureError": "_capture",
    "CaptureWarning": "_capture",
    "CaptureWriter": "_capture",
    "read_jsonl": "_capture",
    "Exchange": "_exchange",
    "ProxyEvent": "_exchange",
    "Faults": "_faults",
    "Rule": "_faults",
    "RuleError": "_faults",
    "load_rules": "_faults",
    "read_rules_file": "_faults",
    "PcapWriter": "_pcap",
    "read_pcap": "_pcap",
    "capture_kind": "_read",
    "read_capture": "_read",
    "explain_frame": "_lenient",
    "event_json": "_format",
    "event_line": "_format",
    "exchange_dict": "_format",
    "exchange_json": "_format",
    "exchange_line": "_format",
    "DEFAULT_FRAME_TIMEOUT": "_server",
    "DEFAULT_MAX_FRAME_BYTES": "_server",
    "DEFAULT_MAX_IN_FLIGHT": "_server",
    "DEFAULT_MAX_PENDING_BYTES": "_server",
    "DEFAULT_MAX_CONNECTIONS": "_server",
    "DEFAULT_MAX_BUFFERED_BYTES": "_server",
    "DEFAULT_MAX_BROKERS": "_server",
    "DEFAULT_BROKER_PORT_HOLD": "_server",
    "BackgroundProxy": "_server",
    "Proxy": "_server",
    "parse_address": "_server",
    "QueuedSink": "_sink",
    "Summary": "_stats",
}


def __getattr__(name):
    module = _SUBMODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_SUBMODULES))


__all__ = [
    "Proxy",
    "BackgroundProxy",
    "Exchange",
    "ProxyEvent",
    "Rule",
    "RuleError",
    "Faults",
    "load_rules",
    "read_rules_file",
    "Summary",
    "QueuedSink",
    "CaptureWriter",
    "CaptureError",
    "CaptureWarning",
    "PcapWriter",
    "read_capture",
    "read_jsonl",
    "read_pcap",
    "capture_kind",
    "explain_frame",
    "exchange_line",
    "exchange_json",
    "exchange_dict",
    "event_line",
    "event_json",
    "parse_address",
    "DEFAULT_MAX_FRAME_BYTES",
    "DEFAULT_MAX_PENDING_BYTES",
    "DEFAULT_MAX_IN_FLIGHT",
    "DEFAULT_FRAME_TIMEOUT",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_BUFFERED_BYTES",
    "DEFAULT_MAX_BROKERS",
    "DEFAULT_BROKER_PORT_HOLD",
]
