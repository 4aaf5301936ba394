"""The admin calls as flows: generators of the connection layer's I/O steps (`Connect`,
`Request`, `Close`, `Sleep`) that do no I/O of their own, and the argument checks that run
before any of them. The clients (`clients.py`) run the flows; tests can drive them with a
fake clock (`Deadline(seconds, clock)`), since a flow reads the time only from its deadline.
"""

import ipaddress
import struct

from .. import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FindCoordinatorRequest,
    LeaveGroupRequest,
)
from .._framing import response_header_version
from .._printable import printable
from .._schema import FIXED_WIDTH, load as load_schema
from ..admin_errors import (
    AdminTimeoutError,
    BrokerConnectionError,
    BrokerError,
    BrokerTooOldError,
    GroupAuthorizationError,
    GroupNotFoundError,
    GroupStateError,
    ResponseError,
)
from ..connection import (
    ANSWER_LIMITS as CONNECTION_ANSWER_LIMITS,
    KIB,
    MAX_BROKER_TEXT,
    MIB,
    SYSTEM_CLOCK,
    Close,
    Connect,
    Request,
    Security,
    Sleep,
    answer_limit as _answer_limit,
    check_timeout_ms,
    format_address as _format_address,
    highest_common_version,
)
from ..connection_errors import (
    BadResponseError,
    KafkaConnectionError,
    KafkaTimeoutError,
    OptionError,
)
from ..error_codes import by_name, lookup
from .results import (
    FENCED_INSTANCE_ID,
    NONE,
    UNKNOWN_MEMBER_ID,
    Coordinator,
    GroupDescription,
    MemberResult,
    MembershipChangeResult,
    RemovalPlan,
    _consumer_group_member,
    _described_member,
)

DEFAULT_PORT = 9092
GROUP_KEY_TYPE = 0  # FindCoordinator KeyType for consumer groups
LEAVE_BY_INSTANCE_MIN = 3  # LeaveGroup v3 added the member list with group.instance.id
LEAVE_REASON_MIN = 5
BATCHED_FIND_MIN = 4  # FindCoordinator v4 takes a list of keys
MAX_NAME_BYTES = 32767  # Kafka's longest string (int16 length)
# The most members a group description may list. A 16 MiB DescribeGroups answer holds 2.35
# million empty members (7 bytes each), which cost gigabytes and many seconds to decode and
# print: the count is checked in the frame before anything is decoded. Raise it with
# max_group_members= (the CLI's --max-members) for larger groups.
DEFAULT_MAX_GROUP_MEMBERS = 10_000

UNSUPPORTED_VERSION = by_name("UNSUPPORTED_VERSION").code
GROUP_AUTHORIZATION_FAILED = by_name("GROUP_AUTHORIZATION_FAILED").code
COORDINATOR_NOT_AVAILABLE = by_name("COORDINATOR_NOT_AVAILABLE").code
UNKNOWN_SERVER_ERROR = by_name("UNKNOWN_SERVER_ERROR").code
GROUP_ID_NOT_FOUND = by_name("GROUP_ID_NOT_FOUND").code


def _codes(*names):
    return frozenset(by_name(name).code for name in names)


# Answers that mean "ask FindCoordinator again, a little later".
COORDINATOR_RETRY = _codes(
    "COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR"
)
GROUP_STATE_ERRORS = _codes("ILLEGAL_GENERATION", "REBALANCE_IN_PROGRESS")
GROUP_NOT_FOUND_ERRORS = _codes("GROUP_ID_NOT_FOUND")
BACKOFF_START = 0.1
BACKOFF_MAX = 1.0
# Failures of one bootstrap server after which the next one is tried (the connection layer's
# classes: they catch the admin twins too). Security errors are not among them: they are
# configuration, the same on every broker.
FAILOVER_ERRORS = (KafkaConnectionError, KafkaTimeoutError, BadResponseError)

# The admin client's caps on the answers to the group APIs, as (fixed part, per member
# asked), plus the request's own size (see connection.ANSWER_LIMITS, which has the rest).
GROUP_ANSWER_LIMITS = {
    LeaveGroupRequest.API_KEY: (64 * KIB, 4 * KIB),  # each member answered with its ids
    DescribeGroupsRequest.API_KEY: (16 * MIB, 0),  # every member's metadata and assignment
    ConsumerGroupDescribeRequest.API_KEY: (16 * MIB, 0),
}
ANSWER_LIMITS = {**CONNECTION_ANSWER_LIMITS, **GROUP_ANSWER_LIMITS}


def answer_limit(msg, request_size):
    """The most bytes (after the size prefix) an admin call accepts in answer to `msg`."""
    return _answer_limit(msg, request_size, ANSWER_LIMITS)


def _request(conn, msg, version, check=None):
    """A Request step with the admin client's cap for `msg` (the connection adds the request's size)."""
    return Request(conn, msg, version, max_answer_bytes=answer_limit(msg, 0), check_frame=check)


# ---------------------------------------------------------------- arguments


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
    items = (
        bootstrap_servers.split(",")
        if isinstance(bootstrap_servers, str)
        else list(bootstrap_servers)
    )
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
    """`what` is a parameter's name (an OptionError names it as the caller knows it) or a
    description ("a member id")."""
    option = what if what.isidentifier() else "what"
    said = {} if what.isidentifier() else {"what": what}
    if value is None and nullable:
        return
    if not isinstance(value, str) or (not value and not nullable):
        raise OptionError(
            "{%s} must be a non-empty string, not {value}" % option,
            option,
            said=said,
            value=repr(value),
        )
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise OptionError(
            "{%s} {value} cannot be encoded as UTF-8" % option, option, said=said, value=repr(value)
        ) from None
    if size > MAX_NAME_BYTES:
        raise OptionError(
            "{%s} is {size} bytes long; Kafka takes at most {most}" % option,
            option,
            said=said,
            size=size,
            most=MAX_NAME_BYTES,
        )


def check_removal(group_id, group_instance_ids, reason=None):
    """The argument checks of `remove_members_from_group`, without any I/O: `check_group`,
    at least one instance id and then `check_members`' checks of them, and `check_reason`.

    Returns the instance ids as a list; raises ValueError for bad arguments.
    """
    check_group(group_id)
    instance_ids = list(group_instance_ids)
    if not instance_ids:
        raise OptionError(
            "give at least one {group_instance_ids}",
            "group_instance_ids",
            said={"group_instance_ids": "group.instance.id"},
        )
    check_members(instance_ids)
    check_reason(reason)
    return instance_ids


def check_group(group_id):
    """ValueError unless `group_id` is a group id Kafka can carry."""
    _check_name("group_id", group_id)


def check_reason(reason):
    """ValueError unless `reason` is None or a string Kafka can carry."""
    _check_name("reason", reason, nullable=True)


def check_members(group_instance_ids=(), member_ids=(), remove_all=False):
    """The member selection of a removal: (instance ids, member ids); ValueError when unusable."""
    instance_ids, member_ids = list(group_instance_ids), list(member_ids)
    if remove_all and (instance_ids or member_ids):
        raise OptionError("{remove_all} removes every member: name no member with it", "remove_all")
    if not (remove_all or instance_ids or member_ids):
        raise OptionError(
            "give at least one {group_instance_ids} or {member_ids} (or {remove_all})",
            "group_instance_ids",
            "member_ids",
            "remove_all",
            said={
                "group_instance_ids": "group.instance.id",
                "member_ids": "member id",
                "remove_all": "remove all",
            },
        )
    for i in instance_ids:
        _check_name("a group.instance.id", i)
    for m in member_ids:
        _check_name("a member id", m)
    if len(set(instance_ids)) != len(instance_ids):
        raise ValueError("each group.instance.id may be given once")
    if len(set(member_ids)) != len(member_ids):
        raise ValueError("each member id may be given once")
    return instance_ids, member_ids


# ---------------------------------------------------------------- the calls, as steps


class _Calls:
    """Options and the calls as generators of I/O steps; the clients (clients.py) run them."""

    _clock = SYSTEM_CLOCK  # where deadlines read the time and backoffs sleep (tests set a fake)

    def __init__(
        self,
        bootstrap_servers,
        client_id="fastkwire-admin",
        request_timeout_ms=30000,
        security=None,
        max_group_members=DEFAULT_MAX_GROUP_MEMBERS,
        **security_options,
    ):
        self.servers = parse_servers(bootstrap_servers)
        _check_name("client_id", client_id, nullable=True)
        self.client_id = client_id
        self.timeout = check_timeout_ms(request_timeout_ms)
        if (
            isinstance(max_group_members, bool)
            or not isinstance(max_group_members, int)
            or max_group_members < 1
        ):
            raise ValueError(f"max_group_members must be a positive int, not {max_group_members!r}")
        self.max_group_members = max_group_members
        if security is not None and security_options:
            raise ValueError("give either security= or the security options, not both")
        self.security = security if security is not None else Security(**security_options)

    def __repr__(self):
        servers = ",".join(_format_address(h, p) for h, p in self.servers)
        return f"{type(self).__name__}({servers!r}, {self.security!r})"

    # -- each call's argument checks, then its flow and the flow's arguments (for the clients)

    def _find_coordinator_call(self, group_id):
        check_group(group_id)
        return self._find_coordinator_flow, group_id

    def _describe_call(self, group_id):
        check_group(group_id)
        return self._describe_flow, group_id

    def _leave_call(self, group_id, members, reason):
        return self._leave_flow, group_id, _checked_leave(group_id, members, reason), reason

    def _removal_call(self, group_id, group_instance_ids, reason):
        instance_ids = check_removal(group_id, group_instance_ids, reason)
        return self._leave_call(group_id, [("", i) for i in instance_ids], reason)

    def _remove_call(self, group_id, group_instance_ids, member_ids, remove_all, reason):
        check_group(group_id)
        check_reason(reason)
        instance_ids, member_ids = check_members(group_instance_ids, member_ids, remove_all)
        return self._remove_flow, group_id, instance_ids, member_ids, remove_all, reason

    def _plan_call(self, group_id, group_instance_ids, member_ids, remove_all):
        check_group(group_id)
        instance_ids, member_ids = check_members(group_instance_ids, member_ids, remove_all)
        return self._plan_flow, group_id, instance_ids, member_ids, remove_all

    # -- flows

    def _api_versions_flow(self, deadline):
        boot = yield from self._bootstrap(deadline)
        return dict(boot.versions)

    def _find_coordinator_flow(self, group_id, deadline):
        boot = yield from self._bootstrap(deadline)
        return (yield from self._find_coordinator_retrying(boot, group_id, deadline))

    def _describe_flow(self, group_id, deadline, for_removal=False):
        boot = yield from self._bootstrap(deadline)
        if for_removal:
            self._leave_group_version(boot)  # a dry run fails where the removal would

        def action(conn, coordinator):
            return (yield from self._describe(conn, coordinator, group_id))

        return (
            yield from self._at_coordinator(
                boot, group_id, deadline, action, f"describing group {group_id!r}"
            )
        )

    def _leave_flow(self, group_id, members, reason, deadline):
        boot = yield from self._bootstrap(deadline)
        self._leave_group_version(boot)  # refuse before sending anything

        def action(conn, coordinator):
            return (yield from self._leave(conn, coordinator, group_id, members, reason))

        return (
            yield from self._at_coordinator(
                boot, group_id, deadline, action, f"removing members from group {group_id!r}"
            )
        )

    def _plan_flow(self, group_id, instance_ids, member_ids, remove_all, deadline):
        group = yield from self._describe_flow(group_id, deadline, for_removal=True)
        return _plan(group, instance_ids, member_ids, remove_all)

    def _remove_flow(self, group_id, instance_ids, member_ids, remove_all, reason, deadline):
        boot = yield from self._bootstrap(deadline)
        self._leave_group_version(boot)

        def action(conn, coordinator):
            members = [("", i) for i in instance_ids] + [(m, None) for m in member_ids]
            if remove_all:
                code, group = yield from self._describe(conn, coordinator, group_id)
                if group is None:
                    return code, None
                members = _plan(group, [], [], True).members
                if not members:
                    return NONE, MembershipChangeResult(group_id, coordinator, 0, [])
            return (yield from self._leave(conn, coordinator, group_id, members, reason))

        return (
            yield from self._at_coordinator(
                boot, group_id, deadline, action, f"removing members from group {group_id!r}"
            )
        )

    # -- steps

    def _connect(self, host, port, deadline=None):
        return Connect(host, port, deadline, client_id=self.client_id, security=self.security)

    def _bootstrap(self, deadline):
        failures = []
        for n, (host, port) in enumerate(self.servers):
            try:
                return (yield self._connect(host, port, deadline.share(len(self.servers) - n)))
            except FAILOVER_ERRORS as exc:
                if len(self.servers) == 1:
                    raise
                failures.append(str(exc))
        raise BrokerConnectionError("no bootstrap server could be reached: " + "; ".join(failures))

    def _at_coordinator(self, boot, group_id, deadline, action, doing):
        """Run `action(conn, coordinator)` at the group's coordinator until it is not moving.

        `action` gives (error code, result); a None result asks for FindCoordinator again.
        """
        backoff = BACKOFF_START
        while True:
            coordinator = yield from self._find_coordinator_retrying(boot, group_id, deadline)
            same = (coordinator.host, coordinator.port) == (boot.host, boot.port)
            conn = boot if same else (yield self._connect(coordinator.host, coordinator.port))
            code, result = yield from action(conn, coordinator)
            if not same:
                yield Close(conn)
            if result is not None:
                return result
            backoff = yield from _backoff(deadline, backoff, code, doing)

    def _leave_group_version(self, conn):
        version = highest_common_version(conn.versions, LeaveGroupRequest, LEAVE_BY_INSTANCE_MIN)
        if version is None:
            theirs = conn.versions.get(LeaveGroupRequest.API_KEY)
            has = f"LeaveGroup v{theirs[0]}-v{theirs[1]}" if theirs else "no LeaveGroup at all"
            raise BrokerTooOldError(
                f"broker {conn.address} is too old: it supports {has}, and removing members by "
                f"group.instance.id needs LeaveGroup v{LEAVE_BY_INSTANCE_MIN} or later (Kafka 2.4+). "
                "Nothing was sent.",
                lookup(UNSUPPORTED_VERSION),
            )
        return version

    def _find_coordinator_retrying(self, conn, group_id, deadline):
        version = highest_common_version(conn.versions, FindCoordinatorRequest)
        if version is None:
            raise BrokerTooOldError(
                f"broker {conn.address} does not support FindCoordinator",
                lookup(UNSUPPORTED_VERSION),
            )
        backoff = BACKOFF_START
        while True:
            code, coordinator, message = yield from self._find_coordinator(conn, version, group_id)
            if code == NONE:
                return coordinator
            error = lookup(code)
            if code not in COORDINATOR_RETRY:
                detail = f" ({printable(message, MAX_BROKER_TEXT)})" if message else ""
                if code == GROUP_AUTHORIZATION_FAILED:
                    raise GroupAuthorizationError(
                        f"not authorized to find the coordinator of group {group_id!r}: {error}{detail}",
                        error,
                    )
                raise BrokerError(
                    f"FindCoordinator for group {group_id!r} failed: {error}{detail}", error
                )
            backoff = yield from _backoff(
                deadline, backoff, code, f"finding the coordinator of group {group_id!r}"
            )

    def _find_coordinator(self, conn, version, group_id):
        if version >= BATCHED_FIND_MIN:
            request = FindCoordinatorRequest(key_type=GROUP_KEY_TYPE, coordinator_keys=[group_id])
        else:
            request = FindCoordinatorRequest(key=group_id, key_type=GROUP_KEY_TYPE)
        response = yield _request(conn, request, version)
        if version >= BATCHED_FIND_MIN:
            found = [c for c in response.coordinators if c.key == group_id]
            if len(found) != 1:
                raise ResponseError(
                    f"{conn.address} answered FindCoordinator v{version} "
                    f"without exactly one entry for group {group_id!r}"
                )
            entry = found[0]
        else:
            entry = response
        coordinator = Coordinator(entry.node_id, entry.host, entry.port)
        if entry.error_code == NONE:
            _check_coordinator(coordinator, f"{conn.address} answered FindCoordinator v{version}")
        return entry.error_code, coordinator, getattr(entry, "error_message", None)

    def _describe(self, conn, coordinator, group_id):
        """(error code, GroupDescription or None to retry): ConsumerGroupDescribe first where
        the coordinator has it (KIP-848 groups), DescribeGroups for classic groups."""
        version = highest_common_version(conn.versions, ConsumerGroupDescribeRequest)
        if version is not None:
            request = ConsumerGroupDescribeRequest(
                group_ids=[group_id], include_authorized_operations=False
            )
            response = yield _request(
                conn,
                request,
                version,
                self._members_check(conn, ConsumerGroupDescribeResponse, group_id),
            )
            entry = _one_group(response.groups, group_id, conn, f"ConsumerGroupDescribe v{version}")
            code = entry.error_code
            if code in COORDINATOR_RETRY:
                return code, None
            if code == NONE and entry.members:
                return code, GroupDescription(
                    group_id,
                    coordinator,
                    entry.group_state,
                    "consumer",
                    entry.assignor_name,
                    [_consumer_group_member(m) for m in entry.members],
                    f"ConsumerGroupDescribe v{version}",
                )
            if code not in (NONE, GROUP_ID_NOT_FOUND, UNSUPPORTED_VERSION):
                raise _group_error(code, group_id, coordinator, "describe", entry.error_message)
            # Not a group of the new protocol (Kafka answers GROUP_ID_NOT_FOUND), or one without
            # members: DescribeGroups tells as much, and more for a classic group (Tansu 0.6
            # answers ConsumerGroupDescribe for a classic group with its state but no members).
        version = highest_common_version(conn.versions, DescribeGroupsRequest)
        if version is None:
            raise BrokerTooOldError(
                f"coordinator {coordinator.address} does not support DescribeGroups",
                lookup(UNSUPPORTED_VERSION),
            )
        request = DescribeGroupsRequest(groups=[group_id], include_authorized_operations=False)
        response = yield _request(
            conn, request, version, self._members_check(conn, DescribeGroupsResponse, group_id)
        )
        entry = _one_group(response.groups, group_id, conn, f"DescribeGroups v{version}")
        code = entry.error_code
        if code in COORDINATOR_RETRY:
            return code, None
        if code != NONE:
            raise _group_error(
                code, group_id, coordinator, "describe", getattr(entry, "error_message", None)
            )
        return code, GroupDescription(
            group_id,
            coordinator,
            entry.group_state,
            entry.protocol_type,
            entry.protocol_data,
            [_described_member(m, entry.protocol_type) for m in entry.members],
            f"DescribeGroups v{version}",
        )

    def _members_check(self, conn, cls, group_id):
        """A check_frame for `conn.request`: refuses an answer listing more than the one group
        asked for, or more than max_group_members members, before it is decoded."""
        limit = self.max_group_members

        def check(frame, version):
            groups, members = _announced_members(frame, cls, version)
            what = f"{conn.address} answered {cls.__name__[: -len('Response')]} v{version}"
            if groups is not None and groups > 1:
                raise ResponseError(f"{what} with {groups} groups, for the one asked")
            if members is not None and members > limit:
                raise ResponseError(
                    f"{what} with {members} members in group {group_id!r}, more than "
                    f"max_group_members ({limit}); raise it (the CLI's --max-members) if the "
                    "group is that large"
                )

        return check

    def _leave(self, conn, coordinator, group_id, members, reason):
        """Send one LeaveGroup; (error code, None) asks the caller to find the coordinator again."""
        version = self._leave_group_version(conn)
        with_reason = reason if version >= LEAVE_REASON_MIN else None
        identities = [
            LeaveGroupRequest.MemberIdentity(member_id=m, group_instance_id=i, reason=with_reason)
            for m, i in members
        ]
        response = yield _request(
            conn, LeaveGroupRequest(group_id=group_id, members=identities), version
        )
        code = response.error_code
        if code in COORDINATOR_RETRY:
            return code, None
        if code == UNSUPPORTED_VERSION:
            error = lookup(code)
            raise BrokerTooOldError(
                f"coordinator {coordinator.address} refused LeaveGroup v{version}: {error}", error
            )
        if code != NONE and code not in (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID):
            raise _group_error(code, group_id, coordinator, "remove members from")
        results = _member_results(members, response.members, code)
        return code, MembershipChangeResult(
            group_id, coordinator, version, results, getattr(response, "throttle_time_ms", 0)
        )


class _Prefix:
    """Reads the first fields of an answer without decoding it (ints, strings, bytes, counts)."""

    def __init__(self, frame, pos, flexible):
        self.frame, self.pos, self.flexible = frame, pos, flexible

    def _int(self, fmt):
        value = struct.unpack_from(fmt, self.frame, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return value

    def uvarint(self):
        value = shift = 0
        while shift < 35:
            byte = self.frame[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7
        raise ValueError("varint too long")

    def count(self):
        return self.uvarint() - 1 if self.flexible else self._int(">i")

    def skip(self, f):
        if f.type in FIXED_WIDTH:
            self.pos += FIXED_WIDTH[f.type]
        elif f.type in ("string", "bytes"):
            n = (
                self.uvarint() - 1
                if self.flexible
                else self._int(">h" if f.type == "string" else ">i")
            )
            self.pos += max(n, 0)
        else:
            raise ValueError(f"{f.name} is not a primitive field")

    def skip_tagged(self):
        for _ in range(self.uvarint()):
            self.uvarint()
            self.pos += self.uvarint()

    def fields_up_to(self, struct_, name, version):
        """Skip the fields before `name`; returns its field (an array, whose count is next)."""
        for f in struct_.fields:
            if not f.present(version) or f.is_tagged(version):
                continue
            if f.name == name:
                return f
            self.skip(f)
        raise ValueError(f"no field {name}")


def _announced_members(frame, cls, version):
    """(groups, members of the first group) as a group-describing answer announces them, read
    from the frame before it is decoded; None for what cannot be read (the decoder then says why)."""
    message = load_schema(cls.__name__)
    reader = _Prefix(
        frame, 8, message.is_flexible(version)
    )  # after the size and the correlation id
    groups = None
    try:
        if response_header_version(cls, version) >= 1:
            reader.skip_tagged()
        groups_field = reader.fields_up_to(message.root, "Groups", version)
        groups = reader.count()
        if groups < 1:
            return groups, None
        reader.fields_up_to(groups_field.struct, "Members", version)
        return groups, reader.count()
    except (IndexError, struct.error, ValueError):
        return groups, None


def _one_group(groups, group_id, conn, what):
    found = [g for g in groups if g.group_id == group_id]
    if len(found) != 1:
        raise ResponseError(
            f"{conn.address} answered {what} without exactly one entry for group {group_id!r}"
        )
    return found[0]


def _group_error(code, group_id, coordinator, doing, message=None):
    error = lookup(code)
    detail = f" ({printable(message, MAX_BROKER_TEXT)})" if message else ""
    if code == GROUP_AUTHORIZATION_FAILED:
        return GroupAuthorizationError(
            f"not authorized to {doing} group {group_id!r}: {error}{detail}", error
        )
    if code in GROUP_NOT_FOUND_ERRORS:
        return GroupNotFoundError(
            f"group {group_id!r} does not exist on {coordinator.address}: {error}", error
        )
    if code in GROUP_STATE_ERRORS:
        return GroupStateError(
            f"group {group_id!r} is not in a state that can rebalance now: {error}", error
        )
    what = "LeaveGroup" if doing.startswith("remove") else "the description"
    return BrokerError(
        f"coordinator {coordinator.address} refused {what} for group {group_id!r}: {error}{detail}",
        error,
    )


def _plan(group, instance_ids, member_ids, remove_all):
    """The members a removal names, and the named ones the group does not have."""
    if remove_all:
        return RemovalPlan(
            group, [(m.member_id, m.group_instance_id) for m in group.members], [], []
        )
    have_instances = {m.group_instance_id for m in group.members if m.group_instance_id is not None}
    have_members = {m.member_id for m in group.members}
    members = [("", i) for i in instance_ids if i in have_instances]
    members += [(m, None) for m in member_ids if m in have_members]
    return RemovalPlan(
        group,
        members,
        [i for i in instance_ids if i not in have_instances],
        [m for m in member_ids if m not in have_members],
    )


def _member_results(requested, answered, top_code):
    """Pair each requested member with the coordinator's answer for it."""
    by_instance = {a.group_instance_id: a for a in answered if a.group_instance_id is not None}
    by_member = {a.member_id: a for a in answered if a.member_id}
    results = []
    for member_id, instance_id in requested:
        answer = (
            by_instance.get(instance_id) if instance_id is not None else by_member.get(member_id)
        )
        key = instance_id if instance_id is not None else member_id
        named_by_member_id = instance_id is None
        if answer is not None:
            results.append(
                MemberResult(
                    key, answer.member_id or member_id, answer.error_code, "", named_by_member_id
                )
            )
        elif top_code != NONE:
            # A member-level error sent for the whole request (no per-member list).
            results.append(MemberResult(key, member_id, top_code, "", named_by_member_id))
        else:
            results.append(
                MemberResult(
                    key,
                    member_id,
                    UNKNOWN_SERVER_ERROR,
                    "the coordinator's answer did not mention this member",
                    named_by_member_id,
                )
            )
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
    raise ResponseError(
        f"{answered} with a coordinator that has {printable(problem, MAX_BROKER_TEXT)}"
    )


def _backoff(deadline, delay, code, doing):
    """A sleep step before a retry, or AdminTimeoutError when the deadline would pass first."""
    error = lookup(code)
    if deadline.remaining() <= delay:
        hint = (
            " (the group may be being deleted or moved)"
            if code == COORDINATOR_NOT_AVAILABLE
            else ""
        )
        raise AdminTimeoutError(
            f"gave up {doing}: the broker still answers {error.name}{hint}, and the "
            f"{deadline.seconds:g} s timeout would pass before the next try",
            error,
        )
    yield Sleep(delay)
    return min(delay * 2, BACKOFF_MAX)


def _checked_leave(group_id, members, reason):
    check_group(group_id)
    check_reason(reason)
    members = [(m or "", i) for m, i in members]
    if not members:
        raise ValueError("give at least one member")
    for member_id, instance_id in members:
        _check_name("a member id", member_id, nullable=True)
        _check_name("a group.instance.id", instance_id, nullable=True)
    return members
