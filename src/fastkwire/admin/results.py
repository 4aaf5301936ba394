"""What the admin calls return: coordinators, group descriptions, removal results and plans."""

from dataclasses import dataclass, field

from ..admin_errors import FencedInstanceError, MemberRemovalError, UnknownInstanceError
from ..connection import format_address as _format_address
from ..consumer_protocol import decode_assignment
from ..error_codes import by_name, lookup

__all__ = [
    "Coordinator",
    "MemberResult",
    "MembershipChangeResult",
    "MemberDescription",
    "GroupDescription",
    "RemovalPlan",
]

NONE = by_name("NONE").code
UNKNOWN_MEMBER_ID = by_name("UNKNOWN_MEMBER_ID").code
FENCED_INSTANCE_ID = by_name("FENCED_INSTANCE_ID").code


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

    group_instance_id: str  # the id the member was asked for by: its member id when by_member_id
    member_id: str
    error_code: int
    note: str = ""
    by_member_id: bool = (
        False  # asked for by member id (group.instance.id null), not by instance id
    )

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
                cls = {
                    UNKNOWN_MEMBER_ID: UnknownInstanceError,
                    FENCED_INSTANCE_ID: FencedInstanceError,
                }.get(m.error_code, MemberRemovalError)
                raise cls(
                    f"group {self.group_id!r}: instance {m.group_instance_id!r} was not removed: "
                    f"{m.error_name} ({m.error_code}): {m.describe()}",
                    m,
                )

    def to_dict(self):
        return {
            "group_id": self.group_id,
            "coordinator": {
                "node_id": self.coordinator.node_id,
                "host": self.coordinator.host,
                "port": self.coordinator.port,
            },
            "leave_group_version": self.leave_group_version,
            "members": [m.to_dict() for m in self.members],
            "removed": self.removed,
            "failed": sorted(self.failed),
        }


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    group_instance_id: object  # str, or None for a dynamic member
    client_id: str
    client_host: str
    assignment: dict = field(default_factory=dict)  # topic -> sorted partitions
    assignment_error: str = ""  # why the assignment bytes could not be read, if they could not

    def to_dict(self):
        return {
            "member_id": self.member_id,
            "group_instance_id": self.group_instance_id,
            "client_id": self.client_id,
            "client_host": self.client_host,
            "assignment": {t: list(p) for t, p in self.assignment.items()},
            "assignment_error": self.assignment_error or None,
        }


@dataclass(frozen=True)
class GroupDescription:
    """A group as its coordinator describes it (DescribeGroups or ConsumerGroupDescribe)."""

    group_id: str
    coordinator: Coordinator
    state: str
    protocol_type: str
    protocol: str  # the assignor (classic groups: the chosen protocol; KIP-848: the assignor name)
    members: list = field(default_factory=list)
    api: str = "DescribeGroups"

    @property
    def exists(self):
        """True, False, or None where the answer cannot tell.

        A group with members, or in any state but Empty and Dead, exists. Dead (Apache
        Kafka's answer for a group it does not have) or no state at all: it does not. Empty
        with no members is an existing group without members (it may hold committed
        offsets), but also what some brokers (Tansu) answer for a group that never existed:
        None. Kafka 4's GROUP_ID_NOT_FOUND is a GroupNotFoundError, not a description.
        """
        if self.members:
            return True
        if self.state in ("Dead", ""):
            return False
        return None if self.state == "Empty" else True

    def member_by_instance(self, group_instance_id):
        return next((m for m in self.members if m.group_instance_id == group_instance_id), None)

    def to_dict(self):
        c = self.coordinator
        return {
            "group_id": self.group_id,
            "exists": self.exists,
            "state": self.state,
            "protocol_type": self.protocol_type,
            "protocol": self.protocol,
            "api": self.api,
            "coordinator": {"node_id": c.node_id, "host": c.host, "port": c.port},
            "members": [m.to_dict() for m in self.members],
        }


@dataclass(frozen=True)
class RemovalPlan:
    """What a removal would do, without doing it (`plan_removal`, the CLI's --dry-run)."""

    group: GroupDescription
    members: list  # (member_id, group_instance_id or None): what LeaveGroup would name
    missing_instance_ids: list  # named group.instance.ids that are not in the group
    missing_member_ids: list

    def to_dict(self):
        return {
            "dry_run": True,
            "group_id": self.group.group_id,
            "state": self.group.state,
            "coordinator": self.group.to_dict()["coordinator"],
            "would_remove": [{"member_id": m, "group_instance_id": i} for m, i in self.members],
            "not_in_group": {
                "group_instance_ids": self.missing_instance_ids,
                "member_ids": self.missing_member_ids,
            },
        }


def _described_member(m, protocol_type):
    assignment, problem = {}, ""
    if protocol_type == "consumer":
        try:
            assignment = decode_assignment(m.member_assignment)
        except ValueError as exc:
            problem = str(exc)
    return MemberDescription(
        m.member_id,
        getattr(m, "group_instance_id", None),
        m.client_id,
        m.client_host,
        assignment,
        problem,
    )


def _consumer_group_member(m):
    parts = m.assignment.topic_partitions if m.assignment is not None else []
    assignment = {}
    for tp in parts:
        assignment.setdefault(tp.topic_name or str(tp.topic_id), []).extend(tp.partitions)
    return MemberDescription(
        m.member_id,
        m.instance_id,
        m.client_id,
        m.client_host,
        {t: sorted(p) for t, p in assignment.items()},
    )
