"""Damaged segment files through the broker's recovery (fastkwire.broker's log directory).

    python3 fuzz/hostile_segment_recovery.py --loop 2000 --seed 1

A partition directory of several segments is written by the broker, then damaged as a disk
or a crash damages it (bytes flipped, a file cut short or grown with garbage or zeros, a
segment removed or duplicated under another name), and a broker is started on it. The
contract, checked for each: recovery never fails; the log it serves holds batches with
rising offsets from its log start to its log end, every CRC right; the files left are
exactly those batches (fastkwire.read_segments reads them without an error, the same
records); and what it appends next goes on at the log end. The exit status is 1 if any
input broke it.
"""

import argparse
import os
import random
import shutil
import sys
import tempfile
import time

from fastkwire import records
from fastkwire.broker import Cluster, read_batch_head
from fastkwire.broker._disk_logs import DiskLogs

NODES = {0: ("127.0.0.1", 9092)}


class Finding(Exception):
    pass


def write_original(path, rng):
    storage = DiskLogs(path)
    cluster = Cluster(NODES)
    storage.attach(cluster)
    log = cluster.create_topic("t", 1, configs={"segment.bytes": "600"}).partitions[0].log
    for i in range(30):
        data = records.write_batch(
            [records.Record(timestamp=1000 + i, value=b"%d" % i * rng.randrange(1, 40))]
        )
        log.append(read_batch_head(data), data)
    storage.close()


def damage(folder, rng):
    logs = sorted(n for n in os.listdir(folder) if n.endswith(".log"))
    name = os.path.join(folder, rng.choice(logs))
    data = bytearray(open(name, "rb").read())
    what = rng.randrange(6)
    if what == 0 and data:
        for _ in range(rng.randrange(1, 4)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif what == 1:
        del data[rng.randrange(len(data) + 1) :]
    elif what == 2:
        data += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 80)))
    elif what == 3:
        data += bytes(rng.randrange(1, 200))
    elif what == 4:
        os.remove(name)
        return
    else:
        other = os.path.join(folder, "%020d.log" % rng.randrange(0, 40))
        if other != name:
            shutil.copyfile(name, other)
        return
    with open(name, "wb") as f:
        f.write(data)


def check(path):
    storage = DiskLogs(path)
    cluster = Cluster(NODES)
    try:
        storage.attach(cluster)
    except Exception as e:  # noqa: BLE001 - the contract: recovery never fails
        raise Finding(f"recovery failed: {type(e).__name__}: {e}") from None
    log = cluster.topics["t"].partitions[0].log
    served = records.read_batches(log.read(log.log_start, 1 << 40)) if len(log) else []
    bases = [b.base_offset for b in served]
    if bases != sorted(set(bases)):
        raise Finding(f"offsets out of order: {bases}")
    last_end = served[-1].base_offset + served[-1].last_offset_delta + 1 if served else 0
    if log.log_end != last_end:
        # only an empty last segment (named by the log end) may say where the log ends
        folder = os.path.join(path, "t-0")
        empty_last = sorted(n for n in os.listdir(folder) if n.endswith(".log"))[-1]
        size = os.path.getsize(os.path.join(folder, empty_last))
        if log.log_end < last_end or size or empty_last != "%020d.log" % log.log_end:
            raise Finding(f"the log ends at {log.log_end}, its last batch at {last_end}")
    end = log.log_end
    data = records.write_batch([records.Record(timestamp=5, value=b"after")])
    if log.append(read_batch_head(data), data) != end:
        raise Finding("the next append is not at the log end")
    storage.close()
    try:
        import fastkwire  # read_segments needs pyarrow

        table = fastkwire.read_segments(os.path.join(path, "t-0"))
    except ImportError:
        return
    except Exception as e:  # noqa: BLE001
        raise Finding(f"read_segments: {type(e).__name__}: {e}") from None
    want = [r.offset for b in served for r in b.records] + [end]
    if table.column("offset").to_pylist() != want:
        raise Finding("the files hold other records than the log served")


def run(loops, seed, stop_after=None):
    rng = random.Random(seed)
    findings = 0
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as top:
        original = os.path.join(top, "original")
        write_original(original, rng)
        for i in range(loops):
            path = os.path.join(top, "case")
            shutil.rmtree(path, ignore_errors=True)
            shutil.copytree(original, path)
            for _ in range(rng.randrange(1, 3)):
                damage(os.path.join(path, "t-0"), rng)
            try:
                check(path)
            except Finding as e:
                findings += 1
                print(f"finding at input {i}: {e}", file=sys.stderr)
                if stop_after is not None and findings >= stop_after:
                    break
    return findings, time.monotonic() - started


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loop", type=int, default=2000, help="damaged directories to try")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    findings, took = run(args.loop, args.seed)
    print(f"{args.loop} damaged directories in {took:.1f} s; {findings} finding(s)")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
