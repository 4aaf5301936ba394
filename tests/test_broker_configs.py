"""DescribeConfigs for a node (BROKER) and its loggers (BROKER_LOGGER), as a Kafka 4.0 KRaft
node answers them: every broker config with its source, synonyms, read-only flag and (v3+)
documentation; the empty name for the cluster's dynamic defaults; INVALID_REQUEST for
another node's id. Through the codec, then kafka-python's, aiokafka's and confluent-kafka's
admin clients."""

import asyncio

import pytest

import fastkwire
from fastkwire.broker import Apis, Cluster, Context
from fastkwire.error_codes import by_name
from fastkwire.testing import Broker

STATIC_BROKER_CONFIG, DEFAULT_CONFIG, DYNAMIC_BROKER_LOGGER_CONFIG = 4, 5, 6
TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
TIMEOUT = 20


def describe(apis, resource_type, name, version=4, keys=None, node=0, docs=False):
    D = fastkwire.DescribeConfigsRequest
    request = D(
        resources=[
            D.DescribeConfigsResource(
                resource_type=resource_type, resource_name=name, configuration_keys=keys
            )
        ],
        include_synonyms=True,
        include_documentation=docs,
    )
    out = []
    apis.handle(D.API_KEY, version, request, Context(node), out.append)
    frame = fastkwire.encode_response(out[0], version, 7)
    _, decoded = fastkwire.decode_response(frame, D.API_KEY, version)
    return decoded.results[0]


@pytest.fixture
def apis():
    return Apis(Cluster({0: ("127.0.0.1", 9092), 1: ("127.0.0.1", 9093)}))


def test_a_node_describes_every_broker_config_with_its_source_and_synonyms(apis):
    result = describe(apis, BROKER, "1", node=1)
    assert result.error_code == 0
    configs = {c.name: c for c in result.configs}
    assert len(configs) > 50
    listeners = configs["listeners"]
    assert listeners.value == "PLAINTEXT://127.0.0.1:9093"
    assert listeners.config_source == STATIC_BROKER_CONFIG
    assert [(s.name, s.source) for s in listeners.synonyms] == [
        ("listeners", STATIC_BROKER_CONFIG),
        ("listeners", DEFAULT_CONFIG),
    ]
    assert not listeners.read_only  # Kafka updates listeners at run time
    assert configs["node.id"].value == "1" and configs["node.id"].read_only
    # Kafka's defaults, told apart from what the node was started with
    hours = configs["log.retention.hours"]
    assert (hours.value, hours.config_source, hours.read_only) == ("168", DEFAULT_CONFIG, True)
    assert not configs["log.retention.ms"].read_only  # Kafka changes this name at run time
    assert configs["log.retention.ms"].value is None
    assert configs["log.retention.ms"].synonyms == []  # none of its own: hours is the default
    assert [s.name for s in configs["log.roll.hours"].synonyms] == ["log.roll.hours"]
    assert configs["message.max.bytes"].value == "1048588"
    assert configs["producer.id.expiration.ms"].value == "86400000"
    assert configs["transactional.id.expiration.ms"].config_type == 3  # INT
    # the broker's own settings that are not Kafka's defaults are static ones
    delay = configs["group.initial.rebalance.delay.ms"]
    assert (delay.value, delay.config_source) == ("3000", DEFAULT_CONFIG)  # no coordinator
    assert all(c.documentation is None for c in result.configs)  # not asked for


def test_documentation_from_v3_when_asked_and_configuration_keys(apis):
    result = describe(apis, BROKER, "0", version=3, keys=["num.partitions"], docs=True)
    (config,) = result.configs
    assert config.name == "num.partitions" and config.documentation
    result = describe(apis, BROKER, "0", version=2, keys=["num.partitions"], docs=True)
    assert not result.configs[0].documentation  # v2 has no such field
    assert len(describe(apis, BROKER, "0", keys=[]).configs) > 50  # empty: all, as Kafka


def test_the_empty_name_and_other_nodes_ids(apis):
    empty = describe(apis, BROKER, "")
    assert (empty.error_code, empty.configs) == (0, [])  # no dynamic cluster defaults
    other = describe(apis, BROKER, "1", node=0)
    assert other.error_code == by_name("INVALID_REQUEST").code
    assert other.error_message == (
        "Unexpected broker id, expected 0 or empty string, but received 1"
    )
    word = describe(apis, BROKER, "zero")
    assert word.error_message == "Broker id must be an integer, but it is: zero"


def test_broker_loggers(apis):
    result = describe(apis, BROKER_LOGGER, "0")
    assert result.error_code == 0
    levels = {c.name: c for c in result.configs}
    assert {"root", "fastkwire.broker"} <= set(levels)
    assert levels["root"].config_source == DYNAMIC_BROKER_LOGGER_CONFIG
    assert levels["root"].value in ("TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL")
    assert not levels["root"].read_only
    assert describe(apis, BROKER_LOGGER, "").error_message == "Broker id must not be empty"
    assert describe(apis, BROKER_LOGGER, "1").error_code == by_name("INVALID_REQUEST").code


@pytest.fixture(scope="module")
def broker():
    with Broker() as broker:
        yield broker


def test_kafka_python_describes_a_broker(broker):
    """kafka-python's default filter ("modified") leaves out static and default configs,
    as it does against Kafka; the others show what Kafka would."""
    kafka = pytest.importorskip("kafka")
    from kafka.admin import ConfigResource, ConfigResourceType

    admin = kafka.KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        node = ConfigResource(ConfigResourceType.BROKER, "0")

        def configs(**options):
            return admin.describe_configs([node], **options)["broker"]["0"]

        assert configs() == {}  # nothing changed at run time: Kafka's answer too
        dynamic = configs(config_filter="dynamic")
        assert "log.segment.bytes" in dynamic and "node.id" not in dynamic
        assert "log.retention.hours" not in dynamic  # read-only: its log.retention.ms is not
        default = configs(config_filter="default")
        assert default["num.partitions"]["config_source"] == "DEFAULT_CONFIG"
        static = configs(config_filter="static")
        assert static["listeners"]["value"] == f"PLAINTEXT://{broker.bootstrap_servers}"
        # as Kafka 4.0 answers (kafka-python's own integration suite checks it)
        advertised = configs(config_filter="all")["advertised.listeners"]
        assert (advertised["config_source"], advertised["read_only"]) == (
            "STATIC_BROKER_CONFIG",
            True,
        )
        logger = admin.describe_configs(
            [ConfigResource(ConfigResourceType.BROKER_LOGGER, "0")], config_filter="all"
        )
        assert logger["broker_logger"]["0"]["root"]["config_source"] == (
            "DYNAMIC_BROKER_LOGGER_CONFIG"
        )
    finally:
        admin.close()


def test_aiokafka_describes_a_broker(broker):
    pytest.importorskip("aiokafka")
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    async def run():
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
        await admin.start()
        try:
            (response,) = await admin.describe_configs(
                [ConfigResource(ConfigResourceType.BROKER, "0")], include_synonyms=True
            )
        finally:
            await admin.close()
        return response.to_object()["resources"][0]

    resource = asyncio.run(asyncio.wait_for(run(), TIMEOUT))
    assert resource["error_code"] == 0
    entries = {e["config_names"]: e for e in resource["config_entries"]}
    assert entries["log.segment.bytes"]["config_source"] == DEFAULT_CONFIG
    assert entries["log.segment.bytes"]["read_only"] is False
    assert entries["node.id"]["config_source"] == STATIC_BROKER_CONFIG


def test_confluent_kafka_describes_a_broker(broker):
    pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    (future,) = admin.describe_configs([ConfigResource("BROKER", "0")]).values()
    configs = future.result(TIMEOUT)
    assert configs["log.retention.hours"].is_default
    assert configs["log.retention.hours"].is_read_only
    assert not configs["log.segment.bytes"].is_read_only
    assert configs["node.id"].is_read_only and not configs["node.id"].is_default
    assert configs["listeners"].value == f"PLAINTEXT://{broker.bootstrap_servers}"


def test_a_topics_configs_with_documentation_and_empty_keys(apis):
    apis.cluster.create_topic("t", configs={"retention.ms": "1000"})
    result = describe(apis, 2, "t", version=3, keys=["retention.ms"], docs=True)
    (config,) = result.configs
    assert (config.name, config.value) == ("retention.ms", "1000") and config.documentation
    everything = describe(apis, 2, "t", keys=[])  # empty: all, as Kafka's ConfigHelper
    assert len(everything.configs) > 20
    assert all(c.documentation is None for c in everything.configs)  # not asked for


def alter(apis, resource_name, *configs, incremental=False, node=0, validate_only=False):
    """The (error code, message) of an AlterConfigs (or IncrementalAlterConfigs: configs
    are (name, value[, operation: SET by default])) of BROKER `resource_name`."""
    A = fastkwire.IncrementalAlterConfigsRequest if incremental else fastkwire.AlterConfigsRequest
    entries = [
        A.AlterableConfig(name=c[0], value=c[1], config_operation=(*c, 0)[2])
        if incremental
        else A.AlterableConfig(name=c[0], value=c[1])
        for c in configs
    ]
    request = A(
        resources=[
            A.AlterConfigsResource(
                resource_type=BROKER, resource_name=resource_name, configs=entries
            )
        ],
        validate_only=validate_only,
    )
    out = []
    apis.handle(A.API_KEY, 1 if incremental else 2, request, Context(node), out.append)
    (response,) = out[0].responses
    return response.error_code, response.error_message


def test_producer_id_expiration_ms_changes_at_run_time(apis):
    """As Kafka's dynamic broker config: per node (DYNAMIC_BROKER_CONFIG, sent to that
    node) or the cluster's default (DYNAMIC_DEFAULT_BROKER_CONFIG, the name ""), shown by
    DescribeConfigs and applied by the expiry of the partitions the node leads."""
    name = "producer.id.expiration.ms"
    assert alter(apis, "", (name, "5000"), incremental=True) == (0, None)
    (default,) = describe(apis, BROKER, "").configs
    assert (default.name, default.value, default.config_source) == (name, "5000", 3)
    assert alter(apis, "1", (name, "7000"), node=1) == (0, None)
    node1 = {c.name: c for c in describe(apis, BROKER, "1", node=1).configs}[name]
    assert (node1.value, node1.config_source) == ("7000", 2)
    assert [(s.value, s.source) for s in node1.synonyms] == [
        ("7000", 2),
        ("5000", 3),
        ("86400000", DEFAULT_CONFIG),
    ]
    node0 = {c.name: c for c in describe(apis, BROKER, "0").configs}[name]
    assert (node0.value, node0.config_source) == ("5000", 3)
    assert apis._producer_id_expiration_ms(1) == 7000
    assert apis._producer_id_expiration_ms(0) == 5000
    # DELETE goes back to what is under it
    assert alter(apis, "1", (name, None, 1), incremental=True, node=1) == (0, None)
    assert apis._producer_id_expiration_ms(1) == 5000
    # Kafka's refusals
    refused = alter(apis, "1", (name, "1"), node=0)
    assert refused == (
        by_name("INVALID_REQUEST").code,
        "Unexpected broker id, expected 0, but received 1",
    )
    refused = alter(apis, "0", ("node.id", "3"))
    assert refused == (
        by_name("INVALID_REQUEST").code,
        "Cannot update these configs dynamically: Set(node.id)",
    )
    assert alter(apis, "0", (name, "0"))[0] == by_name("INVALID_CONFIG").code
    assert alter(apis, "0", (name, "soon"))[0] == by_name("INVALID_CONFIG").code
    assert alter(apis, "0", ("log.retention.ms", "1"))[0] == by_name("INVALID_REQUEST").code
    assert alter(apis, "0", (name, "9"), validate_only=True) == (0, None)
    assert apis._producer_id_expiration_ms(0) == 5000  # validated only


def test_kafka_python_changes_producer_id_expiration_ms(broker):
    kafka = pytest.importorskip("kafka")
    from kafka.admin import ConfigResource, ConfigResourceType

    admin = kafka.KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        node = ConfigResource(
            ConfigResourceType.BROKER, "0", {"producer.id.expiration.ms": "60000"}
        )
        assert admin.alter_configs([node], incremental=True) == {"broker": {"0": "OK"}}
        configs = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "0")])
    finally:
        admin.close()
    changed = configs["broker"]["0"]  # "modified": what was changed at run time
    assert changed["producer.id.expiration.ms"]["config_source"] == "DYNAMIC_BROKER_CONFIG"
    assert changed["producer.id.expiration.ms"]["value"] == "60000"


@pytest.mark.parametrize("value", ["1_000", "5\x00", "", "0x10", "1e3"])
def test_a_dynamic_config_value_is_a_number_as_kafka_reads_one(apis, value):
    """Python's int() takes "1_000"; Kafka's ConfigDef (Integer.parseInt of the trimmed
    text) refuses it: INVALID_CONFIG, nothing kept."""
    name = "producer.id.expiration.ms"
    for incremental in (False, True):
        error, message = alter(apis, "0", (name, value), incremental=incremental)
        assert error == by_name("INVALID_CONFIG").code, message
    assert apis._producer_id_expiration_ms(0) is None
    assert alter(apis, "0", (name, " 7000 ")) == (0, None)  # Kafka trims it
    assert apis._producer_id_expiration_ms(0) == 7000


@pytest.mark.parametrize("resource_name", ["0_0", " 0", "0 ", "+0_"])
def test_a_node_id_is_read_as_kafka_reads_one(apis, resource_name):
    """Integer.parseInt refuses spaces and underscores, which Python's int() takes: the
    node is not named, INVALID_REQUEST, for DescribeConfigs and AlterConfigs alike."""
    for resource_type in (BROKER, BROKER_LOGGER):
        result = describe(apis, resource_type, resource_name)
        assert result.error_code == by_name("INVALID_REQUEST").code, resource_type
    error, _ = alter(apis, resource_name, ("producer.id.expiration.ms", "5000"))
    assert error == by_name("INVALID_REQUEST").code
    assert apis.dynamic_configs.by_resource == {}


def test_a_node_is_described_once_whatever_the_spellings_of_its_id(apis):
    """'0', '00', '+0', '٠' (any script's zero)... had each been described in full: some
    thousands of spellings of one node id, a few bytes each, made an answer over 800 times
    the request's size (repeats are answered once: `unique`). Only a node id as Kafka's
    clients write it (its decimal digits) names a node."""
    zeros = [chr(c) for c in range(0x110000) if chr(c).isdecimal() and int(chr(c)) == 0]
    spellings = ["00", "+0", "-0", *zeros[1:], *(z + y for z in zeros for y in zeros)]
    D = fastkwire.DescribeConfigsRequest
    request = D(
        resources=[
            D.DescribeConfigsResource(resource_type=t, resource_name=name, configuration_keys=None)
            for t in (BROKER, BROKER_LOGGER)
            for name in ["0", *spellings]
        ],
        include_synonyms=True,
        include_documentation=True,
    )
    frame = fastkwire.encode_request(request, 4, 1, "c")
    out = []
    apis.handle(D.API_KEY, 4, fastkwire.decode_request(frame)[1], Context(0), out.append)
    described = [r for r in out[0].results if r.error_code == 0]
    assert [(r.resource_type, r.resource_name) for r in described] == [
        (BROKER, "0"),
        (BROKER_LOGGER, "0"),
    ]
    # each refusal says why, naming the spelling: a few times the request, not hundreds
    assert len(fastkwire.encode_response(out[0], 4, 1)) < 8 * len(frame)
    for name in spellings[:5]:
        error, _ = alter(apis, name, ("producer.id.expiration.ms", "5000"))
        assert error == by_name("INVALID_REQUEST").code, name
    assert apis.dynamic_configs.by_resource == {}


def test_incremental_alter_configs_refuses_a_config_or_a_resource_named_twice(apis):
    """As Kafka's ConfigAdminManager: a config named twice in one resource (SET then
    DELETE had been applied in turn) or a resource named twice in one request (each
    applied in turn) is INVALID_REQUEST, nothing changed."""
    name = "producer.id.expiration.ms"
    error, message = alter(apis, "0", (name, "5000"), (name, None, 1), incremental=True)
    assert (error, message) == (
        by_name("INVALID_REQUEST").code,
        "Error due to duplicate config keys",
    )
    Inc = fastkwire.IncrementalAlterConfigsRequest
    resource = Inc.AlterConfigsResource(
        resource_type=BROKER,
        resource_name="0",
        configs=[Inc.AlterableConfig(name=name, value="5000", config_operation=0)],
    )
    out = []
    request = Inc(resources=[resource, resource], validate_only=False)
    apis.handle(Inc.API_KEY, 1, request, Context(0), out.append)
    assert [(r.error_code, r.error_message) for r in out[0].responses] == [
        (by_name("INVALID_REQUEST").code, "Each resource must appear at most once.")
    ] * 2
    assert apis.dynamic_configs.by_resource == {}


def test_legacy_alter_configs_refuses_a_config_or_a_resource_named_twice(apis):
    """Kafka's ConfigAdminManager.preprocess checks the legacy AlterConfigs as the
    incremental one: a key named twice (the last one had won) or a resource named twice
    (each applied in turn, on topics too) is INVALID_REQUEST, nothing changed."""
    name = "producer.id.expiration.ms"
    error, message = alter(apis, "0", (name, "5000"), (name, "6000"))
    assert (error, message) == (
        by_name("INVALID_REQUEST").code,
        "Error due to duplicate config keys",
    )
    apis.cluster.create_topic("t")
    A = fastkwire.AlterConfigsRequest
    resources = [
        A.AlterConfigsResource(
            resource_type=TOPIC,
            resource_name="t",
            configs=[A.AlterableConfig(name="retention.ms", value=value)],
        )
        for value in ("1000", "2000")
    ]
    out = []
    apis.handle(A.API_KEY, 2, A(resources=resources, validate_only=False), Context(0), out.append)
    assert [(r.error_code, r.error_message) for r in out[0].responses] == [
        (by_name("INVALID_REQUEST").code, "Each resource must appear at most once.")
    ] * 2
    assert apis.dynamic_configs.by_resource == {}
    assert "retention.ms" not in apis.cluster.topics["t"].configs


class _CountedKeys(list):
    looked_up = 0

    def __contains__(self, item):
        type(self).looked_up += 1
        return super().__contains__(item)


def test_configuration_keys_are_read_once_not_searched_for_each_config(apis):
    """A resource's configuration keys had been searched (a list) for each of the 30 to 90
    configs described: some 85 comparisons per key a client sends, for every resource."""
    apis.cluster.create_topic("t")
    D = fastkwire.DescribeConfigsRequest
    keys = _CountedKeys(["retention.ms", "num.partitions", "root", *(f"k{i}" for i in range(50))])
    request = D(
        resources=[
            D.DescribeConfigsResource(resource_type=t, resource_name=n, configuration_keys=keys)
            for t, n in ((2, "t"), (BROKER, "0"), (BROKER, ""), (BROKER_LOGGER, "0"))
        ],
        include_synonyms=False,
    )
    out = []
    apis.handle(D.API_KEY, 4, request, Context(0), out.append)
    assert [[c.name for c in r.configs] for r in out[0].results] == [
        ["retention.ms"],
        ["num.partitions"],
        [],
        ["root"],
    ]
    assert _CountedKeys.looked_up == 0


@pytest.mark.parametrize(
    "name, value, ok",
    [
        ("retention.ms", " 5000 ", True),  # Kafka's ConfigDef trims a value
        ("retention.ms", "1_000", False),  # Python's int() takes it, Java's parseLong not
        ("min.cleanable.dirty.ratio", "0_5", False),
        ("min.cleanable.dirty.ratio", " 0.5", True),
        ("unclean.leader.election.enable", " TRUE ", True),
        ("unclean.leader.election.enable", "yes", False),
    ],
)
def test_a_topic_config_value_is_read_as_kafka_reads_one(name, value, ok):
    from fastkwire.broker._cluster import ClusterError, check_config

    if ok:
        check_config(name, value)
    else:
        with pytest.raises(ClusterError, match="INVALID_CONFIG|not"):
            check_config(name, value)
