"""A 3-node Kafka cluster for the proxy's broker mapping: fastkwire's broker with three
listeners (nodes 0, 1 and 2, each its own port on 127.0.0.1), partition leaders spread over
them, watched as it serves. What the nodes record (who connected, which partitions each was
asked to produce to or fetch from) shows whether a client followed the leaders, and through
whom; the broker itself refuses a Produce or Fetch sent to a node that does not lead the
partition.
"""

import socket

import pytest

from fastkwire import FetchRequest, ProduceRequest
from fastkwire.testing import Broker

NODES = (0, 1, 2)


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


class Cluster:
    def __init__(self):
        self.peers = {node: [] for node in NODES}  # node -> (host, port) of each connection
        self.produced = {node: set() for node in NODES}  # node -> {(topic, partition)}
        self.fetched = {node: set() for node in NODES}
        self.errors = []
        self._broker = Broker(nodes=len(NODES)).start()
        self.ports = {node: port for node, (_, port) in self._broker.addresses.items()}
        apis = self._broker.broker.apis
        handle = apis.handle

        def watched(api_key, version, request, ctx, reply):  # on the broker's thread
            try:
                self._note(api_key, request, ctx)
            except Exception as exc:  # noqa: BLE001 - reported to the test
                self.errors.append(repr(exc))
            return handle(api_key, version, request, ctx, reply)

        apis.handle = watched

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.ports[NODES[0]]}"

    def leader_of(self, topic, partition):
        """The node that leads `partition` of `topic` (created by then)."""
        return self._broker.call(
            lambda: self._broker.broker.cluster.topics[topic].partitions[partition].leader
        )

    def _note(self, api_key, request, ctx):
        node = ctx.node_id
        peer = ctx.connection.transport.get_extra_info("peername")[:2]
        if peer not in self.peers[node]:
            self.peers[node].append(peer)
        if api_key == ProduceRequest.API_KEY:
            for t in request.topic_data:
                self.produced[node].update((t.name, p.index) for p in t.partition_data)
        elif api_key == FetchRequest.API_KEY:
            ids = self._broker.broker.cluster.topic_ids
            for t in request.topics:
                name = t.topic or getattr(ids.get(t.topic_id), "name", t.topic_id)
                self.fetched[node].update((name, p.partition) for p in t.partitions)

    def close(self):
        self._broker.stop()
