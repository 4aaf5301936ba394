"""Putting the proxy's addresses into what brokers tell clients, so that a client that
bootstraps through the proxy stays on it: Metadata's and DescribeCluster's brokers,
FindCoordinator's coordinator (v0-3) or coordinators (v4+), and KIP-951's node_endpoints
in Produce (v10+), Fetch (v16+) and ShareFetch answers (their current-leader fields name
node ids only, which stay). The response's body is decoded and re-encoded by the codec at
its own version; its header (correlation id, and tagged fields in flexible versions) and
any bytes after the message are kept as they came. Every other response is forwarded
untouched.

`addresses(msg, api_key)` lists the (host, port) a decoded answer names, and
`rewrite_addresses` replaces each through a mapping function: one address for every
broker (`--rewrite-advertised`, a single broker or a cluster behind one address), or a
listener of the proxy's own per broker (`--broker-ports`, `--map`).
"""

from .. import RESPONSE_CLASSES, decode_response
from .._framing import response_header_version
from ._frames import SIZE, uvarint

PRODUCE, FETCH, METADATA, FIND_COORDINATOR = 0, 1, 3, 10
DESCRIBE_CLUSTER, SHARE_FETCH = 60, 78
# The answers that name brokers, from the first version that can.
FIRST_VERSION = {
    PRODUCE: 10,
    FETCH: 16,
    METADATA: 0,
    FIND_COORDINATOR: 0,
    DESCRIBE_CLUSTER: 0,
    SHARE_FETCH: 0,
}
REWRITTEN = tuple(FIRST_VERSION)
# Answers that list every broker of the cluster (not only some of them).
FULL_LISTS = (METADATA, DESCRIBE_CLUSTER)


def names_brokers(api_key, version):
    first = FIRST_VERSION.get(api_key)
    return first is not None and version >= first


def _entries(msg, api_key):
    """The structs of a decoded answer that carry a broker's host and port."""
    if api_key in (METADATA, DESCRIBE_CLUSTER):
        return list(msg.brokers or ())
    if api_key == FIND_COORDINATOR:
        found = [msg] if not msg.coordinators else msg.coordinators
        # Only a coordinator that was found: an error answer has no address to replace.
        return [c for c in found if c.error_code == 0 and c.node_id >= 0]
    return list(getattr(msg, "node_endpoints", None) or ())


def addresses(msg, api_key):
    """The (host, port) of every broker a decoded answer names, in order, once each."""
    return list(dict.fromkeys((e.host, e.port) for e in _entries(msg, api_key)))


def rewrite_addresses(frame, api_key, version, mapped):
    """(frame, upstream addresses named): the response frame with each broker address
    replaced by `mapped((host, port))` (a (host, port) pair, or None to keep it); the frame
    itself when nothing changes. Raises DecodeError when the frame does not decode. Bytes
    after the message stay after it."""
    header, msg, extra = decode_response(frame, api_key, version, records="view", trailing="keep")
    named = addresses(msg, api_key)
    changed = False
    for e in _entries(msg, api_key):
        new = mapped((e.host, e.port))
        if new is not None and (e.host, e.port) != tuple(new):
            e.host, e.port = new
            changed = True
    if not changed:
        return frame, named
    body = msg.encode(version)
    head = bytes(frame[4 : header_end(frame, api_key, version)])
    return SIZE.pack(len(head) + len(body) + len(extra)) + head + body + extra, named


def rewrite_advertised(frame, api_key, version, host, port):
    """The response frame with every advertised broker address set to host:port; the frame
    itself when nothing changes."""
    return rewrite_addresses(frame, api_key, version, lambda _: (host, port))[0]


def header_end(frame, api_key, version):
    """The offset just after a response frame's header (correlation id, then tagged fields
    in header v1), which has decoded."""
    pos = 8
    if response_header_version(RESPONSE_CLASSES[api_key], version) >= 1:
        count, pos = uvarint(frame, pos)
        for _ in range(count):
            _, pos = uvarint(frame, pos)
            size, pos = uvarint(frame, pos)
            pos += size
    return pos
