"""`Broker`: fastkwire.broker's asyncio broker on its own event loop in a thread."""

from ..broker import Broker as _AsyncBroker
from ..broker._faults import as_rule
from ..broker._security import PROTOCOLS
from ..proxy._loop import ServerThread


class Broker(ServerThread):
    """A Kafka broker in this process, for blocking code and test suites:

        with Broker() as broker:
            KafkaProducer(bootstrap_servers=broker.bootstrap_servers)

    `nodes` listeners on `host` (node ids 0 to nodes-1), on `ports` (one per node; by default
    free ones). Other keyword arguments go to fastkwire.broker.Broker (auto_create_topics,
    num_partitions, log_dir, retention_check_interval_ms, the connection caps, security:
    `users`, `tls_cert`, `tls_key`, `security_protocol`...; `faults`). `protocols`: several
    listeners a node, one per security protocol (("PLAINTEXT", "SSL"): Kafka's
    `listeners=PLAINTEXT://...,SSL://...`), on free ports; `bootstrap_servers_for(protocol)`
    gives their addresses, and each client is told those of the listener it came in on.
    `loop`: "auto"
    (uvloop when installed), "asyncio" or "uvloop". The cluster's shape changes under its
    clients with `move_leader`, `stop_node` and `start_node`."""

    def __init__(
        self, *, nodes=1, host="127.0.0.1", ports=None, loop=None, protocols=None, **kwargs
    ):
        if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
            raise ValueError(f"nodes: must be a positive integer, not {nodes!r}")
        if protocols is not None:
            if ports is not None:
                raise ValueError("ports: not with protocols (their listeners take free ports)")
            if isinstance(protocols, str) or not protocols:
                raise ValueError(f"protocols: a list of security protocols, not {protocols!r}")
            for p in protocols:  # each goes into a listener's text: a name, nothing more
                if not isinstance(p, str) or p.upper() not in PROTOCOLS:
                    raise ValueError(f"protocols: {p!r} is not one of {', '.join(PROTOCOLS)}")
            listeners = [",".join(f"{p}://{host}:0" for p in protocols)] * nodes
        else:
            ports = [0] * nodes if ports is None else list(ports)
            if len(ports) != nodes:
                raise ValueError(f"ports: {len(ports)} given for {nodes} node(s)")
            listeners = [(host, port) for port in ports]
        self.broker = _AsyncBroker(listeners, **kwargs)
        super().__init__(self.broker, loop, name="broker")

    @property
    def bootstrap_servers(self):
        """ "host:port,..." of every node, for a client's bootstrap_servers."""
        return self.broker.bootstrap_servers

    def bootstrap_servers_for(self, protocol):
        """ "host:port,..." of every node's listener of `protocol`."""
        return self.broker.bootstrap_servers_for(protocol)

    @property
    def security_protocol(self):
        """The listeners' security protocol: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL."""
        return self.broker.security_protocol

    def add_fault(self, rule=None, **keys):
        """Adds a fault rule: a Rule, a dict of its keys, "key=value,..." text, or the keys as
        keyword arguments (`add_fault(api="Fetch", disconnect="before", times=1)`); returns
        the Rule, whose `matched` and `fired` count what it did."""
        if (rule is None) == (not keys):
            raise ValueError("add_fault: a rule, or its keys as keyword arguments (not both)")
        rule = as_rule(keys if rule is None else rule)  # checked here, in the caller's thread
        return self.call(self.broker.add_fault, rule)

    def clear_faults(self):
        """Removes every fault rule."""
        self.call(self.broker.clear_faults)

    @property
    def addresses(self):
        """{node id: (host, port)}."""
        return self.broker.addresses

    def create_topic(self, name, partitions=1, configs=None, replication_factor=1):
        """Create topic `name` (as CreateTopics would); returns its id. A replication factor
        above 1 (at most `nodes`) gives its partitions replicas to move to when a node stops."""
        return self.call(
            lambda: (
                self.broker.cluster.create_topic(name, partitions, replication_factor, configs).id
            )
        )

    def leader(self, topic, partition):
        """The node id leading `topic` `partition` (-1: none, its replicas are stopped)."""
        return self.call(lambda: self.broker.cluster.partition(topic, partition).leader)

    def move_leader(self, topic, partition, node_id):
        """Node `node_id` leads `topic` `partition` from now on (a new leader epoch): the
        old leader answers NOT_LEADER_OR_FOLLOWER and Metadata names the new one."""
        self.call(self.broker.move_leader, topic, partition, node_id)

    def stop_node(self, node_id, timeout=10.0):
        """Stop node `node_id`: its listener closes and its connections end; the partitions
        it led move to another replica or have no leader; its groups move to another node."""
        self._await(self.broker.stop_node(node_id), timeout)

    def apply_retention(self):
        """Apply the topics' retention.bytes and retention.ms now; returns how many
        partitions' log start moved."""
        return self.call(self.broker.apply_retention)

    def clean_logs(self, force=False):
        """Run the log cleaner now over the compacted topics (see Broker.clean_logs);
        returns {(topic, partition): what the pass did}."""
        return self.call(self.broker.clean_logs, force)

    def start_node(self, node_id, timeout=10.0):
        """Start node `node_id` (stopped) again on the same address."""
        self._await(self.broker.start_node(node_id), timeout)
