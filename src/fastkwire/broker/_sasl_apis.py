"""The SASL APIs `Apis` serves:
- SaslHandshake and SaslAuthenticate once a connection has logged in, or on a listener
  without SASL: answered with ILLEGAL_SASL_STATE, as Kafka's KafkaApis answers them (the
  login itself is _sasl.py's, before a request reaches `Apis`);
- DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554) over the broker's
  users (`apis.users`, _credentials.py's `Users`), as Kafka's controller answers them: the
  users a later SCRAM login finds.
"""

from .. import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from ..error_codes import by_name
from ..sasl import SCRAM_MAX_ITERATIONS, SCRAM_MIN_ITERATIONS
from ._credentials import Users

ILLEGAL_SASL_STATE = by_name("ILLEGAL_SASL_STATE").code
RESOURCE_NOT_FOUND = by_name("RESOURCE_NOT_FOUND").code
DUPLICATE_RESOURCE = by_name("DUPLICATE_RESOURCE").code
UNACCEPTABLE_CREDENTIAL = by_name("UNACCEPTABLE_CREDENTIAL").code
UNSUPPORTED_SASL_MECHANISM = by_name("UNSUPPORTED_SASL_MECHANISM").code
# KIP-554's mechanism types
SCRAM_TYPES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
TYPE_OF = {name: t for t, name in SCRAM_TYPES.items()}
TWICE = "A user credential cannot be altered twice in the same request"


def _users(apis):
    if apis.users is None:  # no users given: the store starts empty
        apis.users = Users({}, required=False)
    return apis.users


def _handshake_after(apis, request, version, ctx):
    return SaslHandshakeResponse(error_code=ILLEGAL_SASL_STATE, mechanisms=[])


def _authenticate_after(apis, request, version, ctx):
    return SaslAuthenticateResponse(
        error_code=ILLEGAL_SASL_STATE,
        error_message="SaslAuthenticate request received after successful authentication",
    )


def _describe_scram(apis, request, version, ctx):
    R = DescribeUserScramCredentialsResponse
    held = _users(apis).scram()
    if not request.users:  # null or empty: every user
        asked = {name: False for name in held}
    else:
        asked = {}
        for user in request.users:
            asked[user.name] = user.name in asked  # True: asked twice
    results = []
    for name, twice in asked.items():
        if twice:
            error, message = (
                DUPLICATE_RESOURCE,
                (
                    "Cannot describe SCRAM credentials for the same user twice in a single "
                    f"request: {name}"
                ),
            )
        elif name not in held:
            error, message = (
                RESOURCE_NOT_FOUND,
                f"Attempt to describe a user credential that does not exist: {name}",
            )
        else:
            error, message = 0, None
        results.append(
            R.DescribeUserScramCredentialsResult(
                user=name,
                error_code=error,
                error_message=message,
                credential_infos=[
                    R.CredentialInfo(mechanism=TYPE_OF[m], iterations=i)
                    for m, i in held.get(name, [])
                    if not error
                ],
            )
        )
    return R(results=results)


def _check(users, name, mechanism_type, iterations=None, deleting=False):
    """(error code, message) of one change, (0, None) when it may be made."""
    if not name:
        return UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    mechanism = SCRAM_TYPES.get(mechanism_type)
    if mechanism is None:
        return UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    if deleting and not users.has_scram(name, mechanism):
        return RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"
    if iterations is not None and iterations < SCRAM_MIN_ITERATIONS:
        return UNACCEPTABLE_CREDENTIAL, "Too few iterations"
    if iterations is not None and iterations > SCRAM_MAX_ITERATIONS:
        return UNACCEPTABLE_CREDENTIAL, "Too many iterations"
    return 0, None


def _alter_scram(apis, request, version, ctx):
    """Each user changed once per request (Kafka's controller refuses a second change of the
    same user, whatever the mechanism); the changes that hold are applied."""
    R = AlterUserScramCredentialsResponse
    users = _users(apis)
    deletions, upsertions, errors = {}, {}, {}
    for change, deleting in [(d, True) for d in request.deletions] + [
        (u, False) for u in request.upsertions
    ]:
        name = change.name
        if name in errors:
            continue
        if deletions.pop(name, None) is not None or upsertions.pop(name, None) is not None:
            errors[name] = (DUPLICATE_RESOURCE, TWICE)
            continue
        error = _check(
            users, name, change.mechanism, None if deleting else change.iterations, deleting
        )
        if error[0]:
            errors[name] = error
        else:
            (deletions if deleting else upsertions)[name] = change
    for name, change in deletions.items():
        users.delete_scram(name, SCRAM_TYPES[change.mechanism])
    for name, change in upsertions.items():
        users.upsert_scram(
            name,
            SCRAM_TYPES[change.mechanism],
            change.iterations,
            change.salt,
            change.salted_password,
        )
    return R(
        results=[
            R.AlterUserScramCredentialsResult(user=n, error_message=None)
            for n in (*deletions, *upsertions)
        ]
        + [
            R.AlterUserScramCredentialsResult(user=n, error_code=code, error_message=message)
            for n, (code, message) in errors.items()
        ]
    )


HANDLERS = (
    (SaslHandshakeRequest, 0, 1, _handshake_after),
    (SaslAuthenticateRequest, 0, 2, _authenticate_after),
    (DescribeUserScramCredentialsRequest, 0, 0, _describe_scram),
    (AlterUserScramCredentialsRequest, 0, 0, _alter_scram),
)
