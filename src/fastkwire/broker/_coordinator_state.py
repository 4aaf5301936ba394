"""The coordinators' state in a log directory, kept as Kafka keeps it: every change is a
record (`_coordinator_records`) appended to an internal topic's partition, the one the
group or transactional id hashes to (as FindCoordinator picks it), and a restart replays
those partitions, the last record of each key winning and a tombstone deleting it.

- `__consumer_offsets`: each committed offset (OffsetCommit: OffsetCommit, the end of a
  transaction that committed offsets, and a tombstone for OffsetDelete, DeleteGroups and
  retention), each classic group's generation, protocol, leader and members when a
  rebalance ends (GroupMetadata; a tombstone when the group is deleted), each KIP-848
  consumer group's epochs, subscriptions and assignments as they change (the
  ConsumerGroup* records, `_consumer_group_records`; tombstones for a member gone and a
  group deleted).
- `__transaction_state`: each transactional id's producer id, epoch, timeout, state and
  the partitions of its transaction under way.
- `fastkwire-producer-ids`: the end of the block of producer ids being handed out (Kafka
  keeps it in its metadata log), so that no id is given twice across a restart.

On load, offsets keep their commit times (retention counts from them); a group with
offsets but no GroupMetadata (a simple group) comes back empty; a
classic group with members comes back Stable, its members' sessions running from the
load, as Kafka's coordinator loads them; a KIP-848 group comes back with its members,
their epochs and assignments, their sessions (and the rebalance timeouts of members
revoking partitions) running from the load, as Kafka's onLoaded. A group id with both a
classic and a consumer group's records is the group of its later record; the other's
records get tombstones. A transaction that was committing or aborting
completes; one still open is aborted and its producer fenced (Kafka aborts it at its
timeout; here at the load). Records of a type or value version not known here are
skipped (and counted in `skipped`), as Kafka's loader skips unknown record types; a
record that is not what its type says stops the load with `CoordinatorStateError` naming
the partition, the offset and the field.

KIP-1071 streams groups keep their offsets; their members and epochs are not written (they
come back as empty groups), and offsets committed in a transaction
are written when it commits (Kafka writes them at once, with the transaction's markers:
read back, such records count once a COMMIT marker ends their transaction, and not when it
aborts or never ends).
"""

import collections
import logging
import os
import re
import time

from .. import records
from ._cluster import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from ._consumer_group_records import (
    ConsumerGroupWriter,
    encode_record_value,
    restore_consumer_groups,
)
from ._coordinator_records import (
    CONSUMER_GROUP_RECORDS,
    DEAD,
    GROUP_METADATA,
    OFFSET_COMMIT,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    PREPARE_EPOCH_FENCE,
    TRANSACTION_LOG,
    RecordFormatError,
    UnknownRecordError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    record_type_of,
)
from ._log import read_batch_head
from ._offsets import Committed
from ._segment_files import read_checkpoint, write_checkpoint

_log = logging.getLogger("fastkwire.broker")
PRODUCER_IDS_FILE = "fastkwire-producer-ids"
READ_CHUNK_BYTES = 1 << 20  # of a log read back at a time (whole batches, at least one)
MAX_PRODUCER_ID = 1 << 62  # ids kept at or past it (damaged, hostile) move no id handed out
_ID_DIGITS = re.compile("[0-9]{1,19}")
# GroupMetadataValue's member fields, in the order ClassicGroups.restore takes them
_MEMBER_FIELDS = (
    "member_id",
    "group_instance_id",
    "client_id",
    "client_host",
    "rebalance_timeout",
    "session_timeout",
    "subscription",
    "assignment",
)


class CoordinatorStateError(ValueError):
    """A record of an internal topic that cannot be read back; names where it is."""


class CoordinatorState:
    """The group and transaction coordinators' state kept in `storage` (a DiskLogs that
    `attach(cluster, settle=False)` has read). `load()` once, before the broker serves."""

    def __init__(self, storage, cluster, groups, transactions, wall_clock=time.time):
        self.storage = storage
        self.cluster = cluster
        self.groups = groups  # a GroupCoordinator, or None
        self.transactions = transactions
        self.wall_clock = wall_clock
        self.skipped = 0  # records of an unknown type or version, left as they are
        self._started_ms = {}  # transactional id -> when its transaction under way began
        self._consumer_writer = None  # a ConsumerGroupWriter, once loaded
        self._classic_kept = set()  # group ids with a GroupMetadata record not deleted

    # ---------------------------------------------------------------- loading

    def load(self):
        ids = self.cluster.producer_ids
        for entry in read_checkpoint(self._producer_ids_path):
            # ASCII digits only, at most 19 of them: str.isdigit() passes "²", which int()
            # refuses, and int() refuses thousands of digits (a damaged file: ignored)
            if len(entry) == 1 and _ID_DIGITS.fullmatch(entry[0]):
                if int(entry[0]) < MAX_PRODUCER_ID:
                    ids.start_at(int(entry[0]))
        for name in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC):
            found = self.storage.internal_found.get(name)
            if found is not None:
                topic = self.cluster.internal_topic(name, found[0], found[1])
                self.storage.replay_internal(topic)
        if self.groups is not None:
            self._load_groups()
        prepared = self._load_transactions()
        self._install()
        self.transactions.settle_restored(prepared, self._now_ms())
        self.storage.abort_left_open()

    def _records(self, topic_name):
        """(RecordType, key fields, value fields or None, position) of every record of
        `topic_name`'s partitions that counts: a transactional batch's (Kafka's log holds
        TxnOffsetCommits so) only once its transaction commits, at its marker, never when
        it aborts or does not end. `position` (partition, offset) orders them: of a key's
        records the one with the highest wins, as Kafka's loader takes the later one."""
        topic = self.cluster.topics.get(topic_name)
        if topic is None:
            return
        for partition in topic.partitions:
            where = f"{topic_name}-{partition.index}"
            log = partition.log
            offset = log.log_start
            pending = {}  # producer id -> its open transaction's records
            while offset < log.log_end:  # a chunk at a time: the log may be large
                try:
                    batches = records.read_batches(log.read(offset, READ_CHUNK_BYTES))
                except ValueError as e:
                    raise CoordinatorStateError(
                        f"{where}, from offset {offset}: the batches do not read: {e}"
                    ) from None
                if not batches:
                    break
                for batch in batches:
                    if batch.is_control:  # a marker (its key read: 4 bytes at least)
                        ended = pending.pop(batch.producer_id, [])
                        if batch.records and batch.records[0].control_type == "commit":
                            yield from ended
                        continue
                    for record in batch.records:
                        found = self._decoded(topic_name, where, partition.index, record)
                        if batch.is_transactional:
                            pending.setdefault(batch.producer_id, []).append(found)
                        else:
                            yield found
                offset = batches[-1].base_offset + batches[-1].last_offset_delta + 1

    def _decoded(self, topic_name, where, index, record):
        position = (index, record.offset)
        where = f"{where}, offset {record.offset}"
        try:
            if record.key is None:
                raise RecordFormatError("a record without a key", 0)
            record_type, key_type = record_type_of(topic_name, record.key)
            key = decode_key(record_type, key_type, record.key)
            if record.value is None:
                return record_type, key, None, where, position
            _, value = decode_value(record_type, record.value)
            return record_type, key, value, where, position
        except UnknownRecordError as e:
            self.skipped += 1
            _log.warning("%s: skipped: %s", where, e)
            return None, None, None, where, position
        except RecordFormatError as e:
            raise CoordinatorStateError(f"{where}: {e}") from None

    def _load_groups(self):
        offsets, metadata, consumer = {}, {}, {}
        for record_type, key, value, where, position in self._records(OFFSETS_TOPIC):
            if record_type is OFFSET_COMMIT:
                _later(offsets, (key["group"], key["topic"], key["partition"]), position, value)
            elif record_type is GROUP_METADATA:
                value = value if value is None else _checked_group(value, where)
                _later(metadata, key["group"], position, value)
            elif record_type in CONSUMER_GROUP_RECORDS:
                held = (record_type, tuple(key.values()))
                _later(consumer, held, position, None if value is None else (value, where))
        stale = self._one_kind_per_group(metadata, consumer)
        found = {k: v for k, (_, v) in consumer.items() if v is not None}
        written = restore_consumer_groups(self.groups.consumer, found, CoordinatorStateError)
        self._consumer_writer = ConsumerGroupWriter(self.groups.consumer, written)
        store = self.groups.offsets
        for (group_id, topic, partition), (_, value) in offsets.items():
            if value is not None:
                committed = Committed(
                    value["offset"],
                    value["leader_epoch"],
                    value["metadata"],
                    self._on_clock(value["commit_timestamp"]),  # retention counts from it
                )
                store.commit(group_id, topic, partition, committed)
        classic = self.groups.classic
        for group_id, (_, value) in metadata.items():
            if value is not None:
                members = [tuple(m[name] for name in _MEMBER_FIELDS) for m in value["members"]]
                classic.restore(
                    group_id,
                    value["generation"],
                    value["protocol_type"],
                    value["protocol"],
                    value["leader"],
                    members,
                    self._on_clock(value["current_state_timestamp"]),
                )
        self._classic_kept = set(classic.groups)
        for write in stale:
            write()
        for group_id in store.groups():
            if group_id in self.groups.consumer.groups:
                continue
            if group_id not in classic.groups:  # a simple group: its offsets are what it has
                group = classic.new_group(group_id)
                # its offsets expire by their commit times alone, as Kafka's without a state
                group.state_since = float("-inf")

    def _one_kind_per_group(self, metadata, consumer):
        """Leave in `metadata` (classic groups) and `consumer` (consumer groups' records) each
        group id of one kind only, the one of its later record (an empty group of one
        protocol gives way to the other); returns the writes of the tombstones of the
        other's records."""
        latest = {}
        for (_, key), (position, value) in consumer.items():
            if value is not None and latest.get(key[0], position) <= position:
                latest[key[0]] = position
        stale = []
        for group_id, position in latest.items():
            held = metadata.get(group_id)
            if held is None or held[1] is None:
                continue
            if held[0] > position:  # the classic group came later
                for k in [k for k in consumer if k[1][0] == group_id]:
                    del consumer[k]
                    stale.append(lambda g=group_id, k=k: self._write_consumer(g, [(k, None)]))
            else:
                del metadata[group_id]
                key = encode_key(GROUP_METADATA, {"group": group_id})
                stale.append(lambda g=group_id, k=key: self._write(OFFSETS_TOPIC, g, k, None))
        return stale

    def _load_transactions(self):
        states = {}
        for record_type, key, value, where, position in self._records(TRANSACTION_STATE_TOPIC):
            if record_type is TRANSACTION_LOG:
                _later(states, key["transactional_id"], position, (value, where))
        ids = self.cluster.producer_ids
        prepared = {}
        for tid, (_, (value, where)) in states.items():
            if value is None:
                continue
            status = _checked_transaction(value, where)
            if status == DEAD:
                continue
            partitions = [
                (p["topic"], index)
                for p in value["transaction_partitions"] or ()
                for index in p["partition_ids"]
            ]
            self.transactions.restore(
                tid,
                value["producer_id"],
                value["producer_epoch"],
                value["transaction_timeout_ms"],
                status,
                partitions,
                # idle since its last change, not since the start (transactional id expiry)
                self._on_clock(
                    value["transaction_last_update_timestamp_ms"], self.transactions.clock
                ),
            )
            if value["producer_id"] + 1 < MAX_PRODUCER_ID:  # room for the ids after it
                ids.start_at(value["producer_id"] + 1)
            if status in (PREPARE_COMMIT, PREPARE_ABORT, PREPARE_EPOCH_FENCE):
                prepared[tid] = status == PREPARE_COMMIT
        return prepared

    # ---------------------------------------------------------------- writing

    def _install(self):
        self.cluster.producer_ids.on_block = self._producer_ids_taken
        self.transactions.on_change = self._transaction_changed
        if self.groups is not None:
            self.groups.offsets.on_change = self._offset_changed
            self.groups.classic.on_store = self._group_stored
            self.groups.consumer.on_change = self._consumer_group_changed

    @property
    def _producer_ids_path(self):
        return os.path.join(self.storage.log_dir, PRODUCER_IDS_FILE)

    def _now_ms(self):
        return int(self.wall_clock() * 1000)

    def _on_clock(self, timestamp_ms, clock=None):
        """A wall-clock time a record holds, on the coordinator's clock (the group
        coordinator's unless `clock` is given): not later than now (-1, none kept: now)."""
        now = (clock or self.groups.clock)()
        if timestamp_ms < 0:
            return now
        return now - max(0, self._now_ms() - timestamp_ms) / 1000

    def _write(self, topic_name, id_, key, value):
        self._write_all(topic_name, id_, [(key, value)])

    def _write_all(self, topic_name, id_, keys_values):
        """Records of one change, in one batch (Kafka appends a change's records at once)."""
        topic = self.cluster.internal_topic(topic_name)
        partition = topic.partitions[self.cluster.coordinator_partition(id_)]
        now = self._now_ms()
        data = records.write_batch(
            [records.Record(timestamp=now, key=k, value=v) for k, v in keys_values]
        )
        partition.log.append(read_batch_head(data), data)

    def _write_consumer(self, group_id, typed_records):
        """[((record type, key fields), value fields or None)] of a consumer group."""
        now = self._now_ms()
        keys_values = []
        for (record_type, key), value in typed_records:
            names = [f.name for f in record_type.key.fields]
            key_bytes = encode_key(record_type, dict(zip(names, key)))
            keys_values.append((key_bytes, encode_record_value(record_type, value, now)))
        self._write_all(OFFSETS_TOPIC, group_id, keys_values)

    def _consumer_group_changed(self, group_id, member_id):
        changed = self._consumer_writer.changed(group_id, member_id)
        if not changed:
            return
        now = self._now_ms()
        keys_values = [(k, encode_record_value(t, v, now)) for t, k, v in changed]
        if group_id in self._classic_kept and group_id in self.groups.consumer.groups:
            # an empty classic group gave way to this one: its record goes, as Kafka's
            self._classic_kept.discard(group_id)
            keys_values.insert(0, (encode_key(GROUP_METADATA, {"group": group_id}), None))
        self._write_all(OFFSETS_TOPIC, group_id, keys_values)

    def _producer_ids_taken(self, end):
        write_checkpoint(self._producer_ids_path, [(end,)])

    def _offset_changed(self, group_id, topic, partition, committed):
        key = encode_key(OFFSET_COMMIT, {"group": group_id, "topic": topic, "partition": partition})
        value = None
        if committed is not None:
            value = encode_value(
                OFFSET_COMMIT,
                {
                    "offset": committed.offset,
                    "leader_epoch": committed.leader_epoch,
                    "metadata": committed.metadata or "",
                    "commit_timestamp": self._now_ms(),
                },
            )
        self._write(OFFSETS_TOPIC, group_id, key, value)

    def _group_stored(self, group, deleted):
        (self._classic_kept.discard if deleted else self._classic_kept.add)(group.group_id)
        key = encode_key(GROUP_METADATA, {"group": group.group_id})
        value = None
        if not deleted:
            value = encode_value(
                GROUP_METADATA,
                {
                    "protocol_type": group.protocol_type or "",
                    "generation": group.generation,
                    "protocol": group.protocol_name,
                    "leader": group.leader if group.members else None,
                    "current_state_timestamp": self._now_ms(),
                    "members": [
                        {
                            "member_id": m.member_id,
                            "group_instance_id": m.instance_id,
                            "client_id": m.client_id,
                            "client_host": m.client_host,
                            "rebalance_timeout": m.rebalance_timeout_ms,
                            "session_timeout": m.session_timeout_ms,
                            "subscription": m.metadata(group.protocol_name),
                            "assignment": m.assignment,
                        }
                        for m in group.members.values()
                    ],
                },
            )
        self._write(OFFSETS_TOPIC, group.group_id, key, value)

    def _transaction_changed(self, txn, status):
        tid = txn.transactional_id
        now = self._now_ms()
        if txn.ongoing:  # under way, or committing or aborting
            start = self._started_ms.setdefault(tid, now)
        else:
            start = -1
            self._started_ms.pop(tid, None)
        by_topic = {}
        for topic, index in sorted(txn.partitions):
            by_topic.setdefault(topic, []).append(index)
        value = encode_value(
            TRANSACTION_LOG,
            {
                "producer_id": txn.producer_id,
                "producer_epoch": txn.epoch,
                "transaction_timeout_ms": txn.timeout_ms,
                "transaction_status": status,
                "transaction_partitions": [
                    {"topic": t, "partition_ids": p} for t, p in by_topic.items()
                ],
                "transaction_last_update_timestamp_ms": now,
                "transaction_start_timestamp_ms": start,
            },
        )
        key = encode_key(TRANSACTION_LOG, {"transactional_id": tid})
        self._write(TRANSACTION_STATE_TOPIC, tid, key, value)


def _later(found, key, position, value):
    """found[key] = (position, value) unless it holds a record from later in the log."""
    held = found.get(key)
    if held is None or held[0] < position:
        found[key] = (position, value)


def _checked_group(value, where):
    """A GroupMetadataValue whose values a classic group can take back (a generation it
    counts from, not negative; a protocol for its members, which DescribeGroups answers; no
    member or instance id twice); CoordinatorStateError naming `where` for one it cannot."""
    problem = None
    if value["generation"] < 0:
        problem = f"generation {value['generation']}"
    elif value["members"] and value["protocol"] is None:
        problem = f"{len(value['members'])} members without a protocol"
    else:  # each member and static member once: the group's maps are keyed by them
        for field, what in (("member_id", "member id"), ("group_instance_id", "group instance id")):
            counts = collections.Counter(m[field] for m in value["members"])
            twice = [n for n, c in counts.items() if c > 1 and n is not None]
            if twice:
                problem = f"{what} {twice[0]!r} twice"
                break
    if problem is not None:
        raise CoordinatorStateError(f"{where}: GroupMetadataValue: {problem} is not one kept")
    return value


def _checked_transaction(value, where):
    """The status of a TransactionLogValue whose values a coordinator can take back;
    CoordinatorStateError naming `where` for one it cannot."""
    status = value["transaction_status"]
    problem = None
    if value["producer_id"] < 0:  # any other int64: ids handed out after it may pass 2**62
        problem = f"producer id {value['producer_id']}"
    elif value["producer_epoch"] < 0:
        problem = f"producer epoch {value['producer_epoch']}"
    elif value["transaction_timeout_ms"] <= 0:
        problem = f"transaction timeout {value['transaction_timeout_ms']} ms"
    elif not 0 <= status <= PREPARE_EPOCH_FENCE:
        problem = f"transaction status {status}"
    if problem is not None:
        raise CoordinatorStateError(f"{where}: TransactionLogValue: {problem} is not one kept")
    return status
