"""Hostile request frames (fuzz/hostile_requests.py's) through a three-node broker whose
shape changes under them, its logs also on disk (fastkwire.broker, no socket).

    python3 fuzz/hostile_cluster.py --loop 5000 --seed 1

Each input goes to a node picked at random; now and then a partition's leader moves, a
node stops or starts, retention runs at a random time. The group coordinator serves (its
requests reach NOT_COORDINATOR from the nodes that do not coordinate). The contract is
hostile_requests' (one outcome per frame, answers that decode, no handler failure, logs
that stay logs), plus: every partition has a leader among its replicas that runs, or none;
and the log directory, read back by a new broker, holds what memory holds (the same log
start, and the same batches up to the log end). The exit status is 1 if anything broke.
"""

import logging
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import differential as D  # noqa: E402
import hostile_requests as H  # noqa: E402

from fastkwire.broker import Apis, Cluster, GroupCoordinator  # noqa: E402
from fastkwire.broker._disk_logs import DiskLogs  # noqa: E402

NODES = {0: ("127.0.0.1", 9092), 1: ("127.0.0.1", 9093), 2: ("127.0.0.1", 9094)}


def make_broker(log_dir):
    clock = [0.0]
    cluster = Cluster(NODES, num_partitions=2, max_partitions=H.MAX_PARTITIONS)
    storage = DiskLogs(log_dir)
    storage.attach(cluster)
    groups = GroupCoordinator(
        clock=lambda: clock[0],
        topic_partitions=cluster.partition_count,
        topics=cluster.topic_summary,
    )
    apis = Apis(cluster, clock=lambda: clock[0], groups=groups)
    cluster.create_topic(H.TOPIC, 2, 3, {"segment.bytes": "2000"})
    return apis, clock, storage


def change_shape(apis, rng):
    """One change of the cluster's shape, as the test calls make it."""
    cluster = apis.cluster
    running = cluster.live_node_ids()
    what = rng.random()
    if what < 0.4:
        partitions = list(cluster.all_partitions())
        p = rng.choice(partitions)
        topic = next(t for t in cluster.topics.values() if p in t.partitions)
        cluster.move_leader(topic.name, p.index, rng.choice(running))
    elif what < 0.6 and len(running) > 1:
        cluster.stop_node(rng.choice(running))
    elif what < 0.8 and cluster.stopped:
        cluster.start_node(rng.choice(sorted(cluster.stopped)))
    else:
        cluster.apply_retention(rng.randrange(0, 2 * 10**12))
    apis.data_arrived()


def check_leaders(apis):
    cluster = apis.cluster
    for p in cluster.all_partitions():
        running = [r for r in p.replicas if r not in cluster.stopped]
        if p.leader not in running and not (p.leader == -1 and not running):
            raise H.Finding(f"partition {p.index}: leader {p.leader}, replicas {p.replicas}")


def check_disk(apis, log_dir):
    """A new broker on the directory holds what memory holds."""
    again = Cluster(NODES, num_partitions=2, max_partitions=H.MAX_PARTITIONS)
    storage = DiskLogs(log_dir)
    try:
        storage.attach(again)
        for topic in apis.cluster.topics.values():
            if topic.internal:
                continue
            other = again.topics.get(topic.name)
            if other is None or len(other.partitions) != len(topic.partitions):
                raise H.Finding(f"topic {topic.name} did not come back whole")
            for p, q in zip(topic.partitions, other.partitions):
                mine, read = p.log, q.log
                if read.log_start != mine.log_start or read.log_end < mine.log_end:
                    raise H.Finding(
                        f"{topic.name}-{p.index}: read back as {read.log_start}-{read.log_end}, "
                        f"memory has {mine.log_start}-{mine.log_end}"
                    )
                if mine.log_end > mine.log_start:
                    kept = mine.read(mine.log_start, 1 << 40)
                    if read.read(read.log_start, 1 << 40)[: len(kept)] != kept:
                        raise H.Finding(f"{topic.name}-{p.index}: other batches on disk")
    finally:
        storage.close()


def run(loops, seed, stop_after=None):
    rng = random.Random(seed)
    errors = H._Errors()
    logging.getLogger("fastkwire.broker").addHandler(errors)
    counts = {"answered": 0, "closed": 0, "silent": 0}
    findings = 0
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as log_dir:
        apis, clock, storage = make_broker(log_dir)
        pool = H.seeds(apis)
        for i in range(loops):
            frame = (
                D.mutate(rng.choice(pool), rng, pool) if rng.random() < 0.9 else rng.choice(pool)
            )
            node = rng.choice(apis.cluster.live_node_ids())
            try:
                if rng.random() < 0.03:
                    change_shape(apis, rng)
                counts[H.check_one(apis, clock, errors, frame, node)] += 1
                if i % 50 == 0:
                    H.check_state(apis)
                    check_leaders(apis)
            except H.Finding as e:
                findings += 1
                errors.records.clear()
                print(f"finding at input {i}: {e}\n  input: {frame.hex()}", file=sys.stderr)
                if stop_after is not None and findings >= stop_after:
                    break
        try:
            H.check_state(apis)
            check_leaders(apis)
            storage.close()
            check_disk(apis, log_dir)
        except H.Finding as e:
            findings += 1
            print(f"finding at the end: {e}", file=sys.stderr)
    logging.getLogger("fastkwire.broker").removeHandler(errors)
    return counts, findings, time.monotonic() - started


def main(argv=None):
    return H.main(argv, run, 5000, __doc__)


if __name__ == "__main__":
    sys.exit(main())
