"""Putting the proxy's address into the brokers' advertised addresses: Metadata's brokers
and FindCoordinator's coordinator, so that a client that bootstraps through the proxy
stays on it. The response's body is decoded and re-encoded by the codec at its own
version; its header (correlation id, and tagged fields in flexible versions) and any bytes
after the message are kept as they came. Every other response is forwarded untouched.

Every broker becomes the proxy's one address, so this suits a single upstream broker (or
a cluster behind one address): a client of a larger cluster would send everything to the
broker the proxy forwards to.
"""

from .. import RESPONSE_CLASSES, decode_response
from .._framing import response_header_version
from ._frames import SIZE, uvarint

METADATA, FIND_COORDINATOR = 3, 10
REWRITTEN = (METADATA, FIND_COORDINATOR)


def rewrite_advertised(frame, api_key, version, host, port):
    """The response frame with every advertised broker address set to host:port; the frame
    itself when nothing changes. Raises DecodeError when the frame does not decode. Bytes
    after the message stay after it."""
    header, msg, extra = decode_response(frame, api_key, version, records="view", trailing="keep")
    changed = False
    if api_key == METADATA:
        for broker in msg.brokers or ():
            if (broker.host, broker.port) != (host, port):
                broker.host, broker.port = host, port
                changed = True
    else:
        coordinators = [msg] if not msg.coordinators else msg.coordinators
        for c in coordinators:
            # Only a coordinator that was found: an error answer has no address to replace.
            if c.error_code == 0 and c.node_id >= 0 and (c.host, c.port) != (host, port):
                c.host, c.port = host, port
                changed = True
    if not changed:
        return frame
    body = msg.encode(version)
    head = bytes(frame[4 : header_end(frame, api_key, version)])
    return SIZE.pack(len(head) + len(body) + len(extra)) + head + body + extra


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
