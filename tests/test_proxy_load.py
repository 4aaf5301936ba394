"""Load: 50 connections at full speed through `fastkwire proxy --json` (a child process, its
lines going to a file), with nothing lost, duplicated or reordered on any connection: both
ends' SHA-256 of each direction must agree, every answer comes in the order asked, and
every exchange has its JSON line. 3 seconds by default; 30 with --run-slow."""

import asyncio
import json
import signal
import subprocess
import sys

import pytest

from proxy_load import LoadBroker, Templates, compare, run_load
from test_proxy_cli import child_env

CONNECTIONS = 50
STOP_TIMEOUT = 20.0


def start_proxy(upstream_port, out):
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
        ],
        stdout=out,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    line = proc.stderr.readline()
    assert "listening on" in line, line + proc.stderr.read()
    return proc, int(line.split("listening on ", 1)[1].split(",", 1)[0].rsplit(":", 1)[1])


def run(seconds, tmp_path):
    log = tmp_path / "proxy.jsonl"

    async def main():
        broker = await LoadBroker(Templates([1024, 65536, 262144])).start()
        with open(log, "w") as out:
            proc, port = start_proxy(broker.port, out)
            try:
                clients = await run_load("127.0.0.1", port, CONNECTIONS, seconds)
            finally:
                proc.send_signal(signal.SIGINT)
                err = await asyncio.get_running_loop().run_in_executor(
                    None, lambda: proc.communicate(timeout=STOP_TIMEOUT)[1]
                )
        await broker.close()
        return clients, broker.sides, proc.returncode, err

    clients, sides, code, err = asyncio.run(main())
    assert code == 0, err
    assert len(clients) == CONNECTIONS
    assert not compare(clients, sides)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    exchanges = [d for d in lines if "api" in d]
    events = [d for d in lines if "event" in d]
    assert not [e for e in events if e["event"] == "error"], events
    frames = sum(c.frames for c in clients.values())
    assert len(exchanges) == frames  # every request answered and logged
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
