"""ACL enforcement by a broker started with an authorizer, as Kafka's StandardAuthorizer
and KafkaApis do it: the decisions themselves (patterns, DENY over ALLOW, implied
operations, hosts, super users, allow.everyone.if.no.acl.found), the check each API makes
(answers encoded at the request's version), and real clients over SASL (kafka-python,
aiokafka, confluent-kafka) refused with Kafka's errors until an ACL grants the right."""

import asyncio
import uuid

import pytest

import fastkwire
from fastkwire import encode_response, records
from fastkwire.broker import Apis, Authorizer, Cluster, Context, GroupCoordinator
from fastkwire.broker._acls import Acl
from fastkwire.broker._apis import CLOSE, NO_ANSWER
from fastkwire.error_codes import by_name
from fastkwire.records import Record
from fastkwire.testing import Broker

from certs import tls_files  # noqa: F401 - a fixture

TIMEOUT = 20
USERS = {"admin": "admin-Pw-1", "alice": "alice-Pw-2", "bob": "bob-Pw-3"}
ALICE = "User:alice"
TOPIC, GROUP, CLUSTER, TXN = 2, 3, 4, 5
LITERAL, PREFIXED = 3, 4
ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 2, 3, 4, 5, 6, 7, 8
DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 10, 11, 12
DENY, ALLOW = 2, 3


def code(name):
    return by_name(name).code


def acl(rtype, name, op, principal=ALICE, permission=ALLOW, pattern=LITERAL, host="*"):
    return Acl(rtype, name, pattern, principal, host, op, permission)


# ---- the decisions


def authorizer(*acls, **kwargs):
    apis = Apis(Cluster({0: ("127.0.0.1", 9092)}), authorizer=Authorizer(**kwargs))
    for a in acls:
        apis.acls.add(a)
    return apis.authorizer


def may(auth, op, rtype, name, principal=ALICE, host="10.0.0.1"):
    return auth.authorize(principal, host, op, rtype, name)


def test_literal_wildcard_and_prefixed_patterns_name_their_resources():
    auth = authorizer(
        acl(TOPIC, "orders", READ),
        acl(TOPIC, "logs-", WRITE, pattern=PREFIXED),
        acl(GROUP, "*", READ),
    )
    assert may(auth, READ, TOPIC, "orders")
    assert not may(auth, READ, TOPIC, "orders2")  # a literal name is the whole name
    assert may(auth, WRITE, TOPIC, "logs-app")
    assert not may(auth, WRITE, TOPIC, "logs")  # shorter than the prefix
    assert may(auth, READ, GROUP, "any-group")
    assert not may(auth, READ, TOPIC, "orders", principal="User:bob")


def test_deny_beats_allow_and_all_covers_every_operation():
    auth = authorizer(
        acl(TOPIC, "*", ALL),
        acl(TOPIC, "secret-", READ, permission=DENY, pattern=PREFIXED),
    )
    assert may(auth, READ, TOPIC, "public")
    assert may(auth, ALTER_CONFIGS, TOPIC, "public")
    assert not may(auth, READ, TOPIC, "secret-plans")
    assert may(auth, WRITE, TOPIC, "secret-plans")  # the DENY is of READ only
    auth = authorizer(acl(TOPIC, "t", READ), acl(TOPIC, "t", ALL, permission=DENY))
    assert not may(auth, DESCRIBE, TOPIC, "t")


def test_operations_imply_describe_as_kafka_s():
    for op in (READ, WRITE, DELETE, ALTER):
        auth = authorizer(acl(TOPIC, "t", op))
        assert may(auth, DESCRIBE, TOPIC, "t"), op
    auth = authorizer(acl(TOPIC, "t", ALTER_CONFIGS))
    assert may(auth, DESCRIBE_CONFIGS, TOPIC, "t")
    assert not may(auth, DESCRIBE, TOPIC, "t")
    auth = authorizer(acl(TOPIC, "t", DESCRIBE))
    assert not may(auth, READ, TOPIC, "t")
    auth = authorizer(acl(TOPIC, "t", CREATE))
    assert not may(auth, DESCRIBE, TOPIC, "t")


def test_hosts_and_the_any_user_principal():
    auth = authorizer(acl(TOPIC, "t", READ, principal="User:*", host="10.0.0.1"))
    assert may(auth, READ, TOPIC, "t", principal="User:bob", host="10.0.0.1")
    assert not may(auth, READ, TOPIC, "t", principal="User:bob", host="10.0.0.2")


def test_super_users_and_resources_no_acl_names():
    auth = authorizer(acl(TOPIC, "t", READ, principal="User:bob"), super_users="User:root")
    assert may(auth, ALTER, CLUSTER, "kafka-cluster", principal="User:root")
    assert not may(auth, READ, TOPIC, "free")  # no ACL: refused unless allowed for everyone
    assert not may(auth, READ, TOPIC, "t")  # an ACL names it, for another principal
    open_auth = authorizer(
        acl(TOPIC, "t", READ, principal="User:bob"), allow_everyone_if_no_acl_found=True
    )
    assert may(open_auth, READ, TOPIC, "free")
    assert not may(open_auth, READ, TOPIC, "t")


def test_acls_deleted_stop_applying():
    apis = Apis(Cluster({0: ("127.0.0.1", 9092)}), authorizer=Authorizer())
    apis.acls.add(acl(TOPIC, "t", READ))
    assert may(apis.authorizer, READ, TOPIC, "t")
    apis.acls.remove(acl(TOPIC, "t", READ))
    assert not may(apis.authorizer, READ, TOPIC, "t")


def test_super_users_must_be_principals():
    with pytest.raises(ValueError, match="super_users"):
        Authorizer(super_users=["alice"])
    with pytest.raises(TypeError, match="authorizer"):
        fastkwire.broker.Broker(authorizer="yes")


# ---- each API's check, without a socket


def make_apis(*acls):
    cluster = Cluster({0: ("127.0.0.1", 9092)})
    groups = GroupCoordinator(
        None, topic_partitions=cluster.partition_count, topics=cluster.topic_summary
    )
    apis = Apis(cluster, groups=groups, authorizer=Authorizer(super_users=["User:admin"]))
    for name in ("open", "closed"):
        cluster.create_topic(name, 2)
    for a in acls:
        apis.acls.add(a)
    return apis


def call(apis, request, version, principal=ALICE):
    out = []
    ctx = Context(0, "test", "10.0.0.1", principal=principal)
    apis.handle(type(request).API_KEY, version, request, ctx, out.append)
    assert len(out) == 1
    if out[0] is not CLOSE:
        encode_response(out[0], version, 1)  # the answer fits the version
    return out[0]


def batch():
    return records.write_batch([Record(timestamp=1, key=None, value=b"v")])


def produce_request(*topics, acks=1, transactional_id=None):
    P = fastkwire.ProduceRequest
    return P(
        acks=acks,
        timeout_ms=100,
        transactional_id=transactional_id,
        topic_data=[
            P.TopicProduceData(
                name=t,
                partition_data=[P.PartitionProduceData(index=i, records=batch()) for i in (0, 1)],
            )
            for t in topics
        ],
    )


def by_topic(topics, name_field="name", parts="partitions"):
    return {getattr(t, name_field): [p.error_code for p in getattr(t, parts)] for t in topics}


def test_produce_is_refused_per_partition_of_the_topics_not_writable():
    apis = make_apis(acl(TOPIC, "open", WRITE))
    answer = call(apis, produce_request("open", "closed"), 9)
    errors = by_topic(answer.responses, parts="partition_responses")
    assert errors == {"open": [0, 0], "closed": [code("TOPIC_AUTHORIZATION_FAILED")] * 2}
    assert apis.cluster.partition("closed", 0).log.high_watermark == 0
    assert apis.cluster.partition("open", 0).log.high_watermark == 1
    assert call(apis, produce_request("closed", acks=0), 9) is CLOSE


def test_transactional_produce_needs_write_on_the_transactional_id():
    apis = make_apis(acl(TOPIC, "open", WRITE))
    answer = call(apis, produce_request("open", transactional_id="tx"), 9)
    errors = by_topic(answer.responses, parts="partition_responses")
    assert errors == {"open": [code("TRANSACTIONAL_ID_AUTHORIZATION_FAILED")] * 2}


def fetch_request(*topics, version=11):
    F = fastkwire.FetchRequest
    return F(
        replica_id=-1,
        max_wait_ms=5000,
        min_bytes=1,
        max_bytes=1 << 20,
        session_id=0,
        session_epoch=-1,
        topics=[
            F.FetchTopic(
                topic=t,
                partitions=[
                    F.FetchPartition(partition=i, fetch_offset=0, partition_max_bytes=1 << 20)
                    for i in (0, 1)
                ],
            )
            for t in topics
        ],
        forgotten_topics_data=[],
    )


def test_fetch_needs_read_and_answers_at_once_when_nothing_is_left():
    apis = make_apis(acl(TOPIC, "open", READ))
    call(apis, produce_request("open", "closed"), 9, principal="User:admin")
    answer = call(apis, fetch_request("open", "closed"), 11)
    errors = by_topic(answer.responses, "topic")
    assert errors == {"open": [0, 0], "closed": [code("TOPIC_AUTHORIZATION_FAILED")] * 2}
    # everything refused: answered now, not after max_wait_ms
    answer = call(apis, fetch_request("closed"), 11)
    assert by_topic(answer.responses, "topic") == {
        "closed": [code("TOPIC_AUTHORIZATION_FAILED")] * 2
    }


def test_an_incremental_fetch_checks_its_session_s_partitions_again():
    apis = make_apis(acl(TOPIC, "open", READ))
    full = fetch_request("open")
    full.session_epoch, full.max_wait_ms = 0, 0  # a new session
    opened = call(apis, full, 11)
    assert opened.session_id != 0 and by_topic(opened.responses, "topic") == {"open": [0, 0]}
    call(apis, produce_request("open"), 9, principal="User:admin")  # new data in the session
    incremental = fetch_request()
    incremental.session_id, incremental.session_epoch, incremental.max_wait_ms = (
        opened.session_id,
        1,
        0,
    )
    answered = call(apis, incremental, 11)
    assert by_topic(answered.responses, "topic") == {"open": [0, 0]}
    assert answered.responses[0].partitions[0].records  # read: still allowed
    apis.acls.remove(acl(TOPIC, "open", READ))
    call(apis, produce_request("open"), 9, principal="User:admin")
    incremental.session_epoch = 2
    refused = call(apis, incremental, 11)
    assert by_topic(refused.responses, "topic") == {
        "open": [code("TOPIC_AUTHORIZATION_FAILED")] * 2
    }
    assert not refused.responses[0].partitions[0].records


def test_fetch_by_topic_id_is_checked_by_the_topic_s_name():
    apis = make_apis(acl(TOPIC, "open", READ))
    request = fetch_request("closed")
    request.topics[0].topic_id = apis.cluster.topics["closed"].id
    request.topics[0].topic = None
    answer = call(apis, request, 13)
    assert answer.responses[0].topic_id == apis.cluster.topics["closed"].id
    assert [p.error_code for p in answer.responses[0].partitions] == [
        code("TOPIC_AUTHORIZATION_FAILED")
    ] * 2


def metadata(apis, names, version=12, **kw):
    M = fastkwire.MetadataRequest
    topics = None if names is None else [M.MetadataRequestTopic(name=n) for n in names]
    return call(apis, M(topics=topics, allow_auto_topic_creation=True, **kw), version)


def test_metadata_hides_topics_not_describable_and_creates_only_with_create():
    apis = make_apis(acl(TOPIC, "open", READ), acl(TOPIC, "new-", DESCRIBE, pattern=PREFIXED))
    listing = metadata(apis, None)
    assert [t.name for t in listing.topics] == ["open"]
    named = metadata(apis, ["open", "closed", "new-a"])
    errors = {t.name: t.error_code for t in named.topics}
    assert errors == {
        "open": 0,
        "closed": code("TOPIC_AUTHORIZATION_FAILED"),
        "new-a": code("TOPIC_AUTHORIZATION_FAILED"),  # describable, but not to be created
    }
    assert "new-a" not in apis.cluster.topics
    apis.acls.add(acl(TOPIC, "new-", CREATE, pattern=PREFIXED))
    assert metadata(apis, ["new-a"]).topics[0].error_code == 0
    assert "new-a" in apis.cluster.topics
    ops = metadata(apis, ["open"], include_topic_authorized_operations=True)
    assert ops.topics[0].topic_authorized_operations == (1 << READ) | (1 << DESCRIBE)


def test_metadata_v0_naming_only_refused_topics_lists_none_of_the_others():
    apis = make_apis(acl(TOPIC, "open", READ))
    answer = metadata(apis, ["closed"], version=0)
    assert [(t.name, t.error_code) for t in answer.topics] == [
        ("closed", code("TOPIC_AUTHORIZATION_FAILED"))
    ]


def test_describe_topic_partitions_pages_only_the_topics_it_may_describe():
    # Kafka filters before paging: the cursor named a hidden topic, and hidden topics'
    # partitions used up the page ("closed" has 2, "secret" 3; "open" is describable).
    apis = make_apis(acl(TOPIC, "open", DESCRIBE), acl(TOPIC, "zz", DESCRIBE))
    apis.cluster.create_topic("secret", 3)
    apis.cluster.create_topic("zz", 1)
    D = fastkwire.DescribeTopicPartitionsRequest
    pages, cursor = [], None
    for _ in range(5):
        answer = call(apis, D(topics=[], response_partition_limit=2, cursor=cursor), 0)
        pages.append([(t.name, len(t.partitions)) for t in answer.topics])
        cursor = answer.next_cursor
        if cursor is None:
            break
        assert cursor.topic_name in ("open", "zz")
    assert pages == [[("open", 2)], [("zz", 1)]]
    nothing = make_apis()
    answer = call(nothing, D(topics=[], response_partition_limit=1, cursor=None), 0)
    assert answer.topics == [] and answer.next_cursor is None
    named = call(apis, D(topics=[D.TopicRequest(name=n) for n in ("secret", "open")]), 0)
    assert [(t.name, t.error_code) for t in named.topics] == [
        ("open", 0),
        ("secret", code("TOPIC_AUTHORIZATION_FAILED")),
    ]


def test_topic_admin_apis_need_create_delete_alter():
    apis = make_apis(acl(TOPIC, "open", DELETE), acl(TOPIC, "mine-", CREATE, pattern=PREFIXED))
    C = fastkwire.CreateTopicsRequest
    created = call(
        apis,
        C(
            topics=[
                C.CreatableTopic(name=n, num_partitions=1, replication_factor=1)
                for n in ("mine-1", "other")
            ],
            timeout_ms=1000,
        ),
        7,
    )
    assert {t.name: t.error_code for t in created.topics} == {
        "mine-1": 0,
        "other": code("TOPIC_AUTHORIZATION_FAILED"),
    }
    # created, but its configs are not the client's to see without DESCRIBE_CONFIGS
    assert created.topics[0].topic_config_error_code == code("TOPIC_AUTHORIZATION_FAILED")
    assert created.topics[0].configs == [] and created.topics[0].num_partitions == 1
    P = fastkwire.CreatePartitionsRequest
    grown = call(
        apis,
        P(topics=[P.CreatePartitionsTopic(name="open", count=3)], timeout_ms=1000),
        3,
    )
    assert grown.results[0].error_code == code("TOPIC_AUTHORIZATION_FAILED")
    D = fastkwire.DeleteTopicsRequest
    deleted = call(apis, D(topic_names=["open", "closed"], timeout_ms=1000), 5)
    assert {t.name: t.error_code for t in deleted.responses} == {
        "open": 0,
        "closed": code("TOPIC_AUTHORIZATION_FAILED"),
    }
    assert "closed" in apis.cluster.topics and "open" not in apis.cluster.topics


def test_configs_need_describe_configs_and_alter_configs():
    apis = make_apis(acl(TOPIC, "open", ALTER_CONFIGS))
    D = fastkwire.DescribeConfigsRequest
    described = call(
        apis,
        D(
            resources=[
                D.DescribeConfigsResource(resource_type=2, resource_name=n, configuration_keys=None)
                for n in ("open", "closed")
            ]
            + [D.DescribeConfigsResource(resource_type=4, resource_name="0")],
        ),
        4,
    )
    assert {r.resource_name: r.error_code for r in described.results} == {
        "open": 0,
        "closed": code("TOPIC_AUTHORIZATION_FAILED"),
        "0": code("CLUSTER_AUTHORIZATION_FAILED"),
    }
    A = fastkwire.IncrementalAlterConfigsRequest
    altered = call(
        apis,
        A(
            resources=[
                A.AlterConfigsResource(
                    resource_type=2,
                    resource_name=n,
                    configs=[A.AlterableConfig(name="retention.ms", config_operation=0, value="1")],
                )
                for n in ("open", "closed")
            ]
        ),
        1,
    )
    assert {r.resource_name: r.error_code for r in altered.responses} == {
        "open": 0,
        "closed": code("TOPIC_AUTHORIZATION_FAILED"),
    }


def acl_creation(principal="User:bob"):
    C = fastkwire.CreateAclsRequest
    return C(
        creations=[
            C.AclCreation(
                resource_type=TOPIC,
                resource_name="t",
                resource_pattern_type=LITERAL,
                principal=principal,
                host="*",
                operation=READ,
                permission_type=ALLOW,
            )
        ]
    )


def acl_listing():
    return fastkwire.DescribeAclsRequest(
        resource_type_filter=1,
        resource_name_filter=None,
        pattern_type_filter=1,
        principal_filter=None,
        host_filter=None,
        operation=1,
        permission_type=1,
    )


@pytest.mark.parametrize(
    "field, value",
    [
        ("resource_type", 99),  # Kafka reads an unknown code as UNKNOWN: refused
        ("operation", 99),
        ("permission_type", 7),
        ("principal", "alice"),  # not Type:name
        ("resource_name", ""),
        ("resource_type", CLUSTER),  # named "t", not kafka-cluster
    ],
)
def test_create_acls_refuses_what_kafka_cannot_read(field, value):
    # An ACL of an unknown permission type had been kept: it names its resource, so that
    # allow.everyone.if.no.acl.found stopped applying there and nothing allowed it again.
    apis = make_apis()
    request = acl_creation()
    setattr(request.creations[0], field, value)
    answer = call(apis, request, 3, principal="User:admin")
    assert answer.results[0].error_code == code("INVALID_REQUEST")
    assert len(apis.acls) == 0


def test_acl_apis_need_describe_and_alter_on_the_cluster():
    apis = make_apis(acl(CLUSTER, "kafka-cluster", DESCRIBE))
    listed = call(apis, acl_listing(), 3)
    assert listed.error_code == 0 and listed.resources
    refused = call(apis, acl_creation(), 3)
    assert [r.error_code for r in refused.results] == [code("CLUSTER_AUTHORIZATION_FAILED")]
    assert len(apis.acls) == 1
    assert call(apis, acl_listing(), 3, principal="User:bob").error_code == code(
        "CLUSTER_AUTHORIZATION_FAILED"
    )
    assert call(apis, acl_creation(), 3, principal="User:admin").results[0].error_code == 0


def init_producer_id(transactional_id=None):
    return fastkwire.InitProducerIdRequest(
        transactional_id=transactional_id,
        transaction_timeout_ms=60000,
        producer_id=-1,
        producer_epoch=-1,
    )


def test_init_producer_id_needs_idempotent_write_or_write_on_a_topic_or_the_id():
    apis = make_apis()
    answer = call(apis, init_producer_id(), 5)
    assert answer.error_code == code("CLUSTER_AUTHORIZATION_FAILED")
    apis.acls.add(acl(TOPIC, "logs-", WRITE, pattern=PREFIXED))  # Kafka 4: WRITE on a topic
    assert call(apis, init_producer_id(), 5).error_code == 0
    assert call(apis, init_producer_id(), 5, principal="User:bob").error_code == code(
        "CLUSTER_AUTHORIZATION_FAILED"
    )
    apis.acls.add(acl(CLUSTER, "kafka-cluster", IDEMPOTENT_WRITE, principal="User:bob"))
    assert call(apis, init_producer_id(), 5, principal="User:bob").error_code == 0
    assert call(apis, init_producer_id("tx"), 5).error_code == code(
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
    )
    apis.acls.add(acl(TXN, "tx", WRITE))
    assert call(apis, init_producer_id("tx"), 5).error_code == 0


def test_a_deny_on_every_topic_outweighs_write_on_some_for_init_producer_id():
    apis = make_apis(acl(TOPIC, "open", WRITE), acl(TOPIC, "*", WRITE, permission=DENY))
    assert call(apis, init_producer_id(), 5).error_code == code("CLUSTER_AUTHORIZATION_FAILED")


def test_a_prefixed_deny_covers_the_topics_it_starts_for_init_producer_id():
    apis = make_apis(
        acl(TOPIC, "logs-app", WRITE),
        acl(TOPIC, "logs-", WRITE, pattern=PREFIXED),
        acl(TOPIC, "lo", WRITE, permission=DENY, pattern=PREFIXED),
    )
    assert call(apis, init_producer_id(), 5).error_code == code("CLUSTER_AUTHORIZATION_FAILED")
    apis.acls.add(acl(TOPIC, "other", WRITE))
    assert call(apis, init_producer_id(), 5).error_code == 0


def test_cluster_authorized_operations_need_describe_on_the_cluster():
    apis = make_apis(acl(CLUSTER, "kafka-cluster", ALTER_CONFIGS))
    request = fastkwire.DescribeClusterRequest(include_cluster_authorized_operations=True)
    assert call(apis, request, 1).cluster_authorized_operations == 0
    apis.acls.add(acl(CLUSTER, "kafka-cluster", DESCRIBE))
    bits = (1 << DESCRIBE) | (1 << ALTER_CONFIGS) | (1 << DESCRIBE_CONFIGS)
    assert call(apis, request, 1).cluster_authorized_operations == bits
    everything = call(apis, request, 1, principal="User:admin").cluster_authorized_operations
    assert everything == sum(1 << op for op in (CREATE, ALTER, DESCRIBE, 9, 10, 11, 12))


def test_add_partitions_to_txn_refuses_all_when_one_topic_is_not_writable():
    apis = make_apis(acl(TXN, "tx", WRITE), acl(TOPIC, "open", WRITE))
    A = fastkwire.AddPartitionsToTxnRequest
    answer = call(
        apis,
        A(
            v3_and_below_transactional_id="tx",
            v3_and_below_producer_id=1,
            v3_and_below_producer_epoch=0,
            v3_and_below_topics=[
                A.AddPartitionsToTxnTopic(name=n, partitions=[0]) for n in ("open", "closed")
            ],
        ),
        3,
    )
    results = answer.results_by_topic_v3_and_below
    assert {t.name: [p.partition_error_code for p in t.results_by_partition] for t in results} == {
        "open": [code("OPERATION_NOT_ATTEMPTED")],
        "closed": [code("TOPIC_AUTHORIZATION_FAILED")],
    }
    ended = call(
        apis,
        fastkwire.EndTxnRequest(
            transactional_id="other", producer_id=1, producer_epoch=0, committed=True
        ),
        4,
    )
    assert ended.error_code == code("TRANSACTIONAL_ID_AUTHORIZATION_FAILED")


def test_group_apis_need_read_on_the_group_and_offsets_read_on_topics():
    apis = make_apis(acl(GROUP, "g", READ), acl(TOPIC, "open", READ))
    J = fastkwire.JoinGroupRequest
    join = J(
        group_id="other",
        session_timeout_ms=10000,
        rebalance_timeout_ms=10000,
        member_id="",
        protocol_type="consumer",
        protocols=[J.JoinGroupRequestProtocol(name="range", metadata=b"")],
    )
    assert call(apis, join, 9).error_code == code("GROUP_AUTHORIZATION_FAILED")
    OC = fastkwire.OffsetCommitRequest

    def commit(group):
        return OC(
            group_id=group,
            generation_id_or_member_epoch=-1,
            member_id="",
            topics=[
                OC.OffsetCommitRequestTopic(
                    name=n,
                    partitions=[
                        OC.OffsetCommitRequestPartition(partition_index=0, committed_offset=0)
                    ],
                )
                for n in ("open", "closed")
            ],
        )

    assert by_topic(call(apis, commit("g"), 9).topics) == {
        "open": [0],
        "closed": [code("TOPIC_AUTHORIZATION_FAILED")],
    }
    assert by_topic(call(apis, commit("other"), 9).topics) == {
        "open": [code("GROUP_AUTHORIZATION_FAILED")],
        "closed": [code("GROUP_AUTHORIZATION_FAILED")],
    }
    F = fastkwire.OffsetFetchRequest
    fetched = call(
        apis,
        F(
            groups=[
                F.OffsetFetchRequestGroup(group_id="g", topics=None),
                F.OffsetFetchRequestGroup(group_id="other", topics=None),
            ]
        ),
        9,
    )
    assert {g.group_id: g.error_code for g in fetched.groups} == {
        "g": 0,
        "other": code("GROUP_AUTHORIZATION_FAILED"),
    }


def test_offset_fetch_naming_a_group_twice_keeps_the_answered_entrys_refusals():
    """The coordinator answers a group's first entry (it answers each group once); the
    authorizer had merged both entries' decisions by group id, so a later entry asking for
    every topic dropped the first one's TOPIC_AUTHORIZATION_FAILED for the topics it named."""
    apis = make_apis(acl(GROUP, "g", READ), acl(TOPIC, "open", READ))
    F = fastkwire.OffsetFetchRequest
    named = F.OffsetFetchRequestTopics(name="closed", partition_indexes=[0])
    opened = F.OffsetFetchRequestTopics(name="open", partition_indexes=[0])
    for second in (None, [opened]):
        fetched = call(
            apis,
            F(
                groups=[
                    F.OffsetFetchRequestGroup(group_id="g", topics=[named, opened]),
                    F.OffsetFetchRequestGroup(group_id="g", topics=second),
                ]
            ),
            9,
        )
        (group,) = fetched.groups
        assert {t.name: [p.error_code for p in t.partitions] for t in group.topics} == {
            "open": [0],
            "closed": [code("TOPIC_AUTHORIZATION_FAILED")],
        }, second


def test_group_listings_and_descriptions_need_describe():
    apis = make_apis(acl(GROUP, "g", READ), acl(TOPIC, "open", READ))
    OC = fastkwire.OffsetCommitRequest
    for group in ("g", "hidden"):
        commit = OC(
            group_id=group,
            generation_id_or_member_epoch=-1,
            member_id="",
            topics=[
                OC.OffsetCommitRequestTopic(
                    name="open",
                    partitions=[
                        OC.OffsetCommitRequestPartition(partition_index=0, committed_offset=0)
                    ],
                )
            ],
        )
        call(apis, commit, 9, principal="User:admin")
    listed = call(apis, fastkwire.ListGroupsRequest(states_filter=[], types_filter=[]), 5)
    assert [g.group_id for g in listed.groups] == ["g"]
    everything = call(
        apis, fastkwire.ListGroupsRequest(states_filter=[], types_filter=[]), 5, "User:admin"
    )
    assert sorted(g.group_id for g in everything.groups) == ["g", "hidden"]
    described = call(
        apis,
        fastkwire.DescribeGroupsRequest(groups=["g", "hidden"], include_authorized_operations=True),
        5,
    )
    assert {g.group_id: g.error_code for g in described.groups} == {
        "g": 0,
        "hidden": code("GROUP_AUTHORIZATION_FAILED"),
    }
    assert described.groups[0].authorized_operations == (1 << READ) | (1 << DESCRIBE)
    deleted = call(apis, fastkwire.DeleteGroupsRequest(groups_names=["g"]), 2)
    assert deleted.results[0].error_code == code("GROUP_AUTHORIZATION_FAILED")
    C = fastkwire.FindCoordinatorRequest
    found = call(apis, C(key_type=0, coordinator_keys=["g", "hidden"]), 4)
    assert {c.key: c.error_code for c in found.coordinators} == {
        "g": 0,
        "hidden": code("GROUP_AUTHORIZATION_FAILED"),
    }
    found = call(apis, C(key="tx", key_type=1), 3)
    assert found.error_code == code("TRANSACTIONAL_ID_AUTHORIZATION_FAILED")


def test_consumer_group_heartbeat_needs_describe_on_its_topics():
    apis = make_apis(acl(GROUP, "g", READ), acl(TOPIC, "open", READ))
    H = fastkwire.ConsumerGroupHeartbeatRequest

    def beat(topics, group="g"):
        return H(
            group_id=group,
            member_id=str(uuid.uuid4()),
            member_epoch=0,
            rebalance_timeout_ms=10000,
            subscribed_topic_names=topics,
            topic_partitions=[],
        )

    assert call(apis, beat(["open", "closed"]), 0).error_code == code("TOPIC_AUTHORIZATION_FAILED")
    assert call(apis, beat(["open"], "other"), 0).error_code == code("GROUP_AUTHORIZATION_FAILED")
    assert call(apis, beat(["open"]), 0).error_code == 0


def test_streams_group_heartbeat_needs_describe_on_its_topology_s_topics():
    # As Kafka's: every topic the topology names. Without it, the status told which hidden
    # topics exist (MISSING_SOURCE_TOPICS for one that does not) and the tasks their size.
    apis = make_apis(acl(GROUP, "g", READ), acl(TOPIC, "open", READ))
    H = fastkwire.StreamsGroupHeartbeatRequest

    def beat(sources, changelogs=(), group="g"):
        return H(
            group_id=group,
            member_id=str(uuid.uuid4()),
            member_epoch=0,
            endpoint_information_epoch=0,
            rebalance_timeout_ms=10000,
            topology=H.Topology(
                epoch=1,
                subtopologies=[
                    H.Subtopology(
                        subtopology_id="0",
                        source_topics=list(sources),
                        source_topic_regex=[],
                        state_changelog_topics=[
                            H.TopicInfo(
                                name=n, partitions=0, replication_factor=0, topic_configs=[]
                            )
                            for n in changelogs
                        ],
                        repartition_sink_topics=[],
                        repartition_source_topics=[],
                        copartition_groups=[],
                    )
                ],
            ),
            active_tasks=[],
            standby_tasks=[],
            warmup_tasks=[],
            process_id="p",
        )

    failed = code("TOPIC_AUTHORIZATION_FAILED")
    for sources in (["open", "closed"], ["open", "no-such-topic"]):
        answer = call(apis, beat(sources), 0)
        assert (answer.error_code, answer.status) == (failed, None), sources
    assert call(apis, beat(["open"], ["closed"]), 0).error_code == failed
    # an invalid topology is refused after READ on the group, before DESCRIBE on its topics
    invalid = code("STREAMS_INVALID_TOPOLOGY")
    assert call(apis, beat(["closed", "__consumer_offsets"]), 0).error_code == invalid
    assert call(apis, beat(["closed"], ["bad name"]), 0).error_code == invalid
    assert call(apis, beat(["open"], group="other"), 0).error_code == code(
        "GROUP_AUTHORIZATION_FAILED"
    )
    assert call(apis, beat(["__consumer_offsets"], group="other"), 0).error_code == code(
        "GROUP_AUTHORIZATION_FAILED"
    )
    assert call(apis, beat(["open"]), 0).error_code == 0


def test_group_descriptions_naming_topics_not_describable_are_refused():
    # As Kafka's ConsumerGroupDescribe and StreamsGroupDescribe: DESCRIBE on the group had
    # been enough to read the names (and assignments) of topics the client may not describe.
    apis = make_apis(acl(GROUP, "*", DESCRIBE), acl(TOPIC, "open", DESCRIBE))
    H = fastkwire.ConsumerGroupHeartbeatRequest
    for group, topics in (("hidden-use", ["open", "closed"]), ("open-use", ["open"])):
        beat = H(
            group_id=group,
            member_id=str(uuid.uuid4()),
            member_epoch=0,
            rebalance_timeout_ms=10000,
            subscribed_topic_names=topics,
            topic_partitions=[],
        )
        assert call(apis, beat, 0, principal="User:admin").error_code == 0
    D = fastkwire.ConsumerGroupDescribeRequest
    answer = call(apis, D(group_ids=["hidden-use", "open-use"]), 0)
    by_group = {g.group_id: g for g in answer.groups}
    assert by_group["hidden-use"].error_code == code("TOPIC_AUTHORIZATION_FAILED")
    assert by_group["hidden-use"].members == []
    assert by_group["open-use"].error_code == 0
    assert by_group["open-use"].members[0].subscribed_topic_names == ["open"]
    S = fastkwire.StreamsGroupHeartbeatRequest
    beat = S(
        group_id="streams",
        member_id=str(uuid.uuid4()),
        member_epoch=0,
        endpoint_information_epoch=0,
        rebalance_timeout_ms=10000,
        topology=S.Topology(
            epoch=1,
            subtopologies=[
                S.Subtopology(
                    subtopology_id="0",
                    source_topics=["closed"],
                    source_topic_regex=[],
                    state_changelog_topics=[],
                    repartition_sink_topics=[],
                    repartition_source_topics=[],
                    copartition_groups=[],
                )
            ],
        ),
        active_tasks=[],
        standby_tasks=[],
        warmup_tasks=[],
        process_id="p",
    )
    assert call(apis, beat, 0, principal="User:admin").error_code == 0
    T = fastkwire.StreamsGroupDescribeRequest
    described = call(apis, T(group_ids=["streams"]), 0).groups[0]
    assert described.error_code == code("TOPIC_AUTHORIZATION_FAILED")
    assert described.topology is None


def test_list_offsets_and_delete_records_per_topic():
    apis = make_apis(acl(TOPIC, "open", DESCRIBE))
    L = fastkwire.ListOffsetsRequest
    listed = call(
        apis,
        L(
            replica_id=-1,
            topics=[
                L.ListOffsetsTopic(
                    name=n, partitions=[L.ListOffsetsPartition(partition_index=0, timestamp=-1)]
                )
                for n in ("open", "closed")
            ],
        ),
        9,
    )
    assert by_topic(listed.topics) == {"open": [0], "closed": [code("TOPIC_AUTHORIZATION_FAILED")]}
    D = fastkwire.DeleteRecordsRequest
    deleted = call(
        apis,
        D(
            topics=[
                D.DeleteRecordsTopic(
                    name="open", partitions=[D.DeleteRecordsPartition(partition_index=0, offset=0)]
                )
            ],
            timeout_ms=1000,
        ),
        2,
    )
    assert by_topic(deleted.topics) == {"open": [code("TOPIC_AUTHORIZATION_FAILED")]}


def test_without_an_authorizer_every_client_may_do_everything():
    cluster = Cluster({0: ("127.0.0.1", 9092)})
    cluster.create_topic("closed", 2)
    apis = Apis(cluster)
    answer = call(apis, produce_request("closed"), 9)
    assert by_topic(answer.responses, parts="partition_responses") == {"closed": [0, 0]}


# ---- real clients over SASL


def sasl(broker, user, mechanism="SCRAM-SHA-512"):
    return dict(
        bootstrap_servers=broker.bootstrap_servers,
        security_protocol=broker.security_protocol,
        sasl_mechanism=mechanism,
        sasl_plain_username=user,
        sasl_plain_password=USERS[user],
    )


@pytest.fixture
def broker():
    with Broker(users=USERS, authorizer=Authorizer(super_users=["User:admin"])) as b:
        b.create_topic("orders", partitions=1)
        yield b


def grant(broker, *acls):
    from kafka import KafkaAdminClient
    from kafka.admin import ACL, ACLPermissionType, ResourcePattern

    admin = KafkaAdminClient(**sasl(broker, "admin"), request_timeout_ms=TIMEOUT * 1000)
    try:
        result = admin.create_acls(
            [
                ACL(principal, "*", op, ACLPermissionType.ALLOW, ResourcePattern(rtype, name))
                for principal, op, rtype, name in acls
            ]
        )
        assert not result["failed"], result
    finally:
        admin.close()


def test_kafka_python_is_refused_until_acls_grant_the_rights(broker):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import ACLOperation, ResourceType
    from kafka.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError

    producer = KafkaProducer(**sasl(broker, "alice", "PLAIN"), max_block_ms=5000)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send("orders", b"one").get(timeout=TIMEOUT)
    finally:
        producer.close()
    grant(broker, (ALICE, ACLOperation.WRITE, ResourceType.TOPIC, "orders"))
    producer = KafkaProducer(**sasl(broker, "alice", "PLAIN"), max_block_ms=5000)
    try:
        assert producer.send("orders", b"one").get(timeout=TIMEOUT).offset == 0
    finally:
        producer.close()

    def consume():
        consumer = KafkaConsumer(
            "orders",
            group_id="readers",
            auto_offset_reset="earliest",
            consumer_timeout_ms=5000,
            **sasl(broker, "alice"),
        )
        try:
            return [m.value for m in consumer]
        finally:
            consumer.close()

    with pytest.raises(GroupAuthorizationFailedError):
        consume()
    grant(
        broker,
        (ALICE, ACLOperation.READ, ResourceType.GROUP, "readers"),
        (ALICE, ACLOperation.READ, ResourceType.TOPIC, "orders"),
    )
    assert consume() == [b"one"]


def test_kafka_python_admin_is_refused_acls_until_granted(broker):
    from kafka import KafkaAdminClient
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePattern,
        ResourcePatternFilter,
        ResourceType,
    )
    from kafka.errors import ClusterAuthorizationFailedError

    bob_acl = ACL(
        "User:bob",
        "*",
        ACLOperation.READ,
        ACLPermissionType.ALLOW,
        ResourcePattern(ResourceType.TOPIC, "orders"),
    )
    listing = ACLFilter(
        None,
        None,
        ACLOperation.ANY,
        ACLPermissionType.ANY,
        ResourcePatternFilter(ResourceType.TOPIC, None, ACLResourcePatternType.ANY),
    )
    admin = KafkaAdminClient(**sasl(broker, "alice"), request_timeout_ms=TIMEOUT * 1000)
    try:
        result = admin.create_acls([bob_acl])
        assert result["failed"] == [ClusterAuthorizationFailedError]
        with pytest.raises(ClusterAuthorizationFailedError):
            admin.describe_acls(listing)
        grant(broker, (ALICE, ACLOperation.ALTER, ResourceType.CLUSTER, "kafka-cluster"))
        assert not admin.create_acls([bob_acl])["failed"]
        acls, _ = admin.describe_acls(listing)  # ALTER implies DESCRIBE
        assert [a.principal for a in acls] == ["User:bob"]
    finally:
        admin.close()


def test_aiokafka_sees_kafka_s_authorization_errors(broker):
    import aiokafka
    from aiokafka.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError
    from kafka.admin import ACLOperation, ResourceType

    def config(user):
        c = sasl(broker, user)
        c.pop("sasl_mechanism")
        return dict(c, sasl_mechanism="SCRAM-SHA-256")

    async def produce():
        producer = aiokafka.AIOKafkaProducer(**config("alice"), request_timeout_ms=5000)
        await producer.start()
        try:
            return (await producer.send_and_wait("orders", b"two")).offset
        finally:
            await producer.stop()

    async def consume():
        consumer = aiokafka.AIOKafkaConsumer(
            "orders", group_id="aio", auto_offset_reset="earliest", **config("alice")
        )
        await consumer.start()
        try:
            batch = await asyncio.wait_for(consumer.getmany(timeout_ms=5000), TIMEOUT)
            return [m.value for ms in batch.values() for m in ms]
        finally:
            await consumer.stop()

    with pytest.raises(TopicAuthorizationFailedError):
        asyncio.run(asyncio.wait_for(produce(), TIMEOUT))
    grant(broker, (ALICE, ACLOperation.WRITE, ResourceType.TOPIC, "orders"))
    assert asyncio.run(asyncio.wait_for(produce(), TIMEOUT)) == 0
    grant(broker, (ALICE, ACLOperation.READ, ResourceType.TOPIC, "orders"))
    with pytest.raises(GroupAuthorizationFailedError):
        asyncio.run(asyncio.wait_for(consume(), TIMEOUT))
    grant(broker, (ALICE, ACLOperation.READ, ResourceType.GROUP, "aio"))
    assert asyncio.run(asyncio.wait_for(consume(), TIMEOUT)) == [b"two"]


def test_confluent_kafka_admin_grants_and_its_producer_is_refused_then_allowed(broker):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    def config(user):
        return {
            "bootstrap.servers": broker.bootstrap_servers,
            "security.protocol": broker.security_protocol,
            "sasl.mechanisms": "PLAIN",
            "sasl.username": user,
            "sasl.password": USERS[user],
        }

    def produce():
        producer = confluent_kafka.Producer({**config("bob"), "message.timeout.ms": 5000})
        outcome = []
        producer.produce("orders", b"three", on_delivery=lambda err, msg: outcome.append(err))
        producer.flush(TIMEOUT)
        assert len(outcome) == 1
        return outcome[0]

    error = produce()
    assert (
        error is not None and error.code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED
    )
    admin = AdminClient(config("admin"))
    binding = AclBinding(
        ResourceType.TOPIC,
        "ord",
        ResourcePatternType.PREFIXED,
        "User:bob",
        "*",
        AclOperation.WRITE,
        AclPermissionType.ALLOW,
    )
    for future in admin.create_acls([binding], request_timeout=TIMEOUT).values():
        assert future.result(timeout=TIMEOUT) is None
    assert produce() is None
    bob_admin = AdminClient(config("bob"))
    refused = bob_admin.create_acls([binding], request_timeout=TIMEOUT)
    for future in refused.values():
        with pytest.raises(confluent_kafka.KafkaException) as info:
            future.result(timeout=TIMEOUT)
        assert info.value.args[0].code() == confluent_kafka.KafkaError.CLUSTER_AUTHORIZATION_FAILED


def test_a_plaintext_client_is_anonymous_and_refused_unless_everyone_is_allowed():
    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError

    for allow_everyone in (False, True):
        auth = Authorizer(allow_everyone_if_no_acl_found=allow_everyone)
        with Broker(authorizer=auth) as b:
            b.create_topic("orders", partitions=1)
            producer = KafkaProducer(bootstrap_servers=b.bootstrap_servers, max_block_ms=5000)
            try:
                sent = producer.send("orders", b"x")
                if allow_everyone:
                    assert sent.get(timeout=TIMEOUT).offset == 0
                else:
                    with pytest.raises(TopicAuthorizationFailedError):
                        sent.get(timeout=TIMEOUT)
            finally:
                producer.close()


def test_the_command_enforces_acls_with_kafka_s_settings_as_flags():
    import os
    import subprocess
    import sys

    from kafka import KafkaAdminClient
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePatternFilter,
        ResourceType,
    )
    from kafka.errors import ClusterAuthorizationFailedError

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    argv = [sys.executable, "-m", "fastkwire", "broker", "--listen", "127.0.0.1:0"]
    for user in ("admin", "alice"):
        argv += ["--sasl-user", f"{user}:{USERS[user]}"]
    argv += ["--authorizer", "--super-users", "User:admin;User:ops"]
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("listening on 127.0.0.1:"), line + proc.stderr.read()
        address = line.split()[-1]

        def admin(user):
            return KafkaAdminClient(
                bootstrap_servers=address,
                security_protocol="SASL_PLAINTEXT",
                sasl_mechanism="PLAIN",
                sasl_plain_username=user,
                sasl_plain_password=USERS[user],
                request_timeout_ms=TIMEOUT * 1000,
            )

        listing = ACLFilter(
            None,
            None,
            ACLOperation.ANY,
            ACLPermissionType.ANY,
            ResourcePatternFilter(ResourceType.TOPIC, None, ACLResourcePatternType.ANY),
        )
        for user, refused in (("alice", True), ("admin", False)):
            client = admin(user)
            try:
                if refused:
                    with pytest.raises(ClusterAuthorizationFailedError):
                        client.describe_acls(listing)
                else:
                    assert client.describe_acls(listing)[0] == []
            finally:
                client.close()
        proc.terminate()
        assert proc.wait(TIMEOUT) == 0
        assert "SASL_PLAINTEXT (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), ACLs enforced" in (
            proc.stderr.read()
        )
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--super-users", "User:a"], "--super-users: given without --authorizer"),
        (["--allow-everyone-if-no-acl-found"], "given without --authorizer"),
        (["--authorizer", "--super-users", "alice"], "--super-users: 'alice' is not a principal"),
    ],
)
def test_the_command_names_the_authorizer_flag_that_is_wrong(argv, message, capsys):
    from fastkwire import cli

    assert cli.main(["broker", "--listen", "127.0.0.1:0", *argv]) == 2
    assert message in capsys.readouterr().err


def test_mutated_frames_keep_the_request_path_s_contract_with_an_authorizer():
    """fuzz/hostile_requests.py --authorizer over a short run: requests refused, cut down to
    what is allowed, and ACLs changed by mutated CreateAcls/DeleteAcls keep its contract."""
    import sys
    from pathlib import Path

    pytest.importorskip("cramjam")  # its seeds hold gzip batches
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))
    import hostile_requests

    counts, findings, _ = hostile_requests.run(3000, seed=7, authorizer=True)
    assert findings == 0
    assert counts["answered"] and counts["closed"]


def test_a_principal_without_acls_changes_and_learns_nothing_from_mutated_frames():
    """fuzz/hostile_requests.py --stranger over a short run: the fuzzer's principal has no
    ACL, another holds a topic, offsets and a transactional id; no request of the fuzzer's
    changes the broker's state or gets an answer naming what it did not name. (Seed 2
    found DescribeTopicPartitions' cursor naming a hidden topic.)"""
    import sys
    from pathlib import Path

    pytest.importorskip("cramjam")  # its seeds hold gzip batches
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))
    import hostile_requests

    counts, findings, _ = hostile_requests.run(20000, seed=2, stranger=True)
    assert findings == 0
    assert counts["answered"] and counts["closed"]


def test_a_principal_with_some_acls_touches_and_learns_nothing_hidden_from_mutated_frames():
    """fuzz/hostile_requests.py --partial over a short run: the fuzzer may do all on its own
    topic, groups and transactional ids; another principal's hidden topic, group and id,
    some of them used in groups the fuzzer may describe, are neither changed nor named in
    an answer. (It finds the ConsumerGroupDescribe/StreamsGroupDescribe leak fixed.)"""
    import sys
    from pathlib import Path

    pytest.importorskip("cramjam")  # its seeds hold gzip batches
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))
    import hostile_requests

    counts, findings, _ = hostile_requests.run(5000, seed=1, partial=True)
    assert findings == 0
    assert counts["answered"] and counts["closed"]


def test_a_client_certificate_s_subject_is_its_principal(tls_files):  # noqa: F811
    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError

    with Broker(
        tls_cert=tls_files.server_cert,
        tls_key=tls_files.server_key,
        tls_client_cafile=tls_files.ca,
        authorizer=True,
    ) as broker:
        broker.create_topic("mtls", partitions=1)

        def send():
            producer = KafkaProducer(
                bootstrap_servers=broker.bootstrap_servers,
                security_protocol="SSL",
                ssl_cafile=tls_files.ca,
                ssl_certfile=tls_files.client_cert,
                ssl_keyfile=tls_files.client_key,
                ssl_password=tls_files.key_password,
                max_block_ms=5000,
            )
            try:
                return producer.send("mtls", b"v").get(timeout=TIMEOUT).offset
            finally:
                producer.close()

        with pytest.raises(TopicAuthorizationFailedError):
            send()
        broker.broker.apis.acls.add(acl(TOPIC, "mtls", WRITE, principal="User:CN=ops"))
        assert send() == 0


def test_every_api_s_refusal_is_an_answer_its_versions_carry():
    """Each API the authorizer checks, asked by a principal with no rights with a request of
    its defaults (as decoded), at its lowest and highest version served: one answer, which
    that version carries (item refusals: the tests above and the fuzzer's)."""
    from fastkwire import REQUEST_CLASSES, decode_request, encode_request
    from fastkwire.broker._authorize import GUARDS

    apis = make_apis()
    served = apis.versions()
    assert set(GUARDS) <= set(served)
    for key in GUARDS:
        low, high = served[key]
        for version in (low, high):
            cls = REQUEST_CLASSES[key]
            # through the codec, as a client's request arrives: every field as decoded
            frame = encode_request(cls(), version, 7, "test")
            _, request = decode_request(frame)
            out = []
            ctx = Context(0, "test", "10.0.0.1", principal="User:nobody")
            apis.handle(key, version, request, ctx, out.append)
            assert len(out) == 1, cls.__name__
            if out[0] is not CLOSE and out[0] is not NO_ANSWER:  # (an acks=0 Produce)
                encode_response(out[0], version, 7)
