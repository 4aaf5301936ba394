"""Hostile records in the coordinators' internal topics, read back by a broker's start.

    python3 fuzz/hostile_coordinator_state.py --loop 2000 --seed 1

A log directory gets good records (committed offsets, a classic group, transactional ids,
written by the coordinators' own hooks) and, under other keys, records mutated from good
ones (bits flipped, cut short, grown, another version or record type, a null key), each
in a valid batch, so that the bytes reach the records' decoder; and records that read but
hold values the coordinators never write (generations and epochs at their bounds, members
without a protocol, a member or instance id twice, odd timeouts, states, partitions). A
broker's state is then loaded from it. The contract, checked for each: the load either
succeeds, with every good record's state back exactly, or fails with CoordinatorStateError
naming the partition and the offset of a mutated record; never another exception. A second
load of what the first left gives the same state. What was loaded is then used: the groups'
members and strangers join, sync, heartbeat and leave, the groups are described and their
offsets fetched, the transactional ids' producers init, add partitions and end, with the
clock moving; no call raises and every answer encodes at its version.

KIP-848 consumer groups too: good groups are driven by ConsumerGroupHeartbeats (members
join, reconcile, leave) and must come back exactly (epochs, members, target and current
assignments, no partition owned twice); ConsumerGroup* records mutated or holding values
never written (epochs at their bounds, unknown member states, assignors, bad regexes, an
instance id twice, an assignment without its member) are refused naming one of them, or
load; what was loaded is driven by members and strangers at any epoch, and what the
coordinator then wrote must load back as the state it had.
The exit status is 1 if any input broke it.
"""

import argparse
import logging
import re
import shutil
import struct
import sys
import tempfile
import time
import uuid

from fastkwire import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    DescribeGroupsRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
    encode_response,
    records,
)
from fastkwire.broker import Cluster, Context, read_batch_head
from fastkwire.broker._coordinator_records import (
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
    CONSUMER_GROUP_MEMBER_METADATA,
    CONSUMER_GROUP_METADATA,
    CONSUMER_GROUP_PARTITION_METADATA,
    CONSUMER_GROUP_RECORDS,
    CONSUMER_GROUP_REGULAR_EXPRESSION,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
    GROUP_METADATA,
    OFFSET_COMMIT,
    TRANSACTION_LOG,
    encode_key,
    encode_value,
)
from fastkwire.broker._cluster import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from fastkwire.broker._compaction import LogCleaner
from fastkwire.broker._consumer_group_records import MAX_EPOCH
from fastkwire.broker._coordinator_state import CoordinatorState, CoordinatorStateError
from fastkwire.broker._disk_logs import DiskLogs
from fastkwire.broker._groups import GroupCoordinator
from fastkwire.broker._offsets import Committed
from fastkwire.broker._transactions import TransactionCoordinator

NODES = {0: ("127.0.0.1", 9092)}
PARTITIONS = 2
SMALL_SEGMENTS = {"segment.bytes": "600", "delete.retention.ms": "0"}


class Finding(Exception):
    pass


def open_state(path, clock=time.monotonic):
    storage = DiskLogs(path)
    cluster = Cluster(NODES, cluster_id=storage.cluster_id(), offsets_topic_partitions=PARTITIONS)
    try:
        storage.attach(cluster, settle=False)
        cluster.create_topic("t", 4) if "t" not in cluster.topics else None
        groups = GroupCoordinator(
            clock=clock, topic_partitions=cluster.partition_count, topics=cluster.topic_summary
        )
        txns = TransactionCoordinator(cluster, clock, groups.end_transaction)
        CoordinatorState(storage, cluster, groups, txns).load()
        for name in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC):  # small segments: compacted
            cluster.internal_topic(name).configs.update(SMALL_SEGMENTS)
    except BaseException:
        storage.close()
        raise
    return storage, cluster, groups, txns


def compact_and_reload(path):
    """Compact the internal topics (tombstones too: two passes past delete.retention.ms),
    then load again: the state must be the one before."""
    storage, cluster, groups, txns = open_state(path)
    try:
        before = (*snapshot(groups, txns), consumer_snapshot(groups))
        cleaner = LogCleaner(cluster, time.monotonic, time.time)
        now_ms = int(time.time() * 1000)
        passes = cleaner.clean(now_ms, force=True)
        passes.update(cleaner.clean(now_ms + 1, force=True))
        if cleaner.uncleanable:
            raise Finding(f"compaction failed: {cleaner.uncleanable}")
        removed = sum(r.records_removed for r in passes.values())
    finally:
        storage.close()
    try:
        storage, cluster, groups, txns = open_state(path)
    except Exception as e:  # noqa: BLE001 - the contract: no exception
        raise Finding(f"the compacted state does not load: {type(e).__name__}: {e}") from None
    try:
        after = (*snapshot(groups, txns), consumer_snapshot(groups))
        names = ("offsets", "classic groups", "transactions", "consumer groups")
        for name, b, a in zip(names, before, after, strict=True):
            if a != b:
                raise Finding(f"after compaction the {name} load otherwise: {b} -> {a}")
    finally:
        storage.close()
    return removed


def snapshot(groups, txns):
    offsets = {
        (g, t, p): (c.offset, c.leader_epoch, c.metadata)
        for g in groups.offsets.groups()
        for t, ps in groups.offsets.by_topic(g).items()
        for p, c in ps.items()
    }
    classic = {
        g.group_id: (g.generation, g.protocol_type, sorted(g.members))
        for g in groups.groups.values()
    }
    tx = {tid: (t.producer_id, t.epoch, t.ended) for tid, t in txns.transactions.items()}
    return offsets, classic, tx


def _frozen(assignment):
    return tuple(sorted((str(t), tuple(sorted(ps))) for t, ps in assignment.items() if ps))


def consumer_snapshot(groups):
    """What a consumer group keeps in its records, as comparable values."""
    out = {}
    for gid, g in groups.consumer.groups.items():
        members = {
            m.member_id: (
                m.instance_id,
                m.rack_id,
                m.client_id,
                m.client_host,
                tuple(m.topic_names),
                m.regex,
                m.rebalance_timeout_ms,
                m.assignor,
                m.epoch,
                m.previous_epoch,
                m.state,
                _frozen(m.assigned),
                _frozen(m.revoking),
            )
            for m in g.members.values()
        }
        target = {mid: _frozen(t) for mid, t in g.target.items() if mid in g.members}
        metadata = tuple(sorted((n, str(t), c) for n, (t, c) in g.metadata.items()))
        out[gid] = (g.group_epoch, g.assignment_epoch, metadata, members, target)
    return out


def check_owned_once(groups, gids):
    """No partition is assigned to, or being revoked by, two members of a good group."""
    for gid in gids:
        g = groups.consumer.groups.get(gid)
        seen = {}
        for m in g.members.values() if g is not None else ():
            for part in (m.assigned, m.revoking):
                for tid, ps in part.items():
                    for p in ps:
                        other = seen.setdefault((tid, p), m.member_id)
                        if other != m.member_id:
                            raise Finding(f"{gid}: {tid}-{p} owned by {other} and {m.member_id}")


def cg_heartbeat(groups, gid, member_id, epoch, owned, instance=None, topics=("t",)):
    """A ConsumerGroupHeartbeat through the codec (v1): its decoded answer."""
    joining = epoch == 0
    H = ConsumerGroupHeartbeatRequest
    request = H(
        group_id=gid,
        member_id=member_id,
        member_epoch=epoch,
        instance_id=instance,
        rebalance_timeout_ms=3000 if joining else -1,
        subscribed_topic_names=list(topics) if joining else None,
        topic_partitions=None
        if owned is None
        else [H.TopicPartitions(topic_id=t, partitions=sorted(ps)) for t, ps in owned.items()],
    )
    answers = []
    groups.handle(request.API_KEY, 1, request, Context(0, "c", "127.0.0.1"), answers.append)
    encode_response(answers[0], 1, 1)
    return answers[0]


def good_consumer_groups(rng, groups):
    """Drive good-cg-* groups: members join, heartbeat what they were given (reconciling
    over a few rounds), some leave; returns the group ids."""
    gids = [f"good-cg-{n}" for n in range(rng.randrange(1, 3))]
    for gid in gids:
        held = {}  # member id -> (epoch, owned {topic id: partitions})
        ids = [f"m{k}" for k in range(rng.randrange(1, 4))]
        for _ in range(rng.randrange(2, 8)):
            mid = rng.choice(ids)
            epoch, owned = held.get(mid, (0, {}))
            if rng.random() < 0.1 and epoch:
                cg_heartbeat(groups, gid, mid, -1, None)
                held.pop(mid)
                continue
            answer = cg_heartbeat(groups, gid, mid, epoch, owned, rng.choice([None, mid + "-i"]))
            if answer.error_code:
                held.pop(mid, None)
                continue
            if answer.assignment is not None:
                owned = {x.topic_id: set(x.partitions) for x in answer.assignment.topic_partitions}
            held[mid] = (answer.member_epoch, owned)
    return gids


def odd_consumer_group(rng, i, topic_id):
    """Records of an odd-cg-* group that read, with values the coordinator may write and,
    now and then, values it never writes."""
    gid = f"odd-cg-{i}"
    big, top = 0x7FFFFFFF, MAX_EPOCH - 1  # an int32's top; the highest epoch kept
    out = []

    def pick(kept, never):
        return rng.choice(never if rng.random() < 0.03 else kept)

    def add(record_type, key, value):
        names = [f.name for f in record_type.key.fields]
        k = encode_key(record_type, dict(zip(names, (gid, *key))))
        out.append(("__consumer_offsets", gid, k, encode_value(record_type, value)))

    tids = [topic_id, topic_id, uuid.UUID(int=rng.randrange(1 << 128))]

    def parts():
        return [
            {"topic_id": rng.choice(tids), "partitions": rng.sample([-1, 0, 1, 3, 99, big], 2)}
            for _ in range(rng.randrange(3))
        ]

    if rng.random() < 0.8:
        add(CONSUMER_GROUP_METADATA, (), {"epoch": pick([0, 1, 5, top], [top + 1, big, -1])})
    if rng.random() < 0.6:
        epoch = pick([0, 1, 5, top], [top + 1, big, -1])
        add(CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, (), {"assignment_epoch": epoch})
    if rng.random() < 0.5:
        topics = [
            {
                "topic_id": rng.choice(tids),
                "topic_name": rng.choice(["t", "nope", ""]),
                "num_partitions": rng.choice([-1, 0, 4, big]),
                "partition_metadata": [],
            }
            for _ in range(rng.randrange(3))
        ]
        add(CONSUMER_GROUP_PARTITION_METADATA, (), {"topics": topics})
    if rng.random() < 0.3:
        value = {"topics": ["t", "nope"], "version": 0, "timestamp": 1}
        add(CONSUMER_GROUP_REGULAR_EXPRESSION, (rng.choice(["t.*", "("]),), value)
    for n in range(rng.randrange(4)):
        mid = rng.choice(["a", "b", "", "c"])
        if rng.random() < 0.95:
            member = {
                "instance_id": pick([None, f"i{n}"], ["i"]),
                "rack_id": rng.choice([None, "r"]),
                "client_id": "c",
                "client_host": "/h",
                "subscribed_topic_names": rng.choice([[], ["t"], ["t", "nope", "t"]]),
                "subscribed_topic_regex": pick([None, None, "", "t.*", "x{99}"], ["(", "x{99999}"]),
                "rebalance_timeout_ms": rng.choice([-1, 0, 1, 3000, big]),
                "server_assignor": pick([None, "uniform", "range"], ["nope"]),
            }
            add(CONSUMER_GROUP_MEMBER_METADATA, (mid,), member)
        if rng.random() < 0.8:
            current = {
                "member_epoch": pick([-2, -1, 0, 1, 5, top], [-3, big]),
                "previous_member_epoch": pick([-1, 0, 4], [-3, big]),
                "state": pick([0, 0, 1, 2], [5, -1]),
                "assigned_partitions": parts(),
                "partitions_pending_revocation": parts(),
            }
            add(CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, (mid,), current)
        if rng.random() < 0.6:
            add(CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, (mid,), {"topic_partitions": parts()})
    return out


def consumer_group_record(rng, gid, topic_id, record_type=None):
    """(key, value) of a good record of a ConsumerGroup* type (random unless given), of
    group `gid`'s member m."""
    record_type = record_type or rng.choice(CONSUMER_GROUP_RECORDS)
    tp = [{"topic_id": topic_id, "partitions": [0, 1]}]
    values = {
        CONSUMER_GROUP_METADATA: {"epoch": 3},
        CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA: {"assignment_epoch": 3},
        CONSUMER_GROUP_PARTITION_METADATA: {
            "topics": [
                {
                    "topic_id": topic_id,
                    "topic_name": "t",
                    "num_partitions": 4,
                    "partition_metadata": [{"partition": 0, "racks": ["r"]}],
                }
            ]
        },
        CONSUMER_GROUP_REGULAR_EXPRESSION: {"topics": ["t"], "version": 1, "timestamp": 1},
        CONSUMER_GROUP_MEMBER_METADATA: {
            "instance_id": "i",
            "rack_id": None,
            "client_id": "c",
            "client_host": "/h",
            "subscribed_topic_names": ["t"],
            "subscribed_topic_regex": None,
            "rebalance_timeout_ms": 3000,
            "server_assignor": "uniform",
        },
        CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER: {"topic_partitions": tp},
        CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT: {
            "member_epoch": 3,
            "previous_member_epoch": 2,
            "state": 0,
            "assigned_partitions": tp,
            "partitions_pending_revocation": [],
        },
    }
    names = [f.name for f in record_type.key.fields]
    second = "t.*" if record_type is CONSUMER_GROUP_REGULAR_EXPRESSION else "m"
    key = encode_key(record_type, dict(zip(names, (gid, second))))
    return key, encode_value(record_type, values[record_type])


def group_requests(rng, gid, generation, member_ids, instance_ids):
    """(request, version) of the classic group APIs, as the group's members and others."""
    member = rng.choice([*member_ids, "", "stranger"])
    instance = rng.choice([*instance_ids, None, "other"])
    generation = rng.choice([generation, generation + 1, -1, 0])
    J, S, H, L = JoinGroupRequest, SyncGroupRequest, HeartbeatRequest, LeaveGroupRequest
    kind = rng.randrange(6)
    if kind == 0:
        v = rng.choice([0, 4, 5, 9])
        return J(
            group_id=gid,
            session_timeout_ms=6000,
            rebalance_timeout_ms=3000,
            member_id=member,
            group_instance_id=instance if v >= 5 else None,
            protocol_type=rng.choice(["consumer", "connect"]),
            protocols=[
                J.JoinGroupRequestProtocol(
                    name=rng.choice(["range", "other"]), metadata=b"\x00\x00\x00\x00\x00\x00"
                )
            ],
        ), v
    if kind == 1:
        v = rng.choice([0, 3, 5])
        return S(
            group_id=gid,
            generation_id=generation,
            member_id=member,
            group_instance_id=instance if v >= 3 else None,
            protocol_type="consumer",
            protocol_name="range",
            assignments=[S.SyncGroupRequestAssignment(member_id=member, assignment=b"")],
        ), v
    if kind == 2:
        v = rng.choice([0, 3, 4])
        return H(
            group_id=gid,
            generation_id=generation,
            member_id=member,
            group_instance_id=instance if v >= 3 else None,
        ), v
    if kind == 3:
        v = rng.choice([0, 3, 5])
        if v < 3:
            return L(group_id=gid, member_id=member), v
        return L(
            group_id=gid, members=[L.MemberIdentity(member_id=member, group_instance_id=instance)]
        ), v
    if kind == 4:
        return DescribeGroupsRequest(groups=[gid]), rng.choice([0, 5])
    return OffsetFetchRequest(group_id=gid, topics=None), rng.choice([2, 7])


def use_state(rng, groups, txns, clock, bad):
    """Drive what was loaded of the records `bad` (topic, id, key, value): Finding when a
    call raises or an answer does not encode at its version."""
    answers = []
    ids = [(t, gid) for t, gid, _, _ in bad if gid.startswith(("odd-", "good-cg-"))] or [
        (t, gid) for t, gid, _, _ in bad
    ]
    steps = [(*i, True) for i in ids] + [(*rng.choice(ids), False) for _ in range(60)]
    for topic, gid, first in steps:
        try:
            if "cg-" in gid:
                use_consumer_group(rng, groups, gid, first)
            elif topic == "__consumer_offsets":
                group = groups.groups.get(gid)
                members = list(group.members) if group is not None else []
                instances = list(group.static) if group is not None else []
                generation = group.generation if group is not None else 0
                request, version = group_requests(rng, gid, generation, members, instances)
                if first:  # what was loaded, described as it is
                    request, version = DescribeGroupsRequest(groups=[gid]), 5
                ctx = Context(0, "c", "127.0.0.1")
                # a JoinGroup's answer may come later, during another request: each answer
                # is encoded at the version of the request it answers
                groups.handle(
                    request.API_KEY,
                    version,
                    request,
                    ctx,
                    lambda a, v=version: answers.append((a, v)),
                )
                for answer, at in answers:
                    encode_response(answer, at, 1)
                answers.clear()
            else:
                txn = txns.transactions.get(gid)
                pid, epoch = (txn.producer_id, txn.epoch) if txn is not None else (-1, -1)
                now = int(clock[0] * 1000)
                kind = rng.randrange(4)
                if kind == 0:
                    txns.init(gid, 60000, rng.choice([-1, pid]), rng.choice([-1, epoch]), now)
                elif kind == 1 and txns.check(gid, pid, epoch) is None:
                    txns.verify(gid, pid, epoch, "t", rng.choice([0, 3]))
                    txns.begin(gid)
                elif kind == 2:
                    txns.end(gid, pid, epoch, rng.random() < 0.5, now)
                else:
                    txns.expire(now)
            clock[0] += rng.choice([0.1, 5, 400])
            groups.tick()
        except Exception as e:  # noqa: BLE001 - the contract: no exception
            raise Finding(f"using what {gid!r} loaded: {type(e).__name__}: {e}") from None


def use_consumer_group(rng, groups, gid, first):
    """A ConsumerGroupHeartbeat (join, heartbeat, leave) from a member or a stranger at an
    epoch near its own, or a ConsumerGroupDescribe; its answer encodes."""
    group = groups.consumer.groups.get(gid)
    if first or rng.random() < 0.15:
        request = ConsumerGroupDescribeRequest(group_ids=[gid], include_authorized_operations=True)
        answers = []
        groups.handle(request.API_KEY, 1, request, Context(0, "c", "127.0.0.1"), answers.append)
        encode_response(answers[0], 1, 1)
        return
    members = list(group.members.values()) if group is not None else []
    member = rng.choice([*members, None])
    mid = member.member_id if member is not None else rng.choice(["stranger", "a", ""])
    epoch = member.epoch if member is not None else 0
    epoch = rng.choice([epoch, epoch, epoch + 1, epoch - 1, 0, -1, -2])
    owned = {t: set(ps) for t, ps in member.assigned.items()} if member is not None else {}
    owned = rng.choice([owned, {}, None])
    instance = member.instance_id if member is not None else rng.choice([None, "i", "i0"])
    if epoch not in (-1, -2, 0) and epoch < 0:
        epoch = 0
    cg_heartbeat(groups, gid, mid or "x", epoch, owned, instance)


def good_values(rng):
    offsets = {
        (f"good-{g}", "t", p): (
            rng.randrange(1 << 40),
            rng.randrange(-1, 9),
            "m" * rng.randrange(3),
        )
        for g in range(3)
        for p in range(rng.randrange(1, 4))
    }
    tids = {f"good-tx-{i}": None for i in range(rng.randrange(1, 3))}
    return offsets, tids


def hostile_records(rng, topic_id):
    """(topic, id, key, value) of records mutated from good encodings, under bad-* ids; or,
    in some cases, only odd consumer groups' records (so that more loads succeed and what
    they loaded is used)."""
    out = []
    if rng.random() < 0.4:
        for i in range(rng.randrange(1, 4)):
            out += odd_consumer_group(rng, i, topic_id)
        return out
    for i in range(rng.randrange(1, 4)):
        gid = f"bad-{i}"
        kind = rng.randrange(4)
        if kind == 3:  # a consumer group's record, after its member's (kept good)
            topic, gid = "__consumer_offsets", f"bad-cg-{i}"
            member = consumer_group_record(rng, gid, topic_id, CONSUMER_GROUP_MEMBER_METADATA)
            out.append((topic, gid, *member))
            key, value = consumer_group_record(rng, gid, topic_id)
        elif kind == 0:
            topic = "__consumer_offsets"
            key = encode_key(OFFSET_COMMIT, {"group": gid, "topic": "t", "partition": 0})
            value = encode_value(
                OFFSET_COMMIT,
                {"offset": 5, "metadata": "x", "commit_timestamp": 1},
                rng.choice([0, 1, 2, 3, 4]),
            )
        elif kind == 1:
            topic = "__consumer_offsets"
            key = encode_key(GROUP_METADATA, {"group": gid})
            member = {
                "member_id": "m",
                "group_instance_id": None,
                "client_id": "c",
                "client_host": "/h",
                "rebalance_timeout": 1,
                "session_timeout": 6000,
                "subscription": b"\x00\x00\x00\x00\x00\x00",
                "assignment": b"",
            }
            value = encode_value(
                GROUP_METADATA,
                {
                    "protocol_type": "consumer",
                    "generation": 2,
                    "protocol": "range",
                    "leader": "m",
                    "members": [member],
                },
                rng.choice([0, 1, 2, 3, 4]),
            )
        else:
            topic = "__transaction_state"
            gid = f"bad-tx-{i}"
            key = encode_key(TRANSACTION_LOG, {"transactional_id": gid})
            value = encode_value(
                TRANSACTION_LOG,
                {
                    "producer_id": rng.randrange(1 << 20),
                    "producer_epoch": rng.randrange(5),
                    "transaction_timeout_ms": 60000,
                    "transaction_status": rng.randrange(8),
                    "transaction_partitions": [{"topic": "t", "partition_ids": [0]}],
                    "transaction_last_update_timestamp_ms": 1,
                    "transaction_start_timestamp_ms": 1,
                },
                rng.choice([0, 1]),
            )
        key, value = mutate(rng, key), mutate(rng, value)
        out.append((topic, gid, key, value))
    for i in range(rng.randrange(3)):
        out.append(odd_values(rng, i))
    for i in range(rng.randrange(3)):
        out += odd_consumer_group(rng, i, topic_id)
    return out


def odd_values(rng, i):
    """(topic, id, key, value) of a record that reads, with values the coordinators never
    write."""
    if rng.random() < 0.6:
        gid = f"odd-{i}"
        twice = rng.random() < 0.1  # a member id or instance id twice: refused
        count = rng.randrange(4)
        ids = ["a", "b", ""] if not twice else ["a", "a", "a"]
        instances = [None, "i", "j"] if not twice else ["i", "i", "i"]
        members = [
            {
                "member_id": ids[n],
                "group_instance_id": rng.choice([None, instances[n]]),
                "client_id": "c",
                "client_host": "/h",
                "rebalance_timeout": rng.choice([-1, 0, 1, 3000, 0x7FFFFFFF]),
                "session_timeout": rng.choice([-1, 0, 1, 6000, 0x7FFFFFFF]),
                "subscription": rng.choice([b"", b"\x00\x00\x00\x00\x00\x00", b"\xff" * 7]),
                "assignment": rng.choice([b"", b"\x00"]),
            }
            for n in range(count)
        ]
        fields = {
            "protocol_type": rng.choice(["consumer", "", "connect"]),
            "generation": rng.choice([-1, 0, 1, 0x7FFFFFFE, 0x7FFFFFFF, 0x7FFFFFFF]),
            "protocol": rng.choice([None, "range", "range", "other"]),
            "leader": rng.choice([None, "a", "zz", ""]),
            "members": members,
        }
        value = encode_value(GROUP_METADATA, fields, rng.choice([3, 4]))
        key = encode_key(GROUP_METADATA, {"group": gid})
        return "__consumer_offsets", gid, key, value
    tid = f"odd-tx-{i}"
    fields = {
        "producer_id": rng.choice([0, 5, (1 << 62) - 1]),
        "producer_epoch": rng.choice([0, 32766, 32767]),
        "transaction_timeout_ms": rng.choice([1, 60000, 0x7FFFFFFF]),
        "transaction_status": rng.randrange(8),
        "transaction_partitions": rng.choice(
            [
                None,
                [],
                [{"topic": "t", "partition_ids": [0, -1, 99]}],
                [{"topic": "nope", "partition_ids": [0]}],
            ]
        ),
        "transaction_last_update_timestamp_ms": 1,
        "transaction_start_timestamp_ms": rng.choice([-1, 1]),
    }
    value = encode_value(TRANSACTION_LOG, fields, rng.choice([0, 1]))
    return "__transaction_state", tid, encode_key(TRANSACTION_LOG, {"transactional_id": tid}), value


def mutate(rng, data):
    if data is None or rng.random() < 0.3:
        return data
    data = bytearray(data)
    what = rng.randrange(6)
    if what == 0 and data:
        for _ in range(rng.randrange(1, 4)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif what == 1:
        del data[rng.randrange(len(data) + 1) :]
    elif what == 2:
        data += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 20)))
    elif what == 3 and len(data) >= 2:
        struct.pack_into(">h", data, 0, rng.choice([-1, 5, 99, 32767]))
    elif what == 4:
        return None if rng.random() < 0.5 else b""
    elif what == 5 and len(data) > 4:
        i = rng.randrange(len(data) - 4)
        struct.pack_into(">i", data, i, rng.choice([-2, -1, 0x7FFFFFFF, 1 << 20]))
    return bytes(data)


def one_case(path, rng):
    storage, cluster, groups, txns = open_state(path)
    offsets, tids = good_values(rng)
    for (g, t, p), (offset, epoch, meta) in offsets.items():
        for _ in range(rng.randrange(4)):  # earlier commits: what compaction removes
            groups.offsets.commit(g, t, p, Committed(rng.randrange(1000), -1, "", 0.0))
        groups.offsets.commit(g, t, p, Committed(offset, epoch, meta, 0.0))
    for p in range(rng.randrange(3)):  # offsets deleted: tombstones
        groups.offsets.commit("deleted", "t", p, Committed(1, -1, "", 0.0))
        groups.offsets.delete("deleted", "t", p)
    for tid in tids:
        txns.init(tid, 60000)
    good_cg = good_consumer_groups(rng, groups)
    check_owned_once(groups, good_cg)
    expected_cg = {g: v for g, v in consumer_snapshot(groups).items() if g in good_cg}
    bad = hostile_records(rng, cluster.topics["t"].id)
    # some cases write only the good records: their load, compaction and reload are checked
    only_good = rng.random() < 0.4
    written = {}  # (topic, partition) -> offsets of mutated records
    for topic, gid, key, value in [] if only_good else bad:
        index = cluster.coordinator_partition(gid)
        log = cluster.internal_topic(topic).partitions[index].log
        data = records.write_batch([records.Record(timestamp=1, key=key, value=value)])
        written.setdefault(f"{topic}-{index}", set()).add(log.log_end)
        log.append(read_batch_head(data), data)
    expected_offsets = {k: v for k, v in offsets.items()}
    expected_tx = {
        tid: (txns.transactions[tid].producer_id, txns.transactions[tid].epoch) for tid in tids
    }
    storage.close()
    try:
        storage, cluster, groups, txns = open_state(path)
    except CoordinatorStateError as e:
        m = re.match(r"(__\w+-\d+), offset (\d+): ", str(e))
        if m is None or int(m.group(2)) not in written.get(m.group(1), ()):
            raise Finding(f"the error does not name a mutated record: {e}") from None
        return "refused"
    except Exception as e:  # noqa: BLE001 - the contract: no other exception
        raise Finding(f"load failed: {type(e).__name__}: {e}") from None
    try:
        first = snapshot(groups, txns)
        for key, value in expected_offsets.items():
            if first[0].get(key) != value:
                raise Finding(f"good offset {key} came back as {first[0].get(key)}, not {value}")
        for tid, (pid, epoch) in expected_tx.items():
            got = first[2].get(tid)
            if got is None or got[:2] != (pid, epoch):
                raise Finding(f"good transactional id {tid} came back as {got}, not {(pid, epoch)}")
        loaded_cg = consumer_snapshot(groups)
        for gid, value in expected_cg.items():
            if loaded_cg.get(gid) != value:
                raise Finding(f"good consumer group {gid} came back as {loaded_cg.get(gid)}")
        check_owned_once(groups, good_cg)
    finally:
        storage.close()
    clock = [time.monotonic()]
    storage, cluster, groups, txns = open_state(path, lambda: clock[0])
    try:
        second = snapshot(groups, txns)
        if (second[0], second[2]) != (first[0], first[2]):
            raise Finding("a second load gave another state")
        if consumer_snapshot(groups) != loaded_cg:
            raise Finding("a second load gave other consumer groups")
        use_state(rng, groups, txns, clock, bad + [("", g, None, None) for g in good_cg])
        check_owned_once(groups, good_cg)
        used_cg = consumer_snapshot(groups)
    finally:
        storage.close()
    try:  # what the coordinators wrote while used loads back
        storage, cluster, groups, txns = open_state(path)
    except Exception as e:  # noqa: BLE001 - the contract: no exception
        raise Finding(f"what the coordinators wrote does not load: {type(e).__name__}: {e}")
    try:
        again = consumer_snapshot(groups)
        for gid in used_cg.keys() | again.keys():
            if used_cg.get(gid) != again.get(gid):
                raise Finding(
                    f"consumer group {gid} was {used_cg.get(gid)}, loaded back as {again.get(gid)}"
                )
    finally:
        storage.close()
    return "loaded, compacted" if compact_and_reload(path) else "loaded"


def run(loop, seed):
    import random

    rng = random.Random(seed)
    outcomes = {}
    failures = 0
    for case in range(loop):
        path = tempfile.mkdtemp(prefix="fk-coordinator-state-")
        try:
            outcome = one_case(path, rng)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
        except Finding as f:
            failures += 1
            print(f"case {case}: {f}", file=sys.stderr)
        finally:
            shutil.rmtree(path, ignore_errors=True)
    print(f"{loop} cases, {failures} findings; {outcomes}")
    return failures


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--loop", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    logging.getLogger("fastkwire.broker").setLevel(logging.ERROR)  # skipped records: expected
    return 1 if run(args.loop, args.seed) else 0


if __name__ == "__main__":
    sys.exit(main())
