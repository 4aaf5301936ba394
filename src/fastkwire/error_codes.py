"""Kafka protocol error codes, under Kafka's own names.

`lookup(code)` gives an `ErrorCode` for any int16, known or not. `retriable` follows
Kafka's client classification: the same request may succeed if sent again later.
The descriptions are short summaries in this project's words.
"""

from typing import NamedTuple

__all__ = ["ErrorCode", "ERRORS", "API_ERRORS", "lookup", "error_name", "by_name"]


class ErrorCode(NamedTuple):
    code: int
    name: str
    retriable: bool
    description: str

    def __str__(self):
        return f"{self.name} ({self.code}): {self.description}"


# (code, name, retriable, description)
_TABLE = [
    (-1, "UNKNOWN_SERVER_ERROR", False, "The broker hit an unexpected error; its log says more."),
    (0, "NONE", False, "No error."),
    (1, "OFFSET_OUT_OF_RANGE", False, "The offset is outside the range the partition holds."),
    (2, "CORRUPT_MESSAGE", True, "A record failed its checksum or size checks."),
    (3, "UNKNOWN_TOPIC_OR_PARTITION", True, "This broker does not host the topic-partition."),
    (4, "INVALID_FETCH_SIZE", False, "The fetch size is not valid."),
    (
        5,
        "LEADER_NOT_AVAILABLE",
        True,
        "The partition has no leader right now (election under way).",
    ),
    (
        6,
        "NOT_LEADER_OR_FOLLOWER",
        True,
        "This broker is not the leader (or a replica) of the partition.",
    ),
    (7, "REQUEST_TIMED_OUT", True, "The broker gave up waiting on the request."),
    (8, "BROKER_NOT_AVAILABLE", False, "The broker is not available."),
    (9, "REPLICA_NOT_AVAILABLE", True, "The replica is not available for the partition."),
    (10, "MESSAGE_TOO_LARGE", False, "A message is larger than the broker accepts."),
    (11, "STALE_CONTROLLER_EPOCH", False, "The controller has moved to another broker."),
    (12, "OFFSET_METADATA_TOO_LARGE", False, "The offset commit metadata is too large."),
    (13, "NETWORK_EXCEPTION", True, "The connection closed before the answer arrived."),
    (
        14,
        "COORDINATOR_LOAD_IN_PROGRESS",
        True,
        "The coordinator is still loading its state; try again soon.",
    ),
    (15, "COORDINATOR_NOT_AVAILABLE", True, "No coordinator is available for this key right now."),
    (16, "NOT_COORDINATOR", True, "This broker is not the coordinator for the key; find it again."),
    (17, "INVALID_TOPIC_EXCEPTION", False, "The topic name is not valid for this operation."),
    (18, "RECORD_LIST_TOO_LARGE", False, "A record batch is larger than the segment size."),
    (19, "NOT_ENOUGH_REPLICAS", True, "Too few in-sync replicas to accept the write."),
    (
        20,
        "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
        True,
        "Written, but to fewer in-sync replicas than required.",
    ),
    (21, "INVALID_REQUIRED_ACKS", False, "The acks value is not valid."),
    (22, "ILLEGAL_GENERATION", False, "The group generation id is not the current one."),
    (23, "INCONSISTENT_GROUP_PROTOCOL", False, "The member's protocols do not match the group's."),
    (24, "INVALID_GROUP_ID", False, "The group id is not valid (for example empty)."),
    (25, "UNKNOWN_MEMBER_ID", False, "The coordinator does not know this member."),
    (
        26,
        "INVALID_SESSION_TIMEOUT",
        False,
        "The session timeout is outside the broker's allowed range.",
    ),
    (27, "REBALANCE_IN_PROGRESS", False, "The group is rebalancing; members must rejoin."),
    (28, "INVALID_COMMIT_OFFSET_SIZE", False, "The offset commit is too large."),
    (29, "TOPIC_AUTHORIZATION_FAILED", False, "Not authorized for the topic."),
    (30, "GROUP_AUTHORIZATION_FAILED", False, "Not authorized for the group."),
    (31, "CLUSTER_AUTHORIZATION_FAILED", False, "Not authorized for the cluster."),
    (32, "INVALID_TIMESTAMP", False, "A record timestamp is outside the accepted range."),
    (33, "UNSUPPORTED_SASL_MECHANISM", False, "The broker does not offer this SASL mechanism."),
    (34, "ILLEGAL_SASL_STATE", False, "The request is not valid in the current SASL state."),
    (35, "UNSUPPORTED_VERSION", False, "The broker does not support this API version."),
    (36, "TOPIC_ALREADY_EXISTS", False, "A topic with this name already exists."),
    (37, "INVALID_PARTITIONS", False, "The partition count is not valid."),
    (
        38,
        "INVALID_REPLICATION_FACTOR",
        False,
        "The replication factor is not valid for this cluster.",
    ),
    (39, "INVALID_REPLICA_ASSIGNMENT", False, "The replica assignment is not valid."),
    (40, "INVALID_CONFIG", False, "The configuration is not valid."),
    (41, "NOT_CONTROLLER", True, "This broker is not the active controller."),
    (42, "INVALID_REQUEST", False, "The broker could not make sense of the request; see its log."),
    (
        43,
        "UNSUPPORTED_FOR_MESSAGE_FORMAT",
        False,
        "The broker's message format does not support this.",
    ),
    (44, "POLICY_VIOLATION", False, "The request breaks a configured policy."),
    (45, "OUT_OF_ORDER_SEQUENCE_NUMBER", False, "The producer sequence number is out of order."),
    (46, "DUPLICATE_SEQUENCE_NUMBER", False, "The producer sequence number was already seen."),
    (47, "INVALID_PRODUCER_EPOCH", False, "The producer epoch is old."),
    (48, "INVALID_TXN_STATE", False, "The transaction is not in a state that allows this."),
    (
        49,
        "INVALID_PRODUCER_ID_MAPPING",
        False,
        "The producer id does not belong to this transactional id.",
    ),
    (
        50,
        "INVALID_TRANSACTION_TIMEOUT",
        False,
        "The transaction timeout is above the broker's maximum.",
    ),
    (
        51,
        "CONCURRENT_TRANSACTIONS",
        True,
        "Another operation on the same transaction is in progress.",
    ),
    (
        52,
        "TRANSACTION_COORDINATOR_FENCED",
        False,
        "The transaction coordinator is no longer current.",
    ),
    (
        53,
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        False,
        "Not authorized for the transactional id.",
    ),
    (54, "SECURITY_DISABLED", False, "Security features are disabled on the broker."),
    (55, "OPERATION_NOT_ATTEMPTED", False, "Skipped because another part of the batch failed."),
    (56, "KAFKA_STORAGE_ERROR", True, "The broker had a disk error on the log."),
    (57, "LOG_DIR_NOT_FOUND", False, "The log directory is not in the broker's configuration."),
    (58, "SASL_AUTHENTICATION_FAILED", False, "SASL authentication failed."),
    (59, "UNKNOWN_PRODUCER_ID", False, "The broker has no state for this producer id."),
    (60, "REASSIGNMENT_IN_PROGRESS", False, "A partition reassignment is in progress."),
    (61, "DELEGATION_TOKEN_AUTH_DISABLED", False, "Delegation tokens are not enabled."),
    (62, "DELEGATION_TOKEN_NOT_FOUND", False, "The delegation token does not exist."),
    (
        63,
        "DELEGATION_TOKEN_OWNER_MISMATCH",
        False,
        "The principal is not the token's owner or renewer.",
    ),
    (
        64,
        "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED",
        False,
        "Token requests are not allowed on this channel.",
    ),
    (
        65,
        "DELEGATION_TOKEN_AUTHORIZATION_FAILED",
        False,
        "Not authorized for the delegation token.",
    ),
    (66, "DELEGATION_TOKEN_EXPIRED", False, "The delegation token has expired."),
    (67, "INVALID_PRINCIPAL_TYPE", False, "The principal type is not supported."),
    (68, "NON_EMPTY_GROUP", False, "The group still has members."),
    (69, "GROUP_ID_NOT_FOUND", False, "The group does not exist."),
    (70, "FETCH_SESSION_ID_NOT_FOUND", True, "The fetch session does not exist."),
    (71, "INVALID_FETCH_SESSION_EPOCH", True, "The fetch session epoch is not valid."),
    (72, "LISTENER_NOT_FOUND", True, "The leader has no listener matching this one."),
    (73, "TOPIC_DELETION_DISABLED", False, "Topic deletion is disabled."),
    (
        74,
        "FENCED_LEADER_EPOCH",
        True,
        "The leader epoch in the request is older than the broker's.",
    ),
    (
        75,
        "UNKNOWN_LEADER_EPOCH",
        True,
        "The leader epoch in the request is newer than the broker's.",
    ),
    (
        76,
        "UNSUPPORTED_COMPRESSION_TYPE",
        False,
        "The client does not support the partition's compression.",
    ),
    (77, "STALE_BROKER_EPOCH", False, "The broker epoch has changed."),
    (78, "OFFSET_NOT_AVAILABLE", True, "The high watermark has not caught up after an election."),
    (
        79,
        "MEMBER_ID_REQUIRED",
        False,
        "The member must join again with the member id it was given.",
    ),
    (80, "PREFERRED_LEADER_NOT_AVAILABLE", True, "The preferred leader is not available."),
    (81, "GROUP_MAX_SIZE_REACHED", False, "The group already has its maximum number of members."),
    (
        82,
        "FENCED_INSTANCE_ID",
        False,
        "The group instance id is held by a member with another member id.",
    ),
    (
        83,
        "ELIGIBLE_LEADERS_NOT_AVAILABLE",
        True,
        "No eligible leader is available for the partition.",
    ),
    (84, "ELECTION_NOT_NEEDED", True, "The partition does not need a leader election."),
    (85, "NO_REASSIGNMENT_IN_PROGRESS", False, "No partition reassignment is in progress."),
    (
        86,
        "GROUP_SUBSCRIBED_TO_TOPIC",
        False,
        "The group is subscribed to the topic, so its offsets stay.",
    ),
    (87, "INVALID_RECORD", False, "The broker rejected a record as not valid."),
    (88, "UNSTABLE_OFFSET_COMMIT", True, "Offsets are pending in an open transaction."),
    (89, "THROTTLING_QUOTA_EXCEEDED", True, "The throttling quota is exceeded."),
    (90, "PRODUCER_FENCED", False, "A newer producer with the same transactional id exists."),
    (91, "RESOURCE_NOT_FOUND", False, "The named resource does not exist."),
    (92, "DUPLICATE_RESOURCE", False, "The same resource is named twice."),
    (93, "UNACCEPTABLE_CREDENTIAL", False, "The credential does not meet the acceptance criteria."),
    (94, "INCONSISTENT_VOTER_SET", False, "Sender or receiver is not one of the expected voters."),
    (95, "INVALID_UPDATE_VERSION", False, "The update version is not valid."),
    (96, "FEATURE_UPDATE_FAILED", False, "The finalized features could not be updated."),
    (
        97,
        "PRINCIPAL_DESERIALIZATION_FAILURE",
        False,
        "A forwarded request's principal could not be read.",
    ),
    (98, "SNAPSHOT_NOT_FOUND", False, "The snapshot does not exist."),
    (99, "POSITION_OUT_OF_RANGE", False, "The snapshot position is out of range."),
    (100, "UNKNOWN_TOPIC_ID", True, "This broker does not host the topic id."),
    (101, "DUPLICATE_BROKER_REGISTRATION", False, "The broker id is already registered."),
    (102, "BROKER_ID_NOT_REGISTERED", False, "The broker id is not registered."),
    (103, "INCONSISTENT_TOPIC_ID", True, "The topic id does not match the log's."),
    (104, "INCONSISTENT_CLUSTER_ID", False, "The cluster id does not match the broker's."),
    (105, "TRANSACTIONAL_ID_NOT_FOUND", False, "The transactional id does not exist."),
    (106, "FETCH_SESSION_TOPIC_ID_ERROR", True, "The fetch session used topic ids inconsistently."),
    (107, "INELIGIBLE_REPLICA", False, "The new in-sync set has an ineligible replica."),
    (108, "NEW_LEADER_ELECTED", False, "The partition state was updated but the leader changed."),
    (109, "OFFSET_MOVED_TO_TIERED_STORAGE", False, "The offset now lives in tiered storage."),
    (110, "FENCED_MEMBER_EPOCH", False, "The member epoch is fenced; the member must rejoin."),
    (111, "UNRELEASED_INSTANCE_ID", False, "Another member still holds the instance id."),
    (112, "UNSUPPORTED_ASSIGNOR", False, "The group does not support the assignor."),
    (113, "STALE_MEMBER_EPOCH", False, "The member epoch is stale."),
    (114, "MISMATCHED_ENDPOINT_TYPE", False, "The request went to the wrong kind of endpoint."),
    (115, "UNSUPPORTED_ENDPOINT_TYPE", False, "This kind of endpoint is not supported yet."),
    (116, "UNKNOWN_CONTROLLER_ID", False, "The controller id is not known."),
    (117, "UNKNOWN_SUBSCRIPTION_ID", False, "The telemetry subscription id is unknown or old."),
    (118, "TELEMETRY_TOO_LARGE", False, "The telemetry push is larger than the broker accepts."),
    (119, "INVALID_REGISTRATION", False, "The controller found the broker registration not valid."),
    (120, "TRANSACTION_ABORTABLE", False, "The transaction failed; abort it to go on."),
    (121, "INVALID_RECORD_STATE", False, "The record's state does not allow this acknowledgement."),
    (122, "SHARE_SESSION_NOT_FOUND", True, "The share session does not exist."),
    (123, "INVALID_SHARE_SESSION_EPOCH", True, "The share session epoch is not valid."),
    (124, "FENCED_STATE_EPOCH", False, "The share-group state epoch does not match."),
    (125, "INVALID_VOTER_KEY", False, "The voter key does not match the replica's."),
    (126, "DUPLICATE_VOTER", False, "The voter is already in the voter set."),
    (127, "VOTER_NOT_FOUND", False, "The voter is not in the voter set."),
    (128, "INVALID_REGULAR_EXPRESSION", False, "The regular expression is not valid."),
    (
        129,
        "REBOOTSTRAP_REQUIRED",
        False,
        "The client's metadata is stale; it must bootstrap again.",
    ),
    (130, "STREAMS_INVALID_TOPOLOGY", False, "The streams topology is not valid."),
    (131, "STREAMS_INVALID_TOPOLOGY_EPOCH", False, "The streams topology epoch is not valid."),
    (132, "STREAMS_TOPOLOGY_FENCED", False, "The streams topology epoch is out of date."),
    (133, "SHARE_SESSION_LIMIT_REACHED", True, "The broker has reached its share session limit."),
]

ERRORS = {code: ErrorCode(code, name, retriable, text) for code, name, retriable, text in _TABLE}
_BY_NAME = {e.name: e for e in ERRORS.values()}

# Codes each API can answer with (besides NONE), by Kafka's API name. Brokers also send
# UNKNOWN_SERVER_ERROR for anything unexpected.
API_ERRORS = {
    "ApiVersions": ("UNSUPPORTED_VERSION", "INVALID_REQUEST", "UNKNOWN_SERVER_ERROR"),
    "FindCoordinator": (
        "COORDINATOR_NOT_AVAILABLE",
        "NOT_COORDINATOR",
        "COORDINATOR_LOAD_IN_PROGRESS",
        "GROUP_AUTHORIZATION_FAILED",
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        "INVALID_REQUEST",
        "INVALID_GROUP_ID",
        "UNSUPPORTED_VERSION",
        "TRANSACTION_ABORTABLE",
        "UNKNOWN_SERVER_ERROR",
    ),
    "LeaveGroup": (
        "COORDINATOR_LOAD_IN_PROGRESS",
        "COORDINATOR_NOT_AVAILABLE",
        "NOT_COORDINATOR",
        "GROUP_AUTHORIZATION_FAILED",
        "INVALID_GROUP_ID",
        "GROUP_ID_NOT_FOUND",
        "UNKNOWN_MEMBER_ID",
        "FENCED_INSTANCE_ID",
        "REBALANCE_IN_PROGRESS",
        "ILLEGAL_GENERATION",
        "UNSUPPORTED_VERSION",
        "INVALID_REQUEST",
        "REQUEST_TIMED_OUT",
        "UNKNOWN_SERVER_ERROR",
    ),
    "StreamsGroupHeartbeat": (
        "GROUP_AUTHORIZATION_FAILED",
        "GROUP_ID_NOT_FOUND",
        "NOT_COORDINATOR",
        "COORDINATOR_NOT_AVAILABLE",
        "COORDINATOR_LOAD_IN_PROGRESS",
        "INVALID_REQUEST",
        "UNKNOWN_MEMBER_ID",
        "FENCED_MEMBER_EPOCH",
        "UNRELEASED_INSTANCE_ID",
        "GROUP_MAX_SIZE_REACHED",
        "TOPIC_AUTHORIZATION_FAILED",
        "CLUSTER_AUTHORIZATION_FAILED",
        "STREAMS_INVALID_TOPOLOGY",
        "STREAMS_INVALID_TOPOLOGY_EPOCH",
        "STREAMS_TOPOLOGY_FENCED",
        "UNSUPPORTED_VERSION",
        "UNKNOWN_SERVER_ERROR",
    ),
}


def lookup(code):
    """The `ErrorCode` for `code`; a code this table lacks still gets a usable entry."""
    code = int(code)
    found = ERRORS.get(code)
    if found is not None:
        return found
    return ErrorCode(
        code,
        f"UNKNOWN_ERROR_CODE_{code}",
        False,
        "A code this version of fastkwire does not know (a newer broker?).",
    )


def error_name(code):
    """Kafka's name for `code` (`25` -> `"UNKNOWN_MEMBER_ID"`)."""
    return lookup(code).name


def by_name(name):
    """The `ErrorCode` named `name`; KeyError if Kafka has no such error."""
    return _BY_NAME[name]
