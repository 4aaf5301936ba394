"""Random logs through the broker's log compaction (fastkwire.broker._compaction).

    python3 fuzz/hostile_compaction.py --seconds 600 --seed 1

Each case writes a compacted partition in a log directory: batches of a few keys (and,
rarely, records without one, as a topic made compacted later holds), values and tombstones,
idempotent producers' sequences, transactions committed, aborted and left open, their
markers, records timed at int64's ends, compressed batches (when cramjam is installed),
small segments, random delete.retention.ms, min.compaction.lag.ms and dirty ratios; between the writes, passes of
the cleaner at a clock that moves. The contract, checked after each pass:

- nothing at or past the pass's end changed (the same batches, the same bytes);
- below it, every record kept was there before with the same offset, key, value and
  headers; of each key, the latest record that counts (not of an aborted transaction)
  stays with its offset, a value always, a tombstone until the delete horizon an earlier
  pass set in its batch has passed, and no other record of the key; no record without a
  key and no record of an aborted transaction stays;
- every producer the partition knows still has the batch holding its last sequence;
- a consumer reading from any offset between the log start and the log end gets batches
  whose offsets rise, whose CRCs hold, and whose records are exactly the log's from there;
- a restart on the directory serves the same batches, byte for byte, the same log start,
  end and aborted transactions, and the producers' sequences (a retry is a duplicate);
  read_segments reads the files (when pyarrow is installed).

The exit status is 1 if any case broke it.
"""

import argparse
import logging
import random
import shutil
import sys
import tempfile
import time

from fastkwire import records
from fastkwire.broker import Cluster, LogError, read_batch_head
from fastkwire.broker._compaction import LogCleaner
from fastkwire.broker._disk_logs import DiskLogs

NODES = {0: ("127.0.0.1", 9092)}
KEYS = [b"a", b"b", b"c", b"d", b"e", b"f"]
INT64_MAX = (1 << 63) - 1

try:
    import cramjam  # noqa: F401 - compressed batches only when it is there

    CODECS = ["none", "none", "gzip", "zstd"]
except ImportError:
    CODECS = ["none"]


class Finding(Exception):
    pass


def open_log(path):
    storage = DiskLogs(path)
    cluster = Cluster(NODES, cluster_id=storage.cluster_id())
    storage.attach(cluster)
    return storage, cluster


class Writer:
    """Writes random batches to one partition, as producers and a coordinator would."""

    def __init__(self, rng, partition, now):
        self.rng = rng
        self.p = partition
        self.now = now
        self.seqs = {}  # idempotent producer id -> next sequence
        self.open = {}  # transactional producer id -> epoch

    def batch(self, pid=-1, epoch=-1, seq=-1, txn=False):
        rng = self.rng
        recs = []
        # now and then a client's times at int64's ends (a batch's deltas fit, as a client
        # writes them): a pass that sets a delete horizon or drops the first record must
        # still write deltas a reader takes
        times = [self.now]
        if rng.random() < 0.05:  # times whose deltas from each other all fit an int64
            times = rng.choice([[self.now, INT64_MAX, 0], [-INT64_MAX, -1, 0]])
        for _ in range(rng.randrange(1, 5)):
            key = None if rng.random() < 0.03 else rng.choice(KEYS)
            value = None if rng.random() < 0.2 else b"%d" % rng.randrange(1 << 30)
            headers = [("h", b"x")] if rng.random() < 0.1 else []
            ts = rng.choice(times)
            recs.append(records.Record(timestamp=ts, key=key, value=value, headers=headers))
        data = records.write_batch(
            recs,
            compression=rng.choice(CODECS),
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            is_transactional=txn,
        )
        head = read_batch_head(data)
        try:
            if self.p.producers.check(head) is not None:
                return
        except LogError as e:  # the producer's sequence was lost (by a pass, a restart)
            raise Finding(f"producer {pid}'s next batch is refused: {e}") from None
        base = self.p.log.append(head, data)
        self.p.producers.appended(head, base)

    def step(self):
        rng = self.rng
        self.now += rng.randrange(0, 2000)
        what = rng.random()
        if what < 0.45:
            self.batch()
        elif what < 0.65:
            pid = rng.choice([100, 101])
            seq = self.seqs.get(pid, 0)
            before = self.p.log.log_end
            self.batch(pid, 0, seq)
            if self.p.log.log_end > before:
                self.seqs[pid] = seq + 1 + self._last_delta()
        elif what < 0.85:
            pid = rng.choice([200, 201])
            epoch = self.open.setdefault(pid, 0)
            seq = self.seqs.get(pid, 0)
            self.batch(pid, epoch, seq, True)
            self.seqs[pid] = seq + 1 + self._last_delta()
        elif self.open:
            pid = rng.choice(sorted(self.open))
            epoch = self.open.pop(pid)
            self.p.log.write_marker(pid, epoch, rng.random() < 0.5, self.now)

    def _last_delta(self):
        log = self.p.log
        return log.log_end - 1 - log._bases[-1]


def raw(partition):
    log = partition.log
    return [(log._bases[i], log._batch(i)) for i in range(len(log))]


def counted_records(batches):
    """{offset: record} of the records that count: not of an aborted transaction (nor of
    one still open), keyed or not; and {offset: horizon} of each record's batch."""
    pending = {}
    out = {}
    horizons = {}
    for _, data in batches:
        (b,) = records.read_batches(data)
        horizon = b.base_timestamp if int.from_bytes(data[21:23], "big") & 0x40 else None
        if b.is_control:
            ended = pending.pop(b.producer_id, [])
            if b.records and b.records[0].control_type == "commit":
                out.update((r.offset, r) for r in ended)
            continue
        for r in b.records:
            horizons[r.offset] = horizon
        if b.is_transactional:
            pending.setdefault(b.producer_id, []).extend(b.records)
        else:
            out.update((r.offset, r) for r in b.records)
    return out, horizons


def all_records(batches):
    out = {}
    for _, data in batches:
        (b,) = records.read_batches(data)
        if not b.is_control:
            out.update((r.offset, r) for r in b.records)
    return out


def check_pass(before, after, end, now, partition):
    if [b for b in before if b[0] >= end] != [b for b in after if b[0] >= end]:
        raise Finding(f"batches at or past the pass's end {end} changed")
    old = all_records(before)
    new = all_records(after)
    for offset, r in new.items():
        o = old.get(offset)
        if o is None or (o.key, o.value, o.headers) != (r.key, r.value, r.headers):
            raise Finding(f"offset {offset}: {r!r} was not there before the pass ({o!r})")
    counted, horizons = counted_records(before)
    last = {}
    for offset in sorted(counted):
        if offset < end and counted[offset].key is not None:
            last[counted[offset].key] = offset
    for offset, r in new.items():
        if offset >= end:
            continue
        if r.key is None:
            raise Finding(f"offset {offset}: a record without a key stayed below {end}")
        if offset not in counted:
            raise Finding(f"offset {offset}: a record of an aborted transaction stayed")
        if last.get(r.key) != offset:
            raise Finding(f"offset {offset}: key {r.key!r} stayed there and at {last.get(r.key)}")
    for key, offset in last.items():
        r = counted[offset]
        if offset in new:
            continue
        horizon = horizons.get(offset)
        if r.value is not None or horizon is None or horizon > now:
            raise Finding(
                f"key {key!r}: its latest record (offset {offset}, value {r.value!r}) went "
                f"(its batch's delete horizon {horizon}, now {now})"
            )
    heads = {}
    for base, data in after:
        head = read_batch_head(data, len(data), allow_empty=True)
        if head.producer_id >= 0 and not head.is_control:
            heads[head.producer_id] = (base, head)
    for pid in (100, 101, 200, 201):
        if pid in partition.producers:
            base, head = heads.get(pid, (None, None))
            if head is None:
                raise Finding(f"producer {pid}'s last batch went")
            if partition.producers.check(head) != base:
                raise Finding(f"producer {pid}: a retry of its last batch is no duplicate")


def check_reads(partition):
    log = partition.log
    everything = all_records(raw(partition))
    for start in range(log.log_start, log.log_end + 1):
        data = log.read(start, 1 << 30)
        got = records.read_batches(data)  # CRCs checked
        last = -1
        seen = []
        for b in got:
            if b.base_offset <= last:
                raise Finding(f"a read from {start}: batch {b.base_offset} after offset {last}")
            last = b.base_offset + b.last_offset_delta
            if not b.is_control:
                seen += [r.offset for r in b.records if r.offset >= start]
        if seen != sorted(o for o in everything if o >= start):
            raise Finding(f"a read from {start} does not give the log's records from there")


def committed_view(partition):
    """What a read_committed consumer reading the whole log gets, with the aborted
    transactions the broker names (as Kafka's Java consumer skips them)."""
    log = partition.log
    upto = log.last_stable_offset
    pending = sorted(log.aborted_in(log.log_start, upto), key=lambda a: a[1])
    skipping = set()
    out = []
    for b in records.read_batches(log.read(log.log_start, 1 << 30, upto=upto)):
        last = b.base_offset + b.last_offset_delta
        while pending and pending[0][1] <= last:
            skipping.add(pending.pop(0)[0])
        if b.is_control:
            if b.records and b.records[0].control_type == "abort":
                skipping.discard(b.producer_id)
            continue
        if b.is_transactional and b.producer_id in skipping:
            continue
        out += [(r.offset, r.key, r.value) for r in b.records if r.offset < upto]
    return out


def state(partition):
    log = partition.log
    return raw(partition), log.log_start, log.log_end, committed_view(partition), dict(log.ongoing)


def one_case(path, rng, pyarrow):
    storage, cluster = open_log(path)
    configs = {
        "cleanup.policy": rng.choice(["compact", "compact,delete"]),
        "segment.bytes": str(rng.choice([150, 300, 600, 2000])),
        "delete.retention.ms": str(rng.choice([0, 1000, 60_000])),
        "min.compaction.lag.ms": str(rng.choice([0, 0, 3000])),
        "min.cleanable.dirty.ratio": str(rng.choice([0.01, 0.5, 0.9])),
        "retention.ms": "-1",
    }
    topic = cluster.create_topic("t", 1, 1, configs)
    now = 1_700_000_000_000
    writer = Writer(rng, topic.partitions[0], now)
    cleaner = LogCleaner(cluster, time.monotonic, time.time)
    passes = 0
    try:
        for _ in range(rng.randrange(4, 12)):
            for _ in range(rng.randrange(5, 40)):
                writer.step()
            partition = cluster.topics["t"].partitions[0]
            before = raw(partition)
            writer.now += rng.randrange(0, 5000)
            done = cleaner.clean(writer.now, force=rng.random() < 0.5)
            if cleaner.uncleanable:
                raise Finding(f"a pass failed: {cleaner.uncleanable}")
            result = done.get(("t", 0))
            if result is None:
                if raw(partition) != before:
                    raise Finding("the log changed without a pass")
                continue
            passes += 1
            check_pass(before, raw(partition), result.end, writer.now, partition)
            check_reads(partition)
            expected = state(partition)
            producers = {pid: pid in partition.producers for pid in (100, 101, 200, 201)}
            storage.close()
            storage, cluster = open_log(path)
            partition = cluster.topics["t"].partitions[0]
            # a restart aborts what was left open, as the coordinator would
            got = state(partition)
            if got[:3] != expected[:3] and not expected[4]:
                raise Finding("a restart serves other batches, log start or end")
            if not expected[4] and got[3] != expected[3]:
                raise Finding("a read_committed consumer reads otherwise after a restart")
            if expected[4]:
                if got[0][: len(expected[0])] != expected[0]:
                    raise Finding("a restart serves other batches (before its aborts)")
                writer.open.clear()
            for pid, known in producers.items():
                if known and pid not in partition.producers:
                    raise Finding(f"producer {pid} forgotten at the restart")
            if pyarrow:
                import fastkwire

                table = fastkwire.read_segments(path)
                served = [
                    r.offset
                    for _, d in raw(partition)
                    for b in records.read_batches(d)
                    if not b.is_control
                    for r in b.records
                ]
                if table.column("offset").to_pylist() != served:
                    raise Finding("read_segments reads other records than the log serves")
            writer.p = partition
            cleaner = LogCleaner(cluster, time.monotonic, time.time)
    finally:
        storage.close()
    return passes


def run(seconds, loop, seed):
    rng = random.Random(seed)
    deadline = time.monotonic() + seconds if seconds else None
    failures = cases = passes = 0
    try:
        import pyarrow  # noqa: F401 - read_segments needs it

        have_pyarrow = True
    except ImportError:
        have_pyarrow = False
    while (deadline is None and cases < loop) or (deadline and time.monotonic() < deadline):
        path = tempfile.mkdtemp(prefix="fk-compaction-")
        try:
            passes += one_case(path, rng, have_pyarrow)
        except Finding as f:
            failures += 1
            print(f"case {cases}: {f}", file=sys.stderr)
        finally:
            shutil.rmtree(path, ignore_errors=True)
        cases += 1
    print(f"{cases} cases, {passes} passes, {failures} findings")
    return failures


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0, help="run this long (0: --loop)")
    parser.add_argument("--loop", type=int, default=50, help="cases, without --seconds")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    logging.getLogger("fastkwire.broker").setLevel(logging.CRITICAL)
    return 1 if run(args.seconds, args.loop, args.seed) else 0


if __name__ == "__main__":
    sys.exit(main())
