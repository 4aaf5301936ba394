"""Kafka to Arrow: fastkwire's readers against Ray Data's read_kafka and a kafka-python
consume loop, on one topic served by a broker of our own in another process
(tests/log_broker.py: prebuilt Fetch answers, so the reader is what is measured).

    python benchmarks/kafka_arrow.py                 # every row, 1M records, 4 partitions
    python benchmarks/kafka_arrow.py --records 200000 --rows floor read
    python benchmarks/kafka_arrow.py --against-tansu # also time the real broker (Tansu)

Rows:
- floor: Fetch records already in memory to Arrow (`_arrow_rows.batches_to_arrow`) vs
  `records.read_columns` on the same batches, one core, the best of several runs each,
  taken in turn;
- read: the topic into one pyarrow.Table by `fastkwire.read_kafka`, by Ray Data's own
  `KafkaDatasource` read tasks (run in this process, one after another: one core), and by
  a kafka-python 3 consume loop with `fastkwire.kafka_python.install()` appending to
  column lists; client CPU seconds (`time.process_time()`, every thread of this process;
  the broker is another process) and records per CPU second;
- ray: `fastkwire.ray.read_kafka(...)` and `ray.data.read_kafka(...)`, each
  `.materialize()`d on a Ray of 1 CPU (records per second of wall time on one core), and
  fastkwire's on 2 CPUs vs 1, each in a fresh Ray, timed after a warm-up read; with the
  CPU seconds the broker spent, to see whether it is the limit;
- tasks: `fastkwire.ray.read_kafka` as 1, 4 and 16 read tasks on a Ray of 1 CPU (so they
  run one after another): the CPU seconds of Ray's processes per record, each against
  one task's (the target: within 10%); first the same split without Ray (reader_tasks,
  also a row of its own): our reader's CPU per record for 1 vs 4, 16 and 64 lists of
  ranges, each read by its own read_ranges, the median of --rounds;
- plan: `fastkwire.ray.KafkaDatasource` (the driver's planning: Metadata, ListOffsets, the
  log ends, the offsets spread over the tasks) for 10 to 1,000 partitions and 1 to 10,000
  tasks, against the broker in this process: microseconds per partition + task, which
  stays flat when planning is O(partitions + tasks);
- memory: the peak resident memory `iter_kafka` adds over a topic 10x its block size;
- fixed: the fixed cost of a Dataset, `fastkwire.ray.read_kafka` against
  `ray.data.read_kafka`, on a topic of `--fixed-records` (100,000) records in 4 partitions
  served by `fastkwire.testing.Broker` (in this process), each in a fresh process with Ray
  (1 CPU) started and `ray.data` imported untimed, the readers taken in turn
  (`--fixed-rounds`): the first Dataset (importing the reader and making the Dataset),
  its first materialize (Ray's workers start), and a second Dataset made and
  materialized. Python's bytecode is cached for both (in a folder of its own, as an
  installed package has it: PYTHONDONTWRITEBYTECODE=1 would compile our modules from
  source in every process, not Ray's, which come compiled); `--fixed-no-bytecode` adds
  fastkwire's first Dataset without it.
Prints a Markdown table. The suite asserts none of this.
"""

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

TOPIC = "bench"


class Broker:
    """tests/log_broker.py in a child process."""

    def __init__(self, records, partitions, value_size, per_batch=1000):
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "tests" / "log_broker.py"),
                "--topic",
                TOPIC,
                "--records",
                str(records),
                "--partitions",
                str(partitions),
                "--value-size",
                str(value_size),
                "--per-batch",
                str(per_batch),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.port = int(self.proc.stdout.readline())
        self.bootstrap = f"127.0.0.1:{self.port}"

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(10)


def timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def row_floor(args):
    import log_broker

    from fastkwire import _arrow_rows, records

    logs = log_broker.synthetic_logs(TOPIC, 1, args.records, args.value_size)
    data = bytes(logs[(TOPIC, 0)].data)
    fns = {
        "batches_to_arrow": lambda: _arrow_rows.batches_to_arrow(data, topic=TOPIC, partition=0),
        "read_columns": lambda: records.read_columns(data),
    }
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(args.rounds):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t)
    n = args.records
    rate = n / best["batches_to_arrow"]
    return [
        (
            "decode floor: Fetch records in memory to Arrow, one core",
            f"{rate / 1e6:.1f}M records/s ({len(data) / best['batches_to_arrow'] / 1e9:.2f} GB/s)",
            f"read_columns {n / best['read_columns'] / 1e6:.1f}M records/s: "
            f"{best['batches_to_arrow'] / best['read_columns']:.2f}x its time",
            ">= 10M records/s; within 2x of read_columns",
        )
    ]


def read_fastkwire(bootstrap):
    import fastkwire

    return fastkwire.read_kafka(TOPIC, bootstrap_servers=bootstrap).num_rows


def read_kafka_python(bootstrap, n):
    import fastkwire.kafka_python
    import pyarrow as pa
    from kafka import KafkaConsumer, TopicPartition

    fastkwire.kafka_python.install()
    try:
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            enable_auto_commit=False,
            group_id=None,
            max_partition_fetch_bytes=16 << 20,
            fetch_max_bytes=64 << 20,
        )
        parts = [TopicPartition(TOPIC, p) for p in sorted(consumer.partitions_for_topic(TOPIC))]
        consumer.assign(parts)
        consumer.seek_to_beginning()
        cols = {k: [] for k in ("offset", "key", "value", "partition", "timestamp", "headers")}
        got = 0
        while got < n:
            for tp, msgs in consumer.poll(timeout_ms=1000).items():
                for m in msgs:
                    cols["offset"].append(m.offset)
                    cols["key"].append(m.key)
                    cols["value"].append(m.value)
                    cols["partition"].append(m.partition)
                    cols["timestamp"].append(m.timestamp)
                    cols["headers"].append(m.headers)
                got += len(msgs)
        consumer.close()
        return pa.table({k: v for k, v in cols.items() if k != "headers"}).num_rows
    finally:
        fastkwire.kafka_python.uninstall()


def warm_up(bootstrap):
    """Imports, first connections and first calls of each reader, untimed (10 offsets)."""
    import fastkwire
    import fastkwire.kafka_python  # noqa: F401
    import kafka  # noqa: F401

    fastkwire.read_kafka(TOPIC, bootstrap_servers=bootstrap, end_offset=10)
    ray_on(bootstrap, TOPIC, end_offset=10)


def row_read(args, broker):
    rows = []
    warm_up(broker.bootstrap)
    n, fk_wall, fk_cpu = timed(lambda: read_fastkwire(broker.bootstrap))
    assert n == args.records, n
    results = {"fastkwire.read_kafka": (fk_wall, fk_cpu)}
    theirs = ray_on(broker.bootstrap, TOPIC)
    if not isinstance(theirs, Exception):
        n, wall, cpu = theirs
        assert n == args.records, n
        theirs = (wall, cpu)
    results["ray.data.read_kafka's read tasks (one core)"] = theirs
    n, wall, cpu = timed(lambda: read_kafka_python(broker.bootstrap, args.records))
    assert n == args.records, n
    results["kafka-python 3 consume loop (accelerated) to Arrow"] = (wall, cpu)
    for name, r in results.items():
        if isinstance(r, Exception):
            rows.append((name, f"failed: {r!r}"[:120], "", ""))
            continue
        wall, cpu = r
        rows.append(
            (
                f"{args.records:,} records, {args.partitions} partitions: {name}",
                f"{args.records / cpu / 1e6:.2f}M records per CPU second ({cpu:.2f} s CPU, {wall:.2f} s wall)",
                ""
                if name.startswith("fastkwire")
                else f"fastkwire: {cpu / fk_cpu:.1f}x the records per CPU second",
                "ray >= 10x, kafka-python >= 5x" if name.startswith("fastkwire") else "",
            )
        )
    return rows


RAY_CHILD = """
import os, sys, time, ray
reader, workers, bootstrap, per_task = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
import fastkwire.ray
def run():
    if reader == "fastkwire":
        per = None if per_task == "None" else int(per_task)
        ds = fastkwire.ray.read_kafka("bench", bootstrap_servers=bootstrap, records_per_task=per)
    else:
        ds = ray.data.read_kafka("bench", bootstrap_servers=bootstrap, timeout_ms=600_000)
    return ds.materialize().count()
def idle():  # the machine's idle CPU seconds so far (/proc/stat: idle + iowait)
    with open("/proc/stat") as f:
        ticks = f.readline().split()[1:]
    return (int(ticks[3]) + int(ticks[4])) / os.sysconf("SC_CLK_TCK")
def ray_cpu():  # CPU seconds of this driver and the Ray it started (GCS, raylet, workers)
    import psutil
    total = 0.0
    me = psutil.Process()
    for p in [me] + me.children(recursive=True):
        try:
            c = p.cpu_times()
            total += c.user + c.system
        except psutil.Error:
            pass
    return total
run()  # the workers started and warm
print("timing", flush=True)
t, i, c = time.perf_counter(), idle(), ray_cpu()
n = run()
seconds = time.perf_counter() - t
# then: cores the machine left idle, CPU seconds of Ray's processes
print(n, seconds, (idle() - i) / seconds, ray_cpu() - c, flush=True)
"""


def cpu_seconds(pid):
    """utime + stime of a process (Linux /proc), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ray_run(args, broker, reader, workers):
    """(seconds of the timed read, cores the machine left idle meanwhile, CPU seconds of
    the Ray processes meanwhile), in a fresh Ray."""
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            RAY_CHILD,
            reader,
            str(workers),
            broker.bootstrap,
            str(args.records_per_task),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        out, _ = child.communicate(timeout=900)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate(timeout=60)
        raise
    lines = out.split("\n")
    n, seconds, free, cpu = lines[lines.index("timing") + 1].split()
    assert int(n) == args.records, out
    return float(seconds), float(free), float(cpu)


def broker_cpu_during(broker, fn):
    before = cpu_seconds(broker.proc.pid)
    out = fn()
    return out, cpu_seconds(broker.proc.pid) - before


def row_ray(args, broker):
    # the broker's CPU seconds cover the warm-up read too: each figure is for two reads
    (ours, ours_idle, ours_cpu), ours_broker = broker_cpu_during(
        broker, lambda: ray_run(args, broker, "fastkwire", 1)
    )
    (theirs, _, theirs_cpu), theirs_broker = broker_cpu_during(
        broker, lambda: ray_run(args, broker, "ray", 1)
    )
    (two, two_idle, two_cpu), two_broker = broker_cpu_during(
        broker, lambda: ray_run(args, broker, "fastkwire", 2)
    )
    n = args.records
    return [
        (
            f"fastkwire.ray.read_kafka vs ray.data.read_kafka, {n:,} records, "
            f"{args.partitions} partitions, Ray on 1 CPU",
            f"{n / ours / 1e6:.2f}M records/s per core ({ours:.2f} s; Ray's processes"
            f" {ours_cpu:.2f} CPU s)",
            f"ray.data.read_kafka {n / theirs / 1e6:.2f}M records/s ({theirs:.2f} s; Ray's"
            f" processes {theirs_cpu:.2f} CPU s): {theirs / ours:.1f}x the records per"
            f" second, {theirs_cpu / ours_cpu:.1f}x per CPU second",
            ">= 10x",
        ),
        (
            f"fastkwire.ray.read_kafka, {args.partitions} partitions: 2 workers vs 1",
            f"{ours / two:.2f}x faster",
            f"1 worker {ours:.2f} s, 2 workers {two:.2f} s (wall); Ray's processes"
            f" {ours_cpu:.2f}, {two_cpu:.2f} CPU s; the broker's CPU over the"
            f" warm-up and the timed read: {ours_broker:.2f} s, {two_broker:.2f} s"
            f" (for Ray's reader: {theirs_broker:.2f} s); the machine's idle cores during the"
            f" timed read: {ours_idle:.2f}, {two_idle:.2f} of {os.cpu_count()}",
            ">= 1.7x",
        ),
    ]


def reader_tasks(args, broker):
    """What N tasks cost our reader against one, without Ray: the planned offsets spread
    over N lists (`kafka_arrow.spread`, as fastkwire.ray does), each list read by its own
    `read_ranges` (its own connections, as a task does), one after another in this
    process; CPU seconds of this process and of the broker per record, the median of
    --rounds rounds taken in turn."""
    import statistics

    from fastkwire import kafka_arrow

    ranges = kafka_arrow.plan(TOPIC, bootstrap_servers=broker.bootstrap)
    options = kafka_arrow.ClientOptions(broker.bootstrap)
    n = sum(len(r) for r in ranges)

    def read(lists):
        return sum(
            b.num_rows for lst in lists for b in kafka_arrow.read_ranges(lst, options=options)
        )

    counts = (1, args.partitions, 4 * args.partitions, 16 * args.partitions)
    read(kafka_arrow.spread(ranges, 1))  # warm
    cpu = {k: [] for k in counts}
    served = {k: [] for k in counts}
    for _ in range(args.rounds):
        for k in counts:
            lists = kafka_arrow.spread(ranges, k)
            got, their = broker_cpu_during(broker, lambda lists=lists: timed(lambda: read(lists)))
            assert got[0] == n, got[0]
            cpu[k].append(got[2])
            served[k].append(their)
    one = statistics.median(cpu[1]) / n
    one_b = statistics.median(served[1]) / n
    return [
        (
            f"our reader alone, {n:,} records as {k} lists (tasks) vs 1, one after another,"
            f" median of {args.rounds}",
            f"{statistics.median(cpu[k]) / n * 1e6:.3f} CPU us per record"
            f" ({min(cpu[k]):.2f}-{max(cpu[k]):.2f} s)",
            f"1 list: {one * 1e6:.3f} us; {statistics.median(cpu[k]) / n / one:.2f}x; the"
            f" broker's: {statistics.median(served[k]) / n / one_b:.2f}x",
            "<= 1.10x",
        )
        for k in counts
        if k != 1
    ]


def row_tasks(args, broker):
    """CPU per record of N read tasks against one, on a Ray of 1 CPU."""
    import copy

    each = args.records // args.partitions
    cpu = {}
    for tasks, per_task in ((1, None), (args.partitions, each), (4 * args.partitions, each // 4)):
        run_args = copy.copy(args)
        run_args.records_per_task = "None" if per_task is None else per_task
        _, _, cpu[tasks] = ray_run(run_args, broker, "fastkwire", 1)
    one = cpu[1] / args.records
    return reader_tasks(args, broker) + [
        (
            f"fastkwire.ray.read_kafka, {args.records:,} records as {n} read tasks vs 1"
            " (Ray on 1 CPU)",
            f"{cpu[n] / args.records * 1e6:.2f} CPU us per record ({cpu[n]:.2f} CPU s of"
            " Ray's processes)",
            f"1 task: {one * 1e6:.2f} us per record; {cpu[n] / args.records / one:.2f}x",
            "<= 1.10x",
        )
        for n in sorted(cpu)
        if n != 1
    ]


def row_plan(args):
    """The driver's planning for many partitions and tasks (a broker in this process):
    its cost per partition and per task from the small cases, and the largest case
    against what those predict (1.0x when planning is O(partitions + tasks))."""
    import fastkwire.ray
    from log_broker import LogBroker, PartitionLog, synthetic_logs

    log = synthetic_logs("plan", 1, 10_000, 10, per_batch=10_000)[("plan", 0)]
    took = {}
    for partitions, tasks in ((10, 1), (10, 10_000), (1000, 1), (1000, 10_000)):
        broker = LogBroker({("plan", p): PartitionLog([log.data]) for p in range(partitions)})
        try:
            best = float("inf")
            for _ in range(4):  # the best of 4: the first connects and warms up
                t = time.perf_counter()
                source = fastkwire.ray.KafkaDatasource(
                    "plan", bootstrap_servers=broker.bootstrap, tasks=tasks
                )
                source.get_read_tasks(tasks)
                best = min(best, time.perf_counter() - t)
        finally:
            broker.close()
        assert len(source.task_ranges) == tasks
        took[(partitions, tasks)] = best
    per_partition = (took[(1000, 1)] - took[(10, 1)]) / 990
    per_task = (took[(10, 10_000)] - took[(10, 1)]) / 9999
    predicted = took[(1000, 1)] + per_task * 9999
    return [
        (
            "planning (KafkaDatasource and its ReadTasks): 10 or 1,000 partitions of 10,000"
            " records, 1 or 10,000 tasks",
            ", ".join(f"{p}/{t:,}: {s * 1e3:.1f} ms" for (p, t), s in took.items()),
            f"{per_partition * 1e6:.0f} us a partition, {per_task * 1e6:.1f} us a task; "
            f"1,000 x 10,000 took {took[(1000, 10_000)] / predicted:.2f}x what that predicts",
            "O(partitions + tasks): about 1.0x",
        )
    ]


MEMORY_CHILD = """
import os, sys, threading, time
import fastkwire, pyarrow
bootstrap, block = sys.argv[1], int(sys.argv[2])
page = os.sysconf("SC_PAGE_SIZE")
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * page
# Warm up: imports, a connection, the converter's first call.
for b in fastkwire.iter_kafka("bench", bootstrap_servers=bootstrap, end_offset=10, block_size=block):
    pass
before = rss()
peak = [before]
done = threading.Event()
def sample():  # the resident size every millisecond (ru_maxrss keeps the start-up's peak)
    while not done.is_set():
        peak[0] = max(peak[0], rss())
        time.sleep(0.001)
t = threading.Thread(target=sample)
t.start()
rows = 0
for b in fastkwire.iter_kafka("bench", bootstrap_servers=bootstrap, block_size=block):
    rows += b.num_rows
    del b
done.set()
t.join()
print(rows, before, peak[0])
"""


def row_memory(args):
    block = args.block_size
    per_record = 12 + args.value_size + 16
    records = 10 * block // per_record + 1
    broker = Broker(records, 1, args.value_size)
    try:
        out = subprocess.run(
            [sys.executable, "-c", MEMORY_CHILD, broker.bootstrap, str(block)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        rows, before, peak = map(int, out.stdout.split()[-3:])
    finally:
        broker.close()
    grown = peak - before
    return [
        (
            f"iter_kafka peak memory, {records:,} records ({records * per_record / block:.0f}x the block size)",
            f"{grown / block:.2f}x the block size",
            f"{grown / 2**20:.0f} MiB over {block / 2**20:.0f} MiB blocks",
            "<= 3x",
        )
    ]


def row_tansu(args):
    """The real broker's own speed: confluent-kafka producing, read_kafka reading."""
    from broker import running_tansu
    from confluent_kafka import Producer

    import fastkwire

    gen = running_tansu()
    tansu = next(gen)
    try:
        n = args.tansu_records
        p = Producer({"bootstrap.servers": tansu.bootstrap, "linger.ms": 50})
        t = time.perf_counter()
        for i in range(n):
            p.produce("tansu-bench", value=b"v" * args.value_size, partition=i % args.partitions)
            p.poll(0)
        p.flush(120)
        produce = time.perf_counter() - t
        got, wall, cpu = timed(
            lambda: fastkwire.read_kafka("tansu-bench", bootstrap_servers=tansu.bootstrap).num_rows
        )
        assert got == n, got
        theirs = ray_on(tansu.bootstrap, "tansu-bench")
    finally:
        next(gen, None)
    rows = [
        (
            f"Tansu: {n:,} records produced (confluent-kafka), then read_kafka",
            f"read {n / wall:,.0f} records/s wall ({n / cpu:,.0f} per client CPU second)",
            f"produced at {n / produce:,.0f} records/s",
            "the broker bounds it",
        )
    ]
    if isinstance(theirs, Exception):
        rows.append(("ray.data.read_kafka on Tansu", f"failed: {theirs!r}"[:120], "", ""))
    else:
        got_ray, wall_ray, cpu_ray = theirs
        rows.append(
            (
                f"the same topic: ray.data.read_kafka's read tasks (one core); it read {got_ray:,}"
                f" of {n:,} (Tansu's ListOffsets latest stops it a batch short per partition)",
                f"{got_ray / cpu_ray:,.0f} records per CPU second ({wall_ray:.1f} s wall)",
                f"fastkwire: {(got_ray / cpu_ray) and (n / cpu) / (got_ray / cpu_ray):.1f}x the records per CPU second",
                ">= 10x",
            )
        )
    return rows


def ray_on(bootstrap, topic, end_offset="latest"):
    """Ray Data's own KafkaDatasource read tasks, run here one after another."""
    try:
        from ray.data._internal.datasource.kafka_datasource import KafkaDatasource

        source = KafkaDatasource(topic, bootstrap, "earliest", end_offset, timeout_ms=600_000)

        def run():
            return sum(b.num_rows for task in source.get_read_tasks(1) for b in task())

        return timed(run)
    except Exception as exc:  # noqa: BLE001 - reported in the table
        return exc


FIXED_CHILD = """
import sys, tempfile, time
reader, bootstrap, topic = sys.argv[1:4]
import ray
ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False,
         _temp_dir=tempfile.mkdtemp(prefix="fk-ray-"))
import ray.data
ray.data.DataContext.get_current().enable_progress_bars = False
t0 = time.perf_counter()
if reader == "fastkwire":
    import fastkwire.ray
    make = lambda: fastkwire.ray.read_kafka(topic, bootstrap_servers=bootstrap)
else:
    make = lambda: ray.data.read_kafka(topic, bootstrap_servers=bootstrap)
ds = make()
t1 = time.perf_counter()
n = ds.materialize().count()
t2 = time.perf_counter()
n2 = make().materialize().count()
t3 = time.perf_counter()
print("fixed", n, n2, t1 - t0, t2 - t1, t3 - t2, flush=True)
ray.shutdown()
"""


def fixed_run(reader, bootstrap, env):
    """(first Dataset, its materialize, a second Dataset made and materialized) seconds."""
    out = subprocess.run(
        [sys.executable, "-c", FIXED_CHILD, reader, bootstrap, "fixed"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    line = [x for x in out.stdout.splitlines() if x.startswith("fixed ")]
    assert line, out.stderr[-2000:]
    _, n, n2, *times = line[0].split()
    return int(n), int(n2), [float(t) for t in times]


def row_fixed(args):
    import statistics
    import tempfile

    from fastkwire import ProduceRequest, records
    from fastkwire.connection import Connection
    from fastkwire.records import Record
    from fastkwire.testing import Broker as OwnBroker

    cached = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    cached.pop("PYTHONDONTWRITEBYTECODE", None)
    cached["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="fk-pyc-")
    # as this machine runs: our modules compiled in each process, Ray's from site-packages
    uncached = dict(os.environ, PYTHONPATH=cached["PYTHONPATH"], PYTHONDONTWRITEBYTECODE="1")
    uncached.pop("PYTHONPYCACHEPREFIX", None)
    per_partition, per_batch = args.fixed_records // 4, 1000
    with OwnBroker() as broker:
        broker.create_topic("fixed", 4)
        host, port = broker.bootstrap_servers.split(",")[0].rsplit(":", 1)
        with Connection(host, int(port)) as conn:
            for p in range(4):
                for base in range(0, per_partition, per_batch):
                    batch = records.write_batch(
                        [Record(value=b"v" * args.value_size)]
                        * min(per_batch, per_partition - base)
                    )
                    data = ProduceRequest.PartitionProduceData(index=p, records=batch)
                    conn.request(
                        ProduceRequest(
                            acks=1,
                            timeout_ms=10_000,
                            topic_data=[
                                ProduceRequest.TopicProduceData(name="fixed", partition_data=[data])
                            ],
                        )
                    )
        fixed_run("fastkwire", broker.bootstrap_servers, cached)  # compiles the bytecode
        runs = {"fastkwire": [], "ray": [], "fastkwire, no bytecode": []}
        for _ in range(args.fixed_rounds):
            for reader in runs:
                if reader.endswith("no bytecode") and not args.fixed_no_bytecode:
                    continue
                env = uncached if reader.endswith("no bytecode") else cached
                n, n2, times = fixed_run(reader.split(",")[0], broker.bootstrap_servers, env)
                assert n == n2 == args.fixed_records or reader == "ray", (reader, n, n2)
                runs[reader].append(times)

    def spread_of(reader, i):
        xs = [t[i] for t in runs[reader]]
        return f"{statistics.median(xs):.2f} s ({min(xs):.2f}-{max(xs):.2f})"

    rows = []
    for i, what in enumerate(
        [
            "first Dataset (import + make)",
            "its first materialize",
            "a second Dataset, made and read",
        ]
    ):
        ours, theirs = spread_of("fastkwire", i), spread_of("ray", i)
        extra = ""
        if i == 0 and runs["fastkwire, no bytecode"]:
            extra = f"; fastkwire without cached bytecode: {spread_of('fastkwire, no bytecode', 0)}"
        rows.append(
            (
                f"fixed cost per Dataset, {args.fixed_records:,} records, 4 partitions, Ray on 1"
                f" CPU, {args.fixed_rounds} fresh processes each: {what}",
                ours,
                f"ray.data.read_kafka {theirs}{extra}",
                "below Ray's",
            )
        )
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument(
        "--records-per-task",
        type=lambda v: None if v == "None" else int(v),
        default=None,
        help="fastkwire.ray's records_per_task (default None: one task per CPU)",
    )
    ap.add_argument("--block-size", type=int, default=16 << 20)
    ap.add_argument("--rows", nargs="+", default=["floor", "read", "ray", "memory"])
    ap.add_argument("--against-tansu", action="store_true")
    ap.add_argument("--fixed-records", type=int, default=100_000)
    ap.add_argument("--fixed-rounds", type=int, default=3)
    ap.add_argument("--fixed-no-bytecode", action="store_true")
    ap.add_argument("--tansu-records", type=int, default=5000)
    args = ap.parse_args()
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    table = []
    if "floor" in args.rows:
        table += row_floor(args)
    if "plan" in args.rows:
        table += row_plan(args)
    if {"read", "ray", "tasks", "reader_tasks"} & set(args.rows):
        broker = Broker(args.records, args.partitions, args.value_size)
        try:
            if "read" in args.rows:
                table += row_read(args, broker)
            if "ray" in args.rows:
                table += row_ray(args, broker)
            if "tasks" in args.rows:
                table += row_tasks(args, broker)
            elif "reader_tasks" in args.rows:
                table += reader_tasks(args, broker)
        finally:
            broker.close()
    if "memory" in args.rows:
        table += row_memory(args)
    if "fixed" in args.rows:
        table += row_fixed(args)
    if args.against_tansu:
        table += row_tansu(args)
    print("| workload | fastkwire | compared | target |")
    print("|---|---|---|---|")
    for r in table:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
