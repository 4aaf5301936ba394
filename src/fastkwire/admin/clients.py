"""The two admin clients: the calls of `flows.py`, run by the connection layer's runners.

Every method checks its arguments first (ValueError, before any connection), then runs its
flow within one deadline of `request_timeout_ms`. A connection error that reaches a call
is raised as its admin twin (`admin_errors.admin_error`): callers catch `AdminError`.
"""

from ..admin_errors import AdminError, admin_error
from ..connection import Deadline, run_steps, run_steps_async
from ..connection_errors import KafkaClientError
from .flows import _Calls

__all__ = ["AdminClient", "AsyncAdminClient"]


class AdminClient(_Calls):
    """A small blocking admin client for consumer groups (describe, KIP-345 removal).

    Options: bootstrap_servers, client_id, request_timeout_ms, max_group_members (the most
    members a group description may list, DEFAULT_MAX_GROUP_MEMBERS), and TLS/SASL options named as
    in kafka-python (security_protocol, ssl_cafile, ssl_certfile, ssl_keyfile, ssl_password,
    ssl_check_hostname, ssl_context, sasl_mechanism, sasl_plain_username,
    sasl_plain_password, sasl_oauth_token_provider), or security=`connection.Security`.
    """

    def api_versions(self):
        """{api_key: (min_version, max_version)} of the first reachable bootstrap broker."""
        return self._run(self._api_versions_flow)

    def find_coordinator(self, group_id):
        """The `Coordinator` of `group_id`, retrying while it is moving or loading."""
        return self._run(*self._find_coordinator_call(group_id))

    def describe_group(self, group_id):
        """A `GroupDescription`: state, protocol, members with their assigned partitions."""
        return self._run(*self._describe_call(group_id))

    def remove_members_from_group(self, group_id, group_instance_ids, reason=None):
        """Remove static members by group.instance.id: the coordinator rebalances at once.

        Returns a `MembershipChangeResult`; raises an `AdminError` subclass when the request as
        a whole fails (nothing is sent to a broker too old for LeaveGroup v3), and ValueError
        for bad arguments (`check_removal`), before connecting.
        """
        return self._run(*self._removal_call(group_id, group_instance_ids, reason))

    def remove_members(
        self, group_id, group_instance_ids=(), member_ids=(), remove_all=False, reason=None
    ):
        """Remove members named by group.instance.id and/or member id, or every member
        (`remove_all`: the group is described first, as Kafka's Admin does)."""
        return self._run(
            *self._remove_call(group_id, group_instance_ids, member_ids, remove_all, reason)
        )

    def plan_removal(self, group_id, group_instance_ids=(), member_ids=(), remove_all=False):
        """What `remove_members` would do, as a `RemovalPlan`; sends no LeaveGroup."""
        return self._run(*self._plan_call(group_id, group_instance_ids, member_ids, remove_all))

    def leave_group(self, group_id, members, reason=None):
        """The general form: `members` is a list of (member_id, group_instance_id or None).

        KIP-345 names static members by instance id with an empty member id; naming a member
        by its member id removes a dynamic member (or a static one on brokers that need it).
        """
        return self._run(*self._leave_call(group_id, members, reason))

    def _run(self, flow, *args):
        deadline = Deadline(self.timeout, self._clock)
        try:
            return run_steps(flow(*args, deadline), deadline)
        except KafkaClientError as exc:
            if isinstance(exc, AdminError):
                raise
            error = admin_error(exc)
        raise error  # outside the handler: the twin has no context (which could hold a secret)


class AsyncAdminClient(_Calls):
    """The same calls as coroutines, on asyncio streams in the event loop's own thread.

    Options as for `AdminClient`; an OAUTHBEARER token provider may return an awaitable.
    Many calls can run at once on one loop. Cancelling a call closes its connections at once.
    """

    async def api_versions(self):
        """{api_key: (min_version, max_version)} of the first reachable bootstrap broker."""
        return await self._run(self._api_versions_flow)

    async def find_coordinator(self, group_id):
        """The `Coordinator` of `group_id`, retrying while it is moving or loading."""
        return await self._run(*self._find_coordinator_call(group_id))

    async def describe_group(self, group_id):
        """A `GroupDescription`: state, protocol, members with their assigned partitions."""
        return await self._run(*self._describe_call(group_id))

    async def remove_members_from_group(self, group_id, group_instance_ids, reason=None):
        """Remove static members by group.instance.id: the coordinator rebalances at once.

        Returns a `MembershipChangeResult`; raises an `AdminError` subclass when the request as
        a whole fails (nothing is sent to a broker too old for LeaveGroup v3), and ValueError
        for bad arguments (`check_removal`), before connecting.
        """
        return await self._run(*self._removal_call(group_id, group_instance_ids, reason))

    async def remove_members(
        self, group_id, group_instance_ids=(), member_ids=(), remove_all=False, reason=None
    ):
        """Remove members named by group.instance.id and/or member id, or every member
        (`remove_all`: the group is described first, as Kafka's Admin does)."""
        return await self._run(
            *self._remove_call(group_id, group_instance_ids, member_ids, remove_all, reason)
        )

    async def plan_removal(self, group_id, group_instance_ids=(), member_ids=(), remove_all=False):
        """What `remove_members` would do, as a `RemovalPlan`; sends no LeaveGroup."""
        return await self._run(
            *self._plan_call(group_id, group_instance_ids, member_ids, remove_all)
        )

    async def leave_group(self, group_id, members, reason=None):
        """The general form: `members` is a list of (member_id, group_instance_id or None).

        KIP-345 names static members by instance id with an empty member id; naming a member
        by its member id removes a dynamic member (or a static one on brokers that need it).
        """
        return await self._run(*self._leave_call(group_id, members, reason))

    async def _run(self, flow, *args):
        deadline = Deadline(self.timeout, self._clock)
        try:
            return await run_steps_async(flow(*args, deadline), deadline)
        except KafkaClientError as exc:
            if isinstance(exc, AdminError):
                raise
            error = admin_error(exc)
        raise error  # see AdminClient._run
