"""Log compaction against hostile input: records whose timestamps a pass cannot rebase as
they were, topic configs at their extremes, a damaged cleaner-offset-checkpoint. A pass
never writes a batch that does not read back, and never gives up on a partition for them."""

import time

from fastkwire import records
from fastkwire.broker import Cluster, read_batch_head
from fastkwire.broker._compaction import CHECKPOINT_FILE, LogCleaner
from fastkwire.broker._disk_logs import DiskLogs
from fastkwire.records import Record

NODES = {0: ("127.0.0.1", 9092)}
NOW = 1_700_000_000_000
INT64_MAX = (1 << 63) - 1


def compacted(cluster, **configs):
    settings = {"cleanup.policy": "compact", "segment.bytes": "300"}
    settings.update({k.replace("_", "."): str(v) for k, v in configs.items()})
    return cluster.create_topic("t", 1, 1, settings)


def append(partition, recs):
    data = records.write_batch(recs)
    head = read_batch_head(data)
    return partition.log.append(head, data)


def fill(partition, count, keys=3):
    for i in range(count):
        append(partition, [Record(timestamp=NOW, key=b"k%d" % (i % keys), value=b"v%d" % i)])


def read_all(partition):
    log = partition.log
    return records.read_batches(log.read(log.log_start, 1 << 30))


def clean(cluster):
    cleaner = LogCleaner(cluster, time.monotonic, time.time)
    done = cleaner.clean(NOW, force=True)
    assert cleaner.uncleanable == {}
    return done


def test_a_damaged_cleaner_offset_checkpoint_does_not_stop_the_start(tmp_path):
    storage = DiskLogs(str(tmp_path))
    cluster = Cluster(NODES, cluster_id=storage.cluster_id())
    storage.attach(cluster)
    compacted(cluster)
    # digits str.isdigit() passes but int() refuses, thousands of digits, a negative one
    lines = ["0", "4", "t 0 \u00b2", "t 0 " + "9" * 5000, "t 0 -5", "t 0 12"]
    (tmp_path / CHECKPOINT_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")
    cleaner = LogCleaner(cluster, time.monotonic, time.time)
    assert cleaner.first_dirty == {("t", 0): (None, 12)}  # the good entry, the last of t-0
    storage.close()
