"""fastkwire.broker's logs on disk in Kafka's segment format, and retention: segments rolled
at segment.bytes and read back by fastkwire.read_segments and `fastkwire dump`; a restart on
the same directory serves what was written (topics, ids, configs, records, the log start,
idempotent producers' sequences), cutting a torn tail as Kafka's recovery does; retention
by size and time, in memory (whole batches) and on disk (whole segments)."""

import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fastkwire import records
from fastkwire.broker import Cluster, PartitionLog, read_batch_head
from fastkwire.broker._disk_logs import DiskLogs
from fastkwire.records import Record

pa = pytest.importorskip("pyarrow")
import fastkwire  # noqa: E402 - read_segments needs pyarrow

NODES = {0: ("127.0.0.1", 9092)}


def batch(*values, ts=1000, pid=-1, epoch=-1, seq=-1):
    return records.write_batch(
        [Record(timestamp=ts, key=None, value=v) for v in values],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )


def append(log, data):
    return log.append(read_batch_head(data), data)


def open_cluster(path):
    storage = DiskLogs(path)
    cluster = Cluster(NODES, cluster_id=storage.cluster_id())
    storage.attach(cluster)
    return cluster, storage


def values_of(table, partition=0):
    rows = table.filter(pa.compute.equal(table.column("partition"), partition))
    return rows.column("value").to_pylist()


def test_segments_roll_at_segment_bytes_and_the_readers_read_them(tmp_path):
    cluster, storage = open_cluster(tmp_path)
    topic = cluster.create_topic("orders", 2, configs={"segment.bytes": "500"})
    log = topic.partitions[0].log
    sent = [b"value-%03d" % i + b"x" * 60 for i in range(40)]
    for i in range(0, 40, 2):
        append(log, batch(sent[i], sent[i + 1]))
    append(topic.partitions[1].log, batch(b"other"))
    storage.close()
    folder = tmp_path / "orders-0"
    logs = sorted(n for n in os.listdir(folder) if n.endswith(".log"))
    assert len(logs) > 3 and logs[0] == "0" * 20 + ".log"
    for name in logs:  # each rolled segment stays under segment.bytes; names are base offsets
        data = (folder / name).read_bytes()
        assert len(data) <= 500
        assert struct.unpack_from(">q", data, 0)[0] == int(name[:-4])
        assert (folder / (name[:-4] + ".index")).exists()
    assert (folder / "partition.metadata").read_text().startswith("version: 0\ntopic_id: ")
    table = fastkwire.read_segments(str(tmp_path))
    assert values_of(table, 0) == sent and values_of(table, 1) == [b"other"]
    assert table.column("offset").to_pylist()[:40] == list(range(40))
    out = tmp_path / "dump.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "fastkwire", "dump", "--segments", str(folder), "--to", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert out.read_text().count("\n") == 40


def test_a_big_segment_has_an_offset_index_that_read_segments_uses(tmp_path):
    cluster, storage = open_cluster(tmp_path)
    log = cluster.create_topic("big").partitions[0].log
    for i in range(100):
        append(log, batch(b"%04d" % i + b"y" * 200))  # ~270 bytes a batch: an entry per ~16
    storage.close()
    index = (tmp_path / "big-0" / ("0" * 20 + ".index")).read_bytes()
    entries = [struct.unpack_from(">ii", index, i) for i in range(0, len(index), 8)]
    assert len(entries) >= 5
    assert [r for r, _ in entries] == sorted(r for r, _ in entries)
    table = fastkwire.read_segments(str(tmp_path / "big-0"), start_offset=70)
    assert table.column("offset").to_pylist() == list(range(70, 100))


def test_a_restart_serves_what_was_written(tmp_path):
    cluster, storage = open_cluster(tmp_path)
    topic = cluster.create_topic("t", 2, configs={"retention.ms": "-1"})
    partition = topic.partitions[0]
    for i in range(5):
        data = batch(b"a%d" % i, pid=1000, epoch=0, seq=i)
        base = append(partition.log, data)
        partition.producers.appended(read_batch_head(data), base)
    partition.log.delete_before(2)
    partition.log.new_leader_epoch()
    append(partition.log, batch(b"after the epoch"))
    cluster_id, topic_id = cluster.cluster_id, topic.id
    storage.close()

    again, storage = open_cluster(tmp_path)
    assert again.cluster_id == cluster_id
    topic = again.topics["t"]
    assert (topic.id, len(topic.partitions), topic.configs) == (topic_id, 2, {"retention.ms": "-1"})
    log = topic.partitions[0].log
    assert (log.log_start, log.log_end, log.leader_epoch) == (2, 6, 1)
    assert log.end_offset_for(0) == (0, 5)
    got = [r.value for b in records.read_batches(log.read(2, 1 << 20)) for r in b.records]
    assert got == [b"a2", b"a3", b"a4", b"after the epoch"]
    # the producer's sequences came back: a retry is a duplicate, a gap is refused
    retry = read_batch_head(batch(b"a4", pid=1000, epoch=0, seq=4))
    assert topic.partitions[0].producers.check(retry) == 4
    assert again.producer_ids.new() > 1000  # no producer id handed out twice
    # what is written after the restart goes on where the log ended
    assert append(log, batch(b"new")) == 6
    storage.close()
    third, storage = open_cluster(tmp_path)
    assert third.topics["t"].partitions[0].log.log_end == 7
    storage.close()


def test_recovery_cuts_a_torn_tail_and_drops_the_segments_after_a_bad_batch(tmp_path):
    cluster, storage = open_cluster(tmp_path)
    log = cluster.create_topic("t", configs={"segment.bytes": "200"}).partitions[0].log
    for i in range(6):
        append(log, batch(b"r%d" % i + b"z" * 80))
    storage.close()
    folder = tmp_path / "t-0"
    segments = sorted(n for n in os.listdir(folder) if n.endswith(".log"))
    assert len(segments) == 6  # one batch each: two do not fit in 200 bytes
    last = folder / segments[-1]
    whole = last.read_bytes()
    last.write_bytes(whole + batch(b"torn")[:30])  # a crash in the middle of a write
    again, storage = open_cluster(tmp_path)
    assert again.topics["t"].partitions[0].log.log_end == 6
    assert last.read_bytes() == whole  # the torn bytes are cut
    storage.close()
    # a bad CRC in the third segment: the log ends before it, the later segments go
    third = folder / segments[2]
    data = bytearray(third.read_bytes())
    data[-1] ^= 0xFF
    third.write_bytes(bytes(data))
    again, storage = open_cluster(tmp_path)
    log = again.topics["t"].partitions[0].log
    assert (log.log_end, len(log)) == (2, 2)
    assert sorted(n for n in os.listdir(folder) if n.endswith(".log")) == segments[:3]
    assert append(log, batch(b"goes on")) == 2
    storage.close()
    table = fastkwire.read_segments(str(folder))
    assert table.column("offset").to_pylist() == [0, 1, 2]


def test_retention_in_memory_drops_whole_batches_from_the_start():
    log = PartitionLog()
    for i in range(5):
        append(log, batch(b"x" * 50, ts=1000 * (i + 1)))
    size = len(log.read(0, 1 << 20)) // 5
    assert log.retain(-1, -1, 10**9) == 0  # no limits
    assert log.retain(size * 3, -1, 0) == 2  # three batches' worth kept
    assert log.retain(size * 3, -1, 0) == 2  # and no more goes
    assert log.retain(-1, 1500, 5000) == 3  # older than 1.5 s at 5 s: batch 3 (t=3000)
    assert log.offset_for(-2) == (3, -1)
    assert log.retain(0, -1, 0) == 5  # retention.bytes 0: everything
    assert (log.log_start, log.log_end, len(log)) == (5, 5, 0)
    assert append(log, batch(b"more")) == 5


def test_retention_on_disk_deletes_whole_segments(tmp_path):
    cluster, storage = open_cluster(tmp_path)
    topic = cluster.create_topic("t", configs={"segment.bytes": "300", "retention.bytes": "600"})
    log = topic.partitions[0].log
    for i in range(10):
        append(log, batch(b"%d" % i + b"w" * 100, ts=1000 + i))
    folder = tmp_path / "t-0"
    before = sorted(n for n in os.listdir(folder) if n.endswith(".log"))
    moved = cluster.apply_retention(now_ms=2000)
    assert moved == [topic.partitions[0]]
    after = sorted(n for n in os.listdir(folder) if n.endswith(".log"))
    assert after == before[-len(after) :] and len(after) < len(before)
    assert log.log_start == int(after[0][:-4])
    assert sum((folder / n).stat().st_size for n in after) >= 600 - 300
    # by time: everything older than 1 s at t=10 s goes; an empty segment starts at the end
    topic.configs["retention.ms"] = "1000"
    cluster.configs_changed(topic)
    cluster.apply_retention(now_ms=10_000)
    assert (log.log_start, log.log_end) == (10, 10)
    assert sorted(n for n in os.listdir(folder) if n.endswith(".log")) == ["%020d.log" % 10]
    storage.close()
    again, storage = open_cluster(tmp_path)  # the log start is kept across a restart
    assert again.topics["t"].partitions[0].log.offset_for(-2) == (10, -1)
    storage.close()


def test_deleting_a_topic_removes_its_folders(tmp_path):
    cluster, storage = open_cluster(tmp_path)
    topic = cluster.create_topic("gone", 2)
    append(topic.partitions[0].log, batch(b"v"))
    cluster.delete_topic(topic)
    assert not (tmp_path / "gone-0").exists() and not (tmp_path / "gone-1").exists()
    storage.close()
    again, storage = open_cluster(tmp_path)
    assert "gone" not in again.topics
    storage.close()


def test_a_broker_on_a_log_dir_serves_clients_across_a_restart(tmp_path):
    kafka = pytest.importorskip("kafka")
    from fastkwire.testing import Broker

    sent = [b"m%d" % i for i in range(50)]
    with Broker(log_dir=tmp_path) as b:
        b.create_topic("kept", partitions=2)
        producer = kafka.KafkaProducer(
            bootstrap_servers=b.bootstrap_servers, enable_idempotence=True
        )
        for i, v in enumerate(sent):
            producer.send("kept", v, partition=i % 2)
        producer.flush(20)
        producer.close(20)
    table = fastkwire.read_segments(str(tmp_path))
    assert sorted(table.column("value").to_pylist()) == sorted(sent)
    with Broker(log_dir=tmp_path) as b:
        consumer = kafka.KafkaConsumer(
            bootstrap_servers=b.bootstrap_servers,
            auto_offset_reset="earliest",
            consumer_timeout_ms=3000,
        )
        tps = [kafka.TopicPartition("kept", p) for p in (0, 1)]
        consumer.assign(tps)
        got = [m.value for m in consumer]
        assert consumer.end_offsets(tps) == {tps[0]: 25, tps[1]: 25}
        consumer.close()
    assert sorted(got) == sorted(sent)


def test_the_broker_applies_retention_every_check_interval():
    kafka = pytest.importorskip("kafka")
    from fastkwire.testing import Broker

    with Broker(retention_check_interval_ms=50) as b:
        b.create_topic("short", configs={"retention.ms": "1000"})
        producer = kafka.KafkaProducer(bootstrap_servers=b.bootstrap_servers)
        old = producer.send("short", b"old", timestamp_ms=1000)  # 1970: past retention.ms
        producer.flush(20)
        assert old.get(20).offset == 0
        new = producer.send("short", b"new").get(20)
        producer.close(20)
        log = b.call(lambda: b.broker.cluster.partition("short", 0).log)
        deadline = time.monotonic() + 20
        while b.call(lambda: log.log_start) == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert b.call(lambda: (log.log_start, log.log_end)) == (1, 2)
        assert new.offset == 1


def test_the_command_writes_its_log_dir(tmp_path):
    kafka = pytest.importorskip("kafka")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fastkwire",
            "broker",
            "--listen",
            "127.0.0.1:0",
            "--log-dir",
            str(tmp_path / "logs"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("listening on "), proc.stderr.read()
        servers = line.split()[-1]
        producer = kafka.KafkaProducer(bootstrap_servers=servers)
        producer.send("cli", b"on disk").get(20)
        producer.close(20)
    finally:
        proc.terminate()
        proc.wait(20)
    assert proc.returncode == 0
    table = fastkwire.read_segments(str(tmp_path / "logs"))
    assert table.column("value").to_pylist() == [b"on disk"]
    (tmp_path / "file").write_text("")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "fastkwire",
            "broker",
            "--listen",
            "127.0.0.1:0",
            "--log-dir",
            str(tmp_path / "file"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 3 and "--log-dir" in done.stderr


def test_damaged_segments_keep_the_recovery_contract():
    """fuzz/hostile_segment_recovery.py's contract over a short run (the long one: its --loop)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))
    import hostile_segment_recovery

    findings, _ = hostile_segment_recovery.run(150, seed=7)
    assert findings == 0


def test_recovery_never_renames_a_segment_over_one_not_read_yet(tmp_path):
    cluster, storage = open_cluster(tmp_path)
    log = cluster.create_topic("t", configs={"segment.bytes": "200"}).partitions[0].log
    for i in range(6):
        append(log, batch(b"r%d" % i + b"z" * 20))  # two batches a segment: 0, 2, 4
    storage.close()
    folder = tmp_path / "t-0"
    segment = folder.joinpath
    assert sorted(n for n in os.listdir(folder) if n.endswith(".log")) == [
        "%020d.log" % n for n in (0, 2, 4)
    ]
    # segment 2 copied under the name 1: its offsets follow segment 0's, so it is named 2
    # again, and the real segment 2 (whose offsets no longer follow) is cut away; a copy
    # of segment 0 after the end goes back in offsets: the log ends before it
    segment("%020d.log" % 1).write_bytes(segment("%020d.log" % 2).read_bytes())
    segment("%020d.log" % 9).write_bytes(segment("%020d.log" % 0).read_bytes())
    again, storage = open_cluster(tmp_path)
    log = again.topics["t"].partitions[0].log
    got = [r.value for b in records.read_batches(log.read(0, 1 << 20)) for r in b.records]
    assert got == [b"r%d" % i + b"z" * 20 for i in range(4)] and log.log_end == 4
    storage.close()
    table = fastkwire.read_segments(str(folder))
    assert table.column("offset").to_pylist() == [0, 1, 2, 3]
    assert table.column("value").to_pylist() == got


def test_one_broker_at_a_time_on_a_log_dir(tmp_path):
    from fastkwire.testing import Broker

    with Broker(log_dir=tmp_path):
        with pytest.raises(OSError, match="another broker uses this log directory"):
            Broker(log_dir=tmp_path).start()
    with Broker(log_dir=tmp_path):  # free again once the first has stopped
        pass
