"""SaslHandshake and SaslAuthenticate once a connection has logged in, or on a listener
without SASL: answered with ILLEGAL_SASL_STATE, as Kafka's KafkaApis answers them. The login
itself is _sasl.py's, before a request reaches `Apis`."""

from .. import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from ..error_codes import by_name

ILLEGAL_SASL_STATE = by_name("ILLEGAL_SASL_STATE").code


def _handshake_after(apis, request, version, ctx):
    return SaslHandshakeResponse(error_code=ILLEGAL_SASL_STATE, mechanisms=[])


def _authenticate_after(apis, request, version, ctx):
    return SaslAuthenticateResponse(
        error_code=ILLEGAL_SASL_STATE,
        error_message="SaslAuthenticate request received after successful authentication",
    )


HANDLERS = (
    (SaslHandshakeRequest, 0, 1, _handshake_after),
    (SaslAuthenticateRequest, 0, 2, _authenticate_after),
)
