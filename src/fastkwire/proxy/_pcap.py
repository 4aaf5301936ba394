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

Reading: TCP segments to or from `port` are put back into each direction's byte stream by
sequence number (retransmissions dropped, segments out of order held until the gap is
filled), split into frames, and responses paired with the requests of their stream by
correlation id. A direction whose capture began mid-frame (its first four bytes are no
plausible size prefix) cannot be put back in step reliably: its frames stop there.
"""

import ipaddress
import struct

from ._capture import CaptureError
from ._exchange import Exchange
from ._frames import RequestHeader, request_header, response_correlation_id

try:
    import dpkt
except ImportError:  # the pcap extra is optional
    dpkt = None

SEGMENT = 32768  # payload bytes per written TCP segment (fits an IP packet)
SNAPLEN = 65535
MAX_FRAME = 128 * 1024 * 1024  # a larger size prefix in a capture: not the start of a frame
MAX_GAP_SEGMENTS = 10_000  # out-of-order segments held per direction before giving up
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


class PcapWriter:
    """Writes exchanges as TCP packets between each client and `upstream` ((host, port))."""

    def __init__(self, path, upstream):
        _need_dpkt()
        try:
            self.server = (ipaddress.ip_address(upstream[0]), upstream[1])
        except ValueError:  # a host name: the capture shows a documentation address instead
            self.server = (ipaddress.ip_address("192.0.2.1"), upstream[1])
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
            stream = self._streams[ex.conn] = _Stream(client, self.server)
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
    """One direction of a TCP stream, put back in order."""

    __slots__ = ("next_seq", "held", "data", "frames", "broken")

    def __init__(self):
        self.next_seq = None
        self.held = {}
        self.data = bytearray()
        self.frames = []  # (frame, timestamp of its last byte)
        self.broken = None

    def add(self, seq, payload, syn, ts):
        if syn:
            self.next_seq = (seq + 1) & 0xFFFFFFFF
            return
        if not payload or self.broken:
            return
        if self.next_seq is None:  # the capture began after the handshake
            self.next_seq = seq
        offset = (seq - self.next_seq) & 0xFFFFFFFF
        if offset >= 0x80000000:  # before what we have: a retransmission, maybe overlapping
            overlap = (self.next_seq - seq) & 0xFFFFFFFF
            if overlap >= len(payload):
                return
            payload, offset = payload[overlap:], 0
        if offset:
            if len(self.held) < MAX_GAP_SEGMENTS:
                self.held[seq] = payload
            return
        self._take(payload, ts)
        while self.next_seq in self.held:
            self._take(self.held.pop(self.next_seq), ts)

    def _take(self, payload, ts):
        self.data += payload
        self.next_seq = (self.next_seq + len(payload)) & 0xFFFFFFFF
        while len(self.data) >= 4:
            size = struct.unpack_from(">i", self.data)[0]
            if not 0 <= size <= MAX_FRAME:
                self.broken = f"size prefix {size} is not the start of a frame"
                return
            if len(self.data) < 4 + size:
                return
            self.frames.append((bytes(self.data[: 4 + size]), ts))
            del self.data[: 4 + size]


def _packets(path):
    with open(path, "rb") as f:
        head = f.read(4)
        f.seek(0)
        try:
            reader = dpkt.pcapng.Reader(f) if head == b"\x0a\x0d\x0d\x0a" else dpkt.pcap.Reader(f)
            link = reader.datalink()
            for ts, buf in reader:
                yield link, float(ts), buf
        except (ValueError, dpkt.UnpackError, struct.error) as e:
            raise CaptureError(f"{path}: not a readable pcap/pcapng file: {e}") from None


def read_pcap(path, port=9092):
    """The exchanges of a pcap/pcapng file's TCP streams to `port`, by request time."""
    _need_dpkt()
    streams = {}  # (client ip, client port, server ip) -> (to server, to client)
    for link, ts, buf in _packets(path):
        ip = _ip_of(link, buf)
        if ip is None or not isinstance(ip.data, dpkt.tcp.TCP):
            continue
        tcp = ip.data
        if tcp.dport == port:
            key, to_server = (ip.src, tcp.sport, ip.dst), True
        elif tcp.sport == port:
            key, to_server = (ip.dst, tcp.dport, ip.src), False
        else:
            continue
        pair = streams.get(key)
        if pair is None:
            pair = streams[key] = (_Direction(), _Direction())
        pair[0 if to_server else 1].add(
            tcp.seq, bytes(tcp.data), bool(tcp.flags & dpkt.tcp.TH_SYN), ts
        )
    exchanges = []
    for number, (key, (up, down)) in enumerate(streams.items(), 1):
        client = f"{_address(key[0])}:{key[1]}"
        pending = []
        for frame, ts in up.frames:
            header = request_header(frame) or RequestHeader(None, None, None, None, None)
            ex = Exchange.restore(number, client, frame, None, ts, None, header)
            exchanges.append(ex)
            pending.append(ex)
        for frame, ts in down.frames:
            cid = response_correlation_id(frame)
            ex = next((e for e in pending if e.correlation_id == cid), None)
            if ex is None:
                continue
            pending.remove(ex)
            ex.response = frame
            ex.finished = max(ts - ex.time, 0.0)  # restore's convention: started is 0
    exchanges.sort(key=lambda e: e.time)
    return exchanges


def _address(packed):
    return str(ipaddress.ip_address(packed))
