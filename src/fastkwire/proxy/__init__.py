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

from ._capture import CaptureError, CaptureWarning, CaptureWriter, read_jsonl
from ._exchange import Exchange, ProxyEvent
from ._faults import Faults, Rule, RuleError, load_rules, read_rules_file
from ._pcap import PcapWriter, read_pcap
from ._read import capture_kind, read_capture
from ._lenient import explain_frame
from ._format import event_json, event_line, exchange_dict, exchange_json, exchange_line
from ._server import (
    DEFAULT_FRAME_TIMEOUT,
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_MAX_IN_FLIGHT,
    DEFAULT_MAX_PENDING_BYTES,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_BUFFERED_BYTES,
    DEFAULT_MAX_BROKERS,
    DEFAULT_BROKER_PORT_HOLD,
    BackgroundProxy,
    Proxy,
    parse_address,
)
from ._sink import QueuedSink
from ._stats import Summary

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
