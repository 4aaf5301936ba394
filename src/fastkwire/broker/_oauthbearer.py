"""SASL OAUTHBEARER's server side (RFC 7628, KIP-255), without I/O, as Kafka 4 serves it.

The client's one message is RFC 7628's initial response, `n,[a=authzid],^Aauth=Bearer
<token>^A[key=value^A...]^A` (^A is 0x01), read as Kafka's OAuthBearerClientInitialResponse
reads it; a message it cannot read fails the login with Kafka's generic words. The token
goes to a validator:
- by default `UnsecuredValidator`, Kafka's OAuthBearerUnsecuredValidatorCallbackHandler: an
  unsecured JWS (`alg: none`, no signature), the principal from the `sub` claim, `exp`
  required and not past, `iat` optional and not ahead, required scopes optional, a clock skew
  allowed (its `unsecuredValidator*` options);
- or any callable(token) giving the principal's name (or a `Token`) and raising to refuse
  (a BaseException other than KeyboardInterrupt and SystemExit ends the connection
  unanswered, as an error inside Kafka's callback handler does).
A refused token is answered, as Kafka's OAuthBearerSaslServer answers it, with RFC 7628's
error JSON (`{"status":"invalid_token"}`) as a server challenge; the client's `^A` then ends
the login with that JSON as the error message (another initial response is read afresh).
"""

import base64
import json
import math
import re
import time
from typing import NamedTuple

from ._sasl_refusal import Refused, Unanswered, generic_refusal

MECHANISM = "OAUTHBEARER"
_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"  # Kafka's: 0x01-0x7F but '=' ','
_KVPAIR = r"[A-Za-z]+=[\x21-\x7e \t\r\n]+\x01"
_INITIAL_RESPONSE = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,\x01(?P<kvpairs>(?:{_KVPAIR})*)\x01"
)
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_~+/.a-zA-Z0-9]+=*)", re.ASCII)
_SCOPE_ITEM = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")  # RFC 6749's scope-token
_BASE64URL = re.compile(r"[A-Za-z0-9_-]*=*")
_LONG = (-(2**63), 2**63 - 1)


class Token(NamedTuple):
    """A validated token: the principal's name, when it expires (ms since the epoch; None:
    never, as far as the broker knows) and its scope."""

    principal: str
    lifetime_ms: int | None = None
    scope: frozenset = frozenset()


class InvalidToken(Exception):
    """A token refused: `status` and `scope` go into RFC 7628's error JSON."""

    def __init__(self, reason, status="invalid_token", scope=None):
        super().__init__(reason)
        self.status, self.scope = status, scope


class UnreadableToken(Unanswered):
    """A token Kafka's validator cannot take at all (its JWS header has no `alg`): Kafka's
    server fails internally and closes the connection without an answer."""


def initial_response(data):
    """(token, authzid) of RFC 7628's client initial response, as Kafka reads it; Refused
    with Kafka's generic words when it cannot be read."""
    text = bytes(data).decode("utf-8", "replace")
    match = _INITIAL_RESPONSE.fullmatch(text)
    if match is None:
        raise Refused(generic_refusal(MECHANISM))
    pairs = {}
    for pair in match["kvpairs"].split("\x01"):
        if pair:
            key, _, value = pair.partition("=")
            pairs[key] = value  # a key given twice: the last, as Kafka's parseMap keeps
    auth = _AUTH.fullmatch(pairs.get("auth", ""))
    if auth is None or auth["scheme"].lower() != "bearer":
        raise Refused(generic_refusal(MECHANISM))
    return auth["token"], match["authzid"] or ""


_JAVA_SPACE = "".join(map(chr, range(33)))  # what Java's trim() removes


def _blank(text):
    return text is None or not text.strip(_JAVA_SPACE)


def _b64url_json(part):
    """The JSON object of one base64url part as Jackson reads it: the first value (what
    follows is ignored), each member's value a number, a list of texts or a text."""
    if not _BASE64URL.fullmatch(part):
        raise InvalidToken("malformed Base64 URL encoded value")
    data = part.rstrip("=")
    try:  # padding optional, as JWS leaves it out
        text = base64.urlsafe_b64decode(data + "=" * (-len(data) % 4)).decode("utf-8")
        value, _ = json.JSONDecoder(parse_constant=_no_constant).raw_decode(text.lstrip(" \t\r\n"))
    except (ValueError, RecursionError):  # binascii.Error, UnicodeDecodeError, JSONDecodeError
        raise InvalidToken("malformed JSON or Base64 URL encoded value") from None
    if not isinstance(value, dict):
        return {}  # Jackson's fields() of a non-object: none
    return {key: _claim_value(v) for key, v in value.items()}


def _no_constant(name):
    raise ValueError(f"{name} is not JSON")


def _text(value):
    """Jackson's asText() of a JSON value."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return str(value)
    return ""  # an object or an array


def _claim_value(value):
    if isinstance(value, list):
        return [_text(v) for v in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    return _text(value)


def _number(claims, name):
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, (str, list)):
        raise InvalidToken(f"The '{name}' claim was not of type Number")
    try:
        return float(value)
    except OverflowError:  # a huge integer: Java's doubleValue() is infinite
        return math.inf if value > 0 else -math.inf


def _ms(seconds):
    """Java's Math.round(seconds * 1000): a long, saturated."""
    if math.isnan(seconds):
        return 0
    ms = seconds * 1000
    if math.isinf(ms):
        return _LONG[0] if ms < 0 else _LONG[1]
    return max(_LONG[0], min(_LONG[1], math.floor(ms + 0.5)))


class UnsecuredValidator:
    """Kafka's default OAUTHBEARER validation (OAuthBearerUnsecuredValidatorCallbackHandler,
    for development: anyone can make such a token). Its options, as Kafka's JAAS options
    `unsecuredValidator*`: `principal_claim` ("sub"), `scope_claim` ("scope"),
    `required_scope` (scopes the token must hold: a list or space-separated text),
    `allowable_clock_skew_ms` (0). `clock`: seconds since the epoch (time.time)."""

    def __init__(
        self,
        principal_claim="sub",
        scope_claim="scope",
        required_scope=(),
        allowable_clock_skew_ms=0,
        clock=time.time,
    ):
        for name, value in (("principal_claim", principal_claim), ("scope_claim", scope_claim)):
            if not isinstance(value, str) or _blank(value):
                raise ValueError(f"oauthbearer {name}: a claim's name, not {value!r}")
        if isinstance(required_scope, str):
            required_scope = required_scope.split(" ")
        scope = [s for s in required_scope if s]
        for item in scope:
            if not isinstance(item, str) or not _SCOPE_ITEM.fullmatch(item):
                raise ValueError(f"oauthbearer required_scope: invalid scope value {item!r}")
        if (
            isinstance(allowable_clock_skew_ms, bool)
            or not isinstance(allowable_clock_skew_ms, int)
            or not 0 <= allowable_clock_skew_ms <= 2**31 - 1
        ):
            raise ValueError(
                "oauthbearer allowable_clock_skew_ms: from 0 to 2147483647 (an int, as "
                f"Kafka's), not {allowable_clock_skew_ms!r}"
            )
        self.principal_claim = principal_claim.strip(_JAVA_SPACE)
        self.scope_claim = scope_claim.strip(_JAVA_SPACE)
        self.required_scope = scope
        self.allowable_clock_skew_ms = allowable_clock_skew_ms
        self.clock = clock

    def __call__(self, token):
        if ".." in token:
            raise InvalidToken("Malformed compact serialization contains '..'")
        parts = token.split(".")
        if len(parts) != 3:
            raise InvalidToken("Unsecured JWS compact serializations must have 3 parts")
        header, claims = _b64url_json(parts[0]), _b64url_json(parts[1])
        if "alg" not in header:
            raise UnreadableToken("JWS header must have an Algorithm value")
        if header["alg"] != "none":
            raise InvalidToken("Unsecured JWS must have 'none' for an algorithm")
        if parts[2]:
            raise InvalidToken("Unsecured JWS must not contain a digital signature")
        scope = self._scope(claims)
        exp = _number(claims, "exp")
        if exp is None:
            raise InvalidToken("No expiration time in JWT")
        principal = claims.get(self.principal_claim)
        if principal is not None and not isinstance(principal, str):
            raise InvalidToken(f"The '{self.principal_claim}' claim was not of type String")
        if _blank(principal):
            raise InvalidToken(f"No principal name in JWT claim: {self.principal_claim}")
        iat = _number(claims, "iat")
        now_ms = math.floor(self.clock() * 1000)
        skew = self.allowable_clock_skew_ms
        if iat is not None and 1000 * iat > now_ms + skew:
            raise InvalidToken("The Issued At value is after the time plus allowable clock skew")
        if now_ms - skew >= 1000 * exp:
            raise InvalidToken("The time minus allowable clock skew is on or after the Expiration")
        if iat is not None and exp <= iat:
            raise InvalidToken("The Expiration Time is not after the Issued At time")
        for needed in self.required_scope:
            if needed not in scope:
                # Kafka's failure scope is its list's toString()
                raise InvalidToken(
                    f"missing a required scope ({needed})",
                    "insufficient_scope",
                    "[" + ", ".join(self.required_scope) + "]",
                )
        return Token(principal, _ms(exp), scope)

    def _scope(self, claims):
        value = claims.get(self.scope_claim)
        if isinstance(value, str):
            return frozenset() if _blank(value) else frozenset([value.strip(_JAVA_SPACE)])
        if value is None:
            return frozenset()
        if not isinstance(value, list):
            raise InvalidToken(f"The '{self.scope_claim}' claim was not of type List")
        return frozenset(s.strip(_JAVA_SPACE) for s in value if not _blank(s))


def error_json(status, scope=None):
    """RFC 7628's error JSON, spelled as Kafka's OAuthBearerSaslServer spells it."""
    text = '{"status":"%s"' % status
    if scope is not None:
        text += ', "scope":"%s"' % scope
    return (text + "}").encode("utf-8", "replace")  # (a validator's text may be anything)


class OAuthBearerServer:
    """The server side of one OAUTHBEARER exchange (Kafka's OAuthBearerSaslServer)."""

    name = MECHANISM

    def __init__(self, validate):
        self._validate = validate
        self._error = None  # the error JSON answered, until the client's ^A
        self.complete = False
        self.user = None
        self.lifetime_ms = None  # the token's expiry (ms since the epoch)

    def step(self, data):
        data = bytes(data)
        if data == b"\x01" and self._error is not None:
            raise Refused(self._error.decode())
        self._error = None
        token, authzid = initial_response(data)
        try:
            found = self._validate(token)
        except Unanswered:
            raise
        except InvalidToken as e:
            self._error = error_json(e.status, e.scope)
            return self._error
        except Exception:  # noqa: BLE001 - a validator's refusal, whatever it raised
            self._error = error_json("invalid_token")
            return self._error
        except (KeyboardInterrupt, SystemExit):
            raise  # (as asyncio lets them through)
        except BaseException as e:  # noqa: BLE001 - pytest.fail's, CancelledError...
            # an error inside the validator, as Kafka's callback handler's: this login ends
            raise Unanswered(f"the oauthbearer validator raised {type(e).__name__}") from None
        if isinstance(found, str):
            found = Token(found)
        if not isinstance(found, Token) or not isinstance(found.principal, str):
            raise Unanswered(
                f"the oauthbearer validator gave a {type(found).__name__}, not a name or a Token"
            )
        lifetime = found.lifetime_ms
        in_range = type(lifetime) is int and _LONG[0] <= lifetime <= _LONG[1]
        if lifetime is not None and not in_range:
            # Kafka's token lifetime is a long: the session's end must fit the answer's int64
            raise Unanswered(
                "the oauthbearer validator gave a Token whose lifetime_ms is not None nor ms "
                "since the epoch in 64 bits (Kafka's long)"
            )
        if _blank(found.principal):
            self._error = error_json("invalid_token")
            return self._error
        if authzid and authzid != found.principal:
            raise Refused(
                f"Authentication failed: Client requested an authorization id ({authzid}) that "
                f"is different from the token's principal name ({found.principal})"
            )
        self.complete, self.user, self.lifetime_ms = True, found.principal, found.lifetime_ms
        return b""
