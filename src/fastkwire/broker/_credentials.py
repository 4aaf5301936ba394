"""The users a SASL listener knows and the mechanisms' server side, without I/O: PLAIN
(RFC 4616) checks a password; OAUTHBEARER (RFC 7628) a token (_oauthbearer.py's); SCRAM-SHA-256/512 (RFC 5802, RFC 7677) keeps Kafka's credential
per user and mechanism (a salt, the iterations, the stored key and the server key, never the
password) and checks the client's nonce, channel binding and proof. The credentials are set at
start (`Users({name: password})`) or by AlterUserScramCredentials (`upsert`, `delete`), as
Kafka's controller keeps them. The connection's login is _sasl.py's.
"""

import base64
import hashlib
import hmac
import inspect
import secrets
from types import SimpleNamespace

from ..sasl import SCRAM_HASHES, SCRAM_MAX_ITERATIONS, SCRAM_MIN_ITERATIONS
from ._oauthbearer import MECHANISM as OAUTHBEARER
from ._oauthbearer import OAuthBearerServer, UnsecuredValidator
from ._sasl_refusal import Refused, generic_refusal

DEFAULT_MECHANISMS = ("PLAIN", *SCRAM_HASHES)  # with users; OAUTHBEARER only when asked
MECHANISMS = (*DEFAULT_MECHANISMS, OAUTHBEARER)
DEFAULT_SCRAM_ITERATIONS = 4096  # Kafka's kafka-configs default


class Users:
    """The users a SASL listener knows: {name: password}. PLAIN checks the password; each
    SCRAM mechanism enabled keeps a random salt, the iteration count and the keys derived
    from the password (Kafka's SCRAM credential), made once here. `required`: at least one
    user where PLAIN or SCRAM is enabled (a SASL listener's); without, the store only holds
    what AlterUserScramCredentials sets. `oauthbearer`: OAUTHBEARER's validator (True:
    Kafka's unsecured one, `UnsecuredValidator`; or a callable(token) giving the principal's
    name or a Token, raising to refuse); by default enabled only when given, and given
    Kafka's unsecured one when `mechanisms` names OAUTHBEARER."""

    def __init__(
        self,
        users,
        mechanisms=None,
        scram_iterations=DEFAULT_SCRAM_ITERATIONS,
        required=True,
        oauthbearer=None,
    ):
        if not isinstance(users, dict):
            raise ValueError("users: a SASL listener needs a dict of at least one {name: password}")
        if mechanisms is None:
            mechanisms = [*(DEFAULT_MECHANISMS if users or oauthbearer is None else ())]
            mechanisms += [OAUTHBEARER] if oauthbearer is not None else []
        mechanisms = list(mechanisms)
        if isinstance(mechanisms, str) or not mechanisms:
            raise ValueError("sasl_mechanisms: a list of at least one mechanism")
        for m in mechanisms:
            if m not in MECHANISMS:
                raise ValueError(
                    f"sasl_mechanisms: {m!r} is not served (expected some of {', '.join(MECHANISMS)})"
                )
        if required and not users and set(mechanisms) - {OAUTHBEARER}:
            raise ValueError(
                "users: a SASL listener needs a dict of at least one {name: password} for "
                "PLAIN and SCRAM"
            )
        if oauthbearer is True or (oauthbearer is None and OAUTHBEARER in mechanisms):
            oauthbearer = UnsecuredValidator()
        elif isinstance(oauthbearer, type):  # its call would make a validator, not a name
            raise TypeError(
                f"oauthbearer: the class {oauthbearer.__name__}, not a validator (give "
                f"{oauthbearer.__name__}(), True or a function of the token)"
            )
        elif inspect.iscoroutinefunction(oauthbearer):
            raise TypeError(
                "oauthbearer: an async function, but a login takes the validator's answer at "
                "once: give a plain function of the token"
            )
        elif oauthbearer is not None and not callable(oauthbearer):
            raise TypeError(
                "oauthbearer: True (Kafka's unsecured validation) or a callable(token), not "
                f"{type(oauthbearer).__name__}"
            )
        if oauthbearer is not None and OAUTHBEARER not in mechanisms:
            raise ValueError("oauthbearer: given, but sasl_mechanisms does not enable OAUTHBEARER")
        self.oauthbearer = oauthbearer
        if (
            isinstance(scram_iterations, bool)
            or not isinstance(scram_iterations, int)
            or not SCRAM_MIN_ITERATIONS <= scram_iterations <= SCRAM_MAX_ITERATIONS
        ):
            raise ValueError(
                f"scram_iterations: from {SCRAM_MIN_ITERATIONS} (Kafka's minimum) to "
                f"{SCRAM_MAX_ITERATIONS} (its clients' maximum), not {scram_iterations!r}"
            )
        self.mechanisms = list(dict.fromkeys(mechanisms))
        self.iterations = scram_iterations
        self._plain = {}
        self._scram = {m: {} for m in SCRAM_HASHES}
        for name, password in users.items():
            if not isinstance(name, str) or not name or not isinstance(password, str):
                raise ValueError(
                    f"users: {name!r}: a user is a non-empty name and a password (str)"
                )
            secret = _utf8(password, f"users: {name!r}'s password")
            _utf8(name, "users: a user name")
            if "PLAIN" in self.mechanisms:
                self._plain[name] = secret
            for mechanism, table in self._scram.items():
                if mechanism in self.mechanisms:
                    table[name] = _scram_credential(
                        SCRAM_HASHES[mechanism], secret, scram_iterations
                    )

    @property
    def names(self):
        return sorted(set(self._plain) | {n for t in self._scram.values() for n in t})

    def scram(self):
        """{user: [(mechanism, iterations), ...]} of the SCRAM credentials held."""
        out = {}
        for mechanism, table in self._scram.items():
            for name, credential in table.items():
                out.setdefault(name, []).append((mechanism, credential.iterations))
        return out

    def has_scram(self, name, mechanism):
        return name in self._scram[mechanism]

    def upsert_scram(self, name, mechanism, iterations, salt, salted_password):
        """A credential as AlterUserScramCredentials carries it (KIP-554: the client salts
        the password), its keys derived as Kafka's controller derives them."""
        hash_name = SCRAM_HASHES[mechanism]
        client_key = hmac.new(salted_password, b"Client Key", hash_name).digest()
        self._scram[mechanism][name] = SimpleNamespace(
            salt=bytes(salt),
            iterations=iterations,
            stored_key=hashlib.new(hash_name, client_key).digest(),
            server_key=hmac.new(salted_password, b"Server Key", hash_name).digest(),
        )

    def delete_scram(self, name, mechanism):
        del self._scram[mechanism][name]

    def server(self, mechanism):
        """A new exchange of `mechanism` (one of self.mechanisms)."""
        if mechanism == "PLAIN":
            return _PlainServer(self._plain)
        if mechanism == OAUTHBEARER:
            return OAuthBearerServer(self.oauthbearer)
        return _ScramServer(mechanism, self._scram[mechanism])


def _utf8(text, what):
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        pass  # raised outside the handler, so that no context shows the text
    raise ValueError(f"{what} is not valid Unicode (a lone surrogate)")


def _scram_credential(hash_name, password, iterations):
    salt = secrets.token_bytes(24)
    salted = hashlib.pbkdf2_hmac(hash_name, password, salt, iterations)
    client_key = hmac.new(salted, b"Client Key", hash_name).digest()
    return SimpleNamespace(
        salt=salt,
        iterations=iterations,
        stored_key=hashlib.new(hash_name, client_key).digest(),
        server_key=hmac.new(salted, b"Server Key", hash_name).digest(),
    )


class _PlainServer:
    """RFC 4616: [authzid] NUL authcid NUL passwd, one message."""

    name = "PLAIN"
    lifetime_ms = None  # a password does not expire

    def __init__(self, passwords):
        self._passwords = passwords
        self.complete = False
        self.user = None

    def step(self, data):
        parts = bytes(data).split(b"\0", 2)
        if len(parts) != 3:
            raise Refused(generic_refusal(self.name))  # Kafka: "expected 3 tokens" is not told
        authzid, user, password = parts
        if not user or not password:
            raise Refused(generic_refusal(self.name))
        try:
            user = user.decode("utf-8")
            authzid = authzid.decode("utf-8")
        except UnicodeDecodeError:
            raise Refused(generic_refusal(self.name)) from None
        known = self._passwords.get(user)
        # compared whether the user is known or not: the time does not tell which
        matched = hmac.compare_digest(password, known if known is not None else b"")
        if known is None or not matched:
            raise Refused("Authentication failed: Invalid username or password")
        if authzid and authzid != user:
            raise Refused(
                "Authentication failed: Client requested an authorization id that is different "
                "from username"
            )
        self.complete, self.user = True, user
        return b""


def _unescape(saslname):
    """RFC 5802's saslname: '=2C' is ',', '=3D' is '='; any other '=' is malformed."""
    out, i = [], 0
    while i < len(saslname):
        c = saslname[i]
        if c == "=":
            code = saslname[i + 1 : i + 3]
            if code not in ("2C", "3D"):
                return None
            out.append("," if code == "2C" else "=")
            i += 3
        else:
            out.append(c)
            i += 1
    return "".join(out)


class _ScramServer:
    """RFC 5802 server side: client-first, server-first (our nonce appended, the salt, the
    iterations), client-final (nonce, channel binding, proof checked), server-final."""

    lifetime_ms = None

    def __init__(self, mechanism, credentials):
        self.name = mechanism
        self._hash = SCRAM_HASHES[mechanism]
        self._credentials = credentials
        self._state = "first"
        self.complete = False
        self.user = None

    def step(self, data):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError:
            raise Refused(generic_refusal(self.name)) from None
        if self._state == "first":
            return self._first(text)
        if self._state == "final":
            return self._final(text)
        raise Refused(generic_refusal(self.name))

    def _first(self, text):
        self._state = "failed"
        # gs2 header: "n," (no channel binding, as Kafka takes it), an optional "a=authzid", ","
        flag, _, rest = text.partition(",")
        authzid, sep, bare = rest.partition(",")
        if flag != "n" or not sep or (authzid and not authzid.startswith("a=")):
            raise Refused(generic_refusal(self.name))
        attrs = bare.split(",")
        if len(attrs) < 2 or not attrs[0].startswith("n=") or not attrs[1].startswith("r="):
            raise Refused(generic_refusal(self.name))
        user, nonce = _unescape(attrs[0][2:]), attrs[1][2:]
        credential = self._credentials.get(user) if user else None
        if credential is None or not nonce or not nonce.isprintable():
            raise Refused(generic_refusal(self.name))
        if authzid and _unescape(authzid[2:]) != user:
            raise Refused(
                "Authentication failed: Client requested an authorization id that is different "
                "from username"
            )
        self._gs2_header = f"{flag},{authzid},"
        self._nonce = nonce + secrets.token_hex(16)
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        self._client_first_bare = bare
        self._credential, self.user = credential, user
        self._state = "final"
        return self._server_first.encode()

    def _final(self, text):
        self._state = "failed"
        without_proof, sep, proof = text.rpartition(",p=")
        attrs = without_proof.split(",")
        channel = base64.b64encode(self._gs2_header.encode()).decode()
        if (
            not sep
            or len(attrs) < 2
            or attrs[0] != f"c={channel}"
            or attrs[1] != f"r={self._nonce}"
        ):
            raise Refused(generic_refusal(self.name))
        try:
            proof = base64.b64decode(proof, validate=True)
        except ValueError:
            raise Refused(generic_refusal(self.name)) from None
        credential = self._credential
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = hmac.new(credential.stored_key, auth_message, self._hash).digest()
        if len(proof) != len(signature):
            raise Refused(generic_refusal(self.name))
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(
            hashlib.new(self._hash, client_key).digest(), credential.stored_key
        ):
            raise Refused(generic_refusal(self.name))
        verifier = hmac.new(credential.server_key, auth_message, self._hash).digest()
        self._state, self.complete = "done", True
        return b"v=" + base64.b64encode(verifier)
