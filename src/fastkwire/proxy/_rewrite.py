"""Putting the proxy's address into the brokers' advertised addresses: Metadata's brokers
and FindCoordinator's coordinator, so that a client that bootstraps through the proxy
stays on it. The response is decoded and re-encoded by the codec at its own version and
correlation id; every other response is forwarded untouched.

Every broker becomes the proxy's one address, so this suits a single upstream broker (or
a cluster behind one address): a client of a larger cluster would send everything to the
broker the proxy forwards to.
"""

from .. import decode_response, encode_response
from ._frames import SIZE

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
    new = encode_response(msg, version, header.correlation_id)
    if extra:
        new = SIZE.pack(len(new) - 4 + len(extra)) + new[4:] + extra
    return new
