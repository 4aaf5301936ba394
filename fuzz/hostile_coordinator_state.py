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

from fastkwire import (
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
    GROUP_METADATA,
    OFFSET_COMMIT,
    TRANSACTION_LOG,
    encode_key,
    encode_value,
)
from fastkwire.broker._cluster import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from fastkwire.broker._compaction import LogCleaner
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
        groups = GroupCoordinator(clock=clock, topic_partitions=cluster.partition_count)
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
        before = snapshot(groups, txns)
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
        after = snapshot(groups, txns)
        for name, b, a in zip(("offsets", "classic groups", "transactions"), before, after):
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
    ids = [(topic, gid) for topic, gid, _, _ in bad if gid.startswith("odd-")] or [
        (topic, gid) for topic, gid, _, _ in bad
    ]
    steps = [(*i, True) for i in ids] + [(*rng.choice(ids), False) for _ in range(60)]
    for topic, gid, first in steps:
        try:
            if topic == "__consumer_offsets":
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


def hostile_records(rng):
    """(topic, id, key, value) of records mutated from good encodings, under bad-* ids."""
    out = []
    for i in range(rng.randrange(1, 4)):
        gid = f"bad-{i}"
        kind = rng.randrange(3)
        if kind == 0:
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
    bad = hostile_records(rng)
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
    finally:
        storage.close()
    clock = [time.monotonic()]
    storage, cluster, groups, txns = open_state(path, lambda: clock[0])
    try:
        second = snapshot(groups, txns)
        if (second[0], second[2]) != (first[0], first[2]):
            raise Finding("a second load gave another state")
        use_state(rng, groups, txns, clock, bad)
    finally:
        storage.close()
    try:  # what the coordinators wrote while used loads back
        storage, cluster, groups, txns = open_state(path)
    except Exception as e:  # noqa: BLE001 - the contract: no exception
        raise Finding(f"what the coordinators wrote does not load: {type(e).__name__}: {e}")
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
