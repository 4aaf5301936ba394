"""pcap files: the proxy's traffic written as one (`--pcap`), and pcap/pcapng files (tcpdump,
Wireshark) read back as exchanges.

Both use dpkt (the `pcap` extra): a pure-Python library, maintained for two decades, that
reads pcap and pcapng and builds and parses Ethernet, Linux cooked (SLL, SLL2), BSD
loopback, IPv4, IPv6 and TCP. That is all this needs; scapy is far larger and slower to
import, and pcapng-only readers cannot write.

Writing: each client connection becomes one TCP stream from the client's address to the
upstream's, opened with a handshake; a request is sent at the time it arrived and its
response at that time plus the latency, in segments of at most SEGMENT bytes, with
sequence numbers that count every byte. An acks=0 Produce request is written when it was
sent, so it can come before requests still awaiting answers on its connection.

Reading: TCP segments to or from `port` (or of every stream that speaks Kafka) are put
back into each direction's byte stream by sequence number (retransmissions and overlaps
trimmed, segments out of order held until the gap is filled), split into frames, and
responses paired with the requests of their stream by correlation id (a dict, so pairing
is O(1) per response). A direction whose capture began mid-frame (its first four bytes are
no plausible size prefix) cannot be put back in step reliably: its frames stop there, with
a warning, as for a gap that never fills and a file cut short.
"""

import collections
import heapq
import ipaddress
import struct
import warnings

from .._explain_apis import api_names
from ._capture import CaptureError, CaptureWarning
from ._exchange import Exchange
from ._frames import produce_acks, request_header, response_correlation_id

try:
    import dpkt
except ImportError:  # the pcap extra is optional
    dpkt = None

SEGMENT = 32768  # payload bytes per written TCP segment (fits an IP packet)
SNAPLEN = 65535
MAX_FRAME = 128 * 1024 * 1024  # a larger size prefix in a capture: not the start of a frame
MAX_GAP_SEGMENTS = 10_000  # out-of-order segments held per direction before giving up
MAX_GAP_BYTES = 64 * 1024 * 1024  # and their bytes
MAX_RECORD = 16 * 1024 * 1024  # a pcap record claiming more is not one (snaplens are <= 256 KiB)
MAX_WARNINGS = 20
# pcap's magic numbers: microseconds and nanoseconds, little- and big-endian.
_PCAP_MAGICS = (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
_SERVER_ISN, _CLIENT_ISN = 1_000_000, 2_000_000


def _need_dpkt():
    if dpkt is None:
        raise ImportError("pcap files need dpkt: pip install 'fastkwire[pcap]'")


def _split(address):
    host, _, port = address.rpartition(":")
    return ipaddress.ip_address(host.strip("[]")), int(port)


class _Stream:
    __slots__ = ("client", "server", "seq", "opened")

    def __init__(self, client, server):
        self.client, self.server = client, server
        self.seq = {
            True: _CLIENT_ISN,
            False: _SERVER_ISN,
        }  # next sequence number, by "from the client"
        self.opened = False


def _server_address(upstream):
    if isinstance(upstream, str):
        host, _, port = upstream.rpartition(":")
        upstream = (host.strip("[]"), int(port) if port.isdigit() else 0)
    try:
        return (ipaddress.ip_address(upstream[0]), upstream[1])
    except ValueError:  # a host name: the capture shows a documentation address instead
        return (ipaddress.ip_address("192.0.2.1"), upstream[1])


class PcapWriter:
    """Writes exchanges as TCP packets between each client and `upstream` ((host, port))."""

    def __init__(self, path, upstream):
        _need_dpkt()
        self.server = _server_address(upstream)
        self._file = open(path, "wb")
        self._pcap = dpkt.pcap.Writer(
            self._file, snaplen=SNAPLEN, linktype=dpkt.pcap.DLT_EN10MB, nano=True
        )
        self._streams = {}

    def _packet(self, stream, from_client, flags, payload, ts):
        src, dst = (stream.client, stream.server) if from_client else (stream.server, stream.client)
        seq = stream.seq[from_client]
        ack = stream.seq[not from_client]
        tcp = dpkt.tcp.TCP(
            sport=src[1],
            dport=dst[1],
            seq=seq & 0xFFFFFFFF,
            ack=ack & 0xFFFFFFFF,
            flags=flags,
            win=65535,
            data=payload,
        )
        if src[0].version == 4 and dst[0].version == 4:
            ip = dpkt.ip.IP(src=src[0].packed, dst=dst[0].packed, p=dpkt.ip.IP_PROTO_TCP, data=tcp)
            ip.len = len(ip)  # dpkt fills checksums when packed
            eth_type = dpkt.ethernet.ETH_TYPE_IP
        else:
            s, d = (
                a if a.version == 6 else ipaddress.IPv6Address(f"::ffff:{a}")
                for a in (src[0], dst[0])
            )
            ip = dpkt.ip6.IP6(
                src=s.packed, dst=d.packed, nxt=dpkt.ip.IP_PROTO_TCP, hlim=64, data=tcp
            )
            ip.plen = len(tcp)
            eth_type = dpkt.ethernet.ETH_TYPE_IP6
        eth = dpkt.ethernet.Ethernet(
            src=b"\x02\x00\x00\x00\x00\x01", dst=b"\x02\x00\x00\x00\x00\x02", type=eth_type, data=ip
        )
        self._pcap.writepkt(bytes(eth), ts)
        stream.seq[from_client] += len(payload) + (
            1 if flags & (dpkt.tcp.TH_SYN | dpkt.tcp.TH_FIN) else 0
        )

    def _stream(self, ex, ts):
        stream = self._streams.get(ex.conn)
        if stream is None:
            try:
                client = _split(ex.client)
            except ValueError:
                client = (ipaddress.ip_address("192.0.2.2"), 40000 + ex.conn % 20000)
            # Each broker's stream goes to that broker's address (the proxy maps several).
            broker = getattr(ex, "broker", None)
            server = self.server if broker is None else _server_address(broker)
            stream = self._streams[ex.conn] = _Stream(client, server)
            t = dpkt.tcp
            self._packet(stream, True, t.TH_SYN, b"", ts)
            self._packet(stream, False, t.TH_SYN | t.TH_ACK, b"", ts)
            self._packet(stream, True, t.TH_ACK, b"", ts)
        return stream

    def _send(self, stream, from_client, data, ts):
        flags = dpkt.tcp.TH_ACK | dpkt.tcp.TH_PUSH
        for i in range(0, len(data), SEGMENT):
            self._packet(stream, from_client, flags, data[i : i + SEGMENT], ts)

    def write(self, ex):
        stream = self._stream(ex, ex.time)
        self._send(stream, True, ex.request, ex.time)
        if ex.response is not None:
            self._send(stream, False, ex.response, ex.time + (ex.latency_ms or 0) / 1000)

    def write_unpaired(self, event):
        """A frame forwarded without being paired (a ProxyEvent with a frame), in its place
        in its connection's stream."""
        stream = self._stream(event, event.time)
        self._send(stream, bool(event.from_client), event.frame, event.time)

    def flush(self):
        self._file.flush()

    def close(self):
        self._file.close()


# ---------------------------------------------------------------- reading


def _ip_of(link, buf):
    """The IP or IP6 packet in a link-layer frame, or None."""
    try:
        if link == dpkt.pcap.DLT_EN10MB:
            pkt = dpkt.ethernet.Ethernet(buf).data
        elif link == dpkt.pcap.DLT_LINUX_SLL:
            pkt = dpkt.sll.SLL(buf).data
        elif link == 276:  # LINUX_SLL2 (tcpdump -i any, newer libpcap)
            pkt = dpkt.sll2.SLL2(buf).data
        elif link in (dpkt.pcap.DLT_NULL, dpkt.pcap.DLT_LOOP):
            pkt = dpkt.loopback.Loopback(buf).data
        elif link in (dpkt.pcap.DLT_RAW, 101, 14):
            pkt = dpkt.ip.IP(buf) if buf[:1] and buf[0] >> 4 == 4 else dpkt.ip6.IP6(buf)
        else:
            return None
    except (dpkt.UnpackError, IndexError, struct.error):
        return None
    return pkt if isinstance(pkt, (dpkt.ip.IP, dpkt.ip6.IP6)) else None


class _Direction:
    """One direction of a TCP stream, put back in order by sequence number. Positions are
    absolute byte offsets in the direction's stream (sequence numbers wrap; these do not)."""

    __slots__ = (
        "next_seq",
        "pos",
        "held",
        "starts",
        "held_bytes",
        "data",
        "frames",
        "broken",
        "dropped",
        "first",
    )

    def __init__(self):
        self.next_seq = None  # the sequence number of the byte at `pos`
        self.pos = 0
        self.held = {}  # start -> payload: segments past a gap
        self.starts = []  # a heap of the held segments' starts
        self.held_bytes = 0
        self.data = bytearray()
        self.frames = []  # (frame, timestamp of its last byte)
        self.broken = None  # why frames stopped being read
        self.dropped = 0  # segments past the gap limit, left out
        self.first = None  # the stream offset of data[0]

    def add(self, seq, payload, syn, ts):
        if syn:
            self.next_seq = (seq + 1) & 0xFFFFFFFF
            return
        if not payload or self.broken:
            return
        if self.next_seq is None:  # the capture began after the handshake
            self.next_seq = seq
        rel = (seq - self.next_seq) & 0xFFFFFFFF
        start = self.pos + (rel - 0x100000000 if rel >= 0x80000000 else rel)
        if start + len(payload) <= self.pos:
            return  # a retransmission of what we have
        if start < self.pos:  # overlaps what we have: keep only what is new
            payload, start = payload[self.pos - start :], self.pos
        if start > self.pos:
            old = self.held.get(start)
            if old is not None:
                if len(old) < len(payload):
                    self.held[start] = payload
                    self.held_bytes += len(payload) - len(old)
                return
            if len(self.held) >= MAX_GAP_SEGMENTS or self.held_bytes > MAX_GAP_BYTES:
                self.dropped += 1
                return
            self.held[start] = payload
            self.held_bytes += len(payload)
            heapq.heappush(self.starts, start)
            return
        self._take(payload, ts)
        # Held segments that now start at or before the end: overlapping ones are trimmed.
        while self.starts and self.starts[0] <= self.pos and not self.broken:
            at = heapq.heappop(self.starts)
            held = self.held.pop(at)
            self.held_bytes -= len(held)
            if at + len(held) > self.pos:
                self._take(held[self.pos - at :], ts)

    def _take(self, payload, ts):
        if self.first is None:
            self.first = self.pos
        self.data += payload
        self.pos += len(payload)
        self.next_seq = (self.next_seq + len(payload)) & 0xFFFFFFFF
        while len(self.data) >= 4:
            size = struct.unpack_from(">i", self.data)[0]
            if not 0 <= size <= MAX_FRAME:
                self.broken = (
                    f"a size prefix of {size} at stream offset {self.pos - len(self.data)} "
                    "is not the start of a frame"
                )
                return
            if len(self.data) < 4 + size:
                return
            self.frames.append((bytes(self.data[: 4 + size]), ts))
            del self.data[: 4 + size]

    def problems(self):
        """What was not read, as text (empty when everything was)."""
        found = []
        if self.broken:
            found.append(f"{self.broken}: its frames stop there")
        if self.dropped:
            found.append(
                f"{self.dropped} segment{'s' if self.dropped != 1 else ''} past a gap left out "
                f"(at most {MAX_GAP_SEGMENTS} segments or {MAX_GAP_BYTES} bytes are held)"
            )
        if self.held:
            found.append(
                f"the bytes at stream offset {self.pos} never came: {len(self.held)} segment"
                f"{'s' if len(self.held) != 1 else ''} after the gap not read"
            )
        elif self.data and not self.broken:
            found.append(f"it ends {len(self.data)} bytes into a frame")
        return found


class _Connection:
    """Both directions of one TCP connection, and which end is the broker (from the
    handshake, when captured)."""

    __slots__ = ("directions", "server")

    def __init__(self):
        self.directions = {}  # sender (ip, port) -> _Direction
        self.server = None


def _records(f, path, warn):
    """(link type, time, packet bytes) of a pcap file's records; a file cut short ends with
    a warning after its last whole record."""
    head = f.read(24)
    if len(head) < 24:
        raise CaptureError(f"{path}: not a readable pcap file: its header is cut short")
    if head[:4] not in _PCAP_MAGICS:
        raise CaptureError(f"{path}: not a pcap or pcapng file (it starts {head[:4].hex()})")
    endian = "<" if head[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    divisor = 1e9 if head[:4] in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d") else 1e6
    link = struct.unpack(endian + "I", head[20:24])[0]
    record = struct.Struct(endian + "IIII")
    count, offset = 0, 24
    while True:
        rec = f.read(16)
        if not rec:
            return
        if len(rec) < 16:
            warn(_cut(path, count, offset, "inside a record header"))
            return
        sec, frac, caplen, _ = record.unpack(rec)
        if caplen > MAX_RECORD:
            warn(
                f"{path}: the record at offset {offset} claims {caplen} bytes "
                f"(more than {MAX_RECORD}): not a pcap record; the {count} before it were read"
            )
            return
        buf = f.read(caplen)
        if len(buf) < caplen:
            warn(_cut(path, count, offset, f"inside a record ({len(buf)} of its {caplen} bytes)"))
            return
        count += 1
        offset += 16 + caplen
        yield link, sec + frac / divisor, buf


def _cut(path, count, offset, where):
    return (
        f"{path}: the file is cut short {where} at offset {offset}: the {count} whole "
        f"record{'s' if count != 1 else ''} before it were read"
    )


def _packets(path, warn):
    with open(path, "rb") as f:
        head = f.read(4)
        f.seek(0)
        if head != b"\x0a\x0d\x0d\x0a":
            yield from _records(f, path, warn)
            return
        count = 0
        try:
            reader = dpkt.pcapng.Reader(f)
            link = reader.datalink()
        except (ValueError, dpkt.UnpackError, struct.error) as e:
            raise CaptureError(f"{path}: not a readable pcapng file: {e}") from None
        try:
            for ts, buf in reader:
                count += 1
                yield link, float(ts), buf
        except (ValueError, dpkt.UnpackError, struct.error) as e:
            warn(
                f"{path}: cannot read past block {count + 1} ({str(e) or 'cut short'}): the {count} whole "
                f"packet{'s' if count != 1 else ''} before it were read"
            )


def _plausible_request(frame):
    header = request_header(frame)
    return header is not None and header.api_key in api_names() and 0 <= header.api_version < 256


def read_pcap(path, port=None, warn=None):
    """The exchanges of a pcap/pcapng file's TCP streams to `port` (None: every stream whose
    first request is Kafka's, the broker's end told by the handshake, else the lower port),
    by request time. What cannot be read (a file cut short, a broken stream, segments past
    the gap limit, responses that answer no request) is told to `warn(text)`, by default a
    CaptureWarning. A file with TCP streams but no exchange in them is a CaptureError that
    names the ports it holds."""
    _need_dpkt()
    warn = warn or _warn
    streams = {}  # the two ends, in order -> _Connection
    ports = collections.Counter()  # every TCP stream's ports, for an error naming them
    for link, ts, buf in _packets(path, warn):
        ip = _ip_of(link, buf)
        if ip is None or not isinstance(ip.data, dpkt.tcp.TCP):
            continue
        tcp = ip.data
        src, dst = (ip.src, tcp.sport), (ip.dst, tcp.dport)
        key = (src, dst) if src < dst else (dst, src)
        stream = streams.get(key)
        if stream is None:
            stream = streams[key] = _Connection()
            ports[tcp.sport] += 1
            ports[tcp.dport] += 1
        syn = bool(tcp.flags & dpkt.tcp.TH_SYN)
        if syn and not tcp.flags & dpkt.tcp.TH_ACK:
            stream.server = dst
        elif syn and stream.server is None:
            stream.server = src
        if port is not None and port not in (tcp.sport, tcp.dport):
            continue
        direction = stream.directions.get(src)
        if direction is None:
            direction = stream.directions[src] = _Direction()
        direction.add(tcp.seq, bytes(tcp.data), syn, ts)
    exchanges = []
    problems = []
    unpaired = 0
    number = 0
    for (a, b), stream in streams.items():
        if not stream.directions:
            continue
        if port is not None:
            server = b if b[1] == port and (a[1] != port or stream.server == b) else a
        else:
            server = stream.server or (a if a[1] < b[1] else b)
        client = b if server == a else a
        up = stream.directions.get(client) or _Direction()
        down = stream.directions.get(server) or _Direction()
        if port is None and not any(_plausible_request(f) for f, _ in up.frames[:8]):
            continue  # not Kafka (or nothing of it was read)
        number += 1
        name = f"{_address(client[0])}:{client[1]}"
        for what, d in (("requests", up), ("responses", down)):
            for p in d.problems():
                problems.append(f"{name} -> port {server[1]}, {what}: {p}")
        waiting = {}  # correlation id -> exchanges awaiting an answer, oldest first
        for frame, ts in up.frames:
            header = request_header(frame)
            if header is None:
                unpaired += 1
                continue
            ex = Exchange.restore(
                number,
                name,
                frame,
                None,
                ts,
                None,
                header,
                expects_response=produce_acks(frame, header) != 0,
            )
            exchanges.append(ex)
            if ex.expects_response:
                waiting.setdefault(header.correlation_id, collections.deque()).append(ex)
        for frame, ts in down.frames:
            queue = waiting.get(response_correlation_id(frame))
            if not queue:
                unpaired += 1
                continue
            ex = queue.popleft()
            ex.response = frame
            ex.finished = max(ts - ex.time, 0.0)  # restore's convention: started is 0
    for p in problems[:MAX_WARNINGS]:
        warn(f"{path}: {p}")
    if len(problems) > MAX_WARNINGS:
        warn(f"{path}: and {len(problems) - MAX_WARNINGS} more streams with frames not read")
    if unpaired:
        warn(
            f"{path}: {unpaired} frame{'s' if unpaired != 1 else ''} without a pair (a "
            "response that answers no request, or a request too short for a header): not shown"
        )
    if not exchanges and streams:
        held = ", ".join(f"{p} ({n})" for p, n in ports.most_common(10))
        where = f"on TCP port {port}" if port is not None else "in its TCP streams"
        raise CaptureError(
            f"{path}: no Kafka exchanges {where}; the file's TCP ports (streams): {held}"
            + ("" if port is None else "; give the broker's with --port")
        )
    exchanges.sort(key=lambda e: e.time)
    return exchanges


def _warn(text):
    warnings.warn(text, CaptureWarning, stacklevel=3)


def _address(packed):
    return str(ipaddress.ip_address(packed))
