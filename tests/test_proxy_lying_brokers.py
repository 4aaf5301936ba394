"""A broker that lies to the proxy: answers naming the proxy's own addresses under other
spellings, answers that do not decode, answers to requests never made, and every answer
type that names a host. The proxy fails closed: no client is told a broker's own address,
and no listener forwards to another of the proxy's own. (The listeners' life cycle is in
test_proxy_mapping.py.)"""

import asyncio
import json
import pathlib
import socket
import struct
import threading

import pytest

import fastkwire as fk
from fastkwire.proxy import BackgroundProxy
from fastkwire.proxy._frames import request_header
from fastkwire.proxy._rewrite import addresses, names_brokers, rewrite_addresses

from cluster import free_port_range

SIZE = struct.Struct(">i")
TIMEOUT = 10
CLOSED = ("127.0.0.1", 0)  # what a broker without a listener is told as
SCHEMAS = pathlib.Path(fk.__file__).parent / "schemas"


class LyingBroker:
    """A listener on 127.0.0.1 that answers each request frame with `answer(header, frame)`:
    the bytes to send back (any number of frames, or none)."""

    def __init__(self, answer):
        self.answer = answer
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(asyncio.start_server(self._serve, sock=self.sock))
        self.loop.run_forever()

    async def _serve(self, reader, writer):
        try:
            while True:
                head = await reader.readexactly(4)
                frame = head + await reader.readexactly(SIZE.unpack(head)[0])
                writer.write(self.answer(request_header(frame), frame))  # any version
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    def close(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def metadata_answer(brokers, version=9, topics=()):
    """A function of the request header: Metadata naming `brokers` ((host, port) pairs)."""
    M = fk.MetadataResponse

    def make(header):
        msg = M(
            brokers=[
                M.MetadataResponseBroker(node_id=i, host=h, port=p)
                for i, (h, p) in enumerate(brokers)
            ],
            topics=list(topics),
        )
        return fk.encode_response(msg, version, header.correlation_id)

    return make


def ask_metadata(sock, cid, version=9):
    sock.sendall(fk.encode_request(fk.MetadataRequest(topics=[]), version, cid, "t"))
    return read_frame(sock)


def read_frame(sock):
    head = _read(sock, 4)
    return head + _read(sock, SIZE.unpack(head)[0])


def _read(sock, n):
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError(f"closed after {len(out)} of {n} bytes")
        out += chunk
    return out


def told(frame, version=9):
    _, msg = fk.decode_response(frame, fk.MetadataResponse.API_KEY, version)
    return [(b.host, b.port) for b in msg.brokers]


def errors(proxy):
    return [e.text for e in proxy.events() if e.kind == "error"]


# ---------------------------------------------------------------- the proxy's own addresses


SPELLINGS = [
    "0.0.0.0",  # connecting to the wildcard reaches the local host
    "::ffff:0.0.0.0",
    "::ffff:127.0.0.1",
    "2130706433",  # 127.0.0.1 as one number: the resolver accepts it
    "127.1",
    "0x7f.0.0.1",
    "0177.0.0.1",
    "LOCALHOST",
    "localhost.",
    "LocalHost",
]


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_the_proxys_own_address_under_another_spelling_gets_no_listener(spelling):
    """A broker named as the proxy's bootstrap listener or a port of its range, spelled so
    that the resolver reaches it: no listener is opened for it (one would forward to the
    proxy itself), and clients are told the closed port."""
    ports = free_port_range(3)
    start = int(ports.split("-")[0])
    named = []
    broker = LyingBroker(lambda header, frame: metadata_answer(named)(header))
    try:
        with BackgroundProxy(f"127.0.0.1:{broker.port}", broker_ports=ports) as proxy:
            named[:] = [(spelling, proxy.port), (spelling, start + 2), ("127.0.0.1", broker.port)]
            with socket.create_connection(proxy.address, timeout=TIMEOUT) as s:
                got = told(ask_metadata(s, 1))
            assert got == [CLOSED, CLOSED, ("127.0.0.1", start)]
            assert proxy.proxy.brokers == {f"127.0.0.1:{broker.port}": f"127.0.0.1:{start}"}
            assert proxy.call(lambda: proxy.proxy._count) == 1  # no connection to itself
    finally:
        broker.close()


def test_an_ipv6_loopback_does_not_reach_an_ipv4_listener():
    """::1 is another socket than 127.0.0.1's: a broker there is a broker (no false alarm)."""
    from fastkwire.proxy._server import _names

    assert not _names(("::1", 9000), ("127.0.0.1", 9000))
    assert not _names(("127.0.0.2", 9000), ("127.0.0.1", 9000))
    assert _names(("127.0.0.2", 9000), ("0.0.0.0", 9000))
    assert not _names(("2130706433", 9001), ("127.0.0.1", 9000))


# ---------------------------------------------------------------- answers the proxy cannot read


@pytest.fixture(params=["mapped", "rewrite"])
def lying_proxy(request):
    """(start, proxy factory): a proxy in front of a LyingBroker, in either mode that
    rewrites addresses."""
    made = []

    def make(answer):
        broker = LyingBroker(answer)
        made.append(broker)
        if request.param == "mapped":
            kwargs = {"broker_ports": free_port_range(2)}
        else:
            kwargs = {"rewrite_advertised": True}
        proxy = BackgroundProxy(f"127.0.0.1:{broker.port}", **kwargs).start()
        made.append(proxy)
        return broker, proxy

    yield make
    for thing in reversed(made):
        thing.close() if isinstance(thing, LyingBroker) else thing.stop()


def _closed_without(sock, secret):
    """Everything the client reads until the proxy closes; asserts `secret` is not in it
    and that the proxy closed."""
    got = b""
    sock.settimeout(TIMEOUT / 2)
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            got += chunk
    except ConnectionResetError:
        pass
    except TimeoutError:
        raise AssertionError(f"still open, having sent {got[:200]!r}") from None
    assert secret not in got
    return got


def test_an_answer_naming_brokers_that_does_not_decode_is_not_forwarded(lying_proxy):
    """A Metadata answer cut short after its brokers: forwarding it unchanged told the
    client the broker's own address (the proxy could not rewrite what it could not read)."""
    secret_host = "real-broker.internal"

    def answer(header, frame):
        whole = metadata_answer([(secret_host, 9092)])(header)
        return SIZE.pack(len(whole) - 4 + 3) + whole[4:-1] + b"\xff\xff\xff\xff"  # cut, junk

    broker, proxy = lying_proxy(answer)
    with socket.create_connection(proxy.address, timeout=TIMEOUT) as s:
        s.sendall(fk.encode_request(fk.MetadataRequest(topics=[]), 9, 1, "t"))
        assert _closed_without(s, secret_host.encode()) == b""
    assert any(
        "Metadata v9 response does not decode: the connection ends" in t for t in errors(proxy)
    ), errors(proxy)


def test_an_answer_at_a_version_the_proxy_cannot_read_is_not_forwarded(lying_proxy):
    """A client and a broker agreeing on a Metadata version newer than the codec's: the
    answer cannot be rewritten, so it is not forwarded."""
    top = fk.MetadataResponse.MAX_VERSION
    secret_host = "real-broker.internal"

    def answer(header, frame):
        return metadata_answer([(secret_host, 9092)], version=top)(header)

    broker, proxy = lying_proxy(answer)
    request = bytearray(fk.encode_request(fk.MetadataRequest(topics=[]), top, 1, "t"))
    request[6:8] = struct.pack(">h", top + 1)
    with socket.create_connection(proxy.address, timeout=TIMEOUT) as s:
        s.sendall(request)
        assert _closed_without(s, secret_host.encode()) == b""


def test_an_answer_to_no_request_is_not_forwarded(lying_proxy):
    """A broker answering one Metadata request twice: the second answer pairs with nothing,
    so the proxy does not read it as Metadata, and forwarding it as it came told the client
    the broker's own address (a client waiting on that correlation id reads it)."""
    secret_host = "real-broker.internal"

    def answer(header, frame):
        once = metadata_answer([(secret_host, 9092)])(header)
        return once + once

    broker, proxy = lying_proxy(answer)
    with socket.create_connection(proxy.address, timeout=TIMEOUT) as s:
        s.sendall(fk.encode_request(fk.MetadataRequest(topics=[]), 9, 1, "t"))
        first = read_frame(s)
        assert secret_host.encode() not in first
        _closed_without(s, secret_host.encode())
    # The frame not forwarded is in the event (the capture files record it as unpaired).
    refused = [e for e in proxy.events() if "in flight: not forwarded" in e.text]
    assert [(e.kind, e.from_client, secret_host.encode() in e.frame) for e in refused] == [
        ("error", False, True)
    ], errors(proxy)


# ---------------------------------------------------------------- every answer that names a host

# Hosts in answers that are not Kafka nodes: ACL host patterns, and a Streams group's
# application endpoints (its members' own servers, KIP-1071).
NOT_NODES = {"DescribeAclsResponse", "DeleteAclsResponse"}
APPLICATION_ENDPOINTS = {"StreamsGroupHeartbeatResponse", "StreamsGroupDescribeResponse"}


def _fields_named(fields, name, versions=None):
    for f in fields:
        if f["name"] == name:
            yield f
        yield from _fields_named(f.get("fields", ()), name)


def test_every_answer_whose_schema_names_a_host_and_port_is_rewritten():
    """Walks Kafka's definitions: a response with a Host and a Port field names a node the
    client may connect to, and the proxy must rewrite it (a missed one fails open)."""
    found = []
    for path in sorted(SCHEMAS.glob("*Response.json")):
        text = "\n".join(
            line for line in path.read_text().splitlines() if not line.lstrip().startswith("//")
        )
        spec = json.loads(text)
        hosts = list(_fields_named(spec.get("fields", ()), "Host"))
        ports = list(_fields_named(spec.get("fields", ()), "Port"))
        if not hosts or not ports or spec["name"] in NOT_NODES | APPLICATION_ENDPOINTS:
            continue
        first = min(int(f["versions"].split("-")[0].rstrip("+")) for f in hosts)
        found.append(spec["name"])
        assert names_brokers(getattr(fk, spec["name"]).API_KEY, first), (spec["name"], first)
    assert len(found) >= 12, found


def _node_answers():
    """(api key, versions, the message naming one node at 10.9.9.9:9092) for the answers
    naming Kafka nodes besides Metadata, FindCoordinator and DescribeCluster."""
    B = "10.9.9.9", 9092

    def endpoints(cls):
        return lambda: cls(node_endpoints=[cls.NodeEndpoint(node_id=1, host=B[0], port=B[1])])

    Q = fk.DescribeQuorumResponse
    U = fk.UpdateRaftVoterResponse
    return [
        (fk.ShareAcknowledgeResponse, 0, endpoints(fk.ShareAcknowledgeResponse)),
        (fk.ShareFetchResponse, 0, endpoints(fk.ShareFetchResponse)),
        (fk.VoteResponse, 1, endpoints(fk.VoteResponse)),
        (fk.BeginQuorumEpochResponse, 1, endpoints(fk.BeginQuorumEpochResponse)),
        (fk.EndQuorumEpochResponse, 1, endpoints(fk.EndQuorumEpochResponse)),
        (fk.FetchSnapshotResponse, 1, endpoints(fk.FetchSnapshotResponse)),
        (
            Q,
            2,
            lambda: Q(
                topics=[],
                nodes=[Q.Node(node_id=1, listeners=[Q.Listener(name="C", host=B[0], port=B[1])])],
            ),
        ),
        (
            U,
            0,
            lambda: U(current_leader=U.CurrentLeader(leader_id=1, host=B[0], port=B[1])),
        ),
    ]


def test_every_answer_naming_a_node_has_it_rewritten():
    mapped = {("10.9.9.9", 9092): ("127.0.0.1", 30001)}.get
    for cls, first, make in _node_answers():
        for v in range(first, cls.MAX_VERSION + 1):
            frame = fk.encode_response(make(), v, 77)
            new, named = rewrite_addresses(frame, cls.API_KEY, v, mapped)
            assert named == [("10.9.9.9", 9092)], (cls.__name__, v)
            _, got = fk.decode_response(new, cls.API_KEY, v)
            assert addresses(got, cls.API_KEY) == [("127.0.0.1", 30001)], (cls.__name__, v)


def test_a_coordinator_named_with_an_error_or_no_node_id_is_rewritten_too():
    """Kafka's Java consumer connects to the host and port of a FindCoordinator answer
    without an error whatever its node id (it makes its own id from it): one naming node
    -1 (or an error with an address) kept the broker's own address."""
    F = fk.FindCoordinatorResponse
    mapped = {("10.9.9.9", 9092): ("127.0.0.1", 30001)}.get
    for v in range(F.MIN_VERSION, F.MAX_VERSION + 1):
        for node_id, error in ((-1, 0), (1, 15)):
            if v < 4:
                msg = F(node_id=node_id, host="10.9.9.9", port=9092, error_code=error)
            else:
                msg = F(
                    coordinators=[
                        F.Coordinator(
                            key="g", node_id=node_id, host="10.9.9.9", port=9092, error_code=error
                        )
                    ]
                )
            new, _ = rewrite_addresses(fk.encode_response(msg, v, 5), F.API_KEY, v, mapped)
            _, got = fk.decode_response(new, F.API_KEY, v)
            entry = got if v < 4 else got.coordinators[0]
            assert (entry.host, entry.port) == ("127.0.0.1", 30001), (v, node_id, error)
    # Kafka's own "not found" (node -1, no host, port -1) names nothing and stays.
    msg = F(coordinators=[F.Coordinator(key="g", node_id=-1, host="", port=-1, error_code=15)])
    frame = fk.encode_response(msg, 4, 5)
    assert rewrite_addresses(frame, F.API_KEY, 4, mapped) == (frame, [])


# ---------------------------------------------------------------- answers naming thousands


def test_an_answer_naming_thousands_of_brokers_costs_a_few_steps_each(monkeypatch):
    """Past max_brokers, a broker gets the closed port without looking at the proxy's
    listeners: an answer naming 20,000 brokers (430 KB) held the event loop, every client
    with it, for 1.3-2 s, comparing each broker with every listener (and sorting the
    brokers that left, once per broker). Counted, not timed: the comparisons made."""
    from fastkwire.proxy import _server

    calls = [0]
    names = _server._names

    def counted(address, bound):
        calls[0] += 1
        return names(address, bound)

    monkeypatch.setattr(_server, "_names", counted)
    brokers = [(f"10.0.{i >> 8}.{i & 255}", 9092) for i in range(2000)]
    M = fk.MetadataResponse
    msg = M(
        brokers=[
            M.MetadataResponseBroker(node_id=i, host=h, port=p) for i, (h, p) in enumerate(brokers)
        ],
        topics=[],
    )
    frame = fk.encode_response(msg, 9, 1)

    async def run():
        proxy = _server.Proxy("127.0.0.1:1", broker_ports=free_port_range(20), max_brokers=20)
        await proxy.start()
        try:
            for _ in range(3):
                new, named = rewrite_addresses(frame, M.API_KEY, 9, proxy._map)
                proxy._brokers_listed(named)
            _, got = fk.decode_response(new, M.API_KEY, 9)
            return [(b.host, b.port) for b in got.brokers], len(proxy.brokers)
        finally:
            await proxy.close()

    told_, listening = asyncio.run(run())
    assert listening == 20 and told_[20:] == [CLOSED] * 1980
    assert calls[0] <= 3 * 2 * 20, calls[0]  # was 21 per broker per answer: 125,000


# ---------------------------------------------------------------- flags that combine badly


def test_an_advertised_address_that_is_the_upstream_brokers_own_is_refused():
    """--rewrite-advertised --advertise naming the upstream broker itself told every client
    the broker's own address (they all went around the proxy)."""
    broker = LyingBroker(metadata_answer([("127.0.0.1", 1)]))
    try:
        for spelling in ("127.0.0.1", "LOCALHOST", "2130706433"):
            with pytest.raises(ValueError, match=r"^advertised: .* is the upstream broker's own"):
                BackgroundProxy(
                    f"127.0.0.1:{broker.port}",
                    rewrite_advertised=True,
                    advertised=f"{spelling}:{broker.port}",
                ).start()
    finally:
        broker.close()


def test_a_port_whose_advertised_address_is_a_brokers_own_is_not_given_out():
    """--broker-ports with --advertise naming the brokers' host: a port of the range that is
    also a broker's port there would tell clients that broker's own address; it is skipped."""
    ports = free_port_range(3)
    start = int(ports.split("-")[0])
    named = []
    broker = LyingBroker(lambda header, frame: metadata_answer(named)(header))
    try:
        with BackgroundProxy(
            f"127.0.0.1:{broker.port}",
            listen=("127.0.0.1", 0),
            broker_ports=ports,
            advertised="kafka.example:1",
        ) as proxy:
            named[:] = [("kafka.example", start), ("127.0.0.1", broker.port)]
            with socket.create_connection(proxy.address, timeout=TIMEOUT) as s:
                got = told(ask_metadata(s, 1))
            assert ("kafka.example", start) not in got
            assert got == [("kafka.example", start + 1), ("kafka.example", start + 2)]
    finally:
        broker.close()


# ---------------------------------------------------------------- versions the proxy can read


def test_clients_are_offered_only_versions_whose_answers_the_proxy_can_rewrite(lying_proxy):
    """A broker offering Metadata and Fetch past the codec's last versions: a client would
    pick them, and the proxy, which cannot read those answers, would have to end every such
    connection. ApiVersions is capped for the APIs that name brokers; the others stay."""
    A = fk.ApiVersionsResponse
    offered = {
        fk.MetadataResponse.API_KEY: 99,
        fk.FetchResponse.API_KEY: 99,
        12: 99,
    }  # 12: Heartbeat

    def answer(header, frame):
        msg = A(
            api_keys=[
                A.ApiVersion(api_key=k, min_version=0, max_version=v) for k, v in offered.items()
            ]
        )
        return fk.encode_response(msg, 3, header.correlation_id)

    broker, proxy = lying_proxy(answer)
    with socket.create_connection(proxy.address, timeout=TIMEOUT) as s:
        s.sendall(fk.encode_request(fk.ApiVersionsRequest(), 3, 1, "t"))
        _, got = fk.decode_response(read_frame(s), A.API_KEY, 3)
    assert {e.api_key: e.max_version for e in got.api_keys} == {
        fk.MetadataResponse.API_KEY: fk.MetadataResponse.MAX_VERSION,
        fk.FetchResponse.API_KEY: fk.FetchResponse.MAX_VERSION,
        12: 99,
    }


def test_two_brokers_mapped_to_one_address_are_refused():
    """--map a=L --map b=L: the second broker's listener could never open (a warning at
    run time, its partitions lost); refused at start, naming both."""
    mapping = {"10.0.0.1:9092": "127.0.0.1:30001", "10.0.0.2:9092": "localhost:30001"}
    with pytest.raises(
        ValueError,
        match=r"^broker_map: 10.0.0.1:9092 and 10.0.0.2:9092 are both mapped to localhost:30001",
    ):
        fk.proxy.Proxy("10.0.0.1:9092", broker_map=mapping)


def test_lying_broker_fuzzer_seeds():
    """A short run of fuzz/lying_broker.py: mutated answers naming brokers are rewritten to
    name the proxy only, or refused (the connection ends); never anything else."""
    import sys

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "fuzz"))
    try:
        import lying_broker
    finally:
        sys.path.pop(0)
    outcomes = {}
    for seed in range(600):
        outcome = lying_broker.check(seed)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    assert outcomes.get("rewritten", 0) > 150 and outcomes.get("refused", 0) > 150, outcomes


def test_an_answer_over_the_decode_limit_that_does_not_decode_ends_only_its_connection(
    lying_proxy,
):
    """Answers over DECODE_AT_MOST are walked, not decoded: one cut short ends its own
    connection unforwarded, while another connection's answer as large is rewritten."""
    from fastkwire.proxy._rewrite import DECODE_AT_MOST

    secret_host = "real-broker.internal"
    M = fk.MetadataResponse
    parts = [
        M.MetadataResponsePartition(partition_index=i, replica_nodes=[0], isr_nodes=[0])
        for i in range(200_000)
    ]
    topic = M.MetadataResponseTopic(name="t", partitions=parts)
    whole = metadata_answer([(secret_host, 9092)], topics=[topic])(request_header_of(1))
    assert len(whole) > DECODE_AT_MOST

    def answer(header, frame):
        mine = whole[:4] + SIZE.pack(header.correlation_id) + whole[8:]
        if header.correlation_id == 666:  # cut inside its topics, its brokers intact
            return SIZE.pack(len(mine) - 4 - 1000) + mine[4:-1000]
        return mine

    broker, proxy = lying_proxy(answer)
    with socket.create_connection(proxy.address, timeout=TIMEOUT) as good:
        with socket.create_connection(proxy.address, timeout=TIMEOUT) as bad:
            bad.sendall(fk.encode_request(fk.MetadataRequest(topics=[]), 9, 666, "t"))
            assert _closed_without(bad, secret_host.encode()) == b""
        for cid in (1, 2):  # the other connection, open meanwhile, is still served
            got = ask_metadata(good, cid)
            assert secret_host.encode() not in got
            assert told(got)[0][0] != secret_host and len(got) > DECODE_AT_MOST
    assert any(
        "Metadata v9 response does not decode: the connection ends" in t for t in errors(proxy)
    ), errors(proxy)


def request_header_of(cid):
    """A request header as LyingBroker's answer functions get it."""
    return request_header(fk.encode_request(fk.MetadataRequest(topics=[]), 9, cid, "t"))


@pytest.mark.parametrize(
    "count, limit", [(20_000, 512 * 1024), (150_000, 2 * 1024 * 1024)], ids=["decoded", "walked"]
)
def test_an_answer_rewriting_would_grow_past_max_frame_bytes_ends_its_connection(count, limit):
    """Brokers of an empty host and a port take 11 bytes each: with a long advertised host
    the rewritten answer was 4.4 times the upstream's, and went to the client over the
    proxy's own max_frame_bytes. The connection ends instead, unanswered."""
    entry = SIZE.pack(1) + b"\x01" + SIZE.pack(1) + b"\x00\x00"
    count_bytes = bytes([(count + 1) & 0x7F | 0x80, ((count + 1) >> 7) & 0x7F | 0x80])
    count_bytes += bytes([(count + 1) >> 14])
    tail = b"\x00" + SIZE.pack(-1) + b"\x01\x00"  # cluster id, controller, topics, tags

    def answer(header, frame):
        body = SIZE.pack(header.correlation_id) + b"\x00" + SIZE.pack(0) + count_bytes
        body += entry * count + tail
        return SIZE.pack(len(body)) + body

    broker = LyingBroker(answer)
    advertised = "kafka-proxy.prod.internal.example.com:9092"
    try:
        with BackgroundProxy(
            f"127.0.0.1:{broker.port}",
            rewrite_advertised=True,
            advertised=advertised,
            max_frame_bytes=limit,
        ) as proxy:
            with socket.create_connection(proxy.address, timeout=TIMEOUT) as s:
                s.sendall(fk.encode_request(fk.MetadataRequest(topics=[]), 12, 1, "t"))
                assert _closed_without(s, b"kafka-proxy") == b""
            assert any(f"over max_size ({limit})" in t for t in errors(proxy)), errors(proxy)
    finally:
        broker.close()
