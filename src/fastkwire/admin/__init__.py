"""Consumer-group administration: describe a group, remove members (KIP-345).

Removing a member by its group.instance.id makes the coordinator rebalance the group at
once instead of waiting for the member's session timeout: the way to scale a static group
down or replace a host.

    client = AdminClient("broker:9093", request_timeout_ms=10000, security_protocol="SASL_SSL",
                         sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="ops",
                         sasl_plain_password=secret, ssl_cafile="ca.pem")
    client.describe_group("orders")        # state, protocol, members and their partitions
    result = client.remove_members_from_group("orders", ["orders-3", "orders-4"], reason="scale down")
    result.all()          # raises the first member that was not removed

The client speaks the protocol itself with this package's codecs over
`fastkwire.connection` (TLS and SASL as configured; the options are kafka-python's). Every
call is bounded by `request_timeout_ms` as a whole: connects, reads and retries share one
deadline. It opens its connections per call and closes them before returning. Answers are
untrusted: their size is capped per API before anything is allocated, and a broker's text
is escaped before it goes into an error message.

The package has three rooms: `results` (what the calls return), `flows` (the argument
checks, and each call written once as a generator of the connection layer's I/O steps:
`Connect`, `Request`, `Close`, `Sleep`) and `clients`. `AdminClient` runs the flows with
`connection.run_steps` on blocking sockets, `AsyncAdminClient` with `run_steps_async` on
asyncio streams in the event loop's own thread. A connection error that reaches a call is
raised as its admin twin (`admin_errors.admin_error`).
"""

from ..admin_errors import (
    AdminError,
    AdminTimeoutError,
    BrokerConnectionError,
    BrokerError,
    BrokerTooOldError,
    FencedInstanceError,
    GroupAuthorizationError,
    GroupNotFoundError,
    GroupStateError,
    MemberRemovalError,
    ResponseError,
    SaslAuthenticationError,
    SecurityError,
    TlsCertificateError,
    TlsError,
    UnknownInstanceError,
    UnsupportedSaslMechanismError,
)
from ..connection import MAX_TIMEOUT_MS, Security
from .clients import AdminClient, AsyncAdminClient

# The constants below were public names of the single-module admin: still importable.
from .flows import (  # noqa: F401
    ANSWER_LIMITS,
    BACKOFF_MAX,
    BACKOFF_START,
    COORDINATOR_RETRY,
    DEFAULT_MAX_GROUP_MEMBERS,
    DEFAULT_PORT,
    FAILOVER_ERRORS,
    GROUP_ANSWER_LIMITS,
    GROUP_NOT_FOUND_ERRORS,
    GROUP_STATE_ERRORS,
    MAX_NAME_BYTES,
    answer_limit,
    check_group,
    check_members,
    check_reason,
    check_removal,
    parse_servers,
)
from .results import (
    Coordinator,
    GroupDescription,
    MemberDescription,
    MemberResult,
    MembershipChangeResult,
    RemovalPlan,
)

__all__ = [
    "AdminClient",
    "AsyncAdminClient",
    "Coordinator",
    "MemberResult",
    "MembershipChangeResult",
    "GroupDescription",
    "MemberDescription",
    "RemovalPlan",
    "AdminError",
    "BrokerConnectionError",
    "AdminTimeoutError",
    "ResponseError",
    "BrokerError",
    "BrokerTooOldError",
    "GroupNotFoundError",
    "GroupAuthorizationError",
    "GroupStateError",
    "MemberRemovalError",
    "UnknownInstanceError",
    "FencedInstanceError",
    "SecurityError",
    "SaslAuthenticationError",
    "UnsupportedSaslMechanismError",
    "TlsError",
    "TlsCertificateError",
    "check_removal",
    "check_members",
    "check_group",
    "check_reason",
    "parse_servers",
    "Security",
    "ANSWER_LIMITS",
    "answer_limit",
    "MAX_TIMEOUT_MS",
    "DEFAULT_MAX_GROUP_MEMBERS",
]
