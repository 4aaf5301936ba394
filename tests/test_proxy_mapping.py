"""The proxy's broker mapping without a broker: every answer that names brokers has each
address replaced by its mapping at the answer's own version, the response header's bytes
kept and nothing else in the body changed; listeners open when a broker is first named and
close once a broker that left has no connections. The real clients against a 3-node
cluster are in test_proxy_cluster.py."""

import asyncio
import socket
import struct
import time

import pytest

import fastkwire as fk
from fastkwire.proxy import BackgroundProxy
from fastkwire.proxy._rewrite import addresses, rewrite_addresses

from cluster import free_port_range

SIZE = struct.Struct(">i")
TIMEOUT = 10
MAPPING = {("b1.example", 9092): ("127.0.0.1", 30001), ("b2.example", 9093): ("127.0.0.1", 30002)}
BROKERS = list(MAPPING)


def _answers(impl):
    """(api key, versions, a function of the version giving the message naming both
    brokers) for every answer that names brokers."""
    M = impl.MetadataResponse
    F = impl.FindCoordinatorResponse
    D = impl.DescribeClusterResponse
    P = impl.ProduceResponse
    R = impl.FetchResponse
    S = impl.ShareFetchResponse

    def metadata(v):
        return M(
            brokers=[
                M.MetadataResponseBroker(node_id=i, host=h, port=p)
                for i, (h, p) in enumerate(BROKERS)
            ],
            topics=[],
        )

    def coordinator(v):
        if v < 4:
            return F(node_id=0, host=BROKERS[0][0], port=BROKERS[0][1])
        return F(
            coordinators=[
                F.Coordinator(key=f"g{i}", node_id=i, host=h, port=p)
                for i, (h, p) in enumerate(BROKERS)
            ]
            + [F.Coordinator(key="lost", node_id=-1, host="", port=-1, error_code=15)]
        )

    def cluster(v):
        return D(
            cluster_id="c",
            brokers=[
                D.DescribeClusterBroker(broker_id=i, host=h, port=p)
                for i, (h, p) in enumerate(BROKERS)
            ],
        )

    def endpoints(cls):
        return lambda v: cls(
            node_endpoints=[
                cls.NodeEndpoint(node_id=i, host=h, port=p) for i, (h, p) in enumerate(BROKERS)
            ]
        )

    return [
        (M.API_KEY, range(M.MIN_VERSION, M.MAX_VERSION + 1), metadata),
        (F.API_KEY, range(F.MIN_VERSION, F.MAX_VERSION + 1), coordinator),
        (D.API_KEY, range(D.MIN_VERSION, D.MAX_VERSION + 1), cluster),
        (P.API_KEY, range(10, P.MAX_VERSION + 1), endpoints(P)),
        (R.API_KEY, range(16, R.MAX_VERSION + 1), endpoints(R)),
        (S.API_KEY, range(S.MIN_VERSION, S.MAX_VERSION + 1), endpoints(S)),
    ]


def test_every_answer_that_names_brokers_is_rewritten_at_its_own_version(impl):
    seen = 0
    for api_key, versions, make in _answers(impl):
        for v in versions:
            msg = make(v)
            frame = impl.encode_response(msg, v, 4242)
            new, named = rewrite_addresses(frame, api_key, v, MAPPING.get)
            expected = BROKERS[:1] if api_key == 10 and v < 4 else BROKERS
            assert named == expected, (api_key, v)
            assert new[4:8] == frame[4:8]  # correlation id kept
            _, got = impl.decode_response(new, api_key, v)
            assert addresses(got, api_key) == [MAPPING[b] for b in expected], (api_key, v)
            # Put the brokers' addresses back: the body is what the broker sent.
            back, _ = rewrite_addresses(
                new, api_key, v, {local: b for b, local in MAPPING.items()}.get
            )
            assert back == frame, (api_key, v)
            seen += 1
    assert seen >= 30  # 34 (API, version) pairs today


def test_an_answer_without_brokers_or_an_unmapped_one_is_the_same_frame(impl):
    P = impl.ProduceResponse
    frame = impl.encode_response(P(responses=[]), 11, 7)
    assert rewrite_addresses(frame, P.API_KEY, 11, MAPPING.get) == (frame, [])
    M = impl.MetadataResponse
    msg = M(brokers=[M.MetadataResponseBroker(node_id=1, host="other", port=1)], topics=[])
    frame = impl.encode_response(msg, 9, 7)
    assert rewrite_addresses(frame, M.API_KEY, 9, MAPPING.get) == (frame, [("other", 1)])


# ---------------------------------------------------------------- listeners, with a scripted broker


class Brokers:
    """Plain listeners that answer Metadata v9 naming `self.named` (their own ports, or any
    (host, port)) and count their connections."""

    def __init__(self, count):
        self.socks = [socket.create_server(("127.0.0.1", 0)) for _ in range(count)]
        self.ports = [s.getsockname()[1] for s in self.socks]
        self.named = list(self.ports)
        self.accepted = [0] * count
        self.loop = asyncio.new_event_loop()
        import threading

        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        asyncio.set_event_loop(self.loop)

        async def start():
            for i, s in enumerate(self.socks):
                await asyncio.start_server(lambda r, w, i=i: self._serve(i, r, w), sock=s)

        self.loop.run_until_complete(start())
        self.loop.run_forever()

    async def _serve(self, i, reader, writer):
        self.accepted[i] += 1
        M = fk.MetadataResponse
        try:
            while True:
                head = await reader.readexactly(4)
                frame = head + await reader.readexactly(SIZE.unpack(head)[0])
                header, _ = fk.decode_request(frame)
                msg = M(
                    brokers=[
                        M.MetadataResponseBroker(node_id=n, host=h, port=p)
                        for n, (h, p) in enumerate(
                            b if isinstance(b, tuple) else ("127.0.0.1", b) for b in self.named
                        )
                    ],
                    topics=[],
                )
                writer.write(
                    fk.encode_response(msg, header.request_api_version, header.correlation_id)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    def close(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture
def brokers():
    b = Brokers(3)
    yield b
    b.close()


def metadata(sock, cid):
    frame = fk.encode_request(fk.MetadataRequest(topics=[]), 9, cid, "t")
    sock.sendall(frame)
    head = _read(sock, 4)
    answer = head + _read(sock, SIZE.unpack(head)[0])
    _, msg = fk.decode_response(answer, 3, 9)
    return [(b.host, b.port) for b in msg.brokers]


def _read(sock, n):
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


def test_each_broker_named_gets_a_listener_that_forwards_to_it(brokers):
    ports = free_port_range(4)
    start = int(ports.split("-")[0])
    with BackgroundProxy(f"127.0.0.1:{brokers.ports[0]}", broker_ports=ports) as proxy:
        with socket.create_connection(proxy.address, timeout=TIMEOUT) as s:
            told = metadata(s, 1)
        assert told == [("127.0.0.1", start + i) for i in range(3)]
        assert proxy.proxy.brokers == {
            f"127.0.0.1:{p}": f"127.0.0.1:{start + i}" for i, p in enumerate(brokers.ports)
        }
        for i, local in enumerate(told):  # each listener reaches its own broker
            before = list(brokers.accepted)
            with socket.create_connection(local, timeout=TIMEOUT) as s:
                assert metadata(s, 2) == told  # the same mapping, from whichever broker
            assert brokers.accepted[i] == before[i] + 1
        wanted = {f"127.0.0.1:{p}" for p in brokers.ports}
        _wait(lambda: {e.broker for e in proxy.exchanges()} == wanted)
        assert all(f"-> {ex.broker}" in fk.proxy.exchange_line(ex) for ex in proxy.exchanges())


def test_a_broker_that_leaves_keeps_its_listener_until_its_connections_close(brokers):
    with BackgroundProxy(f"127.0.0.1:{brokers.ports[0]}", broker_ports=free_port_range(4)) as proxy:
        with socket.create_connection(proxy.address, timeout=TIMEOUT) as s:
            told = metadata(s, 1)
        third = socket.create_connection(told[2], timeout=TIMEOUT)
        metadata(third, 1)
        brokers.named = brokers.ports[:2]  # the third broker leaves the cluster
        with socket.create_connection(proxy.address, timeout=TIMEOUT) as s:
            assert metadata(s, 2) == told[:2]
        # Still connected: its connection goes on, and its listener stays.
        assert metadata(third, 2) == told[:2]
        assert f"127.0.0.1:{brokers.ports[2]}" in proxy.proxy.brokers
        third.close()
        _wait(lambda: f"127.0.0.1:{brokers.ports[2]}" not in proxy.proxy.brokers)
        with pytest.raises(OSError):
            socket.create_connection(told[2], timeout=TIMEOUT).close()
        assert any("left the cluster" in e.text for e in proxy.events())
        brokers.named = brokers.ports  # it comes back: on the port it had
        with socket.create_connection(proxy.address, timeout=TIMEOUT) as s:
            assert metadata(s, 3) == told


def test_fixed_mappings_listen_from_the_start(brokers):
    ports = free_port_range(2)
    a, b = (int(p) for p in ports.split("-"))
    mapping = {
        f"127.0.0.1:{brokers.ports[0]}": f"127.0.0.1:{a}",
        f"127.0.0.1:{brokers.ports[1]}": f"127.0.0.1:{b}",
    }
    with BackgroundProxy(f"127.0.0.1:{brokers.ports[0]}", broker_map=mapping) as proxy:
        with socket.create_connection(("127.0.0.1", b), timeout=TIMEOUT) as s:
            told = metadata(s, 1)
        # The third broker has no mapping and no range: clients are told a port where
        # nothing listens, never its own address, and a warning says so.
        assert told == [("127.0.0.1", a), ("127.0.0.1", b), CLOSED]
        assert warnings(proxy) == [
            f"broker 127.0.0.1:{brokers.ports[2]} has no listener: not in broker_map, and no "
            "broker_ports; clients are told 127.0.0.1:0 in its place, where nothing listens "
            "(the proxy fails closed: no client is told a broker's own address)"
        ]


CLOSED = ("127.0.0.1", 0)  # what a broker without a listener is told as


def warnings(proxy):
    return [e.text for e in proxy.events() if e.kind == "error" and "has no listener" in e.text]


def withheld(proxy):
    return (
        proxy.summary.to_dict()
        .get("notes", {})
        .get("brokers withheld from clients (no listener)", 0)
    )


def test_three_brokers_behind_two_ports_tell_no_client_the_third_ones_address(brokers):
    ports = free_port_range(2)
    start = int(ports.split("-")[0])
    with BackgroundProxy(f"127.0.0.1:{brokers.ports[0]}", broker_ports=ports) as proxy:
        for cid in (1, 2):  # asked twice: still no port, and one warning
            with socket.create_connection(proxy.address, timeout=TIMEOUT) as s:
                assert metadata(s, cid) == [("127.0.0.1", start), ("127.0.0.1", start + 1), CLOSED]
        assert warnings(proxy) == [
            f"broker 127.0.0.1:{brokers.ports[2]} has no listener: no free port left in "
            f"broker_ports {ports}; clients are told 127.0.0.1:0 in its place, where nothing "
            "listens (the proxy fails closed: no client is told a broker's own address)"
        ]
        assert withheld(proxy) == 1
        assert "brokers withheld from clients (no listener): 1" in proxy.summary.table()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(CLOSED, timeout=TIMEOUT).close()


def test_a_port_freed_by_a_broker_that_left_is_reused_after_the_hold(brokers):
    ports = free_port_range(2)
    start = int(ports.split("-")[0])
    b0, b1, b2 = brokers.ports
    with BackgroundProxy(f"127.0.0.1:{b0}", broker_ports=ports, broker_port_hold=0.5) as proxy:
        brokers.named = [b0, b1]
        with socket.create_connection(proxy.address, timeout=TIMEOUT) as s:
            assert metadata(s, 1) == [("127.0.0.1", start), ("127.0.0.1", start + 1)]
            # b1 leaves and b2 comes (a broker rescheduled at a new address): b1's port
            # is kept for it a while, and b2 is told no real address meanwhile.
            brokers.named = [b0, b2]
            assert metadata(s, 2) == [("127.0.0.1", start), CLOSED]
            # once the hold has passed (and the old listener has closed: a loaded machine
            # takes a moment longer), b2 gets the port
            time.sleep(0.6)
            deadline, correlation = time.monotonic() + TIMEOUT, 3
            told = metadata(s, correlation)
            while told != [("127.0.0.1", start), ("127.0.0.1", start + 1)]:
                assert told == [("127.0.0.1", start), CLOSED] and time.monotonic() < deadline
                time.sleep(0.1)
                correlation += 1
                told = metadata(s, correlation)
            correlation += 1
            # b1 back now: its port went to b2, and no other is free.
            brokers.named = [b0, b1, b2]
            assert metadata(s, correlation) == [
                ("127.0.0.1", start),
                CLOSED,
                ("127.0.0.1", start + 1),
            ]
        before = list(brokers.accepted)
        with socket.create_connection(("127.0.0.1", start + 1), timeout=TIMEOUT) as s:
            metadata(s, 1)
        assert brokers.accepted[2] == before[2] + 1  # the port now reaches b2


def test_the_brokers_one_answer_can_map_are_capped(brokers):
    """A hostile Metadata naming 40 brokers opens at most max_brokers listeners."""
    ports = free_port_range(45)
    start = int(ports.split("-")[0])
    with BackgroundProxy(
        f"127.0.0.1:{brokers.ports[0]}", broker_ports=ports, max_brokers=5
    ) as proxy:
        brokers.named = [("127.0.0.1", 1000 + i) for i in range(40)]
        with socket.create_connection(proxy.address, timeout=TIMEOUT) as s:
            told = metadata(s, 1)
        assert told == [("127.0.0.1", start + i) for i in range(5)] + [CLOSED] * 35
        assert len(proxy.proxy.brokers) == 5
        assert len(warnings(proxy)) == 35 and withheld(proxy) == 35
        assert all("(limit 5: max_brokers)" in w for w in warnings(proxy))


def test_no_listener_forwards_to_one_of_the_proxys_own(brokers):
    """Metadata naming the proxy's own addresses (a port of its range, its bootstrap
    listener): those brokers get no listener, and one client connection is one upstream
    connection (a listener forwarding to itself made 1,858 of them)."""
    ports = free_port_range(3)
    start = int(ports.split("-")[0])
    with BackgroundProxy(
        f"127.0.0.1:{brokers.ports[0]}", broker_ports=ports, max_connections=20
    ) as proxy:
        brokers.named = [("127.0.0.1", start), ("127.0.0.1", proxy.port), brokers.ports[1]]
        with socket.create_connection(proxy.address, timeout=TIMEOUT) as s:
            told = metadata(s, 1)
        # The real broker takes the free port; the client connections reach it, once each.
        assert told == [CLOSED, CLOSED, ("127.0.0.1", start)]
        with socket.create_connection(told[2], timeout=TIMEOUT) as s:
            assert metadata(s, 2) == told
        assert brokers.accepted[1] == 1
        assert proxy.call(lambda: proxy.proxy._count) == 2
        assert [w.split(" has no listener: ")[1].split(";")[0] for w in warnings(proxy)] == [
            f"it would be the proxy's own listener 127.0.0.1:{start}, and no listener forwards "
            "to another of its own",
            f"it is the proxy's own listener 127.0.0.1:{proxy.port}, and no listener forwards "
            "to another of its own",
        ]


def test_a_name_that_resolves_to_the_proxy_itself_is_refused_when_connecting(brokers):
    """A host name the proxy does not look up when mapping (only IP literals and localhost)
    is checked on connecting: the connection reaching one of its own listeners is refused,
    and that broker's listener closes, so no loop forms."""
    name = socket.gethostname()
    try:
        resolved = {a[4][0] for a in socket.getaddrinfo(name, 1, socket.AF_INET)}
    except OSError:
        resolved = set()
    if not resolved or not all(ip.startswith("127.") for ip in resolved) or name == "localhost":
        pytest.skip(f"the host name {name!r} does not resolve to a loopback address only")
    ports = free_port_range(3)
    start = int(ports.split("-")[0])
    with BackgroundProxy(
        f"127.0.0.1:{brokers.ports[0]}", broker_ports=ports, max_connections=20
    ) as proxy:
        brokers.named = [(name, proxy.port), brokers.ports[1]]
        with socket.create_connection(proxy.address, timeout=TIMEOUT) as s:
            told = metadata(s, 1)
        assert told == [("127.0.0.1", start), ("127.0.0.1", start + 1)]
        with socket.create_connection(told[0], timeout=TIMEOUT) as s:
            with pytest.raises(ConnectionError):
                metadata(s, 2)
        _wait(lambda: f"{name}:{proxy.port}" not in proxy.proxy.brokers)
        refused = [e.text for e in proxy.events() if "no listener forwards" in e.text]
        assert refused[0] == (
            f"upstream {name}:{proxy.port} is the proxy's own listener 127.0.0.1:{proxy.port}: "
            "refused, no listener forwards to another of its own"
        )
        # Two connections: the client's, and the proxy's one to itself.
        assert proxy.call(lambda: proxy.proxy._count) <= 3
        with socket.create_connection(proxy.address, timeout=TIMEOUT) as s:
            assert metadata(s, 3) == [CLOSED, ("127.0.0.1", start + 1)]


def test_an_upstream_that_is_the_proxys_own_address_is_refused():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ValueError, match=rf"^upstream: 127.0.0.1:{port} is the proxy's own"):
        BackgroundProxy(f"127.0.0.1:{port}", listen=("127.0.0.1", port)).start()


def test_mapping_and_one_address_for_all_are_refused_together():
    with pytest.raises(ValueError, match="rewrite_advertised"):
        fk.proxy.Proxy("127.0.0.1:1", rewrite_advertised=True, broker_ports="30000-30010")
    with pytest.raises(ValueError, match="broker_ports: '5-1' is not two ports"):
        fk.proxy.Proxy("127.0.0.1:1", broker_ports="5-1")


def _wait(predicate, timeout=TIMEOUT):
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.02)
