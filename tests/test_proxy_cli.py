"""`fastkwire proxy`, `fastkwire stats` and `fastkwire explain --capture` as a user runs them:
the proxy in a child process between kafka-python and Tansu, stopped with Ctrl-C (SIGINT)."""

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

import fastkwire
from fastkwire.cli import main

from broker import tansu_broker  # noqa: F401

pytestmark = pytest.mark.broker

START_TIMEOUT = 20.0
STOP_TIMEOUT = 10.0


def child_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = (
        os.path.dirname(os.path.dirname(fastkwire.__file__))
        + os.pathsep
        + env.get("PYTHONPATH", "")
    )
    return env


class ChildStreams:
    """A child's stderr (and stdout, unless `read_stdout` is false: then it is read only at
    `finish`) read by threads into lists, so the child never blocks on them and every wait
    has a timeout. `line_with(text)` waits for a stderr line holding `text`; lines before it
    (an interpreter's warning, say) are kept, never taken for it."""

    def __init__(self, proc, read_stdout=True):
        self.proc = proc
        self.err, self.out = [], []
        self._got_line = threading.Condition()
        self._threads = [
            threading.Thread(target=self._drain, args=(proc.stderr, self.err), daemon=True)
        ]
        if read_stdout and proc.stdout is not None:
            self._threads.append(
                threading.Thread(target=self._drain, args=(proc.stdout, self.out), daemon=True)
            )
        for t in self._threads:
            t.start()

    def _drain(self, stream, into):
        for line in stream:
            with self._got_line:
                into.append(line.decode(errors="replace") if isinstance(line, bytes) else line)
                self._got_line.notify_all()

    def line_with(self, text, timeout=START_TIMEOUT):
        deadline = time.monotonic() + timeout
        with self._got_line:
            while True:
                for line in self.err:
                    if text in line:
                        return line
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None and not self._threads[0].is_alive():
                    raise AssertionError(
                        f"no stderr line with {text!r} within {timeout} s: {''.join(self.err)}"
                    )
                self._got_line.wait(min(left, 0.1))

    def finish(self, timeout=STOP_TIMEOUT):
        """Waits for the child to end (killing it after `timeout`): (exit code, stdout, stderr),
        or AssertionError when it had to be killed."""
        if len(self._threads) == 1 and self.proc.stdout is not None:
            t = threading.Thread(target=self._drain, args=(self.proc.stdout, self.out), daemon=True)
            self._threads.append(t)
            t.start()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout)
            raise AssertionError(f"the child did not end within {timeout} s: {''.join(self.err)}")
        finally:
            for t in self._threads:
                t.join(timeout)
        return self.proc.returncode, "".join(self.out), "".join(self.err)


def listening_address(streams):
    """(host, port) from the proxy's "...: listening on HOST:PORT, forwarding to ..." line."""
    line = streams.line_with("listening on ")
    host, _, port = line.split("listening on ", 1)[1].split(",", 1)[0].strip().rpartition(":")
    return host, int(port)


class ProxyProcess:
    """`fastkwire proxy ARGS` on a free port; `.bootstrap` once it listens."""

    def __init__(self, *args, env=None):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fastkwire", "proxy", "--listen", "127.0.0.1:0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**child_env(), **(env or {})},
        )
        self.streams = ChildStreams(self.proc)
        try:
            self.banner = self.streams.line_with("listening on ")
        except AssertionError:
            self.proc.kill()
            raise
        host, port = listening_address(self.streams)
        self.bootstrap = f"{host}:{port}"

    def stop(self, sig=signal.SIGINT):
        self.proc.send_signal(sig)
        try:
            return self.streams.finish(STOP_TIMEOUT)
        except AssertionError as e:
            pytest.fail(f"the proxy did not stop on {sig!r}: {e}")


def produce_and_consume(bootstrap, topic, count=5):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="cli-admin")
    try:
        admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, client_id="cli-producer")
    try:
        for i in range(count):
            producer.send(topic, b"value %d" % i)
        producer.flush(15)
    finally:
        producer.close(15)
    tp = TopicPartition(topic, 0)
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        client_id="cli-consumer",
        group_id=None,
        enable_auto_commit=False,
    )
    values, deadline = [], time.monotonic() + 15
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        while len(values) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                values += [r.value for r in records]
    finally:
        consumer.close()
    assert values == [b"value %d" % i for i in range(count)]


def test_json_lines_record_and_summary(tansu_broker, tmp_path, capsys):
    record, pcap = tmp_path / "capture.jsonl", tmp_path / "capture.pcap"
    with_pcap = importlib.util.find_spec("dpkt") is not None
    proxy = ProxyProcess(
        "--upstream",
        tansu_broker.bootstrap,
        "--json",
        "--rewrite-advertised",
        "--record",
        str(record),
        *(["--pcap", str(pcap)] if with_pcap else []),
    )
    try:
        produce_and_consume(proxy.bootstrap, "cli-json")
    finally:
        code, out, err = proxy.stop()
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    exchanges, summary = [d for d in lines if "api" in d], lines[-1]["summary"]
    apis = {d["api"] for d in exchanges}
    assert {"ApiVersions", "Metadata", "Produce", "Fetch", "CreateTopics"} <= apis
    assert {"cli-admin", "cli-producer", "cli-consumer"} <= {d["client_id"] for d in exchanges}
    for d in exchanges:
        assert d["client"].startswith("127.0.0.1:") and d["request_bytes"] > 0
        assert isinstance(d["correlation_id"], int) and d["version"] >= 0
    produce = next(d for d in exchanges if d["api"] == "Produce")
    assert produce["latency_ms"] > 0 and produce["response_bytes"] > 0 and produce["errors"] == []
    assert any(d["rewritten"] for d in exchanges if d["api"] == "Metadata")
    counted = {a["api"]: a["count"] for a in summary["apis"]}
    assert counted == {api: sum(d["api"] == api for d in exchanges) for api in apis}
    # The capture holds the same exchanges; stats and explain read it back.
    recorded = [json.loads(line) for line in record.read_text().splitlines()]
    assert [(d["conn"], d["correlation_id"]) for d in recorded] == [
        (d["conn"], d["correlation_id"]) for d in exchanges
    ]
    assert all(
        bytes.fromhex(d["request"])[8:12] == d["correlation_id"].to_bytes(4, "big", signed=True)
        for d in recorded
    )
    assert main(["stats", str(record), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert {a["api"]: a["count"] for a in stats["summary"]["apis"]} == counted
    assert main(["explain", "--capture", str(record), "--api", "Produce"]) == 0
    out = capsys.readouterr().out
    assert (
        out.count("=== ") == counted["Produce"]
        and "ProduceRequest" in out
        and "ProduceResponse" in out
    )
    assert main(["explain", "--capture", str(record), "--json", "--api", "Produce"]) == 0
    produced = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(produced) == counted["Produce"]
    assert produced[0]["request_message"]["body"]["topic_data"][0]["name"] == "cli-json"
    assert produced[0]["response_message"]["message"] == "ProduceResponse"
    if with_pcap:  # the pcap of the same run: the same exchanges
        assert main(["stats", str(pcap), "--json", "--port", str(tansu_broker.port)]) == 0
        stats = json.loads(capsys.readouterr().out)
        assert {a["api"]: a["count"] for a in stats["summary"]["apis"]} == counted


def test_text_lines_and_summary_table(tansu_broker):
    proxy = ProxyProcess("--upstream", tansu_broker.bootstrap, "--rewrite-advertised")
    try:
        produce_and_consume(proxy.bootstrap, "cli-text", count=2)
    finally:
        code, out, err = proxy.stop(signal.SIGTERM)
    assert code == 0, err
    lines = out.splitlines()
    produce = [line for line in lines if " Produce v" in line]
    assert produce and all(
        "cli-producer" in line and "B -> " in line and "ms" in line for line in produce
    )
    header = next(i for i, line in enumerate(lines) if line.startswith("API "))
    assert lines[header].split()[:4] == ["API", "COUNT", "REQ", "BYTES"]
    table = {line.split()[0]: line.split() for line in lines[header + 1 : -1]}
    assert int(table["Produce"][1]) == len(produce)
    assert lines[-1].endswith("exchanges")


def test_fault_rules_from_flags_and_a_file(tansu_broker, tmp_path):
    from fastkwire import HeartbeatRequest, MetadataRequest
    from fastkwire.connection import Connection

    rules = tmp_path / "rules.json"
    rules.write_text(
        '{"rules": [{"api": "Heartbeat", "error": "REBALANCE_IN_PROGRESS", "times": 1}]}'
    )
    proxy = ProxyProcess(
        "--upstream",
        tansu_broker.bootstrap,
        "--rules",
        str(rules),
        "--fault",
        "api=Metadata,delay_ms=300",
    )
    try:
        host, port = proxy.bootstrap.rsplit(":", 1)
        with Connection(host, int(port), client_id="cli-faults") as conn:
            beat = HeartbeatRequest(group_id="g", generation_id=1, member_id="m")
            assert conn.request(beat).error_code == 27  # the proxy's answer
            assert conn.request(beat).error_code != 27  # times=1: Tansu's
            started = time.monotonic()
            conn.request(MetadataRequest(topics=[]))
            assert time.monotonic() - started >= 0.3
    finally:
        code, out, err = proxy.stop()
    assert code == 0, err
    heartbeats = [line for line in out.splitlines() if " Heartbeat v" in line]
    assert (
        len(heartbeats) == 2
        and "REBALANCE_IN_PROGRESS" in heartbeats[0]
        and "[fault:" in heartbeats[0]
    )
    assert "[fault:" not in heartbeats[1]
    assert "2 fault rule(s)" in proxy.banner


def test_usage_errors_name_the_flag(tmp_path, capsys):
    def run(*args):
        try:
            code = main(["proxy", *args])
        except SystemExit as e:  # argparse's own errors
            code = e.code
        return code, capsys.readouterr().err

    code, err = run("--upstream", "nowhere:port")
    assert code == 2 and "--upstream" in err and "HOST:PORT" in err
    code, err = run("--upstream", "127.0.0.1:9", "--fault", "api=Heartbeat,error=NO_SUCH_ERROR")
    assert code == 2 and "--fault" in err and "NO_SUCH_ERROR" in err
    rules = tmp_path / "rules.json"
    rules.write_text('{"rules": [{"api": "Fetch", "delay_ms": -1}]}')
    code, err = run("--upstream", "127.0.0.1:9", "--rules", str(rules))
    assert code == 2 and "rule 1" in err and "delay_ms" in err
    code, err = run("--upstream", "127.0.0.1:9", "--listen", "0.0.0.0:0", "--rewrite-advertised")
    assert code == 2 and "--advertise" in err
    code, err = run("--upstream", "127.0.0.1:9", "--api", "NoSuchApi")
    assert code == 2 and "--api" in err and "NoSuchApi" in err
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        code, err = run("--upstream", "127.0.0.1:9", "--listen", f"127.0.0.1:{port}")
    assert code == 3 and f"--listen 127.0.0.1:{port}" in err


def test_a_listener_per_broker_from_the_flags(tmp_path):
    from cluster import NODES, Cluster

    from test_proxy_cluster import _free_range

    cluster = Cluster()
    first, last = NODES[0], NODES[-1]
    ports = _free_range(3)
    start = int(ports.split("-")[0])
    fixed = socket.socket()
    fixed.bind(("127.0.0.1", 0))
    fixed_port = fixed.getsockname()[1]
    fixed.close()
    record = tmp_path / "cluster.jsonl"
    proxy = ProxyProcess(
        "--upstream",
        cluster.bootstrap,
        "--broker-ports",
        ports,
        "--map",
        f"127.0.0.1:{cluster.ports[last]}=127.0.0.1:{fixed_port}",
        "--record",
        str(record),
        "--connections",
    )
    try:
        assert f"a listener per broker (127.0.0.1:{cluster.ports[last]} fixed; ports {ports})" in (
            proxy.banner
        )
        produce_and_consume(proxy.bootstrap, "cli-cluster", count=2)
        leader_of_cli_cluster = cluster.leader_of("cli-cluster", 0)
    finally:
        code, out, err = proxy.stop(signal.SIGTERM)
        cluster.close()
    assert code == 0, err
    assert f"broker 127.0.0.1:{cluster.ports[last]} mapped to 127.0.0.1:{fixed_port}" in err
    assert f"broker 127.0.0.1:{cluster.ports[first]} mapped to 127.0.0.1:{start}" in err
    produce = [line for line in out.splitlines() if " Produce v" in line]
    leader = cluster.ports[leader_of_cli_cluster]
    assert produce and all(f"-> 127.0.0.1:{leader}" in line for line in produce)
    brokers = {json.loads(line).get("broker") for line in record.read_text().splitlines()}
    assert {f"127.0.0.1:{cluster.ports[n]}" for n in NODES} & brokers


def test_mapping_flags_refuse_what_does_not_fit(capsys):
    def run(*args):
        try:
            code = main(["proxy", *args])
        except SystemExit as e:
            code = e.code
        return code, capsys.readouterr().err

    code, err = run("--upstream", "127.0.0.1:9", "--broker-ports", "9-5")
    assert code == 2 and "--broker-ports: '9-5' is not two ports" in err
    code, err = run("--upstream", "127.0.0.1:9", "--map", "127.0.0.1:9")
    assert code == 2 and "--map" in err and "BROKER-HOST:PORT=LOCAL-HOST:PORT" in err
    code, err = run(
        "--upstream", "127.0.0.1:9", "--broker-ports", "30000-30001", "--rewrite-advertised"
    )
    assert code == 2 and "--rewrite-advertised: one address for every broker" in err
    code, err = run("--upstream", "127.0.0.1:9", "--tls-cert", "x.pem")
    assert code == 2 and "--tls-cert and --tls-key go together" in err


def test_an_upstream_that_is_the_proxys_own_address_is_a_usage_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "fastkwire", "proxy", "--listen", address, "--upstream", address],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    try:
        _, err = proc.communicate(timeout=START_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("the proxy started, forwarding to itself")
    assert proc.returncode == 2, err
    assert err == (
        f"fastkwire proxy: error: --upstream: {address} is the proxy's own listening address "
        f"{address}: it would forward to itself\n"
    )


def test_compiled_forwarding_preferred_with_flags_it_cannot_carry_says_python_runs():
    """FASTKWIRE_PROXY_FORWARD=compiled (a preference; --forward compiled is refused) with
    --broker-ports and a fault rule: the asyncio path carries the connections (the compiled
    one cannot rewrite addresses or apply rules), and the banner says so, naming the flags,
    instead of running it silently."""
    from fastkwire.proxy._compiled import compiled_forwarder

    if compiled_forwarder()[0] is None:
        pytest.skip(f"no compiled forwarder: {compiled_forwarder()[1]}")
    proxy = ProxyProcess(
        "--upstream",
        "127.0.0.1:9",
        "--broker-ports",
        "40000-40010",
        "--fault",
        "api=Heartbeat,error=27",
        env={"FASTKWIRE_PROXY_FORWARD": "compiled"},
    )
    try:
        assert "compiled forwarding" not in proxy.banner
        assert (
            ", Python forwarding (FASTKWIRE_PROXY_FORWARD=compiled cannot carry --fault, "
            "--broker-ports)" in proxy.banner
        ), proxy.banner
    finally:
        proxy.stop()
