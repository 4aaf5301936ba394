"""Remove static members from a consumer group by group.instance.id (KIP-345).

Removing a member by its group.instance.id makes the coordinator rebalance the group at
once instead of waiting for the member's session timeout: the way to scale a static group
down or replace a host.

    client = AdminClient("broker:9092", request_timeout_ms=10000)
    result = client.remove_members_from_group("orders", ["orders-3", "orders-4"], reason="scale down")
    result.all()          # raises the first member that was not removed

The client speaks the protocol itself with this package's codecs over plain TCP sockets
(no TLS, no SASL). Every call is bounded by `request_timeout_ms` as a whole: connects,
reads and retries share one deadline. It opens its connections per call and closes them
before returning. Answers are untrusted: their size is capped per API before anything is
allocated, and a broker's text is escaped before it goes into an error message.
"""
import asyncio
import ipaddress
import socket
import struct
import time
from dataclasses import dataclass, field

from . import (
    ApiVersionsRequest,
    FindCoordinatorRequest,
    LeaveGroupRequest,
    __version__,
    decode_response,
    encode_request,
)
from ._printable import printable
from .admin_errors import (
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
    UnknownInstanceError,
)
from .error_codes import by_name, lookup
from .errors import DecodeError

__all__ = [
    "AdminClient", "AsyncAdminClient", "Coordinator", "MemberResult", "MembershipChangeResult",
    "AdminError", "BrokerConnectionError", "AdminTimeoutError", "ResponseError", "BrokerError",
    "BrokerTooOldError", "GroupNotFoundError", "GroupAuthorizationError", "GroupStateError",
    "MemberRemovalError", "UnknownInstanceError", "FencedInstanceError", "check_removal",
    "parse_servers",
]

DEFAULT_PORT = 9092
GROUP_KEY_TYPE = 0  # FindCoordinator KeyType for consumer groups
LEAVE_BY_INSTANCE_MIN = 3  # LeaveGroup v3 added the member list with group.instance.id
LEAVE_REASON_MIN = 5
BATCHED_FIND_MIN = 4  # FindCoordinator v4 takes a list of keys
MAX_TIMEOUT_MS = 24 * 3600 * 1000  # a day: far beyond any admin call, and safe for socket timeouts
MAX_NAME_BYTES = 32767  # Kafka's longest string (int16 length)
MAX_BROKER_TEXT = 500  # characters of a broker's error message quoted in our errors

NONE = by_name("NONE").code
UNSUPPORTED_VERSION = by_name("UNSUPPORTED_VERSION").code
UNKNOWN_MEMBER_ID = by_name("UNKNOWN_MEMBER_ID").code
FENCED_INSTANCE_ID = by_name("FENCED_INSTANCE_ID").code
GROUP_AUTHORIZATION_FAILED = by_name("GROUP_AUTHORIZATION_FAILED").code
COORDINATOR_NOT_AVAILABLE = by_name("COORDINATOR_NOT_AVAILABLE").code
UNKNOWN_SERVER_ERROR = by_name("UNKNOWN_SERVER_ERROR").code


def _codes(*names):
    return frozenset(by_name(name).code for name in names)


# Answers that mean "ask FindCoordinator again, a little later".
COORDINATOR_RETRY = _codes("COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR")
GROUP_STATE_ERRORS = _codes("ILLEGAL_GENERATION", "REBALANCE_IN_PROGRESS")
GROUP_NOT_FOUND_ERRORS = _codes("GROUP_ID_NOT_FOUND")
BACKOFF_START = 0.1
BACKOFF_MAX = 1.0

_API_NAMES = {
    ApiVersionsRequest.API_KEY: "ApiVersions",
    FindCoordinatorRequest.API_KEY: "FindCoordinator",
    LeaveGroupRequest.API_KEY: "LeaveGroup",
}

# The largest answer a sane broker sends to each request, as (fixed part, per member
# asked): the receive buffer is allocated at the announced size, so a larger announcement
# is refused before anything is allocated. The request's own size is added on top, since
# answers echo the names sent. ApiVersions lists ~100 APIs in ~1 KiB; FindCoordinator
# names one host; LeaveGroup answers each member with its ids.
ANSWER_LIMITS = {
    ApiVersionsRequest.API_KEY: (256 * 1024, 0),
    FindCoordinatorRequest.API_KEY: (256 * 1024, 0),
    LeaveGroupRequest.API_KEY: (64 * 1024, 4 * 1024),
}


def answer_limit(msg, request_size):
    """The most bytes (after the size prefix) accepted in answer to `msg`."""
    fixed, per_member = ANSWER_LIMITS[msg.API_KEY]
    return fixed + per_member * len(getattr(msg, "members", None) or ()) + request_size


# ---------------------------------------------------------------- results


@dataclass(frozen=True)
class Coordinator:
    node_id: int
    host: str
    port: int

    @property
    def address(self):
        return _format_address(self.host, self.port)


@dataclass(frozen=True)
class MemberResult:
    """What the coordinator said about one member of the request."""

    group_instance_id: str
    member_id: str
    error_code: int
    note: str = ""

    @property
    def ok(self):
        return self.error_code == NONE

    @property
    def error(self):
        return None if self.ok else lookup(self.error_code)

    @property
    def error_name(self):
        return lookup(self.error_code).name

    def describe(self):
        if self.ok:
            return "removed"
        return self.note or _MEMBER_HINTS.get(self.error_code, self.error.description)

    def to_dict(self):
        return {
            "group_instance_id": self.group_instance_id,
            "member_id": self.member_id,
            "removed": self.ok,
            "error_code": self.error_code,
            "error_name": self.error_name,
            "message": "" if self.ok else self.describe(),
        }


_MEMBER_HINTS = {
    UNKNOWN_MEMBER_ID: "no member of the group has this group.instance.id",
    FENCED_INSTANCE_ID: "this group.instance.id is held by a member with a different member id",
}


@dataclass(frozen=True)
class MembershipChangeResult:
    """The outcome of one LeaveGroup request, per member."""

    group_id: str
    coordinator: Coordinator
    leave_group_version: int
    members: list = field(default_factory=list)
    throttle_time_ms: int = 0

    @property
    def removed(self):
        """group.instance.ids the coordinator removed, in request order."""
        return [m.group_instance_id for m in self.members if m.ok]

    @property
    def failed(self):
        """group.instance.id -> `MemberResult`, for members that were not removed."""
        return {m.group_instance_id: m for m in self.members if not m.ok}

    def all(self):
        """Return None when every member was removed; else raise the first failure."""
        for m in self.members:
            if not m.ok:
                cls = {UNKNOWN_MEMBER_ID: UnknownInstanceError,
                       FENCED_INSTANCE_ID: FencedInstanceError}.get(m.error_code, MemberRemovalError)
                raise cls(f"group {self.group_id!r}: instance {m.group_instance_id!r} was not removed: "
                          f"{m.error_name} ({m.error_code}): {m.describe()}", m)

    def to_dict(self):
        return {
            "group_id": self.group_id,
            "coordinator": {"node_id": self.coordinator.node_id, "host": self.coordinator.host,
                            "port": self.coordinator.port},
            "leave_group_version": self.leave_group_version,
            "members": [m.to_dict() for m in self.members],
            "removed": self.removed,
            "failed": sorted(self.failed),
        }


# ---------------------------------------------------------------- connections


def _format_address(host, port):
    """HOST:PORT for messages, with a broker's odd characters escaped."""
    host = printable(host, MAX_BROKER_TEXT)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _port(text):
    # int() would also take "+5", " 5" and non-ASCII digits.
    if not (text.isascii() and text.isdigit()):
        return None
    port = int(text)
    return port if 0 < port < 65536 else None


def parse_servers(bootstrap_servers):
    """'h1:9092,h2' or a list of them -> [(host, port)]; '[::1]:9092' for IPv6.

    A server without a port uses 9092; anything else malformed is a ValueError.
    """
    items = bootstrap_servers.split(",") if isinstance(bootstrap_servers, str) else list(bootstrap_servers)
    servers = []
    for item in (s.strip() for s in items):
        if not item:
            continue
        if item.startswith("["):
            host, bracket, rest = item[1:].partition("]")
            if not bracket or (rest and not rest.startswith(":")) or not _is_ipv6(host):
                raise ValueError(f"bad bootstrap server {item!r} (expected [IPV6]:PORT)")
            port_text = rest[1:] if rest else None
        elif item.count(":") == 1:
            host, port_text = item.split(":")
        elif ":" not in item or _is_ipv6(item):
            host, port_text = item, None  # the default port (a bare IPv6 address included)
        else:
            raise ValueError(f"bad bootstrap server {item!r} (expected HOST:PORT, or [IPV6]:PORT)")
        port = DEFAULT_PORT if port_text is None else _port(port_text)
        if port is None:
            raise ValueError(f"bad port in bootstrap server {item!r} (expected 1-65535)")
        if not host or not _is_host_text(host):
            raise ValueError(f"bad host in bootstrap server {item!r} (expected HOST:PORT)")
        servers.append((host, port))
    if not servers:
        raise ValueError("no bootstrap server given")
    return servers


def _is_ipv6(text):
    try:
        ipaddress.IPv6Address(text)  # a %zone suffix included
    except ValueError:
        return False
    return True


def _is_host_text(host):
    """No spaces, controls, format or separator characters: nothing a host name can hold."""
    return host.isprintable() and " " not in host


def _check_name(what, value, nullable=False):
    if value is None and nullable:
        return
    if not isinstance(value, str) or (not value and not nullable):
        raise ValueError(f"{what} must be a non-empty string, not {value!r}")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError(f"{what} {value!r} cannot be encoded as UTF-8") from None
    if size > MAX_NAME_BYTES:
        raise ValueError(f"{what} is {size} bytes long; Kafka takes at most {MAX_NAME_BYTES}")


def check_removal(group_id, group_instance_ids, reason=None):
    """The argument checks of `remove_members_from_group`, without any I/O.

    Returns the instance ids as a list; raises ValueError for bad arguments.
    """
    _check_name("group_id", group_id)
    instance_ids = list(group_instance_ids)
    if not instance_ids:
        raise ValueError("give at least one group.instance.id")
    for i in instance_ids:
        _check_name("a group.instance.id", i)
    if len(set(instance_ids)) != len(instance_ids):
        raise ValueError("each group.instance.id may be given once")
    _check_name("reason", reason, nullable=True)
    return instance_ids


class _Deadline:
    def __init__(self, seconds):
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def remaining(self):
        return self.end - time.monotonic()


class _Connection:
    """One blocking TCP connection to a broker; every wait is bounded by the deadline."""

    def __init__(self, host, port, client_id, deadline):
        self.host, self.port = host, port
        self.address = _format_address(host, port)
        self.client_id = client_id
        self._correlation_id = 0
        left = deadline.remaining()
        if left <= 0:
            raise AdminTimeoutError(f"no time left to connect to {self.address} (timeout {deadline.seconds:g} s)")
        try:
            self.sock = socket.create_connection((host, port), timeout=left)
        except socket.timeout:
            raise AdminTimeoutError(
                f"could not connect to {self.address} within {deadline.seconds:g} s") from None
        except OSError as exc:
            raise BrokerConnectionError(f"could not connect to {self.address}: {_reason(exc)}") from None
        except UnicodeError as exc:
            # The resolver's IDNA encoding refuses labels over 63 characters or empty ones.
            raise BrokerConnectionError(
                f"could not connect to {self.address}: not a valid host name ({exc})") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def request(self, msg, version, deadline):
        """Send `msg` at `version`; return the decoded response body."""
        api_key = msg.API_KEY
        what = f"{_API_NAMES.get(api_key, api_key)} v{version}"
        self._correlation_id += 1
        request = encode_request(msg, version, self._correlation_id, self.client_id)
        try:
            self._settimeout(deadline, what)
            self.sock.sendall(request)
            frame = self._receive(answer_limit(msg, len(request)), deadline, what)
        except socket.timeout:
            raise AdminTimeoutError(
                f"no answer from {self.address} to {what} within {deadline.seconds:g} s") from None
        except OSError as exc:
            raise BrokerConnectionError(
                f"connection to {self.address} failed during {what}: {_reason(exc)}") from None
        correlation_id = struct.unpack_from(">i", frame, 4)[0]
        if correlation_id != self._correlation_id:
            raise ResponseError(f"{self.address} answered {what} with correlation id {correlation_id}, "
                                f"expected {self._correlation_id}")
        decode_version = version
        # A broker that lacks our ApiVersions version answers in v0 with UNSUPPORTED_VERSION
        # (header v0 is 4 bytes, then the int16 error code).
        if (api_key == ApiVersionsRequest.API_KEY and len(frame) >= 10
                and struct.unpack_from(">h", frame, 8)[0] == UNSUPPORTED_VERSION):
            decode_version = 0
        try:
            _, response = decode_response(frame, api_key, decode_version)
        except (DecodeError, ValueError) as exc:
            raise ResponseError(f"could not decode the answer of {self.address} to {what}: "
                                f"{printable(exc, MAX_BROKER_TEXT)}") from None
        return response

    def _receive(self, limit, deadline, what):
        """One answer frame, size prefix included, read into a buffer of its announced size."""
        head = bytearray(4)
        self._fill(head, deadline, what, first=True)
        size = struct.unpack(">i", head)[0]
        if size < 4:
            raise ResponseError(f"{self.address} sent a frame size of {size} bytes in answer to {what}")
        if size > limit:
            raise ResponseError(f"{self.address} announced a {size}-byte answer to {what}, more than the "
                                f"{limit} bytes such an answer can take (is this a Kafka listener?)")
        frame = bytearray(4 + size)
        frame[:4] = head
        with memoryview(frame) as view:
            self._fill(view[4:], deadline, what)
        return frame

    def _fill(self, buffer, deadline, what, first=False):
        # recv_into a buffer sized in advance: a broker sending one byte at a time costs
        # nothing more than one sending the whole answer at once.
        with memoryview(buffer) as view:
            got = 0
            while got < len(view):
                self._settimeout(deadline, what)
                n = self.sock.recv_into(view[got:])
                if not n:
                    when = "before answering" if first and not got else "in the middle of its answer"
                    raise BrokerConnectionError(f"{self.address} closed the connection during {what} ({when})")
                got += n

    def _settimeout(self, deadline, what):
        left = deadline.remaining()
        if left <= 0:
            raise socket.timeout(what)
        self.sock.settimeout(left)


def _reason(exc):
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (is a broker listening there?)"
    if isinstance(exc, ConnectionResetError):
        return "connection reset by the broker"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve the host name ({exc.strerror})"
    return exc.strerror or str(exc) or type(exc).__name__


def highest_common_version(ranges, cls, lowest=0):
    """The highest version both sides support (and >= lowest), or None."""
    theirs = ranges.get(cls.API_KEY)
    if theirs is None:
        return None
    hi = min(theirs[1], cls.MAX_VERSION)
    lo = max(theirs[0], cls.MIN_VERSION, lowest)
    return hi if hi >= lo else None


# ---------------------------------------------------------------- the client


class AdminClient:
    """A small blocking admin client for consumer-group membership (KIP-345)."""

    def __init__(self, bootstrap_servers, client_id="fastkwire-admin", request_timeout_ms=30000):
        self.servers = parse_servers(bootstrap_servers)
        _check_name("client_id", client_id, nullable=True)
        self.client_id = client_id
        if isinstance(request_timeout_ms, bool) or not isinstance(request_timeout_ms, (int, float)):
            raise TypeError(f"request_timeout_ms must be a number, not {type(request_timeout_ms).__name__}")
        if not 0 < request_timeout_ms <= MAX_TIMEOUT_MS:  # also refuses nan
            raise ValueError(f"request_timeout_ms must be more than 0 and at most {MAX_TIMEOUT_MS} (a day), "
                             f"not {request_timeout_ms!r}")
        self.timeout = request_timeout_ms / 1000.0

    # -- public calls

    def api_versions(self):
        """{api_key: (min_version, max_version)} of the first reachable bootstrap broker."""
        deadline = _Deadline(self.timeout)
        conn = self._connect_bootstrap(deadline)
        with conn:
            return self._api_versions(conn, deadline)

    def find_coordinator(self, group_id):
        """The `Coordinator` of `group_id`, retrying while it is moving or loading."""
        _check_name("group_id", group_id)
        deadline = _Deadline(self.timeout)
        with self._connect_bootstrap(deadline) as conn:
            ranges = self._api_versions(conn, deadline)
            return self._find_coordinator_retrying(conn, ranges, group_id, deadline)

    def remove_members_from_group(self, group_id, group_instance_ids, reason=None):
        """Remove static members by group.instance.id: the coordinator rebalances at once.

        Returns a `MembershipChangeResult`; raises an `AdminError` subclass when the request as
        a whole fails (nothing is sent to a broker too old for LeaveGroup v3), and ValueError
        for bad arguments (`check_removal`), before connecting.
        """
        instance_ids = check_removal(group_id, group_instance_ids, reason)
        return self.leave_group(group_id, [("", i) for i in instance_ids], reason=reason)

    def leave_group(self, group_id, members, reason=None):
        """The general form: `members` is a list of (member_id, group_instance_id or None).

        KIP-345 names static members by instance id with an empty member id; naming a member
        by its member id removes a dynamic member (or a static one on brokers that need it).
        """
        _check_name("group_id", group_id)
        _check_name("reason", reason, nullable=True)
        members = [(m or "", i) for m, i in members]
        if not members:
            raise ValueError("give at least one member")
        for member_id, instance_id in members:
            _check_name("a member id", member_id, nullable=True)
            _check_name("a group.instance.id", instance_id, nullable=True)
        deadline = _Deadline(self.timeout)
        with self._connect_bootstrap(deadline) as boot:
            ranges = self._api_versions(boot, deadline)
            self._leave_group_version(boot, ranges)  # refuse before sending anything
            backoff = BACKOFF_START
            while True:
                coordinator = self._find_coordinator_retrying(boot, ranges, group_id, deadline)
                if (coordinator.host, coordinator.port) == (boot.host, boot.port):
                    code, result = self._leave(boot, ranges, coordinator, group_id, members, reason, deadline)
                else:
                    with _Connection(coordinator.host, coordinator.port, self.client_id, deadline) as conn:
                        their = self._api_versions(conn, deadline)
                        code, result = self._leave(conn, their, coordinator, group_id, members, reason, deadline)
                if result is not None:
                    return result
                backoff = _backoff(deadline, backoff, code,
                                   f"removing members from group {group_id!r}")

    # -- steps

    def _connect_bootstrap(self, deadline):
        failures = []
        for host, port in self.servers:
            try:
                return _Connection(host, port, self.client_id, deadline)
            except BrokerConnectionError as exc:
                failures.append(str(exc))
        if len(failures) == 1:
            raise BrokerConnectionError(failures[0])
        raise BrokerConnectionError("no bootstrap server could be reached: " + "; ".join(failures))

    def _api_versions(self, conn, deadline):
        version = ApiVersionsRequest.MAX_VERSION
        request = ApiVersionsRequest(client_software_name="fastkwire", client_software_version=__version__)
        for _ in range(3):
            response = conn.request(request, version, deadline)
            ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
            if response.error_code == UNSUPPORTED_VERSION:
                # The broker lists its own ApiVersions range: ask again within it.
                fallback = highest_common_version(ranges, ApiVersionsRequest)
                if fallback is not None and fallback < version:
                    version = fallback
                    continue
            if response.error_code != NONE:
                raise BrokerError(f"{conn.address} refused ApiVersions: {lookup(response.error_code)}",
                                  lookup(response.error_code))
            return ranges
        raise ResponseError(f"{conn.address} kept refusing every ApiVersions version")

    def _leave_group_version(self, conn, ranges):
        version = highest_common_version(ranges, LeaveGroupRequest, LEAVE_BY_INSTANCE_MIN)
        if version is None:
            theirs = ranges.get(LeaveGroupRequest.API_KEY)
            has = f"LeaveGroup v{theirs[0]}-v{theirs[1]}" if theirs else "no LeaveGroup at all"
            raise BrokerTooOldError(
                f"broker {conn.address} is too old: it supports {has}, and removing members by "
                f"group.instance.id needs LeaveGroup v{LEAVE_BY_INSTANCE_MIN} or later (Kafka 2.4+). "
                "Nothing was sent.", lookup(UNSUPPORTED_VERSION))
        return version

    def _find_coordinator_retrying(self, conn, ranges, group_id, deadline):
        version = highest_common_version(ranges, FindCoordinatorRequest)
        if version is None:
            raise BrokerTooOldError(f"broker {conn.address} does not support FindCoordinator",
                                    lookup(UNSUPPORTED_VERSION))
        backoff = BACKOFF_START
        while True:
            code, coordinator, message = self._find_coordinator(conn, version, group_id, deadline)
            if code == NONE:
                return coordinator
            error = lookup(code)
            if code not in COORDINATOR_RETRY:
                detail = f" ({printable(message, MAX_BROKER_TEXT)})" if message else ""
                if code == GROUP_AUTHORIZATION_FAILED:
                    raise GroupAuthorizationError(
                        f"not authorized to find the coordinator of group {group_id!r}: {error}{detail}", error)
                raise BrokerError(f"FindCoordinator for group {group_id!r} failed: {error}{detail}", error)
            backoff = _backoff(deadline, backoff, code, f"finding the coordinator of group {group_id!r}")

    def _find_coordinator(self, conn, version, group_id, deadline):
        if version >= BATCHED_FIND_MIN:
            request = FindCoordinatorRequest(key_type=GROUP_KEY_TYPE, coordinator_keys=[group_id])
        else:
            request = FindCoordinatorRequest(key=group_id, key_type=GROUP_KEY_TYPE)
        response = conn.request(request, version, deadline)
        if version >= BATCHED_FIND_MIN:
            found = [c for c in response.coordinators if c.key == group_id]
            if len(found) != 1:
                raise ResponseError(f"{conn.address} answered FindCoordinator v{version} "
                                    f"without exactly one entry for group {group_id!r}")
            entry = found[0]
        else:
            entry = response
        coordinator = Coordinator(entry.node_id, entry.host, entry.port)
        if entry.error_code == NONE:
            _check_coordinator(coordinator, f"{conn.address} answered FindCoordinator v{version}")
        return entry.error_code, coordinator, getattr(entry, "error_message", None)

    def _leave(self, conn, ranges, coordinator, group_id, members, reason, deadline):
        """Send one LeaveGroup; (error code, None) asks the caller to find the coordinator again."""
        version = self._leave_group_version(conn, ranges)
        with_reason = reason if version >= LEAVE_REASON_MIN else None
        identities = [LeaveGroupRequest.MemberIdentity(member_id=m, group_instance_id=i, reason=with_reason)
                      for m, i in members]
        response = conn.request(LeaveGroupRequest(group_id=group_id, members=identities), version, deadline)
        code = response.error_code
        if code in COORDINATOR_RETRY:
            return code, None
        error = lookup(code)
        if code == GROUP_AUTHORIZATION_FAILED:
            raise GroupAuthorizationError(
                f"not authorized to remove members from group {group_id!r}: {error}", error)
        if code in GROUP_NOT_FOUND_ERRORS:
            raise GroupNotFoundError(f"group {group_id!r} does not exist on {coordinator.address}: {error}", error)
        if code in GROUP_STATE_ERRORS:
            raise GroupStateError(
                f"group {group_id!r} is not in a state that can rebalance now: {error}", error)
        if code == UNSUPPORTED_VERSION:
            raise BrokerTooOldError(f"coordinator {coordinator.address} refused LeaveGroup v{version}: {error}", error)
        if code != NONE and code not in (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID):
            raise BrokerError(f"coordinator {coordinator.address} refused LeaveGroup for group "
                              f"{group_id!r}: {error}", error)
        results = _member_results(members, response.members, code)
        return code, MembershipChangeResult(group_id, coordinator, version, results,
                                            getattr(response, "throttle_time_ms", 0))


def _member_results(requested, answered, top_code):
    """Pair each requested member with the coordinator's answer for it."""
    by_instance = {a.group_instance_id: a for a in answered if a.group_instance_id is not None}
    by_member = {a.member_id: a for a in answered if a.member_id}
    results = []
    for member_id, instance_id in requested:
        answer = by_instance.get(instance_id) if instance_id is not None else by_member.get(member_id)
        key = instance_id if instance_id is not None else member_id
        if answer is not None:
            results.append(MemberResult(key, answer.member_id or member_id, answer.error_code))
        elif top_code != NONE:
            # A member-level error sent for the whole request (no per-member list).
            results.append(MemberResult(key, member_id, top_code))
        else:
            results.append(MemberResult(key, member_id, UNKNOWN_SERVER_ERROR,
                                        "the coordinator's answer did not mention this member"))
    return results


def _check_coordinator(coordinator, answered):
    """Refuse a coordinator no broker would name: ResponseError rather than a wrong connect."""
    c = coordinator
    if not c.host:
        problem = "an empty host"
    elif not _is_host_text(c.host):
        problem = f"host {c.host!r}, which no host name can be"
    elif not 0 < c.port < 65536:
        problem = f"port {c.port}, outside 1-65535"
    elif c.node_id < 0:
        problem = f"node id {c.node_id}"
    else:
        return
    raise ResponseError(f"{answered} with a coordinator that has {printable(problem, MAX_BROKER_TEXT)}")


def _backoff(deadline, delay, code, doing):
    """Sleep before a retry, or raise AdminTimeoutError when the deadline would pass first."""
    error = lookup(code)
    if deadline.remaining() <= delay:
        hint = " (the group may be being deleted or moved)" if code == COORDINATOR_NOT_AVAILABLE else ""
        raise AdminTimeoutError(
            f"gave up {doing}: the broker still answers {error.name}{hint}, and the "
            f"{deadline.seconds:g} s timeout would pass before the next try", error)
    time.sleep(delay)
    return min(delay * 2, BACKOFF_MAX)


class AsyncAdminClient:
    """The same calls for asyncio code; each runs the blocking client in a worker thread."""

    def __init__(self, bootstrap_servers, client_id="fastkwire-admin", request_timeout_ms=30000):
        self._client = AdminClient(bootstrap_servers, client_id, request_timeout_ms)

    async def api_versions(self):
        return await asyncio.to_thread(self._client.api_versions)

    async def find_coordinator(self, group_id):
        return await asyncio.to_thread(self._client.find_coordinator, group_id)

    async def remove_members_from_group(self, group_id, group_instance_ids, reason=None):
        return await asyncio.to_thread(self._client.remove_members_from_group, group_id,
                                       list(group_instance_ids), reason)

    async def leave_group(self, group_id, members, reason=None):
        return await asyncio.to_thread(self._client.leave_group, group_id, list(members), reason)
