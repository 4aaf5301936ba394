"""The exceptions of the admin client (`fastkwire.admin` re-exports them).

Every failure of a call that got past its argument checks is an `AdminError`; the
arguments themselves are checked before anything is sent and fail with ValueError.

The connection layer has its own errors (`fastkwire.connection_errors`); each admin error
that stands for one of them subclasses it, and `admin_error` turns a connection error
that reaches an admin call into its admin twin (same message, same `.error`).
"""

from .connection_errors import (
    BadResponseError,
    KafkaBrokerError,
    KafkaClientError,
    KafkaConnectionError,
    KafkaSecurityError,
    KafkaTimeoutError,
    NoCommonVersionError,
    SaslAuthError,
    SaslMechanismError,
    TlsHandshakeError,
    TlsVerifyError,
)

__all__ = [
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
    "admin_error",
]


class AdminError(KafkaClientError):
    """Base of every error the admin client raises. `.error` is the Kafka `ErrorCode`, if any."""


class BrokerConnectionError(AdminError, KafkaConnectionError):
    """A broker could not be reached, or closed or reset the connection."""


class SecurityError(AdminError, KafkaSecurityError):
    """TLS or SASL failed: a matter of configuration, so it is never retried."""


class SaslAuthenticationError(SecurityError, SaslAuthError):
    """The broker refused the credentials (or its SCRAM proof did not match ours)."""


class UnsupportedSaslMechanismError(SecurityError, SaslMechanismError):
    """The broker does not enable the SASL mechanism asked for."""


class TlsError(SecurityError, TlsHandshakeError):
    """The TLS handshake failed (no TLS listener there, no common protocol or cipher)."""


class TlsCertificateError(TlsError, TlsVerifyError):
    """The broker's certificate could not be verified, or the broker refused ours."""


class AdminTimeoutError(AdminError, KafkaTimeoutError):
    """The call did not finish within its timeout (a silent broker, or retries ran out)."""


class ResponseError(AdminError, BadResponseError):
    """The broker's answer could not be decoded or did not match the request."""


class BrokerError(AdminError, KafkaBrokerError):
    """The broker answered with a Kafka error code for the whole request."""


class BrokerTooOldError(BrokerError, NoCommonVersionError):
    """The broker lacks LeaveGroup v3, so it cannot remove members by group.instance.id."""


class GroupNotFoundError(BrokerError):
    """The group does not exist on its coordinator."""


class GroupAuthorizationError(BrokerError):
    """GROUP_AUTHORIZATION_FAILED: the client may not change this group."""


class GroupStateError(BrokerError):
    """The group is not in a state in which it can rebalance now."""


class MemberRemovalError(AdminError):
    """A member was not removed; raised by `MembershipChangeResult.all()`."""

    def __init__(self, message, member):
        super().__init__(message, member.error)
        self.member = member


class UnknownInstanceError(MemberRemovalError):
    """UNKNOWN_MEMBER_ID: no member of the group has this group.instance.id."""


class FencedInstanceError(MemberRemovalError):
    """FENCED_INSTANCE_ID: the instance id belongs to a member with another member id."""


# Each connection error's admin twin, most specific first.
_TWINS = [
    (TlsVerifyError, TlsCertificateError),
    (TlsHandshakeError, TlsError),
    (SaslMechanismError, UnsupportedSaslMechanismError),
    (SaslAuthError, SaslAuthenticationError),
    (KafkaSecurityError, SecurityError),
    (KafkaTimeoutError, AdminTimeoutError),
    (NoCommonVersionError, BrokerTooOldError),
    (KafkaBrokerError, BrokerError),
    (BadResponseError, ResponseError),
    (KafkaConnectionError, BrokerConnectionError),
    (KafkaClientError, AdminError),
]


def admin_error(exc):
    """`exc` as an AdminError: itself if it is one, else its admin twin with its message and code."""
    if isinstance(exc, AdminError):
        return exc
    twin = next(admin for base, admin in _TWINS if isinstance(exc, base))
    error = twin(str(exc), exc.error)
    error.__traceback__ = exc.__traceback__
    return error
