"""NOT_COORDINATOR for the groups and transactional ids another node coordinates, as
Kafka's brokers answer: a request about one group is answered with the error when this node
does not coordinate it; one about several gets the error for each such group and the
coordinator answers the rest; ListGroups lists only this node's groups (an admin client asks
every node). InitProducerId (with a transactional id), AddPartitionsToTxn (v0-3),
AddOffsetsToTxn and EndTxn get it from a node that does not coordinate their id.
"""

from .. import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    StreamsGroupDescribeRequest,
    StreamsGroupDescribeResponse,
    StreamsGroupHeartbeatRequest,
    StreamsGroupHeartbeatResponse,
    SyncGroupRequest,
    SyncGroupResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from ..error_codes import by_name

NOT_COORDINATOR = by_name("NOT_COORDINATOR").code
ELSEWHERE = "this node does not coordinate the group"
# KIP-848's and KIP-1071's heartbeats answer alike.
_HEARTBEATS = {
    ConsumerGroupHeartbeatRequest.API_KEY: ConsumerGroupHeartbeatResponse,
    StreamsGroupHeartbeatRequest.API_KEY: StreamsGroupHeartbeatResponse,
}


def _partitions_error(R, topic_cls, partition_cls, request):
    return R(
        topics=[
            topic_cls(
                name=t.name,
                partitions=[
                    partition_cls(partition_index=p.partition_index, error_code=NOT_COORDINATOR)
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    )


def _one_group_error(api_key, version, request):
    """The answer to a one-group request whose group this node does not coordinate."""
    if api_key == JoinGroupRequest.API_KEY:
        return JoinGroupResponse(
            error_code=NOT_COORDINATOR,
            generation_id=-1,
            protocol_name=None if version >= 7 else "",
            leader="",
            member_id=request.member_id,
            members=[],
        )
    if api_key == SyncGroupRequest.API_KEY:
        return SyncGroupResponse(error_code=NOT_COORDINATOR, assignment=b"")
    if api_key == HeartbeatRequest.API_KEY:
        return HeartbeatResponse(error_code=NOT_COORDINATOR)
    if api_key == LeaveGroupRequest.API_KEY:
        return LeaveGroupResponse(error_code=NOT_COORDINATOR, members=[])
    if api_key == OffsetDeleteRequest.API_KEY:
        return OffsetDeleteResponse(error_code=NOT_COORDINATOR, topics=[])
    heartbeat = _HEARTBEATS.get(api_key)
    if heartbeat is not None:
        return heartbeat(
            error_code=NOT_COORDINATOR,
            error_message=ELSEWHERE,
            member_id=request.member_id,
            member_epoch=request.member_epoch,
        )
    if api_key == OffsetCommitRequest.API_KEY:
        R = OffsetCommitResponse
        return _partitions_error(
            R, R.OffsetCommitResponseTopic, R.OffsetCommitResponsePartition, request
        )
    if api_key == TxnOffsetCommitRequest.API_KEY:
        R = TxnOffsetCommitResponse
        return _partitions_error(
            R, R.TxnOffsetCommitResponseTopic, R.TxnOffsetCommitResponsePartition, request
        )
    if api_key == OffsetFetchRequest.API_KEY:  # before v8: one group
        return OffsetFetchResponse(error_code=NOT_COORDINATOR, topics=[])
    return None


# API key -> (the response class, the request's list of groups, its group id from an item,
# the response's list, an error item for a group id)
_MANY = {
    DescribeGroupsRequest.API_KEY: (
        DescribeGroupsResponse,
        "groups",
        lambda g: g,
        "groups",
        lambda g: DescribeGroupsResponse.DescribedGroup(
            error_code=NOT_COORDINATOR,
            group_id=g,
            group_state="",
            protocol_type="",
            protocol_data="",
            members=[],
        ),
    ),
    DeleteGroupsRequest.API_KEY: (
        DeleteGroupsResponse,
        "groups_names",
        lambda g: g,
        "results",
        lambda g: DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=NOT_COORDINATOR),
    ),
    ConsumerGroupDescribeRequest.API_KEY: (
        ConsumerGroupDescribeResponse,
        "group_ids",
        lambda g: g,
        "groups",
        lambda g: ConsumerGroupDescribeResponse.DescribedGroup(
            error_code=NOT_COORDINATOR,
            error_message=ELSEWHERE,
            group_id=g,
            group_state="",
            assignor_name="",
            members=[],
        ),
    ),
    StreamsGroupDescribeRequest.API_KEY: (
        StreamsGroupDescribeResponse,
        "group_ids",
        lambda g: g,
        "groups",
        lambda g: StreamsGroupDescribeResponse.DescribedGroup(
            error_code=NOT_COORDINATOR,
            error_message=ELSEWHERE,
            group_id=g,
            group_state="",
            group_epoch=-1,
            assignment_epoch=-1,
            topology=None,
            members=[],
        ),
    ),
    OffsetFetchRequest.API_KEY: (  # v8+
        OffsetFetchResponse,
        "groups",
        lambda g: g.group_id,
        "groups",
        lambda g: OffsetFetchResponse.OffsetFetchResponseGroup(
            group_id=g, topics=[], error_code=NOT_COORDINATOR
        ),
    ),
}


def coordinated(api_key, version, request, reply, owns):
    """(request, reply) for the group coordinator: the request cut down to the groups this
    node coordinates (`owns(group_id)`), and a reply that adds the NOT_COORDINATOR answers of
    the others; (None, None) when it was answered here already."""
    if api_key == ListGroupsRequest.API_KEY:

        def listing(response):
            if getattr(response, "groups", None):
                response.groups = [g for g in response.groups if owns(g.group_id)]
            reply(response)

        return request, listing
    # OffsetFetch is about one group before v8
    many = _MANY.get(api_key) if api_key != OffsetFetchRequest.API_KEY or version >= 8 else None
    if many is None:
        group_id = getattr(request, "group_id", None)
        if group_id is None or owns(group_id):  # not about one group, or about one of ours
            return request, reply
        response = _one_group_error(api_key, version, request)
        if response is None:  # an API this module does not know: the coordinator answers
            return request, reply
        reply(response)
        return None, None
    response_cls, field, group_of, answers, error_item = many
    items = getattr(request, field) or []
    others = [group_of(i) for i in items if not owns(group_of(i))]
    if not others:
        return request, reply
    mine = [i for i in items if owns(group_of(i))]
    errors = [error_item(g) for g in others]
    if not mine:
        reply(response_cls(**{answers: errors}))
        return None, None
    setattr(request, field, mine)

    def merged(response):
        setattr(response, answers, list(getattr(response, answers) or []) + errors)
        reply(response)

    return request, merged


TRANSACTION_API_KEYS = frozenset(
    cls.API_KEY
    for cls in (
        InitProducerIdRequest,
        AddPartitionsToTxnRequest,
        AddOffsetsToTxnRequest,
        EndTxnRequest,
    )
)


def transaction_error(api_key, version, request, owns):
    """The NOT_COORDINATOR answer to a transaction coordinator's request when this node does
    not coordinate its transactional id (`owns(id)`); None when it does, or when the request
    names none (an idempotent producer's InitProducerId, AddPartitionsToTxn v4+)."""
    if api_key == AddPartitionsToTxnRequest.API_KEY:
        if version >= 4 or owns(request.v3_and_below_transactional_id):
            return None
        R = AddPartitionsToTxnResponse
        return R(
            results_by_topic_v3_and_below=[
                R.AddPartitionsToTxnTopicResult(
                    name=t.name,
                    results_by_partition=[
                        R.AddPartitionsToTxnPartitionResult(
                            partition_index=p, partition_error_code=NOT_COORDINATOR
                        )
                        for p in t.partitions
                    ],
                )
                for t in request.v3_and_below_topics
            ]
        )
    tid = request.transactional_id
    if tid is None or owns(tid):
        return None
    if api_key == InitProducerIdRequest.API_KEY:
        return InitProducerIdResponse(error_code=NOT_COORDINATOR, producer_id=-1, producer_epoch=-1)
    if api_key == EndTxnRequest.API_KEY:
        return EndTxnResponse(error_code=NOT_COORDINATOR)
    return AddOffsetsToTxnResponse(error_code=NOT_COORDINATOR)
