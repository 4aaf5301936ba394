"""Load: 50 connections at full speed through `fastkwire proxy --json` (a child process, its
lines going to a file), with nothing lost, duplicated or reordered on any connection: both
ends' SHA-256 of each direction must agree, every answer comes in the order asked, and
every exchange has its JSON line. 3 seconds by default; 30 with --run-slow."""

import asyncio
import json
import re
import signal
import subprocess
import sys
import sysconfig
import time

import pytest

from proxy_load import LoadBroker, Templates, compare, run_client, run_load, run_paced_client
from test_proxy_cli import ChildStreams, child_env, listening_address

CONNECTIONS = 50
STOP_TIMEOUT = 60.0
START_TIMEOUT = 20.0


def start_proxy(upstream_port, out, *extra, env=None):
    """The proxy as a child whose stdout is `out` (a file, or a pipe read only at the end),
    with `env` added to its environment; (process, port, its ChildStreams)."""
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
            "--json",
            "--connections",
            *extra,
        ],
        stdout=out,
        stderr=subprocess.PIPE,
        text=True,
        env={**child_env(), **(env or {})},
    )
    streams = ChildStreams(proc, read_stdout=False)
    try:
        _, port = listening_address(streams)
    except AssertionError:
        proc.kill()
        raise
    return proc, port, streams


def lines_not_shown(err):
    """How many lines the proxy said it dropped (its output queue full: the writer thread
    fell behind 50 connections at full speed), from its closing words on stderr."""
    m = re.search(r"(\d+) lines not shown: the output did not keep up", err)
    return int(m.group(1)) if m else 0


def stop_proxy(proc, streams):
    """SIGINT, then the child's exit code and its stderr (bounded waits)."""
    proc.send_signal(signal.SIGINT)
    code, _, err = streams.finish(STOP_TIMEOUT)
    return code, err


def run(seconds, tmp_path):
    log = tmp_path / "proxy.jsonl"

    async def main():
        broker = await LoadBroker(Templates([1024, 65536, 262144])).start()
        with open(log, "w") as out:
            proc, port, streams = start_proxy(broker.port, out)
            try:
                clients = await run_load("127.0.0.1", port, CONNECTIONS, seconds)
            finally:
                code, err = await asyncio.get_running_loop().run_in_executor(
                    None, stop_proxy, proc, streams
                )
        await broker.close()
        return clients, broker.sides, code, err

    clients, sides, code, err = asyncio.run(main())
    assert code == 0, err
    assert len(clients) == CONNECTIONS
    assert not compare(clients, sides)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    exchanges = [d for d in lines if "api" in d]
    events = [d for d in lines if "event" in d]
    assert not [e for e in events if e["event"] == "error"], events
    frames = sum(c.frames for c in clients.values())
    # every request answered, and logged or counted as dropped (display never holds forwarding)
    assert len(exchanges) + lines_not_shown(err) == frames
    assert all(d["response_bytes"] and d["decode_error"] is None for d in exchanges)
    summary = lines[-1]["summary"]
    assert sum(a["count"] for a in summary["apis"]) == frames
    moved = sum(c.sent_bytes + c.got_bytes for c in clients.values())
    print(
        f"\n{CONNECTIONS} connections, {seconds} s: {frames} exchanges, {moved / 1e6:.1f} MB through the proxy"
    )
    return frames


def test_fifty_connections_briefly(tmp_path):
    assert run(3, tmp_path) > CONNECTIONS * 4


@pytest.mark.slow
def test_fifty_connections_for_thirty_seconds(tmp_path):
    assert run(30, tmp_path) > CONNECTIONS * 40


# ---------------------------------------------------------------- one huge answer among many


# The free-threaded build's allocator (mimalloc) keeps freed pages for a while before it
# gives them back, and peak RSS then counts what it kept: 8 MB answers measured 1.4-5x the
# frame on 3.13t on either forwarding path, 0-1.1x with the delay off, 2.0x on 3.11. The
# bound is on what the proxy holds, so the delay is off there.
ALLOCATOR_HOLDS_NOTHING = (
    {"MIMALLOC_PURGE_DELAY": "0"} if sysconfig.get_config_var("Py_GIL_DISABLED") else {}
)


def rss_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


def big_answer_run(answer_bytes, seconds=3.0, connections=CONNECTIONS, flags=()):
    """The proxy (`--json`, its stdout a pipe nobody reads) between `connections` clients at
    full speed and one client that asks ListGroups and gets an answer of `answer_bytes`
    (groups of 4 bytes each: the costliest kind to decode). Returns the measures."""

    async def main():
        templates = Templates([1024, 16384])
        answer_bytes_exact = templates.add_list_groups(answer_bytes)
        broker = await LoadBroker(templates).start()
        proc, port, streams = start_proxy(
            broker.port, subprocess.PIPE, *flags, env=ALLOCATOR_HOLDS_NOTHING
        )
        try:
            # Warm up, then the baseline: the proxy's resident set before the big answer.
            await asyncio.wait_for(  # client ids of their own: the broker keeps a Side per id
                asyncio.gather(
                    *(
                        run_client("127.0.0.1", port, 1000 + i, 0.5, 4, (512,))
                        for i in range(connections)
                    )
                ),
                RUN_TIMEOUT,
            )
            before = rss_kib(proc.pid, "VmHWM")
            results = {}

            async def big():
                await asyncio.sleep(seconds / 3)
                results["asked"] = time.monotonic()
                results["size"] = await ask_list_groups("127.0.0.1", port)
                results["got"] = time.monotonic()

            latencies = [[] for _ in range(connections)]
            timed = [
                run_paced_client("127.0.0.1", port, i, seconds, PACE, stamps)
                for i, stamps in enumerate(latencies)
            ]
            clients = await asyncio.wait_for(asyncio.gather(big(), *timed), seconds + RUN_TIMEOUT)
            peak = rss_kib(proc.pid, "VmHWM")
        finally:
            code, err = await asyncio.get_running_loop().run_in_executor(
                None, stop_proxy, proc, streams
            )
        await broker.close()
        return (
            results,
            latencies,
            clients[1:],
            before,
            peak,
            code,
            err,
            broker.sides,
            answer_bytes_exact,
        )

    results, latencies, clients, before, peak, code, err, sides, exact = asyncio.run(main())
    assert code == 0, err
    assert results["size"] == exact
    assert not compare(dict(clients), sides)
    during = [
        latency
        for stamps in latencies
        for sent, latency in stamps
        if sent <= results["got"] and sent + latency >= results["asked"]
    ]
    others = [latency for stamps in latencies for sent, latency in stamps]
    baseline = sorted(
        latency
        for stamps in latencies
        for sent, latency in stamps
        if sent + latency < results["asked"]
    )
    return {
        "answer_ms": (results["got"] - results["asked"]) * 1000,
        "worst_during_ms": max(during) * 1000,
        "during": len(during),
        "worst_ms": max(others) * 1000,
        "before_p50_ms": baseline[len(baseline) // 2] * 1000,
        "before_worst_ms": baseline[-1] * 1000,
        "p99_ms": sorted(others)[int(len(others) * 0.99)] * 1000,
        "exchanges": len(others),
        "rss_growth_mb": (peak - before) / 1024,
        "err": err,
    }


async def ask_list_groups(host, port, least_seconds=0.05):
    """Asks for the big answer and reads it, taking at least `least_seconds` (so that the
    paced exchanges, 1,000 a second, overlap it however fast the machine is)."""
    from fastkwire import ListGroupsRequest, encode_request

    reader, writer = await asyncio.open_connection(host, port, limit=1 << 20)
    try:
        writer.write(encode_request(ListGroupsRequest(), 4, 0, "big"))
        head = await reader.readexactly(4)
        size = left = int.from_bytes(head, "big")
        started = time.monotonic()
        while left:  # counted, not kept: the client's own copy would skew the measures
            chunk = await reader.read(min(left, 1 << 20))
            if not chunk:
                raise ConnectionError(f"closed with {left} bytes of the answer to come")
            left -= len(chunk)
            ahead = started + least_seconds * (size - left) / size - time.monotonic()
            if ahead > 0:
                await asyncio.sleep(ahead)
        return 4 + size
    finally:
        writer.close()


def check_big_answer(m, answer_bytes, max_delay_ms):
    """No exchange that overlapped the big answer took `max_delay_ms` longer than the
    slowest one before it (the machine's own noise: on a shared 2-core machine a paced
    exchange sometimes takes 50-100 ms with no big answer anywhere), and the proxy's peak
    resident set grew by at most 4x the answer."""
    print(
        f"\n{answer_bytes / 1e6:.0f} MB answer in {m['answer_ms']:.0f} ms; {m['exchanges']} other "
        f"exchanges, {m['during']} during it: worst {m['worst_during_ms']:.1f} ms during, "
        f"worst {m['worst_ms']:.1f} ms, p99 {m['p99_ms']:.1f} ms overall, before it p50 "
        f"{m['before_p50_ms']:.1f} ms, worst {m['before_worst_ms']:.1f} ms; proxy peak RSS "
        f"+{m['rss_growth_mb']:.0f} MB ({m['rss_growth_mb'] * 1024 * 1024 / answer_bytes:.2f}x the frame)"
    )
    assert m["during"] > 0
    assert m["worst_during_ms"] - m["before_worst_ms"] < max_delay_ms, m
    assert m["rss_growth_mb"] * 1024 * 1024 <= 4 * answer_bytes, m


MAX_DELAY_MS = 100.0  # what the long runs hold the proxy to
# The default suite shares its machine with other test workers; its bound still catches
# a display that holds forwarding (seconds before: the answer decoded on the loop, then a
# stdout that filled froze everything).
DEFAULT_SUITE_MAX_DELAY_MS = 500.0
RUN_TIMEOUT = 60.0
PACE = 0.05  # seconds between one connection's requests: 50 connections, 1,000 exchanges/s


def test_a_large_answer_among_fifty_connections_with_stdout_unread():
    """An 8 MB answer (2M groups) while 50 paced connections run, stdout a pipe nobody reads
    (the 30 MB run: --run-slow)."""
    size = 8 * 1024 * 1024
    check_big_answer(big_answer_run(size), size, DEFAULT_SUITE_MAX_DELAY_MS)


@pytest.mark.slow
@pytest.mark.parametrize("record", [False, True], ids=["lines", "and-record"])
def test_a_30_mb_answer_among_fifty_connections_with_stdout_unread(tmp_path, record):
    """The same with a 30 MB answer, and with the exchanges also recorded (--record: the
    frames as hex, written in pieces)."""
    size = 30 * 1000 * 1000
    flags = ("--record", str(tmp_path / "t.jsonl")) if record else ()
    check_big_answer(big_answer_run(size, seconds=6.0, flags=flags), size, MAX_DELAY_MS)
    if record:
        big = [json.loads(line) for line in (tmp_path / "t.jsonl").open() if '"ListGroups"' in line]
        assert len(big) == 1 and len(big[0]["response"]) == 2 * size


def test_fifty_connections_over_three_mapped_brokers(tmp_path):
    """The same load spread over three brokers, each behind its own listener (--map): every
    byte of every connection reaches its own broker and comes back, and every exchange's
    line names that broker."""
    import socket

    log = tmp_path / "proxy.jsonl"

    def free_port():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    async def main():
        brokers = [await LoadBroker(Templates([1024, 65536])).start() for _ in range(3)]
        local = [free_port() for _ in brokers]
        maps = []
        for b, port in zip(brokers, local):
            maps += ["--map", f"127.0.0.1:{b.port}=127.0.0.1:{port}"]
        with open(log, "w") as out:
            proc, _, streams = start_proxy(brokers[0].port, out, *maps)
            try:
                results = await asyncio.gather(
                    *(
                        run_client("127.0.0.1", local[i % 3], i, 3, 4, (512, 16384))
                        for i in range(CONNECTIONS)
                    )
                )
            finally:
                code, err = await asyncio.get_running_loop().run_in_executor(
                    None, stop_proxy, proc, streams
                )
        for b in brokers:
            await b.close()
        return dict(results), brokers, code, err

    clients, brokers, code, err = asyncio.run(main())
    assert code == 0, err
    assert len(clients) == CONNECTIONS
    for client_id in clients:
        own = brokers[int(client_id.split("-")[-1]) % 3]
        assert not compare({client_id: clients[client_id]}, own.sides), client_id
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    exchanges = [d for d in lines if "api" in d]
    assert len(exchanges) + lines_not_shown(err) == sum(c.frames for c in clients.values())
    by_broker = {}
    for d in exchanges:
        by_broker.setdefault(d["broker"], set()).add(d["client_id"])
    expected = {
        f"127.0.0.1:{b.port}": {c for c in clients if int(c.split("-")[-1]) % 3 == n}
        for n, b in enumerate(brokers)
    }
    if lines_not_shown(err):  # a client's every line may be among the dropped ones
        assert set(by_broker) <= set(expected)
        assert all(ids <= expected[broker] for broker, ids in by_broker.items())
    else:
        assert by_broker == expected
