"""The cluster's logs in a directory, in Kafka's layout: a folder `<topic>-<partition>` of
segment files per partition (`_segment_files`), and at the top `meta.properties` (the cluster
id), `log-start-offset-checkpoint` (where logs start after DeleteRecords or retention) and
`fastkwire-topics.json` (each topic's replication factor and configs, which Kafka keeps in
its metadata log). A broker started on the same directory serves what was written: its
topics, their ids and records, the idempotent producers' sequences; a transaction left
open is aborted, as its coordinator would abort it. The internal topics
(`__consumer_offsets`, `__transaction_state`) are written as the others; they are read
back by the coordinators' loader (`_coordinator_state`), not by `attach`.
"""

import errno
import json
import os
import re
import time

try:
    import fcntl
except ImportError:  # Windows: no lock is taken
    fcntl = None

from ._log import PartitionLog
from ._segment_files import (
    SegmentFiles,
    partition_dir,
    read_offset_checkpoint,
    read_partition_metadata,
    write_checkpoint,
)

TOPICS_FILE = "fastkwire-topics.json"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
META_PROPERTIES = "meta.properties"
LOCK_FILE = ".lock"  # as Kafka's: one broker per log directory
_PARTITION_DIR = re.compile(r"(.+)-(\d+)")
# Kafka's directories that are not live partitions
_NOT_LIVE = re.compile(r".*-(delete|future|stray)$|.*\.[0-9a-f]{32}-(delete|future|stray)$")


class DiskLogs:
    """Partition logs kept in `log_dir` as well as in memory (reads are served from memory)."""

    def __init__(self, log_dir):
        self.log_dir = os.path.abspath(log_dir)
        os.makedirs(self.log_dir, exist_ok=True)
        self._lock = _lock(os.path.join(self.log_dir, LOCK_FILE))
        self.cluster = None
        self.files = {}  # (topic name, index) -> SegmentFiles
        self._log_starts = read_offset_checkpoint(os.path.join(self.log_dir, LOG_START_CHECKPOINT))
        self._restored = {}  # (topic, index) -> [(BatchHead, base)] to replay, while loading
        self._starts_moved = False  # log-start-offset-checkpoint is to be written again
        self.internal_found = {}  # internal topic -> (partition count, topic id) found here
        self._open_epochs = {}  # (topic, index) -> {producer id: epoch}, of open transactions

    def cluster_id(self):
        """The cluster id a broker wrote here before, or None."""
        try:
            with open(os.path.join(self.log_dir, META_PROPERTIES), encoding="utf-8") as f:
                for line in f:
                    if line.startswith("cluster.id="):
                        return line.split("=", 1)[1].strip() or None
        except OSError:
            pass
        return None

    def attach(self, cluster, settle=True):
        """Serve `cluster` from this directory: its topics are those found here (with their
        records), and what the cluster writes from now on is written here. The transactions
        the logs leave open are aborted (`settle`), or left for `abort_left_open`, after
        the transaction coordinator's own state has settled those it knows."""
        self.cluster = cluster
        with open(os.path.join(self.log_dir, META_PROPERTIES), "w", encoding="utf-8") as f:
            f.write(
                f"version=1\ncluster.id={cluster.cluster_id}\nnode.id={cluster.node_ids()[0]}\n"
            )
        cluster.storage = self
        saved = self._read_topics()
        found = {}
        for name in sorted(os.listdir(self.log_dir)):
            m = _PARTITION_DIR.fullmatch(name)
            path = os.path.join(self.log_dir, name)
            if m is None or _NOT_LIVE.fullmatch(name) or not os.path.isdir(path):
                continue
            topic, index = m.group(1), int(m.group(2))
            if topic.startswith("__"):
                if topic in ("__consumer_offsets", "__transaction_state"):
                    count, topic_id = self.internal_found.get(topic, (0, None))
                    topic_id = topic_id or read_partition_metadata(path)
                    self.internal_found[topic] = (max(count, index + 1), topic_id)
                continue
            entry = found.setdefault(topic, {"count": 0, "id": None})
            entry["count"] = max(entry["count"], index + 1)
            entry["id"] = entry["id"] or read_partition_metadata(path)
        for name, entry in sorted(found.items()):
            info = saved.get(name, {})
            factor = min(int(info.get("replication_factor", 1)), len(cluster.nodes))
            topic = cluster.create_topic(
                name, entry["count"], factor, info.get("configs") or {}, topic_id=entry["id"]
            )
            for partition in topic.partitions:
                self._replay(topic, partition)
        self._restored.clear()
        self._write_topics()
        if settle:
            self.abort_left_open()

    def replay_internal(self, topic):
        """Take the records restored of an internal topic's partitions (made after attach,
        by the coordinators' loader): their producer ids count as handed out."""
        for partition in topic.partitions:
            self._replay(topic, partition)

    def abort_left_open(self):
        """Abort the transactions the restored logs leave open (whose coordinator state is
        not known), as their coordinator would abort them."""
        now_ms = int(time.time() * 1000)
        for (name, index), epochs in sorted(self._open_epochs.items()):
            partition = self.cluster.partition(name, index)
            if partition is not None:
                for pid in list(partition.log.ongoing):
                    partition.log.write_marker(pid, epochs.get(pid, 0), False, now_ms)
        self._open_epochs.clear()

    def _replay(self, topic, partition):
        """The producer state of what was restored; transactions left open are aborted."""
        heads = self._restored.pop((topic.name, partition.index), ())
        epochs = {}
        ids = self.cluster.producer_ids
        for head, base in heads:
            if head.producer_id < 0:
                continue
            epochs[head.producer_id] = head.producer_epoch
            ids.start_at(head.producer_id + 1)
            if not head.is_control:
                partition.producers.appended(head, base)
        if partition.log.ongoing:
            self._open_epochs[(topic.name, partition.index)] = epochs

    # ---- the cluster's hooks

    def new_log(self, topic, index):
        """The PartitionLog of a partition being made: what its directory holds, and its
        appends written there from now on."""
        log = PartitionLog()
        key = (topic.name, index)
        files = SegmentFiles(
            partition_dir(self.log_dir, topic.name, index),
            topic.id,
            segment_bytes=lambda: int(topic.config("segment.bytes")),
            on_log_start=self._log_start_moved,
        )
        batches = files.recover()
        if batches or files.next_offset:
            start = files.segments[0].base if files.segments else None
            self._restored[key] = log.restore(
                batches, files.next_offset, files.read_epochs(), start
            )
            start = self._log_starts.get(key)
            if start is not None and start > log.log_start:
                log.delete_before(min(start, log.log_end))
        log.store = files
        self.files[key] = files
        return log

    def topic_created(self, topic):
        if not topic.internal:
            self._write_topics()

    def topic_deleted(self, topic):
        for partition in topic.partitions:
            files = self.files.pop((topic.name, partition.index), None)
            if files is not None:
                files.remove()
        self._write_log_starts()
        self._write_topics()

    def configs_changed(self, topic):
        self._write_topics()

    def close(self):
        if self.cluster is not None:
            self.flush()
        for files in self.files.values():
            files.close()
        if self._lock is not None:
            self._lock.close()  # the lock goes with the file
            self._lock = None

    def _log_start_moved(self):
        self._starts_moved = True

    def flush(self):
        """Write the log starts that moved (after a DeleteRecords, a retention run)."""
        if self._starts_moved:
            self._write_log_starts()

    # ---- the files at the top

    def _read_topics(self):
        try:
            with open(os.path.join(self.log_dir, TOPICS_FILE), encoding="utf-8") as f:
                data = json.load(f)
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def _write_topics(self):
        if self.cluster is None:
            return
        data = {
            t.name: {"replication_factor": t.replication_factor, "configs": t.configs}
            for t in self.cluster.topics.values()
            if not t.internal
        }
        tmp = os.path.join(self.log_dir, TOPICS_FILE + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(tmp, os.path.join(self.log_dir, TOPICS_FILE))

    def _write_log_starts(self):
        self._starts_moved = False
        if self.cluster is None:
            return
        entries = [
            (t.name, p.index, p.log.log_start)
            for t in self.cluster.topics.values()
            if not t.internal
            for p in t.partitions
            if p.log.log_start > 0
        ]
        write_checkpoint(os.path.join(self.log_dir, LOG_START_CHECKPOINT), entries)


def _lock(path):
    """The log directory's lock file, locked (OSError when another broker holds it)."""
    f = open(path, "a+b")
    if fcntl is not None:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            raise OSError(
                errno.EAGAIN,
                f"another broker uses this log directory (its {LOCK_FILE} is locked)",
                os.path.dirname(path),
            ) from None
    return f
