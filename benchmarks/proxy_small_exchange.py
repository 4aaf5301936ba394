"""The proxy's CPU per small exchange: sequential 512-byte Produce requests (small answers)
over one connection through `fastkwire proxy --quiet --record FILE`, the proxy process's
CPU time divided by the exchanges; with `--profile`, py-spy samples the proxy meanwhile and
prints the functions it spent its time in (self time, and time inside, as shares of the
samples).

    python benchmarks/proxy_small_exchange.py [--requests 20000] [--profile] [--floor]

`--floor`: the same exchanges through the least an asyncio proxy can do instead (a bare
protocol per side that writes what it reads to the other side: no framing, no pairing, no
capture), run in the same way: what the event loop and the system calls cost by themselves.
`--loop asyncio|uvloop|auto` (default auto) picks the event loop of both, as the proxy's
`--loop` does; `--forward compiled|python|auto` (default auto: compiled, on Linux with the
compiled core) the proxy's forwarding path, as its `--forward` does.

Not a pytest-benchmark file: a number and a table for docs/proxy.md.
"""

import argparse
import asyncio
import collections
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from proxy_cost import cpu_seconds, start_proxy, stop  # noqa: E402
from fastkwire.proxy._compiled import FORWARDS  # noqa: E402
from fastkwire.proxy._loop import LOOPS, run  # noqa: E402
from proxy_load import LoadBroker, Templates, run_client  # noqa: E402


THREADS = ("event loop", "output", "capture", "inspector")  # the proxy's threads, in start order


def thread_seconds(pid):
    """{thread id: seconds on a CPU} of a process's threads (Linux schedstat: nanoseconds)."""
    got = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            got[int(task.name)] = int((task / "schedstat").read_text().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            pass
    return got


async def drive(port, requests):
    done = 0
    while done < requests:
        got = []
        await run_client("127.0.0.1", port, 1, 0.5, 1, (512,), got)  # index 1: Produce
        done += len(got)
    return done


def profile_table(raw, top=18):
    """(function, self share, inclusive share) from py-spy's collapsed stacks (with
    --threads: each stack starts with its thread), and the samples of each thread."""
    own, inside, total = collections.Counter(), collections.Counter(), 0
    threads = collections.Counter()
    for line in Path(raw).read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        thread, *stack = stack.split(";")
        threads[thread] += n
        if not stack:
            continue
        frames = [f.split(" (")[0] + " " + f.split("/")[-1].rstrip(")") for f in stack]
        total += n
        own[frames[-1]] += n
        for f in set(frames):
            inside[f] += n
    rows = sorted(own, key=own.get, reverse=True)[:top]
    return [(f, own[f] / total, inside[f] / total) for f in rows], total, threads


class _Pipe(asyncio.Protocol):
    """--floor's forwarder: one side of a connection, writing what it reads to the other."""

    def __init__(self, upstream_port=None, peer=None):
        self.upstream_port, self.peer, self.transport = upstream_port, peer, None
        self.early = []  # what a client sent before its upstream was connected

    def connection_made(self, transport):
        self.transport = transport
        if self.peer is None:  # a client: reads wait until the upstream is connected
            transport.pause_reading()  # (uvloop still reads once: kept in `early`)
            asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self):
        loop = asyncio.get_running_loop()
        _, self.peer = await loop.create_connection(
            lambda: _Pipe(peer=self), "127.0.0.1", self.upstream_port
        )
        self.peer.transport.writelines(self.early)
        self.transport.resume_reading()

    def data_received(self, data):
        if self.peer is None:
            self.early.append(data)
        else:
            self.peer.transport.write(data)

    def connection_lost(self, exc):
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()


async def forward(upstream_port):
    server = await asyncio.get_running_loop().create_server(
        lambda: _Pipe(upstream_port), "127.0.0.1", 0
    )
    port = server.sockets[0].getsockname()[1]
    print(f"listening on 127.0.0.1:{port}, forwarding", file=sys.stderr, flush=True)
    await server.serve_forever()


def start_floor(upstream_port, loop):
    proc = subprocess.Popen(
        [sys.executable, __file__, "--pipe", str(upstream_port), "--loop", loop],
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stderr.readline()
    return proc, int(line.split("listening on ", 1)[1].split(",", 1)[0].rsplit(":", 1)[1])


async def main(args):
    broker = await LoadBroker(Templates([256])).start()
    with tempfile.TemporaryDirectory() as tmp:
        if args.floor:
            proc, port = start_floor(broker.port, args.loop)
        else:
            with open(os.devnull, "w") as out:
                proc, port = start_proxy(
                    broker.port,
                    out,
                    "--quiet",
                    "--record",
                    f"{tmp}/r.jsonl",
                    "--loop",
                    args.loop,
                    "--forward",
                    args.forward,
                )
        await drive(port, 200)  # warm: the first exchanges load the schemas
        spy = None
        if args.profile:
            raw = f"{tmp}/profile.txt"
            spy = subprocess.Popen(
                [
                    "py-spy",
                    "record",
                    "-r",
                    "500",
                    "--gil",
                    "--threads",
                    "-f",
                    "raw",
                    "-o",
                    raw,
                    "-p",
                    str(proc.pid),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            await asyncio.sleep(1.0)  # py-spy attached
        cpu, started = cpu_seconds(proc.pid), time.monotonic()
        by_thread = thread_seconds(proc.pid)
        n = await drive(port, args.requests)
        used, took = cpu_seconds(proc.pid) - cpu, time.monotonic() - started
        after = thread_seconds(proc.pid)
        # the proxy's threads start in this order; libuv's resolver pool, under uvloop,
        # starts between the capture writer's and the inspector's (counted as "others")
        tids = sorted(after)
        named = dict(zip(tids[:3], THREADS[:3])) | ({tids[-1]: THREADS[3]} if len(tids) > 3 else {})
        threads = collections.Counter()
        for tid in tids:
            threads[named.get(tid, "others")] += (after[tid] - by_thread.get(tid, 0)) / n * 1e6
        threads = [(name, threads[name]) for name in (*THREADS, "others") if name in threads]
        if spy is not None:
            spy.send_signal(2)
            spy.wait(60)
        stop(proc)
        print(
            f"{n} sequential exchanges{' (floor: a bare forwarder)' if args.floor else ''}, "
            f"loop {args.loop}{'' if args.floor else ', forward ' + args.forward}: "
            f"proxy CPU {used / n * 1e6:.1f} µs per exchange, "
            f"{n / took:.0f} exchanges/s, {took / n * 1e6:.0f} µs per round trip; by thread: "
            + ", ".join(f"{name} {us:.1f} µs" for name, us in threads)
        )
        if spy is not None:
            rows, samples, threads = profile_table(raw)
            print(
                f"\n{samples} samples: " + ", ".join(f"{t} {n}" for t, n in threads.most_common())
            )
            print("\n| function | self | inside |\n|---|---:|---:|")
            for f, s, i in rows:
                print(f"| `{f}` | {s:.1%} | {i:.1%} |")
    await broker.close()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=20000)
    p.add_argument("--profile", action="store_true")
    p.add_argument("--floor", action="store_true", help="a bare forwarder instead of the proxy")
    p.add_argument("--loop", choices=LOOPS, default="auto", help="the event loop (default auto)")
    p.add_argument("--forward", choices=FORWARDS, default="auto", help="the forwarding path")
    p.add_argument("--pipe", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.pipe:
        try:
            run(forward(args.pipe), args.loop)
        except KeyboardInterrupt:
            pass
    else:
        asyncio.run(main(args))
