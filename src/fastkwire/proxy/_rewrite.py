"""Putting the proxy's addresses into what brokers tell clients, so that a client that
bootstraps through the proxy stays on it: Metadata's and DescribeCluster's brokers,
FindCoordinator's coordinator (v0-3) or coordinators (v4+), KIP-951's node_endpoints in
Produce (v10+), Fetch (v16+), ShareFetch and ShareAcknowledge answers (their
current-leader fields name node ids only, which stay), and the KRaft quorum's nodes
(DescribeQuorum v2+'s listeners, the node_endpoints of Vote, BeginQuorumEpoch,
EndQuorumEpoch and FetchSnapshot v1+, UpdateRaftVoter's current leader). Every answer
whose schema has a host and a port is here, but for ACL host patterns and a Streams
group's application endpoints (its members' own servers, not Kafka's). The response's body is decoded and re-encoded by the codec at
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
VOTE, BEGIN_QUORUM_EPOCH, END_QUORUM_EPOCH, DESCRIBE_QUORUM = 52, 53, 54, 55
FETCH_SNAPSHOT, DESCRIBE_CLUSTER, SHARE_FETCH, SHARE_ACKNOWLEDGE = 59, 60, 78, 79
UPDATE_RAFT_VOTER = 82
# The answers that name brokers, from the first version that can.
FIRST_VERSION = {
    PRODUCE: 10,
    FETCH: 16,
    METADATA: 0,
    FIND_COORDINATOR: 0,
    VOTE: 1,
    BEGIN_QUORUM_EPOCH: 1,
    END_QUORUM_EPOCH: 1,
    DESCRIBE_QUORUM: 2,
    FETCH_SNAPSHOT: 1,
    DESCRIBE_CLUSTER: 0,
    SHARE_FETCH: 0,
    SHARE_ACKNOWLEDGE: 0,
    UPDATE_RAFT_VOTER: 0,
}
REWRITTEN = tuple(FIRST_VERSION)
# Answers that list every broker of the cluster (not only some of them).
FULL_LISTS = (METADATA, DESCRIBE_CLUSTER)


API_VERSIONS = 18


def names_brokers(api_key, version):
    first = FIRST_VERSION.get(api_key)
    return first is not None and version >= first


def rewritten(api_key, version):
    """Whether a proxy that keeps clients on itself rewrites this answer: those naming
    brokers, and ApiVersions (see `cap_versions`)."""
    return api_key == API_VERSIONS or names_brokers(api_key, version)


def cap_versions(frame, version):
    """The ApiVersions answer frame with each API that names brokers offered up to the
    codec's own last version at most, so that a client never picks one whose answers the
    proxy cannot read (and would have to refuse: it never forwards them unread); the frame
    itself when nothing changes, or when it does not decode (it names no broker)."""
    try:
        header, msg, extra = decode_response(frame, API_VERSIONS, version, trailing="keep")
    except ValueError:  # DecodeError is one: a v0 error answer to a newer request, say
        return frame
    changed = False
    for entry in msg.api_keys or ():
        if entry.api_key in FIRST_VERSION:
            top = RESPONSE_CLASSES[entry.api_key].MAX_VERSION
            if entry.max_version > top:
                entry.max_version = top
                changed = True
    if not changed:
        return frame
    body = msg.encode(version)
    head = bytes(frame[4 : header_end(frame, API_VERSIONS, version)])
    return SIZE.pack(len(head) + len(body) + len(extra)) + head + body + extra


def _entries(msg, api_key):
    """The structs of a decoded answer that carry a node's host and port."""
    if api_key in (METADATA, DESCRIBE_CLUSTER):
        found = msg.brokers or ()
    elif api_key == FIND_COORDINATOR:
        found = [msg] if not msg.coordinators else msg.coordinators
    elif api_key == DESCRIBE_QUORUM:
        found = [lst for node in msg.nodes or () for lst in node.listeners or ()]
    elif api_key == UPDATE_RAFT_VOTER:
        found = [msg.current_leader] if msg.current_leader is not None else []
    else:
        found = getattr(msg, "node_endpoints", None) or ()
    # Whatever the error code or node id says: Kafka's Java consumer connects to the
    # coordinator a FindCoordinator answer without an error names, node -1 or not. Only
    # Kafka's "none" (no host, port -1 or 0) names nothing a client could connect to.
    return [e for e in found if e.host or e.port > 0]


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
