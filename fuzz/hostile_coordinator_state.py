"""Hostile records in the coordinators' internal topics, read back by a broker's start.

    python3 fuzz/hostile_coordinator_state.py --loop 2000 --seed 1

A log directory gets good records (committed offsets, a classic group, transactional ids,
written by the coordinators' own hooks) and, under other keys, records mutated from good
ones (bits flipped, cut short, grown, another version or record type, a null key), each
in a valid batch, so that the bytes reach the records' decoder. A broker's state is then
loaded from it. The contract, checked for each: the load either succeeds, with every good
record's state back exactly, or fails with CoordinatorStateError naming the partition and
the offset of a mutated record; never another exception. A second load of what the first
left gives the same state. The exit status is 1 if any input broke it.
"""

import argparse
import logging
import re
import shutil
import struct
import sys
import tempfile
import time

from fastkwire import records
from fastkwire.broker import Cluster, read_batch_head
from fastkwire.broker._coordinator_records import (
    GROUP_METADATA,
    OFFSET_COMMIT,
    TRANSACTION_LOG,
    encode_key,
    encode_value,
)
from fastkwire.broker._coordinator_state import CoordinatorState, CoordinatorStateError
from fastkwire.broker._disk_logs import DiskLogs
from fastkwire.broker._groups import GroupCoordinator
from fastkwire.broker._offsets import Committed
from fastkwire.broker._transactions import TransactionCoordinator

NODES = {0: ("127.0.0.1", 9092)}
PARTITIONS = 2


class Finding(Exception):
    pass


def open_state(path):
    storage = DiskLogs(path)
    cluster = Cluster(NODES, cluster_id=storage.cluster_id(), offsets_topic_partitions=PARTITIONS)
    try:
        storage.attach(cluster, settle=False)
        cluster.create_topic("t", 4) if "t" not in cluster.topics else None
        groups = GroupCoordinator(topic_partitions=cluster.partition_count)
        txns = TransactionCoordinator(cluster, time.monotonic, groups.end_transaction)
        CoordinatorState(storage, cluster, groups, txns).load()
    except BaseException:
        storage.close()
        raise
    return storage, cluster, groups, txns


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
    return out


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
        groups.offsets.commit(g, t, p, Committed(offset, epoch, meta, 0.0))
    for tid in tids:
        txns.init(tid, 60000)
    bad = hostile_records(rng)
    written = {}  # (topic, partition) -> offsets of mutated records
    for topic, gid, key, value in bad:
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
    storage, cluster, groups, txns = open_state(path)
    try:
        second = snapshot(groups, txns)
    finally:
        storage.close()
    if (second[0], second[2]) != (first[0], first[2]):
        raise Finding("a second load gave another state")
    return "loaded"


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
