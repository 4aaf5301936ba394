"""Putting the proxy's addresses into what brokers tell clients, so that a client that
bootstraps through the proxy stays on it: Metadata's and DescribeCluster's brokers,
FindCoordinator's coordinator (v0-3) or coordinators (v4+), KIP-951's node_endpoints in
Produce (v10+), Fetch (v16+), ShareFetch and ShareAcknowledge answers (their
current-leader fields name node ids only, which stay), and the KRaft quorum's nodes
(DescribeQuorum v2+'s listeners, the node_endpoints of Vote, BeginQuorumEpoch,
EndQuorumEpoch and FetchSnapshot v1+, UpdateRaftVoter's current leader). Every answer
whose schema has a host and a port is here, but for ACL host patterns and a Streams
group's application endpoints (its members' own servers, not Kafka's). Every other
response is forwarded untouched.

An answer over 1 MiB (DECODE_AT_MOST) is rewritten without building its objects (a Metadata answer of
200,000 partitions would be millions of them; smaller ones are decoded and encoded again,
which the compiled codec does faster): its bytes are walked along its layout's walk plan
(`_walk`) twice. The first walk checks every value as decode does (the same primitives,
so the same DecodeError at the same offset) and calls nothing. The second walks only the
fields that hold addresses, with a copy cursor: every byte range that names no broker
is copied as it came, and each host and port that the mapping changes is written anew
at its field's encoding; a tagged field around one gets its new size. The header
(correlation id, and tagged fields in flexible versions) and any bytes after the message
are kept as they came. Memory is the output (about twice the frame at peak: a bytearray,
then its bytes) and the distinct addresses named, whatever the answer's shape.

`addresses(msg, api_key)` lists the (host, port) a decoded answer names, and
`rewrite_addresses` replaces each through a mapping function: one address for every
broker (`--rewrite-advertised`, a single broker or a cluster behind one address), or a
listener of the proxy's own per broker (`--broker-ports`, `--map`).
"""

import struct
from functools import lru_cache

from .. import RESPONSE_CLASSES, _pure, decode_response
from .. import errors as _e
from .._framing import check_size, response_header_version
from .._rules import byte_view, check_version
from .._wire import K_U16, MAX_MESSAGE, PRIMITIVES
from ..errors import DecodeError, EncodeError
from ._frames import SIZE, uvarint
from ._walk import (
    BYTES,
    COMPACT,
    FIXED,
    FIXED_ARRAY,
    MIN_SIZE,
    NAME,
    NULLABLE,
    STRING,
    STRINGS,
    STRUCT,
    STRUCTS,
    SUB,
    WIDTH,
    plan,
)

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


# Answers up to DECODE_AT_MOST are decoded whole and encoded again by the codec: compiled,
# that is 3-8x faster than walking them here (a Fetch answer of 100 partitions: 22 us
# against 180). Their objects take up to some 50x the frame, as the upstream shapes it (a
# dict entry per unknown tagged field of 4 bytes; a struct with one every 8 bytes: 47x),
# so the limit keeps one answer's within DECODE_BUDGET (at 4 MiB, one took 200 MB). A
# larger answer, which an upstream can send up to the frame cap, is walked: about twice
# the frame at peak.
DECODE_BUDGET = 64 * 1024 * 1024
DECODE_AT_MOST = DECODE_BUDGET // 64


def rewrite_addresses(frame, api_key, version, mapped, max_size=MAX_MESSAGE):
    """(frame, upstream addresses named): the response frame with each broker address
    replaced by `mapped((host, port))` (a (host, port) pair, or None to keep it); the frame
    itself when nothing changes. Raises DecodeError when the frame does not decode (before
    `mapped` is called), EncodeError when a mapped address does not fit its field or the
    frame rewritten would say a size over `max_size` (longer hosts: the proxy's own cap on
    frames, as an upstream's many short hosts could grow it several times). Bytes after
    the message stay after it."""
    rewrite = decode_rewrite if len(frame) <= DECODE_AT_MOST else walk_rewrite
    return rewrite(frame, api_key, version, mapped, max_size)


def _too_large(size, max_size):
    return EncodeError(
        f"the answer with its addresses rewritten takes {size} bytes or more, "
        f"over max_size ({max_size})"
    )


def decode_rewrite(frame, api_key, version, mapped, max_size=MAX_MESSAGE):
    """`rewrite_addresses` by the codec: the whole answer decoded, its addresses replaced,
    and encoded again at its version (the header and the bytes after the message kept)."""
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
    size = len(head) + len(body) + len(extra)
    if size > max_size:
        raise _too_large(size, max_size)
    return SIZE.pack(size) + head + body + extra, named


def walk_rewrite(frame, api_key, version, mapped, max_size=MAX_MESSAGE):
    """`rewrite_addresses` by walking the frame's bytes (the module's docstring): what it
    gives equals `decode_rewrite`'s for every answer the codec writes; an answer that
    decodes but is written otherwise keeps its own bytes where no address changes."""
    cls = RESPONSE_CLASSES.get(api_key)
    if cls is None:
        raise ValueError(f"unknown API key {api_key}")
    check_version(version)
    if not cls.MIN_VERSION <= version <= cls.MAX_VERSION:
        raise _e.bad_version(cls._NAME, version, cls._VERSIONS)
    data = byte_view(frame)
    check_size(data)
    root = plan(cls._LAYOUTS.root(version))
    walk = _Rewrite(data, mapped if api_key in FIRST_VERSION else None, max_size)
    pos = walk.header(response_header_version(cls, version) >= 1)
    marks = []
    walk.struct(root, pos, len(data), marks)
    if not walk.entries:
        return frame, []
    walk.rewrite_root(root, pos, len(data), marks)
    named = list(walk.named)
    if not walk.changed:
        return frame, named
    out = walk.out
    out += walk.view[walk.copied :]
    if len(out) - 4 > max_size:
        raise _too_large(len(out) - 4, max_size)
    out[:4] = SIZE.pack(len(out) - 4)
    return bytes(out), named


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


# ---------------------------------------------------------------- the walk

# What the strict walk does per step: its steps are the plan's, with runs of fixed-width
# values taken together and a broker's host and port marked.
_RUN, _HOST, _PORT = 10, 11, 12


@lru_cache(maxsize=None)
def _checks(p):
    """(steps, tagged steps by tag) of a plan, for the strict walk."""
    steps = []
    host_at, port_at = (p.address[0], p.address[1]) if p.address else (-1, -1)
    for i, step in enumerate(p.steps):
        what = step[0]
        if i == host_at:
            read, write = _reader("string", step), _writer("string", step)
            steps.append((_HOST, step[NAME], read, write, step[COMPACT], step[NULLABLE]))
        elif i == port_at:
            kind = "uint16" if p.address[2] == K_U16 else "int32"
            read, write = getattr(_pure, "r_" + kind), getattr(_pure, "w_" + kind)
            unpack = struct.Struct(">" + PRIMITIVES[kind].fmt)
            steps.append((_PORT, step[NAME], read, write, unpack))
        elif what == FIXED:
            last = steps[-1] if steps else None
            if last is not None and last[0] == _RUN:
                # (_RUN, first name, total width, ((name, width), ...))
                fields = last[3] + ((step[NAME], step[WIDTH]),)
                steps[-1] = (_RUN, fields[0][0], last[2] + step[WIDTH], fields)
            else:
                steps.append((_RUN, step[NAME], step[WIDTH], ((step[NAME], step[WIDTH]),)))
        else:
            steps.append(_check(step))
    tagged = {tag: _check(step) for tag, step in p.tagged.items()}
    return tuple(steps), tagged


def _check(step):
    what = step[0]
    if what == FIXED:
        return (_RUN, step[NAME], step[WIDTH], ((step[NAME], step[WIDTH]),))
    if what == STRING:
        return (STRING, step[NAME], _reader("string", step), False, step[COMPACT], step[NULLABLE])
    if what == STRINGS:
        read = _pure.r_compact_string if step[COMPACT] else _pure.r_string
        return (STRINGS, step[NAME], step, read)
    holds = step[SUB] is not None and step[SUB].holds_addresses
    return (what, step[NAME], step, holds)


def _reader(kind, step):
    return getattr(_pure, "r_" + _fn(kind, step))


def _writer(kind, step):
    return getattr(_pure, "w_" + _fn(kind, step))


def _fn(kind, step):
    return ("compact_" if step[COMPACT] else "") + ("nullable_" if step[NULLABLE] else "") + kind


def _cut(run, pos, end):
    """(name, error) of the first value of a run of fixed-width values that is cut."""
    for name, width in run[3]:
        if end - pos < width:
            return name, _pure.short(pos, width, end)
        pos += width
    raise AssertionError("the run is not cut")


def _holds(check):
    what = check[0]
    return what in (_HOST, _PORT) or (what in (STRUCT, STRUCTS) and check[3])


class _Rewrite:
    """One answer's walk: first checking (`out` None), then rewriting into `out` from the
    copy cursor `copied` (every byte before it is in `out` or replaced there)."""

    __slots__ = (
        "data",
        "view",
        "out",
        "copied",
        "mapped",
        "named",
        "entries",
        "changed",
        "max_size",
        "outer",
    )

    def __init__(self, data, mapped, max_size):
        self.data = data
        self.view = memoryview(data)
        self.out = None
        self.copied = 0
        self.mapped = mapped  # None: the API's addresses are not rewritten
        self.named = {}
        self.entries = 0  # addresses found by the check
        self.changed = False
        self.max_size = max_size
        self.outer = 0  # bytes written in the buffers around `out` (a tagged field's)

    def header(self, tagged):
        """The position after the response header, which is checked."""
        data, end = self.data, len(self.data)
        if end < 8:
            raise _e.truncated(4, 4, end - 4).with_prefix("correlation_id")
        if not tagged:
            return 8
        n, pos = _pure.r_uvarint(data, 8, end)
        last = -1
        for _ in range(n):
            last, size, pos = _pure.r_tag_header(data, pos, end, last)
            pos += size
        return pos

    def struct(self, p, pos, end, marks=None):
        """Walks one struct from `pos`; the position after it. `marks` (the root, when
        checking) gets where each step starts, then where its tagged fields do."""
        data = self.data
        steps, tagged = _checks(p)
        f = ""
        host = None
        try:
            for step in steps:
                if marks is not None:
                    marks.append(pos)
                what = step[0]
                f = step[1]
                if what == _RUN:
                    width = step[2]
                    if end - pos < width:
                        f, cut = _cut(step, pos, end)
                        raise cut
                    pos += width
                elif what == FIXED_ARRAY:
                    s = step[2]
                    w = s[WIDTH]
                    if s[COMPACT] and pos < end and 0 < (b := data[pos]) < 0x80:
                        if (b - 1) * w <= end - pos - 1:
                            pos += 1 + (b - 1) * w
                            continue
                    n, pos = _pure.r_array_len(data, pos, end, s[COMPACT], s[NULLABLE], w)
                    if n > 0:
                        pos += n * w
                elif what == STRING or what == _HOST:
                    start = pos
                    # A compact string of a one-byte length, all there, or a null one: read
                    # inline (as the engines do); anything else by the codec's reader.
                    if step[4] and pos < end and 0 < (b := data[pos]) < 0x80 and pos + b <= end:
                        try:
                            text = data[pos + 1 : pos + b].decode()
                            pos += b
                        except UnicodeDecodeError:
                            text, pos = step[2](data, pos, end)
                    elif step[5] and step[4] and pos < end and data[pos] == 0:
                        text, pos = None, pos + 1
                    else:
                        text, pos = step[2](data, pos, end)
                    if what == _HOST:
                        host, hstep, hstart, hend = text, step, start, pos
                elif what == _PORT:
                    start = pos
                    unpack = step[4]
                    if end - pos < unpack.size:
                        step[2](data, pos, end)  # raises the codec's error
                    port = unpack.unpack_from(data, pos)[0]
                    pos += unpack.size
                    if host or port > 0:
                        if self.out is None:
                            self.entries += self.mapped is not None
                        else:
                            self.address(host, port, hstep, hstart, hend, step, start, pos)
                else:
                    pos = self.value(step, pos, end)
            if p.flexible:
                f = ""
                if marks is not None:
                    marks.append(pos)
                if pos < end and data[pos] == 0:  # no tagged fields: the common case
                    pos += 1
                else:
                    pos = self.tags(tagged, pos, end)
        except (DecodeError, EncodeError) as x:
            raise x.with_prefix(f) from None
        return pos

    def value(self, step, pos, end):
        """One value of a step other than a run, a host or a port; the position after it."""
        data, what = self.data, step[0]
        if what == STRING:
            return step[2](data, pos, end)[1]
        if what == _RUN:
            if end - pos < step[2]:
                raise _pure.short(pos, step[2], end)
            return pos + step[2]
        s = step[2]
        if what == BYTES:
            return _pure.r_records_view(data, pos, end, s[COMPACT], s[NULLABLE])[1]
        if what == STRUCT:
            if s[NULLABLE]:
                marker, pos = _pure.r_marker(data, pos, end)
                if marker < 0:
                    return pos
            return self.struct(s[SUB], pos, end)
        n, pos = _pure.r_array_len(data, pos, end, s[COMPACT], s[NULLABLE], s[MIN_SIZE])
        if what == FIXED_ARRAY:
            return pos + max(n, 0) * s[WIDTH]
        i = 0
        try:
            if what == STRINGS:
                read = step[3]
                for i in range(n):
                    pos = read(data, pos, end)[1]
            else:
                sub = s[SUB]
                for i in range(n):
                    pos = self.struct(sub, pos, end)
        except (DecodeError, EncodeError) as x:
            raise x.with_prefix(f"[{i}]") from None
        return pos

    def tags(self, tagged, pos, end):
        """A tagged-field section; the position after it."""
        data = self.data
        n, pos = _pure.r_uvarint(data, pos, end)
        last = -1
        for _ in range(n):
            start = pos
            last, size, pos = _pure.r_tag_header(data, pos, end, last)
            tend = pos + size
            step = tagged.get(last)
            if step is not None:
                try:
                    if self.out is not None and _holds(step):
                        self.rewrite_tagged(step, start, pos, tend)
                    elif self.value(step, pos, tend) != tend:
                        raise _e.tag_size_mismatch(pos, last)
                except (DecodeError, EncodeError) as x:
                    raise x.with_prefix(step[1]) from None
            pos = tend
        return pos

    def rewrite_tagged(self, step, start, pos, tend):
        """A tagged field holding addresses, rewritten into a buffer of its own: its size
        comes before it."""
        out = self.out
        size_at = _pure.r_uvarint(self.data, start, tend)[1]
        out += self.view[self.copied : size_at]
        self.out, self.copied = bytearray(), pos
        self.outer += len(out)
        self.value(step, pos, tend)
        self.outer -= len(out)
        inner, self.out = self.out, out
        inner += self.view[self.copied : tend]
        if len(inner) == tend - pos:
            out += self.view[size_at:pos]
        else:
            _pure.w_uvarint(out, len(inner))
        out += inner
        self.copied = tend

    def address(self, host, port, hstep, hstart, hend, pstep, pstart, pend):
        """A broker's address, told to the mapping and, when it maps elsewhere, written
        anew."""
        address = (host, port)
        self.named[address] = None
        new = self.mapped(address)
        if new is None or address == tuple(new):
            return
        new_host, new_port = new
        out, view = self.out, self.view
        out += view[self.copied : hstart]
        try:
            hstep[3](out, new_host)
        except EncodeError as x:
            raise x.with_prefix("host") from None
        out += view[hend:pstart]
        pstep[3](out, new_port)
        self.copied = pend
        self.changed = True
        # What is written is the start of the answer: past max_size, the rest cannot make
        # it fit, and the walk stops there (the output takes little more than max_size).
        written = self.outer + len(out) - 4
        if written > self.max_size:
            raise _too_large(written, self.max_size)

    def rewrite_root(self, p, pos, end, marks):
        """The second walk: the root's steps that hold addresses, from where the check
        found them; the others are copied by the cursor."""
        self.out = bytearray(4)  # the size, written last
        self.copied = 4
        steps, tagged = _checks(p)
        if p.address is not None:  # FindCoordinator v0-3: a small answer, walked whole
            self.struct(p, pos, end)
            return
        for step, at in zip(steps, marks):
            if _holds(step):
                try:
                    self.value(step, at, end)
                except (DecodeError, EncodeError) as x:
                    raise x.with_prefix(step[1]) from None
        if p.flexible and any(_holds(s) for s in tagged.values()):
            self.tags(tagged, marks[len(steps)], end)
