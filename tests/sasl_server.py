"""The server side of SASL for the tests: PLAIN, SCRAM (RFC 5802/7677) and OAUTHBEARER,
written from the RFCs (not from fastkwire.sasl) so that each side checks the other.

`SaslServer(users=..., tokens=...)` holds the credentials; `server.session(mechanism)` gives
one exchange whose `step(client_bytes)` returns (reply bytes, done). A refusal raises
`Refused` with the message a broker would send. Fault switches: `bad_signature` (SCRAM's
server-final carries a wrong signature), `nonce` (a fixed server nonce, e.g. one that does
not extend the client's).
"""

import base64
import hashlib
import hmac
import json
import secrets

SCRAM = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512", "SCRAM-SHA-1": "sha1"}


class Refused(Exception):
    pass


class SaslServer:
    def __init__(
        self,
        users=None,
        tokens=(),
        mechanisms=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"),
        iterations=4096,
        bad_signature=False,
        nonce=None,
        listed=None,
    ):
        self.users = dict(users or {})
        self.tokens = set(tokens)
        self.mechanisms = list(mechanisms)
        # what the handshake's answer lists (a broker may list one it then refuses)
        self.listed = self.mechanisms if listed is None else list(listed)
        self.iterations = iterations
        self.bad_signature = bad_signature
        self.nonce = nonce
        self.authenticated = []  # (mechanism, principal), one per completed exchange

    def session(self, mechanism):
        if mechanism == "PLAIN":
            return _Plain(self)
        if mechanism in SCRAM:
            return _Scram(self, SCRAM[mechanism])
        if mechanism == "OAUTHBEARER":
            return _OAuth(self)
        raise Refused(f"unsupported mechanism {mechanism}")


class _Plain:
    def __init__(self, server):
        self.server = server

    def step(self, data):
        try:
            _, user, password = data.decode().split("\0")
        except ValueError:
            raise Refused("malformed PLAIN message") from None
        if self.server.users.get(user) != password:
            raise Refused("Authentication failed: Invalid username or password")
        self.server.authenticated.append(("PLAIN", user))
        return b"", True


class _Scram:
    def __init__(self, server, hash_name):
        self.server, self.hash = server, hash_name
        self.state = "first"

    def _hmac(self, key, data):
        return hmac.new(key, data, self.hash).digest()

    def step(self, data):
        text = data.decode()
        if self.state == "first":
            if not text.startswith("n,,"):
                raise Refused("channel binding not supported")
            self.first_bare = text[3:]
            attrs = dict(part.split("=", 1) for part in self.first_bare.split(","))
            self.user = attrs["n"].replace("=2C", ",").replace("=3D", "=")
            if self.user not in self.server.users:
                raise Refused(
                    "Authentication failed during authentication due to invalid credentials with "
                    "SASL mechanism SCRAM"
                )
            self.salt = secrets.token_bytes(16)
            self.full_nonce = (
                self.server.nonce or attrs["r"] + base64.b64encode(secrets.token_bytes(12)).decode()
            )
            self.server_first = (
                f"r={self.full_nonce},s={base64.b64encode(self.salt).decode()},"
                f"i={self.server.iterations}"
            )
            self.state = "final"
            return self.server_first.encode(), False
        without_proof, _, proof = text.rpartition(",p=")
        if without_proof != f"c=biws,r={self.full_nonce}":
            raise Refused("invalid client final message")
        salted = hashlib.pbkdf2_hmac(
            self.hash, self.server.users[self.user].encode(), self.salt, self.server.iterations
        )
        auth_message = f"{self.first_bare},{self.server_first},{without_proof}".encode()
        stored_key = hashlib.new(self.hash, self._hmac(salted, b"Client Key")).digest()
        signature = self._hmac(stored_key, auth_message)
        client_key = bytes(a ^ b for a, b in zip(base64.b64decode(proof), signature))
        if hashlib.new(self.hash, client_key).digest() != stored_key:
            raise Refused(
                "Authentication failed during authentication due to invalid credentials with "
                "SASL mechanism SCRAM"
            )
        server_signature = self._hmac(self._hmac(salted, b"Server Key"), auth_message)
        if self.server.bad_signature:
            server_signature = bytes(b ^ 1 for b in server_signature)
        self.server.authenticated.append((f"SCRAM-{self.hash}", self.user))
        return b"v=" + base64.b64encode(server_signature), True


class _OAuth:
    def __init__(self, server):
        self.server = server
        self.rejected = False

    def step(self, data):
        if self.rejected:
            if data != b"\x01":
                raise Refused("expected the client's acknowledgement")
            raise Refused("Authentication failed: the token has expired or is invalid")
        text = data.decode()
        token = (
            text.split("auth=Bearer ", 1)[1].split("\x01", 1)[0] if "auth=Bearer " in text else ""
        )
        if token not in self.server.tokens:
            self.rejected = True
            return json.dumps({"status": "invalid_token"}).encode(), False
        self.server.authenticated.append(("OAUTHBEARER", token))
        return b"", True
