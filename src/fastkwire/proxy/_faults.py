"""Fault rules: which requests a rule matches (API, version, client id) and what it does
(delay the response, drop the connection before or after the request, or answer with an
error code instead of forwarding), with a probability or for the first N matches.

A rule is given as keyword arguments (`Rule(api="Heartbeat", error="REBALANCE_IN_PROGRESS")`),
as a dict (a rules file: JSON, `{"rules": [{...}, ...]}`), or as text for the command line
(`api=Heartbeat,error=REBALANCE_IN_PROGRESS,times=2`); the keys are the same everywhere.
Errors name the key (the parameter) that is wrong.
"""

import fnmatch
import json
import random

from .. import REQUEST_CLASSES, RESPONSE_CLASSES, decode_request, encode_response
from .._explain_apis import api_names
from ..error_codes import ERRORS, by_name
from ..errors import DecodeError, EncodeError, UnsupportedVersionError

FIND_COORDINATOR = 10
PRODUCE = 0  # its errors are per partition: every partition of the request gets the error
DISCONNECT_WHEN = ("before", "after")
KEYS = (
    "name",
    "api",
    "version",
    "client_id",
    "delay_ms",
    "disconnect",
    "error",
    "probability",
    "times",
)
MAX_DELAY_MS = 3_600_000  # an hour: beyond it a test has hung, not waited
MAX_VERSION = 0x7FFF  # an API version is an int16


class RuleError(ValueError):
    """A rule that cannot work; the message names the key."""


def _meant(given, known):
    """'; did you mean X?' for a near miss among known, else ''."""
    import difflib

    if not isinstance(given, str):
        return ""
    close = difflib.get_close_matches(given, list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _error_names():
    return [e.name for e in ERRORS.values() if e.code != 0]  # NONE is no error to answer with


def _api_key(value):
    if isinstance(value, bool):
        raise RuleError(f"rule key 'api': not an API: {value!r}")
    if isinstance(value, int):
        if value not in api_names():
            raise RuleError(f"rule key 'api': unknown API key {value}")
        return value
    if isinstance(value, str):
        if value.isdigit():
            return _api_key(int(value))
        wanted = value.replace("-", "").replace("_", "").lower()
        for key, name in api_names().items():
            if name.lower() == wanted:
                return key
        meant = _meant(value, api_names().values())
        raise RuleError(f"rule key 'api': unknown API {value!r}{meant}")
    raise RuleError(f"rule key 'api': not an API name or key: {value!r}")


def _versions(value):
    """An int, or text "3", "3+", "0-2": (low, high), each an int16 version, low <= high."""
    if isinstance(value, bool):
        raise RuleError(f"rule key 'version': not a version: {value!r}")
    got = None
    if isinstance(value, int):
        got = value, value
    elif isinstance(value, str):
        text = value.strip()
        try:
            if text.endswith("+"):
                got = int(text[:-1]), MAX_VERSION
            elif "-" in text[1:]:
                low, high = text.split("-", 1)
                got = int(low), int(high)
            else:
                got = int(text), int(text)
        except ValueError:
            pass
    if got is None:
        raise RuleError(f"rule key 'version': not a version or range (3, 3+, 0-2): {value!r}")
    low, high = got
    if not (0 <= low <= MAX_VERSION and 0 <= high <= MAX_VERSION):
        raise RuleError(f"rule key 'version': {value!r}: a version is from 0 to {MAX_VERSION}")
    if low > high:
        raise RuleError(
            f"rule key 'version': {value!r}: the range is empty ({low} > {high}), nothing matches"
        )
    return got


def _error_code(value):
    if isinstance(value, bool):
        raise RuleError(f"rule key 'error': not an error code: {value!r}")
    if isinstance(value, str) and not value.lstrip("-").isdigit():
        try:
            return by_name(value.upper()).code
        except (KeyError, ValueError):
            meant = _meant(value.upper(), _error_names())
            raise RuleError(f"rule key 'error': unknown error name {value!r}{meant}") from None
    try:
        code = int(value)
    except (TypeError, ValueError):
        raise RuleError(f"rule key 'error': not an error code: {value!r}") from None
    if not -32768 <= code <= 32767 or code == 0:
        raise RuleError(f"rule key 'error': {code} is not a non-zero int16 error code")
    return code


def _number(key, value, low, high, kind=float):
    if isinstance(value, bool):
        raise RuleError(f"rule key '{key}': not a number: {value!r}")
    try:
        number = kind(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: int(inf)
        raise RuleError(f"rule key '{key}': not a number: {value!r}") from None
    if kind is int and isinstance(value, float) and value != number:
        raise RuleError(f"rule key '{key}': not a whole number: {value!r}")
    if not low <= number <= high:  # also refuses nan
        raise RuleError(f"rule key '{key}': {value!r} is not between {low} and {high}")
    return number


def _has_top_level_error(cls, version):
    """The response carries a top-level error code at this version (FindCoordinator v4+:
    one per coordinator)."""
    ops = cls._LAYOUTS.root(version).plain
    names = {op.name for op in ops}
    if cls.API_KEY == FIND_COORDINATOR:
        return "error_code" in names or "coordinators" in names
    return "error_code" in names


class Rule:
    """One fault rule. Match keys (all optional, all must hold): `api` (name or key),
    `version` (3, "3+", "0-2"), `client_id` (exact, or a glob: "consumer-*"). Exactly one
    action: `delay_ms` (hold the broker's response that long), `disconnect` ("before": close
    the connection instead of forwarding the request; "after": forward it, then close),
    `error` (a name such as "NOT_COORDINATOR", or a code: answer with it, the broker never
    sees the request; in the answer's top-level error code, or for Produce in every
    partition's, an acks=0 Produce being forwarded as it gets no answer). Then `probability` (0-1, default 1) and `times` (act on the first N
    matches only)."""

    def __init__(
        self,
        *,
        name=None,
        api=None,
        version=None,
        client_id=None,
        delay_ms=None,
        disconnect=None,
        error=None,
        probability=1.0,
        times=None,
    ):
        self.api_key = None if api is None else _api_key(api)
        self.versions = None if version is None else _versions(version)
        if self.versions is not None and self.api_key is not None:
            request = REQUEST_CLASSES[self.api_key]
            low, high = request.MIN_VERSION, request.MAX_VERSION
            if self.versions[1] < low or self.versions[0] > high:
                raise RuleError(
                    f"version: {version!r}: {api_names()[self.api_key]} has versions "
                    f"{low}-{high}, so the rule could never match"
                )
        if client_id is not None and not isinstance(client_id, str):
            raise RuleError(f"rule key 'client_id': not text: {client_id!r}")
        self.client_id = client_id
        actions = [
            k
            for k, v in (("delay_ms", delay_ms), ("disconnect", disconnect), ("error", error))
            if v is not None
        ]
        if len(actions) != 1:
            raise RuleError(
                "a rule needs exactly one action of delay_ms, disconnect and error"
                + (f", not {' and '.join(actions)}" if actions else "")
            )
        self.delay_ms = None if delay_ms is None else _number("delay_ms", delay_ms, 0, MAX_DELAY_MS)
        if disconnect is not None and disconnect not in DISCONNECT_WHEN:
            raise RuleError(
                f"rule key 'disconnect': {disconnect!r} is not 'before' or 'after'"
                + _meant(disconnect, DISCONNECT_WHEN)
            )
        self.disconnect = disconnect
        self.error_code = None if error is None else _error_code(error)
        if self.error_code is not None:
            if self.api_key is None:
                raise RuleError("rule key 'error': an error answer needs the api it answers")
            cls = RESPONSE_CLASSES[self.api_key]
            low, high = cls.MIN_VERSION, cls.MAX_VERSION
            if self.versions is not None:
                low, high = max(low, self.versions[0]), min(high, self.versions[1])
            answerable = [
                v
                for v in range(low, high + 1)
                if self.api_key == PRODUCE or _has_top_level_error(cls, v)
            ]
            if not answerable:
                raise RuleError(
                    f"rule key 'error': {cls.__name__} has no top-level error_code to answer with"
                    + (f" in versions {low}-{high}" if self.versions is not None else "")
                    + " (its errors are per topic or partition)"
                )
        self.probability = _number("probability", probability, 0.0, 1.0)
        self.times = None if times is None else _number("times", times, 0, 2**62, int)
        self.name = name if name is not None else self._default_name()
        self.matched = 0  # requests that matched
        self.fired = 0  # times the action was taken

    @classmethod
    def from_dict(cls, d):
        if not isinstance(d, dict):
            raise RuleError(f"a rule is an object of {', '.join(KEYS)}, not {d!r}")
        unknown = sorted(set(d) - set(KEYS))
        if unknown:
            raise RuleError(
                f"{unknown[0]!r}: not a rule key{_meant(unknown[0], KEYS)} "
                f"(known: {', '.join(KEYS)})"
            )
        return cls(**d)

    @classmethod
    def parse(cls, text):
        """A rule from `key=value,key=value` text (the command line's form)."""
        d = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, eq, value = part.partition("=")
            if not eq:
                raise RuleError(f"{part!r} is not key=value (keys: {', '.join(KEYS)})")
            d[key.strip()] = value.strip()
        return cls.from_dict(d)

    def _default_name(self):
        what = (
            f"delay {self.delay_ms:g} ms"
            if self.delay_ms is not None
            else f"disconnect {self.disconnect}"
            if self.disconnect is not None
            else f"error {ERRORS[self.error_code].name if self.error_code in ERRORS else self.error_code}"
        )
        on = api_names().get(self.api_key, "any API") if self.api_key is not None else "any API"
        return f"{what} on {on}"

    @property
    def action(self):
        if self.delay_ms is not None:
            return "delay"
        return "disconnect" if self.disconnect is not None else "error"

    def matches(self, header):
        if self.api_key is not None and header.api_key != self.api_key:
            return False
        if (
            self.versions is not None
            and not self.versions[0] <= header.api_version <= self.versions[1]
        ):
            return False
        if self.client_id is not None:
            cid = header.client_id or ""
            if cid != self.client_id and not fnmatch.fnmatchcase(cid, self.client_id):
                return False
        return True

    def __repr__(self):
        return f"Rule({self.name!r}, matched={self.matched}, fired={self.fired})"


class Faults:
    """The rules in order; the first that matches a request and fires acts on it. `seed`
    makes the probabilities repeatable."""

    def __init__(self, rules=(), seed=None):
        self.rules = [r if isinstance(r, Rule) else Rule.from_dict(r) for r in rules]
        self._random = random.Random(seed)

    def __bool__(self):
        return bool(self.rules)

    def pick(self, header):
        for rule in self.rules:
            if not rule.matches(header):
                continue
            rule.matched += 1
            if rule.times is not None and rule.fired >= rule.times:
                continue
            if rule.probability < 1 and self._random.random() >= rule.probability:
                continue
            rule.fired += 1
            return rule
        return None


def _not_a_number(name):
    raise ValueError(f"{name} is not a JSON number")


def load_rules(path):
    """The rules of a JSON file: `{"rules": [...], "seed": N}` or a bare list; errors name
    the file and the rule's position."""
    return read_rules_file(path)[0]


def read_rules_file(path):
    """(rules, seed or None) of a rules file."""
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read(), parse_constant=_not_a_number)
    except RecursionError:
        raise RuleError(f"{path}: not JSON: nested too deep") from None
    except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError is a ValueError
        raise RuleError(f"{path}: not JSON: {e}") from None
    seed = None
    if isinstance(data, dict):
        extra = sorted(set(data) - {"rules", "seed"})
        if extra:
            raise RuleError(f"{path}: {extra[0]}: not a key of a rules file (rules, seed)")
        seed = data.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise RuleError(f"{path}: seed: not an integer: {seed!r}")
        data = data.get("rules", [])
    if not isinstance(data, list):
        raise RuleError(f"{path}: the rules must be a list")
    rules = []
    for i, d in enumerate(data):
        try:
            rules.append(Rule.from_dict(d))
        except RuleError as e:
            raise RuleError(f"{path}: rule {i + 1}: {e}") from None
    return rules, seed


def _produce_error(exchange, cls, code):
    """Each partition of the Produce request answered with `code`, none of its records taken."""
    _, req, _ = decode_request(exchange.request, trailing="keep")
    if req.acks == 0:
        raise ValueError("an acks=0 Produce gets no answer to carry the error")
    return cls(
        responses=[
            cls.TopicProduceResponse(
                name=topic.name,
                topic_id=topic.topic_id,
                partition_responses=[
                    cls.PartitionProduceResponse(index=p.index, error_code=code, base_offset=-1)
                    for p in topic.partition_data
                ],
            )
            for topic in req.topic_data
        ]
    )


def error_answer(exchange, code):
    """The response frame that answers `exchange`'s request with error `code`, encoded by the
    codec at the request's version; raises ValueError when that response cannot carry it."""
    cls = RESPONSE_CLASSES.get(exchange.api_key)
    if cls is None:
        raise ValueError(f"no response class for API key {exchange.api_key}")
    version = exchange.api_version
    if exchange.api_key == PRODUCE:
        msg = _produce_error(exchange, cls, code)
    elif exchange.api_key == FIND_COORDINATOR:
        _, req, _ = decode_request(exchange.request, trailing="keep")
        if req.coordinator_keys:  # v4+: one answer per key asked
            msg = cls(
                coordinators=[
                    cls.Coordinator(key=k, node_id=-1, host="", port=-1, error_code=code)
                    for k in req.coordinator_keys
                ]
            )
        else:
            msg = cls(error_code=code, node_id=-1, host="", port=-1)
    elif _has_top_level_error(cls, version):
        msg = cls(error_code=code)
    elif cls.MIN_VERSION <= version <= cls.MAX_VERSION:
        raise ValueError(
            f"{cls.__name__} v{version} cannot carry the error: it has no top-level error_code"
        )
    else:
        raise ValueError(f"{cls.__name__} has no version {version} to answer with")
    try:
        return encode_response(msg, version, exchange.correlation_id)
    except (EncodeError, UnsupportedVersionError, DecodeError) as e:
        raise ValueError(f"{cls.__name__} v{version} cannot carry the error: {e}") from None
