"""read_kafka / iter_kafka against a broker of our own (tests/log_broker.py): offsets of
every kind, several leaders, and the faults a real broker makes only now and then (leaders
moving, fenced epochs, offsets out of range, cut-off batches, corrupt batches, a broker
going away).
Real brokers' proof: test_kafka_arrow_broker.py and test_kafka_arrow_tansu.py."""

import datetime as dt
import struct

import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("numpy")

import fastkwire  # noqa: E402
from fastkwire import DecodeError, FetchResponse, records  # noqa: E402
from fastkwire.connection_errors import KafkaConnectionError  # noqa: E402
from fastkwire.kafka_arrow import SCHEMA, KafkaReadError, OffsetRange, plan  # noqa: E402
from fastkwire.records import Record, crc32c  # noqa: E402

import log_broker  # noqa: E402
from log_broker import CLOSE, LogBroker, PartitionLog  # noqa: E402

FETCH = fastkwire.FetchRequest.API_KEY


def keyed_log(partition, n, per_batch=10, compression="none", base_ts=1_000_000):
    """n records in batches of per_batch: value b"p<partition>-<offset>", every third key
    null, headers on odd offsets."""
    batches = []
    for base in range(0, n, per_batch):
        batch = [
            Record(
                key=None if o % 3 == 0 else b"k%d" % o,
                value=b"p%d-%d" % (partition, o),
                timestamp=base_ts + o,
                headers=[("h", b"%d" % o), ("h", None)] if o % 2 else [],
            )
            for o in range(base, min(base + per_batch, n))
        ]
        batches.append(records.write_batch(batch, base_offset=base, compression=compression))
    return batches


@pytest.fixture
def broker():
    logs = {("t", p): PartitionLog(keyed_log(p, 95)) for p in range(3)}
    b = LogBroker(logs)
    yield b
    b.close()


def values(table):
    return sorted(table.column("value").to_pylist())


def expect(partitions, lo, hi):
    return sorted(b"p%d-%d" % (p, o) for p in partitions for o in range(lo, hi))


def test_whole_topic(broker):
    table = fastkwire.read_kafka("t", bootstrap_servers=broker.bootstrap)
    assert table.schema == SCHEMA and table.num_rows == 285
    assert values(table) == expect(range(3), 0, 95)
    row = [r for r in table.to_pylist() if r["value"] == b"p1-7"][0]
    assert row == {
        "offset": 7,
        "key": b"k7",
        "value": b"p1-7",
        "topic": "t",
        "partition": 1,
        "timestamp": 1_000_007,
        "timestamp_type": 1,
        "headers": [("h", b"7"), ("h", None)],
    }
    # Rows of a partition come in offset order.
    for p in range(3):
        offsets = [r["offset"] for r in table.to_pylist() if r["partition"] == p]
        assert offsets == list(range(95))


def test_offsets_ints_dicts_and_datetimes(broker):
    read = fastkwire.read_kafka
    t = read(
        "t", bootstrap_servers=broker.bootstrap, start_offset=13, end_offset=41, partitions=[2]
    )
    assert values(t) == expect([2], 13, 41)
    t = read(
        "t",
        bootstrap_servers=broker.bootstrap,
        start_offset={"t": {0: 90}},
        end_offset={"t": {1: 5}},
        partitions=[0, 1],
    )
    assert values(t) == sorted(expect([0], 90, 95) + expect([1], 0, 5))
    # Timestamps are 1_000_000 + offset (ms): the first offset at or after each time.
    when = dt.datetime.fromtimestamp(1_000.050, tz=dt.timezone.utc)
    t = read("t", bootstrap_servers=broker.bootstrap, start_offset=when, partitions=[0])
    assert min(t.column("offset").to_pylist()) <= 50  # a batch's first offset at most
    assert max(t.column("offset").to_pylist()) == 94
    later = dt.datetime(2100, 1, 1)
    t = read("t", bootstrap_servers=broker.bootstrap, start_offset=later)
    assert t.num_rows == 0 and t.schema == SCHEMA


def test_iter_kafka_yields_bounded_batches(broker):
    batches = list(fastkwire.iter_kafka("t", bootstrap_servers=broker.bootstrap, block_size=1024))
    assert all(b.schema == SCHEMA for b in batches)
    assert len(batches) > 10  # many small answers, not one
    assert sum(b.num_rows for b in batches) == 285


def test_plan_splits_ranges(broker):
    ranges = plan("t", bootstrap_servers=broker.bootstrap, records_per_range=40, partitions=[0])
    assert ranges == [
        OffsetRange("t", 0, 0, 40),
        OffsetRange("t", 0, 40, 80),
        OffsetRange("t", 0, 80, 95),
    ]


def test_several_leaders_at_once():
    logs = {("t", p): PartitionLog(keyed_log(p, 50)) for p in range(4)}
    brokers = log_broker.cluster([LogBroker(logs, node_id=n) for n in (1, 2)])
    try:
        for b in brokers:
            b.leaders = {("t", p): 1 + p % 2 for p in range(4)}
        table = fastkwire.read_kafka("t", bootstrap_servers=brokers[0].bootstrap)
        assert values(table) == expect(range(4), 0, 50)
        assert all(b.requests.get(FETCH, 0) >= 2 for b in brokers)  # both leaders served
    finally:
        for b in brokers:
            b.close()


@pytest.mark.parametrize("error", [6, 74])  # NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH
def test_leader_moves_mid_read(error):
    logs = {("t", 0): PartitionLog(keyed_log(0, 60))}
    brokers = log_broker.cluster([LogBroker(logs, node_id=n) for n in (1, 2)])
    first, second = brokers
    fetches = []

    def move_after_two(key, version, request):
        if key == FETCH:
            fetches.append(request.topics[0].partitions[0].fetch_offset)
            if len(fetches) == 3:
                for b in brokers:  # the partition moves to broker 2, with a new epoch
                    b.leaders[("t", 0)] = 2
                    b.epochs[("t", 0)] = 1
                return _fetch_error(request, error)
        return None

    first.fault = move_after_two
    try:
        table = fastkwire.read_kafka("t", bootstrap_servers=first.bootstrap, block_size=1024)
        assert values(table) == expect([0], 0, 60)
        assert second.requests.get(FETCH, 0) >= 1
    finally:
        for b in brokers:
            b.close()


def _fetch_error(request, code, **fields):
    return FetchResponse(
        responses=[
            FetchResponse.FetchableTopicResponse(
                topic=t.topic,
                partitions=[
                    FetchResponse.PartitionData(
                        partition_index=p.partition, error_code=code, high_watermark=-1, **fields
                    )
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    )


def test_offset_out_of_range_names_partition_and_range(broker):
    def deleted(key, version, request):
        if key == FETCH and request.topics[0].partitions[0].partition_max_bytes > 1:
            return _fetch_error(request, 1, log_start_offset=50)
        return None

    broker.fault = deleted
    with pytest.raises(KafkaReadError) as info:
        fastkwire.read_kafka("t", bootstrap_servers=broker.bootstrap, partitions=[1])
    text = str(info.value)
    assert "topic 't' partition 1" in text and "offset 0 is out of range" in text
    assert "50" in text and info.value.partition == 1


def test_batches_cut_off_at_the_end_of_an_answer(broker):
    def cut(key, version, request):
        if key != FETCH:
            return None
        answer = broker._fetch(request)
        for t in answer.responses:
            for p in t.partitions:
                if len(p.records) > 200:  # keep whole batches, then half of one more
                    p.records = bytes(p.records[: len(p.records) - 37])
        return answer

    broker.fault = cut
    table = fastkwire.read_kafka("t", bootstrap_servers=broker.bootstrap, block_size=4096)
    assert values(table) == expect(range(3), 0, 95)


def test_compacted_gaps_and_every_codec():
    pytest.importorskip("cramjam")
    batches = []
    for i, codec in enumerate(["none", "gzip", "snappy", "lz4", "zstd"]):
        kept = [
            Record(offset=i * 10 + d, timestamp=5, key=b"k", value=b"%d" % (i * 10 + d))
            for d in (0, 4, 9)
        ]
        batches.append(records.write_batch(kept, base_offset=i * 10, compression=codec))
    b = LogBroker({("c", 0): PartitionLog(batches)})
    try:
        table = fastkwire.read_kafka(
            "c", bootstrap_servers=b.bootstrap, start_offset=4, end_offset=49
        )
        assert table.column("offset").to_pylist() == [
            o for i in range(5) for o in (i * 10, i * 10 + 4, i * 10 + 9) if 4 <= o < 49
        ]
    finally:
        b.close()


def control_batch(offset, producer_id, abort):
    data = bytearray(
        records.write_batch(
            [Record(key=struct.pack(">hh", 0, 0 if abort else 1), value=b"\0\0\0\0\0\5")],
            base_offset=offset,
            producer_id=producer_id,
            producer_epoch=0,
            is_transactional=True,
        )
    )
    struct.pack_into(">h", data, 21, struct.unpack_from(">h", data, 21)[0] | 0x20)
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


def test_aborted_transactions_and_markers():
    txn = dict(producer_id=7, producer_epoch=0, is_transactional=True)
    rec = [Record(value=b"a%d" % i, timestamp=1) for i in range(3)]
    batches = [
        records.write_batch(rec, base_offset=0, **txn),
        control_batch(3, 7, abort=True),
        records.write_batch(rec, base_offset=4, **txn),
        control_batch(7, 7, abort=False),
        records.write_batch(rec, base_offset=8),
    ]
    b = LogBroker({("x", 0): PartitionLog(batches, aborted=[(7, 0)])})
    try:
        read = fastkwire.read_kafka
        committed = read("x", bootstrap_servers=b.bootstrap, isolation_level="read_committed")
        assert committed.column("offset").to_pylist() == [4, 5, 6, 8, 9, 10]
        everything = read("x", bootstrap_servers=b.bootstrap)
        assert everything.column("offset").to_pylist() == [0, 1, 2, 4, 5, 6, 8, 9, 10]
    finally:
        b.close()


def test_corrupt_batch_raises_never_a_partial_table():
    batches = keyed_log(0, 40)
    bad = bytearray(batches[2])
    bad[70] ^= 0xFF
    batches[2] = bytes(bad)
    b = LogBroker({("t", 0): PartitionLog(batches)})
    try:
        with pytest.raises(DecodeError) as info:
            fastkwire.read_kafka("t", bootstrap_servers=b.bootstrap, block_size=1024)
        assert "CRC32C" in str(info.value)
        # whose bytes: the partition, the offset fetched from and the broker
        assert f"topic 't' partition 0 from offset 0 (broker 1 ({b.bootstrap})) records: " in str(
            info.value
        )
    finally:
        b.close()


def test_a_dropped_connection_is_retried():
    b = LogBroker({("t", 0): PartitionLog(keyed_log(0, 200))})
    fetches = []

    def drop_once(key, version, request):
        if key == FETCH:
            fetches.append(request.topics[0].partitions[0].fetch_offset)
            if len(fetches) == 4:
                return CLOSE
        return None

    b.fault = drop_once
    try:
        table = fastkwire.read_kafka("t", bootstrap_servers=b.bootstrap, block_size=1024)
        assert values(table) == expect([0], 0, 200)
        assert fetches[3] == fetches[4]  # the lost answer asked again
    finally:
        b.close()


def test_broker_going_away_mid_read():
    b = LogBroker({("t", 0): PartitionLog(keyed_log(0, 200))})
    fetches = []

    def die(key, version, request):
        if key == FETCH:
            fetches.append(1)
            if len(fetches) == 4:
                b.stop_listening()  # and no reconnecting either
                return CLOSE
        return None

    b.fault = die
    try:
        with pytest.raises(KafkaReadError) as info:
            fastkwire.read_kafka("t", bootstrap_servers=b.bootstrap, block_size=1024)
        text = str(info.value)
        assert "topic 't' partition 0 could not be read from offset" in text
        assert b.bootstrap in text
        assert isinstance(info.value.__cause__, KafkaConnectionError)
    finally:
        b.close()


def test_bad_input_is_named(broker):
    read = fastkwire.read_kafka
    with pytest.raises(KafkaReadError, match="topic 'nope' does not exist"):
        read("nope", bootstrap_servers=broker.bootstrap)
    with pytest.raises(KafkaReadError, match=r"topic 't' has no partition 7 \(it has 3: 0-2\)"):
        read("t", bootstrap_servers=broker.bootstrap, partitions=[0, 7])
    with pytest.raises(ValueError, match="start_offset 50 is after end_offset 10"):
        read("t", bootstrap_servers=broker.bootstrap, start_offset=50, end_offset=10)
    with pytest.raises(
        KafkaReadError,
        match=r"end_offset 500 is after the end of topic 't' partition 0: 127.0.0.1:\d+ holds offsets 0 to 94$",
    ):
        read("t", bootstrap_servers=broker.bootstrap, end_offset=500)
    with pytest.raises(ValueError, match="start_offset must be"):
        read("t", bootstrap_servers=broker.bootstrap, start_offset="latest")
    with pytest.raises(ValueError, match="isolation_level"):
        read("t", bootstrap_servers=broker.bootstrap, isolation_level="committed")
    with pytest.raises(TypeError, match="unknown option sasl_password"):
        read("t", bootstrap_servers=broker.bootstrap, sasl_password="x")
    with pytest.raises(ValueError, match="TLS options"):
        read("t", bootstrap_servers=broker.bootstrap, ssl_cafile="ca.pem")
