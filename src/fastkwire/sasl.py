"""SASL client mechanisms, without I/O: PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER.

Each mechanism is a small state machine: `start()` gives the first client message, then
`step(server_bytes)` gives the next one, or None once the exchange is complete. A server
answer that breaks the mechanism's rules (a SCRAM nonce that does not extend ours, a
server signature that does not match, an iteration count out of range) raises
`SaslAuthError`. The connection layer (`fastkwire.connection`) carries the
messages in SaslAuthenticate requests.

SCRAM follows RFC 5802 (RFC 7677 for SHA-256) as Kafka uses it: no channel binding
("n,,"), the user name escaped as `saslname`, the password taken as UTF-8 without SASLprep
(as Kafka's own clients do).
"""

import base64
import hashlib
import hmac
import json
import secrets

from ._printable import printable
from .connection_errors import SaslAuthError

__all__ = ["Plain", "Scram", "OAuthBearer", "SCRAM_HASHES", "MECHANISMS", "make_mechanism", "utf8"]

SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MECHANISMS = ("PLAIN", *SCRAM_HASHES, "OAUTHBEARER")
# Kafka's brokers refuse fewer than 4096 iterations; more than Kafka's own maximum
# (16384) would let a hostile server make us burn CPU.
SCRAM_MIN_ITERATIONS = 4096
SCRAM_MAX_ITERATIONS = 16384
MAX_SERVER_TEXT = 200
# A SCRAM server message or an OAUTHBEARER error status is a few hundred bytes; larger ones
# are refused before they are parsed (int() of thousands of digits, json of deep nesting).
MAX_SERVER_MESSAGE = 4096


def _bounded(server_bytes, what):
    if len(server_bytes) > MAX_SERVER_MESSAGE:
        raise SaslAuthError(
            f"the broker's {what} is {len(server_bytes)} bytes long, more than the "
            f"{MAX_SERVER_MESSAGE} such a message can take"
        )
    return server_bytes


def utf8(text, what, error=SaslAuthError):
    """`text` as UTF-8, or `error` naming `what`, never the text: a password or token with a
    lone surrogate (what os.environ and argv give for a byte that is not UTF-8) makes a
    UnicodeEncodeError whose args hold all of it."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        pass  # raised below, outside the handler, so that the error has no context to leak
    raise error(
        f"the {what} is not valid Unicode (a lone surrogate: was it given as bytes that are not UTF-8?)"
    )


class Plain:
    """RFC 4616: one message, authorization id empty."""

    name = "PLAIN"

    def __init__(self, username, password):
        self._message = (
            b"\0" + utf8(username, "SASL user name") + b"\0" + utf8(password, "SASL password")
        )

    def __repr__(self):
        return "Plain(...)"

    def start(self):
        return self._message

    def step(self, server_bytes):
        return None


def _saslname(name):
    return name.replace("=", "=3D").replace(",", "=2C")


def _attributes(text, what):
    """'a=1,b=2' -> {'a': '1', 'b': '2'}; a part without '=' is a SaslAuthError."""
    out = {}
    for part in text.split(","):
        key, eq, value = part.partition("=")
        if not eq or len(key) != 1:
            raise SaslAuthError(
                f"the broker's SCRAM {what} is malformed: {printable(text, MAX_SERVER_TEXT)!r}"
            )
        out.setdefault(key, value)
    return out


class Scram:
    """RFC 5802 client for `hash_name` ('sha256', 'sha512'; 'sha1' is RFC 5802's example)."""

    def __init__(self, username, password, hash_name="sha256", nonce=None):
        self.name = {v: k for k, v in SCRAM_HASHES.items()}.get(
            hash_name, f"SCRAM-{hash_name.upper()}"
        )
        self._hash = hash_name
        utf8(username, "SASL user name")
        self._username = username
        self._password = utf8(password, "SASL password")
        self._nonce = nonce or base64.b64encode(secrets.token_bytes(18)).decode()
        self._state = "start"
        self._server_signature = None

    def __repr__(self):
        return f"Scram({self.name})"

    def _hmac(self, key, data):
        return hmac.new(key, data, self._hash).digest()

    def start(self):
        self._first_bare = f"n={_saslname(self._username)},r={self._nonce}"
        self._state = "first"
        return ("n,," + self._first_bare).encode()

    def step(self, server_bytes):
        if self._state == "first":
            return self._final(_bounded(server_bytes, "SCRAM first message"))
        if self._state == "final":
            self._verify(_bounded(server_bytes, "SCRAM final message"))
            return None
        raise SaslAuthError("the broker sent SCRAM data after the exchange was complete")

    def _final(self, server_bytes):
        try:
            server_first = server_bytes.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslAuthError("the broker's SCRAM first message is not UTF-8") from None
        attrs = _attributes(server_first, "first message")
        if "e" in attrs:
            raise SaslAuthError(
                f"the broker refused SCRAM: {printable(attrs['e'], MAX_SERVER_TEXT)}"
            )
        if "m" in attrs:  # RFC 5802 5.1: a mandatory extension this client does not know must fail
            raise SaslAuthError(
                "the broker's SCRAM first message asks for a mandatory extension (m=), "
                "which this client does not support"
            )
        nonce, salt, iterations = attrs.get("r", ""), attrs.get("s"), attrs.get("i", "")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise SaslAuthError(
                "the broker's SCRAM nonce does not extend the client's "
                "(a replayed or forged answer)"
            )
        # The length first: int() refuses more than 4300 digits with a ValueError.
        if (
            not iterations.isascii()
            or not iterations.isdigit()
            or len(iterations) > 9
            or not (SCRAM_MIN_ITERATIONS <= int(iterations) <= SCRAM_MAX_ITERATIONS)
        ):
            raise SaslAuthError(
                f"the broker asked for {printable(iterations, 20)!r} SCRAM iterations; "
                f"expected {SCRAM_MIN_ITERATIONS}-{SCRAM_MAX_ITERATIONS}"
            )
        try:
            salt = base64.b64decode(salt or "", validate=True)
        except ValueError:
            raise SaslAuthError("the broker's SCRAM salt is not base64") from None
        if not salt:
            raise SaslAuthError("the broker sent no SCRAM salt")
        salted = hashlib.pbkdf2_hmac(self._hash, self._password, salt, int(iterations))
        client_key = self._hmac(salted, b"Client Key")
        stored_key = hashlib.new(self._hash, client_key).digest()
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._first_bare},{server_first},{without_proof}".encode()
        signature = self._hmac(stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        self._server_signature = self._hmac(self._hmac(salted, b"Server Key"), auth_message)
        self._state = "final"
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def _verify(self, server_bytes):
        self._state = "done"
        attrs = _attributes(server_bytes.decode("utf-8", "replace"), "final message")
        if "e" in attrs:
            raise SaslAuthError(
                f"the broker refused SCRAM: {printable(attrs['e'], MAX_SERVER_TEXT)}"
            )
        try:
            theirs = base64.b64decode(attrs.get("v", ""), validate=True)
        except ValueError:
            theirs = b""
        if not hmac.compare_digest(theirs, self._server_signature):
            raise SaslAuthError(
                "the broker's SCRAM server signature is wrong: it does not know "
                "this user's credentials (an impostor, or a man in the middle)"
            )


class OAuthBearer:
    """RFC 7628 client message with a bearer token; the token comes from the caller."""

    name = "OAUTHBEARER"

    def __init__(self, token):
        if not isinstance(token, str) or not token:
            raise SaslAuthError("the OAUTHBEARER token provider gave no token (a non-empty str)")
        self._message = b"n,,\x01auth=Bearer " + utf8(token, "OAUTHBEARER token") + b"\x01\x01"
        self.status = None  # the broker's error status, when it rejects the token

    def __repr__(self):
        return "OAuthBearer(...)"

    def start(self):
        return self._message

    def step(self, server_bytes):
        if not server_bytes:
            return None
        # A rejection: the server sends a JSON status and waits for a lone 0x01 before failing.
        try:
            self.status = str(
                json.loads(_bounded(server_bytes, "OAUTHBEARER error status")).get("status")
            )
        except (
            ValueError,
            AttributeError,
            RecursionError,
        ):  # RecursionError: nesting deeper than json takes
            self.status = "unknown"
        return b"\x01"


def make_mechanism(mechanism, username=None, password=None, token=None):
    if mechanism == "PLAIN":
        return Plain(username, password)
    if mechanism in SCRAM_HASHES:
        return Scram(username, password, SCRAM_HASHES[mechanism])
    if mechanism == "OAUTHBEARER":
        return OAuthBearer(token)
    raise ValueError(
        f"unknown SASL mechanism {mechanism!r} (expected one of {', '.join(MECHANISMS)})"
    )
