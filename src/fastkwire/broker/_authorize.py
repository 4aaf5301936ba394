"""ACL enforcement, as Kafka's StandardAuthorizer and KafkaApis do it, for a broker started
with an authorizer (`Broker(authorizer=Authorizer(...))`).

`Authorizer.authorize(principal, host, operation, resource_type, name)` decides one action
from the ACL store (_acls.py): super users may do everything; an ACL applies to a resource
by its LITERAL name, the LITERAL wildcard `*` or a PREFIXED pattern, to the principal or
`User:*`, and to the client's address or `*`. A DENY that applies wins; else an ALLOW of the
operation, of ALL, or of an operation implying it (READ, WRITE, DELETE and ALTER imply
DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS); a resource no ACL names at all is
`allow_everyone_if_no_acl_found` (Kafka's allow.everyone.if.no.acl.found, false).

`GUARDS` is the per-API table: what KafkaApis checks for each API, on which resource, and
what it answers when refused. `Authorizer.guard()` applies it before a request reaches its
handler: a request refused as a whole is answered here; one refused for some of its topics,
groups or resources goes on without them, and their errors are added to the handler's
answer; listings (Metadata for all topics, ListGroups, DescribeTopicPartitions, OffsetFetch
for all topics) leave out what may not be described.
"""

from .. import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AlterConfigsRequest,
    AlterConfigsResponse,
    AlterPartitionReassignmentsRequest,
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirsResponse,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    CreateAclsRequest,
    CreateAclsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribeClusterRequest,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    DescribeQuorumRequest,
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
    DescribeUserScramCredentialsRequest,
    ElectLeadersRequest,
    ElectLeadersResponse,
    EndTxnRequest,
    FetchRequest,
    FetchResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListConfigResourcesRequest,
    ListGroupsRequest,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListPartitionReassignmentsRequest,
    MetadataRequest,
    MetadataResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    ProduceRequest,
    ProduceResponse,
    RESPONSE_CLASSES,
    StreamsGroupDescribeRequest,
    StreamsGroupDescribeResponse,
    StreamsGroupHeartbeatRequest,
    SyncGroupRequest,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from ..error_codes import by_name
from ._acls import LITERAL, PREFIXED, WILDCARD
from ._apis import CLOSE
from ._not_coordinator import _one_group_error
from ._streams_groups import topology_refusal

# Kafka's AclOperation, ResourceType and AclPermissionType codes.
ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 2, 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 9, 10, 11, 12
TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = 2, 3, 4, 5
DENY, ALLOW = 2, 3
CLUSTER_NAME = "kafka-cluster"
ANONYMOUS = "User:ANONYMOUS"
ANY_USER = "User:*"
_UNNAMED = "hardcode"  # a name no ACL names but the wildcard's: Kafka's probe for a type
# An ALLOW of the key also allows these.
_IMPLIED = {
    READ: (DESCRIBE,),
    WRITE: (DESCRIBE,),
    DELETE: (DESCRIBE,),
    ALTER: (DESCRIBE,),
    ALTER_CONFIGS: (DESCRIBE_CONFIGS,),
}
# What Metadata, DescribeTopicPartitions and DescribeCluster report as authorized operations.
TOPIC_OPERATIONS = (READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS)
CLUSTER_OPERATIONS = (
    CREATE,
    ALTER,
    DESCRIBE,
    CLUSTER_ACTION,
    DESCRIBE_CONFIGS,
    ALTER_CONFIGS,
    IDEMPOTENT_WRITE,
)
GROUP_OPERATIONS = (READ, DESCRIBE, DELETE)
# DescribeConfigs' and AlterConfigs' resource types (ConfigResource.Type).
CONFIG_TOPIC, CONFIG_BROKER, CONFIG_BROKER_LOGGER, CONFIG_GROUP = 2, 4, 8, 32
GROUP_KEY, TRANSACTION_KEY = 0, 1


def code(name):
    return by_name(name).code


TOPIC_FAILED = code("TOPIC_AUTHORIZATION_FAILED")
GROUP_FAILED = code("GROUP_AUTHORIZATION_FAILED")
CLUSTER_FAILED = code("CLUSTER_AUTHORIZATION_FAILED")
TXN_FAILED = code("TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
NOT_ATTEMPTED = code("OPERATION_NOT_ATTEMPTED")
_FAILED_BY_TYPE = {
    TOPIC: TOPIC_FAILED,
    GROUP: GROUP_FAILED,
    CLUSTER: CLUSTER_FAILED,
    TRANSACTIONAL_ID: TXN_FAILED,
}


def principal_of(user):
    """Kafka's principal for a connection: `User:<name>` after a SASL login, else
    `User:ANONYMOUS` (plaintext, or TLS without a client certificate)."""
    return ANONYMOUS if user is None else f"User:{user}"


# Python's names of a certificate subject's attributes -> the keywords of RFC 2253, which
# Kafka's principal for an SSL client (X500Principal.getName()) uses.
_RDN_KEYWORDS = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}


def subject_name(subject):
    """A certificate subject (ssl's getpeercert()["subject"]) as RFC 2253 writes it, most
    specific first: "CN=client,OU=test,O=example"."""

    def escaped(value):
        out = "".join("\\" + c if c in ',+"\\<>;' else c for c in value)
        if out.startswith(("#", " ")):
            out = "\\" + out
        return out[:-1] + "\\ " if out.endswith(" ") else out

    return ",".join(
        "+".join(f"{_RDN_KEYWORDS.get(k, k)}={escaped(v)}" for k, v in rdn)
        for rdn in reversed(subject)
    )


class Authorizer:
    """Kafka's StandardAuthorizer over an ACL store. `super_users`: principals
    (`User:alice`) allowed everything (super.users); `allow_everyone_if_no_acl_found`:
    whether a resource no ACL names is open to all (allow.everyone.if.no.acl.found)."""

    def __init__(self, super_users=(), allow_everyone_if_no_acl_found=False):
        if isinstance(super_users, str):
            super_users = [u for u in super_users.split(";") if u.strip()]
        users = set()
        for u in super_users:
            u = str(u).strip()
            kind, _, name = u.partition(":")
            if not kind or not name:
                raise ValueError(f"super_users: {u!r} is not a principal such as 'User:alice'")
            users.add(u)
        self.super_users = frozenset(users)
        self.allow_everyone_if_no_acl_found = bool(allow_everyone_if_no_acl_found)
        self.acls = None  # the broker's AclStore and Cluster, once bound
        self.cluster = None
        self._index = None
        self._indexed = -1

    def bind(self, acls, cluster):
        self.acls = acls
        self.cluster = cluster
        return self

    # ---- deciding

    def _by_type(self, resource_type):
        """(literal {name: [acl]}, prefixed {prefix: [acl]}, prefix lengths) of a resource
        type, from an index made again when the store changed."""
        if self._indexed != self.acls.changes:
            index = {}
            for a in self.acls.acls:
                literal, prefixed, _ = index.setdefault(a.resource_type, ({}, {}, set()))
                if a.pattern_type == LITERAL:
                    literal.setdefault(a.resource_name, []).append(a)
                elif a.pattern_type == PREFIXED:
                    prefixed.setdefault(a.resource_name, []).append(a)
            for _, prefixed, lengths in index.values():
                lengths.update(len(p) for p in prefixed)
            self._index, self._indexed = index, self.acls.changes
        return self._index.get(resource_type)

    def _matching(self, resource_type, name):
        by_type = self._by_type(resource_type)
        if by_type is None:
            return ()
        literal, prefixed, lengths = by_type
        found = list(literal.get(name, ()))
        if name != WILDCARD:
            found += literal.get(WILDCARD, ())
        for n in lengths:
            if n <= len(name):
                found += prefixed.get(name[:n], ())
        return found

    def authorize(self, principal, host, operation, resource_type, name):
        """Whether `principal` from `host` may do `operation` on the resource."""
        if principal in self.super_users:
            return True
        if name is None:  # a request naming no resource where one is needed: refused
            return False
        acls = self._matching(resource_type, name)
        if not acls:
            return self.allow_everyone_if_no_acl_found
        allowed = False
        for a in acls:
            if a.principal != principal and a.principal != ANY_USER:
                continue
            if a.host != WILDCARD and a.host != host:
                continue
            if a.permission_type == DENY:
                if a.operation == ALL or a.operation == operation:
                    return False
            elif a.permission_type == ALLOW and (
                a.operation == ALL
                or a.operation == operation
                or operation in _IMPLIED.get(a.operation, ())
            ):
                allowed = True
        return allowed

    def authorize_any(self, principal, host, operation, resource_type):
        """Whether `operation` is allowed on some resource of the type (Kafka's
        authorizeByResourceType, which InitProducerId uses): as on a resource no ACL names
        but the wildcard's (super users, allow.everyone.if.no.acl.found), or by an ALLOW
        that applies to the principal and host which no DENY covers: a LITERAL `*` DENY
        covers all, a LITERAL one the same name, a PREFIXED one every name it starts."""
        if self.authorize(principal, host, operation, resource_type, _UNNAMED):
            return True
        by_type = self._by_type(resource_type)
        if by_type is None:
            return False
        literal, prefixed, _ = by_type
        applying = {
            ALLOW: {LITERAL: set(), PREFIXED: set()},
            DENY: {LITERAL: set(), PREFIXED: set()},
        }
        for acls in (*literal.values(), *prefixed.values()):
            for a in acls:
                if (
                    a.principal in (principal, ANY_USER)
                    and a.host in (host, WILDCARD)
                    and a.operation in (operation, ALL)
                    and a.permission_type in applying
                ):
                    applying[a.permission_type][a.pattern_type].add(a.resource_name)
        allow, deny = applying[ALLOW], applying[DENY]
        if WILDCARD in deny[LITERAL]:
            return False
        if WILDCARD in allow[LITERAL]:
            return True

        def denied_prefix(name):
            return any(name[:n] in deny[PREFIXED] for n in range(1, len(name) + 1))

        return any(
            name not in deny[LITERAL] and not denied_prefix(name) for name in allow[LITERAL]
        ) or any(not denied_prefix(name) for name in allow[PREFIXED])

    def operations(self, ctx, resource_type, name, operations):
        """Kafka's authorized-operations bit field of a resource."""
        bits = 0
        for op in operations:
            if self.authorize(ctx.principal, ctx.client_host, op, resource_type, name):
                bits |= 1 << op
        return bits

    def cluster_operations(self, ctx):
        """The cluster's authorized operations: none without DESCRIBE on it, as Kafka's."""
        if not self.may(ctx, DESCRIBE, CLUSTER, CLUSTER_NAME):
            return 0
        return self.operations(ctx, CLUSTER, CLUSTER_NAME, CLUSTER_OPERATIONS)

    def may(self, ctx, operation, resource_type, name):
        return self.authorize(ctx.principal, ctx.client_host, operation, resource_type, name)

    # ---- requests

    def guard(self, api_key, version, request, ctx):
        """(answer, after): `answer` a response when the request is refused as a whole (the
        handler does not see it); else `after`, None or a function the handler's response
        goes through (errors added for what was taken out of the request, listings
        filtered). The request may be changed in place."""
        check = GUARDS.get(api_key)
        if check is None:
            return None, None
        return check(self, request, version, ctx)

    def topic_name(self, name, topic_id):
        """The topic's name, from its id when it has none; None for an unknown id."""
        if name is not None:
            return name
        topic = self.cluster.topic_ids.get(topic_id)
        return None if topic is None else topic.name


# ---- shapes: how to take items out of a request and answer them with an error


def _merging(field, items):
    """after(): adds `items` to the response's list `field`."""
    if not items:
        return None

    def after(response):
        setattr(response, field, list(getattr(response, field) or []) + items)
        return response

    return after


class TopicShape:
    """A request's topics and their partitions, and the answer's: attribute names, and the
    error partition's other fields."""

    def __init__(
        self, response, topics, name, partitions, index, answers, answer_topic, answer_name,
        answer_partitions, answer_partition, answer_index, **extra
    ):  # fmt: skip
        self.response = response
        self.topics, self.name, self.partitions, self.index = topics, name, partitions, index
        self.answers, self.answer_topic, self.answer_name = answers, answer_topic, answer_name
        self.answer_partitions = answer_partitions
        self.answer_partition, self.answer_index = answer_partition, answer_index
        self.error_field = extra.pop("error_field", "error_code")
        self.extra = extra

    def error_topic(self, t, error, name):
        R = self.response
        parts = []
        for p in getattr(t, self.partitions) or []:
            index = p if self.index is None else getattr(p, self.index)
            parts.append(
                getattr(R, self.answer_partition)(
                    **{self.answer_index: index, self.error_field: error}, **self.extra
                )
            )
        fields = {self.answer_name: name, self.answer_partitions: parts}
        topic_id = getattr(t, "topic_id", None)
        if topic_id is not None:
            fields["topic_id"] = topic_id
        return getattr(R, self.answer_topic)(**fields)

    def errors(self, request, error):
        """Every topic of the request answered with `error`."""
        return self.response(
            **{
                self.answers: [
                    self.error_topic(t, error, getattr(t, self.name, None))
                    for t in getattr(request, self.topics) or []
                ]
            }
        )


PRODUCE_SHAPE = TopicShape(
    ProduceResponse, "topic_data", "name", "partition_data", "index",
    "responses", "TopicProduceResponse", "name", "partition_responses",
    "PartitionProduceResponse", "index", base_offset=-1,
)  # fmt: skip
FETCH_SHAPE = TopicShape(
    FetchResponse, "topics", "topic", "partitions", "partition",
    "responses", "FetchableTopicResponse", "topic", "partitions", "PartitionData",
    "partition_index", high_watermark=-1, last_stable_offset=-1, log_start_offset=-1,
)  # fmt: skip
LIST_OFFSETS_SHAPE = TopicShape(
    ListOffsetsResponse, "topics", "name", "partitions", "partition_index",
    "topics", "ListOffsetsTopicResponse", "name", "partitions",
    "ListOffsetsPartitionResponse", "partition_index", timestamp=-1, offset=-1,
)  # fmt: skip
EPOCH_SHAPE = TopicShape(
    OffsetForLeaderEpochResponse, "topics", "topic", "partitions", "partition",
    "topics", "OffsetForLeaderTopicResult", "topic", "partitions", "EpochEndOffset",
    "partition", leader_epoch=-1, end_offset=-1,
)  # fmt: skip
DELETE_RECORDS_SHAPE = TopicShape(
    DeleteRecordsResponse, "topics", "name", "partitions", "partition_index",
    "topics", "DeleteRecordsTopicResult", "name", "partitions",
    "DeleteRecordsPartitionResult", "partition_index", low_watermark=-1,
)  # fmt: skip
OFFSET_COMMIT_SHAPE = TopicShape(
    OffsetCommitResponse, "topics", "name", "partitions", "partition_index",
    "topics", "OffsetCommitResponseTopic", "name", "partitions",
    "OffsetCommitResponsePartition", "partition_index",
)  # fmt: skip
TXN_OFFSET_COMMIT_SHAPE = TopicShape(
    TxnOffsetCommitResponse, "topics", "name", "partitions", "partition_index",
    "topics", "TxnOffsetCommitResponseTopic", "name", "partitions",
    "TxnOffsetCommitResponsePartition", "partition_index",
)  # fmt: skip
OFFSET_DELETE_SHAPE = TopicShape(
    OffsetDeleteResponse, "topics", "name", "partitions", "partition_index",
    "topics", "OffsetDeleteResponseTopic", "name", "partitions",
    "OffsetDeleteResponsePartition", "partition_index",
)  # fmt: skip
OFFSET_FETCH_SHAPE = TopicShape(  # before v8
    OffsetFetchResponse, "topics", "name", "partition_indexes", None,
    "topics", "OffsetFetchResponseTopic", "name", "partitions",
    "OffsetFetchResponsePartition", "partition_index", committed_offset=-1, metadata="",
)  # fmt: skip
OFFSET_FETCH_GROUP_SHAPE = TopicShape(  # v8+: in each group
    OffsetFetchResponse, "topics", "name", "partition_indexes", None,
    "topics", "OffsetFetchResponseTopics", "name", "partitions",
    "OffsetFetchResponsePartitions", "partition_index", committed_offset=-1, metadata="",
)  # fmt: skip
ADD_PARTITIONS_SHAPE = TopicShape(
    AddPartitionsToTxnResponse, "v3_and_below_topics", "name", "partitions", None,
    "results_by_topic_v3_and_below", "AddPartitionsToTxnTopicResult", "name",
    "results_by_partition", "AddPartitionsToTxnPartitionResult", "partition_index",
    error_field="partition_error_code",
)  # fmt: skip


def _split_topics(auth, ctx, shape, request, operation, container=None):
    """Takes the topics `operation` is refused on out of the request (or of `container`,
    a part of it); returns their error topics. Topics named by an unknown id stay: the
    handler answers them."""
    holder = request if container is None else container
    topics = getattr(holder, shape.topics)
    if not topics:
        return []
    kept, refused = [], []
    for t in topics:
        name = auth.topic_name(getattr(t, shape.name, None), getattr(t, "topic_id", None))
        if name is None or auth.may(ctx, operation, TOPIC, name):
            kept.append(t)
        else:
            refused.append(shape.error_topic(t, TOPIC_FAILED, getattr(t, shape.name, None)))
    if refused:
        setattr(holder, shape.topics, kept)
    return refused


def _per_topic(shape, operation):
    """A request about topics: those refused get TOPIC_AUTHORIZATION_FAILED per partition."""

    def check(auth, request, version, ctx):
        return None, _merging(shape.answers, _split_topics(auth, ctx, shape, request, operation))

    return check


def _whole(operation, resource_type, name_of, answer):
    """A request about one resource, refused as a whole: `answer(request, version, error)`."""
    error = _FAILED_BY_TYPE[resource_type]

    def check(auth, request, version, ctx):
        if auth.may(ctx, operation, resource_type, name_of(request)):
            return None, None
        return answer(request, version, error), None

    return check


def _top_level(request, version, error):
    return RESPONSE_CLASSES[type(request).API_KEY](error_code=error)


def _group_answer(request, version, error):
    """A one-group request's answer with `error` in its top-level error code (JoinGroup,
    SyncGroup, Heartbeat, LeaveGroup, the KIP-848 and KIP-1071 heartbeats): the answers
    NOT_COORDINATOR uses, with another error."""
    response = _one_group_error(type(request).API_KEY, version, request)
    response.error_code = error
    if hasattr(response, "error_message"):
        response.error_message = None
    return response


def _cluster(operation, answer=_top_level):
    return _whole(operation, CLUSTER, lambda r: CLUSTER_NAME, answer)


def _group_id(request):
    return request.group_id


# ---- the APIs that need more than one check


def _produce(auth, request, version, ctx):
    tid = request.transactional_id
    if tid is not None and not auth.may(ctx, WRITE, TRANSACTIONAL_ID, tid):
        if request.acks == 0:
            return CLOSE, None
        return PRODUCE_SHAPE.errors(request, TXN_FAILED), None
    refused = _split_topics(auth, ctx, PRODUCE_SHAPE, request, WRITE)
    if refused and request.acks == 0:
        return CLOSE, None  # as Kafka answers an acks=0 Produce that failed
    return None, _merging(PRODUCE_SHAPE.answers, refused)


def _fetch(auth, request, version, ctx):
    replica = request.replica_state.replica_id if version >= 15 else request.replica_id
    if replica >= 0 and not auth.may(ctx, CLUSTER_ACTION, CLUSTER, CLUSTER_NAME):
        refused = FETCH_SHAPE.errors(request, TOPIC_FAILED).responses
        request.topics = []
    else:
        refused = _split_topics(auth, ctx, FETCH_SHAPE, request, READ)
    if refused and not request.topics and request.session_epoch <= 0:
        request.max_wait_ms = 0  # nothing left to wait for: answered at once, as Kafka
    merge = _merging(FETCH_SHAPE.answers, refused)
    if request.session_epoch <= 0:  # no session's partitions beside those asked
        return None, merge
    asked = {auth.topic_name(t.topic, t.topic_id) for t in request.topics}

    def after(response):
        # An incremental Fetch answers its session's partitions too: checked again, as
        # Kafka checks each fetch's whole context (an ACL deleted since stops the reads).
        R = FetchResponse
        for t in response.responses or []:
            name = auth.topic_name(t.topic, t.topic_id)
            if name is None or name in asked or auth.may(ctx, READ, TOPIC, name):
                continue
            t.partitions = [
                R.PartitionData(
                    partition_index=p.partition_index, error_code=TOPIC_FAILED, **FETCH_SHAPE.extra
                )
                for p in t.partitions
            ]
        return response if merge is None else merge(response)

    return None, after


def _metadata(auth, request, version, ctx):
    R = MetadataResponse
    cluster = auth.cluster
    listed = request.topics is not None and (version > 0 or request.topics)
    refused = []
    if listed:
        auto = cluster.auto_create_topics and (version < 4 or request.allow_auto_topic_creation)
        may_create = None
        kept = []
        for t in request.topics:
            name = auth.topic_name(t.name, t.topic_id)
            if name is None:
                kept.append(t)
            elif not auth.may(ctx, DESCRIBE, TOPIC, name):
                refused.append(
                    R.MetadataResponseTopic(
                        error_code=TOPIC_FAILED, name=t.name, topic_id=t.topic_id, partitions=[]
                    )
                )
            elif auto and name not in cluster.topics:
                if may_create is None:
                    may_create = auth.may(ctx, CREATE, CLUSTER, CLUSTER_NAME)
                if may_create or auth.may(ctx, CREATE, TOPIC, name):
                    kept.append(t)
                else:
                    refused.append(
                        R.MetadataResponseTopic(error_code=TOPIC_FAILED, name=name, partitions=[])
                    )
            else:
                kept.append(t)
        request.topics = kept

    def after(response):
        topics = []
        for t in response.topics or []:
            if t.error_code == 0 and not auth.may(ctx, DESCRIBE, TOPIC, t.name):
                continue  # left out of a listing of all topics
            if version >= 8 and request.include_topic_authorized_operations and t.name:
                t.topic_authorized_operations = auth.operations(
                    ctx, TOPIC, t.name, TOPIC_OPERATIONS
                )
            topics.append(t)
        if version == 0 and listed and not request.topics:
            topics = []  # v0 reads no topics as all of them: none were asked for but those
        response.topics = topics + refused
        if 8 <= version <= 10 and request.include_cluster_authorized_operations:
            response.cluster_authorized_operations = auth.cluster_operations(ctx)
        return response

    return None, after


def _describe_topic_partitions(auth, request, version, ctx):
    """Only the topics that may be described are paged, as Kafka filters them before
    paging: a listing of all topics becomes the list of those (its cursor and page never
    name another); named ones refused are answered TOPIC_AUTHORIZATION_FAILED."""
    R = DescribeTopicPartitionsResponse
    Q = DescribeTopicPartitionsRequest
    refused = []
    if not request.topics:
        names = sorted(n for n in auth.cluster.topics if auth.may(ctx, DESCRIBE, TOPIC, n))
        request.topics = [Q.TopicRequest(name=n) for n in names]
    else:
        kept = []
        for t in request.topics:
            if auth.may(ctx, DESCRIBE, TOPIC, t.name):
                kept.append(t)
            else:
                refused.append(
                    R.DescribeTopicPartitionsResponseTopic(
                        error_code=TOPIC_FAILED, name=t.name, partitions=[]
                    )
                )
        request.topics = kept
    if not request.topics:  # the handler would read an empty list as all topics
        return R(topics=refused, next_cursor=None), None

    def after(response):
        for t in response.topics or []:
            # always filled in: the request has no flag for it
            t.topic_authorized_operations = auth.operations(ctx, TOPIC, t.name, TOPIC_OPERATIONS)
        response.topics = list(response.topics or []) + refused
        return response

    return None, after


def _find_coordinator(auth, request, version, ctx):
    R = FindCoordinatorResponse
    if request.key_type == GROUP_KEY:
        resource = GROUP
    elif request.key_type == TRANSACTION_KEY:
        resource = TRANSACTIONAL_ID
    else:
        return None, None  # the handler says INVALID_REQUEST
    error = _FAILED_BY_TYPE[resource]
    if version < 4:
        if auth.may(ctx, DESCRIBE, resource, request.key):
            return None, None
        return R(error_code=error, node_id=-1, host="", port=-1), None
    kept, refused = [], []
    for key in request.coordinator_keys:
        if auth.may(ctx, DESCRIBE, resource, key):
            kept.append(key)
        else:
            refused.append(R.Coordinator(key=key, node_id=-1, host="", port=-1, error_code=error))
    if not kept:
        return R(coordinators=refused), None
    request.coordinator_keys = kept
    return None, _merging("coordinators", refused)


def _init_producer_id(auth, request, version, ctx):
    tid = request.transactional_id
    if tid is not None:
        if auth.may(ctx, WRITE, TRANSACTIONAL_ID, tid):
            return None, None
        error = TXN_FAILED
    elif auth.may(ctx, IDEMPOTENT_WRITE, CLUSTER, CLUSTER_NAME) or auth.authorize_any(
        ctx.principal, ctx.client_host, WRITE, TOPIC
    ):
        return None, None
    else:
        error = CLUSTER_FAILED
    return InitProducerIdResponse(error_code=error, producer_id=-1, producer_epoch=-1), None


def _add_partitions_to_txn(auth, request, version, ctx):
    if version >= 4:  # between brokers
        return _cluster(CLUSTER_ACTION)(auth, request, version, ctx)
    S = ADD_PARTITIONS_SHAPE
    if not auth.may(ctx, WRITE, TRANSACTIONAL_ID, request.v3_and_below_transactional_id):
        return S.errors(request, TXN_FAILED), None
    refused = {
        t.name for t in request.v3_and_below_topics if not auth.may(ctx, WRITE, TOPIC, t.name)
    }
    if not refused:
        return None, None
    # Kafka adds none of them when one is refused.
    return S.response(
        **{
            S.answers: [
                S.error_topic(t, TOPIC_FAILED if t.name in refused else NOT_ATTEMPTED, t.name)
                for t in request.v3_and_below_topics
            ]
        }
    ), None


def _add_offsets_to_txn(auth, request, version, ctx):
    if not auth.may(ctx, WRITE, TRANSACTIONAL_ID, request.transactional_id):
        return _top_level(request, version, TXN_FAILED), None
    if not auth.may(ctx, READ, GROUP, request.group_id):
        return _top_level(request, version, GROUP_FAILED), None
    return None, None


def _offset_commit(shape, transactional=False):
    def check(auth, request, version, ctx):
        if transactional and not auth.may(ctx, WRITE, TRANSACTIONAL_ID, request.transactional_id):
            return shape.errors(request, TXN_FAILED), None
        if not auth.may(ctx, READ, GROUP, request.group_id):
            return shape.errors(request, GROUP_FAILED), None
        refused = _split_topics(auth, ctx, shape, request, READ)
        return None, _merging(shape.answers, refused)

    return check


def _offset_delete(auth, request, version, ctx):
    if not auth.may(ctx, DELETE, GROUP, request.group_id):
        return OffsetDeleteResponse(error_code=GROUP_FAILED, topics=[]), None
    refused = _split_topics(auth, ctx, OFFSET_DELETE_SHAPE, request, READ)
    return None, _merging("topics", refused)


def _described_topics(auth, ctx, topics):
    """An OffsetFetch answer's topics for all topics: those that may be described."""
    return [t for t in topics or [] if auth.may(ctx, DESCRIBE, TOPIC, t.name)]


def _offset_fetch(auth, request, version, ctx):
    R = OffsetFetchResponse
    if version < 8:
        if not auth.may(ctx, DESCRIBE, GROUP, request.group_id):
            return R(error_code=GROUP_FAILED, topics=[]), None
        if request.topics is None:

            def listing(response):
                response.topics = _described_topics(auth, ctx, response.topics)
                return response

            return None, listing
        refused = _split_topics(auth, ctx, OFFSET_FETCH_SHAPE, request, DESCRIBE)
        return None, _merging("topics", refused)
    kept, refused_groups, refused_topics, all_topics, seen = [], [], {}, set(), set()
    for g in request.groups:
        if not auth.may(ctx, DESCRIBE, GROUP, g.group_id):
            refused_groups.append(
                R.OffsetFetchResponseGroup(group_id=g.group_id, topics=[], error_code=GROUP_FAILED)
            )
            continue
        if g.group_id in seen:
            continue  # the coordinator answers a group's first entry only
        seen.add(g.group_id)
        kept.append(g)
        if g.topics is None:
            all_topics.add(g.group_id)
        else:
            gone = _split_topics(auth, ctx, OFFSET_FETCH_GROUP_SHAPE, request, DESCRIBE, g)
            if gone:
                refused_topics[g.group_id] = gone
    if not kept:
        return R(groups=refused_groups), None
    request.groups = kept

    def after(response):
        for g in response.groups or []:
            if g.group_id in all_topics:
                g.topics = _described_topics(auth, ctx, g.topics)
            elif g.group_id in refused_topics:
                g.topics = list(g.topics or []) + refused_topics[g.group_id]
        response.groups = list(response.groups or []) + refused_groups
        return response

    return None, after


USES_HIDDEN_TOPICS = (
    "The described group uses topics that the client is not authorized to describe."
)


def _consumer_group_topics(g):
    """The topics a ConsumerGroupDescribe answer's group names."""
    names = set()
    for m in g.members or ():
        names.update(m.subscribed_topic_names or ())
        for assignment in (m.assignment, m.target_assignment):
            names.update(t.topic_name for t in assignment.topic_partitions or ())
    return names


def _streams_group_topics(g):
    """The topics a StreamsGroupDescribe answer's group names (its topology's)."""
    names = set()
    topology = g.topology
    for sub in (topology.subtopologies or ()) if topology is not None else ():
        names.update(sub.source_topics or ())
        names.update(sub.repartition_sink_topics or ())
        names.update(t.name for t in sub.repartition_source_topics or ())
        names.update(t.name for t in sub.state_changelog_topics or ())
    return names


def _groups(field, answers, error_item, operation, topics_of=None):
    """A request about several groups: each refused gets GROUP_AUTHORIZATION_FAILED; the
    others' authorized operations (when asked for: the Describe APIs) are the client's; a
    described group naming topics (`topics_of`) the client may not describe is
    TOPIC_AUTHORIZATION_FAILED, as Kafka's."""

    def hiding(auth, ctx, response, merge):
        if topics_of is not None:
            out = []
            for g in getattr(response, answers) or []:
                names = topics_of(g) if g.error_code == 0 else ()
                if any(not auth.may(ctx, DESCRIBE, TOPIC, n) for n in names):
                    g = error_item(g.group_id)
                    g.error_code, g.error_message = TOPIC_FAILED, USES_HIDDEN_TOPICS
                out.append(g)
            setattr(response, answers, out)
        return response if merge is None else merge(response)

    def check(auth, request, version, ctx):
        kept, refused = [], []
        for g in getattr(request, field) or []:
            if auth.may(ctx, operation, GROUP, g):
                kept.append(g)
            else:
                refused.append(error_item(g))
        if refused and not kept:
            response_cls = RESPONSE_CLASSES[type(request).API_KEY]
            return response_cls(**{answers: refused}), None
        if refused:
            setattr(request, field, kept)
        merge = _merging(answers, refused)
        operations = getattr(request, "include_authorized_operations", False)
        if not operations and topics_of is None:
            return None, merge

        def after(response):
            if operations:
                for g in getattr(response, answers) or []:
                    g.authorized_operations = auth.operations(
                        ctx, GROUP, g.group_id, GROUP_OPERATIONS
                    )
            return hiding(auth, ctx, response, merge)

        return None, after

    return check


def _describe_cluster(auth, request, version, ctx):
    if not request.include_cluster_authorized_operations:
        return None, None

    def after(response):
        response.cluster_authorized_operations = auth.cluster_operations(ctx)
        return response

    return None, after


def _list_groups(auth, request, version, ctx):
    if auth.may(ctx, DESCRIBE, CLUSTER, CLUSTER_NAME):
        return None, None

    def after(response):
        response.groups = [
            g for g in response.groups or [] if auth.may(ctx, DESCRIBE, GROUP, g.group_id)
        ]
        return response

    return None, after


def _consumer_group_heartbeat(auth, request, version, ctx):
    if not auth.may(ctx, READ, GROUP, request.group_id):
        return _group_answer(request, version, GROUP_FAILED), None
    names = request.subscribed_topic_names
    if names and any(not auth.may(ctx, DESCRIBE, TOPIC, n) for n in set(names)):
        return _group_answer(request, version, TOPIC_FAILED), None
    return None, None


def _streams_group_heartbeat(auth, request, version, ctx):
    """READ on the group; DESCRIBE on every topic its topology names, as Kafka's (else its
    status would say which of them exist, and its tasks their partitions)."""
    if not auth.may(ctx, READ, GROUP, request.group_id):
        return _group_answer(request, version, GROUP_FAILED), None
    refusal = topology_refusal(request)  # before DESCRIBE, as Kafka
    if refusal is not None:
        return refusal, None
    names = set()
    for sub in request.topology.subtopologies if request.topology is not None else ():
        names.update(sub.source_topics or ())
        names.update(sub.repartition_sink_topics or ())
        names.update(t.name for t in sub.repartition_source_topics or ())
        names.update(t.name for t in sub.state_changelog_topics or ())
    if any(not auth.may(ctx, DESCRIBE, TOPIC, n) for n in names):
        return _group_answer(request, version, TOPIC_FAILED), None
    return None, None


def _configs(response_cls, answers, describe):
    """DescribeConfigs and (Incremental)AlterConfigs: a topic's configs need
    DESCRIBE_CONFIGS / ALTER_CONFIGS on it, a broker's on the cluster, a group's on it."""
    operation = DESCRIBE_CONFIGS if describe else ALTER_CONFIGS
    item = (
        response_cls.DescribeConfigsResult
        if describe
        else response_cls.AlterConfigsResourceResponse
    )

    def check(auth, request, version, ctx):
        kept, refused = [], []
        for r in request.resources:
            if r.resource_type == CONFIG_TOPIC:
                resource, name = TOPIC, r.resource_name
            elif r.resource_type in (CONFIG_BROKER, CONFIG_BROKER_LOGGER):
                resource, name = CLUSTER, CLUSTER_NAME
            elif r.resource_type == CONFIG_GROUP:
                resource, name = GROUP, r.resource_name
            else:
                kept.append(r)
                continue
            if auth.may(ctx, operation, resource, name):
                kept.append(r)
            else:
                fields = dict(
                    error_code=_FAILED_BY_TYPE[resource],
                    error_message=None,
                    resource_type=r.resource_type,
                    resource_name=r.resource_name,
                )
                if describe:
                    fields["configs"] = []
                refused.append(item(**fields))
        if refused:
            request.resources = kept
        return None, _merging(answers, refused)

    return check


def _create_topics(auth, request, version, ctx):
    """CREATE on the cluster or on each topic; a topic created without DESCRIBE_CONFIGS on
    it is answered without its configs (topic_config_error_code), as Kafka's."""
    R = CreateTopicsResponse
    may_create = auth.may(ctx, CREATE, CLUSTER, CLUSTER_NAME)
    kept, refused = [], []
    for t in request.topics:
        if may_create or auth.may(ctx, CREATE, TOPIC, t.name):
            kept.append(t)
        else:
            refused.append(
                R.CreatableTopicResult(
                    name=t.name,
                    error_code=TOPIC_FAILED,
                    error_message="Authorization failed.",
                    num_partitions=-1,
                    replication_factor=-1,
                    topic_config_error_code=TOPIC_FAILED
                    if not auth.may(ctx, DESCRIBE_CONFIGS, TOPIC, t.name)
                    else 0,
                )
            )
    request.topics = kept

    def after(response):
        for t in response.topics or []:
            if t.error_code == 0 and not auth.may(ctx, DESCRIBE_CONFIGS, TOPIC, t.name):
                t.topic_config_error_code = TOPIC_FAILED
                t.configs = []
        response.topics = list(response.topics or []) + refused
        return response

    return None, after


def _delete_topics(auth, request, version, ctx):
    R = DeleteTopicsResponse
    refused = []
    if version >= 6:
        kept = []
        for t in request.topics:
            name = auth.topic_name(t.name, t.topic_id)
            if name is None or auth.may(ctx, DELETE, TOPIC, name):
                kept.append(t)
            else:
                refused.append(
                    R.DeletableTopicResult(
                        name=t.name, topic_id=t.topic_id, error_code=TOPIC_FAILED
                    )
                )
        request.topics = kept
    else:
        kept = []
        for name in request.topic_names:
            if auth.may(ctx, DELETE, TOPIC, name):
                kept.append(name)
            else:
                refused.append(R.DeletableTopicResult(name=name, error_code=TOPIC_FAILED))
        request.topic_names = kept
    return None, _merging("responses", refused)


def _create_partitions(auth, request, version, ctx):
    R = CreatePartitionsResponse
    kept, refused = [], []
    for t in request.topics:
        if auth.may(ctx, ALTER, TOPIC, t.name):
            kept.append(t)
        else:
            refused.append(
                R.CreatePartitionsTopicResult(
                    name=t.name, error_code=TOPIC_FAILED, error_message=None
                )
            )
    request.topics = kept
    return None, _merging("results", refused)


def _acl_answer(request, version, error):
    if isinstance(request, DescribeAclsRequest):
        return DescribeAclsResponse(error_code=error, error_message=None, resources=[])
    if isinstance(request, CreateAclsRequest):
        R = CreateAclsResponse
        return R(results=[R.AclCreationResult(error_code=error) for _ in request.creations])
    R = DeleteAclsResponse
    return R(
        filter_results=[
            R.DeleteAclsFilterResult(error_code=error, matching_acls=[]) for _ in request.filters
        ]
    )


def _elect_leaders_answer(request, version, error):
    R = ElectLeadersResponse
    return R(
        error_code=error,
        replica_election_results=[
            R.ReplicaElectionResult(
                topic=t.topic,
                partition_result=[
                    R.PartitionResult(partition_id=p, error_code=error) for p in t.partitions
                ],
            )
            for t in request.topic_partitions or []
        ],
    )


def _describe_log_dirs_answer(request, version, error):
    return DescribeLogDirsResponse(error_code=error, results=[])


def _alter_replica_log_dirs_answer(request, version, error):
    R = AlterReplicaLogDirsResponse
    return R(
        results=[
            R.AlterReplicaLogDirTopicResult(
                topic_name=t.name,
                partitions=[
                    R.AlterReplicaLogDirPartitionResult(partition_index=p, error_code=error)
                    for p in t.partitions
                ],
            )
            for d in request.dirs
            for t in d.topics
        ]
    )


def _alter_scram_answer(request, version, error):
    R = AlterUserScramCredentialsResponse
    users = dict.fromkeys(c.name for c in (*request.deletions, *request.upsertions))
    return R(results=[R.AlterUserScramCredentialsResult(user=u, error_code=error) for u in users])


def _described_group(cls, **extra):
    return lambda g: cls.DescribedGroup(error_code=GROUP_FAILED, group_id=g, **extra)


_GROUP_READ = _whole(READ, GROUP, _group_id, _group_answer)

# API key -> check(authorizer, request, version, ctx) -> (answer, after): what Kafka's
# KafkaApis authorizes for each API. Not here: ApiVersions, SaslHandshake and
# SaslAuthenticate (before the login), and the APIs this broker does not serve.
GUARDS = {
    DescribeClusterRequest.API_KEY: _describe_cluster,  # only its authorized operations
    ProduceRequest.API_KEY: _produce,
    FetchRequest.API_KEY: _fetch,
    ListOffsetsRequest.API_KEY: _per_topic(LIST_OFFSETS_SHAPE, DESCRIBE),
    OffsetForLeaderEpochRequest.API_KEY: _per_topic(EPOCH_SHAPE, DESCRIBE),
    MetadataRequest.API_KEY: _metadata,
    DescribeTopicPartitionsRequest.API_KEY: _describe_topic_partitions,
    FindCoordinatorRequest.API_KEY: _find_coordinator,
    CreateTopicsRequest.API_KEY: _create_topics,
    DeleteTopicsRequest.API_KEY: _delete_topics,
    CreatePartitionsRequest.API_KEY: _create_partitions,
    DeleteRecordsRequest.API_KEY: _per_topic(DELETE_RECORDS_SHAPE, DELETE),
    DescribeConfigsRequest.API_KEY: _configs(DescribeConfigsResponse, "results", True),
    AlterConfigsRequest.API_KEY: _configs(AlterConfigsResponse, "responses", False),
    IncrementalAlterConfigsRequest.API_KEY: _configs(
        IncrementalAlterConfigsResponse, "responses", False
    ),
    DescribeAclsRequest.API_KEY: _cluster(DESCRIBE, _acl_answer),
    CreateAclsRequest.API_KEY: _cluster(ALTER, _acl_answer),
    DeleteAclsRequest.API_KEY: _cluster(ALTER, _acl_answer),
    InitProducerIdRequest.API_KEY: _init_producer_id,
    AddPartitionsToTxnRequest.API_KEY: _add_partitions_to_txn,
    AddOffsetsToTxnRequest.API_KEY: _add_offsets_to_txn,
    EndTxnRequest.API_KEY: _whole(
        WRITE, TRANSACTIONAL_ID, lambda r: r.transactional_id, _top_level
    ),
    TxnOffsetCommitRequest.API_KEY: _offset_commit(TXN_OFFSET_COMMIT_SHAPE, True),
    OffsetCommitRequest.API_KEY: _offset_commit(OFFSET_COMMIT_SHAPE),
    OffsetFetchRequest.API_KEY: _offset_fetch,
    OffsetDeleteRequest.API_KEY: _offset_delete,
    JoinGroupRequest.API_KEY: _GROUP_READ,
    SyncGroupRequest.API_KEY: _GROUP_READ,
    HeartbeatRequest.API_KEY: _GROUP_READ,
    LeaveGroupRequest.API_KEY: _GROUP_READ,
    ConsumerGroupHeartbeatRequest.API_KEY: _consumer_group_heartbeat,
    StreamsGroupHeartbeatRequest.API_KEY: _streams_group_heartbeat,
    ListGroupsRequest.API_KEY: _list_groups,
    DescribeGroupsRequest.API_KEY: _groups(
        "groups",
        "groups",
        _described_group(
            DescribeGroupsResponse, group_state="", protocol_type="", protocol_data="", members=[]
        ),
        DESCRIBE,
    ),
    ConsumerGroupDescribeRequest.API_KEY: _groups(
        "group_ids",
        "groups",
        _described_group(
            ConsumerGroupDescribeResponse, group_state="", assignor_name="", members=[]
        ),
        DESCRIBE,
        _consumer_group_topics,
    ),
    StreamsGroupDescribeRequest.API_KEY: _groups(
        "group_ids",
        "groups",
        _described_group(
            StreamsGroupDescribeResponse,
            group_state="",
            group_epoch=-1,
            assignment_epoch=-1,
            topology=None,
            members=[],
        ),
        DESCRIBE,
        _streams_group_topics,
    ),
    DeleteGroupsRequest.API_KEY: _groups(
        "groups_names",
        "results",
        lambda g: DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=GROUP_FAILED),
        DELETE,
    ),
    ElectLeadersRequest.API_KEY: _cluster(ALTER, _elect_leaders_answer),
    DescribeLogDirsRequest.API_KEY: _cluster(DESCRIBE, _describe_log_dirs_answer),
    AlterReplicaLogDirsRequest.API_KEY: _cluster(ALTER, _alter_replica_log_dirs_answer),
    DescribeQuorumRequest.API_KEY: _cluster(DESCRIBE),
    AlterPartitionReassignmentsRequest.API_KEY: _cluster(ALTER),
    ListPartitionReassignmentsRequest.API_KEY: _cluster(DESCRIBE),
    ListConfigResourcesRequest.API_KEY: _cluster(DESCRIBE_CONFIGS),
    DescribeUserScramCredentialsRequest.API_KEY: _cluster(DESCRIBE),
    AlterUserScramCredentialsRequest.API_KEY: _cluster(ALTER, _alter_scram_answer),
}
