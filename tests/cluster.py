"""A scripted 3-node Kafka cluster in front of one Tansu, for the proxy's broker mapping.

Tansu calls every broker node 111 and lists only itself. Here three listeners (nodes 1, 2
and 3, each its own port on 127.0.0.1) forward every frame to the one Tansu, and change
only what a cluster's answers say about its brokers: Metadata lists the three nodes with
partition p led by node p % 3 + 1, FindCoordinator names node 1 and DescribeCluster the
three. Tansu serves every partition whichever node a request came in on, so the data is
real; what the nodes record (who connected, which partitions each was asked to produce
to or fetch from) shows whether a client followed the leaders, and through whom.
"""

import asyncio
import socket
import struct
import threading

import pytest

from fastkwire import decode_request, decode_response

PRODUCE, FETCH, METADATA, FIND_COORDINATOR, DESCRIBE_CLUSTER = 0, 1, 3, 10, 60
NODES = (1, 2, 3)
TANSU_NODE = 111


def free_port_range(count):
    """START-END of `count` consecutive 127.0.0.1 ports free now (bound and released), for
    --broker-ports; skips the test when no such run is found."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            start = s.getsockname()[1]
        if start + count > 65535:
            continue
        try:
            held = [socket.create_server(("127.0.0.1", start + i)) for i in range(count)]
        except OSError:
            continue
        for h in held:
            h.close()
        return f"{start}-{start + count - 1}"
    pytest.skip("no run of free ports")


def leader_of(partition):
    return NODES[partition % len(NODES)]


class Cluster:
    def __init__(self, tansu_port):
        self.tansu_port = tansu_port
        self.ports = {}  # node id -> port
        self.peers = {node: [] for node in NODES}  # node -> (host, port) of each connection
        self.produced = {node: set() for node in NODES}  # node -> {(topic, partition)}
        self.fetched = {node: set() for node in NODES}
        self.errors = []
        self.topic_names = {}  # topic id -> name, from Metadata answers (Fetch v13+ uses ids)
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scripted-cluster", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the scripted cluster did not start")

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.ports[1]}"

    def address(self, node):
        return ("127.0.0.1", self.ports[node])

    def _run(self):
        asyncio.set_event_loop(self._loop)

        async def start():
            self._servers = []
            for node in NODES:
                server = await asyncio.start_server(
                    lambda r, w, node=node: self._serve(node, r, w), "127.0.0.1", 0
                )
                self.ports[node] = server.sockets[0].getsockname()[1]
                self._servers.append(server)
            self._ready.set()

        self._loop.run_until_complete(start())
        self._loop.run_forever()

    async def _serve(self, node, reader, writer):
        self.peers[node].append(writer.get_extra_info("peername")[:2])
        up_writer = None
        asked = {}  # correlation id -> (api key, version)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.tansu_port)
            pump = asyncio.ensure_future(self._responses(up_reader, writer, asked))
            try:
                while True:
                    frame = await _frame(reader)
                    api_key, version, cid = struct.unpack_from(">hhi", frame, 4)
                    asked[cid] = (api_key, version)
                    if api_key in (PRODUCE, FETCH):
                        self._note(node, api_key, frame)
                    up_writer.write(frame)
                    await up_writer.drain()
            finally:
                pump.cancel()
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        except Exception as exc:  # noqa: BLE001 - reported to the test
            self.errors.append(repr(exc))
        finally:
            for w in (writer, up_writer):
                if w is not None:
                    w.transport.abort()

    def _note(self, node, api_key, frame):
        _, msg = decode_request(frame, records="view")
        if api_key == PRODUCE:
            for t in msg.topic_data:
                self.produced[node].update((t.name, p.index) for p in t.partition_data)
        else:
            for t in msg.topics:
                name = t.topic or self.topic_names.get(t.topic_id, t.topic_id)
                self.fetched[node].update((name, p.partition) for p in t.partitions)

    async def _responses(self, up_reader, writer, asked):
        try:
            while True:
                frame = await _frame(up_reader)
                cid = struct.unpack_from(">i", frame, 4)[0]
                api_key, version = asked.pop(cid, (None, None))
                if api_key in (METADATA, FIND_COORDINATOR, DESCRIBE_CLUSTER):
                    frame = self._as_cluster(frame, api_key, version)
                writer.write(frame)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            writer.transport.abort()
        except Exception as exc:  # noqa: BLE001
            self.errors.append(repr(exc))
            writer.transport.abort()

    def _as_cluster(self, frame, api_key, version):
        header, msg = decode_response(frame, api_key, version, records="view")
        if api_key in (METADATA, DESCRIBE_CLUSTER):
            template = msg.brokers[0]
            brokers = []
            for node in NODES:
                b = type(template)(**{f: getattr(template, f) for f in _fields(template)})
                b.node_id, (b.host, b.port) = node, self.address(node)
                brokers.append(b)
            msg.brokers = brokers
            if api_key == METADATA:
                msg.controller_id = NODES[0]
                for t in msg.topics or ():
                    if getattr(t, "topic_id", None) is not None:
                        self.topic_names[t.topic_id] = t.name
                    for p in t.partitions or ():
                        p.leader_id = leader_of(p.partition_index)
                        p.replica_nodes = p.isr_nodes = [p.leader_id]
            else:
                msg.controller_id = NODES[0]
        else:
            for c in [msg] if not msg.coordinators else msg.coordinators:
                if c.node_id == TANSU_NODE:
                    c.node_id, (c.host, c.port) = NODES[0], self.address(NODES[0])
        body = msg.encode(version)
        head = frame[4:8] if version is None else _header_bytes(frame, api_key, version)
        return struct.pack(">i", len(head) + len(body)) + head + body

    def close(self):
        async def stop():
            for server in self._servers:
                server.close()

        if self._loop.is_running():
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(5)
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


def _fields(struct_obj):
    return [name for name, _kind, _ in type(struct_obj)._FIELDS]


def _header_bytes(frame, api_key, version):
    from fastkwire.proxy._rewrite import header_end

    return bytes(frame[4 : header_end(frame, api_key, version)])


async def _frame(reader):
    head = await reader.readexactly(4)
    return head + await reader.readexactly(struct.unpack(">i", head)[0])
